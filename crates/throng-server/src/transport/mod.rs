//! The transport: one event loop per shard, each a thread with its own epoll
//! instance, its own `SO_REUSEPORT` listener, the connections it accepted
//! and their subscriptions. Nothing here is shared with other shards except
//! through [`Node`] (read-only config, atomics, and a channel per shard for
//! broadcasts and infos).
//!
//! - this file: the map below, and re-exports;
//! - `shard.rs`: [`Shard`], the loop, accepting, the inbox;
//! - `conns.rs`: [`Conns`], a shard's connections and what their handling
//!   writes (each file below adds one concept's `impl Conns`);
//! - `sweep.rs`: the once-a-second sweep (idle timeouts, head deadlines,
//!   lingering closes) that replaces a timer per connection;
//! - `input.rs`: reading, and routing bytes to HTTP or WebSocket handling,
//!   a bounded turn per connection (reads and messages; one with more to do
//!   waits on the shard's ready list for the next turn, so a client that
//!   sends faster than the shard answers never holds it), and the control
//!   budget of frames;
//! - [`conn`]: the connection and what it holds only while busy;
//! - `output.rs`: writing, the bounded output queue, broadcast delivery;
//! - `deflate.rs`: permessage-deflate on the shard (inflating within the
//!   message bound, compressing one connection's messages);
//! - `closing.rs`: the one way a connection ends ([`Conns::close`] with a
//!   reason from `crate::close`'s table), the half-close, removing connections;
//! - `admission.rs`: connection caps at accept, the HTTP head deadline;
//! - `budget.rs`: the process's outbound memory budget;
//! - `drain.rs`: the graceful drain (stop accepting, 1012 in batches, end);
//! - `phoenix.rs`: a WebSocket message through the Phoenix socket
//!   (`crate::socket`), and the socket's [`Transport`](crate::socket::Transport)
//!   on this shard;
//! - `longpoll.rs`: the long-poll transport's requests and sessions
//!   (`crate::longpoll`), which run the same Phoenix socket;
//! - `outlet.rs`: the Phoenix socket as one entity, whatever carries it
//!   (an [`Outlet`](outlet::Outlet): a WebSocket connection or a long-poll
//!   session), and the state every socket holds the same way;
//! - `hooks.rs`: the app backend's hooks and lifecycle events on a shard;
//! - `users.rs`: a shard's authenticated users and their sockets;
//! - `history.rs`: joins with `since` whose history read (Redis) answers
//!   later;
//! - `tls.rs`: TLS sessions below all of it, with `--tls-cert`.
//!
//! Invariant: a connection is only removed from the slab between events
//! (by [`Conns::close`] for a reason whose output is not flushed, called
//! from the event dispatch or the sweep), never
//! while its input is being processed; deliveries that must end a
//! connection mark it `dead` and queue it in `doomed`.

mod budget;
pub(crate) mod conn;
mod conns;
pub(crate) mod outlet;
mod shard;
mod tls;
pub(crate) mod users;

use mio::Token;

pub(crate) use budget::outbound_memory;
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
