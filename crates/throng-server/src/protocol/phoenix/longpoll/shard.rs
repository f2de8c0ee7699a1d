//! The long-poll transport on a shard (see `crate::protocol::phoenix::longpoll` for the
//! protocol and the design): the HTTP side (a request on one of this
//! shard's connections, forwarded if its session is elsewhere, and the
//! answer written when it comes back) and the session side (polls, POSTed
//! messages through the Phoenix socket, messages buffered for polls, the
//! end-of-turn answers and the once-a-second window and expiry checks).
//!
//! A session's Phoenix socket is the same `Mux` a WebSocket runs, through
//! the same `ShardTransport` (`../transport.rs`): it is an `Outlet::Session`
//! (`engine/outlet.rs`), and what the socket sends goes to the session's buffer
//! instead of a socket.

use std::sync::Arc;

use throng_protocol::Vsn;
use throng_pubsub::Broadcast;

use crate::auth::rate::Verdict;
use crate::channel::ConnectInfo;
use crate::engine::close::CloseReason;
use crate::engine::outlet::Outlet;
use crate::limits::Refusal;
use crate::metrics::ShardStats;
use crate::protocol::phoenix::longpoll::http::{LongPoll, LongPollMethod};
use crate::protocol::phoenix::longpoll::{
    self, poll_body, status_body, Answer, Ask, Item, Parked, ReplyTo, Request, Secret, Session,
    Token, Waiting, FORWARD_GRACE_MS,
};
use crate::protocol::phoenix::Phx;
use crate::refusals::Reason;

impl Phx<'_> {
    /// A request to `/socket/longpoll` on connection `key`.
    pub fn lp_http(&mut self, key: usize, req: LongPoll) {
        let keep_alive = req.keep_alive;
        if req.origin_refused {
            // Phoenix's long-poll answers a refused origin with status 403.
            ShardStats::add(&self.conns.stats.origin_refusals, 1);
            let what = "long-poll refused (403)";
            self.node
                .refusals
                .note(Reason::Origin, what, &"origin not allowed");
            return self.lp_respond(key, &status_body(403), keep_alive);
        }
        let token = match (req.method, req.token) {
            (LongPollMethod::Options, _) => {
                let resp = longpoll::preflight_response(&req.request_headers, keep_alive);
                return self.lp_write(key, &resp, keep_alive);
            }
            (LongPollMethod::Get, None) => return self.lp_new_session(key, req),
            // Phoenix: a POST without a session is `:gone`.
            (LongPollMethod::Post, None) => {
                return self.lp_respond(key, &status_body(410), keep_alive)
            }
            (_, Some(t)) => t,
        };
        let ask = match req.method {
            LongPollMethod::Post => Ask::Post {
                body: req.body,
                ndjson: req.ndjson,
            },
            _ => Ask::Poll,
        };
        let reply = ReplyTo {
            node: self.parts.lp.node_id,
            shard: self.conns.id as u16,
            conn: key as u32,
            req: self.parts.lp.next_req(),
        };
        let deadline = self.parts.lp.now_ms + self.parts.lp.window_ms + FORWARD_GRACE_MS;
        let here = token.node == self.parts.lp.node_id && token.shard as usize == self.conns.id;
        self.parts.lp.waiting.insert(
            key,
            Waiting {
                req: reply.req,
                deadline,
                keep_alive,
                local: here.then_some(token.key as usize),
                remote: (!here).then_some(token),
            },
        );
        let request = Request { token, ask, reply };
        if here {
            self.lp_request(request);
        } else {
            ShardStats::add(&self.conns.stats.longpoll_forwarded, 1);
            if !self.node.forward_request(request) {
                self.lp_answer(reply, &status_body(410));
            }
        }
    }

    /// GET without a token: a new session on this shard, answered 410 with
    /// its token; 403 for an unsupported `vsn` or a refused connect (as
    /// Phoenix's `new_session` when `connect/3` says no).
    fn lp_new_session(&mut self, key: usize, req: LongPoll) {
        let keep_alive = req.keep_alive;
        let Some(vsn) = req.vsn else {
            ShardStats::add(&self.conns.stats.longpoll_refused, 1);
            let what = "long-poll refused (403)";
            self.node
                .refusals
                .note(Reason::Vsn, what, &"unsupported vsn");
            return self.lp_respond(key, &status_body(403), keep_alive);
        };
        // A session is a connection: counted in the connection caps and its
        // own, and started at a bounded rate per address. Without this one
        // client started 300,000 a second over keep-alive (`{"status":503}`:
        // phoenix.js retries with backoff).
        let ip = self
            .conns
            .slab
            .get(key)
            .and_then(|c| c.sock.peer_addr().ok())
            .map(|a| a.ip());
        if let Some(ip) = ip {
            if !self.node.session_limit.is_unlimited() {
                let tat = self.parts.lp.starts.entry(ip).or_insert(0);
                if self.node.session_limit.check(tat, self.conns.now_ms) != Verdict::Allow {
                    ShardStats::add(&self.conns.stats.longpoll_rate_limited, 1);
                    return self.lp_respond(key, &status_body(503), keep_alive);
                }
            }
            if let Err(refusal) = self.node.admission.admit_session(ip) {
                let counter = match refusal {
                    Refusal::Total => &self.conns.stats.refused_total_cap,
                    Refusal::PerIp => &self.conns.stats.refused_per_ip,
                    Refusal::Sessions => &self.conns.stats.longpoll_cap_refusals,
                    Refusal::Memory => &self.conns.stats.refused_memory,
                    Refusal::Files => &self.conns.stats.refused_files,
                };
                ShardStats::add(counter, 1);
                return self.lp_respond(key, &status_body(503), keep_alive);
            }
        }
        let admitted = ip.map(|ip| self.node.admission.per_ip().then_some(ip));
        let mut connect = req.connect;
        let mut user = None;
        match self.node.auth.authenticate(connect.as_ref()) {
            Ok(None) => {}
            // As a WebSocket's: the token is not kept, the user is.
            Ok(Some(found)) => {
                user = Some(crate::protocol::phoenix::authenticated(&mut connect, found))
            }
            Err(refusal) => {
                ShardStats::add(&self.conns.stats.auth_refusals, 1);
                let why = (&refusal).into();
                self.node
                    .refusals
                    .note(why, "long-poll connect refused (403)", &refusal);
                if let Some(ip) = admitted {
                    self.node.admission.release_session(ip);
                }
                return self.lp_respond(key, &status_body(403), keep_alive);
            }
        }
        if self.node.config.hooks.connect {
            let held = crate::hooks::HeldSession {
                vsn,
                connect,
                user,
                admitted,
                keep_alive,
            };
            return self.hook_connect_session(key, held, &req.hook_headers);
        }
        self.lp_open_session(key, vsn, connect, user, admitted, keep_alive);
    }

    /// Opens a session for connection `key` (admitted already), and answers
    /// 410 with its token. Returns its registry key (`Outlet::Session`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lp_open_session(
        &mut self,
        key: usize,
        vsn: Vsn,
        connect: Option<ConnectInfo>,
        user: Option<String>,
        admitted: Option<Option<std::net::IpAddr>>,
        keep_alive: bool,
    ) -> Option<usize> {
        let secret = match Secret::random() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("no random secret for a long-poll session: {e}");
                if let Some(ip) = admitted {
                    self.node.admission.release_session(ip);
                }
                self.lp_respond(key, &status_body(500), keep_alive);
                return None;
            }
        };
        let entry = self.parts.lp.sessions.vacant_entry();
        let idx = entry.key();
        if idx >= Outlet::MAX_SESSIONS {
            if let Some(ip) = admitted {
                self.node.admission.release_session(ip);
            }
            self.lp_respond(key, &status_body(503), keep_alive);
            return None;
        }
        let outlet = Outlet::Session(idx);
        let session = entry.insert(Session::new(vsn, secret, connect, self.parts.lp.now_ms));
        session.ip = admitted.flatten();
        session.admitted = admitted.is_some();
        if let Some(user) = &user {
            // In the shard's users, so that a `disconnect` ends the session.
            self.conns.users.add(user, outlet.key() as u32);
        }
        self.connect_event(outlet.key(), "longpoll", user.as_deref());
        ShardStats::add(&self.conns.stats.longpoll_sessions, 1);
        let token = self.lp_token(idx, secret);
        let body = poll_body(410, &token, vsn, &[]);
        self.lp_respond(key, &body, keep_alive);
        Some(outlet.key())
    }

    /// Answers a long-poll request held for the connect hook with
    /// `{"status": status}`, giving back its admission.
    pub(crate) fn lp_refuse_held(
        &mut self,
        key: usize,
        status: u16,
        held: &crate::hooks::HeldSession,
    ) {
        if let Some(ip) = held.admitted {
            self.node.admission.release_session(ip);
        }
        self.lp_respond(key, &status_body(status), held.keep_alive);
    }

    fn lp_token(&self, idx: usize, secret: Secret) -> Token {
        Token {
            node: self.parts.lp.node_id,
            shard: self.conns.id as u16,
            key: idx as u32,
            secret,
        }
    }

    /// A request for a session of this shard (from a connection here, or
    /// forwarded): answered 410 if the session is gone.
    pub fn lp_request(&mut self, req: Request) {
        let idx = req.token.key as usize;
        let found = req.token.node == self.parts.lp.node_id
            && req.token.shard as usize == self.conns.id
            && self
                .parts
                .lp
                .sessions
                .get(idx)
                .is_some_and(|s| !s.dead && s.secret.matches(&req.token.secret));
        if !found {
            return self.lp_reply(req.reply, status_body(410));
        }
        match req.ask {
            Ask::Poll => self.lp_poll(idx, req.reply),
            Ask::Post { body, ndjson } => self.lp_post(idx, &body, ndjson, req.reply),
            Ask::Cancel => self.lp_unpark(idx, req.reply),
            Ask::Return { body } => self.lp_returned(idx, &body),
        }
    }

    /// Takes back session `idx`'s parked poll if it is the one `reply`
    /// names (its connection closed): messages then wait for the next poll.
    fn lp_unpark(&mut self, idx: usize, reply: ReplyTo) {
        let now = self.parts.lp.now_ms;
        let Some(s) = self.parts.lp.sessions.get_mut(idx) else {
            return;
        };
        if s.parked.as_ref().is_some_and(|p| p.reply == reply) {
            s.parked = None;
            s.last_poll = now;
            ShardStats::sub(&self.conns.stats.longpoll_parked, 1);
        }
    }

    /// An answer of session `idx` that found its connection gone: its
    /// messages go back to the front of the buffer (they are older than
    /// anything buffered since: an answer empties the buffer), for the
    /// next poll.
    fn lp_returned(&mut self, idx: usize, body: &[u8]) {
        let Some((_, items)) = longpoll::returned_messages(body) else {
            return;
        };
        let Some(s) = self.parts.lp.sessions.get_mut(idx).filter(|s| !s.dead) else {
            return;
        };
        ShardStats::add(&self.conns.stats.longpoll_returned, items.len() as u64);
        let len: usize = items.iter().map(Item::owned_len).sum();
        s.buffer.splice(0..0, items);
        // lp_push with nothing more: the bound, and a parked poll answered.
        self.parts.lp.push_len(idx, len);
    }

    /// A poll: the waiting messages now, or parked until some arrive.
    fn lp_poll(&mut self, idx: usize, reply: ReplyTo) {
        let now = self.parts.lp.now_ms;
        let Some(s) = self.parts.lp.sessions.get_mut(idx) else {
            return;
        };
        s.last_poll = now;
        let token = Token {
            node: self.parts.lp.node_id,
            shard: self.conns.id as u16,
            key: idx as u32,
            secret: s.secret,
        };
        let replaced = s.parked.take();
        let vsn = s.vsn;
        let answer = if s.buffer.is_empty() {
            s.parked = Some(Parked { reply, since: now });
            None
        } else {
            Some(s.take_messages(&token))
        };
        let parked_now = answer.is_none() as u64;
        let parked_before = replaced.is_some() as u64;
        ShardStats::add(&self.conns.stats.longpoll_parked, parked_now);
        ShardStats::sub(&self.conns.stats.longpoll_parked, parked_before);
        // The poll it replaces can get nothing more.
        if let Some(old) = replaced {
            self.lp_reply(old.reply, poll_body(204, &token, vsn, &[]));
        }
        if let Some((body, n)) = answer {
            self.conns.msgs_out += n as u64;
            self.lp_reply(reply, body);
        }
    }

    /// A POST: each message through the session's Phoenix socket, in order.
    fn lp_post(&mut self, idx: usize, body: &[u8], ndjson: bool, reply: ReplyTo) {
        let lines = longpoll::post_lines(body, ndjson);
        if lines.len() > self.node.config.max_longpoll_batch {
            ShardStats::add(&self.conns.stats.longpoll_refused, 1);
            return self.lp_reply(reply, status_body(413));
        }
        let Some(vsn) = self.parts.lp.sessions.get(idx).map(|s| s.vsn) else {
            return;
        };
        let max_ref = self.node.config.limits.max_ref_bytes;
        for line in lines {
            let decoded = longpoll::post_message(line);
            let msg = decoded.as_ref().map_or(Err(longpoll::NOT_A_MESSAGE), |d| {
                longpoll::decode_post(d, vsn, max_ref)
            });
            let msg = match msg {
                Ok(msg) => msg,
                Err(reason) => {
                    // As a WebSocket that sends a non-Phoenix message, or
                    // a ref past --max-ref-bytes: it ends.
                    tracing::debug!(
                        session = idx,
                        "long-poll POST with a message that is not one, or a ref too long"
                    );
                    self.parts.lp.doom(idx, reason);
                    return self.lp_reply(reply, status_body(400));
                }
            };
            ShardStats::add(&self.conns.stats.messages_in, 1);
            let fail = self.with_socket(Outlet::Session(idx), vsn, |mux| mux.handle_in(msg));
            if let Some(reason) = fail {
                // The socket asked to close (past its push budget).
                self.parts.lp.doom(idx, reason);
            }
            if !matches!(self.parts.lp.sessions.get(idx), Some(s) if !s.dead) {
                return self.lp_reply(reply, status_body(410));
            }
        }
        self.lp_reply(reply, status_body(200));
    }

    /// A broadcast for session `idx`: the shared broadcast is buffered, not
    /// a copy of its bytes.
    pub fn lp_deliver(&mut self, idx: usize, b: &Arc<Broadcast>) {
        self.parts.lp.deliver(idx, b);
    }

    /// Ends session `idx`: its channels terminate, a parked poll gets 410,
    /// what it buffered is dropped.
    pub fn lp_end(&mut self, idx: usize, reason: CloseReason<'static>) {
        let Some(mut s) = self.parts.lp.sessions.try_remove(idx) else {
            return;
        };
        ShardStats::sub(&self.conns.stats.longpoll_sessions, 1);
        if s.admitted {
            self.node.admission.release_session(s.ip);
        }
        // A session has no close frame and no output queue: whatever the
        // reason's flush rule, what it buffered is dropped.
        reason.count(&self.conns.stats);
        tracing::debug!(session = idx, ?reason, "long-poll session ended");
        if let Some(p) = s.parked.take() {
            ShardStats::sub(&self.conns.stats.longpoll_parked, 1);
            self.lp_reply(p.reply, status_body(410));
        }
        let socket = std::mem::take(&mut s.socket);
        let code = reason.event_code();
        self.end_socket(Outlet::Session(idx), s.vsn, socket, code);
        // The engine forgets a connection's user after its protocol ended
        // it; a session's is this protocol's to forget.
        self.conns.users.remove(Outlet::Session(idx).key() as u32);
    }

    /// End of a loop turn: every parked poll whose session got messages
    /// this turn is answered with all of them.
    pub fn lp_flush(&mut self) {
        if self.parts.lp.ready.is_empty() {
            return;
        }
        let mut ready = std::mem::take(&mut self.parts.lp.ready);
        for &idx in &ready {
            let now = self.parts.lp.now_ms;
            let Some(s) = self.parts.lp.sessions.get_mut(idx) else {
                continue;
            };
            s.ready = false;
            if s.dead || s.buffer.is_empty() {
                continue;
            }
            let Some(p) = s.parked.take() else {
                continue;
            };
            ShardStats::sub(&self.conns.stats.longpoll_parked, 1);
            s.last_poll = now;
            let secret = s.secret;
            let token = Token {
                node: self.parts.lp.node_id,
                shard: self.conns.id as u16,
                key: idx as u32,
                secret,
            };
            let (body, n) = s.take_messages(&token);
            self.conns.msgs_out += n as u64;
            self.lp_reply(p.reply, body);
        }
        ready.clear();
        if self.parts.lp.ready.is_empty() {
            self.parts.lp.ready = ready;
        }
    }

    /// Once a second: polls past the window get 204, sessions 1.5x the
    /// window without a poll end, and requests whose forwarded answer never
    /// came (the session's node is gone) get 410.
    pub fn lp_sweep(&mut self) {
        let now = self.parts.lp.now_ms;
        let window = self.parts.lp.window_ms;
        if !self.parts.lp.waiting.is_empty() {
            let late: Vec<(usize, u32)> = self
                .parts
                .lp
                .waiting
                .iter()
                .filter(|(_, w)| w.deadline <= now)
                .map(|(&conn, w)| (conn, w.req))
                .collect();
            for (conn, req) in late {
                ShardStats::add(&self.conns.stats.longpoll_forward_timeouts, 1);
                let reply = ReplyTo {
                    node: self.parts.lp.node_id,
                    shard: self.conns.id as u16,
                    conn: conn as u32,
                    req,
                };
                self.lp_answer(reply, &status_body(410));
            }
        }
        // Addresses whose start budget is full again need no entry.
        if !self.parts.lp.starts.is_empty() {
            let now = now as u32;
            self.parts
                .lp
                .starts
                .retain(|_, tat| (tat.wrapping_sub(now) as i32) > 0);
            if self.parts.lp.starts.capacity() > 64
                && self.parts.lp.starts.len() < self.parts.lp.starts.capacity() / 4
            {
                self.parts.lp.starts.shrink_to_fit();
            }
        }
        let mut answers = Vec::new();
        let mut expired = Vec::new();
        for (idx, s) in self.parts.lp.sessions.iter_mut() {
            if s.dead {
                continue;
            }
            match &s.parked {
                Some(p) if now.saturating_sub(p.since) >= window => {
                    let token = Token {
                        node: self.parts.lp.node_id,
                        shard: self.conns.id as u16,
                        key: idx as u32,
                        secret: s.secret,
                    };
                    answers.push((p.reply, poll_body(204, &token, s.vsn, &[])));
                    s.parked = None;
                    s.last_poll = now;
                }
                Some(_) => {}
                None if now.saturating_sub(s.last_poll) > window * 3 / 2 => expired.push(idx),
                None => {}
            }
        }
        ShardStats::sub(&self.conns.stats.longpoll_parked, answers.len() as u64);
        for (reply, body) in answers {
            self.lp_reply(reply, body);
        }
        // At most a turn's worth: the rest next turn (the shard's loop
        // runs the sweep again at once while it is behind).
        self.parts.lp.behind = expired.len() > longpoll::EXPIRE_PER_TURN;
        for idx in expired.into_iter().take(longpoll::EXPIRE_PER_TURN) {
            self.lp_end(idx, CloseReason::SessionExpired);
        }
        // Memory back once sessions are gone: the slab's vacant tail.
        let lp = &mut self.parts.lp.sessions;
        if lp.capacity() > 1024 && lp.len() < lp.capacity() / 4 {
            lp.shrink_to_fit();
        }
    }

    /// Connection `key`, waiting on a request, closes: the answer will find
    /// no one. A poll parked on its session is taken back, so the messages
    /// that come meanwhile wait for the next poll: here at once, elsewhere
    /// by a cancel sent to the session's shard or node (an answer crossing
    /// it goes back to the session: `lp_answer`).
    pub fn lp_conn_closed(&mut self, key: usize) {
        let Some(w) = self.parts.lp.waiting.remove(&key) else {
            return;
        };
        if let Some(token) = w.remote {
            let reply = ReplyTo {
                node: self.parts.lp.node_id,
                shard: self.conns.id as u16,
                conn: key as u32,
                req: w.req,
            };
            self.node.forward_request(Request {
                token,
                ask: Ask::Cancel,
                reply,
            });
            return;
        }
        let Some(s) = w.local.and_then(|idx| self.parts.lp.sessions.get_mut(idx)) else {
            return;
        };
        let mine = s
            .parked
            .as_ref()
            .is_some_and(|p| p.reply.conn as usize == key && p.reply.req == w.req);
        if mine {
            s.parked = None;
            s.last_poll = self.parts.lp.now_ms;
            ShardStats::sub(&self.conns.stats.longpoll_parked, 1);
        }
    }

    /// Sends an answer to the connection holding the request: here, or
    /// through the node to another shard or self.node.
    fn lp_reply(&mut self, reply: ReplyTo, body: Vec<u8>) {
        if reply.node == self.parts.lp.node_id && reply.shard as usize == self.conns.id {
            self.lp_answer(reply, &body);
        } else {
            self.node.forward_answer(Answer { reply, body });
        }
    }

    /// The answer to a request a connection of this shard waits on. If that
    /// connection is gone or waits on another request now, an answer that
    /// hands over messages goes back to its session, whose next poll gets
    /// them; any other is dropped.
    pub fn lp_answer(&mut self, reply: ReplyTo, body: &[u8]) {
        let key = reply.conn as usize;
        match self.parts.lp.waiting.get(&key) {
            Some(w) if w.req == reply.req => {}
            _ => {
                if let Some((token, _)) = longpoll::returned_messages(body) {
                    let ask = Ask::Return {
                        body: body.to_vec(),
                    };
                    let here = token.node == self.parts.lp.node_id
                        && token.shard as usize == self.conns.id;
                    let request = Request { token, ask, reply };
                    if here {
                        self.lp_request(request);
                    } else {
                        self.node.forward_request(request);
                    }
                }
                return;
            }
        }
        let Some(w) = self.parts.lp.waiting.remove(&key) else {
            return;
        };
        self.lp_respond(key, body, w.keep_alive);
        let more = self
            .conns
            .slab
            .get(key)
            .and_then(|c| c.extra.as_ref())
            .is_some_and(|e| !e.input.is_empty());
        if w.keep_alive && more {
            self.conns.resume.push(key);
        }
    }

    /// Writes a long-poll JSON body as the HTTP response on `key`.
    fn lp_respond(&mut self, key: usize, body: &[u8], keep_alive: bool) {
        let resp = longpoll::http_response(body, keep_alive);
        self.lp_write(key, &resp, keep_alive);
    }

    fn lp_write(&mut self, key: usize, resp: &[u8], keep_alive: bool) {
        self.conns.send(key, resp);
        if !keep_alive {
            self.conns.close(self.node, key, CloseReason::Finished);
        } else if let Some(conn) = self.conns.slab.get_mut(key) {
            // The next request's head deadline (--handshake-timeout) starts now.
            conn.last_active = self.conns.now;
        }
    }
}
