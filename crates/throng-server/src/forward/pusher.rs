//! What the node carries for the Pusher HTTP API (`crate::protocol::pusher`'s
//! `api/`), as plain values below the node: a trigger that must leave out
//! one socket (Pusher's `socket_id`), on its way to the shard that holds
//! that socket, and the answer of an API request that waited on the
//! cluster's figures, on its way back to the shard whose connection holds
//! the request.
//!
//! Why the exclusion travels: a broadcast's `exclude` names a shard and a
//! connection of the node that made it, and the backplane does not carry
//! it to other nodes. So a trigger whose socket is on another node goes to
//! every node over the control lane ([`RemoteTrigger`], one message, not a
//! broadcast), and each node delivers it to its own subscribers, the one
//! that holds the socket without it (`pusher/api/trigger.rs` says more).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use throng_pubsub::Broadcast;

/// A message for the Pusher protocol on a shard
/// (`ShardMsg::Pusher`).
pub(crate) enum PusherMsg {
    /// Broadcasts made by another shard of this node, for this shard's
    /// subscribers but socket `key`, if that is still the socket whose id
    /// has `secret` (else for all of them).
    Exclude {
        broadcasts: Vec<Arc<Broadcast>>,
        key: usize,
        secret: u32,
    },
    /// A trigger from another node, for this node's subscribers.
    Remote(Box<RemoteTrigger>),
    /// The answer to the API request connection `key` holds as request
    /// `id` (the shard's number for it: a key is reused once its
    /// connection closes).
    Answer {
        key: usize,
        id: u64,
        status: u16,
        body: Vec<u8>,
    },
}

impl PusherMsg {
    /// Bytes it holds, for the inbox's bound.
    pub fn cost(&self) -> usize {
        match self {
            PusherMsg::Exclude { broadcasts, .. } => broadcasts.iter().map(|b| b.held()).sum(),
            PusherMsg::Remote(t) => t.cost(),
            PusherMsg::Answer { body, .. } => 64 + body.len(),
        }
    }
}

/// A trigger that leaves out socket `socket_id`, sent by the node that
/// took it to every other node (the control lane's tag 3, as JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RemoteTrigger {
    /// The socket to leave out, as the API request named it.
    pub socket_id: String,
    /// The shard its id names (where the receiving node hands the trigger,
    /// so that the shard holding the socket decides).
    pub shard: u16,
    /// Each broadcast: the engine's topic, the event's name, the Pusher
    /// frame as every subscriber gets it.
    pub items: Vec<Item>,
}

/// One broadcast of a [`RemoteTrigger`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Item {
    pub topic: String,
    pub event: String,
    pub frame: String,
}

impl RemoteTrigger {
    fn cost(&self) -> usize {
        let items: usize = self
            .items
            .iter()
            .map(|i| i.topic.len() + i.event.len() + i.frame.len())
            .sum();
        64 + self.socket_id.len() + items
    }

    /// The control lane's body (after its tag).
    pub fn encode(&self) -> Vec<u8> {
        // A derived Serialize of strings and numbers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a body; `None` for anything this build did not write.
    pub fn decode(bytes: &[u8]) -> Option<RemoteTrigger> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_trigger_round_trips() {
        let t = RemoteTrigger {
            socket_id: "123.456".into(),
            shard: 2,
            items: vec![Item {
                topic: "pusher/1/a".into(),
                event: "e".into(),
                frame: r#"{"event":"e","channel":"a","data":"{\"x\":1}"}"#.into(),
            }],
        };
        assert_eq!(RemoteTrigger::decode(&t.encode()), Some(t.clone()));
        assert!(RemoteTrigger::decode(b"nope").is_none());
        assert!(PusherMsg::Remote(Box::new(t)).cost() > 64);
    }
}
