//! One client connection's state: a few dozen bytes in the engine's slab,
//! kept small on purpose (the test below holds it to 80 bytes); what it
//! keeps of a message still arriving ([`Rx`], only while it is) is in
//! `large`, beside the long messages it mostly holds.

use mio::net::TcpStream;
use throng_protocol::Vsn;

pub(super) use super::large::Rx;

/// Where a connection is in its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum State {
    /// Executing ops (never observed between turns).
    Running,
    /// TCP connect in progress.
    Connecting,
    /// Upgrade request sent, waiting for 101.
    Handshaking,
    /// Over Pusher: upgraded, waiting for `pusher:connection_established`.
    Establishing,
    /// In a think time, until `deadline_ms`.
    Sleeping,
    /// Waiting for the reply to `await_ref`, until `deadline_ms`.
    Awaiting,
    /// Parked at the barrier until the controller releases it.
    Barrier,
    /// Holding until the disconnect storm.
    Hold,
    /// A floor socket (see [`crate::floor`]): TCP connect in progress.
    FloorConnecting,
    /// A floor socket, open: frames from a floor writer are timed.
    Floor,
}

impl State {
    /// A floor socket's state: not a user's session.
    pub(super) fn is_floor(self) -> bool {
        matches!(self, State::FloorConnecting | State::Floor)
    }
}

/// Flag: the connection speaks the v2 serializer.
pub(super) const F_V2: u8 = 1;
/// Flag: the tracked ref is a join's.
pub(super) const F_AWAIT_JOIN: u8 = 2;
/// Flag: the tracked join is of a topic with presence (its time is
/// recorded for join visibility, see [`crate::presence`]).
pub(super) const F_PRESENCE_JOIN: u8 = 4;
// Flag 8, `F_COUNT_SEEN`, is presence's: see `super::presence`.

/// One client connection. Kept small on purpose (see `conn_size` in the
/// tests): ~72 bytes in the slab, plus the kernel's socket.
// `Option<Box<Vec<u8>>>` is one pointer (8 bytes) where `Option<Vec<u8>>` is
// three: the buffers are almost always `None`, so the box pays for itself.
#[allow(clippy::box_collection)]
pub(super) struct Conn {
    /// `None` until the session's connect op.
    pub(super) sock: Option<TcpStream>,
    /// The user's unique id (global index + 1), Tsung's `get_unique_id`.
    pub(super) user: u32,
    /// Connect start, or the tracked message's send time (µs since epoch).
    pub(super) mark_us: u64,
    /// The one pending deadline (think, connect or reply timeout), ms since epoch.
    pub(super) deadline_ms: u32,
    /// When the next heartbeat is due, ms since epoch (0 = none).
    pub(super) hb_ms: u32,
    /// The last ref this connection used.
    pub(super) next_ref: u32,
    /// The ref whose reply is being timed (0 = none).
    pub(super) await_ref: u32,
    /// The ref of the last join (v2 pushes carry it).
    pub(super) join_ref: u32,
    /// The last `presence_count` received (count-mode join visibility;
    /// fits in what was padding).
    pub(super) last_count: u32,
    /// Loop counters for up to two nested loops.
    pub(super) loops: [u32; 2],
    /// The next op of the role's program.
    pub(super) pc: u16,
    pub(super) state: State,
    pub(super) role: u8,
    pub(super) flags: u8,
    /// A message, frame or handshake response not yet whole.
    pub(super) rx: Option<Box<Rx>>,
    /// Bytes the socket would not take yet.
    pub(super) tx: Option<Box<Vec<u8>>>,
}

impl Conn {
    /// A connection of user `user` in `state`, every counter at zero.
    pub(super) fn new(
        sock: Option<TcpStream>,
        user: u32,
        state: State,
        role: u8,
        v2: bool,
    ) -> Conn {
        Conn {
            sock,
            user,
            mark_us: 0,
            deadline_ms: 0,
            hb_ms: 0,
            next_ref: 0,
            await_ref: 0,
            join_ref: 0,
            last_count: 0,
            loops: [0; 2],
            pc: 0,
            state,
            role,
            flags: if v2 { F_V2 } else { 0 },
            rx: None,
            tx: None,
        }
    }

    /// The serializer the connection negotiated.
    pub(super) fn vsn(&self) -> Vsn {
        if self.flags & F_V2 != 0 {
            Vsn::V2
        } else {
            Vsn::V1
        }
    }
}

/// The size of one connection's state, for reports.
pub const CONN_SIZE: usize = std::mem::size_of::<Conn>();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_is_small() {
        eprintln!("size_of::<Conn>() = {CONN_SIZE} bytes");
        const { assert!(CONN_SIZE <= 72, "Conn grew past 72 bytes") };
    }
}
