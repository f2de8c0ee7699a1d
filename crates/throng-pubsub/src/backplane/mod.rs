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
//! Besides broadcasts, a backplane carries **direct messages**: opaque bytes
//! from one node to one other node, named by its [`Backplane::node_id`]. The
//! server uses them to forward a long-poll request to the node that holds
//! the session (as Phoenix forwards long-poll requests to the session's
//! process through PubSub); the backplane neither reads nor keeps them.
//!
//! Every implementation must pass the [`conformance`](crate::conformance)
//! suite: exactly once, per-topic order from one node, a node's own
//! broadcasts skipped, only subscribed nodes reached, direct messages to
//! their node alone and in order, and subscriptions restored after a
//! reconnect.

pub mod envelope;
mod local;
mod memory;
pub mod redis;

use std::sync::{Arc, Weak};

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
    /// A direct message another node sent to this one
    /// ([`Backplane::send_to`]). Called on the backplane's thread: queue the
    /// work, do not do it here.
    fn direct(&self, msg: &[u8]);
}

/// Carries broadcasts to the other nodes of a cluster.
///
/// The node calls these from its event loops, so none may block: an
/// implementation that does I/O queues the work for its own thread.
pub trait Backplane: Send + Sync + 'static {
    /// Called once when the node is built, before any other call.
    fn attach(&self, handler: Weak<dyn Handler>);
    /// A broadcast made on this node (already delivered to its own
    /// subscribers); send it to the other nodes. One message per broadcast,
    /// never one per subscriber.
    fn publish(&self, broadcast: &Broadcast);
    /// This node gained its first local subscriber of `topic`.
    fn subscribe(&self, topic: &str);
    /// This node lost its last local subscriber of `topic`.
    fn unsubscribe(&self, topic: &str);
    /// Whether broadcasts flow to and from the other nodes now.
    fn is_connected(&self) -> bool {
        true
    }
    /// This node's id among the nodes of the cluster, the address of
    /// [`Backplane::send_to`]. A single node's is 0.
    fn node_id(&self) -> u64 {
        0
    }
    /// Sends `msg` to node `node` alone, after the messages this node sent it
    /// before (per-sender order). Returns false when it surely cannot arrive
    /// (no other nodes, backplane down, queue full); true does not promise
    /// delivery (the node may be gone).
    fn send_to(&self, _node: u64, _msg: Vec<u8>) -> bool {
        false
    }
    /// Appends the backplane's own Prometheus lines to `/metrics`.
    fn render_metrics(&self, _out: &mut String) {}
}
