//! Presence channels (`presence-*`): who is on a channel, each user once
//! however many sockets it has there, cluster-wide. The state is the
//! node's [`Tracker`](throng_pubsub::Tracker), as for Phoenix Presence:
//! a subscription tracks its member under the user's id, with the meta
//! `{"user_info": ...}`; the subscription keeps `(user_id, sequence)` in its
//! assigns to untrack it when it ends. A subscriber gets the members as of
//! the node's last presence flush, itself included.

use std::sync::Arc;

use throng_protocol::pusher::{presence, server};
use throng_pubsub::presence::Mode;

use super::{Px, Sock};
use crate::engine::socket::Join;
use throng_protocol::pusher::client::Subscribe;

/// What a presence subscription keeps: its member's user id and the
/// tracker's sequence number of its presence.
struct Member {
    user_id: Arc<str>,
    seq: u64,
}

impl Px<'_> {
    /// A presence channel's subscription, signed already: its member
    /// tracked, the members sent.
    pub(super) fn presence_subscribe(
        &mut self,
        key: usize,
        sock: Sock,
        topic: &str,
        s: &Subscribe<'_>,
    ) {
        let channel: &str = &s.channel;
        let data = s.channel_data.as_deref().unwrap_or("");
        let member = match presence::parse_channel_data(data) {
            Ok(m) => m,
            Err(e) => return self.presence_error(key, channel, &e.to_string(), 400),
        };
        let app = self.pusher.apps.get(sock.app);
        let max = app.max_presence_members;
        let tracker = &self.node.presence;
        let topic_arc: Arc<str> = Arc::from(topic);
        let members = members_of(tracker.list(topic).as_deref());
        let here = members.iter().any(|(id, _)| **id == *member.user_id);
        if !here && members.len() >= max {
            let why = format!(
                "the channel has {} members, the most this app allows (max_presence_members)",
                members.len()
            );
            return self.presence_error(key, channel, &why, 403);
        }
        let info = member.user_info.unwrap_or("null");
        // Its socket goes in the meta, so that the member_added its track
        // makes leaves it out (its own member list has it): see
        // `throng_pubsub::presence::pusher_meta`.
        let socket = ((self.conns.id as u64) << 32) | key as u64;
        let fields = format!("\"_socket\":{socket},\"user_info\":{info}");
        let user_id: Arc<str> = Arc::from(&*member.user_id);
        let (seq, new) = tracker.track(&topic_arc, Mode::List, user_id.clone(), fields.into());
        if new {
            self.node.wake_shards();
        }
        let assigns: crate::channel::Assigns = Some(Box::new(Box::new(Member {
            user_id: user_id.clone(),
            seq,
        })));
        self.join(key, topic, assigns);
        let mine = (user_id.to_string(), Some(info.to_string()));
        let all = members
            .iter()
            .map(|(id, info)| (id.to_string(), info.clone()))
            .chain((!here).then_some(mine))
            .collect::<Vec<_>>();
        let list = all.iter().map(|(id, info)| (id.as_str(), info.as_deref()));
        self.out(key, |o| {
            server::presence_subscription_succeeded(o, channel, list)
        });
    }

    /// A presence subscription ended: its member leaves.
    pub(super) fn presence_leave(&mut self, _key: usize, _sock: Sock, topic: &str, join: &Join) {
        if let Some(m) = join
            .assigns
            .as_ref()
            .and_then(|a| a.downcast_ref::<Member>())
        {
            self.node.presence.untrack(topic, &m.user_id, m.seq);
        }
    }

    /// The user id socket `key` is on presence topic `topic` with, if any.
    pub(super) fn member_of(&self, key: usize, topic: &str) -> Option<String> {
        let i = self.joined(key, topic)?;
        let join = &self.conns.slab.get(key)?.socket.joins[i];
        let m = join.assigns.as_ref()?.downcast_ref::<Member>()?;
        Some(m.user_id.to_string())
    }

    fn presence_error(&mut self, key: usize, channel: &str, why: &str, status: u16) {
        crate::metrics::ShardStats::add(&self.conns.stats.presence_refused, 1);
        self.out(key, |o| {
            server::subscription_error(o, channel, "PresenceError", why, status)
        });
    }
}

/// The members of a `presence_state` JSON (`{id: {"metas": [{"user_info":
/// ...}, ...]}}`): each user once, with the info of one of its presences.
fn members_of(state: Option<&str>) -> Vec<(Arc<str>, Option<String>)> {
    let Some(state) = state else {
        return Vec::new();
    };
    let Ok(map) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(state) else {
        return Vec::new();
    };
    map.into_iter()
        .map(|(id, v)| {
            let info = v
                .get("metas")
                .and_then(|m| m.get(0))
                .and_then(|m| m.get("user_info"))
                .map(|i| i.to_string());
            (Arc::from(id), info)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_from_a_state() {
        let state = r#"{"1":{"metas":[{"user_info":{"n":"a"},"phx_ref":"x"}]},"2":{"metas":[{"user_info":null}]}}"#;
        let m = members_of(Some(state));
        assert_eq!(m.len(), 2);
        let one = m.iter().find(|(id, _)| &**id == "1").unwrap();
        assert_eq!(one.1.as_deref(), Some(r#"{"n":"a"}"#));
        assert!(members_of(None).is_empty());
        assert!(members_of(Some("nope")).is_empty());
    }
}
