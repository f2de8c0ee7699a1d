//! The controller's agents: one TCP link each, read by a thread of its own
//! that forwards the agent's lines as [`Event`]s over one channel, so the
//! main thread owns every link's state and updates it in [`Agents::pump`].
//!
//! Liveness (see [`crate::wire`]): every line an agent sends, its `alive`
//! each second included, counts as a sign of life. One silent for
//! [`wire::SLOW_AFTER`] is looked at: its process alive (stopped, running,
//! waiting), it is slow and the run waits, saying so, and records for how
//! long once it speaks again ([`SlowAgent`]); its process gone, its link
//! closed, or silent past [`wire::HUNG_AFTER`], it is lost ([`AgentLost`]:
//! the phase, its last progress), and the run's phases end early with the
//! figures so far ([`Agents::ending`]).

use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Child;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::launch::{reap, LocalAgents};
use crate::error::BenchError;
use crate::report::{AgentLost, SlowAgent};
use crate::stats::Counters;
use crate::sys;
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
    /// When it last sent anything.
    heard: Instant,
    /// Silent past [`wire::SLOW_AFTER`]: since when, in which phase, and
    /// what its process was doing then.
    silence: Option<(Instant, &'static str, String)>,
    /// Gone before its final report (see [`Agents::lose`]).
    pub lost: bool,
    /// A write to it failed: nothing more is written (its reader says
    /// whether it closed after its final report, `watch` whether it is
    /// silent).
    unwritable: bool,
}

impl AgentLink {
    fn new(out: TcpStream, pid: u32, child: Option<Child>) -> AgentLink {
        AgentLink {
            out,
            pid,
            child,
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
            heard: Instant::now(),
            silence: None,
            lost: false,
            unwritable: false,
        }
    }

    /// Whether the run still waits to hear from it.
    pub fn awaited(&self) -> bool {
        !self.lost && !self.finished && self.final_.is_none()
    }

    /// Silent past [`wire::SLOW_AFTER`], its process alive: slow.
    pub fn silent(&self) -> bool {
        self.silence.is_some()
    }

    /// `; its process ended (...)` if a local agent has exited (waited for
    /// up to a second: it may be dying), else whether it runs.
    fn exit_status(&mut self) -> String {
        let Some(child) = self.child.as_mut() else {
            return String::new();
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return format!("; its process ended ({status})"),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return "; its process is still running".into(),
            }
        }
    }

    /// What its process is doing, from `/proc` (`remote`: not ours to
    /// look at); `None` once it has exited.
    fn state(&mut self) -> Option<String> {
        let Some(child) = self.child.as_mut() else {
            return Some("remote".into());
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return None;
        }
        Some(
            match sys::proc_state(self.pid)? {
                'T' | 't' => "stopped (by a signal such as SIGSTOP, or a debugger)",
                'R' => "running",
                'S' => "sleeping",
                'D' => "waiting on I/O",
                'Z' | 'X' => return None,
                _ => "alive",
            }
            .into(),
        )
    }
}

/// An agent's last progress, in words.
fn last_progress(c: &Counters, phase: &str) -> String {
    let floor = if phase == "floor" {
        format!(
            "{} floor sockets open, {} floor receipts; ",
            c.floor_open, c.floor_recv
        )
    } else {
        String::new()
    };
    format!(
        "{floor}{} users started, {} connected, {} joined, {} open, {} errors, {} broadcast receipts",
        c.started,
        c.connected,
        c.joined,
        c.open,
        c.errors.total(),
        c.bcast_recv
    )
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
    /// `agent` or `floor writer`, for what is said about them.
    what: &'static str,
    /// The run's phase now (set by the run): what a lost or slow agent's
    /// report names.
    pub phase: &'static str,
    /// Agents gone before their final report, in order.
    pub lost: Vec<AgentLost>,
    /// Agents that were silent and spoke again.
    pub slow: Vec<SlowAgent>,
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
                links.push(AgentLink::new(s, pid, local.take(pid)));
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
            what: match role {
                Role::Agent => "agent",
                Role::FloorWriter => "floor writer",
            },
            phase: "setup",
            lost: Vec::new(),
            slow: Vec::new(),
        })
    }

    /// An agent is lost: the run's phases end early (see the module docs).
    pub fn ending(&self) -> bool {
        !self.lost.is_empty()
    }

    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Sends agent `i` a message, unless it is done or gone. A link that
    /// will not take it (closed, or full for [`wire::LINK_TIMEOUT`]) is
    /// written no more; whether its agent is gone is its reader's to say
    /// (an agent that exits after its final report closes its link while
    /// that report may still be on its way here) or `watch`'s.
    pub fn send(&mut self, i: usize, msg: &ToAgent) -> Result<(), BenchError> {
        let link = &mut self.links[i];
        if link.lost || link.unwritable || link.final_.is_some() {
            return Ok(());
        }
        if let Err(e) = wire::send(&mut link.out, msg) {
            tracing::debug!("{} {i}: writing to it failed: {e}", self.what);
            link.unwritable = true;
        }
        Ok(())
    }

    /// Sends every agent a message.
    pub fn send_all(&mut self, msg: &ToAgent) -> Result<(), BenchError> {
        for i in 0..self.links.len() {
            self.send(i, msg)?;
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
                    self.links[i].heard = Instant::now();
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

    /// Handles agent events for up to `wait` (and pings the links when
    /// due), then looks at the silent ones ([`Agents::watch`]).
    pub fn pump(&mut self, wait: Duration) -> Result<(), BenchError> {
        let deadline = Instant::now() + wait;
        if deadline >= self.next_ping {
            self.next_ping = Instant::now() + wire::PING_EVERY;
            self.send_all(&ToAgent::Ping)?;
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(event) => self.event(event),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    // Every reader has ended: nothing will come.
                    std::thread::sleep(left);
                    break;
                }
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        // Everything that has arrived is heard before anyone is judged silent.
        while let Ok(event) = self.rx.try_recv() {
            self.event(event);
        }
        self.watch();
        Ok(())
    }

    /// A line from a link, or its end (an agent's going after its final
    /// report, or a floor writer's after `finish`, is no loss).
    fn event(&mut self, event: Event) {
        match event {
            Event::Msg(i, m) => self.heard(i, *m),
            Event::Gone(i, why) => {
                if self.links[i].final_.is_none() && !self.links[i].finished {
                    self.lose(i, why);
                }
            }
        }
    }

    /// A line from agent `i`: a sign of life (ending a silence, said and
    /// recorded as slow), and what it says.
    fn heard(&mut self, i: usize, m: ToController) {
        let now = Instant::now();
        let link = &mut self.links[i];
        link.heard = now;
        if let Some((since, phase, state)) = link.silence.take() {
            let secs = now.duration_since(since).as_secs_f64();
            eprintln!(
                "\nnote: {} {i} (pid {}) is back after {secs:.0} s of silence (from the {phase}; its process was {state}): it was slow, not gone; the run goes on",
                self.what, link.pid
            );
            self.slow.push(SlowAgent {
                agent: i,
                pid: link.pid,
                phase: phase.into(),
                silent_secs: secs,
                state,
            });
        }
        self.on_message(i, m);
    }

    /// Looks at each link silent for [`wire::SLOW_AFTER`]: its process
    /// alive, it is slow (said once); exited, or silent past
    /// [`wire::HUNG_AFTER`], it is lost.
    fn watch(&mut self) {
        let now = Instant::now();
        for i in 0..self.links.len() {
            let (what, phase) = (self.what, self.phase);
            let link = &mut self.links[i];
            let quiet = now.duration_since(link.heard);
            if !link.awaited() || quiet < wire::SLOW_AFTER {
                continue;
            }
            let Some(state) = link.state() else {
                self.lose(i, "its process exited".into());
                continue;
            };
            if quiet >= wire::HUNG_AFTER {
                if let Some(c) = link.child.as_mut() {
                    let _ = c.kill();
                }
                self.lose(
                    i,
                    format!(
                        "it sent nothing for {} s with its process {state}: hung, and stopped by the bench",
                        quiet.as_secs()
                    ),
                );
            } else if link.silence.is_none() {
                eprintln!(
                    "\nnote: {what} {i} (pid {}) has sent nothing for {} s during the {phase}; its process is {state}: slow (a starved or stopped process), not gone; the run waits for it, up to {} s of silence",
                    link.pid,
                    quiet.as_secs(),
                    wire::HUNG_AFTER.as_secs()
                );
                link.silence = Some((link.heard, phase, state));
            }
        }
    }

    /// Agent `i` is gone before its final report: said at once, with the
    /// phase and its last progress, and recorded for the report.
    pub fn lose(&mut self, i: usize, why: String) {
        let (what, phase) = (self.what, self.phase);
        let link = &mut self.links[i];
        if link.lost {
            return;
        }
        link.lost = true;
        let exit = link.exit_status();
        let silent_secs = link.heard.elapsed().as_secs_f64();
        let last = link.last.as_ref().map_or_else(
            || "none (it had not reported yet)".to_string(),
            |c| last_progress(c, phase),
        );
        eprintln!(
            "\nerror: {what} {i} (pid {}) went away during the {phase}: {why}{exit}; its last progress ({silent_secs:.1} s before): {last}; the run ends here, with the figures so far",
            link.pid
        );
        if let Some(c) = link.child.take() {
            reap(c, Duration::ZERO);
        }
        self.lost.push(AgentLost {
            agent: i,
            pid: link.pid,
            phase: phase.into(),
            why: format!("{why}{exit}"),
            silent_secs,
            last_progress: last,
        });
        // The figures so far: the others start no more users.
        if self.lost.len() == 1 && what == "agent" {
            let _ = self.send_all(&ToAgent::StopArrivals);
        }
    }

    /// What agent `i` said.
    fn on_message(&mut self, i: usize, m: ToController) {
        let link = &mut self.links[i];
        match m {
            ToController::Progress(c) => link.last = Some(*c),
            ToController::StormDone => link.storm_done = true,
            ToController::FloorClosed => link.floor_closed = true,
            ToController::Listening { addr } => link.listening = Some(addr),
            ToController::Accepted { sockets } => link.accepted = sockets,
            ToController::Fired {
                round,
                write_secs,
                failed,
            } => link.fired.push((round, write_secs, failed)),
            ToController::Final(f) => {
                link.last = Some(f.counters.clone());
                link.final_ = Some(*f);
            }
            _ => {}
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
    /// then kills what is left (a lost one is already reaped).
    pub fn reap(&mut self) {
        for a in &mut self.links {
            if let Some(c) = a.child.take() {
                reap(c, Duration::from_secs(5));
            }
        }
    }
}
