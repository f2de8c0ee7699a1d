//! `throng serve`: the wiring of one process. The chat app as a single node
//! (no `--redis`), a node of a cluster (`--redis`), or the supervisor of
//! `--workers` such nodes; prints `listening on ADDR` on stdout once it
//! serves (and, in a worker, `capacity N` before it, for the supervisor).

use std::io::Write as _;
use std::sync::Arc;

use throng_pubsub::{Backplane, LocalBackplane, RedisBackplane};
use throng_server::{chat, Config, Server};

use crate::supervisor::{self, Error};

/// Runs `throng serve` with resolved settings; blocks while it serves.
pub fn serve(config: Config) -> Result<(), Error> {
    throng_server::panic::abort_on_panic();
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
    let worker = config.worker_index;
    let server = Server::start(config, chat::router(), backplane)?;
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
    let _ = writeln!(out, "listening on {}", server.addr);
    let _ = out.flush();
    drop(out);
    server.wait();
    Ok(())
}
