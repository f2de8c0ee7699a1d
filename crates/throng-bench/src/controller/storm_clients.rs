//! The reconnect storm's client processes (see `storm` and
//! [`crate::storm::client`]): started with their orders, told commands on
//! their stdin, their status lines summed as they arrive, waited on
//! phase by phase, and stopped (killed if they do not exit).

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::children;
use crate::error::BenchError;
use crate::join::tls::TlsPlan;
use crate::storm::{self, Orders, Status};
use crate::sys;

/// Connects and joins in flight at once, per client process.
const WINDOW: usize = 64;

/// The client processes, their stdins and the latest status of each.
pub(super) struct Clients {
    pub children: Vec<Child>,
    stdins: Vec<ChildStdin>,
    rx: mpsc::Receiver<(usize, Status)>,
    latest: Vec<Status>,
}

impl Clients {
    /// Starts the client processes of `n` clients, at most `per_process`
    /// each, on `targets`; `jwt_secret` goes to each in its environment.
    pub fn spawn(
        n: u64,
        per_process: u64,
        targets: &[SocketAddr],
        topics: u32,
        tls: Option<&TlsPlan>,
        jwt_secret: Option<&str>,
    ) -> Result<Clients, BenchError> {
        let procs = n.div_ceil(per_process);
        let (tx, rx) = mpsc::channel();
        let mut c = Clients {
            children: Vec::new(),
            stdins: Vec::new(),
            rx,
            latest: vec![Status::default(); procs as usize],
        };
        for p in 0..procs {
            let first = n * p / procs;
            let orders = Orders {
                targets: targets.to_vec(),
                topics,
                first,
                count: n * (p + 1) / procs - first,
                process: p as u32,
                window: WINDOW,
                tls: tls.cloned(),
                jwt: jwt_secret.is_some(),
            };
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.args(["agent", "--storm-client", &serde_json::to_string(&orders)?])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            if let Some(secret) = jwt_secret {
                cmd.env(storm::JWT_SECRET_ENV, secret);
            }
            let mut child = cmd.spawn()?;
            children::started(child.id());
            let stdout = child.stdout.take().expect("piped stdout");
            c.stdins.push(child.stdin.take().expect("piped stdin"));
            c.children.push(child);
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Ok(s) = serde_json::from_str::<Status>(&line) {
                        if tx.send((p as usize, s)).is_err() {
                            break;
                        }
                    }
                }
            });
        }
        Ok(c)
    }

    pub fn send(&mut self, cmd: &storm::Command) -> Result<(), BenchError> {
        let line = serde_json::to_string(cmd)? + "\n";
        for s in &mut self.stdins {
            s.write_all(line.as_bytes())?;
            s.flush()?;
        }
        Ok(())
    }

    /// The sum of the latest statuses (reading what arrived, waiting up
    /// to `wait` for the first).
    pub fn sum(&mut self, wait: Duration) -> Status {
        if let Ok((p, s)) = self.rx.recv_timeout(wait) {
            self.latest[p] = s;
        }
        while let Ok((p, s)) = self.rx.try_recv() {
            self.latest[p] = s;
        }
        let mut all = Status::default();
        for s in &self.latest {
            all.add(s);
        }
        all
    }

    /// Waits until `done` holds for the summed status (fresh statuses only:
    /// each process's next line after now), printing `label` progress each
    /// second; `Err` after `limit` or when a client process has exited.
    pub fn until(
        &mut self,
        label: &str,
        limit: Duration,
        done: impl Fn(&Status) -> bool,
    ) -> Result<Status, BenchError> {
        let started = Instant::now();
        let mut printed = Instant::now();
        // Statuses sent before now may predate a command just sent.
        std::thread::sleep(storm::STATUS_EVERY * 2);
        loop {
            let s = self.sum(storm::STATUS_EVERY);
            if done(&s) {
                return Ok(s);
            }
            if let Some(p) = self
                .children
                .iter_mut()
                .position(|c| matches!(c.try_wait(), Ok(Some(_))))
            {
                return Err(BenchError::Failed(format!(
                    "client process {p} exited during {label}"
                )));
            }
            if started.elapsed() > limit {
                return Err(BenchError::Failed(format!(
                    "{label}: not done after {limit:?} ({})",
                    progress(&s)
                )));
            }
            if printed.elapsed() >= Duration::from_secs(1) {
                printed = Instant::now();
                eprintln!("  {label}: {}", progress(&s));
            }
        }
    }

    pub fn cpu(&self) -> f64 {
        self.children
            .iter()
            .filter_map(|c| sys::proc_sample(&c.id().to_string()))
            .map(|s| s.cpu_secs)
            .sum()
    }

    /// Stops every process and returns the sum of their last statuses.
    pub fn stop(mut self) -> Status {
        let _ = self.send(&storm::Command::Stop);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.latest.iter().all(|s| s.done) && Instant::now() < deadline {
            self.sum(storm::STATUS_EVERY);
        }
        let mut all = Status::default();
        for s in &self.latest {
            all.add(s);
        }
        all
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        self.stdins.clear();
        for c in &mut self.children {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !matches!(c.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
            children::ended(c.id());
        }
    }
}

fn progress(s: &Status) -> String {
    let refused = s.connect_failures.get("refused").copied().unwrap_or(0);
    format!(
        "{} of {} joined, {} rejoined ({} recovered), {} at the target, {} received ({} replayed), {} gaps, {} duplicates, {} connect errors ({refused} refused), {} errors",
        s.joined, s.clients, s.rejoins, s.recovered, s.at_target, s.received, s.replayed, s.gaps, s.duplicates, s.connect_errors, s.errors
    )
}
