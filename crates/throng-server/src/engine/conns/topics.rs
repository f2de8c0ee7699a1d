//! A socket's subscriptions and broadcasts through the engine: the port's
//! [`Conns::subscribe`], [`Conns::unsubscribe`] and [`Conns::publish`].
//! The registry is the shard's; the shard's first subscriber of a topic
//! adds it to the node's topics (and the backplane subscribes the node, and
//! occupancy learns of it), its last one removes it.

use std::sync::Arc;

use throng_pubsub::{Broadcast, Slot};

use super::Conns;
use crate::engine::outlet::Outlet;
use crate::metrics::ShardStats;
use crate::node::Node;

impl Conns {
    /// Subscribes the socket of registry key `key` to `topic`.
    pub fn subscribe(&mut self, node: &Node, topic: &str, key: usize) -> Slot {
        let (slot, new) = self.registry.subscribe(topic, key as u32);
        if new {
            self.topic_added(node, slot.topic);
        }
        slot
    }

    /// Ends the subscription `slot` of the socket of registry key `key`.
    /// The subscriber that took its place in the topic learns its new
    /// position: a connection's here; a session's is its protocol's to
    /// fix, whose index is returned.
    pub fn unsubscribe(&mut self, node: &Node, slot: Slot, key: usize) -> Option<usize> {
        self.recovery.forget_join(key, slot.topic);
        let (moved, gone) = self.registry.unsubscribe(slot);
        let mut session = None;
        if let Some(moved) = moved {
            match Outlet::of(moved as usize) {
                Outlet::Conn(k) => self.moved_to(k, slot),
                Outlet::Session(idx) => session = Some(idx),
            }
        }
        if let Some(name) = gone {
            self.topic_removed(node, &name);
        }
        session
    }

    /// Connection `k`'s subscription of `slot.topic` now sits at
    /// `slot.pos`. Its socket is on the connection, or, when it closed
    /// during this event and its protocol has not ended it yet, in the
    /// closed list: a position left stale there would make its own
    /// unsubscribe remove another subscriber, or none.
    fn moved_to(&mut self, k: usize, slot: Slot) {
        let on_conn = self.slab.get_mut(k).map(|c| &mut c.socket.joins);
        let joins = on_conn.into_iter().chain(
            self.closed
                .iter_mut()
                .filter(|c| c.key == k)
                .filter_map(|c| c.socket.as_mut().map(|(_, s)| &mut s.joins)),
        );
        for joins in joins {
            if let Some(j) = joins.iter_mut().find(|j| j.slot.topic == slot.topic) {
                j.slot.pos = slot.pos;
                return;
            }
        }
    }

    /// A broadcast made on this shard: to the node's other shards and the
    /// other nodes first, then to this shard's subscribers. Delivering here
    /// first (thousands of writes) kept every other shard, and with
    /// --workers every other node, idle until it was done, so the fan-out
    /// ran one shard after another instead of all at once. Nothing else
    /// runs on this shard in between, so each connection here still sees
    /// the same order.
    pub fn publish(&mut self, node: &Node, b: Arc<Broadcast>) {
        node.broadcast(Some(self.id), Arc::clone(&b));
        self.deliver(&b);
    }

    fn topic_added(&mut self, node: &Node, idx: u32) {
        ShardStats::add(&self.stats.topics, 1);
        if let Some(name) = self.registry.name(idx) {
            if node.topics.add(name, self.id) {
                node.backplane.subscribe(name);
                node.occupancy_changed(name);
            }
        }
    }

    fn topic_removed(&mut self, node: &Node, name: &str) {
        ShardStats::sub(&self.stats.topics, 1);
        if node.topics.remove(name, self.id) {
            node.backplane.unsubscribe(name);
            if node.occupancy.get().is_some() {
                node.occupancy_changed(&Arc::from(name));
            }
            let presence = &node.presence;
            if presence.is_active() {
                let topics = &node.topics;
                presence.unwatch(name, || topics.contains(name));
            }
        }
    }
}
