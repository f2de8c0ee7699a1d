//! [`NodeTopics`]: which shards of this node have subscribers of each topic.
//!
//! A broadcast made on one shard goes to the other shards that have
//! subscribers of its topic, and a backplane subscribes the node to a topic
//! when its first shard gains a subscriber and unsubscribes when the last
//! one loses it. The map is behind one mutex, taken only on those first and
//! last events and once per broadcast, never per join or per leave of a
//! topic that already has local subscribers on that shard.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most shards a node may run (`--shards`), the size of a [`ShardSet`].
pub const MAX_SHARDS: usize = 256;

/// A set of shard indexes `0..MAX_SHARDS`, as a bit set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardSet([u64; MAX_SHARDS / 64]);

impl ShardSet {
    /// Adds `shard`; true if it was not there. Panics past [`MAX_SHARDS`]
    /// (the configuration refuses more shards).
    pub fn insert(&mut self, shard: usize) -> bool {
        let (w, b) = (shard / 64, 1u64 << (shard % 64));
        let was = self.0[w] & b != 0;
        self.0[w] |= b;
        !was
    }

    pub fn remove(&mut self, shard: usize) {
        if let Some(w) = self.0.get_mut(shard / 64) {
            *w &= !(1u64 << (shard % 64));
        }
    }

    pub fn contains(&self, shard: usize) -> bool {
        self.0
            .get(shard / 64)
            .is_some_and(|w| w & (1u64 << (shard % 64)) != 0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The shards in the set, in order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &word)| {
            (0..64)
                .filter(move |b| word & (1u64 << b) != 0)
                .map(move |b| w * 64 + b)
        })
    }
}

/// The node's topics and, for each, the shards with subscribers.
#[derive(Default)]
pub struct NodeTopics {
    map: Mutex<HashMap<Arc<str>, ShardSet>>,
}

impl NodeTopics {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, ShardSet>> {
        // A panic elsewhere cannot leave the map half-written: every change
        // is one insert or remove.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `shard` as subscribed; true if the node had no subscriber before.
    pub fn add(&self, topic: &Arc<str>, shard: usize) -> bool {
        let mut map = self.map();
        let set = map.entry(topic.clone()).or_default();
        let first = set.is_empty();
        set.insert(shard);
        first
    }

    /// Clears `shard`; true if the node has no subscriber left.
    pub fn remove(&self, topic: &str, shard: usize) -> bool {
        let mut map = self.map();
        match map.get_mut(topic) {
            Some(set) => {
                set.remove(shard);
                if set.is_empty() {
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
    pub fn shards(&self, topic: &str) -> ShardSet {
        self.map().get(topic).copied().unwrap_or_default()
    }

    /// Whether any shard has a subscriber of `topic`.
    pub fn contains(&self, topic: &str) -> bool {
        self.map().contains_key(topic)
    }

    /// Every topic with a subscriber on this node (for re-subscribing).
    pub fn names(&self) -> Vec<Arc<str>> {
        self.map().keys().cloned().collect()
    }

    /// How many topics have a subscriber on this node.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_and_last() {
        let n = NodeTopics::default();
        let t: Arc<str> = "x".into();
        assert!(n.add(&t, 0));
        assert!(!n.add(&t, 1));
        assert_eq!(n.shards("x").iter().collect::<Vec<_>>(), vec![0, 1]);
        assert!(!n.remove("x", 0));
        assert!(n.remove("x", 1));
        assert!(n.is_empty());
    }

    /// With 130 shards, shard 64 and shard 0 (and 128 and 0) are different
    /// shards: a 64-bit mask indexed `shard % 64` made them one, and shard
    /// 64's subscribers silently stopped getting broadcasts once shard 0
    /// left the topic.
    #[test]
    fn shards_past_64_do_not_alias() {
        let n = NodeTopics::default();
        let t: Arc<str> = "t".into();
        for shard in [0, 64, 128, 129] {
            n.add(&t, shard);
        }
        assert!(!n.remove("t", 0));
        let set = n.shards("t");
        assert!(!set.contains(0));
        assert!(set.contains(64) && set.contains(128) && set.contains(129));
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![64, 128, 129]);
        let mut all = ShardSet::default();
        for s in 0..130 {
            assert!(all.insert(s));
        }
        assert_eq!(all.iter().count(), 130);
        assert!(!all.insert(77));
    }
}
