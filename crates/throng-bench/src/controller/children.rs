//! The child processes a run has started (the embedded server or its
//! supervisor, its Redis, local agents and floor writers), by pid, so that
//! an interrupted run leaves none behind. Each child is killed when its
//! handle drops, but a signal that ends the process runs no `Drop`: a
//! Ctrl-C during a 1,000,000-connection ramp-up used to leave the
//! supervisor, its 52 workers and Redis running. [`kill_on_signal`] closes
//! that gap.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

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

/// Where an interrupted run writes what it measured so far: the live
/// snapshot (phase, counters, timeline) as `--json` and as the HTML report.
struct Partial {
    live: Arc<Mutex<String>>,
    json: Option<PathBuf>,
    report: PathBuf,
}

static PARTIAL: Mutex<Option<Partial>> = Mutex::new(None);

/// The exit status of a run whose report is written (-1: not yet): a
/// signal then (Ctrl-C as the process exits) exits with it quietly.
static FINISHED: AtomicI32 = AtomicI32::new(-1);

/// The run is over and its report written: a signal from now on ends the
/// process with `code`, the run's own exit status.
pub(super) fn finished(code: i32) {
    FINISHED.store(code, Ordering::SeqCst);
}

/// From now on, a signal writes the snapshot behind `live` to `json` (if
/// given) and `report` before the process exits.
pub(super) fn on_signal_write(live: Arc<Mutex<String>>, json: Option<PathBuf>, report: PathBuf) {
    *PARTIAL.lock().unwrap_or_else(|e| e.into_inner()) = Some(Partial { live, json, report });
}

/// Writes the partial report, and says what it holds in one line.
fn write_partial(sig: i32) -> Option<String> {
    let guard = PARTIAL.lock().unwrap_or_else(|e| e.into_inner());
    let p = guard.as_ref()?;
    let snapshot = p.live.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut v: serde_json::Value = serde_json::from_str(&snapshot).ok()?;
    let phase = v["status"].as_str().unwrap_or("starting").to_string();
    v["status"] = format!("interrupted by signal {sig} during the {phase}").into();
    v["partial"] = true.into();
    let last = v["timeline"].as_array().and_then(|t| t.last()).cloned();
    let json = v.to_string();
    if let Some(path) = &p.json {
        let _ = std::fs::write(
            path,
            serde_json::to_string_pretty(&v).unwrap_or(json.clone()),
        );
    }
    std::fs::write(&p.report, crate::report::html::page(&json, false)).ok()?;
    let so_far = last.map_or(String::new(), |s| {
        format!(
            " after {:.0} s: {} of {} users joined, {} open, {} error(s);",
            s["t"].as_f64().unwrap_or(0.0),
            s["joined"],
            v["connections"]["target"],
            s["connected"],
            s["errors"]
        )
    });
    Some(format!(
        "stopped during the {phase}{so_far} partial report (what was measured so far): {}{}",
        p.report.display(),
        p.json
            .as_ref()
            .map_or(String::new(), |j| format!(" and {}", j.display()))
    ))
}

/// On SIGINT, SIGTERM or SIGHUP: SIGKILL every live child (an embedded
/// supervisor's workers are registered too: left to their
/// `PR_SET_PDEATHSIG` they would drain for seconds), write the partial
/// report once the run has started, say so, and exit with 128 + the
/// signal, as a shell reports a process a signal ended.
pub(super) fn kill_on_signal() -> Result<(), BenchError> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("bench-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let done = FINISHED.load(Ordering::SeqCst);
                if done >= 0 {
                    std::process::exit(done);
                }
                let pids = live().clone();
                for pid in &pids {
                    crate::sys::kill_pid(*pid);
                }
                let partial = write_partial(sig)
                    .unwrap_or_else(|| "no report written (the run had not started)".into());
                eprintln!(
                    "\nthrong bench: stopped by signal {sig}; killed its {} child process(es); {partial}",
                    pids.len()
                );
                std::process::exit(128 + sig);
            }
        })?;
    Ok(())
}
