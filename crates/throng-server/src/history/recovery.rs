//! [`Recovery`]: a shard's rejoins that recover history, as delivery sees
//! them (`crate::history` has the design). A join with `since` is
//! subscribed at once and its history read starts; until the read's answer
//! comes back through the shard's inbox, the topic's live messages for
//! that socket are held aside ([`Recovery::hold`]); with the answer the
//! protocol sends the join's reply and the replay, then the held messages
//! after the replay's last go out, and later live copies up to it are
//! skipped ([`Recovery::skip`]). One path for a history in this process and
//! one in Redis: a read in memory answers through the inbox too.
//!
//! The engine holds this part beside its connections, as delivery consults
//! it; it costs nothing per idle socket (maps with an entry per waiting
//! join, for one round trip).

use std::collections::HashMap;
use std::sync::Arc;

use throng_pubsub::{Broadcast, Replay};

use super::HeldJoin;
use crate::node::{Node, ReplayAnswer, ShardMsg};

/// Live messages one waiting join may hold aside; past it the socket is
/// closed as a slow reader (it rejoins with `since`): the largest history.
const MAX_HELD: usize = crate::rules::MAX_HISTORY_SIZE;

/// A join waiting for its history read.
pub(crate) struct Pending {
    /// The read's number ([`ReplayAnswer::id`]).
    id: u64,
    pub held: HeldJoin,
    /// The topic's live messages that came meanwhile, in order.
    pub live: Vec<Arc<Broadcast>>,
}

/// What [`Recovery::hold`] did with a live message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The socket does not wait for a read: deliver it.
    No,
    /// Held aside until the read's answer.
    Held,
    /// Past [`MAX_HELD`]: the socket must be closed as a slow reader.
    Overflow,
}

/// A shard's rejoins recovering history.
#[derive(Default)]
pub(crate) struct Recovery {
    /// By (registry key, registry topic index): the newest offset a replay
    /// held, so the live copies of those messages still to come are skipped.
    replayed: HashMap<(usize, u32), u64>,
    /// By (registry key, registry topic index): joins waiting for their read.
    pending: HashMap<(usize, u32), Pending>,
    /// The number of the next read.
    next_read: u64,
    /// A replay over this many bytes is not sent (`recovered: false`):
    /// half the socket's outbound bound, over which it would be closed as
    /// a slow reader, rejoin with the same `since`, and again.
    max_replay_bytes: usize,
}

impl Recovery {
    pub fn new(max_outbound_bytes: usize) -> Recovery {
        Recovery {
            max_replay_bytes: max_outbound_bytes / 2,
            ..Default::default()
        }
    }

    /// Whether some join waits or was replayed: delivery looks no further
    /// when none does.
    #[inline]
    pub fn active(&self) -> bool {
        !self.replayed.is_empty() || !self.pending.is_empty()
    }

    /// Joins waiting for their history read.
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// Whether live message `b` for subscriber `key` of topic `idx` was in
    /// its replay already.
    #[inline]
    pub fn skip(&self, key: usize, idx: u32, b: &Broadcast) -> bool {
        !self.replayed.is_empty()
            && self
                .replayed
                .get(&(key, idx))
                .is_some_and(|&w| b.offset <= w)
    }

    /// After live message `b` of topic `idx` was delivered: replays up to
    /// it need no mark any more.
    pub fn passed(&mut self, idx: u32, b: &Broadcast) {
        if !self.replayed.is_empty() {
            let offset = b.offset;
            self.replayed.retain(|&(_, t), w| t != idx || *w > offset);
        }
    }

    /// Holds live message `b` for subscriber `key` of topic `idx` if its
    /// join waits for its read.
    #[inline]
    pub fn hold(&mut self, key: usize, idx: u32, b: &Arc<Broadcast>) -> Hold {
        let Some(p) = self.pending.get_mut(&(key, idx)) else {
            return Hold::No;
        };
        if p.live.len() >= MAX_HELD {
            self.pending.remove(&(key, idx));
            return Hold::Overflow;
        }
        p.live.push(b.clone());
        Hold::Held
    }

    /// Starts the history read of subscriber `key`'s join of `topic`
    /// (registry index `idx`, subscribed already) after `since`, on shard
    /// `shard`; its answer comes back to the shard's inbox
    /// ([`ShardMsg::Replay`]), once the node's subscription of the topic is
    /// active. Without `since`, the newest messages kept (a Pusher cache
    /// channel's last event). False when the topic keeps no history.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        node: &Node,
        shard: usize,
        key: usize,
        idx: u32,
        topic: &str,
        since: Option<&str>,
        held: HeldJoin,
    ) -> bool {
        let Some(rule) = node.policy.history(topic) else {
            return false;
        };
        let id = self.next_read;
        self.next_read += 1;
        let live = Vec::new();
        self.pending.insert((key, idx), Pending { id, held, live });
        let this = node.this.get().cloned();
        let topic: Arc<str> = Arc::from(topic);
        let name = Arc::clone(&topic);
        let answer = move |replay: Replay| {
            let Some(node) = this.and_then(|w| w.upgrade()) else {
                return;
            };
            if let Some(peer) = node.peers.get(shard) {
                let a = ReplayAnswer {
                    id,
                    key,
                    topic,
                    replay,
                };
                peer.send(ShardMsg::Replay(Box::new(a)));
            }
        };
        super::read(node, rule, name, since, answer);
        true
    }

    /// The answer to a read: its waiting join, if it still waits for this
    /// read (it may have left, closed or joined again meanwhile), and the
    /// replay, emptied (`recovered: false`) when it is too big to send.
    pub fn answered(&mut self, a: &mut ReplayAnswer, idx: u32) -> Option<Pending> {
        let k = (a.key, idx);
        if self.pending.get(&k).is_none_or(|p| p.id != a.id) {
            return None;
        }
        let found = &mut a.replay;
        let bytes: usize = found.messages.iter().map(|e| e.bytes()).sum();
        if bytes > self.max_replay_bytes {
            found.recovered = false;
            found.messages.clear();
        }
        self.pending.remove(&k)
    }

    /// After a replay up to `last` went out to subscriber `key` of topic
    /// `idx`: its live copies still to come are skipped.
    pub fn replayed(&mut self, key: usize, idx: u32, last: u64) {
        self.replayed.insert((key, idx), last);
    }

    /// Subscriber `key` left topic `idx`.
    pub fn forget_join(&mut self, key: usize, idx: u32) {
        if !self.replayed.is_empty() {
            self.replayed.remove(&(key, idx));
        }
        if !self.pending.is_empty() {
            self.pending.remove(&(key, idx));
        }
    }

    /// Subscriber `key` is gone: its waiting reads and replay marks too.
    pub fn forget(&mut self, key: usize) {
        if !self.pending.is_empty() {
            self.pending.retain(|&(k, _), _| k != key);
        }
        if !self.replayed.is_empty() {
            self.replayed.retain(|&(k, _), _| k != key);
        }
    }
}
