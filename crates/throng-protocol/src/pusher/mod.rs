//! The Pusher Channels protocol (version 7), the wire layer only: what
//! `pusher-js`, Laravel Echo, the mobile clients and the Pusher server SDKs
//! put on the wire, and what they accept back. No I/O, no clock, no state:
//! the server's socket state machine, channels and HTTP routes build on it.
//!
//! References, read for this module: Pusher's protocol, HTTP API, signature
//! and webhook documentation (`pusher/docs`:
//! docs/channels/library_auth_reference/pusher-websockets-protocol.md,
//! `rest-api.md`, `auth-signatures.md`, docs/channels/server_api/webhooks.md),
//! `pusher-js`'s src/core/connection/protocol/protocol.ts and
//! `src/core/channels/*.ts`, the `pusher` server SDKs for Node
//! (lib/auth.js, lib/requests.js, lib/webhook.js) and Python
//! (pusher/authentication_client.py, pusher/http.py), and Pusher's own
//! request-signature library (`signature`, its spec's error texts).
//!
//! Layout, one concept per file:
//! - [`event`] (below): the protocol's event names.
//! - [`error_code`]: the close and error codes (4000-4399) and what
//!   `pusher-js` does on each.
//! - [`connect`]: the WebSocket URL, `/app/{key}?protocol=7&...`.
//! - [`socket_id`]: `<digits>.<digits>`, formatted without allocating.
//! - [`channel`]: channel names, their kinds and what each allows.
//! - [`client`]: frames a client sends, decoded with a size bound into a
//!   typed frame or a typed error with its Pusher code.
//! - [`server`]: frames the server sends, encoded into a caller's buffer
//!   (an event frame once per broadcast, shared by every subscriber).
//! - [`presence`]: a presence subscription's `channel_data` and a sign-in's
//!   `user_data`, with Pusher's limits.
//! - [`signature`]: channel authorization, user sign-in and webhook
//!   signatures (HMAC-SHA256), verified in constant time.
//! - [`api_auth`]: the HTTP API's request signature (`auth_key`,
//!   `auth_timestamp`, `auth_version`, `body_md5`, `auth_signature`).
//! - [`api_error`]: a refused HTTP API request (400, 413).
//! - [`trigger`]: the HTTP API's `events` and `batch_events` bodies.
//! - [`channels`]: the HTTP API's channel, channels and users queries and
//!   answers.
//! - [`webhook`]: the webhook body, `{"time_ms":..,"events":[..]}`.
//!
//! Design: decoding borrows from the input (strings without escapes are not
//! copied); encoding appends to a caller's `Vec<u8>`, so an event is encoded
//! once and the bytes shared. Pusher sends `data` as a JSON *string* holding
//! JSON (its "double encoding"); [`server::Data`] carries an HTTP API
//! `data` string literal through unchanged, so a trigger is never decoded
//! and re-encoded.

pub mod api_auth;
pub mod api_error;
pub mod channel;
pub mod channels;
pub mod client;
pub mod connect;
pub mod error_code;
mod json;
pub mod presence;
pub mod server;
pub mod signature;
pub mod socket_id;
pub mod trigger;
pub mod webhook;

pub use api_auth::{ApiAuthError, SignedQuery};
pub use api_error::ApiError;
pub use channel::{ChannelKind, ChannelNameError, ChannelType};
pub use client::{ClientFrame, FrameError};
pub use error_code::{ErrorCode, Reconnect};
pub use server::Data;
pub use signature::AuthError;
pub use socket_id::SocketId;

/// The protocol's event names.
pub mod event {
    /// Server: the socket is ready; `data` holds `socket_id` and
    /// `activity_timeout`.
    pub const CONNECTION_ESTABLISHED: &str = "pusher:connection_established";
    /// Server: an error, `{"code": .., "message": ..}`.
    pub const ERROR: &str = "pusher:error";
    /// Both ways: are you there?
    pub const PING: &str = "pusher:ping";
    /// Both ways: the answer to a ping.
    pub const PONG: &str = "pusher:pong";
    /// Client: subscribe to a channel.
    pub const SUBSCRIBE: &str = "pusher:subscribe";
    /// Client: unsubscribe from a channel.
    pub const UNSUBSCRIBE: &str = "pusher:unsubscribe";
    /// Client: sign in as a user.
    pub const SIGNIN: &str = "pusher:signin";
    /// Server: the sign-in worked.
    pub const SIGNIN_SUCCESS: &str = "pusher:signin_success";
    /// Server: a subscription was refused.
    pub const SUBSCRIPTION_ERROR: &str = "pusher:subscription_error";
    /// Server: a cache channel has no event to replay.
    pub const CACHE_MISS: &str = "pusher:cache_miss";
    /// Server: a subscription worked (with the members, on presence channels).
    pub const SUBSCRIPTION_SUCCEEDED: &str = "pusher_internal:subscription_succeeded";
    /// Server: a user joined a presence channel (once per user, not per socket).
    pub const MEMBER_ADDED: &str = "pusher_internal:member_added";
    /// Server: a user left a presence channel (their last socket left).
    pub const MEMBER_REMOVED: &str = "pusher_internal:member_removed";
    /// Prefix of the protocol's own events.
    pub const PUSHER_PREFIX: &str = "pusher:";
    /// Prefix of the protocol's internal events.
    pub const INTERNAL_PREFIX: &str = "pusher_internal:";
    /// Prefix every client event's name must have.
    pub const CLIENT_PREFIX: &str = "client-";
}
