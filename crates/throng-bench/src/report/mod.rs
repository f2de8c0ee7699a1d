//! What a run reports, as one typed value: [`Report`]. The `--json` file is
//! its serialization, the terminal summary ([`summary`]) and the HTML report
//! ([`html`], whose script reads the same JSON) are drawn from it, and the
//! live dashboard serves [`Live`] snapshots of the run until it is done.
//!
//! The keys are the report's interface: `README.md`, `BENCHMARKS.md`, the
//! recorded runs under `runs/` and the HTML read them, so a field is renamed
//! only when its name is wrong. Every figure is what the controller measured
//! or merged from the agents (histograms merged, never averaged); a figure
//! it could not get is `null`.

pub mod html;
pub mod summary;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stats::{Counters, Summary};

/// One run's results (`--json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Report {
    pub scenario: ScenarioInfo,
    pub connections: Connections,
    pub errors: ErrorCounts,
    pub arrival: Arrival,
    /// TCP connect + WebSocket handshake latency.
    pub connect: Summary,
    /// Join sent to its reply.
    pub join: Summary,
    /// Other tracked pushes to their reply.
    pub reply: Summary,
    pub broadcast: Broadcasts,
    pub messages: Messages,
    pub server: Server,
    pub agent: Agents,
    pub kernel: Kernel,
    pub controller: Controller,
    pub storm: Storm,
    /// Which side limited the ramp-up, and the CPU figures that say so.
    pub bottleneck: String,
    pub cpu: Cpu,
    /// Which side limited the broadcasts (none sent: `null`).
    pub broadcast_bottleneck: Option<String>,
    /// The whole run, seconds.
    pub duration_secs: f64,
    /// From the barrier's release to the disconnect storm, seconds.
    pub hold_secs: f64,
    pub percentiles: Percentiles,
    /// One sample per `--sample-interval` (default 1 s).
    pub timeline: Vec<Sample>,
    /// `"done"` (the live dashboard's snapshots say which phase is running).
    pub status: String,
}

/// The scenario that ran.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ScenarioInfo {
    pub name: String,
    /// One line: serializer and phases (users, rate, duration).
    pub description: String,
    /// `"v1"` or `"v2"`.
    pub serializer: String,
    pub heartbeat_secs: f64,
}

/// Users (Tsung's word for sessions) and their connections.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Connections {
    /// Users the scenario starts.
    pub target: u64,
    pub started: u64,
    /// WebSocket handshakes completed.
    pub connected: u64,
    /// Joins answered `ok`.
    pub joined: u64,
    /// Open WebSockets once the ramp-up settled, as the agents count them.
    pub open_at_plateau: u64,
    /// The same, as the server counts them.
    pub server_conns_at_plateau: Option<f64>,
}

/// Errors, all agents together.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ErrorCounts {
    pub total: u64,
    /// Kind (`refused`, `timeout`, `closed_by_server`, `error_reply`,
    /// `handshake`, `local_limit`, `other`) to count.
    pub by_kind: BTreeMap<String, u64>,
}

/// How fast users arrived and joined.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Arrival {
    /// The first phase's arrival rate.
    pub target_per_sec: Option<f64>,
    /// `ok` joins over the time from the first arrival to the last join.
    pub per_sec: f64,
    /// Joins in the best second (from 100 ms slots); a ramp-up shorter
    /// than a second has none, so its average stands.
    pub peak_per_sec: f64,
    /// Handshakes in the best second.
    pub peak_connects_per_sec: f64,
    /// `ok` joins per 100 ms from the first arrival.
    pub joins_per_100ms: Vec<u32>,
    /// The best timeline sample's connections per second.
    pub peak_1s_sample_per_sec: f64,
    /// From the first arrival until every connect and tracked reply settled.
    pub ramp_secs: f64,
}

/// Timestamped broadcasts: latency per receiver, time to the last one.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Broadcasts {
    pub sent: u64,
    /// What the scenario's publishers should send.
    pub expected_sent: u64,
    /// Receipts, all receivers of all broadcasts.
    pub receivers: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// The slowest broadcast's publish to its last receipt.
    pub last_ms: f64,
    /// The median broadcast's publish to its last receipt.
    pub last_p50_ms: f64,
    /// The first 1,000 broadcasts, in publish order.
    pub per_broadcast: Vec<BroadcastRow>,
}

/// One broadcast.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct BroadcastRow {
    /// The publishing user.
    pub publisher: u64,
    /// Its ref on the publisher's connection.
    #[serde(rename = "ref")]
    pub msg_ref: u64,
    /// Since the run's first broadcast.
    pub sent_at_ms: f64,
    pub receivers: u64,
    /// Publish to last receipt (0 when nobody received it).
    pub last_ms: f64,
}

/// Messages the clients sent and received, and the server's own counts.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Messages {
    pub out: u64,
    #[serde(rename = "in")]
    pub in_: u64,
    pub out_per_sec: f64,
    pub in_per_sec: f64,
    /// Of `out`, those sent in binary frames (Tsung's default).
    pub out_binary: u64,
    /// `throng_messages_in_total` from the server's `/metrics`.
    pub server_in_total: Option<f64>,
    pub server_out_total: Option<f64>,
    pub server_broadcasts_total: Option<f64>,
}

/// The server side: memory per connection, CPU.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Server {
    /// Started by the bench (no `--target`).
    pub embedded: bool,
    pub address: String,
    /// The server's (or its workers' supervisor's) pid, when ours.
    pub pid: Option<u32>,
    /// RSS before any connection, and at the plateau, bytes.
    pub rss_baseline: Option<u64>,
    pub rss_plateau: Option<u64>,
    /// RSS growth over the plateau's open connections.
    pub bytes_per_conn: Option<f64>,
    /// % of one core over the ramp-up.
    pub cpu_pct_ramp: Option<f64>,
    /// CPU seconds from the baseline to the plateau.
    pub cpu_secs: Option<f64>,
    pub channels_joined: Option<f64>,
}

/// The agents.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Agents {
    pub count: usize,
    /// RSS growth over the plateau's open connections, all agents.
    pub bytes_per_conn: Option<f64>,
    /// `size_of` the engine's per-connection struct.
    pub conn_struct_bytes: usize,
    pub processes: Vec<AgentProcess>,
}

/// One agent process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AgentProcess {
    pub index: usize,
    pub pid: u32,
    pub users: u64,
    pub cpu_secs: f64,
    pub cpu_pct_ramp: Option<f64>,
    pub rss_bytes: u64,
}

/// The kernel's share: socket memory outside every process, the TCP table.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Kernel {
    pub slab_baseline: Option<u64>,
    pub slab_plateau: Option<u64>,
    pub bytes_per_conn: Option<f64>,
    pub note: String,
    pub tcp_ehash_buckets: Option<u64>,
    /// The run had a network namespace (and TCP table) of its own.
    pub private_netns: bool,
}

/// What [`Kernel::note`] says.
pub const KERNEL_NOTE: &str = "machine-wide Slab growth per connection: both ends of each loopback connection when agents are local";

/// The controller process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Controller {
    pub cpu_secs: f64,
}

/// The disconnect storm: every agent drops every connection at once.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Storm {
    pub connections: u64,
    /// Until the server counted none (`null`: it never did, or could not say).
    pub secs_to_zero: Option<f64>,
    pub server_cpu_secs: Option<f64>,
}

/// CPU use over the ramp-up and over the broadcasts.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Cpu {
    pub ramp: CpuWindow,
    pub broadcasts: CpuWindow,
}

/// CPU use over a window of the run, % of one core.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CpuWindow {
    pub window_secs: f64,
    pub server_pct: Option<f64>,
    pub server_busiest_thread_pct: Option<f64>,
    pub server_threads: usize,
    pub agents_pct: Vec<f64>,
    pub controller_pct: f64,
    /// Server + agents + controller.
    pub throng_pct: f64,
    /// Every process on the machine (kernel softirq work included), % of one core.
    pub machine_pct: Option<f64>,
    pub cores: usize,
}

/// Percentile curves, `(percentile, ms)` points, for charts.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Percentiles {
    pub connect: Vec<(f64, f64)>,
    pub join: Vec<(f64, f64)>,
    pub broadcast: Vec<(f64, f64)>,
}

/// One timeline sample.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Sample {
    /// Seconds since the arrivals started.
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

/// What the live dashboard shows while a run is on.
#[derive(Clone, Debug, Serialize)]
pub struct Live<'a> {
    /// The phase: `starting`, `ramp-up`, `hold`.
    pub status: &'a str,
    /// The scenario's name.
    pub scenario: &'a str,
    pub connections: LiveTarget,
    /// All agents' latest counters (`null` until every agent reported).
    pub counters: Option<Counters>,
    pub timeline: &'a [Sample],
}

/// The users a live run is heading for.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LiveTarget {
    pub target: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys the docs, BENCHMARKS.md and the HTML report read.
    #[test]
    fn documented_keys_are_there() {
        let r = serde_json::to_value(Report::default()).unwrap();
        for key in [
            "/connections/connected",
            "/connections/target",
            "/errors/total",
            "/errors/by_kind",
            "/arrival/per_sec",
            "/arrival/joins_per_100ms",
            "/join/p99_ms",
            "/broadcast/receivers",
            "/broadcast/p99_ms",
            "/broadcast/last_ms",
            "/broadcast/per_broadcast",
            "/messages/in",
            "/server/bytes_per_conn",
            "/agent/bytes_per_conn",
            "/kernel/tcp_ehash_buckets",
            "/storm/secs_to_zero",
            "/cpu/ramp/machine_pct",
            "/cpu/broadcasts",
            "/bottleneck",
            "/broadcast_bottleneck",
            "/percentiles/broadcast",
            "/timeline",
            "/status",
        ] {
            assert!(r.pointer(key).is_some(), "{key} missing: {r}");
        }
        let row = serde_json::to_value(BroadcastRow::default()).unwrap();
        assert!(row.get("ref").is_some());
    }

    #[test]
    fn round_trips_as_json() {
        let mut r = Report::default();
        r.connections.connected = 7;
        r.errors.by_kind.insert("timeout".into(), 2);
        r.percentiles.join = vec![(50.0, 1.5)];
        r.timeline.push(Sample {
            t: 1.0,
            server_rss_mb: Some(3.0),
            ..Default::default()
        });
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
