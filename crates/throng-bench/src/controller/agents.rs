//! The controller's agents: one TCP link each, read by a thread of its own
//! that forwards the agent's lines as [`Event`]s over one channel, so the
//! main thread owns every link's state and updates it in [`Agents::pump`].

use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Child;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::launch::{reap, LocalAgents};
use crate::error::BenchError;
use crate::stats::Counters;
use crate::wire::{self, Final, Role, ToAgent, ToController};

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
    /// Told to finish with no final report expected (a floor writer).
    pub finished: bool,
    /// An agent: it has reset its floor sockets.
    pub floor_closed: bool,
    /// A floor writer: where it listens, the sockets it holds, and the
    /// rounds it wrote `(round, write seconds, failed writes)`.
    pub listening: Option<SocketAddr>,
    pub accepted: u64,
    pub fired: Vec<(u32, f64, u64)>,
}

impl AgentLink {
    /// `, exited with ...` if a local agent has exited (waited for up to
    /// a second: it may be dying), else nothing.
    fn exit_status(&mut self) -> String {
        let Some(child) = self.child.as_mut() else {
            return String::new();
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return format!("; the agent {status}"),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return "; the agent is still running".into(),
            }
        }
    }
}

impl Drop for AgentLink {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Links authenticating at once, at most.
const MAX_PENDING: usize = 256;

/// A line from agent `i`, or its link closing.
enum Event {
    Msg(usize, Box<ToController>),
    /// A link closed, unreadable or silent: why.
    Gone(usize, String),
}

/// Reads agent `idx`'s link on a thread of its own, passing each message
/// on to `tx` until the link ends (closed, a bad line, or LINK_TIMEOUT of
/// silence), which it passes on too.
fn spawn_reader(idx: usize, mut input: BufReader<TcpStream>, tx: mpsc::Sender<Event>) {
    std::thread::spawn(move || loop {
        match wire::recv::<ToController>(&mut input, wire::MAX_LINE) {
            Ok(Some(m)) => {
                if tx.send(Event::Msg(idx, Box::new(m))).is_err() {
                    break;
                }
            }
            Ok(None) => {
                let _ = tx.send(Event::Gone(idx, "its link closed".into()));
                break;
            }
            Err(e) => {
                let _ = tx.send(Event::Gone(idx, format!("its link failed: {e}")));
                break;
            }
        }
    });
}

/// Every agent of the run.
pub(super) struct Agents {
    pub links: Vec<AgentLink>,
    rx: Receiver<Event>,
    /// When every link is next pinged.
    next_ping: Instant,
}

impl Agents {
    /// Accepts `n` peers of `role` on `listener` (ours from `local`, or
    /// remote), each proving it knows `token`, within `wait`. Each peer is
    /// authenticated on a thread of its own (at most [`MAX_PENDING`] at
    /// once), so one that says nothing holds no one else up; a peer that
    /// fails (a stranger on the port, an agent of another run) is dropped
    /// with a warning and the wait goes on. Accepted agents are pinged
    /// meanwhile, so none gives up on a controller still waiting for others.
    pub fn accept(
        listener: &TcpListener,
        n: usize,
        local: &mut LocalAgents,
        token: &str,
        role: Role,
        wait: Duration,
    ) -> Result<Agents, BenchError> {
        type Authenticated = (
            TcpStream,
            BufReader<TcpStream>,
            Result<(u32, Role), BenchError>,
        );
        let (tx, rx) = mpsc::channel();
        let (auth_tx, auth_rx) = mpsc::channel::<(SocketAddr, Authenticated)>();
        let mut pending = 0;
        let mut links: Vec<AgentLink> = Vec::new();
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + wait;
        let mut next_ping = Instant::now() + wire::PING_EVERY;
        while links.len() < n {
            if Instant::now() >= next_ping {
                next_ping += wire::PING_EVERY;
                for l in &mut links {
                    wire::send(&mut l.out, &ToAgent::Ping)?;
                }
            }
            while let Ok((peer, (s, input, pid))) = auth_rx.try_recv() {
                pending -= 1;
                let pid = match pid {
                    Ok((pid, r)) if r == role => pid,
                    Ok((_, r)) => {
                        eprintln!("warning: refused a link from {peer}: a {r:?} where a {role:?} was awaited");
                        continue;
                    }
                    Err(e) => {
                        eprintln!("warning: refused a link from {peer}: {e}");
                        continue;
                    }
                };
                spawn_reader(links.len(), input, tx.clone());
                links.push(AgentLink {
                    out: s,
                    pid,
                    child: local.take(pid),
                    ready_rss: 0,
                    users: 0,
                    last: None,
                    final_: None,
                    storm_done: false,
                    finished: false,
                    floor_closed: false,
                    listening: None,
                    accepted: 0,
                    fired: Vec::new(),
                });
            }
            match listener.accept() {
                Ok((s, peer)) if pending < MAX_PENDING => {
                    s.set_nonblocking(false)?;
                    s.set_nodelay(true)?;
                    let mut input = BufReader::new(s.try_clone()?);
                    let (token, auth_tx) = (token.to_string(), auth_tx.clone());
                    pending += 1;
                    std::thread::spawn(move || {
                        let pid = wire::authenticate_agent(&s, &mut input, &token);
                        let _ = auth_tx.send((peer, (s, input, pid)));
                    });
                }
                Ok((_, peer)) => {
                    eprintln!("warning: refused a link from {peer}: {MAX_PENDING} links are already authenticating");
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
        Ok(Agents {
            links,
            rx,
            next_ping,
        })
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
                Ok(Event::Msg(i, m)) => {
                    if let ToController::Ready {
                        rss,
                        users,
                        conn_size: cs,
                    } = *m
                    {
                        self.links[i].ready_rss = rss;
                        self.links[i].users = users;
                        conn_size = cs;
                        ready += 1;
                    }
                }
                Ok(Event::Gone(i, why)) => {
                    return Err(BenchError::Protocol(format!(
                        "agent {i} left before it was ready: {why}"
                    )))
                }
                Err(_) => {
                    return Err(BenchError::Protocol(
                        "agents did not get ready in 20 s".into(),
                    ))
                }
            }
        }
        Ok(conn_size)
    }

    /// Handles agent events for up to `wait` (and pings the links when due).
    pub fn pump(&mut self, wait: Duration) -> Result<(), BenchError> {
        let deadline = Instant::now() + wait;
        if deadline >= self.next_ping {
            self.next_ping = Instant::now() + wire::PING_EVERY;
            self.send_all(&ToAgent::Ping)?;
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Event::Msg(i, m)) => match *m {
                    ToController::Progress(c) => self.links[i].last = Some(*c),
                    ToController::StormDone => self.links[i].storm_done = true,
                    ToController::FloorClosed => self.links[i].floor_closed = true,
                    ToController::Listening { addr } => self.links[i].listening = Some(addr),
                    ToController::Accepted { sockets } => self.links[i].accepted = sockets,
                    ToController::Fired {
                        round,
                        write_secs,
                        failed,
                    } => self.links[i].fired.push((round, write_secs, failed)),
                    ToController::Final(f) => {
                        self.links[i].last = Some(f.counters.clone());
                        self.links[i].final_ = Some(*f);
                    }
                    _ => {}
                },
                Ok(Event::Gone(i, why)) => {
                    if self.links[i].final_.is_none() && !self.links[i].finished {
                        let exit = self.links[i].exit_status();
                        return Err(BenchError::Protocol(format!(
                            "agent {i} (pid {}) went away mid-run: {why}{exit}",
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

    /// Tells every link to finish without waiting for a final report (the
    /// floor writers, which send none): their going is no error.
    pub fn finish(&mut self) {
        for a in &mut self.links {
            a.finished = true;
            let _ = wire::send(&mut a.out, &ToAgent::Finish);
        }
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
