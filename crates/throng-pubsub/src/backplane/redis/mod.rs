//! [`RedisBackplane`]: broadcasts between nodes through Redis pub/sub.
//!
//! The shards call [`Backplane`] from their event loops, so nothing here may
//! block them: `publish` encodes the [envelope](super::envelope) and puts it
//! on a bounded queue (`try_send`), `subscribe`/`unsubscribe` put the topic on
//! an unbounded one (it grows only with topic churn). One background thread,
//! `throng-redis`, owns both Redis connections and does all network I/O.
//!
//! That thread runs a single-threaded tokio runtime rather than the `redis`
//! crate's blocking API because the subscriber connection has to wait for two
//! things at once: messages from Redis and topic changes from the shards. The
//! blocking `PubSub` can only poll with a read timeout (a timeout in the
//! middle of a reply can desynchronise its parser) and cannot take a
//! SUBSCRIBE while it is blocked reading; one `select!` over both does it
//! with no polling and no extra threads.
//!
//! Per Redis session there are exactly two connections:
//! - the *publisher*, a multiplexed connection; every PUBLISH of this node
//!   goes through it in queue order (batched into pipelines), which is what
//!   keeps a node's broadcasts in order;
//! - the *subscriber*, a pub/sub connection with one SUBSCRIBE per topic
//!   channel (`throng:t:<topic>`) that has a local subscriber, and one for
//!   the node's own channel (`throng:n:<node id, 16 hex digits>`), where
//!   other nodes PUBLISH direct messages to it ([`Backplane::send_to`],
//!   through the same queue and publisher as broadcasts, so in order).
//!   It is subscribed before the session counts as connected.
//!
//! When either fails, both are dropped and the session is rebuilt with
//! backoff; see the crate docs for what happens meanwhile.
//!
//! Securing the link: a password or ACL user goes in the URL
//! (`redis://user:password@host:6379`; logs and errors show it masked),
//! `rediss://` speaks TLS (rustls, trusting the system's roots, or only
//! [`RedisOptions::ca_file`]). What comes back from Redis is not trusted:
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

use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use self::session::{Session, Task};
use super::envelope::Envelope;
use super::{Backplane, Handler};
use crate::metrics::write_metric;
use crate::{Broadcast, Error};

/// Redis channel of a topic: this prefix, then the topic.
pub const CHANNEL_PREFIX: &str = "throng:t:";
/// Redis channel of a node's direct messages: this prefix, then its id in
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
/// How long a connection attempt (TCP + handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a reply may take before the connection counts as lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the subscriber connection is checked with a PING.
const PING_EVERY: Duration = Duration::from_secs(5);
/// First wait between reconnection attempts; doubles up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// How to reach Redis, beyond the URL.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// PEM file of the certificate authorities to trust for `rediss://`
    /// (a private CA); `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Bytes of envelopes waiting for the publisher; past it, `publish`
    /// drops broadcasts (counted) instead of growing.
    pub queue_bytes: usize,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            ca_file: None,
            queue_bytes: 64 << 20,
        }
    }
}

/// Counters for `/metrics`; written by the shards (`dropped`) and the
/// `throng-redis` thread, read by anyone.
#[derive(Default, Debug)]
pub struct Stats {
    /// Both connections are up and every local topic is subscribed.
    pub connected: AtomicBool,
    /// Broadcasts published to Redis.
    pub published: AtomicU64,
    /// Broadcasts from other nodes handed to the shards.
    pub received: AtomicU64,
    /// Broadcasts and direct messages not published: Redis down, queue
    /// full, or a failed pipeline.
    pub dropped: AtomicU64,
    /// Messages on our channels that were dropped: not a readable
    /// envelope, a topic that is not the channel's, a JSON payload that is
    /// not JSON.
    pub invalid: AtomicU64,
    /// Bytes of messages waiting for the publisher.
    pub queued_bytes: AtomicUsize,
    /// Sessions rebuilt after a lost connection.
    pub reconnects: AtomicU64,
    /// Direct messages published to other nodes.
    pub direct_sent: AtomicU64,
    /// Direct messages received from other nodes.
    pub direct_received: AtomicU64,
}

/// A broadcast or a direct message on its way to the publisher. Its bytes
/// count in `Stats::queued_bytes` until the `throng-redis` thread takes it.
struct Outgoing {
    /// The Redis channel.
    channel: String,
    payload: Vec<u8>,
    /// A direct message (counted apart from broadcasts).
    direct: bool,
}

/// The Redis backplane. Build it with [`RedisBackplane::connect`] before
/// the server starts, which calls [`Backplane::attach`].
pub struct RedisBackplane {
    /// For logs and errors: the URL with any password masked.
    url: String,
    /// This process's id in envelopes (random).
    node_id: u64,
    publish_tx: mpsc::Sender<Outgoing>,
    topic_tx: mpsc::UnboundedSender<Arc<str>>,
    /// Set by `attach`; the thread reads it to deliver and to re-subscribe.
    handler: Arc<OnceLock<Weak<dyn Handler>>>,
    stats: Arc<Stats>,
    /// Whether the "queue full" warning was logged since the queue last had room.
    queue_full_logged: AtomicBool,
    /// [`RedisOptions::queue_bytes`].
    queue_bytes: usize,
}

/// The redis crate's client for `url`, with TLS settings from `options`.
pub(crate) fn client_for(
    url: &str,
    shown: &str,
    options: &RedisOptions,
) -> Result<::redis::Client, Error> {
    let url_error = |reason: String| Error::RedisUrl {
        url: shown.to_string(),
        reason,
    };
    let tls = url.starts_with("rediss://") || url.starts_with("valkeys://");
    if tls {
        // rustls needs a crypto provider; ring is the one built in.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    match &options.ca_file {
        None => ::redis::Client::open(url).map_err(|e| url_error(e.to_string())),
        Some(_) if !tls => Err(url_error(
            "a CA file (--redis-ca-file) is for TLS: use a rediss:// URL".into(),
        )),
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| Error::RedisTls {
                url: shown.to_string(),
                reason: format!("cannot read the CA file {}: {e}", path.display()),
            })?;
            ::redis::Client::build_with_tls(
                url,
                ::redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                },
            )
            .map_err(|e| Error::RedisTls {
                url: shown.to_string(),
                reason: format!("CA file {}: {e}", path.display()),
            })
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
        let node_id = random_node_id();
        let (publish_tx, publish_rx) = mpsc::channel(PUBLISH_QUEUE);
        let (topic_tx, topic_rx) = mpsc::unbounded_channel();
        let handler = Arc::new(OnceLock::new());
        let stats = Arc::new(Stats::default());
        let task = Task {
            client,
            url: shown.clone(),
            node_id,
            node_channel: node_channel(node_id),
            handler: handler.clone(),
            stats: stats.clone(),
            publish_rx,
            topic_rx,
        };
        crate::redis_thread::spawn("throng-redis", &shown, move || async move {
            let session = Session::connect(&task.client, &task.node_channel)
                .await
                .map_err(|e| e.to_string())?;
            Ok(task.run(session))
        })?;
        stats.connected.store(true, Relaxed);
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

/// The Redis channel of node `id`'s direct messages.
pub fn node_channel(id: u64) -> String {
    format!("{NODE_CHANNEL_PREFIX}{id:016x}")
}

/// The backplane metrics of `stats`, Prometheus text format.
pub fn render_metrics(stats: &Stats, out: &mut String) {
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        write_metric(out, name, kind, help, value);
    };
    metric(
        "throng_backplane_connected",
        "gauge",
        "1 while the Redis backplane is connected and subscribed, else 0.",
        stats.connected.load(Relaxed) as u64,
    );
    metric(
        "throng_backplane_published_total",
        "counter",
        "Broadcasts published to the other nodes.",
        stats.published.load(Relaxed),
    );
    metric(
        "throng_backplane_received_total",
        "counter",
        "Broadcasts received from the other nodes.",
        stats.received.load(Relaxed),
    );
    metric(
        "throng_backplane_dropped_total",
        "counter",
        "Broadcasts and direct messages not sent to the other nodes (Redis down or queue full).",
        stats.dropped.load(Relaxed),
    );
    metric(
        "throng_backplane_invalid_total",
        "counter",
        "Messages from Redis dropped: not a readable envelope, a topic not matching its channel, or a JSON payload that is not JSON.",
        stats.invalid.load(Relaxed),
    );
    metric(
        "throng_backplane_queued_bytes",
        "gauge",
        "Bytes of broadcasts and direct messages waiting to be published to Redis.",
        stats.queued_bytes.load(Relaxed) as u64,
    );
    metric(
        "throng_backplane_reconnects_total",
        "counter",
        "Times the backplane reconnected to Redis.",
        stats.reconnects.load(Relaxed),
    );
    metric(
        "throng_backplane_direct_sent_total",
        "counter",
        "Direct messages sent to one other node (forwarded long-poll requests and answers).",
        stats.direct_sent.load(Relaxed),
    );
    metric(
        "throng_backplane_direct_received_total",
        "counter",
        "Direct messages received from other nodes.",
        stats.direct_received.load(Relaxed),
    );
}

impl Backplane for RedisBackplane {
    fn attach(&self, handler: Weak<dyn Handler>) {
        let _ = self.handler.set(handler);
    }

    fn is_connected(&self) -> bool {
        self.stats.connected.load(Relaxed)
    }

    fn render_metrics(&self, out: &mut String) {
        render_metrics(&self.stats, out)
    }

    fn publish(&self, b: &Broadcast) {
        if !self.stats.connected.load(Relaxed) {
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
            channel: session::channel_of(&b.topic),
            payload: envelope,
            direct: false,
        });
    }

    fn node_id(&self) -> u64 {
        self.node_id
    }

    fn send_to(&self, node: u64, msg: Vec<u8>) -> bool {
        if !self.stats.connected.load(Relaxed) {
            self.stats.dropped.fetch_add(1, Relaxed);
            return false;
        }
        self.enqueue(Outgoing {
            channel: node_channel(node),
            payload: msg,
            direct: true,
        })
    }

    fn subscribe(&self, topic: &str) {
        let _ = self.topic_tx.send(Arc::from(topic));
    }

    fn unsubscribe(&self, topic: &str) {
        let _ = self.topic_tx.send(Arc::from(topic));
    }
}

/// Checks, with a blocking connection, that Redis at `url` answers PING.
pub fn check(url: &str) -> Result<(), Error> {
    check_with(url, &RedisOptions::default())
}

/// [`check`] with TLS settings.
pub fn check_with(url: &str, options: &RedisOptions) -> Result<(), Error> {
    let shown = redact(url);
    let client = client_for(url, &shown, options)?;
    let fail = |e: ::redis::RedisError| Error::RedisConnect {
        url: shown.clone(),
        reason: e.to_string(),
    };
    let mut conn = client
        .get_connection_with_timeout(CONNECT_TIMEOUT)
        .map_err(fail)?;
    conn.set_read_timeout(Some(RESPONSE_TIMEOUT))
        .map_err(fail)?;
    ::redis::cmd("PING")
        .query::<String>(&mut conn)
        .map_err(fail)?;
    Ok(())
}

/// A random id for this process: std's per-process random hash keys, mixed
/// with the pid and the time.
pub fn random_node_id() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

/// `url` with the password, if any, replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    let user = match userinfo.find(':') {
        Some(colon) => format!("{}:***", &userinfo[..colon]),
        None => userinfo.to_string(),
    };
    format!("{}{}{}", &url[..scheme_end], user, &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("redis://u:p@h/0"), "redis://u:***@h/0");
        assert_eq!(redact("redis://u@h"), "redis://u@h");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn channel_names() {
        assert_eq!(session::channel_of("rooms:lobby"), "throng:t:rooms:lobby");
        assert_eq!(node_channel(0xab), "throng:n:00000000000000ab");
    }

    #[test]
    fn node_ids_differ() {
        assert_ne!(random_node_id(), random_node_id());
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
        stats.connected.store(true, Relaxed);
        stats.dropped.store(3, Relaxed);
        let mut out = String::new();
        render_metrics(&stats, &mut out);
        assert!(out.contains("\nthrong_backplane_connected 1\n"), "{out}");
        assert!(
            out.contains("\nthrong_backplane_dropped_total 3\n"),
            "{out}"
        );
    }
}
