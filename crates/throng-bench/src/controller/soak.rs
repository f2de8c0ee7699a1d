//! `throng bench --soak DURATION`: the soak's run (see [`crate::soak`]).
//!
//! The server side: one `throng serve` (or `--workers N` joined through a
//! redis-server the bench starts; with `--redis`, Redis for one process
//! too) with a config of the soak's topics (rooms; hooked topics whose
//! joins and pushes go to the built-in app backend, which also takes the
//! connect hook and lifecycle events; history topics) and presence on
//! `soak:pres:*` keyed by the user the connect hook names. The client side:
//! one client process per ~19,000 sessions, and the server API calls.
//!
//! Phases: five samples before the clients start (what every count must
//! come back to); the soak itself, sampled once a second; the clients told
//! to stop (each session ends the way its life would have); then samples
//! until every count is back where it started or [`SETTLE_LIMIT`]
//! passed. Each sample reads, per worker, `/proc` (RSS, threads, open
//! files; PSS every [`PSS_EVERY`] samples, a page-table walk) and the
//! worker's own `/metrics` through its server API; Redis's memory, keys,
//! pub/sub channels and clients (`INFO`, `DBSIZE`); the clients' open
//! sessions.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::children;
use super::launch::{Redis, Server};
use super::probe::open_fds_of;
use crate::agent::FD_MARGIN;
use crate::error::BenchError;
use crate::hooks::Responder;
use crate::soak::api::Caller;
use crate::soak::fit::{self, Windows};
use crate::soak::report::{self, SoakReport};
use crate::soak::series::{self, Samples, SESSIONS};
use crate::soak::{self, Orders, Status, Topics};
use crate::tune::{server_workers, worker_capacity};
use crate::{netns, sys, BenchArgs};

/// Sessions unless `--connections` says otherwise.
const DEFAULT_POPULATION: u64 = 5000;
/// Samples before the clients start.
const BASELINE_SECS: u32 = 5;
/// The PSS is read every this many samples.
const PSS_EVERY: u64 = 10;
/// The longest wait, after the clients were told to stop, for every count
/// to come back (long-poll sessions expire 15 s after their last poll, idle
/// connections to the backend after 30 s, history after its ttl).
const SETTLE_LIMIT: f64 = 120.0;
/// The shortest wait after the stop before the settle may end.
const SETTLE_MIN: f64 = 5.0;
/// The share of sessions that are long-poll sessions.
const LONGPOLL_SHARE: f64 = 0.05;
/// A session's mean time between two actions, seconds.
const ACTION_SECS: f64 = 20.0;
/// History kept per topic, and for how long after its last message.
const HISTORY_SIZE: u32 = 20;
const HISTORY_TTL: u32 = 30;

/// The config file of the soak's server.
fn config(backend: &str) -> String {
    format!(
        "[hooks]\nurl = \"{backend}\"\nconnect = true\nevents = true\n\n\
         [[topics]]\npattern = \"soak:hook:*\"\njoin = \"anyone\"\nhooks = [\"join\", \"push\"]\n\n\
         [[topics]]\npattern = \"soak:hist:*\"\njoin = \"anyone\"\nhistory_size = {HISTORY_SIZE}\nhistory_ttl = {HISTORY_TTL}\n\n\
         [[topics]]\npattern = \"soak:*\"\njoin = \"anyone\"\n"
    )
}

/// The soak's size and pace, from the flags.
struct Plan {
    secs: f64,
    population: u64,
    churn: f64,
    workers: u64,
    redis: bool,
    ramp_secs: f64,
    per_process: u64,
}

impl Plan {
    fn of(args: &BenchArgs, secs: f64) -> Result<Plan, BenchError> {
        if args.target.is_some() || args.remote_agents > 0 {
            return Err(BenchError::Usage(
                "--soak starts its own server and clients on this machine: leave out --target and --remote-agents".into(),
            ));
        }
        let population = args.load.connections.unwrap_or(DEFAULT_POPULATION);
        let churn = args
            .soak_churn
            .unwrap_or_else(|| default_churn(population, secs));
        if !(churn.is_finite() && churn > 0.0 && churn <= population as f64) {
            return Err(BenchError::Usage(format!(
                "--soak-churn {churn}: more than 0 and at most --connections ({population}) new sessions a second"
            )));
        }
        let (_, hard) = sys::raise_fd_limit();
        let needed = server_workers(population, hard).max(1);
        let workers = args.workers.map_or(needed, u64::from);
        if workers < needed {
            return Err(BenchError::Usage(format!(
                "--workers {workers}: {population} sessions need {needed} server workers here (each holds about {} connections under the open-files limit of {hard}); use --workers {needed}, or fewer --connections",
                worker_capacity(hard)
            )));
        }
        let ramp_secs = (population as f64 / (4.0 * churn).max(500.0)).clamp(1.0, 120.0);
        if secs < (2.0 * ramp_secs + 10.0).max(20.0) {
            return Err(BenchError::Usage(format!(
                "--soak {secs} s: at least {:.0} s, so that its second half comes after the {ramp_secs:.0} s the sessions take to start",
                (2.0 * ramp_secs + 10.0).max(20.0)
            )));
        }
        Ok(Plan {
            secs,
            population,
            churn,
            workers,
            redis: args.redis || workers > 1,
            ramp_secs,
            per_process: hard.saturating_sub(FD_MARGIN).max(1),
        })
    }
}

/// New sessions a second unless `--soak-churn` says: 1% of the
/// population, or more for a short soak, so that the population turns over
/// three times in its first half (the server's allocator has reached its
/// steady state before the second half is judged).
fn default_churn(population: u64, secs: f64) -> f64 {
    let p = population as f64;
    (p / 100.0).max(6.0 * p / secs).max(1.0)
}

pub(super) fn run(args: &BenchArgs, secs: f64) -> Result<(), BenchError> {
    let plan = Plan::of(args, secs)?;
    // Each session's socket, and the closed ones in TIME_WAIT.
    netns::for_run(args.netns, true, plan.population * 2)?;
    let backend = Responder::start()?;
    let dir = std::env::temp_dir().join(format!("throng-bench-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("soak.toml");
    let server_config = config(&backend.url());
    std::fs::write(&file, &server_config)?;
    let result = soak(args, &plan, &file, &backend);
    let _ = std::fs::remove_dir_all(&dir);
    let mut report = result?;
    report.server_config = server_config;
    print!("{}", report.summary());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")?;
        eprintln!("json: {}", path.display());
    }
    let html = args.report.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("throng-bench-soak-{}.html", std::process::id()))
    });
    std::fs::write(
        &html,
        crate::report::html::page(&serde_json::to_string(&report)?, false),
    )?;
    eprintln!("report: {} (open it in a browser)", html.display());
    if report.passed {
        Ok(())
    } else {
        let mut why = report.grew.clone();
        why.extend(report.load_missed.iter().cloned());
        Err(BenchError::Failed(why.join("; ")))
    }
}

/// The server under soak, and what samples it.
struct Target {
    /// Declared before `_redis`, so it is dropped (killed) first.
    server: Server,
    /// Kept for the server's life (killed when dropped).
    _redis: Option<Redis>,
    /// Each worker's pid and server API (its `/metrics`).
    pids: Vec<u32>,
    apis: Vec<SocketAddr>,
    redis_conn: Option<redis::Connection>,
    server_args: Vec<String>,
}

impl Target {
    fn start(args: &BenchArgs, plan: &Plan, file: &std::path::Path) -> Result<Target, BenchError> {
        let mut server_args = vec![
            "--config".to_string(),
            file.display().to_string(),
            "--presence".into(),
            "soak:pres:*=user_id".into(),
        ];
        let redis = if plan.redis {
            let r = Redis::spawn()?;
            server_args.extend(["--redis".into(), format!("redis://127.0.0.1:{}", r.port)]);
            Some(r)
        } else {
            None
        };
        if plan.workers > 1 {
            server_args.extend(["--workers".into(), plan.workers.to_string()]);
        }
        server_args.extend(args.server_arg.iter().cloned());
        let server = Server::spawn_with_api(None, &server_args, "127.0.0.1:0")?;
        let n = plan.workers as usize;
        let (pids, apis) = (server.holders(n), server.worker_apis(n));
        if pids.len() != n || apis.len() != n {
            return Err(BenchError::Server(format!(
                "the server printed {} worker pid(s) and {} API address(es) for {n} worker(s)",
                pids.len(),
                apis.len()
            )));
        }
        let redis_conn = redis.as_ref().and_then(|r| {
            redis::Client::open(format!("redis://127.0.0.1:{}/", r.port))
                .ok()?
                .get_connection()
                .ok()
        });
        Ok(Target {
            server,
            _redis: redis,
            pids,
            apis,
            redis_conn,
            server_args,
        })
    }

    /// One sample of every series, each worker's (`@wI`) and their sums.
    fn sample(&mut self, pss: bool) -> BTreeMap<String, f64> {
        let mut row = BTreeMap::new();
        for (i, (pid, api)) in self.pids.iter().zip(&self.apis).enumerate() {
            let w = format!("@w{i}");
            if let Some((rss, threads)) = rss_and_threads(*pid) {
                row.insert(format!("process:rss_bytes{w}"), rss);
                row.insert(format!("process:threads{w}"), threads);
            }
            row.insert(format!("process:open_files{w}"), open_fds_of(*pid) as f64);
            if pss {
                if let Some(p) = sys::proc_pss(&pid.to_string()) {
                    row.insert(format!("process:pss_bytes{w}"), p as f64);
                }
            }
            if let Ok(text) = sys::http_get(*api, "/metrics", Duration::from_secs(2)) {
                for (name, v) in series::gauges(&text) {
                    row.insert(format!("{name}{w}"), v);
                }
            }
        }
        Samples::add_sums(&mut row);
        if let Some(c) = self.redis_conn.as_mut() {
            let info: String = redis::cmd("INFO").query(c).unwrap_or_default();
            for (field, name) in [
                ("used_memory", "redis:used_memory_bytes"),
                ("pubsub_channels", "redis:pubsub_channels"),
                ("connected_clients", "redis:clients"),
            ] {
                if let Some(v) = info_field(&info, field) {
                    row.insert(name.into(), v);
                }
            }
            if let Ok(k) = redis::cmd("DBSIZE").query::<u64>(c) {
                row.insert("redis:keys".into(), k as f64);
            }
        }
        row
    }
}

impl Target {
    /// When some count did not come back, the topics the server still
    /// holds (`GET /api/topics` of each worker), so that a report of growth
    /// names what stayed.
    fn show_what_is_left(&self, samples: &Samples, stopped: f64, last: f64) {
        let w = Windows {
            from: 0.0,
            to: stopped,
            stopped,
            last,
        };
        if fit::all_back(samples, &w) {
            return;
        }
        for (i, api) in self.apis.iter().enumerate() {
            let text = sys::http_get(*api, "/api/topics", Duration::from_secs(2))
                .unwrap_or_else(|e| format!("(no answer: {e})"));
            let mut body = text.trim().to_string();
            if body.len() > 2000 {
                body.truncate(2000);
                body.push_str("...");
            }
            eprintln!("  worker {i} still has these topics (GET /api/topics): {body}");
        }
    }
}

/// VmRSS (bytes) and Threads of `/proc/PID/status`.
fn rss_and_threads(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
    };
    Some((field("VmRSS")? * 1024.0, field("Threads")?))
}

/// `NAME:VALUE` of Redis's `INFO`.
fn info_field(info: &str, name: &str) -> Option<f64> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// The client processes, their stdins and the latest status of each.
struct Clients {
    children: Vec<Child>,
    stdins: Vec<ChildStdin>,
    rx: mpsc::Receiver<(usize, Status)>,
    latest: Vec<Status>,
}

impl Clients {
    fn spawn(plan: &Plan, target: SocketAddr, topics: Topics) -> Result<Clients, BenchError> {
        let procs = plan.population.div_ceil(plan.per_process).max(1);
        let (tx, rx) = mpsc::channel();
        let mut c = Clients {
            children: Vec::new(),
            stdins: Vec::new(),
            rx,
            latest: vec![Status::default(); procs as usize],
        };
        for p in 0..procs {
            let first = plan.population * p / procs;
            let orders = Orders {
                target,
                first,
                count: plan.population * (p + 1) / procs - first,
                topics,
                mean_life_secs: plan.population as f64 / plan.churn,
                ramp_secs: plan.ramp_secs,
                longpoll_share: LONGPOLL_SHARE,
                action_secs: ACTION_SECS,
                seed: 0x5eed_0000 + p,
            };
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.args(["agent", "--soak-client", &serde_json::to_string(&orders)?])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            let mut child = cmd.spawn()?;
            children::started(child.id());
            let stdout = child.stdout.take().expect("piped stdout");
            c.stdins.push(child.stdin.take().expect("piped stdin"));
            c.children.push(child);
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Ok(s) = serde_json::from_str::<Status>(&line) {
                        if tx.send((p as usize, s)).is_err() {
                            break;
                        }
                    }
                }
            });
        }
        Ok(c)
    }

    /// The sum of the latest statuses (what arrived so far).
    fn sum(&mut self) -> Status {
        while let Ok((p, s)) = self.rx.try_recv() {
            self.latest[p] = s;
        }
        let mut all = Status::default();
        for s in &self.latest {
            all.add(s);
        }
        all
    }

    /// Tells every process to stop.
    fn stop(&mut self) {
        let line = serde_json::to_string(&soak::Command::Stop).unwrap_or_default() + "\n";
        for s in &mut self.stdins {
            let _ = s.write_all(line.as_bytes()).and_then(|()| s.flush());
        }
    }

    /// Whether every process has printed its last status.
    fn done(&mut self) -> bool {
        self.sum();
        self.latest.iter().all(|s| s.done)
    }

    /// Whether a process exited before it was told to stop.
    fn exited(&mut self) -> Option<usize> {
        self.children
            .iter_mut()
            .position(|c| matches!(c.try_wait(), Ok(Some(_))))
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        self.stdins.clear();
        for c in &mut self.children {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !matches!(c.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
            children::ended(c.id());
        }
    }
}

/// The sampling clock: one sample a second, at whole seconds from its
/// origin; a sample's time counts from when the clients started,
/// [`BASELINE_SECS`] after the origin (negative before).
struct Clock {
    origin: Instant,
    samples: Samples,
    taken: u64,
}

impl Clock {
    /// Seconds since the clients started (or until they start).
    fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64() - f64::from(BASELINE_SECS)
    }

    /// Sleeps until the next whole second, then samples; the sample's
    /// time is when it started (to 0.1 s: a loaded machine may start it
    /// late).
    fn tick(&mut self, target: &mut Target, sessions: u64) -> f64 {
        let now = self.now();
        let next = now.floor() + 1.0;
        std::thread::sleep(Duration::from_secs_f64((next - now).max(0.0)));
        let t = (self.now() * 10.0).round() / 10.0;
        let mut row = target.sample(self.taken.is_multiple_of(PSS_EVERY));
        row.insert(SESSIONS.into(), sessions as f64);
        self.taken += 1;
        self.samples.push(t, row);
        t
    }

    fn last(&self, name: &str) -> f64 {
        self.samples
            .series
            .get(name)
            .and_then(|c| c.iter().rev().find(|v| v.is_finite()).copied())
            .unwrap_or(f64::NAN)
    }
}

/// The soak: the server and its baseline, the clients and the API calls
/// for `plan.secs`, the stop and the settle; the report.
fn soak(
    args: &BenchArgs,
    plan: &Plan,
    file: &std::path::Path,
    backend: &Responder,
) -> Result<SoakReport, BenchError> {
    let started_unix = sys::realtime_ns() / 1_000_000_000;
    let topics = Topics::for_population(plan.population);
    let mut target = Target::start(args, plan, file)?;
    eprintln!(
        "throng bench --soak: {:.0} s, {} sessions churned at {} a second (mean life {:.0} s), {} worker(s){}; server {}",
        plan.secs,
        plan.population,
        plan.churn,
        plan.population as f64 / plan.churn,
        plan.workers,
        if plan.redis { " on Redis" } else { "" },
        target.server.addr
    );
    // The baseline: samples until the clients start, at t = 0.
    let mut clock = Clock {
        origin: Instant::now(),
        samples: Samples::default(),
        taken: 0,
    };
    while clock.tick(&mut target, 0) < 0.0 {}
    let mut clients = Clients::spawn(plan, target.server.addr, topics)?;
    let api = Caller::start(target.apis.clone(), topics, plan.population, 0x5eed)?;
    let stopped = hold(&mut clock, &mut target, &mut clients, plan)?;
    clients.stop();
    let api_counts = api.stop();
    let last = settle(&mut clock, &mut target, &mut clients, stopped);
    target.show_what_is_left(&clock.samples, stopped, last);
    let status = clients.sum();
    drop(clients);
    let windows = Windows {
        from: plan.secs / 2.0,
        to: stopped,
        stopped,
        last,
    };
    let (series, noise) = report::series(&clock.samples, &windows);
    let grew = SoakReport::grown(&series);
    let load_missed = report::load_missed(&clock.samples, &windows, plan.population, &status);
    let served = &backend.served;
    let backend_counts = [
        ("connections", served.connections.load(Relaxed)),
        ("connect", served.connect.load(Relaxed)),
        ("join", served.join.load(Relaxed)),
        ("push", served.push.load(Relaxed)),
        ("event batches", served.events.load(Relaxed)),
        ("other", served.other.load(Relaxed)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Ok(SoakReport {
        scenario: "soak",
        started_unix,
        passed: grew.is_empty() && load_missed.is_empty(),
        grew,
        load_missed,
        duration_secs: plan.secs,
        population: plan.population,
        churn_per_sec: plan.churn,
        mean_life_secs: plan.population as f64 / plan.churn,
        workers: plan.workers as usize,
        redis: plan.redis,
        server_args: target.server_args.clone(),
        server_config: String::new(),
        topics,
        client_processes: status.slots.div_ceil(plan.per_process.max(1)) as usize,
        windows,
        population_noise: noise,
        clients: status,
        api: api_counts,
        backend: backend_counts,
        series,
    })
}

/// The soak itself: a sample a second until `plan.secs`, a progress line
/// every 10 s; returns when it ended (seconds since the clients started).
fn hold(
    clock: &mut Clock,
    target: &mut Target,
    clients: &mut Clients,
    plan: &Plan,
) -> Result<f64, BenchError> {
    let mut printed = 0.0;
    loop {
        let open = clients.sum().open();
        let t = clock.tick(target, open);
        if let Some(p) = clients.exited() {
            return Err(BenchError::Failed(format!(
                "soak client process {p} exited at {t:.0} s"
            )));
        }
        if t >= printed + 10.0 {
            printed = t;
            let s = clients.sum();
            eprintln!(
                "  {t:>5.0} s: {} sessions open ({} long-poll); server {} connections, {} channels, {:.0} MiB RSS; clients: {} sessions, {} errors{}",
                s.open(),
                s.longpoll_open,
                clock.last("throng_connections"),
                clock.last("throng_channels_joined"),
                clock.last("process:rss_bytes") / 1048576.0,
                s.connects,
                s.errors,
                s.first_error.as_ref().map_or(String::new(), |e| format!(" (first: {e})"))
            );
        }
        if t >= plan.secs {
            return Ok(t);
        }
    }
}

/// After the stop: samples until the clients are gone and every count is
/// back where it started (or [`SETTLE_LIMIT`]); returns the last sample's
/// time.
fn settle(clock: &mut Clock, target: &mut Target, clients: &mut Clients, stopped: f64) -> f64 {
    eprintln!("  the clients are told to stop; waiting for every count to come back");
    let mut gone = false;
    loop {
        gone = gone || clients.done();
        let open = if gone { 0 } else { clients.sum().open() };
        let t = clock.tick(target, open);
        let w = Windows {
            from: 0.0,
            to: stopped,
            stopped,
            last: t,
        };
        if (gone && t - stopped >= SETTLE_MIN && fit::all_back(&clock.samples, &w))
            || t - stopped >= SETTLE_LIMIT
        {
            eprintln!("  settled {:.0} s after the stop", t - stopped);
            return t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_every_kind_of_topic() {
        let c: toml::Value = toml::from_str(&config("http://127.0.0.1:9/throng")).unwrap();
        assert_eq!(c["hooks"]["connect"].as_bool(), Some(true));
        assert_eq!(c["hooks"]["events"].as_bool(), Some(true));
        let topics = c["topics"].as_array().unwrap();
        assert_eq!(topics[0]["hooks"].as_array().unwrap().len(), 2);
        assert_eq!(
            topics[1]["history_size"].as_integer(),
            Some(i64::from(HISTORY_SIZE))
        );
        assert_eq!(topics[2]["pattern"].as_str(), Some("soak:*"));
    }

    #[test]
    fn a_short_soak_turns_its_population_over_faster() {
        assert_eq!(default_churn(50_000, 1800.0), 500.0);
        assert_eq!(default_churn(5000, 180.0), 5000.0 / 30.0);
        assert_eq!(default_churn(10, 1800.0), 1.0);
    }

    #[test]
    fn reads_redis_info() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n";
        assert_eq!(info_field(info, "used_memory"), Some(1048576.0));
        assert_eq!(info_field(info, "nothing"), None);
    }
}
