//! The backplane: what carries broadcasts between the nodes of a cluster.
//!
//! A node talks to its backplane through [`Backplane`] (four calls and
//! metrics, as `Phoenix.PubSub.Adapter`'s few callbacks), and the backplane
//! talks back through a narrow [`Handler`]: deliver a broadcast from another
//! node, and say which topics this node has subscribers of. Neither side
//! knows the other's type, so the server never names Redis and a backplane
//! never sees a shard.
//!
//! Implementations, each beside this trait:
//! - [`LocalBackplane`] (`local.rs`): a single node, nothing to carry; the
//!   default.
//! - [`MemoryBackplane`] (`memory.rs`): several nodes in one process joined
//!   by a [`MemoryBus`]; for tests that need a cluster without Redis.
//! - [`RedisBackplane`] (`redis.rs`): nodes joined through Redis pub/sub,
//!   with the versioned [`envelope`].
//!
//! Besides broadcasts, a backplane carries the [`control`] lane: opaque
//! bytes from one node to one other node, named by its
//! [`Backplane::node_id`], or to every other node, optionally retained for
//! nodes that come later. The server uses it for its cluster-wide questions,
//! user disconnects and revocations, and to forward a long-poll request to
//! the node that holds the session (as Phoenix forwards long-poll requests
//! to the session's process through PubSub). It is a lane of its own, not
//! reserved topics among the broadcasts, so an engine implements it
//! deliberately: [`Backplane::send_control`], [`Backplane::retain_control`]
//! and [`Handler::control`].
//!
//! Every implementation must pass the [`conformance`](crate::conformance)
//! suite: exactly once, per-topic order from one node, a node's own
//! broadcasts skipped, only subscribed nodes reached, control messages to
//! their node (or every other node) alone and in order, retained ones
//! replayed to later nodes, and subscriptions restored after a reconnect.

pub mod control;
pub mod envelope;
mod local;
mod memory;
pub mod redis;

use std::sync::{Arc, Weak};
use std::time::Duration;

pub use control::Route;
pub use local::LocalBackplane;
pub use memory::{MemoryBackplane, MemoryBus};
pub use redis::{RedisBackplane, RedisOptions};

use crate::Broadcast;

/// What a backplane may ask of the node it serves.
pub trait Handler: Send + Sync + 'static {
    /// A broadcast made on another node, for this node's subscribers. Its
    /// frames are encoded here, once for the whole node.
    fn deliver(&self, broadcast: Arc<Broadcast>);
    /// Whether this node has a subscriber of `topic` now.
    fn has_topic(&self, topic: &str) -> bool;
    /// Every topic this node has a subscriber of (to subscribe again after a
    /// reconnect).
    fn topics(&self) -> Vec<Arc<str>>;
    /// A control message node `from` sent to this one or to every node
    /// ([`Backplane::send_control`], [`Backplane::retain_control`]). Called
    /// on the backplane's thread: queue the work, do not do it here.
    fn control(&self, from: u64, body: &[u8]);
}

/// Carries broadcasts to the other nodes of a cluster.
///
/// The node calls these from its event loops, so none may block: an
/// implementation that does I/O queues the work for its own thread.
pub trait Backplane: Send + Sync + 'static {
    /// Called once when the node is built, before any other call. An
    /// engine that keeps retained control messages hands them to `handler`
    /// before it returns (waiting a bounded time for them).
    fn attach(&self, handler: Weak<dyn Handler>);
    /// A broadcast made on this node (already delivered to its own
    /// subscribers); send it to the other nodes. One message per broadcast,
    /// never one per subscriber.
    fn publish(&self, broadcast: &Broadcast);
    /// This node gained its first local subscriber of `topic`.
    fn subscribe(&self, topic: &str);
    /// This node lost its last local subscriber of `topic`.
    fn unsubscribe(&self, topic: &str);
    /// Calls `then` once this node receives the broadcasts published on
    /// `topic` from now on (its subscription of the topic, asked for by a
    /// `subscribe` before this call, is active), or once it knows it
    /// cannot (disconnected). A history replay reads after it, so no
    /// message falls between the replay and the live ones. At once for an
    /// engine whose subscriptions take effect at once.
    fn when_subscribed(&self, _topic: &str, then: Box<dyn FnOnce() + Send>) {
        then()
    }
    /// Whether broadcasts flow to and from the other nodes now.
    fn is_connected(&self) -> bool {
        true
    }
    /// How long broadcasts have not flowed, while they do not
    /// (`/readyz` turns 503 past a bound). An engine that does not keep the
    /// time says [`Duration::MAX`] when disconnected.
    fn disconnected_for(&self) -> Option<Duration> {
        (!self.is_connected()).then_some(Duration::MAX)
    }
    /// This node's id among the nodes of the cluster, the address of
    /// [`Route::Node`]. A single node's is 0.
    fn node_id(&self) -> u64 {
        0
    }
    /// Sends control message `body` on `route`, after the control messages
    /// this node sent there before (per-sender order). Returns false when it
    /// surely cannot arrive (no other nodes, backplane down, queue full);
    /// true does not promise delivery (the node may be gone).
    fn send_control(&self, _route: Route, _body: Vec<u8>) -> bool {
        false
    }
    /// Sends `body` to every other node as [`Route::Cluster`] does, and
    /// keeps it for `ttl` under `key` (replacing what `key` held): a node
    /// that attaches later, or reconnects after an outage, receives it
    /// through [`Handler::control`] then. False as for `send_control`.
    fn retain_control(&self, _key: &str, _body: Vec<u8>, _ttl: Duration) -> bool {
        false
    }
    /// Hands the backplane's own metrics to `/metrics`.
    fn describe(&self, _out: &mut dyn crate::metrics::Sink) {}
    /// The health of its [Redis link](crate::link), if it has one.
    fn link(&self) -> Option<&crate::link::Health> {
        None
    }
}
