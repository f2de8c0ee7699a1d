//! [`TopicPresence`]: one topic's presences on one node, as clients have
//! been told (`Flushed`), and the changes since (`Pending`) that the next
//! interval's `presence_diff` will carry.
//!
//! Batching is merging: every change goes into the pending diff, where a
//! leave cancels a join of the same presence made in the same interval (the
//! clients never hear of either), and a join of a presence whose leave is
//! pending cancels that leave. A change that changes nothing (a join of a
//! presence already there, a leave of one not there) is dropped; this is
//! what lets the cluster replay changes without clients seeing doubles.
//! An update is a leave of the old presence and a join of the new one,
//! whose `phx_ref_prev` names the old, as Phoenix's tracker makes it.
//!
//! `presence_state` is the flushed state, not the pending one: a joiner
//! gets the state as of the last diff and then every diff after it, so it
//! hears of each change exactly once (Phoenix sends the tracker's current
//! state, which overlaps the diffs still to come). The state's JSON is
//! encoded at most once per interval, on the first join after a flush,
//! and shared by every joiner until the next flush changes it.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;

use super::encode;
use super::entry::{Meta, Ref};
use super::{Delta, Mode};

/// The metas of one key: most keys have one (one tab).
pub type Metas = SmallVec<[Meta; 1]>;

/// The presences clients have been told of, by key.
///
/// In list mode every presence with its meta (clients get them all). In
/// count mode clients only ever get the number of distinct keys, so the
/// other nodes' presences are kept as a [`Census`] (a presence's name and
/// its key's hash, ~40 bytes) instead of key and meta (~150 bytes), and
/// only this node's own keep their metas (to publish and rewrite them):
/// every node keeps a copy of the topic, so in a 100,000-user topic on six
/// workers that is the difference between 1.2 KiB and ~0.6 KiB of server
/// memory per connection.
#[derive(Clone, Default, Debug)]
pub struct Flushed {
    /// Presences with their metas: every one in list mode; in count mode
    /// this node's own.
    keys: HashMap<Arc<str>, Metas>,
    /// Metas in `keys`.
    full: usize,
    /// Count mode: every presence, without metas.
    census: Option<Census>,
    /// The node whose presences keep their metas in count mode.
    me: u64,
    /// Presences (metas) in all.
    len: usize,
    /// Presences per owner node.
    owners: HashMap<u64, usize>,
}

/// Count mode's presences: their names, and how many there are of each
/// key, keys known by a hash. Two keys with the same 64-bit hash would
/// count as one; the hasher's keys are random per topic copy (`RandomState`),
/// so a client cannot choose keys that collide.
#[derive(Clone, Debug, Default)]
struct Census {
    hasher: RandomState,
    /// Presences per key hash.
    keys: HashMap<u64, u32>,
    /// Every presence's key hash, by name.
    ids: HashMap<Ref, u64>,
}

impl Census {
    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }
}

/// The key of a pending leave of another node's presence in count mode,
/// whose key is not kept: nothing reads it (only this node's own changes
/// are published, and the census finds the presence by name).
fn unknown_key() -> Arc<str> {
    static EMPTY: OnceLock<Arc<str>> = OnceLock::new();
    EMPTY.get_or_init(|| Arc::from("")).clone()
}

impl Flushed {
    /// An empty state for a topic in `mode` on node `me`.
    fn new(mode: Mode, me: u64) -> Flushed {
        Flushed {
            census: (mode == Mode::Count).then(Census::default),
            me,
            ..Flushed::default()
        }
    }

    /// The presences of `entries` (a fetch's answer, every owner's), as a
    /// state to encode.
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a (Arc<str>, Meta)>) -> Flushed {
        let mut f = Flushed::default();
        for (k, m) in entries {
            if f.get(k, m.id()).is_none() {
                f.insert(k.clone(), m.clone());
            }
        }
        f
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Distinct keys (users).
    pub fn key_count(&self) -> usize {
        match &self.census {
            Some(c) => c.keys.len(),
            None => self.keys.len(),
        }
    }

    /// Whether [`keys`](Self::keys) has every presence with its meta (not
    /// so in count mode once another node has presences here).
    pub fn is_complete(&self) -> bool {
        self.full == self.len
    }

    /// The presences kept with their metas, by key (see
    /// [`is_complete`](Self::is_complete)).
    pub fn keys(&self) -> impl Iterator<Item = (&Arc<str>, &Metas)> {
        self.keys.iter()
    }

    fn get(&self, key: &str, id: Ref) -> Option<(&Arc<str>, &Meta)> {
        let (k, metas) = self.keys.get_key_value(key)?;
        metas.iter().find(|m| m.id() == id).map(|m| (k, m))
    }

    /// Whether presence `id` of `key` is here.
    fn contains(&self, key: &str, id: Ref) -> bool {
        match &self.census {
            Some(c) => c.ids.contains_key(&id),
            None => self.get(key, id).is_some(),
        }
    }

    fn insert(&mut self, key: Arc<str>, meta: Meta) {
        *self.owners.entry(meta.owner).or_default() += 1;
        self.len += 1;
        if let Some(c) = &mut self.census {
            let h = c.hash(&key);
            c.ids.insert(meta.id(), h);
            *c.keys.entry(h).or_default() += 1;
            if meta.owner != self.me {
                return;
            }
        }
        self.keys.entry(key).or_default().push(meta);
        self.full += 1;
    }

    fn remove(&mut self, key: &str, id: Ref) {
        if let Some(c) = &mut self.census {
            let Some(h) = c.ids.remove(&id) else {
                return;
            };
            if let Some(n) = c.keys.get_mut(&h) {
                *n -= 1;
                if *n == 0 {
                    c.keys.remove(&h);
                }
            }
            self.forget(id);
            // This node's own also have their metas.
            self.remove_full(key, id);
        } else if self.remove_full(key, id) {
            self.forget(id);
        }
    }

    /// Removes presence `id` of `key` from those kept with metas.
    fn remove_full(&mut self, key: &str, id: Ref) -> bool {
        let Some(metas) = self.keys.get_mut(key) else {
            return false;
        };
        let Some(at) = metas.iter().position(|m| m.id() == id) else {
            return false;
        };
        metas.remove(at);
        if metas.is_empty() {
            self.keys.remove(key);
        }
        self.full -= 1;
        true
    }

    /// One presence fewer in all and for its owner.
    fn forget(&mut self, id: Ref) {
        self.len -= 1;
        if let Some(n) = self.owners.get_mut(&id.0) {
            *n -= 1;
            if *n == 0 {
                self.owners.remove(&id.0);
            }
        }
    }

    /// `owner`'s presences: with their metas, or (another node's in count
    /// mode) by name only, under [`unknown_key`] with an empty meta.
    fn of_owner(&self, owner: u64) -> Vec<(Arc<str>, Meta)> {
        if !self.owners.contains_key(&owner) {
            return Vec::new();
        }
        match &self.census {
            Some(c) if owner != self.me => c
                .ids
                .keys()
                .filter(|id| id.0 == owner)
                .map(|&(owner, seq)| {
                    let meta = Meta {
                        owner,
                        seq,
                        prev: 0,
                        fields: "".into(),
                    };
                    (unknown_key(), meta)
                })
                .collect(),
            _ => self
                .keys
                .iter()
                .flat_map(|(k, ms)| {
                    ms.iter()
                        .filter(move |m| m.owner == owner)
                        .map(move |m| (k.clone(), m.clone()))
                })
                .collect(),
        }
    }
}

/// Changes since the last flush, merged.
#[derive(Default, Debug)]
pub struct Pending {
    pub joins: HashMap<Ref, (Arc<str>, Meta)>,
    pub leaves: HashMap<Ref, (Arc<str>, Meta)>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.joins.is_empty() && self.leaves.is_empty()
    }
}

/// What one flush produced: the message for local subscribers, if any, and
/// this node's own changes for the other nodes.
pub struct Flush {
    /// (event, payload JSON) to broadcast to the node's subscribers.
    pub message: Option<(&'static str, String)>,
    /// The owner's part of the changes (for the store).
    pub own: Delta,
    /// Presences joined and left in the diff.
    pub joined: usize,
    pub left: usize,
    /// Change in this node's own presences.
    pub own_change: isize,
}

/// The encoded state shared by joiners until the next flush.
pub type StateCache = Arc<OnceLock<Arc<str>>>;

/// One topic's presences on this node.
pub struct TopicPresence {
    pub mode: Mode,
    flushed: Arc<Flushed>,
    pending: Pending,
    cache: Option<StateCache>,
    /// Count mode: the count last sent.
    sent_count: usize,
    /// In its stripe's dirty list.
    pub dirty: bool,
}

impl TopicPresence {
    /// A topic in `mode` on node `me`.
    pub fn new(mode: Mode, me: u64) -> TopicPresence {
        TopicPresence {
            mode,
            flushed: Arc::new(Flushed::new(mode, me)),
            pending: Pending::default(),
            cache: None,
            sent_count: 0,
            dirty: false,
        }
    }

    /// Presences clients have been told of.
    pub fn flushed(&self) -> &Flushed {
        &self.flushed
    }

    /// `meta` appears under `key`. True if the pending diff changed.
    pub fn join(&mut self, key: Arc<str>, meta: Meta) -> bool {
        let id = meta.id();
        if self.pending.leaves.remove(&id).is_some() {
            return true;
        }
        if self.pending.joins.contains_key(&id) || self.flushed.contains(&key, id) {
            return false;
        }
        self.pending.joins.insert(id, (key, meta));
        true
    }

    /// Presence `id` of `key` goes. True if the pending diff changed.
    pub fn leave(&mut self, key: &str, id: Ref) -> bool {
        if self.pending.joins.remove(&id).is_some() {
            return true;
        }
        if self.pending.leaves.contains_key(&id) {
            return false;
        }
        let entry = match self.flushed.get(key, id) {
            Some((k, m)) => (k.clone(), m.clone()),
            // Count mode keeps another node's presence by name only.
            None if self.flushed.contains(key, id) => (
                unknown_key(),
                Meta {
                    owner: id.0,
                    seq: id.1,
                    prev: 0,
                    fields: "".into(),
                },
            ),
            None => return false,
        };
        self.pending.leaves.insert(id, entry);
        true
    }

    /// Everything `owner` has here now: flushed, less pending leaves, plus
    /// pending joins.
    pub fn owned_by(&self, owner: u64) -> Vec<(Arc<str>, Meta)> {
        let mut out = self.flushed.of_owner(owner);
        out.retain(|(_, m)| !self.pending.leaves.contains_key(&m.id()));
        out.extend(
            self.pending
                .joins
                .values()
                .filter(|(_, m)| m.owner == owner)
                .cloned(),
        );
        out
    }

    /// The metas of `key` owned by `owner` now.
    pub fn find(&self, key: &str, id: Ref) -> Option<Meta> {
        if self.pending.leaves.contains_key(&id) {
            return None;
        }
        if let Some((_, m)) = self.pending.joins.get(&id) {
            return Some(m.clone());
        }
        self.flushed.get(key, id).map(|(_, m)| m.clone())
    }

    /// `owner`'s presences here become exactly `entries`. True if the
    /// pending diff changed.
    pub fn replace(&mut self, owner: u64, entries: Vec<(Arc<str>, Meta)>) -> bool {
        let wanted: HashSet<Ref> = entries.iter().map(|(_, m)| m.id()).collect();
        let mut changed = false;
        for (k, m) in self.owned_by(owner) {
            if !wanted.contains(&m.id()) {
                changed |= self.leave(&k, m.id());
            }
        }
        for (k, m) in entries {
            if m.owner == owner {
                changed |= self.join(k, m);
            }
        }
        changed
    }

    /// Every owner with presences here (flushed or pending).
    pub fn owners(&self) -> impl Iterator<Item = u64> + '_ {
        self.flushed
            .owners
            .keys()
            .copied()
            .chain(self.pending.joins.keys().map(|id| id.0))
    }

    /// Applies the pending diff: returns the message for local subscribers
    /// and `me`'s own changes, or `None` when nothing is pending.
    pub fn flush(&mut self, me: u64) -> Option<Flush> {
        self.dirty = false;
        if self.pending.is_empty() {
            return None;
        }
        let pending = std::mem::take(&mut self.pending);
        let mine = |(_, m): &&(Arc<str>, Meta)| m.owner == me;
        let own = Delta {
            joins: pending.joins.values().filter(mine).cloned().collect(),
            leaves: pending.leaves.values().filter(mine).cloned().collect(),
        };
        let own_change = own.joins.len() as isize - own.leaves.len() as isize;
        let mut message = match self.mode {
            Mode::List => Some((
                encode::DIFF,
                encode::diff(pending.joins.values(), pending.leaves.values()),
            )),
            Mode::Count => None,
        };
        let state = Arc::make_mut(&mut self.flushed);
        for (id, (k, _)) in &pending.leaves {
            state.remove(k, *id);
        }
        for (_, (k, m)) in pending.joins.iter() {
            state.insert(k.clone(), m.clone());
        }
        self.cache = None;
        if self.mode == Mode::Count && state.key_count() != self.sent_count {
            self.sent_count = state.key_count();
            message = Some((encode::COUNT, encode::count(self.sent_count)));
        }
        Some(Flush {
            message,
            own,
            joined: pending.joins.len(),
            left: pending.leaves.len(),
            own_change,
        })
    }

    /// What a joiner gets: in count mode the payload itself; in list mode
    /// the flushed state and the cell its JSON is (or will be) encoded in,
    /// to encode outside the lock.
    pub fn state(&mut self) -> StateSource {
        match self.mode {
            Mode::Count => StateSource::Ready(encode::count(self.flushed.key_count()).into()),
            Mode::List => {
                let cache = self.cache.get_or_insert_with(Default::default).clone();
                match cache.get() {
                    Some(json) => StateSource::Ready(json.clone()),
                    None => StateSource::Encode(self.flushed.clone(), cache),
                }
            }
        }
    }
}

/// See [`TopicPresence::state`].
pub enum StateSource {
    Ready(Arc<str>),
    Encode(Arc<Flushed>, StateCache),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(owner: u64, seq: u64) -> Meta {
        Meta {
            owner,
            seq,
            prev: 0,
            fields: "".into(),
        }
    }

    fn diff(t: &mut TopicPresence) -> serde_json::Value {
        let f = t.flush(1).expect("something pending");
        serde_json::from_str(&f.message.unwrap().1).unwrap()
    }

    fn refs(v: &serde_json::Value, side: &str, key: &str) -> Vec<String> {
        v[side][key]["metas"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| m["phx_ref"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn join_then_leave_in_one_interval_is_nothing() {
        let mut t = TopicPresence::new(Mode::List, 1);
        assert!(t.join("alice".into(), meta(1, 1)));
        assert!(t.leave("alice", (1, 1)));
        assert!(t.flush(1).is_none(), "clients hear of neither");
        assert!(t.flushed().is_empty());
    }

    #[test]
    fn many_joins_are_one_diff() {
        let mut t = TopicPresence::new(Mode::List, 1);
        for seq in 1..=1000 {
            t.join(format!("u{seq}").into(), meta(1, seq));
        }
        t.join("u1".into(), meta(2, 1)); // a second tab of u1, on another node
        let f = t.flush(1).unwrap();
        assert_eq!((f.joined, f.left), (1001, 0));
        assert_eq!(
            f.own.joins.len(),
            1000,
            "node 2's join is not ours to publish"
        );
        let v: serde_json::Value = serde_json::from_str(&f.message.unwrap().1).unwrap();
        assert_eq!(v["joins"].as_object().unwrap().len(), 1000);
        assert_eq!(refs(&v, "joins", "u1").len(), 2);
        assert!(v["leaves"].as_object().unwrap().is_empty());
        assert!(t.flush(1).is_none(), "nothing pending after a flush");
        assert_eq!((t.flushed().len(), t.flushed().key_count()), (1001, 1000));
    }

    #[test]
    fn leave_then_rejoin_of_a_known_presence_is_nothing() {
        let mut t = TopicPresence::new(Mode::List, 1);
        t.join("bob".into(), meta(2, 5));
        t.flush(1);
        assert!(t.leave("bob", (2, 5)));
        assert!(
            t.join("bob".into(), meta(2, 5)),
            "a replayed join cancels the leave"
        );
        assert!(t.flush(1).is_none());
        assert_eq!(t.flushed().len(), 1);
    }

    #[test]
    fn replays_change_nothing() {
        let mut t = TopicPresence::new(Mode::List, 1);
        t.join("bob".into(), meta(2, 5));
        assert!(!t.join("bob".into(), meta(2, 5)));
        t.flush(1);
        assert!(!t.join("bob".into(), meta(2, 5)), "already there");
        assert!(!t.leave("carol", (2, 9)), "never there");
        assert!(t.leave("bob", (2, 5)));
        assert!(!t.leave("bob", (2, 5)), "already leaving");
        let v = diff(&mut t);
        assert_eq!(refs(&v, "leaves", "bob").len(), 1);
        assert!(v["joins"].as_object().unwrap().is_empty());
    }

    #[test]
    fn update_is_a_leave_and_a_join_with_prev() {
        let mut t = TopicPresence::new(Mode::List, 1);
        t.join("alice".into(), meta(1, 1));
        t.flush(1);
        // as Tracker::update does it
        t.leave("alice", (1, 1));
        t.join(
            "alice".into(),
            Meta {
                owner: 1,
                seq: 2,
                prev: 1,
                fields: r#""status":"away""#.into(),
            },
        );
        let v = diff(&mut t);
        let old = super::super::entry::phx_ref(1, 1);
        assert_eq!(refs(&v, "leaves", "alice"), vec![old.clone()]);
        let joined = &v["joins"]["alice"]["metas"][0];
        assert_eq!(joined["phx_ref_prev"], old.as_str());
        assert_eq!(joined["status"], "away");
        // updated twice in one interval: clients see the last meta only, the
        // first never having been announced
        t.leave("alice", (1, 2));
        t.join("alice".into(), meta(1, 3));
        t.leave("alice", (1, 3));
        t.join(
            "alice".into(),
            Meta {
                owner: 1,
                seq: 4,
                prev: 3,
                fields: "".into(),
            },
        );
        let v = diff(&mut t);
        assert_eq!(
            refs(&v, "leaves", "alice"),
            vec![super::super::entry::phx_ref(1, 2)]
        );
        assert_eq!(
            refs(&v, "joins", "alice"),
            vec![super::super::entry::phx_ref(1, 4)]
        );
        assert_eq!(t.flushed().len(), 1);
    }

    #[test]
    fn replace_and_drop_owner() {
        let mut t = TopicPresence::new(Mode::List, 1);
        t.join("a".into(), meta(2, 1));
        t.join("b".into(), meta(2, 2));
        t.join("c".into(), meta(3, 1));
        t.flush(1);
        // owner 2 now has b and d
        assert!(t.replace(2, vec![("b".into(), meta(2, 2)), ("d".into(), meta(2, 3))]));
        let v = diff(&mut t);
        assert_eq!(refs(&v, "leaves", "a").len(), 1);
        assert_eq!(refs(&v, "joins", "d").len(), 1);
        assert!(v["joins"].get("b").is_none() && v["leaves"].get("b").is_none());
        assert!(!t.replace(2, vec![("b".into(), meta(2, 2)), ("d".into(), meta(2, 3))]));
        assert!(t.replace(2, vec![]));
        let v = diff(&mut t);
        assert_eq!(v["leaves"].as_object().unwrap().len(), 2);
        assert_eq!(t.owners().collect::<Vec<_>>(), vec![3]);
    }

    #[test]
    fn state_is_the_flushed_state_encoded_once() {
        let mut t = TopicPresence::new(Mode::List, 1);
        t.join("a".into(), meta(1, 1));
        t.flush(1);
        t.join("b".into(), meta(1, 2)); // pending: not in the state yet
        let StateSource::Encode(flushed, cell) = t.state() else {
            panic!("nothing encoded yet")
        };
        let json = cell.get_or_init(|| encode::state(&flushed).into()).clone();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 1);
        assert!(v.get("a").is_some());
        let StateSource::Ready(again) = t.state() else {
            panic!("encoded once per interval")
        };
        assert!(Arc::ptr_eq(&again, &json));
        t.flush(1);
        assert!(
            matches!(t.state(), StateSource::Encode(..)),
            "a flush invalidates it"
        );
    }

    #[test]
    fn count_mode_sends_counts_when_they_change() {
        let mut t = TopicPresence::new(Mode::Count, 1);
        t.join("a".into(), meta(1, 1));
        t.join("a".into(), meta(1, 2)); // a second tab: still one user
        let f = t.flush(1).unwrap();
        assert_eq!(
            f.message,
            Some((encode::COUNT, r#"{"count":1}"#.to_string()))
        );
        t.join("b".into(), meta(2, 1));
        t.leave("b", (2, 1));
        assert!(t.flush(1).is_none());
        t.leave("a", (1, 2));
        let f = t.flush(1).unwrap();
        assert_eq!(f.message, None, "still one user");
        assert_eq!(f.own.leaves.len(), 1, "but the leave is replicated");
        let StateSource::Ready(s) = t.state() else {
            panic!()
        };
        assert_eq!(&*s, r#"{"count":1}"#);
    }

    /// Count mode keeps other nodes' presences as a census: counted,
    /// replaced and dropped by name, without their keys or metas; this
    /// node's own keep their metas.
    #[test]
    fn count_mode_keeps_a_census_of_other_nodes() {
        let mut t = TopicPresence::new(Mode::Count, 1);
        let own = Meta {
            owner: 1,
            seq: 1,
            prev: 0,
            fields: r#""tab":1"#.into(),
        };
        t.join("a".into(), own.clone());
        t.join("a".into(), meta(2, 1)); // a's second tab, on node 2
        t.join("b".into(), meta(2, 2));
        t.join("c".into(), meta(3, 1));
        let f = t.flush(1).unwrap();
        assert_eq!(f.message.unwrap().1, r#"{"count":3}"#);
        assert_eq!((t.flushed().len(), t.flushed().key_count()), (4, 3));
        assert!(!t.flushed().is_complete(), "only node 1's metas are kept");
        let kept: Vec<_> = t
            .flushed()
            .keys()
            .map(|(k, m)| (k.to_string(), m.len()))
            .collect();
        assert_eq!(kept, vec![("a".to_string(), 1)]);
        assert_eq!(t.owned_by(1), vec![("a".into(), own)], "with its meta");
        assert!(!t.join("c".into(), meta(3, 1)), "a replay changes nothing");
        // node 2 leaves b, then its snapshot says it has nothing more
        assert!(t.leave("b", (2, 2)));
        assert!(!t.leave("b", (2, 2)));
        let f = t.flush(1).unwrap();
        assert_eq!(f.message.unwrap().1, r#"{"count":2}"#);
        assert!(f.own.is_empty(), "another node's leave is not published");
        assert_eq!(t.owned_by(2).len(), 1);
        assert!(t.replace(2, vec![]));
        let f = t.flush(1).unwrap();
        assert_eq!(f.message, None, "a is still there (node 1's tab)");
        assert_eq!(t.flushed().len(), 2);
        // node 3 dies
        assert!(t.replace(3, vec![]));
        let f = t.flush(1).unwrap();
        assert_eq!(f.message.unwrap().1, r#"{"count":1}"#);
        assert!(t.flushed().is_complete(), "only node 1's presence is left");
        assert_eq!(t.owners().collect::<Vec<_>>(), vec![1]);
        assert!(t.leave("a", (1, 1)));
        let f = t.flush(1).unwrap();
        assert_eq!(
            f.own.leaves.len(),
            1,
            "its own leave is published, with its key"
        );
        assert_eq!(&*f.own.leaves[0].0, "a");
        assert!(t.flushed().is_empty());
    }
}
