//! What the reconnect storm reports: the joins and memory, the burst's
//! broadcast throughput, the storm (time until all recovered, replayed
//! messages per second, Redis commands per rejoin), and the loss the
//! clients counted; as JSON (`--json`) and a terminal summary.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Status;

#[derive(Serialize, Debug, Clone, Default)]
pub struct StormReport {
    pub scenario: &'static str,
    /// Unix seconds at the start.
    pub started_unix: u64,
    pub clients: u64,
    pub topics: u32,
    /// Whether the topics kept history (`--storm-history`).
    pub history: bool,
    /// `memory` (independent servers, each with its own history) or
    /// `redis` (one `--workers` cluster, history in Redis).
    pub store: &'static str,
    /// The clients connected over TLS (`--tls`), and how they
    /// authenticated (`--auth`: `none` or `jwt`).
    pub tls: bool,
    pub auth: &'static str,
    /// Server processes holding the clients, and client processes.
    pub server_processes: usize,
    pub client_processes: usize,
    /// The first joins: seconds from the first connect to the last reply.
    pub join_secs: f64,
    pub joins_per_sec: f64,
    /// The servers' CPU over the first joins, per join, µs: a new client's
    /// connect (a full TLS handshake with `--tls`, its token checked with
    /// `--auth jwt`), upgrade and join.
    pub server_cpu_us_per_join: f64,
    /// Server RSS (all its processes) per idle joined socket: the growth
    /// from the servers started to everyone joined, over the clients.
    pub server_bytes_per_socket: f64,
    pub burst: Option<Burst>,
    pub storm: Option<Storm>,
    pub loss: Loss,
    /// The clients' counts at the end, summed over the processes.
    pub clients_status: Status,
    pub publish: PublishCounts,
}

/// `--storm-burst` numbered messages per topic, published as fast as the
/// API took them.
#[derive(Serialize, Debug, Clone, Default)]
pub struct Burst {
    /// Messages (one per topic and number; to every server when several).
    pub messages: u64,
    /// Seconds until the API had answered every publish.
    pub api_secs: f64,
    /// Seconds from the first publish until every client had the last
    /// number of its topic.
    pub delivered_secs: f64,
    /// Messages per second through the API, and delivered to everyone.
    pub api_messages_per_sec: f64,
    pub messages_per_sec: f64,
    /// Messages written to clients per second (each message times its
    /// topic's subscribers).
    pub deliveries_per_sec: f64,
    /// CPU seconds over the burst: the servers (and Redis), the clients.
    pub server_cpu_secs: f64,
    pub client_cpu_secs: f64,
}

/// The cut (or the restart) and the rejoins.
#[derive(Serialize, Debug, Clone, Default)]
pub struct Storm {
    /// `cut` (every client closed its socket at once) or `restart` (the
    /// server stopped with SIGTERM and started again: `--storm-restart`).
    pub mode: &'static str,
    /// Every client rejoined within the bench's limit (400 s, or 2 ms per client when longer).
    pub complete: bool,
    /// Messages per second published through the API meanwhile.
    pub publish_rate: f64,
    /// Seconds from the cut (or the SIGTERM) until the last rejoin's
    /// `recovered: true`.
    pub all_recovered_secs: f64,
    /// A restart: seconds from the first close with 1012 a client saw
    /// until the last recovery (`null`: a cut).
    pub first_1012_to_all_recovered_secs: Option<f64>,
    /// A restart: seconds from SIGTERM until the old server had exited
    /// (its drain), and from starting the new one until it listened.
    pub server_down_secs: Option<f64>,
    pub server_start_secs: Option<f64>,
    pub rejoins: u64,
    pub recovered: u64,
    pub not_recovered: u64,
    /// Messages the rejoins got replayed (carrying their join_ref), and
    /// per second from the cut to the last of them.
    pub replayed: u64,
    pub replayed_per_sec: f64,
    /// Rejoins per second over the storm (a restart's: from the first 1012).
    pub rejoins_per_sec: f64,
    /// The servers' (and Redis's) CPU over the storm; a restart's includes
    /// the old server's drain and exit and the new one's start.
    pub server_cpu_secs: f64,
    /// The same per rejoin, µs: the connect (TLS handshake), the token's
    /// check, the join and its replay.
    pub server_cpu_us_per_rejoin: f64,
    pub client_cpu_secs: f64,
    /// The rejoins' TLS handshakes: full, and resumed with the client's
    /// ticket (a restarted server cannot read tickets its previous process
    /// issued: it has new ticket keys).
    pub tls_full: u64,
    pub tls_resumed: u64,
    /// Connects that failed during the storm, by kind (each retried, as
    /// phoenix.js retries): `refused` (nothing listening: the restart's
    /// gap), `reset` (reset or closed before the join's reply), `http_503`
    /// (refused at a cap, with Retry-After), `tls`, `timeout`, ...
    pub connect_failures: BTreeMap<String, u64>,
    /// Sockets the server closed during the storm, by close code (1012:
    /// the drain's "service restart"; `none`: no close frame).
    pub closes_by_code: BTreeMap<String, u64>,
    /// With `--storm-redis`: Redis commands during the storm, less what
    /// the publishing alone costs over as long (measured before the cut),
    /// per rejoin; and the calls by command over the storm.
    pub redis_commands_per_rejoin: Option<f64>,
    pub redis_calls: BTreeMap<String, u64>,
}

/// What the clients counted against the numbers published.
#[derive(Serialize, Debug, Clone, Default)]
pub struct Loss {
    /// Each topic's last number.
    pub last_numbers: Vec<u64>,
    /// Clients without their topic's last number at the end.
    pub short: u64,
    pub gaps: u64,
    pub missing: u64,
    pub duplicates: u64,
    /// Gaps, duplicates, short clients and rejoins not recovered (or not
    /// done in time).
    pub errors: u64,
}

#[derive(Serialize, Debug, Clone, Default)]
pub struct PublishCounts {
    pub ok: u64,
    pub retried: u64,
    pub lost: u64,
    pub first_error: Option<String>,
}

impl StormReport {
    /// The terminal summary.
    pub fn summary(&self) -> String {
        let mut o = String::new();
        o.push_str(&format!(
            "\nthrong bench --storm: {} clients on {} topics {} ({} store); {} server process(es), {} client process(es)\n",
            self.clients,
            self.topics,
            if self.history { "with history" } else { "WITHOUT history" },
            self.store,
            self.server_processes,
            self.client_processes
        ));
        o.push_str(&format!(
            "  clients {}, auth {}; joined in {:.1} s ({:.0} joins/s, {:.0} us of server CPU each); server memory per idle joined socket: {:.0} B\n",
            if self.tls { "over TLS" } else { "in plaintext" },
            self.auth,
            self.join_secs,
            self.joins_per_sec,
            self.server_cpu_us_per_join,
            self.server_bytes_per_socket
        ));
        if let Some(b) = &self.burst {
            o.push_str(&format!(
                "  burst: {} messages, API took them in {:.2} s ({:.0}/s), everyone had them after {:.2} s: {:.0} messages/s, {:.0} deliveries/s; CPU {:.1} s server, {:.1} s clients\n",
                b.messages, b.api_secs, b.api_messages_per_sec, b.delivered_secs, b.messages_per_sec, b.deliveries_per_sec, b.server_cpu_secs, b.client_cpu_secs
            ));
        }
        if let Some(s) = &self.storm {
            o.push_str(&storm_lines(s));
            if let Some(r) = s.redis_commands_per_rejoin {
                let top: Vec<String> = s
                    .redis_calls
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                o.push_str(&format!(
                    "  Redis commands per rejoin: {r:.2} (calls during the storm: {})\n",
                    top.join(", ")
                ));
            }
        }
        let l = &self.loss;
        o.push_str(&format!(
            "  loss counted by the clients: {} error(s): {} gap(s) ({} numbers missing), {} duplicate(s), {} client(s) short of the last number, {} rejoin(s) not recovered\n",
            l.errors,
            l.gaps,
            l.missing,
            l.duplicates,
            l.short,
            self.storm.as_ref().map_or(0, |s| s.not_recovered)
        ));
        let c = &self.clients_status;
        o.push_str(&format!(
            "  clients: {} joins, {} messages received, {} connect errors (retried), {} closed by the server, {} other errors{}\n",
            c.joins,
            c.received,
            c.connect_errors,
            c.server_closes,
            c.errors,
            c.first_error
                .as_deref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        ));
        let p = &self.publish;
        o.push_str(&format!(
            "  publishes: {} answered, {} retried, {} given up{}\n",
            p.ok,
            p.retried,
            p.lost,
            p.first_error
                .as_deref()
                .map(|e| format!(" (first error: {e})"))
                .unwrap_or_default()
        ));
        o
    }
}

/// The storm's lines of the summary.
fn storm_lines(s: &Storm) -> String {
    let mut o = String::new();
    let what = if s.mode == "restart" {
        "the server restarted (SIGTERM, drain with 1012, started again)".to_string()
    } else {
        "every socket cut at once".to_string()
    };
    let (from, wall) = match s.first_1012_to_all_recovered_secs {
        Some(w) => ("the first 1012", w),
        None => ("the cut", s.all_recovered_secs),
    };
    o.push_str(&format!(
        "  storm: {what} while {:.1} messages/s were published; {} {} rejoined, the last recovered {wall:.2} s after {from} ({:.0} rejoins/s); recovered {}, not recovered {}\n",
        s.publish_rate,
        if s.complete { "all" } else { "ONLY" },
        s.rejoins,
        s.rejoins_per_sec,
        s.recovered,
        s.not_recovered
    ));
    if let (Some(down), Some(up)) = (s.server_down_secs, s.server_start_secs) {
        o.push_str(&format!(
            "  the server exited {down:.1} s after SIGTERM and listened again {up:.2} s later\n"
        ));
    }
    o.push_str(&format!(
        "  replayed: {} messages, {:.0}/s; CPU {:.1} s server ({:.0} us per rejoin: connect, handshake, token, join, replay), {:.1} s clients\n",
        s.replayed, s.replayed_per_sec, s.server_cpu_secs, s.server_cpu_us_per_rejoin, s.client_cpu_secs
    ));
    if s.tls_full + s.tls_resumed > 0 {
        o.push_str(&format!(
            "  TLS handshakes of the rejoins: {} full, {} resumed\n",
            s.tls_full, s.tls_resumed
        ));
    }
    let kinds = |m: &BTreeMap<String, u64>| {
        if m.is_empty() {
            "none".to_string()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    o.push_str(&format!(
        "  failed connects (retried): {}; closed by the server: {}\n",
        kinds(&s.connect_failures),
        kinds(&s.closes_by_code)
    ));
    o
}
