//! What a Pusher socket's shard hands to its app's webhooks
//! (`crate::hooks::Webhooks`, which says who sends what once
//! cluster-wide): the client events it relays, the cache misses of its
//! subscriptions, and its presence members, counted per node for the
//! occupancy engine to decide `member_added` and `member_removed`.

use throng_protocol::pusher::client::ClientEvent;

use super::{Px, Sock};
use crate::hooks::{Webhook, Webhooks};

impl Px<'_> {
    /// The webhooks of socket `sock`'s app, if it has a webhook URL.
    fn webhooks(&self, sock: Sock) -> Option<&Webhooks> {
        let w = self.node.webhooks.as_ref()?;
        w.has_app(sock.app as usize).then_some(w)
    }

    /// A `client_event` webhook for event `e` of socket `key`, relayed
    /// (`user`: the sender's user on a presence channel).
    pub(super) fn webhook_client_event(
        &self,
        key: usize,
        sock: Sock,
        e: &ClientEvent<'_>,
        user: Option<&str>,
    ) {
        let Some(w) = self.webhooks(sock) else {
            return;
        };
        let socket_id = self.pusher.ids.of(self.conns.id, key, sock.secret);
        let event = Webhook::ClientEvent {
            channel: (*e.channel).into(),
            event: (*e.event).into(),
            data: e.data.map(Into::into),
            socket_id: socket_id.as_str().into(),
            user_id: user.map(Into::into),
        };
        w.push(sock.app as usize, event);
    }

    /// A `cache_miss` webhook for cache channel `channel`.
    pub(super) fn webhook_cache_miss(&self, sock: Sock, channel: &str) {
        if let Some(w) = self.webhooks(sock) {
            let channel = channel.into();
            w.push(sock.app as usize, Webhook::CacheMiss { channel });
        }
    }

    /// A socket of user `user` joined (`joined`) or left presence channel
    /// topic `topic`: the node's first or last one tells the occupancy
    /// engine, whose transitions of the member's key are `member_added`
    /// and `member_removed`.
    pub(super) fn webhook_member(&self, sock: Sock, topic: &str, user: &str, joined: bool) {
        let Some(w) = self.webhooks(sock) else {
            return;
        };
        let key = Webhooks::member_key(topic, user);
        if w.member(&key, joined) {
            self.node.occupancy_changed(&key);
        }
    }
}
