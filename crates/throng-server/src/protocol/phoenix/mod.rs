//! The Phoenix Channels protocol, as Phoenix 1.7/1.8 and phoenix.js speak
//! it: one folder over the engine (`crate::engine`), which knows no
//! protocol. [`Phoenix`] is what the engine calls
//! ([`Protocol`](crate::engine::Protocol)); the rest is Phoenix's alone:
//! - `upgrade.rs`: its routes on the public port (`/socket/websocket`,
//!   `/socket/check` in `check.rs`, and `/socket/longpoll` for
//!   `longpoll/`), the upgrade's `vsn`, params and `authToken`;
//! - `socket/`: the socket state machine (heartbeat, join, leave, duplicate
//!   join, dispatch, replies; joins and pushes through the app backend's
//!   hooks; presence), with no I/O, as `Phoenix.Socket`;
//! - `shard.rs`: what Phoenix keeps on a shard and one call's view of it
//!   ([`shard::Phx`]): a message decoded with the socket's serializer into
//!   the state machine, infos, a socket's end, a history replay's answer;
//!   `transport.rs`: the state machine's port on a shard;
//! - `hooks.rs`: the app backend's connect hook and the answers to a
//!   socket's hook calls (`crate::hooks` is the client and its waits);
//! - `longpoll/`: the long-poll transport (sessions, requests, forwarding
//!   to the node that holds a session), which runs the same socket;
//! - `chat.rs`, `relay.rs`, `echo.rs`: channels (the benchmark's chat app,
//!   the channel of topics only config rules describe, a test channel),
//!   written with the app-facing API of `crate::channel`.

pub mod chat;
mod check;
pub mod echo;
mod hooks;
pub(crate) mod longpoll;
pub mod relay;
pub(crate) mod shard;
pub(crate) mod socket;
mod transport;
pub(crate) mod upgrade;

use std::collections::HashMap;

use throng_protocol::{Opcode, Vsn, Wire};

use crate::config::Config;
use crate::engine::close::CloseReason;
use crate::engine::http::Route;
use crate::engine::http::{Head, Upgrade, MAX_REQUEST_HEAD};
use crate::engine::outlet::{Closed, Outlet, SessionWork};
use crate::engine::{Conns, Cx, Protocol};
use crate::metrics::ShardStats;
use crate::node::{Node, ShardMsg};
use longpoll::http::LongPoll;
use socket::{Scratch, Tracked};

/// What Phoenix keeps on a shard.
pub(crate) struct State {
    /// Buffers a socket call borrows, so that a message costs no allocation.
    pub scratch: Scratch,
    pub parts: Parts,
}

/// The parts of [`State`] a socket's transport reaches.
pub(crate) struct Parts {
    /// Long-poll sessions owned here and requests waited on here.
    pub lp: longpoll::State,
    /// Joins and pushes waiting for the app backend (`crate::hooks`).
    pub hook_waits: crate::hooks::Waits,
    /// Presences of this shard's joins, by (registry key, registry topic
    /// index); empty unless presence is in use.
    pub tracked: HashMap<(usize, u32), Tracked>,
}

impl State {
    pub fn new(node: &Node) -> State {
        State {
            scratch: Scratch::default(),
            parts: Parts {
                lp: longpoll::State::new(
                    node.backplane.node_id(),
                    node.config
                        .longpoll_window
                        .map_or(0, |w| w.as_millis() as u64),
                    node.config.max_outbound_bytes,
                    node.config.max_message_bytes,
                ),
                hook_waits: Default::default(),
                tracked: HashMap::new(),
            },
        }
    }
}

/// One call's view of the shard for Phoenix.
pub(crate) struct Phx<'a> {
    pub node: &'a Node,
    pub conns: &'a mut Conns,
    pub parts: &'a mut Parts,
    pub scratch: &'a mut Scratch,
}

impl<'a> Phx<'a> {
    /// The view of what the engine lends.
    pub fn of(cx: &'a mut Cx<'_, State>) -> Phx<'a> {
        Phx {
            node: cx.node,
            conns: &mut *cx.conns,
            parts: &mut cx.me.parts,
            scratch: &mut cx.me.scratch,
        }
    }
}

/// The Phoenix Channels protocol, for the engine.
pub(crate) struct Phoenix;

impl Protocol for Phoenix {
    type Shard = State;
    type Open = upgrade::Open;
    type Request = LongPoll;

    fn shard(&self, node: &Node, _id: usize) -> State {
        State::new(node)
    }

    fn route(
        &self,
        head: &Head<'_, '_>,
        config: &Config,
    ) -> Option<Route<upgrade::Open, LongPoll>> {
        match head.path {
            upgrade::WEBSOCKET_PATH => Some(upgrade::websocket(head, config)),
            check::CHECK_PATH => Some(check::route(head, config)),
            upgrade::LONGPOLL_PATH if config.longpoll_window.is_some() => {
                Some(longpoll::http::request(head, config))
            }
            _ => None,
        }
    }

    fn upgraded(&self, cx: &mut Cx<'_, State>, key: usize, up: Upgrade<upgrade::Open>) {
        with(cx, |phx| phx.upgraded(key, up));
    }

    fn request(&self, cx: &mut Cx<'_, State>, key: usize, req: LongPoll) {
        with(cx, |phx| phx.lp_http(key, req));
    }

    fn message(&self, cx: &mut Cx<'_, State>, key: usize, wire: Wire, op: Opcode, data: &[u8]) {
        let vsn = wire.vsn().unwrap_or(Vsn::V2);
        with(cx, |phx| phx.message(key, vsn, op, data));
    }

    fn closed(&self, cx: &mut Cx<'_, State>, closed: Closed) {
        with(cx, |phx| phx.closed(closed));
    }

    fn holds(&self, me: &State, key: usize) -> Option<usize> {
        if me.parts.lp.is_waiting(key) {
            // As much as one more request may be; more is not HTTP a
            // client would send while it waits for the answer.
            return Some(MAX_REQUEST_HEAD + me.parts.lp.max_request_body);
        }
        // An upgrade waits for the connect hook: nothing more is read until
        // it is answered (a client sends nothing before the 101; the head
        // deadline bounds one that does).
        (me.parts.hook_waits.held(key) > 0).then_some(usize::MAX)
    }

    fn answering(&self, me: &State, key: usize) -> bool {
        me.parts.lp.is_waiting(key)
    }

    fn session(&self, cx: &mut Cx<'_, State>, work: SessionWork) {
        with(cx, |phx| match work {
            SessionWork::Deliver(idx, b) => phx.lp_deliver(idx, &b),
            SessionWork::Doom(idx, reason) => phx.parts.lp.doom(idx, reason),
        });
    }

    fn inbox(&self, cx: &mut Cx<'_, State>, msg: ShardMsg) {
        with(cx, |phx| match msg {
            ShardMsg::Info(topic, info) => phx.info(&topic, &info),
            ShardMsg::LongPoll(req) => phx.lp_request(*req),
            ShardMsg::LongPollAnswer(a) => phx.lp_answer(a.reply, &a.body),
            ShardMsg::Hook(a) => phx.hook_answer(*a),
            ShardMsg::Replay(a) => phx.replay_answer(*a),
            ShardMsg::Broadcast(_)
            | ShardMsg::Disconnect(_)
            | ShardMsg::Report(_)
            | ShardMsg::HistoryLost(_)
            | ShardMsg::Pusher(_) => {}
        });
    }

    fn turn_end(&self, cx: &mut Cx<'_, State>) {
        with(cx, |phx| phx.lp_flush());
    }

    fn sweep(&self, cx: &mut Cx<'_, State>) {
        with(cx, |phx| phx.lp_sweep());
    }

    fn behind(&self, me: &State) -> bool {
        me.parts.lp.behind
    }

    fn sizes(&self, me: &State, sizes: &mut crate::metrics::TableSizes) {
        let p = &me.parts;
        sizes.hook_waits = p.hook_waits.len();
        sizes.hook_socket_ids = p.hook_waits.socket_ids_len();
        sizes.hook_assigns = p.hook_waits.assigns.len();
        sizes.presence_joins = p.tracked.len();
        sizes.longpoll_requests_waiting = p.lp.waiting.len();
        sizes.longpoll_rate_entries = p.lp.starts.len();
    }
}

/// Runs `f` on Phoenix's view of the shard, then ends the sessions it
/// doomed.
fn with(cx: &mut Cx<'_, State>, f: impl FnOnce(&mut Phx<'_>)) {
    let mut phx = Phx::of(cx);
    phx.parts.lp.now_ms = phx.conns.clock_ms;
    f(&mut phx);
    while let Some((idx, reason)) = phx.parts.lp.doomed.pop() {
        phx.lp_end(idx, reason);
    }
}

impl Phx<'_> {
    /// Phoenix's `connect/3` for an upgrade of connection `key`: a token
    /// refused is a 403 before the upgrade; with the connect hook the
    /// upgrade waits for the app backend; else the socket opens.
    fn upgraded(&mut self, key: usize, up: Upgrade<upgrade::Open>) {
        let upgrade::Open {
            mut connect,
            hook_headers,
            check,
        } = up.open;
        let mut user = None;
        match self.node.auth.authenticate(connect.as_ref()) {
            Ok(None) => {}
            Ok(Some(found)) => user = Some(authenticated(&mut connect, found)),
            Err(refusal) => {
                ShardStats::add(&self.conns.stats.auth_refusals, 1);
                let why = (&refusal).into();
                self.node
                    .refusals
                    .note(why, "connect refused (403)", &refusal);
                let body = format!("{refusal}\n");
                let resp = crate::page::error_response(403, "Forbidden", "", &body);
                self.conns.send(key, &resp);
                self.conns.close(self.node, key, CloseReason::Finished);
                return;
            }
        }
        let vsn = up.wire.vsn().unwrap_or(Vsn::V2);
        if self.node.config.hooks.connect {
            let held = crate::hooks::HeldUpgrade {
                response: up.response,
                vsn,
                deflate: up.deflate,
                connect,
                user,
                check,
            };
            return self.hook_connect(key, held, &hook_headers);
        }
        if check {
            // `/socket/check`: the connect would pass.
            self.conns.send(key, &up.response);
            self.conns.close(self.node, key, CloseReason::Finished);
            return;
        }
        if !self
            .conns
            .open_websocket(key, &up.response, up.wire, up.deflate, connect)
        {
            return;
        }
        self.connect_event(key, "websocket", user.as_deref());
        if let Some(user) = user {
            self.conns.users.add(&user, Outlet::Conn(key).key() as u32);
        }
    }
}

/// What a socket (or long-poll session) keeps of its connect info once
/// `found` is authenticated; returns the user's id. The verified token is
/// not kept (it is the largest thing an idle socket would hold), and the
/// user's id lives in the shard's `Users` table: the connect info stays only
/// when the client sent other params or the token limits its channels.
pub(crate) fn authenticated(
    connect: &mut Option<crate::channel::ConnectInfo>,
    found: crate::auth::User,
) -> String {
    if let Some(c) = connect.as_mut() {
        c.auth_token = None;
        c.params.retain(|(k, _)| k != "token");
    }
    if found.channels.is_some() {
        connect.get_or_insert_with(Default::default).channels = found.channels;
    }
    if let Some(c) = connect.as_mut() {
        if c.params.is_empty() && c.channels.is_none() {
            *connect = None;
        } else {
            c.params.shrink_to_fit();
            c.user_id = Some(found.id.clone());
        }
    }
    found.id
}
