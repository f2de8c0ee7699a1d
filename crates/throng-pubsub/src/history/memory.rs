//! [`MemoryHistory`]: every topic's history in this process, as a ring of
//! its last messages per topic.
//!
//! Topics are spread over [`STRIPES`] mutexes by a hash of their name, so
//! publishers and readers of different topics rarely meet; no lock is
//! taken on join or leave, only on a broadcast of a history topic and on a
//! join that asks to recover.
//!
//! Order: [`MemoryHistory::publish`] assigns the offset, keeps the message
//! and hands it to the caller's `send` under the topic's lock, so the
//! caller queues it for every shard in offset order; a read under the same
//! lock sees exactly the messages queued before it (see the server's
//! `crate::history` for how a join uses this to join replay and live
//! messages without a gap or a duplicate).
//!
//! Bounds: a topic keeps at most its rule's size, and is forgotten its
//! rule's ttl after its last message (a later message starts a new epoch);
//! all topics together hold at most the byte budget: a message that would
//! pass it pushes out its own topic's oldest ones, and is not kept at all
//! when its topic has none left (a later recovery from before it then
//! answers `recovered: false`, never a gap).

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use throng_protocol::OwnedPayload;

use super::{Entry, HistoryStore, Position, Replay};

/// Mutexes the topics are spread over.
pub const STRIPES: usize = 64;

/// How often, at most, a publish also forgets the topics past their ttl.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The store's counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct HistoryStats {
    /// Bytes the kept messages hold (against the budget).
    pub bytes: AtomicUsize,
    /// Messages kept.
    pub messages: AtomicUsize,
    /// Topics with a history.
    pub topics: AtomicUsize,
    /// Messages given a position.
    pub published: AtomicU64,
    /// Messages dropped early, or never kept, for the byte budget.
    pub evicted: AtomicU64,
    /// Topics forgotten past their ttl.
    pub expired: AtomicU64,
}

/// One topic's history.
struct Ring {
    epoch: u64,
    /// The offset the next message gets.
    next: u64,
    /// The oldest offset a read can still return: the first entry's, or
    /// `next` when none is kept.
    base: u64,
    entries: VecDeque<Arc<Entry>>,
    /// Bytes of `entries` ([`Entry::bytes`]).
    held: usize,
    last_at: Instant,
    ttl: Duration,
}

impl Ring {
    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_at) > self.ttl
    }

    fn pop(&mut self, stats: &HistoryStats) -> bool {
        let Some(e) = self.entries.pop_front() else {
            return false;
        };
        let bytes = e.bytes();
        self.held -= bytes;
        stats.bytes.fetch_sub(bytes, Relaxed);
        stats.messages.fetch_sub(1, Relaxed);
        self.base = self.entries.front().map_or(self.next, |e| e.offset);
        true
    }
}

/// The topics of one stripe, by name.
type Topics = HashMap<Arc<str>, Ring>;

/// Every topic's history, in this process.
pub struct MemoryHistory {
    stripes: Box<[Mutex<Topics>]>,
    budget: usize,
    /// Epochs are this, mixed with a count: random per process, never the
    /// same twice in it.
    seed: std::collections::hash_map::RandomState,
    epochs: AtomicU64,
    start: Instant,
    /// Milliseconds after `start` of the last sweep.
    swept_at: AtomicU64,
    pub stats: HistoryStats,
}

impl MemoryHistory {
    /// A store holding at most `budget` bytes of messages.
    pub fn new(budget: usize) -> MemoryHistory {
        MemoryHistory {
            stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
            budget,
            seed: std::collections::hash_map::RandomState::new(),
            epochs: AtomicU64::new(0),
            start: Instant::now(),
            swept_at: AtomicU64::new(0),
            stats: HistoryStats::default(),
        }
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    fn stripe(&self, topic: &str) -> MutexGuard<'_, Topics> {
        let i = self.seed.hash_one(topic) as usize % STRIPES;
        // A panic under the lock leaves nothing half-done that a reader
        // could not use: go on with the data.
        self.stripes[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn new_epoch(&self) -> u64 {
        // Never 0, which means "no history" in a Replay.
        let n = self.epochs.fetch_add(1, Relaxed);
        self.seed.hash_one(n).max(1)
    }

    /// Gives the next message of `topic` its position and keeps `payload` (at
    /// most `size` messages, forgotten `ttl` after the last), then calls
    /// `send` with the position, still under the topic's lock: every
    /// message of the topic reaches `send` in offset order.
    #[allow(clippy::too_many_arguments)]
    pub fn publish<R>(
        &self,
        topic: &Arc<str>,
        size: usize,
        ttl: Duration,
        event: &str,
        payload: OwnedPayload,
        now: Instant,
        send: impl FnOnce(Position) -> R,
    ) -> R {
        self.sweep_if_due(now);
        let mut map = self.stripe(topic);
        let stale = map.get(&**topic).is_some_and(|r| r.expired(now));
        if stale {
            if let Some(mut old) = map.remove(&**topic) {
                while old.pop(&self.stats) {}
                self.stats.topics.fetch_sub(1, Relaxed);
                self.stats.expired.fetch_add(1, Relaxed);
            }
        }
        let ring = map.entry(topic.clone()).or_insert_with(|| {
            self.stats.topics.fetch_add(1, Relaxed);
            Ring {
                epoch: self.new_epoch(),
                next: 1,
                base: 1,
                entries: VecDeque::new(),
                held: 0,
                last_at: now,
                ttl,
            }
        });
        let at = Position {
            epoch: ring.epoch,
            offset: ring.next,
        };
        ring.next += 1;
        ring.last_at = now;
        ring.ttl = ttl;
        let entry = Arc::new(Entry {
            offset: at.offset,
            event: event.into(),
            payload,
        });
        let bytes = entry.bytes();
        while ring.entries.len() >= size.max(1) {
            ring.pop(&self.stats);
        }
        while self.stats.bytes.load(Relaxed) + bytes > self.budget && ring.pop(&self.stats) {
            self.stats.evicted.fetch_add(1, Relaxed);
        }
        if self.stats.bytes.load(Relaxed) + bytes > self.budget {
            // The other topics hold the budget: this message is not kept,
            // and no read may go back past it.
            self.stats.evicted.fetch_add(1, Relaxed);
            ring.base = ring.next;
        } else {
            ring.held += bytes;
            self.stats.bytes.fetch_add(bytes, Relaxed);
            self.stats.messages.fetch_add(1, Relaxed);
            if ring.entries.is_empty() {
                ring.base = at.offset;
            }
            ring.entries.push_back(entry);
        }
        self.stats.published.fetch_add(1, Relaxed);
        send(at)
    }

    /// The messages of `topic` after `since` (a ref from
    /// [`Position::to_ref`]), at most `limit`, oldest first; without
    /// `since`, the newest `limit` kept (never `recovered`). `then` runs
    /// under the topic's lock with what was found, so that nothing is
    /// published between the read and what it does.
    pub fn read<R>(
        &self,
        topic: &str,
        since: Option<&str>,
        limit: usize,
        now: Instant,
        then: impl FnOnce(Replay) -> R,
    ) -> R {
        let mut map = self.stripe(topic);
        if map.get(topic).is_some_and(|r| r.expired(now)) {
            if let Some(mut old) = map.remove(topic) {
                while old.pop(&self.stats) {}
                self.stats.topics.fetch_sub(1, Relaxed);
                self.stats.expired.fetch_add(1, Relaxed);
            }
        }
        let Some(ring) = map.get(topic) else {
            return then(Replay::default());
        };
        let mut found = Replay {
            recovered: false,
            epoch: ring.epoch,
            messages: Vec::new(),
            last: ring.next - 1,
            unavailable: false,
        };
        let Some(since) = since else {
            let skip = ring.entries.len().saturating_sub(limit);
            found.messages = ring.entries.iter().skip(skip).cloned().collect();
            return then(found);
        };
        let at = Position::parse(since);
        let ok = at
            .filter(|p| p.epoch == ring.epoch && p.offset < ring.next && p.offset + 1 >= ring.base);
        if let Some(at) = ok {
            found.recovered = true;
            if let Some(first) = ring.entries.front() {
                // Entries are consecutive offsets from the first.
                let skip = (at.offset + 1).saturating_sub(first.offset) as usize;
                let take = ring.entries.iter().skip(skip).take(limit);
                found.messages = take.cloned().collect();
            }
        }
        then(found)
    }

    /// Forgets the topics past their ttl ([`MemoryHistory::sweep`]), at
    /// most once every [`SWEEP_EVERY`] whoever calls: every publish does,
    /// and so does the server's once-a-second sweep, so that a topic's
    /// history goes its ttl after its last message even when nothing is
    /// published after it.
    pub fn sweep_if_due(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.start).as_millis() as u64;
        let last = self.swept_at.load(Relaxed);
        if ms.saturating_sub(last) < SWEEP_EVERY.as_millis() as u64 {
            return;
        }
        if self
            .swept_at
            .compare_exchange(last, ms, Relaxed, Relaxed)
            .is_ok()
        {
            self.sweep(now);
        }
    }

    /// Forgets the topics past their ttl.
    pub fn sweep(&self, now: Instant) {
        for stripe in self.stripes.iter() {
            let mut map = stripe.lock().unwrap_or_else(|e| e.into_inner());
            map.retain(|_, ring| {
                if !ring.expired(now) {
                    return true;
                }
                while ring.pop(&self.stats) {}
                self.stats.topics.fetch_sub(1, Relaxed);
                self.stats.expired.fetch_add(1, Relaxed);
                false
            });
        }
    }
}

impl HistoryStore for MemoryHistory {
    fn append(
        &self,
        topic: &Arc<str>,
        size: usize,
        ttl: Duration,
        event: &str,
        payload: OwnedPayload,
        done: Box<dyn FnOnce(Result<Position, String>) + Send>,
    ) {
        let at = self.publish(topic, size, ttl, event, payload, Instant::now(), |p| p);
        done(Ok(at))
    }

    fn fetch(
        &self,
        topic: &str,
        since: Option<&str>,
        limit: usize,
        _size: usize,
        then: Box<dyn FnOnce(Replay) + Send>,
    ) {
        then(self.read(topic, since, limit, Instant::now(), |r| r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    fn publish(h: &MemoryHistory, topic: &str, size: usize, n: u32, now: Instant) -> Vec<String> {
        let topic: Arc<str> = topic.into();
        (0..n)
            .map(|i| {
                let payload = OwnedPayload::Json(format!("{{\"n\":{i}}}"));
                h.publish(&topic, size, TTL, "e", payload, now, |p| p.to_ref())
            })
            .collect()
    }

    fn offsets(r: &Replay) -> Vec<u64> {
        r.messages.iter().map(|e| e.offset).collect()
    }

    #[test]
    fn recovers_what_came_after_a_position_in_order() {
        let h = MemoryHistory::new(1 << 20);
        let now = Instant::now();
        let refs = publish(&h, "t", 10, 5, now);
        let r = h.read("t", Some(&refs[1]), usize::MAX, now, |r| r);
        assert!(r.recovered);
        assert_eq!(offsets(&r), [3, 4, 5]);
        assert_eq!(r.last, 5);
        assert_eq!(r.ref_of(&r.messages[0]), refs[2]);
        let r = h.read("t", Some(&refs[4]), usize::MAX, now, |r| r);
        assert!(r.recovered && r.messages.is_empty(), "up to date");
        let r = h.read("t", Some(&refs[0]), 2, now, |r| r);
        assert_eq!(offsets(&r), [2, 3]);
        let r = h.read("t", None, 2, now, |r| r);
        assert!(!r.recovered);
        assert_eq!(offsets(&r), [4, 5]);
    }

    #[test]
    fn trims_to_size_and_refuses_what_it_lost() {
        let h = MemoryHistory::new(1 << 20);
        let now = Instant::now();
        let refs = publish(&h, "t", 3, 6, now);
        let r = h.read("t", Some(&refs[2]), usize::MAX, now, |r| r);
        assert!(r.recovered);
        assert_eq!(offsets(&r), [4, 5, 6]);
        let r = h.read("t", Some(&refs[1]), usize::MAX, now, |r| r);
        assert!(!r.recovered && r.messages.is_empty(), "3 is gone");
        assert_eq!(h.stats.messages.load(Relaxed), 3);
    }

    #[test]
    fn bad_positions_recover_nothing() {
        let h = MemoryHistory::new(1 << 20);
        let now = Instant::now();
        let refs = publish(&h, "t", 10, 3, now);
        let other = publish(&h, "u", 10, 3, now);
        let epoch = refs[0].split_once('.').unwrap().0;
        for bad in [
            "1".to_string(),
            "garbage".into(),
            format!("{epoch}.4"),
            format!("{epoch}.99999999999"),
            format!("{epoch}.x"),
            "0000000000000001.1".into(),
            other[0].clone(),
        ] {
            let r = h.read("t", Some(&bad), usize::MAX, now, |r| r);
            assert!(!r.recovered && r.messages.is_empty(), "{bad}");
        }
        let r = h.read("none", Some(&refs[0]), usize::MAX, now, |r| r);
        assert!(!r.recovered && r.epoch == 0);
        // Since 0 (before the first message) is the whole history.
        let r = h.read("t", Some(&format!("{epoch}.0")), usize::MAX, now, |r| r);
        assert!(r.recovered);
        assert_eq!(offsets(&r), [1, 2, 3]);
    }

    #[test]
    fn a_topic_past_its_ttl_starts_a_new_epoch() {
        let h = MemoryHistory::new(1 << 20);
        let now = Instant::now();
        let refs = publish(&h, "t", 10, 2, now);
        let later = now + TTL + Duration::from_secs(1);
        let r = h.read("t", Some(&refs[0]), usize::MAX, later, |r| r);
        assert!(!r.recovered);
        assert_eq!(h.stats.topics.load(Relaxed), 0);
        assert_eq!(h.stats.bytes.load(Relaxed), 0);
        let again = publish(&h, "t", 10, 1, later);
        assert!(again[0].ends_with(".1"));
        assert_ne!(
            again[0].split_once('.').unwrap().0,
            refs[0].split_once('.').unwrap().0
        );
        let r = h.read("t", Some(&refs[0]), usize::MAX, later, |r| r);
        assert!(!r.recovered, "the old epoch's position");
        // The sweep forgets idle topics.
        publish(&h, "u", 10, 1, later);
        h.sweep(later + TTL * 2);
        assert_eq!(h.stats.topics.load(Relaxed), 0);
        assert_eq!(h.stats.messages.load(Relaxed), 0);
    }

    #[test]
    fn a_due_sweep_forgets_expired_topics_with_nothing_published() {
        let h = MemoryHistory::new(1 << 20);
        let now = Instant::now();
        publish(&h, "t", 10, 3, now);
        h.sweep_if_due(now + SWEEP_EVERY * 2);
        assert_eq!(h.stats.topics.load(Relaxed), 1, "not past its ttl yet");
        h.sweep_if_due(now + TTL + SWEEP_EVERY * 4);
        assert_eq!(h.stats.topics.load(Relaxed), 0);
        assert_eq!(h.stats.bytes.load(Relaxed), 0);
        assert_eq!(h.stats.expired.load(Relaxed), 1);
    }

    #[test]
    fn the_byte_budget_bounds_every_topic() {
        let one = Entry {
            offset: 1,
            event: "e".into(),
            payload: OwnedPayload::Json("{\"n\":0}".into()),
        }
        .bytes();
        let h = MemoryHistory::new(one * 4);
        let now = Instant::now();
        let a = publish(&h, "a", 100, 4, now);
        assert!(h.stats.bytes.load(Relaxed) <= h.budget());
        // "b" finds the budget full: its messages are not kept.
        let b = publish(&h, "b", 100, 2, now);
        let r = h.read("b", Some(&b[0]), usize::MAX, now, |r| r);
        assert!(!r.recovered, "b's second message was not kept");
        // "a" makes room by dropping its own oldest.
        publish(&h, "a", 100, 2, now);
        let r = h.read("a", Some(&a[0]), usize::MAX, now, |r| r);
        assert!(!r.recovered);
        let r = h.read("a", Some(&a[3]), usize::MAX, now, |r| r);
        assert!(r.recovered);
        assert_eq!(offsets(&r), [5, 6]);
        assert!(h.stats.bytes.load(Relaxed) <= h.budget());
        assert!(h.stats.evicted.load(Relaxed) >= 4);
    }
}
