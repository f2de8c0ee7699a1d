//! The lean client engine: one mio event loop holding thousands of client
//! WebSockets, each a [`Conn`] of a few dozen bytes in a slab.
//!
//! Design, and why:
//! - **No task or timer per connection.** A connection's progress is a
//!   program counter into its role's compiled [`Program`] plus two loop
//!   counters. Think times, connect/reply timeouts and heartbeats go into one
//!   binary heap of `(deadline ms, token, kind)`; a popped entry is stale (and
//!   skipped) unless the connection still has that deadline.
//! - **No buffers while idle.** Every read goes into one shared buffer; only
//!   a partial frame left at its end is kept, boxed, on the connection
//!   (`rx`), and only bytes the socket would not take are kept (`tx`). Both
//!   are `None` almost always.
//! - **Many source addresses.** With `bind_sources`, sockets bind to
//!   127.0.0.2, 127.0.0.3, ... (8 per agent) with `IP_BIND_ADDRESS_NO_PORT`, so the port is
//!   picked per destination at connect time and no address runs out of ports.
//! - **Deterministic users.** Agent `k` of `K` starts global user indices
//!   `k, k+K, k+2K, ...` of each phase at `index / rate`: the agents together
//!   interleave exactly the arrival sequence one generator would produce, and
//!   every agent agrees on each user's role.
//!
//! Ownership: the engine is single-threaded; the agent loop around it
//! ([`crate::agent`]) owns it and feeds it controller commands between turns.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use serde::Deserialize;
use slab::Slab;
use socket2::{Domain, Protocol, Socket, Type};
use throng_protocol::frame::{decode_frame, encode_close, encode_frame, Opcode, Role};
use throng_protocol::handshake::{parse_client_response, write_client_request};
use throng_protocol::{serializer, Payload, Vsn};

use crate::plan::Plan;
use crate::scenario::{find_stamp, Op, Program, Scenario, SendKind, Template, Vars};
use crate::stats::{BcastTable, Counters, Hists};
use crate::sys;

/// The token of the controller waker.
pub const WAKER: Token = Token(usize::MAX - 1);

/// The shared read buffer; also the largest frame a connection can receive.
const READ_BUF: usize = 256 * 1024;

/// Users started per turn at most, so a late loop catches up without
/// starving reads.
const MAX_STARTS_PER_TURN: usize = 2000;

/// Where a connection is in its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum State {
    /// Executing ops (never observed between turns).
    Running,
    /// TCP connect in progress.
    Connecting,
    /// Upgrade request sent, waiting for 101.
    Handshaking,
    /// In a think time, until `deadline_ms`.
    Sleeping,
    /// Waiting for the reply to `await_ref`, until `deadline_ms`.
    Awaiting,
    /// Parked at the barrier until the controller releases it.
    Barrier,
    /// Holding until the disconnect storm.
    Hold,
}

/// Flag: the connection speaks the v2 serializer.
const F_V2: u8 = 1;
/// Flag: the tracked ref is a join's.
const F_AWAIT_JOIN: u8 = 2;

/// The kind byte of a v2 binary reply (push 0, reply 1, broadcast 2).
const BINARY_REPLY: u8 = 1;

/// One client connection. Kept small on purpose (see `conn_size` in the
/// tests): ~72 bytes in the slab, plus the kernel's socket.
// `Option<Box<Vec<u8>>>` is one pointer (8 bytes) where `Option<Vec<u8>>` is
// three: the buffers are almost always `None`, so the box pays for itself.
#[allow(clippy::box_collection)]
pub struct Conn {
    /// `None` until the session's connect op.
    sock: Option<TcpStream>,
    /// The user's unique id (global index + 1), Tsung's `get_unique_id`.
    user: u32,
    /// Connect start, or the tracked message's send time (µs since epoch).
    mark_us: u64,
    /// The one pending deadline (think, connect or reply timeout), ms since epoch.
    deadline_ms: u32,
    /// When the next heartbeat is due, ms since epoch (0 = none).
    hb_ms: u32,
    /// The last ref this connection used.
    next_ref: u32,
    /// The ref whose reply is being timed (0 = none).
    await_ref: u32,
    /// The ref of the last join (v2 pushes carry it).
    join_ref: u32,
    /// Loop counters for up to two nested loops.
    loops: [u32; 2],
    /// The next op of the role's program.
    pc: u16,
    state: State,
    role: u8,
    flags: u8,
    /// A partial frame (or handshake response) left from the last read.
    rx: Option<Box<Vec<u8>>>,
    /// Bytes the socket would not take yet.
    tx: Option<Box<Vec<u8>>>,
}

impl Conn {
    /// The serializer the connection negotiated.
    fn vsn(&self) -> Vsn {
        if self.flags & F_V2 != 0 {
            Vsn::V2
        } else {
            Vsn::V1
        }
    }
}

/// The size of one connection's state, for reports.
pub const CONN_SIZE: usize = std::mem::size_of::<Conn>();

/// How an agent's share of the arrivals runs.
struct Arrivals {
    /// Per phase: (duration s, global rate /s, users of the phase, global index offset).
    phases: Vec<(f64, f64, u64, u64)>,
    idx: usize,
    phase_start: Option<Instant>,
    /// When arrivals began.
    started_at: Option<Instant>,
    /// This agent's users started in the current phase.
    started_in_phase: u64,
    k: u64,
    agents: u64,
    done: bool,
}

impl Arrivals {
    fn new(sc: &Scenario, k: u64, agents: u64) -> Arrivals {
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
    fn share(&self, users: u64) -> u64 {
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
    fn due(&mut self, now: Instant, out: &mut Vec<u64>) {
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
    fn next_due(&self) -> Option<Instant> {
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

/// The engine. See the module docs.
pub struct Engine {
    poll: Poll,
    events: Option<Events>,
    conns: Slab<Conn>,
    programs: Rc<Vec<Program>>,
    scenario: Scenario,
    timers: BinaryHeap<Reverse<(u32, u32, u8)>>,
    barrier: Vec<u32>,
    released: bool,
    epoch: Instant,
    /// The shared read buffer.
    rbuf: Vec<u8>,
    /// Frame being written.
    wbuf: Vec<u8>,
    /// Message being rendered.
    tbuf: Vec<u8>,
    starts: Vec<u64>,
    target: SocketAddr,
    host: String,
    sources: Vec<IpAddr>,
    heartbeat_ms: u32,
    hb_tpl: [Template; 2],
    connect_timeout_ms: u32,
    reply_timeout_ms: u32,
    capacity: usize,
    arrivals: Arrivals,
    /// Masks (xorshift state).
    rng: u64,
    /// Fixed per agent: handshake nonces derive from it and the user id.
    seed: u64,
    pub counters: Counters,
    pub hists: Hists,
    pub bcasts: BcastTable,
    /// Handshakes and `ok` joins per 100 ms since the arrivals began, for exact rates.
    pub slots: Slots,
}

/// Events per 100 ms slot since the start of arrivals.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Slots {
    pub connects: Vec<u32>,
    pub joins: Vec<u32>,
}

impl Slots {
    fn bump(v: &mut Vec<u32>, since: Option<Instant>) {
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
        ] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        }
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

const TIMER_STEP: u8 = 0;
const TIMER_HEARTBEAT: u8 = 1;

#[derive(Deserialize)]
struct ReplyStatus<'a> {
    #[serde(borrow)]
    status: std::borrow::Cow<'a, str>,
}

enum Cause {
    /// The session ended as planned: say goodbye with a close frame.
    Done,
    /// An error of this kind.
    Error(ErrKind),
}

#[derive(Clone, Copy, Debug)]
enum ErrKind {
    Refused,
    Timeout,
    Closed,
    Handshake,
    LocalLimit,
    Other,
}

fn classify(e: &io::Error) -> ErrKind {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => ErrKind::Refused,
        Some(libc::ETIMEDOUT) => ErrKind::Timeout,
        Some(libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED) => ErrKind::Closed,
        Some(
            libc::EADDRNOTAVAIL | libc::EADDRINUSE | libc::EMFILE | libc::ENFILE | libc::ENOBUFS,
        ) => ErrKind::LocalLimit,
        _ => ErrKind::Other,
    }
}

impl Engine {
    pub fn new(cfg: Plan) -> io::Result<Engine> {
        let programs = cfg
            .scenario
            .roles
            .iter()
            .map(|r| Program::compile(&cfg.scenario, r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))?;
        let sources = if cfg.bind_sources && cfg.target.ip().is_loopback() && cfg.target.is_ipv4() {
            // Eight addresses per agent: agent 0 binds 127.0.0.2..=127.0.0.9,
            // agent 1 127.0.0.10..=17, and so on (.0, .1 and .255 skipped).
            (0..8u32)
                .map(|i| source_addr(cfg.index * 8 + i))
                .collect::<Vec<_>>()
        } else {
            Vec::new()
        };
        let hb = |vsn| {
            let text = match vsn {
                Vsn::V1 => {
                    r#"{"topic":"phoenix","event":"heartbeat","payload":{},"ref":"%%ref%%"}"#
                }
                Vsn::V2 => r#"[null,"%%ref%%","phoenix","heartbeat",{}]"#,
            };
            Template::parse(text).expect("static heartbeat template")
        };
        let sc = &cfg.scenario;
        let secs_ms = |s: f64| (s * 1000.0).round().clamp(1.0, u32::MAX as f64 / 4.0) as u32;
        let users = {
            let a = Arrivals::new(sc, cfg.index as u64, cfg.agents as u64);
            a.phases.iter().map(|p| a.share(p.2)).sum::<u64>() as usize
        };
        let mut conns = Slab::new();
        let capacity = usize::try_from(cfg.capacity).unwrap_or(usize::MAX);
        conns.reserve(users.min(capacity));
        Ok(Engine {
            poll: Poll::new()?,
            events: Some(Events::with_capacity(4096)),
            conns,
            programs: Rc::new(programs),
            heartbeat_ms: if sc.heartbeat > 0.0 {
                secs_ms(sc.heartbeat)
            } else {
                0
            },
            hb_tpl: [hb(Vsn::V1), hb(Vsn::V2)],
            connect_timeout_ms: secs_ms(sc.connect_timeout),
            reply_timeout_ms: secs_ms(sc.reply_timeout),
            arrivals: Arrivals::new(sc, cfg.index as u64, cfg.agents as u64),
            scenario: cfg.scenario,
            timers: BinaryHeap::new(),
            barrier: Vec::new(),
            released: false,
            epoch: Instant::now(),
            rbuf: vec![0; READ_BUF],
            wbuf: Vec::with_capacity(4096),
            tbuf: Vec::with_capacity(4096),
            starts: Vec::new(),
            target: cfg.target,
            host: cfg.host,
            sources,
            capacity,
            rng: sys::realtime_ns() | 1,
            seed: sys::realtime_ns().rotate_left(17),
            counters: Counters::default(),
            hists: Hists::default(),
            bcasts: BcastTable::new(),
            slots: Slots::default(),
        })
    }

    /// How many users this agent will start in all.
    pub fn planned_users(&self) -> u64 {
        self.arrivals
            .phases
            .iter()
            .map(|p| self.arrivals.share(p.2))
            .sum()
    }

    /// A waker for the controller thread.
    pub fn waker(&self) -> io::Result<Waker> {
        Waker::new(self.poll.registry(), WAKER)
    }

    fn now_ms(&self) -> u32 {
        self.epoch.elapsed().as_millis() as u32
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Starts the arrivals.
    pub fn start(&mut self) {
        let now = Instant::now();
        self.arrivals.phase_start = Some(now);
        self.arrivals.started_at = Some(now);
    }

    /// Releases the connections parked at the barrier (and any that come later).
    pub fn release(&mut self) {
        self.released = true;
        let parked = std::mem::take(&mut self.barrier);
        for t in parked {
            let t = t as usize;
            if matches!(self.conns.get(t), Some(c) if c.state == State::Barrier) {
                self.conns[t].state = State::Running;
                self.advance(t);
            }
        }
    }

    /// The disconnect storm: every connection dropped at once. Returns how many.
    pub fn storm(&mut self) -> usize {
        self.arrivals.done = true;
        let n = self.conns.len();
        self.counters.ended += n as u64;
        // Dropping each socket closes it: the server sees every client go at once.
        self.conns.clear();
        self.timers.clear();
        n
    }

    /// One turn of the loop: wait up to `max_wait` for I/O, then start due
    /// users and fire due timers.
    pub fn turn(&mut self, max_wait: Duration) -> io::Result<()> {
        let now = Instant::now();
        let mut wait = max_wait;
        if let Some(next) = self.arrivals.next_due() {
            wait = wait.min(next.saturating_duration_since(now));
        }
        if let Some(Reverse((at, _, _))) = self.timers.peek() {
            let now_ms = self.now_ms();
            wait = wait.min(Duration::from_millis(at.saturating_sub(now_ms) as u64));
        }
        let mut events = self
            .events
            .take()
            .unwrap_or_else(|| Events::with_capacity(4096));
        match self.poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                self.events = Some(events);
                return Err(e);
            }
        }
        for ev in events.iter() {
            let t = ev.token();
            if t == WAKER {
                continue;
            }
            self.on_event(
                t.0,
                ev.is_readable() || ev.is_read_closed(),
                ev.is_writable(),
                ev.is_error(),
            );
        }
        self.events = Some(events);
        self.start_due_users();
        self.fire_timers();
        Ok(())
    }

    fn start_due_users(&mut self) {
        let mut starts = std::mem::take(&mut self.starts);
        starts.clear();
        self.arrivals.due(Instant::now(), &mut starts);
        for &g in &starts {
            self.start_user(g);
        }
        self.starts = starts;
        self.counters.arrivals_done = self.arrivals.done;
    }

    fn start_user(&mut self, g: u64) {
        self.counters.started += 1;
        if self.conns.len() >= self.capacity || g >= u32::MAX as u64 {
            self.counters.ended += 1;
            self.counters.errors.local_limit += 1;
            return;
        }
        let role = self.scenario.role_of(g);
        let v2 = matches!(
            self.programs[role as usize].ops.first(),
            Some(Op::Connect { vsn: Vsn::V2, .. })
        );
        let token = self.conns.insert(Conn {
            sock: None,
            user: (g + 1) as u32,
            mark_us: 0,
            deadline_ms: 0,
            hb_ms: 0,
            next_ref: 0,
            await_ref: 0,
            join_ref: 0,
            loops: [0; 2],
            pc: 0,
            state: State::Running,
            role,
            flags: if v2 { F_V2 } else { 0 },
            rx: None,
            tx: None,
        });
        self.advance(token);
    }

    fn schedule(&mut self, token: usize, at: u32, kind: u8) {
        self.timers.push(Reverse((at, token as u32, kind)));
    }

    fn fire_timers(&mut self) {
        let now = self.now_ms();
        while let Some(Reverse((at, token, kind))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            let t = token as usize;
            let Some(c) = self.conns.get_mut(t) else {
                continue;
            };
            if kind == TIMER_HEARTBEAT {
                if c.hb_ms == at && !matches!(c.state, State::Connecting | State::Handshaking) {
                    let next = at.wrapping_add(self.heartbeat_ms);
                    c.hb_ms = next;
                    self.send_heartbeat(t);
                    if self.conns.contains(t) {
                        self.schedule(t, next, TIMER_HEARTBEAT);
                    }
                }
                continue;
            }
            if c.deadline_ms != at {
                continue;
            }
            match c.state {
                State::Sleeping => {
                    c.state = State::Running;
                    self.advance(t);
                }
                State::Connecting | State::Handshaking | State::Awaiting => {
                    self.drop_conn(t, Cause::Error(ErrKind::Timeout));
                }
                _ => {}
            }
        }
    }

    /// Runs the connection's program until an op blocks.
    fn advance(&mut self, token: usize) {
        let programs = Rc::clone(&self.programs);
        loop {
            let Some(c) = self.conns.get_mut(token) else {
                return;
            };
            let ops = &programs[c.role as usize].ops;
            let Some(op) = ops.get(c.pc as usize) else {
                // Tsung's semantics: the end of the session closes the connection.
                self.drop_conn(token, Cause::Done);
                return;
            };
            c.pc += 1;
            match op {
                Op::Connect { .. } => {
                    if c.sock.is_none() {
                        self.connect(token);
                        return;
                    }
                }
                Op::Send {
                    tpl,
                    kind,
                    track,
                    wait,
                    fixed_ref,
                    stamp,
                } => {
                    self.send_op(token, tpl, *kind, *track, *fixed_ref, *stamp);
                    if *wait {
                        let at = self.now_ms().wrapping_add(self.reply_timeout_ms);
                        let Some(c) = self.conns.get_mut(token) else {
                            return;
                        };
                        c.state = State::Awaiting;
                        c.deadline_ms = at;
                        self.schedule(token, at, TIMER_STEP);
                        return;
                    }
                }
                Op::Think { ms } => {
                    let at = (self.epoch.elapsed().as_millis() as u32).wrapping_add(*ms);
                    c.state = State::Sleeping;
                    c.deadline_ms = at;
                    self.schedule(token, at, TIMER_STEP);
                    return;
                }
                Op::LoopStart { times, slot, end } => {
                    if *times == 0 {
                        c.pc = *end;
                    } else {
                        c.loops[*slot as usize] = *times;
                    }
                }
                Op::LoopEnd { start, slot } => {
                    let n = &mut c.loops[*slot as usize];
                    *n = n.saturating_sub(1);
                    if *n > 0 {
                        c.pc = start + 1;
                    }
                }
                Op::Barrier => {
                    if !self.released {
                        c.state = State::Barrier;
                        self.barrier.push(token as u32);
                        return;
                    }
                }
                Op::Hold => {
                    c.state = State::Hold;
                    return;
                }
                Op::Disconnect => {
                    self.drop_conn(token, Cause::Done);
                    return;
                }
            }
        }
    }

    fn connect(&mut self, token: usize) {
        let now_us = self.now_us();
        let at = self.now_ms().wrapping_add(self.connect_timeout_ms);
        let src = if self.sources.is_empty() {
            None
        } else {
            let user = self.conns[token].user as usize;
            Some(self.sources[user % self.sources.len()])
        };
        let sock = match open_socket(self.target, src) {
            Ok(s) => s,
            Err(e) => {
                self.drop_conn(token, Cause::Error(classify(&e)));
                return;
            }
        };
        let mut stream = TcpStream::from_std(sock.into());
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            Token(token),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.drop_conn(token, Cause::Error(classify(&e)));
            return;
        }
        let c = &mut self.conns[token];
        c.sock = Some(stream);
        c.state = State::Connecting;
        c.mark_us = now_us;
        c.deadline_ms = at;
        self.schedule(token, at, TIMER_STEP);
    }

    fn on_event(&mut self, token: usize, readable: bool, writable: bool, error: bool) {
        let Some(c) = self.conns.get_mut(token) else {
            return;
        };
        if c.state == State::Connecting {
            if writable || error || readable {
                self.finish_connect(token);
            }
            return;
        }
        if writable && c.tx.is_some() {
            self.flush_tx(token);
        }
        if readable || error {
            self.on_readable(token);
        }
    }

    /// The TCP connect finished (or failed): send the upgrade request.
    fn finish_connect(&mut self, token: usize) {
        let c = &mut self.conns[token];
        let Some(sock) = c.sock.as_ref() else { return };
        match sock.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => {
                self.drop_conn(token, Cause::Error(classify(&e)));
                return;
            }
        }
        match sock.peer_addr() {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotConnected => return,
            Err(e) => {
                self.drop_conn(token, Cause::Error(classify(&e)));
                return;
            }
        }
        c.state = State::Handshaking;
        let user = c.user;
        let nonce = self.nonce(user);
        let programs = Rc::clone(&self.programs);
        let path = self.connect_path(&programs, token);
        self.wbuf.clear();
        write_client_request(&mut self.wbuf, &self.host, path, nonce);
        self.write_wbuf(token);
    }

    /// The path of the connect op the connection is in (no allocation: the
    /// programs are shared behind an `Rc` the caller holds).
    fn connect_path<'p>(&self, programs: &'p [Program], token: usize) -> &'p str {
        let c = &self.conns[token];
        match programs[c.role as usize]
            .ops
            .get((c.pc as usize).wrapping_sub(1))
        {
            Some(Op::Connect { path, .. }) => path,
            _ => "/socket/websocket",
        }
    }

    /// The handshake nonce for a user: derived, so nothing is stored.
    fn nonce(&self, user: u32) -> [u8; 16] {
        let a = (user as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.seed;
        let mut n = [0u8; 16];
        n[..8].copy_from_slice(&a.to_le_bytes());
        n[8..].copy_from_slice(&a.rotate_left(29).to_le_bytes());
        n
    }

    fn mask(&mut self) -> [u8; 4] {
        // xorshift64: masks need not be secret here, only present.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng as u32).to_le_bytes()
    }

    fn on_readable(&mut self, token: usize) {
        let mut buf = std::mem::take(&mut self.rbuf);
        while let Some(c) = self.conns.get_mut(token) {
            let Some(sock) = c.sock.as_mut() else { break };
            let mut len = 0;
            if let Some(rx) = c.rx.take() {
                len = rx.len();
                buf[..len].copy_from_slice(&rx);
            }
            if len == buf.len() {
                self.drop_conn(token, Cause::Error(ErrKind::Other));
                break;
            }
            match sock.read(&mut buf[len..]) {
                Ok(0) => {
                    self.drop_conn(token, Cause::Error(ErrKind::Closed));
                    break;
                }
                Ok(n) => {
                    let end = len + n;
                    let used = self.process(token, &mut buf[..end]);
                    if used < end {
                        if let Some(c) = self.conns.get_mut(token) {
                            c.rx = Some(Box::new(buf[used..end].to_vec()));
                        }
                    }
                    // A short read drained the socket: epoll (edge-triggered)
                    // reports the next arrival, so skip the read that would
                    // only say EAGAIN (one syscall less per broadcast receipt).
                    if end < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if len > 0 {
                        c.rx = Some(Box::new(buf[..len].to_vec()));
                    }
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {
                    if len > 0 {
                        c.rx = Some(Box::new(buf[..len].to_vec()));
                    }
                }
                Err(e) => {
                    self.drop_conn(token, Cause::Error(classify(&e)));
                    break;
                }
            }
        }
        self.rbuf = buf;
    }

    /// Handles what was read; returns how many bytes were used.
    fn process(&mut self, token: usize, data: &mut [u8]) -> usize {
        let mut pos = 0;
        if self.conns[token].state == State::Handshaking {
            let user = self.conns[token].user;
            let programs = Rc::clone(&self.programs);
            let path = self.connect_path(&programs, token);
            self.tbuf.clear();
            let nonce = self.nonce(user);
            let expect = write_client_request(&mut self.tbuf, &self.host, path, nonce);
            match parse_client_response(data, &expect) {
                Ok(None) => {
                    if data.len() > 16 * 1024 {
                        self.drop_conn(token, Cause::Error(ErrKind::Handshake));
                        return data.len();
                    }
                    return 0;
                }
                Ok(Some(n)) => {
                    pos = n;
                    self.on_open(token);
                }
                Err(e) => {
                    tracing::debug!(
                        user,
                        "handshake failed: {e}: {:?}",
                        String::from_utf8_lossy(&data[..data.len().min(200)])
                    );
                    self.drop_conn(token, Cause::Error(ErrKind::Handshake));
                    return data.len();
                }
            }
        }
        while pos < data.len() {
            match decode_frame(&mut data[pos..], Role::Client, READ_BUF as u64) {
                Ok(None) => break,
                Ok(Some(f)) => {
                    let range = pos + f.payload.start..pos + f.payload.end;
                    pos += f.consumed;
                    self.on_frame(token, f.opcode, f.fin, &data[range]);
                    if !self.conns.contains(token) {
                        return data.len();
                    }
                }
                Err(_) => {
                    self.drop_conn(token, Cause::Error(ErrKind::Other));
                    return data.len();
                }
            }
        }
        // Ops that were waiting on the open run after the frames that came with it.
        if self.conns.get(token).map(|c| c.state) == Some(State::Running) {
            self.advance(token);
        }
        pos
    }

    fn on_open(&mut self, token: usize) {
        let now_us = self.now_us();
        let now_ms = self.now_ms();
        let hb = self.heartbeat_ms;
        let c = &mut self.conns[token];
        let us = now_us.saturating_sub(c.mark_us).max(1);
        c.state = State::Running;
        self.hists.connect.saturating_record(us);
        self.counters.connected += 1;
        Slots::bump(&mut self.slots.connects, self.arrivals.started_at);
        if hb > 0 {
            let at = now_ms.wrapping_add(hb);
            c.hb_ms = at;
            self.schedule(token, at, TIMER_HEARTBEAT);
        }
    }

    fn on_frame(&mut self, token: usize, opcode: Opcode, fin: bool, payload: &[u8]) {
        match opcode {
            Opcode::Ping => {
                self.wbuf.clear();
                let m = self.mask();
                encode_frame(&mut self.wbuf, Opcode::Pong, payload, Some(m));
                self.write_wbuf(token);
            }
            Opcode::Pong | Opcode::Continuation => {}
            Opcode::Close => self.drop_conn(token, Cause::Error(ErrKind::Closed)),
            Opcode::Text | Opcode::Binary => {
                self.counters.msgs_in += 1;
                if fin {
                    self.on_message(token, opcode, payload);
                }
            }
        }
    }

    fn on_message(&mut self, token: usize, opcode: Opcode, data: &[u8]) {
        let vsn = self.conns[token].vsn();
        let Ok(msg) = serializer::decode(vsn, opcode, data, serializer::Sender::Server) else {
            self.counters.errors.other += 1;
            return;
        };
        // A reply, and whether it says `ok`. A v2 binary reply (kind byte
        // 1 in Phoenix's `V2.JSONSerializer`) decodes with its status where
        // other messages carry their event, so it is told by its kind.
        let reply_ok = if opcode == Opcode::Binary && vsn == Vsn::V2 {
            (data.first() == Some(&BINARY_REPLY)).then(|| msg.event == "ok")
        } else if msg.event == "phx_reply" {
            Some(match msg.payload {
                Payload::Json(p) => serde_json::from_str::<ReplyStatus>(p)
                    .map(|s| s.status == "ok")
                    .unwrap_or(false),
                Payload::Binary(_) => false,
            })
        } else {
            None
        };
        if let Some(ok) = reply_ok {
            let r = msg.msg_ref.as_deref().and_then(|r| r.parse::<u32>().ok());
            self.on_reply(token, r, ok);
            return;
        }
        match &*msg.event {
            "phx_error" => self.counters.errors.error_reply += 1,
            "phx_close" => {}
            _ => {
                if let Payload::Json(p) = msg.payload {
                    if let Some((key, sent_ns)) = find_stamp(p.as_bytes()) {
                        let now = sys::realtime_ns();
                        let us = (now.saturating_sub(sent_ns) / 1000).max(1);
                        self.hists.broadcast.saturating_record(us);
                        self.counters.bcast_recv += 1;
                        let b = self.bcasts.entry(key).or_default();
                        b.recv += 1;
                        b.last_ns = b.last_ns.max(now);
                    }
                }
            }
        }
    }

    /// A reply to `msg_ref`: timed and counted if it is the one the
    /// connection tracks (a join's, or a waited push's).
    fn on_reply(&mut self, token: usize, msg_ref: Option<u32>, ok: bool) {
        let c = &mut self.conns[token];
        if c.await_ref == 0 || msg_ref != Some(c.await_ref) {
            return;
        }
        let us = self
            .epoch
            .elapsed()
            .as_micros()
            .saturating_sub(c.mark_us as u128)
            .max(1) as u64;
        if c.flags & F_AWAIT_JOIN != 0 {
            self.hists.join.saturating_record(us);
            if ok {
                self.counters.joined += 1;
                Slots::bump(&mut self.slots.joins, self.arrivals.started_at);
                if let Some(t0) = self.arrivals.started_at {
                    self.counters.last_join_secs = t0.elapsed().as_secs_f64();
                }
            }
        } else {
            self.hists.reply.saturating_record(us);
        }
        if !ok {
            self.counters.errors.error_reply += 1;
        }
        c.await_ref = 0;
        c.flags &= !F_AWAIT_JOIN;
        if c.state == State::Awaiting {
            c.state = State::Running;
        }
    }

    fn send_op(
        &mut self,
        token: usize,
        tpl: &Template,
        kind: SendKind,
        track: bool,
        fixed_ref: Option<u32>,
        stamp: bool,
    ) {
        let now_us = self.now_us();
        let c = &mut self.conns[token];
        c.next_ref = c.next_ref.wrapping_add(1).max(1);
        let r = fixed_ref.unwrap_or(c.next_ref);
        if kind == SendKind::Join {
            c.join_ref = r;
        }
        let now_ns = if stamp { sys::realtime_ns() } else { 0 };
        self.tbuf.clear();
        tpl.render(
            &mut self.tbuf,
            &Vars {
                user_id: c.user as u64,
                msg_ref: r,
                join_ref: c.join_ref,
                now_ns,
            },
        );
        if track {
            c.await_ref = r;
            c.mark_us = now_us;
            if kind == SendKind::Join {
                c.flags |= F_AWAIT_JOIN;
            } else {
                c.flags &= !F_AWAIT_JOIN;
            }
        }
        if stamp {
            self.counters.bcast_sent += 1;
            let key = ((c.user as u64) << 32) | r as u64;
            self.bcasts.entry(key).or_default().sent_ns = now_ns;
        }
        self.send_text(token);
    }

    fn send_heartbeat(&mut self, token: usize) {
        let c = &mut self.conns[token];
        c.next_ref = c.next_ref.wrapping_add(1).max(1);
        let v = Vars {
            user_id: c.user as u64,
            msg_ref: c.next_ref,
            join_ref: c.join_ref,
            now_ns: 0,
        };
        let i = if c.flags & F_V2 != 0 { 1 } else { 0 };
        self.tbuf.clear();
        self.hb_tpl[i].render(&mut self.tbuf, &v);
        self.send_text(token);
    }

    /// Frames `tbuf` as a masked text frame and writes it.
    fn send_text(&mut self, token: usize) {
        let m = self.mask();
        self.wbuf.clear();
        encode_frame(&mut self.wbuf, Opcode::Text, &self.tbuf, Some(m));
        self.counters.msgs_out += 1;
        self.write_wbuf(token);
    }

    /// Writes `wbuf` to the connection, keeping what the socket won't take.
    fn write_wbuf(&mut self, token: usize) {
        let Some(c) = self.conns.get_mut(token) else {
            return;
        };
        if let Some(tx) = c.tx.as_mut() {
            tx.extend_from_slice(&self.wbuf);
            return;
        }
        let Some(sock) = c.sock.as_mut() else { return };
        let mut written = 0;
        while written < self.wbuf.len() {
            match sock.write(&self.wbuf[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    self.drop_conn(token, Cause::Error(classify(&e)));
                    return;
                }
            }
        }
        if written < self.wbuf.len() {
            c.tx = Some(Box::new(self.wbuf[written..].to_vec()));
        }
    }

    fn flush_tx(&mut self, token: usize) {
        let Some(c) = self.conns.get_mut(token) else {
            return;
        };
        let (Some(sock), Some(tx)) = (c.sock.as_mut(), c.tx.as_mut()) else {
            return;
        };
        let mut written = 0;
        let result = loop {
            if written == tx.len() {
                break Ok(());
            }
            match sock.write(&tx[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        tx.drain(..written);
        if tx.is_empty() {
            c.tx = None;
        }
        if let Err(e) = result {
            self.drop_conn(token, Cause::Error(classify(&e)));
        }
    }

    /// Ends a session: counts it and closes its socket.
    fn drop_conn(&mut self, token: usize, cause: Cause) {
        let Some(mut c) = self.conns.try_remove(token) else {
            return;
        };
        self.counters.ended += 1;
        match cause {
            Cause::Done => {
                let open = !matches!(c.state, State::Connecting | State::Handshaking);
                if let (true, Some(sock)) = (open, c.sock.as_mut()) {
                    self.wbuf.clear();
                    let m = self.mask();
                    encode_close(&mut self.wbuf, 1000, "", Some(m));
                    let _ = sock.write(&self.wbuf);
                }
            }
            Cause::Error(kind) => {
                let e = &mut self.counters.errors;
                match kind {
                    ErrKind::Refused => e.refused += 1,
                    ErrKind::Timeout => e.timeout += 1,
                    ErrKind::Closed => e.closed += 1,
                    ErrKind::Handshake => e.handshake += 1,
                    ErrKind::LocalLimit => e.local_limit += 1,
                    ErrKind::Other => e.other += 1,
                }
            }
        }
    }

    /// Recomputes the gauges (open, connecting, awaiting, parked) and times
    /// out tracked replies no session waits on. Cheap: one pass over the slab.
    pub fn refresh_gauges(&mut self) {
        let now_us = self.now_us();
        let limit = self.reply_timeout_ms as u64 * 1000;
        let (mut open, mut connecting, mut awaiting, mut barrier, mut hold) = (0, 0, 0, 0, 0);
        let mut timeouts = 0;
        for (_, c) in self.conns.iter_mut() {
            match c.state {
                State::Connecting | State::Handshaking => connecting += 1,
                State::Barrier => barrier += 1,
                State::Hold => hold += 1,
                _ => {}
            }
            if c.sock.is_some() && !matches!(c.state, State::Connecting | State::Handshaking) {
                open += 1;
            }
            if c.await_ref != 0 {
                if c.state != State::Awaiting && now_us.saturating_sub(c.mark_us) > limit {
                    c.await_ref = 0;
                    timeouts += 1;
                } else {
                    awaiting += 1;
                }
            }
        }
        let k = &mut self.counters;
        k.open = open;
        k.connecting = connecting;
        k.awaiting = awaiting;
        k.at_barrier = barrier;
        k.holding = hold;
        k.errors.timeout += timeouts;
        k.arrivals_done = self.arrivals.done;
        if let Some(s) = sys::proc_sample("self") {
            k.rss = s.rss;
            k.cpu_secs = s.cpu_secs;
        }
    }
}

/// The `n`th loopback source address: 127.0.0.2, 127.0.0.3, ... 127.0.0.254,
/// 127.0.1.2, ... (each third octet's .0, .1 and .255 left out).
fn source_addr(n: u32) -> IpAddr {
    let (hi, lo) = (n / 253, n % 253);
    IpAddr::V4(Ipv4Addr::new(127, (hi >> 8) as u8, hi as u8, 2 + lo as u8))
}

/// A non-blocking TCP socket, bound to `src` (port picked at connect) and
/// connecting to `target`.
fn open_socket(target: SocketAddr, src: Option<IpAddr>) -> io::Result<Socket> {
    let domain = if target.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let sock = Socket::new(domain, Type::STREAM.nonblocking(), Some(Protocol::TCP))?;
    sock.set_nodelay(true)?;
    if let Some(ip) = src {
        // Best effort: without it, bind picks a port per source address.
        let _ = sys::set_bind_no_port(&sock);
        sock.bind(&SocketAddr::new(ip, 0).into())?;
    }
    match sock.connect(&target.into()) {
        Ok(()) => Ok(sock),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(sock),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::chat;

    #[test]
    fn conn_is_small() {
        eprintln!("size_of::<Conn>() = {CONN_SIZE} bytes");
        const { assert!(CONN_SIZE <= 80, "Conn grew past 80 bytes") };
    }

    /// A stand-in Phoenix server on threads: upgrades, answers joins (even
    /// users `ok`, odd users `error`; with `binary_replies`, as v2 binary
    /// reply frames), and sends every `new:msg` to everyone.
    fn stand_in_server(vsn: Vsn, binary_replies: bool) -> SocketAddr {
        use std::io::{Read as _, Write as _};
        use std::sync::{Arc, Mutex};
        use throng_protocol::handshake::{accept_key, write_response};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peers: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { break };
                let peers = Arc::clone(&peers);
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = s.read(&mut chunk).unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let head = String::from_utf8_lossy(&buf).to_string();
                    let key = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
                        .unwrap()
                        .trim()
                        .to_string();
                    let mut out = Vec::new();
                    write_response(&mut out, &accept_key(key.as_bytes()));
                    s.write_all(&out).unwrap();
                    peers.lock().unwrap().push(s.try_clone().unwrap());
                    let mut pending: Vec<u8> = Vec::new();
                    loop {
                        while let Ok(Some(f)) =
                            decode_frame(&mut pending, throng_protocol::Role::Server, 1 << 20)
                        {
                            let data = pending[f.payload.clone()].to_vec();
                            pending.drain(..f.consumed);
                            if f.opcode != Opcode::Text {
                                continue;
                            }
                            let m = serializer::decode(
                                vsn,
                                Opcode::Text,
                                &data,
                                serializer::Sender::Client,
                            )
                            .unwrap();
                            let mut msg = Vec::new();
                            match &*m.event {
                                "phx_join" => {
                                    let user: u64 = match m.payload {
                                        Payload::Json(p) => {
                                            serde_json::from_str::<serde_json::Value>(p)
                                                .ok()
                                                .and_then(|v| v["user"].as_str()?.parse().ok())
                                                .unwrap_or(0)
                                        }
                                        Payload::Binary(_) => 0,
                                    };
                                    let odd = user % 2 == 1;
                                    let (status, resp) = if odd {
                                        ("error", r#"{"reason":"odd"}"#)
                                    } else {
                                        ("ok", "{}")
                                    };
                                    let response = if binary_replies {
                                        Payload::Binary(resp.as_bytes())
                                    } else {
                                        Payload::Json(resp)
                                    };
                                    let opcode = serializer::encode_reply(
                                        vsn,
                                        &mut msg,
                                        m.join_ref.as_deref(),
                                        m.msg_ref.as_deref(),
                                        &m.topic,
                                        status,
                                        response,
                                    )
                                    .unwrap();
                                    let mut frame = Vec::new();
                                    encode_frame(&mut frame, opcode, &msg, None);
                                    s.write_all(&frame).unwrap();
                                }
                                "new:msg" => {
                                    serializer::encode_broadcast(
                                        vsn, &mut msg, &m.topic, &m.event, m.payload,
                                    )
                                    .unwrap();
                                    let mut frame = Vec::new();
                                    encode_frame(&mut frame, Opcode::Text, &msg, None);
                                    for p in peers.lock().unwrap().iter_mut() {
                                        let _ = p.write_all(&frame);
                                    }
                                }
                                _ => {}
                            }
                        }
                        let n = s.read(&mut chunk).unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        pending.extend_from_slice(&chunk[..n]);
                    }
                });
            }
        });
        addr
    }

    fn run_engine(ser: Vsn, binary_replies: bool) {
        let addr = stand_in_server(ser, binary_replies);
        let users = 20;
        let mut engine = Engine::new(Plan {
            scenario: chat(users, 2000.0, 1, 2, 0.0, ser),
            target: addr,
            host: addr.to_string(),
            bind_sources: true,
            index: 0,
            agents: 1,
            capacity: 1000,
        })
        .unwrap();
        engine.start();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            engine.turn(Duration::from_millis(5)).unwrap();
            engine.refresh_gauges();
            let c = &engine.counters;
            if c.arrivals_done && c.connecting == 0 && c.awaiting == 0 && c.at_barrier == users {
                break;
            }
            assert!(Instant::now() < deadline, "did not settle: {c:?}");
        }
        engine.release();
        while engine.counters.bcast_recv < 2 * users {
            engine.turn(Duration::from_millis(5)).unwrap();
            assert!(
                Instant::now() < deadline,
                "broadcasts missing: {:?}",
                engine.counters
            );
        }
        engine.refresh_gauges();
        let c = &engine.counters;
        assert_eq!(c.connected, users);
        assert_eq!(c.joined, users / 2, "even users are accepted");
        assert_eq!(c.errors.error_reply, users / 2, "odd users are refused");
        assert_eq!(c.errors.total(), users / 2);
        assert_eq!(c.bcast_sent, 2);
        assert_eq!(c.holding, users, "everyone holds after the barrier");
        assert_eq!(engine.hists.join.len(), users);
        assert_eq!(engine.hists.broadcast.len(), 2 * users);
        assert_eq!(engine.bcasts.len(), 2);
        assert!(engine
            .bcasts
            .values()
            .all(|b| b.recv == users && b.sent_ns > 0));
        assert_eq!(engine.storm(), users as usize);
    }

    #[test]
    fn engine_runs_a_session_against_a_stand_in_server_v2() {
        run_engine(Vsn::V2, false);
    }

    #[test]
    fn engine_runs_a_session_against_a_stand_in_server_v1() {
        run_engine(Vsn::V1, false);
    }

    /// A v2 reply may come as a binary frame (Phoenix sends one when the
    /// channel replies `{:binary, data}`): its status decodes where other
    /// messages carry their event, and the join must still be timed and
    /// counted, `ok` or not.
    #[test]
    fn engine_counts_binary_replies() {
        run_engine(Vsn::V2, true);
    }

    #[test]
    fn slots_give_the_best_second() {
        let v = vec![1, 2, 3, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 0, 0];
        assert_eq!(Slots::peak_per_sec(&v, 10), 100.0);
        assert_eq!(Slots::peak_per_sec(&[5, 5], 10), 50.0);
        assert_eq!(Slots::peak_per_sec(&[], 10), 0.0);
        let mut a = Slots {
            connects: vec![1, 2],
            joins: vec![],
        };
        a.merge(&Slots {
            connects: vec![1, 1, 1],
            joins: vec![4],
        });
        assert_eq!(a.connects, vec![2, 3, 1]);
        assert_eq!(a.joins, vec![4]);
    }

    #[test]
    fn source_addresses_start_at_127_0_0_2() {
        assert_eq!(source_addr(0), "127.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(source_addr(7), "127.0.0.9".parse::<IpAddr>().unwrap());
        assert_eq!(source_addr(252), "127.0.0.254".parse::<IpAddr>().unwrap());
        assert_eq!(source_addr(253), "127.0.1.2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn arrivals_interleave_across_agents() {
        let sc = chat(10, 1000.0, 0, 0, 0.0, Vsn::V2);
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
        let mut sc = chat(10, 1000.0, 0, 0, 0.0, Vsn::V2);
        sc.phases = vec![
            crate::scenario::Phase {
                duration: 0.002,
                arrival_rate: 1000.0,
                max_users: None,
            },
            crate::scenario::Phase {
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
