//! The circuit breaker: after `breaker_failures` consecutive failures
//! (unreachable, timeout, 5xx) requests are refused at once for
//! [`OPEN_FOR_MS`]; then one request probes the backend: its success closes
//! the circuit, its failure opens it again. A failing backend is not
//! hammered, and clients are answered at once instead of after a timeout.
//! Atomics only: shards ask it on every hook call.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// How long the circuit stays open before a probe.
pub const OPEN_FOR_MS: u64 = 1000;

/// The breaker's state, as `/metrics` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

pub struct Breaker {
    threshold: u32,
    started: Instant,
    failures: AtomicU32,
    /// Milliseconds since `started` until which it is open; 0: closed.
    open_until: AtomicU64,
    /// A probe is out.
    probing: AtomicBool,
}

impl Breaker {
    pub fn new(threshold: u32) -> Breaker {
        Breaker {
            threshold: threshold.max(1),
            started: Instant::now(),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// Whether a request may go out now (a probe, when the open time is
    /// over and no probe is out).
    pub fn allow(&self) -> bool {
        let until = self.open_until.load(Relaxed);
        if until == 0 {
            return true;
        }
        if self.now() < until {
            return false;
        }
        !self.probing.swap(true, Relaxed)
    }

    /// The backend answered (whatever it said): the circuit closes.
    /// Returns whether it was open.
    pub fn success(&self) -> bool {
        self.failures.store(0, Relaxed);
        self.probing.store(false, Relaxed);
        self.open_until.swap(0, Relaxed) != 0
    }

    /// The backend failed; returns whether the circuit opened now.
    pub fn failure(&self) -> bool {
        let n = self.failures.fetch_add(1, Relaxed) + 1;
        let probe = self.probing.swap(false, Relaxed);
        if n >= self.threshold || probe {
            let was = self.open_until.swap(self.now() + OPEN_FOR_MS, Relaxed);
            return was == 0;
        }
        false
    }

    pub fn state(&self) -> State {
        let until = self.open_until.load(Relaxed);
        if until == 0 {
            State::Closed
        } else if self.now() < until && !self.probing.load(Relaxed) {
            State::Open
        } else {
            State::HalfOpen
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_probes() {
        let b = Breaker::new(3);
        assert!(b.allow());
        assert!(!b.failure());
        assert!(!b.failure());
        b.success();
        assert!(!b.failure() && !b.failure());
        assert!(b.failure(), "the third in a row opens it");
        assert_eq!(b.state(), State::Open);
        assert!(!b.allow());
        // Past the open time: one probe, not two.
        b.open_until.store(1, Relaxed);
        assert!(b.allow());
        assert!(!b.allow());
        assert!(!b.failure(), "a failed probe keeps it open");
        assert!(!b.allow());
        b.open_until.store(1, Relaxed);
        assert!(b.allow());
        assert!(b.success(), "an answered probe closes it");
        assert_eq!(b.state(), State::Closed);
        assert!(b.allow() && b.allow());
    }
}
