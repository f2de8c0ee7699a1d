//! The controller: `throng bench`. Starts the server (unless `--target`),
//! spawns local agents (or accepts remote ones), splits the load, watches the
//! run, and merges what the agents measured into the report.
//!
//! [`run`] sets a run up, in order: the scenario from the flags
//! ([`BenchArgs::load`]), the dashboard's listener, a private network
//! namespace if the run needs one ([`netns`]), the embedded server, the
//! agents and their plans; then the run goes through its phases
//! (`run`: ramp-up, plateau, hold, storm, collect) and the report is
//! printed and written.
//!
//! Layout: `launch` starts the child processes (server, Redis, agents,
//! floor writers); `probe` samples the server; `agents` holds the links to
//! the agents (and to the floor writers); `run` the phases, each returning
//! what it measured; `floor` the floor phase; `arrival` adaptive arrival's
//! rate control; `timeline` the per-second samples and the progress line;
//! `cpu` the CPU trace and the bottleneck verdict; `outcome` turns the
//! phases' measurements into the [`Report`](crate::report::Report),
//! `presence` its presence part; `hooks` is the hooks scenario's run
//! (`--hooks`, [`crate::hooks`]); `storm` the reconnect storm's
//! (`--storm`, [`crate::storm`]; its servers in `storm_servers`, its
//! client processes in `storm_clients`); `soak` the soak's (`--soak`,
//! [`crate::soak`]).
//!
//! Threads: the main thread owns all state; one reader thread per agent
//! forwards its lines over a channel; the dashboard thread only reads the
//! JSON snapshot behind a mutex that the main thread replaces every sample.

mod agents;
mod arrival;
mod children;
mod cpu;
mod floor;
mod handshakes;
mod hooks;
mod launch;
mod outcome;
mod presence;
mod probe;
mod run;
mod soak;
mod storm;
mod storm_clients;
mod storm_servers;
mod timeline;
mod tls;
mod verdict;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::agents::Agents;
use self::floor::{Train, Writers};
use self::launch::{Embedded, LocalAgents};
use self::probe::ServerProbe;
use self::run::Run;
use crate::agent::FD_MARGIN;
use crate::cli::Load;
use crate::cli::{AuthMode, FloorMode};
use crate::error::BenchError;
use crate::floor::FloorFrame;
use crate::plan::Plan;
use crate::report::{html, summary};
use crate::wire::{self, Role, ToAgent};
use crate::{dashboard, netns, scenario, sys, tune, BenchArgs};

fn resolve(target: &str) -> Result<SocketAddr, BenchError> {
    let t = target
        .trim_start_matches("ws://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    t.to_socket_addrs()?
        .next()
        .ok_or_else(|| BenchError::Server(format!("cannot resolve {target}")))
}

/// The server's shards per process: `--shards` among the `--server-arg`s,
/// else the server's default (the cores, shared among `processes`).
fn shards_per_process(server_args: &[String], processes: usize) -> u32 {
    let given =
        server_args
            .iter()
            .enumerate()
            .find_map(|(i, a)| match a.strip_prefix("--shards") {
                Some(v) if v.starts_with('=') => v[1..].parse().ok(),
                Some("") => server_args.get(i + 1)?.parse().ok(),
                _ => None,
            });
    given.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores / processes.max(1)).max(1) as u32
    })
}

/// Runs `throng bench`: sets the run up step by step, runs it, and
/// reports; an `Err` when it could not run, or when it ran and failed its
/// own success criteria (so a CI job can gate on the exit status).
/// With `--compare-plain` the same run goes first in plaintext.
pub fn run(args: BenchArgs) -> Result<(), BenchError> {
    children::kill_on_signal()?;
    if let Some(done) = scenario_of_its_own(&args) {
        return done;
    }
    let (soft, hard) = sys::raise_fd_limit();
    let per_process = hard.saturating_sub(FD_MARGIN).max(1);
    let load = args.load()?;
    let floor_on = floor_wanted(&args, &load.scenario)?;
    if let Some(t) = &args.target {
        listening(t)?;
    }
    if let Some(imp) = &load.tsung {
        import_notes(&args, imp);
    }
    let users = load.scenario.total_users();
    // Bound before a move into a private network namespace, so the browser
    // on the host still reaches it.
    let dashboard = (args.dashboard_port != 0).then(|| dashboard::bind(args.dashboard_port));
    let local_only = args.target.is_none() && args.remote_agents == 0;
    // Read on the host: the global settings (tcp_mem, netdev_max_backlog)
    // are not shown inside a private network namespace.
    let os = tune::os_settings(users);
    let tcp = netns::for_run(args.netns, local_only, users)?;
    let live = Arc::new(Mutex::new(r#"{"status":"starting"}"#.to_string()));
    let report_path = args.report.clone().unwrap_or_else(default_report_path);
    children::on_signal_write(Arc::clone(&live), args.json.clone(), report_path.clone());
    // The dashboard lives as long as the run: the process ends with it (a
    // bench must end by itself; the HTML report keeps the final figures).
    let _dashboard = dashboard.and_then(|l| start_dashboard(l, args.dashboard_port, &live));
    let ctx = Ctx {
        soft,
        hard,
        per_process,
        os,
        tcp,
        live,
    };
    let plain = if args.compare_plain {
        let mut plain_args = args.clone();
        // Still `compare_plain`: its handshake rounds are the plain ones.
        plain_args.tls = false;
        plain_args.floor = FloorMode::Off;
        eprintln!("--compare-plain: first the same run in plaintext (no floor), then over TLS");
        let plain = one_run(&plain_args, &load, false, &ctx)?;
        eprintln!("--compare-plain: the plaintext run is done; now over TLS");
        Some(plain)
    } else {
        None
    };
    let mut report = one_run(&args, &load, floor_on, &ctx)?;
    if let Some(p) = plain {
        report.tls_vs_plain = Some(crate::report::TlsVsPlain::of(&p, &report));
    }
    publish(&ctx.live, report, &args, &report_path)
}

/// What every run of one invocation shares.
struct Ctx {
    soft: u64,
    hard: u64,
    per_process: u64,
    os: crate::report::OsSettings,
    tcp: crate::netns::TcpTable,
    live: Arc<Mutex<String>>,
}

/// One run: its server, agents and floor writers started, its phases run,
/// everything it started stopped; its report (criteria not judged yet).
fn one_run(
    args: &BenchArgs,
    load: &Load,
    floor_on: bool,
    ctx: &Ctx,
) -> Result<crate::report::Report, BenchError> {
    let Load {
        scenario: sc,
        tsung: imported,
        adaptive,
    } = load.clone();
    let users = sc.total_users();
    let bench_tls = tls::setup(args)?;
    let (embedded, target, presence_args, jwt_secret) =
        server_side(args, &sc, ctx.per_process, ctx.hard, &bench_tls.server_args)?;
    let tsung_caps = tsung_caps(imported.as_ref(), ctx.per_process);
    let local = local_agents(args, users, ctx.per_process, tsung_caps.len());
    if let Some(imp) = &imported {
        let hosts: Vec<&str> = imp.clients.iter().map(|c| c.host.as_str()).collect();
        eprintln!("tsung: clients {hosts:?} mapped onto {local} local agent(s)");
    }
    let total_agents = local + args.remote_agents;
    setup_notes(&ctx.os, users, ctx.soft, ctx.hard, ctx.per_process);
    eprintln!(
        "throng bench: {} -> {target}{} with {total_agents} agent(s)",
        scenario::describe(&sc, adaptive),
        if args.tls { " over TLS" } else { "" }
    );
    let listener = TcpListener::bind(&args.listen)?;
    let token = match &args.token {
        Some(t) if !t.is_empty() => t.clone(),
        _ => wire::new_token()?,
    };
    let mut agents = connect_agents(args, &listener, &token, local, total_agents)?;
    let plan = Plan {
        index: 0,
        agents: total_agents,
        scenario: sc.clone(),
        target,
        host: args.target.clone().unwrap_or_else(|| target.to_string()),
        bind_sources: true,
        capacity: ctx.per_process,
        adaptive,
        tls: bench_tls.plan.clone(),
        auth_jwt_secret: jwt_secret.clone(),
    };
    send_plans(&mut agents, plan, &tsung_caps)?;
    let conn_size = agents.await_ready()?;
    let writers = if floor_on {
        let processes = embedded.as_ref().map_or(1, |e| e.workers);
        Some(floor_writers(args, &sc, &listener, &token, processes)?)
    } else {
        None
    };
    let probe = probe_of(embedded.as_ref(), target);
    let handshakes = handshake_setup(
        args,
        &sc,
        target,
        embedded.is_some(),
        &bench_tls,
        jwt_secret,
    );
    let mut run = Run::new(
        args,
        sc,
        adaptive,
        probe,
        agents,
        writers,
        ctx.os.clone(),
        conn_size,
        ctx.tcp,
        Arc::clone(&ctx.live),
    );
    run.presence_args = presence_args;
    run.handshakes = handshakes;
    let result = run.execute();
    let _ = std::io::stderr().flush();
    // Whatever happened, leave no agent or server behind.
    run.agents.reap();
    drop(embedded);
    result
}

/// The handshake rounds' setup: with `--tls` (or as the plaintext half of
/// `--compare-plain`), the embedded server and `--handshake-sample` over
/// 0, on the first topic the run's users join.
fn handshake_setup(
    args: &BenchArgs,
    sc: &scenario::Scenario,
    target: SocketAddr,
    embedded: bool,
    bench_tls: &tls::BenchTls,
    jwt_secret: Option<String>,
) -> Option<handshakes::Setup> {
    let asked = args.tls || args.compare_plain;
    if !asked || !embedded || args.handshake_sample == 0 {
        return None;
    }
    let Some(topic) = join_topic(sc) else {
        eprintln!("note: no handshake rounds: the scenario joins no topic without a %%template%%");
        return None;
    };
    Some(handshakes::Setup {
        target,
        tls: bench_tls.plan.clone(),
        jwt_secret,
        topic,
        sockets: args.handshake_sample,
        first_user: sc.total_users(),
    })
}

/// The first topic the scenario's users join, unless it is a template.
fn join_topic(sc: &scenario::Scenario) -> Option<String> {
    sc.roles
        .iter()
        .flat_map(|r| &r.session)
        .find_map(|s| match s {
            scenario::Step::Join { topic, .. } if !topic.contains("%%") => Some(topic.clone()),
            _ => None,
        })
}

/// The topics the scenario's publishers broadcast on (`--history`'s).
fn publish_topics(sc: &scenario::Scenario) -> Vec<String> {
    let mut topics: Vec<String> = sc
        .roles
        .iter()
        .flat_map(|r| &r.session)
        .filter_map(|s| match s {
            scenario::Step::Publish { topic, .. } => Some(topic.clone()),
            _ => None,
        })
        .collect();
    topics.sort();
    topics.dedup();
    topics
}

/// The scenarios that run servers and clients of their own instead of a
/// load: `--hooks`, `--storm`, `--soak`.
fn scenario_of_its_own(args: &BenchArgs) -> Option<Result<(), BenchError>> {
    if args.hooks {
        return Some(hooks::run(args));
    }
    if args.storm {
        return Some(storm::run(args));
    }
    args.soak.map(|secs| soak::run(args, secs))
}

/// Each agent's capacity, one per Tsung client (none without `--tsung`):
/// an agent holds up to its fd limit less a margin (`per_process`), and
/// a Tsung client caps its agent at its maxusers.
fn tsung_caps(imported: Option<&crate::tsung::TsungImport>, per_process: u64) -> Vec<u64> {
    imported
        .map(|i| {
            i.clients
                .iter()
                .map(|c| c.maxusers.unwrap_or(u64::MAX).min(per_process))
                .collect()
        })
        .unwrap_or_default()
}

/// Sends each agent its plan: `plan` with the agent's index, and its
/// capacity capped by its Tsung client's maxusers.
fn send_plans(agents: &mut Agents, plan: Plan, tsung_caps: &[u64]) -> Result<(), BenchError> {
    let per_process = plan.capacity;
    for i in 0..agents.len() {
        let plan = Plan {
            index: i as u32,
            capacity: tsung_caps
                .get(i)
                .copied()
                .unwrap_or(per_process)
                .min(per_process),
            ..plan.clone()
        };
        agents.send(i, &ToAgent::Plan(Box::new(plan)))?;
    }
    Ok(())
}

/// What samples the server: the embedded one's processes, or a target's
/// `/metrics` only.
fn probe_of(embedded: Option<&Embedded>, target: SocketAddr) -> ServerProbe {
    match embedded {
        Some(e) => ServerProbe::new(
            e.server.metrics,
            Some(e.server.pid()),
            e.holders(),
            e.workers,
            e.redis.as_ref().map(|r| r.pid()),
        ),
        None => ServerProbe::new(target, None, Vec::new(), 1, None),
    }
}

/// Serves the dashboard on its listener (if it could be bound).
fn start_dashboard(
    listener: std::io::Result<TcpListener>,
    port: u16,
    live: &Arc<Mutex<String>>,
) -> Option<SocketAddr> {
    match listener.and_then(|l| dashboard::serve(l, Arc::clone(live))) {
        Ok(addr) => {
            eprintln!("dashboard: http://{addr}/");
            Some(addr)
        }
        Err(e) => {
            eprintln!("dashboard off: port {port}: {e}");
            None
        }
    }
}

/// The end of a run: the criteria judged, the summary printed, the JSON
/// and HTML written; an `Err` when the run failed its criteria. Nothing
/// waits for the user: the run ends by itself (it once kept the dashboard
/// up until Enter on a terminal, and a scripted run under `script` or a
/// terminal multiplexer hung there).
fn publish(
    live: &Mutex<String>,
    mut report: crate::report::Report,
    args: &BenchArgs,
    report_path: &std::path::Path,
) -> Result<(), BenchError> {
    report.failures = report.failed_criteria();
    if let Some(c) = &report.tls_vs_plain {
        let plain = c
            .plain_failures
            .iter()
            .map(|f| format!("the plaintext run: {f}"));
        report.failures.extend(plain);
    }
    let json = serde_json::to_string(&report)?;
    *live.lock().unwrap_or_else(|p| p.into_inner()) = json.clone();
    print!("{}", summary::table(&report));
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)?;
        eprintln!("json: {}", p.display());
    }
    std::fs::write(report_path, html::page(&json, false))?;
    eprintln!("report: {} (open it in a browser)", report_path.display());
    children::finished(if report.failures.is_empty() { 0 } else { 1 });
    if report.failures.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Failed(report.failures.join("; ")))
    }
}

/// Whether the run measures the floor (`--floor`, and `auto`'s rule).
fn floor_wanted(args: &BenchArgs, sc: &scenario::Scenario) -> Result<bool, BenchError> {
    Ok(match args.floor {
        FloorMode::Off => false,
        FloorMode::On if args.remote_agents > 0 => {
            return Err(BenchError::Scenario(
                "--floor on needs local agents only (the floor writers run here)".into(),
            ))
        }
        FloorMode::On => true,
        FloorMode::Auto => {
            args.target.is_none() && args.remote_agents == 0 && sc.expected_broadcasts() > 0
        }
    })
}

/// `--target` answers a TCP connect: a run against nothing would only
/// count refusals and blame the server for them.
fn listening(target: &str) -> Result<(), BenchError> {
    let addr = resolve(target)?;
    match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Err(BenchError::Server(format!(
            "nothing is listening at {addr} (--target {target}): start the server there first (for example `throng serve --port {}`), or fix --target",
            addr.port()
        ))),
        Err(e) => Err(BenchError::Server(format!(
            "cannot reach {addr} (--target {target}): {e}; check the address and that the server runs"
        ))),
    }
}

/// What a `--tsung` import changed or left out, on stderr.
fn import_notes(args: &BenchArgs, imp: &crate::tsung::TsungImport) {
    for n in &imp.notes {
        eprintln!("tsung: {n}");
    }
    if let Some((h, p)) = &imp.server {
        eprintln!(
            "tsung: <server host=\"{h}\" port=\"{p}\"> replaced by {}",
            args.target.as_deref().unwrap_or("the embedded server")
        );
    }
}

/// `--auth jwt`'s secret: `--auth-jwt-secret` (which [`BenchArgs::load`]
/// requires with `--target`), else a fresh random one; none without
/// `--auth jwt`.
pub(super) fn jwt_secret(args: &BenchArgs) -> Result<Option<String>, BenchError> {
    Ok(match (args.auth, args.auth_jwt_secret.as_deref()) {
        (AuthMode::None, _) => None,
        (AuthMode::Jwt, Some(s)) if !s.is_empty() => Some(s.to_string()),
        (AuthMode::Jwt, _) => Some(wire::new_token()?),
    })
}

/// What the server side is: the embedded server (or none), its address,
/// what it was given for presence, and `--auth jwt`'s secret.
type ServerSide = (Option<Embedded>, SocketAddr, Vec<String>, Option<String>);

/// The server side: the embedded `throng serve` (and what it was given for
/// the scenario's presence), or the `--target`; with `--auth jwt` the
/// secret the tokens are signed with, which the embedded server gets with
/// `--auth jwt` (in its environment, off the command line).
fn server_side(
    args: &BenchArgs,
    sc: &scenario::Scenario,
    per_process: u64,
    hard: u64,
    tls_args: &[String],
) -> Result<ServerSide, BenchError> {
    let jwt_secret = jwt_secret(args)?;
    if let Some(t) = &args.target {
        if !sc.sends_heartbeats() {
            eprintln!(
                "warning: this scenario sends no heartbeats: the server's idle timeout (throng's default 60 s) will close sessions that stay quiet longer"
            );
        }
        return Ok((None, resolve(t)?, Vec::new(), jwt_secret));
    }
    let users = sc.total_users();
    let idle = if sc.sends_heartbeats() {
        args.idle_timeout
    } else {
        Some(args.idle_timeout.unwrap_or(0))
    };
    let presence =
        launch::presence_server_args(sc.presence_rule()?.as_ref(), users, &args.server_arg);
    if !presence.is_empty() {
        eprintln!(
            "presence: the embedded server runs with {} (beyond --server-arg)",
            presence.join(" ")
        );
    }
    let mut server_args = args.server_arg.clone();
    server_args.extend(presence.iter().cloned());
    server_args.extend(tls_args.iter().cloned());
    if let Some(size) = args.history {
        let topics = publish_topics(sc);
        if topics.is_empty() {
            return Err(BenchError::Usage(format!(
                "--history {size}: the scenario broadcasts on no topic (the built-in one needs --broadcasts 1 or more)"
            )));
        }
        for t in &topics {
            server_args.extend(["--history".to_string(), format!("{t}={size}")]);
        }
        eprintln!(
            "history: the embedded server keeps the last {size} messages of {}",
            topics.join(", ")
        );
    }
    let mut env = Vec::new();
    if let Some(secret) = jwt_secret.as_deref() {
        eprintln!("auth: the embedded server runs with --auth jwt (the --auth-jwt-secret, else a fresh one); each user connects with its own token");
        server_args.extend(["--auth".to_string(), "jwt".to_string()]);
        env.push(("THRONG_AUTH_JWT_SECRET", secret));
    }
    let e = Embedded::start(users, per_process, hard, idle, &server_args, &env)?;
    let addr = e.server.addr;
    Ok((Some(e), addr, presence, jwt_secret))
}

/// Local agent processes: `--agents`, else one per Tsung client or as
/// many as the connections need; never fewer than they need.
fn local_agents(args: &BenchArgs, users: u64, per_process: u64, tsung_clients: usize) -> u32 {
    let min_agents = users.div_ceil(per_process).max(1) as u32;
    let local = args
        .agents
        .unwrap_or(if tsung_clients == 0 {
            min_agents
        } else {
            tsung_clients as u32
        })
        .max(if args.remote_agents > 0 { 0 } else { 1 });
    if local + args.remote_agents < min_agents {
        eprintln!(
            "note: {users} users need {min_agents} agents of {per_process} connections each: using {min_agents}"
        );
        return min_agents - args.remote_agents;
    }
    local
}

/// The OS settings the run's size needs (offered, not imposed) and the
/// limits that cap it, on stderr.
fn setup_notes(os: &crate::report::OsSettings, users: u64, soft: u64, hard: u64, per_process: u64) {
    for l in &os.lacking {
        eprintln!(
            "note: {users} connections need {} {} (now {}): {}",
            l.name, l.needed, l.now, l.why
        );
    }
    if let Some(cmd) = &os.advice {
        eprintln!("note: run `{cmd}` (as root) first to set them; this run goes on without");
    }
    let ports = sys::sysctl_read("net.ipv4.ip_local_port_range").unwrap_or_default();
    eprintln!(
        "limits: open files {soft}/{hard} (soft/hard) per process -> {per_process} connections per agent and per server process; ephemeral ports {ports} per source address (8 source addresses per agent); {:.1} GiB memory; `throng tune` for more",
        sys::mem_total().unwrap_or(0) as f64 / 1073741824.0
    );
}

/// Starts `local` agents, waits for the remote ones, and links them all.
fn connect_agents(
    args: &BenchArgs,
    listener: &TcpListener,
    token: &str,
    local: u32,
    total: u32,
) -> Result<Agents, BenchError> {
    let ctl_addr = listener.local_addr()?;
    let mut children = LocalAgents::spawn(local, ctl_addr, token, false)?;
    if args.remote_agents > 0 {
        let shown = if args.token.is_some() {
            "<the --token given>"
        } else {
            token
        };
        eprintln!(
            "waiting for {} remote agent(s): {}={shown} throng agent --controller {ctl_addr}",
            args.remote_agents,
            wire::TOKEN_ENV
        );
    }
    let wait = Duration::from_secs(if args.remote_agents > 0 { 120 } else { 20 });
    Agents::accept(
        listener,
        total as usize,
        &mut children,
        token,
        Role::Agent,
        wait,
    )
}

/// The floor writers: one per server process, as many threads as its shards.
fn floor_writers(
    args: &BenchArgs,
    sc: &scenario::Scenario,
    listener: &TcpListener,
    token: &str,
    processes: usize,
) -> Result<Writers, BenchError> {
    let threads = shards_per_process(&args.server_arg, processes);
    let mut children = LocalAgents::spawn(processes as u32, listener.local_addr()?, token, true)?;
    let links = Agents::accept(
        listener,
        processes,
        &mut children,
        token,
        Role::FloorWriter,
        Duration::from_secs(20),
    )?;
    // The built-in scenario's one publisher: its broadcasts' schedule.
    let load = &args.load;
    let builtin = load.scenario.is_none() && load.tsung.is_none();
    let train =
        (builtin && load.publishers == 1 && (2..=10).contains(&load.broadcasts)).then_some(Train {
            rounds: load.broadcasts,
            interval: load.broadcast_interval,
        });
    Ok(Writers {
        links,
        threads,
        frame: FloorFrame::of(sc),
        train,
        sample: args.floor_sample,
    })
}

/// Where the HTML report goes without `--report`.
fn default_report_path() -> PathBuf {
    std::env::temp_dir().join(format!("throng-bench-{}.html", std::process::id()))
}
