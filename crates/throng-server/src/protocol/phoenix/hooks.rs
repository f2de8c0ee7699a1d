//! The app backend's hooks on this shard: sending a connection's hook call
//! (with its bound per socket, and one push at a time per socket and
//! topic), and applying the answers that come back through the inbox to the
//! socket that waits for them (`crate::hooks`).

use std::sync::Arc;

use throng_protocol::{Vsn, Wire};

use super::Phx;
use crate::engine::close::CloseReason;
use crate::engine::conn::Kind;
use crate::engine::outlet::Outlet;
use crate::hooks::{
    ConnectRequest, Event, EventType, Failure, HeldSession, HeldUpgrade, Hook, HookAnswer, Outcome,
    Wait, Waiting, Waits,
};
use crate::metrics::ShardStats;
use crate::node::Node;

/// Sends hook call `body` of socket `key` of shard `shard` on `topic`, or
/// queues it behind this socket's push in flight on the topic.
pub(crate) fn hook_call(
    node: &Node,
    shard: usize,
    waits: &mut Waits,
    key: usize,
    call: (Hook, &str, Vec<u8>, Waiting),
) -> Result<(), Failure> {
    let (hook, topic, body, what) = call;
    {
        let Some(client) = node.hooks.as_ref() else {
            return Err(Failure::Unavailable);
        };
        if hook == Hook::Join {
            waits.cancel_join(key, topic);
        }
        if waits.held(key) >= client.config().max_in_flight_per_socket {
            client.refused(hook);
            return Err(Failure::Busy);
        }
        let id = waits.next_id();
        let wait = Wait {
            key,
            topic: Arc::from(topic),
            what,
        };
        if hook == Hook::Push && waits.push_busy(key, topic) {
            waits.enqueue(id, body, wait);
            return Ok(());
        }
        client.call(hook, shard, id, body)?;
        waits.start(id, wait);
        Ok(())
    }
}

/// The id of socket `key` of shard `shard` in hook requests and events:
/// the node's random id, the shard, and a number this shard never gives
/// twice, so no two sockets share one across nodes, restarts and reused
/// slots.
pub(crate) fn socket_id(node: &Node, shard: usize, waits: &mut Waits, key: usize) -> String {
    let n = waits.socket_number(key);
    format!("{}.{}.{n}", node.control.node_id, shard)
}

/// Queues lifecycle event `kind` of the socket `id` (of `user`), with what
/// `fill` adds, when `[hooks] events` is on; nothing otherwise.
pub(crate) fn queue_event(
    node: &Node,
    id: String,
    kind: EventType,
    user: Option<&str>,
    fill: impl FnOnce(&mut Event),
) {
    let Some(events) = node.hooks.as_ref().and_then(|h| h.events()) else {
        return;
    };
    let mut e = Event::new(kind);
    e.socket_id = Some(id);
    e.user = user.map(Into::into);
    fill(&mut e);
    events.push(e);
}

/// What the connect hook gave socket `key` as its assigns.
pub(crate) fn hook_assigns(waits: &Waits, key: usize) -> Option<&str> {
    if waits.assigns.is_empty() {
        return None;
    }
    waits.assigns.get(&key).map(|a| a.get())
}

impl Phx<'_> {
    /// Connection or session `key` is gone: its hook waits are forgotten,
    /// and a session held for the connect hook gives its admission back.
    pub(crate) fn hook_forget(&mut self, key: usize) {
        for wait in self.parts.hook_waits.forget(key) {
            if let Waiting::LongPollConnect(held) = wait.what {
                if let Some(ip) = held.admitted {
                    self.node.admission.release_session(ip);
                }
            }
        }
    }

    /// Queues lifecycle event `kind` of socket `key` (of `user`), with what
    /// `fill` adds, when `[hooks] events` is on; nothing otherwise.
    pub(crate) fn socket_event(
        &mut self,
        key: usize,
        kind: EventType,
        user: Option<&str>,
        fill: impl FnOnce(&mut Event),
    ) {
        if self.node.hooks.as_ref().and_then(|h| h.events()).is_none() {
            return;
        }
        let id = socket_id(self.node, self.conns.id, &mut self.parts.hook_waits, key);
        queue_event(self.node, id, kind, user, fill);
    }

    /// Socket `key` is open (`transport`: `websocket` or `longpoll`).
    pub(crate) fn connect_event(
        &mut self,
        key: usize,
        transport: &'static str,
        user: Option<&str>,
    ) {
        self.socket_event(key, EventType::Connect, user, |e| {
            e.transport = Some(transport)
        });
    }

    /// The answer to a hook call of this shard.
    pub fn hook_answer(&mut self, a: HookAnswer) {
        let Some(wait) = self.parts.hook_waits.finish(a.id) else {
            // Its socket closed, or it left the join meanwhile.
            return;
        };
        let (key, topic) = (wait.key, wait.topic.clone());
        let push = matches!(wait.what, Waiting::Push { .. });
        self.hook_apply(wait, a.outcome);
        if push {
            self.next_push(key, &topic);
        }
    }

    /// Sends the next push queued on `key`'s `topic`; one refused at once
    /// is answered, and the next one tried.
    fn next_push(&mut self, key: usize, topic: &Arc<str>) {
        let Some(client) = self.node.hooks.clone() else {
            return;
        };
        while let Some((id, body, wait)) = self.parts.hook_waits.next_push(key, topic) {
            match client.call(Hook::Push, self.conns.id, id, body) {
                Ok(()) => {
                    self.parts.hook_waits.resume(id, wait);
                    return;
                }
                Err(f) => {
                    self.parts.hook_waits.done(key);
                    self.hook_apply(wait, Outcome::Failed(f));
                }
            }
        }
    }

    /// The connect hook's request for connection `key`.
    fn connect_body(
        &self,
        key: usize,
        transport: &str,
        vsn: Vsn,
        connect: Option<&crate::channel::ConnectInfo>,
        headers: &[(&'static str, String)],
    ) -> Vec<u8> {
        let remote_addr = self
            .conns
            .slab
            .get(key)
            .and_then(|c| c.sock.peer_addr().ok())
            .map_or_else(String::new, |a| a.to_string());
        let params = connect
            .iter()
            .flat_map(|c| c.params.iter())
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        serde_json::to_vec(&ConnectRequest {
            transport,
            vsn: match vsn {
                Vsn::V1 => "1.0.0",
                Vsn::V2 => "2.0.0",
            },
            params,
            headers: headers.iter().map(|(k, v)| (*k, v.as_str())).collect(),
            remote_addr,
            at: crate::hooks::now_ms(),
        })
        .unwrap_or_default()
    }

    /// Sends a connect hook call of connection `key`; `Err`: refused at once.
    fn connect_call(
        &mut self,
        key: usize,
        body: Vec<u8>,
        what: Waiting,
    ) -> Result<(), (Failure, Waiting)> {
        let Some(client) = self.node.hooks.clone() else {
            return Err((Failure::Unavailable, what));
        };
        let id = self.parts.hook_waits.next_id();
        match client.call(Hook::Connect, self.conns.id, id, body) {
            Ok(()) => {
                let topic = Arc::from("");
                self.parts.hook_waits.start(id, Wait { key, topic, what });
                Ok(())
            }
            Err(f) => Err((f, what)),
        }
    }

    /// Holds WebSocket upgrade `held` of connection `key` until the connect
    /// hook answers; a call refused at once is answered 503 now.
    pub(crate) fn hook_connect(
        &mut self,
        key: usize,
        held: HeldUpgrade,
        headers: &[(&'static str, String)],
    ) {
        let body = self.connect_body(key, "websocket", held.vsn, held.connect.as_ref(), headers);
        if let Err((f, _)) = self.connect_call(key, body, Waiting::Connect(Box::new(held))) {
            self.refuse_upgrade(key, Outcome::Failed(f));
        }
    }

    /// Holds a new long-poll session of connection `key` until the connect
    /// hook answers; a call refused at once is answered `{"status":503}`.
    pub(crate) fn hook_connect_session(
        &mut self,
        key: usize,
        held: HeldSession,
        headers: &[(&'static str, String)],
    ) {
        let body = self.connect_body(key, "longpoll", held.vsn, held.connect.as_ref(), headers);
        let what = Waiting::LongPollConnect(Box::new(held));
        if let Err((_, Waiting::LongPollConnect(held))) = self.connect_call(key, body, what) {
            self.lp_refuse_held(key, 503, &held);
        }
    }

    /// Whether connection `key` still waits for its connect hook (it may
    /// have closed, or been reused, while the backend decided).
    fn still_held(&self, key: usize) -> bool {
        self.conns
            .slab
            .get(key)
            .is_some_and(|c| !c.dead && matches!(c.kind, Kind::Http))
    }

    /// The connect hook's answer to a held long-poll session: it opens
    /// (with the backend's user and assigns), or `{"status":403}` (refused)
    /// or `{"status":503}` (backend unavailable, slow or wrong).
    fn finish_session(&mut self, key: usize, held: HeldSession, outcome: Outcome) {
        if !self.still_held(key) {
            if let Some(ip) = held.admitted {
                self.node.admission.release_session(ip);
            }
            return;
        }
        let answer = match outcome {
            Outcome::Answer(a) if a.error.is_none() => a,
            Outcome::Failed(_) => return self.lp_refuse_held(key, 503, &held),
            refused => {
                ShardStats::add(&self.conns.stats.auth_refusals, 1);
                log_connect_refused(self.node, "long-poll", &refused_reason(&refused));
                return self.lp_refuse_held(key, 403, &held);
            }
        };
        let mut connect = held.connect;
        let user = accepted_user(answer.user, held.user, &mut connect);
        let (vsn, admitted, keep_alive) = (held.vsn, held.admitted, held.keep_alive);
        let session = self.lp_open_session(key, vsn, connect, user, admitted, keep_alive);
        if let (Some(session), Some(assigns)) = (session, answer.assigns) {
            self.parts.hook_waits.assigns.insert(session, assigns);
        }
        // The connection's next request is read now.
        self.conns.resume.push(key);
        self.conns.flush_reply(key);
    }

    /// The connect hook's answer to a held upgrade: the `101`, or a 403
    /// (refused) or 503 (backend unavailable, slow or wrong; phoenix.js
    /// retries with backoff).
    fn finish_connect(&mut self, key: usize, held: HeldUpgrade, outcome: Outcome) {
        if !self.still_held(key) {
            return;
        }
        let answer = match outcome {
            Outcome::Answer(a) if a.error.is_none() => a,
            refused => return self.refuse_upgrade(key, refused),
        };
        if held.check {
            // `/socket/check`: the connect would pass.
            self.conns.send(key, &held.response);
            return self.conns.close(self.node, key, CloseReason::Finished);
        }
        let mut connect = held.connect;
        let user = accepted_user(answer.user, held.user, &mut connect);
        if let Some(assigns) = answer.assigns {
            self.parts.hook_waits.assigns.insert(key, assigns);
        }
        let wire = Wire::Phoenix(held.vsn);
        if !self
            .conns
            .open_websocket(key, &held.response, wire, held.deflate, connect)
        {
            return;
        }
        self.connect_event(key, "websocket", user.as_deref());
        if let Some(user) = user {
            self.conns.users.add(&user, key as u32);
        }
        // What the client sent after its upgrade request is read now.
        self.conns.resume.push(key);
        self.conns.flush_reply(key);
    }

    fn refuse_upgrade(&mut self, key: usize, why: Outcome) {
        let resp = match why {
            Outcome::Failed(f) => crate::page::error_response(
                503,
                "Service Unavailable",
                "Retry-After: 1\r\n",
                &format!(
                    "the app backend could not accept this connection now: {}; try again\n",
                    f.reply()
                ),
            ),
            refused => {
                ShardStats::add(&self.conns.stats.auth_refusals, 1);
                let reason = refused_reason(&refused);
                log_connect_refused(self.node, "WebSocket", &reason);
                crate::page::error_response(403, "Forbidden", "", &refused_body(self.node, &reason))
            }
        };
        self.conns.send(key, &resp);
        self.conns.close(self.node, key, CloseReason::Finished);
    }

    /// Hands `outcome` to the socket of `wait`, and sends what it wrote.
    fn hook_apply(&mut self, wait: Wait, outcome: Outcome) {
        let key = wait.key;
        let what = match wait.what {
            Waiting::Connect(held) => return self.finish_connect(key, *held, outcome),
            Waiting::LongPollConnect(held) => return self.finish_session(key, *held, outcome),
            what => what,
        };
        let outlet = Outlet::of(key);
        let Some(vsn) = self.vsn_of(outlet) else {
            return;
        };
        let topic = wait.topic;
        let fail = self.with_socket(outlet, vsn, |mux| match what {
            Waiting::Join { .. } => mux.hook_joined(&topic, what, outcome),
            Waiting::Push { .. } => mux.hook_pushed(&topic, what, outcome),
            Waiting::Connect(_) | Waiting::LongPollConnect(_) => {}
        });
        self.after_socket(outlet, fail);
    }
}

/// Why the connect hook refused, as its answer says (`{"error": ...}`, or
/// a 401/403 body): one bounded line, empty when it says nothing.
fn refused_reason(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Answer(a) => a
            .error
            .as_deref()
            .map(|e| crate::hooks::reason_text(e.get().as_bytes()))
            .unwrap_or_default(),
        Outcome::Refused(reason) => reason.clone(),
        Outcome::Failed(_) => String::new(),
    }
}

/// The body of the 403 a connect refused by the connect hook gets: the
/// backend's reason, and where to sign in when `[hooks] page_url` says.
pub(crate) fn refused_body(node: &Node, reason: &str) -> String {
    let mut body = String::from("the app backend refused this connection");
    if !reason.is_empty() {
        body.push_str(": ");
        body.push_str(reason);
    }
    if let Some(page) = &node.config.hooks.page_url {
        body.push_str(&format!(" (sign in at {page})"));
    }
    body.push('\n');
    body
}

/// Logs a connect refused by the connect hook (rate-limited,
/// `crate::refusals`).
fn log_connect_refused(node: &Node, transport: &str, reason: &str) {
    let detail = crate::refusals::Lazy(|f| {
        let reason = if reason.is_empty() {
            "(no reason given)"
        } else {
            reason
        };
        write!(
            f,
            "{transport}: the app backend's connect hook said {reason:?}"
        )
    });
    node.refusals.note(
        crate::refusals::Reason::ConnectHook,
        "connect refused (403)",
        &detail,
    );
}

/// The user an accepted connect hook leaves the socket with: the backend's,
/// else the one a token authenticated; written into what the socket
/// connected with, so channels see it too.
fn accepted_user(
    backend: Option<crate::hooks::UserId>,
    token: Option<String>,
    connect: &mut Option<crate::channel::ConnectInfo>,
) -> Option<String> {
    let user = backend.map(crate::hooks::UserId::into_string).or(token);
    if let (Some(c), Some(u)) = (connect.as_mut(), &user) {
        c.user_id = Some(u.clone());
    }
    user
}
