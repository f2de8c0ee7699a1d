//! The controller: `throng bench`. Starts the server (unless `--target`),
//! spawns local agents (or accepts remote ones), splits the load, watches the
//! run, and merges what the agents measured into the report.
//!
//! A run, in order:
//! 1. **ramp-up**: agents start users on the arrival schedule; a progress
//!    bar on stderr, a sample of everything every second;
//! 2. **settle**: every user has arrived, and no connect or tracked reply is
//!    outstanding; then the **plateau** sample (server and agent RSS per
//!    connection, over idle connections);
//! 3. **release** of the barrier, then **hold**: broadcasts flow; the hold
//!    ends when every session is parked and every broadcast delivered, or
//!    after `--hold` seconds;
//! 4. **disconnect storm**: every agent drops every connection at once; we
//!    time the server's `throng_connections` to 0 and the CPU it spent;
//! 5. **collect**: agents send counters, histograms (merged, not averaged)
//!    and per-broadcast receipts; the report is printed and written.
//!
//! Threads: the main thread owns all state; one reader thread per agent
//! forwards its lines over a channel; the dashboard thread only reads a
//! snapshot behind a mutex that the main thread replaces every second.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::agent::FD_MARGIN;
use crate::error::BenchError;
use crate::scenario::{self, Scenario, Serializer};
use crate::stats::{merge_bcasts, summarize, BcastTable, Counters, Hists};
use crate::sys::{self, ProcSample};
use crate::wire::{self, Plan, ToAgent, ToController};
use crate::{dashboard, netns, report, tsung, BenchArgs, NetnsMode};

/// Open files kept back per server worker, beyond the limit's margin, so that
/// the kernel's uneven spread of connections over `SO_REUSEPORT` listeners
/// never pushes one worker into its limit.
const WORKER_MARGIN: u64 = 600;

/// The embedded server, our child: one `throng serve`, or a supervisor of
/// `--workers` (whose worker pids it prints as `worker I pid P`).
struct Server {
    child: Child,
    addr: SocketAddr,
    workers: Arc<Mutex<Vec<u32>>>,
}

/// A `redis-server` we started for a multi-worker embedded server.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    /// Starts `redis-server` on a free loopback port and waits until it accepts.
    fn spawn() -> Result<Redis, BenchError> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                BenchError::Server(format!(
                    "this run needs several server workers joined through Redis, but `redis-server` could not be started ({e}); install it: apt-get install redis-server"
                ))
            })?;
        let redis = Redis { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(BenchError::Server(format!(
                    "redis-server did not listen on 127.0.0.1:{port} within 10 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(redis)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AgentLink {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Local agents not yet linked: killed if the run stops before they are.
struct Spawned(Vec<Child>);

impl Drop for Spawned {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Server {
    fn spawn(idle_timeout: Option<u64>, extra: &[String]) -> Result<Server, BenchError> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        // /metrics lives on the server API listener; the probe reads the public port.
        cmd.args([
            "serve",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
            "--public-metrics",
        ]);
        cmd.args(["--api-bind", "none"]);
        if let Some(t) = idle_timeout {
            cmd.args(["--idle-timeout", &t.to_string()]);
        }
        cmd.args(extra);
        if std::env::var_os("THRONG_LOG").is_none() {
            cmd.env("THRONG_LOG", "warn");
        }
        let mut child = cmd.stdout(Stdio::piped()).stdin(Stdio::null()).spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        let workers = Arc::new(Mutex::new(Vec::new()));
        let pids = workers.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(pid) = line
                    .trim()
                    .strip_prefix("worker ")
                    .and_then(|r| r.split_whitespace().nth(2))
                {
                    if let Ok(pid) = pid.parse::<u32>() {
                        pids.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
                    }
                }
                if !sent {
                    if let Some(a) = line.trim().strip_prefix("listening on ") {
                        let _ = tx.send(a.trim().to_string());
                        sent = true;
                    }
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(a) => {
                let addr = a.parse().map_err(|_| {
                    BenchError::Server(format!("server printed an address I cannot read: {a}"))
                })?;
                Ok(Server {
                    child,
                    addr,
                    workers,
                })
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(BenchError::Server(
                    "`throng serve` did not print `listening on ADDR` within 20 s".into(),
                ))
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The processes that hold connections: the workers, or the server itself.
    fn holders(&self, expect: usize) -> Vec<u32> {
        if expect <= 1 {
            return vec![self.pid()];
        }
        // The supervisor prints the worker lines right after `listening on`.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let w = self
                .workers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if w.len() >= expect || Instant::now() > deadline {
                return w;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One agent as the controller sees it.
struct AgentLink {
    out: TcpStream,
    pid: u32,
    /// Our child, if local.
    child: Option<Child>,
    ready_rss: u64,
    users: u64,
    last: Option<Counters>,
    final_: Option<wire::Final>,
    storm_done: bool,
}

enum Event {
    Msg(usize, ToController),
    Gone(usize),
}

/// One per-second sample of the run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Sample {
    pub t: f64,
    /// Sessions running (Tsung's "users").
    pub users: u64,
    /// Open WebSockets (Tsung's "connected").
    pub connected: u64,
    pub joined: u64,
    pub conn_per_sec: f64,
    pub msgs_out_per_sec: f64,
    pub msgs_in_per_sec: f64,
    pub errors: u64,
    pub server_conns: Option<f64>,
    pub server_rss_mb: Option<f64>,
    pub server_cpu_pct: Option<f64>,
    pub agents_cpu_pct: f64,
    pub agents_rss_mb: f64,
}

/// CPU seconds of the server (total and per thread) and of each agent, at `t`.
#[derive(Clone, Debug, Default)]
struct CpuPoint {
    t: f64,
    server: Option<f64>,
    server_threads: Vec<(u32, f64)>,
    /// Per agent: from `/proc` for local agents, else from its last progress.
    agents: Vec<f64>,
    /// This controller.
    controller: f64,
    /// The machine: (busy, total) CPU seconds over all cores.
    machine: Option<(f64, f64)>,
}

/// CPU use over a window of the ramp-up, % of one core.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct CpuWindow {
    window_secs: f64,
    server_pct: Option<f64>,
    server_busiest_thread_pct: Option<f64>,
    server_threads: usize,
    agents_pct: Vec<f64>,
    controller_pct: f64,
    /// Server + agents + controller.
    throng_pct: f64,
    /// Every process on the machine (kernel softirq work included), % of one core.
    machine_pct: Option<f64>,
    cores: usize,
}

/// Sources of server samples: `/proc` for our children, `/metrics` always.
struct ServerProbe {
    /// The server, or the supervisor of its workers.
    pid: Option<u32>,
    /// Processes whose RSS and CPU count as the server's: the server itself,
    /// or every worker plus the Redis between them.
    procs: Vec<u32>,
    /// With several workers, `/metrics` on the shared port reaches one of
    /// them only: connections are counted from the workers' open files,
    /// over the count they had before the run.
    fd_holders: Vec<u32>,
    fd_baseline: u64,
    metrics: SocketAddr,
}

impl ServerProbe {
    fn proc(&self) -> Option<ProcSample> {
        let samples: Vec<ProcSample> = self
            .procs
            .iter()
            .filter_map(|p| sys::proc_sample(&p.to_string()))
            .collect();
        if samples.is_empty() {
            return None;
        }
        Some(ProcSample {
            rss: samples.iter().map(|s| s.rss).sum(),
            cpu_secs: samples.iter().map(|s| s.cpu_secs).sum(),
        })
    }

    fn open_fds(pids: &[u32]) -> u64 {
        pids.iter()
            .filter_map(|p| std::fs::read_dir(format!("/proc/{p}/fd")).ok())
            .map(|d| d.count() as u64)
            .sum()
    }

    /// The server's open connections: from `/metrics`, or from the workers' files.
    fn conns(&self, metrics: Option<&str>) -> Option<f64> {
        if self.fd_holders.is_empty() {
            metrics.and_then(server_conns)
        } else {
            Some(Self::open_fds(&self.fd_holders).saturating_sub(self.fd_baseline) as f64)
        }
    }

    fn threads(&self) -> Vec<(u32, f64)> {
        self.procs
            .iter()
            .flat_map(|&p| sys::thread_cpu(p))
            .collect()
    }

    fn metrics(&self) -> Option<String> {
        sys::http_get(self.metrics, "/metrics", Duration::from_millis(500)).ok()
    }

    /// RSS and CPU, from `/proc` or else from the metrics.
    fn sample(&self, metrics: Option<&str>) -> Option<ProcSample> {
        self.proc().or_else(|| {
            let m = metrics?;
            Some(ProcSample {
                rss: sys::metric(m, "throng_process_resident_memory_bytes")? as u64,
                cpu_secs: sys::metric(m, "throng_process_cpu_seconds_total")?,
            })
        })
    }
}

fn load_scenario(args: &BenchArgs) -> Result<(Scenario, Option<tsung::TsungImport>), BenchError> {
    let (mut sc, imported) = scenario_of(args)?;
    if let Some(h) = args.heartbeat {
        if !(h.is_finite() && h >= 0.0) {
            return Err(BenchError::Scenario(format!(
                "--heartbeat {h}: seconds must be 0 (off) or more"
            )));
        }
        sc.heartbeat = h;
    }
    Ok((sc, imported))
}

fn scenario_of(args: &BenchArgs) -> Result<(Scenario, Option<tsung::TsungImport>), BenchError> {
    if let Some(path) = &args.tsung {
        let text = std::fs::read_to_string(path)?;
        let imp = tsung::import(&text)?;
        return Ok((imp.scenario.clone(), Some(imp)));
    }
    if let Some(path) = &args.scenario {
        let text = std::fs::read_to_string(path)?;
        return Ok((Scenario::from_toml(&text)?, None));
    }
    let n = args.connections.unwrap_or(1000);
    let rate = args
        .arrival_rate
        .or(args.duration.map(|d| n as f64 / d.max(0.001)))
        .unwrap_or(10_000.0);
    let ser = if args.v1 {
        Serializer::V1
    } else {
        Serializer::V2
    };
    let mut sc = scenario::chat(
        n,
        rate,
        args.publishers,
        args.broadcasts,
        args.broadcast_interval,
        ser,
    );
    scenario::delay_publish(&mut sc, args.broadcast_after);
    Ok((sc, None))
}

/// Moves the run into a private network namespace when `--netns` asks
/// (see [`netns`]); returns the TCP hash buckets the run gets and whether
/// they are its own.
fn private_netns(args: &BenchArgs, users: u64) -> Result<(Option<u64>, bool), BenchError> {
    let host = netns::host_buckets();
    let local_only = args.target.is_none() && args.remote_agents == 0;
    let wanted = match args.netns {
        NetnsMode::Off => false,
        NetnsMode::On => {
            if !local_only {
                return Err(BenchError::Scenario(
                    "--netns on needs the embedded server and local agents (no --target, no --remote-agents)".into(),
                ));
            }
            true
        }
        NetnsMode::Auto => {
            local_only && host.is_some_and(|h| netns::overfills(users, h)) && sys::is_root()
        }
    };
    if !wanted {
        return Ok((host, false));
    }
    let buckets = netns::buckets_for(users);
    match netns::enter(buckets) {
        Ok(got) => {
            eprintln!(
                "note: {users} loopback connections are {} sockets for the kernel's TCP hash table ({} buckets here): running the server and agents in a private network namespace with {got} buckets (`--netns off` keeps the host's)",
                users * 2,
                host.map_or("?".into(), |h| h.to_string()),
            );
            Ok((Some(got), true))
        }
        Err(e) if args.netns == NetnsMode::On => {
            Err(BenchError::Scenario(format!("--netns on: {e}")))
        }
        Err(e) => {
            eprintln!("note: staying in the host's network namespace ({e}); TCP lookups slow down past {} connections", host.unwrap_or(0));
            Ok((host, false))
        }
    }
}

fn resolve(target: &str) -> Result<SocketAddr, BenchError> {
    let t = target
        .trim_start_matches("ws://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    t.to_socket_addrs()?
        .next()
        .ok_or_else(|| BenchError::Server(format!("cannot resolve {target}")))
}

/// The server's open connections less the scrape asking: `throng_connections`
/// counts every TCP connection, our `/metrics` request included.
fn server_conns(metrics: &str) -> Option<f64> {
    sys::metric(metrics, "throng_connections").map(|c| (c - 1.0).max(0.0))
}

fn send_all(agents: &mut [AgentLink], msg: &ToAgent) -> Result<(), BenchError> {
    for a in agents.iter_mut() {
        wire::send(&mut a.out, msg)?;
    }
    Ok(())
}

/// Runs `throng bench`.
pub fn run(args: BenchArgs) -> Result<(), BenchError> {
    let (soft, hard) = sys::raise_fd_limit();
    let per_process = hard.saturating_sub(FD_MARGIN).max(1);
    let (mut sc, imported) = load_scenario(&args)?;
    if args.scenario.is_some() || args.tsung.is_some() {
        if let Some(r) = args.arrival_rate {
            sc.set_arrival_rate(r);
        }
        if let Some(d) = args.duration {
            sc.set_duration(d);
        }
        if let Some(n) = args.connections {
            sc.set_max_users(n);
        }
    } else if let Some(d) = args.duration {
        sc.set_duration(d);
    }
    if let Some(imp) = &imported {
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
    // Bound before a move into a private network namespace, so the browser
    // on the host still reaches it.
    let dashboard = (args.dashboard_port != 0).then(|| dashboard::bind(args.dashboard_port));
    let tcp_hash = private_netns(&args, sc.total_users())?;
    // The server side: ours, or a remote one. A multi-worker server is
    // dropped before its Redis (locals drop in reverse order).
    let mut redis: Option<Redis> = None;
    let mut server = None;
    let mut workers = 1usize;
    let target = match &args.target {
        Some(t) => {
            if !sc.sends_heartbeats() {
                eprintln!(
                    "warning: this scenario sends no heartbeats: the server's idle timeout (throng's default 60 s) will close sessions that stay quiet longer"
                );
            }
            resolve(t)?
        }
        None => {
            let users = sc.total_users();
            let idle = if sc.sends_heartbeats() {
                args.idle_timeout
            } else {
                Some(args.idle_timeout.unwrap_or(0))
            };
            let mut extra = args.server_arg.clone();
            if users > per_process {
                // Several server processes on one port, joined through a local
                // Redis; a margin per worker absorbs SO_REUSEPORT's uneven spread.
                let per_worker = hard.saturating_sub(WORKER_MARGIN).max(1);
                workers = users.div_ceil(per_worker) as usize;
                let r = Redis::spawn()?;
                eprintln!(
                    "note: {users} connections are more than one process's open-files limit ({hard}) allows: starting {workers} server workers (`throng serve --workers {workers}`) joined through redis-server on 127.0.0.1:{}",
                    r.port
                );
                extra.extend([
                    "--workers".to_string(),
                    workers.to_string(),
                    "--redis".to_string(),
                    format!("redis://127.0.0.1:{}", r.port),
                ]);
                redis = Some(r);
            }
            let s = Server::spawn(idle, &extra)?;
            let addr = s.addr;
            server = Some(s);
            addr
        }
    };
    let users = sc.total_users();
    // Agents: each holds up to its fd limit less a margin.
    let tsung_caps: Vec<u64> = imported
        .as_ref()
        .map(|i| {
            i.clients
                .iter()
                .map(|c| c.maxusers.unwrap_or(u64::MAX).min(per_process))
                .collect()
        })
        .unwrap_or_default();
    let min_agents = users.div_ceil(per_process).max(1) as u32;
    let mut local = args
        .agents
        .unwrap_or(if tsung_caps.is_empty() {
            min_agents
        } else {
            tsung_caps.len() as u32
        })
        .max(if args.remote_agents > 0 { 0 } else { 1 });
    if local + args.remote_agents < min_agents {
        eprintln!(
            "note: {users} users need {min_agents} agents of {per_process} connections each: using {min_agents}"
        );
        local = min_agents - args.remote_agents;
    }
    if let Some(imp) = &imported {
        let hosts: Vec<&str> = imp.clients.iter().map(|c| c.host.as_str()).collect();
        eprintln!("tsung: clients {hosts:?} mapped onto {local} local agent(s)");
    }
    let total_agents = local + args.remote_agents;
    let ports = sys::sysctl_read("net.ipv4.ip_local_port_range").unwrap_or_default();
    eprintln!(
        "limits: open files {soft}/{hard} (soft/hard) per process -> {per_process} connections per agent and per server process; ephemeral ports {ports} per source address (8 source addresses per agent); {:.1} GiB memory; `throng tune` for more",
        sys::mem_total().unwrap_or(0) as f64 / 1073741824.0
    );
    let capacity = per_process;
    eprintln!(
        "throng bench: {} -> {target} with {total_agents} agent(s)",
        scenario::describe(&sc)
    );

    let listener = TcpListener::bind(&args.listen)?;
    let ctl_addr = listener.local_addr()?;
    let mut children = Spawned(Vec::new());
    let exe = std::env::current_exe()?;
    for _ in 0..local {
        let mut cmd = Command::new(&exe);
        cmd.args(["agent", "--controller", &ctl_addr.to_string()]);
        if std::env::var_os("THRONG_LOG").is_none() {
            cmd.env("THRONG_LOG", "warn");
        }
        children
            .0
            .push(cmd.stdin(Stdio::null()).stdout(Stdio::null()).spawn()?);
    }
    if args.remote_agents > 0 {
        eprintln!(
            "waiting for {} remote agent(s): throng agent --controller {ctl_addr}",
            args.remote_agents
        );
    }
    let (ev_tx, ev_rx) = mpsc::channel();
    let mut agents: Vec<AgentLink> = Vec::new();
    listener.set_nonblocking(true)?;
    let accept_deadline = Instant::now()
        + if args.remote_agents > 0 {
            Duration::from_secs(120)
        } else {
            Duration::from_secs(20)
        };
    while agents.len() < total_agents as usize {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                let mut input = BufReader::new(s.try_clone()?);
                let Some(ToController::Hello { pid, .. }) = wire::recv(&mut input)? else {
                    return Err(BenchError::Protocol("expected hello".into()));
                };
                let idx = agents.len();
                let tx = ev_tx.clone();
                std::thread::spawn(move || loop {
                    match wire::recv::<ToController>(&mut input) {
                        Ok(Some(m)) => {
                            if tx.send(Event::Msg(idx, m)).is_err() {
                                break;
                            }
                        }
                        _ => {
                            let _ = tx.send(Event::Gone(idx));
                            break;
                        }
                    }
                });
                let child = children
                    .0
                    .iter()
                    .position(|c| c.id() == pid)
                    .map(|i| children.0.swap_remove(i));
                agents.push(AgentLink {
                    out: s,
                    pid,
                    child,
                    ready_rss: 0,
                    users: 0,
                    last: None,
                    final_: None,
                    storm_done: false,
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > accept_deadline {
                    return Err(BenchError::Protocol(format!(
                        "only {} of {total_agents} agents connected",
                        agents.len()
                    )));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let host = args.target.clone().unwrap_or_else(|| target.to_string());
    for (i, a) in agents.iter_mut().enumerate() {
        let cap = tsung_caps.get(i).copied().unwrap_or(capacity).min(capacity);
        let plan = Plan {
            index: i as u32,
            agents: total_agents,
            scenario: sc.clone(),
            target,
            host: host.clone(),
            bind_sources: true,
            capacity: cap,
        };
        wire::send(&mut a.out, &ToAgent::Plan(Box::new(plan)))?;
    }
    let mut conn_size = 0;
    let mut ready = 0;
    while ready < agents.len() {
        match ev_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Event::Msg(
                i,
                ToController::Ready {
                    rss,
                    users,
                    conn_size: cs,
                },
            )) => {
                agents[i].ready_rss = rss;
                agents[i].users = users;
                conn_size = cs;
                ready += 1;
            }
            Ok(Event::Gone(i)) => {
                return Err(BenchError::Protocol(format!(
                    "agent {i} left before it was ready"
                )))
            }
            Ok(_) => {}
            Err(_) => {
                return Err(BenchError::Protocol(
                    "agents did not get ready in 20 s".into(),
                ))
            }
        }
    }

    let holders = server
        .as_ref()
        .map(|s| s.holders(workers))
        .unwrap_or_default();
    let mut procs = holders.clone();
    procs.extend(redis.as_ref().map(|r| r.child.id()));
    let fd_holders = if workers > 1 { holders } else { Vec::new() };
    let probe = ServerProbe {
        pid: server.as_ref().map(Server::pid),
        procs,
        fd_baseline: ServerProbe::open_fds(&fd_holders),
        fd_holders,
        metrics: target,
    };
    let mut run = Run::new(&args, &sc, probe, agents, conn_size, server.is_some());
    let live = Arc::new(Mutex::new(json!({"status": "starting"})));
    run.tcp_hash = tcp_hash;
    if let Some(l) = dashboard {
        match l.and_then(|l| dashboard::serve(l, Arc::clone(&live))) {
            Ok(addr) => eprintln!("dashboard: http://{addr}/"),
            Err(e) => eprintln!("dashboard off: port {}: {e}", args.dashboard_port),
        }
    }
    let result = run.execute(&ev_rx, &live);
    // Whatever happened, leave no agent or server behind.
    for a in &mut run.agents {
        if let Some(mut c) = a.child.take() {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match c.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                }
            }
        }
    }
    drop(server);
    let report = result?;
    *live.lock().unwrap_or_else(|p| p.into_inner()) = report.clone();
    print!("{}", report::summary_table(&report));
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)?;
        eprintln!("json: {}", p.display());
    }
    if let Some(p) = &args.report {
        std::fs::write(p, report::html(&report, false))?;
        eprintln!("report: {}", p.display());
    }
    Ok(())
}

/// The state of one run, owned by the main thread.
struct Run {
    sc: Scenario,
    hold: Option<f64>,
    probe: ServerProbe,
    agents: Vec<AgentLink>,
    conn_size: usize,
    embedded: bool,
    timeline: Vec<Sample>,
    start: Instant,
    tty: bool,
    last_metrics: Option<String>,
    trace: Vec<CpuPoint>,
    /// The timeline's sampling period.
    every: Duration,
    /// The kernel's TCP established-hash buckets for this run, and whether
    /// they are a private namespace's.
    tcp_hash: (Option<u64>, bool),
}

/// Which side limited a phase of the run, from CPU use over it.
/// `behind`: (achieved, target) rate when the run fell behind its schedule.
fn bottleneck_of(c: &CpuWindow, what: &str, behind: Option<(f64, f64)>) -> String {
    let busiest_agent = c.agents_pct.iter().copied().fold(0.0, f64::max);
    let server = c.server_pct.unwrap_or(0.0);
    let capacity = c.cores as f64 * 100.0;
    let shares = format!(
        "server {server:.0}% (busiest of its {} threads {:.0}%), agents {} (% of one core, over {:.2} s)",
        c.server_threads,
        c.server_busiest_thread_pct.unwrap_or(0.0),
        c.agents_pct.iter().map(|a| format!("{a:.0}%")).collect::<Vec<_>>().join(" + "),
        c.window_secs
    );
    let machine = c.machine_pct.unwrap_or(c.throng_pct);
    let others = (machine - c.throng_pct).max(0.0);
    if c.server_busiest_thread_pct.unwrap_or(0.0) >= 90.0 {
        format!("server: a server thread was saturated; {shares}")
    } else if busiest_agent >= 90.0 {
        format!("agents: an agent was saturated (add agents); {shares}")
    } else if machine >= 0.8 * capacity || behind.is_some() {
        let side = if server >= c.throng_pct - server {
            "server"
        } else {
            "agents"
        };
        let lag = match behind {
            Some((got, want)) => format!("{what} fell behind its schedule ({got:.0} of {want:.0}/s) with no process saturated; "),
            None => String::new(),
        };
        format!(
            "the machine: {lag}its {} cores were {:.0}% of {:.0}% busy (throng {:.0}%, other processes and the kernel {:.0}%), the {side} using most of throng's share; {shares}",
            c.cores, machine, capacity, c.throng_pct, others
        )
    } else {
        format!("neither saturated: the load set the pace of {what} (machine {machine:.0}% of {capacity:.0}%); {shares}")
    }
}

/// CPU use of one process over a window.
fn cpu_pct(a: f64, b: f64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        (b - a) / secs * 100.0
    }
}

impl Run {
    fn new(
        args: &BenchArgs,
        sc: &Scenario,
        probe: ServerProbe,
        agents: Vec<AgentLink>,
        conn_size: usize,
        embedded: bool,
    ) -> Run {
        Run {
            sc: sc.clone(),
            hold: args.hold,
            probe,
            agents,
            conn_size,
            embedded,
            timeline: Vec::new(),
            start: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            last_metrics: None,
            trace: Vec::new(),
            every: Duration::from_secs_f64(args.sample_interval.clamp(0.05, 60.0)),
            tcp_hash: (None, false),
        }
    }

    fn total(&self) -> Option<Counters> {
        let mut sum = Counters {
            arrivals_done: true,
            ..Default::default()
        };
        for a in &self.agents {
            sum.add(a.last.as_ref()?);
        }
        Some(sum)
    }

    /// Handles agent events for up to `wait`.
    fn pump(&mut self, rx: &Receiver<Event>, wait: Duration) -> Result<(), BenchError> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Event::Msg(i, m)) => match m {
                    ToController::Progress(c) => self.agents[i].last = Some(c),
                    ToController::StormDone { .. } => self.agents[i].storm_done = true,
                    ToController::Final(f) => {
                        self.agents[i].last = Some(f.counters.clone());
                        self.agents[i].final_ = Some(*f);
                    }
                    _ => {}
                },
                Ok(Event::Gone(i)) => {
                    if self.agents[i].final_.is_none() {
                        return Err(BenchError::Protocol(format!(
                            "agent {i} (pid {}) went away mid-run",
                            self.agents[i].pid
                        )));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(()),
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            if Instant::now() >= deadline {
                return Ok(());
            }
        }
    }

    fn cpu_point(&self) -> CpuPoint {
        CpuPoint {
            t: self.start.elapsed().as_secs_f64(),
            server: self.probe.proc().map(|p| p.cpu_secs),
            server_threads: self.probe.threads(),
            agents: self
                .agents
                .iter()
                .map(|a| {
                    a.child
                        .as_ref()
                        .and_then(|c| sys::proc_sample(&c.id().to_string()))
                        .map(|p| p.cpu_secs)
                        .or_else(|| a.last.as_ref().map(|c| c.cpu_secs))
                        .unwrap_or(0.0)
                })
                .collect(),
            controller: sys::proc_sample("self").map(|p| p.cpu_secs).unwrap_or(0.0),
            machine: sys::machine_cpu(),
        }
    }

    /// CPU use from the start of arrivals to `until` seconds (the last join).
    fn cpu_window(&self, from: f64, until: f64) -> CpuWindow {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let first = self
            .trace
            .iter()
            .rev()
            .find(|p| p.t <= from)
            .or(self.trace.first());
        let (Some(a), Some(last)) = (first, self.trace.last()) else {
            return CpuWindow {
                cores,
                ..Default::default()
            };
        };
        let b = self
            .trace
            .iter()
            .find(|p| p.t >= until && p.t > a.t)
            .unwrap_or(last);
        let dt = (b.t - a.t).max(1e-3);
        let pct = |x: f64, y: f64| (y - x) / dt * 100.0;
        let server_pct = a.server.zip(b.server).map(|(x, y)| pct(x, y));
        let busiest = b
            .server_threads
            .iter()
            .map(|(tid, y)| {
                let x = a
                    .server_threads
                    .iter()
                    .find(|(t, _)| t == tid)
                    .map(|p| p.1)
                    .unwrap_or(0.0);
                pct(x, *y)
            })
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let agents_pct: Vec<f64> = a
            .agents
            .iter()
            .zip(&b.agents)
            .map(|(x, y)| pct(*x, *y))
            .collect();
        let controller_pct = pct(a.controller, b.controller);
        let machine_pct = match (a.machine, b.machine) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                Some((b1 - b0) / (t1 - t0) * cores as f64 * 100.0)
            }
            _ => None,
        };
        CpuWindow {
            window_secs: dt,
            throng_pct: server_pct.unwrap_or(0.0) + agents_pct.iter().sum::<f64>() + controller_pct,
            controller_pct,
            machine_pct,
            server_pct,
            server_busiest_thread_pct: busiest,
            server_threads: b.server_threads.len(),
            agents_pct,
            cores,
        }
    }

    /// Takes the per-second sample.
    fn sample(&mut self, prev: &mut Option<(Instant, Counters, Option<ProcSample>)>) {
        let Some(c) = self.total() else { return };
        let now = Instant::now();
        let metrics = self.probe.metrics();
        let srv = self.probe.sample(metrics.as_deref());
        let mut s = Sample {
            t: now.duration_since(self.start).as_secs_f64(),
            users: c.active(),
            connected: c.open,
            joined: c.joined,
            errors: c.errors.total(),
            // Counting workers' open files costs ~20 ms per 19,000, so the
            // per-second timeline leaves it out: only the plateau and the
            // storm count them.
            server_conns: if self.probe.fd_holders.is_empty() {
                metrics.as_deref().and_then(server_conns)
            } else {
                None
            },
            server_rss_mb: srv.map(|p| p.rss as f64 / 1048576.0),
            agents_rss_mb: c.rss as f64 / 1048576.0,
            ..Default::default()
        };
        if let Some((t0, c0, s0)) = prev.as_ref() {
            let dt = now.duration_since(*t0).as_secs_f64().max(1e-3);
            s.conn_per_sec = (c.connected - c0.connected) as f64 / dt;
            s.msgs_out_per_sec = (c.msgs_out - c0.msgs_out) as f64 / dt;
            s.msgs_in_per_sec = (c.msgs_in - c0.msgs_in) as f64 / dt;
            s.agents_cpu_pct = cpu_pct(c0.cpu_secs, c.cpu_secs, dt);
            if let (Some(a), Some(b)) = (s0, srv) {
                s.server_cpu_pct = Some(cpu_pct(a.cpu_secs, b.cpu_secs, dt));
            }
        }
        self.last_metrics = metrics;
        *prev = Some((now, c, srv));
        self.timeline.push(s);
    }

    fn progress_line(&self, phase: &str) {
        let Some(c) = self.total() else { return };
        let target = self.sc.total_users().max(1);
        let width = 30;
        let done = ((c.started as f64 / target as f64) * width as f64).round() as usize;
        let rate = self.timeline.last().map(|s| s.conn_per_sec).unwrap_or(0.0);
        let line = format!(
            "{phase:<7} [{}{}] {}/{} users  open {}  joined {}  {:.0} conn/s  errors {}",
            "#".repeat(done.min(width)),
            "-".repeat(width - done.min(width)),
            c.started,
            target,
            c.open,
            c.joined,
            rate,
            c.errors.total()
        );
        // A closed stderr must not stop the run: ignore write errors here.
        let mut err = std::io::stderr().lock();
        let _ = if self.tty {
            write!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
    }

    fn snapshot(&self, status: &str) -> Value {
        json!({
            "status": status,
            "scenario": self.sc.name,
            "connections": {"target": self.sc.total_users()},
            "counters": self.total(),
            "timeline": self.timeline,
        })
    }

    fn execute(
        &mut self,
        rx: &Receiver<Event>,
        live: &Arc<Mutex<Value>>,
    ) -> Result<Value, BenchError> {
        let publish = |live: &Arc<Mutex<Value>>, v: Value| {
            *live.lock().unwrap_or_else(|p| p.into_inner()) = v;
        };
        // Baseline: the server with no connections.
        let base_metrics = self.probe.metrics();
        let server_base = self.probe.sample(base_metrics.as_deref());
        let slab_base = sys::slab();
        if base_metrics.is_none() {
            eprintln!(
                "warning: no /metrics from the server at {}: server-side figures will be missing",
                self.probe.metrics
            );
        }
        let controller_cpu0 = sys::proc_sample("self").map(|p| p.cpu_secs).unwrap_or(0.0);
        self.start = Instant::now();
        let start_rt = sys::realtime_ns();
        self.trace.push(self.cpu_point());
        send_all(&mut self.agents, &ToAgent::Start)?;
        let mut prev = Some((self.start, Counters::default(), server_base));
        self.timeline.push(Sample {
            server_rss_mb: server_base.map(|p| p.rss as f64 / 1048576.0),
            server_conns: self.probe.conns(base_metrics.as_deref()),
            ..Default::default()
        });
        let mut next_trace = self.start + Duration::from_millis(100);
        let mut next_sample = self.start + self.every;
        let mut next_line = self.start;
        let s = &self.sc;
        let settle_limit = s.ramp_secs() + s.connect_timeout + s.reply_timeout + 10.0;
        // 1-2. Ramp-up until settled.
        loop {
            self.pump(rx, Duration::from_millis(50))?;
            let now = Instant::now();
            if let Some(c) = self.total() {
                if c.arrivals_done && c.connecting == 0 && c.awaiting == 0 {
                    break;
                }
            }
            if now >= next_trace {
                next_trace += Duration::from_millis(100);
                self.trace.push(self.cpu_point());
            }
            if now >= next_sample {
                next_sample += self.every;
                self.sample(&mut prev);
                publish(live, self.snapshot("ramp-up"));
            }
            if now >= next_line {
                next_line = now
                    + if self.tty {
                        Duration::from_millis(200)
                    } else {
                        Duration::from_secs(1)
                    };
                self.progress_line("ramp-up");
            }
            if now.duration_since(self.start).as_secs_f64() > settle_limit {
                eprintln!("\nwarning: the ramp-up did not settle in {settle_limit:.0} s; going on");
                break;
            }
        }
        self.trace.push(self.cpu_point());
        let ramp_end = Instant::now();
        let ramp_secs = ramp_end.duration_since(self.start).as_secs_f64();
        self.progress_line("settled");
        if self.tty {
            eprintln!();
        }
        // Plateau: let the server finish its work, then measure idle memory.
        self.pump(rx, Duration::from_millis(1000))?;
        let plateau_metrics = self.probe.metrics();
        let server_plateau = self.probe.sample(plateau_metrics.as_deref());
        let slab_plateau = sys::slab();
        let plateau = self.total().unwrap_or_default();
        let plateau_server_conns = self.probe.conns(plateau_metrics.as_deref());
        let agent_rss_delta: i64 = self
            .agents
            .iter()
            .map(|a| a.last.as_ref().map(|c| c.rss as i64).unwrap_or(0) - a.ready_rss as i64)
            .sum();
        // 3. Release and hold.
        send_all(&mut self.agents, &ToAgent::Release)?;
        let hold_start = Instant::now();
        let hold_t0 = self.start.elapsed().as_secs_f64();
        self.trace.push(self.cpu_point());
        let parks_forever = self.sc.roles.iter().any(|r| {
            r.session
                .iter()
                .any(|s| matches!(s, crate::scenario::Step::Hold))
        });
        let hold_limit = self.hold.unwrap_or(if parks_forever { 60.0 } else { 10.0 });
        let mut last_recv = (u64::MAX, Instant::now());
        loop {
            self.pump(rx, Duration::from_millis(50))?;
            let now = Instant::now();
            if now >= next_sample {
                next_sample += self.every;
                self.sample(&mut prev);
                publish(live, self.snapshot("hold"));
            }
            if now >= next_trace {
                next_trace = now + Duration::from_millis(100);
                self.trace.push(self.cpu_point());
            }
            let held = now.duration_since(hold_start).as_secs_f64();
            if held >= hold_limit {
                break;
            }
            // Sessions that park: done once everyone is parked and broadcasts stop arriving.
            if self.hold.is_none() && held > 0.3 {
                if let Some(c) = self.total() {
                    if c.bcast_recv != last_recv.0 {
                        last_recv = (c.bcast_recv, now);
                    }
                    let live_sessions = c.active();
                    let parked = live_sessions == c.holding;
                    let expected = c.bcast_sent * c.open;
                    let delivered = c.bcast_recv >= expected
                        || now.duration_since(last_recv.1) > Duration::from_secs(3);
                    if live_sessions == 0 || (parked && delivered) {
                        break;
                    }
                }
            }
        }
        self.trace.push(self.cpu_point());
        let hold_t1 = self.start.elapsed().as_secs_f64();
        let before_storm = self.total().unwrap_or_default();
        // 4. The disconnect storm.
        let storm_cpu0 = self.probe.sample(None).map(|p| p.cpu_secs);
        let storm_metrics0 = if storm_cpu0.is_none() {
            self.probe.metrics()
        } else {
            None
        };
        let storm_cpu0 = storm_cpu0.or_else(|| {
            storm_metrics0
                .as_deref()
                .and_then(|m| sys::metric(m, "throng_process_cpu_seconds_total"))
        });
        // With several workers the connections are counted from their open
        // files: the storm is over when as many files are gone as the agents
        // held connections (the workers' other files, such as their Redis
        // connections, stay).
        let storm_fd_floor = (!self.probe.fd_holders.is_empty()).then(|| {
            ServerProbe::open_fds(&self.probe.fd_holders).saturating_sub(before_storm.open)
        });
        let storm_start = Instant::now();
        send_all(&mut self.agents, &ToAgent::Storm)?;
        let mut storm_secs = None;
        let mut storm_cpu = None;
        // 30 s, and a second more per 25,000 connections (a million took ~24 s).
        let storm_deadline = storm_start + Duration::from_secs(30 + before_storm.open / 25_000);
        // Between checks, at least as long as a check took: counting open
        // files never takes more than half of the controller's time.
        let mut pause = Duration::from_millis(5);
        let metrics_ok = base_metrics.is_some();
        while Instant::now() < storm_deadline {
            let check = Instant::now();
            // Workers' open files need no /metrics (which a saturated machine
            // may not answer in time); a single server's count does.
            let (drained, metrics) = match storm_fd_floor {
                Some(floor) => (ServerProbe::open_fds(&self.probe.fd_holders) <= floor, None),
                None if metrics_ok => match self.probe.metrics() {
                    Some(m) => (server_conns(&m).unwrap_or(1.0) <= 0.0, Some(m)),
                    None => break,
                },
                None => break,
            };
            pause = pause.max(check.elapsed());
            if drained {
                storm_secs = Some(storm_start.elapsed().as_secs_f64());
                let cpu1 = self.probe.proc().map(|p| p.cpu_secs).or_else(|| {
                    metrics.and_then(|m| sys::metric(&m, "throng_process_cpu_seconds_total"))
                });
                if let (Some(a), Some(b)) = (storm_cpu0, cpu1) {
                    storm_cpu = Some(b - a);
                }
                break;
            }
            self.pump(rx, pause)?;
        }
        while !self.agents.iter().all(|a| a.storm_done) && Instant::now() < storm_deadline {
            self.pump(rx, Duration::from_millis(20))?;
        }
        self.sample(&mut prev);
        // 5. Collect.
        send_all(&mut self.agents, &ToAgent::Finish)?;
        let collect_deadline = Instant::now() + Duration::from_secs(30);
        while !self.agents.iter().all(|a| a.final_.is_some()) {
            if Instant::now() > collect_deadline {
                return Err(BenchError::Protocol(
                    "agents did not send their final report".into(),
                ));
            }
            self.pump(rx, Duration::from_millis(50))?;
        }
        let controller_cpu =
            sys::proc_sample("self").map(|p| p.cpu_secs).unwrap_or(0.0) - controller_cpu0;
        let total_secs = self.start.elapsed().as_secs_f64();
        let mut hists = Hists::default();
        let mut bcasts = BcastTable::new();
        let mut fin = Counters {
            arrivals_done: true,
            ..Default::default()
        };
        let mut slots = crate::engine::Slots::default();
        for a in &self.agents {
            let f = a.final_.as_ref().expect("checked above");
            slots.merge(&f.slots);
            hists.merge_wire(&f.hists);
            merge_bcasts(&mut bcasts, &f.bcasts);
            fin.add(&f.counters);
        }
        // Broadcasts: per broadcast, publish to last receipt.
        let mut lasts: Vec<f64> = bcasts
            .values()
            .filter(|b| b.sent_ns > 0 && b.recv > 0)
            .map(|b| b.last_ns.saturating_sub(b.sent_ns) as f64 / 1e6)
            .collect();
        lasts.sort_by(|a, b| a.total_cmp(b));
        let sent = bcasts.values().filter(|b| b.sent_ns > 0).count() as u64;
        let mut per_broadcast: Vec<(&u64, &crate::stats::BcastSeen)> =
            bcasts.iter().filter(|(_, b)| b.sent_ns > 0).collect();
        per_broadcast.sort_by_key(|(_, b)| b.sent_ns);
        let first_ns = per_broadcast.first().map(|(_, b)| b.sent_ns).unwrap_or(0);
        let per_broadcast: Vec<Value> = per_broadcast
            .iter()
            .take(1000)
            .map(|(k, b)| {
                json!({
                    "publisher": *k >> 32,
                    "ref": *k & 0xFFFF_FFFF,
                    "sent_at_ms": (b.sent_ns - first_ns) as f64 / 1e6,
                    "receivers": b.recv,
                    "last_ms": if b.recv > 0 { b.last_ns.saturating_sub(b.sent_ns) as f64 / 1e6 } else { 0.0 },
                })
            })
            .collect();
        let receivers: u64 = bcasts.values().map(|b| b.recv).sum();
        let bsum = summarize(&hists.broadcast);
        let join = summarize(&hists.join);
        let connect = summarize(&hists.connect);
        let reply = summarize(&hists.reply);
        let per_sec = if fin.last_join_secs > 0.0 {
            fin.joined as f64 / fin.last_join_secs
        } else {
            0.0
        };
        let open = plateau.open.max(1) as f64;
        let server_bytes = match (server_base, server_plateau) {
            (Some(a), Some(b)) if plateau.open > 0 => Some((b.rss as f64 - a.rss as f64) / open),
            _ => None,
        };
        let kernel_bytes = match (slab_base, slab_plateau) {
            (Some(a), Some(b)) if plateau.open > 0 => Some((b as f64 - a as f64) / open),
            _ => None,
        };
        let agent_bytes = if plateau.open > 0 {
            Some(agent_rss_delta as f64 / open)
        } else {
            None
        };
        // Broadcasts: from the first publish to the last receipt, on the trace's clock.
        let (bc_from, bc_until) = match (
            bcasts
                .values()
                .filter(|b| b.sent_ns > 0)
                .map(|b| b.sent_ns)
                .min(),
            bcasts.values().map(|b| b.last_ns).max(),
        ) {
            (Some(a), Some(b)) if b > a => (
                (a.saturating_sub(start_rt) as f64 / 1e9).max(hold_t0),
                (b.saturating_sub(start_rt) as f64 / 1e9).min(hold_t1),
            ),
            _ => (hold_t0, hold_t1),
        };
        let hold_cpu = self.cpu_window(bc_from, bc_until);
        // The best second of handshakes and joins, from the agents' 100 ms slots.
        let peak_rate = crate::engine::Slots::peak_per_sec(&slots.connects, 10);
        let peak_joins = crate::engine::Slots::peak_per_sec(&slots.joins, 10);
        let cpu = self.cpu_window(
            0.0,
            if fin.last_join_secs > 0.0 {
                fin.last_join_secs
            } else {
                ramp_secs
            },
        );
        let agent_cpu: Vec<Value> = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let f = &a.final_.as_ref().expect("checked").counters;
                json!({
                    "index": i,
                    "pid": a.pid,
                    "users": a.users,
                    "cpu_secs": f.cpu_secs,
                    "cpu_pct_ramp": cpu.agents_pct.get(i),
                    "rss_bytes": a.last.as_ref().map(|c| c.rss).unwrap_or(0),
                })
            })
            .collect();
        let target_rate = self
            .sc
            .phases
            .first()
            .map(|p| p.arrival_rate)
            .unwrap_or(0.0);
        let behind = (self.sc.phases.len() == 1 && per_sec < 0.9 * target_rate)
            .then_some((per_sec, target_rate));
        let bottleneck = bottleneck_of(&cpu, "the ramp-up", behind);
        let server_cpu_ramp = cpu.server_pct;
        let last_metrics = self.last_metrics.as_deref();
        let m = |name: &str| {
            plateau_metrics
                .as_deref()
                .or(last_metrics)
                .and_then(|t| sys::metric(t, name))
        };
        let expected_bcast = self.sc.expected_broadcasts();
        let report = json!({
            "scenario": {
                "name": self.sc.name,
                "description": scenario::describe(&self.sc),
                "serializer": match self.sc.serializer { Serializer::V1 => "v1", Serializer::V2 => "v2" },
                "heartbeat_secs": self.sc.heartbeat,
            },
            "connections": {
                "target": self.sc.total_users(),
                "started": fin.started,
                "connected": fin.connected,
                "joined": fin.joined,
                "open_at_plateau": plateau.open,
                "server_conns_at_plateau": plateau_server_conns,
            },
            "errors": {
                "total": fin.errors.total(),
                "by_kind": fin.errors.by_kind().into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
            },
            "arrival": {
                "target_per_sec": self.sc.phases.first().map(|p| p.arrival_rate),
                "per_sec": per_sec,
                // The best second; a ramp-up shorter than a second has none, so its average stands.
                "peak_per_sec": peak_joins.max(per_sec),
                "peak_connects_per_sec": peak_rate,
                "joins_per_100ms": slots.joins,
                "peak_1s_sample_per_sec": self.timeline.iter().map(|s| s.conn_per_sec).fold(0.0, f64::max),
                "ramp_secs": ramp_secs,
            },
            "connect": connect,
            "join": join,
            "reply": reply,
            "broadcast": {
                "sent": sent,
                "expected_sent": expected_bcast,
                "receivers": receivers,
                "p50_ms": bsum.p50_ms,
                "p90_ms": bsum.p90_ms,
                "p99_ms": bsum.p99_ms,
                "max_ms": bsum.max_ms,
                "mean_ms": bsum.mean_ms,
                "last_ms": lasts.last().copied().unwrap_or(0.0),
                "last_p50_ms": lasts.get(lasts.len() / 2).copied().unwrap_or(0.0),
                "per_broadcast": per_broadcast,
            },
            "messages": {
                "out": fin.msgs_out,
                "in": fin.msgs_in,
                "out_per_sec": fin.msgs_out as f64 / total_secs,
                "in_per_sec": fin.msgs_in as f64 / total_secs,
                "server_in_total": m("throng_messages_in_total"),
                "server_out_total": m("throng_messages_out_total"),
                "server_broadcasts_total": m("throng_broadcasts_total"),
            },
            "server": {
                "embedded": self.embedded,
                "address": self.probe.metrics.to_string(),
                "pid": self.probe.pid,
                "rss_baseline": server_base.map(|s| s.rss),
                "rss_plateau": server_plateau.map(|s| s.rss),
                "bytes_per_conn": server_bytes,
                "cpu_pct_ramp": server_cpu_ramp,
                "cpu_secs": server_plateau.zip(server_base).map(|(b, a)| b.cpu_secs - a.cpu_secs),
                "channels_joined": m("throng_channels_joined"),
            },
            "agent": {
                "count": self.agents.len(),
                "bytes_per_conn": agent_bytes,
                "conn_struct_bytes": self.conn_size,
                "processes": agent_cpu,
            },
            "kernel": {
                "slab_baseline": slab_base,
                "slab_plateau": slab_plateau,
                "bytes_per_conn": kernel_bytes,
                "note": "machine-wide Slab growth per connection: both ends of each loopback connection when agents are local",
                "tcp_ehash_buckets": self.tcp_hash.0,
                "private_netns": self.tcp_hash.1,
            },
            "controller": { "cpu_secs": controller_cpu },
            "storm": {
                "connections": before_storm.open,
                "secs_to_zero": storm_secs,
                "server_cpu_secs": storm_cpu,
            },
            "bottleneck": bottleneck,
            "cpu": {"ramp": cpu, "broadcasts": hold_cpu},
            "broadcast_bottleneck": if sent > 0 { Some(bottleneck_of(&hold_cpu, "broadcasts", None)) } else { None },
            "duration_secs": total_secs,
            "hold_secs": storm_start.duration_since(hold_start).as_secs_f64(),
            "percentiles": {
                "connect": crate::stats::percentile_curve(&hists.connect),
                "join": crate::stats::percentile_curve(&hists.join),
                "broadcast": crate::stats::percentile_curve(&hists.broadcast),
            },
            "timeline": self.timeline,
            "status": "done",
        });
        let _ = std::io::stderr().flush();
        Ok(report)
    }
}
