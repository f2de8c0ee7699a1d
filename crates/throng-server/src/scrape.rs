//! `GET /metrics` and the metrics registry of a node: the node's own
//! metrics (readiness, process figures, the shards' inboxes, TLS, the
//! Pusher API's answers) are defined here, each once, next to what they
//! read; every other source (each shard's
//! [`ShardStats`](crate::metrics::ShardStats), the API's counters,
//! history, hooks, presence, the Redis links) defines its own and hands
//! its values to the [`Sink`] it is given. [`render`] is the Prometheus
//! text of that walk; the dashboard's node report is the same walk into
//! another sink (`Node::report`). It reads the whole [`Node`], so it sits
//! above it.

use std::sync::atomic::Ordering::Relaxed;

use throng_pubsub::metrics::{Metric, Sink, Source, Value};

use crate::metrics::SHARD_METRICS;
use crate::node::Node;
use crate::sys;

/// The `/metrics` page of `node`, Prometheus text format.
pub fn render(node: &Node) -> String {
    throng_pubsub::metrics::text(|out| node.describe(out))
}

impl Source for Node {
    /// Every metric of the node, in `/metrics` order.
    fn describe(&self, out: &mut dyn Sink) {
        let node = self;
        for (m, counter) in SHARD_METRICS {
            out.put(
                m,
                node.stats
                    .iter()
                    .map(|s| counter(s).load(Relaxed))
                    .sum::<u64>(),
            );
        }
        node_figures(node, out);
        process_figures(out);
        inboxes(node, out);
        node.api.describe(out);
        pusher_api(out, node);
        tls(out, node);
        node.api.describe_rest(out);
        if let Some(history) = &node.history_redis {
            throng_pubsub::history::redis::describe(&history.stats, out);
        }
        if let Some(history) = &node.history {
            crate::history::describe(history, out);
        }
        node.backplane.describe(out);
        node.presence.describe(out);
        if let Some(hooks) = &node.hooks {
            hooks.describe(out);
        }
        if let Some(w) = &node.webhooks {
            w.describe(out);
        }
        if let Some(o) = node.occupancy.get() {
            o.describe(out);
        }
        throng_pubsub::link::describe(out, &redis_links(node));
    }
}

/// Every metric a node can show, each source's table: what the registry
/// check reads, and the dashboard's list of limits.
pub fn all() -> impl Iterator<Item = &'static Metric> {
    use throng_pubsub::{backplane, history, link, occupancy, presence};
    SHARD_METRICS
        .iter()
        .map(|(m, _)| m)
        .chain(NODE_METRICS.iter().map(|(m, _)| m))
        .chain(PROCESS_METRICS.iter().copied())
        .chain([
            &INBOX_BYTES,
            &INBOX_DROPPED,
            &PUSHER_API,
            &PUSHER_API_WAITING,
        ])
        .chain(TLS_METRICS.iter().flatten())
        .chain(crate::api_stats::METRICS.iter().map(|(m, _)| m))
        .chain(history::redis::METRICS.iter().map(|(m, _)| *m))
        .chain(
            crate::history::METRICS
                .iter()
                .map(|(m, _)| *m)
                .filter(|m| m.name != history::PUBLISHED.name),
        )
        .chain(backplane::redis::METRICS.iter().copied())
        .chain(link::cluster::METRICS.iter().map(|(m, _)| m))
        .chain(presence::tracker::METRICS.iter().map(|(m, _)| m))
        .chain(presence::redis::METRICS.iter().map(|(m, _)| m))
        .chain(crate::hooks::stats::METRICS.iter().map(|(m, _)| m))
        .chain([
            &crate::hooks::stats::DURATION,
            &crate::hooks::stats::CIRCUIT,
            &crate::hooks::stats::IN_FLIGHT,
        ])
        .chain(crate::hooks::events::METRICS.iter().map(|(m, _)| m))
        .chain(crate::hooks::webhooks::METRICS.iter().map(|(m, _)| m))
        .chain(occupancy::METRICS.iter().map(|(m, _)| m))
        .chain(link::METRICS.iter().map(|(m, _)| m))
}

/// A node gauge and what it reads.
type NodeFigure = (Metric, fn(&Node) -> u64);

/// The node's gauges, and what each reads.
static NODE_METRICS: [NodeFigure; 5] = [
    (
        Metric::gauge("throng_topics", "Topics with at least one local subscriber."),
        |n| n.topics.len() as u64,
    ),
    (
        Metric::gauge(
            "throng_ready",
            "1 while GET /readyz answers 200, else 0 (starting, draining, or Redis lost past --ready-redis-grace).",
        ),
        |n| crate::health::readiness(n).is_ok() as u64,
    ),
    (
        Metric::gauge("throng_draining", "1 once a drain (SIGTERM) has begun, else 0."),
        |n| n.drain_started().is_some() as u64,
    ),
    (
        Metric::gauge("throng_max_connections", "Connections the open-files limit allows."),
        |n| n.fd_limit.saturating_sub(crate::FD_MARGIN),
    ),
    (
        Metric::gauge(
            "throng_available_memory_bytes",
            "Memory available to this process at the last check (once a second: MemAvailable, or the cgroup's limit less its use; 0 with --min-available-memory-bytes 0, which turns the check off); under --min-available-memory-bytes new connections are refused.",
        ),
        |n| n.admission.available_memory.load(Relaxed),
    ),
];

static RSS: Metric = Metric::gauge("throng_process_resident_memory_bytes", "Resident set size.");
static CPU: Metric = Metric::counter(
    "throng_process_cpu_seconds_total",
    "User and system CPU time.",
);
static LISTEN_OVERFLOWS: Metric = Metric::counter(
    "throng_host_listen_overflows_total",
    "The host's connections dropped because a listener's accept queue was full (ListenOverflows, every listener of the machine): the client retries its SYN; rising while this server is busy means it accepts too slowly.",
);
static HEAP_ALLOCATED: Metric = Metric::gauge(
    "throng_heap_allocated_bytes",
    "Bytes the allocator has handed out and not had back (glibc's mallinfo2: chunks in use and blocks in mappings of their own). The RSS stays up after a peak; this does not: growth here is memory held.",
);
static HEAP_FREE: Metric = Metric::gauge(
    "throng_heap_free_bytes",
    "Bytes freed but kept by the allocator for reuse (part of the RSS).",
);
static OUTBOUND: Metric = Metric::gauge(
    "throng_outbound_memory_bytes",
    "Output held for clients: queued bytes of their own and live broadcasts.",
);
static PROCESS_METRICS: [&Metric; 6] = [
    &RSS,
    &CPU,
    &LISTEN_OVERFLOWS,
    &HEAP_ALLOCATED,
    &HEAP_FREE,
    &OUTBOUND,
];

static INBOX_BYTES: Metric = Metric::gauge(
    "throng_shard_inbox_bytes",
    "Bytes of broadcasts waiting in the shards' inboxes.",
);
static INBOX_DROPPED: Metric = Metric::counter(
    "throng_shard_inbox_dropped_total",
    "Broadcasts and infos not handed to a shard whose inbox held --max-shard-inbox-bytes.",
)
.limit();

/// Certificate reloads and refused reloads, of the public port and of the
/// server API.
static TLS_METRICS: [[Metric; 2]; 2] = [
    [
        Metric::counter(
            "throng_tls_reloads_total",
            "Certificate reloads of the public port (SIGHUP or a changed file) that took effect.",
        ),
        Metric::counter(
            "throng_tls_reload_failures_total",
            "Certificate reloads of the public port refused (unreadable files, a key not the certificate's); the previous certificate stayed in use.",
        ),
    ],
    [
        Metric::counter(
            "throng_api_tls_reloads_total",
            "Certificate reloads of the server API (SIGHUP or a changed file) that took effect.",
        ),
        Metric::counter(
            "throng_api_tls_reload_failures_total",
            "Certificate reloads of the server API refused (unreadable files, a key not the certificate's); the previous certificate stayed in use.",
        ),
    ],
];

static PUSHER_API: Metric = Metric::counter(
    "throng_pusher_api_requests_total",
    "Pusher HTTP API requests answered, by route and status (401: refused signatures; 413: bodies over --pusher-max-api-body-bytes; 503: past --pusher-max-api-requests; 504: past --pusher-api-timeout).",
);
static PUSHER_API_WAITING: Metric = Metric::gauge(
    "throng_pusher_api_waiting",
    "Pusher HTTP API requests waiting on the cluster's figures (channel and user queries, triggers with info).",
);

/// The node's readiness, drain and limits.
fn node_figures(node: &Node, out: &mut dyn Sink) {
    for (m, figure) in &NODE_METRICS[..4] {
        out.put(m, figure(node));
    }
}

/// The process's memory and CPU, and the host's listen overflows.
fn process_figures(out: &mut dyn Sink) {
    out.put(&RSS, sys::rss_bytes().unwrap_or(0));
    out.put(&CPU, Value::Fixed(sys::cpu_seconds().unwrap_or(0.0), 3));
}

/// The memory checks, the heap, the output held and the shards' inboxes.
fn inboxes(node: &Node, out: &mut dyn Sink) {
    let (m, available) = &NODE_METRICS[4];
    out.put(m, available(node));
    if let Some(overflows) = sys::listen_overflows() {
        out.put(&LISTEN_OVERFLOWS, overflows);
    }
    if let Some((allocated, free)) = sys::heap() {
        out.put(&HEAP_ALLOCATED, allocated);
        out.put(&HEAP_FREE, free);
    }
    out.put(&OUTBOUND, crate::budget::outbound_memory());
    let (mut inbox_bytes, mut inbox_dropped) = (0, 0);
    for peer in &node.peers {
        inbox_bytes += peer.queued.load(Relaxed);
        inbox_dropped += peer.dropped.load(Relaxed);
    }
    out.put(&INBOX_BYTES, inbox_bytes);
    out.put(&INBOX_DROPPED, inbox_dropped);
}

/// The certificate reloads of the public port's and the API's TLS.
fn tls(out: &mut dyn Sink, node: &Node) {
    for (tls, [reloads, failures]) in [&node.tls, &node.api_tls].into_iter().zip(&TLS_METRICS) {
        let Some(tls) = tls else { continue };
        out.put(reloads, tls.certs.reloads.load(Relaxed));
        out.put(failures, tls.certs.reload_failures.load(Relaxed));
    }
}

/// Each Redis link of `node` (one per user of Redis, until they share
/// one), named as its `link` label in `/metrics`.
fn redis_links(node: &Node) -> Vec<(&'static str, &throng_pubsub::link::Health)> {
    let mut links = Vec::with_capacity(4);
    if let Some(h) = node.backplane.link() {
        links.push(("backplane", h));
    }
    if let Some(h) = node.presence.link() {
        links.push(("presence", h));
    }
    if let Some(history) = &node.history_redis {
        links.push(("history", &history.stats.link));
    }
    if let Some(crate::hooks::Occupancy::Redis(o)) = node.occupancy.get() {
        links.push(("occupancy", &o.stats().link));
    }
    links
}

/// The Pusher HTTP API's answers by route and status (the cells not zero),
/// and the requests waiting on the cluster's figures.
fn pusher_api(out: &mut dyn Sink, node: &Node) {
    use crate::metrics::{PUSHER_API_ROUTES, PUSHER_API_STATUSES};
    out.family(&PUSHER_API);
    let mut status = String::new();
    for (r, route) in PUSHER_API_ROUTES.iter().enumerate() {
        for c in 0..=PUSHER_API_STATUSES.len() {
            let n: u64 = node
                .stats
                .iter()
                .map(|s| s.pusher_api[r][c].load(Relaxed))
                .sum();
            if n == 0 {
                continue;
            }
            status.clear();
            match PUSHER_API_STATUSES.get(c) {
                Some(code) => status.push_str(&code.to_string()),
                None => status.push_str("other"),
            }
            out.sample(
                &PUSHER_API,
                "",
                &[("route", route), ("status", &status)],
                Value::U(n),
            );
        }
    }
    let waiting: u64 = node
        .stats
        .iter()
        .map(|s| s.pusher_api_waiting.load(Relaxed))
        .sum();
    out.put(&PUSHER_API_WAITING, waiting);
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_metric_is_defined_once_and_throng_prefixed() {
        let bad = throng_pubsub::metrics::misnamed(super::all());
        assert!(
            bad.is_empty(),
            "defined twice or not throng_-prefixed: {bad:?}"
        );
        assert!(super::all().count() > 140);
    }
}
