//! The Pusher side of the engine (`--protocol pusher`, see
//! [`crate::pusher`]): a socket is open once `pusher:connection_established`
//! arrives (state `Establishing` until then), a subscription is answered
//! by `pusher_internal:subscription_succeeded` (timed as a join) or
//! `pusher:subscription_error`, a stamped event is a broadcast receipt, a
//! server's `pusher:ping` is answered `pusher:pong`, and a `pusher:error`
//! (such as a client event over the rate, 4301) is an error of the run,
//! counted by its code.
//!
//! Per socket, nothing is added to the `Conn`: a private channel's
//! signature covers the socket id, which is kept in [`PusherSide::ids`]
//! only from `connection_established` to the subscription that signs with
//! it (or the socket's end). Broadcasts through the HTTP API leave from
//! the agent's trigger thread ([`crate::pusher::trigger`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

use throng_protocol::frame::Opcode;
use throng_protocol::pusher::{event, server, signature, SocketId};

use super::conn::{State, F_AWAIT_JOIN};
use super::Engine;
use crate::pusher::trigger::{Api, TriggerThread};
use crate::pusher::PusherSpec;
use crate::scenario::{find_stamp, Op, Program, SendKind, Template};
use crate::sys;

/// What the engine keeps for a run over Pusher.
pub(super) struct PusherSide {
    key: String,
    secret: String,
    /// The socket id of each connection whose subscription is still to be
    /// signed (only when a program subscribes to a private channel).
    ids: HashMap<u32, SocketId>,
    signs: bool,
    /// `pusher:ping`, the heartbeat.
    pub(super) ping: Template,
    /// Broadcasts through the HTTP API (when a program triggers).
    trigger: Option<TriggerThread>,
    /// Trigger failures already counted as errors.
    failed_seen: u64,
}

impl PusherSide {
    /// The side of `spec`'s run: `secret` signs subscriptions and triggers
    /// (`--pusher-app`'s), `api` is where triggers go.
    pub(super) fn new(
        spec: &PusherSpec,
        secret: String,
        programs: &[Program],
        api: impl FnOnce() -> Api,
    ) -> std::io::Result<PusherSide> {
        let sends = |f: &dyn Fn(&Op) -> bool| programs.iter().any(|p| p.ops.iter().any(f));
        let signs = sends(&|op| matches!(op, Op::Send { auth: Some(_), .. }));
        let triggers = sends(&|op| {
            matches!(
                op,
                Op::Send {
                    kind: SendKind::Trigger,
                    ..
                }
            )
        });
        Ok(PusherSide {
            key: spec.key.clone(),
            secret,
            ids: HashMap::new(),
            signs,
            ping: Template::parse(crate::pusher::PING).expect("static ping template"),
            trigger: triggers.then(|| TriggerThread::start(api())).transpose()?,
            failed_seen: 0,
        })
    }

    /// The signature of connection `token`'s subscription to `channel`
    /// (its socket id is then forgotten).
    pub(super) fn auth(&mut self, token: usize, channel: &str) -> String {
        let id = self
            .ids
            .remove(&(token as u32))
            .unwrap_or(SocketId::new(0, 0));
        signature::channel_auth(
            &self.key,
            self.secret.as_bytes(),
            id.text().as_str(),
            channel,
            None,
        )
    }

    /// Forgets what was kept for a connection that ended.
    pub(super) fn forget(&mut self, token: usize) {
        if self.signs {
            self.ids.remove(&(token as u32));
        }
    }

    /// Sends one trigger's body through the HTTP API.
    pub(super) fn trigger(&self, body: &[u8]) {
        if let Some(t) = &self.trigger {
            t.send(body);
        }
    }

    /// Triggers that failed since the last call.
    pub(super) fn new_failures(&mut self) -> u64 {
        let failed = self
            .trigger
            .as_ref()
            .map_or(0, |t| t.stats.failed.load(Relaxed));
        let new = failed.saturating_sub(self.failed_seen);
        self.failed_seen = failed;
        new
    }
}

impl Engine {
    /// One message on a Pusher socket.
    pub(super) fn on_pusher_message(&mut self, token: usize, data: &[u8]) {
        let Ok(frame) = server::decode(data) else {
            self.counters.errors.other += 1;
            return;
        };
        match &*frame.event {
            event::CONNECTION_ESTABLISHED => self.on_established(token, &frame),
            event::SUBSCRIPTION_SUCCEEDED => self.on_subscribed(token, true),
            event::SUBSCRIPTION_ERROR => self.on_subscribed(token, false),
            event::PING => {
                // Answered as `pusher-js` does: the same text both ways.
                self.tbuf.clear();
                server::pong(&mut self.tbuf);
                self.send_frame(token, Opcode::Text);
            }
            event::ERROR => {
                let code = frame
                    .data
                    .and_then(|d| serde_json::from_str::<ErrorData>(d.get()).ok())
                    .and_then(|e| e.code)
                    .unwrap_or(0);
                self.counters.errors.error_reply += 1;
                *self
                    .counters
                    .errors
                    .detail
                    .pusher_errors
                    .entry(code)
                    .or_default() += 1;
            }
            event::PONG => {}
            _ => {
                let Some(d) = frame.data else { return };
                if let Some((key, sent_ns)) = find_stamp(d.get().as_bytes()) {
                    self.on_broadcast(key, sent_ns);
                }
            }
        }
    }

    /// `pusher:connection_established`: the socket is open; its id is kept
    /// when a subscription will be signed with it.
    fn on_established(&mut self, token: usize, frame: &server::ServerFrame<'_>) {
        let Some(c) = self.conns.get_mut(token) else {
            return;
        };
        if c.state != State::Establishing {
            return;
        }
        c.state = State::Running;
        let Some(side) = self.pusher.as_mut() else {
            return;
        };
        if side.signs {
            let id = frame
                .data_json()
                .and_then(|d| serde_json::from_str::<Established>(&d).ok())
                .and_then(|e| SocketId::parse(&e.socket_id));
            match id {
                Some(id) => {
                    side.ids.insert(token as u32, id);
                }
                None => self.counters.errors.other += 1,
            }
        }
    }

    /// A subscription's answer: the tracked join's reply.
    fn on_subscribed(&mut self, token: usize, ok: bool) {
        let c = &self.conns[token];
        if c.flags & F_AWAIT_JOIN != 0 {
            let r = c.await_ref;
            self.on_reply(token, Some(r), ok);
        } else if !ok {
            self.counters.errors.error_reply += 1;
        }
    }

    /// A stamped broadcast received (Phoenix's and Pusher's alike).
    pub(super) fn on_broadcast(&mut self, key: u64, sent_ns: u64) {
        let now = sys::realtime_ns();
        let us = (now.saturating_sub(sent_ns) / 1000).max(1);
        self.hists.broadcast.saturating_record(us);
        self.counters.bcast_recv += 1;
        let b = self.bcasts.entry(key).or_default();
        b.recv += 1;
        b.last_ns = b.last_ns.max(now);
    }
}

/// `pusher:connection_established`'s data.
#[derive(serde::Deserialize)]
struct Established {
    socket_id: String,
}

/// `pusher:error`'s data.
#[derive(serde::Deserialize)]
struct ErrorData {
    #[serde(default)]
    code: Option<u16>,
}
