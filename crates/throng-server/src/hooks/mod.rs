//! App backend hooks: an app's own logic, in any language, decides joins
//! and answers pushes over HTTP, so a chat can refuse a banned user or save
//! a message before broadcasting it without writing a Rust channel.
//!
//! ```toml
//! [hooks]
//! url = "http://127.0.0.1:8000/throng"  # POST {url}/connect, /join, /push, /events
//! events = true                         # lifecycle events, batched (`events.rs`)
//! secret = "..."                        # x-throng-signature: sha256=<hex HMAC-SHA256(secret, body)>
//! timeout_ms = 3000
//!
//! [[topics]]
//! pattern = "rooms:*"
//! hooks = ["join", "push"]
//! ```
//!
//! The event loops never wait on the backend. A shard hands the request to
//! the [`HookClient`] (a hyper client with a keep-alive pool on its own
//! tokio thread) and notes what waits for it ([`Waits`]); the answer comes
//! back through the shard's inbox (`ShardMsg::Hook`) and the shard replies
//! on the socket, as long-poll answers and broadcasts from other threads do.
//!
//! A connect hook (`connect = true`) holds a WebSocket upgrade the same way:
//! the `101` goes out when the backend accepts, a 403 or 503 otherwise.
//!
//! - `hooks/settings.rs` (in `crate::config`, with the other settings): the
//!   `[hooks]` keys and `--hook-*` flags;
//! - `client.rs`: the HTTP client, its bounds and timeout;
//! - `breaker.rs`: the circuit breaker;
//! - `request.rs`: the signed request bodies;
//! - `answer.rs`: the answers, checked;
//! - `waits.rs`: a shard's joins and pushes waiting for the backend;
//! - `events.rs`: the lifecycle events' queue and sender (batches, ids,
//!   retries);
//! - `occupancy.rs`: which topics have a subscriber in the cluster
//!   (`occupied`/`vacated`), decided by this node alone or in Redis;
//! - `webhooks.rs`: Pusher apps' webhooks, in Pusher's format, on the
//!   lifecycle events' queue and sender;
//! - `stats.rs`: the counters and latency histograms of `/metrics`;
//! - `tls.rs`: the roots an https:// backend is checked against.

mod answer;
mod breaker;
mod client;
pub(crate) mod events;
mod occupancy;
mod request;
pub mod settings;
pub(crate) mod stats;
mod tls;
mod waits;
pub(crate) mod webhooks;

pub use crate::rules::TopicHook;
pub use answer::{reason_text, Answer, BroadcastAnswer, UserId};
pub(crate) use client::Answers;
pub use client::{HookAnswer, HookClient, Outcome};
pub use events::{Event, EventType, Events, FLUSH_AT_EXIT};
pub use occupancy::Occupancy;
pub use request::CONNECT_HEADERS;
pub(crate) use request::{connect_headers, now_ms, ConnectRequest, JoinRequest, PushRequest};
pub use settings::{HookArgs, HooksConfig};
pub(crate) use waits::{HeldSession, HeldUpgrade, Wait, Waiting, Waits};
pub use webhooks::{Webhook, WebhookApp, WebhookSettings, Webhooks};

/// A hook: which backend path a request goes to, and its metrics label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Join,
    Push,
    Connect,
}

impl Hook {
    pub const ALL: [Hook; 3] = [Hook::Join, Hook::Push, Hook::Connect];

    /// The label in `/metrics` and the path under the base URL.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Join => "join",
            Hook::Push => "push",
            Hook::Connect => "connect",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why a hook gave the client no backend answer: each is an error reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The circuit is open, the backend unreachable, or it answered 5xx.
    Unavailable,
    /// No answer within `timeout_ms`.
    Timeout,
    /// The process or the socket holds its bound of requests in flight.
    Busy,
    /// Not JSON, the wrong shape, over the size bound, or a status other
    /// than 2xx and 5xx.
    BadAnswer,
    /// A payload the backend cannot be sent (a v2 binary frame).
    Binary,
}

impl Failure {
    /// The error reply's payload.
    pub fn reply(self) -> &'static str {
        match self {
            Failure::Unavailable => r#"{"reason":"backend unavailable"}"#,
            Failure::Timeout => r#"{"reason":"backend timeout"}"#,
            Failure::Busy => r#"{"reason":"too many backend requests"}"#,
            Failure::BadAnswer => r#"{"reason":"bad backend answer"}"#,
            Failure::Binary => r#"{"reason":"binary payloads cannot go to the backend"}"#,
        }
    }
}
