//! From what the phases measured to the [`Report`]: merged percentiles,
//! each broadcast's time to its last receiver, memory per connection on
//! each side, rates, CPU windows and the bottleneck verdicts.

use super::cpu::bottleneck_of;
use super::run::{Phases, Run};
use crate::report::{self, BroadcastRow, Report};
use crate::scenario::{self, vsn_name};
use crate::stats::{percentile_curve, summarize, BcastSeen};
use crate::sys;

/// Publish to last receipt, ms.
fn last_ms(b: &BcastSeen) -> f64 {
    b.last_ns.saturating_sub(b.sent_ns) as f64 / 1e6
}

impl Run {
    /// The run's report.
    pub(super) fn report(&self, p: Phases) -> Report {
        let Phases {
            baseline,
            ramp,
            plateau,
            hold,
            storm,
            collected: c,
        } = p;
        let fin = &c.counters;
        // Broadcasts: per broadcast, publish to last receipt.
        let published = || c.bcasts.values().filter(|b| b.sent_ns > 0);
        let mut lasts: Vec<f64> = published().filter(|b| b.recv > 0).map(last_ms).collect();
        lasts.sort_by(|a, b| a.total_cmp(b));
        let mut per_broadcast: Vec<(&u64, &BcastSeen)> =
            c.bcasts.iter().filter(|(_, b)| b.sent_ns > 0).collect();
        per_broadcast.sort_by_key(|(_, b)| b.sent_ns);
        let first_ns = per_broadcast.first().map(|(_, b)| b.sent_ns).unwrap_or(0);
        let per_broadcast: Vec<BroadcastRow> = per_broadcast
            .iter()
            .take(1000)
            .map(|(k, b)| BroadcastRow {
                publisher: *k >> 32,
                msg_ref: *k & 0xFFFF_FFFF,
                sent_at_ms: (b.sent_ns - first_ns) as f64 / 1e6,
                receivers: b.recv,
                last_ms: if b.recv > 0 { last_ms(b) } else { 0.0 },
            })
            .collect();
        let sent = published().count() as u64;
        let bsum = summarize(&c.hists.broadcast);
        let per_sec = if fin.last_join_secs > 0.0 {
            fin.joined as f64 / fin.last_join_secs
        } else {
            0.0
        };
        // Memory per connection: growth from the baseline over the plateau's open connections.
        let open = plateau.counters.open;
        let per_conn = |grew: f64| (open > 0).then(|| grew / open as f64);
        let server_bytes = baseline
            .server
            .zip(plateau.server)
            .and_then(|(a, b)| per_conn(b.rss as f64 - a.rss as f64));
        let kernel_bytes = baseline
            .slab
            .zip(plateau.slab)
            .and_then(|(a, b)| per_conn(b as f64 - a as f64));
        let agent_bytes = per_conn(plateau.agent_rss_delta as f64);
        // Broadcasts: from the first publish to the last receipt, on the trace's clock.
        let (bc_from, bc_until) = match (
            published().map(|b| b.sent_ns).min(),
            c.bcasts.values().map(|b| b.last_ns).max(),
        ) {
            (Some(a), Some(b)) if b > a => (
                (a.saturating_sub(baseline.start_rt) as f64 / 1e9).max(hold.t0),
                (b.saturating_sub(baseline.start_rt) as f64 / 1e9).min(hold.t1),
            ),
            _ => (hold.t0, hold.t1),
        };
        let hold_cpu = self.trace.window(bc_from, bc_until);
        let ramp_until = if fin.last_join_secs > 0.0 {
            fin.last_join_secs
        } else {
            ramp.secs
        };
        let cpu = self.trace.window(0.0, ramp_until);
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
        Report {
            scenario: report::ScenarioInfo {
                name: self.sc.name.clone(),
                description: scenario::describe(&self.sc),
                serializer: vsn_name::of(self.sc.serializer).into(),
                heartbeat_secs: self.sc.heartbeat,
            },
            connections: report::Connections {
                target: self.sc.total_users(),
                started: fin.started,
                connected: fin.connected,
                joined: fin.joined,
                open_at_plateau: open,
                server_conns_at_plateau: plateau.server_conns,
            },
            errors: report::ErrorCounts {
                total: fin.errors.total(),
                by_kind: fin
                    .errors
                    .by_kind()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            },
            arrival: report::Arrival {
                target_per_sec: target_rate,
                per_sec,
                // The best second; a ramp-up shorter than a second has none, so its average stands.
                peak_per_sec: c.slots.peak_joins_per_sec().max(per_sec),
                peak_connects_per_sec: c.slots.peak_connects_per_sec(),
                joins_per_100ms: c.slots.joins.clone(),
                peak_1s_sample_per_sec: self.timeline.peak_rate(),
                ramp_secs: ramp.secs,
            },
            connect: summarize(&c.hists.connect),
            join: summarize(&c.hists.join),
            reply: summarize(&c.hists.reply),
            broadcast: report::Broadcasts {
                sent,
                expected_sent: self.sc.expected_broadcasts(),
                receivers: c.bcasts.values().map(|b| b.recv).sum(),
                p50_ms: bsum.p50_ms,
                p90_ms: bsum.p90_ms,
                p99_ms: bsum.p99_ms,
                max_ms: bsum.max_ms,
                mean_ms: bsum.mean_ms,
                last_ms: lasts.last().copied().unwrap_or(0.0),
                last_p50_ms: lasts.get(lasts.len() / 2).copied().unwrap_or(0.0),
                per_broadcast,
            },
            messages: report::Messages {
                out: fin.msgs_out,
                in_: fin.msgs_in,
                out_per_sec: fin.msgs_out as f64 / c.secs,
                in_per_sec: fin.msgs_in as f64 / c.secs,
                out_binary: fin.msgs_out_binary,
                server_in_total: m("throng_messages_in_total"),
                server_out_total: m("throng_messages_out_total"),
                server_broadcasts_total: m("throng_broadcasts_total"),
            },
            server: report::Server {
                embedded: self.probe.pid.is_some(),
                address: self.probe.metrics.to_string(),
                pid: self.probe.pid,
                rss_baseline: baseline.server.map(|s| s.rss),
                rss_plateau: plateau.server.map(|s| s.rss),
                bytes_per_conn: server_bytes,
                cpu_pct_ramp: cpu.server_pct,
                cpu_secs: plateau
                    .server
                    .zip(baseline.server)
                    .map(|(b, a)| b.cpu_secs - a.cpu_secs),
                channels_joined: m("throng_channels_joined"),
            },
            agent: report::Agents {
                count: self.agents.len(),
                bytes_per_conn: agent_bytes,
                conn_struct_bytes: self.conn_size,
                processes: agents,
            },
            kernel: report::Kernel {
                slab_baseline: baseline.slab,
                slab_plateau: plateau.slab,
                bytes_per_conn: kernel_bytes,
                note: report::KERNEL_NOTE.into(),
                tcp_ehash_buckets: self.tcp.buckets,
                private_netns: self.tcp.private,
            },
            controller: report::Controller {
                cpu_secs: c.controller_cpu,
            },
            storm: report::Storm {
                connections: storm.connections,
                secs_to_zero: storm.secs_to_zero,
                server_cpu_secs: storm.server_cpu_secs,
            },
            bottleneck: bottleneck_of(&cpu, "the ramp-up", behind),
            broadcast_bottleneck: (sent > 0).then(|| bottleneck_of(&hold_cpu, "broadcasts", None)),
            cpu: report::Cpu {
                ramp: cpu,
                broadcasts: hold_cpu,
            },
            duration_secs: c.secs,
            hold_secs: storm.start.duration_since(hold.start).as_secs_f64(),
            percentiles: report::Percentiles {
                connect: percentile_curve(&c.hists.connect),
                join: percentile_curve(&c.hists.join),
                broadcast: percentile_curve(&c.hists.broadcast),
            },
            timeline: self.timeline.samples.clone(),
            status: "done".into(),
        }
    }
}
