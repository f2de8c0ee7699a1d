//! [`Outlet`]: what carries a socket of this shard, named by its registry
//! key (a `u32`, what the topic registry, the users table and a
//! broadcast's exclude key hold): a WebSocket connection of the engine, or
//! a session its protocol holds (Phoenix's long-poll sessions), with the
//! session's index above [`SESSION_BIT`]. The bit is read and written only
//! by [`Outlet::of`] and [`Outlet::key`]. Connection keys stay far below it
//! (one per open file).
//!
//! The engine reaches a session only through its protocol: a broadcast for
//! one, or its doom, is queued ([`SessionWork`]) and handed to the protocol
//! after the event, so that nothing outside the protocol that owns sessions
//! matches on a session.

use std::sync::Arc;

use throng_protocol::Wire;
use throng_pubsub::Broadcast;

use super::close::CloseReason;
use super::socket::SocketState;

/// Set in a registry key that names a session.
const SESSION_BIT: usize = 1 << 31;

/// What carries a socket of this shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Outlet {
    /// A WebSocket connection: its key in the shard's connections.
    Conn(usize),
    /// A session its protocol holds: its index in the protocol's sessions.
    Session(usize),
}

impl Outlet {
    /// Sessions a shard may index (their keys must stay below `u32::MAX`).
    pub const MAX_SESSIONS: usize = SESSION_BIT;

    /// The outlet a registry key names.
    #[inline]
    pub fn of(key: usize) -> Outlet {
        if key & SESSION_BIT != 0 {
            Outlet::Session(key & !SESSION_BIT)
        } else {
            Outlet::Conn(key)
        }
    }

    /// Its registry key (what subscriptions, users and hooks hold).
    #[inline]
    pub fn key(self) -> usize {
        match self {
            Outlet::Conn(key) => key,
            Outlet::Session(idx) => SESSION_BIT | idx,
        }
    }
}

/// What the engine hands a session's protocol after an event.
pub(crate) enum SessionWork {
    /// A broadcast for session `idx`.
    Deliver(usize, Arc<Broadcast>),
    /// Session `idx` must end, for this reason.
    Doom(usize, CloseReason<'static>),
}

/// A connection that ended during an event, for its protocol to finish
/// after it (its socket's subscriptions, presences, events, waits):
/// `crate::engine::Conns::close` is the one way a connection ends; what the
/// protocol does about it comes once the event is over, before anything
/// else can take the connection's key.
pub(crate) struct Closed {
    /// The connection's key (free again once this is handled).
    pub key: usize,
    /// Its socket, if it was one: the wire it spoke and what it held.
    pub socket: Option<(Wire, SocketState)>,
    /// The code of its `disconnect` event (`crate::engine::close`).
    pub code: u16,
}
