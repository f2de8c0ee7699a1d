//! Joins with `since` whose history read answers later (history in Redis,
//! `crate::history`): the read started for a socket, its live messages
//! held aside meanwhile, and the answer applied when it comes back through
//! the inbox.

use std::sync::Arc;

use throng_pubsub::Broadcast;

use crate::engine::close::CloseReason;
use crate::engine::outlet::Outlet;
use crate::engine::Conns;
use crate::history::{HeldJoin, ReplayAnswer};
use crate::node::{Node, ShardMsg};
use crate::protocol::phoenix::socket::Scratch;

/// Live messages one waiting join may hold aside; past it the socket is
/// closed as a slow reader (it rejoins with `since`): the largest history.
const MAX_HELD: usize = crate::rules::MAX_HISTORY_SIZE;

/// A join waiting for its history read.
pub(crate) struct Pending {
    /// The read's number ([`ReplayAnswer::id`]).
    id: u64,
    held: HeldJoin,
    /// The topic's live messages that came meanwhile, in order.
    live: Vec<Arc<Broadcast>>,
}

impl Conns {
    /// Starts the history read of connection `key`'s join of `topic`
    /// (registry index `idx`, subscribed already) after `since`, once the
    /// node's subscription of the topic is active.
    pub(crate) fn read_later(
        &mut self,
        node: &Node,
        key: usize,
        idx: u32,
        topic: &str,
        since: &str,
        held: HeldJoin,
    ) -> bool {
        let (Some(redis), Some(rule)) = (node.history_redis.clone(), node.policy.history(topic))
        else {
            return false;
        };
        let id = self.next_read;
        self.next_read += 1;
        let live = Vec::new();
        self.pending.insert((key, idx), Pending { id, held, live });
        let this = node.this.get().cloned();
        let shard = self.id;
        let topic: Arc<str> = Arc::from(topic);
        let since = since.to_string();
        let read = {
            let topic = topic.clone();
            move || {
                let name = topic.clone();
                let then = Box::new(move |replay| {
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
                });
                redis.read(&name, Some(&since), usize::MAX, rule.size, then);
            }
        };
        node.backplane.when_subscribed(&topic, Box::new(read));
        true
    }

    /// Whether a live broadcast for subscriber `key` of topic `idx` is
    /// held aside for a join waiting for its read (and holds it).
    #[inline]
    pub(crate) fn hold(&mut self, key: usize, idx: u32, b: &Arc<Broadcast>) -> bool {
        let Some(p) = self.pending.get_mut(&(key, idx)) else {
            return false;
        };
        if p.live.len() >= MAX_HELD {
            self.pending.remove(&(key, idx));
            self.doom(Outlet::of(key), CloseReason::SlowReader);
        } else {
            p.live.push(b.clone());
        }
        true
    }

    /// The answer to a history read: the join's reply and replay, then the
    /// live messages held aside that the replay did not have.
    pub fn replay_answer(&mut self, node: &Node, scratch: &mut Scratch, a: ReplayAnswer) {
        let Some(idx) = self.registry.find(&a.topic) else {
            return;
        };
        let k = (a.key, idx);
        if self.pending.get(&k).is_none_or(|p| p.id != a.id) {
            return; // left, closed or joined again meanwhile
        }
        let Some(p) = self.pending.remove(&k) else {
            return;
        };
        let Some(vsn) = self.vsn_of(Outlet::of(a.key)) else {
            return;
        };
        let mut found = a.replay;
        // As a read in memory: a replay over half the socket's outbound
        // bound would get it closed, and rejoin, again and again.
        let bytes: usize = found.messages.iter().map(|e| e.bytes()).sum();
        if bytes > node.config.max_outbound_bytes / 2 {
            found.recovered = false;
            found.messages.clear();
        }
        let (epoch, last, recovered) = (found.epoch, found.last, found.recovered);
        let key = a.key;
        let outlet = Outlet::of(key);
        let fail = self.with_socket(node, scratch, outlet, vsn, |mux| {
            mux.since_answered(&a.topic, p.held, found)
        });
        let failed = fail.is_some();
        self.after_socket(node, scratch, outlet, fail);
        if failed {
            return;
        }
        let mut newest = 0;
        for b in &p.live {
            if recovered && b.epoch == epoch && b.offset <= last {
                continue; // in the replay
            }
            newest = b.offset;
            self.send_to(key, b, &mut crate::engine::conns::output::Sent::default());
        }
        if recovered && last > newest {
            // Live copies up to `last` may still come: skipped.
            self.replayed.insert(k, last);
        }
    }

    /// Subscriber `key` is gone: its waiting reads and replay marks too.
    pub(crate) fn history_forget(&mut self, key: usize) {
        if !self.pending.is_empty() {
            self.pending.retain(|&(k, _), _| k != key);
        }
        if !self.replayed.is_empty() {
            self.replayed.retain(|&(k, _), _| k != key);
        }
    }
}
