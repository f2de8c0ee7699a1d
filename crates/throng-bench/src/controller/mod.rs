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
//! `presence` its presence part.
//!
//! Threads: the main thread owns all state; one reader thread per agent
//! forwards its lines over a channel; the dashboard thread only reads the
//! JSON snapshot behind a mutex that the main thread replaces every sample.

mod agents;
mod arrival;
mod children;
mod cpu;
mod floor;
mod launch;
mod outcome;
mod presence;
mod probe;
mod run;
mod timeline;
mod verdict;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::agents::Agents;
use self::floor::{Train, Writers};
pub(crate) use self::launch::server_workers;
use self::launch::{Embedded, LocalAgents};
use self::probe::ServerProbe;
use self::run::Run;
use crate::agent::FD_MARGIN;
use crate::cli::FloorMode;
use crate::cli::Load;
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

/// Runs `throng bench`.
pub fn run(args: BenchArgs) -> Result<(), BenchError> {
    children::kill_on_signal()?;
    let (soft, hard) = sys::raise_fd_limit();
    let per_process = hard.saturating_sub(FD_MARGIN).max(1);
    let Load {
        scenario: sc,
        tsung: imported,
        adaptive,
    } = args.load()?;
    let floor_on = match args.floor {
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
    };
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
    let users = sc.total_users();
    // Bound before a move into a private network namespace, so the browser
    // on the host still reaches it.
    let dashboard = (args.dashboard_port != 0).then(|| dashboard::bind(args.dashboard_port));
    let local_only = args.target.is_none() && args.remote_agents == 0;
    // Read on the host: the global settings (tcp_mem, netdev_max_backlog)
    // are not shown inside a private network namespace.
    let os = tune::os_settings(users);
    let tcp = netns::for_run(args.netns, local_only, users)?;
    // The server side: ours, or a remote one.
    let mut presence_args = Vec::new();
    let (embedded, target) = match &args.target {
        Some(t) => {
            if !sc.sends_heartbeats() {
                eprintln!(
                    "warning: this scenario sends no heartbeats: the server's idle timeout (throng's default 60 s) will close sessions that stay quiet longer"
                );
            }
            (None, resolve(t)?)
        }
        None => {
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
            presence_args = presence;
            let e = Embedded::start(users, per_process, hard, idle, &server_args)?;
            let addr = e.server.addr;
            (Some(e), addr)
        }
    };
    // Agents: each holds up to its fd limit less a margin; a Tsung client
    // caps its agent at its maxusers.
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
    // The OS settings this run's size needs: offered, not imposed.
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
    eprintln!(
        "throng bench: {} -> {target} with {total_agents} agent(s)",
        scenario::describe(&sc, adaptive)
    );

    let listener = TcpListener::bind(&args.listen)?;
    let ctl_addr = listener.local_addr()?;
    let token = match &args.token {
        Some(t) if !t.is_empty() => t.clone(),
        _ => wire::new_token()?,
    };
    let mut children = LocalAgents::spawn(local, ctl_addr, &token, false)?;
    if args.remote_agents > 0 {
        let shown = if args.token.is_some() {
            "<the --token given>".to_string()
        } else {
            token.clone()
        };
        eprintln!(
            "waiting for {} remote agent(s): {}={shown} throng agent --controller {ctl_addr}",
            args.remote_agents,
            wire::TOKEN_ENV
        );
    }
    let wait = Duration::from_secs(if args.remote_agents > 0 { 120 } else { 20 });
    let mut agents = Agents::accept(
        &listener,
        total_agents as usize,
        &mut children,
        &token,
        Role::Agent,
        wait,
    )?;
    let host = args.target.clone().unwrap_or_else(|| target.to_string());
    for i in 0..agents.len() {
        let plan = Plan {
            index: i as u32,
            agents: total_agents,
            scenario: sc.clone(),
            target,
            host: host.clone(),
            bind_sources: true,
            capacity: tsung_caps
                .get(i)
                .copied()
                .unwrap_or(per_process)
                .min(per_process),
            adaptive,
        };
        agents.send(i, &ToAgent::Plan(Box::new(plan)))?;
    }
    let conn_size = agents.await_ready()?;
    // The floor writers: one per server process, as many threads as its shards.
    let writers = if floor_on {
        let processes = embedded.as_ref().map_or(1, |e| e.workers);
        let threads = shards_per_process(&args.server_arg, processes);
        let mut children = LocalAgents::spawn(processes as u32, ctl_addr, &token, true)?;
        let links = Agents::accept(
            &listener,
            processes,
            &mut children,
            &token,
            Role::FloorWriter,
            Duration::from_secs(20),
        )?;
        // The built-in scenario's one publisher: its broadcasts' schedule.
        let builtin = args.scenario.is_none() && args.tsung.is_none();
        let train = (builtin && args.publishers == 1 && (2..=10).contains(&args.broadcasts))
            .then_some(Train {
                rounds: args.broadcasts,
                interval: args.broadcast_interval,
            });
        Some(Writers {
            links,
            threads,
            frame: FloorFrame::of(&sc),
            train,
        })
    } else {
        None
    };

    let probe = match &embedded {
        Some(e) => ServerProbe::new(
            target,
            Some(e.server.pid()),
            e.holders(),
            e.workers,
            e.redis.as_ref().map(|r| r.pid()),
        ),
        None => ServerProbe::new(target, None, Vec::new(), 1, None),
    };
    let live = Arc::new(Mutex::new(r#"{"status":"starting"}"#.to_string()));
    let mut run = Run::new(
        &args,
        sc,
        adaptive,
        probe,
        agents,
        writers,
        os,
        conn_size,
        tcp,
        Arc::clone(&live),
    );
    run.presence_args = presence_args;
    if let Some(l) = dashboard {
        match l.and_then(|l| dashboard::serve(l, Arc::clone(&live))) {
            Ok(addr) => eprintln!("dashboard: http://{addr}/"),
            Err(e) => eprintln!("dashboard off: port {}: {e}", args.dashboard_port),
        }
    }
    let result = run.execute();
    let _ = std::io::stderr().flush();
    // Whatever happened, leave no agent or server behind.
    run.agents.reap();
    drop(embedded);
    let report = result?;
    let json = serde_json::to_string(&report)?;
    run.publish(json.clone());
    print!("{}", summary::table(&report));
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)?;
        eprintln!("json: {}", p.display());
    }
    if let Some(p) = &args.report {
        std::fs::write(p, html::page(&json, false))?;
        eprintln!("report: {}", p.display());
    }
    Ok(())
}
