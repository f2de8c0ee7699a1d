//! [`SocketState`]: what every Phoenix socket holds the same way, whatever
//! carries it (a WebSocket connection in `transport/conn.rs`, or a
//! long-poll session in `crate::protocol::phoenix::longpoll`): its channels, what it connected
//! with, its push budget. Its user's id, if it has one, is in the shard's
//! users table under the socket's key (`transport/users.rs`).
//! `transport/outlet.rs` names the carrier.

use std::sync::Arc;

use super::Joins;
use crate::channel::ConnectInfo;

/// What a Phoenix socket holds whatever carries it. Kept to 56 bytes
/// (a `Conn` stays within 80: `transport/conn.rs`).
pub(crate) struct SocketState {
    /// The socket's channels.
    pub joins: Joins,
    /// What the client connected with, when it sent params; `None` for
    /// most clients (a token is verified and not kept).
    pub connect: Option<Arc<ConnectInfo>>,
    /// The push budget: when its next push is due, in ms of the shard's
    /// clock (`auth::rate`); 4 bytes, no timer.
    pub push_tat: u32,
}

impl SocketState {
    pub fn new() -> SocketState {
        SocketState {
            joins: Joins::new(),
            connect: None,
            push_tat: 0,
        }
    }
}

impl Default for SocketState {
    fn default() -> Self {
        SocketState::new()
    }
}
