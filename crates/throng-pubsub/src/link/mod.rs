//! The Redis link: the one engine every Redis user of this crate runs on
//! (the backplane, the presence store, and whatever comes next). It owns
//! how a node reaches Redis, so each user writes only what it does with a
//! connection, never how it gets or keeps one:
//!
//! - **Connecting**: the URL (`redis://`, `rediss://` for TLS with the
//!   system's roots or [`RedisOptions::ca_file`], a password or ACL user in
//!   the URL, masked by [`redact`] in every log and error), see
//!   [`client_for`] and [`check_with`].
//! - **A session** ([`Link`]): one multiplexed command connection and one
//!   pub/sub connection, both proven (PING) before the session counts.
//! - **A Redis Cluster** ([`cluster`]): a `redis+cluster://` URL makes the
//!   session a router over the masters (MOVED, ASK followed and counted)
//!   and one sharded subscriber connection per shard; the workers ask
//!   [`Link::is_cluster`] to hash-tag their keys and channels by topic
//!   ([`tagged`]) and keep each script to one slot.
//! - **The policy**, stated once below: how long Redis may take to answer
//!   (a connection attempt, a command, a PING: [`RedisOptions::timeout`],
//!   `--redis-timeout-ms`, 5 s by default), how often each connection is
//!   checked, and the reconnect backoff. Every user of the link follows
//!   the same one.
//! - **Noticing a dead path** ([`keep_checking`]): every second, each
//!   connection of the session (the command connection and the pub/sub
//!   one; on a cluster every master's and every shard's) gets a PING due
//!   within the timeout. A connection whose peer is gone without a FIN
//!   (a half-open connection: a host that vanished, a partition, a
//!   firewall that forgot the flow), or a Redis that stopped answering, is
//!   given up at most 1 s plus the timeout after its last answer (6 s by
//!   default), whether or not the worker had anything to send. A PING
//!   rather than TCP keepalive (`TCP_USER_TIMEOUT`): it also catches a
//!   Redis that is up but stuck, and a proxy that keeps the TCP session
//!   alive, and it measures the round trip the [`Health`] shows.
//! - **What it shows** ([`Health`], `health.rs`): connected or not, the
//!   sessions lost, the time since Redis last answered and the last PING's
//!   round trip, in `/metrics` (`throng_redis_*{link=...}`, see
//!   [`describe`]) and the dashboard; a log line when a session is
//!   lost and one when it is back, one when Redis turns slow and one when
//!   it is quick again.
//! - **The thread and the loop** ([`start`]): a `throng-*` thread with a
//!   single-threaded tokio runtime of its own (so the shards never share an
//!   executor with Redis I/O), the first session made before `start`
//!   returns (a wrong URL, password or certificate fails the caller's start
//!   with the reason), then [`Worker::serve`] until the link is lost, one
//!   error log, reconnection with backoff, [`Worker::setup`] again, one
//!   info log saying how long it was down.
//!
//! Layers: `options` (URL, TLS, client) and `health`, then `cluster`
//! (which uses them), then this module (the session, the loop,
//! [`check_with`]).
//!
//! The user of the link is a [`Worker`]: what it does on a fresh session
//! (subscribe, rewrite its state), what it serves while connected, and
//! what it drops while disconnected.

pub mod cluster;
mod health;
mod options;

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use std::sync::Arc;

use ::redis::aio::{ConnectionLike, MultiplexedConnection, PubSubSink, PubSubStream};
use ::redis::{Cmd as RedisCmd, Pipeline, RedisFuture, Value};
use futures_util::StreamExt;

pub use cluster::slot::{tagged, topic_after_tag, topic_tag};
pub use health::{describe, slow_after, Health, HealthState, METRICS};
pub use options::{random_node_id, redact, RedisOptions};

use crate::Error;

/// Checks, with a blocking connection, that Redis at `url` answers PING.
pub fn check(url: &str) -> Result<(), Error> {
    check_with(url, &RedisOptions::default())
}

/// [`check`] with TLS settings; a `redis+cluster://` URL checks the cluster.
pub fn check_with(url: &str, options: &RedisOptions) -> Result<(), Error> {
    let shown = redact(url);
    if cluster::is_cluster_url(url) {
        return cluster::check(url, &shown, options);
    }
    options::check_server(url, &shown, options)
}

/// How long Redis may take to answer by default (`--redis-timeout-ms`): a
/// connection attempt (TCP, TLS, AUTH, the first PING), any command, a
/// PING; past it the session counts as lost.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often every connection of a session is checked with a PING, due
/// within the timeout: a dead path is noticed within this plus the timeout.
pub const PING_EVERY: Duration = Duration::from_secs(1);

thread_local! {
    /// The timeout of the link whose thread this is ([`start`] sets it
    /// from [`RedisOptions::timeout`]); read by [`timed`] and the session.
    static TIMEOUT: Cell<Duration> = const { Cell::new(DEFAULT_TIMEOUT) };
}

/// How long Redis may take to answer on this thread's link.
pub fn timeout() -> Duration {
    TIMEOUT.with(Cell::get)
}
/// First wait before a reconnection attempt; doubles up to [`BACKOFF_MAX`].
/// The attempts come 0.1, 0.3, 0.7, 1.5, 3.1, 6.3, 11.3 s ... after the
/// loss, so a link is back at most 5 s after Redis is.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

pub(crate) type RResult<T> = ::redis::RedisResult<T>;

/// Where a link goes: one Redis, or a Redis Cluster.
pub enum Target {
    /// One Redis server (`redis://`, `rediss://`, `unix://`).
    One(::redis::Client),
    /// A Redis Cluster (`redis+cluster://`, `rediss+cluster://`).
    Cluster(Arc<cluster::Spec>),
}

/// The target `url` names (`shown`: masked, for errors), with TLS
/// settings from `options`.
pub fn client_for(url: &str, shown: &str, options: &RedisOptions) -> Result<Target, Error> {
    if cluster::is_cluster_url(url) {
        return Ok(Target::Cluster(Arc::new(cluster::Spec::parse(
            url, shown, options,
        )?)));
    }
    options::client_for(url, shown, options).map(Target::One)
}

/// One session with Redis: a command connection and a pub/sub connection
/// (on a cluster: a router over one command connection per master, and
/// one subscribing connection per shard).
pub struct Link {
    /// Commands, scripts and PUBLISH; multiplexed, in order.
    pub cmd: Cmd,
    /// SUBSCRIBE and UNSUBSCRIBE (SSUBSCRIBE on a cluster).
    pub sink: Subscriber,
    /// Messages on the subscribed channels.
    stream: Stream,
}

/// A session's commands; a clone multiplexes on the same connections.
#[derive(Clone)]
pub enum Cmd {
    One(MultiplexedConnection),
    Cluster(cluster::Router),
}

impl Cmd {
    /// PING (every master's connection on a cluster, at once).
    pub async fn ping(&mut self) -> RResult<()> {
        match self {
            Cmd::One(c) => ::redis::cmd("PING").query_async::<()>(c).await,
            Cmd::Cluster(r) => r.ping_all().await,
        }
    }
}

impl ConnectionLike for Cmd {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a RedisCmd) -> RedisFuture<'a, Value> {
        match self {
            Cmd::One(c) => c.req_packed_command(cmd),
            Cmd::Cluster(r) => r.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Cmd::One(c) => c.req_packed_commands(cmd, offset, count),
            Cmd::Cluster(r) => r.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Cmd::One(c) => c.get_db(),
            Cmd::Cluster(_) => 0,
        }
    }
}

/// A session's subscribing side; cheap to clone.
#[derive(Clone)]
pub enum Subscriber {
    One(PubSubSink),
    Cluster(cluster::ShardsHandle),
}

impl Subscriber {
    /// SUBSCRIBE (SSUBSCRIBE at the channel's shard on a cluster).
    pub async fn subscribe(&mut self, channel: impl AsRef<str>) -> RResult<()> {
        match self {
            Subscriber::One(s) => s.subscribe(channel.as_ref()).await,
            Subscriber::Cluster(h) => h.subscribe(channel.as_ref()).await,
        }
    }

    /// UNSUBSCRIBE (SUNSUBSCRIBE on a cluster).
    pub async fn unsubscribe(&mut self, channel: impl AsRef<str>) -> RResult<()> {
        match self {
            Subscriber::One(s) => s.unsubscribe(channel.as_ref()).await,
            Subscriber::Cluster(h) => h.unsubscribe(channel.as_ref()).await,
        }
    }

    /// PING (every shard's connection on a cluster).
    pub async fn ping(&mut self) -> RResult<()> {
        match self {
            Subscriber::One(s) => s.ping::<::redis::Value>().await.map(|_| ()),
            Subscriber::Cluster(h) => h.ping().await,
        }
    }
}

enum Stream {
    One(PubSubStream),
    Cluster(cluster::Shards),
}

impl Link {
    /// Both connections, each answering, within the [`timeout`] (on a
    /// cluster: the topology read and every master answering, within
    /// twice that).
    async fn connect(target: &Target) -> RResult<Link> {
        let limit = timeout();
        let client = match target {
            Target::One(client) => client,
            Target::Cluster(spec) => {
                let attempt = async {
                    let router = cluster::Router::connect(spec.clone()).await?;
                    let shards = cluster::Shards::new(spec.clone(), router.topology());
                    Ok(Link {
                        sink: Subscriber::Cluster(shards.handle()),
                        stream: Stream::Cluster(shards),
                        cmd: Cmd::Cluster(router),
                    })
                };
                return within(limit * 2, "no connection", attempt).await;
            }
        };
        let attempt = async {
            let config = ::redis::AsyncConnectionConfig::new()
                .set_connection_timeout(limit)
                .set_response_timeout(limit);
            let mut cmd = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            let (mut sink, stream) = client.get_async_pubsub().await?.split();
            // Both answer now: a wrong password, a missing ACL permission
            // or a TLS problem shows here, not at the first command.
            ::redis::cmd("PING").query_async::<()>(&mut cmd).await?;
            sink.ping::<::redis::Value>().await?;
            Ok(Link {
                cmd: Cmd::One(cmd),
                sink: Subscriber::One(sink),
                stream: Stream::One(stream),
            })
        };
        within(limit, "no connection", attempt).await
    }

    /// Whether this session is on a Redis Cluster: its workers then name
    /// keys and channels with hash tags, publish with SPUBLISH and keep
    /// each Lua script to one topic's slot.
    pub fn is_cluster(&self) -> bool {
        matches!(self.cmd, Cmd::Cluster(_))
    }

    /// The next message on a subscribed channel; an error once the pub/sub
    /// connection (on a cluster, any shard's) is closed.
    pub async fn next_message(&mut self) -> RResult<::redis::Msg> {
        let stream = match &mut self.stream {
            Stream::One(s) => s,
            Stream::Cluster(shards) => return shards.next_message().await,
        };
        match stream.next().await {
            Some(m) => Ok(m),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "the pub/sub connection closed",
            )
            .into()),
        }
    }
}

/// `f`, or a timeout error after the link's [`timeout`]: every command a
/// worker sends goes through this.
pub async fn timed<T>(f: impl Future<Output = RResult<T>>) -> RResult<T> {
    within(timeout(), "Redis did not answer", f).await
}

pub(crate) async fn within<T>(
    limit: Duration,
    what: &str,
    f: impl Future<Output = RResult<T>>,
) -> RResult<T> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{what} within {limit:?}"),
        )
        .into()),
    }
}

/// Why [`Worker::serve`] returned.
pub enum End {
    /// The worker's owner is gone (or asked it to stop): end the thread.
    Stop,
    /// The session failed: reconnect.
    Lost(::redis::RedisError),
}

impl From<::redis::RedisError> for End {
    fn from(e: ::redis::RedisError) -> End {
        End::Lost(e)
    }
}

/// A user of the link, run on its thread.
pub trait Worker: Send + 'static {
    /// What the worker keeps per session (what it subscribed, its scripts'
    /// hashes); built by [`Worker::setup`], dropped with the session.
    type Session;
    /// Names the worker in logs ("cluster backplane", "presence").
    const WHAT: &'static str;
    /// What the worker keeps serving while Redis is away, for the log.
    const MEANWHILE: &'static str;

    fn health(&self) -> &Health;
    /// A fresh session: subscribe, write this node's state, catch up.
    fn setup(&mut self, link: &mut Link) -> impl Future<Output = RResult<Self::Session>>;
    /// Serves a session until it is lost or the owner is gone.
    fn serve(&mut self, link: &mut Link, s: &mut Self::Session) -> impl Future<Output = End>;
    /// Called before each reconnection attempt: drop (and count) what piled
    /// up meanwhile. False: the owner is gone, stop.
    fn idle(&mut self) -> bool;
    /// A word on the session just rebuilt, for the log.
    fn back(&self, s: &Self::Session) -> String;
}

/// Starts thread `thread` for `worker`: makes its first session (link and
/// setup) and returns once it has, or the reason as
/// [`Error::RedisConnect`] naming `shown` (the URL, password masked).
/// `options` give the link's timeout.
pub fn start<W: Worker>(
    thread: &str,
    shown: &str,
    client: Target,
    options: &RedisOptions,
    worker: W,
) -> Result<(), Error> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let url = shown.to_string();
    let limit = options.timeout;
    std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            TIMEOUT.with(|t| t.set(limit));
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            rt.block_on(async move {
                let mut worker = worker;
                match first_session(&client, &mut worker).await {
                    Ok((link, session)) => {
                        worker.health().answered_now();
                        worker.health().connected.store(true, Relaxed);
                        let _ = ready_tx.send(Ok(()));
                        run(client, url, worker, link, session).await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                    }
                }
            });
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(()),
        Ok(Err(reason)) => Err(Error::RedisConnect {
            url: shown.to_string(),
            reason,
        }),
        Err(_) => Err(Error::RedisConnect {
            url: shown.to_string(),
            reason: format!("the {thread} thread ended"),
        }),
    }
}

async fn first_session<W: Worker>(client: &Target, worker: &mut W) -> RResult<(Link, W::Session)> {
    let mut link = Link::connect(client).await?;
    // No overall bound: a big setup (many topics) may take longer than a
    // connection; each of its commands is bounded by `timed`.
    let session = worker.setup(&mut link).await?;
    Ok((link, session))
}

/// Serves sessions one after the other until the worker stops.
async fn run<W: Worker>(
    client: Target,
    url: String,
    mut worker: W,
    mut link: Link,
    mut session: W::Session,
) {
    let health = worker.health().clone();
    loop {
        let checks = keep_checking(link.cmd.clone(), link.sink.clone(), &health, W::WHAT, &url);
        let end = tokio::select! {
            end = worker.serve(&mut link, &mut session) => end,
            e = checks => End::Lost(e),
        };
        let err = match end {
            End::Stop => return,
            End::Lost(e) => e,
        };
        let down_at = Instant::now();
        health.set_down(Some(down_at));
        health.connected.store(false, Relaxed);
        health.failures.fetch_add(1, Relaxed);
        health.end_slow();
        drop(session);
        drop(link);
        tracing::error!(
            "{}: lost the connection to Redis at {url}: {err}; reconnecting with backoff \
             ({BACKOFF_MIN:?} doubling to {BACKOFF_MAX:?}). Meanwhile {}",
            W::WHAT,
            W::MEANWHILE,
        );
        (link, session) = match reconnect(&client, &mut worker).await {
            Some(s) => s,
            None => return,
        };
        health.answered_now();
        health.reconnects.fetch_add(1, Relaxed);
        health.connected.store(true, Relaxed);
        health.set_down(None);
        tracing::info!(
            down_ms = down_at.elapsed().as_millis() as u64,
            "{}: reconnected to Redis at {url}; {}",
            W::WHAT,
            worker.back(&session)
        );
    }
}

/// PINGs every connection of the session (both at once) every
/// [`PING_EVERY`], each answer due within the [`timeout`], and records the
/// round trip in `health`; returns the error once one fails or is late.
/// `what` and `url` name the link in the log of a slow episode.
async fn keep_checking(
    mut cmd: Cmd,
    mut sink: Subscriber,
    health: &Health,
    what: &str,
    url: &str,
) -> ::redis::RedisError {
    let mut tick = tokio::time::interval(PING_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let sent = Instant::now();
        let limit = timeout();
        let (c, s) = tokio::join!(
            within(limit, "Redis did not answer a PING", cmd.ping()),
            within(limit, "Redis did not answer a PING", sink.ping()),
        );
        if let Err(e) = c.and(s) {
            return e;
        }
        health.pinged(sent.elapsed(), limit, what, url);
    }
}

/// New sessions with backoff until one is set up, or the worker stops.
async fn reconnect<W: Worker>(client: &Target, worker: &mut W) -> Option<(Link, W::Session)> {
    let mut delay = BACKOFF_MIN;
    let mut attempt = 0u32;
    loop {
        tokio::time::sleep(delay).await;
        attempt += 1;
        if !worker.idle() {
            return None;
        }
        match first_session(client, worker).await {
            Ok(s) => return Some(s),
            Err(e) => tracing::debug!(attempt, error = %e, "{}: reconnect failed", W::WHAT),
        }
        delay = (delay * 2).min(BACKOFF_MAX);
    }
}
