//! What the hooks scenario reports: joins per second with and without the
//! join hook (each round, medians, their ratio), the latency the hook adds
//! to a join, and server memory per idle joined socket with and without
//! hooks; as JSON (`--json`) and a terminal summary.

use hdrhistogram::Histogram;
use serde::Serialize;

/// The hooks scenario's goals (issue 22).
pub const GOAL_RATIO: f64 = 0.5;
pub const GOAL_BYTES: f64 = 300.0;

#[derive(Serialize, Debug, Clone)]
pub struct HooksReport {
    pub scenario: &'static str,
    /// Unix seconds at the start.
    pub started_unix: u64,
    /// Sockets that connect and join in each phase.
    pub sockets_per_phase: u64,
    /// Joins in flight at once (a closed loop).
    pub window: usize,
    pub rounds: Vec<Round>,
    /// Medians over the rounds.
    pub plain_joins_per_sec: f64,
    pub hooked_joins_per_sec: f64,
    /// The median of the rounds' hooked/plain ratios, and their spread.
    pub ratio: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    /// Server CPU per connect+join, µs (medians): steadier than the
    /// rates on a busy machine.
    pub plain_server_cpu_us: f64,
    pub hooked_server_cpu_us: f64,
    /// Over the rate phases: joins `window` at a time, queueing included.
    pub join_latency: Latency,
    /// Joins one at a time (no queue): the latency the hook itself adds.
    pub join_latency_one_at_a_time: Latency,
    pub memory: Memory,
    /// Joins that failed (refused, error reply, timeout), all phases.
    pub errors: u64,
    pub first_error: Option<String>,
    /// Loopback segments the kernel dropped during the run (a CPU's input
    /// backlog full: `net.core.netdev_max_backlog`); TCP resends each
    /// 200 ms or more later, so a dropped SYN can stall a join for seconds.
    pub kernel_backlog_drops: Option<u64>,
    /// The kernel's connection tracking table: each connection of a run
    /// stays in it for minutes after it closes, and once it is full the
    /// kernel drops new connections' SYNs (a join then times out at its
    /// TCP connect, whatever the server does).
    pub conntrack: Conntrack,
    /// Requests the built-in backend answered, by hook.
    pub backend_requests: Backend,
    pub goals: Goals,
}

/// One round: a phase without hooks and one through the join hook.
#[derive(Serialize, Debug, Clone)]
pub struct Round {
    pub plain_joins_per_sec: f64,
    pub hooked_joins_per_sec: f64,
    pub ratio: f64,
    /// Server CPU per connect+join, µs.
    pub plain_server_cpu_us: f64,
    pub hooked_server_cpu_us: f64,
    /// The bench's own CPU per join, µs: the clients, plus the built-in
    /// backend in the hooked phase (it shares the machine's cores).
    pub plain_bench_cpu_us: f64,
    pub hooked_bench_cpu_us: f64,
    /// Which phase ran first (they alternate).
    pub hooked_first: bool,
}

/// Join latency (`phx_join` to its reply), µs, over every round.
#[derive(Serialize, Debug, Clone, Default)]
pub struct Latency {
    pub plain: Percentiles,
    pub hooked: Percentiles,
    /// What the hook adds: hooked minus plain, at each percentile.
    pub added_p50_us: i64,
    pub added_p99_us: i64,
}

impl Latency {
    pub fn of(plain: &Histogram<u64>, hooked: &Histogram<u64>) -> Latency {
        let (plain, hooked) = (Percentiles::of(plain), Percentiles::of(hooked));
        Latency {
            added_p50_us: hooked.p50_us as i64 - plain.p50_us as i64,
            added_p99_us: hooked.p99_us as i64 - plain.p99_us as i64,
            plain,
            hooked,
        }
    }
}

#[derive(Serialize, Debug, Clone, Default)]
pub struct Percentiles {
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub count: u64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        Percentiles {
            p50_us: h.value_at_quantile(0.5),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
            count: h.len(),
        }
    }
}

/// Server RSS per idle joined socket, each on a fresh server: the growth
/// of the resident set from half the sockets joined to all of them, over
/// the second half (one-time growth left out); and from none to all over
/// all (`_with_fixed`).
#[derive(Serialize, Debug, Clone, Default)]
pub struct Memory {
    pub sockets: u64,
    pub plain_bytes_per_socket: f64,
    pub hooked_bytes_per_socket: f64,
    pub plain_bytes_per_socket_with_fixed: f64,
    pub hooked_bytes_per_socket_with_fixed: f64,
    /// The assigns the backend answered each hooked join with.
    pub assigns_bytes: usize,
}

#[derive(Serialize, Debug, Clone, Default)]
pub struct Backend {
    pub connect: u64,
    pub join: u64,
    /// Connections the server opened to the backend.
    pub connections: u64,
}

#[derive(Serialize, Debug, Clone, Default)]
pub struct Conntrack {
    pub at_start: Option<u64>,
    pub at_end: Option<u64>,
    pub max: Option<u64>,
}

#[derive(Serialize, Debug, Clone)]
pub struct Goals {
    pub ratio_at_least: f64,
    pub ratio_met: bool,
    pub bytes_per_socket_at_most: f64,
    pub memory_met: bool,
}

/// The middle value (the mean of the two middle ones for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

impl HooksReport {
    /// The terminal summary.
    pub fn summary(&self) -> String {
        let mut o = String::new();
        let l = &self.join_latency;
        let yes = |b: bool| if b { "met" } else { "MISSED" };
        o.push_str("\nthrong bench --hooks: joins through the app backend's join hook against joins without hooks\n");
        o.push_str(&format!(
            "  per phase: {} sockets connect and join, {} at a time; {} rounds, alternating which goes first\n",
            self.sockets_per_phase,
            self.window,
            self.rounds.len()
        ));
        o.push_str("  round   no hooks joins/s   join hook joins/s   ratio   CPU per join, no hooks / hook: server, bench (clients + backend)\n");
        for (i, r) in self.rounds.iter().enumerate() {
            o.push_str(&format!(
                "  {:>5}   {:>16.0}   {:>17.0}   {:>5.2}   {:.1} / {:.1} us, {:.1} / {:.1} us{}\n",
                i + 1,
                r.plain_joins_per_sec,
                r.hooked_joins_per_sec,
                r.ratio,
                r.plain_server_cpu_us,
                r.hooked_server_cpu_us,
                r.plain_bench_cpu_us,
                r.hooked_bench_cpu_us,
                if r.hooked_first { "  (hook first)" } else { "" }
            ));
        }
        o.push_str(&format!(
            "  joins/s (median): {:.0} without hooks, {:.0} through the join hook; server CPU per join (median) {:.1} us and {:.1} us\n",
            self.plain_joins_per_sec, self.hooked_joins_per_sec, self.plain_server_cpu_us, self.hooked_server_cpu_us
        ));
        o.push_str(&format!(
            "  ratio: {:.2} (median of rounds; {:.2}-{:.2}); goal >= {GOAL_RATIO}: {}\n",
            self.ratio,
            self.ratio_min,
            self.ratio_max,
            yes(self.goals.ratio_met)
        ));
        for (what, l) in [
            ("one at a time", &self.join_latency_one_at_a_time),
            (&*format!("{} at a time", self.window), l),
        ] {
            o.push_str(&format!(
                "  join latency, {what}, p50/p99: {} / {} us without hooks, {} / {} us through the hook: the hook adds {} us at p50, {} us at p99\n",
                l.plain.p50_us, l.plain.p99_us, l.hooked.p50_us, l.hooked.p99_us, l.added_p50_us, l.added_p99_us
            ));
        }
        let m = &self.memory;
        o.push_str(&format!(
            "  server memory per idle joined socket (slope over the second half of {} sockets, a fresh server each): {:.0} B without hooks, {:.0} B through the join hook with {} B of assigns; goal <= {GOAL_BYTES} B: {}\n",
            m.sockets,
            m.plain_bytes_per_socket,
            m.hooked_bytes_per_socket,
            m.assigns_bytes,
            yes(self.goals.memory_met)
        ));
        o.push_str(&format!(
            "    with one-time growth (none to all, over all): {:.0} B without hooks, {:.0} B with the hook\n",
            m.plain_bytes_per_socket_with_fixed, m.hooked_bytes_per_socket_with_fixed
        ));
        o.push_str(&format!(
            "  backend requests answered: {} join, {} connect, on {} connections; kernel backlog drops: {}; failed joins: {}{}\n",
            self.backend_requests.join,
            self.backend_requests.connect,
            self.backend_requests.connections,
            self.kernel_backlog_drops
                .map_or("unknown".to_string(), |d| d.to_string()),
            self.errors,
            self.first_error
                .as_deref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        ));
        let c = &self.conntrack;
        if let (Some(end), Some(max)) = (c.at_end.max(c.at_start), c.max) {
            if end * 10 >= max * 9 {
                o.push_str(&format!(
                    "  note: the kernel's connection tracking table held {end} of {max} entries: when full it drops new connections (TCP connect timeouts); wait for closed connections to age out, or raise net.netfilter.nf_conntrack_max (throng tune)\n"
                ));
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
