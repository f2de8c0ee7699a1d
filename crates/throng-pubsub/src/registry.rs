//! [`Registry`]: one shard's subscriptions, topic name to the keys of the
//! connections subscribed on that shard.
//!
//! Subscribers are sharded by connection: each event-loop shard owns the
//! connections it accepted and one registry of their subscriptions, so join
//! and leave touch only shard-local data (no lock). This is the Phoenix team's 2M-connection benchmark's fix at
//! 1.3M subscribers (a pool of pubsub servers, one table each, sharded by
//! subscriber) without the servers. Topics sit in a slab so a connection
//! refers to a topic by a 4-byte index, and knows its position in the
//! topic's list, so leaving is a `swap_remove` plus fixing the position of
//! the one subscriber that moved.

use std::collections::HashMap;
use std::sync::Arc;

use slab::Slab;

/// One topic's subscribers on one shard.
#[derive(Debug)]
pub struct Topic {
    pub name: Arc<str>,
    /// Connection keys, in no particular order.
    pub subs: Vec<u32>,
    /// The position (epoch, offset) of the last message of the topic's
    /// history this shard got, to tell a gap (`(0, 0)`: none yet).
    pub last: (u64, u64),
}

/// A shard's subscriptions.
#[derive(Default)]
pub struct Registry {
    pub topics: Slab<Topic>,
    index: HashMap<Arc<str>, u32>,
}

/// Where a subscription sits: the topic's index and the position in its list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub topic: u32,
    pub pos: u32,
}

impl Registry {
    /// The topic's index, if this shard has subscribers of it.
    pub fn find(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    /// The name of topic `idx`.
    pub fn name(&self, idx: u32) -> Option<&Arc<str>> {
        self.topics.get(idx as usize).map(|t| &t.name)
    }

    /// Adds `conn` to `name`; returns where it sits, and whether the topic is
    /// new on this shard.
    pub fn subscribe(&mut self, name: &str, conn: u32) -> (Slot, bool) {
        let (idx, new) = match self.index.get(name) {
            Some(&i) => (i, false),
            None => {
                let name: Arc<str> = Arc::from(name);
                let i = self.topics.insert(Topic {
                    name: name.clone(),
                    subs: Vec::new(),
                    last: (0, 0),
                }) as u32;
                self.index.insert(name, i);
                (i, true)
            }
        };
        let subs = &mut self.topics[idx as usize].subs;
        subs.push(conn);
        let slot = Slot {
            topic: idx,
            pos: (subs.len() - 1) as u32,
        };
        (slot, new)
    }

    /// Removes the subscriber at `slot`. Returns the connection now at
    /// `slot.pos` (which must learn its new position), and the topic's name
    /// if it has no subscriber left on this shard (it is then dropped).
    pub fn unsubscribe(&mut self, slot: Slot) -> (Option<u32>, Option<Arc<str>>) {
        let Some(topic) = self.topics.get_mut(slot.topic as usize) else {
            return (None, None);
        };
        if slot.pos as usize >= topic.subs.len() {
            return (None, None);
        }
        topic.subs.swap_remove(slot.pos as usize);
        let moved = topic.subs.get(slot.pos as usize).copied();
        if topic.subs.is_empty() {
            let t = self.topics.remove(slot.topic as usize);
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
    fn swap_remove_reports_moves() {
        let mut r = Registry::default();
        let (s0, new) = r.subscribe("a", 10);
        assert!(new && s0.pos == 0);
        let (s1, _) = r.subscribe("a", 11);
        let (s2, _) = r.subscribe("a", 12);
        assert_eq!((s1.pos, s2.pos), (1, 2));
        assert_eq!(r.unsubscribe(s0), (Some(12), None));
        assert_eq!(r.topics[s0.topic as usize].subs, vec![12, 11]);
        assert_eq!(r.unsubscribe(Slot { topic: 0, pos: 1 }), (None, None));
        let (moved, gone) = r.unsubscribe(Slot { topic: 0, pos: 0 });
        assert_eq!(moved, None);
        assert_eq!(gone.as_deref(), Some("a"));
        assert!(r.find("a").is_none());
        assert_eq!(r.unsubscribe(s0), (None, None), "a stale slot is ignored");
    }
}
