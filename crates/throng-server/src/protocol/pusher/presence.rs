//! Presence channels (`presence-*`): who is on a channel, each user once
//! however many sockets it has there, cluster-wide. The state is the
//! node's [`Tracker`](throng_pubsub::Tracker), as for Phoenix Presence:
//! a subscription tracks its member under the user's id, with the meta
//! `"user_info":...`; the subscription keeps its [`Member`] in its assigns
//! to untrack it when it ends.
//!
//! What a subscriber hears, each change once:
//! - its member list is the node's last presence flush, itself added
//!   ([`Tracker::members`](throng_pubsub::Tracker::members));
//! - then `member_added` and `member_removed` from the later flushes, each
//!   user once, not per tab (the tracker makes them on every node from its
//!   copy of the cluster's presences). Delivery leaves out
//!   ([`Pusher::delivers`](super::Pusher)) the sockets of the member
//!   itself (their lists have their own user: a second tab, or the same
//!   user on another node, is no news to them) and the subscribers whose
//!   list was read after the flush that made the event: a flush on one
//!   shard reaches the node's other shards through their inboxes, and a
//!   list read meanwhile has its change already.
//!
//! The channel's member limit (`max_presence_members`) counts the users
//! this node knows of (every node's, as of its copy) with the changes
//! waiting for its next flush: see `docs/pusher.md`.

use std::sync::Arc;

use throng_protocol::pusher::{presence, server};
use throng_pubsub::presence::Mode;
use throng_pubsub::{Broadcast, MemberTag};

use super::{Px, Sock};
use crate::engine::conn::Conn;
use crate::engine::socket::Join;
use throng_protocol::pusher::client::Subscribe;

/// What a presence subscription keeps: its member's user id, the
/// tracker's sequence number of its presence, and the flush its member
/// list is as of.
struct Member {
    user_id: Arc<str>,
    seq: u64,
    generation: u64,
}

impl Px<'_> {
    /// A presence channel's subscription, signed already: its member
    /// tracked, the members sent; false when it is refused.
    pub(super) fn presence_subscribe(
        &mut self,
        key: usize,
        sock: Sock,
        topic: &str,
        s: &Subscribe<'_>,
    ) -> bool {
        let channel: &str = &s.channel;
        let data = s.channel_data.as_deref().unwrap_or("");
        let member = match presence::parse_channel_data(data) {
            Ok(m) => m,
            Err(e) => {
                self.presence_error(key, channel, &e.to_string(), 400);
                return false;
            }
        };
        let app = self.pusher.apps.get(sock.app);
        let max = app.max_presence_members;
        let tracker = &self.node.presence;
        let members = tracker.members(topic, &member.user_id);
        if !members.upcoming_has_key && members.upcoming >= max {
            let why = format!(
                "the channel has {} members, the most this app allows (max_presence_members = {max})",
                members.upcoming
            );
            self.presence_error(key, channel, &why, 403);
            return false;
        }
        let info = member.user_info.unwrap_or("null");
        let fields = format!("\"user_info\":{info}");
        let user_id: Arc<str> = Arc::from(&*member.user_id);
        let topic_arc: Arc<str> = Arc::from(topic);
        let (seq, new) = tracker.track(&topic_arc, Mode::List, user_id.clone(), fields.into());
        if new {
            self.node.wake_shards();
        }
        let assigns: crate::channel::Assigns = Some(Box::new(Box::new(Member {
            user_id: user_id.clone(),
            seq,
            generation: members.generation,
        })));
        self.join(key, topic, assigns);
        let listed = members.list.iter().any(|(id, _)| *id == user_id);
        let others = members.list.iter().map(|(id, fields)| {
            let (_, info) = throng_pubsub::presence::pusher_meta(fields);
            (&**id, info)
        });
        let mine = (!listed).then_some((&*user_id, Some(info)));
        let list = others.chain(mine);
        self.out(key, |o| {
            server::presence_subscription_succeeded(o, channel, list)
        });
        self.webhook_member(sock, topic, &user_id, true);
        true
    }

    /// A presence subscription ended: its member leaves.
    pub(super) fn presence_leave(&mut self, _key: usize, sock: Sock, topic: &str, join: &Join) {
        if let Some(m) = join
            .assigns
            .as_ref()
            .and_then(|a| a.downcast_ref::<Member>())
        {
            self.node.presence.untrack(topic, &m.user_id, m.seq);
            self.webhook_member(sock, topic, &m.user_id, false);
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

/// Whether member event `b` goes to `conn`, a subscriber of its channel
/// (registry index `topic`): not when it is about the socket's own user,
/// nor when the socket's member list is as recent as the event's flush.
pub(super) fn delivers(conn: &Conn, topic: u32, b: &Broadcast) -> bool {
    let Some(tag) = b.member.as_deref() else {
        return true;
    };
    let member = conn
        .socket
        .joins
        .iter()
        .find(|j| j.slot.topic == topic)
        .and_then(|j| j.assigns.as_ref())
        .and_then(|a| a.downcast_ref::<Member>());
    member.is_none_or(|m| m.hears(tag))
}

impl Member {
    /// Whether this subscription is told member event `tag`: not about
    /// its own user (its list has it), and newer than its list.
    fn hears(&self, tag: &MemberTag) -> bool {
        self.user_id != tag.key && self.generation < tag.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_hears_of_others_after_its_list() {
        let m = Member {
            user_id: "u1".into(),
            seq: 1,
            generation: 5,
        };
        let tag = |key: &str, generation| MemberTag {
            key: key.into(),
            generation,
        };
        assert!(m.hears(&tag("u2", 6)));
        assert!(!m.hears(&tag("u1", 6)), "its own user: another tab");
        // A flush its list already had: on its way through the shard's
        // inbox when the list was read.
        assert!(!m.hears(&tag("u2", 5)));
        assert!(!m.hears(&tag("u2", 4)));
    }
}
