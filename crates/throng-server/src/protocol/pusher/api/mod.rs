//! Pusher's HTTP API on the public port (the same host and port as the
//! sockets, as Laravel's broadcasting config and the SDKs assume), signed
//! as Pusher's: what an app's backend calls through the official server
//! SDKs (`pusher` for Node, Python, PHP, ...).
//!
//! - `route.rs`: the routes, the signature and the body's bound, from the
//!   head (a refusal before the body is read);
//! - `trigger.rs`: `POST /apps/{id}/events`, `/batch_events` and
//!   `/users/{user}/events` published, each frame made once, leaving out
//!   the `socket_id` the request names on whichever node it is;
//! - `figures.rs`: the answers that need the cluster (channel counts,
//!   occupancy, users, a trigger's `info`), worked out off the shards;
//! - this file: the request as the shard gets it, the answers, and the
//!   requests its connections hold meanwhile ([`Held`]): the connection
//!   reads nothing more until its answer goes out, at most
//!   `--pusher-max-api-requests` wait on a node at once (503 past it) and
//!   each at most `--pusher-api-timeout` (504).
//!
//! `POST /apps/{id}/users/{user}/terminate_connections` closes the user's
//! sockets on every node with 4009 (the users table's entry of a signed-in
//! Pusher user, `super::user_entry`, through the node's disconnect).
//!
//! Every answer is JSON; a refusal is `{"error": message}` with Pusher's
//! status. `/metrics` counts them by route and status.

mod figures;
mod route;
mod trigger;

use std::collections::HashMap;

use throng_protocol::pusher::channels::Info;
use throng_protocol::pusher::trigger::{self as wire, Limits, Trigger, MAX_BATCH};

use super::{Pusher, State};
use crate::engine::close::CloseReason;
use crate::engine::http::MAX_REQUEST_HEAD;
use crate::engine::Cx;
use crate::forward::pusher::PusherMsg;
use crate::metrics::ShardStats;
pub(crate) use figures::Figures;
use figures::Question;
pub(crate) use route::route;

/// An HTTP API request, as its route made it.
pub(crate) struct Request {
    /// Its index in `crate::metrics::PUSHER_API_ROUTES`.
    pub route: usize,
    pub keep_alive: bool,
    pub ask: Ask,
}

/// What an HTTP API request asks (its app an index of the apps).
pub(crate) enum Ask {
    /// Refused before the body was read: answered, then closed.
    Refused {
        status: u16,
        message: String,
    },
    Events {
        app: u16,
        body: Vec<u8>,
    },
    Batch {
        app: u16,
        body: Vec<u8>,
    },
    Channels {
        app: u16,
        prefix: Option<String>,
        user_count: bool,
    },
    Channel {
        app: u16,
        channel: String,
        info: Info,
    },
    Users {
        app: u16,
        channel: String,
    },
    Terminate {
        app: u16,
        user: String,
    },
    UserEvents {
        app: u16,
        user: String,
        body: Vec<u8>,
    },
}

/// The API requests a shard's connections hold, by connection key.
#[derive(Default)]
pub(crate) struct Held {
    waiting: HashMap<usize, Waiting>,
    next: u64,
}

/// A held request.
struct Waiting {
    /// The shard's number for it (a late answer for a request since
    /// answered 504 finds another number, or none).
    id: u64,
    route: usize,
    since_ms: u64,
    keep_alive: bool,
}

/// A request of its own on connection `key`.
pub(super) fn request(p: &Pusher, cx: &mut Cx<'_, State>, key: usize, req: Request) {
    let Request {
        route,
        keep_alive,
        ask,
    } = req;
    let reply = |cx: &mut Cx<'_, State>, status: u16, body: &[u8]| {
        respond(cx, key, route, status, body, keep_alive);
    };
    let app_id = |app: u16| p.apps.get(app).id.clone();
    let question = match ask {
        Ask::Refused { status, message } => {
            if status == 401 {
                cx.node.refusals.note(
                    crate::refusals::Reason::Pusher,
                    "Pusher HTTP API request refused (401)",
                    &message,
                );
            }
            return respond(cx, key, route, status, &error_body(&message), false);
        }
        Ask::Events { app, body } => match wire::parse_events(&body, &limits(p, app)) {
            Ok(t) => match published(p, cx, app, std::slice::from_ref(&t)) {
                None => return reply(cx, 200, b"{}"),
                Some(_) => Question::Events {
                    app_id: app_id(app),
                    channels: t.channels.iter().map(|c| c.to_string()).collect(),
                    info: t.info,
                },
            },
            Err(e) => return reply(cx, e.status(), &error_body(e.message())),
        },
        Ask::Batch { app, body } => match wire::parse_batch(&body, &limits(p, app)) {
            Ok(batch) => match published(p, cx, app, &batch) {
                None => return reply(cx, 200, b"{}"),
                Some(items) => Question::Batch {
                    app_id: app_id(app),
                    items,
                },
            },
            Err(e) => return reply(cx, e.status(), &error_body(e.message())),
        },
        Ask::UserEvents { app, user, body } => {
            match wire::parse_user_event(&body, &user, &limits(p, app)) {
                Ok(t) => match published(p, cx, app, std::slice::from_ref(&t)) {
                    None => return reply(cx, 200, b"{}"),
                    Some(_) => Question::Events {
                        app_id: app_id(app),
                        channels: t.channels.iter().map(|c| c.to_string()).collect(),
                        info: t.info,
                    },
                },
                Err(e) => return reply(cx, e.status(), &error_body(e.message())),
            }
        }
        Ask::Terminate { app, user } => {
            terminate(cx, &p.apps.get(app).id, &user);
            return reply(cx, 200, b"{}");
        }
        Ask::Channels {
            app,
            prefix,
            user_count,
        } => Question::Channels {
            app_id: app_id(app),
            prefix,
            user_count,
        },
        Ask::Channel { app, channel, info } => Question::Channel {
            app_id: app_id(app),
            channel,
            info,
        },
        Ask::Users { app, channel } => Question::Users {
            app_id: app_id(app),
            channel,
        },
    };
    hold(p, cx, key, route, keep_alive, question);
}

/// The trigger bounds of app `app`.
fn limits(p: &Pusher, app: u16) -> Limits {
    Limits {
        max_event_bytes: p.apps.get(app).max_event_bytes,
        max_batch: MAX_BATCH,
    }
}

/// Publishes `triggers`; `Some` with each one's channel and `info` when
/// any asked for `info` (its answer then needs the cluster's figures).
fn published(
    p: &Pusher,
    cx: &mut Cx<'_, State>,
    app: u16,
    triggers: &[Trigger<'_>],
) -> Option<Vec<Option<(String, Info)>>> {
    for t in triggers {
        trigger::publish(p, cx, app, t);
    }
    triggers.iter().any(|t| t.info.any()).then(|| {
        triggers
            .iter()
            .map(|t| {
                let first = t.channels.first().map(|c| c.to_string());
                first.filter(|_| t.info.any()).map(|c| (c, t.info))
            })
            .collect()
    })
}

/// Closes every socket of Pusher user `user` of app `app_id`, on every
/// node, with 4009 (Pusher's code for a terminated user: pusher-js then
/// stays disconnected).
fn terminate(cx: &mut Cx<'_, State>, app_id: &str, user: &str) {
    let entry = super::user_entry(app_id, user);
    match cx.node.this.get().and_then(std::sync::Weak::upgrade) {
        Some(node) => crate::node::Endpoint::new(node).disconnect(&entry, false),
        None => tracing::warn!("terminate_connections: the node is stopping"),
    }
}

/// Holds connection `key`'s request until the figures `q` asks for come
/// back; 503 at once when the node has `--pusher-max-api-requests` waiting.
fn hold(
    p: &Pusher,
    cx: &mut Cx<'_, State>,
    key: usize,
    route: usize,
    keep_alive: bool,
    q: Question,
) {
    let held = &mut cx.me.api;
    held.next += 1;
    let id = held.next;
    if !p.figures.ask(cx.node, cx.conns.id, key, id, q) {
        let why = format!(
            "{} Pusher HTTP API requests are waiting on this server, the most it takes \
             (--pusher-max-api-requests): retry shortly",
            p.figures.max()
        );
        return respond(cx, key, route, 503, &error_body(&why), keep_alive);
    }
    let since_ms = cx.conns.clock_ms;
    cx.me.api.waiting.insert(
        key,
        Waiting {
            id,
            route,
            since_ms,
            keep_alive,
        },
    );
    ShardStats::add(&cx.conns.stats.pusher_api_waiting, 1);
}

/// Writes an answer on connection `key` (counted by route and status);
/// closes it after unless `keep_alive`.
fn respond(
    cx: &mut Cx<'_, State>,
    key: usize,
    route: usize,
    status: u16,
    body: &[u8],
    keep_alive: bool,
) {
    cx.conns.stats.pusher_api_answered(route, status);
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Payload Too Large",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nServer: throng\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{}{}\r\n",
        body.len(),
        if status == 503 {
            "Retry-After: 1\r\n"
        } else {
            ""
        },
        if keep_alive {
            ""
        } else {
            "Connection: close\r\n"
        },
    )
    .into_bytes();
    out.extend_from_slice(body);
    cx.conns.send(key, &out);
    if !keep_alive {
        cx.conns.close(cx.node, key, CloseReason::Finished);
    } else if let Some(conn) = cx.conns.slab.get_mut(key) {
        // The next request's head deadline starts now.
        conn.last_active = cx.conns.now;
    }
}

/// `{"error": message}`.
fn error_body(message: &str) -> Vec<u8> {
    serde_json::json!({ "error": message })
        .to_string()
        .into_bytes()
}

/// Connection `key` ended: whatever it held is dropped (its answer, if it
/// comes, finds no one).
pub(super) fn closed(cx: &mut Cx<'_, State>, key: usize) {
    if cx.me.api.waiting.remove(&key).is_some() {
        ShardStats::sub(&cx.conns.stats.pusher_api_waiting, 1);
    }
}

/// How much connection `key` may send while its request is held: one
/// more request at most.
pub(super) fn holds(p: &Pusher, me: &State, key: usize) -> Option<usize> {
    me.api
        .waiting
        .contains_key(&key)
        .then_some(MAX_REQUEST_HEAD + p.max_api_body)
}

/// Whether connection `key` waits on an answer (not a slow client).
pub(super) fn answering(me: &State, key: usize) -> bool {
    me.api.waiting.contains_key(&key)
}

/// A message of the shard's inbox for the HTTP API.
pub(super) fn inbox(p: &Pusher, cx: &mut Cx<'_, State>, msg: PusherMsg) {
    match msg {
        PusherMsg::Exclude {
            broadcasts,
            key,
            secret,
        } => trigger::deliver_excluding(cx, &broadcasts, key, secret),
        PusherMsg::Remote(t) => trigger::deliver_remote(p, cx, &t),
        PusherMsg::Answer {
            key,
            id,
            status,
            body,
        } => answer(cx, key, id, status, &body),
    }
}

/// The answer to request `id` of connection `key`, if it still waits.
fn answer(cx: &mut Cx<'_, State>, key: usize, id: u64, status: u16, body: &[u8]) {
    let held = &mut cx.me.api.waiting;
    if held.get(&key).is_none_or(|w| w.id != id) {
        return;
    }
    let Some(w) = held.remove(&key) else {
        return;
    };
    ShardStats::sub(&cx.conns.stats.pusher_api_waiting, 1);
    respond(cx, key, w.route, status, body, w.keep_alive);
    let more = cx
        .conns
        .slab
        .get(key)
        .and_then(|c| c.extra.as_ref())
        .is_some_and(|e| !e.input.is_empty());
    if w.keep_alive && more {
        // What it sent meanwhile is read now.
        cx.conns.resume.push(key);
    }
}

/// Once a second: a request whose answer is later than
/// `--pusher-api-timeout` (and the figures' own bound of it) gets 504.
pub(super) fn sweep(p: &Pusher, cx: &mut Cx<'_, State>) {
    if cx.me.api.waiting.is_empty() {
        return;
    }
    let now = cx.conns.clock_ms;
    let late_ms = p.figures.timeout().as_millis() as u64 + 2000;
    let late: Vec<(usize, u64)> = cx
        .me
        .api
        .waiting
        .iter()
        .filter(|(_, w)| now.saturating_sub(w.since_ms) >= late_ms)
        .map(|(&key, w)| (key, w.id))
        .collect();
    for (key, id) in late {
        let why = format!(
            "no answer from the cluster within {} s (--pusher-api-timeout): retry",
            p.figures.timeout().as_secs()
        );
        answer(cx, key, id, 504, &error_body(&why));
    }
}

/// An API answer for connection `key`'s request `id`, for its shard's
/// inbox.
fn answer_msg(key: usize, id: u64, status: u16, body: Vec<u8>) -> Box<PusherMsg> {
    Box::new(PusherMsg::Answer {
        key,
        id,
        status,
        body,
    })
}
