//! Events per 100 ms slot since the start of arrivals (handshakes, `ok`
//! joins, timeouts): each agent counts its own, the controller adds them up
//! and finds the best second of the run from them, exactly, where a
//! once-a-second sample of cumulative counters would blur it, and puts each
//! timeout beside what the machine was doing when it struck.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Events per 100 ms slot since the start of arrivals.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Slots {
    pub connects: Vec<u32>,
    pub joins: Vec<u32>,
    #[serde(default)]
    pub timeouts: Vec<u32>,
    /// Connections the server closed (a close frame, a reset, an end of
    /// stream).
    #[serde(default)]
    pub closes: Vec<u32>,
}

impl Slots {
    pub(crate) fn bump(v: &mut Vec<u32>, since: Option<Instant>) {
        let Some(t0) = since else { return };
        let slot = (t0.elapsed().as_millis() / 100) as usize;
        if slot >= 1_000_000 {
            return;
        }
        if v.len() <= slot {
            v.resize(slot + 1, 0);
        }
        v[slot] += 1;
    }

    /// Adds another agent's slots.
    pub fn merge(&mut self, o: &Slots) {
        for (mine, theirs) in [
            (&mut self.connects, &o.connects),
            (&mut self.joins, &o.joins),
            (&mut self.timeouts, &o.timeouts),
            (&mut self.closes, &o.closes),
        ] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        }
    }

    /// Handshakes in the best second.
    pub fn peak_connects_per_sec(&self) -> f64 {
        Slots::peak_per_sec(&self.connects, 10)
    }

    /// `ok` joins in the best second.
    pub fn peak_joins_per_sec(&self) -> f64 {
        Slots::peak_per_sec(&self.joins, 10)
    }

    /// The most events in any `window` consecutive slots, per second.
    pub fn peak_per_sec(v: &[u32], window: usize) -> f64 {
        let w = window.clamp(1, v.len().max(1));
        if v.is_empty() {
            return 0.0;
        }
        let mut sum: u64 = v[..w].iter().map(|&x| x as u64).sum();
        let mut best = sum;
        for i in w..v.len() {
            sum = sum + v[i] as u64 - v[i - w] as u64;
            best = best.max(sum);
        }
        best as f64 / (w as f64 * 0.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_give_the_best_second() {
        let v = vec![1, 2, 3, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 0, 0];
        assert_eq!(Slots::peak_per_sec(&v, 10), 100.0);
        assert_eq!(Slots::peak_per_sec(&[5, 5], 10), 50.0);
        assert_eq!(Slots::peak_per_sec(&[], 10), 0.0);
        let mut a = Slots {
            connects: vec![1, 2],
            ..Default::default()
        };
        a.merge(&Slots {
            connects: vec![1, 1, 1],
            joins: vec![4],
            timeouts: vec![0, 2],
            closes: vec![0, 0, 3],
        });
        assert_eq!(a.timeouts, vec![0, 2]);
        assert_eq!(a.closes, vec![0, 0, 3]);
        assert_eq!(a.connects, vec![2, 3, 1]);
        assert_eq!(a.joins, vec![4]);
    }
}
