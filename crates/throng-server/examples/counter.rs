//! A channel of your own, on throng as a library: `counter:*` topics where
//! every `inc` push adds to a count kept per join and broadcasts it to the
//! topic's subscribers; a backend thread broadcasts a `tick`
//! through the `Endpoint` once a second.
//!
//! Run it, then connect any Phoenix client to ws://127.0.0.1:4000/socket:
//!
//! ```sh
//! cargo run --release -p throng-server --example counter
//! ```
//!
//! In your own crate, depend on the server and pub/sub crates (path or git):
//!
//! ```toml
//! [dependencies]
//! throng-server = { git = "https://github.com/OWNER/throng" }
//! throng-pubsub = { git = "https://github.com/OWNER/throng" }
//! ```
//!
//! `cargo test` builds this example, so it keeps compiling with the API.

use std::sync::Arc;
use std::time::Duration;

use throng_server::{Channel, Config, OwnedPayload, Payload, Reply, Router, Server, Socket};

/// What one join has counted.
struct Count(u64);

/// `counter:*`: a per-join count, broadcast to the topic on each `inc`.
struct Counter;

impl Channel for Counter {
    fn join(&self, _topic: &str, _payload: Payload<'_>, socket: &mut Socket<'_>) -> Reply {
        // Per-join state lives in the socket's assigns (one value per type).
        socket.assign(Count(0));
        Ok(OwnedPayload::json(&serde_json::json!({"count": 0})).expect("JSON"))
    }

    fn handle_in(
        &self,
        event: &str,
        _payload: Payload<'_>,
        socket: &mut Socket<'_>,
    ) -> Option<Reply> {
        if event != "inc" {
            let why = serde_json::json!({"reason": format!("unknown event {event}")});
            return Some(Err(OwnedPayload::json(&why).expect("JSON")));
        }
        let count = match socket.assigns_mut::<Count>() {
            Some(c) => {
                c.0 += 1;
                c.0
            }
            None => 0,
        };
        let body = OwnedPayload::json(&serde_json::json!({"count": count})).expect("JSON");
        // To every subscriber of the topic, on every node.
        socket.broadcast("count", body.clone());
        Some(Ok(body))
    }
}

fn main() -> Result<(), throng_server::Error> {
    let config = Config {
        addr: "127.0.0.1:4000".parse().expect("address"),
        api_bind: None,
        ..Config::default()
    };
    let router = Router::new().channel("counter:*", Counter);
    // One node; with Redis, `throng_pubsub::RedisBackplane` joins a cluster.
    let server = Server::start(config, router, Arc::new(throng_pubsub::LocalBackplane))?;
    println!("listening on {} (topics counter:*)", server.addr);
    let endpoint = server.endpoint();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        endpoint.broadcast("counter:lobby", "tick", OwnedPayload::empty());
    });
    server.wait();
    Ok(())
}
