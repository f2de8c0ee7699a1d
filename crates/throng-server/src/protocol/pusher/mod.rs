//! The Pusher Channels protocol, as pusher-js, Laravel Echo and the Pusher
//! SDKs speak it (protocol version 7; 5 and 6 as Pusher takes them), over
//! the same engine as Phoenix: one folder, which implements
//! [`Protocol`](crate::engine::Protocol). The wire (frames, names,
//! signatures) is `throng_protocol::pusher`; `docs/pusher-design.md` gives
//! the design and why each answer is the one it is.
//!
//! - `upgrade.rs`: `/app/{key}?protocol=7`, upgraded even when refused, so
//!   the refusal reaches pusher-js as Pusher's close code;
//! - `apps.rs`: the apps (`--pusher-app`, `[[pusher.apps]]`) and their
//!   sockets on this node; `ids.rs`: socket ids;
//! - `socket.rs`: what a socket sends (ping, subscribe, unsubscribe,
//!   sign-in, client events); `presence.rs`: presence channels;
//! - `api/`: the HTTP API (`/apps/{id}/...`, signed), its triggers and its
//!   answers from the cluster's figures;
//!   `cache.rs`: cache channels' last event; `webhooks.rs`: what goes to
//!   the app's webhooks;
//! - this file: [`Pusher`] for the engine, and what it keeps per shard
//!   ([`State`]). A socket costs nothing beside its connection: its id's
//!   secret is the 4 bytes its socket state keeps for its protocol
//!   (`SocketState::tag`, in room the struct's alignment left), and its app
//!   is the only one, or, when several are configured, 2 bytes by
//!   connection key on its shard.
//!
//! A channel is the engine's topic `pusher/<app id>/<channel>`: Pusher and
//! Phoenix names are apart, and a broadcast on it is the Pusher frame
//! itself, made once by whoever sends it.

mod api;
mod apps;
mod cache;
mod ids;
mod presence;
mod socket;
mod upgrade;
mod webhooks;

use std::sync::Arc;

use throng_protocol::pusher::server;
use throng_protocol::{Opcode, Wire};
use throng_pubsub::Broadcast;

use crate::auth::PushLimit;
use crate::config::pusher::PusherConfig;
use crate::config::Config;
use crate::engine::close::CloseReason;
use crate::engine::conn::{Conn, Kind, Mark};
use crate::engine::http::{Head, Route, Upgrade};
use crate::engine::outlet::Closed;
use crate::engine::{Conns, Cx, Protocol};
use crate::metrics::ShardStats;
use crate::node::{Node, ShardMsg};
pub(crate) use api::Request;
pub(crate) use apps::Apps;
pub(crate) use upgrade::Open;

/// Seconds a pinged socket has to answer before it is closed with 4201
/// (Pusher's protocol page, Sockudo: 30), at most: with an activity
/// timeout shorter than that, as long as it.
const PONG_WAIT: u32 = 30;

/// The Pusher Channels protocol, for the engine.
pub(crate) struct Pusher {
    pub apps: Arc<Apps>,
    ids: ids::Ids,
    activity_timeout: u32,
    client_event_rate: u32,
    /// `--pusher-client-event-rate`, as a budget kept in each socket's push
    /// budget (4 bytes, no timer).
    client_limit: PushLimit,
    /// `--pusher-max-api-body-bytes`.
    max_api_body: usize,
    /// The HTTP API's answers from the cluster, and their bounds.
    figures: api::Figures,
}

impl Pusher {
    pub fn new(config: &PusherConfig) -> Pusher {
        let rate = f64::from(config.client_event_rate);
        Pusher {
            apps: Arc::new(Apps::new(config.apps.clone())),
            ids: ids::Ids::new(),
            activity_timeout: config.activity_timeout,
            client_event_rate: config.client_event_rate,
            client_limit: PushLimit::new(rate, config.client_event_rate.max(1), 0),
            max_api_body: config.max_api_body_bytes,
            figures: api::Figures::new(
                config.max_api_requests,
                std::time::Duration::from_secs(config.api_timeout),
            ),
        }
    }
}

/// A Pusher socket's app and the secret part of its id (never 0: a socket
/// whose `tag` is 0 is no Pusher socket, or a refused one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sock {
    pub app: u16,
    pub secret: u32,
}

/// What Pusher keeps on a shard.
pub(crate) struct State {
    /// By connection key, each Pusher socket's app, when more than one app
    /// is configured (empty with one: every socket is app 0's).
    apps: Vec<u16>,
    secrets: ids::Secrets,
    /// The body of the frame being written (no allocation per message).
    scratch: Vec<u8>,
    /// The HTTP API requests its connections hold.
    api: api::Held,
}

/// One call's view of the shard for Pusher.
pub(crate) struct Px<'a> {
    pub node: &'a Node,
    pub conns: &'a mut Conns,
    pub pusher: &'a Pusher,
    pub apps: &'a mut Vec<u16>,
    pub scratch: &'a mut Vec<u8>,
}

impl Px<'_> {
    fn of<'a>(pusher: &'a Pusher, cx: &'a mut Cx<'_, State>) -> Px<'a> {
        Px {
            node: cx.node,
            conns: &mut *cx.conns,
            pusher,
            apps: &mut cx.me.apps,
            scratch: &mut cx.me.scratch,
        }
    }

    fn sock(&self, key: usize) -> Option<Sock> {
        let secret = self.conns.slab.get(key)?.socket.tag;
        if secret == 0 {
            return None;
        }
        let app = self.apps.get(key).copied().unwrap_or(0);
        Some(Sock { app, secret })
    }
}

impl Protocol for Pusher {
    type Shard = State;
    type Open = Open;
    type Request = Request;

    fn shard(&self, _node: &Node, _id: usize) -> State {
        State {
            apps: Vec::new(),
            secrets: ids::Secrets::new(),
            scratch: Vec::with_capacity(256),
            api: api::Held::default(),
        }
    }

    fn route(&self, head: &Head<'_, '_>, config: &Config) -> Option<Route<Open, Request>> {
        upgrade::route(head, config, &self.apps).or_else(|| api::route(head, config, &self.apps))
    }

    fn upgraded(&self, cx: &mut Cx<'_, State>, key: usize, up: Upgrade<Open>) {
        let secret = cx.me.secrets.draw();
        let (wire, conns) = (up.wire, &mut *cx.conns);
        // The 101 and `connection_established` in one write.
        if !conns.open_websocket_gathered(key, &up.response, wire, up.deflate, None) {
            return;
        }
        let app = match up.open {
            Open::App(app) if self.apps.admit(app) => app,
            Open::App(app) => {
                let why = format!(
                    "app {} holds its max_connections ({}) on this server: try later",
                    self.apps.get(app).id,
                    self.apps.open(app)
                );
                cx.conns.flush_reply(key);
                return refuse(cx, key, 4004, &why);
            }
            Open::Refused(code, why) => {
                cx.conns.flush_reply(key);
                return refuse(cx, key, code, &why);
            }
        };
        if let Some(c) = cx.conns.slab.get_mut(key) {
            c.socket.tag = secret;
        }
        if app != 0 || !cx.me.apps.is_empty() {
            let apps = &mut cx.me.apps;
            if apps.len() <= key {
                apps.resize(key + 1, 0);
            }
            apps[key] = app;
        }
        ShardStats::add(&cx.conns.stats.pusher_sockets, 1);
        let id = self.ids.of(cx.conns.id, key, secret);
        let mut px = Px::of(self, cx);
        let timeout = self.activity_timeout;
        px.out(key, |o| server::connection_established(o, &id, timeout));
        px.conns.flush_reply(key);
    }

    fn request(&self, cx: &mut Cx<'_, State>, key: usize, req: Request) {
        api::request(self, cx, key, req);
    }

    fn message(&self, cx: &mut Cx<'_, State>, key: usize, _wire: Wire, op: Opcode, data: &[u8]) {
        let mut px = Px::of(self, cx);
        let Some(sock) = px.sock(key) else {
            return;
        };
        if op == Opcode::Binary {
            let why = "binary messages are not part of the Pusher protocol: send JSON text";
            px.error(key, 4300, why);
            px.conns.flush_reply(key);
            return;
        }
        px.message(key, sock, data);
    }

    fn closed(&self, cx: &mut Cx<'_, State>, closed: Closed) {
        let Closed { key, socket, .. } = closed;
        let Some((Wire::Pusher, mut socket)) = socket else {
            // A connection that was no socket: an API request it held.
            return api::closed(cx, key);
        };
        if socket.tag == 0 {
            return; // refused
        }
        let app = cx.me.apps.get(key).copied().unwrap_or(0);
        let sock = Sock {
            app,
            secret: socket.tag,
        };
        let mut px = Px::of(self, cx);
        for join in socket.joins.drain(..) {
            px.leave(key, sock, join);
        }
        self.apps.release(sock.app);
        ShardStats::sub(&px.conns.stats.pusher_sockets, 1);
    }

    fn holds(&self, me: &State, key: usize) -> Option<usize> {
        api::holds(self, me, key)
    }

    fn answering(&self, me: &State, key: usize) -> bool {
        api::answering(me, key)
    }

    fn inbox(&self, cx: &mut Cx<'_, State>, msg: ShardMsg) {
        match msg {
            ShardMsg::Pusher(msg) => api::inbox(self, cx, *msg),
            ShardMsg::Replay(a) => {
                let mut px = Px::of(self, cx);
                px.cache_answer(*a);
            }
            _ => {}
        }
    }

    fn sweep(&self, cx: &mut Cx<'_, State>) {
        api::sweep(self, cx);
    }

    fn delivers(&self, conn: &Conn, topic: u32, b: &Broadcast) -> bool {
        presence::delivers(conn, topic, b)
    }

    fn idle_after(&self, wire: Wire) -> Option<u32> {
        (wire == Wire::Pusher).then_some(self.activity_timeout)
    }

    fn idle(&self, cx: &mut Cx<'_, State>, key: usize, wire: Wire, quiet: u32) -> bool {
        if wire != Wire::Pusher {
            return false;
        }
        let mark = match cx.conns.slab.get_mut(key).map(|c| &mut c.kind) {
            Some(Kind::Ws { mark, .. }) => mark,
            _ => return true,
        };
        if *mark != Mark::Pinged {
            // Pusher's protocol page: after activity_timeout without a
            // message, the server pings; the answer (any message) clears it.
            *mark = Mark::Pinged;
            let mut px = Px::of(self, cx);
            px.out(key, server::ping);
            px.conns.flush_reply(key);
            return true;
        }
        // Pinged and still silent: closed with 4201 (the idle close's code
        // for a Pusher socket) once the pong's wait is over.
        quiet < self.activity_timeout + PONG_WAIT.min(self.activity_timeout)
    }
}

/// Refuses the Pusher socket of connection `key`, upgraded: `pusher:error`
/// with `code`, then a close with it.
fn refuse(cx: &mut Cx<'_, State>, key: usize, code: u16, why: &str) {
    let mut frame = Vec::new();
    server::error(&mut frame, Some(code), why);
    cx.conns.frame_out(Opcode::Text, &frame);
    cx.node.refusals.note(
        crate::refusals::Reason::Pusher,
        "Pusher connect refused",
        &format_args!("{code}: {why}"),
    );
    cx.conns
        .close(cx.node, key, CloseReason::Refused { code, text: why });
}

/// The users table's entry of Pusher user `user` of app `app_id` (apart
/// from Phoenix's users, and from other apps').
pub(crate) fn user_entry(app_id: &str, user: &str) -> String {
    format!("pusher/{app_id}/{user}")
}

/// The user of a users table entry of app `app_id`, if it is one.
pub(crate) fn user_of_entry<'e>(app_id: &str, entry: &'e str) -> Option<&'e str> {
    socket::channel_of(entry, app_id)
}
