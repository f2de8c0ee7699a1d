//! The child processes a run has started (the embedded server or its
//! supervisor, its Redis, local agents and floor writers), by pid, so that
//! an interrupted run leaves none behind. Each child is killed when its
//! handle drops, but a signal that ends the process runs no `Drop`: a
//! Ctrl-C during a 1,000,000-connection ramp-up used to leave the
//! supervisor, its 52 workers and Redis running. [`kill_on_signal`] closes
//! that gap.

use std::sync::Mutex;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::error::BenchError;

/// Pids of the children alive now.
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<u32>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A child was started.
pub(super) fn started(pid: u32) {
    live().push(pid);
}

/// A child was killed or exited (and reaped).
pub(super) fn ended(pid: u32) {
    live().retain(|p| *p != pid);
}

/// On SIGINT, SIGTERM or SIGHUP: SIGKILL every live child (an embedded
/// supervisor's workers are registered too: left to their
/// `PR_SET_PDEATHSIG` they would drain for seconds), say so, and exit with
/// 128 + the signal, as a shell reports a process a signal ended.
pub(super) fn kill_on_signal() -> Result<(), BenchError> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("bench-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let pids = live().clone();
                for pid in &pids {
                    crate::sys::kill_pid(*pid);
                }
                eprintln!(
                    "\nthrong bench: stopped by signal {sig}; killed its {} child process(es), no report written",
                    pids.len()
                );
                std::process::exit(128 + sig);
            }
        })?;
    Ok(())
}
