//! The controller's agents: one TCP link each, read by a thread of its own
//! that forwards the agent's lines as [`Event`]s over one channel, so the
//! main thread owns every link's state and updates it in [`Agents::pump`].

use std::io::BufReader;
use std::net::{TcpListener, TcpStream};
use std::process::Child;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::launch::{reap, LocalAgents};
use crate::error::BenchError;
use crate::stats::Counters;
use crate::wire::{self, Final, ToAgent, ToController};

/// One agent as the controller sees it.
pub(super) struct AgentLink {
    out: TcpStream,
    pub pid: u32,
    /// Our child, if local.
    pub child: Option<Child>,
    /// RSS when it was ready, before any connection.
    pub ready_rss: u64,
    /// Users its plan starts.
    pub users: u64,
    /// Its latest counters.
    pub last: Option<Counters>,
    pub final_: Option<Final>,
    pub storm_done: bool,
}

impl Drop for AgentLink {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A line from agent `i`, or its link closing.
enum Event {
    Msg(usize, ToController),
    Gone(usize),
}

/// Every agent of the run.
pub(super) struct Agents {
    pub links: Vec<AgentLink>,
    rx: Receiver<Event>,
}

impl Agents {
    /// Accepts `n` agents on `listener` (ours from `local`, or remote),
    /// each saying hello, within `wait`.
    pub fn accept(
        listener: &TcpListener,
        n: usize,
        local: &mut LocalAgents,
        wait: Duration,
    ) -> Result<Agents, BenchError> {
        let (tx, rx) = mpsc::channel();
        let mut links: Vec<AgentLink> = Vec::new();
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + wait;
        while links.len() < n {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)?;
                    s.set_nodelay(true)?;
                    let mut input = BufReader::new(s.try_clone()?);
                    let Some(ToController::Hello { pid }) = wire::recv(&mut input)? else {
                        return Err(BenchError::Protocol("expected hello".into()));
                    };
                    let idx = links.len();
                    let tx = tx.clone();
                    std::thread::spawn(move || loop {
                        match wire::recv::<ToController>(&mut input) {
                            Ok(Some(m)) => {
                                if tx.send(Event::Msg(idx, m)).is_err() {
                                    break;
                                }
                            }
                            _ => {
                                let _ = tx.send(Event::Gone(idx));
                                break;
                            }
                        }
                    });
                    links.push(AgentLink {
                        out: s,
                        pid,
                        child: local.take(pid),
                        ready_rss: 0,
                        users: 0,
                        last: None,
                        final_: None,
                        storm_done: false,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(BenchError::Protocol(format!(
                            "only {} of {n} agents connected",
                            links.len()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Agents { links, rx })
    }

    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Sends agent `i` a message.
    pub fn send(&mut self, i: usize, msg: &ToAgent) -> Result<(), BenchError> {
        wire::send(&mut self.links[i].out, msg)
    }

    /// Sends every agent a message.
    pub fn send_all(&mut self, msg: &ToAgent) -> Result<(), BenchError> {
        for a in self.links.iter_mut() {
            wire::send(&mut a.out, msg)?;
        }
        Ok(())
    }

    /// Waits (20 s at most) until every agent is ready; returns the size of
    /// their per-connection struct.
    pub fn await_ready(&mut self) -> Result<usize, BenchError> {
        let mut conn_size = 0;
        let mut ready = 0;
        while ready < self.links.len() {
            match self.rx.recv_timeout(Duration::from_secs(20)) {
                Ok(Event::Msg(
                    i,
                    ToController::Ready {
                        rss,
                        users,
                        conn_size: cs,
                    },
                )) => {
                    self.links[i].ready_rss = rss;
                    self.links[i].users = users;
                    conn_size = cs;
                    ready += 1;
                }
                Ok(Event::Gone(i)) => {
                    return Err(BenchError::Protocol(format!(
                        "agent {i} left before it was ready"
                    )))
                }
                Ok(_) => {}
                Err(_) => {
                    return Err(BenchError::Protocol(
                        "agents did not get ready in 20 s".into(),
                    ))
                }
            }
        }
        Ok(conn_size)
    }

    /// Handles agent events for up to `wait`.
    pub fn pump(&mut self, wait: Duration) -> Result<(), BenchError> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Event::Msg(i, m)) => match m {
                    ToController::Progress(c) => self.links[i].last = Some(c),
                    ToController::StormDone => self.links[i].storm_done = true,
                    ToController::Final(f) => {
                        self.links[i].last = Some(f.counters.clone());
                        self.links[i].final_ = Some(*f);
                    }
                    _ => {}
                },
                Ok(Event::Gone(i)) => {
                    if self.links[i].final_.is_none() {
                        return Err(BenchError::Protocol(format!(
                            "agent {i} (pid {}) went away mid-run",
                            self.links[i].pid
                        )));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(()),
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            if Instant::now() >= deadline {
                return Ok(());
            }
        }
    }

    /// Every agent's latest counters added up; `None` until each has reported.
    pub fn total(&self) -> Option<Counters> {
        let mut sum = Counters {
            arrivals_done: true,
            ..Default::default()
        };
        for a in &self.links {
            sum.add(a.last.as_ref()?);
        }
        Some(sum)
    }

    /// Lets local agents exit after their final report (5 s each at most),
    /// then kills what is left.
    pub fn reap(&mut self) {
        for a in &mut self.links {
            if let Some(c) = a.child.take() {
                reap(c, Duration::from_secs(5));
            }
        }
    }
}
