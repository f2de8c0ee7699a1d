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
//! - **The policy**, stated once below: how long a connection attempt and
//!   a reply may take, how often the pub/sub connection is checked, and
//!   the reconnect backoff. The backplane and the presence store follow the
//!   same one (they used to have 3 s and 5 s each).
//! - **The thread and the loop** ([`start`]): a `throng-*` thread with a
//!   single-threaded tokio runtime of its own (so the shards never share an
//!   executor with Redis I/O), the first session made before `start`
//!   returns (a wrong URL, password or certificate fails the caller's start
//!   with the reason), then [`Worker::serve`] until the link is lost, one
//!   error log, reconnection with backoff, [`Worker::setup`] again, one
//!   info log saying how long it was down.
//!
//! Layers: `options` (URL, TLS, client), then `cluster` (which uses
//! them), then this module (the session, the loop, [`check_with`]).
//!
//! The user of the link is a [`Worker`]: what it does on a fresh session
//! (subscribe, rewrite its state), what it serves while connected, and
//! what it drops while disconnected.

pub mod cluster;
mod options;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use std::sync::Arc;

use ::redis::aio::{ConnectionLike, MultiplexedConnection, PubSubSink, PubSubStream};
use ::redis::{Cmd as RedisCmd, Pipeline, RedisFuture, Value};
use futures_util::StreamExt;

pub use cluster::slot::{tagged, topic_after_tag, topic_tag};
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

/// How long a connection attempt (TCP, TLS, AUTH, the first PING and the
/// user's setup) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long any reply may take before the session counts as lost.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the pub/sub connection is checked with a PING (the command
/// connection is checked by its own traffic and [`RESPONSE_TIMEOUT`]).
pub const PING_EVERY: Duration = Duration::from_secs(5);
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
    /// Both connections, each answering, within [`CONNECT_TIMEOUT`] (on a
    /// cluster: the topology read and every master answering).
    async fn connect(target: &Target) -> RResult<Link> {
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
                return within(CONNECT_TIMEOUT * 2, "no connection", attempt).await;
            }
        };
        let attempt = async {
            let config = ::redis::AsyncConnectionConfig::new()
                .set_connection_timeout(CONNECT_TIMEOUT)
                .set_response_timeout(RESPONSE_TIMEOUT);
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
        within(CONNECT_TIMEOUT, "no connection", attempt).await
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

/// `f`, or a timeout error after [`RESPONSE_TIMEOUT`]: every command a
/// worker sends goes through this.
pub async fn timed<T>(f: impl Future<Output = RResult<T>>) -> RResult<T> {
    within(RESPONSE_TIMEOUT, "Redis did not answer", f).await
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

/// Whether a link is up, and how often it came back; each user shows them
/// in `/metrics` under its own names.
#[derive(Default, Debug)]
pub struct Health {
    /// A session is up and its worker's setup done.
    pub connected: AtomicBool,
    /// Sessions rebuilt after a lost one.
    pub reconnects: AtomicU64,
    /// When the session in progress was lost, while it is being rebuilt
    /// (for `/readyz`, which turns 503 once this is old enough). Written
    /// only when the link goes down or comes back.
    pub down_since: std::sync::Mutex<Option<Instant>>,
}

impl Health {
    /// How long the link has been down, if it is.
    pub fn down_for(&self) -> Option<Duration> {
        if self.connected.load(Relaxed) {
            return None;
        }
        let since = *self.down_since.lock().unwrap_or_else(|e| e.into_inner());
        Some(since.map_or(Duration::ZERO, |t| t.elapsed()))
    }

    fn set_down(&self, down: Option<Instant>) {
        *self.down_since.lock().unwrap_or_else(|e| e.into_inner()) = down;
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
pub fn start<W: Worker>(thread: &str, shown: &str, client: Target, worker: W) -> Result<(), Error> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let url = shown.to_string();
    std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
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
    loop {
        let pinger = link.sink.clone();
        let end = tokio::select! {
            end = worker.serve(&mut link, &mut session) => end,
            e = keep_checking(pinger) => End::Lost(e),
        };
        let err = match end {
            End::Stop => return,
            End::Lost(e) => e,
        };
        let down_at = Instant::now();
        worker.health().set_down(Some(down_at));
        worker.health().connected.store(false, Relaxed);
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
        worker.health().reconnects.fetch_add(1, Relaxed);
        worker.health().connected.store(true, Relaxed);
        worker.health().set_down(None);
        tracing::info!(
            down_ms = down_at.elapsed().as_millis() as u64,
            "{}: reconnected to Redis at {url}; {}",
            W::WHAT,
            worker.back(&session)
        );
    }
}

/// PINGs the pub/sub connection every [`PING_EVERY`]; returns the error
/// once one fails or times out.
async fn keep_checking(mut sink: Subscriber) -> ::redis::RedisError {
    let mut tick = tokio::time::interval(PING_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(e) = timed(sink.ping()).await {
            return e;
        }
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
