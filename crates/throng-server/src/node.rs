//! The node: what every shard of one server process shares, and the
//! [`Endpoint`] through which code outside a channel callback reaches the
//! node's subscribers (Phoenix's `Endpoint.broadcast/3`).
//!
//! Immutable after start except for atomics (metrics) and [`NodeTopics`]
//! (locked only when a shard gains its first or loses its last subscriber of
//! a topic, and once per broadcast). The node is the backplane's
//! [`Handler`]: broadcasts from other nodes come in through it.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crossbeam_channel::Sender;
use mio::Waker;
use throng_protocol::OwnedPayload;
use throng_pubsub::{Backplane, Broadcast, Handler, NodeTopics};

use crate::channel::{Info, Router};
use crate::config::Config;
use crate::limits::Admission;
use crate::metrics::ShardStats;
use crate::page::Pages;

/// A message to a shard's event loop.
pub(crate) enum ShardMsg {
    /// Deliver to the shard's subscribers of the broadcast's topic.
    Broadcast(Arc<Broadcast>),
    /// Call `handle_info` of every channel joined on the topic.
    Info(Arc<str>, Info),
}

/// How to reach a shard from another thread.
pub(crate) struct Peer {
    pub tx: Sender<ShardMsg>,
    pub waker: Arc<Waker>,
}

impl Peer {
    fn send(&self, msg: ShardMsg) {
        if self.tx.send(msg).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// Shared state of one server process.
pub struct Node {
    pub config: Config,
    pub router: Router,
    pub stats: Vec<Arc<ShardStats>>,
    pub topics: NodeTopics,
    pub backplane: Arc<dyn Backplane>,
    pub(crate) peers: Vec<Peer>,
    pub(crate) pages: Pages,
    /// Open-files limit after raising the soft limit to the hard one.
    pub fd_limit: u64,
    /// New connections against `--max-connections` and `--max-connections-per-ip`.
    pub(crate) admission: Admission,
    /// When the drain began, once it has (`transport/drain.rs`).
    pub(crate) drain: OnceLock<Instant>,
}

impl Node {
    /// Starts the graceful drain: the shards stop accepting, close their
    /// sockets with 1012 in batches over `--drain-seconds`, and end, after
    /// which [`Server::wait`](crate::Server::wait) returns. Later calls do
    /// nothing.
    pub fn drain(&self) {
        if self.drain.set(Instant::now()).is_ok() {
            for peer in &self.peers {
                let _ = peer.waker.wake();
            }
        }
    }

    /// When the drain began, if it has.
    pub fn drain_started(&self) -> Option<Instant> {
        self.drain.get().copied()
    }

    /// Sends a broadcast made on this node to the other nodes, and to the
    /// node's shards that have subscribers, except `from_shard` (which
    /// delivered it already).
    pub(crate) fn broadcast(&self, from_shard: Option<usize>, b: Arc<Broadcast>) {
        self.backplane.publish(&b);
        self.fan_out(from_shard, b);
    }

    fn fan_out(&self, skip: Option<usize>, b: Arc<Broadcast>) {
        let shards = self.topics.shards(&b.topic);
        for i in shards.iter() {
            if Some(i) == skip {
                continue;
            }
            if let Some(peer) = self.peers.get(i) {
                peer.send(ShardMsg::Broadcast(b.clone()));
            }
        }
    }
}

impl Handler for Node {
    fn deliver(&self, b: Arc<Broadcast>) {
        self.fan_out(None, b);
    }

    fn has_topic(&self, topic: &str) -> bool {
        self.topics.contains(topic)
    }

    fn topics(&self) -> Vec<Arc<str>> {
        self.topics.names()
    }
}

/// A handle on a running node for code outside channel callbacks: an HTTP
/// API, the app's own threads. Cheap to clone; every method returns at
/// once (the work is queued to the shards).
#[derive(Clone)]
pub struct Endpoint {
    node: Arc<Node>,
}

impl Endpoint {
    pub(crate) fn new(node: Arc<Node>) -> Endpoint {
        Endpoint { node }
    }

    /// Broadcasts `event` on `topic` to every subscriber, on this node and,
    /// through the backplane, on the others (Phoenix's
    /// `Endpoint.broadcast/3`). Encoded once per serializer.
    pub fn broadcast(&self, topic: &str, event: &str, payload: OwnedPayload) {
        let b = Arc::new(Broadcast::new(topic.into(), event.into(), payload, None));
        self.node.broadcast(None, b);
    }

    /// Hands `info` to [`Channel::handle_info`](crate::Channel::handle_info)
    /// of every channel joined on `topic` on this node.
    pub fn info(&self, topic: &str, info: Info) {
        let topic: Arc<str> = Arc::from(topic);
        for i in self.node.topics.shards(&topic).iter() {
            if let Some(peer) = self.node.peers.get(i) {
                peer.send(ShardMsg::Info(topic.clone(), info.clone()));
            }
        }
    }

    /// The node this endpoint serves.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }
}
