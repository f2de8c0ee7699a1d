//! Health checks for orchestrators and load balancers, served on the public
//! port and on the server API listener alike (no key needed):
//!
//! - `GET /healthz`: the process is alive and its event loops answer
//!   (always 200 `{"status":"alive"}` when it can answer at all). For a
//!   Kubernetes `livenessProbe`.
//! - `GET /readyz`: whether new clients should be sent here. 200
//!   `{"status":"ready"}`, or 503 `{"status":"not ready","reason":R,
//!   "message":...}` with `R` one of `starting` (the listeners are not all
//!   up yet), `draining` (a SIGTERM drain is closing the sockets: the
//!   public listener is closed, so on the public port only a connection
//!   kept alive from before sees it) and `redis` (the cluster backplane
//!   has been disconnected longer than `--ready-redis-grace`, so this
//!   node's broadcasts no longer reach the others). For a
//!   `readinessProbe` and a load balancer's health check.
//!
//! Both answer from atomics the node keeps anyway: no lock on the hot
//! path, nothing allocated per connection.

use std::sync::atomic::Ordering::Relaxed;

use crate::node::Node;

/// Why a node is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// The listeners are not all up yet.
    Starting,
    /// A drain is in progress.
    Draining,
    /// The Redis backplane has been down longer than the grace.
    Redis,
}

impl NotReady {
    /// The stable `reason` of the 503 body.
    pub fn reason(self) -> &'static str {
        match self {
            NotReady::Starting => "starting",
            NotReady::Draining => "draining",
            NotReady::Redis => "redis",
        }
    }

    /// What it means and what happens next, for a person.
    pub fn message(self) -> &'static str {
        match self {
            NotReady::Starting => {
                "the server is still starting its listeners; ask again in a moment"
            }
            NotReady::Draining => {
                "the server is draining (SIGTERM): it closes its sockets with 1012 and exits; \
                 send new clients to another node"
            }
            NotReady::Redis => {
                "the connection to Redis (--redis) has been lost for longer than \
                 --ready-redis-grace; broadcasts from this node do not reach the cluster until it \
                 reconnects (it keeps retrying): check that Redis is up and reachable"
            }
        }
    }
}

/// Whether `node` should get new clients now.
pub fn readiness(node: &Node) -> Result<(), NotReady> {
    if node.drain_started().is_some() {
        return Err(NotReady::Draining);
    }
    if !node.listening.load(Relaxed) {
        return Err(NotReady::Starting);
    }
    if let Some(down) = node.backplane.disconnected_for() {
        if down >= node.config.limits.ready_redis_grace {
            return Err(NotReady::Redis);
        }
    }
    Ok(())
}

/// `/healthz`'s body (built into the fixed responses of `page.rs`).
pub use crate::page::ALIVE;

/// `/readyz`'s status and JSON body.
pub fn readyz(node: &Node) -> (u16, String) {
    match readiness(node) {
        Ok(()) => (200, "{\"status\":\"ready\"}\n".to_string()),
        Err(why) => {
            let body = serde_json::json!({
                "status": "not ready",
                "reason": why.reason(),
                "message": why.message(),
            });
            (503, format!("{body}\n"))
        }
    }
}

/// The whole HTTP/1.1 response to `/readyz` on the public port.
pub(crate) fn readyz_response(node: &Node, head_only: bool) -> Vec<u8> {
    let (status, body) = readyz(node);
    let status = if status == 200 {
        "200 OK"
    } else {
        "503 Service Unavailable"
    };
    let r = crate::page::Response::new(
        status,
        "application/json",
        "Cache-Control: no-store\r\n",
        body.as_bytes(),
    );
    r.bytes(head_only).to_vec()
}
