//! [`Conn`]: one TCP connection as its shard keeps it, and what it holds
//! only while something is pending ([`Extra`]: partial input, a fragmented
//! message, output the kernel has not taken).
//!
//! The lean connection: an idle connection is a [`Conn`] in the shard's slab
//! (socket, kind, last-activity second, its joins) and nothing else. Reads
//! go into the shard's one read buffer; a connection keeps bytes only while
//! a frame or request is incomplete, and an output queue only while the
//! kernel refuses bytes; both live in one [`Extra`] box that is freed when
//! empty. There is no timer per connection: the shard's sweep once a second
//! closes idle ones.

use mio::net::TcpStream;
use throng_protocol::Wire;

use super::socket::SocketState;
pub(crate) use crate::engine::pending::{Chunk, Extra};

/// What a connection is doing: its lifecycle is handshake ([`Kind::Http`]),
/// open ([`Kind::Ws`]), closing ([`Kind::Closing`]), closed (removed from
/// the slab); every cause enters `Conns::close` (`crate::engine::close`'s table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Handshake: reading HTTP requests (pages, long-poll, an upgrade).
    Http,
    /// Open: upgraded, a socket speaking `wire` (its protocol's), or the
    /// echo endpoint. `deflate`: permessage-deflate's negotiated server
    /// window bits (9 to 15; 8 means messages go plain), 0 without it; one
    /// byte in the enum's padding, so a socket with deflate costs nothing
    /// more; `mark` another ([`Mark`]).
    Ws { wire: Wire, deflate: u8, mark: Mark },
    /// Closing while output flushes: our last bytes are queued or sent;
    /// waiting to shut down and for the peer's FIN. `answered`: the peer's
    /// close frame came (before ours or after it): the closing handshake is
    /// complete, and the connection is closed as soon as it is shut down,
    /// without waiting for a FIN (RFC 6455 7.1.1: the server closes the
    /// TCP connection first; a browser waits for it, holding a drain's
    /// exit for its 3 s linger).
    Closing { shut: bool, answered: bool },
}

/// What else an open socket is, in one byte of [`Kind::Ws`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mark {
    /// A protocol's socket, heard from since its last idle sweep.
    None,
    /// The echo endpoint (`--echo`): what it sends comes back.
    Echo,
    /// Its protocol asked whether it is still there (a Pusher
    /// `pusher:ping` after its activity timeout); any byte it sends
    /// clears it (`shard/input.rs`).
    Pinged,
}

/// A connection. Kept small: this is what an idle socket costs in user space.
pub(crate) struct Conn {
    pub sock: TcpStream,
    pub kind: Kind,
    /// Seconds since the shard started, at the last byte received.
    pub last_active: u32,
    /// The control budget (heartbeats, joins, leaves, control frames, tiny
    /// fragments; `--control-rate`): as `SocketState::push_tat`, in the
    /// room the struct's alignment left, so an idle socket costs no more.
    pub control_tat: u32,
    /// Marked for closing at the end of this loop turn.
    pub dead: bool,
    pub extra: Option<Box<Extra>>,
    /// The socket it carries once upgraded (`socket.rs`): subscriptions,
    /// connect info, push budget.
    pub socket: SocketState,
}

impl Conn {
    /// Takes the socket's state out, if this is one (its protocol then ends
    /// it: `Protocol::closed`).
    pub fn take_socket(&mut self) -> Option<(Wire, SocketState)> {
        let Kind::Ws { wire, .. } = self.kind else {
            return None;
        };
        Some((wire, std::mem::take(&mut self.socket)))
    }

    pub fn new(sock: TcpStream, now: u32) -> Conn {
        Conn {
            sock,
            kind: Kind::Http,
            last_active: now,
            control_tat: 0,
            dead: false,
            extra: None,
            socket: SocketState::new(),
        }
    }

    pub fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Default::default)
    }

    /// Adds write interest (once) so the loop resumes queued output when
    /// the socket drains.
    pub fn watch_writable(&mut self, poll: &mio::Registry, key: usize) {
        let extra = self.extra();
        if !extra.want_write {
            extra.want_write = true;
            let _ = poll.reregister(
                &mut self.sock,
                mio::Token(key),
                mio::Interest::READABLE | mio::Interest::WRITABLE,
            );
        }
    }

    /// Frees the [`Extra`] box once nothing is pending.
    pub fn trim(&mut self) {
        if self
            .extra
            .as_ref()
            .is_some_and(|e| e.is_empty() && !e.want_write)
        {
            self.extra = None;
        }
    }

    pub fn queued(&self) -> bool {
        self.extra.as_ref().is_some_and(|e| !e.out.is_empty())
    }
}

/// What an idle connection costs in user space (tests keep it honest).
pub(crate) const CONN_SIZE: usize = std::mem::size_of::<Conn>();

// Checked at compile time: socket, kind, last activity, control budget,
// the optional box, and the Phoenix socket's state (the joins, the first
// of them inline: 40 bytes where a vector was 24 plus a 48-byte heap chunk
// for the one join most sockets have; optional connect info, user, push
// budget). Not with debug assertions (dev builds, the fuzzer's), where mio
// keeps a selector id in each socket: 12 bytes more. A join is its slot
// (8 bytes), its join_ref (16, `None` in the same 16) and its assigns (a
// thin pointer: 8).
#[cfg(not(debug_assertions))]
const _: () = assert!(CONN_SIZE <= 80, "Conn grew past 80 bytes");
