//! Presence: who is on a topic, cluster-wide, in the shape phoenix.js 1.8's
//! `Presence` consumes (`presence_state` on join, `presence_diff` after),
//! and built to survive a crowd.
//!
//! ## What clients see
//! - `presence_state`, pushed to a joiner (with its join_ref on v2):
//!   `{"<key>": {"metas": [{"phx_ref": "..", ...meta}, ...]}}`. A key (a
//!   user) has one meta per presence (per tab, per device).
//! - `presence_diff`, broadcast to the topic:
//!   `{"joins": {...}, "leaves": {...}}` in the same shape. An update leaves
//!   the old meta and joins a new one whose `phx_ref_prev` is the old
//!   `phx_ref` (as `Phoenix.Tracker.Shard.put_update/6`).
//! - Count mode, for very large topics: `presence_count` `{"count": N}`
//!   (distinct keys) pushed on join and broadcast when N changes, at most
//!   once per max(interval, N / rate) seconds (`--presence-count-rate`,
//!   [`Tracker::with_count_rate`]): a broadcast costs N messages, so this
//!   bounds a topic's count traffic to about `rate` messages a second
//!   cluster-wide (N approximates its subscribers on every node) however
//!   big it grows.
//!
//! ## Where Phoenix struggles and what this does instead
//! Phoenix broadcasts one `presence_diff` per join to every subscriber, so a
//! topic of N users costs N messages per join and a mass reconnect O(N^2);
//! its tracker, one process per shard, is the bottleneck. Here:
//! - Diffs are **batched per topic per interval** (`--presence-interval`):
//!   every change of an interval goes into one pending diff per topic
//!   ([`TopicPresence`](topic)), merged (a join and leave of the same
//!   presence cancel out), and each subscriber gets one `presence_diff` per
//!   interval whatever the join rate. Each node makes its own diffs from its
//!   own copy, so diffs never cross the backplane.
//! - `presence_state` is the state as of the last diff, encoded at most
//!   once per interval and shared (an `Arc<str>`) by every joiner until the
//!   next diff, not rebuilt per joiner.
//! - No global lock: a node's topics are spread over [`STRIPES`] mutexes by
//!   topic hash; a join or leave locks one stripe for a hash insert. Each
//!   event-loop shard flushes its own share of the stripes when its poll
//!   times out (no timer per connection or per topic).
//!
//! ## The cluster
//! Each node owns the presences it tracked and is the only one to change
//! them; the others keep a copy of the topics they have subscribers of.
//! Through a [`PresenceStore`]:
//! - once per interval a node writes its own changes where others find
//!   them and tells the nodes watching the topic (with Redis: a Lua script
//!   updates the node's hash for the topic and PUBLISHes the change, in one
//!   atomic step);
//! - a node that starts watching a topic reads every live node's
//!   presences there (a snapshot), then applies changes as they come;
//! - a node asked about a topic it does not watch (the server API's
//!   `GET /api/presence`) reads every live node's presences there once
//!   ([`PresenceStore::fetch`]), without watching it;
//! - a node proves it is alive by refreshing a key with a TTL; a node whose
//!   key is gone for long enough is dead, and its presences leave
//!   everywhere ([`redis`] has the figures: `--presence-timeout`, 30 s by
//!   default, bounds the time from a crash to the leaves).
//!
//! ## Consistency
//! - Every node converges to the same presences per topic: each owner's
//!   changes reach each watcher in the order the owner made them, a
//!   snapshot replaces what a watcher holds of an owner, and replaying a
//!   change is harmless (presences are named by (owner, sequence), never
//!   reused). Between nodes the views differ by at most about two intervals
//!   plus a Redis round trip.
//! - A client hears of each change once: its `presence_state` is the state
//!   its next diff starts from. Right after a node's first subscriber of a
//!   topic joins, the other nodes' presences may arrive in the first diffs
//!   instead of the state (the snapshot is one round trip away).
//! - A node's crash: its presences stay listed until the timeout, then
//!   leave. A restarted node is a new owner: its users reconnect with new
//!   presences (joins), the old ones leave at the timeout; users on other
//!   nodes see no leave or join of their own.
//! - Redis down: every node keeps its copy and its local diffs (no leave
//!   storm); changes made meanwhile are exchanged when Redis is back (each
//!   node rewrites its presences and re-reads the others').
//!
//! ## Layout
//! `entry.rs` (a presence, its `phx_ref`), `topic.rs` (one topic: flushed
//! state, pending diff, cached state), `encode.rs` (the JSON), `tracker.rs`
//! ([`Tracker`]: the striped topics of a node), `wire.rs` (a change as the
//! store carries it), stores beside the trait: [`LocalPresence`] (one node),
//! [`MemoryPresence`] (an in-process cluster for tests), [`RedisPresence`];
//! [`conformance`]: the suite every store passes.

pub mod conformance;
pub mod encode;
pub mod entry;
mod local;
mod memory;
pub mod redis;
mod topic;
pub mod tracker;
pub mod wire;

use std::sync::{Arc, Weak};

pub use entry::{meta_fields, phx_ref, Meta, MetaError, Ref};
pub use local::LocalPresence;
pub use memory::{MemoryPresence, MemoryPresenceBus};
pub use redis::RedisPresence;
pub use topic::{Flushed, Members};
pub use tracker::{pusher_meta, PresenceStats, State, Tracker, STRIPES};

/// How a topic's presence reaches clients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// `presence_state` and `presence_diff`, as phoenix.js `Presence` reads.
    #[default]
    List,
    /// `presence_count` `{"count": N}` only, for very large topics.
    Count,
}

/// Presences of one owner on one topic: (key, meta) pairs.
pub type Entries = Vec<(Arc<str>, Meta)>;

/// One owner's changes on one topic: presences that joined and left.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    pub joins: Vec<(Arc<str>, Meta)>,
    pub leaves: Vec<(Arc<str>, Meta)>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.joins.is_empty() && self.leaves.is_empty()
    }
}

/// What [`PresenceStore::fetch`] reads: every live node's presences on a
/// topic, by owner.
pub type Fetched = Result<Vec<(u64, Entries)>, crate::Error>;

/// Where [`PresenceStore::fetch`] hands its answer (on the store's thread:
/// it must not block).
pub type FetchReply = Box<dyn FnOnce(Fetched) + Send>;

/// What a node's presence needs from the rest of the cluster.
///
/// The node calls these from its event loops and under its stripe locks,
/// so none may block and none may call back into the [`PresenceSink`]
/// before returning: an implementation queues the work for its own thread.
pub trait PresenceStore: Send + Sync + 'static {
    /// Called once when the node is built, before any other call.
    fn attach(&self, sink: Weak<dyn PresenceSink>);
    /// This node's id: the owner of the presences it tracks.
    fn node_id(&self) -> u64;
    /// This node's own changes on `topic` in one interval: keep them where
    /// the other nodes find them and tell the nodes watching `topic`.
    fn publish(&self, topic: &str, delta: Delta);
    /// The node has local subscribers of `topic` who get presence: deliver
    /// the other nodes' presences there ([`PresenceSink::replace`] per
    /// owner once read, then [`PresenceSink::apply`] as they change).
    fn watch(&self, topic: &str);
    /// The node no longer watches `topic`.
    fn unwatch(&self, topic: &str);
    /// Reads every live node's presences on `topic` as the store keeps
    /// them, this node's included, for a topic the node need not watch
    /// (the server API's `GET /api/presence`), and hands them to `done`,
    /// or the error that kept it from reading. Owners the store does not
    /// take for alive are left out, as a snapshot leaves them out.
    fn fetch(&self, topic: &str, done: FetchReply);
    /// Whether changes flow to and from the other nodes now.
    fn is_connected(&self) -> bool {
        true
    }
    /// Appends the store's own Prometheus lines to `/metrics`.
    fn describe(&self, _out: &mut dyn crate::metrics::Sink) {}
    /// The health of its [Redis link](crate::link), if it has one.
    fn link(&self) -> Option<&crate::link::Health> {
        None
    }
}

/// What a store may ask of the node it serves (the node's [`Tracker`]).
pub trait PresenceSink: Send + Sync + 'static {
    /// Another node's changes on `topic`.
    fn apply(&self, topic: &str, delta: Delta);
    /// Another node's presences on `topic` are exactly `entries` (a
    /// snapshot, or the owner rewriting its state).
    fn replace(&self, topic: &str, owner: u64, entries: Entries);
    /// `owner` is dead: its presences leave on every topic.
    fn owner_down(&self, owner: u64);
    /// Whether the node watches `topic` now.
    fn is_watched(&self, topic: &str) -> bool;
    /// Every watched topic (to watch again after a reconnect).
    fn watched(&self) -> Vec<Arc<str>>;
    /// The node's own presences, by topic (to rewrite after a reconnect).
    fn owned(&self) -> Vec<(Arc<str>, Entries)>;
    /// Owners other than this node with presences here (to check that
    /// they are alive).
    fn owners(&self) -> Vec<u64>;
}
