//! The server API's counters (`crate::api`) and the dashboard's
//! (`crate::dashboard`, served on the API listener), with their metrics.
//! They live apart from `api.rs` because the node holds them and `api.rs`
//! reads the node.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use throng_pubsub::metrics::{Metric, Sink};

/// What the API listener counts.
#[derive(Default)]
pub struct ApiStats {
    /// Server API requests, and those refused for their key.
    pub requests: AtomicU64,
    pub refusals: AtomicU64,
    /// API connections closed for a head or body later than `--api-timeout`.
    pub timeouts: AtomicU64,
    /// API connections refused (503) past `--max-api-connections`.
    pub busy: AtomicU64,
    /// Dashboard streams open, and those refused past
    /// `--max-dashboard-streams`.
    pub dashboard_streams: AtomicU64,
    pub dashboard_refused: AtomicU64,
}

type Counter = fn(&ApiStats) -> &AtomicU64;

/// Every metric of the API listener, and the counter it reads.
pub static METRICS: [(Metric, Counter); 6] = [
    (
        Metric::counter(
            "throng_api_requests_total",
            "Server API requests (broadcast, disconnect, topics, stats).",
        ),
        |s| &s.requests,
    ),
    (
        Metric::counter(
            "throng_api_refusals_total",
            "Server API requests refused for a missing or wrong X-API-Key.",
        )
        .limit(),
        |s| &s.refusals,
    ),
    (
        Metric::counter(
            "throng_api_timeouts_total",
            "Server API requests whose head or body took longer than --api-timeout.",
        )
        .limit(),
        |s| &s.timeouts,
    ),
    (
        Metric::counter(
            "throng_api_busy_total",
            "Server API connections refused (503) past --max-api-connections.",
        )
        .limit(),
        |s| &s.busy,
    ),
    (
        Metric::gauge(
            "throng_dashboard_streams",
            "Live streams of the dashboard page open (bound: --max-dashboard-streams).",
        ),
        |s| &s.dashboard_streams,
    ),
    (
        Metric::counter(
            "throng_dashboard_streams_refused_total",
            "Dashboard streams refused (503) past --max-dashboard-streams.",
        )
        .limit(),
        |s| &s.dashboard_refused,
    ),
];

impl ApiStats {
    /// The server API's counters, `/metrics` order: the requests, refusals
    /// and timeouts come before the Pusher API's and TLS lines, the rest
    /// after ([`ApiStats::describe_rest`]).
    pub fn describe(&self, out: &mut dyn Sink) {
        for (m, counter) in &METRICS[..3] {
            out.put(m, counter(self).load(Relaxed));
        }
    }

    /// The busy refusals and the dashboard's streams.
    pub fn describe_rest(&self, out: &mut dyn Sink) {
        for (m, counter) in &METRICS[3..] {
            out.put(m, counter(self).load(Relaxed));
        }
    }
}
