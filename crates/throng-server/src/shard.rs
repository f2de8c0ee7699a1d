//! One event-loop shard: a thread with its own epoll instance, its own
//! `SO_REUSEPORT` listener, the connections it accepted, and their
//! subscriptions. Nothing here is shared with other shards except through
//! [`Node`] (read-only config, atomics, and a channel per shard for
//! broadcasts).
//!
//! The lean connection: an idle connection is a [`Conn`] in a slab (socket,
//! serializer, last-activity second, joins) and nothing else. Reads go into
//! the shard's one read buffer; a connection keeps bytes only while a frame
//! or request is incomplete, and an output queue only while the kernel
//! refuses bytes; both live in one [`Extra`] box that is freed when empty.
//! There is no timer per connection: a sweep once a second closes idle ones.
//!
//! Invariant: a connection is only removed from the slab between events
//! (in [`Shard::close`], called from the event dispatch or the sweep), never
//! while its input is being processed; deliveries that must end a connection
//! mark it `dead` and queue it in `doomed`.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use throng_protocol::frame::{self, close_code, decode_frame, encode_header, Opcode, Role};
use throng_protocol::serializer::{self, Sender};
use throng_protocol::{event, handshake, Payload, Vsn};

use crate::channel::{Effects, HandleIn, Socket, Terminate};
use crate::node::{Node, ShardMsg, ShardStats};
use crate::pubsub::{Broadcast, Registry};

pub(crate) const LISTENER: Token = Token(usize::MAX - 1);
pub(crate) const WAKER: Token = Token(usize::MAX - 2);

const READ_BUF: usize = 64 * 1024;
const MAX_REQUEST_HEAD: usize = 16 * 1024;
const ACCEPTS_PER_TURN: usize = 1024;
/// Seconds a closing connection may linger for the peer's FIN.
const CLOSE_LINGER: u32 = 3;
/// Seconds an HTTP keep-alive connection may sit idle.
const HTTP_IDLE: u32 = 60;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Http,
    Ws {
        vsn: Vsn,
        echo: bool,
    },
    /// Our last bytes are queued or sent; waiting to shut down and for the peer's FIN.
    Closing {
        shut: bool,
    },
}

/// One channel a socket joined.
struct Join {
    /// Index of the topic in the shard's [`Registry`].
    topic: u32,
    /// This socket's position in the topic's subscriber list.
    pos: u32,
    join_ref: Option<Box<str>>,
}

/// What a connection holds only while something is pending.
#[derive(Default)]
struct Extra {
    /// Bytes of an incomplete frame or HTTP request.
    input: Vec<u8>,
    /// A fragmented message in progress: its opcode and bytes so far.
    frag: Option<(Opcode, Vec<u8>)>,
    /// Bytes the kernel has not taken yet.
    out: VecDeque<Chunk>,
    out_bytes: usize,
    /// Registered for writable events.
    want_write: bool,
}

impl Extra {
    fn is_empty(&self) -> bool {
        self.input.is_empty() && self.frag.is_none() && self.out.is_empty()
    }
}

enum Chunk {
    /// A broadcast frame shared with every other subscriber.
    Shared(Arc<Broadcast>, Vsn, usize),
    Owned(Vec<u8>, usize),
}

impl Chunk {
    fn rest(&self) -> &[u8] {
        match self {
            Chunk::Shared(b, vsn, off) => &b.frame(*vsn).unwrap_or(&[])[*off..],
            Chunk::Owned(v, off) => &v[*off..],
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            Chunk::Shared(_, _, off) | Chunk::Owned(_, off) => *off += n,
        }
    }
}

/// A connection. Kept small: this is what an idle socket costs in user space.
struct Conn {
    sock: TcpStream,
    kind: Kind,
    /// Seconds since the shard started, at the last byte received.
    last_active: u32,
    /// Marked for closing at the end of this loop turn.
    dead: bool,
    extra: Option<Box<Extra>>,
    joins: Vec<Join>,
}

impl Conn {
    fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Default::default)
    }

    fn trim(&mut self) {
        if self
            .extra
            .as_ref()
            .is_some_and(|e| e.is_empty() && !e.want_write)
        {
            self.extra = None;
        }
    }

    fn queued(&self) -> bool {
        self.extra.as_ref().is_some_and(|e| !e.out.is_empty())
    }
}

/// Why a connection is being closed, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CloseReason {
    Normal,
    Idle,
    SlowReader,
}

pub(crate) struct Shard {
    id: usize,
    poll: Poll,
    listener: TcpListener,
    inbox: Receiver<ShardMsg>,
    node: Arc<Node>,
    stats: Arc<ShardStats>,
    conns: Slab<Conn>,
    registry: Registry,
    /// The one read buffer of the shard.
    rbuf: Vec<u8>,
    /// Frames for the connection being processed, written in one syscall.
    reply: Vec<u8>,
    /// Scratch for encoding a message body.
    body: Vec<u8>,
    effects: Effects,
    doomed: Vec<(usize, CloseReason)>,
    started: Instant,
    now: u32,
    last_sweep: u32,
    accept_retry: bool,
    last_accept_warning: Option<Instant>,
    msgs_out: u64,
    bytes_out: u64,
}

impl Shard {
    pub(crate) fn new(
        id: usize,
        poll: Poll,
        mut listener: TcpListener,
        inbox: Receiver<ShardMsg>,
        node: Arc<Node>,
    ) -> io::Result<Shard> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let stats = node.stats[id].clone();
        Ok(Shard {
            id,
            poll,
            listener,
            inbox,
            node,
            stats,
            conns: Slab::new(),
            registry: Registry::default(),
            rbuf: vec![0; READ_BUF],
            reply: Vec::with_capacity(4096),
            body: Vec::with_capacity(4096),
            effects: Effects::default(),
            doomed: Vec::new(),
            started: Instant::now(),
            now: 0,
            last_sweep: 0,
            accept_retry: false,
            last_accept_warning: None,
            msgs_out: 0,
            bytes_out: 0,
        })
    }

    /// Runs the loop forever.
    pub(crate) fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = if self.accept_retry {
                Duration::from_millis(20)
            } else {
                Duration::from_millis(1000)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(shard = self.id, "poll failed: {e}");
                }
                continue;
            }
            self.now = self.started.elapsed().as_secs() as u32;
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => self.drain_inbox(),
                    Token(key) => {
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.on_readable(key);
                        }
                        if ev.is_writable() {
                            self.on_writable(key);
                        }
                    }
                }
                self.close_doomed();
            }
            if self.accept_retry {
                self.accept_retry = false;
                self.accept();
            }
            // A broadcast may arrive without a wake being seen yet.
            self.drain_inbox();
            self.close_doomed();
            if self.now != self.last_sweep {
                self.last_sweep = self.now;
                self.sweep();
            }
            self.flush_counters();
        }
    }

    fn flush_counters(&mut self) {
        if self.msgs_out > 0 || self.bytes_out > 0 {
            ShardStats::add(&self.stats.messages_out, self.msgs_out);
            ShardStats::add(&self.stats.bytes_out, self.bytes_out);
            self.msgs_out = 0;
            self.bytes_out = 0;
        }
    }

    fn accept(&mut self) {
        for _ in 0..ACCEPTS_PER_TURN {
            match self.listener.accept() {
                Ok((mut sock, _addr)) => {
                    let _ = sock.set_nodelay(true);
                    let entry = self.conns.vacant_entry();
                    let key = entry.key();
                    if let Err(e) =
                        self.poll
                            .registry()
                            .register(&mut sock, Token(key), Interest::READABLE)
                    {
                        tracing::warn!("register failed: {e}");
                        continue;
                    }
                    entry.insert(Conn {
                        sock,
                        kind: Kind::Http,
                        last_active: self.now,
                        dead: false,
                        extra: None,
                        joins: Vec::new(),
                    });
                    ShardStats::add(&self.stats.accepted, 1);
                    ShardStats::add(&self.stats.connections, 1);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    ShardStats::add(&self.stats.accept_errors, 1);
                    let quiet = self
                        .last_accept_warning
                        .is_some_and(|t| t.elapsed() < Duration::from_secs(10));
                    if !quiet {
                        self.last_accept_warning = Some(Instant::now());
                        tracing::warn!(
                            shard = self.id,
                            open = self.conns.len(),
                            fd_limit = self.node.fd_limit,
                            "accept failed: {e} (raise `ulimit -n`, or run more workers)"
                        );
                    }
                    self.accept_retry = true;
                    return;
                }
            }
        }
        self.accept_retry = true;
    }

    fn drain_inbox(&mut self) {
        while let Ok(msg) = self.inbox.try_recv() {
            match msg {
                ShardMsg::Broadcast(b) => self.deliver(&b),
            }
        }
    }

    fn on_readable(&mut self, key: usize) {
        let mut rbuf = std::mem::take(&mut self.rbuf);
        while let Some(conn) = self.conns.get_mut(key).filter(|c| !c.dead) {
            let n = match conn.sock.read(&mut rbuf) {
                Ok(0) => {
                    self.doom(key, CloseReason::Normal);
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.doom(key, CloseReason::Normal);
                    break;
                }
            };
            conn.last_active = self.now;
            ShardStats::add(&self.stats.bytes_in, n as u64);
            self.input(key, &mut rbuf[..n]);
            self.flush_reply(key);
            // A short read drained the socket; edge-triggered epoll reports new data.
            if n < rbuf.len() {
                break;
            }
        }
        self.rbuf = rbuf;
    }

    /// Processes newly read bytes, with any incomplete bytes kept from before.
    fn input(&mut self, key: usize, fresh: &mut [u8]) {
        let conn = &mut self.conns[key];
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
        if let Some(conn) = self.conns.get_mut(key) {
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
            let conn = &self.conns[key];
            if conn.dead {
                return data.len();
            }
            match conn.kind {
                Kind::Http => match self.http_request(key, &data[pos..]) {
                    Some(used) => pos += used,
                    None => return pos,
                },
                Kind::Ws { vsn, echo } => {
                    let max = self.node.config.max_message_bytes as u64;
                    match decode_frame(&mut data[pos..], Role::Server, max) {
                        Ok(Some(f)) => {
                            let payload = pos + f.payload.start..pos + f.payload.end;
                            pos += f.consumed;
                            self.ws_frame(key, vsn, echo, f.fin, f.opcode, &data[payload]);
                        }
                        Ok(None) => {
                            if data.len() - pos > max as usize + frame::MAX_HEADER_LEN {
                                self.fail(key, close_code::TOO_BIG, "message too big");
                                return data.len();
                            }
                            return pos;
                        }
                        Err(e) => {
                            self.fail(key, e.close_code(), &e.to_string());
                            return data.len();
                        }
                    }
                }
                Kind::Closing { .. } => return data.len(),
            }
        }
        pos
    }

    // ---- HTTP ----

    /// Handles one request at the front of `data`; `None` if it is incomplete.
    fn http_request(&mut self, key: usize, data: &[u8]) -> Option<usize> {
        let mut headers = [httparse::EMPTY_HEADER; 48];
        let mut req = httparse::Request::new(&mut headers);
        let head_len = match req.parse(data) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if data.len() > MAX_REQUEST_HEAD {
                    self.http_error(
                        key,
                        431,
                        "Request Header Fields Too Large",
                        "",
                        "request head too large\n",
                    );
                    return Some(data.len());
                }
                return None;
            }
            Err(httparse::Error::TooManyHeaders) => {
                self.http_error(
                    key,
                    431,
                    "Request Header Fields Too Large",
                    "",
                    "too many headers\n",
                );
                return Some(data.len());
            }
            Err(e) => {
                self.http_error(
                    key,
                    400,
                    "Bad Request",
                    "",
                    &format!("malformed request: {e}\n"),
                );
                return Some(data.len());
            }
        };
        ShardStats::add(&self.stats.http_requests, 1);
        let node = self.node.clone();
        let method = req.method.unwrap_or("");
        let target = req.path.unwrap_or("/");
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        if node.config.log_requests {
            tracing::info!("{method} {target}");
        }
        let header = |name: &str| {
            req.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value)
        };
        let has_body = header("content-length").is_some_and(|v| v.trim_ascii() != b"0")
            || header("transfer-encoding").is_some();
        let keep_alive = match header("connection") {
            Some(v) if v.eq_ignore_ascii_case(b"close") => false,
            Some(v) if v.eq_ignore_ascii_case(b"keep-alive") => true,
            _ => req.version == Some(1),
        };
        let is_ws_path = path == "/socket/websocket" || (node.config.echo && path == "/echo");
        if is_ws_path {
            let accept = match handshake::check_request(&req) {
                Ok(a) => a,
                Err(e) => {
                    let extra = if e.status() == 426 {
                        "Sec-WebSocket-Version: 13\r\n"
                    } else {
                        ""
                    };
                    let reason = match e.status() {
                        426 => "Upgrade Required",
                        405 => "Method Not Allowed",
                        _ => "Bad Request",
                    };
                    self.http_error(key, e.status(), reason, extra, &format!("{e}\n"));
                    return Some(data.len());
                }
            };
            let echo = path == "/echo";
            let vsn = if echo {
                Some(Vsn::V2)
            } else {
                Vsn::from_query(query)
            };
            let Some(vsn) = vsn else {
                self.http_error(
                    key,
                    400,
                    "Bad Request",
                    "",
                    "unsupported vsn: this server speaks 1.0.0 and 2.0.0\n",
                );
                return Some(data.len());
            };
            let mut resp = Vec::with_capacity(160);
            handshake::write_response(&mut resp, &accept);
            self.send(key, &resp);
            let conn = &mut self.conns[key];
            conn.kind = Kind::Ws { vsn, echo };
            ShardStats::add(&self.stats.websockets, 1);
            return Some(head_len);
        }
        if has_body || (method != "GET" && method != "HEAD") {
            self.http_error(
                key,
                405,
                "Method Not Allowed",
                "Allow: GET, HEAD\r\n",
                "only GET and HEAD are served\n",
            );
            return Some(data.len());
        }
        let head_only = method == "HEAD";
        match path {
            "/" => self.send(key, node.pages.index.bytes(head_only)),
            "/assets/app.js" => self.send(key, node.pages.app_js.bytes(head_only)),
            "/assets/app.css" => self.send(key, node.pages.app_css.bytes(head_only)),
            "/metrics" => {
                let body = node.render_metrics();
                let r = crate::page::Response::new(
                    "200 OK",
                    "text/plain; version=0.0.4",
                    "",
                    body.as_bytes(),
                );
                self.send(key, r.bytes(head_only));
            }
            _ => self.send(key, node.pages.not_found.bytes(head_only)),
        }
        if !keep_alive {
            self.start_closing(key);
        }
        Some(head_len)
    }

    fn http_error(&mut self, key: usize, status: u16, reason: &str, extra: &str, body: &str) {
        let resp = crate::page::error_response(status, reason, extra, body);
        self.send(key, &resp);
        self.start_closing(key);
    }

    // ---- WebSocket ----

    fn ws_frame(
        &mut self,
        key: usize,
        vsn: Vsn,
        echo: bool,
        fin: bool,
        opcode: Opcode,
        payload: &[u8],
    ) {
        let max = self.node.config.max_message_bytes;
        match opcode {
            Opcode::Ping => {
                frame::encode_frame(&mut self.reply, Opcode::Pong, payload, None);
                self.msgs_out += 1;
            }
            Opcode::Pong => {}
            Opcode::Close => match frame::parse_close(payload) {
                Ok(code) => {
                    match code {
                        Some(code) => frame::encode_close(&mut self.reply, code, "", None),
                        None => frame::encode_frame(&mut self.reply, Opcode::Close, &[], None),
                    }
                    self.start_closing(key);
                }
                Err(e) => self.fail(key, e.close_code(), &e.to_string()),
            },
            Opcode::Continuation => {
                let conn = &mut self.conns[key];
                let Some((op, mut buf)) = conn.extra.as_mut().and_then(|e| e.frag.take()) else {
                    self.fail(
                        key,
                        close_code::PROTOCOL_ERROR,
                        "continuation frame without a message in progress",
                    );
                    return;
                };
                if buf.len() + payload.len() > max {
                    self.fail(key, close_code::TOO_BIG, "message too big");
                    return;
                }
                buf.extend_from_slice(payload);
                if fin {
                    conn.trim();
                    self.message(key, vsn, echo, op, &buf);
                } else {
                    conn.extra().frag = Some((op, buf));
                }
            }
            Opcode::Text | Opcode::Binary => {
                let conn = &mut self.conns[key];
                if conn.extra.as_ref().is_some_and(|e| e.frag.is_some()) {
                    self.fail(
                        key,
                        close_code::PROTOCOL_ERROR,
                        "new message before the fragmented one ended",
                    );
                    return;
                }
                if fin {
                    self.message(key, vsn, echo, opcode, payload);
                } else {
                    conn.extra().frag = Some((opcode, payload.to_vec()));
                }
            }
        }
    }

    /// A complete WebSocket message.
    fn message(&mut self, key: usize, vsn: Vsn, echo: bool, opcode: Opcode, data: &[u8]) {
        ShardStats::add(&self.stats.messages_in, 1);
        if opcode == Opcode::Text && std::str::from_utf8(data).is_err() {
            self.fail(
                key,
                close_code::INVALID_PAYLOAD,
                "invalid UTF-8 in a text message",
            );
            return;
        }
        if echo {
            frame::encode_frame(&mut self.reply, opcode, data, None);
            self.msgs_out += 1;
            return;
        }
        let msg = match serializer::decode(vsn, opcode, data, Sender::Client) {
            Ok(m) => m,
            Err(e) => {
                self.fail(key, close_code::INVALID_PAYLOAD, &e.to_string());
                return;
            }
        };
        let topic: &str = &msg.topic;
        let msg_ref = msg.msg_ref.as_deref();
        if topic == event::HEARTBEAT_TOPIC && msg.event == event::HEARTBEAT {
            self.reply(vsn, None, msg_ref, topic, true, Payload::EMPTY);
            return;
        }
        let joined = self.joined(key, topic);
        match msg.event.as_ref() {
            event::JOIN => {
                // A second join replaces the first. Phoenix answers the new join
                // first and sends the old one's phx_close after it (through the
                // socket's mailbox); we keep that order.
                let replaced = joined.map(|i| self.leave(key, i, Terminate::DuplicateJoin));
                self.join(
                    key,
                    vsn,
                    msg.join_ref.as_deref(),
                    msg_ref,
                    topic,
                    msg.payload,
                );
                if let Some(old) = replaced {
                    let old = old.as_deref();
                    self.message_out(vsn, old, old, topic, event::CLOSE, Payload::EMPTY);
                }
            }
            event::LEAVE => match joined {
                Some(i) => {
                    let stored = self.conns[key].joins[i].join_ref.as_deref();
                    if let (Some(sent), Some(stored)) = (msg.join_ref.as_deref(), stored) {
                        if sent != stored {
                            // The client raced a close we already sent.
                            return;
                        }
                    }
                    let old = self.leave(key, i, Terminate::Leave);
                    self.reply(vsn, old.as_deref(), msg_ref, topic, true, Payload::EMPTY);
                    // The ok reply already ends the channel in the client. A v1
                    // phx_close carries no join_ref, so phoenix.js would route it
                    // to a channel the client has joined on the same topic since
                    // (leave, then join at once) and close that one: Phoenix 1.7
                    // loses that race sometimes; on v1 we send none. On v2 the
                    // join_ref makes it harmless, and Phoenix sends it.
                    if vsn == Vsn::V2 {
                        self.message_out(
                            vsn,
                            old.as_deref(),
                            old.as_deref(),
                            topic,
                            event::CLOSE,
                            Payload::EMPTY,
                        );
                    }
                }
                None => self.reply(
                    vsn,
                    msg.join_ref.as_deref(),
                    msg_ref,
                    topic,
                    true,
                    Payload::EMPTY,
                ),
            },
            ev => match joined {
                Some(i) => {
                    let Some(channel) = self.node.router.route(topic).cloned() else {
                        return;
                    };
                    let join = &self.conns[key].joins[i];
                    let join_ref = join.join_ref.clone();
                    let topic_idx = join.topic;
                    let mut effects = std::mem::take(&mut self.effects);
                    let result = {
                        let mut socket = Socket {
                            topic,
                            join_ref: join_ref.as_deref(),
                            effects: &mut effects,
                        };
                        channel.handle_in(ev, msg.payload, &mut socket)
                    };
                    // Phoenix's order: the broadcast (fastlaned) before the reply.
                    self.apply(key, vsn, topic_idx, join_ref.as_deref(), &mut effects);
                    if let HandleIn::Reply { ok, response } = result {
                        self.reply(
                            vsn,
                            join_ref.as_deref(),
                            msg_ref,
                            topic,
                            ok,
                            response.as_payload(),
                        );
                    }
                    self.effects = effects;
                }
                None => self.unmatched(vsn, msg_ref, topic),
            },
        }
    }

    fn unmatched(&mut self, vsn: Vsn, msg_ref: Option<&str>, topic: &str) {
        self.reply(
            vsn,
            None,
            msg_ref,
            topic,
            false,
            Payload::Json(r#"{"reason":"unmatched topic"}"#),
        );
    }

    fn joined(&self, key: usize, topic: &str) -> Option<usize> {
        let idx = self.registry.find(topic)?;
        self.conns[key].joins.iter().position(|j| j.topic == idx)
    }

    fn join(
        &mut self,
        key: usize,
        vsn: Vsn,
        join_ref: Option<&str>,
        msg_ref: Option<&str>,
        topic: &str,
        payload: Payload<'_>,
    ) {
        let Some(channel) = self.node.router.route(topic).cloned() else {
            ShardStats::add(&self.stats.refused_joins, 1);
            self.unmatched(vsn, msg_ref, topic);
            return;
        };
        let mut effects = std::mem::take(&mut self.effects);
        let result = {
            let mut socket = Socket {
                topic,
                join_ref,
                effects: &mut effects,
            };
            channel.join(topic, payload, &mut socket)
        };
        match result {
            Ok(response) => {
                let (idx, pos, new) = self.registry.subscribe(topic, key as u32);
                if new {
                    ShardStats::add(&self.stats.topics, 1);
                    let name = self.registry.topics[idx as usize].name.clone();
                    if self.node.topics.add(&name, self.id) {
                        self.node.backplane.subscribe(&name);
                    }
                }
                self.conns[key].joins.push(Join {
                    topic: idx,
                    pos,
                    join_ref: join_ref.map(Box::from),
                });
                ShardStats::add(&self.stats.channels, 1);
                ShardStats::add(&self.stats.joins, 1);
                self.reply(vsn, join_ref, msg_ref, topic, true, response.as_payload());
                self.apply(key, vsn, idx, join_ref, &mut effects);
            }
            Err(response) => {
                ShardStats::add(&self.stats.refused_joins, 1);
                self.reply(vsn, join_ref, msg_ref, topic, false, response.as_payload());
                effects.pushes.clear();
                effects.broadcasts.clear();
            }
        }
        self.effects = effects;
    }

    /// Removes join `i` of `key`; returns its join_ref.
    fn leave(&mut self, key: usize, i: usize, reason: Terminate) -> Option<Box<str>> {
        let join = self.conns[key].joins.swap_remove(i);
        self.end_join(join, reason)
    }

    /// Ends a join already taken off its connection: unsubscribes it and
    /// tells the channel. Returns its join_ref.
    fn end_join(&mut self, join: Join, reason: Terminate) -> Option<Box<str>> {
        let name = self
            .registry
            .topics
            .get(join.topic as usize)
            .map(|t| t.name.clone());
        self.unsubscribe(join.topic, join.pos);
        ShardStats::sub(&self.stats.channels, 1);
        if let Some(name) = name {
            self.terminate(&name, join.join_ref.as_deref(), reason);
        }
        join.join_ref
    }

    fn terminate(&mut self, topic: &str, join_ref: Option<&str>, reason: Terminate) {
        if let Some(channel) = self.node.router.route(topic).cloned() {
            let mut effects = std::mem::take(&mut self.effects);
            {
                let mut socket = Socket {
                    topic,
                    join_ref,
                    effects: &mut effects,
                };
                channel.terminate(reason, &mut socket);
            }
            effects.pushes.clear();
            effects.broadcasts.clear();
            self.effects = effects;
        }
    }

    fn unsubscribe(&mut self, topic: u32, pos: u32) {
        let (moved, gone) = self.registry.unsubscribe(topic, pos);
        if let Some(moved) = moved {
            if let Some(c) = self.conns.get_mut(moved as usize) {
                if let Some(j) = c.joins.iter_mut().find(|j| j.topic == topic) {
                    j.pos = pos;
                }
            }
        }
        if let Some(name) = gone {
            ShardStats::sub(&self.stats.topics, 1);
            if self.node.topics.remove(&name, self.id) {
                self.node.backplane.unsubscribe(&name);
            }
        }
    }

    /// Applies a callback's pushes and broadcasts.
    fn apply(
        &mut self,
        key: usize,
        vsn: Vsn,
        topic_idx: u32,
        join_ref: Option<&str>,
        effects: &mut Effects,
    ) {
        let Some(topic) = self
            .registry
            .topics
            .get(topic_idx as usize)
            .map(|t| t.name.clone())
        else {
            effects.pushes.clear();
            effects.broadcasts.clear();
            return;
        };
        for (ev, payload) in effects.pushes.drain(..) {
            self.message_out(vsn, join_ref, None, &topic, &ev, payload.as_payload());
        }
        if effects.broadcasts.is_empty() {
            return;
        }
        // Replies so far go out before the broadcast reaches this socket.
        self.flush_reply(key);
        for (ev, payload, include_self) in effects.broadcasts.drain(..) {
            let exclude = (!include_self).then_some((self.id, key));
            let b = Arc::new(Broadcast::new(topic.clone(), ev, payload, exclude));
            self.deliver(&b);
            self.node.broadcast(self.id, b);
        }
    }

    fn reply(
        &mut self,
        vsn: Vsn,
        join_ref: Option<&str>,
        msg_ref: Option<&str>,
        topic: &str,
        ok: bool,
        response: Payload<'_>,
    ) {
        self.body.clear();
        let status = if ok { "ok" } else { "error" };
        match serializer::encode_reply(
            vsn,
            &mut self.body,
            join_ref,
            msg_ref,
            topic,
            status,
            response,
        ) {
            Ok(op) => self.frame_out(op),
            Err(e) => tracing::warn!("reply not encodable: {e}"),
        }
    }

    fn message_out(
        &mut self,
        vsn: Vsn,
        join_ref: Option<&str>,
        msg_ref: Option<&str>,
        topic: &str,
        ev: &str,
        payload: Payload<'_>,
    ) {
        self.body.clear();
        match serializer::encode_message(vsn, &mut self.body, join_ref, msg_ref, topic, ev, payload)
        {
            Ok(op) => self.frame_out(op),
            Err(e) => tracing::warn!("push not encodable: {e}"),
        }
    }

    fn frame_out(&mut self, op: Opcode) {
        encode_header(&mut self.reply, true, op, self.body.len(), None);
        self.reply.extend_from_slice(&self.body);
        self.msgs_out += 1;
    }

    /// Writes the frames gathered for `key` in one syscall.
    fn flush_reply(&mut self, key: usize) {
        if !self.reply.is_empty() {
            let reply = std::mem::take(&mut self.reply);
            self.send(key, &reply);
            self.reply = reply;
            self.reply.clear();
        }
        if let Some(conn) = self.conns.get(key) {
            if let Kind::Closing { shut: false } = conn.kind {
                self.try_shutdown(key);
            }
        }
    }

    /// Fails the connection: a close frame with `code`, then closing.
    fn fail(&mut self, key: usize, code: u16, reason: &str) {
        ShardStats::add(&self.stats.protocol_errors, 1);
        tracing::debug!(key, code, "closing: {reason}");
        frame::encode_close(&mut self.reply, code, reason, None);
        self.start_closing(key);
    }

    // ---- output ----

    /// Writes `bytes` now if nothing is queued, queueing what the kernel refuses.
    fn send(&mut self, key: usize, bytes: &[u8]) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if conn.dead {
            return;
        }
        let mut written = 0;
        if !conn.queued() {
            match write_some(&mut conn.sock, bytes) {
                Ok(n) => written = n,
                Err(_) => {
                    self.doom(key, CloseReason::Normal);
                    return;
                }
            }
            self.bytes_out += written as u64;
            if written == bytes.len() {
                return;
            }
        }
        self.enqueue(key, Chunk::Owned(bytes[written..].to_vec(), 0));
    }

    fn enqueue(&mut self, key: usize, chunk: Chunk) {
        let max = self.node.config.max_outbound_bytes;
        let conn = &mut self.conns[key];
        let len = chunk.rest().len();
        let extra = conn.extra();
        extra.out.push_back(chunk);
        extra.out_bytes += len;
        if extra.out_bytes > max {
            self.doom(key, CloseReason::SlowReader);
            return;
        }
        if !extra.want_write {
            extra.want_write = true;
            let _ = self.poll.registry().reregister(
                &mut conn.sock,
                Token(key),
                Interest::READABLE | Interest::WRITABLE,
            );
        }
    }

    fn on_writable(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if conn.dead {
            return;
        }
        let Some(extra) = conn.extra.as_mut() else {
            return;
        };
        while !extra.out.is_empty() {
            let slices: Vec<IoSlice<'_>> = extra
                .out
                .iter()
                .take(64)
                .map(|c| IoSlice::new(c.rest()))
                .collect();
            match conn.sock.write_vectored(&slices) {
                Ok(0) => break,
                Ok(mut n) => {
                    self.bytes_out += n as u64;
                    extra.out_bytes -= n;
                    while n > 0 {
                        let front = extra
                            .out
                            .front_mut()
                            .expect("written bytes come from queued chunks");
                        let len = front.rest().len();
                        if n >= len {
                            n -= len;
                            extra.out.pop_front();
                        } else {
                            front.advance(n);
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.doom(key, CloseReason::Normal);
                    return;
                }
            }
        }
        extra.want_write = false;
        extra.out.shrink_to_fit();
        let _ = self
            .poll
            .registry()
            .reregister(&mut conn.sock, Token(key), Interest::READABLE);
        conn.trim();
        if let Kind::Closing { shut: false } = conn.kind {
            self.try_shutdown(key);
        }
    }

    /// Delivers a broadcast to this shard's subscribers of its topic.
    fn deliver(&mut self, b: &Arc<Broadcast>) {
        let Some(idx) = self.registry.find(&b.topic) else {
            return;
        };
        ShardStats::add(&self.stats.broadcasts, 1);
        let exclude = b
            .exclude
            .filter(|(shard, _)| *shard == self.id)
            .map(|(_, key)| key);
        let subs = std::mem::take(&mut self.registry.topics[idx as usize].subs);
        for &key in &subs {
            let key = key as usize;
            if Some(key) == exclude {
                continue;
            }
            let Some(conn) = self.conns.get_mut(key) else {
                continue;
            };
            let Kind::Ws { vsn, .. } = conn.kind else {
                continue;
            };
            if conn.dead {
                continue;
            }
            let Some(bytes) = b.frame(vsn) else {
                continue;
            };
            self.msgs_out += 1;
            if conn.queued() {
                self.enqueue(key, Chunk::Shared(b.clone(), vsn, 0));
                continue;
            }
            match write_some(&mut conn.sock, bytes) {
                Ok(n) => {
                    self.bytes_out += n as u64;
                    if n < bytes.len() {
                        self.enqueue(key, Chunk::Shared(b.clone(), vsn, n));
                    }
                }
                Err(_) => self.doom(key, CloseReason::Normal),
            }
        }
        self.registry.topics[idx as usize].subs = subs;
    }

    // ---- closing ----

    /// Sends what is gathered, then half-closes once the queue drains.
    fn start_closing(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if matches!(conn.kind, Kind::Closing { .. }) {
            return;
        }
        let was_ws = matches!(conn.kind, Kind::Ws { .. });
        conn.kind = Kind::Closing { shut: false };
        conn.last_active = self.now;
        if let Some(e) = conn.extra.as_mut() {
            e.input = Vec::new();
            e.frag = None;
        }
        // The channels end now; the socket lingers only to deliver the close.
        let joins = std::mem::take(&mut conn.joins);
        for join in joins {
            self.end_join(join, Terminate::Closed);
        }
        if was_ws {
            ShardStats::sub(&self.stats.websockets, 1);
        }
    }

    fn try_shutdown(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if conn.queued() || !self.reply.is_empty() {
            return;
        }
        if let Kind::Closing { shut: false } = conn.kind {
            let _ = conn.sock.shutdown(std::net::Shutdown::Write);
            conn.kind = Kind::Closing { shut: true };
        }
    }

    fn doom(&mut self, key: usize, reason: CloseReason) {
        if let Some(conn) = self.conns.get_mut(key) {
            if !conn.dead {
                conn.dead = true;
                self.doomed.push((key, reason));
            }
        }
    }

    fn close_doomed(&mut self) {
        while let Some((key, reason)) = self.doomed.pop() {
            self.close(key, reason);
        }
    }

    /// Removes a connection: its channels end, its socket closes.
    fn close(&mut self, key: usize, reason: CloseReason) {
        let Some(conn) = self.conns.try_remove(key) else {
            return;
        };
        match reason {
            CloseReason::SlowReader => ShardStats::add(&self.stats.slow_reader_closes, 1),
            CloseReason::Idle => ShardStats::add(&self.stats.idle_timeout_closes, 1),
            CloseReason::Normal => {}
        }
        if matches!(conn.kind, Kind::Ws { .. }) {
            ShardStats::sub(&self.stats.websockets, 1);
        }
        ShardStats::sub(&self.stats.connections, 1);
        ShardStats::add(&self.stats.closed, 1);
        for join in conn.joins {
            self.end_join(join, Terminate::Closed);
        }
        // Dropping the stream closes the descriptor, which also leaves epoll.
    }

    /// Once a second: closes idle sockets and finishes lingering closes.
    fn sweep(&mut self) {
        let now = self.now;
        let idle = self
            .node
            .config
            .idle_timeout
            .map(|d| d.as_secs().min(u32::MAX as u64) as u32);
        let mut expired = Vec::new();
        for (key, conn) in self.conns.iter() {
            let quiet = now.saturating_sub(conn.last_active);
            let over = match conn.kind {
                Kind::Ws { .. } => idle.is_some_and(|t| quiet >= t),
                Kind::Http => quiet >= HTTP_IDLE,
                Kind::Closing { .. } => quiet >= CLOSE_LINGER,
            };
            if over {
                expired.push((key, matches!(conn.kind, Kind::Ws { .. })));
            }
        }
        if expired.is_empty() {
            return;
        }
        // The same close frame for every idle socket of this sweep.
        let mut bye = Vec::with_capacity(32);
        frame::encode_close(&mut bye, close_code::GOING_AWAY, "idle timeout", None);
        for (key, ws) in expired {
            if ws {
                if let Some(conn) = self.conns.get_mut(key) {
                    let _ = write_some(&mut conn.sock, &bye);
                }
                self.close(key, CloseReason::Idle);
            } else {
                self.close(key, CloseReason::Normal);
            }
        }
    }
}

/// One `write`, mapping `WouldBlock` to zero bytes.
fn write_some(sock: &mut TcpStream, bytes: &[u8]) -> io::Result<usize> {
    loop {
        match sock.write(bytes) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// What an idle connection costs in user space (tests keep it honest).
pub(crate) const CONN_SIZE: usize = std::mem::size_of::<Conn>();

// Checked at compile time: socket, kind, last activity, the optional box, the joins vector.
const _: () = assert!(CONN_SIZE <= 56, "Conn grew past 56 bytes");
