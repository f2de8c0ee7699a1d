//! The nodes' own traffic over the backplane's control lane
//! ([`Backplane::send_control`](throng_pubsub::Backplane::send_control)):
//! questions the server API asks the whole cluster (subscriber counts and
//! stats of every node), user disconnects and revocations every node must
//! hear of, and long-poll requests forwarded to the node holding the
//! session. None of it travels on the broadcast lane, so no topic is
//! reserved for it and no subscription decides whether it arrives.
//!
//! A [`Message`] is typed here and encoded with a leading tag that versions
//! it ([`Message::encode`]): `1` then a JSON [`Request`], `2` then a
//! long-poll forward (`forward::wire`, itself versioned), `3` then a Pusher
//! trigger that leaves out a socket of another node (`forward::pusher`). A
//! node drops (and logs at debug) a tag it does not know.
//!
//! A gather may name a topic prefix (the Pusher HTTP API's channel
//! queries): the nodes then count only the topics under it, and leave
//! their counters out. A node built before the prefix counts every topic
//! (it ignores the field); the asker filters again.
//!
//! A `gather` goes to every node; each node that hears it counts its
//! subscribers (each shard counts its own registry, so no lock is shared
//! with joins and leaves) and sends a `report` to the asker alone (the
//! lane names the sender). The asker takes the reports that arrive within
//! [`GATHER_WAIT`]: the counts are a snapshot of each node at the moment it
//! answered, not one instant of the cluster, and a node that is down or cut
//! off from Redis is simply missing (the answer says how many nodes
//! answered).
//!
//! A revocation is *retained* ([`Backplane::retain_control`](throng_pubsub::Backplane::retain_control)),
//! under `revoke:<user>` and for as long as the revocation lasts: with
//! Redis it is kept there (`throng:k:revoke:<user>`, with that expiry), so a
//! node started later, or back from an outage, learns it before it needs it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::forward::pusher::RemoteTrigger;
use crate::forward::wire::Forward;
use crate::metrics::ShardStats;

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
    /// The node's limit counters, and its hooks' and backplane's figures,
    /// named (and labelled) as in its `/metrics` (read from the metrics
    /// registry, `crate::scrape::all`).
    /// Empty from a node built before it was added.
    #[serde(default)]
    pub counters: BTreeMap<String, f64>,
}

/// A node's counters, for `GET /api/stats`. Every field is a whole number
/// (the cluster's figure is the nodes' sum); a field a node built before it
/// was added does not send reads 0.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
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
    pub longpoll_sessions: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The process's resident memory.
    pub rss_bytes: u64,
    /// The process's user and system CPU time, in milliseconds.
    pub cpu_ms: u64,
    /// Bytes of broadcasts waiting in the shards' inboxes.
    pub shard_inbox_bytes: u64,
}

impl StatsSummary {
    /// The sums of a node's shard counters `stats`, with the bytes waiting
    /// in its shards' inboxes (`shard_inbox_bytes`) and the process's figures.
    pub fn of(stats: &[Arc<ShardStats>], shard_inbox_bytes: u64) -> StatsSummary {
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
            longpoll_sessions: sum(|s| &s.longpoll_sessions),
            bytes_in: sum(|s| &s.bytes_in),
            bytes_out: sum(|s| &s.bytes_out),
            rss_bytes: crate::sys::rss_bytes().unwrap_or(0),
            cpu_ms: (crate::sys::cpu_seconds().unwrap_or(0.0) * 1000.0) as u64,
            shard_inbox_bytes,
        }
    }
}

/// The sum of the nodes' counters.
pub(crate) fn cluster(reports: &[NodeReport]) -> serde_json::Value {
    let mut total = serde_json::Map::new();
    for r in reports {
        if let Ok(serde_json::Value::Object(stats)) =
            serde_json::to_value::<&StatsSummary>(&r.stats)
        {
            for (k, v) in stats {
                let n = v.as_u64().unwrap_or(0);
                let e = total.entry(k).or_insert(serde_json::json!(0));
                *e = serde_json::json!(e.as_u64().unwrap_or(0) + n);
            }
        }
    }
    let users: u64 = reports.iter().map(|r| r.users).sum();
    let topics: std::collections::BTreeSet<&String> =
        reports.iter().flat_map(|r| r.topics.keys()).collect();
    total.insert("nodes".into(), serde_json::json!(reports.len()));
    total.insert("users".into(), serde_json::json!(users));
    total.insert("topics".into(), serde_json::json!(topics.len()));
    serde_json::Value::Object(total)
}

type Done = Box<dyn FnOnce(NodeReport) + Send>;

/// A node report being filled in by its shards; the last one calls `done`.
pub(crate) struct Collector {
    /// Only topics under it, if set.
    prefix: Option<Arc<str>>,
    remaining: AtomicUsize,
    report: Mutex<NodeReport>,
    done: Mutex<Option<Done>>,
}

impl Collector {
    pub fn new(
        shards: usize,
        report: NodeReport,
        prefix: Option<Arc<str>>,
        done: Done,
    ) -> Arc<Collector> {
        Arc::new(Collector {
            prefix,
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
            let under = |t: &str| self.prefix.as_deref().is_none_or(|p| t.starts_with(p));
            for (topic, n) in counts.filter(|(t, _)| under(t)) {
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

/// A cluster-wide request or its answer, as JSON (tag 1).
#[derive(Serialize, Deserialize, Debug)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Request {
    /// Report to the sender with `id` (only the topics under `prefix`, if
    /// set, and no counters then).
    Gather {
        id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<String>,
    },
    /// A node's answer to the gather `id`.
    Report { id: u64, report: Box<NodeReport> },
    /// Refuse `user`'s tokens signed up to `at` (Unix ms).
    Revoke { user: String, at: i64 },
    /// Close every socket of `user` (after a revoke, if any: same order).
    Disconnect { user: String },
}

/// A control message between nodes.
#[derive(Debug)]
pub(crate) enum Message {
    Request(Request),
    LongPoll(Forward),
    Pusher(RemoteTrigger),
}

/// The tag of a JSON [`Request`].
const TAG_REQUEST: u8 = 1;
/// The tag of a long-poll forward.
const TAG_LONGPOLL: u8 = 2;
/// The tag of a Pusher trigger for every node.
const TAG_PUSHER: u8 = 3;

impl Message {
    /// The bytes of the control lane's body.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Message::Request(r) => {
                let mut out = vec![TAG_REQUEST];
                // A derived Serialize of strings and numbers cannot fail.
                if serde_json::to_writer(&mut out, r).is_err() {
                    out.truncate(1);
                }
                out
            }
            Message::LongPoll(f) => {
                let forward = f.encode();
                let mut out = Vec::with_capacity(1 + forward.len());
                out.push(TAG_LONGPOLL);
                out.extend_from_slice(&forward);
                out
            }
            Message::Pusher(t) => {
                let mut out = vec![TAG_PUSHER];
                out.extend_from_slice(&t.encode());
                out
            }
        }
    }

    /// Reads a body; `None` for anything this build did not write.
    pub fn decode(bytes: &[u8]) -> Option<Message> {
        match bytes.split_first()? {
            (&TAG_REQUEST, json) => serde_json::from_slice(json).ok().map(Message::Request),
            (&TAG_LONGPOLL, forward) => Forward::decode(forward).map(Message::LongPoll),
            (&TAG_PUSHER, t) => RemoteTrigger::decode(t).map(Message::Pusher),
            _ => None,
        }
    }
}

/// This node's side of the control traffic: its name in reports, and the
/// questions it is waiting on.
pub struct Control {
    pub node_id: String,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, tokio::sync::mpsc::UnboundedSender<NodeReport>>>,
}

impl Default for Control {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        Control {
            node_id: format!("{:016x}", h.finish()),
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

    /// A report from another node to the question `id`.
    pub fn on_report(&self, id: u64, report: NodeReport) {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = pending.get(&id) {
            let _ = tx.send(report);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_unknown_tags_are_dropped() {
        let m = Message::Request(Request::Revoke {
            user: "u7".into(),
            at: 42,
        });
        let bytes = m.encode();
        assert_eq!(bytes[0], TAG_REQUEST);
        assert!(matches!(
            Message::decode(&bytes),
            Some(Message::Request(Request::Revoke { user, at: 42 })) if user == "u7"
        ));
        let report = Message::Request(Request::Report {
            id: 3,
            report: Box::default(),
        });
        assert!(matches!(
            Message::decode(&report.encode()),
            Some(Message::Request(Request::Report { id: 3, .. }))
        ));
        assert!(Message::decode(&[]).is_none());
        assert!(Message::decode(&[9, b'{', b'}']).is_none());
        assert!(Message::decode(&[TAG_REQUEST, b'x']).is_none());
        assert!(Message::decode(&[TAG_LONGPOLL, 0xff]).is_none());
        let gather = Message::Request(Request::Gather {
            id: 4,
            prefix: Some("pusher/1/".into()),
        });
        assert!(matches!(
            Message::decode(&gather.encode()),
            Some(Message::Request(Request::Gather { id: 4, prefix: Some(p) })) if p == "pusher/1/"
        ));
        // An older node's gather, without a prefix.
        let old = br#"{"kind":"gather","id":5}"#;
        let mut bytes = vec![TAG_REQUEST];
        bytes.extend_from_slice(old);
        assert!(matches!(
            Message::decode(&bytes),
            Some(Message::Request(Request::Gather {
                id: 5,
                prefix: None
            }))
        ));
        let t = RemoteTrigger {
            socket_id: "1.2".into(),
            ..Default::default()
        };
        assert!(matches!(
            Message::decode(&Message::Pusher(t).encode()),
            Some(Message::Pusher(t)) if t.socket_id == "1.2"
        ));
    }
}
