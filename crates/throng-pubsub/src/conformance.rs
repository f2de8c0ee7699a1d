//! The conformance suite: what every [`Backplane`] must do, checked the same
//! way for each (as phoenix_pubsub runs one shared test suite against every
//! adapter). `tests/backplanes.rs` runs it against [`MemoryBackplane`]
//! and, with a real `redis-server`, [`RedisBackplane`].
//!
//! The suite drives backplanes directly, with a recording [`Handler`] per
//! node standing in for the server. What it asserts:
//! - [`exactly_once`]: each subscribed node gets each broadcast once, and the
//!   broadcasts one node made on a topic in the order it made them;
//! - [`own_broadcasts_skipped`]: a node never gets its own broadcasts back
//!   (it delivered them locally already);
//! - [`only_subscribed_nodes`]: a node without subscribers of a topic gets
//!   none of its broadcasts, before joining and after leaving;
//! - [`direct_messages`]: a control message to a node reaches that node,
//!   once, in the sender's order, and no other node; one to an unknown node
//!   is dropped;
//! - [`cluster_control`]: a control message to the cluster reaches every
//!   other node once, in the sender's order, never the sender, and names
//!   its sender;
//! - [`retained_control`]: a retained control message reaches the nodes of
//!   now and a node that attaches later; a later one under the same key
//!   replaces it, and an expired one is not handed on;
//! - [`resubscribes_after_outage`]: after the shared engine goes away and
//!   comes back, the nodes subscribe again by themselves and broadcasts and
//!   control messages flow.
//!
//! Subscribing is asynchronous for a real engine (a SUBSCRIBE travels to
//! Redis), so the suite waits until a probe broadcast gets through before it
//! counts, and ends each check with a sentinel that, by per-node order,
//! arrives after everything published before it. Every wait is bounded.
//!
//! [`MemoryBackplane`]: crate::MemoryBackplane
//! [`RedisBackplane`]: crate::RedisBackplane

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use throng_protocol::OwnedPayload;

use crate::{Backplane, Broadcast, Handler, Route};

/// How long any one wait of the suite may take.
pub const WAIT: Duration = Duration::from_secs(15);

/// A cluster under test: makes nodes and takes its shared engine away.
pub trait Cluster {
    /// The backplane of one more node of this cluster.
    fn backplane(&mut self) -> Arc<dyn Backplane>;
    /// The engine every node shares goes away and comes back (Redis
    /// restarts); returns once it is back, while nodes may still reconnect.
    fn outage(&mut self);
}

/// What one node received.
#[derive(Default)]
struct Inbox {
    topics: HashSet<Arc<str>>,
    got: Vec<(String, String)>,
    /// Control messages, as text.
    direct: Vec<String>,
    /// The sender of each control message.
    senders: Vec<u64>,
}

/// A node as the suite sees it: a recording [`Handler`] and its backplane.
pub struct Node {
    state: Mutex<Inbox>,
    changed: Condvar,
    backplane: Arc<dyn Backplane>,
}

impl Handler for Node {
    fn deliver(&self, b: Arc<Broadcast>) {
        let mut s = self.lock();
        s.got.push((b.topic.to_string(), b.event.clone()));
        self.changed.notify_all();
    }

    fn has_topic(&self, topic: &str) -> bool {
        self.lock().topics.contains(topic)
    }

    fn topics(&self) -> Vec<Arc<str>> {
        self.lock().topics.iter().cloned().collect()
    }

    fn control(&self, from: u64, msg: &[u8]) {
        let mut s = self.lock();
        s.direct.push(String::from_utf8_lossy(msg).into_owned());
        s.senders.push(from);
        self.changed.notify_all();
    }
}

impl Node {
    /// A node on `backplane`, attached.
    pub fn new(backplane: Arc<dyn Backplane>) -> Arc<Node> {
        let node = Arc::new(Node {
            state: Mutex::default(),
            changed: Condvar::new(),
            backplane,
        });
        let weak: Weak<dyn Handler> = Arc::downgrade(&node) as Weak<dyn Handler>;
        node.backplane.attach(weak);
        node
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A local subscriber of `topic` appears (the node's first).
    pub fn join(&self, topic: &str) {
        self.lock().topics.insert(Arc::from(topic));
        self.backplane.subscribe(topic);
    }

    /// The node's last local subscriber of `topic` leaves.
    pub fn leave(&self, topic: &str) {
        self.lock().topics.remove(topic);
        self.backplane.unsubscribe(topic);
    }

    /// Broadcasts `event` on `topic` from this node.
    pub fn publish(&self, topic: &str, event: &str) {
        let b = Broadcast::new(topic.into(), event.into(), OwnedPayload::empty(), None);
        self.backplane.publish(&b);
    }

    /// The events received on `topic`, in arrival order, probes left out.
    pub fn events(&self, topic: &str) -> Vec<String> {
        self.lock()
            .got
            .iter()
            .filter(|(t, e)| t == topic && !e.starts_with("probe"))
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// Waits until `event` on `topic` has arrived; panics after [`WAIT`].
    pub fn await_event(&self, topic: &str, event: &str) {
        let deadline = Instant::now() + WAIT;
        let mut s = self.lock();
        while !s.got.iter().any(|(t, e)| t == topic && e == event) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "{event} on {topic} never arrived");
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn seen(&self, topic: &str, event: &str) -> bool {
        self.lock()
            .got
            .iter()
            .any(|(t, e)| t == topic && e == event)
    }

    /// Sends control message `msg` to `to` alone.
    pub fn send_to(&self, to: &Node, msg: &str) -> bool {
        self.backplane
            .send_control(Route::Node(to.backplane.node_id()), msg.as_bytes().to_vec())
    }

    /// The direct messages received, in arrival order, probes left out.
    pub fn direct_received(&self) -> Vec<String> {
        self.lock()
            .direct
            .iter()
            .filter(|m| !m.starts_with("probe"))
            .cloned()
            .collect()
    }

    /// Waits until direct message `msg` has arrived; panics after [`WAIT`].
    pub fn await_direct(&self, msg: &str) {
        let deadline = Instant::now() + WAIT;
        let mut s = self.lock();
        while !s.direct.iter().any(|m| m == msg) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "direct message {msg} never arrived");
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits until the backplane says it is connected.
    pub fn await_connected(&self) {
        let deadline = Instant::now() + WAIT;
        while !self.backplane.is_connected() {
            assert!(Instant::now() < deadline, "the backplane never reconnected");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Publishes probes from `from` on `topic` until each of `to` has one:
/// their subscriptions have then reached the engine.
pub fn await_route(from: &Node, to: &[&Node], topic: &str) {
    let deadline = Instant::now() + WAIT;
    for n in 0u64.. {
        let probe = format!("probe:{n}");
        from.publish(topic, &probe);
        let round = Instant::now() + Duration::from_millis(50);
        loop {
            if to.iter().all(|node| node.seen(topic, &probe)) {
                return;
            }
            if Instant::now() > round {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            Instant::now() < deadline,
            "no route on {topic} after {n} probes"
        );
    }
}

/// Sends direct probes from `from` to `to` until one arrives: the route is up.
pub fn await_direct_route(from: &Node, to: &Node) {
    let deadline = Instant::now() + WAIT;
    for n in 0u64.. {
        let probe = format!("probe:{n}");
        from.send_to(to, &probe);
        let round = Instant::now() + Duration::from_millis(50);
        while Instant::now() < round {
            if to.lock().direct.contains(&probe) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            Instant::now() < deadline,
            "no direct route after {n} probes"
        );
    }
}

/// Three nodes: a sends 100 numbered direct messages to b and one to an id
/// no node has. b gets a's 100 once each, in order; a and c get none.
pub fn direct_messages(cluster: &mut dyn Cluster) {
    let nodes: Vec<Arc<Node>> = (0..3).map(|_| Node::new(cluster.backplane())).collect();
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let ids: HashSet<u64> = nodes.iter().map(|n| n.backplane.node_id()).collect();
    assert_eq!(ids.len(), 3, "node ids are not distinct");
    await_direct_route(a, b);
    await_direct_route(c, b);
    let unknown = (0..u64::MAX)
        .find(|id| !ids.contains(id))
        .unwrap_or(u64::MAX);
    a.backplane
        .send_control(Route::Node(unknown), b"lost".to_vec());
    for k in 0..100 {
        assert!(a.send_to(b, &format!("d{k}")), "send_to refused d{k}");
    }
    a.send_to(b, "end");
    b.await_direct("end");
    let want: Vec<String> = (0..100)
        .map(|k| format!("d{k}"))
        .chain(["end".to_string()])
        .collect();
    assert_eq!(b.direct_received(), want);
    // By per-sender order, a stray copy of a's messages would reach c
    // before a's probe to c, and a before c's probe to a.
    await_direct_route(a, c);
    await_direct_route(c, a);
    assert!(c.direct_received().is_empty(), "{:?}", c.direct_received());
    assert!(a.direct_received().is_empty(), "{:?}", a.direct_received());
}

/// Three nodes on one topic; each publishes 100 numbered broadcasts: every
/// other node gets each exactly once, in the publisher's order.
pub fn exactly_once(cluster: &mut dyn Cluster) {
    let nodes: Vec<Arc<Node>> = (0..3).map(|_| Node::new(cluster.backplane())).collect();
    for n in &nodes {
        n.join("room");
    }
    for (i, from) in nodes.iter().enumerate() {
        let others: Vec<&Node> = nodes
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, n)| &**n)
            .collect();
        await_route(from, &others, "room");
    }
    for (i, from) in nodes.iter().enumerate() {
        for k in 0..100 {
            from.publish("room", &format!("n{i}:{k}"));
        }
        from.publish("room", &format!("end{i}"));
    }
    for (j, node) in nodes.iter().enumerate() {
        for i in (0..3).filter(|i| *i != j) {
            node.await_event("room", &format!("end{i}"));
        }
        let got = node.events("room");
        for i in (0..3).filter(|i| *i != j) {
            let from_i: Vec<&String> = got
                .iter()
                .filter(|e| e.starts_with(&format!("n{i}:")))
                .collect();
            let want: Vec<String> = (0..100).map(|k| format!("n{i}:{k}")).collect();
            assert_eq!(
                from_i.len(),
                100,
                "node {j} got {} of node {i}'s 100",
                from_i.len()
            );
            assert!(
                from_i.iter().zip(&want).all(|(a, b)| *a == b),
                "node {j} got node {i}'s broadcasts out of order: {from_i:?}"
            );
        }
    }
}

/// A node's own broadcasts do not come back to it.
pub fn own_broadcasts_skipped(cluster: &mut dyn Cluster) {
    let a = Node::new(cluster.backplane());
    let b = Node::new(cluster.backplane());
    a.join("self");
    b.join("self");
    await_route(&a, &[&b], "self");
    await_route(&b, &[&a], "self");
    a.publish("self", "mine");
    b.await_event("self", "mine");
    // The engine handled "mine" before b's sentinel, so a's copy of it, if
    // it were delivered, would be in a's inbox before the sentinel.
    b.publish("self", "sentinel");
    a.await_event("self", "sentinel");
    assert!(
        !a.events("self").contains(&"mine".to_string()),
        "a node got its own broadcast back"
    );
}

/// A node gets no broadcast of a topic it has no subscriber of: not before
/// it joins, and not once its leave has reached the engine.
pub fn only_subscribed_nodes(cluster: &mut dyn Cluster) {
    let a = Node::new(cluster.backplane());
    let b = Node::new(cluster.backplane());
    a.join("watch");
    b.join("other");
    await_route(&a, &[&b], "other");
    a.publish("topic", "unheard");
    a.publish("other", "after-unheard");
    b.await_event("other", "after-unheard");
    assert!(
        b.events("topic").is_empty(),
        "a non-subscriber got a broadcast"
    );

    b.join("topic");
    await_route(&a, &[&b], "topic");
    b.leave("topic");
    // Once a round's sentinel arrives without that round's broadcast, the
    // unsubscribe has reached the engine; later rounds must stay silent.
    let deadline = Instant::now() + WAIT;
    let mut quiet_from = None;
    for round in 0.. {
        a.publish("topic", &format!("r{round}"));
        a.publish("other", &format!("s{round}"));
        b.await_event("other", &format!("s{round}"));
        let heard = b.events("topic").contains(&format!("r{round}"));
        match (heard, quiet_from) {
            (false, None) => quiet_from = Some(round),
            (true, Some(q)) => panic!("round {round} reached a node that left in round {q}"),
            _ => {}
        }
        if quiet_from.is_some_and(|q| round >= q + 20) {
            break;
        }
        assert!(Instant::now() < deadline, "the leave never took effect");
    }
}

/// The engine goes away and comes back: both nodes reconnect, subscribe
/// again without being asked, and broadcasts flow, once each.
pub fn resubscribes_after_outage(cluster: &mut dyn Cluster) {
    let a = Node::new(cluster.backplane());
    let b = Node::new(cluster.backplane());
    a.join("durable");
    b.join("durable");
    await_route(&a, &[&b], "durable");
    cluster.outage();
    a.await_connected();
    b.await_connected();
    await_route(&a, &[&b], "durable");
    await_route(&b, &[&a], "durable");
    await_direct_route(&a, &b);
    await_direct_route(&b, &a);
    for k in 0..20 {
        a.publish("durable", &format!("k{k}"));
    }
    a.publish("durable", "done");
    b.await_event("durable", "done");
    let got = b.events("durable");
    let after: Vec<&String> = got.iter().filter(|e| e.starts_with('k')).collect();
    let want: Vec<String> = (0..20).map(|k| format!("k{k}")).collect();
    assert_eq!(after.len(), 20, "got {after:?}");
    assert!(after.iter().zip(&want).all(|(a, b)| *a == b), "{after:?}");
}

/// Three nodes: a sends 50 numbered control messages to the cluster. b and
/// c get them once each, in order, from a; a gets none of its own.
pub fn cluster_control(cluster: &mut dyn Cluster) {
    let nodes: Vec<Arc<Node>> = (0..3).map(|_| Node::new(cluster.backplane())).collect();
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    // Node routes up means the session (and the cluster channel with it)
    // is subscribed.
    await_direct_route(a, b);
    await_direct_route(a, c);
    await_direct_route(b, a);
    for k in 0..50 {
        assert!(
            a.backplane
                .send_control(Route::Cluster, format!("c{k}").into_bytes()),
            "send_control refused c{k}"
        );
    }
    a.backplane.send_control(Route::Cluster, b"end".to_vec());
    b.await_direct("end");
    c.await_direct("end");
    let want: Vec<String> = (0..50)
        .map(|k| format!("c{k}"))
        .chain(["end".to_string()])
        .collect();
    for n in [b, c] {
        assert_eq!(n.direct_received(), want);
        let s = n.lock();
        let from_a = a.backplane.node_id();
        assert!(
            s.direct
                .iter()
                .zip(&s.senders)
                .all(|(m, f)| m.starts_with("probe") || *f == from_a),
            "a control message named the wrong sender"
        );
    }
    // By per-sender order, a copy of a's own messages would be back
    // before b's probe.
    await_direct_route(b, a);
    assert!(a.direct_received().is_empty(), "{:?}", a.direct_received());
}

/// A retained control message reaches the nodes there now and a node that
/// attaches later; under one key the last one wins; an expired one is not
/// handed on.
pub fn retained_control(cluster: &mut dyn Cluster) {
    let a = Node::new(cluster.backplane());
    let b = Node::new(cluster.backplane());
    await_direct_route(a.as_ref(), &b);
    let key = format!("conformance:{}", a.backplane.node_id());
    let long = Duration::from_secs(60);
    assert!(a.backplane.retain_control(&key, b"v1".to_vec(), long));
    assert!(a.backplane.retain_control(&key, b"v2".to_vec(), long));
    let brief = format!("{key}:brief");
    assert!(a
        .backplane
        .retain_control(&brief, b"brief".to_vec(), Duration::from_millis(50)));
    b.await_direct("v2");
    b.await_direct("brief");
    assert_eq!(b.direct_received(), ["v1", "v2", "brief"]);
    // Past the brief one's expiry (and a's SETs have reached the engine:
    // b got them), a node arrives.
    std::thread::sleep(Duration::from_millis(200));
    let c = Node::new(cluster.backplane());
    c.await_direct("v2");
    await_direct_route(&a, &c);
    let got = c.direct_received();
    assert_eq!(got, ["v2"], "a late node got {got:?}");
}

/// Every check, in order.
pub fn run_all(cluster: &mut dyn Cluster) {
    exactly_once(cluster);
    own_broadcasts_skipped(cluster);
    only_subscribed_nodes(cluster);
    direct_messages(cluster);
    cluster_control(cluster);
    retained_control(cluster);
    resubscribes_after_outage(cluster);
}
