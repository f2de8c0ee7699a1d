//! The transport: one event loop per shard, each a thread with its own epoll
//! instance, its own `SO_REUSEPORT` listener, the connections it accepted
//! and their subscriptions. Nothing here is shared with other shards except
//! through [`Node`] (read-only config, atomics, and a channel per shard for
//! broadcasts and infos).
//!
//! Each type's `impl` is next to the type. The two types whose behaviour
//! spans many concepts are directories: the type and its fields in
//! `mod.rs`, then one file per concept, each an `impl` block of that type
//! (and the small types only that concept uses). So everything [`Conns`]
//! does is under `conns/`, everything [`Shard`] does under `shard/`.
//!
//! - this file: the map below, re-exports, the shard's constants;
//! - `shard/`: [`Shard`], a shard's event loop and its steps:
//!   - `shard/mod.rs`: the struct, the loop, accepting, the inbox, presence
//!     flushes, long-poll's end of turn;
//!   - `shard/input.rs`: reading, and routing bytes to HTTP or WebSocket
//!     handling, a bounded turn per connection (reads and messages; one
//!     with more to do waits on the shard's ready list for the next turn,
//!     so a client that sends faster than the shard answers never holds
//!     it), and the control budget of frames;
//!   - `shard/inflate.rs`: permessage-deflate's inflating side (a
//!     compressed message inflated within the message bound);
//!   - `shard/sweep.rs`: the once-a-second sweep (idle timeouts, head
//!     deadlines, lingering closes) that replaces a timer per connection;
//!   - `shard/drain.rs`: the graceful drain (stop accepting, 1012 in
//!     batches, end);
//! - `conns/`: [`Conns`], a shard's connections and sockets and everything
//!   their handling writes (its own map is in `conns/mod.rs`): output and
//!   broadcast delivery, the one close path, admission, the Phoenix socket
//!   and the outlet dispatch, long-poll sessions, the app backend's hooks,
//!   history reads, compression;
//! - [`conn`]: [`Conn`](conn::Conn), the connection, and what it holds only
//!   while busy ([`Extra`](conn::Extra), its output [`Chunk`](conn::Chunk)s);
//! - [`outlet`]: the Phoenix socket as one entity, whatever carries it (an
//!   [`Outlet`](outlet::Outlet): a WebSocket connection or a long-poll
//!   session), and the state every socket holds the same way
//!   ([`SocketState`](outlet::SocketState));
//! - [`users`]: a shard's authenticated users and their sockets;
//! - `tls.rs`: TLS sessions below all of it, with `--tls-cert`;
//! - `write.rs`: the one nonblocking socket write, under plain and TLS output.
//!
//! Invariant: a connection is only removed from the slab between events
//! (by [`Conns::close`] for a reason whose output is not flushed, called
//! from the event dispatch or the sweep), never
//! while its input is being processed; deliveries that must end a
//! connection mark it `dead` and queue it in `doomed`.

pub(crate) mod budget;
pub(crate) mod close;
pub(crate) mod conn;
pub(crate) mod conns;
pub(crate) mod http;
pub(crate) mod outlet;
pub(crate) mod pending;
mod shard;
pub(crate) mod users;
pub(crate) mod write;
pub(crate) mod ws;

use mio::Token;

pub(crate) use conn::CONN_SIZE;
pub(crate) use conns::Conns;
pub(crate) use outlet::authenticated;
pub(crate) use shard::Shard;

pub(crate) const LISTENER: Token = Token(usize::MAX - 1);
pub(crate) const WAKER: Token = Token(usize::MAX - 2);

const READ_BUF: usize = 64 * 1024;
const ACCEPTS_PER_TURN: usize = 1024;
/// Seconds a closing connection may linger for the peer's FIN.
const CLOSE_LINGER: u32 = 3;
