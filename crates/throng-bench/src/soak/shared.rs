//! What a soak client process's slots share (one thread, so `Cell`s and
//! no locks): the orders, the status the process prints, the stop signal;
//! and the two waits every session uses.

use std::cell::{Cell, RefCell};
use std::io::{self, Write};
use std::time::Duration;

use tokio::sync::watch;

use super::{Orders, Status};

/// What the process's slots share (one thread: no locks).
pub(super) struct Shared {
    pub orders: Orders,
    pub status: RefCell<Status>,
    /// `true` once [`super::Command::Stop`] came.
    pub stop: watch::Sender<bool>,
    /// Slots still running.
    pub live: Cell<u64>,
}

impl Shared {
    /// Counts an error, keeping the first one's text.
    pub fn error(&self, why: String) {
        let mut s = self.status.borrow_mut();
        s.errors += 1;
        s.note(why);
    }

    /// Changes the status.
    pub fn count(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.borrow_mut());
    }

    /// Prints the status as a JSON line (`done`: the process's last).
    pub fn print(&self, done: bool) {
        let mut s = self.status.borrow().clone();
        s.done = done;
        let mut out = io::stdout().lock();
        let _ = serde_json::to_writer(&mut out, &s);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    }
}

/// A sample of the exponential distribution of mean `mean`.
pub(super) fn exp(rng: &mut fastrand::Rng, mean: f64) -> f64 {
    -mean * (1.0 - rng.f64()).ln()
}

/// Waits `d`; `true` if the run stopped meanwhile.
pub(super) async fn stopped_during(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}
