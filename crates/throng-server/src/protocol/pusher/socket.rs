//! A Pusher socket on its shard: the frames a client sends, answered as
//! Pusher's protocol page and pusher-js expect (`docs/pusher-design.md`
//! says why each answer is the one it is): `pusher:ping`,
//! `pusher:subscribe` and `pusher:unsubscribe` (public, private,
//! encrypted, presence and user channels), `pusher:signin`, and `client-*`
//! events relayed to a channel's other subscribers. A refusal is a
//! `pusher:error` or `pusher:subscription_error` on a socket that stays
//! open; nothing a client sends closes it but the engine's bounds.
//!
//! A subscription is a [`Join`] in the socket's state, as a Phoenix
//! channel's, on the engine's topic `pusher/<app id>/<channel>`; a
//! broadcast's frame is made once, by whoever sends it, and shared.

use std::sync::Arc;

use throng_protocol::pusher::client::{self, ClientEvent, ClientFrame, Subscribe};
use throng_protocol::pusher::error_code::ErrorCode;
use throng_protocol::pusher::{presence, server, signature, ChannelKind, ChannelType};
use throng_protocol::{OwnedPayload, PUSHER_TOPIC_PREFIX};
use throng_pubsub::Broadcast;

use super::{Px, Sock};
use crate::auth::rate::Verdict;
use crate::engine::socket::{push_join, Join};
use crate::metrics::ShardStats;

/// Room in a frame for what surrounds an event's data (its name, channel,
/// a presence subscription's signature and `channel_data`).
const FRAME_OVERHEAD: usize = 2048;

/// The engine's topic of channel `channel` of app `app_id`.
pub(crate) fn topic_of(app_id: &str, channel: &str) -> String {
    let mut t = String::with_capacity(PUSHER_TOPIC_PREFIX.len() + app_id.len() + 1 + channel.len());
    t.push_str(PUSHER_TOPIC_PREFIX);
    t.push_str(app_id);
    t.push('/');
    t.push_str(channel);
    t
}

/// The channel of an engine topic of app `app_id`.
pub(crate) fn channel_of<'t>(topic: &'t str, app_id: &str) -> Option<&'t str> {
    topic
        .strip_prefix(PUSHER_TOPIC_PREFIX)?
        .strip_prefix(app_id)?
        .strip_prefix('/')
}

impl Px<'_> {
    /// A whole text message from Pusher socket `key`.
    pub fn message(&mut self, key: usize, sock: Sock, data: &[u8]) {
        let app = self.pusher.apps.get(sock.app);
        let max = app.max_event_bytes + FRAME_OVERHEAD;
        match client::decode(data, max) {
            Ok(ClientFrame::Ping) => {
                self.out(key, server::pong);
            }
            Ok(ClientFrame::Pong) => {}
            Ok(ClientFrame::Subscribe(s)) => self.subscribe(key, sock, &s),
            Ok(ClientFrame::Unsubscribe { channel }) => self.unsubscribe(key, sock, &channel),
            Ok(ClientFrame::Signin { auth, user_data }) => {
                self.signin(key, sock, &auth, &user_data)
            }
            Ok(ClientFrame::ClientEvent(e)) => self.client_event(key, sock, &e),
            Err(e) => self.error(key, e.code().code(), &e.to_string()),
        }
        self.conns.flush_reply(key);
    }

    /// `pusher:subscribe`.
    fn subscribe(&mut self, key: usize, sock: Sock, s: &Subscribe<'_>) {
        let channel: &str = &s.channel;
        let kind = match ChannelType::of(channel) {
            Ok(t) => t,
            Err(e) => return self.sub_error(key, channel, "InvalidChannel", &e.to_string(), 400),
        };
        let app = self.pusher.apps.get(sock.app);
        if kind.kind == ChannelKind::Encrypted && !app.encrypted_channels {
            let why = "encrypted channels are off for this app (encrypted_channels = false)";
            return self.sub_error(key, channel, "Forbidden", why, 403);
        }
        let topic = topic_of(&app.id, channel);
        if self.joined(key, &topic).is_some() {
            // pusher-js never subscribes twice; another client may: it is
            // told it is subscribed, and nothing changes.
            return self.out(key, |o| server::subscription_succeeded(o, channel));
        }
        let joins = self.conns.slab.get(key).map_or(0, |c| c.socket.joins.len());
        if joins >= self.node.config.max_channels_per_socket {
            let why = format!(
                "this socket is subscribed to {joins} channels, the most it may be \
                 (--max-channels-per-socket): unsubscribe from one first"
            );
            ShardStats::add(&self.conns.stats.channel_limit_refusals, 1);
            return self.sub_error(key, channel, "LimitReached", &why, 429);
        }
        if let Err((kind, why, status)) = self.authorize(key, sock, kind, s) {
            ShardStats::add(&self.conns.stats.policy_refusals, 1);
            return self.sub_error(key, channel, kind, &why, status);
        }
        if kind.is_presence() {
            if !self.presence_subscribe(key, sock, &topic, s) {
                return;
            }
        } else {
            self.join(key, &topic, None);
            self.out(key, |o| server::subscription_succeeded(o, channel));
        }
        if kind.cache {
            // Its last event, or the miss, once read (`cache.rs`).
            self.cache_read(key, &topic);
        }
    }

    /// Whether socket `key` may subscribe to `s.channel` of kind `kind`:
    /// the app's signature on private, encrypted and presence channels, the
    /// signed-in user on a user channel. `Err`: the subscription error's
    /// type, text and status.
    fn authorize(
        &mut self,
        key: usize,
        sock: Sock,
        kind: ChannelType,
        s: &Subscribe<'_>,
    ) -> Result<(), (&'static str, String, u16)> {
        if kind.kind == ChannelKind::User {
            let user = self.signed_in(key, sock);
            let wanted = throng_protocol::pusher::channel::user_of(&s.channel);
            return match (user, wanted) {
                (Some(u), Some(w)) if u == w => Ok(()),
                _ => Err((
                    "AuthError",
                    "a #server-to-user channel is its signed-in user's: send pusher:signin first"
                        .into(),
                    401,
                )),
            };
        }
        if !kind.needs_auth() {
            return Ok(());
        }
        let app = self.pusher.apps.get(sock.app);
        let id = self.pusher.ids.of(self.conns.id, key, sock.secret);
        let auth = s.auth.as_deref().unwrap_or("");
        let data = s.channel_data.as_deref();
        signature::verify_channel_auth(&app.key, app.secret.as_bytes(), &id, &s.channel, data, auth)
            .map_err(|e| ("AuthError", e.to_string(), 401))
    }

    /// `pusher:unsubscribe`: no answer (Pusher sends none).
    fn unsubscribe(&mut self, key: usize, sock: Sock, channel: &str) {
        let app = self.pusher.apps.get(sock.app);
        let topic = topic_of(&app.id, channel);
        let Some(i) = self.joined(key, &topic) else {
            return;
        };
        let Some(join) = self
            .conns
            .slab
            .get_mut(key)
            .map(|c| c.socket.joins.swap_remove(i))
        else {
            return;
        };
        self.leave(key, sock, join);
    }

    /// A subscription ended (unsubscribed, or its socket closed).
    pub(super) fn leave(&mut self, key: usize, sock: Sock, join: Join) {
        let topic = self.conns.registry.name(join.slot.topic).cloned();
        if let Some(topic) = &topic {
            self.presence_leave(key, sock, topic, &join);
        }
        self.conns.unsubscribe(self.node, join.slot, key);
        ShardStats::sub(&self.conns.stats.channels, 1);
    }

    /// Subscribes socket `key` to `topic`, with `assigns` for it.
    pub(super) fn join(&mut self, key: usize, topic: &str, assigns: crate::channel::Assigns) {
        let slot = self.conns.subscribe(self.node, topic, key);
        if let Some(c) = self.conns.slab.get_mut(key) {
            push_join(
                &mut c.socket.joins,
                Join {
                    slot,
                    join_ref: None,
                    assigns,
                },
            );
        }
        let stats = &self.conns.stats;
        ShardStats::add(&stats.channels, 1);
        ShardStats::add(&stats.joins, 1);
    }

    /// The index of socket `key`'s subscription to `topic`.
    pub(super) fn joined(&self, key: usize, topic: &str) -> Option<usize> {
        let idx = self.conns.registry.find(topic)?;
        let c = self.conns.slab.get(key)?;
        c.socket.joins.iter().position(|j| j.slot.topic == idx)
    }

    /// `pusher:signin`: the user the app's backend signed for this socket,
    /// answered `pusher:signin_success`, or `pusher:error` 4009 on a socket
    /// that stays open (Pusher's protocol page: "either a
    /// `pusher:signin_success` or a `pusher:error`").
    fn signin(&mut self, key: usize, sock: Sock, auth: &str, user_data: &str) {
        let refused = |why: String| (ErrorCode::Unauthorized.code(), why);
        let result = (|| {
            let user = presence::parse_user_data(user_data).map_err(|e| refused(e.to_string()))?;
            let app = self.pusher.apps.get(sock.app);
            let id = self.pusher.ids.of(self.conns.id, key, sock.secret);
            signature::verify_user_auth(&app.key, app.secret.as_bytes(), &id, user_data, auth)
                .map_err(|e| refused(e.to_string()))?;
            match self.signed_in(key, sock) {
                Some(now) if now != *user.id => Err(refused(format!(
                    "this socket is signed in as another user ({now}): a socket signs in once"
                ))),
                Some(_) => Ok(None),
                None => Ok(Some(user.id.into_owned())),
            }
        })();
        match result {
            Ok(user) => {
                if let Some(user) = user {
                    let app_id = &self.pusher.apps.get(sock.app).id;
                    let entry = super::user_entry(app_id, &user);
                    self.conns.users.add(&entry, key as u32);
                }
                self.out(key, |o| server::signin_success(o, user_data));
            }
            Err((code, why)) => {
                ShardStats::add(&self.conns.stats.auth_refusals, 1);
                self.error(key, code, &why);
            }
        }
    }

    /// The user socket `key` signed in as, if it did.
    pub(super) fn signed_in(&self, key: usize, sock: Sock) -> Option<String> {
        let id = self.conns.users.id(key as u32)?;
        let app_id = &self.pusher.apps.get(sock.app).id;
        super::user_of_entry(app_id, id.as_str()).map(str::to_owned)
    }

    /// A `client-*` event: checked in Pusher's order, then relayed once to
    /// the channel's other subscribers, with the sender's user id on a
    /// presence channel.
    fn client_event(&mut self, key: usize, sock: Sock, e: &ClientEvent<'_>) {
        if let Err(why) = self.client_event_allowed(key, sock, e) {
            ShardStats::add(&self.conns.stats.payload_refusals, 1);
            return self.error(key, ErrorCode::BadRequest.code(), &why);
        }
        if self.client_rate(key) != Verdict::Allow {
            ShardStats::add(&self.conns.stats.rate_limited, 1);
            let why = format!(
                "client event {:?} dropped: over {} client events a second \
                 (--pusher-client-event-rate)",
                e.event, self.pusher.client_event_rate
            );
            return self.error(key, ErrorCode::ClientEventRateLimited.code(), &why);
        }
        let app = self.pusher.apps.get(sock.app);
        let topic = topic_of(&app.id, &e.channel);
        let presence = ChannelType::of(&e.channel).is_ok_and(|t| t.is_presence());
        let user = presence.then(|| self.member_of(key, &topic)).flatten();
        let data = e.data.map(server::Data::from_json);
        let mut frame = Vec::with_capacity(64 + e.data.map_or(0, str::len));
        server::event(&mut frame, &e.event, &e.channel, data, user.as_deref());
        let Ok(frame) = String::from_utf8(frame) else {
            return;
        };
        let exclude = Some((self.conns.id, key));
        let (topic, event, payload): (Arc<str>, _, _) = (
            Arc::from(topic),
            e.event.to_string(),
            OwnedPayload::Json(frame),
        );
        if let Some(rule) = self.node.policy.history(&topic) {
            // A cache channel keeps its last event (`cache.rs`).
            self.node
                .publish_history(rule, topic, event, payload, exclude);
        } else {
            let b = Broadcast::new(topic, event, payload, exclude);
            self.conns.publish(self.node, Arc::new(b));
        }
        self.webhook_client_event(key, sock, e, user.as_deref());
    }

    /// Why client event `e` of socket `key` is refused, if it is.
    fn client_event_allowed(
        &self,
        key: usize,
        sock: Sock,
        e: &ClientEvent<'_>,
    ) -> Result<(), String> {
        let app = self.pusher.apps.get(sock.app);
        if !app.client_events {
            return Err(format!(
                "client events are off for app {} (client_events = false): \
                 trigger events through the HTTP API",
                app.id
            ));
        }
        let kind = ChannelType::of(&e.channel).map_err(|err| err.to_string())?;
        if !kind.allows_client_events() {
            return Err(format!(
                "client events are taken on private- and presence- channels only, not on {:?}",
                e.channel
            ));
        }
        if self.joined(key, &topic_of(&app.id, &e.channel)).is_none() {
            return Err(format!(
                "client event on {:?}, which this socket is not subscribed to: subscribe first",
                e.channel
            ));
        }
        let len = e.data.map_or(0, |d| server::Data::from_json(d).len());
        if len > app.max_event_bytes {
            return Err(format!(
                "client event data is {len} bytes, over this app's {} (max_event_bytes)",
                app.max_event_bytes
            ));
        }
        Ok(())
    }

    /// Spends one client event of socket `key`'s budget (its push budget).
    fn client_rate(&mut self, key: usize) -> Verdict {
        let limit = &self.pusher.client_limit;
        if limit.is_unlimited() {
            return Verdict::Allow;
        }
        let now = self.conns.now_ms;
        match self.conns.slab.get_mut(key) {
            Some(c) => limit.check(&mut c.socket.push_tat, now),
            None => Verdict::Allow,
        }
    }

    /// `pusher:error` with `code` and `message`, on a socket that stays.
    pub(super) fn error(&mut self, key: usize, code: u16, message: &str) {
        self.out(key, |o| server::error(o, Some(code), message));
    }

    /// `pusher:subscription_error`.
    fn sub_error(&mut self, key: usize, channel: &str, kind: &str, why: &str, status: u16) {
        ShardStats::add(&self.conns.stats.refused_joins, 1);
        self.out(key, |o| {
            server::subscription_error(o, channel, kind, why, status)
        });
    }

    /// One frame to socket `key`, encoded by `encode`, with the frames
    /// gathered for it.
    pub(super) fn out(&mut self, key: usize, encode: impl FnOnce(&mut Vec<u8>)) {
        let mut body = std::mem::take(self.scratch);
        body.clear();
        encode(&mut body);
        let window = self.conns.deflate_of(key);
        self.conns
            .frame_out_deflated(window, throng_protocol::Opcode::Text, &body);
        *self.scratch = body;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_name_their_app() {
        let t = topic_of("12", "private-a");
        assert_eq!(t, "pusher/12/private-a");
        assert_eq!(channel_of(&t, "12"), Some("private-a"));
        assert_eq!(channel_of(&t, "1"), None);
        assert!(crate::auth::is_reserved(&t), "no Phoenix client names it");
    }
}
