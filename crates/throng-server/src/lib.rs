//! # throng-server
//!
//! The server: transport, socket multiplexing, the channel API, the sharded
//! pub/sub registry, HTTP pages and metrics.
//!
//! ## Layout
//! - [`config`]: flags, environment, TOML file.
//! - [`channel`]: the app-facing API (`Channel`, `Socket`, `Router`).
//! - [`chat`]: the seed benchmark's chat app, written with that API.
//! - [`pubsub`]: the per-shard registry, encode-once `Broadcast`, `Backplane`.
//! - `shard`: one event loop per core; each owns the connections it accepted.
//! - [`node`]: what the shards of one process share (config, metrics, peers).
//! - `page`: the chat page (template + layout) and fixed responses.
//!
//! ## Design
//! N shard threads (default: one per core), each with its own epoll and its
//! own `SO_REUSEPORT` listener, so accepting, reading, joining and leaving
//! never cross threads or take a lock. A broadcast is encoded once per
//! serializer into whole WebSocket frames; the originating shard writes them
//! to its subscribers and hands an `Arc` to each other shard that has
//! subscribers of the topic. We use `mio` directly rather than a task per
//! connection so that an idle connection is a ~50-byte slab entry with no
//! buffer, no future and no timer.

pub mod channel;
pub mod chat;
pub mod config;
pub mod node;
mod page;
pub mod pubsub;
mod shard;
pub mod sys;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use mio::net::TcpListener;
use mio::{Poll, Waker};

pub use channel::{Channel, HandleIn, OwnedPayload, Router, Socket, Terminate};
pub use config::{Config, ServeArgs};
pub use node::Node;
pub use pubsub::{Backplane, Broadcast, LocalBackplane};

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
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A running server.
pub struct Server {
    /// The address it listens on (the real port when 0 was asked for).
    pub addr: SocketAddr,
    pub node: Arc<Node>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    /// Binds and starts the shards with `router` and `backplane`.
    pub fn start(
        config: Config,
        router: Router,
        backplane: Arc<dyn Backplane>,
    ) -> Result<Server, Error> {
        let fd_limit = sys::raise_fd_limit().unwrap_or(1024);
        let listeners = bind_all(config.addr, config.shards)?;
        let addr = listeners[0].local_addr()?;
        let mut polls = Vec::new();
        let mut peers = Vec::new();
        let mut inboxes = Vec::new();
        for _ in 0..config.shards {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), shard::WAKER)?);
            let (tx, rx) = crossbeam_channel::unbounded();
            polls.push(poll);
            peers.push(node::Peer { tx, waker });
            inboxes.push(rx);
        }
        let node = Arc::new(Node {
            stats: (0..config.shards)
                .map(|_| Arc::new(node::ShardStats::default()))
                .collect(),
            config,
            router,
            topics: Default::default(),
            backplane,
            peers,
            pages: page::Pages::build(),
            fd_limit,
        });
        node.backplane.attach(Arc::downgrade(&node));
        let mut threads = Vec::new();
        for (id, ((poll, listener), inbox)) in
            polls.into_iter().zip(listeners).zip(inboxes).enumerate()
        {
            let shard = shard::Shard::new(id, poll, listener, inbox, node.clone())?;
            threads.push(
                std::thread::Builder::new()
                    .name(format!("throng-shard-{id}"))
                    .spawn(move || shard.run())?,
            );
        }
        tracing::info!(
            %addr,
            shards = node.config.shards,
            fd_limit,
            conn_struct_bytes = shard::CONN_SIZE,
            "open-files limit {fd_limit} allows about {} connections in this process",
            fd_limit.saturating_sub(FD_MARGIN)
        );
        Ok(Server {
            addr,
            node,
            threads,
        })
    }

    /// Blocks while the shards run (they run until the process ends).
    pub fn wait(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn bind_all(addr: SocketAddr, n: usize) -> Result<Vec<TcpListener>, Error> {
    let mut out = Vec::with_capacity(n);
    let mut addr = addr;
    for _ in 0..n {
        let l = bind_one(addr).map_err(|source| Error::Bind { addr, source })?;
        addr = l.local_addr()?;
        out.push(l);
    }
    Ok(out)
}

fn bind_one(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket as RawSocket, Type};
    let sock = RawSocket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(65535)?;
    Ok(TcpListener::from_std(sock.into()))
}

/// `throng serve`: the chat app on a single node; prints the address, then runs.
pub fn run(config: Config) -> Result<(), Error> {
    let server = Server::start(config, chat::router(), Arc::new(LocalBackplane))?;
    println!("listening on {}", server.addr);
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    server.wait();
    Ok(())
}
