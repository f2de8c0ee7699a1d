//! A trigger published: for each of its channels, the Pusher frame made
//! once (`server::event` with the request's `data` token as it came) and
//! broadcast on the channel's topic to every subscriber of every node,
//! leaving out the socket its `socket_id` names (Laravel's `toOthers()`).
//!
//! Where that socket is decides the way (the id says its node's tag, its
//! shard, its connection key and a secret, `super::super::ids`):
//! - none: one broadcast per channel, from this shard;
//! - this shard: the same, with the broadcast's `exclude`, once the
//!   secret is checked (a key is reused once its connection closes);
//! - another shard of this node: the broadcasts go from here to the other
//!   nodes and shards, and to that shard with its socket to leave out,
//!   which checks the secret ([`PusherMsg::Exclude`]);
//! - another node (or a node gone): a broadcast's `exclude` does not
//!   travel between nodes, so the trigger goes over the control lane to
//!   every node instead of the broadcast lane, once
//!   ([`RemoteTrigger`]); each delivers it to its own subscribers, the
//!   node whose tag the id has without the socket (on the shard the id
//!   names, which checks the secret). If no other node can be reached, it
//!   is broadcast as usual, the socket included.
//!
//! So a trigger with a `socket_id` of another node takes the control lane
//! where others take the broadcast lane: with one Redis each node reads
//! both from one connection, in the order they were published; with a
//! Redis Cluster the two lanes are apart, and such a trigger and one
//! without a `socket_id` sent right after it may arrive the other way
//! round on the other nodes.

use std::sync::Arc;

use throng_protocol::pusher::server;
use throng_protocol::pusher::trigger::Trigger;
use throng_protocol::OwnedPayload;
use throng_pubsub::{Broadcast, Route};

use super::super::socket::topic_of;
use super::super::{ids, Pusher, State};
use crate::control::Message;
use crate::engine::{Conns, Cx};
use crate::forward::pusher::{Item, PusherMsg, RemoteTrigger};
use crate::node::ShardMsg;

/// Publishes trigger `t` of app `app`, from this shard.
pub(super) fn publish(p: &Pusher, cx: &mut Cx<'_, State>, app: u16, t: &Trigger<'_>) {
    let app_id = &p.apps.get(app).id;
    let items: Vec<Item> = t
        .channels
        .iter()
        .map(|channel| {
            let mut frame = Vec::with_capacity(64 + channel.len() + t.data.len());
            server::event(&mut frame, &t.name, channel, Some(t.data), None);
            Item {
                topic: topic_of(app_id, channel),
                event: t.name.to_string(),
                // Made of JSON text and UTF-8 names: never lossy.
                frame: String::from_utf8_lossy(&frame).into_owned(),
            }
        })
        .collect();
    let me = cx.conns.id;
    let Some(socket_id) = t.socket_id.as_deref() else {
        return publish_here(cx, items, None);
    };
    match p.ids.locate(socket_id) {
        Some((shard, key, secret)) if shard == me => {
            let exclude = is_socket(cx.conns, key, secret).then_some((me, key));
            publish_here(cx, items, exclude);
        }
        Some((shard, key, secret)) if shard < cx.node.peers.len() => {
            let broadcasts: Vec<Arc<Broadcast>> = items
                .into_iter()
                .map(|i| broadcast(i, Some((shard, key))))
                .collect();
            for b in &broadcasts {
                cx.node.broadcast(Some(shard), b.clone());
            }
            let msg = PusherMsg::Exclude {
                broadcasts,
                key,
                secret,
            };
            cx.node.peers[shard].send(ShardMsg::Pusher(Box::new(msg)));
        }
        // A shard this node does not have: no socket of it.
        Some(_) => publish_here(cx, items, None),
        None => {
            let remote = RemoteTrigger {
                socket_id: socket_id.to_string(),
                shard: ids::shard_named(socket_id).unwrap_or(0) as u16,
                items,
            };
            let msg = Message::Pusher(remote);
            let body = msg.encode();
            let Message::Pusher(remote) = msg else {
                return;
            };
            if cx.node.backplane.send_control(Route::Cluster, body) {
                deliver_on_node(cx, remote.items, None);
            } else {
                publish_here(cx, remote.items, None);
            }
        }
    }
}

/// Whether this shard's connection `key` is still the Pusher socket whose
/// id has `secret` (never 0).
fn is_socket(conns: &Conns, key: usize, secret: u32) -> bool {
    secret != 0 && conns.slab.get(key).is_some_and(|c| c.socket.tag == secret)
}

fn broadcast(i: Item, exclude: Option<(usize, usize)>) -> Arc<Broadcast> {
    Arc::new(Broadcast::new(
        Arc::from(i.topic),
        i.event,
        OwnedPayload::Json(i.frame),
        exclude,
    ))
}

/// Broadcasts `items` from this shard to every node, leaving out
/// `exclude`.
fn publish_here(cx: &mut Cx<'_, State>, items: Vec<Item>, exclude: Option<(usize, usize)>) {
    for i in items {
        cx.conns.publish(cx.node, broadcast(i, exclude));
    }
}

/// Delivers `items` to this node's subscribers only, leaving out
/// `exclude` (a socket of this shard).
fn deliver_on_node(cx: &mut Cx<'_, State>, items: Vec<Item>, exclude: Option<(usize, usize)>) {
    for i in items {
        let b = broadcast(i, exclude);
        cx.node.fan_out(Some(cx.conns.id), b.clone());
        cx.conns.deliver(&b);
    }
}

/// [`PusherMsg::Exclude`]: broadcasts another shard made for this one's
/// subscribers, but socket `key` if it still has `secret`.
pub(super) fn deliver_excluding(
    cx: &mut Cx<'_, State>,
    broadcasts: &[Arc<Broadcast>],
    key: usize,
    secret: u32,
) {
    let still = is_socket(cx.conns, key, secret);
    for b in broadcasts {
        if still {
            cx.conns.deliver(b);
        } else {
            // Its socket is gone: the connection now on the key gets it.
            let plain = Broadcast::new(b.topic.clone(), b.event.clone(), b.payload.clone(), None);
            cx.conns.deliver(&Arc::new(plain));
        }
    }
}

/// [`PusherMsg::Remote`]: another node's trigger, delivered to this node's
/// subscribers, without its socket if that is this shard's.
pub(super) fn deliver_remote(p: &Pusher, cx: &mut Cx<'_, State>, t: &RemoteTrigger) {
    let me = cx.conns.id;
    let exclude = p
        .ids
        .locate(&t.socket_id)
        .filter(|&(shard, key, secret)| shard == me && is_socket(cx.conns, key, secret))
        .map(|(_, key, _)| (me, key));
    deliver_on_node(cx, t.items.clone(), exclude);
}
