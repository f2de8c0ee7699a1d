//! [`Tracker`]: a node's presence, every topic it watches, behind
//! [`STRIPES`] mutexes chosen by topic hash (no global lock: a join or leave
//! locks one stripe for a few hash operations). It is the store's
//! [`PresenceSink`].
//!
//! Concurrency: the shards call `track`/`update`/`untrack`/`state` for
//! their sockets and `flush_shard` for their share of the stripes (stripe
//! `i` is flushed by shard `i % shards`); the store's thread calls the sink
//! methods. Lock order: a stripe, then (inside `unwatch`'s check) the node's
//! topic map; a stripe is never taken while that map is held, and never two
//! stripes at once. A store's methods may be called under a stripe lock (they
//! only queue), which keeps one topic's changes in order to the store.
//!
//! A count-mode topic whose `presence_count` waits for the count bound
//! (see [`TopicPresence`]) stays in its stripe's dirty list, so each flush
//! looks at it again (a comparison) until it goes out.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use throng_protocol::{Family, OwnedPayload, PUSHER_TOPIC_PREFIX};

use super::encode;
use super::entry::Meta;
use super::topic::{MemberChange, Members, StateSource, TopicPresence};
use super::{Delta, Entries, Mode, PresenceSink, PresenceStore};
use crate::metrics::{Metric, Sink};
use crate::{Broadcast, MemberTag};

/// Stripes of the topic map.
pub const STRIPES: usize = 64;

#[derive(Default)]
struct Stripe {
    topics: HashMap<Arc<str>, TopicPresence>,
    /// Topics with pending changes (or a count that waits), each once.
    dirty: Vec<Arc<str>>,
}

/// Node-wide presence counters (`/metrics`).
#[derive(Default, Debug)]
pub struct PresenceStats {
    /// Topics this node watches.
    pub topics: AtomicI64,
    /// Presences in this node's copies (all owners).
    pub entries: AtomicI64,
    /// Presences this node owns.
    pub local_entries: AtomicI64,
    /// `presence_diff`/`presence_count` broadcasts made (one per topic per
    /// interval with changes, before fan-out).
    pub diffs: AtomicU64,
    /// Payload bytes of those broadcasts.
    pub diff_bytes: AtomicU64,
    /// Joins and leaves those diffs carried.
    pub changes: AtomicU64,
    /// `presence_state` encodings (at most one per topic per interval).
    pub state_encodes: AtomicU64,
    /// Count mode: flushes whose changed count waited for the count bound
    /// (one per topic per interval it waited).
    pub counts_deferred: AtomicU64,
}

/// A presence payload for one joiner: the event and its JSON, shared.
#[derive(Clone, Debug)]
pub struct State {
    pub event: &'static str,
    pub json: Arc<str>,
}

/// A node's presence.
pub struct Tracker {
    me: u64,
    store: Arc<dyn PresenceStore>,
    stripes: Box<[Mutex<Stripe>]>,
    seq: AtomicU64,
    /// Flushes that changed a Pusher presence channel's state, node-wide:
    /// each such flush takes the next number, which tags its member events
    /// and dates the member lists read after it (`crate::MemberTag`).
    generation: AtomicU64,
    /// Count mode: `presence_count` broadcasts per second per topic, about,
    /// cluster-wide (`--presence-count-rate`; 0: one per interval).
    count_rate: u64,
    pub stats: PresenceStats,
}

fn stripe_of(topic: &str) -> usize {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(topic) as usize % STRIPES
}

impl Tracker {
    /// A tracker on `store`, attached to it as its sink, whose count-mode
    /// topics send a changed count every flush (no count bound).
    pub fn new(store: Arc<dyn PresenceStore>) -> Arc<Tracker> {
        Tracker::with_count_rate(store, 0)
    }

    /// A tracker whose count-mode topic of N keys sends a changed count at
    /// most once per `N / count_rate` seconds (and per flush); 0: no bound.
    pub fn with_count_rate(store: Arc<dyn PresenceStore>, count_rate: u64) -> Arc<Tracker> {
        let tracker = Arc::new(Tracker {
            me: store.node_id(),
            store,
            stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
            seq: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            count_rate,
            stats: PresenceStats::default(),
        });
        let sink: Weak<dyn PresenceSink> = Arc::downgrade(&tracker) as Weak<dyn PresenceSink>;
        tracker.store.attach(sink);
        tracker
    }

    /// This node's owner id.
    pub fn node_id(&self) -> u64 {
        self.me
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn PresenceStore> {
        &self.store
    }

    fn lock(&self, i: usize) -> MutexGuard<'_, Stripe> {
        // Every change under a stripe lock is a few map operations that
        // leave it consistent; a panic elsewhere does not poison it.
        self.stripes[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on `topic`, watching it first if needed; marks it dirty if
    /// `f` says the pending diff changed. True if the topic is newly watched.
    fn with_topic(
        &self,
        topic: &Arc<str>,
        mode: Mode,
        f: impl FnOnce(&mut TopicPresence) -> bool,
    ) -> bool {
        let mut stripe = self.lock(stripe_of(topic));
        let stripe = &mut *stripe;
        let mut new = false;
        let tp = stripe.topics.entry(topic.clone()).or_insert_with(|| {
            new = true;
            let mut tp = TopicPresence::new(mode, self.me);
            // Newer than any member event made before (an earlier watch's).
            tp.generation = self.generation.load(Relaxed);
            tp
        });
        if new {
            self.stats.topics.fetch_add(1, Relaxed);
            self.store.watch(topic);
        }
        if f(tp) && !tp.dirty {
            tp.dirty = true;
            stripe.dirty.push(topic.clone());
        }
        new
    }

    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Relaxed) + 1
    }

    /// Tracks a presence of `key` with meta `fields` (an object's members,
    /// see [`meta_fields`](super::meta_fields)) on `topic`; returns its
    /// sequence number and whether the topic is newly watched here.
    pub fn track(
        &self,
        topic: &Arc<str>,
        mode: Mode,
        key: Arc<str>,
        fields: Box<str>,
    ) -> (u64, bool) {
        let seq = self.next_seq();
        let meta = Meta {
            owner: self.me,
            seq,
            prev: 0,
            fields,
        };
        (seq, self.with_topic(topic, mode, |tp| tp.join(key, meta)))
    }

    /// Replaces presence `seq` of `key` with a new one carrying `fields`
    /// (`phx_ref_prev` = the old); returns the new sequence number, or
    /// `None` if `seq` is not tracked there.
    pub fn update(
        &self,
        topic: &Arc<str>,
        mode: Mode,
        key: &Arc<str>,
        seq: u64,
        fields: Box<str>,
    ) -> Option<u64> {
        let new = self.next_seq();
        let mut found = false;
        self.with_topic(topic, mode, |tp| {
            if tp.find(key, (self.me, seq)).is_none() {
                return false;
            }
            found = true;
            tp.leave(key, (self.me, seq));
            tp.join(
                key.clone(),
                Meta {
                    owner: self.me,
                    seq: new,
                    prev: seq,
                    fields,
                },
            );
            true
        });
        found.then_some(new)
    }

    /// Ends presence `seq` of `key` on `topic`.
    pub fn untrack(&self, topic: &str, key: &str, seq: u64) {
        self.on_topic(topic, |tp| tp.leave(key, (self.me, seq)));
    }

    /// What a joiner of `topic` gets (watching it if needed): the state as
    /// of the last flush, encoded once per interval and shared. Also
    /// returns whether the topic is newly watched here.
    pub fn state(&self, topic: &Arc<str>, mode: Mode) -> (State, bool) {
        let mut source = None;
        let new = self.with_topic(topic, mode, |tp| {
            source = Some((tp.mode, tp.state()));
            false
        });
        let (mode, source) = source.expect("with_topic runs its closure");
        let json = match source {
            StateSource::Ready(json) => json,
            // Encoded outside the stripe lock; joiners on other shards
            // wait for this one's result instead of encoding it again.
            StateSource::Encode(flushed, cell) => cell
                .get_or_init(|| {
                    self.stats.state_encodes.fetch_add(1, Relaxed);
                    flushed.state_json().into()
                })
                .clone(),
        };
        let event = match mode {
            Mode::List => encode::STATE,
            Mode::Count => encode::COUNT,
        };
        (State { event, json }, new)
    }

    /// The presences of `topic` on this node as `presence_state` JSON
    /// (for an API), or `None` if this node does not watch it, or keeps
    /// only a census of it (count mode, with presences of other nodes:
    /// the store has them).
    pub fn list(&self, topic: &str) -> Option<String> {
        self.list_and_count(topic).map(|(list, _)| list)
    }

    /// [`list`](Self::list) and [`count`](Self::count) of the same flush.
    pub fn list_and_count(&self, topic: &str) -> Option<(String, usize)> {
        let stripe = self.lock(stripe_of(topic));
        let tp = stripe.topics.get(topic)?;
        let f = tp.flushed();
        f.is_complete().then(|| (f.state_json(), f.key_count()))
    }

    /// A Pusher presence channel's members for a new subscriber of user
    /// `key` (see [`Members`]): as of the last flush when this node watches
    /// `topic`; none yet when it does not (the other nodes' come as member
    /// events once the store's snapshot is in), dated now.
    pub fn members(&self, topic: &str, key: &str) -> Members {
        let stripe = self.lock(stripe_of(topic));
        match stripe.topics.get(topic) {
            Some(tp) => tp.members(key),
            None => Members {
                generation: self.generation.load(Relaxed),
                ..Members::default()
            },
        }
    }

    /// Distinct keys on `topic` as of the last flush, if watched here.
    pub fn count(&self, topic: &str) -> Option<usize> {
        let stripe = self.lock(stripe_of(topic));
        stripe.topics.get(topic).map(|tp| tp.flushed().key_count())
    }

    /// Whether this node watches any topic (its shards then flush).
    pub fn is_active(&self) -> bool {
        self.stats.topics.load(Relaxed) > 0
    }

    /// The node lost its last local subscriber of `topic`: unless
    /// `still_subscribed()` says one came back meanwhile, stops watching it,
    /// first telling the store of this node's last leaves there.
    pub fn unwatch(&self, topic: &str, still_subscribed: impl Fn() -> bool) {
        let mut stripe = self.lock(stripe_of(topic));
        if !stripe.topics.contains_key(topic) || still_subscribed() {
            return;
        }
        let Some(mut tp) = stripe.topics.remove(topic) else {
            return;
        };
        stripe.dirty.retain(|t| &**t != topic);
        // Leaves still pending go out with the rest of this node's
        // presences there (normally none: they belonged to local joins).
        let mut own = match tp.flush(self.me, Instant::now(), self.count_rate, false) {
            Some(f) => {
                self.account(&f);
                f.own
            }
            None => Delta::default(),
        };
        own.joins.clear();
        let remaining = tp.owned_by(self.me);
        self.stats
            .local_entries
            .fetch_sub(remaining.len() as i64, Relaxed);
        self.stats
            .entries
            .fetch_sub(tp.flushed().len() as i64, Relaxed);
        own.leaves.extend(remaining);
        if !own.is_empty() {
            self.store.publish(topic, own);
        }
        self.store.unwatch(topic);
        self.stats.topics.fetch_sub(1, Relaxed);
    }

    /// Flushes the stripes shard `shard` of `shards` owns at `now` (the
    /// shard loop's clock): applies each dirty topic's pending diff, hands
    /// this node's changes to the store, and returns the broadcasts for
    /// local subscribers (encoded once).
    pub fn flush_shard(
        &self,
        shard: usize,
        shards: usize,
        now: Instant,
        out: &mut Vec<Arc<Broadcast>>,
    ) {
        for i in (shard..STRIPES).step_by(shards.max(1)) {
            self.flush_stripe(i, now, out);
        }
    }

    /// Flushes every stripe now (tests, and a single flusher).
    pub fn flush_all(&self, out: &mut Vec<Arc<Broadcast>>) {
        let now = Instant::now();
        for i in 0..STRIPES {
            self.flush_stripe(i, now, out);
        }
    }

    fn flush_stripe(&self, i: usize, now: Instant, out: &mut Vec<Arc<Broadcast>>) {
        let mut messages = Vec::new();
        let mut pusher = Vec::new();
        {
            let mut stripe = self.lock(i);
            if stripe.dirty.is_empty() {
                return;
            }
            let stripe = &mut *stripe;
            let mut dirty = std::mem::take(&mut stripe.dirty);
            // Keeps the topics whose count waits (`tp.dirty` again).
            dirty.retain(|name| {
                let Some(tp) = stripe.topics.get_mut(name) else {
                    return false;
                };
                let is_pusher = Family::of_topic(name) == Family::Pusher;
                let Some(f) = tp.flush(self.me, now, self.count_rate, is_pusher) else {
                    return false;
                };
                self.account(&f);
                if f.deferred {
                    self.stats.counts_deferred.fetch_add(1, Relaxed);
                }
                if is_pusher {
                    // A Pusher presence channel: member_added and
                    // member_removed, each user once, instead of a diff,
                    // dated by this flush (under the stripe's lock, as
                    // `members` reads it).
                    if f.joined + f.left > 0 {
                        let generation = self.generation.fetch_add(1, Relaxed) + 1;
                        tp.generation = generation;
                        for change in &f.members {
                            let made = pusher_member(name, change, generation);
                            pusher.push((name.clone(), made));
                        }
                    }
                } else if let Some(m) = f.message {
                    messages.push((name.clone(), m));
                }
                if !f.own.is_empty() {
                    self.store.publish(name, f.own);
                }
                tp.dirty
            });
            stripe.dirty = dirty;
        }
        let all = messages
            .into_iter()
            .map(|(t, m)| (t, (m, None)))
            .chain(pusher.into_iter().map(|(t, (m, tag))| (t, (m, Some(tag)))));
        for (topic, ((event, payload), tag)) in all {
            self.stats.diffs.fetch_add(1, Relaxed);
            self.stats
                .diff_bytes
                .fetch_add(payload.len() as u64, Relaxed);
            let b = Broadcast::new(topic, event.to_string(), OwnedPayload::Json(payload), None);
            out.push(Arc::new(match tag {
                Some(tag) => b.with_member(tag),
                None => b,
            }));
        }
    }

    fn each_topic(&self, mut f: impl FnMut(&Arc<str>, &mut TopicPresence) -> bool) {
        for i in 0..STRIPES {
            let mut stripe = self.lock(i);
            let stripe = &mut *stripe;
            for (name, tp) in stripe.topics.iter_mut() {
                if f(name, tp) && !tp.dirty {
                    tp.dirty = true;
                    stripe.dirty.push(name.clone());
                }
            }
        }
    }

    fn on_topic(&self, topic: &str, f: impl FnOnce(&mut TopicPresence) -> bool) {
        let mut stripe = self.lock(stripe_of(topic));
        let stripe = &mut *stripe;
        let Some(name) = stripe.topics.get_key_value(topic).map(|(k, _)| k.clone()) else {
            return;
        };
        if let Some(tp) = stripe.topics.get_mut(topic) {
            if f(tp) && !tp.dirty {
                tp.dirty = true;
                stripe.dirty.push(name);
            }
        }
    }

    /// Counts a flush's changes.
    fn account(&self, f: &super::topic::Flush) {
        self.stats
            .entries
            .fetch_add(f.joined as i64 - f.left as i64, Relaxed);
        self.stats
            .local_entries
            .fetch_add(f.own_change as i64, Relaxed);
        self.stats
            .changes
            .fetch_add((f.joined + f.left) as u64, Relaxed);
    }

    /// The health of its store's [Redis link](crate::link), if it has one.
    pub fn link(&self) -> Option<&crate::link::Health> {
        self.store.link()
    }

    /// Every metric of the tracker and its store.
    pub fn describe(&self, out: &mut dyn Sink) {
        for (m, figure) in &METRICS {
            out.put(m, figure(&self.stats));
        }
        self.store.describe(out);
    }
}

/// Every metric of the tracker, and the figure it reads.
pub static METRICS: [crate::metrics::Figure<PresenceStats>; 8] = [
    (
        Metric::gauge(
            "throng_presence_topics",
            "Topics whose presence this node keeps (it has subscribers of them).",
        ),
        |s| s.topics.load(Relaxed).into(),
    ),
    (
        Metric::gauge(
            "throng_presence_entries",
            "Presences in this node's copies, every node's.",
        ),
        |s| s.entries.load(Relaxed).into(),
    ),
    (
        Metric::gauge(
            "throng_presence_local_entries",
            "Presences tracked on this node.",
        ),
        |s| s.local_entries.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_diffs_total",
            "presence_diff (and presence_count) broadcasts made: one per topic per interval with changes.",
        ),
        |s| s.diffs.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_diff_bytes_total",
            "Payload bytes of those broadcasts, once each (before fan-out).",
        ),
        |s| s.diff_bytes.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_changes_total",
            "Joins and leaves carried by those diffs.",
        ),
        |s| s.changes.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_state_encodes_total",
            "presence_state encodings (at most one per topic per interval, shared by its joiners).",
        ),
        |s| s.state_encodes.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_counts_deferred_total",
            "presence_count broadcasts held back by --presence-count-rate: one per topic per interval its changed count waited.",
        ),
        |s| s.counts_deferred.load(Relaxed).into(),
    ),
];

impl PresenceSink for Tracker {
    fn apply(&self, topic: &str, delta: Delta) {
        let me = self.me;
        self.on_topic(topic, |tp| {
            let mut changed = false;
            for (k, m) in delta.leaves {
                if m.owner != me {
                    changed |= tp.leave(&k, m.id());
                }
            }
            for (k, m) in delta.joins {
                if m.owner != me {
                    changed |= tp.join(k, m);
                }
            }
            changed
        });
    }

    fn replace(&self, topic: &str, owner: u64, entries: Entries) {
        if owner == self.me {
            return;
        }
        self.on_topic(topic, |tp| tp.replace(owner, entries));
    }

    fn owner_down(&self, owner: u64) {
        if owner == self.me {
            return;
        }
        self.each_topic(|_, tp| tp.replace(owner, Vec::new()));
    }

    fn is_watched(&self, topic: &str) -> bool {
        self.lock(stripe_of(topic)).topics.contains_key(topic)
    }

    fn watched(&self) -> Vec<Arc<str>> {
        let mut out = Vec::new();
        for i in 0..STRIPES {
            out.extend(self.lock(i).topics.keys().cloned());
        }
        out
    }

    fn owned(&self) -> Vec<(Arc<str>, Entries)> {
        let mut out = Vec::new();
        for i in 0..STRIPES {
            let stripe = self.lock(i);
            for (name, tp) in stripe.topics.iter() {
                let mine = tp.owned_by(self.me);
                if !mine.is_empty() {
                    out.push((name.clone(), mine));
                }
            }
        }
        out
    }

    fn owners(&self) -> Vec<u64> {
        let mut set = HashSet::new();
        for i in 0..STRIPES {
            let stripe = self.lock(i);
            for tp in stripe.topics.values() {
                set.extend(tp.owners().filter(|o| *o != self.me));
            }
        }
        set.into_iter().collect()
    }
}

/// A Pusher presence channel's frame for a member that came or went: the
/// event and the frame, the broadcast's payload (`Broadcast` sends a
/// Pusher channel's payload as its frame), and its tag: the member and
/// flush `generation`, so that delivery leaves out the subscribers whose
/// member list has the change already (the member's own sockets, and those
/// that read the list after this flush: `crate::MemberTag`).
fn pusher_member(
    topic: &str,
    change: &MemberChange,
    generation: u64,
) -> ((&'static str, String), MemberTag) {
    use throng_protocol::pusher::server;
    // `pusher/<app id>/<channel>`.
    let channel = topic
        .strip_prefix(PUSHER_TOPIC_PREFIX)
        .and_then(|rest| rest.split_once('/'))
        .map_or(topic, |(_, channel)| channel);
    let mut out = Vec::with_capacity(96);
    let (event, key) = match change {
        MemberChange::Added(key, _, fields) => {
            // The meta a Pusher presence tracks: `"user_info":<json>`.
            let (_, info) = pusher_meta(fields);
            server::member_added(&mut out, channel, key, info);
            ("pusher_internal:member_added", key)
        }
        MemberChange::Removed(key) => {
            server::member_removed(&mut out, channel, key);
            ("pusher_internal:member_removed", key)
        }
    };
    let tag = MemberTag {
        key: key.clone(),
        generation,
    };
    ((event, String::from_utf8(out).unwrap_or_default()), tag)
}

/// A Pusher presence's meta fields, `"_socket":N,"user_info":<json>`: the
/// socket (shard << 32 | connection key) and the user info's JSON.
pub fn pusher_meta(fields: &str) -> (Option<u64>, Option<&str>) {
    let Some(rest) = fields.strip_prefix("\"_socket\":") else {
        return (None, fields.strip_prefix("\"user_info\":"));
    };
    let (n, rest) = rest.split_once(',').unwrap_or((rest, ""));
    (n.parse().ok(), rest.strip_prefix("\"user_info\":"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::presence::LocalPresence;

    fn counts(out: &mut Vec<Arc<Broadcast>>) -> Vec<String> {
        out.drain(..)
            .map(|b| match &b.payload {
                OwnedPayload::Json(j) => j.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// The frames and tags of a flush's Pusher member events.
    fn member_events(out: &mut Vec<Arc<Broadcast>>) -> Vec<(String, String, u64)> {
        out.drain(..)
            .map(|b| {
                let tag = b.member.as_deref().expect("a member event is tagged");
                let frame = match &b.payload {
                    OwnedPayload::Json(j) => j.clone(),
                    other => panic!("{other:?}"),
                };
                (frame, tag.key.to_string(), tag.generation)
            })
            .collect()
    }

    #[test]
    fn pusher_members_come_once_per_user_tagged_with_their_flush() {
        let t = Tracker::new(Arc::new(LocalPresence::new()));
        let topic: Arc<str> = "pusher/1/presence-room".into();
        let fresh = t.members(&topic, "u1");
        assert_eq!((fresh.list.len(), fresh.upcoming), (0, 0));
        // Two tabs of u1 and one of u2 in one interval: one member_added each.
        let (a, _) = t.track(
            &topic,
            Mode::List,
            "u1".into(),
            r#""user_info":{"n":1}"#.into(),
        );
        let (b, _) = t.track(
            &topic,
            Mode::List,
            "u1".into(),
            r#""user_info":{"n":1}"#.into(),
        );
        t.track(
            &topic,
            Mode::List,
            "u2".into(),
            r#""user_info":null"#.into(),
        );
        let before = t.members(&topic, "u3");
        assert_eq!(before.list.len(), 0, "as of the last flush");
        assert_eq!((before.upcoming, before.upcoming_has_key), (2, false));
        assert!(t.members(&topic, "u1").upcoming_has_key);
        let mut out = Vec::new();
        t.flush_all(&mut out);
        let mut events = member_events(&mut out);
        events.sort_by(|x, y| x.1.cmp(&y.1));
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(
            events[0].0,
            r#"{"event":"pusher_internal:member_added","channel":"presence-room","data":"{\"user_id\":\"u1\",\"user_info\":{\"n\":1}}"}"#
        );
        assert_eq!(events[1].1, "u2");
        let g = events[0].2;
        assert_eq!(events[1].2, g, "one flush, one generation");
        let after = t.members(&topic, "u1");
        assert_eq!((after.generation, after.list.len()), (g, 2));
        // One tab of u1 leaves: no news; the other too: member_removed.
        t.untrack(&topic, "u1", a);
        t.flush_all(&mut out);
        assert!(member_events(&mut out).is_empty());
        assert_eq!(t.members(&topic, "x").upcoming, 2);
        t.untrack(&topic, "u1", b);
        assert_eq!(t.members(&topic, "x").upcoming, 1, "u1's last tab goes");
        t.flush_all(&mut out);
        let events = member_events(&mut out);
        assert_eq!(events.len(), 1);
        assert!(events[0].0.contains("member_removed") && events[0].1 == "u1");
        assert!(events[0].2 > g, "a later flush, a later generation");
        // A topic watched again is dated after every earlier event.
        let later = events[0].2;
        t.unwatch(&topic, || false);
        assert!(t.members(&topic, "u9").generation >= later);
    }

    #[test]
    fn a_waiting_count_stays_dirty_until_due_and_is_counted() {
        let t = Tracker::with_count_rate(Arc::new(LocalPresence::new()), 50);
        let topic: Arc<str> = "live".into();
        for i in 0..100 {
            t.track(&topic, Mode::Count, format!("u{i}").into(), "".into());
        }
        let (t0, mut out) = (Instant::now(), Vec::new());
        t.flush_shard(0, 1, t0, &mut out);
        assert_eq!(counts(&mut out), [r#"{"count":100}"#]);
        t.track(&topic, Mode::Count, "late".into(), "".into());
        t.flush_shard(0, 1, t0 + Duration::from_secs(1), &mut out);
        assert!(out.is_empty(), "101 keys at 50 a second: 2.02 s");
        assert_eq!(t.stats.counts_deferred.load(Relaxed), 1);
        // no change since: the count that waited goes out once due
        t.flush_shard(0, 1, t0 + Duration::from_secs(2), &mut out);
        assert!(out.is_empty());
        t.flush_shard(0, 1, t0 + Duration::from_secs(3), &mut out);
        assert_eq!(counts(&mut out), [r#"{"count":101}"#]);
        t.flush_shard(0, 1, t0 + Duration::from_secs(9), &mut out);
        assert!(out.is_empty());
        assert_eq!(t.stats.counts_deferred.load(Relaxed), 2);
        let metrics = crate::metrics::text(|s| t.describe(s));
        assert!(
            metrics.contains("throng_presence_counts_deferred_total 2"),
            "{metrics}"
        );
    }
}
