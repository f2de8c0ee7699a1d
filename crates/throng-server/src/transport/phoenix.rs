//! The Phoenix socket on this shard's WebSocket connections: a complete
//! message is decoded with the connection's serializer and handed to the
//! socket state machine ([`crate::socket`]), which answers through
//! [`ShardTransport`]: the shard's registry for subscriptions, the
//! connection's gathered frames for replies, the shard and the node for
//! broadcasts.

use std::sync::Arc;

use throng_protocol::frame::{close_code, Opcode};
use throng_protocol::serializer::{self, Sender};
use throng_protocol::{OwnedPayload, Vsn};
use throng_pubsub::{Broadcast, Slot};

use super::conn::Kind;
use super::Conns;
use crate::channel::{ConnectInfo, Info};
use crate::metrics::ShardStats;
use crate::node::Node;
use crate::socket::{Cx, Join, Mux, Scratch, Transport};

impl Conns {
    /// A complete WebSocket message on the Phoenix socket of `key`.
    pub fn message(
        &mut self,
        node: &Node,
        scratch: &mut Scratch,
        key: usize,
        vsn: Vsn,
        opcode: Opcode,
        data: &[u8],
    ) {
        let msg = match serializer::decode(vsn, opcode, data, Sender::Client) {
            Ok(m) => m,
            Err(e) => {
                self.fail(
                    node,
                    scratch,
                    key,
                    close_code::INVALID_PAYLOAD,
                    &e.to_string(),
                );
                return;
            }
        };
        if let Err(reason) = crate::limits::check_refs(&msg, node.config.limits.max_ref_bytes) {
            ShardStats::add(&self.stats.ref_refusals, 1);
            self.fail(node, scratch, key, close_code::POLICY_VIOLATION, reason);
            return;
        }
        self.with_socket(node, scratch, key, vsn, |mux| mux.handle_in(msg));
    }

    /// An info for the channels joined on `topic` on this shard.
    pub fn info(&mut self, node: &Node, scratch: &mut Scratch, topic: &str, info: &Info) {
        let Some(idx) = self.registry.find(topic) else {
            return;
        };
        let subs = self.registry.topics[idx as usize].subs.clone();
        for key in subs {
            let key = key as usize;
            let Some(conn) = self.slab.get(key).filter(|c| !c.dead) else {
                continue;
            };
            let Kind::Ws { vsn, .. } = conn.kind else {
                continue;
            };
            self.with_socket(node, scratch, key, vsn, |mux| mux.handle_info(idx, info));
            self.flush_reply(key);
        }
    }

    /// Ends the Phoenix socket of a connection that is closing: every
    /// channel terminates.
    pub(super) fn end_socket(
        &mut self,
        node: &Node,
        scratch: &mut Scratch,
        key: usize,
        vsn: Vsn,
        connect: Option<&ConnectInfo>,
        joins: &mut Vec<Join>,
    ) {
        let mut t = ShardTransport {
            conns: self,
            node,
            key,
        };
        Mux {
            cx: cx(node, vsn, connect),
            t: &mut t,
            joins,
            scratch,
        }
        .close();
    }

    /// Lends the socket state of `key` to `f`, and takes it back.
    fn with_socket(
        &mut self,
        node: &Node,
        scratch: &mut Scratch,
        key: usize,
        vsn: Vsn,
        f: impl FnOnce(&mut Mux<'_, ShardTransport<'_>>),
    ) {
        let conn = &mut self.slab[key];
        let mut joins = std::mem::take(&mut conn.joins);
        let connect = conn.connect.take();
        {
            let mut t = ShardTransport {
                conns: self,
                node,
                key,
            };
            let mut mux = Mux {
                cx: cx(node, vsn, connect.as_deref()),
                t: &mut t,
                joins: &mut joins,
                scratch,
            };
            f(&mut mux);
        }
        // Connections leave the slab only between events, so it is there.
        if let Some(conn) = self.slab.get_mut(key) {
            conn.joins = joins;
            conn.connect = connect;
        }
    }
}

fn cx<'a>(node: &'a Node, vsn: Vsn, connect: Option<&'a ConnectInfo>) -> Cx<'a> {
    Cx {
        router: &node.router,
        vsn,
        connect,
        max_channels: node.config.max_channels_per_socket,
        max_join_bytes: node.config.limits.join_bytes(node.config.max_message_bytes),
    }
}

/// The socket's [`Transport`] for connection `key` of a shard.
pub(crate) struct ShardTransport<'a> {
    conns: &'a mut Conns,
    node: &'a Node,
    key: usize,
}

impl Transport for ShardTransport<'_> {
    fn subscribe(&mut self, topic: &str) -> Slot {
        let c = &mut *self.conns;
        let (slot, new) = c.registry.subscribe(topic, self.key as u32);
        if new {
            ShardStats::add(&c.stats.topics, 1);
            if let Some(name) = c.registry.name(slot.topic) {
                if self.node.topics.add(name, c.id) {
                    self.node.backplane.subscribe(name);
                }
            }
        }
        slot
    }

    fn unsubscribe(&mut self, slot: Slot) {
        let c = &mut *self.conns;
        let (moved, gone) = c.registry.unsubscribe(slot);
        if let Some(moved) = moved {
            // The subscriber that took this one's place learns its position.
            if let Some(conn) = c.slab.get_mut(moved as usize) {
                if let Some(j) = conn.joins.iter_mut().find(|j| j.slot.topic == slot.topic) {
                    j.slot.pos = slot.pos;
                }
            }
        }
        if let Some(name) = gone {
            ShardStats::sub(&c.stats.topics, 1);
            if self.node.topics.remove(&name, c.id) {
                self.node.backplane.unsubscribe(&name);
            }
        }
    }

    fn topic_index(&self, topic: &str) -> Option<u32> {
        self.conns.registry.find(topic)
    }

    fn topic_name(&self, index: u32) -> Option<Arc<str>> {
        self.conns.registry.name(index).cloned()
    }

    fn send(&mut self, opcode: Opcode, body: &[u8]) {
        self.conns.frame_out(opcode, body);
    }

    fn broadcast(
        &mut self,
        topic: Arc<str>,
        event: String,
        payload: OwnedPayload,
        include_self: bool,
    ) {
        // Replies so far go out before the broadcast reaches this socket.
        self.conns.flush_reply(self.key);
        let exclude = (!include_self).then_some((self.conns.id, self.key));
        let b = Arc::new(Broadcast::new(topic, event, payload, exclude));
        self.conns.deliver(&b);
        self.node.broadcast(Some(self.conns.id), b);
    }

    fn stats(&self) -> &ShardStats {
        &self.conns.stats
    }
}
