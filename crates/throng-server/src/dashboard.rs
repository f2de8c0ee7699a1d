//! The live dashboard on the server API listener: the page (`GET
//! /dashboard` and its two bundled assets, built from `web/dashboard.*` by
//! `npm run build:web` and served from the binary, so it works offline),
//! and the stream it reads its figures from (`GET /api/dashboard`, with
//! the `X-API-Key` as every `/api` route).
//!
//! The stream is Server-Sent Events (axum's `Sse`), read by the page with
//! `fetch` and a stream reader rather than `EventSource` or a WebSocket:
//! neither of those lets a browser send a header, so the key would have to
//! travel in the URL (where logs and the browser's history keep it) or in
//! a protocol of our own over the WebSocket. A `fetch` sends `X-API-Key`
//! like any API client, so the key rule is the API's own, unchanged.
//!
//! Bounds. The stream is one long response on one API connection: it holds
//! one of `--max-api-connections` for as long as it is open (the
//! connection's permit, `api::serve`). `--api-timeout` bounds the
//! request's head and body, which a stream's request has read in full
//! before its first event, so it does not cut the stream. At most
//! `--max-dashboard-streams` are open at once (`throng_dashboard_streams`;
//! past it 503, `throng_dashboard_streams_refused_total`). A stream ends
//! when its reader goes: an event goes out every second, and the write to
//! a closed connection fails.
//!
//! The figures are sampled once a second by one task, whatever the number
//! of streams ([`Dashboard`]): a cluster-wide gather (each node's
//! [`NodeReport`], with the time it took to arrive), the top topics with
//! their presence counts, encoded once as JSON and handed to every stream.
//! The task runs only while a stream is open. Rates (joins/s, messages/s)
//! are the page's: differences of the counters between two samples.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::watch;

use crate::api_error::ApiError;
use crate::control::NodeReport;
use crate::node::{Endpoint, Node};

const PAGE: &str = include_str!("../templates/dashboard.html");
const APP_JS: &str = include_str!("../assets/dashboard.js");
const APP_CSS: &str = include_str!("../assets/dashboard.css");

/// How often the figures are sampled and sent.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The topics listed, the most subscribed first.
pub const TOP_TOPICS: usize = 10;

/// The `/metrics` counters of limits and refusals a report carries: the
/// page lists those that moved.
const LIMIT_COUNTERS: &[&str] = &[
    "throng_slow_reader_closes_total",
    "throng_outbound_budget_closes_total",
    "throng_socket_budget_refusals_total",
    "throng_channel_limit_refusals_total",
    "throng_rate_limited_total",
    "throng_rate_limit_closes_total",
    "throng_control_limited_total",
    "throng_control_limit_closes_total",
    "throng_auth_refusals_total",
    "throng_origin_refusals_total",
    "throng_policy_refusals_total",
    "throng_payload_refusals_total",
    "throng_connections_refused_total",
    "throng_connections_refused_per_ip_total",
    "throng_handshake_timeouts_total",
    "throng_idle_timeout_closes_total",
    "throng_ref_too_long_closes_total",
    "throng_protocol_errors_total",
    "throng_http_errors_total",
    "throng_longpoll_overflows_total",
    "throng_longpoll_refused_total",
    "throng_longpoll_rate_limited_total",
    "throng_longpoll_sessions_refused_total",
    "throng_shard_inbox_dropped_total",
    "throng_presence_refused_total",
    "throng_api_refusals_total",
    "throng_api_timeouts_total",
    "throng_api_busy_total",
    "throng_dashboard_streams_refused_total",
    // Only with --hook-url, --redis:
    "throng_hook_timeouts_total",
    "throng_hook_refused_total",
    "throng_backplane_dropped_total",
];

/// The hooks' and the backplane's figures a report carries, present in
/// `/metrics` only when those are on (`--hook-url`, `--redis`).
const OPTIONAL_FIGURES: &[&str] = &[
    "throng_hook_requests_total",
    "throng_hook_errors_total",
    "throng_hook_duration_seconds_sum",
    "throng_hook_duration_seconds_count",
    "throng_hook_in_flight",
    "throng_hook_circuit_state",
    "throng_backplane_connected",
    "throng_backplane_queued_bytes",
    "throng_backplane_published_total",
    "throng_backplane_received_total",
    "throng_backplane_reconnects_total",
    // Per Redis link (`link` label): the Redis tile.
    "throng_redis_connected",
    "throng_redis_link_failures_total",
    "throng_redis_last_answer_seconds",
    "throng_redis_ping_seconds",
];

/// `node`'s limit counters and its hooks' and backplane's figures, read off
/// its `/metrics` text, so they have the names (and labels) an operator
/// knows from there and cannot drift from it. Rendered once per report
/// (a second while a dashboard is open): a few kilobytes of text.
pub fn counters(node: &Node) -> BTreeMap<String, f64> {
    pick(&crate::scrape::render(node))
}

/// The [`LIMIT_COUNTERS`] and [`OPTIONAL_FIGURES`] lines of Prometheus text.
fn pick(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = key.split('{').next().unwrap_or(key);
        if LIMIT_COUNTERS.contains(&name) || OPTIONAL_FIGURES.contains(&name) {
            if let Ok(v) = value.parse::<f64>() {
                out.insert(key.to_string(), v);
            }
        }
    }
    out
}

/// The dashboard's page and assets: (content type, body), no key needed
/// (they hold no figures).
pub fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/dashboard" => Some(("text/html; charset=utf-8", PAGE)),
        "/dashboard/app.js" => Some(("application/javascript", APP_JS)),
        "/dashboard/app.css" => Some(("text/css", APP_CSS)),
        _ => None,
    }
}

/// One node in a sample.
#[derive(Serialize)]
struct NodeFigures {
    /// How long its report took to arrive, in ms.
    report_ms: f64,
    /// Its topics with subscribers (the report's own list is left out).
    topic_count: usize,
    #[serde(flatten)]
    report: NodeReport,
}

/// One of the top topics.
#[derive(Serialize)]
struct TopicFigures {
    topic: String,
    subscribers: u64,
    /// Distinct presence keys, cluster-wide; `None` when presence is off
    /// for the topic (or the store did not answer).
    presence: Option<usize>,
}

/// One sample, as each stream sends it.
#[derive(Serialize)]
struct Sample {
    /// The server's clock (Unix ms) when it was taken.
    at_ms: u64,
    /// The node serving the page.
    node: String,
    nodes: Vec<NodeFigures>,
    /// The nodes' sums, as `GET /api/stats` gives them.
    cluster: serde_json::Value,
    topics: Vec<TopicFigures>,
    /// Topics with subscribers, cluster-wide.
    topic_count: usize,
    max_streams: usize,
    /// Which of the nodes' counters are limits (the page lists those that moved).
    limit_counters: &'static [&'static str],
}

/// The sampler shared by the dashboard streams of the API listener.
pub struct Dashboard {
    latest: watch::Sender<Option<Arc<str>>>,
    sampling: AtomicBool,
}

impl Default for Dashboard {
    fn default() -> Self {
        Dashboard {
            latest: watch::Sender::new(None),
            sampling: AtomicBool::new(false),
        }
    }
}

/// Takes a stream's place in `throng_dashboard_streams` back when dropped.
struct Open(Arc<Node>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dashboard_streams.fetch_sub(1, Relaxed);
    }
}

impl Dashboard {
    /// A new stream (the key was checked), or the 503 past
    /// `--max-dashboard-streams`; it ends when `stopped` turns true (the
    /// API stops at a drain's end, and waits for no stream). Runs on the
    /// API's runtime.
    pub(crate) fn open(
        self: &Arc<Self>,
        endpoint: &Endpoint,
        stopped: watch::Receiver<bool>,
    ) -> Result<Response, ApiError> {
        let node = endpoint.node().clone();
        let max = node.config.limits.max_dashboard_streams as u64;
        if node.dashboard_streams.fetch_add(1, Relaxed) >= max {
            node.dashboard_streams.fetch_sub(1, Relaxed);
            node.dashboard_refused.fetch_add(1, Relaxed);
            let message = if max == 0 {
                "the dashboard is off on this node (--max-dashboard-streams 0): set it to 1 or more"
                    .to_string()
            } else {
                format!(
                    "{max} dashboard streams are open already (--max-dashboard-streams): \
                     close a dashboard tab, or raise the flag"
                )
            };
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_dashboards",
                message,
            ));
        }
        let guard = Open(node);
        let mut rx = self.latest.subscribe();
        // The latest sample at once, if there is one; then each new one.
        if rx.borrow().is_some() {
            rx.mark_changed();
        }
        self.sample(endpoint.clone());
        let events = futures_util::stream::unfold((rx, guard), move |(mut rx, guard)| {
            let mut stopped = stopped.clone();
            async move {
                loop {
                    tokio::select! {
                        changed = rx.changed() => changed.ok()?,
                        // Told to stop (or its API gone): the stream ends.
                        _ = stopped.wait_for(|s| *s) => return None,
                    }
                    // `None`: the sampler stopped (no stream was left) before this one came.
                    let latest = rx.borrow_and_update().clone();
                    if let Some(json) = latest {
                        let event = Event::default().event("sample").data(&*json);
                        return Some((Ok::<_, std::convert::Infallible>(event), (rx, guard)));
                    }
                }
            }
        });
        Ok(Sse::new(events).into_response())
    }

    /// Starts the sampling task unless it runs; it ends when no stream is
    /// left. The API runtime has one thread and there is no `.await`
    /// between the task's last look at the streams and its flag going
    /// down, so a stream opened meanwhile always finds one or the other.
    fn sample(self: &Arc<Self>, endpoint: Endpoint) {
        if self.sampling.swap(true, Relaxed) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if me.latest.receiver_count() == 0 {
                    break;
                }
                let json = take(&endpoint).await;
                me.latest.send_replace(Some(json.into()));
            }
            me.latest.send_replace(None);
            me.sampling.store(false, Relaxed);
        });
    }
}

/// One sample of the cluster, as JSON.
async fn take(endpoint: &Endpoint) -> String {
    let node = endpoint.node();
    let reports = endpoint.gather_timed().await;
    let me = &node.control.node_id;
    let plain: Vec<NodeReport> = reports.iter().map(|(r, _)| r.clone()).collect();
    let cluster = crate::control::cluster(&plain);
    let mut topics: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &plain {
        for (t, n) in &r.topics {
            *topics.entry(t).or_default() += n;
        }
    }
    let topic_count = topics.len();
    let mut top: Vec<(&str, u64)> = topics.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    top.truncate(TOP_TOPICS);
    let local = plain.iter().find(|r| &r.node == me);
    let mut top_figures = Vec::with_capacity(top.len());
    for (topic, subscribers) in top {
        // This node's tracker when it watches the topic; a topic it has
        // no subscriber of is read from the presence store (its nodes
        // watch it); a topic it has subscribers of but does not watch has
        // no presence.
        let presence = match endpoint.presence_count(topic) {
            Some(n) => Some(n),
            None if local.is_some_and(|r| r.topics.contains_key(topic)) => None,
            None => endpoint.presence(topic).await.ok().map(|v| v.count),
        };
        top_figures.push(TopicFigures {
            topic: topic.to_string(),
            subscribers,
            presence,
        });
    }
    let mut nodes: Vec<NodeFigures> = reports
        .into_iter()
        .map(|(report, took)| NodeFigures {
            report_ms: took.as_secs_f64() * 1000.0,
            topic_count: report.topics.len(),
            report: NodeReport {
                topics: BTreeMap::new(),
                ..report
            },
        })
        .collect();
    nodes.sort_by(|a, b| a.report.node.cmp(&b.report.node));
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let sample = Sample {
        at_ms,
        node: me.clone(),
        nodes,
        cluster,
        topics: top_figures,
        topic_count,
        max_streams: node.config.limits.max_dashboard_streams,
        limit_counters: LIMIT_COUNTERS,
    };
    serde_json::to_string(&sample).unwrap_or_default()
}

/// The page and its assets, as responses. Each closes its connection: a
/// browser would otherwise keep it idle until `--api-timeout` closes it,
/// counted in `throng_api_timeouts_total`, which the page itself lists.
pub(crate) fn page(path: &str) -> Response {
    match asset(path) {
        Some((content_type, body)) => (
            [
                ("content-type", content_type),
                ("cache-control", "no-cache"),
                ("connection", "close"),
            ],
            body,
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_limit_counters_and_labelled_figures() {
        let text = "# HELP throng_rate_limited_total x\n\
                    # TYPE throng_rate_limited_total counter\n\
                    throng_rate_limited_total 7\n\
                    throng_connections 3\n\
                    throng_hook_duration_seconds_sum{hook=\"join\"} 0.25\n\
                    throng_hook_duration_seconds_bucket{hook=\"join\",le=\"0.001\"} 1\n";
        let picked = pick(text);
        assert_eq!(picked.get("throng_rate_limited_total"), Some(&7.0));
        assert_eq!(
            picked.get("throng_hook_duration_seconds_sum{hook=\"join\"}"),
            Some(&0.25)
        );
        assert_eq!(picked.len(), 2, "{picked:?}");
    }

    /// Every limit counter the page lists is a line of `/metrics`, so a
    /// renamed metric cannot silently drop off the page.
    #[test]
    fn limit_counters_are_metrics() {
        let mut names: Vec<&str> = crate::metrics::SHARD_METRICS
            .iter()
            .map(|(n, ..)| *n)
            .collect();
        names.extend([
            "throng_shard_inbox_dropped_total",
            "throng_api_refusals_total",
            "throng_api_timeouts_total",
            "throng_api_busy_total",
            "throng_dashboard_streams_refused_total",
        ]);
        let src = [include_str!("metrics.rs"), include_str!("scrape.rs")].concat();
        let optional =
            |n: &str| n.starts_with("throng_hook_") || n.starts_with("throng_backplane_");
        for name in LIMIT_COUNTERS.iter().filter(|n| !optional(n)) {
            assert!(
                names.contains(name) && src.contains(&format!("\"{name}\"")),
                "{name} is not in /metrics"
            );
        }
        assert!(asset("/dashboard").is_some_and(|(_, b)| b.contains("/dashboard/app.js")));
    }
}
