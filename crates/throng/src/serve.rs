//! `throng serve`: the wiring of one process. The chat app as a single node
//! (no `--redis`), a node of a cluster (`--redis`), or the supervisor of
//! `--workers` such nodes; prints `listening on ADDR` on stdout once it
//! serves (`api at ADDR` before it when the server API listens,
//! and, in a worker, `capacity N`, for the supervisor).

use std::io::Write as _;
use std::sync::Arc;

use throng_pubsub::{
    Backplane, LocalBackplane, LocalPresence, PresenceStore, RedisBackplane, RedisPresence,
};
use throng_server::{chat, echo, Config, Server};

use crate::supervisor::{self, Error};

/// Runs `throng serve` with resolved settings; blocks while it serves.
pub fn serve(config: Config) -> Result<(), Error> {
    if config.workers > 1 && config.worker_index.is_none() {
        // `ServeArgs::resolve` refuses --workers above 1 without --redis.
        if let Some(url) = config.redis.clone() {
            return supervisor::run(config, &url);
        }
    }
    let backplane: Arc<dyn Backplane> = match &config.redis {
        Some(url) => Arc::new(RedisBackplane::connect(url)?),
        None => Arc::new(LocalBackplane),
    };
    // Presence crosses nodes only when it is turned on: without rules, no
    // presence connections or liveness keys.
    let presence: Arc<dyn PresenceStore> = match &config.redis {
        Some(url) if !config.presence.is_empty() => {
            Arc::new(RedisPresence::connect(url, config.presence_timeout)?)
        }
        _ => Arc::new(LocalPresence::new()),
    };
    let worker = config.worker_index;
    // The chat app, and a relay channel on every rule's topics it does not route.
    let mut router = chat::router();
    let policy = throng_server::auth::Policy::new(config.topics.clone());
    for pattern in policy.route_patterns() {
        if !router.patterns().any(|p| p == pattern) {
            router = router.channel(&pattern, throng_server::relay::Relay);
        }
    }
    if config.echo {
        // Test-only: what a socket connected with (see `throng_server::echo`).
        router = router.channel("echo:*", echo::EchoChannel);
    }
    let server = Server::start_with_presence(config, router, backplane, presence)?;
    let mut out = std::io::stdout().lock();
    if let Some(index) = worker {
        // For the supervisor, which sums the workers' capacities.
        let capacity = server
            .node
            .fd_limit
            .saturating_sub(throng_server::FD_MARGIN);
        tracing::info!(
            worker = index,
            pid = std::process::id(),
            "worker {index} serving"
        );
        let _ = writeln!(out, "capacity {capacity}");
    }
    if let Some(api) = server.api_addr {
        let _ = writeln!(out, "api at {api}");
    }
    let _ = writeln!(out, "listening on {}", server.addr);
    let _ = out.flush();
    drop(out);
    server.wait();
    Ok(())
}
