//! [`Users`]: the authenticated user of each socket on a shard, found both
//! ways: a socket's user id from its registry key, and a user's sockets
//! from the id.
//!
//! Phoenix names a user's sockets with `Socket.id/1` (`users_socket:<id>`)
//! and closes them all with a `disconnect` broadcast on that topic, which
//! costs every socket a PubSub subscription. Here a disconnect is looked up
//! in this table (it reaches every shard of every node through the control
//! topic, since disconnects are rare and subscriptions per user are not
//! free: with Redis, one SUBSCRIBE per user per node).
//!
//! Hand-written for memory, which is the point of this server: with auth
//! on, every socket pays for this table. A `HashMap<String, Vec<u32>>`
//! stores each id twice plus a vector and a heap string per user (96 B a
//! socket measured when every socket is its own user, the common case).
//! Here each socket's id sits in a 16-byte [`Id`], inline up to 14 bytes,
//! in a vector indexed by the socket's key, and the lookup by id is a
//! `hashbrown::HashTable` of the sockets' keys hashed by their id (one
//! entry per socket, a user's further tabs being further entries with the
//! same hash): about 16 B plus 5 to 10 B of table a socket. A user's id is
//! stored once per socket rather than once per user, which costs a user
//! with several tabs 16 B a further tab and saves every user a list.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use hashbrown::HashTable;

use super::outlet::Outlet;

/// A user id: inline up to [`Id::INLINE`] bytes, else shared on the heap
/// (a clone is then a reference count, never a copy of the text).
#[derive(Clone, Default)]
pub(crate) enum Id {
    #[default]
    None,
    Inline(u8, [u8; Id::INLINE]),
    Heap(Arc<Box<str>>),
}

const _: () = assert!(std::mem::size_of::<Id>() == 16);

impl Id {
    /// The longest id stored inline.
    pub const INLINE: usize = 14;

    fn new(id: &str) -> Id {
        if id.len() <= Id::INLINE {
            let mut b = [0u8; Id::INLINE];
            b[..id.len()].copy_from_slice(id.as_bytes());
            Id::Inline(id.len() as u8, b)
        } else {
            Id::Heap(Arc::new(id.into()))
        }
    }

    /// The id's text ("" for `None`).
    pub fn as_str(&self) -> &str {
        match self {
            Id::None => "",
            // Only ever made from a `&str` cut at its length.
            Id::Inline(n, b) => std::str::from_utf8(&b[..*n as usize]).unwrap_or_default(),
            Id::Heap(s) => s,
        }
    }
}

#[derive(Default)]
pub(crate) struct Users {
    /// The id of each WebSocket's user, by connection key.
    ws: Vec<Id>,
    /// The id of each long-poll session's user, by session index.
    sessions: Vec<Id>,
    /// Registry keys of the sockets with a user, hashed by their user's id.
    index: HashTable<u32>,
    hasher: RandomState,
    /// Distinct users.
    distinct: usize,
}

impl Users {
    fn slot(&self, key: u32) -> Option<&Id> {
        match Outlet::of(key as usize) {
            Outlet::Conn(k) => self.ws.get(k),
            Outlet::Session(i) => self.sessions.get(i),
        }
    }

    fn slot_mut(&mut self, key: u32) -> &mut Id {
        let (v, i) = match Outlet::of(key as usize) {
            Outlet::Conn(k) => (&mut self.ws, k),
            Outlet::Session(i) => (&mut self.sessions, i),
        };
        if v.len() <= i {
            v.resize(i + 1, Id::None);
        }
        &mut v[i]
    }

    /// Whether a socket other than `key` of user `id` (hashed `hash`) is here.
    fn another(&self, hash: u64, id: &str, key: u32) -> bool {
        self.index
            .iter_hash(hash)
            .any(|&k| k != key && self.slot(k).is_some_and(|s| s.as_str() == id))
    }

    /// Adds socket `key` (its registry key) of user `id`. A socket's end
    /// removes it (`Shard::settle`, once its protocol ended it), so a key reused by another socket
    /// has no user until one is added.
    pub fn add(&mut self, id: &str, key: u32) {
        self.remove(key);
        let hash = self.hasher.hash_one(id);
        if !self.another(hash, id, key) {
            self.distinct += 1;
        }
        *self.slot_mut(key) = Id::new(id);
        let (ws, sessions, hasher) = (&self.ws, &self.sessions, &self.hasher);
        self.index.insert_unique(hash, key, |&k| {
            let s = match Outlet::of(k as usize) {
                Outlet::Conn(k) => &ws[k],
                Outlet::Session(i) => &sessions[i],
            };
            hasher.hash_one(s.as_str())
        });
    }

    /// Removes socket `key`; its user goes with its last socket here.
    pub fn remove(&mut self, key: u32) {
        let id = match self.slot(key) {
            None | Some(Id::None) => return,
            Some(_) => std::mem::take(self.slot_mut(key)),
        };
        let hash = self.hasher.hash_one(id.as_str());
        if let Ok(entry) = self.index.find_entry(hash, |&k| k == key) {
            entry.remove();
        }
        if !self.another(hash, id.as_str(), key) {
            self.distinct -= 1;
        }
    }

    /// The user id of socket `key`, if it has one: a copy of 16 bytes (or
    /// a reference count), so the caller may change the table meanwhile.
    pub fn id(&self, key: u32) -> Option<Id> {
        self.slot(key).filter(|s| !matches!(s, Id::None)).cloned()
    }

    /// The registry keys of `id`'s sockets on this shard.
    pub fn sockets(&self, id: &str) -> Vec<u32> {
        self.index
            .iter_hash(self.hasher.hash_one(id))
            .copied()
            .filter(|&k| self.slot(k).is_some_and(|s| s.as_str() == id))
            .collect()
    }

    /// Users with a socket on this shard.
    pub fn len(&self) -> usize {
        self.distinct
    }

    /// Sockets with a user on this shard.
    pub fn sockets_len(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: u32 = 1 << 31;

    fn sorted(mut v: Vec<u32>) -> Vec<u32> {
        v.sort();
        v
    }

    #[test]
    fn a_users_sockets_are_found_by_id_and_each_socket_by_key() {
        let mut u = Users::default();
        u.add("alice", 1);
        u.add("bob", 2);
        u.add("alice", 3);
        u.add("alice", SESSION | 4);
        assert_eq!(u.len(), 2);
        assert_eq!(sorted(u.sockets("alice")), vec![1, 3, SESSION | 4]);
        assert_eq!(u.id(SESSION | 4).unwrap().as_str(), "alice");
        u.remove(1);
        assert_eq!(sorted(u.sockets("alice")), vec![3, SESSION | 4]);
        assert!(u.id(1).is_none());
        u.remove(3);
        u.remove(SESSION | 4);
        assert!(u.sockets("alice").is_empty());
        assert_eq!(u.len(), 1);
        assert_eq!(u.sockets("bob"), vec![2]);
        // a freed key is reused by a new user and found by its new id
        u.add("carol", 1);
        assert_eq!(u.sockets("carol"), vec![1]);
        assert!(u.sockets("alice").is_empty());
        // removing what is not there changes nothing
        u.remove(99);
        u.remove(1);
        u.remove(1);
        assert_eq!(u.len(), 1);
    }

    #[test]
    fn long_ids_and_short_ids_are_the_same_text() {
        let mut u = Users::default();
        let long = "0b5e7d8c-2f4a-4c1e-9a3b-7d6e5f4a3b2c";
        u.add(long, 5);
        u.add("exactly14bytes", 6);
        u.add("", 7);
        assert_eq!(u.id(5).unwrap().as_str(), long);
        assert_eq!(u.id(6).unwrap().as_str(), "exactly14bytes");
        assert_eq!(u.sockets(long), vec![5]);
        assert_eq!(u.sockets(""), vec![7]);
        assert!(matches!(u.id(6), Some(Id::Inline(..))));
        assert!(matches!(u.id(5), Some(Id::Heap(..))));
        assert_eq!(u.len(), 3);
    }

    #[test]
    fn a_socket_added_twice_has_its_latest_user() {
        let mut u = Users::default();
        u.add("alice", 1);
        u.add("bob", 1);
        assert!(u.sockets("alice").is_empty());
        assert_eq!(u.sockets("bob"), vec![1]);
        assert_eq!(u.len(), 1);
    }

    proptest::proptest! {
        /// Any sequence of adds and removes agrees with a plain model.
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((0u32..12, 0u8..5, proptest::bool::ANY), 0..200)) {
            let mut u = Users::default();
            let mut model: std::collections::HashMap<u32, String> = Default::default();
            for (k, user, add) in ops {
                let key = if k % 2 == 0 { k } else { SESSION | k };
                if add {
                    let id = if user == 4 { "a-user-id-longer-than-fourteen".to_string() } else { format!("u{user}") };
                    u.add(&id, key);
                    model.insert(key, id);
                } else {
                    u.remove(key);
                    model.remove(&key);
                }
                let distinct: std::collections::HashSet<&String> = model.values().collect();
                proptest::prop_assert_eq!(u.len(), distinct.len());
                proptest::prop_assert_eq!(u.sockets_len(), model.len());
                for id in &distinct {
                    let mut want: Vec<u32> = model.iter().filter(|(_, v)| v == id).map(|(k, _)| *k).collect();
                    want.sort();
                    proptest::prop_assert_eq!(sorted(u.sockets(id)), want);
                }
                for (k, id) in &model {
                    proptest::prop_assert_eq!(u.id(*k).map(|i| i.as_str().to_string()), Some(id.clone()));
                }
            }
        }
    }
}
