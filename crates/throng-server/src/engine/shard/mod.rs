//! [`Shard`]: one event loop (a thread with its own epoll instance and
//! `SO_REUSEPORT` listener) and its turn: accept, read, write, the inbox of
//! broadcasts and answers, presence flushes, the once-a-second sweep, and
//! after every event what it left for the protocol (closes, sockets that
//! ended, sessions' work: [`Shard::settle`]). Generic over its protocol
//! `P` (`lib.rs` builds it with every protocol of `crate::protocol`). The
//! struct, the loop, accepting and the inbox are here; its other steps are
//! one concept per file beside this one, each an `impl Shard` block, so
//! that all of `Shard` is in this folder:
//! - `input.rs`: reading a connection and routing what it sent (HTTP
//!   requests, WebSocket frames) within its bounded turn;
//! - `inflate.rs`: a compressed message inflated, then handled as a plain
//!   one;
//! - `sweep.rs`: the once-a-second sweep;
//! - `drain.rs`: the graceful drain.
//!
//! What the shard's connections do once a step has found them work is
//! [`Conns`]'s (`conns/`), which the shard owns; what their messages mean
//! is the protocol's, called with [`Cx`].

mod drain;
mod inflate;
mod input;
mod sweep;

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use throng_pubsub::Registry;

use super::close::CloseReason;
use super::conn::Conn;
use super::conns::Settings;
use super::outlet::Outlet;
use super::{users, Conns, Protocol, ACCEPTS_PER_TURN, LISTENER, READ_BUF, WAKER};
use crate::history::recovery::Recovery;
use crate::metrics::ShardStats;
use crate::node::{Node, ShardMsg};

/// The protocol's view of shard `$s` for one call: its fields borrowed
/// apart, so that the protocol (another field) can be called with it.
macro_rules! cx {
    ($s:expr) => {
        &mut crate::engine::Cx {
            node: &$s.node,
            conns: &mut $s.conns,
            me: &mut $s.me,
        }
    };
}
pub(super) use cx;

pub(crate) struct Shard<P: Protocol> {
    pub(super) id: usize,
    pub(super) poll: Poll,
    /// `None` once draining: new connections go to the other processes.
    pub(super) listener: Option<TcpListener>,
    pub(super) inbox: Receiver<ShardMsg>,
    pub(super) node: Arc<Node>,
    pub(super) conns: Conns,
    /// The wire protocols served, and their state on this shard.
    pub(super) proto: Arc<P>,
    pub(super) me: P::Shard,
    /// The one read buffer of the shard.
    pub(super) rbuf: Vec<u8>,
    /// Connections that used their turn's budget with more to read
    /// (`input.rs`): read again next turn, as epoll (edge-triggered) will
    /// not report them again. A key may be stale (closed and reused since):
    /// reading it again costs one `WouldBlock`.
    pub(super) ready: Vec<usize>,
    /// Messages handled in the current connection's turn.
    pub(super) turn: u32,
    /// The current connection's turn ended with more to do.
    pub(super) yielded: bool,
    pub(super) started: Instant,
    pub(super) last_sweep: u32,
    pub(super) accept_retry: bool,
    pub(super) last_accept_warning: Option<Instant>,
    /// A descriptor kept open to give back at the open-files limit, so that
    /// a connection waiting to be accepted can be answered 503.
    pub(super) reserve: Option<std::fs::File>,
    /// Set once the node drains (`drain.rs`).
    pub(super) draining: Option<drain::Draining>,
    /// When this shard next flushes its share of presence diffs.
    pub(super) presence_due: Instant,
    /// The diffs of a flush (kept for its capacity).
    pub(super) presence_out: Vec<Arc<throng_pubsub::Broadcast>>,
}

impl<P: Protocol> Shard<P> {
    pub(crate) fn new(
        id: usize,
        poll: Poll,
        mut listener: TcpListener,
        inbox: Receiver<ShardMsg>,
        node: Arc<Node>,
        proto: Arc<P>,
    ) -> io::Result<Shard<P>> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let presence_due = Instant::now() + node.config.presence_interval;
        let settings = Settings::of(&node.config);
        let conns = Conns {
            id,
            recovery: Recovery::new(settings.max_outbound),
            settings,
            slab: Slab::new(),
            registry: Registry::default(),
            poll: poll.registry().try_clone()?,
            stats: node.stats[id].clone(),
            users: users::Users::default(),
            reply: Vec::with_capacity(4096),
            doomed: Vec::new(),
            closed: Default::default(),
            sessions: Vec::new(),
            resume: Vec::new(),
            now: 0,
            now_ms: 0,
            clock_ms: 0,
            msgs_out: 0,
            bytes_out: 0,
            peer_ips: Vec::new(),
            tls: node
                .tls
                .clone()
                .map(|t| crate::tls::session::Tls::new(t, READ_BUF, node.stats[id].clone())),
            deflate: Default::default(),
        };
        let me = proto.shard(&node, id);
        Ok(Shard {
            id,
            poll,
            listener: Some(listener),
            inbox,
            node,
            conns,
            proto,
            me,
            rbuf: vec![0; READ_BUF],
            ready: Vec::new(),
            turn: 0,
            yielded: false,
            started: Instant::now(),
            last_sweep: 0,
            accept_retry: false,
            last_accept_warning: None,
            reserve: std::fs::File::open("/dev/null").ok(),
            draining: None,
            presence_due,
            presence_out: Vec::new(),
        })
    }

    /// Runs the loop until a drain ends it.
    pub(crate) fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut ready = Vec::new();
        loop {
            let timeout = if !self.ready.is_empty() || self.proto.behind(&self.me) {
                Duration::ZERO
            } else if self.accept_retry {
                Duration::from_millis(20)
            } else if self.draining.is_some() {
                drain::STEP
            } else if self.node.presence.is_active() {
                // Presence diffs are flushed on this loop: no timer per
                // topic or connection, a poll timeout per shard.
                self.presence_due
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(1000))
            } else {
                Duration::from_millis(1000)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(shard = self.id, "poll failed: {e}");
                }
                continue;
            }
            self.tick();
            // Those that yielded last turn get theirs after this turn's
            // events, once each; those yielding now wait for the next.
            std::mem::swap(&mut ready, &mut self.ready);
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => self.drain_inbox(),
                    Token(key) => {
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.on_readable(key);
                        }
                        if ev.is_writable() {
                            self.conns.on_writable(key);
                        }
                    }
                }
                self.settle();
                self.tick();
            }
            ready.sort_unstable();
            ready.dedup();
            for key in ready.drain(..) {
                self.on_ready(key);
                self.settle();
                self.tick();
            }
            if self.accept_retry {
                self.accept_retry = false;
                self.accept();
            }
            // A broadcast may arrive without a wake being seen yet.
            self.drain_inbox();
            self.settle();
            self.turn_end();
            self.tick();
            if self.conns.now != self.last_sweep {
                self.last_sweep = self.conns.now;
                self.sweep();
            } else if self.proto.behind(&self.me) {
                // Work the protocol's last sweep left (expired sessions).
                self.proto.sweep(cx!(self));
                self.settle();
            }
            let done = self.drain_turn();
            self.settle();
            if self.node.presence.is_active() {
                self.flush_presence();
            }
            self.conns.flush_counters();
            if done {
                return;
            }
        }
    }

    /// Sets the shard's clocks. After the wait and after each event, not
    /// once a turn: on a worker starved of CPU one event (a broadcast's
    /// delivery) can take tens of seconds, and a socket read after it must
    /// be stamped with the time of the read. Stamped with the turn's start instead, a
    /// heartbeat read 31 s into a turn looked 31 s older than it was, and
    /// the next sweep closed its sender as idle while its next heartbeat
    /// was 0.6 s away (1,000,000 connections in 52 workers on 2 cores: 38
    /// to 491 such closes a run). A vDSO clock read, ~20 ns an event.
    fn tick(&mut self) {
        let elapsed = self.started.elapsed();
        self.conns.now = elapsed.as_secs() as u32;
        self.conns.now_ms = elapsed.as_millis() as u32;
        self.conns.clock_ms = elapsed.as_millis() as u64;
    }

    pub(super) fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        for _ in 0..ACCEPTS_PER_TURN {
            match listener.accept() {
                Ok((mut sock, addr)) => {
                    let key = self.conns.slab.vacant_key();
                    if !self.conns.admit(&self.node, &mut sock, addr.ip(), key) {
                        continue;
                    }
                    // TCP_NODELAY comes from the listener (`crate::bind`).
                    let entry = self.conns.slab.vacant_entry();
                    if let Err(e) =
                        self.poll
                            .registry()
                            .register(&mut sock, Token(key), Interest::READABLE)
                    {
                        tracing::warn!("register failed: {e}");
                        self.conns.release(&self.node, key);
                        continue;
                    }
                    if let Some(tls) = &mut self.conns.tls {
                        if !tls.open(key) {
                            self.conns.release(&self.node, key);
                            continue;
                        }
                    }
                    entry.insert(Conn::new(sock, self.conns.now));
                    ShardStats::add(&self.conns.stats.accepted, 1);
                    ShardStats::add(&self.conns.stats.connections, 1);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if at_files_limit(&e) && self.reserve.is_some() => {
                    // At the open-files limit the connection would wait in
                    // the kernel's queue, unanswered, until its client gives
                    // up: the descriptor kept in reserve takes it, it gets
                    // its 503, and the reserve is taken again.
                    self.reserve = None;
                    if let Ok((mut sock, _)) = listener.accept() {
                        self.conns
                            .refuse(&self.node, &mut sock, crate::limits::Refusal::Files);
                    }
                    self.reserve = std::fs::File::open("/dev/null").ok();
                    self.warn_accept(&e);
                    self.accept_retry = true;
                    return;
                }
                Err(e) => {
                    self.warn_accept(&e);
                    self.accept_retry = true;
                    return;
                }
            }
        }
        self.accept_retry = true;
    }

    /// Counts a failed accept, and says so (once every 10 s).
    fn warn_accept(&mut self, e: &io::Error) {
        ShardStats::add(&self.conns.stats.accept_errors, 1);
        let quiet = self
            .last_accept_warning
            .is_some_and(|t| t.elapsed() < Duration::from_secs(10));
        if !quiet {
            self.last_accept_warning = Some(Instant::now());
            tracing::warn!(
                shard = self.id,
                open = self.conns.slab.len(),
                fd_limit = self.node.fd_limit,
                "accept failed: {e}: new connections get 503 until some close (raise `ulimit -n`, or run more workers)"
            );
        }
    }

    /// When due, flushes this shard's share of the node's presence topics
    /// and delivers their diffs: to this shard's subscribers, and to the
    /// other shards with subscribers (never to other nodes: each makes its
    /// own diffs from its copy).
    fn flush_presence(&mut self) {
        let now = Instant::now();
        if now < self.presence_due {
            return;
        }
        self.presence_due = now + self.node.config.presence_interval;
        let mut out = std::mem::take(&mut self.presence_out);
        self.node
            .presence
            .flush_shard(self.id, self.node.config.shards, now, &mut out);
        for b in out.drain(..) {
            self.deliver(&b);
            self.node.fan_out(Some(self.id), b);
        }
        self.presence_out = out;
        self.settle();
    }

    /// Delivers `b` to this shard's subscribers; when its recipients are
    /// its protocol's to choose (`b.member`), to those it accepts.
    fn deliver(&mut self, b: &Arc<throng_pubsub::Broadcast>) {
        if b.member.is_none() {
            return self.conns.deliver(b);
        }
        let proto = &self.proto;
        self.conns
            .deliver_where(b, |conn, topic| proto.delivers(conn, topic, b));
    }

    fn drain_inbox(&mut self) {
        while let Ok(msg) = self.inbox.try_recv() {
            self.node.peers[self.id].received(&msg);
            match msg {
                ShardMsg::Broadcast(b) => self.deliver(&b),
                ShardMsg::Disconnect(user) => self.disconnect_user(&user),
                ShardMsg::Report(c) => {
                    let r = &self.conns.registry;
                    let topics = r.topics.iter().map(|(_, t)| (&*t.name, t.subs.len()));
                    c.add(self.conns.users.len(), topics);
                }
                ShardMsg::HistoryLost(topic) => self.conns.history_lost(&topic),
                // An info, a hook's or a history read's answer, a
                // forwarded request: its protocol's.
                msg => self.proto.inbox(cx!(self), msg),
            }
            self.settle();
        }
    }

    /// What the last event left: the connections it doomed closed, the
    /// sockets that ended handed to their protocol (then forgotten by the
    /// engine: their user, their recovery), the sessions' work handed to
    /// theirs; until none is left (an ending may doom others). Runs after
    /// every event and before the loop accepts again, so no connection
    /// takes the key of one whose end is not done.
    pub(super) fn settle(&mut self) {
        while self.conns.unsettled() {
            self.conns.close_doomed(&self.node);
            // In the order they closed: a socket's end before its
            // connection's removal, whose protocol forgets it then.
            // One at a time, the rest left in the engine's list: ending a
            // socket unsubscribes it, and a subscriber that takes its place
            // in a topic may be one of the others still waiting there,
            // whose position the engine fixes in that list
            // (`Conns::unsubscribe`).
            while let Some(closed) = self.conns.closed.pop_front() {
                let key = closed.key;
                let socket = closed.socket.is_some();
                self.proto.closed(cx!(self), closed);
                if socket {
                    self.conns.users.remove(key as u32);
                }
                self.conns.recovery.forget(key);
            }
            let work = std::mem::take(&mut self.conns.sessions);
            for w in work {
                self.proto.session(cx!(self), w);
            }
        }
    }

    /// Closes every socket of `user` on this shard (Phoenix's `disconnect`
    /// on the socket id `users_socket:<user>`), so clients reconnect and
    /// authenticate again; a session ends through its protocol.
    fn disconnect_user(&mut self, user: &str) {
        let reason = CloseReason::UserDisconnect;
        for key in self.conns.users.sockets(user) {
            match Outlet::of(key as usize) {
                Outlet::Conn(key) => {
                    if self.conns.slab.get(key).is_none_or(|c| c.dead) {
                        continue;
                    }
                    self.conns.reply.clear();
                    self.conns.close(&self.node, key, reason);
                }
                session => self.conns.doom(session, reason),
            }
        }
        self.settle();
    }

    /// End of a loop turn: the protocol's answers gathered during it go
    /// out, and connections whose answer went out read what they sent
    /// meanwhile.
    fn turn_end(&mut self) {
        self.proto.turn_end(cx!(self));
        while let Some(key) = self.conns.resume.pop() {
            if self.conns.slab.get(key).is_some_and(|c| !c.dead) {
                self.turn = 0;
                self.yielded = false;
                self.input(key, &mut []);
                self.conns.flush_reply(key);
                self.requeue(key);
            }
        }
        self.settle();
    }
}

/// Whether an accept failed for the open-files limit (the process's or the
/// system's).
fn at_files_limit(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}
