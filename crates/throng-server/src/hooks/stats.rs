//! The hooks' `/metrics`: per hook (label `hook`), requests, errors,
//! timeouts, refusals and a latency histogram (Prometheus buckets: a few
//! atomics, no lock), and the circuit's state and the requests in flight.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use throng_pubsub::metrics::{Kind, Metric, Sink, Value};

use super::Hook;

/// Upper bounds of the latency buckets, in milliseconds.
const BUCKETS_MS: [u64; 11] = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000];

#[derive(Default)]
pub struct HookStats {
    /// Requests sent to the backend.
    pub requests: AtomicU64,
    /// Requests that gave no usable answer: unreachable, timeout, 5xx, bad answer.
    pub errors: AtomicU64,
    /// Of the errors, timeouts.
    pub timeouts: AtomicU64,
    /// Of the errors, bad answers (not JSON, wrong shape, too big, 3xx/4xx).
    pub bad_answers: AtomicU64,
    /// Calls answered at once without a request: circuit open, or a bound
    /// of requests in flight reached.
    pub refused: AtomicU64,
    buckets: [AtomicU64; BUCKETS_MS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl HookStats {
    /// A request that got an answer (any status) took `d`.
    pub fn observe(&self, d: Duration) {
        let ms = d.as_millis() as u64;
        if let Some(i) = BUCKETS_MS.iter().position(|&b| ms < b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }
}

/// Every metric of the hooks (the counters and the histogram by `hook`).
pub static METRICS: [throng_pubsub::metrics::Counted<HookStats>; 5] = [
    (
        Metric::counter(
            "throng_hook_requests_total",
            "Requests sent to the app backend.",
        )
        .figure(),
        |s| &s.requests,
    ),
    (
        Metric::counter(
            "throng_hook_errors_total",
            "Hook requests with no usable answer: unreachable, timeout, 5xx, bad answer.",
        )
        .figure(),
        |s| &s.errors,
    ),
    (
        Metric::counter(
            "throng_hook_timeouts_total",
            "Hook requests not answered within --hook-timeout-ms.",
        )
        .limit(),
        |s| &s.timeouts,
    ),
    (
        Metric::counter(
            "throng_hook_bad_answers_total",
            "Backend answers that were not JSON, of the wrong shape, over --hook-max-answer-bytes, or 3xx/4xx.",
        ),
        |s| &s.bad_answers,
    ),
    (
        Metric::counter(
            "throng_hook_refused_total",
            "Joins and pushes answered at once, with no request: circuit open, or --hook-max-in-flight(-per-socket) reached.",
        )
        .limit(),
        |s| &s.refused,
    ),
];

pub static DURATION: Metric = Metric::new(
    "throng_hook_duration_seconds",
    Kind::Histogram,
    "Time from sending a hook request to its answer (timeouts excluded).",
)
.figure();
pub static CIRCUIT: Metric = Metric::gauge(
    "throng_hook_circuit_state",
    "The app backend's circuit: 0 closed, 1 open (hooks answered backend unavailable at once), 2 half-open (a probe is due or out).",
)
.figure();
pub static IN_FLIGHT: Metric = Metric::gauge(
    "throng_hook_in_flight",
    "Hook requests waiting for the app backend (bound: --hook-max-in-flight).",
)
.figure();

/// Hands the hooks' metrics to `out`.
pub fn describe(out: &mut dyn Sink, stats: &[HookStats; 3], circuit: u8, in_flight: usize) {
    for (m, counter) in &METRICS {
        out.family(m);
        for hook in Hook::ALL {
            let v = counter(&stats[hook.index()]).load(Relaxed);
            out.sample(m, "", &[("hook", hook.name())], Value::U(v));
        }
    }
    out.family(&DURATION);
    let mut le = String::new();
    for hook in Hook::ALL {
        let s = &stats[hook.index()];
        let h = hook.name();
        let mut cumulative = 0;
        for (b, ms) in s.buckets.iter().zip(BUCKETS_MS) {
            cumulative += b.load(Relaxed);
            le.clear();
            let _ = write!(le, "{}", ms as f64 / 1000.0);
            out.sample(
                &DURATION,
                "_bucket",
                &[("hook", h), ("le", &le)],
                Value::U(cumulative),
            );
        }
        let count = s.count.load(Relaxed);
        let sum = s.sum_us.load(Relaxed) as f64 / 1e6;
        out.sample(
            &DURATION,
            "_bucket",
            &[("hook", h), ("le", "+Inf")],
            Value::U(count),
        );
        out.sample(&DURATION, "_sum", &[("hook", h)], Value::F(sum));
        out.sample(&DURATION, "_count", &[("hook", h)], Value::U(count));
    }
    out.put(&CIRCUIT, circuit as u64);
    out.put(&IN_FLIGHT, in_flight);
}
