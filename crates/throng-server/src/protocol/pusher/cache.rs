//! Cache channels (`cache-*`, `private-cache-*`, `presence-cache-*`,
//! `private-encrypted-cache-*`): a new subscriber gets the channel's last
//! event right after its `subscription_succeeded`, or `pusher:cache_miss`
//! (and the app's `cache_miss` webhook) when there is none; the event is
//! kept `--pusher-cache-ttl` seconds after it was sent.
//!
//! The store is the topics' history (`crate::history`), not one of
//! Pusher's own: a cache channel's topic keeps a history of one message
//! (`Policy::with_pusher_cache`), so every event sent on it, by a client
//! or through the HTTP API, goes through `Node::publish_history` and is
//! kept in this process or, with `--redis`, in Redis for every node. A
//! subscription reads it on the one asynchronous path history has
//! (`history/recovery.rs`): the socket is subscribed first, the channel's
//! live events for it are held aside until the read's answer comes back
//! through the shard's inbox, then the last event (or the miss) goes out,
//! then the held events newer than it; nothing twice, nothing skipped.

use throng_protocol::pusher::server;
use throng_protocol::OwnedPayload;

use super::Px;
use crate::engine::conns::output::Sent;
use crate::history::{HeldJoin, ReplayAnswer};
use crate::metrics::ShardStats;

impl Px<'_> {
    /// Starts the read of cache channel `topic`'s last event for socket
    /// `key`, subscribed to it already.
    pub(super) fn cache_read(&mut self, key: usize, topic: &str) {
        let Some(idx) = self.conns.registry.find(topic) else {
            return;
        };
        // A Pusher subscription holds no reply of its own: the answer
        // sends the event or the miss.
        let held = HeldJoin {
            join_ref: None,
            msg_ref: None,
            response: OwnedPayload::Json(String::new()),
        };
        let (node, shard) = (self.node, self.conns.id);
        if !self
            .conns
            .recovery
            .start(node, shard, key, idx, topic, None, held)
        {
            // No Pusher apps' cache rule (never here): nothing is kept.
            self.cache_miss(key, topic);
        }
    }

    /// The answer to a cache channel's read: its last event or the miss,
    /// then the events held meanwhile that are newer.
    pub(super) fn cache_answer(&mut self, mut a: ReplayAnswer) {
        let Some(idx) = self.conns.registry.find(&a.topic) else {
            return;
        };
        let Some(p) = self.conns.recovery.answered(&mut a, idx) else {
            return; // unsubscribed, closed, or subscribed again meanwhile
        };
        let key = a.key;
        if self.sock(key).is_none() {
            return;
        }
        let found = a.replay;
        let (epoch, last) = (found.epoch, found.last);
        match found.messages.last().map(|e| &e.payload) {
            // A Pusher channel's history keeps each event's whole frame.
            Some(OwnedPayload::Json(frame)) => {
                ShardStats::add(&self.conns.stats.pusher_cache_hits, 1);
                self.out(key, |o| o.extend_from_slice(frame.as_bytes()));
            }
            _ => self.cache_miss(key, &a.topic),
        }
        self.conns.flush_reply(key);
        let mut newest = 0;
        for b in &p.live {
            if b.epoch == epoch && b.offset <= last {
                continue; // the event sent, or older
            }
            newest = b.offset;
            self.conns.send_to(key, b, &mut Sent::default());
        }
        if last > newest {
            // Live copies up to `last` may still come: skipped.
            self.conns.recovery.replayed(key, idx, last);
        }
    }

    /// `pusher:cache_miss` to socket `key` of cache channel `topic`, and
    /// the app's `cache_miss` webhook.
    fn cache_miss(&mut self, key: usize, topic: &str) {
        let Some(sock) = self.sock(key) else {
            return;
        };
        let app = self.pusher.apps.get(sock.app);
        let Some(channel) = super::socket::channel_of(topic, &app.id) else {
            return;
        };
        ShardStats::add(&self.conns.stats.pusher_cache_misses, 1);
        self.out(key, |o| server::cache_miss(o, channel));
        self.webhook_cache_miss(sock, channel);
    }
}
