//! `throng serve`: the wiring of one process. The chat app as a single node
//! (no `--redis`), a node of a cluster (`--redis`), or the supervisor of
//! `--workers` such nodes; prints `listening on ADDR` on stdout once it
//! serves (`api at ADDR` before it when the server API listens,
//! and, in a worker, `capacity N`, for the supervisor), then, outside a
//! worker, the chat page's URL to open.
//!
//! With `--tls-cert` (or `--api-tls-cert`), SIGHUP reloads the
//! certificates (`throng_server::tls`).
//!
//! A node drains on SIGTERM or SIGINT (`throng_server::Node::drain`: no
//! new connections, its sockets closed with 1012 over up to `--drain-seconds`)
//! and exits 0 when done; a second signal exits at once.

use std::io::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use signal_hook::consts::{SIGINT, SIGTERM};
use throng_server::Node;

use throng_pubsub::{
    Backplane, LocalBackplane, LocalPresence, PresenceStore, RedisBackplane, RedisPresence,
};
use throng_server::{chat, echo, Config, Server};

use crate::supervisor::{self, open_line, Error};

/// Runs `throng serve` with resolved settings; blocks while it serves.
pub fn serve(config: Config) -> Result<(), Error> {
    throng_server::panic::abort_on_panic();
    // Once, by the process the user started (not again by each worker).
    if config.worker_index.is_none() {
        for warning in &config.secret_warnings {
            tracing::warn!("{warning}");
        }
    }
    if config.workers > 1 && config.worker_index.is_none() {
        // `ServeArgs::resolve` refuses --workers above 1 without --redis.
        if let Some(url) = config.redis.clone() {
            return supervisor::run(config, &url);
        }
    }
    let backplane: Arc<dyn Backplane> = match &config.redis {
        Some(url) => Arc::new(RedisBackplane::connect_with(url, &config.redis_options())?),
        None => Arc::new(LocalBackplane),
    };
    // Presence crosses nodes only when it is turned on (presence rules, or
    // Pusher apps, whose presence channels are always on): without, no
    // presence connections or liveness keys.
    let presence_on = !config.presence.is_empty() || !config.pusher.apps.is_empty();
    let presence: Arc<dyn PresenceStore> = match &config.redis {
        Some(url) if presence_on => Arc::new(RedisPresence::connect_with(
            url,
            config.presence_timeout,
            &config.redis_options(),
        )?),
        _ => Arc::new(LocalPresence::new()),
    };
    let worker = config.worker_index;
    // The chat app (which lets the rules decide its joins when there are
    // rules), and a relay channel on every rule's topics it does not route.
    let policy = throng_server::rules::Policy::new(config.topics.clone());
    let mut router = if policy.rules.is_empty() {
        chat::router()
    } else {
        chat::router_under_rules()
    };
    for warning in chat::rule_warnings(&policy.rules) {
        tracing::warn!("{warning}");
    }
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
    drain_on_signal(server.node.clone())?;
    // Certificates reload on SIGHUP and when their files change.
    let certs = [&server.node.tls, &server.node.api_tls]
        .into_iter()
        .flatten()
        .map(|t| t.certs.clone())
        .collect();
    throng_server::tls::watch(certs, true)?;
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
    if worker.is_none() {
        let banner = open_line(&server.node.config, server.addr);
        let _ = writeln!(out, "{banner}");
    }
    let _ = out.flush();
    drop(out);
    server.wait();
    tracing::info!("drained; exiting");
    Ok(())
}

/// The first SIGTERM/SIGINT drains the node; a second one exits at once.
fn drain_on_signal(node: Arc<Node>) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    std::thread::Builder::new()
        .name("throng-signals".into())
        .spawn(move || {
            let mut signals = signals.forever();
            if let Some(sig) = signals.next() {
                let open: u64 = node.stats.iter().map(|s| s.websockets.load(Relaxed)).sum();
                let window = node.drain_window();
                tracing::info!(
                    signal = sig,
                    websockets = open,
                    "draining: no new connections; closing {open} sockets with 1012 over {:.1} s, \
                     then exiting (signal again to exit now)",
                    window.as_secs_f64()
                );
                node.drain();
            }
            if let Some(sig) = signals.next() {
                tracing::warn!(
                    signal = sig,
                    "second signal: exiting without finishing the drain"
                );
                std::process::exit(1);
            }
        })?;
    Ok(())
}
