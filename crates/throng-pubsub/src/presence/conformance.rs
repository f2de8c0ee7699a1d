//! The presence conformance suite: what every [`PresenceStore`] must do
//! for the nodes it joins, checked the same way for each (as
//! `crate::conformance` does for backplanes). `tests/presence_stores.rs`
//! runs it against [`MemoryPresence`](super::MemoryPresence) and, with a
//! real `redis-server`, [`RedisPresence`](super::RedisPresence).
//!
//! Each node is a real [`Tracker`] on the store under test, flushed every
//! 10 ms by a thread of the suite, whose diffs are recorded. What it
//! asserts:
//! - [`replicates`]: a presence tracked on one node appears on a node
//!   watching the topic, and leaves it, once each;
//! - [`late_watcher_reads_snapshot`]: a node that starts watching later
//!   gets the presences already there;
//! - [`metas_and_updates`]: several metas per key, an update (new
//!   `phx_ref`, `phx_ref_prev` = the old) and an untrack cross nodes;
//! - [`dead_node_leaves`]: the presences of a node killed without a
//!   goodbye leave everywhere within the timeout, and a new watcher does
//!   not see them;
//! - [`restart_without_storm`]: a node killed and replaced by a new one:
//!   the users of the surviving node never leave or join again;
//! - [`survives_outage`]: the engine restarts: no presence leaves because
//!   of it, and changes made meanwhile arrive once it is back;
//! - [`fetch_reads_every_node`]: a node that does not watch a topic reads
//!   every live node's presences there from the store (the server API's
//!   read), changes included, a dead node's left out.
//!
//! Every wait is bounded; none is a sleep standing in for an event.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{phx_ref, Fetched, Mode, PresenceSink, PresenceStore, Tracker};

/// How long any ordinary wait may take.
pub const WAIT: Duration = Duration::from_secs(15);

/// A cluster under test.
pub trait Cluster {
    /// The store of one more node.
    fn store(&mut self) -> Arc<dyn PresenceStore>;
    /// Node `node_id` stops as a crash would: no goodbye.
    fn kill(&mut self, node_id: u64);
    /// The shared engine goes away and comes back (a Redis restart); node
    /// `late` reconnects half a second after the others (well within
    /// `0.4 x` the timeout), as a node with a longer backoff would.
    fn outage(&mut self, late: u64);
    /// The presence timeout the stores were built with.
    fn timeout(&self) -> Duration;
}

/// Presences of a topic as a node lists them: key -> sorted `phx_ref`s.
pub type Listing = BTreeMap<String, Vec<String>>;

/// A node: a tracker on a store, flushed by a thread, its diffs recorded.
pub struct Node {
    pub tracker: Arc<Tracker>,
    /// Recorded diffs; held across a flush and its recording, so what a
    /// listing shows has always been recorded when the diffs are read.
    diffs: Arc<Mutex<Vec<(String, serde_json::Value)>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

impl Node {
    pub fn new(store: Arc<dyn PresenceStore>) -> Node {
        let tracker = Tracker::new(store);
        let diffs = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, d, s) = (tracker.clone(), diffs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut out = Vec::new();
            while !s.load(Relaxed) {
                {
                    let mut recorded = d.lock().unwrap_or_else(|e| e.into_inner());
                    t.flush_all(&mut out);
                    for b in out.drain(..) {
                        if let throng_protocol::OwnedPayload::Json(p) = &b.payload {
                            if let Ok(v) = serde_json::from_str(p) {
                                recorded.push((b.topic.to_string(), v));
                            }
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Node {
            tracker,
            diffs,
            stop,
        }
    }

    pub fn id(&self) -> u64 {
        self.tracker.node_id()
    }

    /// The `phx_ref` of this node's presence `seq`.
    pub fn r(&self, seq: u64) -> String {
        phx_ref(self.id(), seq)
    }

    /// Starts watching `topic` (as a joiner's `presence_state` does).
    pub fn watch(&self, topic: &str) {
        self.tracker.state(&Arc::from(topic), Mode::List);
    }

    pub fn track(&self, topic: &str, key: &str) -> u64 {
        self.tracker
            .track(&Arc::from(topic), Mode::List, Arc::from(key), "".into())
            .0
    }

    pub fn update(&self, topic: &str, key: &str, seq: u64, fields: &str) -> u64 {
        self.tracker
            .update(
                &Arc::from(topic),
                Mode::List,
                &Arc::from(key),
                seq,
                fields.into(),
            )
            .expect("tracked")
    }

    pub fn untrack(&self, topic: &str, key: &str, seq: u64) {
        self.tracker.untrack(topic, key, seq);
    }

    /// What this node lists on `topic` (flushed).
    pub fn list(&self, topic: &str) -> Listing {
        // Not in the middle of a flush whose diffs are not recorded yet.
        let json = {
            let _recorded = self.diffs.lock().unwrap_or_else(|e| e.into_inner());
            self.tracker.list(topic)
        };
        let Some(json) = json else {
            return Listing::new();
        };
        let v: serde_json::Value = serde_json::from_str(&json).expect("state is JSON");
        let mut out = Listing::new();
        for (k, p) in v.as_object().into_iter().flatten() {
            let mut refs: Vec<String> = p["metas"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| m["phx_ref"].as_str().unwrap_or("").to_string())
                .collect();
            refs.sort();
            out.insert(k.clone(), refs);
        }
        out
    }

    /// The metas of `key` on `topic` as JSON objects.
    pub fn metas(&self, topic: &str, key: &str) -> Vec<serde_json::Value> {
        let json = self.tracker.list(topic).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
        v[key]["metas"].as_array().cloned().unwrap_or_default()
    }

    /// Waits (at most `within`) until this node lists exactly `want`.
    pub fn await_list(&self, topic: &str, want: &Listing, within: Duration) {
        self.await_seen("lists", topic, || self.list(topic), want, within);
    }

    /// Waits (at most `within`) until this node counts `want` distinct
    /// keys on `topic`.
    pub fn await_count(&self, topic: &str, want: usize, within: Duration) {
        let seen = || self.tracker.count(topic);
        self.await_seen("counts", topic, seen, &Some(want), within);
    }

    /// Polls `seen` until it gives `want`; fails past `within`.
    fn await_seen<T: PartialEq + std::fmt::Debug>(
        &self,
        what: &str,
        topic: &str,
        seen: impl Fn() -> T,
        want: &T,
        within: Duration,
    ) {
        let deadline = Instant::now() + within;
        loop {
            let got = seen();
            if &got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {:016x} {what} {got:?} on {topic}, expected {want:?}",
                self.id()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every `phx_ref` that joined / left in this node's diffs on `topic`.
    pub fn diff_refs(&self, topic: &str) -> (Vec<String>, Vec<String>) {
        let diffs = self.diffs.lock().unwrap_or_else(|e| e.into_inner());
        let mut joins = Vec::new();
        let mut leaves = Vec::new();
        for (t, d) in diffs.iter().filter(|(t, _)| t == topic) {
            let _ = t;
            for (side, out) in [("joins", &mut joins), ("leaves", &mut leaves)] {
                for (_, p) in d[side].as_object().into_iter().flatten() {
                    for m in p["metas"].as_array().into_iter().flatten() {
                        out.push(m["phx_ref"].as_str().unwrap_or("").to_string());
                    }
                }
            }
        }
        (joins, leaves)
    }
}

fn listing(entries: &[(&str, Vec<String>)]) -> Listing {
    entries
        .iter()
        .map(|(k, refs)| {
            let mut refs = refs.clone();
            refs.sort();
            (k.to_string(), refs)
        })
        .collect()
}

fn count(list: &[String], r: &str) -> usize {
    list.iter().filter(|x| *x == r).count()
}

/// Two nodes on a topic: a presence tracked on one appears on the other,
/// then leaves, each exactly once in the watcher's diffs.
pub fn replicates(c: &mut dyn Cluster) {
    let a = Node::new(c.store());
    let b = Node::new(c.store());
    b.watch("room");
    let alice = a.track("room", "alice");
    let want = listing(&[("alice", vec![a.r(alice)])]);
    a.await_list("room", &want, WAIT);
    b.await_list("room", &want, WAIT);
    a.untrack("room", "alice", alice);
    b.await_list("room", &Listing::new(), WAIT);
    a.await_list("room", &Listing::new(), WAIT);
    let (joins, leaves) = b.diff_refs("room");
    assert_eq!(count(&joins, &a.r(alice)), 1, "joins {joins:?}");
    assert_eq!(count(&leaves, &a.r(alice)), 1, "leaves {leaves:?}");
}

/// A node that starts watching after the presences were made reads them.
pub fn late_watcher_reads_snapshot(c: &mut dyn Cluster) {
    let a = Node::new(c.store());
    let w = Node::new(c.store());
    w.watch("hall");
    let s1 = a.track("hall", "alice");
    let s2 = a.track("hall", "bob");
    let want = listing(&[("alice", vec![a.r(s1)]), ("bob", vec![a.r(s2)])]);
    w.await_list("hall", &want, WAIT); // they are in the store now
    let late = Node::new(c.store());
    late.watch("hall");
    late.await_list("hall", &want, WAIT);
    let (joins, leaves) = late.diff_refs("hall");
    assert_eq!((joins.len(), leaves.len()), (2, 0), "{joins:?} {leaves:?}");
}

/// Several metas per key across nodes; an update and an untrack.
pub fn metas_and_updates(c: &mut dyn Cluster) {
    let a = Node::new(c.store());
    let b = Node::new(c.store());
    a.watch("t");
    b.watch("t");
    let tab1 = a.track("t", "alice");
    let tab2 = b.track("t", "alice");
    let bob = b.track("t", "bob");
    let want = listing(&[
        ("alice", vec![a.r(tab1), b.r(tab2)]),
        ("bob", vec![b.r(bob)]),
    ]);
    a.await_list("t", &want, WAIT);
    b.await_list("t", &want, WAIT);
    let tab1b = a.update("t", "alice", tab1, r#""status":"away""#);
    let want = listing(&[
        ("alice", vec![a.r(tab1b), b.r(tab2)]),
        ("bob", vec![b.r(bob)]),
    ]);
    b.await_list("t", &want, WAIT);
    let metas = b.metas("t", "alice");
    let updated = metas
        .iter()
        .find(|m| m["phx_ref"] == a.r(tab1b).as_str())
        .expect("the new meta");
    assert_eq!(updated["phx_ref_prev"], a.r(tab1).as_str());
    assert_eq!(updated["status"], "away");
    let (joins, leaves) = b.diff_refs("t");
    assert_eq!(
        count(&leaves, &a.r(tab1)),
        1,
        "the old meta left: {leaves:?}"
    );
    assert_eq!(count(&joins, &a.r(tab1b)), 1);
    b.untrack("t", "alice", tab2);
    let want = listing(&[("alice", vec![a.r(tab1b)]), ("bob", vec![b.r(bob)])]);
    a.await_list("t", &want, WAIT);
}

/// A node killed without a goodbye: its presences leave within the
/// timeout everywhere, and a node watching afterwards never sees them.
pub fn dead_node_leaves(c: &mut dyn Cluster) {
    let a = Node::new(c.store());
    let b = Node::new(c.store());
    b.watch("lobby");
    let s = a.track("lobby", "alice");
    b.await_list("lobby", &listing(&[("alice", vec![a.r(s)])]), WAIT);
    let killed = Instant::now();
    c.kill(a.id());
    b.await_list(
        "lobby",
        &Listing::new(),
        c.timeout() + Duration::from_secs(3),
    );
    let took = killed.elapsed();
    assert!(
        took <= c.timeout() + Duration::from_secs(3),
        "the leave took {took:?}"
    );
    let (_, leaves) = b.diff_refs("lobby");
    assert_eq!(count(&leaves, &a.r(s)), 1);
    let late = Node::new(c.store());
    late.watch("lobby");
    let other = late.track("lobby", "zed");
    late.await_list("lobby", &listing(&[("zed", vec![late.r(other)])]), WAIT);
    b.await_list("lobby", &listing(&[("zed", vec![late.r(other)])]), WAIT);
    assert!(!late.list("lobby").contains_key("alice"));
}

/// Node b dies and a new node takes its users; node a's users never leave
/// or join again for anyone, and the newcomer sees them at once.
pub fn restart_without_storm(c: &mut dyn Cluster) {
    let a = Node::new(c.store());
    let b = Node::new(c.store());
    let w = Node::new(c.store());
    w.watch("r");
    let alice = a.track("r", "alice");
    let bob = b.track("r", "bob");
    let full = listing(&[("alice", vec![a.r(alice)]), ("bob", vec![b.r(bob)])]);
    w.await_list("r", &full, WAIT);
    a.await_list("r", &full, WAIT);
    c.kill(b.id());
    // bob reconnects to the restarted node: a new presence at once, the old
    // one leaves at the timeout
    let b2 = Node::new(c.store());
    let bob2 = b2.track("r", "bob");
    let both = listing(&[
        ("alice", vec![a.r(alice)]),
        ("bob", vec![b.r(bob), b2.r(bob2)]),
    ]);
    w.await_list("r", &both, WAIT);
    let after = listing(&[("alice", vec![a.r(alice)]), ("bob", vec![b2.r(bob2)])]);
    for n in [&w, &a, &b2] {
        n.await_list("r", &after, c.timeout() + Duration::from_secs(3));
    }
    for n in [&w, &a, &b2] {
        let (joins, leaves) = n.diff_refs("r");
        assert!(
            count(&joins, &a.r(alice)) <= 1,
            "alice joined again: {joins:?}"
        );
        assert_eq!(count(&leaves, &a.r(alice)), 0, "alice left: {leaves:?}");
        assert_eq!(count(&joins, &b2.r(bob2)), 1);
    }
}

/// The engine restarts and one node comes back late: nobody leaves or
/// joins again because of it (a node not yet back is not taken for empty
/// or dead); changes made during the outage reach the other nodes when it
/// is back.
pub fn survives_outage(c: &mut dyn Cluster) {
    let a = Node::new(c.store());
    let b = Node::new(c.store());
    b.watch("s");
    let erin = a.track("s", "erin");
    let alice = a.track("s", "alice");
    let dave = b.track("s", "dave");
    let before = listing(&[
        ("alice", vec![a.r(alice)]),
        ("dave", vec![b.r(dave)]),
        ("erin", vec![a.r(erin)]),
    ]);
    a.await_list("s", &before, WAIT);
    b.await_list("s", &before, WAIT);
    c.outage(a.id());
    a.untrack("s", "alice", alice);
    let carol = a.track("s", "carol");
    let after = listing(&[
        ("carol", vec![a.r(carol)]),
        ("dave", vec![b.r(dave)]),
        ("erin", vec![a.r(erin)]),
    ]);
    b.await_list("s", &after, WAIT);
    a.await_list("s", &after, WAIT);
    // Long enough for a node to be wrongly declared dead after the outage.
    let settle = Instant::now() + c.timeout();
    while Instant::now() < settle {
        assert_eq!(b.list("s"), after, "b's view changed after the outage");
        assert_eq!(a.list("s"), after, "a's view changed after the outage");
        std::thread::sleep(Duration::from_millis(20));
    }
    for n in [&a, &b] {
        let (joins, leaves) = n.diff_refs("s");
        for r in [a.r(erin), b.r(dave)] {
            assert_eq!(count(&leaves, &r), 0, "{r} left: {leaves:?}");
            assert!(count(&joins, &r) <= 1, "{r} joined again: {joins:?}");
        }
    }
}

/// What `store`'s [`PresenceStore::fetch`] of `topic` answers, as a listing.
pub fn fetched(store: &Arc<dyn PresenceStore>, topic: &str) -> Result<Listing, String> {
    let (tx, rx) = std::sync::mpsc::channel::<Fetched>();
    store.fetch(
        topic,
        Box::new(move |f| {
            let _ = tx.send(f);
        }),
    );
    let found = rx
        .recv_timeout(WAIT)
        .map_err(|e| format!("no answer: {e}"))?
        .map_err(|e| e.to_string())?;
    let mut out = Listing::new();
    for (owner, entries) in found {
        for (k, m) in entries {
            assert_eq!(m.owner, owner, "an entry under another owner");
            out.entry(k.to_string())
                .or_default()
                .push(phx_ref(m.owner, m.seq));
        }
    }
    for refs in out.values_mut() {
        refs.sort();
    }
    Ok(out)
}

/// Waits (at most `within`) until `store` fetches exactly `want` on `topic`.
fn await_fetch(store: &Arc<dyn PresenceStore>, topic: &str, want: &Listing, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let got = fetched(store, topic);
        if got.as_ref() == Ok(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the store fetches {got:?} on {topic}, expected {want:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A node with no subscriber of a topic reads it from the store: every
/// live node's presences (several metas of a key across nodes), an
/// untrack once written, a dead node's presences left out; a topic
/// nobody is on reads empty; the reading node never starts watching.
pub fn fetch_reads_every_node(c: &mut dyn Cluster) {
    let a = Node::new(c.store());
    let b = Node::new(c.store());
    let reader_store = c.store();
    let reader = Node::new(reader_store.clone());
    let alice_a = a.track("f", "alice");
    let alice_b = b.track("f", "alice");
    let bob = b.track("f", "bob");
    let all = listing(&[
        ("alice", vec![a.r(alice_a), b.r(alice_b)]),
        ("bob", vec![b.r(bob)]),
    ]);
    a.await_list("f", &all, WAIT);
    b.await_list("f", &all, WAIT);
    await_fetch(&reader_store, "f", &all, WAIT);
    assert_eq!(fetched(&reader_store, "nobody"), Ok(Listing::new()));
    b.untrack("f", "bob", bob);
    let no_bob = listing(&[("alice", vec![a.r(alice_a), b.r(alice_b)])]);
    await_fetch(&reader_store, "f", &no_bob, WAIT);
    c.kill(a.id());
    let b_only = listing(&[("alice", vec![b.r(alice_b)])]);
    await_fetch(
        &reader_store,
        "f",
        &b_only,
        c.timeout() + Duration::from_secs(3),
    );
    assert!(
        !reader.tracker.is_watched("f") && reader.list("f").is_empty(),
        "a fetch does not watch"
    );
}

/// Count mode: each node counts distinct keys cluster-wide from its copy,
/// which keeps other nodes' presences by name only (no key, no meta),
/// through joins, a key on two nodes, a leave and a node's death.
pub fn counts_converge(c: &mut dyn Cluster) {
    let a = Node::new(c.store());
    let b = Node::new(c.store());
    let t: Arc<str> = Arc::from("crowd");
    let track = |n: &Node, key: &str| {
        n.tracker
            .track(&t, Mode::Count, Arc::from(key), "".into())
            .0
    };
    b.tracker.state(&t, Mode::Count);
    let alice_a = track(&a, "alice");
    track(&b, "alice");
    track(&b, "bob");
    let carol = track(&a, "carol");
    a.await_count("crowd", 3, WAIT);
    b.await_count("crowd", 3, WAIT);
    assert!(
        b.tracker.list("crowd").is_none(),
        "b has no metas of a's presences to list (the API reads the store)"
    );
    a.untrack("crowd", "carol", carol);
    b.await_count("crowd", 2, WAIT);
    a.untrack("crowd", "alice", alice_a);
    let dave = track(&a, "dave");
    b.await_count("crowd", 3, WAIT);
    let _ = dave;
    c.kill(a.id());
    b.await_count("crowd", 2, c.timeout() + Duration::from_secs(3));
}

/// Every check, in order.
pub fn run_all(c: &mut dyn Cluster) {
    replicates(c);
    late_watcher_reads_snapshot(c);
    metas_and_updates(c);
    dead_node_leaves(c);
    restart_without_storm(c);
    survives_outage(c);
    fetch_reads_every_node(c);
    counts_converge(c);
}
