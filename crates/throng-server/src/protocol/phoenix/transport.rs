//! [`ShardTransport`]: the Phoenix socket's [`Transport`] on a shard, for
//! the socket of one [`Outlet`]: the engine's port for subscriptions,
//! replies and broadcasts (a connection's gathered frames, or the
//! session's buffer), Phoenix's shard state for hook calls and presences.

use std::sync::Arc;

use throng_protocol::frame::Opcode;
use throng_protocol::OwnedPayload;
use throng_pubsub::{Broadcast, Slot, Tracker};

use super::longpoll::Item;
use super::socket::{Tracked, Transport};
use super::Parts;
use crate::auth::rate::Verdict;
use crate::engine::close::CloseReason;
use crate::engine::conn::Kind;
use crate::engine::outlet::Outlet;
use crate::engine::socket::SocketState;
use crate::engine::Conns;
use crate::hooks::EventType;
use crate::metrics::ShardStats;
use crate::node::Node;

/// The socket's [`Transport`] for the socket of `outlet` on a shard.
pub(crate) struct ShardTransport<'a> {
    pub conns: &'a mut Conns,
    pub parts: &'a mut Parts,
    pub node: &'a Node,
    pub outlet: Outlet,
    /// A close the socket asked for, done after the call.
    pub fail: Option<CloseReason<'static>>,
}

impl Transport for ShardTransport<'_> {
    fn subscribe(&mut self, topic: &str) -> Slot {
        self.conns.subscribe(self.node, topic, self.outlet.key())
    }

    fn unsubscribe(&mut self, slot: Slot) {
        let moved = self.conns.unsubscribe(self.node, slot, self.outlet.key());
        // A session that took this one's place learns its position.
        if let Some(idx) = moved {
            if let Some(s) = self.parts.lp.sessions.get_mut(idx) {
                let j = s
                    .socket
                    .joins
                    .iter_mut()
                    .find(|j| j.slot.topic == slot.topic);
                if let Some(j) = j {
                    j.slot.pos = slot.pos;
                }
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
        match self.outlet {
            Outlet::Conn(key) => {
                let window = self.conns.deflate_of(key);
                self.conns.frame_out_deflated(window, opcode, body)
            }
            Outlet::Session(idx) => {
                let item = Item::Owned(body.to_vec(), opcode == Opcode::Binary);
                self.parts.lp.push(idx, item, body.len());
            }
        }
    }

    fn broadcast(
        &mut self,
        topic: Arc<str>,
        event: String,
        payload: OwnedPayload,
        include_self: bool,
    ) {
        // Replies so far go out before the broadcast reaches this socket (a
        // session's are in its buffer already).
        if let Outlet::Conn(key) = self.outlet {
            self.conns.flush_reply(key);
        }
        let exclude = (!include_self).then_some((self.conns.id, self.outlet.key()));
        if let Some(rule) = self.node.policy.history(&topic) {
            // Through this shard's inbox too, in the topic's offset order.
            self.node
                .publish_history(rule, topic, event, payload, exclude);
            return;
        }
        let b = Arc::new(Broadcast::new(topic, event, payload, exclude));
        self.conns.publish(self.node, b);
        if !self.conns.sessions.is_empty() {
            self.parts.lp.take_work(&mut self.conns.sessions);
        }
    }

    fn stats(&self) -> &ShardStats {
        &self.conns.stats
    }

    fn allow_push(&mut self) -> Verdict {
        let limit = &self.node.push_limit;
        if limit.is_unlimited() {
            return Verdict::Allow;
        }
        let now = self.conns.now_ms;
        match socket_of(self.conns, self.parts, self.outlet).map(|s| &mut s.push_tat) {
            Some(tat) => limit.check(tat, now),
            None => Verdict::Allow,
        }
    }

    fn allow_control(&mut self) -> Verdict {
        let limit = &self.node.control_limit;
        if limit.is_unlimited() {
            return Verdict::Allow;
        }
        let now = self.conns.now_ms;
        match control_tat_of(self.conns, self.parts, self.outlet) {
            Some(tat) => limit.check(tat, now),
            None => Verdict::Allow,
        }
    }

    fn close(&mut self, reason: CloseReason<'static>) {
        self.fail.get_or_insert(reason);
    }

    fn tracker(&self) -> &Tracker {
        &self.node.presence
    }

    fn tracked(&mut self, index: u32) -> &mut Tracked {
        self.parts
            .tracked
            .entry((self.outlet.key(), index))
            .or_default()
    }

    fn take_tracked(&mut self, index: u32) -> Tracked {
        if self.parts.tracked.is_empty() {
            return Tracked::new();
        }
        self.parts
            .tracked
            .remove(&(self.outlet.key(), index))
            .unwrap_or_default()
    }

    fn send_shared(&mut self, opcode: Opcode, head: &[u8], shared: &Arc<str>, tail: &[u8]) {
        let websocket = match self.outlet {
            Outlet::Conn(key) => self
                .conns
                .slab
                .get(key)
                .is_some_and(|c| matches!(c.kind, Kind::Ws { .. }))
                .then_some(key),
            Outlet::Session(_) => None,
        };
        let Some(key) = websocket else {
            // Another transport: one copy of the message.
            let mut body = Vec::with_capacity(head.len() + shared.len() + tail.len());
            body.extend_from_slice(head);
            body.extend_from_slice(shared.as_bytes());
            body.extend_from_slice(tail);
            self.send(opcode, &body);
            return;
        };
        // What the socket gathered (the join's reply) goes first.
        self.conns.flush_reply(key);
        self.conns.send_shared(key, opcode, head, shared, tail);
    }

    fn presence_started(&mut self) {
        self.node.wake_shards();
    }

    fn hook_call(
        &mut self,
        hook: crate::hooks::Hook,
        topic: &str,
        body: Vec<u8>,
        wait: crate::hooks::Waiting,
    ) -> Result<(), crate::hooks::Failure> {
        super::hooks::hook_call(
            self.node,
            self.conns.id,
            &mut self.parts.hook_waits,
            self.outlet.key(),
            (hook, topic, body, wait),
        )
    }

    fn refusals(&self) -> Option<&crate::refusals::RefusalLog> {
        Some(&self.node.refusals)
    }

    fn hook_cancel_join(&mut self, topic: &str) {
        self.parts.hook_waits.cancel_join(self.outlet.key(), topic);
    }

    fn hook_assigns(&self) -> Option<String> {
        super::hooks::hook_assigns(&self.parts.hook_waits, self.outlet.key()).map(str::to_owned)
    }

    fn socket_id(&mut self) -> String {
        super::hooks::socket_id(
            self.node,
            self.conns.id,
            &mut self.parts.hook_waits,
            self.outlet.key(),
        )
    }

    fn presence_event(&mut self, kind: EventType, topic: &str, key: &Arc<str>, user: Option<&str>) {
        if self.node.hooks.as_ref().and_then(|h| h.events()).is_none() {
            return;
        }
        let topic = Arc::from(topic);
        let key = key.clone();
        let id = self.socket_id();
        super::hooks::queue_event(self.node, id, kind, user, move |e| {
            e.topic = Some(topic);
            e.key = Some(key);
        });
    }

    fn recover(&mut self, topic: &str, since: &str, held: crate::history::HeldJoin) -> bool {
        let Some(idx) = self.conns.registry.find(topic) else {
            return false;
        };
        let (node, shard, key) = (self.node, self.conns.id, self.outlet.key());
        self.conns
            .recovery
            .start(node, shard, key, idx, topic, Some(since), held)
    }
}

/// The socket state of `outlet`: a connection's, or a session's.
pub(crate) fn socket_of<'s>(
    conns: &'s mut Conns,
    parts: &'s mut Parts,
    outlet: Outlet,
) -> Option<&'s mut SocketState> {
    match outlet {
        Outlet::Conn(key) => Some(&mut conns.slab.get_mut(key)?.socket),
        Outlet::Session(idx) => Some(&mut parts.lp.sessions.get_mut(idx)?.socket),
    }
}

/// The control budget of `outlet` (`--control-rate`), kept beside its
/// state by each carrier.
pub(crate) fn control_tat_of<'s>(
    conns: &'s mut Conns,
    parts: &'s mut Parts,
    outlet: Outlet,
) -> Option<&'s mut u32> {
    match outlet {
        Outlet::Conn(key) => Some(&mut conns.slab.get_mut(key)?.control_tat),
        Outlet::Session(idx) => Some(&mut parts.lp.sessions.get_mut(idx)?.control_tat),
    }
}
