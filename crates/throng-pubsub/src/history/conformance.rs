//! The suite every [`HistoryStore`] must pass, as the backplanes share
//! [`crate::conformance`]: `tests/history_stores.rs` runs it against
//! [`MemoryHistory`](super::MemoryHistory) and against
//! [`RedisHistory`](super::RedisHistory) on a real `redis-server`.
//!
//! Each check takes a [`Cluster`]: the stores of several nodes sharing one
//! history, and a way to lose it (a Redis restart without persistence; a
//! new process for the store in memory). They panic on failure and are
//! bounded in time.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use throng_protocol::OwnedPayload;

use super::{HistoryStore, Position, Replay};

/// How long a check waits for one answer.
const WAIT: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(600);

/// Nodes sharing one history.
pub trait Cluster {
    /// The store of a new node.
    fn node(&mut self) -> Arc<dyn HistoryStore>;
    /// Loses every topic's history; the nodes made before keep working
    /// (reconnecting if they must).
    fn lose(&mut self);
}

/// Appends `{"n": n}` to `topic`, retrying (for at most [`WAIT`]) while the
/// store cannot, as after an outage.
pub fn append(
    store: &Arc<dyn HistoryStore>,
    topic: &str,
    size: usize,
    ttl: Duration,
    n: u64,
) -> Position {
    let topic: Arc<str> = Arc::from(topic);
    let deadline = Instant::now() + WAIT;
    loop {
        let (tx, rx) = mpsc::channel();
        let payload = OwnedPayload::Json(format!("{{\"n\":{n}}}"));
        store.append(
            &topic,
            size,
            ttl,
            "e",
            payload,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        match rx.recv_timeout(WAIT) {
            Ok(Ok(at)) => return at,
            Ok(Err(e)) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            other => panic!("append to {topic}: {other:?}"),
        }
    }
}

/// Reads `topic` after `since`.
pub fn fetch(
    store: &Arc<dyn HistoryStore>,
    topic: &str,
    since: Option<&str>,
    limit: usize,
    size: usize,
) -> Replay {
    let (tx, rx) = mpsc::channel();
    store.fetch(
        topic,
        since,
        limit,
        size,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx.recv_timeout(WAIT).expect("a read answered")
}

/// The `n` of each message.
pub fn numbers(r: &Replay) -> Vec<u64> {
    r.messages
        .iter()
        .map(|e| match &e.payload {
            OwnedPayload::Json(s) => serde_json::from_str::<serde_json::Value>(s)
                .ok()
                .and_then(|v| v["n"].as_u64())
                .unwrap_or(u64::MAX),
            OwnedPayload::Binary(_) => u64::MAX,
        })
        .collect()
}

fn offsets(r: &Replay) -> Vec<u64> {
    r.messages.iter().map(|e| e.offset).collect()
}

fn topic(name: &str) -> String {
    // Unique per run: a Redis kept between runs holds older topics.
    format!("conformance:{name}:{:x}", crate::link::random_node_id())
}

/// Offsets grow by one per message; a read after a position returns every
/// later message in order, with its ref; `limit` and "the newest" reads.
pub fn ordering(c: &mut impl Cluster) {
    let s = c.node();
    let t = topic("order");
    let refs: Vec<Position> = (0..20).map(|n| append(&s, &t, 100, TTL, n)).collect();
    for (i, p) in refs.iter().enumerate() {
        assert_eq!(p.offset, i as u64 + 1);
        assert_eq!(p.epoch, refs[0].epoch);
    }
    let r = fetch(&s, &t, Some(&refs[0].to_ref()), usize::MAX, 100);
    assert!(r.recovered);
    assert_eq!(offsets(&r), (2..=20).collect::<Vec<_>>());
    assert_eq!(numbers(&r), (1..20).collect::<Vec<_>>());
    assert_eq!(r.ref_of(&r.messages[0]), refs[1].to_ref());
    assert_eq!(r.last, 20);
    let r = fetch(&s, &t, Some(&refs[19].to_ref()), usize::MAX, 100);
    assert!(r.recovered && r.messages.is_empty(), "up to date");
    let r = fetch(&s, &t, Some(&refs[0].to_ref()), 3, 100);
    assert_eq!(numbers(&r), [1, 2, 3]);
    let r = fetch(&s, &t, None, 5, 100);
    assert!(!r.recovered, "no position, nothing to recover from");
    assert_eq!(numbers(&r), [15, 16, 17, 18, 19]);
    let from_start = Position {
        epoch: refs[0].epoch,
        offset: 0,
    };
    let r = fetch(&s, &t, Some(&from_start.to_ref()), usize::MAX, 100);
    assert!(r.recovered);
    assert_eq!(numbers(&r), (0..20).collect::<Vec<_>>());
}

/// A topic keeps its rule's size: a position older than that is not
/// recovered, one within it is, exactly (whatever a store keeps beyond).
pub fn trimming(c: &mut impl Cluster) {
    let s = c.node();
    let t = topic("trim");
    let refs: Vec<Position> = (0..300).map(|n| append(&s, &t, 10, TTL, n)).collect();
    let r = fetch(&s, &t, Some(&refs[0].to_ref()), usize::MAX, 10);
    assert!(!r.recovered && r.messages.is_empty());
    let r = fetch(&s, &t, Some(&refs[288].to_ref()), usize::MAX, 10);
    assert!(!r.recovered, "11 messages behind, 10 kept");
    let r = fetch(&s, &t, Some(&refs[289].to_ref()), usize::MAX, 10);
    assert!(r.recovered);
    assert_eq!(numbers(&r), (290..300).collect::<Vec<_>>());
}

/// A topic is forgotten its ttl after its last message: a later message
/// starts a new epoch, and older positions are not recovered.
pub fn ttl(c: &mut impl Cluster) {
    let s = c.node();
    let t = topic("ttl");
    let ttl = Duration::from_secs(1);
    let a = append(&s, &t, 10, ttl, 0);
    append(&s, &t, 10, ttl, 1);
    std::thread::sleep(Duration::from_millis(2300));
    let r = fetch(&s, &t, Some(&a.to_ref()), usize::MAX, 10);
    assert!(!r.recovered && r.messages.is_empty());
    let b = append(&s, &t, 10, ttl, 2);
    assert_eq!(b.offset, 1);
    assert_ne!(b.epoch, a.epoch);
    let r = fetch(&s, &t, Some(&a.to_ref()), usize::MAX, 10);
    assert!(!r.recovered, "a position of the old epoch");
}

/// History lost (Redis restarted without persistence): a new epoch, and
/// the old positions are not recovered, never silently skipped.
pub fn epoch_changes_when_lost(c: &mut impl Cluster) {
    let s = c.node();
    let t = topic("lost");
    let old: Vec<Position> = (0..3).map(|n| append(&s, &t, 10, TTL, n)).collect();
    c.lose();
    let new = append(&s, &t, 10, TTL, 3);
    assert_ne!(new.epoch, old[0].epoch);
    assert_eq!(new.offset, 1);
    let r = fetch(&s, &t, Some(&old[1].to_ref()), usize::MAX, 10);
    assert!(!r.recovered && r.messages.is_empty());
    assert_eq!(r.epoch, new.epoch);
    let start = Position {
        epoch: new.epoch,
        offset: 0,
    };
    let r = fetch(&s, &t, Some(&start.to_ref()), usize::MAX, 10);
    assert!(r.recovered);
    assert_eq!(numbers(&r), [3]);
}

/// A malformed, forged, future or foreign position recovers nothing.
pub fn bad_positions(c: &mut impl Cluster) {
    let s = c.node();
    let (t, u) = (topic("bad"), topic("other"));
    let refs: Vec<Position> = (0..3).map(|n| append(&s, &t, 10, TTL, n)).collect();
    let other = append(&s, &u, 10, TTL, 0);
    let e = refs[0].epoch;
    for bad in [
        "1".to_string(),
        "garbage".into(),
        format!("{e:016x}.4"),
        format!("{e:016x}.99999999999"),
        format!("{:016x}.1", e ^ 1),
        other.to_ref(),
    ] {
        let r = fetch(&s, &t, Some(&bad), usize::MAX, 10);
        assert!(!r.recovered && r.messages.is_empty(), "{bad}");
    }
    let r = fetch(&s, &topic("none"), Some(&refs[0].to_ref()), usize::MAX, 10);
    assert!(!r.recovered && r.messages.is_empty());
}

/// Several nodes publishing on one topic at once: every message gets its
/// own offset, offsets have no hole, each node's messages keep its order,
/// and a read returns them all (more than one read batch).
pub fn concurrent_publishers(c: &mut impl Cluster) {
    const NODES: u64 = 3;
    const EACH: u64 = 250;
    let t = topic("concurrent");
    let stores: Vec<_> = (0..NODES).map(|_| c.node()).collect();
    let first = append(&stores[0], &t, 1000, TTL, u64::MAX - 1);
    let threads: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let (s, t) = (s.clone(), t.clone());
            std::thread::spawn(move || {
                (0..EACH)
                    .map(|i| append(&s, &t, 1000, TTL, k as u64 * 1000 + i))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all: Vec<Position> = Vec::new();
    for th in threads {
        let mine = th.join().expect("a publisher");
        assert!(
            mine.windows(2).all(|w| w[0].offset < w[1].offset),
            "one node's order"
        );
        all.extend(mine);
    }
    all.sort_by_key(|p| p.offset);
    let want: Vec<u64> = (2..=NODES * EACH + 1).collect();
    assert_eq!(all.iter().map(|p| p.offset).collect::<Vec<_>>(), want);
    assert!(all.iter().all(|p| p.epoch == first.epoch));
    let r = fetch(&stores[1], &t, Some(&first.to_ref()), usize::MAX, 1000);
    assert!(r.recovered);
    assert_eq!(offsets(&r), want);
    let ns = numbers(&r);
    for k in 0..NODES {
        let node: Vec<u64> = ns.iter().copied().filter(|n| n / 1000 == k).collect();
        assert_eq!(
            node,
            (k * 1000..k * 1000 + EACH).collect::<Vec<_>>(),
            "node {k}"
        );
    }
}
