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
//!
//! Count mode bounds its fan-out: a topic of N keys (about N subscribers
//! cluster-wide) sends its changed count at most once per `N / rate`
//! seconds (`--presence-count-rate`), and at most once per flush (once per
//! interval), so a crowd arriving in a 100,000-key topic costs its
//! subscribers 20,000 messages a second at the default rate, not 100,000.
//! Only the clients' message waits: the flush still applies the pending
//! diff (joiners get the current count) and hands this node's changes to
//! the store; a topic whose count waits stays dirty, and the flush that
//! finds it due sends the count of that moment, if it differs from the
//! last one sent. Time comes from the caller (the shard's loop), so there
//! is no timer per topic.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

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
/// its key's hash, ~44 bytes) instead of key and meta (~150 bytes), and
/// only this node's own keep their metas (to publish and rewrite them):
/// every node keeps a copy of the topic, so in a 100,000-user topic on six
/// workers (and Redis) server memory per connection measured 1.2 KiB
/// before and 964-1,000 B after (BENCHMARKS.md).
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
    /// Every presence's key hash, by owner and sequence number (a map
    /// per owner: 16 bytes a presence instead of 24, and a dead owner's
    /// presences at hand).
    ids: HashMap<u64, HashMap<u64, u64>>,
}

impl Census {
    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    fn contains(&self, (owner, seq): Ref) -> bool {
        self.ids.get(&owner).is_some_and(|o| o.contains_key(&seq))
    }

    fn insert(&mut self, (owner, seq): Ref, h: u64) {
        self.ids.entry(owner).or_default().insert(seq, h);
    }

    fn remove(&mut self, (owner, seq): Ref) -> Option<u64> {
        let of_owner = self.ids.get_mut(&owner)?;
        let h = of_owner.remove(&seq)?;
        if of_owner.is_empty() {
            self.ids.remove(&owner);
        }
        Some(h)
    }
}

/// Another node's presence `id` in count mode, where only its name is
/// kept: an empty key and meta stand in for them. Nothing reads either
/// (only this node's own changes are published, and the census finds a
/// presence by name).
fn by_name_only((owner, seq): Ref) -> (Arc<str>, Meta) {
    static EMPTY: OnceLock<Arc<str>> = OnceLock::new();
    let meta = Meta {
        owner,
        seq,
        prev: 0,
        fields: "".into(),
    };
    (EMPTY.get_or_init(|| Arc::from("")).clone(), meta)
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

    /// `presence_state` JSON of the presences kept with their metas
    /// (`{key: {"metas": [...]}}`).
    pub fn state_json(&self) -> String {
        encode::state(self.keys.iter().map(|(k, m)| (k, m.as_slice())), self.len)
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
            Some(c) => c.contains(id),
            None => self.get(key, id).is_some(),
        }
    }

    fn insert(&mut self, key: Arc<str>, meta: Meta) {
        *self.owners.entry(meta.owner).or_default() += 1;
        self.len += 1;
        if let Some(c) = &mut self.census {
            let h = c.hash(&key);
            c.insert(meta.id(), h);
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
            let Some(h) = c.remove(id) else {
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
    /// mode) by name only ([`by_name_only`]).
    fn of_owner(&self, owner: u64) -> Vec<(Arc<str>, Meta)> {
        if !self.owners.contains_key(&owner) {
            return Vec::new();
        }
        match &self.census {
            Some(c) if owner != self.me => c
                .ids
                .get(&owner)
                .into_iter()
                .flat_map(|o| o.keys())
                .map(|&seq| by_name_only((owner, seq)))
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
    /// Count mode: the count changed but its broadcast waits for the
    /// bound (the topic stays dirty).
    pub deferred: bool,
    /// With `members` asked of [`TopicPresence::flush`] (a Pusher presence
    /// channel): each key that came (with its first presence's meta) or went
    /// in this flush, each user once however many presences it has.
    pub members: Vec<MemberChange>,
}

/// A key (user) that came or went in a flush.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberChange {
    /// Its first presence came: that meta's owner (node) and fields.
    Added(Arc<str>, u64, Box<str>),
    /// Its last presence went.
    Removed(Arc<str>),
}

/// The encoded state shared by joiners until the next flush.
pub type StateCache = Arc<OnceLock<Arc<str>>>;

/// One topic's presences on this node.
pub struct TopicPresence {
    pub mode: Mode,
    flushed: Arc<Flushed>,
    pending: Pending,
    cache: Option<StateCache>,
    /// Count mode: the count last sent, and when (`None`: never).
    sent_count: usize,
    sent_at: Option<Instant>,
    /// In its stripe's dirty list.
    pub dirty: bool,
    /// The node's flush count when its state last changed (or when it was
    /// first watched): what a Pusher member list read now is as recent as
    /// (`crate::MemberTag`). Kept by the [`Tracker`](super::Tracker).
    pub generation: u64,
}

/// A Pusher presence channel's members as a new subscriber gets them (the
/// flushed state: later changes come as member events), and what the
/// members will be once the pending changes are flushed (for the
/// channel's member limit).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members {
    /// The flush the list is as of ([`TopicPresence::generation`]).
    pub generation: u64,
    /// Each key of the flushed state once, with its first presence's
    /// fields.
    pub list: Vec<(Arc<str>, Box<str>)>,
    /// Keys once the pending changes are applied.
    pub upcoming: usize,
    /// Whether the key asked about is among those.
    pub upcoming_has_key: bool,
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
            sent_at: None,
            dirty: false,
            generation: 0,
        }
    }

    /// The members (see [`Members`]), and whether `key` will be one once
    /// the pending changes are flushed. List mode only (count mode has no
    /// key of another node).
    pub fn members(&self, key: &str) -> Members {
        let keys = &self.flushed.keys;
        let list = keys
            .iter()
            .filter_map(|(k, metas)| {
                let first = metas.iter().min_by_key(|m| m.id())?;
                Some((k.clone(), first.fields.clone()))
            })
            .collect();
        // A key is there after the flush if some presence of it is
        // pending to join, or one flushed is not pending to leave.
        let joining: HashSet<&str> = self.pending.joins.values().map(|(k, _)| &**k).collect();
        let stays = |k: &str| {
            joining.contains(k)
                || keys.get(k).is_some_and(|metas| {
                    metas
                        .iter()
                        .any(|m| !self.pending.leaves.contains_key(&m.id()))
                })
        };
        let mut changed: Vec<&Arc<str>> = self
            .pending
            .joins
            .values()
            .chain(self.pending.leaves.values())
            .map(|(k, _)| k)
            .collect();
        changed.sort();
        changed.dedup();
        let mut upcoming = keys.len();
        for k in changed {
            match (keys.contains_key(&**k), stays(k)) {
                (false, true) => upcoming += 1,
                (true, false) => upcoming -= 1,
                _ => {}
            }
        }
        Members {
            generation: self.generation,
            list,
            upcoming,
            upcoming_has_key: stays(key),
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
            None if self.flushed.contains(key, id) => by_name_only(id),
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
    /// and `me`'s own changes, or `None` when nothing is pending (and, in
    /// count mode, no count waits). In count mode a changed count goes out
    /// only once `count / count_rate` seconds have passed since the last
    /// (`count_rate` 0: no bound); until then the topic stays dirty
    /// (`self.dirty`) for its stripe to flush it again. `now` is the flush's
    /// time, the same for every topic of the flush.
    pub fn flush(
        &mut self,
        me: u64,
        now: Instant,
        count_rate: u64,
        members: bool,
    ) -> Option<Flush> {
        self.dirty = false;
        let count_waits = self.mode == Mode::Count && self.flushed.key_count() != self.sent_count;
        if self.pending.is_empty() && !count_waits {
            return None;
        }
        let pending = std::mem::take(&mut self.pending);
        let mine = |(_, m): &&(Arc<str>, Meta)| m.owner == me;
        let own = Delta {
            joins: pending.joins.values().filter(mine).cloned().collect(),
            leaves: pending.leaves.values().filter(mine).cloned().collect(),
        };
        let own_change = own.joins.len() as isize - own.leaves.len() as isize;
        let mut message = match (self.mode, pending.is_empty()) {
            (Mode::List, false) => Some((
                encode::DIFF,
                encode::diff(pending.joins.values(), pending.leaves.values()),
            )),
            _ => None,
        };
        // The keys a Pusher presence channel's members change by: those of
        // the diff, present before or not.
        let changed: Vec<(Arc<str>, bool)> = if members && self.mode == Mode::List {
            let mut keys: Vec<&Arc<str>> = pending
                .joins
                .values()
                .chain(pending.leaves.values())
                .map(|(k, _)| k)
                .collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .map(|k| (k.clone(), self.flushed.keys.contains_key(&**k)))
                .collect()
        } else {
            Vec::new()
        };
        if !pending.is_empty() {
            let state = Arc::make_mut(&mut self.flushed);
            for (id, (k, _)) in &pending.leaves {
                state.remove(k, *id);
            }
            for (_, (k, m)) in pending.joins.iter() {
                state.insert(k.clone(), m.clone());
            }
            self.cache = None;
        }
        let members = changed
            .into_iter()
            .filter_map(|(k, before)| match (before, self.flushed.keys.get(&*k)) {
                (false, Some(metas)) => {
                    let first = metas.iter().min_by_key(|m| m.id())?;
                    Some(MemberChange::Added(k, first.owner, first.fields.clone()))
                }
                (true, None) => Some(MemberChange::Removed(k)),
                _ => None,
            })
            .collect();
        let mut deferred = false;
        let count = self.flushed.key_count();
        if self.mode == Mode::Count && count != self.sent_count {
            if self.count_due(count, now, count_rate) {
                self.sent_count = count;
                self.sent_at = Some(now);
                message = Some((encode::COUNT, encode::count(count)));
            } else {
                deferred = true;
                self.dirty = true;
            }
        }
        Some(Flush {
            message,
            own,
            joined: pending.joins.len(),
            left: pending.leaves.len(),
            own_change,
            deferred,
            members,
        })
    }

    /// Whether a count of `count` may go out at `now`: `count / rate`
    /// seconds after the last one sent (the first at once).
    fn count_due(&self, count: usize, now: Instant, rate: u64) -> bool {
        match self.sent_at {
            Some(at) if rate > 0 => {
                now.saturating_duration_since(at).as_secs_f64() * rate as f64 >= count as f64
            }
            _ => true,
        }
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
mod tests;
