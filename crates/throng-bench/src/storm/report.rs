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
    /// Server processes holding the clients, and client processes.
    pub server_processes: usize,
    pub client_processes: usize,
    /// The first joins: seconds from the first connect to the last reply.
    pub join_secs: f64,
    pub joins_per_sec: f64,
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

/// The cut and the rejoins.
#[derive(Serialize, Debug, Clone, Default)]
pub struct Storm {
    /// Every client rejoined within the bench's limit (400 s).
    pub complete: bool,
    /// Messages per second published through the API meanwhile.
    pub publish_rate: f64,
    /// Seconds from the cut until the last rejoin's `recovered: true`.
    pub all_recovered_secs: f64,
    pub rejoins: u64,
    pub recovered: u64,
    pub not_recovered: u64,
    /// Messages the rejoins got replayed (carrying their join_ref), and
    /// per second from the cut to the last of them.
    pub replayed: u64,
    pub replayed_per_sec: f64,
    pub rejoins_per_sec: f64,
    pub server_cpu_secs: f64,
    pub client_cpu_secs: f64,
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
            "  joined in {:.1} s ({:.0} joins/s); server memory per idle joined socket: {:.0} B\n",
            self.join_secs, self.joins_per_sec, self.server_bytes_per_socket
        ));
        if let Some(b) = &self.burst {
            o.push_str(&format!(
                "  burst: {} messages, API took them in {:.2} s ({:.0}/s), everyone had them after {:.2} s: {:.0} messages/s, {:.0} deliveries/s; CPU {:.1} s server, {:.1} s clients\n",
                b.messages, b.api_secs, b.api_messages_per_sec, b.delivered_secs, b.messages_per_sec, b.deliveries_per_sec, b.server_cpu_secs, b.client_cpu_secs
            ));
        }
        if let Some(s) = &self.storm {
            o.push_str(&format!(
                "  storm: every socket cut at once while {:.1} messages/s were published; {} {} rejoined, the last recovered after {:.2} s ({:.0} rejoins/s); recovered {}, not recovered {}\n",
                s.publish_rate,
                if s.complete { "all" } else { "ONLY" },
                s.rejoins,
                s.all_recovered_secs,
                s.rejoins_per_sec,
                s.recovered,
                s.not_recovered
            ));
            o.push_str(&format!(
                "  replayed: {} messages, {:.0}/s; CPU {:.1} s server, {:.1} s clients\n",
                s.replayed, s.replayed_per_sec, s.server_cpu_secs, s.client_cpu_secs
            ));
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
