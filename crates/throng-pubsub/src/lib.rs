//! # throng-pubsub
//!
//! The pub/sub boundary: everything between "a channel broadcasts on a
//! topic" and "these connections get these bytes", on one node and across
//! many. The server's event loops call into it; it never calls the server
//! except through the narrow [`Handler`].
//!
//! ## What it owns
//! - [`Broadcast`] (`broadcast.rs`): a message encoded once per serializer
//!   into whole WebSocket frames, shared by every subscriber.
//! - [`Registry`] (`registry.rs`): one shard's subscriptions (topic to
//!   connection keys); join and leave touch only it, no lock.
//! - [`NodeTopics`] (`shards.rs`): which shards of the node have subscribers
//!   of a topic, as a [`ShardSet`]; locked only on a shard's first or last
//!   subscriber of a topic and once per broadcast.
//! - [`Backplane`] and [`Handler`] (`backplane/`): how nodes reach each
//!   other (broadcasts to the nodes subscribed to a topic, and the
//!   [control lane](backplane::control): messages from one node to another
//!   or to every node, optionally retained for later nodes, which the
//!   server uses for its cluster-wide questions, disconnects, revocations
//!   and to forward long-poll requests to the node holding the session), with
//!   [`LocalBackplane`] (one node, the default),
//!   [`MemoryBackplane`] (an in-process cluster for tests) and
//!   [`RedisBackplane`] (Redis pub/sub, with its versioned
//!   [envelope](backplane::envelope)).
//! - [`link`]: the one Redis connection engine the Redis backplane and the
//!   Redis presence store run on (URL, TLS, ACL user, timeouts, reconnect
//!   with backoff, the pub/sub connection), with its one policy.
//! - [`conformance`]: the suite every backplane must pass, run against the
//!   in-memory and the Redis backplane by `tests/backplanes.rs`, as
//!   phoenix_pubsub shares one test suite across its adapters.
//! - [`presence`]: who is on a topic, cluster-wide: a node's [`Tracker`]
//!   (diffs batched per topic per interval, the state encoded once per
//!   interval), the [`PresenceStore`] trait with [`LocalPresence`],
//!   [`MemoryPresence`] and [`RedisPresence`], and their conformance suite
//!   (`tests/presence_stores.rs`); its module docs give the design and the
//!   consistency.
//! - [`occupancy`]: which topics have a subscriber anywhere in the
//!   cluster, decided in Redis so that a topic's first subscriber and its
//!   last one gone are each reported by exactly one node
//!   ([`RedisOccupancy`]; the app backend's `occupied`/`vacated` events).
//! - [`history`]: the last messages of a topic with their positions, for
//!   recovery on rejoin ([`MemoryHistory`], one process; [`RedisHistory`],
//!   Redis Streams, a cluster, whose broadcasts travel as version 2
//!   envelopes that every node delivers from Redis, the sender too).
//! - [`metrics`]: the metrics registry's types (each metric one static descriptor; sinks: Prometheus text, the dashboard's figures).
//!
//! Dependencies point one way: protocol, then this crate, then the server.
//!
//! Inside, modules use only those in a layer below
//! (`scripts/check-import-cycles.py` checks there is no cycle):
//! 1. plain values and helpers: `fields`, `metrics`, `position`, `registry`, `shards`
//! 2. `broadcast` (the encoded message), `link` (the Redis connection engine)
//! 3. the engines: `backplane`, `occupancy`, `presence`
//! 4. `history` (its Redis store publishes backplane envelopes), `conformance`
//!
//! ## How a broadcast travels
//! A client on node A broadcasts on `rooms:lobby`. A's shards deliver it to
//! A's subscribers (encoded once per serializer, as on a single node) and
//! call `Backplane::publish` once: one envelope on a bounded queue, one
//! `PUBLISH throng:t:rooms:lobby <envelope>` by A's `throng-redis` thread.
//! Every node with a local subscriber of the topic has SUBSCRIBEd that
//! channel (a node subscribes when it gains its first local subscriber of a
//! topic and unsubscribes when it loses the last), so Redis sends the message
//! once to each such node, A included. A sees its own node id in the
//! envelope and skips it; every other node encodes the frames once and hands
//! them to its shards (`Handler::deliver`). Fan-out stays one Redis
//! message per subscribed node per broadcast, whatever the subscriber count.
//!
//! ## The envelope (version 1)
//! `[version u8 = 1][sender node id u64][topic len u32][topic]`
//! `[event len u32][event][payload kind u8: 0 JSON, 1 binary][payload len u32][payload]`,
//! big-endian; see [`envelope`]. A node reads only the version it writes and
//! drops (counts, logs) anything else, so a rolling upgrade that changes the
//! format must bump the version and expects no cross-version delivery.
//!
//! ## Guarantees while Redis is up
//! - **Exactly once**: a broadcast reaches each subscriber on each node once.
//!   The origin delivers locally and skips its own copy from Redis; every
//!   other subscribed node gets one copy from Redis.
//!   A broadcast on a topic with history in Redis ([`RedisHistory`]) is the
//!   exception: the origin delivers its own copy from Redis too, so that
//!   every node delivers the topic's messages in the order of their
//!   offsets (one total order per topic, whatever node published).
//! - **Per-node order**: one publisher connection per node, fed by one FIFO
//!   queue, so the broadcasts a node makes on a topic reach every subscriber
//!   in the order that node made them (Redis keeps a connection's order).
//!   Broadcasts made on *different* nodes have no total order: subscribers on
//!   different nodes may see two concurrent broadcasts interleaved
//!   differently (as with Phoenix.PubSub's Redis adapter).
//! - A node that has just gained its first subscriber of a topic receives
//!   other nodes' broadcasts once its SUBSCRIBE reaches Redis (about one
//!   round trip after the join); broadcasts published before that are not
//!   replayed (Redis pub/sub keeps nothing).
//!
//! ## When Redis is down
//! - At start: `throng serve --redis URL` fails with an error naming the URL
//!   and exits non-zero (the supervisor checks before starting workers).
//! - Later: the node logs **one** error naming the URL, marks itself
//!   disconnected (`throng_backplane_connected 0`) and reconnects with
//!   backoff, 100 ms doubling to 5 s (the [`link`]'s policy, the presence
//!   store's too). Meanwhile local delivery is untouched
//!   (a broadcast still reaches every subscriber on its own node) and
//!   broadcasts for other nodes are **dropped and counted**
//!   (`throng_backplane_dropped_total`), not queued: Redis pub/sub would not
//!   have kept them for late subscribers either, and replaying a backlog
//!   after an outage would deliver stale messages late. Broadcasts made on
//!   other nodes during the outage are lost to this node the same way.
//! - Reconnected: both connections are rebuilt, every topic in
//!   `Handler::topics()` is SUBSCRIBEd again, then the node counts as
//!   connected and publishes again; it logs how long it was down and how
//!   many broadcasts it dropped. No restart is needed. The attempts come
//!   0.1, 0.3, 0.7, 1.5, 3.1, 6.3, 11.3 s ... after the loss, so broadcasts
//!   flow again at most 5 s after Redis is back (measured on loopback: 0.3 s
//!   after a 1 s outage, 0.1 s after 3 s, 1.3 s after 10 s;
//!   `tests/cluster/redis_restart.test.mjs`).
//! - Redis slower than the node: past [`backplane::redis::PUBLISH_QUEUE`] queued
//!   broadcasts, `publish` drops (counted, one warning) instead of blocking
//!   an event loop.
//! - The path to Redis dead without a close (a half-open connection, a
//!   partition) or Redis stuck: every connection is PINGed each second and
//!   given up when an answer is the link's timeout late (5 s by default),
//!   then as above. A broadcast given up that way may still reach Redis
//!   when the path heals (TCP delivers it late), after the node's later
//!   ones: the one case where per-node order does not hold; presence and
//!   occupancy changes are fenced against it (their scripts check the
//!   session's token). The faults are injected by
//!   `tests/cluster/redis_faults.test.mjs`.
//!
//! ## Threads
//! `RedisBackplane` methods run on the shards and never block: `try_send`
//! on a bounded queue (broadcasts and control messages) or `send` on an
//! unbounded one (topic changes). The `throng-redis` thread owns both connections and the set of
//! subscribed channels; it asks the node's topic set (`Handler::has_topic`,
//! backed by `NodeTopics`, a mutex the shards take only on first/last subscriber) to decide what to
//! subscribe, so out-of-order topic notifications from two shards cannot
//! leave a wrong subscription.

#![forbid(unsafe_code)]

pub mod backplane;
mod broadcast;
pub mod conformance;
mod fields;
pub mod history;
pub mod link;
pub mod metrics;
pub mod occupancy;
mod position;
pub mod presence;
mod registry;
mod shards;

pub use backplane::{
    Backplane, Handler, LocalBackplane, MemoryBackplane, MemoryBus, RedisBackplane, Route,
};
pub use broadcast::{frame_of, live_bytes, Broadcast, Exclude, MemberTag};
pub use history::{HistoryStore, MemoryHistory, Position, RedisHistory, Replay};
pub use link::RedisOptions;
pub use occupancy::{OccupancySink, RedisOccupancy};
pub use presence::{
    LocalPresence, MemoryPresence, MemoryPresenceBus, PresenceSink, PresenceStore, RedisPresence,
    Tracker,
};
pub use registry::{Registry, Slot, Topic};
pub use shards::{NodeTopics, ShardSet, MAX_SHARDS};

/// The pub/sub layer's errors (the Redis backplane's, at start).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid Redis URL {url}: {reason}")]
    RedisUrl { url: String, reason: String },
    #[error("cannot connect to Redis at {url}: {reason}")]
    RedisConnect { url: String, reason: String },
    #[error("Redis TLS ({url}): {reason}")]
    RedisTls { url: String, reason: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A presence store could not answer a read ([`PresenceStore::fetch`]).
    #[error("the presence store cannot answer now: {0}")]
    PresenceUnavailable(String),
}
