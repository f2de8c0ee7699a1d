//! [`RedisOccupancy`]: which topics have a subscriber anywhere in the
//! cluster, so that a topic's first subscriber on any node and its last one
//! gone everywhere are each noticed by exactly one node (the server turns
//! them into `occupied` and `vacated` events for the app backend).
//!
//! Redis decides, one Lua script per change, atomically: the nodes with
//! subscribers of a topic are a set; a node adds itself when it gains its
//! first local subscriber and removes itself when it loses its last one.
//! The script that finds the set empty before an add reports `occupied`,
//! the one that leaves it empty reports `vacated`: whatever the nodes do at
//! the same time, one script sees each transition.
//!
//! Keys (`O` = `throng:o:`, `N` a node id in 16 hex digits, `T` a topic):
//! - `O t:T`: the nodes with subscribers of T (a set);
//! - `O n:N`: the topics N is in (a set, to clean up after N);
//! - `O a:N`: N is alive (a string with a TTL it refreshes), its value the
//!   token of N's current session with Redis;
//! - `O q:N`: N's outbox: the transitions its scripts decided, `ID:o:T` or
//!   `ID:v:T`, until N has handed them to its event queue (a list);
//! - `O c:N`: the last ID given in N's outbox (a counter); its absence
//!   tells N that Redis lost its data (a restart without persistence);
//! - `O nodes`: every node that wrote here (a set).
//!
//! ## The outbox
//! A script does not return its transitions: it appends them to the
//! node's outbox in the same atomic step, each with the next ID of the
//! node's counter. The node reads the outbox, queues the events of the IDs
//! it has not queued yet (it keeps the last one), then trims what it read.
//! A reply lost with the connection loses nothing and repeats nothing: the
//! next session reads the outbox first and skips what was queued. A node
//! that dies with transitions in its outbox has them moved (with IDs of the
//! burying node's counter) to the outbox of the node that buries it, which
//! reports them.
//!
//! ## Late scripts
//! A script sent on a connection the node has since given up (no reply
//! within the link's timeout: a stall, a partition) may still reach Redis
//! later, after the node's new session re-asserted its topics: it would
//! then write a membership the node no longer has. Every change carries
//! its session's token and does nothing unless `O a:N` holds that token.
//!
//! ## Order
//! The shards tell the thread "`T` changed" (an unbounded queue, as the
//! backplane's topic changes: one message per node-wide first or last
//! subscriber); the thread compares what the node has now
//! ([`OccupancySink::has_topic`]) with what it last wrote, so two shards'
//! notices arriving out of order cannot leave a wrong membership.
//!
//! ## A node that dies
//! Each node refreshes `O a:N` (TTL `ttl`) every `ttl / 3` and checks the
//! other nodes' keys as often; a node whose key expired is dead: one
//! script (that checks the key is still gone) takes it out of every
//! topic's set and reports the topics it left empty, so the checking node
//! sends their `vacated` (once: the script runs atomically, the next
//! checker finds nothing left). A node checks others only once its own
//! session is `ttl` old, so nodes coming back after a Redis restart are
//! not buried before they re-assert.
//!
//! ## Redis reconnect
//! On every new session (the [link](crate::link)'s, with its backoff) the
//! node re-asserts its whole membership in one script: it adds itself to
//! the set of every topic it has now (reporting `occupied` where the set
//! was empty: after the others buried this node while it was away, or a
//! Redis restart that lost the data), and removes itself from the topics
//! it no longer has: those Redis lists for it, and those it last wrote it
//! had, reporting `vacated` where it left the topic's set empty. Changes
//! made while Redis was away are not replayed one by one: the
//! re-assertion supersedes them. So a flap during an outage is not
//! reported, and through lost connections, stalls and partitions each
//! transition is reported once (a node buried while cut off has its
//! topics `vacated` by the burier, then `occupied` again when it is back).
//!
//! After a Redis restart that lost the data (`O c:N` gone), a topic the
//! node last wrote it had and no longer has is reported `vacated` if its
//! set is empty, whoever left it (the alternative is a topic occupied
//! forever), and a topic still in use is reported `occupied` again: at
//! least once there, and backends keep a topic's state by its last event.
//!
//! Without Redis one node decides alone (the server's local occupancy).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use ::redis::Value;
use tokio::sync::mpsc;

use crate::link::{client_for, random_node_id, redact, timed, End, Health, Link, RResult, Worker};
use crate::metrics::{Metric, Sink};
use crate::Error;

/// Prefix of every occupancy key.
pub const PREFIX: &str = "throng:o:";
/// On a Redis Cluster: the prefix of every occupancy key, one hash tag for
/// all, so the scripts (which name keys of several topics and nodes) stay
/// on one slot. Occupancy is light (one script per node-wide first or last
/// subscriber of a topic), so one shard carries it.
pub const PREFIX_SHARDED: &str = "throng:o:{o}:";

/// What the node tells, and asks, the occupancy thread.
pub trait OccupancySink: Send + Sync {
    /// Whether the node has a subscriber of `topic` now.
    fn has_topic(&self, topic: &str) -> bool;
    /// Every topic the node has a subscriber of (for re-asserting).
    fn topics(&self) -> Vec<Arc<str>>;
    /// `topic` got its first subscriber in the cluster.
    fn occupied(&self, topic: &str);
    /// `topic` lost its last subscriber in the cluster.
    fn vacated(&self, topic: &str);
}

/// One change of this node's membership. KEYS: `a:N`, `t:T`, `n:N`,
/// `q:N`, `c:N`. ARGV: N, T, 1 to add or 0 to remove, the session's
/// token. A cluster-wide transition goes to N's outbox. Returns 1, or -1
/// (changing nothing) when N's liveness key is gone or holds another
/// session's token: the others may have buried N, which re-asserts
/// everything (a stale session's -1 reaches no one).
const CHANGE: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[4] then return -1 end
if ARGV[3] == '1' then
  local before = redis.call('SCARD', KEYS[2])
  if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
    redis.call('SADD', KEYS[3], ARGV[2])
    if before == 0 then redis.call('RPUSH', KEYS[4], redis.call('INCR', KEYS[5]) .. ':o:' .. ARGV[2]) end
  end
else
  if redis.call('SREM', KEYS[2], ARGV[1]) == 1 then
    redis.call('SREM', KEYS[3], ARGV[2])
    if redis.call('SCARD', KEYS[2]) == 0 then
      redis.call('RPUSH', KEYS[4], redis.call('INCR', KEYS[5]) .. ':v:' .. ARGV[2])
    end
  end
end
return 1
"#;

/// This node's whole membership, re-asserted, and its liveness key set to
/// the session's token. KEYS: `a:N`, `n:N`, `nodes`, `q:N`, `c:N`. ARGV:
/// N, TTL ms, prefix, the session's token, the number of topics N has,
/// those topics, then the topics N last wrote it had and has no more. The
/// transitions go to N's outbox. A topic N no longer has is vacated when N
/// leaves its set empty, or, if Redis lost its data (`c:N` gone), whenever
/// its set is empty (see the module doc). Returns 1 when Redis had lost
/// the data (the outbox's IDs start again), else 0.
const RESYNC: &str = r#"
local node, prefix = ARGV[1], ARGV[3]
local lost = redis.call('EXISTS', KEYS[5]) == 0
if lost then redis.call('SET', KEYS[5], 0) end
redis.call('PERSIST', KEYS[5])
local function push(kind, topic)
  redis.call('RPUSH', KEYS[4], redis.call('INCR', KEYS[5]) .. ':' .. kind .. ':' .. topic)
end
local have = 5 + tonumber(ARGV[5])
local keep = {}
for i = have + 1, #ARGV do
  local topic = ARGV[i]
  local t = prefix .. 't:' .. topic
  local left = redis.call('SREM', t, node) == 1
  redis.call('SREM', KEYS[2], topic)
  if (left or lost) and redis.call('SCARD', t) == 0 then push('v', topic) end
end
for i = 6, have do
  local topic = ARGV[i]
  keep[topic] = true
  local t = prefix .. 't:' .. topic
  local before = redis.call('SCARD', t)
  if redis.call('SADD', t, node) == 1 and before == 0 then push('o', topic) end
  redis.call('SADD', KEYS[2], topic)
end
for _, topic in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not keep[topic] then
    redis.call('SREM', KEYS[2], topic)
    local t = prefix .. 't:' .. topic
    if redis.call('SREM', t, node) == 1 and redis.call('SCARD', t) == 0 then push('v', topic) end
  end
end
redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[2])
redis.call('SADD', KEYS[3], node)
if lost then return 1 end
return 0
"#;

/// Buries dead node D if its liveness key is still gone: its outbox and
/// the topics it leaves empty go to the outbox of the burying node M, with
/// M's IDs. D's counter is kept a day (a D that comes back within it is
/// not taken for one that lost its data). KEYS: `a:D`, `n:D`, `nodes`,
/// `q:D`, `q:M`, `c:D`, `c:M`. ARGV: D, prefix. Returns 1 if it buried D.
const CLEAN: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local node, prefix = ARGV[1], ARGV[2]
local function push(item)
  redis.call('RPUSH', KEYS[5], redis.call('INCR', KEYS[7]) .. ':' .. item)
end
for _, item in ipairs(redis.call('LRANGE', KEYS[4], 0, -1)) do
  push(string.match(item, '^%d+:(.*)$') or item)
end
redis.call('DEL', KEYS[4])
for _, topic in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local t = prefix .. 't:' .. topic
  if redis.call('SREM', t, node) == 1 and redis.call('SCARD', t) == 0 then push('v:' .. topic) end
end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], node)
if redis.call('EXISTS', KEYS[6]) == 1 then redis.call('PEXPIRE', KEYS[6], 86400000) end
return 1
"#;

/// Counters for `/metrics`.
#[derive(Default, Debug)]
pub struct Stats {
    pub link: Health,
    /// Membership changes written (scripts run).
    pub changes: AtomicU64,
    /// Transitions this node reported (occupied and vacated).
    pub transitions: AtomicU64,
    /// Whole-membership re-assertions.
    pub resyncs: AtomicU64,
    /// Dead nodes this node buried.
    pub nodes_down: AtomicU64,
}

/// The Redis occupancy. Build it with [`RedisOccupancy::connect_with`].
pub struct RedisOccupancy {
    tx: mpsc::UnboundedSender<Arc<str>>,
    stats: Arc<Stats>,
}

impl RedisOccupancy {
    /// Connects to Redis at `url` and starts the `throng-occupancy` thread,
    /// which reports transitions to `sink`; a node whose liveness key is
    /// gone for `ttl` is dead. Fails, naming the URL, when Redis cannot be
    /// reached now.
    pub fn connect_with(
        url: &str,
        ttl: Duration,
        options: &crate::RedisOptions,
        sink: Weak<dyn OccupancySink>,
    ) -> Result<RedisOccupancy, Error> {
        let shown = redact(url);
        let client = client_for(url, &shown, options)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(Stats::default());
        let task = Task {
            me: format!("{:016x}", random_node_id()),
            ttl: ttl.max(Duration::from_millis(300)),
            sink,
            rx,
            asserted: HashSet::new(),
            stats: stats.clone(),
            prefix: PREFIX,
            reported: 0,
        };
        crate::link::start("throng-occupancy", &shown, client, options, task)?;
        Ok(RedisOccupancy { tx, stats })
    }

    /// The node gained its first or lost its last subscriber of `topic`.
    /// Never blocks.
    pub fn changed(&self, topic: &Arc<str>) {
        let _ = self.tx.send(topic.clone());
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The occupancy metrics.
    pub fn describe(&self, out: &mut dyn Sink) {
        for (m, figure) in &METRICS {
            out.put(m, figure(&self.stats));
        }
    }
}

/// Every occupancy metric, and the figure it reads.
pub static METRICS: [crate::metrics::Figure<Stats>; 4] = [
    (
        Metric::gauge(
            "throng_hook_occupancy_connected",
            "1 while the topic occupancy (occupied/vacated events) is connected to Redis, else 0.",
        ),
        |s| s.link.connected.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_hook_occupancy_transitions_total",
            "Cluster-wide occupied and vacated transitions this node decided.",
        ),
        |s| s.transitions.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_hook_occupancy_resyncs_total",
            "Times this node re-asserted its topics in Redis (each new Redis session).",
        ),
        |s| s.resyncs.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_hook_occupancy_nodes_down_total",
            "Dead nodes whose topics this node vacated.",
        ),
        |s| s.nodes_down.load(Relaxed).into(),
    ),
];

/// The thread's state.
struct Task {
    me: String,
    ttl: Duration,
    sink: Weak<dyn OccupancySink>,
    rx: mpsc::UnboundedReceiver<Arc<str>>,
    /// The topics this node is in, as last written to Redis.
    asserted: HashSet<Arc<str>>,
    stats: Arc<Stats>,
    /// [`PREFIX`], or [`PREFIX_SHARDED`] on a Redis Cluster.
    prefix: &'static str,
    /// The ID of the last outbox transition handed to the node.
    reported: u64,
}

/// A session's script hashes, start and token.
struct Session {
    change: String,
    resync: String,
    clean: String,
    started: Instant,
    /// The value of this node's liveness key in this session, which every
    /// change checks (see the module doc: late scripts).
    token: String,
}

impl Worker for Task {
    type Session = Session;
    const WHAT: &'static str = "topic occupancy";
    const MEANWHILE: &'static str =
        "occupied/vacated events wait; this node re-asserts its topics when Redis is back";

    fn health(&self) -> &Health {
        &self.stats.link
    }

    async fn setup(&mut self, link: &mut Link) -> RResult<Session> {
        self.prefix = if link.is_cluster() {
            PREFIX_SHARDED
        } else {
            PREFIX
        };
        let load = |src: &'static str| {
            let mut c = ::redis::cmd("SCRIPT");
            c.arg("LOAD").arg(src);
            c
        };
        let change: String = timed(load(CHANGE).query_async(&mut link.cmd)).await?;
        let resync: String = timed(load(RESYNC).query_async(&mut link.cmd)).await?;
        let clean: String = timed(load(CLEAN).query_async(&mut link.cmd)).await?;
        let s = Session {
            change,
            resync,
            clean,
            started: Instant::now(),
            token: format!("{:016x}", random_node_id()),
        };
        // Changes noticed so far are in what the re-assertion writes. What
        // the last session decided and never reported is reported first.
        while self.rx.try_recv().is_ok() {}
        self.drain_outbox(link).await?;
        self.resync(link, &s).await?;
        Ok(s)
    }

    async fn serve(&mut self, link: &mut Link, s: &mut Session) -> End {
        let mut tick = tokio::time::interval(self.ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            let step = tokio::select! {
                topic = self.rx.recv() => match topic {
                    Some(topic) => self.change(link, s, topic).await,
                    None => return End::Stop,
                },
                _ = tick.tick() => self.keep_alive(link, s).await,
            };
            if let Err(e) = step {
                return End::Lost(e);
            }
        }
    }

    fn idle(&mut self) -> bool {
        self.sink.strong_count() > 0
    }

    fn back(&self, _s: &Session) -> String {
        format!("re-asserted this node's {} topics", self.asserted.len())
    }
}

impl Task {
    fn sink(&self) -> Option<Arc<dyn OccupancySink>> {
        self.sink.upgrade()
    }

    /// Hands the transitions in this node's outbox it has not handed yet
    /// (their IDs are past [`Task::reported`]) to the node (its event
    /// queue), then trims them off: a reply lost before the trim finds
    /// them there next time, and skips them.
    async fn drain_outbox(&mut self, link: &mut Link) -> RResult<()> {
        let outbox = format!("{}q:{}", self.prefix, self.me);
        let items: Vec<String> = timed(
            ::redis::cmd("LRANGE")
                .arg(&outbox)
                .arg(0)
                .arg(-1)
                .query_async(&mut link.cmd),
        )
        .await?;
        if items.is_empty() {
            return Ok(());
        }
        let mut fresh = 0;
        for item in &items {
            let Some((id, transition)) = outbox_item(item) else {
                continue;
            };
            if id.is_some_and(|id| id <= self.reported) {
                continue;
            }
            self.reported = id.unwrap_or(self.reported);
            fresh += 1;
            if let Some(sink) = self.sink() {
                match transition {
                    Transition::Occupied(topic) => sink.occupied(topic),
                    Transition::Vacated(topic) => sink.vacated(topic),
                }
            }
        }
        self.stats.transitions.fetch_add(fresh, Relaxed);
        let _: () = timed(
            ::redis::cmd("LTRIM")
                .arg(&outbox)
                .arg(items.len())
                .arg(-1)
                .query_async(&mut link.cmd),
        )
        .await?;
        Ok(())
    }

    /// Writes `topic`'s membership as the node has it now.
    async fn change(&mut self, link: &mut Link, s: &Session, topic: Arc<str>) -> RResult<()> {
        let Some(sink) = self.sink() else {
            return Ok(());
        };
        let has = sink.has_topic(&topic);
        if has == self.asserted.contains(&topic) {
            return Ok(());
        }
        let me = &self.me;
        let r: i64 = timed(
            ::redis::cmd("EVALSHA")
                .arg(&s.change)
                .arg(5)
                .arg(format!("{}a:{me}", self.prefix))
                .arg(format!("{}t:{topic}", self.prefix))
                .arg(format!("{}n:{me}", self.prefix))
                .arg(format!("{}q:{me}", self.prefix))
                .arg(format!("{}c:{me}", self.prefix))
                .arg(me)
                .arg(&*topic)
                .arg(if has { "1" } else { "0" })
                .arg(&s.token)
                .query_async(&mut link.cmd),
        )
        .await?;
        self.stats.changes.fetch_add(1, Relaxed);
        if r < 0 {
            tracing::warn!("topic occupancy: this node's liveness key was gone (it was too slow or away); re-asserting its topics");
            return self.resync(link, s).await;
        }
        if has {
            self.asserted.insert(topic.clone());
        } else {
            self.asserted.remove(&topic);
        }
        self.drain_outbox(link).await
    }

    /// Re-asserts the node's whole membership and liveness (one script).
    async fn resync(&mut self, link: &mut Link, s: &Session) -> RResult<()> {
        let topics = self.sink().map(|k| k.topics()).unwrap_or_default();
        let now: HashSet<Arc<str>> = topics.iter().cloned().collect();
        let gone: Vec<Arc<str>> = self.asserted.difference(&now).cloned().collect();
        let me = &self.me;
        let mut c = ::redis::cmd("EVALSHA");
        c.arg(&s.resync)
            .arg(5)
            .arg(format!("{}a:{me}", self.prefix))
            .arg(format!("{}n:{me}", self.prefix))
            .arg(format!("{}nodes", self.prefix))
            .arg(format!("{}q:{me}", self.prefix))
            .arg(format!("{}c:{me}", self.prefix))
            .arg(me)
            .arg(self.ttl.as_millis() as u64)
            .arg(self.prefix)
            .arg(&s.token)
            .arg(topics.len());
        for t in topics.iter().chain(&gone) {
            c.arg(&**t);
        }
        let lost: i64 = timed(c.query_async(&mut link.cmd)).await?;
        if lost == 1 {
            // A new counter: its IDs start again.
            self.reported = 0;
        }
        self.asserted = now;
        self.stats.resyncs.fetch_add(1, Relaxed);
        self.drain_outbox(link).await
    }

    /// Refreshes this node's liveness key and buries the nodes whose key
    /// expired.
    async fn keep_alive(&mut self, link: &mut Link, s: &Session) -> RResult<()> {
        let me = self.me.clone();
        let alive: Value = timed(
            ::redis::cmd("SET")
                .arg(format!("{}a:{me}", self.prefix))
                .arg(&s.token)
                .arg("PX")
                .arg(self.ttl.as_millis() as u64)
                .arg("XX")
                .query_async(&mut link.cmd),
        )
        .await?;
        if alive == Value::Nil {
            // Expired while this node was slow: the others may have buried it.
            tracing::warn!(
                "topic occupancy: this node's liveness key had expired; re-asserting its topics"
            );
            return self.resync(link, s).await;
        }
        if s.started.elapsed() < self.ttl {
            return Ok(());
        }
        let nodes: Vec<String> = timed(
            ::redis::cmd("SMEMBERS")
                .arg(format!("{}nodes", self.prefix))
                .query_async(&mut link.cmd),
        )
        .await?;
        for d in nodes.iter().filter(|d| **d != me) {
            let alive: bool = timed(
                ::redis::cmd("EXISTS")
                    .arg(format!("{}a:{d}", self.prefix))
                    .query_async(&mut link.cmd),
            )
            .await?;
            if alive {
                continue;
            }
            let buried: i64 = timed(
                ::redis::cmd("EVALSHA")
                    .arg(&s.clean)
                    .arg(7)
                    .arg(format!("{}a:{d}", self.prefix))
                    .arg(format!("{}n:{d}", self.prefix))
                    .arg(format!("{}nodes", self.prefix))
                    .arg(format!("{}q:{d}", self.prefix))
                    .arg(format!("{}q:{me}", self.prefix))
                    .arg(format!("{}c:{d}", self.prefix))
                    .arg(format!("{}c:{me}", self.prefix))
                    .arg(d)
                    .arg(self.prefix)
                    .query_async(&mut link.cmd),
            )
            .await?;
            if buried == 1 {
                self.stats.nodes_down.fetch_add(1, Relaxed);
                tracing::info!(
                    node = %d,
                    "topic occupancy: node {d} is gone (its liveness key expired); its topics left"
                );
                self.drain_outbox(link).await?;
            }
        }
        Ok(())
    }
}

/// A transition in an outbox.
#[derive(Debug, PartialEq, Eq)]
enum Transition<'a> {
    Occupied(&'a str),
    Vacated(&'a str),
}

/// An outbox item, `ID:o:T` or `ID:v:T`: its ID and transition; an item of
/// an older version, without an ID, has none (it is reported as is).
fn outbox_item(item: &str) -> Option<(Option<u64>, Transition<'_>)> {
    let (id, rest) = match item.split_once(':') {
        Some((id, rest)) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => {
            (Some(id.parse().ok()?), rest)
        }
        _ => (None, item),
    };
    match rest.split_at_checked(2) {
        Some(("o:", topic)) => Some((id, Transition::Occupied(topic))),
        Some(("v:", topic)) => Some((id, Transition::Vacated(topic))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outbox_items_carry_an_id_older_ones_none() {
        assert_eq!(
            outbox_item("12:o:room:1"),
            Some((Some(12), Transition::Occupied("room:1")))
        );
        assert_eq!(
            outbox_item("3:v:a:b"),
            Some((Some(3), Transition::Vacated("a:b")))
        );
        // Written by a version without IDs: reported as is.
        assert_eq!(
            outbox_item("o:room:1"),
            Some((None, Transition::Occupied("room:1")))
        );
        assert_eq!(outbox_item("7:x:room"), None);
        assert_eq!(outbox_item(""), None);
    }
}
