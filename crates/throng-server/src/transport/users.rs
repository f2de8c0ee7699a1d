//! [`Users`]: a shard's authenticated users, each once, with the keys of
//! its sockets on this shard.
//!
//! Phoenix names a user's sockets with `Socket.id/1` (`users_socket:<id>`)
//! and closes them all with a `disconnect` broadcast on that topic, which
//! costs every socket a PubSub subscription. Here a socket holds only a
//! 4-byte index into this table, the user's id is stored once per shard
//! however many tabs the user has, and a disconnect is looked up here (it
//! reaches every shard of every node through the control topic, since
//! disconnects are rare and subscriptions per user are not free: with
//! Redis, one SUBSCRIBE per user per node).
//!
//! Hand-written rather than a `HashMap<String, Vec<u32>>` because that
//! would store each id twice (key and entry) and a vector per user: the
//! index here is a `hashbrown::HashTable` of slot numbers hashed by the id
//! stored in the slot, and one socket per user (the common case) needs no
//! allocation beyond the id.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use hashbrown::HashTable;
use slab::Slab;

pub(crate) use crate::socket::NO_USER;

/// The sockets of one user on this shard.
struct User {
    id: Arc<str>,
    /// The first socket's key, then any others.
    first: u32,
    more: Vec<u32>,
}

#[derive(Default)]
pub(crate) struct Users {
    slab: Slab<User>,
    index: HashTable<u32>,
    hasher: RandomState,
}

impl Users {
    fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    /// Adds socket `key` of user `id`; returns the user's index.
    pub fn add(&mut self, id: &str, key: u32) -> u32 {
        let hash = self.hash(id);
        let slab = &self.slab;
        if let Some(&slot) = self.index.find(hash, |&s| &*slab[s as usize].id == id) {
            self.slab[slot as usize].more.push(key);
            return slot;
        }
        let slot = self.slab.insert(User {
            id: Arc::from(id),
            first: key,
            more: Vec::new(),
        }) as u32;
        let (slab, hasher) = (&self.slab, &self.hasher);
        self.index
            .insert_unique(hash, slot, |&s| hasher.hash_one(&*slab[s as usize].id));
        slot
    }

    /// Removes socket `key` from user `slot`; the user goes with its last socket.
    pub fn remove(&mut self, slot: u32, key: u32) {
        let Some(user) = self.slab.get_mut(slot as usize) else {
            return;
        };
        if user.first == key {
            match user.more.pop() {
                Some(next) => user.first = next,
                None => {
                    let user = self.slab.remove(slot as usize);
                    let hash = self.hash(&user.id);
                    if let Ok(entry) = self.index.find_entry(hash, |&s| s == slot) {
                        entry.remove();
                    }
                    return;
                }
            }
        } else if let Some(i) = user.more.iter().position(|&k| k == key) {
            user.more.swap_remove(i);
        }
        if user.more.is_empty() {
            user.more = Vec::new();
        }
    }

    /// The id of user `slot`.
    pub fn id(&self, slot: u32) -> Option<&Arc<str>> {
        self.slab.get(slot as usize).map(|u| &u.id)
    }

    /// The keys of `id`'s sockets on this shard.
    pub fn sockets(&self, id: &str) -> Vec<u32> {
        let slab = &self.slab;
        match self
            .index
            .find(self.hash(id), |&s| &*slab[s as usize].id == id)
        {
            Some(&s) => {
                let u = &slab[s as usize];
                std::iter::once(u.first)
                    .chain(u.more.iter().copied())
                    .collect()
            }
            None => Vec::new(),
        }
    }

    /// Users with a socket on this shard.
    pub fn len(&self) -> usize {
        self.slab.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_user() {
        let mut u = Users::default();
        let a = u.add("alice", 1);
        let b = u.add("bob", 2);
        assert_eq!(u.add("alice", 3), a);
        assert_ne!(a, b);
        assert_eq!(u.len(), 2);
        let mut s = u.sockets("alice");
        s.sort();
        assert_eq!(s, vec![1, 3]);
        u.remove(a, 1);
        assert_eq!(u.sockets("alice"), vec![3]);
        assert_eq!(u.id(a).map(|s| &**s), Some("alice"));
        u.remove(a, 3);
        assert!(u.sockets("alice").is_empty());
        assert_eq!(u.len(), 1);
        assert_eq!(u.sockets("bob"), vec![2]);
        // a freed slot is reused by a new user and found by its new id
        let c = u.add("carol", 4);
        assert_eq!(c, a);
        assert_eq!(u.sockets("carol"), vec![4]);
        assert!(u.sockets("alice").is_empty());
        u.remove(99, 1);
    }
}
