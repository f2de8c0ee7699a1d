//! Lifecycle events (`[hooks] events = true`): batched POSTs to
//! `{url}/events` of a JSON array of
//! `{"id", "type", "topic", "user", "socket_id", "at", "sent_at", ...}`.
//!
//! The shards never wait: an event is one `try_send` on a bounded channel
//! (`--hook-events-queue`) to one sender task on the hook thread; a full
//! queue drops the event (counted, logged once per episode). Events happen
//! per connect, disconnect, join and leave, never per broadcast.
//!
//! The sender takes what arrived within [`LINGER`] of the first event, up
//! to `--hook-events-batch`, gives each event its id (this process's random
//! id and a count: unique across nodes and restarts) and POSTs the batch,
//! signed as every hook request. Anything but a 2xx answer is retried, the
//! same events with the same ids, with backoff ([`BACKOFF_MIN`] doubling to
//! [`BACKOFF_MAX`]), until the backend takes it: delivery is at least once,
//! and a backend de-duplicates by `id`. Batches go one at a time, so
//! events arrive in the order they were queued (each node's own order;
//! nodes are not ordered with each other). `sent_at` is written at each
//! attempt, under the signature, so a backend can refuse a replay.
//!
//! The same queue and sender carry Pusher's webhooks (`webhooks.rs`), in
//! their own body and headers: a queue is generic over its [`Format`]
//! (how a batch is written and signed) and told its [`Names`] (what its
//! logs call it).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use throng_pubsub::metrics::{Metric, Sink};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde::Serialize;
use tokio::sync::mpsc;

use super::request::{now_ms, signature};

/// How long the sender waits for more events after the first of a batch.
pub const LINGER: Duration = Duration::from_millis(100);
/// First wait before a batch is sent again; doubles up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// An event's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// A socket connected (WebSocket upgraded, or long-poll session opened).
    Connect,
    /// A socket ended, with its close code.
    Disconnect,
    /// A topic got its first subscriber in the cluster.
    Occupied,
    /// A topic lost its last subscriber in the cluster.
    Vacated,
    /// A presence was tracked on a topic (with its key).
    PresenceJoin,
    /// A presence left a topic (with its key).
    PresenceLeave,
}

impl EventType {
    pub fn name(self) -> &'static str {
        match self {
            EventType::Connect => "connect",
            EventType::Disconnect => "disconnect",
            EventType::Occupied => "occupied",
            EventType::Vacated => "vacated",
            EventType::PresenceJoin => "presence_join",
            EventType::PresenceLeave => "presence_leave",
        }
    }
}

/// One event, as a shard or the occupancy makes it.
#[derive(Debug)]
pub struct Event {
    pub kind: EventType,
    pub topic: Option<Arc<str>>,
    pub user: Option<Box<str>>,
    pub socket_id: Option<String>,
    /// Unix milliseconds when it happened.
    pub at: u64,
    /// A disconnect's close code.
    pub code: Option<u16>,
    /// A presence event's key.
    pub key: Option<Arc<str>>,
    /// A connect's transport: `websocket` or `longpoll`.
    pub transport: Option<&'static str>,
}

impl Event {
    pub fn new(kind: EventType) -> Event {
        Event {
            kind,
            topic: None,
            user: None,
            socket_id: None,
            at: now_ms(),
            code: None,
            key: None,
            transport: None,
        }
    }
}

/// An event as the backend reads it.
#[derive(Serialize)]
struct Wire<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    topic: Option<&'a str>,
    user: Option<&'a str>,
    socket_id: Option<&'a str>,
    at: u64,
    sent_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    transport: Option<&'static str>,
}

/// How long a draining process waits, after its shards are done, for the
/// events they queued (their sockets' disconnects) to reach the backend.
pub const FLUSH_AT_EXIT: Duration = Duration::from_secs(5);

/// How a batch of events is written and signed for its backend.
pub trait Format: Send + Sync + 'static {
    /// One event, as the shards queue it.
    type Event: Send + 'static;
    /// The body of `batch` (each event with its id), written at each
    /// attempt (so a time in it is the attempt's).
    fn body(&self, batch: &[(String, Self::Event)]) -> Vec<u8>;
    /// The headers that go with `body` (its signature).
    fn headers(&self, body: &[u8]) -> Vec<(&'static str, String)>;
}

/// The lifecycle events' format: a JSON array of [`Event`]s, signed in
/// `x-throng-signature` with `[hooks] secret`.
pub struct Lifecycle {
    pub secret: Option<String>,
}

impl Format for Lifecycle {
    type Event = Event;

    fn body(&self, batch: &[(String, Event)]) -> Vec<u8> {
        encode(batch)
    }

    fn headers(&self, body: &[u8]) -> Vec<(&'static str, String)> {
        let sign = |secret: &String| ("x-throng-signature", signature(secret, body));
        self.secret.iter().map(sign).collect()
    }
}

/// What a queue's logs call it and point to.
pub struct Names {
    /// The events, as a log line names them: "lifecycle events".
    pub what: String,
    /// Where they go, as a fix names it: "URL/events".
    pub target: String,
    /// The setting that bounds the queue: "--hook-events-queue".
    pub queue: &'static str,
    /// The counters a log points to.
    pub dropped_metric: &'static str,
    pub retries_metric: &'static str,
}

impl Names {
    /// The lifecycle events'.
    fn lifecycle() -> Names {
        Names {
            what: "lifecycle events".into(),
            target: "URL/events".into(),
            queue: "--hook-events-queue",
            dropped_metric: "throng_hook_events_dropped_total",
            retries_metric: "throng_hook_event_retries_total",
        }
    }
}

/// The counters of `/metrics`.
#[derive(Default)]
pub struct EventStats {
    /// Events the backend took (2xx).
    pub sent: AtomicU64,
    /// Batches sent (each POST that got a 2xx).
    pub batches: AtomicU64,
    /// POSTs of a batch that failed and were sent again.
    pub retries: AtomicU64,
    /// Events dropped: the queue was full.
    pub dropped: AtomicU64,
}

/// The shards' side: a bounded queue to the sender task.
pub struct Events<F: Format = Lifecycle> {
    tx: mpsc::Sender<F::Event>,
    capacity: usize,
    /// Its counters (Pusher's apps share theirs).
    pub stats: Arc<EventStats>,
    names: Names,
    /// The "queue full" warning was logged (until the queue drains).
    full_logged: AtomicBool,
    /// A batch is being sent (or sent again).
    sending: AtomicBool,
}

/// Where batches go, and how.
pub(super) struct Target {
    pub client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    pub uri: hyper::Uri,
    pub timeout: Duration,
    pub batch: usize,
}

impl Events<Lifecycle> {
    /// Starts the lifecycle events' sender task on `runtime`.
    pub(super) fn start(
        runtime: &tokio::runtime::Handle,
        queue: usize,
        target: Target,
        secret: Option<String>,
    ) -> Arc<Events> {
        let format = Lifecycle { secret };
        let stats = Arc::default();
        Events::start_with(runtime, queue, target, format, Names::lifecycle(), stats)
    }
}

impl<F: Format> Events<F> {
    /// Starts the sender task of events written as `format` on `runtime`,
    /// counted in `stats`.
    pub(super) fn start_with(
        runtime: &tokio::runtime::Handle,
        queue: usize,
        target: Target,
        format: F,
        names: Names,
        stats: Arc<EventStats>,
    ) -> Arc<Events<F>> {
        let (tx, rx) = mpsc::channel(queue.max(1));
        let events = Arc::new(Events {
            tx,
            capacity: queue.max(1),
            stats,
            names,
            full_logged: AtomicBool::new(false),
            sending: AtomicBool::new(false),
        });
        runtime.spawn(send_loop(rx, events.clone(), target, format));
        events
    }

    /// Queues `e`; drops it (counted) when the queue is full. Never blocks.
    pub fn push(&self, e: F::Event) {
        match self.tx.try_send(e) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.stats.dropped.fetch_add(1, Relaxed);
                if !self.full_logged.swap(true, Relaxed) {
                    let n = &self.names;
                    tracing::warn!(
                        "{} {} wait for {} ({}): dropping new ones until it takes them \
                         (counted in {}; logged once until the queue drains). \
                         Fix: make {} answer 2xx, or raise {}",
                        self.capacity,
                        n.what,
                        n.target,
                        n.queue,
                        n.dropped_metric,
                        n.target,
                        n.queue
                    );
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.stats.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Waits (blocking this thread) until every queued event reached the
    /// backend, at most `limit`; whether they all did.
    pub fn flush(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if self.queued() == 0 && !self.sending.load(Relaxed) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Events waiting to be sent (a batch being sent no longer counts).
    pub fn queued(&self) -> usize {
        self.capacity - self.tx.capacity()
    }
}

/// Every metric of the lifecycle events, and the figure it reads.
pub static METRICS: [throng_pubsub::metrics::Figure<Events<Lifecycle>>; 5] = [
    (
        Metric::gauge(
            "throng_hook_events_queued",
            "Lifecycle events waiting for the app backend (bound: --hook-events-queue).",
        ),
        |e| e.queued().into(),
    ),
    (
        Metric::counter(
            "throng_hook_events_sent_total",
            "Lifecycle events the app backend took (2xx).",
        ),
        |e| e.stats.sent.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_hook_event_batches_total",
            "POSTs of lifecycle events the app backend took (2xx).",
        ),
        |e| e.stats.batches.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_hook_event_retries_total",
            "POSTs of lifecycle events that failed (unreachable, timeout, not 2xx) and were sent again.",
        ),
        |e| e.stats.retries.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_hook_events_dropped_total",
            "Lifecycle events dropped because --hook-events-queue events were waiting.",
        ),
        |e| e.stats.dropped.load(Relaxed).into(),
    ),
];

impl Events<Lifecycle> {
    pub fn describe(&self, out: &mut dyn Sink) {
        for (m, figure) in &METRICS {
            out.put(m, figure(self));
        }
    }
}

/// The JSON array of `batch`, with `sent_at` now.
fn encode(batch: &[(String, Event)]) -> Vec<u8> {
    let sent_at = now_ms();
    let wire: Vec<Wire<'_>> = batch
        .iter()
        .map(|(id, e)| Wire {
            id,
            kind: e.kind.name(),
            topic: e.topic.as_deref(),
            user: e.user.as_deref(),
            socket_id: e.socket_id.as_deref(),
            at: e.at,
            sent_at,
            code: e.code,
            key: e.key.as_deref(),
            transport: e.transport,
        })
        .collect();
    serde_json::to_vec(&wire).unwrap_or_else(|_| b"[]".to_vec())
}

/// The sender task: batches, ids, POSTs and retries, one batch at a time.
async fn send_loop<F: Format>(
    mut rx: mpsc::Receiver<F::Event>,
    events: Arc<Events<F>>,
    target: Target,
    format: F,
) {
    let prefix = format!("{:016x}", throng_pubsub::link::random_node_id());
    let mut seq: u64 = 0;
    let mut down_logged = false;
    let mut batch: Vec<(String, F::Event)> = Vec::new();
    let names = &events.names;
    while let Some(first) = rx.recv().await {
        events.sending.store(true, Relaxed);
        let deadline = tokio::time::Instant::now() + LINGER;
        let mut next = Some(first);
        while let Some(e) = next {
            seq += 1;
            batch.push((format!("{prefix}-{seq}"), e));
            if batch.len() >= target.batch {
                break;
            }
            next = match rx.try_recv() {
                Ok(e) => Some(e),
                Err(_) => tokio::time::timeout_at(deadline, rx.recv())
                    .await
                    .ok()
                    .flatten(),
            };
        }
        let mut delay = BACKOFF_MIN;
        loop {
            let body = format.body(&batch);
            let headers = format.headers(&body);
            match post(&target, body, headers).await {
                Ok(()) => break,
                Err(why) => {
                    events.stats.retries.fetch_add(1, Relaxed);
                    if !down_logged {
                        down_logged = true;
                        tracing::warn!(
                            "{}: {} did not take a batch of {}: {why}; \
                             sending it again with backoff ({BACKOFF_MIN:?} doubling to {BACKOFF_MAX:?}; \
                             counted in {}; logged once until it takes one)",
                            names.what,
                            target.uri,
                            batch.len(),
                            names.retries_metric
                        );
                    }
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(BACKOFF_MAX);
                }
            }
        }
        if down_logged {
            down_logged = false;
            tracing::info!("{}: {} takes events again", names.what, target.uri);
        }
        events.stats.sent.fetch_add(batch.len() as u64, Relaxed);
        events.stats.batches.fetch_add(1, Relaxed);
        batch.clear();
        if rx.is_empty() {
            events.full_logged.store(false, Relaxed);
        }
        events.sending.store(false, Relaxed);
    }
}

/// One POST of a batch with `headers`; `Err` says why it was not taken.
async fn post(
    target: &Target,
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
) -> Result<(), String> {
    let mut req = hyper::Request::post(target.uri.clone())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::USER_AGENT, "throng");
    for (name, value) in headers {
        req = req.header(name, value);
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let exchange = async {
        let resp = target.client.request(req).await.map_err(|e| {
            use std::error::Error;
            match e.source() {
                Some(cause) => format!("unreachable: {e}: {cause}"),
                None => format!("unreachable: {e}"),
            }
        })?;
        let status = resp.status();
        // Read (and drop) the answer, so the connection goes back to the pool.
        let _ = http_body_util::Limited::new(resp.into_body(), 64 << 10)
            .collect()
            .await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("answered {status}, want 2xx"))
        }
    };
    match tokio::time::timeout(target.timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no answer within {} ms (--hook-timeout-ms)",
            target.timeout.as_millis()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_an_array_of_the_documented_fields() {
        let mut e = Event::new(EventType::Disconnect);
        e.socket_id = Some("n.0.1".into());
        e.code = Some(1000);
        let mut o = Event::new(EventType::Occupied);
        o.topic = Some("rooms:1".into());
        let body = encode(&[("a-1".into(), e), ("a-2".into(), o)]);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let a = v.as_array().unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0]["id"], "a-1");
        assert_eq!(a[0]["type"], "disconnect");
        assert_eq!(a[0]["code"], 1000);
        assert!(a[0]["topic"].is_null() && a[0]["user"].is_null());
        assert!(a[0]["at"].as_u64().unwrap() > 0 && a[0]["sent_at"].as_u64().is_some());
        assert_eq!(a[1]["type"], "occupied");
        assert_eq!(a[1]["topic"], "rooms:1");
        assert!(a[1].get("code").is_none(), "only a disconnect has a code");
    }
}
