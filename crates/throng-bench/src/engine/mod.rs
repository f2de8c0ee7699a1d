//! The lean client engine: one mio event loop holding thousands of client
//! WebSockets, each a `Conn` of a few dozen bytes in a slab.
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
//!   are `None` almost always. A message longer than the shared buffer is
//!   read as it arrives, kept whole only when it must be read (`large`).
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
//!
//! Layout: this module holds the [`Engine`] and its turn of the loop (start
//! due users, fire due timers, dispatch I/O) and the gauges; `conn` the
//! per-connection struct; `arrivals` this agent's share of the arrival
//! schedule; `session` the program each connection runs and its timers;
//! `websocket` the client side of the connection (connect, upgrade, frames
//! in and out); `messages` the Phoenix messages on it (sends rendered from
//! templates, replies timed against the tracked ref, broadcasts timed by
//! their stamp); `socket` opening sockets and naming their errors; `floor`
//! the reading side of the floor measurement (raw sockets to floor writers);
//! `large` messages longer than the shared buffer; `presence` the presence
//! messages (traffic, diffs, counts) and presence joins' times.

mod arrivals;
mod conn;
mod floor;
mod large;
mod messages;
mod presence;
mod session;
mod socket;
#[cfg(test)]
mod tests;
pub mod tls;
mod websocket;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, ErrorKind, Write};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};
use slab::Slab;
use throng_protocol::frame::encode_close;
use throng_protocol::Vsn;

use self::arrivals::Arrivals;
pub use self::conn::CONN_SIZE;
use self::conn::{Conn, Rx, State};
pub use self::presence::PresenceLog;
use self::socket::{source_addr, ErrKind};
use crate::plan::Plan;
use crate::scenario::{Program, Scenario, Template};
use crate::slots::Slots;
use crate::stats::{BcastTable, Counters, Hists};
use crate::sys;

/// The token of the controller waker.
pub const WAKER: Token = Token(usize::MAX - 1);

/// The shared read buffer: a frame that fits is read whole into it; a
/// longer one is read as it arrives (`large`, up to `large::MAX_MESSAGE`).
const READ_BUF: usize = 256 * 1024;

/// How late a step timer (think, timeout) may fire, ms, so the loop is not
/// woken for each one.
const TIMER_SLACK_MS: u32 = 10;

/// The engine. See the module docs.
pub struct Engine {
    poll: Poll,
    events: Option<Events>,
    conns: Slab<Conn>,
    /// Each role's compiled session, shared with the op being run.
    programs: Rc<Vec<Program>>,
    scenario: Scenario,
    /// `(deadline ms, token, kind)`, soonest first; an entry is stale unless
    /// its connection still has that deadline (see `session`).
    timers: BinaryHeap<Reverse<(u32, u32)>>,
    /// `(heartbeat ms, token)`, soonest first, on the grid; stale unless the
    /// connection's `hb_ms` is that time.
    hb_timers: BinaryHeap<Reverse<(u32, u32)>>,
    /// Heartbeats fall on the points of a grid this many ms apart
    /// (`--heartbeat-grid`), counted from the Unix epoch, so every agent on
    /// the host sends the ones due at the same instant. On this machine
    /// 1,000,000 connections need 53 agents and 52 server workers (20,000
    /// open files per process), and heartbeats spread to the millisecond
    /// reached each of those processes one at a time: a wakeup with cold
    /// caches per heartbeat at each end (72 us of machine CPU per round
    /// trip at 771,636 connections against 31 us at 100,000 in 6 processes
    /// each way, BENCHMARKS.md). On the grid a process reads a step's
    /// heartbeats in one wakeup, as a server holding its connections in a
    /// few processes would. Each connection still beats once per interval.
    grid_ms: u32,
    /// The grid's offset: `(grid_phase + ms) % grid_ms == 0` on a point.
    grid_phase: u32,
    /// Connections parked at the barrier, until `release`.
    barrier: Vec<u32>,
    released: bool,
    /// The engine's clock zero: deadlines and marks count from it.
    epoch: Instant,
    /// CLOCK_REALTIME ns at `epoch`: a mark as the clock broadcasts use.
    epoch_rt_ns: u64,
    /// The shared read buffer.
    rbuf: Vec<u8>,
    /// Frame being written.
    wbuf: Vec<u8>,
    /// Message being rendered.
    tbuf: Vec<u8>,
    /// Global indices of the users to start this turn (reused).
    starts: Vec<u64>,
    target: SocketAddr,
    host: String,
    /// With `--tls`: every connection's TLS session.
    tls: Option<tls::ClientTls>,
    /// With `--auth jwt`: signs each connection's token as it connects.
    jwt: Option<crate::jwt::Signer>,
    /// This agent's loopback source addresses (empty: the kernel picks).
    sources: Vec<IpAddr>,
    heartbeat_ms: u32,
    /// The heartbeat message per serializer ([`Vsn::index`]).
    hb_tpl: [Template; 2],
    connect_timeout_ms: u32,
    reply_timeout_ms: u32,
    /// Most connections held at once (the plan's capacity).
    capacity: usize,
    arrivals: Arrivals,
    /// Masks (xorshift state).
    rng: u64,
    /// Fixed per agent: handshake nonces derive from it and the user id.
    seed: u64,
    pub counters: Counters,
    pub hists: Hists,
    pub bcasts: BcastTable,
    /// Handshakes, `ok` joins and timeouts per 100 ms since the arrivals
    /// began, for exact rates.
    pub slots: Slots,
    /// The floor's sockets still to open, while it is measured.
    floor: Option<floor::Opening>,
    /// The floor sockets' heartbeat interval, ms: the users' own, or
    /// shorter when the floor is measured on a sample of them (see
    /// [`Engine::floor_connect`]).
    floor_hb_ms: u32,
    /// The floor's frames, by key (writer 0 << 32 | round).
    pub floor_bcasts: BcastTable,
    /// Presence diffs, count steps and presence joins' times.
    pub presence: PresenceLog,
    /// With `--deflate`: the one inflater of this engine's connections,
    /// reset per message, and its output.
    inflater: Option<Box<throng_protocol::deflate::Inflater>>,
    inflated: Vec<u8>,
}

/// Why a session ends.
enum Cause {
    /// The session ended as planned: say goodbye with a close frame.
    Done,
    /// An error of this kind.
    Error(ErrKind),
}

impl Engine {
    pub fn new(plan: Plan) -> io::Result<Engine> {
        let programs = plan
            .scenario
            .roles
            .iter()
            .map(|r| Program::compile(&plan.scenario, r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))?;
        let sources =
            if plan.bind_sources && plan.target.ip().is_loopback() && plan.target.is_ipv4() {
                // Eight addresses per agent: agent 0 binds 127.0.0.2..=127.0.0.9,
                // agent 1 127.0.0.10..=17, and so on (.0, .1 and .255 skipped).
                (0..8u32)
                    .map(|i| source_addr(plan.index * 8 + i))
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
        let sc = &plan.scenario;
        let secs_ms = |s: f64| (s * 1000.0).round().clamp(1.0, u32::MAX as f64 / 4.0) as u32;
        let users = {
            let a = Arrivals::new(sc, plan.index as u64, plan.agents as u64, plan.adaptive);
            a.phases.iter().map(|p| a.share(p.2)).sum::<u64>() as usize
        };
        let grid_ms = ((sc.heartbeat_grid * 1000.0).round() as u32).max(1);
        let epoch = Instant::now();
        let epoch_rt_ns = sys::realtime_ns();
        let mut conns = Slab::new();
        let capacity = usize::try_from(plan.capacity).unwrap_or(usize::MAX);
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
            hb_tpl: Vsn::ALL.map(hb),
            connect_timeout_ms: secs_ms(sc.connect_timeout),
            reply_timeout_ms: secs_ms(sc.reply_timeout),
            arrivals: Arrivals::new(sc, plan.index as u64, plan.agents as u64, plan.adaptive),
            floor: None,
            floor_hb_ms: 0,
            floor_bcasts: BcastTable::new(),
            scenario: plan.scenario,
            timers: BinaryHeap::new(),
            hb_timers: BinaryHeap::new(),
            grid_ms,
            grid_phase: ((epoch_rt_ns / 1_000_000) % grid_ms as u64) as u32,
            barrier: Vec::new(),
            released: false,
            epoch,
            epoch_rt_ns,
            rbuf: vec![0; READ_BUF],
            wbuf: Vec::with_capacity(4096),
            tbuf: Vec::with_capacity(4096),
            starts: Vec::new(),
            tls: plan.tls.as_ref().map(tls::ClientTls::new).transpose()?,
            jwt: plan.auth_jwt_secret.as_deref().map(crate::jwt::Signer::new),
            target: plan.target,
            host: plan.host,
            sources,
            capacity,
            rng: sys::realtime_ns() | 1,
            seed: sys::realtime_ns().rotate_left(17),
            counters: Counters::default(),
            hists: Hists::default(),
            bcasts: BcastTable::new(),
            slots: Slots::default(),
            presence: PresenceLog::default(),
            inflater: None,
            inflated: Vec::new(),
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

    /// The first heartbeat grid point at or after `at` ms.
    fn on_grid(&self, at: u32) -> u32 {
        let off = self.grid_phase.wrapping_add(at) % self.grid_ms;
        if off == 0 {
            at
        } else {
            at.wrapping_add(self.grid_ms - off)
        }
    }

    fn now_ms(&self) -> u32 {
        self.epoch.elapsed().as_millis() as u32
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Starts the arrivals.
    pub fn start(&mut self) {
        self.arrivals.start(Instant::now());
    }

    /// Adaptive arrival: users arrive at `per_sec` (all agents together)
    /// from now on.
    pub fn set_rate(&mut self, per_sec: f64) {
        self.arrivals.set_rate(Instant::now(), per_sec);
    }

    /// Starts no more users: the arrivals end with those already started.
    pub fn stop_arrivals(&mut self) {
        self.arrivals.done = true;
        self.counters.arrivals_done = true;
    }

    /// Whether the arrivals have started.
    pub fn started(&self) -> bool {
        self.arrivals.started_at.is_some()
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
        self.hb_timers.clear();
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
        // Timers (heartbeats, think times, timeouts) fire up to
        // TIMER_SLACK_MS late: at 19,000 connections heartbeats fall due
        // every 1.6 ms, and waking for each one split the reads of a
        // broadcast into many small batches.
        let now_ms = self.now_ms();
        if let Some(Reverse((at, _))) = self.timers.peek() {
            let ms = at.saturating_sub(now_ms).max(TIMER_SLACK_MS);
            wait = wait.min(Duration::from_millis(ms as u64));
        }
        // Heartbeats on time: the grid point is when every agent sends.
        if let Some(Reverse((at, _))) = self.hb_timers.peek() {
            let ms = at.saturating_sub(now_ms);
            wait = wait.min(Duration::from_millis(ms as u64));
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
        self.open_floor_sockets();
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

    /// Ends a session: counts it and closes its socket. A floor socket is
    /// no session: its failures are the floor's, not the run's errors.
    fn drop_conn(&mut self, token: usize, cause: Cause) {
        let Some(mut c) = self.conns.try_remove(token) else {
            return;
        };
        let mut session = self.tls.as_mut().and_then(|t| t.take(token));
        // A diff it was reading for the agent: the next receiver reads it.
        if let Some(Rx::Large(l)) = c.rx.as_deref() {
            if let Some(head) = l.parsing() {
                self.presence.heads.remove(&head);
            }
        }
        if c.state.is_floor() {
            self.counters.floor_failed += u64::from(matches!(cause, Cause::Error(_)));
            return;
        }
        self.counters.ended += 1;
        match cause {
            Cause::Done => {
                let open = !matches!(c.state, State::Connecting | State::Handshaking);
                if let (true, Some(sock)) = (open, c.sock.as_mut()) {
                    self.wbuf.clear();
                    let m = self.mask();
                    encode_close(&mut self.wbuf, 1000, "", Some(m));
                    match session.as_deref_mut() {
                        Some(s) => tls::send_last(s, sock, &self.wbuf),
                        None => {
                            let _ = sock.write(&self.wbuf);
                        }
                    }
                }
            }
            Cause::Error(kind) => self.count_error(kind),
        }
    }

    /// Counts an error under its kind and its finer kind; a timeout also in
    /// its 100 ms slot.
    fn count_error(&mut self, kind: ErrKind) {
        let e = &mut self.counters.errors;
        let d = &mut e.detail;
        match kind {
            ErrKind::Refused => e.refused += 1,
            ErrKind::TimeoutTcp | ErrKind::TimeoutUpgrade | ErrKind::TimeoutReply => {
                e.timeout += 1;
                match kind {
                    ErrKind::TimeoutTcp => d.timeout_tcp += 1,
                    ErrKind::TimeoutUpgrade => d.timeout_upgrade += 1,
                    _ => d.timeout_reply += 1,
                }
                Slots::bump(&mut self.slots.timeouts, self.arrivals.started_at);
            }
            ErrKind::CloseFrame(code) => {
                e.closed += 1;
                *d.close_codes.entry(code).or_default() += 1;
                Slots::bump(&mut self.slots.closes, self.arrivals.started_at);
            }
            ErrKind::Reset => {
                e.closed += 1;
                d.reset += 1;
                Slots::bump(&mut self.slots.closes, self.arrivals.started_at);
            }
            ErrKind::Eof => {
                e.closed += 1;
                d.eof += 1;
                Slots::bump(&mut self.slots.closes, self.arrivals.started_at);
            }
            ErrKind::Handshake(status) => {
                e.handshake += 1;
                if status != 0 {
                    *d.handshake_status.entry(status).or_default() += 1;
                }
            }
            ErrKind::Ports | ErrKind::Fds | ErrKind::Buffers | ErrKind::Capacity => {
                e.local_limit += 1;
                match kind {
                    ErrKind::Ports => d.ports += 1,
                    ErrKind::Fds => d.fds += 1,
                    ErrKind::Buffers => d.buffers += 1,
                    _ => d.capacity += 1,
                }
            }
            ErrKind::Other => e.other += 1,
        }
    }

    /// Recomputes the gauges (open, connecting, awaiting, parked) and times
    /// out tracked replies no session waits on. Cheap: one pass over the slab.
    pub fn refresh_gauges(&mut self) {
        let now_us = self.now_us();
        let limit = self.reply_timeout_ms as u64 * 1000;
        let (mut open, mut connecting, mut awaiting, mut barrier, mut hold) = (0, 0, 0, 0, 0);
        let (mut floor_open, mut floor_connecting) = (0, 0);
        let mut timeouts = 0;
        // The oldest connect, upgrade or tracked reply still in flight.
        let mut oldest_mark = now_us;
        for (_, c) in self.conns.iter_mut() {
            match c.state {
                State::Connecting | State::Handshaking => {
                    connecting += 1;
                    oldest_mark = oldest_mark.min(c.mark_us);
                }
                State::Barrier => barrier += 1,
                State::Hold => hold += 1,
                State::FloorConnecting => floor_connecting += 1,
                State::Floor => floor_open += 1,
                _ => {}
            }
            if c.sock.is_some()
                && !matches!(c.state, State::Connecting | State::Handshaking)
                && !c.state.is_floor()
            {
                open += 1;
            }
            if c.await_ref != 0 {
                if c.state != State::Awaiting && now_us.saturating_sub(c.mark_us) > limit {
                    c.await_ref = 0;
                    timeouts += 1;
                } else {
                    awaiting += 1;
                    oldest_mark = oldest_mark.min(c.mark_us);
                }
            }
        }
        for _ in 0..timeouts {
            self.count_error(ErrKind::TimeoutReply);
        }
        let k = &mut self.counters;
        k.open = open;
        k.connecting = connecting;
        k.awaiting = awaiting;
        k.at_barrier = barrier;
        k.holding = hold;
        k.floor_open = floor_open;
        k.floor_connecting = floor_connecting;
        k.oldest_in_flight_ms = now_us.saturating_sub(oldest_mark) / 1000;
        k.arrivals_done = self.arrivals.done;
        if let Some(s) = sys::proc_sample("self") {
            k.rss = s.rss;
            k.cpu_secs = s.cpu_secs;
        }
    }
}
