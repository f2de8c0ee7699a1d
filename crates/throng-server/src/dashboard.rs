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

/// The names of the metrics the page lists among the limits when they
/// move (those marked so in the registry, `crate::scrape::all`). A node's
/// report carries them and the figures of the tiles, read by `Node::report`
/// straight from the registry's sources.
fn limit_counters() -> Vec<&'static str> {
    use throng_pubsub::metrics::Shows;
    crate::scrape::all()
        .filter(|m| m.shows == Shows::Limit)
        .map(|m| m.name)
        .collect()
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
    limit_counters: Vec<&'static str>,
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
        self.0.api.dashboard_streams.fetch_sub(1, Relaxed);
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
        if node.api.dashboard_streams.fetch_add(1, Relaxed) >= max {
            node.api.dashboard_streams.fetch_sub(1, Relaxed);
            node.api.dashboard_refused.fetch_add(1, Relaxed);
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
        limit_counters: limit_counters(),
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

    /// The page lists the limits it always has (32 today, the hooks' and
    /// the backplane's among them).
    #[test]
    fn limit_counters_come_from_the_registry() {
        let names = limit_counters();
        for name in [
            "throng_rate_limited_total",
            "throng_shard_inbox_dropped_total",
            "throng_api_busy_total",
            "throng_dashboard_streams_refused_total",
            "throng_hook_timeouts_total",
            "throng_backplane_dropped_total",
        ] {
            assert!(names.contains(&name), "{name} not in {names:?}");
        }
        assert_eq!(names.len(), 32, "{names:?}");
        assert!(asset("/dashboard").is_some_and(|(_, b)| b.contains("/dashboard/app.js")));
    }
}
