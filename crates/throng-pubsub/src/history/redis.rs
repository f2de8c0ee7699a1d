//! [`RedisHistory`]: every topic's history in Redis Streams, shared by the
//! nodes of a cluster, as centrifuge's `broker_redis.go` keeps a stream per
//! channel.
//!
//! ## A broadcast
//! One Lua script ([`scripts::PUBLISH`]) INCRs the topic's offset, XADDs
//! the message (MAXLEN ~ the rule's size), EXPIREs the topic's keys by the
//! rule's ttl and PUBLISHes it on the topic's backplane channel as a
//! version 2 envelope carrying the position (`crate::backplane::envelope`).
//! Being one step, the order of offsets is the order in which Redis sends
//! the messages to every subscribed node, and every node, the publishing
//! one included, delivers them from there (the backplane's thread): so
//! every subscriber of the cluster sees a topic's messages in one order.
//! The publishing node proposes a fresh random epoch with each call; the
//! script keeps it only when the topic has none (a new topic, or its
//! history lost).
//!
//! ## A read
//! One script ([`scripts::READ`]) reads the epoch, the last offset and the
//! first [`READ_BATCH`] messages after the position at once; more come in
//! XRANGE calls of [`READ_BATCH`] (never a round trip per message). A read
//! is `recovered` only when the epoch is the position's, the position is
//! at most the rule's size behind the last offset (whatever the
//! approximate trimming kept beyond), and every offset after it is there,
//! in sequence (an evicted stream shows as a hole: not recovered).
//!
//! ## The thread
//! One `throng-history` thread runs the [Redis link](crate::link) (its
//! reconnect and timeout policy). Publishes are sent in pipelines, in
//! queue order; reads run concurrently on the same multiplexed
//! connection, each answered through its callback. While Redis is away,
//! publishes fail (their callbacks get the reason; a broadcast of a
//! channel is dropped and counted) and reads answer "unavailable"
//! ([`Replay::unavailable`]: neither recovered nor lost, the server refuses
//! the join, which the client makes again), never a gap. Requests wait on
//! a bounded queue ([`QUEUE`]); past it they fail at once.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use redis::Value;
use throng_protocol::{OwnedPayload, Payload};
use tokio::sync::mpsc;

use super::{scripts, Entry, HistoryStore, Position, Replay};
use crate::backplane::envelope::Envelope;
use crate::link::{client_for, redact, timed, End, Health, Link, RResult, RedisOptions, Worker};
use crate::metrics::{Metric, Sink};
use crate::Error;

/// Messages read per Redis command of a replay.
pub const READ_BATCH: usize = 500;
/// Requests waiting for the `throng-history` thread; past it they fail.
pub const QUEUE: usize = 64 * 1024;
/// Publishes sent in one pipeline, at most.
const MAX_BATCH: usize = 512;

/// The Redis keys of a topic's history: each with the hash tag `{topic}`,
/// so they share one Redis Cluster slot and one script may touch them all.
pub struct Keys {
    pub stream: String,
    pub epoch: String,
    pub offset: String,
}

/// The keys of `topic`'s history. The hash tag is the backplane's
/// (`link::tagged`), so on a Redis Cluster they share a slot with the
/// topic's channel too and the publish script may SPUBLISH on it.
pub fn keys(topic: &str) -> Keys {
    let base = crate::link::tagged("throng:hist:", topic);
    Keys {
        stream: format!("{base}:stream"),
        epoch: format!("{base}:epoch"),
        offset: format!("{base}:offset"),
    }
}

/// What a publish's caller hears: the message's ref, or why it has none.
pub type Published = Box<dyn FnOnce(Result<String, String>) + Send>;
/// What a read's caller hears.
pub type ReadDone = Box<dyn FnOnce(Replay) + Send>;

/// Counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct RedisHistoryStats {
    pub link: Health,
    /// Messages given a position.
    pub published: AtomicU64,
    /// Messages that got none (Redis away, queue full, a script error).
    pub failed: AtomicU64,
    /// Reads answered, and the Redis commands they took.
    pub reads: AtomicU64,
    pub read_commands: AtomicU64,
    /// Requests waiting for the thread.
    pub queued: AtomicUsize,
}

enum Request {
    Publish {
        topic: Arc<str>,
        size: usize,
        ttl: Duration,
        tail: Vec<u8>,
        epoch: String,
        done: Option<Published>,
    },
    Read {
        topic: Arc<str>,
        since: Option<Position>,
        /// The `since` given was not a position: nothing to read.
        bad: bool,
        limit: usize,
        size: usize,
        then: ReadDone,
    },
}

/// Topic history in Redis (see the module docs).
pub struct RedisHistory {
    tx: mpsc::Sender<Request>,
    node_id: u64,
    seed: std::collections::hash_map::RandomState,
    epochs: AtomicU64,
    pub stats: Arc<RedisHistoryStats>,
}

impl RedisHistory {
    /// Connects to Redis at `url` and starts the `throng-history` thread;
    /// `node_id` names this node in the envelopes it publishes (the
    /// backplane's). Fails, naming the URL, when Redis cannot be reached.
    pub fn connect_with(
        url: &str,
        options: &RedisOptions,
        node_id: u64,
    ) -> Result<RedisHistory, Error> {
        let shown = redact(url);
        let client = client_for(url, &shown, options)?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let stats = Arc::new(RedisHistoryStats::default());
        let task = Task {
            rx,
            stats: stats.clone(),
            reads: HashMap::new(),
            next_read: 0,
        };
        crate::link::start("throng-history", &shown, client, options, task)?;
        Ok(RedisHistory {
            tx,
            node_id,
            seed: Default::default(),
            epochs: AtomicU64::new(0),
            stats,
        })
    }

    /// Whether the link is up.
    pub fn is_connected(&self) -> bool {
        self.stats.link.connected.load(Relaxed)
    }

    fn new_epoch(&self) -> String {
        let n = self.epochs.fetch_add(1, Relaxed);
        format!("{:016x}", self.seed.hash_one((n, self.node_id)).max(1))
    }

    fn send(&self, req: Request) -> Result<(), Request> {
        self.stats.queued.fetch_add(1, Relaxed);
        self.tx.try_send(req).map_err(|e| {
            self.stats.queued.fetch_sub(1, Relaxed);
            match e {
                mpsc::error::TrySendError::Full(r) | mpsc::error::TrySendError::Closed(r) => r,
            }
        })
    }

    /// Gives the next message of `topic` its position, keeps it (`size`
    /// messages, `ttl` after the last) and publishes it to every node
    /// subscribed to the topic, this one included; `done` hears the ref.
    /// `exclude`: this node's subscriber that must not get it.
    #[allow(clippy::too_many_arguments)]
    pub fn publish(
        &self,
        topic: &Arc<str>,
        size: usize,
        ttl: Duration,
        event: &str,
        payload: Payload<'_>,
        exclude: Option<(usize, usize)>,
        done: Option<Published>,
    ) {
        let tail = Envelope {
            node: self.node_id,
            topic,
            event,
            payload,
        }
        .positioned_tail(exclude);
        let req = Request::Publish {
            topic: topic.clone(),
            size,
            ttl,
            tail,
            epoch: self.new_epoch(),
            done,
        };
        if let Err(Request::Publish { done, .. }) = self.send(req) {
            self.stats.failed.fetch_add(1, Relaxed);
            if let Some(done) = done {
                done(Err("the history queue to Redis is full".into()));
            }
        }
    }

    /// The messages of `topic` after `since` (a ref), at most `limit`,
    /// oldest first, for a rule keeping `size`; without `since`, the newest
    /// `limit`. `then` hears it on the `throng-history` thread.
    pub fn read(
        &self,
        topic: &str,
        since: Option<&str>,
        limit: usize,
        size: usize,
        then: ReadDone,
    ) {
        if !self.is_connected() {
            // Redis away: answered now, not once a reconnection attempt
            // (up to --redis-timeout-ms) and its backoff are over.
            return then(Replay::unavailable());
        }
        let at = since.map(Position::parse);
        let req = Request::Read {
            topic: Arc::from(topic),
            since: at.flatten(),
            bad: matches!(at, Some(None)),
            limit,
            size,
            then,
        };
        if let Err(Request::Read { then, .. }) = self.send(req) {
            then(Replay::unavailable());
        }
    }
}

impl HistoryStore for RedisHistory {
    fn append(
        &self,
        topic: &Arc<str>,
        size: usize,
        ttl: Duration,
        event: &str,
        payload: OwnedPayload,
        done: Box<dyn FnOnce(Result<Position, String>) + Send>,
    ) {
        let done = move |r: Result<String, String>| {
            done(r.and_then(|at| Position::parse(&at).ok_or_else(|| format!("bad ref {at:?}"))))
        };
        let payload = payload.as_payload();
        self.publish(topic, size, ttl, event, payload, None, Some(Box::new(done)))
    }

    fn fetch(
        &self,
        topic: &str,
        since: Option<&str>,
        limit: usize,
        size: usize,
        then: Box<dyn FnOnce(Replay) + Send>,
    ) {
        self.read(topic, since, limit, size, then)
    }
}

/// The thread's state.
struct Task {
    rx: mpsc::Receiver<Request>,
    stats: Arc<RedisHistoryStats>,
    /// Reads in flight, by number: answered "unavailable" if the session
    /// is lost before Redis answers.
    reads: HashMap<u64, ReadDone>,
    next_read: u64,
}

/// The scripts' hashes, per session.
struct Session {
    publish: String,
    read: String,
    /// On a Redis Cluster: the topic's channel is hash-tagged and the
    /// script publishes with SPUBLISH (sharded pub/sub).
    cluster: bool,
}

type ReadFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = (u64, RResult<(Replay, u64)>)> + Send>>;

impl Worker for Task {
    type Session = Session;
    const WHAT: &'static str = "topic history";
    const MEANWHILE: &'static str = "broadcasts on topics with history are dropped (counted in \
         throng_history_failed_total; the server API answers 503) and rejoins with since are refused (the client joins again)";

    fn health(&self) -> &Health {
        &self.stats.link
    }

    async fn setup(&mut self, link: &mut Link) -> RResult<Session> {
        load(link).await
    }

    async fn serve(&mut self, link: &mut Link, s: &mut Session) -> End {
        let mut reads: FuturesUnordered<ReadFuture> = FuturesUnordered::new();
        let end = loop {
            tokio::select! {
                req = self.rx.recv() => match req {
                    None => break End::Stop,
                    Some(req) => {
                        self.stats.queued.fetch_sub(1, Relaxed);
                        if let Err(e) = self.take(link, s, req, &mut reads).await {
                            break e.into();
                        }
                    }
                },
                Some((id, result)) = reads.next(), if !reads.is_empty() => {
                    let Some(then) = self.reads.remove(&id) else { continue };
                    match result {
                        Ok((replay, commands)) => {
                            self.stats.reads.fetch_add(1, Relaxed);
                            self.stats.read_commands.fetch_add(commands, Relaxed);
                            then(replay);
                        }
                        Err(e) => {
                            then(answer_of(&e));
                            if lost(&e) {
                                break e.into();
                            }
                        }
                    }
                }
            }
        };
        // Reads in flight get their answer: Redis is away.
        for (_, then) in self.reads.drain() {
            then(Replay::unavailable());
        }
        end
    }

    fn idle(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(req) => {
                    self.stats.queued.fetch_sub(1, Relaxed);
                    fail(&self.stats, req, "not connected to Redis");
                }
                Err(mpsc::error::TryRecvError::Empty) => return true,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn back(&self, _s: &Session) -> String {
        format!(
            "history messages that got no position so far: {}",
            self.stats.failed.load(Relaxed)
        )
    }
}

/// Whether an error ends the session (the connection), not one command.
fn lost(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}

/// The answer of a read that failed with `e`: "unavailable" (the join is
/// refused and made again) while Redis is away or says to try again later
/// (LOADING, TRYAGAIN, CLUSTERDOWN, MASTERDOWN); "not recovered" when
/// Redis answers the read with an error it would give every time (a
/// missing permission, a key of another type), or the client would be
/// refused forever.
fn answer_of(e: &redis::RedisError) -> Replay {
    if lost(e) || !matches!(e.retry_method(), redis::RetryMethod::NoRetry) {
        Replay::unavailable()
    } else {
        // One line per 10 s: every rejoin of a topic may meet it.
        static LOGGED: AtomicU64 = AtomicU64::new(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = LOGGED.load(Relaxed);
        if now >= last + 10 && LOGGED.compare_exchange(last, now, Relaxed, Relaxed).is_ok() {
            tracing::warn!(error = %e, "a topic history read failed in Redis (rejoins get recovered: false): check the Redis user's permissions (EVALSHA, XRANGE) and that nothing else writes throng:hist:* keys");
        }
        Replay::default()
    }
}

/// Answers `req` with a failure.
fn fail(stats: &RedisHistoryStats, req: Request, why: &str) {
    match req {
        Request::Publish { done, .. } => {
            stats.failed.fetch_add(1, Relaxed);
            if let Some(done) = done {
                done(Err(why.to_string()));
            }
        }
        Request::Read { then, .. } => then(Replay::unavailable()),
    }
}

async fn load(link: &mut Link) -> RResult<Session> {
    let load = |src: &'static str| {
        let mut c = redis::cmd("SCRIPT");
        c.arg("LOAD").arg(src);
        c
    };
    let publish: String = timed(load(scripts::PUBLISH).query_async(&mut link.cmd)).await?;
    let read: String = timed(load(scripts::READ).query_async(&mut link.cmd)).await?;
    Ok(Session {
        publish,
        read,
        cluster: link.is_cluster(),
    })
}

impl Task {
    /// Starts a read, or publishes `req` with whatever publishes are queued
    /// behind it (one pipeline, in queue order).
    async fn take(
        &mut self,
        link: &mut Link,
        s: &mut Session,
        req: Request,
        reads: &mut FuturesUnordered<ReadFuture>,
    ) -> RResult<()> {
        let mut batch = Vec::new();
        let mut next = Some(req);
        while let Some(req) = next {
            match req {
                Request::Read {
                    topic,
                    since,
                    bad,
                    limit,
                    size,
                    then,
                } => {
                    if bad {
                        // Not a position: nothing to read, no round trip.
                        then(Replay::default());
                    } else {
                        let id = self.next_read;
                        self.next_read += 1;
                        self.reads.insert(id, then);
                        let (conn, sha) = (link.cmd.clone(), s.read.clone());
                        reads.push(Box::pin(async move {
                            (id, read(conn, sha, topic, since, limit, size).await)
                        }));
                    }
                }
                publish => batch.push(publish),
            }
            next = if batch.len() < MAX_BATCH {
                self.rx.try_recv().ok().inspect(|_| {
                    self.stats.queued.fetch_sub(1, Relaxed);
                })
            } else {
                None
            };
        }
        if batch.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for req in &batch {
            if let Request::Publish {
                topic,
                size,
                ttl,
                tail,
                epoch,
                ..
            } = req
            {
                let k = keys(topic);
                pipe.cmd("EVALSHA")
                    .arg(&s.publish)
                    .arg(3)
                    .arg(&k.stream)
                    .arg(&k.epoch)
                    .arg(&k.offset)
                    .arg(epoch)
                    .arg(*size)
                    .arg(ttl.as_secs().max(1))
                    .arg(crate::backplane::redis::Names { cluster: s.cluster }.topic(topic))
                    .arg(tail)
                    .arg(if s.cluster { "SPUBLISH" } else { "PUBLISH" });
            }
        }
        match timed(pipe.query_async::<Vec<String>>(&mut link.cmd)).await {
            Ok(refs) => {
                let mut refs = refs.into_iter();
                for req in batch {
                    if let Request::Publish { done, .. } = req {
                        self.stats.published.fetch_add(1, Relaxed);
                        let at = refs.next().ok_or_else(|| "no answer".to_string());
                        if let Some(done) = done {
                            done(at);
                        }
                    }
                }
                Ok(())
            }
            Err(e) => {
                let why = format!("Redis: {e}");
                for req in batch {
                    fail(&self.stats, req, &why);
                }
                if lost(&e) {
                    return Err(e);
                }
                // A script flushed from Redis (NOSCRIPT): load them again.
                *s = load(link).await?;
                Ok(())
            }
        }
    }
}

/// Reads `topic`'s history after `since` (see the module docs); returns
/// the replay and the Redis commands it took.
async fn read(
    mut conn: crate::link::Cmd,
    sha: String,
    topic: Arc<str>,
    since: Option<Position>,
    limit: usize,
    size: usize,
) -> RResult<(Replay, u64)> {
    let k = keys(&topic);
    let first = since.map_or(0, |p| p.offset.saturating_add(1));
    let count = limit.clamp(1, READ_BATCH);
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&sha)
        .arg(3)
        .arg(&k.stream)
        .arg(&k.epoch)
        .arg(&k.offset);
    match since {
        Some(_) => cmd.arg("after").arg(first).arg(count),
        None => cmd.arg("newest").arg(0).arg(count),
    };
    let answer: Vec<Value> = timed(cmd.query_async(&mut conn)).await?;
    let mut commands = 1;
    let mut it = answer.into_iter();
    let (Some(epoch), Some(last), Some(entries)) = (it.next(), it.next(), it.next()) else {
        return Ok((Replay::default(), commands));
    };
    let text = |v: Value| -> Option<String> { redis::from_owned_redis_value(v).ok() };
    let epoch = text(epoch).and_then(|e| u64::from_str_radix(&e, 16).ok());
    let last = text(last).and_then(|l| l.parse::<u64>().ok());
    let (Some(epoch), Some(last)) = (epoch, last) else {
        return Ok((Replay::default(), commands));
    };
    let mut found = Replay {
        recovered: false,
        epoch,
        messages: Vec::new(),
        last,
        unavailable: false,
    };
    let entries = entries_of(&topic, entries);
    let Some(at) = since else {
        found.messages = entries.into_iter().rev().map(Arc::new).collect();
        return Ok((found, commands));
    };
    if at.epoch != epoch || at.offset > last || last - at.offset > size as u64 {
        return Ok((found, commands));
    }
    let want = ((last - at.offset) as usize).min(limit);
    let mut expect = at.offset + 1;
    let mut batch = entries;
    loop {
        for e in batch {
            if found.messages.len() == want {
                break;
            }
            if e.offset != expect {
                // A hole: trimmed or evicted under the reader.
                found.messages.clear();
                return Ok((found, commands));
            }
            expect += 1;
            found.messages.push(Arc::new(e));
        }
        if found.messages.len() == want {
            found.recovered = true;
            return Ok((found, commands));
        }
        let n = (want - found.messages.len()).min(READ_BATCH);
        let more: Value = timed(
            redis::cmd("XRANGE")
                .arg(&k.stream)
                .arg(format!("{expect}-0"))
                .arg(format!("{last}-1"))
                .arg("COUNT")
                .arg(n)
                .query_async(&mut conn),
        )
        .await?;
        commands += 1;
        batch = entries_of(&topic, more);
        if batch.is_empty() {
            found.messages.clear();
            return Ok((found, commands));
        }
    }
}

/// The entries of an XRANGE answer that are readable envelopes of `topic`
/// (anything else is skipped, and shows as a hole).
fn entries_of(topic: &str, v: Value) -> Vec<Entry> {
    let Value::Array(items) = v else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|item| {
            let (id, fields): (String, Vec<Vec<u8>>) = redis::from_owned_redis_value(item).ok()?;
            let offset = id.split_once('-')?.0.parse().ok()?;
            let bytes = fields.get(1)?;
            let (env, _) = Envelope::decode_any(bytes).ok()?;
            if env.topic != topic {
                return None;
            }
            Some(Entry {
                offset,
                event: env.event.into(),
                payload: OwnedPayload::from(env.payload),
            })
        })
        .collect()
}

/// Every metric of the history in Redis, and the figure it reads.
pub static METRICS: [crate::metrics::Shared<RedisHistoryStats>; 6] = [
    (
        &Metric::gauge(
            "throng_history_redis_connected",
            "1 while the topic history's connection to Redis is up.",
        ),
        |s| s.link.connected.load(Relaxed).into(),
    ),
    (&crate::history::PUBLISHED, |s| s.published.load(Relaxed).into()),
    (
        &Metric::counter(
            "throng_history_failed_total",
            "Broadcasts on history topics dropped because Redis did not give them a position (Redis away, queue full).",
        ),
        |s| s.failed.load(Relaxed).into(),
    ),
    (
        &Metric::counter(
            "throng_history_reads_total",
            "History reads answered by Redis (rejoins with since, GET /api/history).",
        ),
        |s| s.reads.load(Relaxed).into(),
    ),
    (
        &Metric::counter(
            "throng_history_read_commands_total",
            "Redis commands those reads took (one script call, then one XRANGE per 500 messages).",
        ),
        |s| s.read_commands.load(Relaxed).into(),
    ),
    (
        &Metric::gauge(
            "throng_history_queued",
            "Requests waiting for the history's Redis connection (bounded at 65536).",
        ),
        |s| s.queued.load(Relaxed).into(),
    ),
];

/// The store's metrics.
pub fn describe(stats: &RedisHistoryStats, out: &mut dyn Sink) {
    for (m, figure) in &METRICS {
        out.put(m, figure(stats));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topics_keys_share_its_hash_tag() {
        let k = keys("feed:1");
        assert_eq!(k.stream, "throng:hist:{feed:1}:stream");
        assert_eq!(k.epoch, "throng:hist:{feed:1}:epoch");
        assert_eq!(k.offset, "throng:hist:{feed:1}:offset");
    }

    #[test]
    fn a_failed_read_is_unavailable_unless_redis_would_always_refuse_it() {
        use redis::{ErrorKind, RedisError};
        let answer = |e: RedisError| answer_of(&e).unavailable;
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(answer(io.into()));
        assert!(answer((ErrorKind::BusyLoadingError, "LOADING").into()));
        assert!(answer((ErrorKind::TryAgain, "TRYAGAIN").into()));
        assert!(answer((ErrorKind::ClusterDown, "CLUSTERDOWN").into()));
        assert!(!answer((ErrorKind::TypeError, "WRONGTYPE").into()));
        assert!(!answer((ErrorKind::ResponseError, "NOPERM").into()));
        assert!(!answer_of(&(ErrorKind::TypeError, "x").into()).recovered);
    }
}
