//! [`RedisPresence`]: presence across nodes through Redis.
//!
//! Redis does what a home-made consensus would otherwise do: liveness is a
//! key with a TTL, each node's presences on a topic are a hash only that
//! node writes, and every change is one Lua script that writes the hash
//! and PUBLISHes the change on the topic's presence channel atomically
//! (`scripts.rs` has the keys and scripts; `wire.rs` the bytes).
//!
//! ## A node's life
//! - Connecting (and reconnecting): it writes all its presences and its
//!   liveness key in one script, SUBSCRIBEs the presence channel of every
//!   topic it watches and reads a snapshot of each: every node listed on
//!   the topic whose liveness key exists, hash and key read in one
//!   MULTI. A node's presences are written with its liveness key, so an
//!   owner seen alive has all of its presences there.
//! - Each interval (its shards' flushes): its own changes, one script per
//!   topic, pipelined. If its liveness key is gone (it was too slow and the
//!   others may have buried it) the script refuses and the node rewrites
//!   everything, which brings its presences back everywhere.
//! - Every `timeout / 10`: it refreshes its key (TTL `timeout * 0.4`) and
//!   checks the keys of the nodes it knows (those with presences in its
//!   copies, and every node that ever wrote presence). A node whose key
//!   has been missing for `timeout * 0.4` of this session is dead: one
//!   script removes its presences and tells every watcher (an empty
//!   replace), and this node drops them from its copies.
//!
//! ## The timeout, in figures
//! With `--presence-timeout T` (30 s by default), a node killed without a
//! goodbye has its key expire at most `0.4 T` after its last refresh; the
//! others notice within `0.1 T` and declare it dead `0.4 T` later, give or
//! take a check: the leaves go out within `T` of the kill (30 s), plus one
//! `--presence-interval`, and no sooner than about `0.7 T` (21 s). A node
//! stalled for longer than `0.4 T` (a stopped process, a lost connection)
//! is buried too; it rewrites its presences when it is back (joins).
//!
//! ## When Redis goes away
//! Nodes keep their copies and keep serving local diffs; changes are not
//! queued (each node rewrites its state on reconnecting, which supersedes
//! them). A node checks others only after `0.4 T` of its new session, so
//! nodes that reconnect within that time (the [link](crate::link)'s
//! backoff, 0.1 s doubling to 5 s, shared with the backplane) see no leave
//! storm; with T = 30 s that is 12 s.

mod names;
mod scripts;
mod session;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use self::session::Task;
use super::{Delta, FetchReply, PresenceSink, PresenceStore};
use crate::link::{client_for, random_node_id, redact, Health};
use crate::metrics::{Metric, Sink};
use crate::Error;

/// Prefix of every presence key and channel.
pub const PREFIX: &str = "throng:p:";
/// Changes waiting for the thread; past this a node stops queueing and
/// rewrites its whole state once the thread catches up.
pub const PUBLISH_QUEUE: usize = 16 * 1024;
/// The default `--presence-timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What the timeout means for keys and checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// TTL of a node's liveness key.
    pub ttl: Duration,
    /// Between refreshes of the key, and between checks of the others.
    pub every: Duration,
    /// How long another node's key must be seen missing to declare it dead.
    pub grace: Duration,
}

impl Timing {
    pub fn for_timeout(timeout: Duration) -> Timing {
        let ms = timeout.as_millis().max(100) as u64;
        Timing {
            ttl: Duration::from_millis(ms * 4 / 10),
            every: Duration::from_millis(ms / 10),
            grace: Duration::from_millis(ms * 4 / 10),
        }
    }
}

/// Counters for `/metrics`.
#[derive(Default, Debug)]
pub struct Stats {
    /// Connected (and this node's state written), and how often it came back.
    pub link: Health,
    /// Change scripts run (one per topic per interval with own changes).
    pub published: AtomicU64,
    /// Messages from other nodes applied.
    pub received: AtomicU64,
    /// Changes not queued (Redis down, queue full): made up by a rewrite.
    pub dropped: AtomicU64,
    /// Unreadable messages.
    pub invalid: AtomicU64,
    /// Whole-state rewrites of this node.
    pub resyncs: AtomicU64,
    /// Other nodes declared dead.
    pub owners_down: AtomicU64,
}

/// The Redis presence store. Build it with [`RedisPresence::connect`].
pub struct RedisPresence {
    url: String,
    node_id: u64,
    publish_tx: mpsc::Sender<(Arc<str>, Delta)>,
    topic_tx: mpsc::UnboundedSender<(Arc<str>, bool)>,
    fetch_tx: mpsc::UnboundedSender<(Arc<str>, FetchReply)>,
    halt_tx: mpsc::UnboundedSender<()>,
    sink: Arc<OnceLock<Weak<dyn PresenceSink>>>,
    stats: Arc<Stats>,
    /// Set when a change could not be queued: the thread rewrites all.
    resync: Arc<AtomicBool>,
}

impl RedisPresence {
    /// Connects to Redis at `url` and starts the `throng-presence` thread;
    /// fails, naming the URL, when Redis cannot be reached now.
    pub fn connect(url: &str, timeout: Duration) -> Result<RedisPresence, Error> {
        RedisPresence::connect_with(url, timeout, &crate::RedisOptions::default())
    }

    /// [`RedisPresence::connect`] with the backplane's TLS settings
    /// (`rediss://`, a private CA).
    pub fn connect_with(
        url: &str,
        timeout: Duration,
        options: &crate::RedisOptions,
    ) -> Result<RedisPresence, Error> {
        let shown = redact(url);
        let client = client_for(url, &shown, options)?;
        let node_id = random_node_id();
        let (publish_tx, publish_rx) = mpsc::channel(PUBLISH_QUEUE);
        let (topic_tx, topic_rx) = mpsc::unbounded_channel();
        let (fetch_tx, fetch_rx) = mpsc::unbounded_channel();
        let (halt_tx, halt_rx) = mpsc::unbounded_channel();
        let sink = Arc::new(OnceLock::new());
        let stats = Arc::new(Stats::default());
        let resync = Arc::new(AtomicBool::new(false));
        let task = Task {
            me: node_id,
            timing: Timing::for_timeout(timeout),
            sink: sink.clone(),
            stats: stats.clone(),
            resync: resync.clone(),
            publish_rx,
            topic_rx,
            fetch_rx,
            halt_rx,
        };
        crate::link::start("throng-presence", &shown, client, options, task)?;
        tracing::info!(url = %shown, node_id = format_args!("{node_id:016x}"), timeout_ms = timeout.as_millis() as u64, "presence: connected to Redis");
        Ok(RedisPresence {
            url: shown,
            node_id,
            publish_tx,
            topic_tx,
            fetch_tx,
            halt_tx,
            sink,
            stats,
            resync,
        })
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Stops the store as a crash would (tests): no more refreshes, no
    /// goodbye; the others declare this node dead after the timeout.
    pub fn halt(&self) {
        let _ = self.halt_tx.send(());
    }
}

/// Every metric of the presence store, and the figure it reads.
pub static METRICS: [crate::metrics::Figure<Stats>; 8] = [
    (
        Metric::gauge(
            "throng_presence_store_connected",
            "1 while the presence store is connected to Redis, else 0.",
        ),
        |s| s.link.connected.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_store_published_total",
            "Own presence changes written to Redis (one script per topic per interval).",
        ),
        |s| s.published.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_store_received_total",
            "Presence messages from other nodes applied.",
        ),
        |s| s.received.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_store_dropped_total",
            "Own changes not queued (Redis down or queue full), made up by a rewrite.",
        ),
        |s| s.dropped.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_store_invalid_total",
            "Unreadable presence messages received.",
        ),
        |s| s.invalid.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_store_resyncs_total",
            "Rewrites of this node's whole presence state.",
        ),
        |s| s.resyncs.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_store_nodes_down_total",
            "Other nodes declared dead (their presences left).",
        ),
        |s| s.owners_down.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_presence_store_reconnects_total",
            "Times the presence store reconnected to Redis.",
        ),
        |s| s.link.reconnects.load(Relaxed).into(),
    ),
];

/// The presence store metrics of `stats`.
pub fn describe(stats: &Stats, out: &mut dyn Sink) {
    for (m, figure) in &METRICS {
        out.put(m, figure(stats));
    }
}

impl PresenceStore for RedisPresence {
    fn attach(&self, sink: Weak<dyn PresenceSink>) {
        let _ = self.sink.set(sink);
        // What the node watched or owned before attaching (nothing, in
        // practice) is written by a rewrite.
        self.resync.store(true, Relaxed);
        let _ = self.topic_tx.send((Arc::from(""), false));
    }

    fn node_id(&self) -> u64 {
        self.node_id
    }

    fn publish(&self, topic: &str, delta: Delta) {
        if !self.stats.link.connected.load(Relaxed) {
            self.stats.dropped.fetch_add(1, Relaxed);
            self.resync.store(true, Relaxed);
            return;
        }
        match self.publish_tx.try_send((Arc::from(topic), delta)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.stats.dropped.fetch_add(1, Relaxed);
                if !self.resync.swap(true, Relaxed) {
                    tracing::warn!(url = %self.url, "presence: {PUBLISH_QUEUE} changes wait for Redis; this node will rewrite its whole state instead");
                }
            }
            Err(TrySendError::Closed(_)) => {
                self.stats.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    fn watch(&self, topic: &str) {
        let _ = self.topic_tx.send((Arc::from(topic), true));
    }

    fn unwatch(&self, topic: &str) {
        let _ = self.topic_tx.send((Arc::from(topic), false));
    }

    fn fetch(&self, topic: &str, done: FetchReply) {
        if !self.stats.link.connected.load(Relaxed) {
            return done(Err(Error::PresenceUnavailable(format!(
                "not connected to Redis at {}",
                self.url
            ))));
        }
        if let Err(e) = self.fetch_tx.send((Arc::from(topic), done)) {
            let (_, done) = e.0;
            done(Err(Error::PresenceUnavailable(
                "the presence thread ended".into(),
            )));
        }
    }

    fn is_connected(&self) -> bool {
        self.stats.link.connected.load(Relaxed)
    }

    fn describe(&self, out: &mut dyn Sink) {
        describe(&self.stats, out)
    }

    fn link(&self) -> Option<&Health> {
        Some(&self.stats.link)
    }
}

pub(crate) fn node_hex(id: u64) -> String {
    format!("{id:016x}")
}
