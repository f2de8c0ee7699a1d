//! [`SocketState`]: what every socket holds the same way, whatever its
//! protocol and whatever carries it (a WebSocket connection in
//! `engine/conn.rs`, or a session a protocol holds, as Phoenix's long-poll
//! does): its subscriptions ([`Join`]s), what it connected with, its push
//! budget. Its user's id, if it has one, is in the shard's users table
//! under the socket's key (`engine/users.rs`). `engine/outlet.rs` names the
//! carrier.

use std::sync::Arc;

use throng_protocol::RefBuf;
use throng_pubsub::Slot;

use crate::channel::{Assigns, ConnectInfo};

/// One topic a socket is subscribed to: a Phoenix channel joined, a Pusher
/// channel subscribed.
pub(crate) struct Join {
    /// Where the socket sits in the shard's registry.
    pub slot: Slot,
    /// The client's join_ref (Phoenix v2; v1 clients and other protocols
    /// send none): every message of this channel carries it, as the JSON
    /// value it came as.
    pub join_ref: Option<RefBuf>,
    /// The protocol's state of this subscription between messages (a
    /// Phoenix channel's assigns).
    pub assigns: Assigns,
}

/// A socket's subscriptions: the first inline in the socket (most sockets
/// join one topic, which then costs no allocation: an allocation of its own
/// cost an idle socket a 48-byte heap chunk, more than the 24 bytes the
/// socket grew by), the others in one allocation.
pub(crate) type Joins = smallvec::SmallVec<[Join; 1]>;

/// Adds a subscription. A Vec's first push allocates room for four; sockets
/// with a few joins grow one at a time while small.
pub(crate) fn push_join(joins: &mut Joins, join: Join) {
    if joins.len() == joins.capacity() {
        let more = if joins.len() < 4 { 1 } else { joins.len() };
        joins.reserve_exact(more);
    }
    joins.push(join);
}

/// What a socket holds whatever carries it. Kept to 56 bytes (a `Conn`
/// stays within 80: `engine/conn.rs`).
pub(crate) struct SocketState {
    /// The socket's subscriptions.
    pub joins: Joins,
    /// What the client connected with, when it sent params; `None` for
    /// most clients (a token is verified and not kept).
    pub connect: Option<Arc<ConnectInfo>>,
    /// The push budget: when its next push is due, in ms of the shard's
    /// clock (`auth::rate`); 4 bytes, no timer.
    pub push_tat: u32,
    /// Four bytes its protocol keeps about the socket, in the room the
    /// struct's alignment left (Pusher: the secret of its socket id,
    /// `protocol/pusher/ids.rs`); 0 until the protocol sets it.
    pub tag: u32,
}

impl SocketState {
    pub fn new() -> SocketState {
        SocketState {
            joins: Joins::new(),
            connect: None,
            push_tat: 0,
            tag: 0,
        }
    }
}

impl Default for SocketState {
    fn default() -> Self {
        SocketState::new()
    }
}

#[cfg(not(debug_assertions))]
const _: () = assert!(
    std::mem::size_of::<SocketState>() <= 56,
    "SocketState grew past 56 bytes: every socket holds one"
);

const _: () = assert!(
    std::mem::size_of::<Join>() <= 32,
    "Join grew past 32 bytes: every joined socket holds one inline"
);
