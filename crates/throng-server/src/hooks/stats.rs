//! The hooks' `/metrics`: per hook (label `hook`), requests, errors,
//! timeouts, refusals and a latency histogram (Prometheus buckets: a few
//! atomics, no lock), and the circuit's state and the requests in flight.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

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

/// A counter's name, help and field.
type Counter = (&'static str, &'static str, fn(&HookStats) -> &AtomicU64);

/// Writes the hooks' metrics.
pub fn render(out: &mut String, stats: &[HookStats; 3], circuit: u8, in_flight: usize) {
    let counters: [Counter; 5] = [
        (
            "throng_hook_requests_total",
            "Requests sent to the app backend.",
            |s| &s.requests,
        ),
        (
            "throng_hook_errors_total",
            "Hook requests with no usable answer: unreachable, timeout, 5xx, bad answer.",
            |s| &s.errors,
        ),
        (
            "throng_hook_timeouts_total",
            "Hook requests not answered within --hook-timeout-ms.",
            |s| &s.timeouts,
        ),
        (
            "throng_hook_bad_answers_total",
            "Backend answers that were not JSON, of the wrong shape, over --hook-max-answer-bytes, or 3xx/4xx.",
            |s| &s.bad_answers,
        ),
        (
            "throng_hook_refused_total",
            "Joins and pushes answered at once, with no request: circuit open, or --hook-max-in-flight(-per-socket) reached.",
            |s| &s.refused,
        ),
    ];
    for (name, help, counter) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for hook in Hook::ALL {
            let v = counter(&stats[hook.index()]).load(Relaxed);
            let _ = writeln!(out, "{name}{{hook=\"{}\"}} {v}", hook.name());
        }
    }
    let name = "throng_hook_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time from sending a hook request to its answer (timeouts excluded).\n# TYPE {name} histogram"
    );
    for hook in Hook::ALL {
        let s = &stats[hook.index()];
        let h = hook.name();
        let mut cumulative = 0;
        for (b, ms) in s.buckets.iter().zip(BUCKETS_MS) {
            cumulative += b.load(Relaxed);
            let le = ms as f64 / 1000.0;
            let _ = writeln!(
                out,
                "{name}_bucket{{hook=\"{h}\",le=\"{le}\"}} {cumulative}"
            );
        }
        let count = s.count.load(Relaxed);
        let sum = s.sum_us.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_bucket{{hook=\"{h}\",le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum{{hook=\"{h}\"}} {sum}");
        let _ = writeln!(out, "{name}_count{{hook=\"{h}\"}} {count}");
    }
    throng_pubsub::metrics::write_metric(
        out,
        "throng_hook_circuit_state",
        "gauge",
        "The app backend's circuit: 0 closed, 1 open (hooks answered backend unavailable at once), 2 half-open (a probe is due or out).",
        circuit,
    );
    throng_pubsub::metrics::write_metric(
        out,
        "throng_hook_in_flight",
        "gauge",
        "Hook requests waiting for the app backend (bound: --hook-max-in-flight).",
        in_flight,
    );
}
