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
//!
//! **A sample, scaled.** Past `--floor-sample` users (default 200,000) the
//! floor is measured on that many sockets, spread over every agent (each
//! its share, its first users) and every writer, and its times are scaled
//! by users / sockets: per receiver, the same fan-out. Its background is
//! kept the run's: each floor socket heartbeats as many times more often
//! (the heartbeats a second are the users'), and the train's rounds are as
//! many times closer (they overlap as the broadcasts do). Why: at 1,000,000
//! a full floor opened a million sockets and wrote three million frames
//! before the first user arrived (2-4 minutes on a quiet day), and on a day
//! this machine ran twice as slow it took 9-12 minutes, a round 180 s, and
//! lost receipts (966,447 and 20,013 of 1,000,000): it took longer than the
//! run it calibrated and measured less than it claimed. What scaling does
//! not carry, both said in the report's note (`--floor-sample 0` measures
//! every user's socket): the kernel's cost per socket grows with the socket
//! count (cache and hash-table misses: recorded floors ran 5-10 us per
//! receiver at 100,000 and 9-16 at 1,000,000), which makes a scaled floor
//! faster and a ratio to it higher; and each round's fixed costs (wakeups,
//! the controller's word to the writers: tens of ms), which scaling
//! multiplies, making it slower and the ratio lower. The first weighs at
//! the default's size (rounds of seconds), the second only on small
//! samples, and neither stood out of a loaded machine's spread at 19,000
//! users on a sample of 5,000 (BENCHMARKS.md, "The floor on a sample").
//!
//! **Every receipt, or said.** A round waits for every one of its receipts;
//! one that stalls ([`ROUND_STALL`] without a receipt) or outlasts the
//! floor's [`BUDGET`] ends the floor there, and the report says how many
//! receipts the round had and that the ratio uses only the rounds before
//! it (none: no ratio): a round short of receipts understates the floor.

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
    /// `--floor-sample`: sockets at most (0: one per user).
    pub sample: u64,
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
    /// The run's users, and what the floor's times are scaled by: users /
    /// sockets (1: a socket per user).
    pub users: u64,
    pub scale: f64,
    /// Why the floor stopped short of every receipt of every round, and
    /// what that means for the ratio (`None`: it had them all). `rounds`
    /// and `train` hold only rounds that had every receipt.
    pub incomplete: Option<String>,
}

/// Rounds measured: the report gives their median.
const ROUNDS: u32 = 3;
/// A round with no receipt for this long is over, short of receipts.
const ROUND_STALL: Duration = Duration::from_secs(10);
/// The whole floor's time, at most: sockets, rounds and train (a sample
/// of 200,000 takes well under a minute on this machine; the run it
/// calibrates, at that size or more, several).
const BUDGET: Duration = Duration::from_secs(180);

/// What the floor phase works with: the run's agents and server probe,
/// lent by the run (`Run::floor`), so that this phase needs nothing else
/// of it.
pub(super) struct FloorPhase<'a> {
    pub agents: &'a mut Agents,
    pub probe: &'a ServerProbe,
    /// `--min-available`: the floor is given up if the machine's available
    /// memory falls under it while its sockets open.
    pub min_available: Option<u64>,
}

impl FloorPhase<'_> {
    /// Measures the floor with the writers `w`, then has the agents reset
    /// their floor sockets and the writers exit; `None` when it could not
    /// be measured (the run goes on without it).
    pub(super) fn run(&mut self, mut w: Writers) -> Result<Option<Floor>, BenchError> {
        w.links.phase = "floor";
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

    /// The floor: the writers listen, the agents open their sockets to
    /// them (one per user, or a sample), the rounds alone, then the train
    /// when the broadcasts overlap; within [`BUDGET`].
    fn measure_floor(&mut self, w: &mut Writers) -> Result<Floor, BenchError> {
        let deadline = Instant::now() + BUDGET;
        let per_agent: Vec<u64> = self.agents.links.iter().map(|l| l.users).collect();
        let users: u64 = per_agent.iter().sum::<u64>().max(1);
        let shares = shares(&per_agent, w.sample);
        let sampled = shares.iter().sum::<u64>().max(1);
        let scale = users as f64 / sampled as f64;
        let addrs = order_writers(w, &shares)?;
        eprintln!(
            "floor: {sampled} sockets to {} writer(s) of {} thread(s), no server logic{}",
            addrs.len(),
            w.threads,
            if sampled < users {
                format!(" (a sample of the {users} users' sockets, each heartbeating {scale:.1}x as often; times scaled x{scale:.1} per receiver)")
            } else {
                String::new()
            }
        );
        let start = Instant::now();
        let (sockets, failed) = self.open_sockets(w, addrs, &shares, deadline)?;
        let connect_secs = start.elapsed().as_secs_f64();
        let cpu0 = self.floor_cpu(w);
        let (c0, rounds_start) = (self.agents.total().unwrap_or_default(), Instant::now());
        let seen = c0.floor_recv;
        let mut incomplete = None;
        let (rounds, slowest_ms, got) =
            self.rounds_alone(w, (sockets, seen), deadline, &mut incomplete)?;
        let cpu1 = self.floor_cpu(w);
        let hb1 = self.agents.total().map_or(0, |c| c.floor_hb_sent);
        let rounds_secs = rounds_start.elapsed().as_secs_f64();
        let receivers = got - seen;
        // Broadcasts further apart than twice a round will not overlap; the
        // train's rounds come as many times closer as the sample is smaller.
        let t = w
            .train
            .filter(|_| incomplete.is_none())
            .map(|t| Train {
                interval: t.interval / scale,
                ..t
            })
            .filter(|t| t.interval * 1e3 < 2.0 * slowest_ms);
        let train = match t {
            Some(t) => self.floor_train(w, t, (sockets, got), deadline, &mut incomplete)?,
            None => Vec::new(),
        };
        Ok(Floor {
            train_interval: if train.is_empty() {
                0.0
            } else {
                w.train.map_or(0.0, |t| t.interval)
            },
            train,
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
            users,
            scale,
            incomplete,
        })
    }

    /// Has agent `i` open `shares[i]` sockets to the writers at `addrs`
    /// (heartbeating as much more often as they are fewer than its users);
    /// returns when the writers hold them all: (open, failed).
    fn open_sockets(
        &mut self,
        w: &mut Writers,
        addrs: Vec<SocketAddr>,
        shares: &[u64],
        deadline: Instant,
    ) -> Result<(u64, u64), BenchError> {
        let users = shares.iter().sum::<u64>();
        for (i, &n) in shares.iter().enumerate() {
            let planned = self.agents.links[i].users.max(1);
            let order = ToAgent::Floor {
                writers: addrs.clone(),
                sockets: Some(n),
                heartbeat_scale: Some((n as f64 / planned as f64).clamp(1e-6, 1.0)),
            };
            self.agents.send(i, &order)?;
        }
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
            if Instant::now() > deadline {
                return Err(BenchError::Limit(format!(
                    "{} of {users} floor sockets open after the floor's {} s",
                    c.floor_open,
                    BUDGET.as_secs()
                )));
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
    /// compared with them only when it was alone too: see `outcome`), on
    /// `sockets` from `got` receipts: the rounds that had every receipt,
    /// the slowest's last receipt (ms) and the receipts after them. A round
    /// short of receipts ends them, said in `incomplete`.
    fn rounds_alone(
        &mut self,
        w: &mut Writers,
        (sockets, mut got): (u64, u64),
        deadline: Instant,
        incomplete: &mut Option<String>,
    ) -> Result<(Vec<Round>, f64, u64), BenchError> {
        let mut rounds = Vec::new();
        let mut slowest_ms = 0.0f64;
        for round in 1..=ROUNDS {
            let stamp_ns = sys::realtime_ns();
            w.links.send_all(&ToAgent::Fire { round, stamp_ns })?;
            let what = format!("floor round {round}");
            let short = self.await_rounds(w, round..round + 1, (got, sockets), deadline, &what)?;
            let c = self.agents.total().unwrap_or_default();
            got = c.floor_recv;
            if short.is_some() {
                *incomplete = short;
                break;
            }
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
    /// are sent (closer on a sample), numbered after the rounds alone, on
    /// `sockets` from `got` receipts; none when it was short of receipts
    /// (said in `incomplete`).
    fn floor_train(
        &mut self,
        w: &mut Writers,
        t: Train,
        (sockets, got): (u64, u64),
        deadline: Instant,
        incomplete: &mut Option<String>,
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
        let rounds = first..first + t.rounds;
        let short = self.await_rounds(w, rounds, (got, sockets), deadline, "floor train")?;
        if short.is_some() {
            *incomplete = short;
            return Ok(Vec::new());
        }
        for (k, r) in train.iter_mut().enumerate() {
            r.write_secs = write_secs(w, first + k as u32);
        }
        let c = self.agents.total().unwrap_or_default();
        eprintln!(
            "floor: {} rounds {:.3} s apart, as the broadcasts: last receipt {:.0} ms after the first stamp",
            t.rounds,
            t.interval,
            c.floor_last_ns.saturating_sub(train[0].stamp_ns) as f64 / 1e6
        );
        self.agents.pump(Duration::from_millis(300))?;
        Ok(train)
    }

    /// Waits until every writer has written `rounds` and the agents hold
    /// `sockets` more receipts per round than `got`: `None`. Short of them
    /// when receipts stall for [`ROUND_STALL`] or the floor's `deadline`
    /// passes: why, and what it means for the ratio (also said at once).
    fn await_rounds(
        &mut self,
        w: &mut Writers,
        rounds: std::ops::Range<u32>,
        (got, sockets): (u64, u64),
        deadline: Instant,
        what: &str,
    ) -> Result<Option<String>, BenchError> {
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
                return Ok(None);
            }
            if c.floor_recv != last.0 {
                last = (c.floor_recv, Instant::now());
            }
            let why = if last.1.elapsed() > ROUND_STALL {
                format!("none for {} s", ROUND_STALL.as_secs())
            } else if Instant::now() > deadline {
                format!("when the floor's {} s ran out", BUDGET.as_secs())
            } else {
                continue;
            };
            let short = format!(
                "{what} had {} of {} receipts ({why}): the machine did not deliver the floor's own fan-out whole, so the floor stopped there; a round short of receipts would understate the floor, and the ratio uses only the rounds before it (none: no ratio)",
                c.floor_recv - got,
                want - got
            );
            eprintln!("warning: {short}");
            return Ok(Some(short));
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

/// Each agent's floor sockets: its users (`per_agent`), or with a
/// `sample` smaller than their sum, its share of the sample (in proportion,
/// the remainder one each to the first agents).
fn shares(per_agent: &[u64], sample: u64) -> Vec<u64> {
    let total: u64 = per_agent.iter().sum();
    if sample == 0 || sample >= total {
        return per_agent.to_vec();
    }
    let mut out: Vec<u64> = per_agent
        .iter()
        .map(|&u| (u as u128 * sample as u128 / total as u128) as u64)
        .collect();
    let mut left = sample - out.iter().sum::<u64>();
    for (s, &u) in out.iter_mut().zip(per_agent) {
        if left > 0 && *s < u {
            *s += 1;
            left -= 1;
        }
    }
    out
}

/// The sockets each of `writers` writers gets: agent `k` of `K` opens its
/// first `shares[k]` users' (users `k + j K`), user `g` to writer `g % writers`.
fn writer_expects(shares: &[u64], writers: usize) -> Vec<u64> {
    let (agents, n) = (shares.len() as u64, writers.max(1) as u64);
    let mut expect = vec![0; writers.max(1)];
    for (k, &s) in shares.iter().enumerate() {
        for j in 0..s {
            expect[((k as u64 + j * agents) % n) as usize] += 1;
        }
    }
    expect
}

/// Orders each writer to expect its sockets of the agents' `shares`, and
/// waits until every one listens: their addresses.
fn order_writers(w: &mut Writers, shares: &[u64]) -> Result<Vec<SocketAddr>, BenchError> {
    let expects = writer_expects(shares, w.links.len());
    for (i, &expect) in expects.iter().enumerate().take(w.links.len()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample is shared in proportion over the agents, every socket
    /// placed; none asked (0) or one as large as the run: every user's.
    #[test]
    fn a_sample_is_shared_over_every_agent() {
        let users = [19_000, 19_000, 19_000, 5_000];
        assert_eq!(shares(&users, 0), users);
        assert_eq!(shares(&users, 62_000), users);
        let s = shares(&users, 6_201);
        assert_eq!(s.iter().sum::<u64>(), 6_201);
        assert_eq!(s, [1_901, 1_900, 1_900, 500]);
        assert!(s.iter().zip(users).all(|(s, u)| *s <= u));
    }

    /// Each writer expects exactly the sockets the agents will open to it.
    #[test]
    fn each_writer_expects_the_sockets_it_gets() {
        // Three agents, users 0..10 (agent k: k, k+3, ...); agent 0 opens
        // its first 2 (users 0, 3), agent 1 its 3 (1, 4, 7), agent 2 one (2).
        let e = writer_expects(&[2, 3, 1], 2);
        // Writer 0: users 0, 4, 2; writer 1: users 3, 1, 7.
        assert_eq!(e, [3, 3]);
        let full = writer_expects(&[4, 3, 3], 3);
        assert_eq!(full.iter().sum::<u64>(), 10);
        // Users 0..10 by g % 3: 4, 3, 3.
        assert_eq!(full, [4, 3, 3]);
    }
}
