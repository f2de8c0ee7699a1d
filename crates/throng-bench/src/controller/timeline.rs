//! What the run looks like as it goes: a [`Sample`] every `--sample-interval`
//! (users, connected, rates, CPU, RSS) for the report's charts and the live
//! dashboard, and the progress line on stderr.

use std::io::Write;
use std::time::{Duration, Instant};

use super::probe::{server_conns, ServerProbe};
use crate::report::Sample;
use crate::stats::Counters;
use crate::sys::ProcSample;

/// The samples so far, and what the next one is measured against.
pub(super) struct Timeline {
    pub samples: Vec<Sample>,
    /// The sampling period.
    pub every: Duration,
    /// The previous sample's time, counters and server figures (rates are
    /// differences from it).
    prev: Option<(Instant, Counters, Option<ProcSample>)>,
    /// The last `/metrics` text scraped.
    pub last_metrics: Option<String>,
}

impl Timeline {
    pub fn new(every: Duration) -> Timeline {
        Timeline {
            samples: Vec::new(),
            every,
            prev: None,
            last_metrics: None,
        }
    }

    /// The first sample, at `start`: the server with no connections.
    pub fn begin(&mut self, start: Instant, server: Option<ProcSample>, server_conns: Option<f64>) {
        self.prev = Some((start, Counters::default(), server));
        self.samples.push(Sample {
            server_rss_mb: server.map(|p| p.rss as f64 / 1048576.0),
            server_conns,
            ..Default::default()
        });
    }

    /// The clock starts again at `start` (the arrivals'), from the first sample.
    pub fn restart(&mut self, start: Instant) {
        if let Some(prev) = self.prev.as_mut() {
            prev.0 = start;
        }
    }

    /// Takes a sample of the agents' counters `c` and the server now.
    pub fn sample(&mut self, start: Instant, c: Counters, probe: &ServerProbe) {
        let now = Instant::now();
        let metrics = probe.metrics();
        let srv = probe.sample(metrics.as_deref());
        let mut s = Sample {
            t: now.duration_since(start).as_secs_f64(),
            users: c.active(),
            connected: c.open,
            joined: c.joined,
            errors: c.errors.total(),
            // Counting workers' open files costs ~20 ms per 19,000, so the
            // per-second timeline leaves it out: only the plateau and the
            // storm count them.
            server_conns: if probe.counts_files() {
                None
            } else {
                metrics.as_deref().and_then(server_conns)
            },
            server_rss_mb: srv.map(|p| p.rss as f64 / 1048576.0),
            agents_rss_mb: c.rss as f64 / 1048576.0,
            ..Default::default()
        };
        if let Some((t0, c0, s0)) = self.prev.as_ref() {
            let dt = now.duration_since(*t0).as_secs_f64().max(1e-3);
            s.conn_per_sec = (c.connected - c0.connected) as f64 / dt;
            s.msgs_out_per_sec = (c.msgs_out - c0.msgs_out) as f64 / dt;
            s.msgs_in_per_sec = (c.msgs_in - c0.msgs_in) as f64 / dt;
            s.bytes_in_per_sec = c.bytes_in.saturating_sub(c0.bytes_in) as f64 / dt;
            s.presence_bytes_in_per_sec =
                c.presence
                    .total()
                    .bytes
                    .saturating_sub(c0.presence.total().bytes) as f64
                    / dt;
            s.agents_cpu_pct = cpu_pct(c0.cpu_secs, c.cpu_secs, dt);
            if let (Some(a), Some(b)) = (s0, srv) {
                s.server_cpu_pct = Some(cpu_pct(a.cpu_secs, b.cpu_secs, dt));
            }
        }
        self.last_metrics = metrics;
        self.prev = Some((now, c, srv));
        self.samples.push(s);
    }

    /// The best sample's connections per second.
    pub fn peak_rate(&self) -> f64 {
        self.samples
            .iter()
            .map(|s| s.conn_per_sec)
            .fold(0.0, f64::max)
    }
}

/// CPU use of one process over `secs`, % of one core.
fn cpu_pct(a: f64, b: f64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        (b - a) / secs * 100.0
    }
}

/// The progress line: rewritten in place on a terminal, one line a call
/// otherwise; `joins_per_sec`: its one rate, named.
pub(super) fn progress_line(phase: &str, c: &Counters, target: u64, joins_per_sec: f64, tty: bool) {
    let line = progress_text(phase, c, target, joins_per_sec);
    // A closed stderr must not stop the run: ignore write errors here.
    let mut err = std::io::stderr().lock();
    let _ = if tty {
        write!(err, "\r{line}\x1b[K")
    } else {
        writeln!(err, "{line}")
    };
}

/// The progress line's text: the bar, users started of the target, open,
/// joined, joins per second, errors.
fn progress_text(phase: &str, c: &Counters, target: u64, joins_per_sec: f64) -> String {
    let target = target.max(1);
    let width = 30;
    let done = ((c.started as f64 / target as f64) * width as f64).round() as usize;
    format!(
        "{phase:<7} [{}{}] {}/{} users  open {}  joined {}  {:.0} joins/s  errors {}",
        "#".repeat(done.min(width)),
        "-".repeat(width - done.min(width)),
        c.started,
        target,
        c.open,
        c.joined,
        joins_per_sec,
        c.errors.total()
    )
}

/// The hold's countdown: seconds held of the limit, who is connected, and
/// the broadcasts' receipts so far.
pub(super) fn hold_line(held: f64, limit: f64, c: &Counters, tty: bool) {
    let due = c.receipts_due();
    let receipts = if due > 0 {
        format!("  broadcast receipts {}/{due}", c.bcast_recv)
    } else {
        String::new()
    };
    let line = format!(
        "hold    {:.0} of at most {:.0} s (then every client disconnects)  open {}{receipts}",
        held, limit, c.open
    );
    let mut err = std::io::stderr().lock();
    let _ = if tty {
        write!(err, "\r{line}\x1b[K")
    } else {
        writeln!(err, "{line}")
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One rate on the line, and it says what it counts.
    #[test]
    fn the_progress_line_names_its_one_rate() {
        let c = Counters {
            started: 500,
            open: 480,
            joined: 470,
            ..Default::default()
        };
        let line = progress_text("ramp-up", &c, 1000, 1234.4);
        assert!(line.contains("1234 joins/s"), "{line}");
        assert_eq!(line.matches("/s").count(), 1, "{line}");
        assert!(
            line.starts_with("ramp-up [###############---------------] 500/1000 users"),
            "{line}"
        );
    }
}
