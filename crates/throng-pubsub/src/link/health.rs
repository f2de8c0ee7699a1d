//! [`Health`]: what a [link](super) knows of its Redis while it runs, for
//! `/metrics` (one family per figure, a `link` label per user of the link:
//! [`describe`]), `/readyz` and the dashboard's Redis tile: whether
//! it is connected, how often its session was lost, when Redis last
//! answered one of its PINGs and how long that PING took.
//!
//! It also says when Redis turns slow and when it is quick again, one log
//! line each (not one per PING): a PING round trip at or over a hundredth
//! of the link's timeout (50 ms at the default 5 s; Redis on the same
//! network answers in well under a millisecond) starts a slow episode, one
//! under half that ends it.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::metrics::{Metric, Sink, Value};

/// A link's health, shared by the link's thread (which writes it) and the
/// node (which reads it); a clone is the same health.
#[derive(Clone, Default, Debug)]
pub struct Health(Arc<HealthState>);

impl Deref for Health {
    type Target = HealthState;
    fn deref(&self) -> &HealthState {
        &self.0
    }
}

/// The figures behind a [`Health`].
#[derive(Default, Debug)]
pub struct HealthState {
    /// A session is up and its worker's setup done.
    pub connected: AtomicBool,
    /// Sessions rebuilt after a lost one.
    pub reconnects: AtomicU64,
    /// Sessions lost: a connection closed or reset, an answer (or a PING's)
    /// past the timeout.
    pub failures: AtomicU64,
    /// When the session in progress was lost, while it is being rebuilt
    /// (for `/readyz`, which turns 503 once this is old enough). Written
    /// only when the link goes down or comes back.
    pub down_since: Mutex<Option<Instant>>,
    /// When Redis last answered this link (a PING, or a session's first
    /// answers): milliseconds since [`epoch`], plus one; 0: never.
    last_answer_ms: AtomicU64,
    /// The last PING's round trip, in microseconds (the slowest of the
    /// session's connections).
    ping_us: AtomicU64,
    /// In a slow episode (see the module doc).
    slow: AtomicBool,
}

/// The instant the link's clock counts from (the first use).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl HealthState {
    /// How long the link has been down, if it is.
    pub fn down_for(&self) -> Option<Duration> {
        if self.connected.load(Relaxed) {
            return None;
        }
        let since = *self.down_since.lock().unwrap_or_else(|e| e.into_inner());
        Some(since.map_or(Duration::ZERO, |t| t.elapsed()))
    }

    pub(super) fn set_down(&self, down: Option<Instant>) {
        *self.down_since.lock().unwrap_or_else(|e| e.into_inner()) = down;
    }

    /// Redis answered now.
    pub(super) fn answered_now(&self) {
        let ms = epoch().elapsed().as_millis() as u64 + 1;
        self.last_answer_ms.store(ms, Relaxed);
    }

    /// How long ago Redis last answered this link (`None`: never).
    pub fn since_last_answer(&self) -> Option<Duration> {
        match self.last_answer_ms.load(Relaxed) {
            0 => None,
            ms => Some(
                epoch()
                    .elapsed()
                    .saturating_sub(Duration::from_millis(ms - 1)),
            ),
        }
    }

    /// The last PING's round trip.
    pub fn ping(&self) -> Duration {
        Duration::from_micros(self.ping_us.load(Relaxed))
    }

    /// A PING of every connection answered within `rtt`; `timeout` is the
    /// link's, `what` and `url` name it in the log lines of a slow episode.
    pub(super) fn pinged(&self, rtt: Duration, timeout: Duration, what: &str, url: &str) {
        self.answered_now();
        self.ping_us.store(rtt.as_micros() as u64, Relaxed);
        let slow = slow_after(timeout);
        if rtt >= slow {
            if !self.slow.swap(true, Relaxed) {
                tracing::warn!(
                    ping_ms = rtt.as_millis() as u64,
                    "{what}: Redis at {url} is slow: a PING took {rtt:?} (slow from {slow:?}, a \
                     hundredth of --redis-timeout-ms; throng_redis_ping_seconds). Every \
                     broadcast to other nodes and every presence change waits as long; a check \
                     of the network to Redis and of Redis's own load (SLOWLOG, INFO) may tell why"
                );
            }
        } else if rtt < slow / 2 && self.slow.swap(false, Relaxed) {
            tracing::info!(
                ping_ms = rtt.as_millis() as u64,
                "{what}: Redis at {url} answers quickly again (a PING took {rtt:?})"
            );
        }
    }

    /// Ends a slow episode without a line: the session was lost, and the
    /// lines of the loss and of the reconnection say more.
    pub(super) fn end_slow(&self) {
        self.slow.store(false, Relaxed);
    }
}

/// The PING round trip from which Redis counts as slow with `timeout`.
pub fn slow_after(timeout: Duration) -> Duration {
    timeout / 100
}

/// Every metric of a Redis link (a `link` label each), and its figure.
pub static METRICS: [crate::metrics::Figure<HealthState>; 4] = [
    (
        Metric::gauge(
            "throng_redis_connected",
            "1 while this Redis link is connected (its session set up), else 0; a link per user of Redis.",
        )
        .figure(),
        |h| h.connected.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_redis_link_failures_total",
            "Sessions of this Redis link lost: a connection closed or reset, an answer or a PING past --redis-timeout-ms.",
        )
        .figure(),
        |h| h.failures.load(Relaxed).into(),
    ),
    (
        Metric::gauge(
            "throng_redis_last_answer_seconds",
            "Seconds since Redis last answered this link (it PINGs every connection each second): grows while Redis does not answer.",
        )
        .figure(),
        |h| {
            h.since_last_answer()
                .map_or(Value::U(0), |d| Value::Fixed(d.as_secs_f64(), 3))
        },
    ),
    (
        Metric::gauge(
            "throng_redis_ping_seconds",
            "Round trip of this link's last answered PING (the slowest of its connections).",
        )
        .figure(),
        |h| Value::Fixed(h.ping().as_secs_f64(), 6),
    ),
];

/// The link metrics of `links` (each a `link` label and its health), one
/// family per figure.
pub fn describe(out: &mut dyn Sink, links: &[(&str, &Health)]) {
    if links.is_empty() {
        return;
    }
    for (m, figure) in &METRICS {
        out.family(m);
        for (link, health) in links {
            out.sample(m, "", &[("link", link)], figure(health));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_is_the_same_health() {
        let h = Health::default();
        h.clone().failures.fetch_add(2, Relaxed);
        assert_eq!(h.failures.load(Relaxed), 2);
        assert_eq!(h.since_last_answer(), None);
        h.answered_now();
        assert!(h.since_last_answer().unwrap() < Duration::from_secs(5));
    }

    #[test]
    fn slow_episodes_start_over_a_hundredth_of_the_timeout_and_end_under_half_that() {
        let h = Health::default();
        let t = Duration::from_secs(5);
        h.pinged(Duration::from_millis(49), t, "test", "redis://x");
        assert!(!h.slow.load(Relaxed));
        h.pinged(Duration::from_millis(50), t, "test", "redis://x");
        assert!(h.slow.load(Relaxed));
        h.pinged(Duration::from_millis(30), t, "test", "redis://x");
        assert!(
            h.slow.load(Relaxed),
            "between the two thresholds: still slow"
        );
        h.pinged(Duration::from_millis(24), t, "test", "redis://x");
        assert!(!h.slow.load(Relaxed));
        assert_eq!(h.ping(), Duration::from_millis(24));
    }

    #[test]
    fn every_figure_is_one_family_with_a_line_per_link() {
        let (a, b) = (Health::default(), Health::default());
        a.connected.store(true, Relaxed);
        b.failures.fetch_add(3, Relaxed);
        let out = crate::metrics::text(|s| describe(s, &[("backplane", &a), ("presence", &b)]));
        assert_eq!(
            out.matches("# TYPE throng_redis_connected gauge").count(),
            1
        );
        assert!(
            out.contains("throng_redis_connected{link=\"backplane\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("throng_redis_connected{link=\"presence\"} 0\n"),
            "{out}"
        );
        assert!(out.contains("throng_redis_link_failures_total{link=\"presence\"} 3\n"));
        assert!(out.contains("throng_redis_last_answer_seconds{link=\"backplane\"} 0\n"));
    }
}
