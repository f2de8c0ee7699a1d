//! The node: what every shard of one server process shares, and the
//! [`Endpoint`] through which code outside a channel callback reaches the
//! node's subscribers (Phoenix's `Endpoint.broadcast/3`).
//!
//! Immutable after start except for atomics (metrics) and [`NodeTopics`]
//! (locked only when a shard gains its first or loses its last subscriber of
//! a topic, and once per broadcast). The node is the backplane's
//! [`Handler`]: broadcasts from other nodes come in through it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
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

impl ShardMsg {
    /// What it counts against the inbox bound: a broadcast's bytes (its
    /// memory is shared with other shards' inboxes, so this overstates it),
    /// or a flat 64 and the topic for an info.
    fn cost(&self) -> usize {
        match self {
            ShardMsg::Broadcast(b) => b.held(),
            ShardMsg::Info(topic, _) => 64 + topic.len(),
        }
    }
}

/// How to reach a shard from another thread: its inbox (bounded in bytes,
/// `--max-shard-inbox-bytes`) and the waker of its loop.
pub(crate) struct Peer {
    shard: usize,
    tx: Sender<ShardMsg>,
    waker: Arc<Waker>,
    max: usize,
    /// Bytes waiting in the inbox ([`ShardMsg::cost`]).
    pub queued: AtomicUsize,
    /// Messages dropped because the inbox was full.
    pub dropped: AtomicU64,
    /// The "inbox full" warning was logged since the inbox was last empty.
    full_logged: AtomicBool,
}

impl Peer {
    pub(crate) fn new(shard: usize, tx: Sender<ShardMsg>, waker: Arc<Waker>, max: usize) -> Peer {
        Peer {
            shard,
            tx,
            waker,
            max,
            queued: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            full_logged: AtomicBool::new(false),
        }
    }

    /// Queues `msg` for the shard, or drops it (counted, one warning per
    /// episode) when the inbox holds its bound. An empty inbox always
    /// takes one message, however big.
    fn send(&self, msg: ShardMsg) {
        let cost = msg.cost();
        let before = self.queued.fetch_add(cost, Relaxed);
        if before > 0 && before + cost > self.max {
            self.queued.fetch_sub(cost, Relaxed);
            self.dropped.fetch_add(1, Relaxed);
            if !self.full_logged.swap(true, Relaxed) {
                tracing::warn!(
                    shard = self.shard,
                    queued_bytes = before,
                    "shard {} is {before} bytes behind on broadcasts (--max-shard-inbox-bytes): \
                     dropping broadcasts for its subscribers until it catches up \
                     (counted in throng_shard_inbox_dropped_total)",
                    self.shard,
                );
            }
            return;
        }
        match self.tx.send(msg) {
            Ok(()) => {
                let _ = self.waker.wake();
            }
            Err(_) => {
                self.queued.fetch_sub(cost, Relaxed);
            }
        }
    }

    /// The shard took `msg` out of its inbox.
    pub(crate) fn received(&self, msg: &ShardMsg) {
        let cost = msg.cost();
        if self.queued.fetch_sub(cost, Relaxed) == cost {
            self.full_logged.store(false, Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_inbox_is_bounded_in_bytes() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let (tx, rx) = crossbeam_channel::unbounded();
        let big = || {
            ShardMsg::Broadcast(Arc::new(Broadcast::new(
                "t".into(),
                "e".into(),
                OwnedPayload::Json(format!("\"{}\"", "x".repeat(1000))),
                None,
            )))
        };
        let cost = big().cost();
        // Room for two; an empty inbox takes one whatever its size.
        let peer = Peer::new(3, tx, waker, 2 * cost + 10);
        for _ in 0..5 {
            peer.send(big());
        }
        assert_eq!(rx.len(), 2);
        assert_eq!(peer.dropped.load(Relaxed), 3);
        assert_eq!(peer.queued.load(Relaxed), 2 * cost);
        // The shard catches up: broadcasts are taken again.
        for msg in rx.try_iter() {
            peer.received(&msg);
        }
        assert_eq!(peer.queued.load(Relaxed), 0);
        peer.send(big());
        assert_eq!(rx.len(), 1);
        let tiny = Peer::new(0, crossbeam_channel::unbounded().0, peer.waker.clone(), 1);
        tiny.send(big());
        assert_eq!(
            tiny.dropped.load(Relaxed),
            0,
            "one message larger than the bound"
        );
    }
}
