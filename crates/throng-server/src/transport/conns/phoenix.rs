//! The Phoenix socket on this shard's WebSocket connections and long-poll
//! sessions: a complete message is decoded with the connection's serializer
//! and handed to the socket state machine ([`crate::socket`]), which answers
//! through [`ShardTransport`]: the shard's registry for subscriptions, the
//! connection's gathered frames (or the session's buffer) for replies, the
//! shard and the node for broadcasts. The socket is named by its
//! [`Outlet`] (a WebSocket connection or a long-poll session, `transport/outlet.rs`);
//! the few things that differ by carrier (where a reply goes, how a
//! socket that must end is ended) are matched on it.

use std::sync::Arc;

use throng_protocol::frame::{close_code, Opcode};
use throng_protocol::serializer::{self, Sender};
use throng_protocol::{OwnedPayload, Vsn};
use throng_pubsub::{Broadcast, Slot, Tracker};

use super::Conns;
use crate::auth::rate::Verdict;
use crate::channel::{ConnectInfo, Info, Who};
use crate::close::CloseReason;
use crate::hooks::EventType;
use crate::longpoll::Item;
use crate::metrics::ShardStats;
use crate::node::Node;
use crate::socket::{Cx, Joins, Mux, Scratch, Tracked, Transport};
use crate::transport::conn::Kind;
use crate::transport::outlet::{Ended, Outlet};
use crate::transport::users::Id;

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
                let text = e.to_string();
                let reason = CloseReason::Protocol {
                    code: close_code::INVALID_PAYLOAD,
                    text: &text,
                };
                self.close(node, scratch, key, reason);
                return;
            }
        };
        if let Err(text) = crate::limits::check_refs(&msg, node.config.limits.max_ref_bytes) {
            self.close(node, scratch, key, CloseReason::RefTooLong(text));
            return;
        }
        let fail = self.with_socket(node, scratch, Outlet::Ws(key), vsn, |mux| {
            mux.handle_in(msg)
        });
        if let Some(reason) = fail {
            self.close(node, scratch, key, reason);
        }
    }

    /// Closes every socket of `user` on this shard with 1001 (Phoenix's
    /// `disconnect` on the socket id `users_socket:<user>`), so clients
    /// reconnect and authenticate again.
    pub fn disconnect_user(&mut self, node: &Node, scratch: &mut Scratch, user: &str) {
        for key in self.users.sockets(user) {
            let key = match Outlet::of(key as usize) {
                Outlet::Ws(key) => key,
                // A long-poll session ends; its next poll gets 410.
                outlet => {
                    self.doom(outlet, CloseReason::UserDisconnect);
                    continue;
                }
            };
            if self.slab.get(key).is_none_or(|c| c.dead) {
                continue;
            }
            self.reply.clear();
            self.close(node, scratch, key, CloseReason::UserDisconnect);
        }
    }

    fn topic_added(&mut self, node: &Node, idx: u32) {
        ShardStats::add(&self.stats.topics, 1);
        if let Some(name) = self.registry.name(idx) {
            if node.topics.add(name, self.id) {
                node.backplane.subscribe(name);
                if let Some(o) = node.occupancy.get() {
                    o.changed(node, name);
                }
            }
        }
    }

    fn topic_removed(&mut self, node: &Node, name: &str) {
        ShardStats::sub(&self.stats.topics, 1);
        if node.topics.remove(name, self.id) {
            node.backplane.unsubscribe(name);
            if let Some(o) = node.occupancy.get() {
                o.changed(node, &Arc::from(name));
            }
            let presence = &node.presence;
            if presence.is_active() {
                let topics = &node.topics;
                presence.unwatch(name, || topics.contains(name));
            }
        }
    }

    /// An info for the channels joined on `topic` on this shard.
    pub fn info(&mut self, node: &Node, scratch: &mut Scratch, topic: &str, info: &Info) {
        let Some(idx) = self.registry.find(topic) else {
            return;
        };
        let subs = self.registry.topics[idx as usize].subs.clone();
        for key in subs {
            let outlet = Outlet::of(key as usize);
            let Some(vsn) = self.vsn_of(outlet) else {
                continue;
            };
            let fail =
                self.with_socket(node, scratch, outlet, vsn, |mux| mux.handle_info(idx, info));
            self.after_socket(node, scratch, outlet, fail);
        }
    }

    /// Ends the Phoenix socket of a connection that is closing (or of a
    /// long-poll session that ends): every channel terminates (their
    /// presences leave), the `disconnect` event goes out with `code`, and
    /// the user and the hooks forget this socket.
    pub(super) fn end_socket(
        &mut self,
        node: &Node,
        scratch: &mut Scratch,
        outlet: Outlet,
        ended: Ended,
        code: u16,
    ) {
        let Ended { vsn, mut socket } = ended;
        let key = outlet.key();
        let (_, id) = self.on_socket(
            node,
            scratch,
            outlet,
            vsn,
            (&mut socket.joins, socket.connect.as_deref()),
            |mux| mux.close(),
        );
        self.socket_event(
            node,
            key,
            EventType::Disconnect,
            id.as_ref().map(Id::as_str),
            |e| e.code = Some(code),
        );
        self.hook_forget(node, key);
        self.history_forget(key);
        self.users.remove(key as u32);
    }

    /// After an event on the socket of `outlet`: the close it asked for,
    /// and, on a WebSocket, its gathered replies out (a session's are in
    /// its buffer already).
    pub(super) fn after_socket(
        &mut self,
        node: &Node,
        scratch: &mut Scratch,
        outlet: Outlet,
        fail: Option<CloseReason<'static>>,
    ) {
        match outlet {
            Outlet::Ws(key) => {
                if let Some(reason) = fail {
                    self.close(node, scratch, key, reason);
                }
                self.flush_reply(key);
            }
            Outlet::LongPoll(_) => {
                if let Some(reason) = fail {
                    self.doom(outlet, reason);
                }
            }
        }
    }

    /// Lends the socket state of `outlet` to `f`, and takes it back.
    /// Returns the close the socket asked for, if any (done once the state
    /// is back).
    pub(super) fn with_socket(
        &mut self,
        node: &Node,
        scratch: &mut Scratch,
        outlet: Outlet,
        vsn: Vsn,
        f: impl FnOnce(&mut Mux<'_, ShardTransport<'_>>),
    ) -> Option<CloseReason<'static>> {
        let socket = self.socket_mut(outlet)?.state;
        let (mut joins, connect) = (std::mem::take(&mut socket.joins), socket.connect.take());
        let (fail, _) = self.on_socket(
            node,
            scratch,
            outlet,
            vsn,
            (&mut joins, connect.as_deref()),
            f,
        );
        // Connections and sessions leave their slab only between events,
        // so it is there.
        if let Some(s) = self.socket_mut(outlet) {
            s.state.joins = joins;
            s.state.connect = connect;
        }
        fail
    }

    /// Runs `f` on the Phoenix socket of `outlet` made of `socket` (its
    /// channels and what it connected with) and of its user, whose id the
    /// users table holds under the outlet's key; returns the close it
    /// asked for and that id.
    fn on_socket(
        &mut self,
        node: &Node,
        scratch: &mut Scratch,
        outlet: Outlet,
        vsn: Vsn,
        socket: (&mut Joins, Option<&ConnectInfo>),
        f: impl FnOnce(&mut Mux<'_, ShardTransport<'_>>),
    ) -> (Option<CloseReason<'static>>, Option<Id>) {
        let (joins, connect) = socket;
        // Copied, not borrowed: the table lives in what the call mutates.
        let id = self.users.id(outlet.key() as u32);
        let mut t = ShardTransport {
            conns: self,
            node,
            outlet,
            fail: None,
        };
        let who = Who {
            user: id.as_ref().map(Id::as_str),
            connect,
        };
        f(&mut Mux {
            cx: cx(node, vsn, who),
            t: &mut t,
            joins,
            scratch,
        });
        (t.fail, id)
    }
}

fn cx<'a>(node: &'a Node, vsn: Vsn, who: Who<'a>) -> Cx<'a> {
    Cx {
        router: &node.router,
        policy: &node.policy,
        vsn,
        who,
        max_channels: node.config.max_channels_per_socket,
        max_join_bytes: node.config.limits.join_bytes(node.config.max_message_bytes),
        presence: &node.config.presence,
        max_presence_bytes: node.config.max_presence_bytes,
        max_json_depth: node.config.limits.max_json_depth,
    }
}

/// The socket's [`Transport`] for the socket of `outlet` on a shard.
pub(crate) struct ShardTransport<'a> {
    conns: &'a mut Conns,
    node: &'a Node,
    outlet: Outlet,
    /// A close the socket asked for, done after the call.
    fail: Option<CloseReason<'static>>,
}

impl Transport for ShardTransport<'_> {
    fn subscribe(&mut self, topic: &str) -> Slot {
        let c = &mut *self.conns;
        let (slot, new) = c.registry.subscribe(topic, self.outlet.key() as u32);
        if new {
            c.topic_added(self.node, slot.topic);
        }
        slot
    }

    fn unsubscribe(&mut self, slot: Slot) {
        let c = &mut *self.conns;
        if !c.replayed.is_empty() {
            c.replayed.remove(&(self.outlet.key(), slot.topic));
        }
        if !c.pending.is_empty() {
            c.pending.remove(&(self.outlet.key(), slot.topic));
        }
        let (moved, gone) = c.registry.unsubscribe(slot);
        if let Some(moved) = moved {
            // The subscriber that took this one's place learns its position.
            if let Some(s) = c.socket_mut(Outlet::of(moved as usize)) {
                if let Some(j) = s
                    .state
                    .joins
                    .iter_mut()
                    .find(|j| j.slot.topic == slot.topic)
                {
                    j.slot.pos = slot.pos;
                }
            }
        }
        if let Some(name) = gone {
            c.topic_removed(self.node, &name);
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
            Outlet::Ws(key) => {
                let window = self.conns.deflate_of(key);
                self.conns.frame_out_deflated(window, opcode, body)
            }
            Outlet::LongPoll(idx) => {
                let item = Item::Owned(body.to_vec(), opcode == Opcode::Binary);
                self.conns.lp_push(idx, item, body.len());
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
        if let Outlet::Ws(key) = self.outlet {
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
        // The other shards and nodes first, then this shard's subscribers:
        // delivering here first (thousands of writes) kept every other
        // shard, and with --workers every other node, idle until it was
        // done, so the fan-out ran one shard after another instead of all
        // at once. Nothing else runs on this shard in between, so each
        // connection here still sees the same order.
        self.node.broadcast(Some(self.conns.id), Arc::clone(&b));
        self.conns.deliver(&b);
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
        match self
            .conns
            .socket_mut(self.outlet)
            .map(|s| &mut s.state.push_tat)
        {
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
        match self.conns.socket_mut(self.outlet).map(|s| s.control_tat) {
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
        self.conns
            .tracked
            .entry((self.outlet.key(), index))
            .or_default()
    }

    fn take_tracked(&mut self, index: u32) -> Tracked {
        if self.conns.tracked.is_empty() {
            return Tracked::new();
        }
        self.conns
            .tracked
            .remove(&(self.outlet.key(), index))
            .unwrap_or_default()
    }

    fn send_shared(&mut self, opcode: Opcode, head: &[u8], shared: &Arc<str>, tail: &[u8]) {
        let websocket = match self.outlet {
            Outlet::Ws(key) => self
                .conns
                .slab
                .get(key)
                .is_some_and(|c| matches!(c.kind, Kind::Ws { .. }))
                .then_some(key),
            Outlet::LongPoll(_) => None,
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
        self.conns
            .hook_call(self.node, self.outlet.key(), hook, topic, body, wait)
    }

    fn refusals(&self) -> Option<&crate::refusals::RefusalLog> {
        Some(&self.node.refusals)
    }

    fn hook_cancel_join(&mut self, topic: &str) {
        self.conns.hook_waits.cancel_join(self.outlet.key(), topic);
    }

    fn hook_assigns(&self) -> Option<String> {
        self.conns
            .hook_assigns(self.outlet.key())
            .map(str::to_owned)
    }

    fn socket_id(&mut self) -> String {
        self.conns.socket_id(self.node, self.outlet.key())
    }

    fn presence_event(&mut self, kind: EventType, topic: &str, key: &Arc<str>, user: Option<&str>) {
        if self.node.hooks.as_ref().and_then(|h| h.events()).is_none() {
            return;
        }
        let topic = Arc::from(topic);
        let key = key.clone();
        self.conns
            .socket_event(self.node, self.outlet.key(), kind, user, move |e| {
                e.topic = Some(topic);
                e.key = Some(key);
            });
    }

    fn recover_later(&mut self, topic: &str, since: &str, held: crate::history::HeldJoin) -> bool {
        let Some(idx) = self.conns.registry.find(topic) else {
            return false;
        };
        self.conns
            .read_later(self.node, self.outlet.key(), idx, topic, since, held)
    }

    fn recover(&mut self, topic: &str, since: Option<&str>) -> Option<throng_pubsub::Replay> {
        let store = self.node.history.as_ref()?;
        self.node.policy.history(topic)?;
        let index = self.conns.registry.find(topic)?;
        let replayed = &mut self.conns.replayed;
        let key = self.outlet.key();
        let now = std::time::Instant::now();
        // A replay must fit the socket's outbound bound with room to spare:
        // over it, the socket would be closed as a slow reader, rejoin
        // with the same `since`, and again.
        let max = self.node.config.max_outbound_bytes / 2;
        // Under the topic's lock: every message after `last` is queued for
        // this shard after this read, every one up to it may be in its
        // inbox already and is skipped for this socket.
        Some(store.read(topic, since, usize::MAX, now, |mut found| {
            let bytes: usize = found.messages.iter().map(|e| e.bytes()).sum();
            if bytes > max {
                found.recovered = false;
                found.messages.clear();
            }
            if found.recovered && found.last > 0 {
                replayed.insert((key, index), found.last);
            }
            found
        }))
    }
}
