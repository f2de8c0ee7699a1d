//! `throng bench --storm`: the reconnect storm's run (see [`crate::storm`]).
//!
//! The server side: one `throng serve` per ~19,000 clients (a process's
//! open files), each with the storm's `[[topics]]` rule and its own
//! history in memory, every message published to each of them; or, with
//! `--storm-redis`, one `throng serve --workers N --redis` on a
//! redis-server the bench starts, history in Redis and one API for the
//! cluster. The client side: one client process per ~19,000 clients.
//!
//! Phases: everyone joins (no message yet) and server memory per idle
//! joined socket is read; the burst (`--storm-burst` numbers per topic as
//! fast as the API takes them: the throughput); then, with history,
//! publishing at `--storm-rate` for `--storm-hold` s, every client caught
//! up, every socket cut at once and every client rejoining with `since`
//! while the publishing goes on, until all have recovered; `--storm-hold`
//! s more, the publishing stops, and each client must have its topic's
//! last number, having counted every number once, in order.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::children;
use super::launch::{Redis, Server};
use crate::agent::FD_MARGIN;
use crate::error::BenchError;
use crate::storm::publisher::{self, Published, Steady};
use crate::storm::report::{Burst, Loss, PublishCounts, Storm, StormReport};
use crate::storm::{self, Orders, Status};
use crate::tune::server_workers;
use crate::{netns, sys, BenchArgs, StormHistory};

/// Clients unless `--connections` says otherwise.
const DEFAULT_CLIENTS: u64 = 100_000;
/// Connects and joins in flight at once, per client process.
const WINDOW: usize = 64;
/// Messages each topic keeps: far more than a storm's outage misses.
const HISTORY_SIZE: u32 = 1000;
/// The longest each wait may take before the run gives up on it.
const JOIN_LIMIT: Duration = Duration::from_secs(400);
const DELIVERY_LIMIT: Duration = Duration::from_secs(120);

/// The config file of the storm's servers.
fn config(history: bool) -> String {
    let size = if history {
        format!("history_size = {HISTORY_SIZE}\nhistory_ttl = 600\n")
    } else {
        String::new()
    };
    format!("[[topics]]\npattern = \"storm:*\"\njoin = \"anyone\"\n{size}")
}

pub(super) fn run(args: &BenchArgs) -> Result<(), BenchError> {
    if args.target.is_some() || args.remote_agents > 0 {
        return Err(BenchError::Usage(
            "--storm starts its own servers and clients on this machine: leave out --target and --remote-agents".into(),
        ));
    }
    if !(1..=1000).contains(&args.storm_topics) {
        return Err(BenchError::Usage(format!(
            "--storm-topics {}: 1 to 1000 topics",
            args.storm_topics
        )));
    }
    let rate = args.storm_rate;
    if !(rate.is_finite() && rate > 0.0 && rate <= 10_000.0) {
        return Err(BenchError::Usage(format!(
            "--storm-rate {rate}: more than 0, at most 10000 messages a second"
        )));
    }
    let hold = args.storm_hold;
    if !(hold.is_finite() && (0.0..=600.0).contains(&hold)) {
        return Err(BenchError::Usage(format!(
            "--storm-hold {hold}: 0 to 600 seconds"
        )));
    }
    if u64::from(args.storm_burst) > u64::from(HISTORY_SIZE) / 2 {
        return Err(BenchError::Usage(format!(
            "--storm-burst {}: at most {} (half of what each topic keeps)",
            args.storm_burst,
            HISTORY_SIZE / 2
        )));
    }
    let n = args.load.connections.unwrap_or(DEFAULT_CLIENTS);
    if n < u64::from(args.storm_topics) {
        return Err(BenchError::Usage(format!(
            "--connections {n}: at least one client per topic ({})",
            args.storm_topics
        )));
    }
    let history = args.storm_history == StormHistory::On;
    let (_, hard) = sys::raise_fd_limit();
    let per_process = hard.saturating_sub(FD_MARGIN).max(1);
    // Two rounds of sockets live at once (the cut ones in TIME_WAIT).
    netns::for_run(args.netns, true, n * 2)?;
    let dir = std::env::temp_dir().join(format!("throng-bench-storm-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("storm.toml");
    std::fs::write(&file, config(history))?;
    let result = measure(args, n, per_process, hard, &file, history);
    let _ = std::fs::remove_dir_all(&dir);
    let report = result?;
    println!("{}", report.summary());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")?;
    }
    if report.loss.errors > 0 {
        return Err(BenchError::Failed(format!(
            "the clients counted {} loss error(s)",
            report.loss.errors
        )));
    }
    Ok(())
}

/// The servers under test.
struct Servers {
    /// Declared before `redis`, so they are dropped (killed) first.
    servers: Vec<Server>,
    redis: Option<Redis>,
    /// Where clients connect, and where messages are published.
    targets: Vec<SocketAddr>,
    apis: Vec<SocketAddr>,
    /// The processes holding sockets (memory), and Redis (CPU).
    holders: Vec<u32>,
}

impl Servers {
    fn start(
        count: u64,
        file: &std::path::Path,
        extra: &[String],
        redis: bool,
    ) -> Result<Servers, BenchError> {
        let mut args = vec!["--config".to_string(), file.display().to_string()];
        args.extend(extra.iter().cloned());
        let api = "127.0.0.1:0";
        let mut s = Servers {
            servers: Vec::new(),
            redis: None,
            targets: Vec::new(),
            apis: Vec::new(),
            holders: Vec::new(),
        };
        if redis {
            // Two nodes at least: a cluster of one shares nothing.
            let count = count.max(2);
            let r = Redis::spawn()?;
            args.extend([
                "--workers".to_string(),
                count.to_string(),
                "--redis".to_string(),
                format!("redis://127.0.0.1:{}", r.port),
            ]);
            s.redis = Some(r);
            let server = Server::spawn_with_api(Some(0), &args, api)?;
            s.targets.push(server.addr);
            s.apis.extend(server.api);
            s.holders = server.holders(count as usize);
            s.servers.push(server);
        } else {
            for _ in 0..count {
                let server = Server::spawn_with_api(Some(0), &args, api)?;
                s.targets.push(server.addr);
                s.apis.extend(server.api);
                s.holders.push(server.pid());
                s.servers.push(server);
            }
        }
        if s.apis.is_empty() {
            return Err(BenchError::Server(
                "the server printed no `api at ADDR`: the storm publishes through the server API"
                    .into(),
            ));
        }
        Ok(s)
    }

    fn rss(&self) -> u64 {
        self.holders
            .iter()
            .filter_map(|p| sys::proc_sample(&p.to_string()))
            .map(|s| s.rss)
            .sum()
    }

    /// CPU seconds of the servers and Redis.
    fn cpu(&self) -> f64 {
        self.holders
            .iter()
            .copied()
            .chain(self.redis.as_ref().map(Redis::pid))
            .filter_map(|p| sys::proc_sample(&p.to_string()))
            .map(|s| s.cpu_secs)
            .sum()
    }

    /// `INFO commandstats`: calls by command (none without Redis).
    fn redis_calls(&self) -> Option<std::collections::BTreeMap<String, u64>> {
        let r = self.redis.as_ref()?;
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", r.port)).ok()?;
        let mut con = client.get_connection().ok()?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut con)
            .ok()?;
        Some(commandstats(&info))
    }

    /// Redis's calls by command now, and when.
    fn redis_mark(&self) -> RedisMark {
        let calls = self.redis_calls();
        RedisMark {
            calls,
            at: Instant::now(),
        }
    }
}

/// Redis's calls by command at a moment (`None` without Redis).
struct RedisMark {
    calls: Option<std::collections::BTreeMap<String, u64>>,
    at: Instant,
}

/// `cmdstat_NAME:calls=N,...` lines as calls by command.
fn commandstats(info: &str) -> std::collections::BTreeMap<String, u64> {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// Calls by command from `a` to `b`, and their total.
fn calls_between(
    a: &std::collections::BTreeMap<String, u64>,
    b: &std::collections::BTreeMap<String, u64>,
) -> (std::collections::BTreeMap<String, u64>, u64) {
    let d: std::collections::BTreeMap<String, u64> = b
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(0))))
        // The bench's own INFO.
        .filter(|(k, v)| *v > 0 && k != "info")
        .collect();
    let total = d.values().sum();
    (d, total)
}

/// The client processes, their stdins and the latest status of each.
struct Clients {
    children: Vec<Child>,
    stdins: Vec<ChildStdin>,
    rx: mpsc::Receiver<(usize, Status)>,
    latest: Vec<Status>,
}

impl Clients {
    fn spawn(
        n: u64,
        per_process: u64,
        targets: &[SocketAddr],
        topics: u32,
    ) -> Result<Clients, BenchError> {
        let procs = n.div_ceil(per_process);
        let (tx, rx) = mpsc::channel();
        let mut c = Clients {
            children: Vec::new(),
            stdins: Vec::new(),
            rx,
            latest: vec![Status::default(); procs as usize],
        };
        for p in 0..procs {
            let first = n * p / procs;
            let orders = Orders {
                targets: targets.to_vec(),
                topics,
                first,
                count: n * (p + 1) / procs - first,
                process: p as u32,
                window: WINDOW,
            };
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.args(["agent", "--storm-client", &serde_json::to_string(&orders)?])
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

    fn send(&mut self, cmd: &storm::Command) -> Result<(), BenchError> {
        let line = serde_json::to_string(cmd)? + "\n";
        for s in &mut self.stdins {
            s.write_all(line.as_bytes())?;
            s.flush()?;
        }
        Ok(())
    }

    /// The sum of the latest statuses (reading what arrived, waiting up
    /// to `wait` for the first).
    fn sum(&mut self, wait: Duration) -> Status {
        if let Ok((p, s)) = self.rx.recv_timeout(wait) {
            self.latest[p] = s;
        }
        while let Ok((p, s)) = self.rx.try_recv() {
            self.latest[p] = s;
        }
        let mut all = Status::default();
        for s in &self.latest {
            all.add(s);
        }
        all
    }

    /// Waits until `done` holds for the summed status (fresh statuses only:
    /// each process's next line after now), printing `label` progress each
    /// second; `Err` after `limit` or when a client process has exited.
    fn until(
        &mut self,
        label: &str,
        limit: Duration,
        done: impl Fn(&Status) -> bool,
    ) -> Result<Status, BenchError> {
        let started = Instant::now();
        let mut printed = Instant::now();
        // Statuses sent before now may predate a command just sent.
        std::thread::sleep(storm::STATUS_EVERY * 2);
        loop {
            let s = self.sum(storm::STATUS_EVERY);
            if done(&s) {
                return Ok(s);
            }
            if let Some(p) = self
                .children
                .iter_mut()
                .position(|c| matches!(c.try_wait(), Ok(Some(_))))
            {
                return Err(BenchError::Failed(format!(
                    "client process {p} exited during {label}"
                )));
            }
            if started.elapsed() > limit {
                return Err(BenchError::Failed(format!(
                    "{label}: not done after {limit:?} ({})",
                    progress(&s)
                )));
            }
            if printed.elapsed() >= Duration::from_secs(1) {
                printed = Instant::now();
                eprintln!("  {label}: {}", progress(&s));
            }
        }
    }

    fn cpu(&self) -> f64 {
        self.children
            .iter()
            .filter_map(|c| sys::proc_sample(&c.id().to_string()))
            .map(|s| s.cpu_secs)
            .sum()
    }

    /// Stops every process and returns the sum of their last statuses.
    fn stop(mut self) -> Status {
        let _ = self.send(&storm::Command::Stop);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.latest.iter().all(|s| s.done) && Instant::now() < deadline {
            self.sum(storm::STATUS_EVERY);
        }
        let mut all = Status::default();
        for s in &self.latest {
            all.add(s);
        }
        all
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

fn progress(s: &Status) -> String {
    format!(
        "{} of {} joined, {} rejoined ({} recovered), {} at the target, {} received ({} replayed), {} gaps, {} duplicates, {} connect errors, {} errors",
        s.joined, s.clients, s.rejoins, s.recovered, s.at_target, s.received, s.replayed, s.gaps, s.duplicates, s.connect_errors, s.errors
    )
}

fn secs_since(t0_ns: u64, t_ns: u64) -> f64 {
    t_ns.saturating_sub(t0_ns) as f64 / 1e9
}

/// The storm's phases, on servers and clients of its own: everyone joins,
/// the burst, with history the cut and the rejoins, then the last numbers.
fn measure(
    args: &BenchArgs,
    n: u64,
    per_process: u64,
    hard: u64,
    file: &std::path::Path,
    history: bool,
) -> Result<StormReport, BenchError> {
    let topics = args.storm_topics;
    let started_unix = sys::realtime_ns() / 1_000_000_000;
    let count = server_workers(n, hard).max(1);
    let servers = Servers::start(count, file, &args.server_arg, args.storm_redis)?;
    eprintln!(
        "throng bench --storm: {n} clients, {topics} topics {}, {} server process(es){}",
        if history {
            "with history"
        } else {
            "without history"
        },
        servers.holders.len().max(1),
        if args.storm_redis {
            " joined through Redis"
        } else {
            ", each with its own history; every message published to each"
        }
    );
    let (mut clients, mut report) = join_everyone(args, n, per_process, &servers, history)?;
    report.started_unix = started_unix;
    let stats = Arc::new(Published::default());
    let mut last = vec![0u64; topics as usize];
    if args.storm_burst > 0 {
        report.burst = Some(burst(args, n, &servers, &mut clients, &stats)?);
        last = vec![u64::from(args.storm_burst); topics as usize];
    }
    if history {
        let steady = Steady::start(&servers.apis, topics, last.clone(), args.storm_rate, &stats);
        report.storm = Some(cut(args, n, &servers, &mut clients, &steady)?);
        std::thread::sleep(Duration::from_secs_f64(args.storm_hold));
        last = steady.stop();
    }
    let (at_end, status) = last_numbers(clients, n, &last)?;
    drop(servers);
    report.loss = loss(n, last, &at_end, &status);
    report.clients_status = status;
    report.publish = publish_counts(&stats);
    Ok(report)
}

/// Starts the clients and waits until every one has joined; the report so
/// far: the joins, and the server memory per idle joined socket.
fn join_everyone(
    args: &BenchArgs,
    n: u64,
    per_process: u64,
    servers: &Servers,
    history: bool,
) -> Result<(Clients, StormReport), BenchError> {
    let topics = args.storm_topics;
    std::thread::sleep(Duration::from_millis(500));
    let rss0 = servers.rss();
    let joins_started = Instant::now();
    let mut clients = Clients::spawn(n, per_process, &servers.targets, topics)?;
    let joined = clients.until("joining", JOIN_LIMIT, |s| s.joined >= n)?;
    let join_secs = joins_started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(1));
    let rss1 = servers.rss();
    let report = StormReport {
        scenario: "storm",
        clients: n,
        topics,
        history,
        store: if args.storm_redis { "redis" } else { "memory" },
        server_processes: servers.holders.len(),
        client_processes: clients.children.len(),
        join_secs,
        joins_per_sec: joined.joins as f64 / join_secs.max(1e-9),
        server_bytes_per_socket: rss1.saturating_sub(rss0) as f64 / n as f64,
        ..StormReport::default()
    };
    eprintln!(
        "  everyone joined in {join_secs:.1} s; server memory per idle joined socket {:.0} B",
        report.server_bytes_per_socket
    );
    Ok((clients, report))
}

/// The burst: `--storm-burst` numbers per topic through the API as fast
/// as it takes them, timed until every client has its topic's last.
fn burst(
    args: &BenchArgs,
    n: u64,
    servers: &Servers,
    clients: &mut Clients,
    stats: &Arc<Published>,
) -> Result<Burst, BenchError> {
    let topics = args.storm_topics;
    let b = u64::from(args.storm_burst);
    clients.send(&storm::Command::Target(vec![b; topics as usize]))?;
    std::thread::sleep(storm::STATUS_EVERY * 2);
    let (s0, c0) = (servers.cpu(), clients.cpu());
    let t0 = sys::realtime_ns();
    let api = publisher::burst(&servers.apis, topics, 0, b, stats);
    let s = clients.until("the burst", DELIVERY_LIMIT, |s| s.at_target >= n)?;
    let delivered = secs_since(t0, s.target_ns);
    let messages = b * u64::from(topics);
    Ok(Burst {
        messages,
        api_secs: api.as_secs_f64(),
        delivered_secs: delivered,
        api_messages_per_sec: messages as f64 / api.as_secs_f64().max(1e-9),
        messages_per_sec: messages as f64 / delivered.max(1e-9),
        deliveries_per_sec: (b * n) as f64 / delivered.max(1e-9),
        server_cpu_secs: servers.cpu() - s0,
        client_cpu_secs: clients.cpu() - c0,
    })
}

/// The cut, while `steady` publishes: `--storm-hold` s of publishing,
/// every client caught up, every socket cut at once, and every client
/// rejoining with `since` until all have recovered (or the limit).
fn cut(
    args: &BenchArgs,
    n: u64,
    servers: &Servers,
    clients: &mut Clients,
    steady: &Steady,
) -> Result<Storm, BenchError> {
    std::thread::sleep(Duration::from_millis(500));
    let a = servers.redis_mark();
    std::thread::sleep(Duration::from_secs_f64(args.storm_hold));
    // Every client current (and so holding a position) before the cut.
    clients.send(&storm::Command::Target(steady.due()))?;
    clients.until("catching up before the cut", DELIVERY_LIMIT, |s| {
        s.at_target >= n
    })?;
    let b = servers.redis_mark();
    let before = clients.sum(Duration::ZERO);
    let answered0 = before.recovered + before.not_recovered;
    let replayed0 = before.replayed;
    let (s0, c0) = (servers.cpu(), clients.cpu());
    let t_cut = sys::realtime_ns();
    eprintln!("  the cut: every client closes its socket and rejoins with since");
    clients.send(&storm::Command::Cut)?;
    let rejoined = clients.until("rejoining", JOIN_LIMIT, |s| {
        s.recovered + s.not_recovered >= answered0 + n && s.joined >= n
    });
    // A storm that does not end in time is reported as far as it got
    // (its clients short of the last number count as loss).
    let s = rejoined.unwrap_or_else(|e| {
        eprintln!("  {e}");
        clients.sum(Duration::ZERO)
    });
    let c = servers.redis_mark();
    let all_recovered = secs_since(t_cut, s.last_recovered_ns);
    let replayed = s.replayed - replayed0;
    let replay_secs = secs_since(t_cut, s.last_replayed_ns);
    let mut storm = Storm {
        complete: s.recovered + s.not_recovered >= answered0 + n,
        publish_rate: args.storm_rate,
        all_recovered_secs: all_recovered,
        rejoins: s.recovered + s.not_recovered - answered0,
        recovered: s.recovered - before.recovered,
        not_recovered: s.not_recovered - before.not_recovered,
        replayed,
        replayed_per_sec: replayed as f64 / replay_secs.max(1e-9),
        rejoins_per_sec: (s.recovered + s.not_recovered - answered0) as f64
            / all_recovered.max(1e-9),
        server_cpu_secs: servers.cpu() - s0,
        client_cpu_secs: clients.cpu() - c0,
        ..Storm::default()
    };
    if let Some((per_rejoin, by_command)) = redis_cost(a, b, c, n) {
        storm.redis_commands_per_rejoin = Some(per_rejoin);
        storm.redis_calls = by_command;
    }
    eprintln!(
        "  {} of {n} rejoined, the last recovered {all_recovered:.2} s after the cut; {replayed} messages replayed",
        storm.rejoins
    );
    Ok(storm)
}

/// Redis commands per rejoin over the storm (from `b` to `c`), less what
/// the publishing alone cost over as long (from `a` to `b`), and the
/// storm's calls by command; `None` without Redis.
fn redis_cost(
    a: RedisMark,
    b: RedisMark,
    c: RedisMark,
    n: u64,
) -> Option<(f64, std::collections::BTreeMap<String, u64>)> {
    let (Some(ca), Some(cb), Some(cc)) = (a.calls, b.calls, c.calls) else {
        return None;
    };
    let (_, background) = calls_between(&ca, &cb);
    let per_sec = background as f64 / b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let (by_command, total) = calls_between(&cb, &cc);
    let storm_only = total as f64 - per_sec * c.at.duration_since(b.at).as_secs_f64();
    Some((storm_only.max(0.0) / n as f64, by_command))
}

/// Every client told its topic's `last` number, waited for (as far as it
/// got in time), then stopped: the status at the end and the clients' last.
fn last_numbers(
    mut clients: Clients,
    n: u64,
    last: &[u64],
) -> Result<(Status, Status), BenchError> {
    clients.send(&storm::Command::Target(last.to_vec()))?;
    let end = clients.until("the last numbers", DELIVERY_LIMIT, |s| s.at_target >= n);
    let at_end = match end {
        Ok(s) => s,
        Err(e) => {
            eprintln!("  {e}");
            clients.sum(Duration::ZERO)
        }
    };
    Ok((at_end, clients.stop()))
}

/// The loss the clients counted against the `last` numbers published.
fn loss(n: u64, last: Vec<u64>, at_end: &Status, status: &Status) -> Loss {
    // A client that rejoined after the limit was still checked: it must
    // hold its topic's last number (counted as short otherwise), having
    // seen every number once; an answer other than recovered: true is an
    // error whenever it came.
    let not_recovered = status.not_recovered;
    let short = n.saturating_sub(at_end.at_target);
    Loss {
        last_numbers: last,
        short,
        gaps: status.gaps,
        missing: status.missing,
        duplicates: status.duplicates,
        errors: status.gaps + status.duplicates + short + not_recovered,
    }
}

/// What the publishers counted: published, retried, lost, the first error.
fn publish_counts(stats: &Published) -> PublishCounts {
    PublishCounts {
        ok: stats.ok.load(std::sync::atomic::Ordering::Relaxed),
        retried: stats.retried.load(std::sync::atomic::Ordering::Relaxed),
        lost: stats.lost.load(std::sync::atomic::Ordering::Relaxed),
        first_error: stats
            .first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keeps_history_only_when_asked() {
        let on: toml::Value = toml::from_str(&config(true)).unwrap();
        let off: toml::Value = toml::from_str(&config(false)).unwrap();
        assert_eq!(on["topics"][0]["pattern"].as_str(), Some("storm:*"));
        assert_eq!(
            on["topics"][0]["history_size"].as_integer(),
            Some(i64::from(HISTORY_SIZE))
        );
        assert!(off["topics"][0].get("history_size").is_none());
    }

    #[test]
    fn commandstats_deltas() {
        let a = commandstats("# Commandstats\r\ncmdstat_publish:calls=10,usec=5,usec_per_call=0.5\r\ncmdstat_xadd:calls=3,usec=1\r\n");
        let b = commandstats("cmdstat_publish:calls=12,usec=9\r\ncmdstat_xadd:calls=3,usec=1\r\ncmdstat_xrange:calls=7,usec=2\r\n");
        let (d, total) = calls_between(&a, &b);
        assert_eq!(total, 9);
        assert_eq!(d.get("publish"), Some(&2));
        assert_eq!(d.get("xrange"), Some(&7));
        assert!(!d.contains_key("xadd"));
    }
}
