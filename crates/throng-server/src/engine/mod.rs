//! The engine: one event loop per shard, each a thread with its own epoll
//! instance, its own `SO_REUSEPORT` listener, the connections it accepted
//! and their subscriptions, serving whatever wire protocols it is built
//! with ([`Protocol`]). It knows connections, HTTP heads, WebSocket frames,
//! topics and broadcasts already encoded per wire; it knows no protocol.
//! Nothing here is shared with other shards except through [`Node`]
//! (read-only config, atomics, and a channel per shard for broadcasts and
//! the protocols' messages).
//!
//! - [`protocol`]: [`Protocol`], what the engine asks of a wire protocol
//!   (route an HTTP request, open a socket, a message in, a socket ended,
//!   its sessions' work, its inbox messages), and the [`Cx`] it lends it;
//! - `shard/`: [`Shard`], a shard's event loop and its steps:
//!   - `shard/mod.rs`: the struct, the loop, accepting, the inbox, presence
//!     flushes, settling what an event left (closes, ended sockets,
//!     sessions' work);
//!   - `shard/input.rs`: reading, and routing bytes to HTTP or WebSocket
//!     handling, a bounded turn per connection (reads and messages; one
//!     with more to do waits on the shard's ready list for the next turn,
//!     so a client that sends faster than the shard answers never holds
//!     it), and the control budget of frames;
//!   - `shard/inflate.rs`: permessage-deflate's inflating side;
//!   - `shard/sweep.rs`: the once-a-second sweep (idle timeouts, head
//!     deadlines, lingering closes) that replaces a timer per connection;
//!   - `shard/drain.rs`: the graceful drain (stop accepting, 1012 in
//!     batches, end);
//! - `conns/`: [`Conns`], a shard's connections, their registry of
//!   subscriptions and everything their output writes, which is the port
//!   the protocols answer through (below);
//! - [`conn`]: [`Conn`](conn::Conn), the connection, and what it holds only
//!   while busy ([`pending`]: its partial input, fragments, output chunks);
//! - [`socket`]: what every socket holds the same way (subscriptions,
//!   connect info, push budget); [`outlet`]: what carries a socket (a
//!   connection, or a session its protocol holds) and what the engine hands
//!   back to a protocol after an event; [`users`]: a shard's authenticated
//!   users and their sockets;
//! - [`http`]: what a request asks for (the engine's pages, or a protocol's
//!   route), without I/O; [`ws`]: WebSocket messages from frames; [`close`]:
//!   the one table of close reasons. Below it: `crate::budget` (the
//!   outbound memory budget), `crate::write` (the one nonblocking socket
//!   write, under plain and TLS output) and `crate::tls` (the sessions).
//!
//! ## The port a protocol answers through
//! A protocol is lent [`Conns`] and calls, for its sockets:
//! [`Conns::subscribe`] and [`Conns::unsubscribe`] (the registry, the
//! node's topics, the backplane's subscriptions), [`Conns::frame_out`] and
//! [`Conns::flush_reply`] (a message to the socket whose event this is),
//! [`Conns::send`] (bytes to any connection), [`Conns::publish`] (a
//! broadcast to every subscriber, here, on the node's other shards and on
//! the other nodes), [`Conns::close`] and [`Conns::doom`] (the one close
//! path), and [`Conns::open_websocket`] once it accepts an upgrade.
//!
//! Invariant: a connection is only removed from the slab between events
//! (by [`Conns::close`] for a reason whose output is not flushed, called
//! from the event dispatch or the sweep), never while its input is being
//! processed; deliveries that must end a connection mark it `dead` and
//! queue it in `doomed`. Its socket's end is the protocol's, once the
//! event is over ([`Protocol::closed`]) and before the loop accepts again,
//! so no new connection can take its key first.

pub(crate) mod close;
pub(crate) mod conn;
pub(crate) mod conns;
pub(crate) mod http;
pub(crate) mod outlet;
pub(crate) mod pending;
pub(crate) mod protocol;
mod shard;
pub(crate) mod socket;
pub(crate) mod users;
pub(crate) mod ws;

use mio::Token;

pub(crate) use conn::CONN_SIZE;
pub(crate) use conns::Conns;
pub(crate) use protocol::{Cx, Protocol};
pub(crate) use shard::Shard;

pub(crate) const LISTENER: Token = Token(usize::MAX - 1);
pub(crate) const WAKER: Token = Token(usize::MAX - 2);

pub(crate) const READ_BUF: usize = 64 * 1024;
const ACCEPTS_PER_TURN: usize = 1024;
/// Seconds a closing connection may linger for the peer's FIN.
const CLOSE_LINGER: u32 = 3;
