//! [`SocketState`]: what every Phoenix socket holds the same way, whatever
//! carries it (a WebSocket connection in `transport/conn.rs`, or a
//! long-poll session in `crate::longpoll`): its channels, what it connected
//! with, its user, its push budget. `transport/outlet.rs` names the carrier.

use std::sync::Arc;

use super::Joins;
use crate::channel::ConnectInfo;

/// A socket's "no user" mark.
pub(crate) const NO_USER: u32 = u32::MAX;
/// A socket's "has a user" mark: its id is in the shard's `Users` table,
/// under the socket's registry key.
pub(crate) const HAS_USER: u32 = 0;

/// What a Phoenix socket holds whatever carries it. Kept to 56 bytes
/// (a `Conn` stays within 80: `transport/conn.rs`).
pub(crate) struct SocketState {
    /// The socket's channels.
    pub joins: Joins,
    /// What the client connected with, when it sent params; `None` for
    /// most clients (a token is verified and not kept).
    pub connect: Option<Arc<ConnectInfo>>,
    /// Whether the socket has an authenticated user ([`HAS_USER`]), whose
    /// id the shard's `Users` table holds, or not ([`NO_USER`]).
    pub user: u32,
    /// The push budget: when its next push is due, in ms of the shard's
    /// clock (`auth::rate`); 4 bytes, no timer.
    pub push_tat: u32,
}

impl SocketState {
    pub fn new() -> SocketState {
        SocketState {
            joins: Joins::new(),
            connect: None,
            user: NO_USER,
            push_tat: 0,
        }
    }
}

impl Default for SocketState {
    fn default() -> Self {
        SocketState::new()
    }
}
