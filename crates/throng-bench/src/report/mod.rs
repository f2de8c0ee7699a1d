//! What a run reports, as one typed value: [`Report`]. The `--json` file is
//! its serialization, the terminal summary ([`summary`]) and the HTML report
//! ([`html`], whose script reads the same JSON) are drawn from it, and the
//! live dashboard serves [`Live`] snapshots of the run until it is done.
//! Its presence part ([`PresenceReport`]) is in `presence.rs`, the timeline
//! samples and live snapshots in `live.rs`.
//!
//! The keys are the report's interface: `README.md`, `BENCHMARKS.md`, the
//! text summaries of recorded runs under `benchmarks/runs/` and the HTML read them, so a field is renamed
//! only when its name is wrong. Every figure is what the controller measured
//! or merged from the agents (histograms merged, never averaged); a figure
//! it could not get is `null`.

mod criteria;
pub mod html;
mod live;
mod presence;
pub mod summary;
mod tls;

pub use live::{Live, LiveTarget, Sample};
pub use presence::{PresenceReport, TrafficRow};
pub use tls::{Handshakes, Pair, TlsVsPlain};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stats::{ErrorDetail, Summary};

/// One run's results (`--json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Report {
    /// One line: whether the server or the load generator (or nothing) was
    /// the limit of this run, and why.
    pub verdict: String,
    pub scenario: ScenarioInfo,
    pub connections: Connections,
    pub errors: ErrorCounts,
    pub arrival: Arrival,
    /// The machine's own cost of a broadcast's fan-out, with no server
    /// logic, measured before the ramp-up (`null`: not measured).
    pub floor: Option<FloorReport>,
    /// Heartbeats: the background load under everything else.
    pub heartbeats: Heartbeats,
    /// The OS settings in force, and those the run needed but lacked.
    pub os: OsSettings,
    /// TCP connect + WebSocket handshake latency.
    pub connect: Summary,
    /// Join sent to its reply.
    pub join: Summary,
    /// Other tracked pushes to their reply.
    pub reply: Summary,
    pub broadcast: Broadcasts,
    /// Presence: its traffic to the clients and the time until each join
    /// was visible to every subscriber (`null`: no presence rule and no
    /// presence message).
    pub presence: Option<PresenceReport>,
    pub messages: Messages,
    pub server: Server,
    pub agent: Agents,
    pub kernel: Kernel,
    pub controller: Controller,
    pub storm: Storm,
    /// The handshake rounds after the storm (`--tls`, and both runs of
    /// `--compare-plain`): server CPU per connect of a new client and of a
    /// returning one (`null`: not run).
    pub handshakes: Option<Handshakes>,
    /// `--compare-plain`: this TLS run beside the same run in plaintext,
    /// made first in the same invocation (`null`: not asked).
    pub tls_vs_plain: Option<TlsVsPlain>,
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
    /// The run's own success criteria it failed (every user joined, no
    /// error, every broadcast sent, no agent lost), one line each; empty:
    /// it passed, and `throng bench` exits 0.
    pub failures: Vec<String>,
    /// Agents that went away before their final report (their process
    /// exited, or their link closed): the run ended in that phase, with
    /// the figures so far (empty: none).
    pub agents_lost: Vec<AgentLost>,
    /// Agents that sent nothing for a while (starved or stopped) and spoke
    /// again: the run waited for them (empty: none).
    pub slow_agents: Vec<SlowAgent>,
}

/// An agent that went away mid-run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AgentLost {
    pub agent: usize,
    pub pid: u32,
    /// The phase it went away in: `floor`, `ramp-up`, `plateau`, `hold`,
    /// `storm` or `collect`.
    pub phase: String,
    /// Why: its link closed (and how its process exited), or it was
    /// silent, its process alive, past the bench's limit.
    pub why: String,
    /// Seconds from its last message to its going.
    pub silent_secs: f64,
    /// Its last progress, in words. Its counters then are in the run's
    /// totals; its histograms and receipts are lost with it.
    pub last_progress: String,
}

/// An agent that sent nothing for `silent_secs` and then spoke again.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SlowAgent {
    pub agent: usize,
    pub pid: u32,
    /// The phase its silence began in.
    pub phase: String,
    pub silent_secs: f64,
    /// Its process when it was looked at: `stopped`, `running`,
    /// `sleeping`, `waiting on I/O`, or `remote` (not looked at).
    pub state: String,
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
    /// The finer kinds (timeouts by stage, closes by code, local limits by resource).
    pub detail: ErrorDetail,
    /// Each finer kind with a count, and whose it is.
    pub attributed: Vec<Attributed>,
    /// When the server closed connections: `[second since arrivals began,
    /// closes]` for each second that had any.
    pub closed_by_second: Vec<(u32, u32)>,
}

/// Errors of one finer kind and whose they are.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Attributed {
    /// `timeout_tcp`, `close_code_1011`, `ports`, ...
    pub kind: String,
    pub count: u64,
    /// `server`, `load generator`, `kernel` (a limit of the host's
    /// settings, on the load generator's side), `other processes`, or
    /// `settings` (the bench's flags against the server's: an upgrade
    /// refused for the clients' credentials, HTTP 401 or 403, or 404).
    pub whose: String,
    pub why: String,
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
    /// The server's CPU per `ok` join, µs: its CPU from the first arrival
    /// to the last join (or, later, the last presence message) over the
    /// joins (`null`: no server CPU figures).
    pub server_cpu_us_per_join: Option<f64>,
    /// Adaptive arrival: the rates the controller chose (`null`: a fixed schedule).
    pub adaptive: Option<AdaptiveArrival>,
    /// `--min-available`: where the ramp-up stopped because the machine's
    /// available memory fell under it (`null`: it did not stop).
    pub stopped_by_memory: Option<MemoryStop>,
}

/// The ramp-up stopped by `--min-available`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct MemoryStop {
    /// Users started when it stopped (those already connecting went on).
    pub users_started: u64,
    /// Connections open then.
    pub connected: u64,
    /// `MemAvailable` then, and the floor it fell under, bytes.
    pub mem_available: u64,
    pub min_available: u64,
}

/// The rates adaptive arrival chose, and what set them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AdaptiveArrival {
    pub start_per_sec: f64,
    /// The highest rate it tried.
    pub max_per_sec: f64,
    /// The rate when the last user had started.
    pub final_per_sec: f64,
    /// Handshakes per second from the first cut to the last arrival: the
    /// rate this machine sustained (`null`: no cut, the limit was not found).
    pub sustainable_per_sec: Option<f64>,
    /// The resource most cuts named, or why there was none.
    pub limited_by: String,
    pub cuts: usize,
    /// Every change of rate.
    pub steps: Vec<RateStep>,
}

/// A change of adaptive arrival's rate.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct RateStep {
    /// Seconds since the arrivals started.
    pub t: f64,
    /// The new rate, users per second (all agents together).
    pub per_sec: f64,
    /// `start`, `raise`, or `cut: <the resource that set it>`.
    pub why: String,
}

/// The floor: the same fan-out as a broadcast, written to as many loopback
/// sockets by minimal writers (no server logic) and read by the agents.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct FloorReport {
    /// Writer processes (one per server process) and threads each (the
    /// server's shards per process).
    pub writers: usize,
    pub threads_per_writer: u32,
    /// Sockets (one per user, or a sample of them: `scale`), and those
    /// that failed to open.
    pub sockets: u64,
    pub failed: u64,
    /// The run's users, and users / sockets: what the sample's times are
    /// multiplied by (1: a socket per user, nothing scaled). The figures in
    /// ms below are at the run's size (scaled); `sample_*` as measured.
    pub users: u64,
    pub scale: f64,
    /// Seconds to open them all.
    pub connect_secs: f64,
    /// Each round that had every receipt: the stamp to the last receipt, ms.
    pub rounds_last_ms: Vec<f64>,
    /// The slowest writer's time to write a round, ms.
    pub rounds_write_ms: Vec<f64>,
    /// The train (rounds sent on the broadcasts' schedule, `train_interval_secs`
    /// apart; empty when the broadcasts did not follow each other closely):
    /// each round's stamp to its last receipt, ms.
    pub train_last_ms: Vec<f64>,
    pub train_interval_secs: f64,
    /// The slowest round's and the median round's last receipt, ms.
    pub last_ms: f64,
    pub last_p50_ms: f64,
    /// Receipts, all rounds; their latency (ms).
    pub receivers: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// CPU per receipt over the rounds: the writers, the agents reading,
    /// the whole machine (all cores, kernel work included), µs.
    pub writer_cpu_us_per_receiver: f64,
    pub reader_cpu_us_per_receiver: f64,
    pub machine_cpu_us_per_receiver: Option<f64>,
    /// Heartbeats a second on the floor's sockets over the rounds (the
    /// users' own schedule, answered by the writers; 0: the run has none).
    #[serde(default)]
    pub heartbeats_per_sec: f64,
    /// The rounds and the train as measured on the sample, ms (the same
    /// as `rounds_last_ms` and `train_last_ms` when `scale` is 1).
    pub sample_rounds_last_ms: Vec<f64>,
    pub sample_train_last_ms: Vec<f64>,
    /// Every round had every receipt; if not, which round was short, by
    /// how many, and what that means for the ratio (`incomplete`).
    pub complete: bool,
    pub incomplete: Option<String>,
    /// What else ran: the floor comes before the ramp-up, so no server
    /// connection or server work is under it; the heartbeats are. And, on
    /// a sample, how it was scaled and what scaling does not carry.
    pub note: String,
}

/// Heartbeats: phoenix.js's interval, spread evenly over it on a grid.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Heartbeats {
    pub interval_secs: f64,
    /// The grid they fall on, shared by the agents (`--heartbeat-grid`;
    /// 0: none).
    pub grid_secs: f64,
    /// The most one went out after its time, ms (a starved agent's).
    pub late_max_ms: u64,
    pub sent: u64,
    /// Per second while everyone was connected (the hold): the background
    /// load under the broadcasts.
    pub per_sec_at_hold: f64,
    /// CPU while everyone was connected and nothing but heartbeats flowed
    /// (the plateau, before the barrier opened): what the background costs.
    pub background: CpuWindow,
}

/// The OS settings in force (those `throng tune` sets), and those this
/// run's size needed but lacked.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OsSettings {
    /// Setting to value, as the run found them.
    pub settings: BTreeMap<String, String>,
    /// Whether every setting was at least what the run needed.
    pub tuned: bool,
    /// Settings the run's size needed and the host lacked.
    pub lacking: Vec<Lacking>,
    /// The command that would set them (`null`: nothing lacking).
    pub advice: Option<String>,
}

/// A setting a run needed and lacked.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Lacking {
    pub name: String,
    pub now: String,
    pub needed: String,
    pub why: String,
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
    /// The time to the last receiver over the floor's, for the broadcasts
    /// that had the machine to themselves (as each floor round did): their
    /// median over the floor's median round, and the slowest over the
    /// slowest (`null`: no floor measured).
    pub floor_ratio: Option<f64>,
    pub floor_ratio_worst: Option<f64>,
    /// Which broadcasts were compared with the floor.
    pub floor_compared: Option<String>,
    /// CPU per receipt over the broadcasts: the server, the agents, the
    /// whole machine, µs (beside the floor's writers, readers, machine).
    pub server_cpu_us_per_receiver: Option<f64>,
    pub agent_cpu_us_per_receiver: Option<f64>,
    pub machine_cpu_us_per_receiver: Option<f64>,
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
    /// Bytes of the messages the clients received (WebSocket payloads),
    /// and per `ok` join.
    pub bytes_in: u64,
    pub bytes_in_per_join: f64,
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
    /// The same for anonymous memory only (`RssAnon`): leaves out the
    /// binary's code pages, which each worker counts in its RSS although
    /// the kernel holds them once (at 1M, ~52 workers count them 52 times).
    pub private_bytes_per_conn: Option<f64>,
    /// The same for the proportional set size (`Pss`): every page counted
    /// once over the server's processes, shared code pages included. The
    /// bench's own processes run the same binary, so the server's share of
    /// its code pages moves as agents and floor writers come and go: at
    /// 19,000 connections that moved it 10-30 B above the RSS growth; at
    /// 1,000,000 and 2,000,000 it was within 1 B of the private figure.
    pub pss_bytes_per_conn: Option<f64>,
    /// How the clients connected (`--auth`): `none`, or `jwt` (each
    /// socket its own user's token; the embedded server ran with `--auth jwt`).
    pub auth: String,
    /// The clients connected over TLS (`--tls`).
    pub tls: bool,
    /// `--history SIZE`: what the broadcast topics kept (`null`: none).
    pub history_size: Option<u32>,
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
    /// Segments the kernel dropped because a CPU's input backlog was full
    /// (`net.core.netdev_max_backlog`), from before the floor to the end of
    /// the hold, machine-wide: each was resent by TCP 200 ms or more later,
    /// so receipts and handshakes behind it were late by the kernel's
    /// doing (`null`: `/proc/net/softnet_stat` unreadable).
    pub backlog_drops: Option<u64>,
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
    /// The agents' figures summed up, averaged and at most.
    pub agents: Spread,
    /// Server + agents + controller.
    pub throng_pct: f64,
    /// Every process on the machine (kernel softirq work included), % of one core.
    pub machine_pct: Option<f64>,
    pub cores: usize,
}

/// Per-agent figures in three numbers, so 53 agents read as one.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Spread {
    pub count: usize,
    pub sum: f64,
    pub mean: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let sum: f64 = values.iter().sum();
        Spread {
            count: values.len(),
            sum,
            mean: if values.is_empty() {
                0.0
            } else {
                sum / values.len() as f64
            },
            max: values.iter().copied().fold(0.0, f64::max),
        }
    }

    /// `agents 95% in all (53: mean 1.8%, max 2.4%)`, or `agent 43%` for one.
    pub fn agents_pct(&self) -> String {
        match self.count {
            0 => "no agent".into(),
            1 => format!("agent {:.0}%", self.sum),
            n => format!(
                "agents {:.0}% in all ({n}: mean {:.1}%, max {:.1}%)",
                self.sum, self.mean, self.max
            ),
        }
    }
}

/// Percentile curves, `(percentile, ms)` points, for charts.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Percentiles {
    pub connect: Vec<(f64, f64)>,
    pub join: Vec<(f64, f64)>,
    pub broadcast: Vec<(f64, f64)>,
    /// Join sent to its sight by the last subscriber (presence).
    pub presence_join_visible: Vec<(f64, f64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys the docs, BENCHMARKS.md and the HTML report read.
    #[test]
    fn documented_keys_are_there() {
        let r = serde_json::to_value(Report::default()).unwrap();
        for key in [
            "/verdict",
            "/errors/attributed",
            "/errors/closed_by_second",
            "/errors/detail/timeout_tcp",
            "/arrival/adaptive",
            "/floor",
            "/broadcast/floor_ratio",
            "/broadcast/server_cpu_us_per_receiver",
            "/heartbeats/per_sec_at_hold",
            "/heartbeats/grid_secs",
            "/heartbeats/late_max_ms",
            "/os/lacking",
            "/os/advice",
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
            "/handshakes",
            "/tls_vs_plain",
            "/server/tls",
            "/server/history_size",
            "/cpu/ramp/machine_pct",
            "/cpu/broadcasts",
            "/bottleneck",
            "/broadcast_bottleneck",
            "/percentiles/broadcast",
            "/percentiles/presence_join_visible",
            "/arrival/server_cpu_us_per_join",
            "/messages/bytes_in",
            "/presence",
            "/timeline",
            "/status",
        ] {
            assert!(r.pointer(key).is_some(), "{key} missing: {r}");
        }
        let row = serde_json::to_value(BroadcastRow::default()).unwrap();
        assert!(row.get("ref").is_some());
        let p = serde_json::to_value(PresenceReport::default()).unwrap();
        for key in [
            "/rule",
            "/mode",
            "/state/bytes_per_sec",
            "/diff/messages_per_sec",
            "/count/bytes",
            "/other/bytes",
            "/bytes_per_join",
            "/join_visible/p50_ms",
            "/join_visible/p99_ms",
            "/join_visible/max_ms",
            "/join_visible_unseen",
        ] {
            assert!(p.pointer(key).is_some(), "presence{key} missing: {p}");
        }
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
