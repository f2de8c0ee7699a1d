//! Redis Cluster under the [link](crate::link): what lets a `--redis` URL
//! of the form `redis+cluster://HOST:PORT,HOST:PORT` (or
//! `rediss+cluster://` for TLS, `USER:PASSWORD@` before the hosts for an
//! ACL user) run the same workers as one Redis.
//!
//! - [`slot`]: the hash slot of a key or channel, and the hash tag that
//!   keeps a topic's keys and channels in one slot.
//! - [`Topology`]: which master serves which slot, read with
//!   `CLUSTER SLOTS` from any node that answers (the URL's seeds, then every
//!   node seen since).
//! - [`Router`] (`router.rs`): commands, each sent to the master of its
//!   key's slot, following `MOVED` (topology re-read) and `ASK` (`ASKING`
//!   then the command at the named node); pipelines split per master.
//! - [`Shards`] (`shards.rs`): sharded pub/sub, one subscribing connection
//!   per shard, whatever the number of channels.
//!
//! A master that fails (its connection closes) ends the link's session:
//! the link rebuilds it with its usual backoff, reading the topology again
//! until the promoted replica serves the slots, and the worker's setup
//! subscribes everything again. Every such event is counted in [`STATS`].

mod router;
mod shards;
pub mod slot;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use ::redis::aio::MultiplexedConnection;
use ::redis::Value;

pub use router::Router;
pub use shards::{Shards, ShardsHandle};

use super::{within, RResult, RedisOptions};
use crate::metrics::{Metric, Sink};
use crate::Error;
use std::time::Duration;

/// The URL schemes of a Redis Cluster.
pub const SCHEMES: [&str; 2] = ["redis+cluster://", "rediss+cluster://"];

/// Whether `url` names a Redis Cluster.
pub fn is_cluster_url(url: &str) -> bool {
    SCHEMES.iter().any(|s| url.starts_with(s))
}

/// How this process's links met the cluster's topology changes; shown in
/// `/metrics` (all links of the process together).
#[derive(Default, Debug)]
pub struct Stats {
    /// Commands answered `MOVED` (the slot had moved): topology re-read.
    pub moved: AtomicU64,
    /// Commands answered `ASK` (the slot was migrating): asked again there.
    pub ask: AtomicU64,
    /// Sharded subscriptions a shard ended itself (`sunsubscribe`: its slot
    /// migrated away), subscribed again at the new owner.
    pub resubscribed: AtomicU64,
    /// Connections to a master lost (a failover, a restart): the session was
    /// rebuilt on the cluster's new topology.
    pub shard_lost: AtomicU64,
    /// Times the topology was read (each session's start included).
    pub topology_reads: AtomicU64,
}

/// The counters of every cluster link in this process.
pub static STATS: Stats = Stats {
    moved: AtomicU64::new(0),
    ask: AtomicU64::new(0),
    resubscribed: AtomicU64::new(0),
    shard_lost: AtomicU64::new(0),
    topology_reads: AtomicU64::new(0),
};

/// Every Redis Cluster metric, and the counter it reads.
pub static METRICS: [crate::metrics::Counted<Stats>; 5] = [
    (
        Metric::counter(
            "throng_redis_cluster_moved_total",
            "Redis Cluster commands answered MOVED (a slot had moved; the topology was read again and the command resent).",
        ),
        |s| &s.moved,
    ),
    (
        Metric::counter(
            "throng_redis_cluster_ask_total",
            "Redis Cluster commands answered ASK (a slot was migrating; the command was resent to the importing node).",
        ),
        |s| &s.ask,
    ),
    (
        Metric::counter(
            "throng_redis_cluster_resubscribed_total",
            "Sharded subscriptions a Redis Cluster shard ended because their slot migrated, subscribed again at the new owner.",
        ),
        |s| &s.resubscribed,
    ),
    (
        Metric::counter(
            "throng_redis_cluster_shard_lost_total",
            "Connections to a Redis Cluster master lost (failover or restart); the link reconnected on the new topology.",
        ),
        |s| &s.shard_lost,
    ),
    (
        Metric::counter(
            "throng_redis_cluster_topology_reads_total",
            "Times the Redis Cluster topology (CLUSTER SLOTS) was read.",
        ),
        |s| &s.topology_reads,
    ),
];

/// The Redis Cluster metrics (zeros when `--redis` is one Redis).
pub fn describe(out: &mut dyn Sink) {
    for (m, counter) in &METRICS {
        out.put(m, counter(&STATS).load(Relaxed));
    }
}

/// A Redis Cluster to reach: its seeds and how to connect to any node.
#[derive(Debug)]
pub struct Spec {
    /// `rediss` or `redis`.
    scheme: &'static str,
    /// `USER:PASSWORD@` or empty.
    userinfo: String,
    /// What `?` adds to each node's URL (the seed URL's query), or empty.
    query: String,
    /// Nodes to read the topology from: the URL's, then every node seen.
    pub(crate) seeds: Mutex<Vec<String>>,
    /// The URL, password masked, for errors.
    pub shown: String,
    options: RedisOptions,
}

impl Spec {
    /// Parses `redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/?QUERY]`.
    pub fn parse(url: &str, shown: &str, options: &RedisOptions) -> Result<Spec, Error> {
        let url_error = |reason: &str| Error::RedisUrl {
            url: shown.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = if let Some(r) = url.strip_prefix("rediss+cluster://") {
            ("rediss", r)
        } else if let Some(r) = url.strip_prefix("redis+cluster://") {
            ("redis", r)
        } else {
            return Err(url_error(
                "a Redis Cluster URL starts with redis+cluster:// (rediss+cluster:// for TLS)",
            ));
        };
        let (authority, query) = match rest.find(['/', '?']) {
            Some(i) => {
                let tail = &rest[i..];
                let q = tail.find('?').map_or("", |q| &tail[q + 1..]);
                (&rest[..i], q)
            }
            None => (rest, ""),
        };
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (format!("{}@", &authority[..at]), &authority[at + 1..]),
            None => (String::new(), authority),
        };
        let seeds: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|h| {
                if h.rsplit_once(':')
                    .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
                {
                    h.to_string()
                } else {
                    format!("{h}:6379")
                }
            })
            .collect();
        if seeds.is_empty() {
            return Err(url_error(
                "name at least one node of the cluster: redis+cluster://HOST:PORT,HOST:PORT",
            ));
        }
        let spec = Spec {
            scheme,
            userinfo,
            query: query.to_string(),
            seeds: Mutex::new(seeds),
            shown: shown.to_string(),
            options: options.clone(),
        };
        // Each node's URL must be one the redis crate accepts.
        let first = spec.seeds()[0].clone();
        spec.client(&first, false)?;
        Ok(spec)
    }

    /// The seeds and every node seen so far.
    pub fn seeds(&self) -> Vec<String> {
        self.seeds.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A client for node `addr` (`HOST:PORT`), RESP3 if `resp3` (the
    /// subscribing connections, which need push messages).
    pub fn client(&self, addr: &str, resp3: bool) -> Result<::redis::Client, Error> {
        let mut url = format!("{}://{}{}/", self.scheme, self.userinfo, addr);
        let mut params: Vec<&str> = Vec::new();
        if !self.query.is_empty() {
            params.push(&self.query);
        }
        if resp3 {
            params.push("protocol=resp3");
        }
        if !params.is_empty() {
            url.push('?');
            url.push_str(&params.join("&"));
        }
        super::options::client_for(&url, &self.shown, &self.options)
    }

    /// How long a node may take to answer (`RedisOptions::timeout`).
    pub fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// A command connection to `addr`, proven by a PING.
    pub async fn connect(&self, addr: &str) -> RResult<MultiplexedConnection> {
        let client = self.client(addr, false).map_err(to_redis)?;
        let config = ::redis::AsyncConnectionConfig::new()
            .set_connection_timeout(self.timeout())
            .set_response_timeout(self.timeout());
        within(self.timeout(), "no connection", async {
            let mut c = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            ::redis::cmd("PING").query_async::<()>(&mut c).await?;
            Ok(c)
        })
        .await
    }

    /// Reads the topology from the first node that answers (`prefer`, then
    /// the seeds and every node seen), and remembers its nodes as seeds.
    pub async fn topology(&self, prefer: Option<&mut MultiplexedConnection>) -> RResult<Topology> {
        STATS.topology_reads.fetch_add(1, Relaxed);
        let mut last = None;
        if let Some(c) = prefer {
            match Topology::read(c, None, self.timeout()).await {
                Ok(t) => return Ok(self.learn(t)),
                Err(e) => last = Some(e),
            }
        }
        for addr in self.seeds() {
            let attempt = async {
                let mut c = self.connect(&addr).await?;
                Topology::read(&mut c, Some(&addr), self.timeout()).await
            };
            match attempt.await {
                Ok(t) => return Ok(self.learn(t)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io_error("no node of the cluster answered")))
    }

    fn learn(&self, t: Topology) -> Topology {
        let mut seeds = self.seeds.lock().unwrap_or_else(|e| e.into_inner());
        for a in t.masters.iter().chain(&t.replicas) {
            if !seeds.contains(a) {
                seeds.push(a.clone());
            }
        }
        t
    }
}

/// Which master serves each slot.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Masters' addresses (`HOST:PORT`).
    pub masters: Vec<String>,
    /// Replicas' addresses (seeds for the next read, after a failover).
    pub replicas: Vec<String>,
    /// Per slot, the index of its master in `masters` (`u16::MAX`: none).
    owner: Vec<u16>,
}

impl Topology {
    /// `CLUSTER SLOTS` on `c` (`asked`: its address, for nodes reported
    /// with an empty host), answered within `limit`.
    async fn read(
        c: &mut MultiplexedConnection,
        asked: Option<&str>,
        limit: Duration,
    ) -> RResult<Topology> {
        let reply: Value = within(
            limit,
            "Redis did not answer",
            ::redis::cmd("CLUSTER").arg("SLOTS").query_async(c),
        )
        .await?;
        let asked_host = asked.and_then(|a| a.rsplit_once(':')).map(|(h, _)| h);
        Topology::parse(&reply, asked_host)
    }

    /// Parses a `CLUSTER SLOTS` reply.
    fn parse(reply: &Value, asked_host: Option<&str>) -> RResult<Topology> {
        let bad = || io_error("CLUSTER SLOTS answered something unreadable");
        let Value::Array(ranges) = reply else {
            return Err(bad());
        };
        let mut t = Topology {
            masters: Vec::new(),
            replicas: Vec::new(),
            owner: vec![u16::MAX; slot::SLOTS as usize],
        };
        let node = |v: &Value| -> Option<String> {
            let Value::Array(parts) = v else { return None };
            let host: String = ::redis::from_redis_value(parts.first()?).ok()?;
            let port: u16 = ::redis::from_redis_value(parts.get(1)?).ok()?;
            let host = if host.is_empty() || host == "?" {
                asked_host?.to_string()
            } else {
                host
            };
            Some(format!("{host}:{port}"))
        };
        for range in ranges {
            let Value::Array(parts) = range else {
                return Err(bad());
            };
            let (Some(start), Some(end), Some(master)) = (
                parts
                    .first()
                    .and_then(|v| ::redis::from_redis_value::<u16>(v).ok()),
                parts
                    .get(1)
                    .and_then(|v| ::redis::from_redis_value::<u16>(v).ok()),
                parts.get(2).and_then(node),
            ) else {
                return Err(bad());
            };
            let i = match t.masters.iter().position(|m| *m == master) {
                Some(i) => i,
                None => {
                    t.masters.push(master);
                    t.masters.len() - 1
                }
            };
            for s in start..=end.min(slot::SLOTS - 1) {
                t.owner[s as usize] = i as u16;
            }
            for r in parts.iter().skip(3).filter_map(node) {
                if !t.replicas.contains(&r) {
                    t.replicas.push(r);
                }
            }
        }
        if t.masters.is_empty() {
            return Err(io_error(
                "the cluster serves no slot yet (CLUSTER SLOTS is empty): create it first \
                 (redis-cli --cluster create ...)",
            ));
        }
        Ok(t)
    }

    /// The master of `slot`, if one serves it.
    pub fn owner(&self, slot: u16) -> Option<&str> {
        let i = *self.owner.get(slot as usize)?;
        self.masters.get(i as usize).map(String::as_str)
    }
}

/// The topology, shared by a session's router and subscriber.
pub type Shared = Arc<Mutex<Topology>>;

pub(crate) fn io_error(what: &str) -> ::redis::RedisError {
    std::io::Error::other(what.to_string()).into()
}

fn to_redis(e: Error) -> ::redis::RedisError {
    io_error(&e.to_string())
}

/// The blocking check a supervisor runs: some node of the cluster answers
/// `CLUSTER SLOTS` with slots served.
pub fn check(url: &str, shown: &str, options: &RedisOptions) -> Result<(), Error> {
    let spec = Spec::parse(url, shown, options)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(spec.topology(None))
        .map(|_| ())
        .map_err(|e| Error::RedisConnect {
            url: shown.to_string(),
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_parse() {
        let o = RedisOptions::default();
        let s = Spec::parse("redis+cluster://u:p@h1:7000,h2:7001,h3", "x", &o).unwrap();
        assert_eq!(s.seeds(), ["h1:7000", "h2:7001", "h3:6379"]);
        assert_eq!(s.userinfo, "u:p@");
        assert_eq!(s.scheme, "redis");
        let s = Spec::parse("rediss+cluster://h1:1/?insecure", "x", &o).unwrap();
        assert_eq!(s.scheme, "rediss");
        assert_eq!(s.query, "insecure");
        assert!(Spec::parse("redis+cluster://", "x", &o).is_err());
        assert!(is_cluster_url("redis+cluster://h:1") && !is_cluster_url("redis://h:1"));
    }

    #[test]
    fn topology_parses_cluster_slots() {
        let n = |h: &str, p: i64| {
            Value::Array(vec![
                Value::BulkString(h.as_bytes().to_vec()),
                Value::Int(p),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8000),
                n("", 7000),
                n("10.0.0.2", 7003),
            ]),
            Value::Array(vec![
                Value::Int(8001),
                Value::Int(16383),
                n("10.0.0.1", 7001),
            ]),
        ]);
        let t = Topology::parse(&reply, Some("10.0.0.9")).unwrap();
        assert_eq!(t.owner(0), Some("10.0.0.9:7000"));
        assert_eq!(t.owner(8001), Some("10.0.0.1:7001"));
        assert_eq!(t.replicas, ["10.0.0.2:7003"]);
    }
}
