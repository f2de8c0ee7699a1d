//! Pub/sub: the per-shard subscriber registry, the encode-once [`Broadcast`],
//! and the [`Backplane`] that carries broadcasts between nodes.
//!
//! Subscribers are sharded by connection: each event-loop shard owns the
//! connections it accepted and a [`Registry`] of their subscriptions, so join
//! and leave touch only shard-local data (no lock, no shared task). This is
//! the seed's fix at 1.3M subscribers (a pool of pubsub servers, one table
//! each, sharded by subscriber) without the servers. A broadcast is encoded
//! once per serializer into complete WebSocket frames, then every shard that
//! has subscribers writes the same bytes to each of them, shards in parallel.
//!
//! The node-wide topic set ([`NodeTopics`]) changes only when a shard gains
//! its first or loses its last subscriber of a topic; that is where a
//! cluster backplane subscribes and unsubscribes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use slab::Slab;
use throng_protocol::frame::{encode_header, Opcode};
use throng_protocol::serializer::encode_broadcast;
use throng_protocol::Vsn;

use crate::channel::OwnedPayload;

/// A broadcast, with its frames already encoded for each serializer.
#[derive(Debug)]
pub struct Broadcast {
    pub topic: Arc<str>,
    pub event: String,
    pub payload: OwnedPayload,
    /// Complete WebSocket frames, indexed by [`Vsn::index`]; `None` where the
    /// serializer cannot carry the payload (binary on v1).
    pub frames: [Option<Box<[u8]>>; 2],
    /// A connection that must not receive it (`broadcast_from`): (shard, key).
    pub exclude: Option<(usize, usize)>,
}

impl Broadcast {
    /// Encodes `event`/`payload` once per serializer.
    pub fn new(
        topic: Arc<str>,
        event: String,
        payload: OwnedPayload,
        exclude: Option<(usize, usize)>,
    ) -> Broadcast {
        let mut frames: [Option<Box<[u8]>>; 2] = [None, None];
        let mut body = Vec::with_capacity(128);
        for vsn in Vsn::ALL {
            body.clear();
            if let Ok(opcode) =
                encode_broadcast(vsn, &mut body, &topic, &event, payload.as_payload())
            {
                frames[vsn.index()] = Some(frame_of(opcode, &body));
            }
        }
        Broadcast {
            topic,
            event,
            payload,
            frames,
            exclude,
        }
    }

    /// The frame a socket speaking `vsn` gets, if that serializer can carry it.
    pub fn frame(&self, vsn: Vsn) -> Option<&[u8]> {
        self.frames[vsn.index()].as_deref()
    }
}

/// A whole unmasked server frame around `body`.
pub(crate) fn frame_of(opcode: Opcode, body: &[u8]) -> Box<[u8]> {
    let mut f = Vec::with_capacity(body.len() + 10);
    encode_header(&mut f, true, opcode, body.len(), None);
    f.extend_from_slice(body);
    f.into_boxed_slice()
}

/// Carries broadcasts to the other nodes of a cluster.
///
/// The default, [`LocalBackplane`], has no other nodes. A cluster
/// implementation publishes one message per broadcast (never one per
/// subscriber) and hands broadcasts from other nodes to
/// [`crate::Node::deliver_remote`].
pub trait Backplane: Send + Sync + 'static {
    /// Called once when the node is built, before any other call, so the
    /// backplane can hand incoming broadcasts to [`crate::Node::deliver_remote`]
    /// and list the node's topics ([`NodeTopics::names`]) to re-subscribe.
    fn attach(&self, _node: std::sync::Weak<crate::Node>) {}
    /// A broadcast made on this node; send it to the other nodes.
    fn publish(&self, broadcast: &Broadcast);
    /// This node gained its first local subscriber of `topic`.
    fn subscribe(&self, topic: &str);
    /// This node lost its last local subscriber of `topic`.
    fn unsubscribe(&self, topic: &str);
    /// Appends the backplane's own Prometheus lines to `/metrics`.
    fn render_metrics(&self, _out: &mut String) {}
}

/// A single node: nothing to carry.
pub struct LocalBackplane;

impl Backplane for LocalBackplane {
    fn publish(&self, _: &Broadcast) {}
    fn subscribe(&self, _: &str) {}
    fn unsubscribe(&self, _: &str) {}
}

/// Which shards of this node have subscribers of each topic, as a bit mask.
/// Locked only when a shard's first subscriber arrives or its last leaves.
#[derive(Default)]
pub struct NodeTopics {
    map: Mutex<HashMap<Arc<str>, u64>>,
}

impl NodeTopics {
    /// Marks `shard` as subscribed; true if the node had no subscriber before.
    pub fn add(&self, topic: &Arc<str>, shard: usize) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let mask = map.entry(topic.clone()).or_insert(0);
        let first = *mask == 0;
        *mask |= 1 << (shard % 64);
        first
    }

    /// Clears `shard`; true if the node has no subscriber left.
    pub fn remove(&self, topic: &str, shard: usize) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(topic) {
            Some(mask) => {
                *mask &= !(1 << (shard % 64));
                if *mask == 0 {
                    map.remove(topic);
                    true
                } else {
                    false
                }
            }
            None => false,
        }
    }

    /// The shards with subscribers of `topic`.
    pub fn shards(&self, topic: &str) -> u64 {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(topic).copied().unwrap_or(0)
    }

    /// Every topic with a subscriber on this node (for re-subscribing).
    pub fn names(&self) -> Vec<Arc<str>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// How many topics have a subscriber on this node.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One topic's subscribers on one shard.
#[derive(Debug)]
pub struct Topic {
    pub name: Arc<str>,
    /// Connection keys. A subscriber knows its index here, so leaving is a
    /// `swap_remove` plus fixing the index of the one moved.
    pub subs: Vec<u32>,
}

/// A shard's subscriptions: topic name to [`Topic`], topics in a slab so a
/// connection refers to a topic by a 4-byte index.
#[derive(Default)]
pub struct Registry {
    pub topics: Slab<Topic>,
    index: HashMap<Arc<str>, u32>,
}

impl Registry {
    /// The topic's index, if this shard has subscribers of it.
    pub fn find(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    /// Adds `conn` to `name`; returns (topic index, position, whether the topic is new here).
    pub fn subscribe(&mut self, name: &str, conn: u32) -> (u32, u32, bool) {
        let (idx, new) = match self.index.get(name) {
            Some(&i) => (i, false),
            None => {
                let name: Arc<str> = Arc::from(name);
                let i = self.topics.insert(Topic {
                    name: name.clone(),
                    subs: Vec::new(),
                }) as u32;
                self.index.insert(name, i);
                (i, true)
            }
        };
        let subs = &mut self.topics[idx as usize].subs;
        subs.push(conn);
        (idx, (subs.len() - 1) as u32, new)
    }

    /// Removes the subscriber at `pos` of topic `idx`. Returns the connection
    /// now at `pos` (which must learn its new position), and the topic's name
    /// if it has no subscriber left on this shard (it is then dropped).
    pub fn unsubscribe(&mut self, idx: u32, pos: u32) -> (Option<u32>, Option<Arc<str>>) {
        let topic = &mut self.topics[idx as usize];
        topic.subs.swap_remove(pos as usize);
        let moved = topic.subs.get(pos as usize).copied();
        if topic.subs.is_empty() {
            let t = self.topics.remove(idx as usize);
            self.index.remove(&t.name);
            return (None, Some(t.name));
        }
        if topic.subs.capacity() > 64 && topic.subs.len() < topic.subs.capacity() / 4 {
            topic.subs.shrink_to(topic.subs.len() * 2);
        }
        (moved, None)
    }

    pub fn len(&self) -> usize {
        self.topics.len()
    }

    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_once_per_serializer() {
        let b = Broadcast::new("t".into(), "e".into(), OwnedPayload::empty(), None);
        assert_eq!(
            &b.frame(Vsn::V2).unwrap()[2..],
            br#"[null,null,"t","e",{}]"#
        );
        assert_eq!(b.frame(Vsn::V1).unwrap()[0], 0x81);
        let bin = Broadcast::new("t".into(), "e".into(), OwnedPayload::Binary(vec![1]), None);
        assert!(bin.frame(Vsn::V1).is_none());
        assert_eq!(bin.frame(Vsn::V2).unwrap()[0], 0x82);
    }

    #[test]
    fn registry_swap_remove_reports_moves() {
        let mut r = Registry::default();
        let (t, p0, new) = r.subscribe("a", 10);
        assert!(new && p0 == 0);
        let (_, p1, _) = r.subscribe("a", 11);
        let (_, p2, _) = r.subscribe("a", 12);
        assert_eq!((p1, p2), (1, 2));
        assert_eq!(r.unsubscribe(t, 0), (Some(12), None));
        assert_eq!(r.topics[t as usize].subs, vec![12, 11]);
        assert_eq!(r.unsubscribe(t, 1), (None, None));
        let (moved, gone) = r.unsubscribe(t, 0);
        assert_eq!(moved, None);
        assert_eq!(gone.as_deref(), Some("a"));
        assert!(r.find("a").is_none());
    }

    #[test]
    fn node_topics_first_and_last() {
        let n = NodeTopics::default();
        let t: Arc<str> = "x".into();
        assert!(n.add(&t, 0));
        assert!(!n.add(&t, 1));
        assert_eq!(n.shards("x"), 0b11);
        assert!(!n.remove("x", 0));
        assert!(n.remove("x", 1));
        assert!(n.is_empty());
    }
}
