//! [`MemoryBackplane`]: several nodes in one process, joined by a
//! [`MemoryBus`] that behaves as Redis pub/sub does for them: a node receives
//! the broadcasts of topics it subscribed, made on other nodes, once each,
//! in the order each node made them; a node that loses the bus loses its
//! subscriptions and must subscribe again when it is back.
//!
//! Control messages ([`Backplane::send_control`]) reach the member with
//! that id, or every other member, if both ends are on the bus; retained
//! ones ([`Backplane::retain_control`]) are kept on the bus until they
//! expire and handed to a member when it attaches or the bus comes back.
//!
//! Delivery is synchronous, on the publishing thread: the receiving node's
//! [`Handler::deliver`] (and [`Handler::control`]) only queues the work for
//! its shards, so this never blocks an event loop for long. Tests use it to run a cluster (and
//! the conformance suite) without a Redis server.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::{Backplane, Handler, Route};
use crate::Broadcast;

/// The shared medium: every node of one in-memory cluster.
#[derive(Default)]
pub struct MemoryBus {
    nodes: Mutex<Vec<Arc<Member>>>,
    next_id: AtomicU64,
    /// Retained control messages by key.
    retained: Mutex<HashMap<String, Retained>>,
}

/// A retained control message: its sender, its body, when it expires.
type Retained = (u64, Vec<u8>, Instant);

struct Member {
    id: u64,
    handler: OnceLock<Weak<dyn Handler>>,
    /// Topics subscribed on the bus; emptied when the node loses the bus.
    subscribed: Mutex<HashSet<Arc<str>>>,
    connected: AtomicBool,
}

impl Member {
    fn handler(&self) -> Option<Arc<dyn Handler>> {
        self.handler.get().and_then(Weak::upgrade)
    }

    fn subscribed(&self) -> std::sync::MutexGuard<'_, HashSet<Arc<str>>> {
        self.subscribed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl MemoryBus {
    pub fn new() -> Arc<MemoryBus> {
        Arc::new(MemoryBus::default())
    }

    /// A backplane for one more node on this bus.
    pub fn node(self: &Arc<Self>) -> MemoryBackplane {
        let member = Arc::new(Member {
            id: self.next_id.fetch_add(1, Relaxed),
            handler: OnceLock::new(),
            subscribed: Mutex::new(HashSet::new()),
            connected: AtomicBool::new(true),
        });
        self.members().push(member.clone());
        MemoryBackplane {
            bus: self.clone(),
            me: member,
        }
    }

    fn members(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Member>>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `m` the retained control messages of the other members that
    /// have not expired.
    fn replay(&self, m: &Member) {
        let Some(h) = m.handler() else { return };
        let now = Instant::now();
        let kept: Vec<(u64, Vec<u8>)> = {
            let mut retained = self.retained.lock().unwrap_or_else(|e| e.into_inner());
            retained.retain(|_, (_, _, until)| *until > now);
            retained
                .values()
                .filter(|(from, _, _)| *from != m.id)
                .map(|(from, body, _)| (*from, body.clone()))
                .collect()
        };
        for (from, body) in kept {
            h.control(from, &body);
        }
    }

    /// Every node loses the bus, and with it its subscriptions (as when
    /// Redis restarts); broadcasts meanwhile reach no other node.
    pub fn outage(&self) {
        for m in self.members().iter() {
            m.connected.store(false, Relaxed);
            m.subscribed().clear();
        }
    }

    /// The bus is back: every node reconnects and subscribes again to the
    /// topics its node has subscribers of (as the Redis backplane does).
    pub fn restore(&self) {
        let members: Vec<Arc<Member>> = self.members().clone();
        for m in members {
            if let Some(h) = m.handler() {
                m.subscribed().extend(h.topics());
            }
            m.connected.store(true, Relaxed);
            self.replay(&m);
        }
    }
}

/// One node's end of a [`MemoryBus`].
pub struct MemoryBackplane {
    bus: Arc<MemoryBus>,
    me: Arc<Member>,
}

impl MemoryBackplane {
    /// Subscribes or unsubscribes `topic` as the node's topic set says now,
    /// whatever call asked: two shards' first/last-subscriber calls may come
    /// out of order, the set is always current (the Redis backplane does
    /// the same). Lock order: this member's set, then the node's topics.
    fn reconcile(&self, topic: &str) {
        if !self.me.connected.load(Relaxed) {
            return;
        }
        let mut subscribed = self.me.subscribed();
        let wanted = self.me.handler().is_some_and(|h| h.has_topic(topic));
        if wanted {
            subscribed.insert(Arc::from(topic));
        } else {
            subscribed.remove(topic);
        }
    }
}

impl Backplane for MemoryBackplane {
    fn attach(&self, handler: Weak<dyn Handler>) {
        let _ = self.me.handler.set(handler);
        self.bus.replay(&self.me);
    }

    fn publish(&self, b: &Broadcast) {
        if !self.me.connected.load(Relaxed) {
            return;
        }
        let members: Vec<Arc<Member>> = self.bus.members().clone();
        for m in members {
            if m.id == self.me.id || !m.connected.load(Relaxed) {
                continue;
            }
            if !m.subscribed().contains(&*b.topic) {
                continue;
            }
            if let Some(h) = m.handler() {
                // Each receiving node encodes its own copy, as from Redis.
                h.deliver(Arc::new(Broadcast::new(
                    b.topic.clone(),
                    b.event.clone(),
                    b.payload.clone(),
                    None,
                )));
            }
        }
    }

    fn subscribe(&self, topic: &str) {
        self.reconcile(topic);
    }

    fn unsubscribe(&self, topic: &str) {
        self.reconcile(topic);
    }

    fn is_connected(&self) -> bool {
        self.me.connected.load(Relaxed)
    }

    fn node_id(&self) -> u64 {
        self.me.id
    }

    fn send_control(&self, route: Route, body: Vec<u8>) -> bool {
        if !self.me.connected.load(Relaxed) {
            return false;
        }
        let to: Vec<Arc<Member>> = self
            .bus
            .members()
            .iter()
            .filter(|m| m.id != self.me.id && m.connected.load(Relaxed))
            .filter(|m| route == Route::Cluster || route == Route::Node(m.id))
            .cloned()
            .collect();
        let mut sent = false;
        for h in to.iter().filter_map(|m| m.handler()) {
            h.control(self.me.id, &body);
            sent = true;
        }
        sent
    }

    fn retain_control(&self, key: &str, body: Vec<u8>, ttl: Duration) -> bool {
        if !self.me.connected.load(Relaxed) {
            return false;
        }
        self.bus
            .retained
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                key.to_string(),
                (self.me.id, body.clone(), Instant::now() + ttl),
            );
        self.send_control(Route::Cluster, body);
        true
    }
}
