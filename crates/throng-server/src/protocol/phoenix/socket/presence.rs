//! Presence on a socket's joins: the configured rules (`--presence`) run
//! at join, a channel's `socket.presence()` calls run after its callback,
//! and a join's presences are untracked when it ends. The node's state is
//! the [`Tracker`](throng_pubsub::Tracker); the transport keeps which
//! presences each join has ([`Tracked`]), on its shard, without a lock.

use std::sync::Arc;

use smallvec::SmallVec;
use throng_protocol::frame::Opcode;
use throng_protocol::serializer::encode_message_around;

use super::{Mux, Transport};
use crate::channel::PresenceOp;
use crate::hooks::EventType;
use crate::metrics::ShardStats;
use crate::presence::mode_for;

/// One join's presences: (key, sequence number); most joins have one.
pub(crate) type Tracked = SmallVec<[(Arc<str>, u64); 1]>;

impl<T: Transport> Mux<'_, T> {
    /// A rule matched the join of join `i`: it gets the topic's presence,
    /// then is tracked under `key` if it has one (meta `{}`).
    pub(super) fn auto_presence(&mut self, i: usize, key: Option<String>) {
        let mut ops = vec![PresenceOp::PushState];
        if let Some(key) = key {
            ops.push(PresenceOp::Track(key.into(), "".into()));
        }
        self.presence_ops(i, ops);
    }

    fn refused(&mut self, topic: &str, why: &str) {
        ShardStats::add(&self.t.stats().presence_refused, 1);
        tracing::debug!(%topic, "presence call refused: {why}");
    }

    /// Applies presence calls for join `i`, in order.
    pub(super) fn presence_ops(&mut self, i: usize, ops: Vec<PresenceOp>) {
        let slot = self.joins[i].slot;
        let Some(topic) = self.t.topic_name(slot.topic) else {
            return;
        };
        let mode = mode_for(self.cx.presence, &topic);
        let max = self.cx.max_presence_bytes;
        for op in ops {
            match op {
                PresenceOp::PushState => self.push_presence_state(i, &topic, mode),
                PresenceOp::Track(key, fields) => {
                    if key.len() + fields.len() > max {
                        self.refused(&topic, "key and meta over --max-presence-bytes");
                    } else if self.t.tracked(slot.topic).iter().any(|(k, _)| *k == key) {
                        self.refused(&topic, "key already tracked by this join");
                    } else {
                        let (seq, new) = self.t.tracker().track(&topic, mode, key.clone(), fields);
                        let user = self.cx.who.user;
                        self.t
                            .presence_event(EventType::PresenceJoin, &topic, &key, user);
                        self.t.tracked(slot.topic).push((key, seq));
                        if new {
                            self.t.presence_started();
                        }
                    }
                }
                PresenceOp::UpdateTracked(fields) => {
                    let keys: Vec<Arc<str>> = self
                        .t
                        .tracked(slot.topic)
                        .iter()
                        .map(|(k, _)| k.clone())
                        .collect();
                    if keys.is_empty() {
                        self.refused(&topic, "update of a join that tracks nothing");
                    }
                    let ops = keys
                        .into_iter()
                        .map(|k| PresenceOp::Update(k, fields.clone()))
                        .collect();
                    self.presence_ops(i, ops);
                }
                PresenceOp::Update(key, fields) => {
                    let tracked = self.t.tracked(slot.topic);
                    let Some(at) = tracked.iter().position(|(k, _)| *k == key) else {
                        self.refused(&topic, "update of a key this join does not track");
                        continue;
                    };
                    let old = tracked[at].1;
                    if key.len() + fields.len() > max {
                        self.refused(&topic, "key and meta over --max-presence-bytes");
                        continue;
                    }
                    match self.t.tracker().update(&topic, mode, &key, old, fields) {
                        Some(seq) => self.t.tracked(slot.topic)[at].1 = seq,
                        None => self.refused(&topic, "update of a presence gone"),
                    }
                }
                PresenceOp::Untrack(key) => {
                    let tracked = self.t.tracked(slot.topic);
                    match tracked.iter().position(|(k, _)| *k == key) {
                        Some(at) => {
                            let (key, seq) = tracked.remove(at);
                            self.t.tracker().untrack(&topic, &key, seq);
                            let user = self.cx.who.user;
                            self.t
                                .presence_event(EventType::PresenceLeave, &topic, &key, user);
                        }
                        None => self.refused(&topic, "untrack of a key this join does not track"),
                    }
                }
            }
        }
    }

    /// Pushes the topic's presence (`presence_state`, or `presence_count`)
    /// to this client with its join_ref: the shared JSON between the
    /// message's head and tail, encoded here.
    fn push_presence_state(
        &mut self,
        i: usize,
        topic: &Arc<str>,
        mode: throng_pubsub::presence::Mode,
    ) {
        let (state, new) = self.t.tracker().state(topic, mode);
        if new {
            self.t.presence_started();
        }
        let join_ref = self.joins[i].join_ref.clone();
        let join_ref = join_ref.as_ref().map(throng_protocol::RefBuf::to_ref);
        let body = &mut self.scratch.body;
        body.clear();
        let at = encode_message_around(
            self.cx.vsn,
            body,
            join_ref.as_ref(),
            None,
            topic,
            state.event,
        );
        let (head, tail) = body.split_at(at);
        self.t.send_shared(Opcode::Text, head, &state.json, tail);
        let stats = self.t.stats();
        ShardStats::add(&stats.presence_states, 1);
        ShardStats::add(
            &stats.presence_state_bytes,
            (body.len() + state.json.len()) as u64,
        );
    }

    /// The join on the registry's topic `index` ends: its presences leave.
    pub(super) fn untrack_all(&mut self, index: u32, topic: &str) {
        for (key, seq) in self.t.take_tracked(index) {
            self.t.tracker().untrack(topic, &key, seq);
            let user = self.cx.who.user;
            self.t
                .presence_event(EventType::PresenceLeave, topic, &key, user);
        }
    }
}
