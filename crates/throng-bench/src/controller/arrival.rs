//! Adaptive arrival: the controller's choice of the arrival rate while the
//! users arrive, so a run finds the rate this machine sustains instead of
//! overloading itself and counting its own overload against the server.
//!
//! Every 100 ms ([`RateControl::tick`]) it reads what the agents report (the
//! handshakes and joins in flight, the age of the oldest, timeouts) and the
//! CPU trace (the machine, the server's busiest thread, the busiest agent):
//!
//! - a timeout, or a handshake in flight for longer than [`HARD_MS`]: the
//!   rate is halved (from the handshakes actually completed per second
//!   over a window longer than the waits tolerated, if fewer) and held for
//!   a second;
//! - handshakes queuing (the oldest older than [`TARGET_MS`], or more in
//!   flight than [`TARGET_MS`] of arrivals at this rate): cut to four
//!   fifths of that, held for half a second;
//! - after the first cut, a wait counts only once it outlasts the waits
//!   that drained by themselves over the last [`MEMORY_SECS`] by
//!   [`SLACK_SECS`], and at most [`WINDOW_SECS`] (a standing queue, as
//!   CoDel tells one from a burst). A server that stalls now and then
//!   whatever the arrival rate (presence sending a count to every
//!   subscriber once a second, a GC, a neighbour) makes handshakes wait at
//!   every stall, and a cut does not shorten that wait: cutting on it
//!   ratcheted the rate down to the floor (197/s against 11,621/s for a
//!   100,000-user presence topic; 107/s in the simulation in the tests).
//!   A queue that drains between stalls is one the machine sustains; one
//!   that outlasts them is not. Slow start still ends on the first wait
//!   (it grows 50% a tick and cannot wait), and a timeout always cuts;
//! - while held, nothing changes: the queue a cut leaves drains first;
//! - a queue already draining (fewer in flight, the oldest no older): held;
//! - the oldest past half the target, or the machine's CPU saturated while
//!   the queue grows: held;
//! - otherwise raised: by half every tick until the first cut or the oldest
//!   handshake passes a quarter of the target (slow start, as TCP's, left
//!   on rising delay as HyStart does); after it, by a quarter a tick back up to 80% of the rate
//!   the last cut came at, and by 5% a tick (~60% a second) beyond, so a
//!   cut too deep (a noisy moment) costs little and the known limit is
//!   approached gently (as CUBIC does).
//!
//! Each cut names the resource that set it, from the CPU trace at that
//! moment: the machine's cores, a server thread, an agent, or (with CPU to
//! spare) the server's handshake path itself. The report gives the rate
//! sustained after the first cut and the resource most cuts named.

use std::collections::VecDeque;

use crate::report::{CpuWindow, RateStep};

/// Handshakes in flight for longer than this (ms) mean they queue.
pub(super) const TARGET_MS: u64 = 200;
/// And for longer than this, that they queue badly: halve the rate.
pub(super) const HARD_MS: u64 = 500;
/// After the first cut, a wait always counts once it lasts this long (s):
/// longer than most stalls that drain by themselves, far shorter than the
/// connect timeout (10 s by default).
pub(super) const WINDOW_SECS: f64 = 2.0;
/// How long the waits that drained by themselves are remembered...
const MEMORY_SECS: f64 = 5.0;
/// ...and how much longer than the longest of them a wait may last.
const SLACK_SECS: f64 = 0.2;
/// The rate never goes below this (users per second)...
const MIN_RATE: f64 = 100.0;
/// ...or above this.
const MAX_RATE: f64 = 200_000.0;

/// What the controller sees at a tick.
#[derive(Clone, Debug, Default)]
pub(super) struct Signals {
    /// Seconds since the arrivals started.
    pub t: f64,
    /// Handshakes completed so far.
    pub connected: u64,
    /// Connects, upgrades and tracked replies in flight now.
    pub in_flight: u64,
    /// The oldest of them, ms.
    pub oldest_ms: u64,
    /// Timeouts so far.
    pub timeouts: u64,
    /// CPU over the last few ticks.
    pub cpu: CpuWindow,
}

/// The controller's state.
pub(super) struct RateControl {
    rate: f64,
    slow_start: bool,
    /// The rate the last cut came at.
    last_max: f64,
    /// No raise before this (s), after a cut: the queue drains first.
    hold_until: f64,
    prev: Option<Signals>,
    /// `(t, connected)` over the last [`WINDOW_SECS`] and a bit, for the
    /// achieved rate.
    recent: VecDeque<(f64, u64)>,
    /// When the current wait began (handshakes queuing), if they queue.
    waiting_since: Option<f64>,
    /// Waits that ended in the last [`MEMORY_SECS`]: `(end, length)`.
    waits: VecDeque<(f64, f64)>,
    /// Every change of rate.
    pub steps: Vec<RateStep>,
    /// When the first cut came (s), and the handshakes done by then.
    pub first_cut: Option<(f64, u64)>,
    /// The resource each cut named.
    pub limits: Vec<String>,
}

impl RateControl {
    pub fn new(rate: f64) -> RateControl {
        RateControl {
            rate,
            slow_start: true,
            last_max: 0.0,
            hold_until: 0.0,
            prev: None,
            recent: VecDeque::new(),
            waiting_since: None,
            waits: VecDeque::new(),
            steps: vec![RateStep {
                t: 0.0,
                per_sec: rate,
                why: "start".into(),
            }],
            first_cut: None,
            limits: Vec::new(),
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// One tick: the new rate, when it changes.
    pub fn tick(&mut self, s: Signals) -> Option<f64> {
        let queue_limit = (self.rate * TARGET_MS as f64 / 1000.0).max(50.0);
        let queued = s.oldest_ms > TARGET_MS || s.in_flight as f64 > queue_limit;
        // How long handshakes have been waiting, and how long the waits
        // the machine got over by itself lately were.
        if queued {
            self.waiting_since.get_or_insert(s.t);
        } else if let Some(since) = self.waiting_since.take() {
            self.waits.push_back((s.t, s.t - since));
        }
        while self.waits.front().is_some_and(|w| s.t - w.0 > MEMORY_SECS) {
            self.waits.pop_front();
        }
        // Before the first cut, any wait counts (slow start grows 50% a
        // tick and cannot wait); after it, a wait counts once it lasts
        // longer than the recent ones that drained by themselves did, and
        // at most WINDOW_SECS (see the module doc).
        let tolerance = if self.first_cut.is_none() {
            0.0
        } else {
            let longest = self.waits.iter().map(|w| w.1).fold(0.0, f64::max);
            (longest + SLACK_SECS).min(WINDOW_SECS)
        };
        let standing = self
            .waiting_since
            .is_some_and(|since| s.t - since >= tolerance);
        // Handshakes completed per second over a window longer than the
        // waits tolerated: what the server and machine actually took (the
        // offered rate when no queue stood); over a shorter one it says
        // too little, and over a stall nothing at all.
        let span = (tolerance + 0.3).max(0.5);
        self.recent.push_back((s.t, s.connected));
        while self.recent.len() > 2 && s.t - self.recent[1].0 >= WINDOW_SECS + 0.5 {
            self.recent.pop_front();
        }
        let prev = self.prev.replace(s.clone())?;
        let (t0, c0) = self
            .recent
            .iter()
            .rev()
            .find(|r| s.t - r.0 >= span)
            .copied()
            .unwrap_or(self.recent[0]);
        let achieved = if s.t - t0 >= 0.3 {
            s.connected.saturating_sub(c0) as f64 / (s.t - t0)
        } else {
            self.rate
        };
        let machine = s.cpu.machine_pct.unwrap_or(0.0) / (s.cpu.cores.max(1) as f64 * 100.0);
        let draining = s.in_flight < prev.in_flight && s.oldest_ms <= prev.oldest_ms;
        let new = if s.t < self.hold_until {
            return None;
        } else if s.timeouts <= prev.timeouts && s.oldest_ms > TARGET_MS / 4 && draining {
            // A queue that is draining already needs no deeper cut.
            return None;
        } else if s.timeouts > prev.timeouts || (standing && s.oldest_ms > HARD_MS) {
            self.cut(&s, achieved, 0.5, 1.0)
        } else if standing {
            self.cut(&s, achieved, 0.8, 0.5)
        } else if s.oldest_ms > TARGET_MS / 2
            || (machine >= 0.98 && s.in_flight > prev.in_flight && s.in_flight > 10)
        {
            // Waiting now (a stall, or a queue not yet standing): no raise.
            return None;
        } else if self.slow_start && s.oldest_ms > TARGET_MS / 4 {
            // Handshakes begin to wait: slow start ends here, before a
            // queue forms (as TCP's HyStart leaves it on rising delay).
            self.slow_start = false;
            self.last_max = self.rate;
            self.rate * 1.05
        } else if self.slow_start {
            self.rate * 1.5
        } else if self.rate < 0.8 * self.last_max {
            (self.rate * 1.25).min(0.8 * self.last_max)
        } else {
            self.rate * 1.05
        };
        let new = new.clamp(MIN_RATE, MAX_RATE);
        if (new - self.rate).abs() < 1.0 {
            return None;
        }
        if new > self.rate {
            self.steps.push(RateStep {
                t: s.t,
                per_sec: new,
                why: "raise".into(),
            });
        }
        self.rate = new;
        Some(new)
    }

    /// A cut to `factor` of the rate, or of the rate `achieved` if lower,
    /// held `hold` seconds, naming its resource. The rate to recover to is
    /// the rate before the cut or the one achieved, if higher: after an
    /// overshoot, the cuts that follow while its queue drains come at lower
    /// and lower rates, and taking each for the limit left the rate
    /// recovering 5% a tick from 448/s (100,000 users with presence).
    fn cut(&mut self, s: &Signals, achieved: f64, factor: f64, hold: f64) -> f64 {
        let to = self.rate.min(achieved) * factor;
        let limit = resource(s);
        self.steps.push(RateStep {
            t: s.t,
            per_sec: to.clamp(MIN_RATE, MAX_RATE),
            why: format!("cut: {limit}"),
        });
        self.limits.push(limit);
        self.last_max = self.rate.max(achieved);
        self.slow_start = false;
        self.hold_until = s.t + hold;
        self.first_cut.get_or_insert((s.t, s.connected));
        to
    }

    /// The resource most cuts named.
    pub fn limited_by(&self) -> Option<String> {
        let mut counts: Vec<(&String, usize)> = Vec::new();
        for l in &self.limits {
            let key = l.split(':').next().unwrap_or(l);
            match counts
                .iter_mut()
                .find(|(k, _)| k.split(':').next() == Some(key))
            {
                Some((_, n)) => *n += 1,
                None => counts.push((l, 1)),
            }
        }
        counts
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map(|(l, n)| format!("{l} ({n} of {} cuts)", self.limits.len()))
    }
}

/// Which resource a cut is down to, from the CPU at that moment: the
/// machine's cores, a server thread, an agent, or, with CPU to spare, the
/// server's handshake path.
fn resource(s: &Signals) -> String {
    let c = &s.cpu;
    let capacity = c.cores.max(1) as f64 * 100.0;
    let machine = c.machine_pct.unwrap_or(0.0);
    let agent = c.agents_pct.iter().copied().fold(0.0, f64::max);
    let queue = format!(
        "oldest handshake {} ms, {} in flight",
        s.oldest_ms, s.in_flight
    );
    if machine >= 0.95 * capacity {
        format!(
            "the machine's CPU: {} cores {:.0}% of {:.0}% busy (server {:.0}%, agents {:.0}%); {queue}",
            c.cores,
            machine,
            capacity,
            c.server_pct.unwrap_or(0.0),
            c.agents_pct.iter().sum::<f64>()
        )
    } else if c.server_busiest_thread_pct.unwrap_or(0.0) >= 90.0 {
        format!(
            "a server thread: {:.0}% of a core; {queue}",
            c.server_busiest_thread_pct.unwrap_or(0.0)
        )
    } else if agent >= 90.0 {
        format!("an agent: {agent:.0}% of a core (more agents would help); {queue}")
    } else {
        format!(
            "the server's handshakes: they queued with CPU to spare (machine {machine:.0}% of {capacity:.0}%); {queue}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(t: f64, connected: u64, in_flight: u64, oldest_ms: u64) -> Signals {
        Signals {
            t,
            connected,
            in_flight,
            oldest_ms,
            timeouts: 0,
            cpu: CpuWindow {
                cores: 2,
                machine_pct: Some(100.0),
                server_busiest_thread_pct: Some(40.0),
                agents_pct: vec![30.0],
                ..Default::default()
            },
        }
    }

    #[test]
    fn raises_while_handshakes_are_quick() {
        let mut c = RateControl::new(1000.0);
        assert_eq!(
            c.tick(sig(0.0, 0, 0, 0)),
            None,
            "the first tick only observes"
        );
        assert_eq!(
            c.tick(sig(0.1, 100, 2, 1)),
            Some(1500.0),
            "slow start: +50%"
        );
        assert_eq!(c.tick(sig(0.2, 250, 2, 1)), Some(2250.0));
        assert!(c.first_cut.is_none());
        assert_eq!(c.limited_by(), None);
    }

    #[test]
    fn backs_off_when_handshakes_queue_and_names_the_resource() {
        let mut c = RateControl::new(8000.0);
        c.tick(sig(0.0, 0, 0, 0));
        // The oldest handshake is 300 ms old: a cut, to at most what was achieved.
        // Over 0.1 s the achieved rate says too little: from the rate.
        let r = c.tick(sig(0.1, 300, 900, 300)).unwrap();
        assert!((r - 8000.0 * 0.8).abs() < 1.0, "{r}");
        assert_eq!(c.first_cut.map(|f| f.1), Some(300));
        assert!(
            c.steps
                .last()
                .unwrap()
                .why
                .contains("the server's handshakes"),
            "{:?}",
            c.steps
        );
        // Held while the queue drains, even once quick again.
        assert_eq!(c.tick(sig(0.2, 500, 10, 5)), None);
        // Then raised gently: the cut left it at 80% of where it came.
        let r2 = c.tick(sig(0.7, 1500, 10, 5)).unwrap();
        assert!((r2 - r * 1.05).abs() < 1.0, "{r2}");
        // A timeout halves what was achieved over the last half second
        // (1,200 handshakes in 0.6 s: 2,000/s).
        let mut s = sig(0.8, 1700, 10, 5);
        s.timeouts = 1;
        let r3 = c.tick(s).unwrap();
        assert!((r3 - 1000.0).abs() < 1.0, "{r3}");
        // Recovering from a cut too deep: a quarter a tick up to 80% of
        // the rate it came at.
        let r4 = c.tick(sig(1.9, 2000, 10, 5)).unwrap();
        assert!((r4 - 1250.0).abs() < 1.0, "{r4}");
        // A saturated machine is the resource named. After the first cut
        // a wait counts once it outlasts the recent ones (0.1 s here) and
        // the slack (0.3 s): one tick is not enough, four are.
        for (i, t) in [2.0, 2.1, 2.2, 2.3, 2.4].into_iter().enumerate() {
            let mut s = sig(t, 2000, 5000 + 500 * i as u64, 800 + 100 * i as u64);
            s.cpu.machine_pct = Some(199.0);
            let cut = c.tick(s);
            assert_eq!(cut.is_some(), t > 2.35, "{t}: {cut:?}");
        }
        assert!(
            c.steps.last().unwrap().why.contains("the machine's CPU"),
            "{:?}",
            c.steps
        );
        let l = c.limited_by().unwrap();
        assert!(l.contains("of 3 cuts"), "{l}");
    }

    #[test]
    fn slow_start_ends_when_handshakes_begin_to_wait() {
        let mut c = RateControl::new(1000.0);
        c.tick(sig(0.0, 0, 0, 0));
        // 60 ms: no cut, but no more doubling either.
        assert_eq!(c.tick(sig(0.1, 100, 20, 60)), Some(1050.0));
        assert_eq!(c.tick(sig(0.2, 200, 20, 5)), Some(1050.0 * 1.05));
        assert!(c.first_cut.is_none());
    }

    #[test]
    fn a_draining_queue_is_not_cut_again() {
        let mut c = RateControl::new(8000.0);
        c.tick(sig(0.0, 0, 0, 0));
        c.tick(sig(0.1, 300, 3000, 600)).unwrap();
        // Past the hold, still old, but fewer in flight: left alone.
        assert_eq!(c.tick(sig(1.2, 2000, 2000, 550)), None);
        // Growing again: cut.
        assert!(c.tick(sig(1.3, 2100, 2500, 650)).is_some());
        assert_eq!(c.limits.len(), 2);
    }

    #[test]
    fn holds_on_a_saturated_machine_with_a_growing_queue() {
        let mut c = RateControl::new(1000.0);
        let mut s = sig(0.0, 0, 20, 10);
        s.cpu.machine_pct = Some(199.0);
        c.tick(s.clone());
        s.t = 0.1;
        s.in_flight = 40;
        assert_eq!(c.tick(s), None);
    }

    /// A server in ticks of 100 ms: handshakes queue in arrival order and
    /// are served at `capacity(t)` per second; those waiting 10 s time
    /// out. Returns (handshakes completed from `from` s on per second,
    /// timeouts, the rates chosen).
    fn simulate(secs: f64, from: f64, capacity: impl Fn(f64) -> f64) -> (f64, u64, Vec<f64>) {
        let mut c = RateControl::new(100.0);
        let mut queue: VecDeque<(f64, f64)> = VecDeque::new();
        let (mut done, mut done_from, mut timeouts, mut carry) = (0.0, 0.0, 0u64, 0.0);
        let mut rates = Vec::new();
        let mut t = 0.0;
        while t < secs {
            queue.push_back((t, c.rate() * 0.1));
            let mut can = capacity(t) * 0.1 + carry;
            while let Some((_, n)) = queue.front_mut() {
                let take = n.min(can);
                *n -= take;
                can -= take;
                done += take;
                if t >= from {
                    done_from += take;
                }
                if *n > 0.0 {
                    break;
                }
                queue.pop_front();
            }
            carry = can.min(capacity(t) * 0.1);
            while queue.front().is_some_and(|(at, _)| t - at > 10.0) {
                timeouts += queue.pop_front().unwrap().1.ceil() as u64;
            }
            let oldest_ms = queue
                .front()
                .map_or(0, |(at, _)| ((t - at) * 1000.0) as u64);
            let mut s = sig(
                t,
                done as u64,
                queue.iter().map(|q| q.1).sum::<f64>() as u64,
                oldest_ms,
            );
            s.timeouts = timeouts;
            if let Some(r) = c.tick(s) {
                rates.push(r);
            }
            t += 0.1;
        }
        (done_from / (secs - from), timeouts, rates)
    }

    #[test]
    fn settles_near_a_steady_capacity_without_timeouts() {
        let (per_sec, timeouts, _) = simulate(60.0, 30.0, |_| 10_000.0);
        assert_eq!(timeouts, 0);
        assert!(per_sec > 7_000.0, "{per_sec:.0}/s of 10,000");
    }

    #[test]
    fn follows_a_capacity_that_falls_without_timeouts() {
        let (per_sec, timeouts, _) =
            simulate(60.0, 40.0, |t| if t < 25.0 { 20_000.0 } else { 4_000.0 });
        assert_eq!(timeouts, 0);
        assert!(per_sec > 2_800.0, "{per_sec:.0}/s of 4,000");
    }

    /// The presence case: the server stalls 0.6 s of every second whatever
    /// the arrival rate (12,000/s on average). Waits at each stall must not
    /// ratchet the rate down to its floor.
    #[test]
    fn periodic_stalls_do_not_ratchet_the_rate_down() {
        let stalls = |t: f64| if t.fract() < 0.6 { 0.0 } else { 30_000.0 };
        let (per_sec, timeouts, rates) = simulate(60.0, 30.0, stalls);
        assert_eq!(timeouts, 0);
        assert!(
            per_sec > 7_000.0,
            "{per_sec:.0}/s of 12,000 on average; rates {rates:?}"
        );
    }

    #[test]
    fn stays_within_bounds() {
        let mut c = RateControl::new(150.0);
        c.tick(sig(0.0, 0, 0, 0));
        let mut s = sig(0.1, 0, 0, 0);
        s.timeouts = 5;
        assert_eq!(c.tick(s), Some(MIN_RATE));
    }
}
