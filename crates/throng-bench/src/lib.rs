//! # throng-bench
//!
//! The load generator that reproduces Phoenix's "Road to 2 Million WebSocket
//! Connections" (which used Tsung) against throng, or any Phoenix Channels
//! server: `throng bench`, `throng agent` and `throng tune`.
//!
//! Layout:
//! - [`scenario`]: scenarios (TOML), their steps, and the flat program an
//!   agent runs per role; [`tsung`]: Tsung XML import (`--tsung phoenix.xml`).
//! - [`engine`]: the lean client engine: one mio loop, a slab of small
//!   connection structs, one shared read buffer, one timer heap.
//! - [`agent`]: a process running one engine on a controller's orders;
//!   [`wire`]: the controller <-> agent protocol (JSON lines over TCP).
//! - [`controller`]: `throng bench`: server and agents, phases of a run,
//!   merged measurements; [`stats`]: counters and HDR histograms.
//! - [`report`]: terminal summary and offline HTML; [`dashboard`]: the live
//!   page on port 8091; [`tune`]: OS settings and the limits that cap a run.
//! - [`sys`]: rlimits, `/proc` samples, a socket option, a tiny HTTP GET.
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

pub mod agent;
pub mod controller;
pub mod dashboard;
pub mod engine;
pub mod error;
pub mod netns;
pub mod plan;
pub mod report;
pub mod scenario;
pub mod slots;
pub mod stats;
pub mod sys;
pub mod tsung;
pub mod tune;
pub mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;

pub use error::BenchError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `throng bench`: run a load test (the controller).
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Users (connections) in all: the built-in chat scenario's size, or the
    /// total a --scenario/--tsung run is scaled to.
    #[arg(long, visible_alias = "max-users")]
    pub connections: Option<u64>,
    /// Broadcasts each publisher sends once everyone has joined (built-in scenario).
    #[arg(long, default_value_t = 0)]
    pub broadcasts: u32,
    /// Publishers (built-in scenario); everyone else listens.
    #[arg(long, default_value_t = 1)]
    pub publishers: u64,
    /// Seconds between one publisher's broadcasts.
    #[arg(long, default_value_t = 0.1)]
    pub broadcast_interval: f64,
    /// Seconds the publishers wait, once everyone has joined, before their
    /// first broadcast (built-in scenario): hold the crowd, then broadcast.
    #[arg(long, default_value_t = 0.0)]
    pub broadcast_after: f64,
    /// New users per second (default 10000 for the built-in scenario).
    #[arg(long)]
    pub arrival_rate: Option<f64>,
    /// Ramp-up seconds (all arrival phases together).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds between each connection's heartbeats, overriding the scenario's
    /// (built-in: 30, as phoenix.js; Tsung imports: 0). 0 sends none, as the
    /// seed's Tsung run did; the embedded server then gets no idle timeout.
    #[arg(long)]
    pub heartbeat: Option<f64>,
    /// Use the v1 serializer (JSON objects) in the built-in scenario.
    #[arg(long)]
    pub v1: bool,
    /// A TOML scenario (see scenarios/README.md).
    #[arg(long, conflicts_with = "tsung")]
    pub scenario: Option<PathBuf>,
    /// A Tsung XML config to run (e.g. scenarios/phoenix.xml).
    #[arg(long)]
    pub tsung: Option<PathBuf>,
    /// A running server (HOST:PORT) instead of the embedded `throng serve`.
    #[arg(long)]
    pub target: Option<String>,
    /// Local agent processes (default: as many as the connections need).
    #[arg(long)]
    pub agents: Option<u32>,
    /// Remote agents to wait for (`throng agent --controller` on --listen).
    #[arg(long, default_value_t = 0)]
    pub remote_agents: u32,
    /// Where agents reach the controller.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Seconds to keep everyone connected after the ramp-up before the
    /// disconnect storm (default: until sessions park and broadcasts are
    /// delivered, at most 60 s; 10 s when sessions never park, such as Tsung think loops).
    #[arg(long)]
    pub hold: Option<f64>,
    /// The embedded server's idle timeout (default: the server's, or 0 when
    /// the scenario sends no heartbeats).
    #[arg(long)]
    pub idle_timeout: Option<u64>,
    /// Extra argument for the embedded `throng serve` (repeatable).
    #[arg(long, allow_hyphen_values = true)]
    pub server_arg: Vec<String>,
    /// Write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML report.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Seconds between timeline samples (users, connected, rates, CPU, RSS).
    #[arg(long, default_value_t = 1.0)]
    pub sample_interval: f64,
    /// Run the embedded server and local agents in a private network
    /// namespace whose TCP hash table fits the run (root, Linux 5.19+):
    /// `auto` does so when the connections overfill the host's table.
    #[arg(long, value_enum, default_value_t = NetnsMode::Auto)]
    pub netns: NetnsMode,
    /// The live dashboard's port (0 = off).
    #[arg(long, default_value_t = 8091)]
    pub dashboard_port: u16,
}

/// `throng bench --netns`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsMode {
    /// When the run overfills the host's TCP hash table, it is root, and
    /// no --target or remote agents are involved.
    Auto,
    /// Always (an error when it cannot).
    On,
    /// Never: the host's namespace.
    Off,
}

/// `throng agent`: hold connections for a controller.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// The controller's address (printed by `throng bench --remote-agents N`).
    #[arg(long)]
    pub controller: SocketAddr,
}

/// `throng tune`: print (or apply) OS settings and the limits that cap a run.
#[derive(clap::Args, Debug, Clone)]
pub struct TuneArgs {
    /// Apply the settings with `sysctl -w` (needs root).
    #[arg(long)]
    pub apply: bool,
    /// Check the limits for a run of this many connections.
    #[arg(long)]
    pub connections: Option<u64>,
}

pub fn run_bench(args: BenchArgs) -> Result<(), BoxError> {
    controller::run(args).map_err(Into::into)
}

pub fn run_agent(args: AgentArgs) -> Result<(), BoxError> {
    agent::run(args.controller).map_err(Into::into)
}

pub fn run_tune(args: TuneArgs) -> Result<(), BoxError> {
    tune::run(args.apply, args.connections).map_err(Into::into)
}
