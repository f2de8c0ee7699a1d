//! This agent's share of the arrival schedule.
//!
//! Agent `k` of `K` starts the global user indices `k, k+K, k+2K, ...` of
//! each phase, user `g` at `g / rate` seconds into its phase: all agents
//! together keep the one schedule a single generator would, and every agent
//! agrees on who each user is.
//!
//! With adaptive arrival (the built-in scenario's default) the rate is the
//! controller's to set while the run goes ([`Arrivals::set_rate`]): the
//! schedule is the position `x` (global users due) at a base time plus the
//! rate since, so a new rate bends the schedule from now on without moving
//! anyone already started; the phase lasts until its users have started.

use std::time::{Duration, Instant};

use crate::scenario::Scenario;

/// Users started per turn at most, so a late loop catches up without
/// starving reads.
const MAX_STARTS_PER_TURN: usize = 2000;

/// How an agent's share of the arrivals runs.
pub(super) struct Arrivals {
    /// Per phase: (duration s, global rate /s, users of the phase, global index offset).
    pub(super) phases: Vec<(f64, f64, u64, u64)>,
    pub(super) idx: usize,
    pub(super) phase_start: Option<Instant>,
    /// When arrivals began.
    pub(super) started_at: Option<Instant>,
    /// This agent's users started in the current phase.
    pub(super) started_in_phase: u64,
    pub(super) k: u64,
    pub(super) agents: u64,
    pub(super) done: bool,
    /// The controller sets the rate (see the module docs).
    adaptive: bool,
    /// Adaptive: the rate now, and the position (global users due) at a base time.
    rate: f64,
    base: Option<(Instant, f64)>,
}

impl Arrivals {
    /// A share of `sc`'s phases; `adaptive`: of its one phase, at a rate
    /// the controller sets (starting at the phase's).
    pub(super) fn new(sc: &Scenario, k: u64, agents: u64, adaptive: bool) -> Arrivals {
        let mut offset = 0;
        let phases = sc
            .phases
            .iter()
            .map(|p| {
                let users = p.users();
                let v = (p.duration, p.arrival_rate, users, offset);
                offset += users;
                v
            })
            .collect();
        Arrivals {
            phases,
            idx: 0,
            phase_start: None,
            started_at: None,
            started_in_phase: 0,
            k,
            agents,
            done: false,
            adaptive,
            rate: sc.phases.first().map_or(0.0, |p| p.arrival_rate),
            base: None,
        }
    }

    /// Starts the arrivals at `now`.
    pub(super) fn start(&mut self, now: Instant) {
        self.phase_start = Some(now);
        self.started_at = Some(now);
        self.base = Some((now, 0.0));
    }

    /// Adaptive: arrivals go on at `rate` (global users per second, 0 to
    /// pause) from `now`.
    pub(super) fn set_rate(&mut self, now: Instant, rate: f64) {
        if !self.adaptive || !rate.is_finite() || rate < 0.0 {
            return;
        }
        if self.base.is_some() {
            self.base = Some((now, self.position(now)));
        }
        self.rate = rate;
    }

    /// Adaptive: the global users due by `now`.
    fn position(&self, now: Instant) -> f64 {
        match self.base {
            Some((t, x)) => x + now.saturating_duration_since(t).as_secs_f64() * self.rate,
            None => 0.0,
        }
    }

    /// This agent's users in a phase of `users` users.
    pub(super) fn share(&self, users: u64) -> u64 {
        if users <= self.k {
            0
        } else {
            (users - self.k).div_ceil(self.agents)
        }
    }

    /// This agent's users of a phase of `users` due once the schedule's
    /// position is `x` (global users due: `seconds in * rate`).
    fn due_by(&self, x: f64, users: u64) -> u64 {
        let x = x - self.k as f64;
        let n = if x < 0.0 {
            0
        } else {
            (x / self.agents as f64).floor() as u64 + 1
        };
        n.min(self.share(users))
    }

    /// Pushes the global indices of the users to start now into `out`.
    pub(super) fn due(&mut self, now: Instant, out: &mut Vec<u64>) {
        let Some(mut start) = self.phase_start else {
            return;
        };
        while !self.done && out.len() < MAX_STARTS_PER_TURN {
            let (dur, rate, users, offset) = self.phases[self.idx];
            let x = if self.adaptive {
                self.position(now)
            } else {
                now.saturating_duration_since(start).as_secs_f64().min(dur) * rate
            };
            let due = self.due_by(x, users);
            while self.started_in_phase < due && out.len() < MAX_STARTS_PER_TURN {
                out.push(offset + self.k + self.started_in_phase * self.agents);
                self.started_in_phase += 1;
            }
            if self.started_in_phase < due {
                break;
            }
            let last = self.idx + 1 == self.phases.len();
            let all = self.started_in_phase >= self.share(users);
            let over = !self.adaptive && now.saturating_duration_since(start).as_secs_f64() >= dur;
            if last && (all || over) {
                self.done = true;
            } else if over {
                start += Duration::from_secs_f64(dur);
                self.idx += 1;
                self.started_in_phase = 0;
            } else {
                break;
            }
        }
        self.phase_start = Some(start);
    }

    /// When the next user of this agent is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let start = self.phase_start?;
        if self.done {
            return None;
        }
        let (dur, rate, users, _) = self.phases[self.idx];
        let g = self.k + self.started_in_phase * self.agents;
        if self.adaptive {
            // Paused (rate 0): the controller's next rate wakes the loop.
            let (t, x) = self.base?;
            if self.rate <= 0.0 {
                return None;
            }
            let secs = ((g as f64 - x) / self.rate).clamp(0.0, 3600.0);
            return Some(t + Duration::from_secs_f64(secs));
        }
        if self.started_in_phase >= self.share(users) {
            return Some(start + Duration::from_secs_f64(dur));
        }
        Some(start + Duration::from_secs_f64((g as f64 / rate).min(dur)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{chat, Phase};
    use throng_protocol::Vsn;

    #[test]
    fn arrivals_interleave_across_agents() {
        let sc = chat(Phase::at_rate(10, 1000.0), 0, 0, 0.0, Vsn::V2);
        let mut all = Vec::new();
        for k in 0..3 {
            let mut a = Arrivals::new(&sc, k, 3, false);
            let t0 = Instant::now();
            a.start(t0);
            let mut out = Vec::new();
            a.due(t0 + Duration::from_millis(4), &mut out);
            // By 4 ms at 1000/s, users 0..=4 are due: 0,3 / 1,4 / 2.
            assert_eq!(out.len(), if k < 2 { 2 } else { 1 }, "agent {k}");
            a.due(t0 + Duration::from_secs(1), &mut out);
            assert!(a.done);
            assert_eq!(a.next_due(), None);
            all.extend(out);
        }
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<u64>>());
    }

    #[test]
    fn arrivals_walk_phases() {
        let mut sc = chat(Phase::at_rate(10, 1000.0), 0, 0, 0.0, Vsn::V2);
        sc.phases = vec![
            Phase {
                duration: 0.002,
                arrival_rate: 1000.0,
                max_users: None,
            },
            Phase {
                duration: 1.0,
                arrival_rate: 10.0,
                max_users: Some(3),
            },
        ];
        let mut a = Arrivals::new(&sc, 0, 1, false);
        let t0 = Instant::now();
        a.start(t0);
        let mut out = Vec::new();
        a.due(t0 + Duration::from_millis(1), &mut out);
        assert_eq!(out, vec![0, 1]);
        a.due(t0 + Duration::from_millis(3), &mut out);
        assert_eq!(out, vec![0, 1, 2]);
        a.due(t0 + Duration::from_millis(2 + 250), &mut out);
        assert_eq!(out, vec![0, 1, 2, 3, 4]);
        assert!(a.done);
    }

    /// Adaptive: the controller's rates bend the schedule from when they
    /// come; a pause starts no one; the phase ends when its users have all
    /// started, however long that takes.
    #[test]
    fn adaptive_rates_bend_the_schedule() {
        let sc = chat(Phase::at_rate(100, 1000.0), 0, 0, 0.0, Vsn::V2);
        let mut a = Arrivals::new(&sc, 0, 1, true);
        let t0 = Instant::now();
        a.start(t0);
        let ms = |n| t0 + Duration::from_millis(n);
        let mut out = Vec::new();
        // 1000/s for 10 ms: users 0..=10.
        a.due(ms(10), &mut out);
        assert_eq!(out.len(), 11);
        // Paused at 10 ms: no one more, and nothing is due.
        a.set_rate(ms(10), 0.0);
        a.due(ms(500), &mut out);
        assert_eq!(out.len(), 11);
        assert_eq!(a.next_due(), None);
        // 100/s from 500 ms: user 11 is due 10 ms later.
        a.set_rate(ms(500), 100.0);
        let next = a.next_due().unwrap();
        assert!(next > ms(509) && next < ms(511), "{:?}", next - t0);
        a.due(ms(600), &mut out);
        assert_eq!(out.len(), 21);
        // The phase's own duration (0.1 s) does not end it: the users do.
        assert!(!a.done);
        a.set_rate(ms(600), 1e6);
        a.due(ms(700), &mut out);
        assert_eq!(out, (0..100).collect::<Vec<u64>>());
        assert!(a.done);
        // A fixed schedule ignores rates.
        let mut f = Arrivals::new(&sc, 0, 1, false);
        f.start(t0);
        f.set_rate(t0, 1.0);
        let mut out = Vec::new();
        f.due(ms(10), &mut out);
        assert_eq!(out.len(), 11);
    }
}
