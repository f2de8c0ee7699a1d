//! This agent's share of the arrival schedule.
//!
//! Agent `k` of `K` starts the global user indices `k, k+K, k+2K, ...` of
//! each phase, user `g` at `g / rate` seconds into its phase: all agents
//! together keep the one schedule a single generator would, and every agent
//! agrees on who each user is.

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
}

impl Arrivals {
    pub(super) fn new(sc: &Scenario, k: u64, agents: u64) -> Arrivals {
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

    /// This agent's users of the phase that should have started `el` seconds in.
    fn due_by(&self, el: f64, rate: f64, users: u64) -> u64 {
        let x = el * rate - self.k as f64;
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
            let el = now.saturating_duration_since(start).as_secs_f64().min(dur);
            let due = self.due_by(el, rate, users);
            while self.started_in_phase < due && out.len() < MAX_STARTS_PER_TURN {
                out.push(offset + self.k + self.started_in_phase * self.agents);
                self.started_in_phase += 1;
            }
            if self.started_in_phase < due {
                break;
            }
            let last = self.idx + 1 == self.phases.len();
            let all = self.started_in_phase >= self.share(users);
            let over = now.saturating_duration_since(start).as_secs_f64() >= dur;
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
        if self.started_in_phase >= self.share(users) {
            return Some(start + Duration::from_secs_f64(dur));
        }
        let g = self.k + self.started_in_phase * self.agents;
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
            let mut a = Arrivals::new(&sc, k, 3);
            let t0 = Instant::now();
            a.phase_start = Some(t0);
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
        let mut a = Arrivals::new(&sc, 0, 1);
        let t0 = Instant::now();
        a.phase_start = Some(t0);
        let mut out = Vec::new();
        a.due(t0 + Duration::from_millis(1), &mut out);
        assert_eq!(out, vec![0, 1]);
        a.due(t0 + Duration::from_millis(3), &mut out);
        assert_eq!(out, vec![0, 1, 2]);
        a.due(t0 + Duration::from_millis(2 + 250), &mut out);
        assert_eq!(out, vec![0, 1, 2, 3, 4]);
        assert!(a.done);
    }
}
