//! Which topics have a subscriber in the cluster, for the `occupied` and
//! `vacated` events: exactly one event per transition, cluster-wide.
//!
//! A shard tells [`Occupancy::changed`] when the node gains its first or
//! loses its last subscriber of a topic (`NodeTopics` says which, under its
//! lock). Then:
//! - one node (no `--redis`): this node decides alone, under a mutex taken
//!   only on those first and last subscribers: it compares what the node
//!   has now with what it reported last, so two shards' notices racing
//!   each other still give one `occupied`, then one `vacated`, in order;
//! - a cluster (`--redis`, `--workers`): Redis decides, atomically, which
//!   node saw the topic's set of nodes go from empty or become empty
//!   (`throng_pubsub::occupancy`: the scripts, a dead node's topics, and
//!   what a Redis reconnect does: the node re-asserts its membership).
//!
//! Tested with real processes: `tests/e2e/hooks_events.test.mjs` (one
//! node) and `tests/cluster/hooks_events.test.mjs` (two nodes and
//! `--workers 2` on one redis-server, and a node killed).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use throng_pubsub::{OccupancySink, RedisOccupancy};

pub enum Occupancy {
    /// This node alone: the topics it reported occupied.
    Local(Mutex<HashSet<Arc<str>>>),
    /// The cluster, through Redis.
    Redis(RedisOccupancy),
}

impl Occupancy {
    /// The node gained its first or lost its last subscriber of `topic`.
    /// Never blocks on I/O.
    /// `node` is the node (`crate::node`, above the hooks it holds): what
    /// it has now, and where its events go.
    pub fn changed(&self, node: &impl OccupancySink, topic: &Arc<str>) {
        match self {
            Occupancy::Local(reported) => {
                let mut reported = reported.lock().unwrap_or_else(|e| e.into_inner());
                // Read under this lock, and the event queued under it too:
                // the decisions and their order are one.
                let has = node.has_topic(topic);
                match (has, reported.contains(topic)) {
                    (true, false) => {
                        reported.insert(topic.clone());
                        node.occupied(topic);
                    }
                    (false, true) => {
                        reported.remove(topic);
                        node.vacated(topic);
                    }
                    _ => {}
                }
            }
            Occupancy::Redis(r) => r.changed(topic),
        }
    }

    pub fn describe(&self, out: &mut dyn throng_pubsub::metrics::Sink) {
        if let Occupancy::Redis(r) = self {
            r.describe(out);
        }
    }
}
