//! The floor phase (see [`crate::floor`]): before the first user arrives,
//! the agents open one plain socket per user to the floor writers, the
//! writers write a broadcast's frame to all of them a few rounds over, and
//! the agents time each round as they time a broadcast; then every floor
//! socket is reset and the writers exit.
//!
//! The agents' floor sockets heartbeat as their users will, and the writers
//! answer: the rounds run over the heartbeat background the broadcasts run
//! over. Rounds go one at a time, each alone on the machine. When the run's
//! broadcasts follow one another closer than one takes (the bare command's
//! three, 0.1 s apart), a train of as many rounds on the same schedule
//! follows, so overlapping broadcasts have an overlapping floor to be
//! compared with.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::agents::Agents;
use super::probe::ServerProbe;
use crate::error::BenchError;
use crate::floor::{FloorFrame, FloorOrder};
use crate::sys;
use crate::wire::ToAgent;

/// The floor writers of a run, linked and waiting for orders.
pub(super) struct Writers {
    pub links: Agents,
    /// Writing threads per writer: the server's shards per process.
    pub threads: u32,
    pub frame: FloorFrame,
    /// The broadcasts' schedule, for the train (`None`: no train).
    pub train: Option<Train>,
}

/// A schedule of broadcasts: how many, how far apart (s).
#[derive(Clone, Copy, Debug)]
pub(super) struct Train {
    pub rounds: u32,
    pub interval: f64,
}

/// One round: every writer writes the frame once to each of its sockets.
#[derive(Clone, Debug, Default)]
pub(super) struct Round {
    /// CLOCK_REALTIME ns the round was stamped with, as the controller
    /// told the writers to write it (receipts are timed from it).
    pub stamp_ns: u64,
    /// The slowest writer's time to write to all its sockets, s.
    pub write_secs: f64,
}

/// The floor as measured.
pub(super) struct Floor {
    pub writers: usize,
    pub threads: u32,
    /// Floor sockets open (one per user), and those that failed to open.
    pub sockets: u64,
    pub failed: u64,
    /// Seconds to open them.
    pub connect_secs: f64,
    pub rounds: Vec<Round>,
    /// The train's rounds (empty: none) and their interval, s.
    pub train: Vec<Round>,
    pub train_interval: f64,
    /// Receipts, all rounds.
    pub receivers: u64,
    /// CPU seconds over the rounds: the writers, the agents, the server
    /// (idle: a check), and the machine's busy seconds (all cores).
    pub writers_cpu_secs: f64,
    pub agents_cpu_secs: f64,
    pub server_cpu_secs: Option<f64>,
    pub machine_busy_secs: Option<f64>,
    /// Heartbeats the agents sent on the floor's sockets over the rounds
    /// (the writers answered them), and the rounds' seconds.
    pub heartbeats: u64,
    pub rounds_secs: f64,
}

/// Rounds measured: the report gives their median.
const ROUNDS: u32 = 3;
/// A round with no receipt for this long is over, however many are missing.
const ROUND_STALL: Duration = Duration::from_secs(5);

/// What the floor phase works with: the run's agents and server probe,
/// lent by the run (`Run::floor`), so that this phase needs nothing else
/// of it.
pub(super) struct FloorPhase<'a> {
    pub agents: &'a mut Agents,
    pub probe: &'a ServerProbe,
    /// The run's users: one floor socket each.
    pub users: u64,
    /// `--min-available`: the floor is given up if the machine's available
    /// memory falls under it while its sockets open.
    pub min_available: Option<u64>,
}

impl FloorPhase<'_> {
    /// Measures the floor with the writers `w`, then has the agents reset
    /// their floor sockets and the writers exit; `None` when it could not
    /// be measured (the run goes on without it).
    pub(super) fn run(&mut self, mut w: Writers) -> Result<Option<Floor>, BenchError> {
        let result = self.measure_floor(&mut w);
        // Whatever happened: the agents reset their floor sockets, the writers go.
        let _ = self.agents.send_all(&ToAgent::FloorEnd);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.agents.links.iter().all(|a| a.floor_closed || a.lost)
            && Instant::now() < deadline
        {
            self.agents.pump(Duration::from_millis(20))?;
        }
        w.links.finish();
        w.links.reap();
        // The floor is a yardstick: without it the run goes on.
        match result {
            Ok(f) => Ok(Some(f)),
            Err(e) => {
                eprintln!("warning: no floor measured ({e}); the run goes on without it");
                Ok(None)
            }
        }
    }

    /// The floor: the writers listen, the agents open one socket per user
    /// to them, the rounds alone, then the train when the broadcasts overlap.
    fn measure_floor(&mut self, w: &mut Writers) -> Result<Floor, BenchError> {
        let users = self.users;
        let addrs = order_writers(w, users)?;
        eprintln!(
            "floor: {users} sockets to {} writer(s) of {} thread(s), no server logic",
            addrs.len(),
            w.threads
        );
        let start = Instant::now();
        let (sockets, failed) = self.open_sockets(w, addrs)?;
        let connect_secs = start.elapsed().as_secs_f64();
        let cpu0 = self.floor_cpu(w);
        let (c0, rounds_start) = (self.agents.total().unwrap_or_default(), Instant::now());
        let seen = c0.floor_recv;
        let (rounds, slowest_ms, got) = self.rounds_alone(w, sockets, seen)?;
        let cpu1 = self.floor_cpu(w);
        let hb1 = self.agents.total().map_or(0, |c| c.floor_hb_sent);
        let rounds_secs = rounds_start.elapsed().as_secs_f64();
        let receivers = got - seen;
        // Broadcasts further apart than twice a round will not overlap.
        let t = w.train.filter(|t| t.interval * 1e3 < 2.0 * slowest_ms);
        let train = match t {
            Some(t) => self.floor_train(w, t, sockets, got)?,
            None => Vec::new(),
        };
        Ok(Floor {
            train,
            train_interval: t.map_or(0.0, |t| t.interval),
            receivers,
            writers: w.links.len(),
            threads: w.threads,
            sockets,
            failed,
            connect_secs,
            rounds,
            writers_cpu_secs: cpu1.writers - cpu0.writers,
            agents_cpu_secs: cpu1.agents - cpu0.agents,
            server_cpu_secs: cpu0.server.zip(cpu1.server).map(|(a, b)| b - a),
            machine_busy_secs: cpu0.machine.zip(cpu1.machine).map(|(a, b)| b - a),
            heartbeats: hb1.saturating_sub(c0.floor_hb_sent),
            rounds_secs,
        })
    }

    /// Has the agents open one socket per user to the writers at `addrs`;
    /// returns when the writers hold them all: (open, failed).
    fn open_sockets(
        &mut self,
        w: &mut Writers,
        addrs: Vec<SocketAddr>,
    ) -> Result<(u64, u64), BenchError> {
        let users = self.users;
        self.agents.send_all(&ToAgent::Floor { writers: addrs })?;
        let mut last = (0, Instant::now());
        loop {
            self.agents.pump(Duration::from_millis(20))?;
            w.links.pump(Duration::ZERO)?;
            gone(self.agents, &w.links)?;
            let Some(c) = self.agents.total() else {
                continue;
            };
            let accepted: u64 = w.links.links.iter().map(|l| l.accepted).sum();
            let settled = c.floor_open + c.floor_failed >= users && c.floor_connecting == 0;
            if settled && accepted >= c.floor_open {
                return Ok((c.floor_open, c.floor_failed));
            }
            if let Some(min) = self.min_available {
                if let Some(avail) = sys::mem_available().filter(|a| *a < min) {
                    return Err(BenchError::Limit(format!(
                        "the machine's available memory fell to {} MiB, under --min-available ({} MiB), with {} of {users} floor sockets open: the floor's sockets cost the kernel about what the run's do, so the ramp-up will stop near that count too",
                        avail >> 20,
                        min >> 20,
                        c.floor_open
                    )));
                }
            }
            if c.floor_open + accepted != last.0 {
                last = (c.floor_open + accepted, Instant::now());
            } else if last.1.elapsed() > Duration::from_secs(20) {
                return Err(BenchError::Protocol(format!(
                    "floor sockets stalled: {} of {users} open, {accepted} accepted, {} failed",
                    c.floor_open, c.floor_failed
                )));
            }
        }
    }

    /// The rounds one at a time, each alone on the machine (a broadcast is
    /// compared with them only when it was alone too: see `outcome`), from
    /// `got` receipts: the rounds, the slowest's last receipt (ms) and the
    /// receipts after them.
    fn rounds_alone(
        &mut self,
        w: &mut Writers,
        sockets: u64,
        mut got: u64,
    ) -> Result<(Vec<Round>, f64, u64), BenchError> {
        let mut rounds = Vec::new();
        let mut slowest_ms = 0.0f64;
        for round in 1..=ROUNDS {
            let stamp_ns = sys::realtime_ns();
            w.links.send_all(&ToAgent::Fire { round, stamp_ns })?;
            self.await_rounds(
                w,
                round..round + 1,
                got,
                sockets,
                &format!("floor round {round}"),
            )?;
            let c = self.agents.total().unwrap_or_default();
            got = c.floor_recv;
            let write_secs = write_secs(w, round);
            let last_ms = c.floor_last_ns.saturating_sub(stamp_ns) as f64 / 1e6;
            slowest_ms = slowest_ms.max(last_ms);
            eprintln!(
                "floor: round {round}: last receipt {last_ms:.0} ms after the stamp (writers {:.0} ms)",
                write_secs * 1e3
            );
            rounds.push(Round {
                stamp_ns,
                write_secs,
            });
            // The machine settles between rounds.
            self.agents.pump(Duration::from_millis(300))?;
        }
        Ok((rounds, slowest_ms, got))
    }

    /// The train: `t.rounds` rounds `t.interval` apart, as the broadcasts
    /// are sent, numbered after the rounds alone; `got` receipts so far.
    fn floor_train(
        &mut self,
        w: &mut Writers,
        t: Train,
        sockets: u64,
        got: u64,
    ) -> Result<Vec<Round>, BenchError> {
        let first = ROUNDS + 1;
        let start = Instant::now();
        let mut train = Vec::new();
        for k in 0..t.rounds {
            let at = start + Duration::from_secs_f64(t.interval * k as f64);
            while Instant::now() < at {
                self.agents
                    .pump(at.saturating_duration_since(Instant::now()))?;
                w.links.pump(Duration::ZERO)?;
            }
            let stamp_ns = sys::realtime_ns();
            w.links.send_all(&ToAgent::Fire {
                round: first + k,
                stamp_ns,
            })?;
            train.push(Round {
                stamp_ns,
                write_secs: 0.0,
            });
        }
        self.await_rounds(w, first..first + t.rounds, got, sockets, "floor train")?;
        for (k, r) in train.iter_mut().enumerate() {
            r.write_secs = write_secs(w, first + k as u32);
        }
        let c = self.agents.total().unwrap_or_default();
        eprintln!(
            "floor: {} rounds {} s apart, as the broadcasts: last receipt {:.0} ms after the first stamp",
            t.rounds,
            t.interval,
            c.floor_last_ns.saturating_sub(train[0].stamp_ns) as f64 / 1e6
        );
        self.agents.pump(Duration::from_millis(300))?;
        Ok(train)
    }

    /// Waits until every writer has written `rounds` and the agents hold
    /// `sockets` more receipts per round than `got`, or until receipts
    /// stall for ROUND_STALL (said as a warning on `what`).
    fn await_rounds(
        &mut self,
        w: &mut Writers,
        rounds: std::ops::Range<u32>,
        got: u64,
        sockets: u64,
        what: &str,
    ) -> Result<(), BenchError> {
        let want = got + sockets * rounds.len() as u64;
        let mut last = (got, Instant::now());
        loop {
            self.agents.pump(Duration::from_millis(10))?;
            w.links.pump(Duration::ZERO)?;
            gone(self.agents, &w.links)?;
            let c = self.agents.total().unwrap_or_default();
            let written = rounds.clone().all(|r| {
                w.links
                    .links
                    .iter()
                    .all(|l| l.fired.iter().any(|f| f.0 == r))
            });
            if c.floor_recv >= want && written {
                return Ok(());
            }
            if c.floor_recv != last.0 {
                last = (c.floor_recv, Instant::now());
            } else if last.1.elapsed() > ROUND_STALL {
                eprintln!(
                    "warning: {what}: {} of {} receipts",
                    c.floor_recv - got,
                    want - got
                );
                return Ok(());
            }
        }
    }

    /// CPU seconds so far: the writers, the agents, the server, the machine (busy).
    fn floor_cpu(&self, w: &Writers) -> FloorCpu {
        let of = |links: &Agents| -> f64 {
            links
                .links
                .iter()
                .filter_map(|l| sys::proc_sample(&l.pid.to_string()))
                .map(|p| p.cpu_secs)
                .sum()
        };
        FloorCpu {
            writers: of(&w.links),
            agents: of(self.agents),
            server: self.probe.proc().map(|p| p.cpu_secs),
            machine: sys::machine_cpu().map(|(busy, _)| busy),
        }
    }
}

/// An error once an agent or a floor writer is lost (`Agents` has said
/// which, and why): the floor cannot be whole without it.
fn gone(agents: &Agents, writers: &Agents) -> Result<(), BenchError> {
    if agents.ending() || writers.ending() {
        return Err(BenchError::Limit(
            "an agent or floor writer went away during the floor".into(),
        ));
    }
    Ok(())
}

/// The slowest writer's time to write `round`, s.
fn write_secs(w: &Writers, round: u32) -> f64 {
    w.links
        .links
        .iter()
        .flat_map(|l| l.fired.iter().filter(|f| f.0 == round).map(|f| f.1))
        .fold(0.0, f64::max)
}

/// Orders each writer to expect its share of `users` sockets, and waits
/// until every one listens: their addresses.
fn order_writers(w: &mut Writers, users: u64) -> Result<Vec<SocketAddr>, BenchError> {
    let n = w.links.len() as u64;
    for i in 0..w.links.len() {
        let expect = users / n + u64::from((i as u64) < users % n);
        let order = FloorOrder {
            expect,
            threads: w.threads,
            frame: w.frame.clone(),
        };
        w.links.send(i, &ToAgent::FloorWrite(Box::new(order)))?;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !w.links.links.iter().all(|l| l.listening.is_some()) {
        if Instant::now() > deadline {
            return Err(BenchError::Protocol(
                "floor writers did not listen within 20 s".into(),
            ));
        }
        w.links.pump(Duration::from_millis(20))?;
    }
    Ok(w.links.links.iter().filter_map(|l| l.listening).collect())
}

struct FloorCpu {
    writers: f64,
    agents: f64,
    server: Option<f64>,
    machine: Option<f64>,
}
