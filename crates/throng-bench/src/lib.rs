//! # throng-bench
//!
//! The load generator that reproduces Phoenix's "Road to 2 Million WebSocket
//! Connections" (which used Tsung) against throng, or any Phoenix Channels
//! server: `throng bench`, `throng agent` and `throng tune`.
//!
//! Layout:
//! - [`cli`]: the flags of `throng bench`, `agent` and `tune`, and
//!   [`BenchArgs::load`], the one place the flags shape the scenario.
//! - [`scenario`]: scenarios (TOML), their steps, message templates and the
//!   flat program an agent runs per role; [`tsung`]: Tsung XML import
//!   (`--tsung phoenix.xml`).
//! - [`plan`]: an agent's orders; [`wire`]: the controller <-> agent
//!   protocol (JSON lines over TCP).
//! - [`engine`]: the lean client engine: one mio loop, a slab of small
//!   connection structs, one shared read buffer, one timer heap.
//! - [`agent`]: a process running one engine on a controller's orders.
//! - [`floor`]: the machine's own cost of a broadcast's fan-out, measured
//!   in the same run by minimal writers (no server logic), so a broadcast
//!   reads as a ratio to it: the frame and the writers' orders;
//!   [`writer`]: the writer process.
//! - [`controller`]: `throng bench`: server and agents, the phases of a
//!   run, merged measurements; [`stats`] (and [`hist`]): counters, HDR histograms and
//!   broadcast receipts; [`slots`]: events per 100 ms; [`presence`]: the
//!   presence rule a run turns on, presence traffic and the time until a
//!   join is visible to every subscriber.
//! - [`hooks`]: the hooks scenario (`--hooks`): joins through an app
//!   backend's join hook against joins without, its built-in backend.
//! - [`storm`]: the reconnect storm (`--storm`): clients on topics that
//!   keep history cut at once and rejoining with `since`, each counting
//!   every number once, in order; its client processes and publisher.
//!   [`join`]: one socket's connect (over TLS with `--tls`), upgrade and
//!   `phx_join` over tokio, for the closed-loop scenarios.
//! - [`handshakes`]: the handshake rounds (`--tls`, `--compare-plain`):
//!   new clients and the same clients returning with their TLS tickets,
//!   for the server's CPU per connect of each.
//! - [`soak`]: the soak (`--soak DURATION`): a steady population churned
//!   for a long time against a server whose memory, open files, threads
//!   and every `/metrics` gauge are sampled once a second and judged for
//!   growth; its client processes, server API calls and verdicts.
//! - [`report`]: the typed [`report::Report`], its JSON, terminal summary
//!   and offline HTML; [`dashboard`]: the live page on port 8091.
//! - [`tune`]: OS settings and the limits that cap a run; [`netns`]: a
//!   private network namespace with a TCP hash table sized for the run.
//! - [`sys`]: rlimits, `/proc` samples, sysctls, socket and scheduling
//!   options, namespaces, a tiny HTTP GET; the crate's only `unsafe` code
//!   (libc calls), allowed function by function where the workspace denies it.
//! - [`jwt`]: `--auth jwt`'s connect tokens, one user per socket, made at
//!   connect time into a reused buffer.
//! - [`error`]: the crate's one error type.
//!
//! Design decisions:
//! - **A process per ~19,000 connections.** The open-files hard limit is per
//!   process, so the controller spawns as many agents (`current_exe agent`)
//!   as the connections need; each raises its soft limit to the hard one.
//! - **The load is split, the arrival order is not.** Agent `k` of `K` starts
//!   global users `k, k+K, ...` at `index / rate`, so all agents together
//!   keep one arrival schedule, and roles (publisher, listener) are a pure
//!   function of a user's index.
//! - **Merge, never average.** Agents ship HDR histograms and per-broadcast
//!   receipts; the controller merges them and computes percentiles and the
//!   time until a broadcast's last receiver from the merged data.
//! - **The clock for broadcasts is CLOCK_REALTIME**, stamped into the
//!   message body by the publisher, read by every receiver on the same
//!   machine: one-way latency without a reply.
//! - **The bench must not blame the server for its own overload.** Users
//!   arrive at the rate the run sustains (adaptive arrival, unless a
//!   schedule is given), each error says whose it is, and a broadcast is
//!   read against the floor: the same fan-out on the same machine with no
//!   server at all, measured in the same run.
//!
//! ## Layers
//! A module uses only modules in a layer below it
//! (`scripts/check-import-cycles.py` checks there is no cycle):
//! 1. `error`, `hist`, `jwt`, `slots`, `sys`: plain types and OS reads
//! 2. `hooks`, `presence`, `storm`, `soak`
//! 3. `scenario`, `stats`
//! 4. `floor`, `plan` (an agent's orders, its TLS settings included), `report`, `tsung`
//! 5. `dashboard`, `engine`, `wire`
//! 6. `agent`, `cli`
//! 7. `tune`, `writer`
//! 8. `netns`
//! 9. `controller`

pub mod agent;
pub mod cli;
pub mod controller;
pub mod dashboard;
pub mod engine;
pub mod error;
pub mod floor;
pub mod handshakes;
pub mod hist;
pub mod hooks;
pub mod join;
pub mod jwt;
pub mod netns;
pub mod plan;
pub mod presence;
pub mod report;
pub mod scenario;
pub mod slots;
pub mod soak;
pub mod stats;
pub mod storm;
pub mod sys;
pub mod tsung;
pub mod tune;
pub mod wire;
pub mod writer;

pub use cli::{AgentArgs, BenchArgs, FloorMode, LoadArgs, NetnsMode, StormHistory, TuneArgs};
pub use error::BenchError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `throng bench`.
pub fn run_bench(args: BenchArgs) -> Result<(), BoxError> {
    controller::run(args).map_err(Into::into)
}

/// `throng agent`.
pub fn run_agent(args: AgentArgs) -> Result<(), BoxError> {
    if let Some(orders) = &args.storm_client {
        return storm::client::run(orders).map_err(Into::into);
    }
    if let Some(orders) = &args.soak_client {
        return soak::client::run(orders).map_err(Into::into);
    }
    let (Some(controller), Some(token)) = (args.controller, args.token.as_deref()) else {
        return Err("throng agent needs --controller and its token (printed by `throng bench --remote-agents N`)".into());
    };
    if args.floor_writer {
        return writer::run_writer(controller, token).map_err(Into::into);
    }
    agent::run(controller, token).map_err(Into::into)
}

/// `throng tune`.
pub fn run_tune(args: TuneArgs) -> Result<(), BoxError> {
    tune::run(args.apply, args.revert, args.connections).map_err(Into::into)
}
