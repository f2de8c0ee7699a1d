//! [`RedisBackplane`]: broadcasts between nodes through Redis pub/sub.
//!
//! The shards call [`Backplane`] from their event loops, so nothing here may
//! block them: `publish` encodes the [envelope](super::envelope) and puts it
//! on a bounded queue (`try_send`), `subscribe`/`unsubscribe` put the topic on
//! an unbounded one (it grows only with topic churn). One background thread,
//! `throng-redis`, runs the [Redis link](crate::link) (connecting, TLS,
//! timeouts, reconnect with backoff: the same engine and policy as the
//! presence store) and does all network I/O.
//!
//! Per Redis session the link's two connections serve as:
//! - the *publisher*, the command connection; every PUBLISH of this node
//!   goes through it in queue order (batched into pipelines), which is what
//!   keeps a node's broadcasts in order;
//! - the *subscriber*, the pub/sub connection, with one SUBSCRIBE per topic
//!   channel (`throng:t:<topic>`) that has a local subscriber, and two for
//!   the [control lane](super::control): the node's own channel
//!   (`throng:n:<node id, 16 hex digits>`) and the cluster's
//!   (`throng:c`), where other nodes PUBLISH control messages
//!   ([`Backplane::send_control`], through the same queue and publisher as
//!   broadcasts, so in order). Both are subscribed before the session
//!   counts as connected. A retained control message is also SET, with its
//!   expiry, as `throng:k:<key>` in the same pipeline; each new session
//!   (once attached) reads them back (SCAN) and hands the live ones to the
//!   node, so a node started later, or back from an outage, knows them.
//!
//! On a Redis Cluster (a `redis+cluster://` URL, see the [link](crate::link))
//! the same lanes run on sharded pub/sub: a topic's channel is
//! `throng:t:{<topic>}` (hash-tagged, see [`crate::link::tagged`]),
//! published with SPUBLISH to the shard owning its slot and SSUBSCRIBEd
//! there, over one subscribing connection per shard; a node's control
//! channel is `throng:n:{<node id>}` and the cluster's `throng:c:{c}`, so
//! each lands on one shard, decided by its name alone; retained control
//! messages are `throng:k:{k}:<key>`, one slot, read back with one SCAN
//! there.
//!
//! When either connection fails, both are dropped and the session is rebuilt
//! with backoff; see the crate docs for what happens meanwhile.
//!
//! Securing the link is the [link](crate::link)'s job: a password or ACL
//! user in the URL, `rediss://` for TLS. What comes back from Redis is not trusted:
//! a message is delivered only if it is a readable envelope whose topic
//! matches the channel it arrived on and whose JSON payload is valid JSON
//! (`Envelope::validate`); anything else is dropped and counted.
//!
//! Memory: messages waiting for the publisher are bounded by count
//! ([`PUBLISH_QUEUE`]) and by bytes ([`RedisOptions::queue_bytes`]); past
//! either, they are dropped (counted, one warning per episode). A pipeline
//! carries at most [`MAX_BATCH`] commands and [`MAX_BATCH_BYTES`]. The thread's
//! side (sessions, publishing, subscribing, reconnecting) is `session.rs`;
//! this file is the side the shards call.

mod session;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use self::session::Task;
use super::envelope::Envelope;
use super::{control, Backplane, Handler, Route};
pub use crate::link::{check, check_with, random_node_id, redact, RedisOptions};
use crate::link::{client_for, Health, Target};
use crate::metrics::{Metric, Sink};
use crate::{Broadcast, Error};

/// Redis channel of a topic: this prefix, then the topic.
pub const CHANNEL_PREFIX: &str = "throng:t:";
/// Redis channel of a node's control messages: this prefix, then its id in
/// 16 hex digits.
pub const NODE_CHANNEL_PREFIX: &str = "throng:n:";
/// Broadcasts waiting for the publisher; past this, `publish` drops them.
pub const PUBLISH_QUEUE: usize = 16 * 1024;
/// Largest PUBLISH pipeline, in commands.
const MAX_BATCH: usize = 512;
/// Largest PUBLISH pipeline, in message bytes (past it, the next pipeline).
pub const MAX_BATCH_BYTES: usize = 1 << 20;
/// SUBSCRIBE/UNSUBSCRIBE commands sent at once.
const MAX_SUBSCRIBE_BATCH: usize = 1024;
/// Redis channel of the control messages to every node.
pub const CLUSTER_CHANNEL: &str = "throng:c";
/// Redis key of a retained control message: this prefix, then its key.
pub const RETAINED_PREFIX: &str = "throng:k:";
/// On a Redis Cluster: the cluster's control channel.
pub const CLUSTER_CHANNEL_SHARDED: &str = "throng:c:{c}";
/// On a Redis Cluster: the prefix of retained control messages (one slot).
pub const RETAINED_PREFIX_SHARDED: &str = "throng:k:{k}:";
/// How long `attach` waits for the retained control messages.
const ATTACH_WAIT: Duration = Duration::from_secs(5);
/// Retained control messages read per SCAN step when a session starts.
const RETAINED_BATCH: usize = 512;

/// Counters for `/metrics`; written by the shards (`dropped`) and the
/// `throng-redis` thread, read by anyone.
#[derive(Default, Debug)]
pub struct Stats {
    /// Both connections are up and every local topic is subscribed; and
    /// how often they came back.
    pub link: Health,
    /// Broadcasts published to Redis.
    pub published: AtomicU64,
    /// Broadcasts from other nodes handed to the shards.
    pub received: AtomicU64,
    /// Broadcasts and control messages not published: Redis down, queue
    /// full, or a failed pipeline.
    pub dropped: AtomicU64,
    /// Messages on our channels that were dropped: not a readable
    /// envelope, a topic that is not the channel's, a JSON payload that is
    /// not JSON.
    pub invalid: AtomicU64,
    /// Bytes of messages waiting for the publisher.
    pub queued_bytes: AtomicUsize,
    /// Control messages published to other nodes.
    pub control_sent: AtomicU64,
    /// Control messages received from other nodes (retained ones replayed
    /// included).
    pub control_received: AtomicU64,
}

/// A broadcast or a control message on its way to the publisher. Its bytes
/// count in `Stats::queued_bytes` until the `throng-redis` thread takes it.
struct Outgoing {
    /// The Redis channel.
    channel: String,
    payload: Vec<u8>,
    kind: Kind,
}

/// What an [`Outgoing`] is, for the counters and the pipeline.
enum Kind {
    Broadcast,
    Control,
    /// A control message also SET as `key` for `ttl`.
    Retained {
        key: String,
        ttl: Duration,
    },
}

/// A change for the `throng-redis` thread besides publishing.
enum Change {
    /// The node's subscribers of this topic changed: reconcile it.
    Topic(Arc<str>),
    /// The node is attached: hand it the retained control messages, then
    /// say so on the sender.
    Attached(std::sync::mpsc::SyncSender<()>),
    /// Call this once the topic's subscription is active
    /// ([`Backplane::when_subscribed`]).
    Subscribed(Arc<str>, Box<dyn FnOnce() + Send>),
}

/// The Redis backplane. Build it with [`RedisBackplane::connect`] before
/// the server starts, which calls [`Backplane::attach`].
pub struct RedisBackplane {
    /// For logs and errors: the URL with any password masked.
    url: String,
    /// This process's id in envelopes (random).
    node_id: u64,
    publish_tx: mpsc::Sender<Outgoing>,
    topic_tx: mpsc::UnboundedSender<Change>,
    /// Set by `attach`; the thread reads it to deliver and to re-subscribe.
    handler: Arc<OnceLock<Weak<dyn Handler>>>,
    stats: Arc<Stats>,
    /// Whether the "queue full" warning was logged since the queue last had room.
    queue_full_logged: AtomicBool,
    /// [`RedisOptions::queue_bytes`].
    queue_bytes: usize,
    /// The channel and key names (one Redis or a cluster).
    names: Names,
}

/// The backplane's channel and key names, and its publishing command: plain
/// on one Redis, hash-tagged (and SPUBLISH) on a Redis Cluster.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Names {
    pub cluster: bool,
}

impl Names {
    /// The channel of `topic`.
    pub fn topic(&self, topic: &str) -> String {
        if self.cluster {
            crate::link::tagged(CHANNEL_PREFIX, topic)
        } else {
            session::channel_of(topic)
        }
    }

    /// The topic of a topic channel.
    pub fn topic_of<'a>(&self, channel: &'a str) -> Option<&'a str> {
        let rest = channel.strip_prefix(CHANNEL_PREFIX)?;
        if self.cluster {
            crate::link::topic_after_tag(rest)
        } else {
            Some(rest)
        }
    }

    /// The control channel of node `id`.
    pub fn node(&self, id: u64) -> String {
        if self.cluster {
            format!("{NODE_CHANNEL_PREFIX}{{{id:016x}}}")
        } else {
            node_channel(id)
        }
    }

    /// The cluster's control channel.
    pub fn all(&self) -> &'static str {
        if self.cluster {
            CLUSTER_CHANNEL_SHARDED
        } else {
            CLUSTER_CHANNEL
        }
    }

    /// The prefix of retained control messages.
    pub fn retained(&self) -> &'static str {
        if self.cluster {
            RETAINED_PREFIX_SHARDED
        } else {
            RETAINED_PREFIX
        }
    }

    /// The publishing command.
    pub fn publish(&self) -> &'static str {
        if self.cluster {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }
}

impl RedisBackplane {
    /// Connects both connections to Redis at `url` (`redis://HOST:PORT`)
    /// and starts the `throng-redis` thread. Fails, naming the URL, when
    /// Redis cannot be reached now; after that, outages are survived.
    pub fn connect(url: &str) -> Result<RedisBackplane, Error> {
        RedisBackplane::connect_with(url, &RedisOptions::default())
    }

    /// [`RedisBackplane::connect`] with TLS and queue settings.
    pub fn connect_with(url: &str, options: &RedisOptions) -> Result<RedisBackplane, Error> {
        let shown = redact(url);
        let client = client_for(url, &shown, options)?;
        let names = Names {
            cluster: matches!(client, Target::Cluster(_)),
        };
        let node_id = random_node_id();
        let (publish_tx, publish_rx) = mpsc::channel(PUBLISH_QUEUE);
        let (topic_tx, topic_rx) = mpsc::unbounded_channel();
        let handler = Arc::new(OnceLock::new());
        let stats = Arc::new(Stats::default());
        let task = Task {
            node_id,
            node_channel: names.node(node_id),
            names,
            handler: handler.clone(),
            stats: stats.clone(),
            publish_rx,
            topic_rx,
            attached: Vec::new(),
        };
        crate::link::start("throng-redis", &shown, client, options, task)?;
        tracing::info!(url = %shown, node_id = format_args!("{node_id:016x}"), "cluster backplane: connected to Redis");
        Ok(RedisBackplane {
            url: shown,
            node_id,
            publish_tx,
            topic_tx,
            handler,
            stats,
            queue_full_logged: AtomicBool::new(false),
            queue_bytes: options.queue_bytes,
            names,
        })
    }

    /// The URL (password masked).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// This node's id in envelopes.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Queues `out` for the publisher without blocking; counts what the
    /// full queue refuses. Returns whether it was queued.
    fn enqueue(&self, out: Outgoing) -> bool {
        let len = out.payload.len();
        let queued = self.stats.queued_bytes.fetch_add(len, Relaxed) + len;
        let sent = if queued > self.queue_bytes {
            Err("bytes")
        } else {
            match self.publish_tx.try_send(out) {
                Ok(()) => Ok(()),
                Err(TrySendError::Full(_)) => Err("messages"),
                Err(TrySendError::Closed(_)) => Err(""),
            }
        };
        match sent {
            Ok(()) => {
                if self.queue_full_logged.load(Relaxed) {
                    self.queue_full_logged.store(false, Relaxed);
                }
                true
            }
            Err(what) => {
                self.stats.queued_bytes.fetch_sub(len, Relaxed);
                self.stats.dropped.fetch_add(1, Relaxed);
                if !what.is_empty() && !self.queue_full_logged.swap(true, Relaxed) {
                    tracing::warn!(
                        url = %self.url,
                        queued_bytes = queued - len,
                        "cluster backplane: the publish queue is full ({PUBLISH_QUEUE} messages \
                         or {} bytes; full in {what}): Redis is slower than this node. Dropping \
                         broadcasts to other nodes (counted in throng_backplane_dropped_total) \
                         until it drains",
                        self.queue_bytes
                    );
                }
                false
            }
        }
    }
}

impl RedisBackplane {
    /// Queues control message `body` for `route`.
    fn control(&self, route: Route, body: Vec<u8>, kind: Kind) -> bool {
        if !self.stats.link.connected.load(Relaxed) {
            self.stats.dropped.fetch_add(1, Relaxed);
            return false;
        }
        let channel = match route {
            Route::Node(id) => self.names.node(id),
            Route::Cluster => self.names.all().to_string(),
        };
        self.enqueue(Outgoing {
            channel,
            payload: control::encode(self.node_id, &body),
            kind,
        })
    }
}

/// The Redis channel of node `id`'s control messages.
pub fn node_channel(id: u64) -> String {
    format!("{NODE_CHANNEL_PREFIX}{id:016x}")
}

static CONNECTED: Metric = Metric::gauge(
    "throng_backplane_connected",
    "1 while the Redis backplane is connected and subscribed, else 0.",
)
.figure();
static PUBLISHED: Metric = Metric::counter(
    "throng_backplane_published_total",
    "Broadcasts published to the other nodes.",
)
.figure();
static RECEIVED: Metric = Metric::counter(
    "throng_backplane_received_total",
    "Broadcasts received from the other nodes.",
)
.figure();
static DROPPED: Metric = Metric::counter(
    "throng_backplane_dropped_total",
    "Broadcasts and control messages not sent to the other nodes (Redis down or queue full).",
)
.limit();
static INVALID: Metric = Metric::counter(
    "throng_backplane_invalid_total",
    "Messages from Redis dropped: not a readable envelope, a topic not matching its channel, or a JSON payload that is not JSON.",
);
static QUEUED_BYTES: Metric = Metric::gauge(
    "throng_backplane_queued_bytes",
    "Bytes of broadcasts and control messages waiting to be published to Redis.",
)
.figure();
static RECONNECTS: Metric = Metric::counter(
    "throng_backplane_reconnects_total",
    "Times the backplane reconnected to Redis.",
)
.figure();
static CONTROL_SENT: Metric = Metric::counter(
    "throng_backplane_control_sent_total",
    "Control messages sent to other nodes (forwarded long-poll requests and answers, stats queries, disconnects, revocations).",
);
static CONTROL_RECEIVED: Metric = Metric::counter(
    "throng_backplane_control_received_total",
    "Control messages received from other nodes, retained ones read at (re)connection included.",
);

/// Every metric of the Redis backplane.
pub static METRICS: [&Metric; 9] = [
    &CONNECTED,
    &PUBLISHED,
    &RECEIVED,
    &DROPPED,
    &INVALID,
    &QUEUED_BYTES,
    &RECONNECTS,
    &CONTROL_SENT,
    &CONTROL_RECEIVED,
];

/// The backplane metrics of `stats`.
pub fn describe(stats: &Stats, out: &mut dyn Sink) {
    out.put(&CONNECTED, stats.link.connected.load(Relaxed));
    out.put(&PUBLISHED, stats.published.load(Relaxed));
    out.put(&RECEIVED, stats.received.load(Relaxed));
    out.put(&DROPPED, stats.dropped.load(Relaxed));
    out.put(&INVALID, stats.invalid.load(Relaxed));
    out.put(&QUEUED_BYTES, stats.queued_bytes.load(Relaxed));
    out.put(&RECONNECTS, stats.link.reconnects.load(Relaxed));
    out.put(&CONTROL_SENT, stats.control_sent.load(Relaxed));
    out.put(&CONTROL_RECEIVED, stats.control_received.load(Relaxed));
}

impl Backplane for RedisBackplane {
    fn attach(&self, handler: Weak<dyn Handler>) {
        let _ = self.handler.set(handler);
        // The node knows the retained control messages (revocations)
        // before it serves: wait for their replay, a bounded time.
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
        if self.topic_tx.send(Change::Attached(done_tx)).is_ok()
            && done_rx.recv_timeout(ATTACH_WAIT).is_err()
        {
            tracing::warn!(
                url = %self.url,
                "cluster backplane: the kept control messages (revocations) were not read from \
                 Redis within {ATTACH_WAIT:?}; serving meanwhile, they are read again at the \
                 next reconnection"
            );
        }
    }

    fn is_connected(&self) -> bool {
        self.stats.link.connected.load(Relaxed)
    }

    fn disconnected_for(&self) -> Option<Duration> {
        self.stats.link.down_for()
    }

    fn describe(&self, out: &mut dyn Sink) {
        describe(&self.stats, out);
        crate::link::cluster::describe(out);
    }

    fn link(&self) -> Option<&Health> {
        Some(&self.stats.link)
    }

    fn publish(&self, b: &Broadcast) {
        if !self.stats.link.connected.load(Relaxed) {
            self.stats.dropped.fetch_add(1, Relaxed);
            return;
        }
        let envelope = Envelope {
            node: self.node_id,
            topic: &b.topic,
            event: &b.event,
            payload: b.payload.as_payload(),
        }
        .to_vec();
        self.enqueue(Outgoing {
            channel: self.names.topic(&b.topic),
            payload: envelope,
            kind: Kind::Broadcast,
        });
    }

    fn node_id(&self) -> u64 {
        self.node_id
    }

    fn send_control(&self, route: Route, body: Vec<u8>) -> bool {
        self.control(route, body, Kind::Control)
    }

    fn retain_control(&self, key: &str, body: Vec<u8>, ttl: Duration) -> bool {
        let key = format!("{}{key}", self.names.retained());
        self.control(Route::Cluster, body, Kind::Retained { key, ttl })
    }

    fn subscribe(&self, topic: &str) {
        let _ = self.topic_tx.send(Change::Topic(Arc::from(topic)));
    }

    fn unsubscribe(&self, topic: &str) {
        let _ = self.topic_tx.send(Change::Topic(Arc::from(topic)));
    }

    fn when_subscribed(&self, topic: &str, then: Box<dyn FnOnce() + Send>) {
        // Behind the topic's SUBSCRIBE in the same queue; a closed queue
        // hands the closure back, called at once.
        if let Err(e) = self
            .topic_tx
            .send(Change::Subscribed(Arc::from(topic), then))
        {
            if let Change::Subscribed(_, then) = e.0 {
                then();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names() {
        assert_eq!(session::channel_of("rooms:lobby"), "throng:t:rooms:lobby");
        assert_eq!(node_channel(0xab), "throng:n:00000000000000ab");
        let sharded = Names { cluster: true };
        assert_eq!(sharded.topic("rooms:1"), "throng:t:{rooms:1}");
        assert_eq!(sharded.topic_of("throng:t:{rooms:1}"), Some("rooms:1"));
        assert_eq!(sharded.topic_of(&sharded.topic("a}b")), Some("a}b"));
        assert_eq!(sharded.node(0xab), "throng:n:{00000000000000ab}");
    }

    #[test]
    fn unreachable_redis_is_an_error_naming_the_url() {
        let err = match RedisBackplane::connect("redis://127.0.0.1:1") {
            Err(e) => e.to_string(),
            Ok(_) => panic!("connected to port 1"),
        };
        assert!(err.contains("redis://127.0.0.1:1"), "{err}");
        let err = check("redis://:pw@127.0.0.1:1").unwrap_err().to_string();
        assert!(
            err.contains("redis://:***@127.0.0.1:1") && !err.contains("pw"),
            "{err}"
        );
        assert!(RedisBackplane::connect("http://nope").is_err());
    }

    #[test]
    fn metrics_are_prometheus_text() {
        let stats = Stats::default();
        stats.link.connected.store(true, Relaxed);
        stats.dropped.store(3, Relaxed);
        let out = crate::metrics::text(|s| describe(&stats, s));
        assert!(out.contains("\nthrong_backplane_connected 1\n"), "{out}");
        assert!(
            out.contains("\nthrong_backplane_dropped_total 3\n"),
            "{out}"
        );
    }
}
