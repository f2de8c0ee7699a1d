//! # throng-server
//!
//! The server: an engine that knows no protocol (event loops, connections,
//! HTTP heads, WebSocket frames, topics, encoded broadcasts), the wire
//! protocols it serves, one folder each, the features they share (topic
//! rules, history, hooks, presence, TLS, authentication), the channel API
//! apps write against, pages and metrics. Pub/sub (the registry,
//! encode-once broadcasts, the backplane, presence and history stores) is
//! `throng-pubsub`.
//!
//! ## Layout
//! - `engine/`: one event loop per core (`engine/shard/`), the lean
//!   connection (`engine/conn.rs`), a shard's connections, their registry
//!   and output (`engine/conns/`: the port a protocol answers through),
//!   the one close path and its table (`engine/close.rs`), HTTP routing
//!   (`engine/http/`), and [`Protocol`](engine::Protocol), what the engine
//!   asks of a wire protocol (`engine/protocol.rs`). Phoenix's
//!   `Phoenix.Socket.Transport`, and Bandit's `WebSock`.
//! - `protocol/`: the wire protocols, one folder each, and `Protocols`,
//!   all of them as the engine is built with them. `protocol/phoenix/`:
//!   its routes (`/socket/websocket`, `/socket/check`, `/socket/longpoll`),
//!   the socket state machine (`socket/`: heartbeat, join, leave, duplicate
//!   join, dispatch, replies, with no I/O; `Phoenix.Socket`), its shard
//!   state and glue (`shard.rs`, `transport.rs`), the connect hook
//!   (`hooks.rs`), the long-poll transport (`longpoll/`;
//!   `Phoenix.Transports.LongPoll`), and its channels: [`chat`] (the
//!   Phoenix team's 2M-connection benchmark's chat app), [`relay`] (topics
//!   only config rules describe) and [`echo`] (a test channel).
//! - [`channel`]: the app-facing API (`Channel`, `Socket`, `Router`).
//!   Phoenix's `Phoenix.Channel`.
//! - [`node`]: what the shards of one process share, and the [`Endpoint`]
//!   handle for code outside callbacks. Phoenix's `Endpoint.broadcast`.
//! - The features, a folder or file each, with their settings:
//!   [`rules`] (`[[topics]]`: who may join and push where, history sizes),
//!   [`history`] (positions, the one read of a rejoin and its recovery on a
//!   shard, `GET /api/history`), [`hooks`] (the app backend's client, its
//!   waits, lifecycle events, occupancy; `hooks/settings.rs`), [`presence`]
//!   (rules and the `Presence` handle; the state is
//!   `throng_pubsub::presence`), [`tls`] (certificates and the sessions
//!   under every connection), [`auth`] (Phoenix.Token, JWT, `check_origin`,
//!   the push budget, revocations, the weak-secret rule).
//! - [`config`]: flags, environment, TOML file; [`limits`]: the bounds
//!   against hostile clients and faults and where each is enforced;
//!   [`panic`]: a panic on any thread aborts the process.
//! - [`metrics`]: per-shard counters; [`scrape`]: the metrics registry
//!   (each metric one static descriptor, `throng_pubsub::metrics`) and the
//!   `/metrics` page that walks it; [`api_stats`]: the server API's and
//!   dashboard's counters;
//!   [`health`]: `GET /healthz` and `GET /readyz`; [`dashboard`].
//! - [`api`]: the server API for app backends on its own listener;
//!   [`control`]: the nodes' own requests to each other over the
//!   backplane; `forward/`: the long-poll requests and answers the node
//!   carries between shards and nodes.
//! - [`bind`]: binding the listeners; [`refusals`]: the rate-limited log
//!   lines of refused clients; `page`: the chat page and fixed responses;
//!   `fuzz/` (feature `fuzzing`): every reader of outside input as one
//!   function of bytes, for `fuzz/`.
//!
//! ## Layers
//! A module uses only modules of its layer's rank or below
//! (`scripts/check-import-cycles.py` checks for cycles, in CI):
//! 1. plain values and settings: `setting` (the `settings!` macro),
//!    `sys`, `metrics` (the shard counters), `page`, `api_error`, `bind`,
//!    `channel`, `tls`, `budget` (the outbound memory budget), `write` (the
//!    one socket write), `panic`, `forward`
//! 2. the settings groups and what they hold: `auth`, `limits`,
//!    `presence`, `refusals`, `rules`; then `config`, which gathers them
//! 3. what the node holds: `control` (the nodes' requests to each other),
//!    `hooks` (the app backend's client)
//! 4. `node`: what the shards of a process share, holding the types above
//! 5. what reads the node: `history`, `health`, `scrape` (`/metrics`),
//!    `dashboard`
//! 6. `engine`: the event loops, which drive everything below and call
//!    their protocol through the `Protocol` trait, naming none
//! 7. `protocol`: the wire protocols, over the engine
//! 8. `api` (the server API), `fuzz`, and this file (`Server`, which
//!    builds the shards with every protocol)
//!
//! Where a lower module calls back up, it goes through what the node
//! implements: the hook client's answers (`hooks::Answers`) and occupancy
//! events (`throng_pubsub::OccupancySink`), the backplane's deliveries
//! (`throng_pubsub::Handler`); the figures of a node's report are read
//! from the metrics registry (`scrape::all`).
//!
//! ## The path of a broadcast, in ten hops
//! A phoenix.js client pushes `new:msg` on `rooms:lobby`.
//! 1. Its shard's loop reads the socket into the shard's one buffer
//!    (`engine/shard/input.rs`, `on_readable`),
//! 2. decodes a frame in place (`throng_protocol::frame`), and `engine/ws.rs`
//!    makes it a message;
//! 3. the engine hands the message to the socket's protocol
//!    (`Protocol::message`; `protocol/phoenix/shard.rs`, `Phx::message`),
//! 4. whose serializer decodes it in place (`throng_protocol::serializer`),
//! 5. and the socket state machine dispatches it to the channel
//!    (`protocol/phoenix/socket/`, `Mux::handle_in`, then the channel's
//!    `handle_in`, [`chat`]);
//! 6. the channel's `broadcast` reaches the state machine's port
//!    (`protocol/phoenix/transport.rs`, `ShardTransport::broadcast`),
//! 7. which makes one `Broadcast`, encoded once per wire its topic's
//!    subscribers may speak into whole frames (`throng_pubsub::Broadcast`),
//! 8. and publishes it through the engine's port (`Conns::publish`,
//!    `engine/conns/topics.rs`): an `Arc` of it to each other shard with
//!    subscribers and one copy to the backplane for the other nodes
//!    (`Node::broadcast`),
//! 9. then to this shard's subscribers (`Conns::deliver`,
//!    `engine/conns/output.rs`): each gets the frame of the wire it speaks,
//! 10. written with one `write` per subscriber and no allocation
//!     (`send_to`, `write.rs`), queued only for what the kernel refuses.
//!
//! ## Design
//! N shard threads (default: one per core), each with its own epoll and its
//! own `SO_REUSEPORT` listener, so accepting, reading, joining and leaving
//! never cross threads or take a lock. We use `mio` directly rather than a
//! task per connection so that an idle connection is an 80-byte slab entry
//! with no buffer, no future and no timer.

pub mod api;
mod api_error;
pub mod api_stats;
pub mod auth;
pub mod bind;
mod budget;
pub mod channel;
pub mod config;
pub mod control;
pub mod dashboard;
mod engine;
mod forward;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod health;
pub mod history;
pub mod hooks;
pub mod limits;
pub mod metrics;
pub mod node;
mod page;
pub mod panic;
pub mod presence;
mod protocol;
pub mod refusals;
pub mod rules;
pub mod scrape;
mod setting;
pub mod sys;
pub mod tls;
mod write;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use mio::{Poll, Waker};
use throng_pubsub::{Backplane, Handler, LocalPresence, PresenceStore, Tracker};

pub use channel::{
    Channel, ConnectInfo, Info, OwnedPayload, Payload, Presence, PresenceError, Reply, Router,
    Socket, Terminate,
};
pub use config::{Config, ServeArgs};
pub use node::{Endpoint, Node};
pub use presence::PresenceRule;
pub use protocol::phoenix::{chat, echo, relay};

/// File descriptors kept back from the limit for listeners, epoll, logs.
pub const FD_MARGIN: u64 = 64;

/// The server's errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}{what}: another process holds the port (another throng serve?); {hint}")]
    PortInUse {
        addr: SocketAddr,
        what: &'static str,
        hint: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A running server.
pub struct Server {
    /// The address it listens on (the real port when 0 was asked for).
    pub addr: SocketAddr,
    /// The server API's address, if it listens.
    pub api_addr: Option<SocketAddr>,
    pub node: Arc<Node>,
    threads: Vec<JoinHandle<()>>,
    /// The server API, stopped gracefully when the shards have ended.
    api: Option<api::Running>,
}

impl Server {
    /// Binds and starts the shards with `router` and `backplane`; presence
    /// is this node's alone ([`LocalPresence`]).
    pub fn start(
        config: Config,
        router: Router,
        backplane: Arc<dyn Backplane>,
    ) -> Result<Server, Error> {
        Server::start_with_presence(config, router, backplane, Arc::new(LocalPresence::new()))
    }

    /// As [`Server::start`], with presence shared through `presence` (a
    /// `RedisPresence` for a cluster).
    pub fn start_with_presence(
        config: Config,
        router: Router,
        backplane: Arc<dyn Backplane>,
        presence: Arc<dyn PresenceStore>,
    ) -> Result<Server, Error> {
        // A weak secret starts nothing (settings built in code included).
        config.check_secrets()?;
        let fd_limit = sys::raise_fd_limit().unwrap_or(1024);
        sys::return_big_frees();
        let auth = auth::Auth::new(&config.auth)?;
        let policy = policy_of(&config);
        let policy_history = policy.any_history();
        let (push_limit, control_limit, session_limit) = budgets(&config);
        let public_tls = load_tls(&config.tls)?;
        let api_tls = load_tls(&config.api_tls)?;
        let listeners = bind::public_listeners(config.addr, config.shards, config.public_share())?;
        let addr = listeners[0].local_addr()?;
        let (polls, peers, inboxes) = shard_loops(&config)?;
        let config_limits = config.limits.clone();
        let hooks = hooks::HookClient::start(&config.hooks)?;
        let webhooks =
            hooks::Webhooks::start(&config.pusher.webhooks(), config.hooks.ca_file.as_deref())?;
        let presence = Tracker::with_count_rate(presence, config.presence_count_rate);
        let history_redis = redis_history(&config, &*backplane, policy_history)?;
        let node = Arc::new(Node {
            stats: (0..config.shards)
                .map(|_| Arc::new(metrics::ShardStats::default()))
                .collect(),
            config,
            router,
            topics: Default::default(),
            backplane,
            presence,
            peers,
            pages: page::Pages::build(),
            fd_limit,
            admission: limits::Admission::new(&config_limits),
            drain: Default::default(),
            listening: Default::default(),
            auth,
            policy,
            push_limit,
            control_limit,
            session_limit,
            control: Default::default(),
            hooks,
            occupancy: OnceLock::new(),
            webhooks,
            tls: public_tls,
            api_tls,
            refusals: Default::default(),
            history: (policy_history && history_redis.is_none()).then(|| {
                Arc::new(throng_pubsub::MemoryHistory::new(
                    config_limits.max_history_bytes,
                ))
            }),
            history_redis,
            this: OnceLock::new(),
            api: Default::default(),
        });
        let _ = node.this.set(Arc::downgrade(&node));
        if let Some(h) = &node.hooks {
            h.attach(Arc::downgrade(&node) as _);
        }
        start_occupancy(&node)?;
        let handler: std::sync::Weak<dyn Handler> = Arc::downgrade(&node) as _;
        node.backplane.attach(handler);
        let threads = spawn_shards(&node, (polls, listeners, inboxes))?;
        let (api_addr, api) = start_api(&node)?;
        let api_text = api_addr.map_or("none".to_string(), |a| a.to_string());
        tracing::info!(
            %addr,
            api = %api_text,
            auth = %node.config.auth.mode.name(),
            shards = node.config.shards,
            fd_limit,
            conn_struct_bytes = engine::CONN_SIZE,
            "open-files limit {fd_limit} allows about {} connections in this process",
            fd_limit.saturating_sub(FD_MARGIN)
        );
        node.listening
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(Server {
            addr,
            api_addr,
            node,
            threads,
            api,
        })
    }

    /// The address to open in a browser: the bound one, with a wildcard
    /// (0.0.0.0, ::) replaced by loopback.
    pub fn url(&self) -> String {
        page_url(self.addr, self.node.tls.is_some())
    }

    /// A handle for broadcasting and sending infos from outside callbacks.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint::new(self.node.clone())
    }

    /// Blocks while the shards run: until a drain ([`Node::drain`]) ends them.
    pub fn wait(self) {
        for t in self.threads {
            let _ = t.join();
        }
        // The server API's requests in progress get their answers before
        // the process exits (`api::STOP_WAIT`, meanwhile the events below
        // flush): a publish made but not answered would be retried by the
        // backend, and sent twice.
        if let Some(api) = &self.api {
            api.stop();
        }
        // The sockets' disconnects (and their presences' leaves) are
        // queued: give them a bounded time to reach the app backend.
        if let Some(events) = self.node.hooks.as_ref().and_then(|h| h.events()) {
            let limit = hooks::FLUSH_AT_EXIT;
            if !events.flush(limit) {
                tracing::warn!(
                    queued = events.queued(),
                    "lifecycle events: the app backend did not take every event within {limit:?} of the drain's end; the rest are lost"
                );
            }
        }
        if let Some(w) = &self.node.webhooks {
            let limit = hooks::FLUSH_AT_EXIT;
            if !w.flush(limit) {
                tracing::warn!(
                    queued = w.queued(),
                    "Pusher webhooks: the webhook URLs did not take every event within {limit:?} of the drain's end; the rest are lost"
                );
            }
        }
        if let Some(api) = self.api {
            api.join();
        }
    }
}

/// A certificate and key, loaded: a bad file fails the start, before any
/// port is taken.
fn load_tls(files: &Option<tls::TlsFiles>) -> Result<Option<Arc<tls::Tls>>, Error> {
    files
        .clone()
        .map(|f| tls::Tls::new(f).map(Arc::new))
        .transpose()
        .map_err(Error::Config)
}

/// The topics' rules, with history and the Pusher cache channels'.
fn policy_of(config: &Config) -> rules::Policy {
    let mut policy = rules::Policy::new(config.topics.clone()).with_history(&config.history);
    if !config.pusher.apps.is_empty() {
        let ttl = std::time::Duration::from_secs(config.pusher.cache_ttl);
        policy = policy.with_pusher_cache(ttl);
    }
    policy
}

/// With `--redis` and a topic that keeps history, the history in Redis
/// Streams, shared by every node (`crate::history`).
fn redis_history(
    config: &Config,
    backplane: &dyn Backplane,
    any_history: bool,
) -> Result<Option<Arc<throng_pubsub::RedisHistory>>, Error> {
    let history = match (&config.redis, any_history) {
        (Some(url), true) => Some(Arc::new(
            throng_pubsub::RedisHistory::connect_with(
                url,
                &config.redis_options(),
                backplane.node_id(),
            )
            .map_err(|e| Error::Config(format!("topic history: {e}")))?,
        )),
        _ => None,
    };
    Ok(history)
}

/// The budgets of pushes, control frames and long-poll requests.
fn budgets(config: &Config) -> (auth::PushLimit, auth::PushLimit, auth::PushLimit) {
    let push_limit = auth::PushLimit::new(config.push_rate, config.push_burst, config.push_strikes);
    let control_limit = auth::PushLimit::new(
        config.limits.control_rate,
        config.limits.control_burst,
        config.push_strikes,
    );
    let session_limit = auth::PushLimit::new(config.limits.longpoll_session_rate, 50, 0);
    (push_limit, control_limit, session_limit)
}

/// Each shard's event loop, its inbox and the handle the others reach it
/// by.
type ShardLoops = (
    Vec<Poll>,
    Vec<node::Peer>,
    Vec<crossbeam_channel::Receiver<node::ShardMsg>>,
);

fn shard_loops(config: &Config) -> Result<ShardLoops, Error> {
    let mut polls = Vec::new();
    let mut peers = Vec::new();
    let mut inboxes = Vec::new();
    for _ in 0..config.shards {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), engine::WAKER)?);
        let (tx, rx) = crossbeam_channel::unbounded();
        polls.push(poll);
        peers.push(node::Peer::new(
            peers.len(),
            tx,
            waker,
            config.limits.max_shard_inbox_bytes,
        ));
        inboxes.push(rx);
    }
    Ok((polls, peers, inboxes))
}

/// Occupancy of topics, for the lifecycle events and the Pusher webhooks
/// that need it: cluster-wide through Redis with `--redis`, else this
/// node's.
fn start_occupancy(node: &Arc<Node>) -> Result<(), Error> {
    if !(node.config.hooks.events || node.webhooks.is_some()) {
        return Ok(());
    }
    let occupancy = match &node.config.redis {
        Some(url) => {
            let sink: std::sync::Weak<dyn throng_pubsub::OccupancySink> = Arc::downgrade(node) as _;
            // A dead node's topics are vacated after the presence
            // timeout, as its presences leave.
            let redis = throng_pubsub::RedisOccupancy::connect_with(
                url,
                node.config.presence_timeout * 4 / 10,
                &node.config.redis_options(),
                sink,
            )
            .map_err(|e| Error::Config(format!("hooks events and webhooks: {e}")))?;
            hooks::Occupancy::Redis(redis)
        }
        None => hooks::Occupancy::Local(Default::default()),
    };
    let _ = node.occupancy.set(occupancy);
    Ok(())
}

/// The server API's listener and thread, when `--api-bind` asks for one.
fn start_api(node: &Arc<Node>) -> Result<(Option<SocketAddr>, Option<api::Running>), Error> {
    let started = match node.config.api_bind {
        Some(api) => {
            let listener = bind::api_listener(api, node.config.api_share())?;
            let (bound, running) = api::start(
                listener,
                Endpoint::new(node.clone()),
                node.config.api_key.clone(),
                node.api_tls.clone(),
            )
            .map_err(|source| Error::Bind { addr: api, source })?;
            // Serves through the drain; `wait` stops it once the shards are done.
            Some((bound, running))
        }
        None => None,
    };
    Ok(started.unzip())
}

/// Starts each shard's thread on its loop, listener and inbox.
fn spawn_shards(
    node: &Arc<Node>,
    loops: (
        Vec<Poll>,
        Vec<mio::net::TcpListener>,
        Vec<crossbeam_channel::Receiver<node::ShardMsg>>,
    ),
) -> Result<Vec<std::thread::JoinHandle<()>>, Error> {
    let (polls, listeners, inboxes) = loops;
    let mut threads = Vec::new();
    let proto = Arc::new(protocol::Protocols {
        phoenix: protocol::phoenix::Phoenix,
        pusher: protocol::pusher::Pusher::new(&node.config.pusher),
    });
    for (id, ((poll, listener), inbox)) in polls.into_iter().zip(listeners).zip(inboxes).enumerate()
    {
        let shard = engine::Shard::new(id, poll, listener, inbox, node.clone(), proto.clone())?;
        threads.push(
            std::thread::Builder::new()
                .name(format!("throng-shard-{id}"))
                .spawn(move || shard.run())?,
        );
    }
    Ok(threads)
}

/// `http://ADDR/` (`https://` with `tls`) for a listening address,
/// loopback for a wildcard one.
pub fn page_url(addr: SocketAddr, tls: bool) -> String {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{}/", SocketAddr::new(ip, addr.port()))
}
