//! The nodes' own traffic over the backplane: questions the server API
//! asks the whole cluster (subscriber counts and stats of every node), and
//! revocations every node must hear of.
//!
//! It rides on the same pub/sub as broadcasts, on reserved topics no client
//! can join ([`auth::CONTROL_PREFIX`](crate::auth::CONTROL_PREFIX)): every
//! node subscribes to [`CONTROL_TOPIC`] and to its own reply topic
//! `throng:reply:<node>`. A `gather` on the control topic names the asker's
//! reply topic; each node that hears it counts its subscribers (each shard
//! counts its own registry, so no lock is shared with joins and leaves) and
//! publishes a `report` there. The asker takes the reports that arrive
//! within [`GATHER_WAIT`]: the counts are a snapshot of each node at the
//! moment it answered, not one instant of the cluster, and a node that is
//! down or cut off from Redis is simply missing (the answer says how many
//! nodes answered).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use throng_protocol::OwnedPayload;
use throng_pubsub::Broadcast;

use crate::metrics::ShardStats;

/// The topic every node listens to for cluster-wide requests.
pub const CONTROL_TOPIC: &str = "throng:control";
/// How long a cluster-wide question waits for the other nodes' reports.
pub const GATHER_WAIT: Duration = Duration::from_millis(300);

/// One node's answer to a gather.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeReport {
    pub node: String,
    /// Channel topics (not socket ids) and their subscribers on the node.
    pub topics: BTreeMap<String, u64>,
    /// Authenticated users with a socket on the node, counted per shard (a
    /// user with sockets on two shards of the node counts twice).
    pub users: u64,
    pub stats: StatsSummary,
}

/// A node's counters, for `GET /api/stats`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StatsSummary {
    pub connections: u64,
    pub websockets: u64,
    pub channels_joined: u64,
    pub messages_in: u64,
    pub messages_out: u64,
    pub broadcasts: u64,
    pub joins: u64,
    pub refused_joins: u64,
    pub auth_refusals: u64,
    pub origin_refusals: u64,
    pub policy_refusals: u64,
    pub rate_limited: u64,
    pub rate_limit_closes: u64,
    pub user_disconnects: u64,
}

impl StatsSummary {
    pub fn of(stats: &[Arc<ShardStats>]) -> StatsSummary {
        let sum = |f: fn(&ShardStats) -> &std::sync::atomic::AtomicU64| -> u64 {
            stats.iter().map(|s| f(s).load(Relaxed)).sum()
        };
        StatsSummary {
            connections: sum(|s| &s.connections),
            websockets: sum(|s| &s.websockets),
            channels_joined: sum(|s| &s.channels),
            messages_in: sum(|s| &s.messages_in),
            messages_out: sum(|s| &s.messages_out),
            broadcasts: sum(|s| &s.broadcasts),
            joins: sum(|s| &s.joins),
            refused_joins: sum(|s| &s.refused_joins),
            auth_refusals: sum(|s| &s.auth_refusals),
            origin_refusals: sum(|s| &s.origin_refusals),
            policy_refusals: sum(|s| &s.policy_refusals),
            rate_limited: sum(|s| &s.rate_limited),
            rate_limit_closes: sum(|s| &s.rate_limit_closes),
            user_disconnects: sum(|s| &s.user_disconnects),
        }
    }
}

type Done = Box<dyn FnOnce(NodeReport) + Send>;

/// A node report being filled in by its shards; the last one calls `done`.
pub(crate) struct Collector {
    remaining: AtomicUsize,
    report: Mutex<NodeReport>,
    done: Mutex<Option<Done>>,
}

impl Collector {
    pub fn new(shards: usize, report: NodeReport, done: Done) -> Arc<Collector> {
        Arc::new(Collector {
            remaining: AtomicUsize::new(shards),
            report: Mutex::new(report),
            done: Mutex::new(Some(done)),
        })
    }

    /// One shard's authenticated users and subscriber counts, by topic.
    pub fn add<'a>(&self, users: usize, counts: impl Iterator<Item = (&'a str, usize)>) {
        {
            let mut r = self.report.lock().unwrap_or_else(|e| e.into_inner());
            r.users += users as u64;
            for (topic, n) in counts {
                *r.topics.entry(topic.to_string()).or_default() += n as u64;
            }
        }
        if self.remaining.fetch_sub(1, Relaxed) == 1 {
            let report =
                std::mem::take(&mut *self.report.lock().unwrap_or_else(|e| e.into_inner()));
            if let Some(done) = self.done.lock().unwrap_or_else(|e| e.into_inner()).take() {
                done(report);
            }
        }
    }
}

/// A control message on [`CONTROL_TOPIC`].
#[derive(Serialize, Deserialize, Debug)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Request {
    /// Report to `reply` with `id`.
    Gather { id: u64, reply: String },
    /// Refuse `user`'s tokens signed up to `at` (Unix ms).
    Revoke { user: String, at: i64 },
    /// Close every socket of `user` (after a revoke, if any: same order).
    Disconnect { user: String },
}

/// A report on a node's reply topic.
#[derive(Serialize, Deserialize, Debug)]
pub struct Reply {
    pub id: u64,
    pub report: NodeReport,
}

/// This node's side of the control traffic: its id, its reply topic, and
/// the questions it is waiting on.
pub struct Control {
    pub node_id: String,
    pub reply_topic: Arc<str>,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, tokio::sync::mpsc::UnboundedSender<NodeReport>>>,
}

impl Default for Control {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let node_id = format!("{:016x}", h.finish());
        Control {
            reply_topic: Arc::from(format!("throng:reply:{node_id}")),
            node_id,
            next_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
        }
    }
}

impl Control {
    /// Waits for reports to a new question; returns its id.
    pub fn expect(&self, tx: tokio::sync::mpsc::UnboundedSender<NodeReport>) -> u64 {
        let id = self.next_id.fetch_add(1, Relaxed);
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        id
    }

    pub fn forget(&self, id: u64) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// A report from another node.
    pub fn on_reply(&self, b: &Broadcast) {
        let Some(reply) = json_of::<Reply>(b) else {
            return;
        };
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = pending.get(&reply.id) {
            let _ = tx.send(reply.report);
        }
    }

    /// The broadcast that asks every node (on the control topic).
    pub fn request(req: &Request) -> Option<Broadcast> {
        let payload = OwnedPayload::json(req).ok()?;
        Some(Broadcast::new(
            Arc::from(CONTROL_TOPIC),
            "request".into(),
            payload,
            None,
        ))
    }
}

/// A broadcast's JSON payload as `T`.
pub fn json_of<T: for<'de> Deserialize<'de>>(b: &Broadcast) -> Option<T> {
    match &b.payload {
        OwnedPayload::Json(text) => serde_json::from_str(text).ok(),
        OwnedPayload::Binary(_) => None,
    }
}
