//! A shard's input path: reading a readable socket, keeping incomplete
//! bytes, and routing whole HTTP requests and WebSocket frames to what
//! handles them (the engine's pages, the echo, a protocol's upgrades,
//! requests and messages). Apart from the loop in `mod.rs` because it is
//! one concept: bytes in -> actions.

use std::io::{self, Read};

use throng_protocol::frame::{self, close_code, decode_frame_with, Opcode, Role};

use super::{cx, Shard};
use crate::auth::rate::Verdict;
use crate::engine::close::CloseReason;
use crate::engine::conn::{Kind, Mark};
use crate::engine::http::{self, Action, Page};
use crate::engine::outlet::Outlet;
use crate::engine::ws::{self, FrameAction};
use crate::engine::Protocol;
use crate::metrics::ShardStats;

/// Reads of [`crate::engine::READ_BUF`] one connection gets per loop turn, as
/// libuv's `uv__read` stops after 32 ("prevent loop starvation when the
/// data comes in as fast as (or faster than) we can read it",
/// `src/unix/stream.c`); ours are 64 KiB each.
const READS_PER_TURN: usize = 4;
/// WebSocket frames or HTTP requests one connection gets handled per loop
/// turn. What is read past it waits in the connection's input for the next
/// turn: a client that sends faster than the shard answers shares the shard
/// with every other connection instead of holding it (empty continuation
/// frames, heartbeats read back, pipelined requests).
pub(super) const MESSAGES_PER_TURN: u32 = 64;
/// A fragment smaller than this is charged to the control budget: a
/// message sent a few bytes at a time costs the shard a frame each.
const TINY_FRAGMENT: usize = 1024;

impl<P: Protocol> Shard<P> {
    /// Reads a readable socket, for at most one turn's budget; a connection
    /// with more to read goes to the ready list (epoll is edge-triggered and
    /// will not report it again) and is read again next turn.
    pub(super) fn on_readable(&mut self, key: usize) {
        self.turn = 0;
        self.yielded = false;
        let mut rbuf = std::mem::take(&mut self.rbuf);
        let mut reads = 0;
        while let Some(conn) = self.conns.slab.get_mut(key).filter(|c| !c.dead) {
            if reads == READS_PER_TURN {
                self.yielded = true;
                break;
            }
            reads += 1;
            let read = match &mut self.conns.tls {
                None => conn.sock.read(&mut rbuf).map(|n| (n, n == rbuf.len())),
                Some(tls) => {
                    let got = tls.read(key, &mut conn.sock, &mut rbuf);
                    self.conns.watch_tls_backlog(key);
                    got.map(|g| (g.plain, g.more))
                }
            };
            let conn = &mut self.conns.slab[key];
            let (n, more) = match read {
                Ok((0, _)) => {
                    self.conns.doom(Outlet::Conn(key), CloseReason::Gone);
                    break;
                }
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.conns.doom(Outlet::Conn(key), CloseReason::Gone);
                    break;
                }
            };
            // An HTTP connection's clock runs from accept or its last
            // request (the head deadline); a closing one's from the close.
            if let Kind::Ws { mark, .. } = &mut conn.kind {
                conn.last_active = self.conns.now;
                if *mark == Mark::Pinged {
                    *mark = Mark::None;
                }
            }
            ShardStats::add(&self.conns.stats.bytes_in, n as u64);
            self.input(key, &mut rbuf[..n]);
            self.conns.flush_reply(key);
            // A short read drained the socket; edge-triggered epoll reports new data.
            if !more || self.yielded {
                break;
            }
        }
        self.rbuf = rbuf;
        self.requeue(key);
    }

    /// A connection from the ready list: what it read and was not handled
    /// last turn first, then its socket.
    pub(super) fn on_ready(&mut self, key: usize) {
        let pending = self
            .conns
            .slab
            .get(key)
            .is_some_and(|c| !c.dead && c.extra.as_ref().is_some_and(|e| !e.input.is_empty()));
        if pending {
            self.turn = 0;
            self.yielded = false;
            self.input(key, &mut []);
            self.conns.flush_reply(key);
            if self.yielded {
                self.requeue(key);
                return;
            }
        }
        self.on_readable(key);
    }

    /// Puts `key` on the ready list if its turn ended with more to do.
    pub(super) fn requeue(&mut self, key: usize) {
        if std::mem::take(&mut self.yielded) && self.conns.slab.get(key).is_some_and(|c| !c.dead) {
            ShardStats::add(&self.conns.stats.read_yields, 1);
            self.ready.push(key);
        }
    }

    /// Processes newly read bytes, with any incomplete bytes kept from before.
    pub(super) fn input(&mut self, key: usize, fresh: &mut [u8]) {
        let conn = &mut self.conns.slab[key];
        let pending = conn
            .extra
            .as_mut()
            .map(|e| std::mem::take(&mut e.input))
            .filter(|p| !p.is_empty());
        match pending {
            Some(mut data) => {
                data.extend_from_slice(fresh);
                let used = self.process(key, &mut data);
                data.drain(..used);
                self.keep_input(key, data);
            }
            None => {
                let used = self.process(key, fresh);
                if used < fresh.len() {
                    self.keep_input(key, fresh[used..].to_vec());
                }
            }
        }
    }

    fn keep_input(&mut self, key: usize, data: Vec<u8>) {
        if let Some(conn) = self.conns.slab.get_mut(key) {
            if data.is_empty() {
                conn.trim();
            } else if !matches!(conn.kind, Kind::Closing { .. }) {
                conn.extra().input = data;
            }
        }
    }

    /// Consumes whole requests or frames from `data`; returns bytes used.
    fn process(&mut self, key: usize, data: &mut [u8]) -> usize {
        let mut pos = 0;
        while pos < data.len() {
            let conn = &self.conns.slab[key];
            if conn.dead {
                return data.len();
            }
            if self.turn >= MESSAGES_PER_TURN && !matches!(conn.kind, Kind::Closing { .. }) {
                self.yielded = true;
                return pos;
            }
            match conn.kind {
                // Responses go out in request order: a request the protocol
                // holds (a long-poll waiting for its answer, an upgrade
                // waiting for the app backend) is answered before the next
                // one is read; past what it allows meanwhile (one more
                // request at most; a client sends nothing before a 101) the
                // connection is cut.
                Kind::Http if self.proto.holds(&self.me, key).is_some() => {
                    let most = self.proto.holds(&self.me, key).unwrap_or(usize::MAX);
                    if data.len() - pos > most {
                        self.conns.doom(Outlet::Conn(key), CloseReason::Pipelined);
                        return data.len();
                    }
                    return pos;
                }
                Kind::Http => match http::handle(&data[pos..], &self.node.config, |head, config| {
                    self.proto.route(head, config)
                }) {
                    (_, Action::Incomplete) => return pos,
                    (used, action) => {
                        self.turn += 1;
                        ShardStats::add(&self.conns.stats.http_requests, 1);
                        pos += used;
                        self.http(key, action);
                    }
                },
                Kind::Ws {
                    wire,
                    deflate,
                    mark,
                } => {
                    let echo = mark == Mark::Echo;
                    let max = self.conns.settings.max_message;
                    // A message in progress is bounded as a whole: kept
                    // fragments plus the frame arriving (refused at its
                    // header), so a socket never pins more than one message.
                    let frag = conn
                        .extra
                        .as_ref()
                        .and_then(|e| e.frag.as_ref())
                        .map_or(0, |(_, f)| f.len());
                    let frame_max = max.saturating_sub(frag).max(125);
                    let rsv1 = deflate != 0;
                    match decode_frame_with(&mut data[pos..], Role::Server, frame_max as u64, rsv1)
                    {
                        Ok(Some(f)) => {
                            let payload = pos + f.payload.start..pos + f.payload.end;
                            pos += f.consumed;
                            self.turn += 1;
                            let tiny = f.payload.len() < TINY_FRAGMENT
                                && (!f.fin || f.opcode == Opcode::Continuation);
                            let control = matches!(f.opcode, Opcode::Ping | Opcode::Pong);
                            if (tiny || control) && !self.control_frame(key) {
                                return data.len();
                            }
                            let conn = &mut self.conns.slab[key];
                            let action = ws::on_frame(
                                &mut conn.extra,
                                f.fin,
                                f.opcode,
                                f.compressed,
                                &data[payload],
                                max,
                            );
                            self.ws(key, wire, echo, action);
                        }
                        Ok(None) => {
                            if data.len() - pos > frame_max + frame::MAX_HEADER_LEN {
                                let reason = CloseReason::Protocol {
                                    code: close_code::TOO_BIG,
                                    text: "message too big",
                                };
                                self.conns.close(&self.node, key, reason);
                                return data.len();
                            }
                            return pos;
                        }
                        Err(e) => {
                            let text = e.to_string();
                            let reason = CloseReason::Protocol {
                                code: e.close_code(),
                                text: &text,
                            };
                            self.conns.close(&self.node, key, reason);
                            return data.len();
                        }
                    }
                }
                Kind::Closing { .. } => {
                    self.conns.closing_input(key, &mut data[pos..]);
                    return data.len();
                }
            }
        }
        pos
    }

    /// Charges a ping, a pong or a tiny fragment to the connection's
    /// control budget; past its strikes, fails the connection with 1008 and
    /// returns false. Over the budget but within the strikes, the frame is
    /// still handled (a frame has no reply to refuse it with).
    fn control_frame(&mut self, key: usize) -> bool {
        let limit = &self.node.control_limit;
        if limit.is_unlimited() {
            return true;
        }
        let conn = &mut self.conns.slab[key];
        match limit.check(&mut conn.control_tat, self.conns.now_ms) {
            Verdict::Allow => true,
            Verdict::Limited => {
                ShardStats::add(&self.conns.stats.control_limited, 1);
                true
            }
            Verdict::Abuse => {
                ShardStats::add(&self.conns.stats.control_limited, 1);
                let reason = CloseReason::ControlFrames;
                self.conns.close(&self.node, key, reason);
                false
            }
        }
    }

    /// Does what an HTTP request asked for.
    fn http(&mut self, key: usize, action: Action<P::Open, P::Request>) {
        let node = &*self.node;
        let conns = &mut self.conns;
        match action {
            Action::Incomplete => {}
            Action::Error(e) => {
                ShardStats::add(&conns.stats.http_errors, 1);
                if e.origin_refused {
                    ShardStats::add(&conns.stats.origin_refusals, 1);
                    node.refusals.note(
                        crate::refusals::Reason::Origin,
                        "connect refused (403)",
                        &e.body,
                    );
                } else if e.status == 403 {
                    node.refusals.note(
                        crate::refusals::Reason::Vsn,
                        "connect refused (403)",
                        &e.body,
                    );
                }
                let resp =
                    crate::page::error_response(e.status, e.reason, e.extra_headers, &e.body);
                conns.send(key, &resp);
                conns.close(node, key, CloseReason::Finished);
            }
            Action::Echo(response, deflate) => {
                conns.send(key, &response);
                let conn = &mut conns.slab[key];
                conn.last_active = conns.now;
                conn.kind = Kind::Ws {
                    wire: throng_protocol::Wire::Phoenix(throng_protocol::Vsn::V2),
                    deflate,
                    mark: Mark::Echo,
                };
                if deflate != 0 {
                    ShardStats::add(&conns.stats.deflate_sockets, 1);
                }
                ShardStats::add(&conns.stats.websockets, 1);
            }
            Action::Upgrade(u) => self.proto.upgraded(cx!(self), key, *u),
            Action::Request(r) => self.proto.request(cx!(self), key, *r),
            Action::Page {
                page,
                head_only,
                keep_alive,
            } => {
                let pages = &node.pages;
                match page {
                    Page::Index => conns.send(key, pages.index.bytes(head_only)),
                    Page::AppJs => conns.send(key, pages.app_js.bytes(head_only)),
                    Page::AppCss => conns.send(key, pages.app_css.bytes(head_only)),
                    Page::NotFound => conns.send(key, pages.not_found.bytes(head_only)),
                    Page::Healthz => conns.send(key, pages.healthz.bytes(head_only)),
                    Page::Readyz => {
                        conns.send(key, &crate::health::readyz_response(node, head_only));
                    }
                    Page::Metrics => {
                        let body = crate::scrape::render(node);
                        let r = crate::page::Response::new(
                            "200 OK",
                            "text/plain; version=0.0.4",
                            "",
                            body.as_bytes(),
                        );
                        conns.send(key, r.bytes(head_only));
                    }
                }
                if keep_alive {
                    // The next request's head deadline starts now.
                    if let Some(conn) = conns.slab.get_mut(key) {
                        conn.last_active = conns.now;
                    }
                } else {
                    conns.close(node, key, CloseReason::Finished);
                }
            }
        }
    }

    /// Does what a WebSocket frame asked for.
    pub(super) fn ws(
        &mut self,
        key: usize,
        wire: throng_protocol::Wire,
        echo: bool,
        action: FrameAction<'_>,
    ) {
        match action {
            FrameAction::None => {}
            FrameAction::Ping(payload) => {
                frame::encode_frame(&mut self.conns.reply, Opcode::Pong, payload, None);
                self.conns.msgs_out += 1;
            }
            FrameAction::Close(code) => {
                let reason = CloseReason::PeerClosed(code);
                self.conns.close(&self.node, key, reason);
            }
            FrameAction::Fail(code, text) => {
                let reason = CloseReason::Protocol { code, text };
                self.conns.close(&self.node, key, reason);
            }
            FrameAction::Compressed(opcode, data) => {
                if let Some(conn) = self.conns.slab.get_mut(key) {
                    conn.trim();
                }
                self.inflate_message(key, wire, echo, opcode, &data);
            }
            FrameAction::Message(opcode, data) => {
                if let Some(conn) = self.conns.slab.get_mut(key) {
                    conn.trim();
                }
                ShardStats::add(&self.conns.stats.messages_in, 1);
                if echo {
                    #[cfg(feature = "test-hooks")]
                    crate::panic::test_panic(&self.node, &data);
                    let window = self.conns.deflate_of(key);
                    self.conns.frame_out_compressed(window, opcode, &data, true);
                    return;
                }
                self.proto.message(cx!(self), key, wire, opcode, &data);
            }
        }
    }
}
