//! `throng bench --storm`: the reconnect storm's run (see [`crate::storm`]).
//!
//! The server side (`storm_servers`): one `throng serve` per ~19,000
//! clients (a process's open files), each with the storm's `[[topics]]`
//! rule and its own history in memory, every message published to each of
//! them; or, with `--storm-redis` (and always with `--storm-restart`), one
//! `throng serve --workers N --redis` on a redis-server the bench starts,
//! history in Redis and one API for the cluster. With `--tls` the servers
//! get the run's certificate and the clients trust it; with `--auth jwt`
//! the servers check every client's token. The client side
//! (`storm_clients`): one client process per ~19,000 clients.
//!
//! Phases: everyone joins (no message yet) and server memory per idle
//! joined socket is read; the burst (`--storm-burst` numbers per topic as
//! fast as the API takes them: the throughput); then, with history,
//! publishing at `--storm-rate` for `--storm-hold` s, every client caught
//! up, and the storm while the publishing goes on: every socket cut at
//! once, or with `--storm-restart` the server stopped with SIGTERM (its
//! drain closes every socket with 1012 and it exits) and started again on
//! its port, and every client rejoining with `since` until all have
//! recovered; `--storm-hold` s more, the publishing stops, and each client
//! must have its topic's last number, having counted every number once,
//! in order.
//!
//! A restart needs the history in Redis: a server's own history ends with
//! its process, and the new one answers `since` from another epoch with
//! `recovered: false`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::storm_clients::Clients;
use super::storm_servers::{redis_cost, ConfigDir, Servers, Setup};
use crate::agent::FD_MARGIN;
use crate::cli::AuthMode;
use crate::error::BenchError;
use crate::storm::publisher::{self, Published, Steady};
use crate::storm::report::{Burst, Loss, PublishCounts, Storm, StormReport};
use crate::storm::{self, Status};
use crate::tune::server_workers;
use crate::{netns, sys, BenchArgs, StormHistory};

/// Clients unless `--connections` says otherwise.
const DEFAULT_CLIENTS: u64 = 100_000;
/// Messages each topic keeps: far more than a storm's outage misses.
const HISTORY_SIZE: u32 = 1000;
/// The longest each wait may take before the run gives up on it: the
/// joins (and rejoins) get 400 s, or 2 ms per client when that is longer
/// (a million TLS handshakes on 2 cores take longer than 400 s).
const JOIN_LIMIT: Duration = Duration::from_secs(400);

fn join_limit(n: u64) -> Duration {
    JOIN_LIMIT.max(Duration::from_millis(n.saturating_mul(2)))
}
const DELIVERY_LIMIT: Duration = Duration::from_secs(120);
/// How long a restart's server may take to drain and exit after SIGTERM
/// (its `--drain-seconds`, 10 by default, the close linger and the
/// supervisor's margin are well inside it).
const STOP_LIMIT: Duration = Duration::from_secs(90);

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
    check(args)?;
    let n = args.load.connections.unwrap_or(DEFAULT_CLIENTS);
    let history = args.storm_history == StormHistory::On;
    if args.storm_restart && !args.storm_redis {
        eprintln!("note: --storm-restart keeps the history in Redis (as --storm-redis): a server's own history ends with its process");
    }
    let (_, hard) = sys::raise_fd_limit();
    let per_process = hard.saturating_sub(FD_MARGIN).max(1);
    // Two rounds of sockets live at once (the cut ones in TIME_WAIT).
    netns::for_run(args.netns, true, n * 2)?;
    let bench_tls = super::tls::setup(args)?;
    let jwt_secret = super::jwt_secret(args)?;
    let (_dir, file) = ConfigDir::write(&config(history))?;
    let mut setup = Setup {
        file,
        extra: args.server_arg.clone(),
        env: Vec::new(),
        redis: args.storm_redis || args.storm_restart,
    };
    setup.extra.extend(bench_tls.server_args.iter().cloned());
    if let Some(secret) = &jwt_secret {
        setup
            .extra
            .extend(["--auth".to_string(), "jwt".to_string()]);
        setup.env.push(("THRONG_AUTH_JWT_SECRET", secret.clone()));
    }
    let way_in = WayIn {
        tls: bench_tls.plan.as_ref(),
        jwt_secret: jwt_secret.as_deref(),
    };
    let report = measure(args, n, per_process, hard, &setup, way_in, history)?;
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

/// The storm's own flags, in bounds, before anything starts.
fn check(args: &BenchArgs) -> Result<(), BenchError> {
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
    if args.storm_restart && args.storm_history == StormHistory::Off {
        return Err(BenchError::Usage(
            "--storm-restart with --storm-history off: the restart's rejoins are checked against the history; leave --storm-history on".into(),
        ));
    }
    Ok(())
}

/// How the clients get in: TLS's trust and `--auth jwt`'s secret.
#[derive(Clone, Copy)]
struct WayIn<'a> {
    tls: Option<&'a crate::join::tls::TlsPlan>,
    jwt_secret: Option<&'a str>,
}

fn secs_since(t0_ns: u64, t_ns: u64) -> f64 {
    t_ns.saturating_sub(t0_ns) as f64 / 1e9
}

/// The storm's phases, on servers and clients of its own: everyone joins,
/// the burst, with history the storm and the rejoins, then the last numbers.
fn measure(
    args: &BenchArgs,
    n: u64,
    per_process: u64,
    hard: u64,
    setup: &Setup,
    way_in: WayIn<'_>,
    history: bool,
) -> Result<StormReport, BenchError> {
    let topics = args.storm_topics;
    let started_unix = sys::realtime_ns() / 1_000_000_000;
    let count = server_workers(n, hard).max(1);
    let mut servers = Servers::start(count, setup)?;
    eprintln!(
        "throng bench --storm: {n} clients{}{}, {topics} topics {}, {} server process(es){}",
        if way_in.tls.is_some() {
            " over TLS"
        } else {
            ""
        },
        if way_in.jwt_secret.is_some() {
            " with JWT auth"
        } else {
            ""
        },
        if history {
            "with history"
        } else {
            "without history"
        },
        servers.holders.len().max(1),
        if setup.redis {
            " joined through Redis"
        } else {
            ", each with its own history; every message published to each"
        }
    );
    let (mut clients, mut report) = join_everyone(args, n, per_process, &servers, way_in)?;
    report.started_unix = started_unix;
    report.history = history;
    report.store = if setup.redis { "redis" } else { "memory" };
    let stats = Arc::new(Published::default());
    let mut last = vec![0u64; topics as usize];
    if args.storm_burst > 0 {
        report.burst = Some(burst(args, n, &servers, &mut clients, &stats)?);
        last = vec![u64::from(args.storm_burst); topics as usize];
    }
    if history {
        let steady = Steady::start(&servers.apis, topics, last.clone(), args.storm_rate, &stats);
        report.storm = Some(storm_phase(args, n, &mut servers, &mut clients, &steady)?);
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
    way_in: WayIn<'_>,
) -> Result<(Clients, StormReport), BenchError> {
    let topics = args.storm_topics;
    std::thread::sleep(Duration::from_millis(500));
    let rss0 = servers.rss();
    let cpu0 = servers.server_cpu();
    let joins_started = Instant::now();
    let mut clients = Clients::spawn(
        n,
        per_process,
        &servers.targets,
        topics,
        way_in.tls,
        way_in.jwt_secret,
    )?;
    let joined = clients.until("joining", join_limit(n), |s| s.joined >= n)?;
    let join_secs = joins_started.elapsed().as_secs_f64();
    let join_cpu = servers.server_cpu() - cpu0;
    std::thread::sleep(Duration::from_secs(1));
    let rss1 = servers.rss();
    let report = StormReport {
        scenario: "storm",
        clients: n,
        topics,
        tls: way_in.tls.is_some(),
        auth: if args.auth == AuthMode::Jwt {
            "jwt"
        } else {
            "none"
        },
        server_processes: servers.holders.len(),
        client_processes: clients.children.len(),
        join_secs,
        joins_per_sec: joined.joins as f64 / join_secs.max(1e-9),
        server_cpu_us_per_join: join_cpu * 1e6 / joined.joins.max(1) as f64,
        server_bytes_per_socket: rss1.saturating_sub(rss0) as f64 / n as f64,
        ..StormReport::default()
    };
    eprintln!(
        "  everyone joined in {join_secs:.1} s ({:.0} us of server CPU each); server memory per idle joined socket {:.0} B",
        report.server_cpu_us_per_join, report.server_bytes_per_socket
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

/// The storm, while `steady` publishes: `--storm-hold` s of publishing,
/// every client caught up, then every socket cut at once (or, with
/// `--storm-restart`, the server stopped with SIGTERM and started again),
/// and every client rejoining with `since` until all have recovered (or
/// the limit).
fn storm_phase(
    args: &BenchArgs,
    n: u64,
    servers: &mut Servers,
    clients: &mut Clients,
    steady: &Steady,
) -> Result<Storm, BenchError> {
    std::thread::sleep(Duration::from_millis(500));
    let a = servers.redis_mark();
    std::thread::sleep(Duration::from_secs_f64(args.storm_hold));
    // Every client current (and so holding a position) before the storm.
    clients.send(&storm::Command::Target(steady.due()))?;
    clients.until("catching up before the storm", DELIVERY_LIMIT, |s| {
        s.at_target >= n
    })?;
    let b = servers.redis_mark();
    let before = clients.sum(Duration::ZERO);
    let answered0 = before.recovered + before.not_recovered;
    let (s0, r0, c0) = (servers.server_cpu(), servers.redis_cpu(), clients.cpu());
    let t0 = sys::realtime_ns();
    let restarted = if args.storm_restart {
        eprintln!("  the restart: SIGTERM to the server (its drain closes every socket with 1012), then the same server started again on its port; every client reconnects and rejoins with since");
        let r = servers.restart(STOP_LIMIT, s0)?;
        eprintln!(
            "  the server exited {:.1} s after SIGTERM and listened again {:.2} s later",
            r.down_secs, r.start_secs
        );
        Some(r)
    } else {
        eprintln!("  the cut: every client closes its socket and rejoins with since");
        clients.send(&storm::Command::Cut)?;
        None
    };
    let rejoined = clients.until("rejoining", join_limit(n), |s| {
        s.recovered + s.not_recovered >= answered0 + n && s.joined >= n
    });
    // A storm that does not end in time is reported as far as it got
    // (its clients short of the last number count as loss).
    let s = rejoined.unwrap_or_else(|e| {
        eprintln!("  {e}");
        clients.sum(Duration::ZERO)
    });
    let c = servers.redis_mark();
    let server_cpu = match &restarted {
        Some(r) => r.old_cpu_secs + servers.server_cpu(),
        None => servers.server_cpu() - s0,
    } + servers.redis_cpu()
        - r0;
    let mut storm = storm_figures(args, n, &before, &s, t0, server_cpu);
    storm.client_cpu_secs = clients.cpu() - c0;
    if let Some(r) = restarted {
        storm.server_down_secs = Some(r.down_secs);
        storm.server_start_secs = Some(r.start_secs);
    }
    if let Some((per_rejoin, by_command)) = redis_cost(a, b, c, n) {
        storm.redis_commands_per_rejoin = Some(per_rejoin);
        storm.redis_calls = by_command;
    }
    eprintln!(
        "  {} of {n} rejoined, the last recovered {:.2} s after the {}; {} messages replayed",
        storm.rejoins, storm.all_recovered_secs, storm.mode, storm.replayed
    );
    Ok(storm)
}

/// The storm's figures from the clients' statuses `before` it and at its
/// end (`s`), `t0` (CLOCK_REALTIME ns) its start, and the servers' CPU.
fn storm_figures(
    args: &BenchArgs,
    n: u64,
    before: &Status,
    s: &Status,
    t0: u64,
    server_cpu_secs: f64,
) -> Storm {
    let answered0 = before.recovered + before.not_recovered;
    let rejoins = s.recovered + s.not_recovered - answered0;
    let all_recovered = secs_since(t0, s.last_recovered_ns);
    let replayed = s.replayed - before.replayed;
    let replay_secs = secs_since(t0, s.last_replayed_ns);
    // A restart's storm starts with the first 1012 a client saw.
    let first_close = (args.storm_restart && s.first_1012_ns > 0)
        .then(|| secs_since(s.first_1012_ns, s.last_recovered_ns));
    let wall = first_close.unwrap_or(all_recovered);
    let delta = |a: &std::collections::BTreeMap<String, u64>,
                 b: &std::collections::BTreeMap<String, u64>| {
        b.iter()
            .map(|(k, v)| (k.clone(), v - a.get(k).copied().unwrap_or(0)))
            .filter(|(_, v)| *v > 0)
            .collect()
    };
    Storm {
        mode: if args.storm_restart { "restart" } else { "cut" },
        complete: s.recovered + s.not_recovered >= answered0 + n,
        publish_rate: args.storm_rate,
        all_recovered_secs: all_recovered,
        first_1012_to_all_recovered_secs: first_close,
        rejoins,
        recovered: s.recovered - before.recovered,
        not_recovered: s.not_recovered - before.not_recovered,
        replayed,
        replayed_per_sec: replayed as f64 / replay_secs.max(1e-9),
        rejoins_per_sec: rejoins as f64 / wall.max(1e-9),
        server_cpu_secs,
        server_cpu_us_per_rejoin: server_cpu_secs * 1e6 / rejoins.max(1) as f64,
        tls_full: s.tls_full - before.tls_full,
        tls_resumed: s.tls_resumed - before.tls_resumed,
        connect_failures: delta(&before.connect_failures, &s.connect_failures),
        closes_by_code: delta(&before.closes_by_code, &s.closes_by_code),
        ..Storm::default()
    }
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
}
