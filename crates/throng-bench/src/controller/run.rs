//! One run, phase by phase. Each phase is a method that returns what it
//! measured as a value of its own type, and [`Run::execute`] hands them all
//! to the report (`outcome`):
//!
//! 1. [`Baseline`]: the server with no connections;
//! 2. the floor (`floor`), when the run measures it: the same fan-out as a
//!    broadcast with no server, before any user arrives; then the arrivals
//!    start;
//! 3. [`Ramp`]: until every user has arrived and no connect or tracked reply
//!    is outstanding (a progress line, a timeline sample a second; with
//!    adaptive arrival, a new rate whenever the `arrival` control says);
//! 4. [`Plateau`]: a second later (with presence, once no presence message
//!    has arrived for a while: `presence`), memory over the idle
//!    connections;
//! 5. [`Hold`]: the barrier opens, broadcasts flow, until every session is
//!    parked and every broadcast delivered, or `--hold` seconds;
//! 6. [`Storm`]: every agent drops every connection at once; the time until
//!    the server holds none, and the CPU it spent;
//! 7. [`Collected`]: the agents' final counters, histograms, receipts and
//!    slots, merged;
//! 8. with `--tls` (and in both runs of `--compare-plain`), the handshake
//!    rounds (`handshakes`): server CPU per connect of a new client and of
//!    a returning one, on the server the load has left.
//!
//! An agent lost mid-run (its process gone, see `agents`) ends the run
//! early with the figures so far: the phase it went in stops, the next ones
//! do only what ends the run cleanly (no arrivals start, no broadcast is
//! released; the storm drops the survivors' connections; their final
//! reports are merged with the lost agent's last progress), and the report
//! names the agent, the phase and that progress.
//!
//! The main thread owns the run; agents' lines arrive over a channel
//! ([`Agents::pump`]); the dashboard thread only reads the JSON snapshot
//! behind `live`, which the run replaces once a sample.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::agents::Agents;
use super::arrival::{RateControl, Signals};
use super::cpu::CpuTrace;
use super::floor::{Floor, FloorPhase, Writers};
use super::probe::{server_conns, ServerProbe};
use super::timeline::{hold_line, progress_line, Timeline};
use crate::error::BenchError;
use crate::netns::TcpTable;
use crate::report::{Live, LiveTarget, OsSettings, Report};
use crate::scenario::{Scenario, Step};
use crate::slots::Slots;
use crate::stats::{merge_bcasts, BcastTable, Counters, Hists};
use crate::sys::{self, ProcSample};
use crate::wire::ToAgent;
use crate::BenchArgs;

/// The longest default hold when sessions never park, seconds.
pub(super) const HOLD_CAP: f64 = 60.0;

/// The hold's limit, seconds: `hold` (`--hold`), or by default 60 s when
/// sessions `parks` plus what they wait on purpose after the barrier
/// (`--broadcast-after` 60 once ended the hold as its broadcast went out:
/// 63,416 of 100,000 receipts, counted as if that were all); when they
/// never park (a Tsung config's think loops), 10 s plus their waits, at
/// most [`HOLD_CAP`] (`phoenix.xml`'s 1,000 loops of 30 s held for 8.3
/// hours). With the waits the cap cut short, second.
pub(super) fn hold_limit(hold: Option<f64>, sc: &Scenario, parks: bool) -> (f64, Option<f64>) {
    if let Some(h) = hold {
        return (h, None);
    }
    let scheduled = sc.scheduled_after_barrier();
    if parks {
        return (60.0 + scheduled, None);
    }
    let wanted = 10.0 + scheduled;
    (
        wanted.min(HOLD_CAP),
        (wanted > HOLD_CAP).then_some(scheduled),
    )
}

/// The state of one run, owned by the main thread.
pub(super) struct Run {
    pub sc: Scenario,
    /// `--hold`: seconds to hold after the ramp-up, instead of until done.
    pub hold: Option<f64>,
    /// `--min-available`: the ramp-up stops when `MemAvailable` falls under it.
    pub min_available: Option<u64>,
    pub probe: ServerProbe,
    pub agents: Agents,
    /// `size_of` the agents' per-connection struct.
    pub conn_size: usize,
    pub timeline: Timeline,
    /// CPU points every 100 ms while users arrive and broadcasts flow.
    pub trace: CpuTrace,
    /// When the arrivals started.
    pub start: Instant,
    /// stderr is a terminal: the progress line is rewritten in place.
    pub tty: bool,
    /// The kernel's TCP established-hash table this run has.
    pub tcp: TcpTable,
    /// The dashboard's JSON.
    pub live: Arc<Mutex<String>>,
    /// Adaptive arrival: the controller sets the rate.
    pub adaptive: bool,
    /// The floor writers, until the floor is measured.
    pub writers: Option<Writers>,
    /// The OS settings in force, and what the run lacks.
    pub os: OsSettings,
    /// What the embedded server was given for the scenario's presence.
    pub presence_args: Vec<String>,
    /// How the clients authenticated (`--auth`).
    pub auth: crate::cli::AuthMode,
    /// The clients connect over TLS (`--tls`).
    pub tls: bool,
    /// `--history SIZE` on the broadcast topics.
    pub history_size: Option<u32>,
    /// The handshake rounds after the storm (`--tls`, `--compare-plain`).
    pub handshakes: Option<super::handshakes::Setup>,
    pub(super) next_trace: Instant,
    pub(super) next_sample: Instant,
    /// The progress line's rate: joins counted at the window's start, and
    /// the rate over the last full window.
    rate_from: (Instant, u64),
    rate_now: f64,
}

/// Before the first arrival.
pub(super) struct Baseline {
    pub server: Option<ProcSample>,
    /// Kernel Slab, bytes.
    pub slab: Option<u64>,
    /// Segments the kernel had dropped at a full input backlog (since boot).
    pub backlog_drops: Option<u64>,
    /// The server answered `/metrics`.
    pub metrics: bool,
    /// This controller's CPU seconds.
    pub controller_cpu: f64,
    /// CLOCK_REALTIME ns at the start (broadcast stamps use that clock).
    pub start_rt: u64,
}

/// The ramp-up.
pub(super) struct Ramp {
    /// Until it settled (or gave up waiting).
    pub secs: f64,
    /// Adaptive arrival: the rates it chose.
    pub control: Option<RateControl>,
    /// Seconds until every user had been started.
    pub arrivals_secs: f64,
    /// `--min-available` stopped it.
    pub stopped: Option<crate::report::MemoryStop>,
}

/// Idle connections, once settled.
pub(super) struct Plateau {
    pub metrics: Option<String>,
    pub server: Option<ProcSample>,
    pub slab: Option<u64>,
    pub counters: Counters,
    /// The server's own count of its connections.
    pub server_conns: Option<f64>,
    /// The agents' RSS growth since they were ready, bytes.
    pub agent_rss_delta: i64,
    /// With presence: seconds from the ramp-up's end until its traffic
    /// stopped (`None`: no presence rule), and when that was (seconds
    /// since the run's start): the quiet plateau starts there.
    pub presence_settle_secs: Option<f64>,
    pub quiet_from: Option<f64>,
}

/// The barrier's release and the hold.
pub(super) struct Hold {
    pub start: Instant,
    /// Seconds since the run's start, at its start and its end.
    pub t0: f64,
    pub t1: f64,
    /// The agents' counters at its end.
    pub counters: Counters,
    /// Segments the kernel had dropped at a full input backlog (since boot).
    pub backlog_drops: Option<u64>,
}

/// The disconnect storm.
pub(super) struct Storm {
    pub start: Instant,
    pub connections: u64,
    pub secs_to_zero: Option<f64>,
    pub server_cpu_secs: Option<f64>,
}

/// The agents' final measurements, merged (never averaged).
pub(super) struct Collected {
    pub hists: Hists,
    pub bcasts: BcastTable,
    /// The floor's rounds as the agents received them (key: round).
    pub floor: BcastTable,
    pub counters: Counters,
    pub slots: Slots,
    /// Presence joins' times, diffs and count steps, merged.
    pub presence: crate::presence::Merged,
    /// This controller's CPU seconds over the run.
    pub controller_cpu: f64,
    /// The whole run, seconds.
    pub secs: f64,
}

/// What each phase measured, for the report.
pub(super) struct Phases {
    pub baseline: Baseline,
    pub floor: Option<Floor>,
    pub ramp: Ramp,
    pub plateau: Plateau,
    pub hold: Hold,
    pub storm: Storm,
    pub collected: Collected,
}

impl Run {
    /// A run of `sc` with `--hold` and `--sample-interval` from `args`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        args: &BenchArgs,
        sc: Scenario,
        adaptive: bool,
        probe: ServerProbe,
        agents: Agents,
        writers: Option<Writers>,
        os: OsSettings,
        conn_size: usize,
        tcp: TcpTable,
        live: Arc<Mutex<String>>,
    ) -> Run {
        let now = Instant::now();
        Run {
            sc,
            hold: args.hold,
            min_available: args.min_available,
            probe,
            agents,
            conn_size,
            timeline: Timeline::new(Duration::from_secs_f64(
                args.sample_interval.clamp(0.05, 60.0),
            )),
            trace: CpuTrace::default(),
            start: now,
            tty: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            tcp,
            live,
            adaptive,
            writers,
            os,
            presence_args: Vec::new(),
            auth: args.auth,
            tls: args.tls,
            history_size: args.history,
            handshakes: None,
            next_trace: now,
            next_sample: now,
            rate_from: (now, 0),
            rate_now: 0.0,
        }
    }

    /// Runs every phase and reports (each phase named to the agents'
    /// links, for what a lost or slow agent's report says).
    pub fn execute(&mut self) -> Result<Report, BenchError> {
        let mut baseline = self.baseline()?;
        self.agents.phase = "floor";
        let floor = self.floor()?;
        self.begin(&mut baseline)?;
        self.agents.phase = "ramp-up";
        let ramp = self.ramp_up()?;
        self.agents.phase = "plateau";
        let plateau = self.plateau()?;
        self.agents.phase = "hold";
        let hold = self.hold()?;
        self.agents.phase = "storm";
        let storm = self.storm(&hold, baseline.metrics)?;
        self.agents.phase = "collect";
        let collected = self.collect(&baseline)?;
        let handshakes = self.handshakes.as_ref().map(|h| h.measure(&self.probe));
        let mut report = self.report(Phases {
            baseline,
            floor,
            ramp,
            plateau,
            hold,
            storm,
            collected,
        });
        report.handshakes = handshakes;
        Ok(report)
    }

    /// The dashboard's JSON, now.
    pub fn publish(&self, json: String) {
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = json;
    }

    /// A live snapshot for the dashboard.
    pub(super) fn publish_live(&self, status: &str) {
        let live = Live {
            status,
            scenario: &self.sc.name,
            connections: LiveTarget {
                target: self.sc.total_users(),
            },
            counters: self.agents.total(),
            timeline: &self.timeline.samples,
        };
        if let Ok(json) = serde_json::to_string(&live) {
            self.publish(json);
        }
    }

    /// Every 100 ms: a CPU point.
    pub(super) fn trace_point(&mut self) {
        self.trace.take(self.start, &self.probe, &self.agents);
    }

    /// A timeline sample, if every agent has reported.
    pub(super) fn sample(&mut self) {
        if let Some(c) = self.agents.total() {
            self.timeline.sample(self.start, c, &self.probe);
        }
    }

    /// The progress line. Its one rate is joins per second over the last
    /// second (over the ramp-up, to the last join, once it has settled):
    /// the timeline's rate, a sample's worth behind, showed `0 conn/s` with
    /// hundreds joined, and a second unlabelled figure beside it (adaptive
    /// arrival's chosen rate) read as a contradiction.
    pub(super) fn progress(&mut self, phase: &str) {
        let Some(c) = self.agents.total() else {
            return;
        };
        let now = Instant::now();
        let rate = if phase == "settled" {
            // Over the ramp-up: the first arrival to the last join.
            let secs = if c.last_join_secs > 0.0 {
                c.last_join_secs
            } else {
                now.duration_since(self.start).as_secs_f64()
            };
            c.joined as f64 / secs.max(1e-3)
        } else {
            let (t0, c0) = self.rate_from;
            let dt = now.duration_since(t0).as_secs_f64();
            if dt >= 1.0 || (self.rate_now == 0.0 && dt >= 0.2) {
                self.rate_now = c.joined.saturating_sub(c0) as f64 / dt;
            }
            if dt >= 1.0 {
                self.rate_from = (now, c.joined);
            }
            self.rate_now
        };
        progress_line(phase, &c, self.sc.total_users(), rate, self.tty);
    }

    /// Phase 2, when the run has floor writers: the floor (`floor`).
    fn floor(&mut self) -> Result<Option<Floor>, BenchError> {
        let Some(w) = self.writers.take() else {
            return Ok(None);
        };
        self.publish_live("floor");
        FloorPhase {
            agents: &mut self.agents,
            probe: &self.probe,
            min_available: self.min_available,
        }
        .run(w)
    }

    /// Phase 1: the server with no connections.
    fn baseline(&mut self) -> Result<Baseline, BenchError> {
        let metrics = self.probe.metrics();
        let server = self.probe.memory(metrics.as_deref());
        let slab = sys::slab();
        if metrics.is_none() {
            eprintln!(
                "warning: no /metrics from the server at {}: server-side figures will be missing (a throng server serves it on its public port with `throng serve --public-metrics`)",
                self.probe.metrics
            );
        }
        let controller_cpu = sys::proc_sample("self").map(|p| p.cpu_secs).unwrap_or(0.0);
        let conns = self.probe.conns(metrics.as_deref());
        self.timeline.begin(self.start, server, conns);
        Ok(Baseline {
            server,
            slab,
            backlog_drops: sys::softnet_dropped(),
            metrics: metrics.is_some(),
            controller_cpu,
            start_rt: 0,
        })
    }

    /// The arrivals start: the run's clock too.
    fn begin(&mut self, baseline: &mut Baseline) -> Result<(), BenchError> {
        self.start = Instant::now();
        baseline.start_rt = sys::realtime_ns();
        self.trace_point();
        if !self.agents.ending() {
            self.agents.send_all(&ToAgent::Start)?;
        }
        self.timeline.restart(self.start);
        self.next_trace = self.start + Duration::from_millis(100);
        self.next_sample = self.start + self.timeline.every;
        self.rate_from = (self.start, 0);
        Ok(())
    }

    /// Phase 3: the ramp-up, until settled (or past the time it could take;
    /// with adaptive arrival, until nothing has moved for a minute).
    fn ramp_up(&mut self) -> Result<Ramp, BenchError> {
        let s = &self.sc;
        let settle_limit = if self.adaptive {
            f64::INFINITY
        } else {
            s.ramp_secs() + s.connect_timeout + s.reply_timeout + 10.0
        };
        let mut control = self
            .adaptive
            .then(|| RateControl::new(s.phases.first().map_or(100.0, |p| p.arrival_rate)));
        let mut next_line = self.start;
        let mut moved = (0, Instant::now());
        let mut arrivals_secs = None;
        let mut stopped = None;
        loop {
            self.agents.pump(Duration::from_millis(50))?;
            if self.agents.ending() {
                break;
            }
            let now = Instant::now();
            let total = self.agents.total();
            if let Some(c) = &total {
                if c.arrivals_done && arrivals_secs.is_none() {
                    arrivals_secs = Some(self.start.elapsed().as_secs_f64());
                }
                if c.arrivals_done && c.connecting == 0 && c.awaiting == 0 {
                    break;
                }
                let progress = c.started + c.connected + c.joined + c.errors.total();
                if progress != moved.0 {
                    moved = (progress, now);
                } else if now.duration_since(moved.1) > Duration::from_secs(60) {
                    eprintln!("\nwarning: nothing moved in the ramp-up for 60 s; going on");
                    break;
                }
            }
            if now >= self.next_trace {
                self.next_trace += Duration::from_millis(100);
                self.trace_point();
                if stopped.is_none() {
                    stopped = self.memory_stop(total.as_ref())?;
                }
                if let (Some(ctl), Some(c)) = (control.as_mut(), &total) {
                    if !c.arrivals_done {
                        let t = now.duration_since(self.start).as_secs_f64();
                        let signals = Signals {
                            t,
                            connected: c.connected,
                            in_flight: c.connecting + c.awaiting,
                            oldest_ms: c.oldest_in_flight_ms,
                            timeouts: c.errors.timeout,
                            cpu: self.trace.window(t - 0.35, t),
                        };
                        if let Some(per_sec) = ctl.tick(signals) {
                            self.agents.send_all(&ToAgent::Rate { per_sec })?;
                        }
                    }
                }
            }
            if now >= self.next_sample {
                self.next_sample += self.timeline.every;
                self.sample();
                self.publish_live("ramp-up");
            }
            if now >= next_line {
                next_line = now
                    + if self.tty {
                        Duration::from_millis(200)
                    } else {
                        Duration::from_secs(1)
                    };
                self.progress("ramp-up");
            }
            if now.duration_since(self.start).as_secs_f64() > settle_limit {
                eprintln!("\nwarning: the ramp-up did not settle in {settle_limit:.0} s; going on");
                break;
            }
        }
        self.trace_point();
        let secs = self.start.elapsed().as_secs_f64();
        self.progress("settled");
        if self.tty {
            eprintln!();
        }
        Ok(Ramp {
            secs,
            control,
            arrivals_secs: arrivals_secs.unwrap_or(secs),
            stopped,
        })
    }

    /// `--min-available`: once `MemAvailable` is under it while users are
    /// still arriving, the agents start no more (those connecting go on).
    fn memory_stop(
        &mut self,
        c: Option<&Counters>,
    ) -> Result<Option<crate::report::MemoryStop>, BenchError> {
        let (Some(min), Some(c)) = (self.min_available, c) else {
            return Ok(None);
        };
        if c.arrivals_done {
            return Ok(None);
        }
        let Some(avail) = sys::mem_available().filter(|a| *a < min) else {
            return Ok(None);
        };
        self.agents.send_all(&ToAgent::StopArrivals)?;
        eprintln!(
            "\nnote: the machine's available memory is {} MiB, under --min-available ({} MiB): no more users start; {} connected stay, and the run goes on with them",
            avail >> 20,
            min >> 20,
            c.connected
        );
        Ok(Some(crate::report::MemoryStop {
            users_started: c.started,
            connected: c.connected,
            mem_available: avail,
            min_available: min,
        }))
    }

    /// Phase 4: let the server finish its work (with presence, until its
    /// traffic stops), then measure idle memory.
    fn plateau(&mut self) -> Result<Plateau, BenchError> {
        self.agents.pump(Duration::from_millis(1000))?;
        let settled = self.settle_presence()?;
        let metrics = self.probe.metrics();
        let server = self.probe.memory(metrics.as_deref());
        let slab = sys::slab();
        let counters = self.agents.total().unwrap_or_default();
        let server_conns = self.probe.conns(metrics.as_deref());
        let agent_rss_delta = self
            .agents
            .links
            .iter()
            .map(|a| a.last.as_ref().map(|c| c.rss as i64).unwrap_or(0) - a.ready_rss as i64)
            .sum();
        Ok(Plateau {
            metrics,
            server,
            slab,
            counters,
            server_conns,
            agent_rss_delta,
            presence_settle_secs: settled.map(|s| s.0),
            quiet_from: settled.map(|s| s.1),
        })
    }

    /// The hold's limit ([`hold_limit`]), saying so when the default cut
    /// the sessions' own schedule short.
    fn hold_limit(&self, parks: bool) -> f64 {
        let (limit, cut) = hold_limit(self.hold, &self.sc, parks);
        if let Some(scheduled) = cut {
            eprintln!(
                "hold: the sessions' think loops would run {scheduled:.0} s; holding {limit:.0} s (--hold SECS for longer)"
            );
        }
        limit
    }

    /// Phase 5: release the barrier and hold: until every session is parked and
    /// every broadcast delivered, or the hold's limit (`hold_limit`), with a
    /// countdown on stderr.
    fn hold(&mut self) -> Result<Hold, BenchError> {
        let start = Instant::now();
        let t0 = self.start.elapsed().as_secs_f64();
        if self.agents.ending() {
            return Ok(Hold {
                start,
                t0,
                t1: t0,
                counters: self.agents.total().unwrap_or_default(),
                backlog_drops: sys::softnet_dropped(),
            });
        }
        self.agents.send_all(&ToAgent::Release)?;
        self.trace_point();
        let parks_forever = self
            .sc
            .roles
            .iter()
            .any(|r| r.session.iter().any(|s| matches!(s, Step::Hold)));
        let limit = self.hold_limit(parks_forever);
        self.publish_live("hold");
        let mut last_recv = (u64::MAX, Instant::now());
        let mut next_line = start;
        loop {
            self.agents.pump(Duration::from_millis(50))?;
            if self.agents.ending() {
                break;
            }
            let now = Instant::now();
            if now >= next_line {
                next_line = now + Duration::from_secs(if self.tty { 1 } else { 10 });
                if let Some(c) = self.agents.total() {
                    hold_line(now.duration_since(start).as_secs_f64(), limit, &c, self.tty);
                }
            }
            if now >= self.next_sample {
                self.next_sample += self.timeline.every;
                self.sample();
                self.publish_live("hold");
            }
            if now >= self.next_trace {
                self.next_trace = now + Duration::from_millis(100);
                self.trace_point();
            }
            let held = now.duration_since(start).as_secs_f64();
            if held >= limit {
                if let Some(c) = self.agents.total() {
                    // Sessions meant to park but still running their steps
                    // (a publisher yet to broadcast), or receipts still out.
                    let (due, running) = (c.receipts_due(), c.unparked());
                    if c.bcast_recv < due || (parks_forever && running > 0) {
                        eprintln!(
                            "\nwarning: the hold ended after {limit:.0} s with {} of {due} broadcast receipts in and {running} sessions still running their steps (broadcasts unsent or on their way); a longer --hold waits for them",
                            c.bcast_recv
                        );
                    }
                }
                break;
            }
            // Sessions that park: done once everyone is parked and broadcasts stop arriving.
            if self.hold.is_none() && held > 0.3 {
                if let Some(c) = self.agents.total() {
                    if c.bcast_recv != last_recv.0 {
                        last_recv = (c.bcast_recv, now);
                    }
                    let delivered = c.bcast_recv >= c.receipts_due()
                        || now.duration_since(last_recv.1) > Duration::from_secs(3);
                    if c.active() == 0 || (c.unparked() == 0 && delivered) {
                        break;
                    }
                }
            }
        }
        self.trace_point();
        if self.tty {
            eprintln!();
        }
        Ok(Hold {
            start,
            t0,
            t1: self.start.elapsed().as_secs_f64(),
            counters: self.agents.total().unwrap_or_default(),
            backlog_drops: sys::softnet_dropped(),
        })
    }

    /// Phase 6: the disconnect storm: how long until the server holds no
    /// connection, and the CPU it spent. `metrics`: the server answers
    /// `/metrics` (a single server's count comes from there).
    fn storm(&mut self, hold: &Hold, metrics: bool) -> Result<Storm, BenchError> {
        let cpu0 = self.probe.sample(None).map(|p| p.cpu_secs);
        let metrics0 = if cpu0.is_none() {
            self.probe.metrics()
        } else {
            None
        };
        let cpu0 = cpu0.or_else(|| {
            metrics0
                .as_deref()
                .and_then(|m| sys::metric(m, "throng_process_cpu_seconds_total"))
        });
        let connections = hold.counters.open;
        // With several workers the connections are counted from their open
        // files: the storm is over when as many files are gone as the agents
        // held connections (the workers' other files, such as their Redis
        // connections, stay).
        let fd_floor = self
            .probe
            .counts_files()
            .then(|| self.probe.open_files().saturating_sub(connections));
        let start = Instant::now();
        self.agents.send_all(&ToAgent::Storm)?;
        let mut secs_to_zero = None;
        let mut server_cpu_secs = None;
        // 30 s, and a second more per 25,000 connections (a million took ~24 s).
        let deadline = start + Duration::from_secs(30 + connections / 25_000);
        // Between checks, at least as long as a check took: counting open
        // files never takes more than half of the controller's time.
        let mut pause = Duration::from_millis(5);
        while Instant::now() < deadline {
            let check = Instant::now();
            // Workers' open files need no /metrics (which a saturated machine
            // may not answer in time); a single server's count does.
            let (drained, scraped) = match fd_floor {
                Some(floor) => (self.probe.open_files() <= floor, None),
                None if metrics => match self.probe.metrics() {
                    Some(m) => (server_conns(&m).unwrap_or(1.0) <= 0.0, Some(m)),
                    None => break,
                },
                None => break,
            };
            pause = pause.max(check.elapsed());
            if drained {
                secs_to_zero = Some(start.elapsed().as_secs_f64());
                let cpu1 = self.probe.proc().map(|p| p.cpu_secs).or_else(|| {
                    scraped.and_then(|m| sys::metric(&m, "throng_process_cpu_seconds_total"))
                });
                if let (Some(a), Some(b)) = (cpu0, cpu1) {
                    server_cpu_secs = Some(b - a);
                }
                break;
            }
            self.agents.pump(pause)?;
        }
        while !self.agents.links.iter().all(|a| a.storm_done || a.lost) && Instant::now() < deadline
        {
            self.agents.pump(Duration::from_millis(20))?;
        }
        self.sample();
        Ok(Storm {
            start,
            connections,
            secs_to_zero,
            server_cpu_secs,
        })
    }

    /// Phase 7: the agents' final reports, merged (a lost agent's last
    /// progress in their place).
    fn collect(&mut self, baseline: &Baseline) -> Result<Collected, BenchError> {
        self.agents.send_all(&ToAgent::Finish)?;
        self.await_finals(Duration::from_secs(30))?;
        let controller_cpu =
            sys::proc_sample("self").map(|p| p.cpu_secs).unwrap_or(0.0) - baseline.controller_cpu;
        let secs = self.start.elapsed().as_secs_f64();
        let mut hists = Hists::default();
        let mut bcasts = BcastTable::new();
        let mut floor = BcastTable::new();
        let mut counters = Counters {
            arrivals_done: true,
            ..Default::default()
        };
        let mut slots = Slots::default();
        let mut presence = crate::presence::Merged::default();
        for a in &self.agents.links {
            let Some(f) = a.final_.as_ref() else {
                // Lost: its counters up to its last progress; its
                // histograms, receipts and slots went with it.
                if let Some(last) = &a.last {
                    counters.add(last);
                }
                continue;
            };
            slots.merge(&f.slots);
            hists.merge_wire(&f.hists);
            merge_bcasts(&mut bcasts, &f.bcasts);
            merge_bcasts(&mut floor, &f.floor);
            counters.add(&f.counters);
            presence.add(&f.presence);
        }
        Ok(Collected {
            hists,
            bcasts,
            floor,
            counters,
            slots,
            presence,
            controller_cpu,
            secs,
        })
    }
}

impl Run {
    /// Waits until every agent has sent its final report or is lost. One
    /// that is silent (slow, its process alive) is waited for until
    /// `Agents` gives up on it; one that keeps saying it is alive but
    /// sends no final report within `limit` is lost.
    fn await_finals(&mut self, limit: Duration) -> Result<(), BenchError> {
        let deadline = Instant::now() + limit;
        while self.agents.links.iter().any(|a| a.awaited()) {
            self.agents.pump(Duration::from_millis(50))?;
            if Instant::now() <= deadline {
                continue;
            }
            for i in 0..self.agents.links.len() {
                let a = &self.agents.links[i];
                if a.awaited() && !a.silent() {
                    self.agents.lose(
                        i,
                        format!(
                            "it sent no final report within {} s of being asked",
                            limit.as_secs()
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_hold_is_one_a_user_can_wait_for() {
        let xml = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/phoenix.xml");
        let sc = crate::tsung::import(&std::fs::read_to_string(xml).unwrap())
            .unwrap()
            .scenario;
        // phoenix.xml's think loops: 1,000 x 30 s, cut to the cap.
        let (limit, cut) = hold_limit(None, &sc, false);
        assert_eq!(limit, HOLD_CAP);
        assert!(cut.is_some_and(|s| s >= 30_000.0), "{cut:?}");
        assert_eq!(hold_limit(Some(600.0), &sc, false), (600.0, None));
        // The built-in scenario parks: 60 s plus --broadcast-after.
        let mut chat = crate::scenario::chat(
            crate::scenario::Phase::at_rate(10, 100.0),
            1,
            1,
            0.1,
            throng_protocol::Vsn::V2,
        );
        crate::scenario::delay_publish(&mut chat, 30.0);
        assert_eq!(hold_limit(None, &chat, true), (90.0, None));
    }
}
