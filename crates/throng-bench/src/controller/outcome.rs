//! From what the phases measured to the [`Report`]: merged percentiles,
//! each broadcast's time to its last receiver and its ratio to the floor,
//! memory per connection on each side, rates (and adaptive arrival's
//! choices), CPU windows, whose each error is, and the verdicts.

use super::cpu::{bottleneck_of, CpuTrace};
use super::floor::Floor;
use super::run::{Baseline, Collected, Hold, Phases, Plateau, Ramp, Run};
use super::verdict::{attribute, verdict, TimeoutContext};
use crate::report::{self, AdaptiveArrival, BroadcastRow, CpuWindow, FloorReport, Report};
use crate::scenario::{self, vsn_name};
use crate::slots::Slots;
use crate::stats::{percentile_curve, summarize, BcastSeen, BcastTable, Counters, Summary};
use crate::sys;

/// Publish to last receipt, ms.
fn last_ms(b: &BcastSeen) -> f64 {
    b.last_ns.saturating_sub(b.sent_ns) as f64 / 1e6
}

/// The ramp-up's joins per second (0 with none), and when it ended: the
/// last join, else the ramp-up's own length (s).
fn joins_over_ramp(fin: &Counters, ramp: &Ramp) -> (f64, f64) {
    if fin.last_join_secs > 0.0 {
        (fin.joined as f64 / fin.last_join_secs, fin.last_join_secs)
    } else {
        (0.0, ramp.secs)
    }
}

impl Run {
    /// The run's report.
    pub(super) fn report(&self, p: Phases) -> Report {
        let Phases {
            baseline,
            floor,
            ramp,
            plateau,
            hold,
            storm,
            collected: c,
        } = p;
        let fin = &c.counters;
        let (per_sec, ramp_until) = joins_over_ramp(fin, &ramp);
        let hold_cpu = self.broadcast_window(&c, &baseline, &hold);
        let cpu = self.trace.window(0.0, ramp_until);
        let target_rate = self.sc.phases.first().map(|p| p.arrival_rate);
        let behind = target_rate
            .filter(|&t| self.sc.phases.len() == 1 && per_sec < 0.9 * t)
            .map(|t| (per_sec, t));
        // Server figures: the plateau's scrape, else the last one.
        let m = |name: &str| {
            plateau
                .metrics
                .as_deref()
                .or(self.timeline.last_metrics.as_deref())
                .and_then(|t| sys::metric(t, name))
        };
        let floor = floor.map(|f| floor_report(&f, &c.floor, summarize(&c.hists.floor)));
        let broadcast = broadcasts(&c, floor.as_ref(), &hold_cpu, self.sc.expected_broadcasts());
        let adaptive = ramp
            .control
            .as_ref()
            .map(|_| adaptive_report(&ramp, &c.slots));
        let attributed = self.attributed(fin, &c.slots);
        let (presence, presence_curve) =
            self.presence_report(&c, baseline.start_rt, plateau.presence_settle_secs, &m);
        // The server's CPU per join: from the first arrival to the last
        // join, or the last presence message when that came later.
        let joins_until = presence
            .as_ref()
            .map_or(0.0, |p| p.window_secs)
            .max(ramp_until);
        let server_cpu_us_per_join = self.server_cpu_us_per_join(fin.joined, joins_until);
        let broadcast_sent = broadcast.sent;
        Report {
            verdict: self.verdict(&attributed, adaptive.as_ref(), fin.joined),
            floor: floor.clone(),
            heartbeats: self.heartbeat_figures(fin, &plateau, &hold, ramp.secs),
            os: self.os.clone(),
            scenario: self.scenario_info(),
            connections: self.connections(fin, &plateau),
            errors: errors(fin, &c.slots, attributed),
            arrival: self.arrival(
                &c.slots,
                (target_rate, per_sec),
                &ramp,
                server_cpu_us_per_join,
                adaptive,
            ),
            connect: summarize(&c.hists.connect),
            join: summarize(&c.hists.join),
            reply: summarize(&c.hists.reply),
            broadcast,
            presence,
            messages: messages(fin, c.secs, &m),
            server: self.server_figures(&baseline, &plateau, cpu.server_pct, &m),
            agent: self.agent_figures(&plateau, &cpu),
            kernel: self.kernel_figures(&baseline, &plateau, &hold),
            controller: report::Controller {
                cpu_secs: c.controller_cpu,
            },
            storm: storm_figures(&storm),
            bottleneck: bottleneck_of(&cpu, "the ramp-up", behind),
            broadcast_bottleneck: (broadcast_sent > 0)
                .then(|| bottleneck_of(&hold_cpu, "broadcasts", None)),
            cpu: report::Cpu {
                ramp: cpu,
                broadcasts: hold_cpu,
            },
            duration_secs: c.secs,
            hold_secs: storm.start.duration_since(hold.start).as_secs_f64(),
            percentiles: report::Percentiles {
                presence_join_visible: presence_curve,
                ..percentiles(&c.hists)
            },
            timeline: self.timeline.samples.clone(),
            status: match self.agents.lost.first() {
                Some(l) => format!(
                    "ended early: agent {} went away during the {}",
                    l.agent, l.phase
                ),
                None => "done".into(),
            },
            failures: Vec::new(),
            agents_lost: self.agents.lost.clone(),
            slow_agents: self.agents.slow.clone(),
            // The handshake rounds and `--compare-plain` fill in theirs.
            ..Report::default()
        }
    }

    /// The run's verdict: who was the limit (`verdict`), or none when an
    /// agent went away and the run ended early.
    fn verdict(
        &self,
        attributed: &[report::Attributed],
        adaptive: Option<&AdaptiveArrival>,
        joined: u64,
    ) -> String {
        match self.agents.lost.first() {
            Some(l) => format!(
                "none: the run ended early, agent {} went away during the {} ({}); the figures are those until then",
                l.agent, l.phase, l.why
            ),
            None => verdict(attributed, adaptive, self.sc.total_users(), joined),
        }
    }

    /// How fast users arrived and joined: the rate aimed at and the
    /// average, the peaks, joins per 100 ms, the ramp-up.
    fn arrival(
        &self,
        slots: &Slots,
        (target_per_sec, per_sec): (Option<f64>, f64),
        ramp: &Ramp,
        server_cpu_us_per_join: Option<f64>,
        adaptive: Option<AdaptiveArrival>,
    ) -> report::Arrival {
        report::Arrival {
            target_per_sec,
            per_sec,
            // The best second; a ramp-up shorter than a second has none, so its average stands.
            peak_per_sec: slots.peak_joins_per_sec().max(per_sec),
            peak_connects_per_sec: slots.peak_connects_per_sec(),
            joins_per_100ms: slots.joins.clone(),
            peak_1s_sample_per_sec: self.timeline.peak_rate(),
            ramp_secs: ramp.secs,
            server_cpu_us_per_join,
            adaptive,
            stopped_by_memory: ramp.stopped.clone(),
        }
    }

    /// Users: started, connected, joined, and open once settled.
    fn connections(&self, fin: &Counters, plateau: &Plateau) -> report::Connections {
        report::Connections {
            target: self.sc.total_users(),
            started: fin.started,
            connected: fin.connected,
            joined: fin.joined,
            open_at_plateau: plateau.counters.open,
            server_conns_at_plateau: plateau.server_conns,
        }
    }

    /// Each error's finer kind and whose it is, in the run's context.
    fn attributed(&self, fin: &Counters, slots: &Slots) -> Vec<report::Attributed> {
        let mut timeouts = timeout_context(&self.trace, slots, self.sc.connect_timeout);
        timeouts.hb_interval_secs = self.sc.heartbeat;
        timeouts.hb_late_secs = fin.hb_late_max_ms as f64 / 1000.0;
        attribute(
            &fin.errors,
            timeouts,
            self.auth == crate::cli::AuthMode::Jwt,
        )
    }

    /// The server's CPU per join over the first `secs` of the run, µs.
    fn server_cpu_us_per_join(&self, joined: u64, secs: f64) -> Option<f64> {
        let w = self.trace.window(0.0, secs);
        w.server_pct
            .filter(|_| joined > 0)
            .map(|pct| pct / 100.0 * w.window_secs * 1e6 / joined as f64)
    }

    /// The scenario that ran.
    fn scenario_info(&self) -> report::ScenarioInfo {
        report::ScenarioInfo {
            name: self.sc.name.clone(),
            description: scenario::describe(&self.sc, self.adaptive),
            serializer: vsn_name::of(self.sc.serializer).into(),
            heartbeat_secs: self.sc.heartbeat,
        }
    }

    /// The CPU window of the broadcasts: from the first publish to the last
    /// receipt, on the trace's clock, within the hold.
    fn broadcast_window(&self, c: &Collected, baseline: &Baseline, hold: &Hold) -> CpuWindow {
        let (bc_from, bc_until) = match (
            c.bcasts
                .values()
                .filter(|b| b.sent_ns > 0)
                .map(|b| b.sent_ns)
                .min(),
            c.bcasts.values().map(|b| b.last_ns).max(),
        ) {
            (Some(a), Some(b)) if b > a => (
                (a.saturating_sub(baseline.start_rt) as f64 / 1e9).max(hold.t0),
                (b.saturating_sub(baseline.start_rt) as f64 / 1e9).min(hold.t1),
            ),
            _ => (hold.t0, hold.t1),
        };
        self.trace.window(bc_from, bc_until)
    }

    /// The agents: memory per connection and each process's figures.
    fn agent_figures(&self, plateau: &Plateau, cpu: &CpuWindow) -> report::Agents {
        let open = plateau.counters.open;
        let agent_bytes = (open > 0).then(|| plateau.agent_rss_delta as f64 / open as f64);
        let agents = self
            .agents
            .links
            .iter()
            .enumerate()
            .map(|(i, a)| report::AgentProcess {
                index: i,
                pid: a.pid,
                users: a.users,
                cpu_secs: a.final_.as_ref().map_or(0.0, |f| f.counters.cpu_secs),
                cpu_pct_ramp: cpu.agents_pct.get(i).copied(),
                rss_bytes: a.last.as_ref().map(|c| c.rss).unwrap_or(0),
            })
            .collect();
        report::Agents {
            count: self.agents.len(),
            bytes_per_conn: agent_bytes,
            conn_struct_bytes: self.conn_size,
            processes: agents,
        }
    }

    /// Heartbeats: the schedule, how many went out while held, and the CPU
    /// of the quiet plateau (from `quiet_from`, else the ramp-up's end).
    fn heartbeat_figures(
        &self,
        fin: &Counters,
        plateau: &Plateau,
        hold: &Hold,
        ramp_secs: f64,
    ) -> report::Heartbeats {
        let hb_at_hold = hold
            .counters
            .hb_sent
            .saturating_sub(plateau.counters.hb_sent) as f64
            / (hold.t1 - hold.t0).max(1e-3);
        report::Heartbeats {
            interval_secs: self.sc.heartbeat,
            grid_secs: self.sc.heartbeat_grid,
            late_max_ms: fin.hb_late_max_ms,
            sent: fin.hb_sent,
            per_sec_at_hold: hb_at_hold,
            background: self
                .trace
                .window(plateau.quiet_from.unwrap_or(ramp_secs), hold.t0),
        }
    }

    /// The server's memory and CPU, from the baseline to the plateau, and
    /// what its metrics `m` say.
    fn server_figures(
        &self,
        baseline: &Baseline,
        plateau: &Plateau,
        cpu_pct_ramp: Option<f64>,
        m: &dyn Fn(&str) -> Option<f64>,
    ) -> report::Server {
        let open = plateau.counters.open;
        // One memory figure's growth over the open connections; none when
        // it was not read (a remote server has no private or PSS figure).
        let per_conn = |of: fn(&crate::sys::ProcSample) -> u64| {
            baseline
                .server
                .zip(plateau.server)
                .filter(|(_, b)| of(b) > 0)
                .and_then(|(a, b)| {
                    (open > 0).then(|| (of(&b) as f64 - of(&a) as f64) / open as f64)
                })
        };
        let server_bytes = per_conn(|s| s.rss);
        let private_bytes = per_conn(|s| s.anon);
        let pss_bytes = per_conn(|s| s.pss);
        report::Server {
            embedded: self.probe.pid.is_some(),
            address: self.probe.metrics.to_string(),
            pid: self.probe.pid,
            rss_baseline: baseline.server.map(|s| s.rss),
            rss_plateau: plateau.server.map(|s| s.rss),
            bytes_per_conn: server_bytes,
            private_bytes_per_conn: private_bytes,
            pss_bytes_per_conn: pss_bytes,
            auth: match self.auth {
                crate::cli::AuthMode::None => "none",
                crate::cli::AuthMode::Jwt => "jwt",
            }
            .into(),
            tls: self.tls,
            history_size: self.history_size,
            cpu_pct_ramp,
            cpu_secs: plateau
                .server
                .zip(baseline.server)
                .map(|(b, a)| b.cpu_secs - a.cpu_secs),
            channels_joined: m("throng_channels_joined"),
        }
    }

    /// The kernel's share: Slab per connection, its TCP table, the input
    /// backlog's drops over the run.
    fn kernel_figures(
        &self,
        baseline: &Baseline,
        plateau: &Plateau,
        hold: &Hold,
    ) -> report::Kernel {
        let open = plateau.counters.open;
        let kernel_bytes = baseline
            .slab
            .zip(plateau.slab)
            .and_then(|(a, b)| (open > 0).then(|| (b as f64 - a as f64) / open as f64));
        report::Kernel {
            slab_baseline: baseline.slab,
            slab_plateau: plateau.slab,
            bytes_per_conn: kernel_bytes,
            note: report::KERNEL_NOTE.into(),
            tcp_ehash_buckets: self.tcp.buckets,
            private_netns: self.tcp.private,
            backlog_drops: baseline
                .backlog_drops
                .zip(hold.backlog_drops)
                .map(|(a, b)| b.saturating_sub(a)),
        }
    }
}

/// The latency curves of the merged histograms (presence's apart).
fn percentiles(h: &crate::stats::Hists) -> report::Percentiles {
    report::Percentiles {
        connect: percentile_curve(&h.connect),
        join: percentile_curve(&h.join),
        broadcast: percentile_curve(&h.broadcast),
        ..Default::default()
    }
}

/// The disconnect storm's figures.
fn storm_figures(storm: &super::run::Storm) -> report::Storm {
    report::Storm {
        connections: storm.connections,
        secs_to_zero: storm.secs_to_zero,
        server_cpu_secs: storm.server_cpu_secs,
    }
}

/// The errors by kind, whose each is, and when the server closed.
fn errors(
    fin: &Counters,
    slots: &Slots,
    attributed: Vec<report::Attributed>,
) -> report::ErrorCounts {
    report::ErrorCounts {
        total: fin.errors.total(),
        by_kind: fin
            .errors
            .by_kind()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        detail: fin.errors.detail.clone(),
        attributed,
        closed_by_second: slots
            .closes
            .chunks(10)
            .enumerate()
            .map(|(s, n)| (s as u32, n.iter().sum::<u32>()))
            .filter(|(_, n)| *n > 0)
            .collect(),
    }
}

/// Messages and bytes to and from the clients (and the server's counts,
/// from its metrics `m`).
fn messages(fin: &Counters, secs: f64, m: &dyn Fn(&str) -> Option<f64>) -> report::Messages {
    report::Messages {
        out: fin.msgs_out,
        in_: fin.msgs_in,
        out_per_sec: fin.msgs_out as f64 / secs,
        in_per_sec: fin.msgs_in as f64 / secs,
        out_binary: fin.msgs_out_binary,
        bytes_in: fin.bytes_in,
        bytes_in_per_join: if fin.joined > 0 {
            fin.bytes_in as f64 / fin.joined as f64
        } else {
            0.0
        },
        server_in_total: m("throng_messages_in_total"),
        server_out_total: m("throng_messages_out_total"),
        server_broadcasts_total: m("throng_broadcasts_total"),
    }
}

/// The broadcasts' figures: latency, each one's time to its last
/// receiver, the ratio to the floor (against the rounds comparable with
/// them), and the CPU per receipt over `hold_cpu`.
fn broadcasts(
    c: &Collected,
    floor: Option<&FloorReport>,
    hold_cpu: &CpuWindow,
    expected_sent: u64,
) -> report::Broadcasts {
    // Broadcasts: per broadcast, publish to last receipt.
    let published = || c.bcasts.values().filter(|b| b.sent_ns > 0);
    let mut lasts: Vec<f64> = published().filter(|b| b.recv > 0).map(last_ms).collect();
    lasts.sort_by(|a, b| a.total_cmp(b));
    let sent = published().count() as u64;
    let bsum = summarize(&c.hists.broadcast);
    let floor_ratio = |b: f64, f: f64| (b > 0.0 && f > 0.0).then(|| b / f);
    let bcast_last = lasts.last().copied().unwrap_or(0.0);
    let bcast_last_p50 = lasts.get(lasts.len() / 2).copied().unwrap_or(0.0);
    let alone = alone(&c.bcasts);
    // Broadcasts that overlapped compare with the floor's train (as many
    // rounds on the same schedule), when there is one for all of them.
    let train = floor.as_ref().map_or(&[][..], |f| &f.train_last_ms[..]);
    let mut all: Vec<f64> = c
        .bcasts
        .values()
        .filter(|b| b.sent_ns > 0 && b.recv > 0)
        .map(last_ms)
        .collect();
    all.sort_by(|a, b| a.total_cmp(b));
    let by_train = alone.len() < all.len() && !all.is_empty() && train.len() == all.len();
    let compared = if by_train {
        all
    } else if alone.is_empty() {
        // None had the machine to itself: the first had it the longest.
        c.bcasts
            .values()
            .filter(|b| b.sent_ns > 0 && b.recv > 0)
            .min_by_key(|b| b.sent_ns)
            .map(last_ms)
            .into_iter()
            .collect()
    } else {
        alone.clone()
    };
    let compared_p50 = compared.get(compared.len() / 2).copied().unwrap_or(0.0);
    let compared_worst = compared.last().copied().unwrap_or(0.0);
    // The floor's side: its median and slowest rounds; the first broadcast
    // alone compares with the first round (both the first frames on
    // their sockets, which the kernel handles more slowly).
    let floor_side = floor.as_ref().map(|f| {
        if by_train {
            let mut t = f.train_last_ms.clone();
            t.sort_by(|a, b| a.total_cmp(b));
            (t[t.len() / 2], t[t.len() - 1])
        } else if alone.is_empty() {
            let first = f.rounds_last_ms.first().copied().unwrap_or(0.0);
            (first, first)
        } else {
            (f.last_p50_ms, f.last_ms)
        }
    });
    let floor_compared = match (alone.len(), sent) {
        (_, 0) => String::new(),
        (_, m) if by_train => format!(
            "all {m} broadcasts with the floor's {m} rounds sent on their schedule ({} s apart): they overlapped, and so did the floor's",
            floor.as_ref().map_or(0.0, |f| f.train_interval_secs)
        ),
        (n, m) if n as u64 == m => format!(
            "all {n} broadcasts (each had the machine to itself) with the floor's rounds"
        ),
        (0, m) => format!(
            "the first of {m} broadcasts with the floor's first round: each broadcast overlapped another (sent before the previous one's last receipt); a --broadcast-interval longer than a broadcast compares them all"
        ),
        (n, m) => format!(
            "{n} of {m} broadcasts (the others overlapped another) with the floor's rounds"
        ),
    };
    let receipts: u64 = c.bcasts.values().map(|b| b.recv).sum();
    let per_receipt = |pct: Option<f64>| {
        pct.filter(|_| receipts > 0)
            .map(|p| p / 100.0 * hold_cpu.window_secs * 1e6 / receipts as f64)
    };
    report::Broadcasts {
        sent,
        expected_sent,
        receivers: receipts,
        p50_ms: bsum.p50_ms,
        p90_ms: bsum.p90_ms,
        p99_ms: bsum.p99_ms,
        max_ms: bsum.max_ms,
        mean_ms: bsum.mean_ms,
        last_ms: bcast_last,
        last_p50_ms: bcast_last_p50,
        floor_ratio: floor_side.and_then(|(p50, _)| floor_ratio(compared_p50, p50)),
        floor_ratio_worst: floor_side.and_then(|(_, worst)| floor_ratio(compared_worst, worst)),
        floor_compared: floor.map(|f| with_incomplete(f, floor_compared)),
        server_cpu_us_per_receiver: per_receipt(hold_cpu.server_pct),
        agent_cpu_us_per_receiver: per_receipt(Some(hold_cpu.agents_pct.iter().sum())),
        machine_cpu_us_per_receiver: per_receipt(hold_cpu.machine_pct),
        per_broadcast: per_broadcast(&c.bcasts),
    }
}

/// What the broadcasts were compared with, and, when the floor stopped
/// short of receipts, that the ratio uses only its complete rounds (or
/// that there is none).
fn with_incomplete(f: &FloorReport, compared: String) -> String {
    match &f.incomplete {
        Some(why) if f.rounds_last_ms.is_empty() => format!("no ratio: {why}"),
        Some(why) => format!("{compared} (the floor's complete rounds only: {why})"),
        None => compared,
    }
}

/// The first 1,000 broadcasts, in publish order.
fn per_broadcast(bcasts: &BcastTable) -> Vec<BroadcastRow> {
    let mut rows: Vec<(&u64, &BcastSeen)> = bcasts.iter().filter(|(_, b)| b.sent_ns > 0).collect();
    rows.sort_by_key(|(_, b)| b.sent_ns);
    let first_ns = rows.first().map(|(_, b)| b.sent_ns).unwrap_or(0);
    rows.iter()
        .take(1000)
        .map(|(k, b)| BroadcastRow {
            publisher: *k >> 32,
            msg_ref: *k & 0xFFFF_FFFF,
            sent_at_ms: (b.sent_ns - first_ns) as f64 / 1e6,
            receivers: b.recv,
            last_ms: if b.recv > 0 { last_ms(b) } else { 0.0 },
        })
        .collect()
}

/// The time to the last receiver of each broadcast that had the machine to
/// itself (none in flight when it was sent, none sent before its last
/// receipt), sorted: the broadcasts comparable with the floor's rounds,
/// which run one at a time.
fn alone(bcasts: &BcastTable) -> Vec<f64> {
    let mut sent: Vec<&BcastSeen> = bcasts
        .values()
        .filter(|b| b.sent_ns > 0 && b.recv > 0)
        .collect();
    sent.sort_by_key(|b| b.sent_ns);
    let mut out = Vec::new();
    let mut busy_until = 0;
    for (i, b) in sent.iter().enumerate() {
        let next = sent.get(i + 1).map_or(u64::MAX, |n| n.sent_ns);
        if b.sent_ns >= busy_until && b.last_ns <= next {
            out.push(last_ms(b));
        }
        busy_until = busy_until.max(b.last_ns);
    }
    out.sort_by(|a, b| a.total_cmp(b));
    out
}

/// The floor as the report gives it: each round's last receipt from the
/// agents' merged receipts (key: the round), at the run's size (a sample's
/// times scaled, see `controller/floor.rs`).
fn floor_report(f: &Floor, table: &BcastTable, receipts: Summary) -> FloorReport {
    let last = |key: usize, r: &super::floor::Round| {
        table
            .get(&(key as u64 + 1))
            .map_or(0.0, |b| b.last_ns.saturating_sub(r.stamp_ns) as f64 / 1e6)
    };
    let sample_rounds_last_ms: Vec<f64> = f
        .rounds
        .iter()
        .enumerate()
        .map(|(i, r)| last(i, r))
        .collect();
    let sample_train_last_ms: Vec<f64> = f
        .train
        .iter()
        .enumerate()
        .map(|(k, r)| last(f.rounds.len() + k, r))
        .collect();
    let scaled = |v: &[f64]| v.iter().map(|x| x * f.scale).collect::<Vec<f64>>();
    let rounds_last_ms = scaled(&sample_rounds_last_ms);
    let mut sorted = rounds_last_ms.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let receivers = f.receivers;
    let per = |secs: f64| secs * 1e6 / receivers.max(1) as f64;
    let hb_rate = f.heartbeats as f64 / f.rounds_secs.max(1e-3);
    FloorReport {
        writers: f.writers,
        threads_per_writer: f.threads,
        sockets: f.sockets,
        failed: f.failed,
        users: f.users,
        scale: f.scale,
        connect_secs: f.connect_secs,
        rounds_write_ms: f.rounds.iter().map(|r| r.write_secs * 1e3).collect(),
        train_last_ms: scaled(&sample_train_last_ms),
        train_interval_secs: f.train_interval,
        last_ms: sorted.last().copied().unwrap_or(0.0),
        last_p50_ms: sorted.get(sorted.len() / 2).copied().unwrap_or(0.0),
        rounds_last_ms,
        receivers,
        p50_ms: receipts.p50_ms,
        p99_ms: receipts.p99_ms,
        writer_cpu_us_per_receiver: per(f.writers_cpu_secs),
        reader_cpu_us_per_receiver: per(f.agents_cpu_secs),
        machine_cpu_us_per_receiver: f.machine_busy_secs.map(per),
        heartbeats_per_sec: hb_rate,
        sample_rounds_last_ms,
        sample_train_last_ms,
        complete: f.incomplete.is_none(),
        incomplete: f.incomplete.clone(),
        note: floor_note(f, hb_rate),
    }
}

/// What ran under the floor, and how a sample was scaled.
fn floor_note(f: &Floor, hb_rate: f64) -> String {
    let mut note = format!(
        "measured before the ramp-up: no server connection or server work underneath (the server used {} CPU s meanwhile); {}",
        f.server_cpu_secs.map_or("-".to_string(), |s| format!("{s:.2}")),
        if f.heartbeats > 0 {
            format!("over the run's heartbeats: the floor's sockets heartbeat as the users will ({hb_rate:.0}/s over the rounds), each answered by the writers with one reply frame")
        } else {
            "no heartbeat underneath".to_string()
        }
    );
    if f.scale > 1.0 {
        note.push_str(&format!(
            "; on a sample: {} of the {} users' sockets, spread over every agent and writer, heartbeating {:.1}x as often (the run's heartbeats a second) and the train's rounds {:.1}x closer; its times are multiplied by {:.2} (per receiver, the same fan-out). Not carried: the kernel's cost per socket grows with the socket count, so a floor on every socket would be slower (this ratio errs high); and each round's fixed costs (tens of ms) are multiplied too (errs low), which weighs only when the sample's rounds are short (--floor-sample 0 measures every socket)",
            f.sockets, f.users, f.scale, f.scale, f.scale
        ));
    }
    note
}

/// Adaptive arrival's rates, and the rate sustained from the first cut to
/// the last arrival (handshakes per second, from the 100 ms slots).
fn adaptive_report(ramp: &Ramp, slots: &Slots) -> AdaptiveArrival {
    let Some(ctl) = ramp.control.as_ref() else {
        return AdaptiveArrival::default();
    };
    let sustainable = ctl.first_cut.and_then(|(t, _)| {
        let (a, b) = (
            (t * 10.0) as usize,
            (ramp.arrivals_secs * 10.0).ceil() as usize,
        );
        let n: u64 = slots
            .connects
            .get(a..b.min(slots.connects.len()))?
            .iter()
            .map(|&x| x as u64)
            .sum();
        (b > a).then(|| n as f64 / ((b - a) as f64 / 10.0))
    });
    AdaptiveArrival {
        start_per_sec: ctl.steps.first().map_or(0.0, |s| s.per_sec),
        max_per_sec: ctl.steps.iter().map(|s| s.per_sec).fold(0.0, f64::max),
        final_per_sec: ctl.rate(),
        sustainable_per_sec: sustainable,
        limited_by: ctl.limited_by().unwrap_or_else(|| {
            "the rate was never lowered: no handshake waited past the threshold, so the rate kept rising until every user had arrived".into()
        }),
        cuts: ctl.limits.len(),
        steps: ctl.steps.clone(),
    }
}

/// Each timeout beside the CPU it waited through: the connect timeout
/// before its 100 ms slot.
fn timeout_context(trace: &CpuTrace, slots: &Slots, wait_secs: f64) -> TimeoutContext {
    let mut t = TimeoutContext::default();
    for (i, &n) in slots.timeouts.iter().enumerate().filter(|(_, n)| **n > 0) {
        let end = (i + 1) as f64 / 10.0;
        let w: CpuWindow = trace.window(end - wait_secs, end);
        t.add(n as u64, &w);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(sent_ms: u64, last_ms: u64) -> BcastSeen {
        BcastSeen {
            sent_ns: sent_ms * 1_000_000,
            recv: 10,
            last_ns: last_ms * 1_000_000,
        }
    }

    /// A floor short of receipts says so where the ratio is given: no
    /// ratio without a complete round, the complete rounds only otherwise.
    #[test]
    fn an_incomplete_floor_says_what_the_ratio_is_against() {
        let mut f = FloorReport {
            incomplete: Some("floor round 1 had 9 of 10 receipts".into()),
            ..Default::default()
        };
        let c = with_incomplete(&f, "all 1 broadcasts".into());
        assert_eq!(c, "no ratio: floor round 1 had 9 of 10 receipts");
        f.rounds_last_ms = vec![100.0];
        let c = with_incomplete(&f, "all 1 broadcasts".into());
        assert!(c.starts_with("all 1 broadcasts (the floor's complete rounds only: floor round 1"));
        f.incomplete = None;
        assert_eq!(with_incomplete(&f, "x".into()), "x");
    }

    /// Only broadcasts that had the machine to themselves compare with the
    /// floor's rounds: none in flight when sent, none sent before their
    /// last receipt.
    #[test]
    fn broadcasts_alone_are_those_no_other_overlapped() {
        let mut t = BcastTable::new();
        // 0..500 alone; 1000..1600 overlapped by 1500..1900; 3000..3200 alone.
        t.insert(1, seen(1, 501));
        t.insert(2, seen(1000, 1600));
        t.insert(3, seen(1500, 1900));
        t.insert(4, seen(3000, 3200));
        assert_eq!(alone(&t), vec![200.0, 500.0]);
        // 100 ms apart, each taking 500 ms: none alone.
        let mut t = BcastTable::new();
        for i in 0..3 {
            t.insert(i, seen(1 + 100 * i, 501 + 100 * i));
        }
        assert!(alone(&t).is_empty());
    }
}
