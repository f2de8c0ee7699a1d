//! [`MemoryPresence`]: several nodes in one process, joined by a
//! [`MemoryPresenceBus`] that plays Redis's part for presence: it keeps each
//! owner's presences per topic, tells the nodes watching a topic of each
//! change, answers snapshots, and declares a node dead when it has not
//! shown signs of life for the timeout (`kill` stops a node without a
//! goodbye, as SIGKILL does). `outage`/`restore` wipe and bring back the
//! engine, as a Redis restart does.
//!
//! The bus runs on its own thread and the nodes' calls only queue for it
//! (a store must not call back into the node synchronously), so it is the
//! same asynchronous shape as the Redis store and the same conformance
//! suite applies.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};

use super::entry::Meta;
use super::{Delta, FetchReply, PresenceSink, PresenceStore};

enum Cmd {
    Attach(u64, Weak<dyn PresenceSink>, Arc<AtomicBool>),
    Publish(u64, Arc<str>, Delta),
    Watch(u64, Arc<str>),
    Unwatch(u64, Arc<str>),
    Fetch(Arc<str>, FetchReply),
    Kill(u64),
    Outage,
    Restore,
    Hold(u64, bool),
}

/// The shared engine of one in-process cluster.
pub struct MemoryPresenceBus {
    tx: Sender<Cmd>,
    next_id: AtomicU64,
}

impl MemoryPresenceBus {
    /// A bus whose nodes are dead after `timeout` without a sign of life.
    pub fn new(timeout: Duration) -> Arc<MemoryPresenceBus> {
        let (tx, rx) = std::sync::mpsc::channel();
        let engine = Engine {
            timeout,
            members: HashMap::new(),
            hashes: HashMap::new(),
            subs: HashMap::new(),
            up: true,
        };
        let _ = std::thread::Builder::new()
            .name("throng-presence-bus".into())
            .spawn(move || engine.run(rx));
        Arc::new(MemoryPresenceBus {
            tx,
            next_id: AtomicU64::new(1),
        })
    }

    /// The store of one more node.
    pub fn node(self: &Arc<Self>) -> MemoryPresence {
        MemoryPresence {
            bus: self.clone(),
            id: self.next_id.fetch_add(1, Relaxed) << 32 | 0x5eed,
            connected: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Stops node `id` as a crash would: no more signs of life, no goodbye.
    pub fn kill(&self, id: u64) {
        let _ = self.tx.send(Cmd::Kill(id));
    }

    /// The engine loses everything and every node its connection.
    pub fn outage(&self) {
        let _ = self.tx.send(Cmd::Outage);
    }

    /// The engine is back; every live node not held reconnects, rewrites
    /// its presences and reads the others' again.
    pub fn restore(&self) {
        let _ = self.tx.send(Cmd::Restore);
    }

    /// Node `id` stays cut off from the engine (through outages too) until
    /// [`release`](Self::release)d: a node that reconnects late.
    pub fn hold(&self, id: u64) {
        let _ = self.tx.send(Cmd::Hold(id, true));
    }

    /// Node `id` reconnects, if the engine is up.
    pub fn release(&self, id: u64) {
        let _ = self.tx.send(Cmd::Hold(id, false));
    }
}

/// One node's end of a [`MemoryPresenceBus`].
pub struct MemoryPresence {
    bus: Arc<MemoryPresenceBus>,
    id: u64,
    connected: Arc<AtomicBool>,
}

impl PresenceStore for MemoryPresence {
    fn attach(&self, sink: Weak<dyn PresenceSink>) {
        let _ = self
            .bus
            .tx
            .send(Cmd::Attach(self.id, sink, self.connected.clone()));
    }
    fn node_id(&self) -> u64 {
        self.id
    }
    fn publish(&self, topic: &str, delta: Delta) {
        let _ = self.bus.tx.send(Cmd::Publish(self.id, topic.into(), delta));
    }
    fn watch(&self, topic: &str) {
        let _ = self.bus.tx.send(Cmd::Watch(self.id, topic.into()));
    }
    fn unwatch(&self, topic: &str) {
        let _ = self.bus.tx.send(Cmd::Unwatch(self.id, topic.into()));
    }
    fn fetch(&self, topic: &str, done: FetchReply) {
        let _ = self.bus.tx.send(Cmd::Fetch(topic.into(), done));
    }
    fn is_connected(&self) -> bool {
        self.connected.load(Relaxed)
    }
}

struct Member {
    sink: Weak<dyn PresenceSink>,
    connected: Arc<AtomicBool>,
    killed: bool,
    /// Cut off from the engine (held).
    held: bool,
    /// Has written its state since the engine came up (Redis: its liveness
    /// key exists): only then do readers take its presences as complete.
    synced: bool,
    /// Its last sign of life.
    seen: Instant,
}

type Entries = HashMap<u64, (Arc<str>, Meta)>;

struct Engine {
    timeout: Duration,
    members: HashMap<u64, Member>,
    /// (owner, topic) -> that owner's presences there.
    hashes: HashMap<(u64, Arc<str>), Entries>,
    /// topic -> the members watching it.
    subs: HashMap<Arc<str>, HashSet<u64>>,
    up: bool,
}

impl Engine {
    fn run(mut self, rx: Receiver<Cmd>) {
        let tick = (self.timeout / 10).max(Duration::from_millis(5));
        loop {
            match rx.recv_timeout(tick) {
                Ok(cmd) => self.handle(cmd),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            self.tick();
        }
    }

    fn sink(&self, id: u64) -> Option<Arc<dyn PresenceSink>> {
        let m = self.members.get(&id)?;
        if m.killed || m.held || !self.up {
            return None;
        }
        m.sink.upgrade()
    }

    /// Whether `id` may act: the engine is up, the node connected.
    fn live(&self, id: u64) -> bool {
        self.up && self.members.get(&id).is_some_and(|m| !m.killed && !m.held)
    }

    /// Whether readers take `id`'s presences as complete: it wrote them
    /// since the engine came up and is not yet declared dead (a killed
    /// node's liveness key lives on until it expires, in Redis too).
    fn alive(&self, id: u64) -> bool {
        self.up && self.members.get(&id).is_some_and(|m| m.synced)
    }

    fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Attach(id, sink, connected) => {
                self.members.insert(
                    id,
                    Member {
                        sink,
                        connected,
                        killed: false,
                        held: false,
                        synced: true,
                        seen: Instant::now(),
                    },
                );
            }
            Cmd::Publish(id, topic, delta) => self.publish(id, topic, delta),
            Cmd::Watch(id, topic) => {
                if self.live(id) {
                    self.subs.entry(topic.clone()).or_default().insert(id);
                    self.snapshot(id, &topic);
                }
            }
            Cmd::Unwatch(id, topic) => {
                let still = self.sink(id).is_some_and(|s| s.is_watched(&topic));
                if !still {
                    if let Some(s) = self.subs.get_mut(&topic) {
                        s.remove(&id);
                    }
                }
            }
            Cmd::Fetch(topic, done) => self.fetch(topic, done),
            Cmd::Kill(id) => {
                if let Some(m) = self.members.get_mut(&id) {
                    m.killed = true;
                    m.connected.store(false, Relaxed);
                }
            }
            Cmd::Outage => {
                self.up = false;
                self.hashes.clear();
                self.subs.clear();
                for m in self.members.values_mut() {
                    m.connected.store(false, Relaxed);
                    m.synced = false;
                }
            }
            Cmd::Restore => {
                self.up = true;
                // Every node's grace starts now, as a new Redis session's does.
                let now = Instant::now();
                for m in self.members.values_mut().filter(|m| !m.killed) {
                    m.seen = now;
                }
                let ids: Vec<u64> = self.members.keys().copied().collect();
                for id in ids {
                    self.reconnect(id);
                }
            }
            Cmd::Hold(id, held) => {
                let Some(m) = self.members.get_mut(&id) else {
                    return;
                };
                m.held = held;
                if held {
                    m.connected.store(false, Relaxed);
                    m.synced = false;
                    for s in self.subs.values_mut() {
                        s.remove(&id);
                    }
                } else if self.up {
                    self.reconnect(id);
                }
            }
        }
    }

    /// Member `id`'s change on `topic`: kept in its hash, passed to the
    /// topic's watchers.
    fn publish(&mut self, id: u64, topic: Arc<str>, delta: Delta) {
        if !self.live(id) {
            return; // rewritten from the node's state when it is back
        }
        let hash = self.hashes.entry((id, topic.clone())).or_default();
        for (_, m) in &delta.leaves {
            hash.remove(&m.seq);
        }
        for (k, m) in &delta.joins {
            hash.insert(m.seq, (k.clone(), m.clone()));
        }
        for w in self.watchers(&topic, id) {
            w.apply(&topic, delta.clone());
        }
    }

    /// Answers `done` with every live node's presences on `topic`, by node.
    fn fetch(&self, topic: Arc<str>, done: FetchReply) {
        if !self.up {
            done(Err(crate::Error::PresenceUnavailable(
                "the engine is down".into(),
            )));
            return;
        }
        let mut out: Vec<(u64, super::Entries)> = self
            .hashes
            .iter()
            .filter(|((o, t), h)| *t == topic && !h.is_empty() && self.alive(*o))
            .map(|((o, _), h)| (*o, h.values().cloned().collect()))
            .collect();
        out.sort_by_key(|(o, _)| *o);
        done(Ok(out));
    }

    /// Member `id` (re)connects: rewrites its presences, then watches its
    /// topics again, as the Redis store's session setup does.
    fn reconnect(&mut self, id: u64) {
        let Some(sink) = self.sink(id) else { return };
        if let Some(m) = self.members.get_mut(&id) {
            m.seen = Instant::now();
        }
        let old: Vec<Arc<str>> = self
            .hashes
            .keys()
            .filter(|(o, _)| *o == id)
            .map(|(_, t)| t.clone())
            .collect();
        let owned = sink.owned();
        for topic in old {
            if !owned.iter().any(|(t, _)| *t == topic) {
                self.hashes.remove(&(id, topic.clone()));
                for w in self.watchers(&topic, id) {
                    w.replace(&topic, id, Vec::new());
                }
            }
        }
        for (topic, entries) in owned {
            let hash: Entries = entries
                .iter()
                .map(|(k, m)| (m.seq, (k.clone(), m.clone())))
                .collect();
            self.hashes.insert((id, topic.clone()), hash);
            for w in self.watchers(&topic, id) {
                w.replace(&topic, id, entries.clone());
            }
        }
        if let Some(m) = self.members.get_mut(&id) {
            m.synced = true;
        }
        for topic in sink.watched() {
            self.subs.entry(topic.clone()).or_default().insert(id);
            self.snapshot(id, &topic);
        }
        if let Some(m) = self.members.get(&id) {
            m.connected.store(true, Relaxed);
        }
    }

    /// The sinks of the members watching `topic`, other than `from`.
    fn watchers(&self, topic: &str, from: u64) -> Vec<Arc<dyn PresenceSink>> {
        let Some(ids) = self.subs.get(topic) else {
            return Vec::new();
        };
        ids.iter()
            .filter(|id| **id != from)
            .filter_map(|id| self.sink(*id))
            .collect()
    }

    /// Every live owner's presences on `topic`, to member `id`.
    fn snapshot(&self, id: u64, topic: &Arc<str>) {
        let Some(sink) = self.sink(id) else { return };
        let mut owners: HashSet<u64> = sink.owners().into_iter().collect();
        owners.extend(
            self.hashes
                .keys()
                .filter(|(_, t)| t == topic)
                .map(|(o, _)| *o),
        );
        for owner in owners {
            if owner == id || !self.alive(owner) {
                continue;
            }
            let entries = self
                .hashes
                .get(&(owner, topic.clone()))
                .map(|h| h.values().cloned().collect())
                .unwrap_or_default();
            sink.replace(topic, owner, entries);
        }
    }

    /// Signs of life, and deaths.
    fn tick(&mut self) {
        if !self.up {
            return;
        }
        let now = Instant::now();
        let mut dead = Vec::new();
        for (id, m) in self.members.iter_mut() {
            if !m.killed && !m.held {
                m.seen = now;
            } else if now.duration_since(m.seen) >= self.timeout {
                dead.push(*id);
            }
        }
        for id in dead {
            self.members.remove(&id);
            let topics: Vec<Arc<str>> = self
                .hashes
                .keys()
                .filter(|(o, _)| *o == id)
                .map(|(_, t)| t.clone())
                .collect();
            for t in topics {
                self.hashes.remove(&(id, t));
            }
            for s in self.subs.values_mut() {
                s.remove(&id);
            }
            let others: Vec<Arc<dyn PresenceSink>> =
                self.members.keys().filter_map(|m| self.sink(*m)).collect();
            for s in others {
                s.owner_down(id);
            }
        }
    }
}
