//! `GET /metrics`: the Prometheus text of a node, each shard's
//! [`ShardStats`](crate::metrics::ShardStats) summed, then the node's own
//! gauges and counters (readiness, history, hooks, Redis, occupancy). It
//! reads the whole [`Node`], so it sits above it; the counters it sums
//! live below, in `metrics.rs`.

use std::sync::atomic::Ordering::Relaxed;

use throng_pubsub::metrics::write_metric;

use crate::metrics::SHARD_METRICS;
use crate::node::Node;
use crate::sys;

/// The `/metrics` page of `node`, Prometheus text format.
pub fn render(node: &Node) -> String {
    let mut out = String::with_capacity(4096);
    for (name, kind, help, counter) in SHARD_METRICS {
        let sum: u64 = node.stats.iter().map(|s| counter(s).load(Relaxed)).sum();
        write_metric(&mut out, name, kind, help, sum);
    }
    write_metric(
        &mut out,
        "throng_topics",
        "gauge",
        "Topics with at least one local subscriber.",
        node.topics.len(),
    );
    write_metric(
        &mut out,
        "throng_ready",
        "gauge",
        "1 while GET /readyz answers 200, else 0 (starting, draining, or Redis lost past --ready-redis-grace).",
        crate::health::readiness(node).is_ok() as u64,
    );
    write_metric(
        &mut out,
        "throng_draining",
        "gauge",
        "1 once a drain (SIGTERM) has begun, else 0.",
        node.drain_started().is_some() as u64,
    );
    write_metric(
        &mut out,
        "throng_max_connections",
        "gauge",
        "Connections the open-files limit allows.",
        node.fd_limit.saturating_sub(crate::FD_MARGIN),
    );
    write_metric(
        &mut out,
        "throng_process_resident_memory_bytes",
        "gauge",
        "Resident set size.",
        sys::rss_bytes().unwrap_or(0),
    );
    write_metric(
        &mut out,
        "throng_process_cpu_seconds_total",
        "counter",
        "User and system CPU time.",
        format_args!("{:.3}", sys::cpu_seconds().unwrap_or(0.0)),
    );
    write_metric(
        &mut out,
        "throng_available_memory_bytes",
        "gauge",
        "Memory available to this process at the last check (once a second: MemAvailable, or the cgroup's limit less its use; 0 with --min-available-memory-bytes 0, which turns the check off); under --min-available-memory-bytes new connections are refused.",
        node.admission.available_memory.load(Relaxed),
    );
    if let Some(overflows) = sys::listen_overflows() {
        write_metric(
            &mut out,
            "throng_host_listen_overflows_total",
            "counter",
            "The host's connections dropped because a listener's accept queue was full (ListenOverflows, every listener of the machine): the client retries its SYN; rising while this server is busy means it accepts too slowly.",
            overflows,
        );
    }
    if let Some((allocated, free)) = sys::heap() {
        write_metric(
            &mut out,
            "throng_heap_allocated_bytes",
            "gauge",
            "Bytes the allocator has handed out and not had back (glibc's mallinfo2: chunks in use and blocks in mappings of their own). The RSS stays up after a peak; this does not: growth here is memory held.",
            allocated,
        );
        write_metric(
            &mut out,
            "throng_heap_free_bytes",
            "gauge",
            "Bytes freed but kept by the allocator for reuse (part of the RSS).",
            free,
        );
    }
    write_metric(
        &mut out,
        "throng_outbound_memory_bytes",
        "gauge",
        "Output held for clients: queued bytes of their own and live broadcasts.",
        crate::budget::outbound_memory(),
    );
    let (mut inbox_bytes, mut inbox_dropped) = (0, 0);
    for peer in &node.peers {
        inbox_bytes += peer.queued.load(Relaxed);
        inbox_dropped += peer.dropped.load(Relaxed);
    }
    write_metric(
        &mut out,
        "throng_shard_inbox_bytes",
        "gauge",
        "Bytes of broadcasts waiting in the shards' inboxes.",
        inbox_bytes,
    );
    write_metric(
        &mut out,
        "throng_shard_inbox_dropped_total",
        "counter",
        "Broadcasts and infos not handed to a shard whose inbox held --max-shard-inbox-bytes.",
        inbox_dropped,
    );
    write_metric(
        &mut out,
        "throng_api_requests_total",
        "counter",
        "Server API requests (broadcast, disconnect, topics, stats).",
        node.api_requests.load(Relaxed),
    );
    write_metric(
        &mut out,
        "throng_api_refusals_total",
        "counter",
        "Server API requests refused for a missing or wrong X-API-Key.",
        node.api_refusals.load(Relaxed),
    );
    write_metric(
        &mut out,
        "throng_api_timeouts_total",
        "counter",
        "Server API requests whose head or body took longer than --api-timeout.",
        node.api_timeouts.load(Relaxed),
    );
    pusher_api(&mut out, node);
    for (tls, name) in [(&node.tls, "public port"), (&node.api_tls, "server API")] {
        let Some(tls) = tls else { continue };
        let which = if name == "public port" { "" } else { "api_" };
        write_metric(
            &mut out,
            &format!("throng_{which}tls_reloads_total"),
            "counter",
            &format!(
                "Certificate reloads of the {name} (SIGHUP or a changed file) that took effect."
            ),
            tls.certs.reloads.load(Relaxed),
        );
        write_metric(
            &mut out,
            &format!("throng_{which}tls_reload_failures_total"),
            "counter",
            &format!("Certificate reloads of the {name} refused (unreadable files, a key not the certificate's); the previous certificate stayed in use."),
            tls.certs.reload_failures.load(Relaxed),
        );
    }
    write_metric(
        &mut out,
        "throng_api_busy_total",
        "counter",
        "Server API connections refused (503) past --max-api-connections.",
        node.api_busy.load(Relaxed),
    );
    write_metric(
        &mut out,
        "throng_dashboard_streams",
        "gauge",
        "Live streams of the dashboard page open (bound: --max-dashboard-streams).",
        node.dashboard_streams.load(Relaxed),
    );
    write_metric(
        &mut out,
        "throng_dashboard_streams_refused_total",
        "counter",
        "Dashboard streams refused (503) past --max-dashboard-streams.",
        node.dashboard_refused.load(Relaxed),
    );
    if let Some(history) = &node.history_redis {
        throng_pubsub::history::redis::render_metrics(&history.stats, &mut out);
    }
    if let Some(history) = &node.history {
        crate::history::render_metrics(history, &mut out);
    }
    node.backplane.render_metrics(&mut out);
    node.presence.render_metrics(&mut out);
    if let Some(hooks) = &node.hooks {
        hooks.render_metrics(&mut out);
    }
    if let Some(w) = &node.webhooks {
        w.render_metrics(&mut out);
    }
    if let Some(o) = node.occupancy.get() {
        o.render_metrics(&mut out);
    }
    throng_pubsub::link::render_metrics(&mut out, &redis_links(node));
    out
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
fn pusher_api(out: &mut String, node: &Node) {
    use crate::metrics::{PUSHER_API_ROUTES, PUSHER_API_STATUSES};
    use std::fmt::Write as _;
    let name = "throng_pusher_api_requests_total";
    let _ = writeln!(
        out,
        "# HELP {name} Pusher HTTP API requests answered, by route and status (401: refused signatures; 413: bodies over --pusher-max-api-body-bytes; 503: past --pusher-max-api-requests; 504: past --pusher-api-timeout).\n# TYPE {name} counter"
    );
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
            let status = PUSHER_API_STATUSES
                .get(c)
                .map_or("other".to_string(), u16::to_string);
            let _ = writeln!(out, "{name}{{route=\"{route}\",status=\"{status}\"}} {n}");
        }
    }
    let waiting: u64 = node
        .stats
        .iter()
        .map(|s| s.pusher_api_waiting.load(Relaxed))
        .sum();
    write_metric(
        out,
        "throng_pusher_api_waiting",
        "gauge",
        "Pusher HTTP API requests waiting on the cluster's figures (channel and user queries, triggers with info).",
        waiting,
    );
}
