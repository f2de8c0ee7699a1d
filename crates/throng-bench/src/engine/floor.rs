//! The reading side of the floor measurement (see [`crate::floor`]): this
//! agent opens one plain TCP socket per user it will run, to the floor
//! writers instead of the server, from the same source addresses, and times
//! the frames the writers send exactly as it times a broadcast (the same
//! frame decoded, the same stamp found), so that what differs between the
//! floor and a broadcast is the server.
//!
//! The sockets are connections in the engine's slab in states
//! [`State::FloorConnecting`] and [`State::Floor`]: they are no sessions
//! (not started, ended or counted as errors), and closing them resets them
//! (no TIME_WAIT left behind before the real run). Open, each heartbeats
//! as its user will (same first beat, on the same grid), counted apart
//! (`floor_hb_sent`); the writers answer them. On a sample of the users
//! (the controller's `sockets` for this agent, its first users), each beats
//! as many times more often as the sample is smaller, so the heartbeats a
//! second under the floor are the run's.

use std::net::SocketAddr;

use mio::net::TcpStream;
use mio::{Interest, Token};
use throng_protocol::frame::Opcode;
use throng_protocol::{serializer, Payload, Vsn};

use super::conn::{Conn, State};
use super::socket::open_socket;
use super::{Cause, Engine};
use crate::scenario::find_stamp;
use crate::sys;

/// Floor connects in flight per agent at most: the sockets open at the
/// pace the writers accept them, without a burst overflowing their queues.
const WINDOW: u64 = 256;

/// The floor's sockets still to open.
pub(super) struct Opening {
    writers: Vec<SocketAddr>,
    /// This agent's next user (its `next`th: global index `k + next * K`).
    next: u64,
    /// This agent's users: as many floor sockets.
    total: u64,
}

impl Engine {
    /// Opens one floor socket per user of this agent (or for its first
    /// `sockets` users: a sample), user `g` to writer `g % writers.len()`,
    /// at most [`WINDOW`] connecting at once; their heartbeat interval is
    /// the users' times `heartbeat_scale` (the sample's share of the
    /// users, 1 without a sample).
    pub fn floor_connect(
        &mut self,
        writers: Vec<SocketAddr>,
        sockets: Option<u64>,
        heartbeat_scale: Option<f64>,
    ) {
        if writers.is_empty() {
            return;
        }
        let scale = heartbeat_scale
            .filter(|s| *s > 0.0 && *s <= 1.0)
            .unwrap_or(1.0);
        self.floor_hb_ms = match self.heartbeat_ms {
            0 => 0,
            hb => ((hb as f64 * scale).round() as u32).max(1),
        };
        let planned = self.planned_users();
        self.floor = Some(Opening {
            writers,
            next: 0,
            total: sockets.map_or(planned, |s| s.min(planned)),
        });
        self.open_floor_sockets();
    }

    /// A connection's heartbeat interval, ms (0: none): a floor socket's
    /// own, else its user's.
    pub(super) fn heartbeat_interval(&self, token: usize) -> u32 {
        match self.conns.get(token) {
            Some(c) if c.state.is_floor() => self.floor_hb_ms,
            _ => self.heartbeat_ms,
        }
    }

    /// Closes (resets) every floor socket.
    pub fn floor_close(&mut self) {
        self.floor = None;
        self.conns.retain(|_, c| !c.state.is_floor());
        let conns = &self.conns;
        self.hb_timers.retain(|t| conns.contains(t.0 .1 as usize));
        self.counters.floor_open = 0;
        self.counters.floor_connecting = 0;
    }

    /// Whether floor sockets are still being opened.
    pub fn floor_opening(&self) -> bool {
        self.floor.is_some()
    }

    /// Opens floor sockets up to the window (each turn).
    pub(super) fn open_floor_sockets(&mut self) {
        let Some(f) = self.floor.as_mut() else {
            return;
        };
        let v2 = self.scenario.serializer == Vsn::V2;
        let (k, agents) = (self.arrivals.k, self.arrivals.agents);
        while self.counters.floor_connecting < WINDOW && f.next < f.total {
            let g = k + f.next * agents;
            f.next += 1;
            let target = f.writers[(g % f.writers.len() as u64) as usize];
            let user = (g + 1) as u32;
            let src = (!self.sources.is_empty())
                .then(|| self.sources[user as usize % self.sources.len()]);
            let Ok(sock) = open_socket(target, src, true) else {
                self.counters.floor_failed += 1;
                continue;
            };
            let mut stream = TcpStream::from_std(sock.into());
            let entry = self.conns.vacant_entry();
            let token = entry.key();
            if self
                .poll
                .registry()
                .register(
                    &mut stream,
                    Token(token),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_err()
            {
                self.counters.floor_failed += 1;
                continue;
            }
            entry.insert(Conn::new(Some(stream), user, State::FloorConnecting, 0, v2));
            self.counters.floor_connecting += 1;
        }
        if f.next >= f.total {
            self.floor = None;
        }
    }

    /// A floor socket's connect finished (or failed).
    pub(super) fn finish_floor_connect(&mut self, token: usize) {
        let Some(sock) = self.conns[token].sock.as_ref() else {
            return;
        };
        let ok = matches!(sock.take_error(), Ok(None));
        match sock.peer_addr() {
            Err(e) if ok && e.kind() == std::io::ErrorKind::NotConnected => {}
            Ok(_) if ok => {
                self.conns[token].state = State::Floor;
                self.counters.floor_connecting = self.counters.floor_connecting.saturating_sub(1);
                self.counters.floor_open += 1;
                // The user's heartbeats, on the user's schedule: the floor
                // runs over the background the broadcasts will.
                self.start_heartbeats(token);
            }
            _ => {
                self.counters.floor_connecting = self.counters.floor_connecting.saturating_sub(1);
                self.drop_conn(token, Cause::Error(super::socket::ErrKind::Other));
            }
        }
    }

    /// A frame from a floor writer: decoded and timed as a broadcast is
    /// (`on_message`), but counted as the floor's.
    pub(super) fn on_floor_frame(&mut self, token: usize, opcode: Opcode, data: &[u8]) {
        let vsn = self.conns[token].vsn();
        let Ok(msg) = serializer::decode(vsn, opcode, data, serializer::Sender::Server) else {
            return;
        };
        let Payload::Json(p) = msg.payload else {
            return;
        };
        let Some((key, sent_ns)) = find_stamp(p.as_bytes()) else {
            return;
        };
        let now = sys::realtime_ns();
        let us = (now.saturating_sub(sent_ns) / 1000).max(1);
        self.hists.floor.saturating_record(us);
        self.counters.floor_recv += 1;
        self.counters.floor_last_ns = self.counters.floor_last_ns.max(now);
        let b = self.floor_bcasts.entry(key).or_default();
        b.sent_ns = sent_ns;
        b.recv += 1;
        b.last_ns = b.last_ns.max(now);
    }
}
