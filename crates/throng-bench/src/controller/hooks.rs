//! `throng bench --hooks`: the hooks scenario's run (see [`crate::hooks`]).
//! Memory first, each on a fresh server (without hooks, then through the
//! join hook); then the rounds of joins per second on one server, each
//! round a phase without hooks and one through the join hook, alternating
//! which goes first.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::launch::Server;
use super::probe::server_conns;
use crate::agent::FD_MARGIN;
use crate::error::BenchError;
use crate::hist::new_hist;
use crate::hooks::joiner::{join_all, Joined};
use crate::hooks::report::{
    median, Backend, Conntrack, Goals, HooksReport, Latency, Memory, Round, GOAL_BYTES, GOAL_RATIO,
};
use crate::hooks::{Responder, ASSIGNS};
use crate::{sys, BenchArgs};

/// Sockets per phase unless `--connections` says otherwise.
const DEFAULT_SOCKETS: u64 = 5000;
/// Joins in flight at once: enough to keep the server busy through the
/// hook's round trip, few enough for the hook client's default bound
/// (`--hook-max-in-flight` 1024).
const WINDOW: usize = 64;
/// Sockets of each phase that times joins one at a time (no queue in
/// front of the server or the backend: the latency the hook itself adds).
const ONE_AT_A_TIME: u64 = 500;
/// Joins in flight while memory is measured: fewer than the warm-up's,
/// so the hook client's pool (grown to the warm-up's concurrency) opens no
/// connection to the backend during the measurement (each costs ~34 KB
/// of buffers and channels, which would read as per-socket memory).
const MEMORY_WINDOW: usize = 8;
/// Client threads (the machine's other threads: the server's shards, its
/// hook thread, the responder).
const CLIENT_THREADS: usize = 2;
/// Each socket's connect, upgrade and join.
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);
/// The topics: one rule without hooks, one with the join hook.
const PLAIN: &str = "plain:lobby";
const HOOKED: &str = "hooked:lobby";

/// The config file the server under test runs with.
fn config(url: &str) -> String {
    format!(
        "[hooks]\nurl = \"{url}\"\n\n\
         [[topics]]\npattern = \"hooked:*\"\njoin = \"anyone\"\nhooks = [\"join\"]\n\n\
         [[topics]]\npattern = \"plain:*\"\njoin = \"anyone\"\n"
    )
}

pub(super) fn run(args: &BenchArgs) -> Result<(), BenchError> {
    if args.target.is_some() || args.remote_agents > 0 {
        return Err(BenchError::Usage(
            "--hooks starts its own server and backend on this machine: leave out --target and --remote-agents (to measure a running server, start it with --hook-url pointing at a backend and [[topics]] rules as BENCHMARKS.md's hooks section shows)".into(),
        ));
    }
    if !(1..=100).contains(&args.hook_rounds) {
        return Err(BenchError::Usage(format!(
            "--hook-rounds {}: 1 to 100 rounds",
            args.hook_rounds
        )));
    }
    let (_, hard) = sys::raise_fd_limit();
    let per_process = hard.saturating_sub(FD_MARGIN).max(1);
    let n = args.load.connections.unwrap_or(DEFAULT_SOCKETS);
    if n == 0 || n > per_process {
        return Err(BenchError::Usage(format!(
            "--connections {n}: the hooks scenario holds a phase's sockets in one process: 1 to {per_process} (the open-files limit {hard} less a margin)"
        )));
    }
    let started_unix = sys::realtime_ns() / 1_000_000_000;
    let responder = Responder::start()?;
    let dir = std::env::temp_dir().join(format!("throng-bench-hooks-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("throng.toml");
    std::fs::write(&file, config(&responder.url()))?;
    let drops0 = sys::softnet_dropped();
    let conntrack = |name: &str| {
        sys::sysctl_read(&format!("net.netfilter.{name}")).and_then(|v| v.trim().parse().ok())
    };
    let conntrack_at_start = conntrack("nf_conntrack_count");
    let result = measure(args, n, &file, &responder, started_unix);
    let _ = std::fs::remove_dir_all(&dir);
    let mut report = result?;
    report.kernel_backlog_drops = drops0
        .zip(sys::softnet_dropped())
        .map(|(a, b)| b.saturating_sub(a));
    report.conntrack = Conntrack {
        at_start: conntrack_at_start,
        at_end: conntrack("nf_conntrack_count"),
        max: conntrack("nf_conntrack_max"),
    };
    println!("{}", report.summary());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")?;
    }
    if report.errors > 0 {
        return Err(BenchError::Failed(format!(
            "{} joins failed{}",
            report.errors,
            report
                .first_error
                .as_deref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        )));
    }
    Ok(())
}

/// The server under test: the bench's embedded server with the hooks config.
fn server(file: &std::path::Path, extra: &[String]) -> Result<Server, BenchError> {
    let mut args = vec!["--config".to_string(), file.display().to_string()];
    args.extend(extra.iter().cloned());
    Server::spawn(Some(0), &args)
}

/// Phases so far: each gets its own source address, so no phase meets the
/// TIME_WAIT sockets of the one before.
struct Phases {
    next: u8,
    errors: u64,
    first_error: Option<String>,
}

impl Phases {
    /// `n` sockets join `topic` on `server`.
    fn join(&mut self, server: &Server, topic: &str, n: u64) -> Joined {
        self.join_window(server, topic, n, WINDOW)
    }

    /// `n` sockets join `topic`, `window` at a time.
    fn join_window(&mut self, server: &Server, topic: &str, n: u64, window: usize) -> Joined {
        let src = IpAddr::V4(Ipv4Addr::new(127, 0, 77, 2 + self.next % 250));
        self.next = self.next.wrapping_add(1);
        let j = join_all(
            server.addr,
            src,
            topic,
            n,
            window,
            CLIENT_THREADS.min(window),
            JOIN_TIMEOUT,
        );
        self.errors += j.failed;
        if j.failed > 0 {
            eprintln!(
                "{topic}: {} of {n} sockets failed (first: {})",
                j.failed,
                j.first_error.as_deref().unwrap_or("?")
            );
        }
        if self.first_error.is_none() {
            self.first_error = j.first_error.clone();
        }
        j
    }

    /// A phase of joins, closed again: the server's first connections to
    /// the backend, its topic and buffers exist before anything is measured.
    fn warm(&mut self, server: &Server, topic: &str) -> Result<(), BenchError> {
        let j = self.join(server, topic, (WINDOW * 4) as u64);
        drop(j.sockets);
        until_empty(server.addr)
    }
}

/// Waits until the server holds no connection (its `/metrics`).
fn until_empty(addr: SocketAddr) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = sys::http_get(addr, "/metrics", Duration::from_secs(1)).ok();
        if m.as_deref().and_then(server_conns) == Some(0.0) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Server(
                "the server still held connections 20 s after the clients closed them".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn rss(server: &Server) -> u64 {
    sys::proc_sample(&server.pid().to_string()).map_or(0, |s| s.rss)
}

fn cpu(server: &Server) -> f64 {
    sys::proc_sample(&server.pid().to_string()).map_or(0.0, |s| s.cpu_secs)
}

/// This process's CPU seconds: the clients, and the backend when hooked.
fn own_cpu() -> f64 {
    sys::proc_sample("self").map_or(0.0, |s| s.cpu_secs)
}

/// Server RSS per idle joined socket on `topic`, on a fresh server: the
/// slope between two plateaus (half the sockets joined, then all), so
/// one-time growth (the hook client's keep-alive pool to the backend, up
/// to 256 connections with their buffers; tables sized once) is left out
/// of it; that is reported apart, as `(all - none) / n`.
fn memory(
    phases: &mut Phases,
    file: &std::path::Path,
    extra: &[String],
    topic: &str,
    n: u64,
) -> Result<(f64, f64), BenchError> {
    let server = server(file, extra)?;
    phases.warm(&server, topic)?;
    let settle = Duration::from_millis(400);
    std::thread::sleep(settle);
    let none = rss(&server);
    let first = phases.join_window(&server, topic, n / 2, MEMORY_WINDOW);
    std::thread::sleep(settle);
    let half = rss(&server);
    let second = phases.join_window(&server, topic, n - n / 2, MEMORY_WINDOW);
    std::thread::sleep(settle);
    let all = rss(&server);
    let slope = all.saturating_sub(half) as f64 / second.ok.max(1) as f64;
    let overall = all.saturating_sub(none) as f64 / (first.ok + second.ok).max(1) as f64;
    Ok((slope, overall))
}

/// Join times of each topic's phases, µs.
struct JoinTimes {
    plain: Histogram<u64>,
    hooked: Histogram<u64>,
}

impl JoinTimes {
    fn new() -> JoinTimes {
        JoinTimes {
            plain: new_hist(),
            hooked: new_hist(),
        }
    }

    /// The histogram of `topic`'s joins.
    fn of(&mut self, topic: &str) -> &mut Histogram<u64> {
        if topic == HOOKED {
            &mut self.hooked
        } else {
            &mut self.plain
        }
    }

    /// The latency the hook adds to a join.
    fn latency(&self) -> Latency {
        Latency::of(&self.plain, &self.hooked)
    }
}

/// Round `r`'s phases in order: without hooks first in even rounds,
/// through the join hook first in odd ones.
fn order(r: u32) -> [&'static str; 2] {
    if r % 2 == 1 {
        [HOOKED, PLAIN]
    } else {
        [PLAIN, HOOKED]
    }
}

/// Round `r` of `rounds`: `n` sockets join without hooks and `n` through
/// the join hook on `server`, in `order(r)`; joins per second and CPU per
/// join each way.
fn rate_round(
    phases: &mut Phases,
    server: &Server,
    n: u64,
    (r, rounds): (u32, u32),
    times: &mut JoinTimes,
) -> Result<Round, BenchError> {
    let (mut plain, mut hooked) = ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0));
    for topic in order(r) {
        let (cpu0, own0) = (cpu(server), own_cpu());
        let j = phases.join(server, topic, n);
        let per = |secs: f64| secs * 1e6 / j.ok.max(1) as f64;
        let figures = (j.rate(), per(cpu(server) - cpu0), per(own_cpu() - own0));
        if topic == HOOKED {
            hooked = figures;
        } else {
            plain = figures;
        }
        let _ = times.of(topic).add(&j.join_us);
        drop(j.sockets);
        until_empty(server.addr)?;
    }
    eprintln!(
        "round {}/{}: {:.0} joins/s without hooks, {:.0} through the join hook",
        r + 1,
        rounds,
        plain.0,
        hooked.0
    );
    Ok(Round {
        plain_joins_per_sec: plain.0,
        hooked_joins_per_sec: hooked.0,
        ratio: hooked.0 / plain.0.max(1e-9),
        plain_server_cpu_us: plain.1,
        hooked_server_cpu_us: hooked.1,
        plain_bench_cpu_us: plain.2,
        hooked_bench_cpu_us: hooked.2,
        hooked_first: r % 2 == 1,
    })
}

/// The hook's own latency: `rounds` rounds of joins one at a time on
/// `server`, each way, no queue anywhere.
fn one_at_a_time(
    phases: &mut Phases,
    server: &Server,
    n: u64,
    rounds: u32,
) -> Result<JoinTimes, BenchError> {
    let mut times = JoinTimes::new();
    for r in 0..rounds {
        for topic in order(r) {
            let j = phases.join_window(server, topic, ONE_AT_A_TIME.min(n), 1);
            let _ = times.of(topic).add(&j.join_us);
            drop(j.sockets);
            until_empty(server.addr)?;
        }
    }
    Ok(times)
}

/// The median over `rounds` of one figure.
fn median_of(rounds: &[Round], figure: impl Fn(&Round) -> f64) -> f64 {
    median(&rounds.iter().map(figure).collect::<Vec<_>>())
}

/// The hooks scenario: memory per idle joined socket each way (a fresh
/// server each), then on one server the rounds of joins per second and
/// the joins one at a time.
fn measure(
    args: &BenchArgs,
    n: u64,
    file: &std::path::Path,
    responder: &Responder,
    started_unix: u64,
) -> Result<HooksReport, BenchError> {
    let extra = &args.server_arg;
    let mut phases = Phases {
        next: 0,
        errors: 0,
        first_error: None,
    };
    eprintln!("throng bench --hooks: backend on {}; memory per idle joined socket ({n} sockets, a fresh server each)", responder.url());
    let plain_mem = memory(&mut phases, file, extra, PLAIN, n)?;
    let hooked_mem = memory(&mut phases, file, extra, HOOKED, n)?;
    let server = server(file, extra)?;
    phases.warm(&server, PLAIN)?;
    phases.warm(&server, HOOKED)?;
    let mut times = JoinTimes::new();
    let mut rounds = Vec::new();
    for r in 0..args.hook_rounds {
        let round = rate_round(&mut phases, &server, n, (r, args.hook_rounds), &mut times)?;
        rounds.push(round);
    }
    let one_at_a_time = one_at_a_time(&mut phases, &server, n, args.hook_rounds)?;
    drop(server);
    let ratios: Vec<f64> = rounds.iter().map(|r| r.ratio).collect();
    let ratio = median(&ratios);
    Ok(HooksReport {
        scenario: "hooks",
        started_unix,
        sockets_per_phase: n,
        window: WINDOW,
        plain_joins_per_sec: median_of(&rounds, |r| r.plain_joins_per_sec),
        hooked_joins_per_sec: median_of(&rounds, |r| r.hooked_joins_per_sec),
        ratio,
        plain_server_cpu_us: median_of(&rounds, |r| r.plain_server_cpu_us),
        hooked_server_cpu_us: median_of(&rounds, |r| r.hooked_server_cpu_us),
        ratio_min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
        ratio_max: ratios.iter().copied().fold(0.0, f64::max),
        rounds,
        join_latency: times.latency(),
        join_latency_one_at_a_time: one_at_a_time.latency(),
        memory: Memory {
            sockets: n,
            plain_bytes_per_socket: plain_mem.0,
            hooked_bytes_per_socket: hooked_mem.0,
            plain_bytes_per_socket_with_fixed: plain_mem.1,
            hooked_bytes_per_socket_with_fixed: hooked_mem.1,
            assigns_bytes: ASSIGNS.len(),
        },
        errors: phases.errors,
        kernel_backlog_drops: None,
        conntrack: Conntrack::default(),
        first_error: phases.first_error,
        backend_requests: Backend {
            connect: responder.served.connect.load(Relaxed),
            join: responder.served.join.load(Relaxed),
            connections: responder.served.connections.load(Relaxed),
        },
        goals: Goals {
            ratio_at_least: GOAL_RATIO,
            ratio_met: ratio >= GOAL_RATIO,
            bytes_per_socket_at_most: GOAL_BYTES,
            memory_met: hooked_mem.0 <= GOAL_BYTES,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_hooks_only_the_hooked_pattern() {
        let c = config("http://127.0.0.1:9/throng");
        let v: toml::Value = toml::from_str(&c).unwrap();
        let topics = v["topics"].as_array().unwrap();
        assert_eq!(topics[0]["pattern"].as_str(), Some("hooked:*"));
        assert_eq!(topics[0]["hooks"].as_array().unwrap().len(), 1);
        assert!(topics[1].get("hooks").is_none());
        assert_eq!(
            v["hooks"]["url"].as_str(),
            Some("http://127.0.0.1:9/throng")
        );
    }
}
