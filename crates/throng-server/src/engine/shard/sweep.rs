//! The once-a-second sweep that replaces a timer per connection: idle
//! WebSockets (read first, and asked of the kernel, before they are closed),
//! HTTP connections past the head deadline, closing connections past their
//! linger, and its protocol's own sweep (long-poll sessions' windows and
//! expiries); topic histories past their ttl are forgotten
//! (`MemoryHistory::sweep_if_due`: even when nothing is published after
//! them); the sizes of the shard's tables go to `/metrics`. Each
//! connection ends through [`Conns::close`](crate::engine::Conns::close)
//! with its reason.

use super::{cx, Shard};
use crate::engine::close::CloseReason;
use crate::engine::conn::Kind;
use crate::engine::Protocol;
use crate::engine::CLOSE_LINGER;

impl<P: Protocol> Shard<P> {
    /// Once a second: closes idle sockets and finishes lingering closes;
    /// the protocol's own sweep (its sessions' windows and expiries).
    pub(super) fn sweep(&mut self) {
        if let Some(history) = &self.node.history {
            history.sweep_if_due(std::time::Instant::now());
        }
        if self.id == 0 {
            // Once a second for the node: new connections wait while memory is low.
            self.node.admission.check_memory();
        }
        self.proto.sweep(cx!(self));
        self.settle();
        self.publish_sizes();
        let (idle, handshake) = self.timeouts();
        let (mut expired, http) = self.overdue(idle, handshake);
        self.late_heads(http, handshake, &mut expired);
        if expired.is_empty() {
            return;
        }
        let (idle_closed, unread, heard) = self.close_overdue(expired, idle);
        self.settle();
        let t = idle.unwrap_or(0);
        if unread + heard > 0 {
            tracing::info!(
                shard = self.id,
                "idle sweep: {idle_closed} socket(s) quiet for {t} s closed (1001); the loop is behind: {unread} had sent what it had not read yet, {heard} had been heard by the kernel within {t} s"
            );
        } else if idle_closed > 0 {
            tracing::info!(
                shard = self.id,
                "idle sweep: {idle_closed} socket(s) quiet for {t} s closed (1001)"
            );
        }
    }

    /// `--idle-timeout` and the handshake deadline, in seconds.
    fn timeouts(&self) -> (Option<u32>, u32) {
        let config = &self.node.config;
        let idle = config
            .idle_timeout
            .map(|d| d.as_secs().min(u32::MAX as u64) as u32);
        let handshake = config
            .limits
            .handshake_timeout
            .as_secs()
            .min(u32::MAX as u64) as u32;
        (idle, handshake)
    }

    /// The connections past a deadline as far as this loop has read (with
    /// why), and the HTTP requests quiet past the handshake deadline (to
    /// read before they count as late).
    fn overdue(
        &self,
        idle: Option<u32>,
        handshake: u32,
    ) -> (Vec<(usize, CloseReason<'static>)>, Vec<usize>) {
        let now = self.conns.now;
        let mut expired = Vec::new();
        let mut http = Vec::new();
        for (key, conn) in self.conns.slab.iter() {
            let quiet = now.saturating_sub(conn.last_active);
            let over = match conn.kind {
                // A protocol with an activity timeout of its own (Pusher's)
                // decides, else `--idle-timeout`.
                Kind::Ws { wire, .. } => self
                    .proto
                    .idle_after(wire)
                    .or(idle)
                    .is_some_and(|t| quiet >= t)
                    .then_some(CloseReason::Idle),
                Kind::Http => {
                    // A request its protocol holds (a long-poll waiting for
                    // its answer) is not slow.
                    if quiet >= handshake && !self.proto.answering(&self.me, key) {
                        http.push(key);
                    }
                    None
                }
                Kind::Closing { .. } => (quiet >= CLOSE_LINGER).then_some(CloseReason::Lingered),
            };
            if let Some(reason) = over {
                expired.push((key, reason));
            }
        }
        (expired, http)
    }

    /// The heads of `http` past their deadline, read first: only one still
    /// incomplete then joins `expired`.
    fn late_heads(
        &mut self,
        http: Vec<usize>,
        handshake: u32,
        expired: &mut Vec<(usize, CloseReason<'static>)>,
    ) {
        let now = self.conns.now;
        // A head past its deadline may be whole in the kernel, unread: a
        // turn reads the sockets of one batch of events, and a worker
        // starved of CPU falls behind. Read it first; only a head still
        // incomplete then is late. The deadline stays counted from accept,
        // so a client trickling bytes gains nothing. (2,000,000 connections
        // in 104 workers on 2 cores: the ramp's last seconds closed 1,108
        // connections that had sent their upgrade in time, 816 of them with
        // it unread, hence a reset.)
        let mut late_read = 0u64;
        for key in http {
            self.on_readable(key);
            let Some(c) = self.conns.slab.get(key).filter(|c| !c.dead) else {
                continue;
            };
            if c.kind != Kind::Http {
                late_read += 1;
                continue;
            }
            let quiet = now.saturating_sub(c.last_active);
            if self.conns.handshake_expired(key, quiet, handshake) {
                expired.push((key, CloseReason::HandshakeTimeout));
            } else {
                late_read += 1;
            }
        }
        if late_read > 0 {
            tracing::info!(
                shard = self.id,
                "handshake sweep: the loop is behind: {late_read} connection(s) had sent their request in time, unread until now"
            );
        }
    }

    /// Closes what is overdue: idle sockets only once neither this loop
    /// nor the kernel heard from them for their timeout (their protocol may
    /// ask them first). Returns the idle ones closed, those with unread
    /// input and those the kernel had heard.
    fn close_overdue(
        &mut self,
        expired: Vec<(usize, CloseReason<'static>)>,
        idle: Option<u32>,
    ) -> (u64, u64, u64) {
        let now = self.conns.now;
        // Quiet as far as this loop has read, but a client may have spoken:
        // a turn reads the sockets of at most one batch of events, and a
        // worker starved of CPU falls behind, with heartbeats unread in the
        // kernel. Read first; then ask the kernel when it last received
        // data on the socket (its clock, not this loop's): a socket is idle
        // only when neither this loop nor the kernel got a byte from it for
        // the timeout. (Phoenix's transport gets the first from its
        // mailbox: data that came before the timeout message is handled
        // first; `lib/phoenix/transports/websocket.ex`.)
        let mut quiet = Vec::new();
        let (mut unread, mut heard) = (0u64, 0u64);
        for (key, reason) in expired {
            if reason != CloseReason::Idle {
                self.conns.close(&self.node, key, reason);
                continue;
            }
            self.on_readable(key);
            let Some(c) = self.conns.slab.get_mut(key).filter(|c| !c.dead) else {
                continue;
            };
            let Kind::Ws { wire, .. } = c.kind else {
                continue;
            };
            let t = self.proto.idle_after(wire).or(idle).unwrap_or(0);
            if now.saturating_sub(c.last_active) < t {
                unread += 1;
                continue;
            }
            match crate::sys::tcp_last_data_recv_ms(&c.sock) {
                Some(ms) if ms / 1000 < t => {
                    c.last_active = now.saturating_sub(ms / 1000);
                    heard += 1;
                }
                _ => quiet.push((key, wire, now.saturating_sub(c.last_active))),
            }
        }
        // Quiet for its timeout: its protocol may ask it first (Pusher's
        // pusher:ping, and 4201 once it stays silent), else it is closed.
        let mut idle_closed = 0;
        for (key, wire, secs) in quiet {
            if !self.proto.idle(cx!(self), key, wire, secs) {
                self.conns.close(&self.node, key, CloseReason::Idle);
                idle_closed += 1;
            }
        }
        (idle_closed, unread, heard)
    }
}

impl<P: Protocol> Shard<P> {
    /// Publishes the sizes of the shard's tables to its counters (once a
    /// second): the engine's, then its protocol's.
    fn publish_sizes(&self) {
        let mut sizes = crate::metrics::TableSizes {
            users: self.conns.users.len(),
            user_sockets: self.conns.users.sockets_len(),
            history_reads_waiting: self.conns.recovery.waiting(),
            ..Default::default()
        };
        self.proto.sizes(&self.me, &mut sizes);
        self.conns.stats.sizes(&sizes);
    }
}
