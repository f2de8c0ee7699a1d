//! The client side of each WebSocket: the TCP connect, the upgrade, frames
//! read (into the engine's one shared buffer, keeping only a partial frame)
//! and written (keeping only what the socket would not take).

use std::io::{ErrorKind, Read};
use std::rc::Rc;

use mio::net::TcpStream;
use mio::{Interest, Token};
use throng_protocol::frame::{decode_frame_with, encode_frame, Opcode, Role};
use throng_protocol::handshake::{
    parse_client_response, write_client_request, write_client_request_with, ResponseError,
};

use super::conn::{Rx, State};
use super::large::MAX_MESSAGE;
use super::socket::{classify, open_socket, ErrKind};
use super::{Cause, Engine};
use crate::scenario::{Op, Program};
use crate::slots::Slots;
use crate::sys;

impl Engine {
    /// Opens the connection's socket (a non-blocking connect) under the
    /// connect timeout.
    pub(super) fn connect(&mut self, token: usize) {
        let now_us = self.now_us();
        let at = self.now_ms().wrapping_add(self.connect_timeout_ms);
        let src = if self.sources.is_empty() {
            None
        } else {
            let user = self.conns[token].user as usize;
            Some(self.sources[user % self.sources.len()])
        };
        let sock = match open_socket(self.target, src, false) {
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
        self.schedule(token, at);
    }

    /// Dispatches one readiness event of a connection.
    pub(super) fn on_event(&mut self, token: usize, readable: bool, writable: bool, error: bool) {
        let Some(c) = self.conns.get_mut(token) else {
            return;
        };
        if matches!(c.state, State::Connecting | State::FloorConnecting) {
            if writable || error || readable {
                if c.state == State::Connecting {
                    self.finish_connect(token);
                } else {
                    self.finish_floor_connect(token);
                }
            }
            return;
        }
        if writable && (c.tx.is_some() || self.tls.is_some()) {
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
        if let Some(tls) = &mut self.tls {
            if let Err(e) = tls.open(token) {
                self.drop_conn(token, Cause::Error(classify(&e)));
                return;
            }
        }
        let nonce = self.nonce(user);
        let programs = Rc::clone(&self.programs);
        let mut path = self.connect_path(&programs, token);
        if let Some(jwt) = &mut self.jwt {
            path = jwt.path(path, user);
        }
        self.wbuf.clear();
        let offer = self
            .scenario
            .deflate
            .then_some(throng_protocol::deflate::CLIENT_OFFER);
        write_client_request_with(&mut self.wbuf, &self.host, path, nonce, offer);
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

    /// A masking key for a client frame.
    pub(super) fn mask(&mut self) -> [u8; 4] {
        // xorshift64: masks need not be secret here, only present.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng as u32).to_le_bytes()
    }

    /// Reads until the socket is drained, handling whole frames as they
    /// come: a frame's start left at the end of a read is kept (and copied
    /// back to the buffer's start before the next), a message longer than
    /// the buffer goes to `large` as it arrives.
    fn on_readable(&mut self, token: usize) {
        let mut buf = std::mem::take(&mut self.rbuf);
        while let Some(c) = self.conns.get_mut(token) {
            let Some(sock) = c.sock.as_mut() else { break };
            let mut len = 0;
            let mut large = None;
            match c.rx.take().map(|b| *b) {
                Some(Rx::Partial(p)) => {
                    len = p.len();
                    buf[..len].copy_from_slice(&p);
                }
                Some(Rx::Large(l)) => large = Some(l),
                None => {}
            }
            if len == buf.len() {
                self.drop_conn(token, Cause::Error(ErrKind::Other));
                break;
            }
            let keep = |c: &mut super::conn::Conn, buf: &[u8], large| {
                c.rx = match large {
                    Some(l) => Some(Box::new(Rx::Large(l))),
                    None if !buf.is_empty() => Some(Box::new(Rx::Partial(buf.to_vec()))),
                    None => None,
                };
            };
            let read = match &mut self.tls {
                Some(tls) if tls.has(token) => tls.read(token, sock, &mut buf[len..]),
                _ => sock.read(&mut buf[len..]),
            };
            match read {
                Ok(0) => {
                    self.drop_conn(token, Cause::Error(ErrKind::Eof));
                    break;
                }
                Ok(n) => {
                    let end = len + n;
                    // The rest of a large message first (len is 0 then).
                    let mut from = 0;
                    if let Some(l) = large {
                        from = usize::try_from(l.left()).map_or(n, |left| left.min(n));
                        self.feed_large(token, l, &buf[..from]);
                        if !self.conns.contains(token) {
                            break;
                        }
                    }
                    let used = from + self.process(token, &mut buf[from..end]);
                    if used < end {
                        if let Some(c) = self.conns.get_mut(token) {
                            c.rx = Some(Box::new(Rx::Partial(buf[used..end].to_vec())));
                        }
                    }
                    // A short read drained the socket: epoll (edge-triggered)
                    // reports the next arrival, so skip the read that would
                    // only say EAGAIN (one syscall less per broadcast receipt).
                    // (Not over TLS: rustls may hold more plaintext.)
                    if end < buf.len() && self.tls.is_none() {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    keep(c, &buf[..len], large);
                    break;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {
                    keep(c, &buf[..len], large);
                }
                Err(e) => {
                    if let Some(c) = self.conns.get_mut(token) {
                        keep(c, &[], large);
                    }
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
                        self.drop_conn(token, Cause::Error(ErrKind::Handshake(0)));
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
                    let status = match e {
                        ResponseError::Status(code) => code,
                        _ => 0,
                    };
                    self.drop_conn(token, Cause::Error(ErrKind::Handshake(status)));
                    return data.len();
                }
            }
        }
        while pos < data.len() {
            let deflate = self.scenario.deflate;
            match decode_frame_with(&mut data[pos..], Role::Client, MAX_MESSAGE, deflate) {
                Ok(None) => {
                    // Longer than the buffer: read as it arrives.
                    if let Some(n) = self.begin_large(token, &data[pos..]) {
                        pos += n;
                        if !self.conns.contains(token) {
                            return data.len();
                        }
                    }
                    break;
                }
                Ok(Some(f)) => {
                    let range = pos + f.payload.start..pos + f.payload.end;
                    pos += f.consumed;
                    if f.compressed {
                        self.on_compressed(token, f.opcode, f.fin, &data[range]);
                    } else {
                        self.on_frame(token, f.opcode, f.fin, &data[range]);
                    }
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

    /// The upgrade succeeded: time the connect, start the heartbeats.
    ///
    /// phoenix.js sends its first heartbeat one interval after the socket
    /// opens (`resetHeartbeat` in socket.js), so users who arrive together
    /// heartbeat together, interval after interval: a ramp-up of 2 s
    /// becomes 2 s bursts every 30 s. Here the first one comes after a
    /// fraction of the interval fixed by the user's id (Fibonacci hashing),
    /// at most one interval, and every one after at the interval: the same
    /// rate per connection, spread evenly over time whatever the arrivals
    /// did, so heartbeats are a steady background load.
    fn on_open(&mut self, token: usize) {
        let now_us = self.now_us();
        let c = &mut self.conns[token];
        let us = now_us.saturating_sub(c.mark_us).max(1);
        c.state = State::Running;
        self.hists.connect.saturating_record(us);
        self.counters.connected += 1;
        Slots::bump(&mut self.slots.connects, self.arrivals.started_at);
        self.start_heartbeats(token);
    }

    /// Schedules the first heartbeat of a connection that just opened (a
    /// user's, or a floor socket's on its user's schedule), when the run
    /// has heartbeats: a fraction of the interval fixed by the user's id
    /// (Fibonacci hashing), at least 1 ms and at most one interval.
    pub(super) fn start_heartbeats(&mut self, token: usize) {
        let hb = self.heartbeat_interval(token);
        if hb == 0 {
            return;
        }
        let spread = (self.conns[token].user as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        let first = (1 + ((spread * hb as u64) >> 32) as u32).min(hb);
        self.schedule_heartbeat(token, self.now_ms().wrapping_add(first));
    }

    /// A compressed message (permessage-deflate, `--deflate`): inflated by
    /// the engine's one inflater, then handled as a plain one. The server
    /// never fragments what it sends, so a compressed message is one frame.
    fn on_compressed(&mut self, token: usize, opcode: Opcode, fin: bool, payload: &[u8]) {
        let mut out = std::mem::take(&mut self.inflated);
        let inflater = self.inflater.get_or_insert_with(Default::default);
        let ok = fin
            && inflater
                .inflate(payload, MAX_MESSAGE as usize, &mut out)
                .is_ok();
        if ok {
            self.on_frame(token, opcode, fin, &out);
        } else {
            self.drop_conn(token, Cause::Error(ErrKind::Other));
        }
        self.inflated = out;
    }

    /// One frame: pings answered, a close ends the session, messages go on.
    pub(super) fn on_frame(&mut self, token: usize, opcode: Opcode, fin: bool, payload: &[u8]) {
        if self.conns[token].state == State::Floor {
            if fin && matches!(opcode, Opcode::Text | Opcode::Binary) {
                self.on_floor_frame(token, opcode, payload);
            }
            return;
        }
        match opcode {
            Opcode::Ping => {
                self.wbuf.clear();
                let m = self.mask();
                encode_frame(&mut self.wbuf, Opcode::Pong, payload, Some(m));
                self.write_wbuf(token);
            }
            Opcode::Pong | Opcode::Continuation => {}
            Opcode::Close => {
                let code = match payload {
                    [a, b, ..] => u16::from_be_bytes([*a, *b]),
                    _ => 1005,
                };
                self.drop_conn(token, Cause::Error(ErrKind::CloseFrame(code)));
            }
            Opcode::Text | Opcode::Binary => {
                self.counters.msgs_in += 1;
                self.counters.bytes_in += payload.len() as u64;
                if fin {
                    self.on_message(token, opcode, payload);
                }
            }
        }
    }

    /// Frames `tbuf` as a masked frame of `opcode` (text or binary) and
    /// writes it, counted as a message out.
    pub(super) fn send_frame(&mut self, token: usize, opcode: Opcode) {
        self.counters.msgs_out += 1;
        if opcode == Opcode::Binary {
            self.counters.msgs_out_binary += 1;
        }
        self.write_frame(token, opcode);
    }

    /// Frames `tbuf` as a masked frame of `opcode` and writes it, uncounted.
    pub(super) fn write_frame(&mut self, token: usize, opcode: Opcode) {
        let m = self.mask();
        self.wbuf.clear();
        encode_frame(&mut self.wbuf, opcode, &self.tbuf, Some(m));
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
        if let Some(tls) = self.tls.as_mut().filter(|t| t.has(token)) {
            if let Err(e) = tls.write(token, sock, &self.wbuf) {
                self.drop_conn(token, Cause::Error(classify(&e)));
            }
            return;
        }
        let written = match sys::write_until_blocked(sock, &self.wbuf) {
            Ok(n) => n,
            Err(e) => return self.drop_conn(token, Cause::Error(classify(&e))),
        };
        if written < self.wbuf.len() {
            c.tx = Some(Box::new(self.wbuf[written..].to_vec()));
        }
    }

    /// Writes what the socket would not take before, now that it is writable.
    fn flush_tx(&mut self, token: usize) {
        let Some(c) = self.conns.get_mut(token) else {
            return;
        };
        if let Some(tls) = self.tls.as_mut().filter(|t| t.has(token)) {
            let Some(sock) = c.sock.as_mut() else { return };
            if let Err(e) = tls.flush(token, sock) {
                self.drop_conn(token, Cause::Error(classify(&e)));
            }
            return;
        }
        let (Some(sock), Some(tx)) = (c.sock.as_mut(), c.tx.as_mut()) else {
            return;
        };
        match sys::write_until_blocked(sock, tx) {
            Ok(written) => {
                tx.drain(..written);
                if tx.is_empty() {
                    c.tx = None;
                }
            }
            Err(e) => self.drop_conn(token, Cause::Error(classify(&e))),
        }
    }
}
