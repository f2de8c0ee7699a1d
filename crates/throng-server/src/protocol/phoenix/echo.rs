//! A test-only channel, mounted on `echo:*` by `throng serve --echo` (with
//! the `/echo` WebSocket echo): it shows what the app sees of a socket, so
//! end-to-end tests can check what a client's connect options became.
//!
//! - join: replies `{"params": {..}, "auth_token": .., "user_id": ..,
//!   "topic": .., "join": <the join payload>}`: the socket params (without
//!   `vsn`, the last value of a repeated name), the token of phoenix.js's
//!   `authToken` (WebSocket subprotocol or long-poll header), the
//!   authenticated user, or `null` for what the client did not send;
//! - any push: replied `ok` with its own payload (JSON or binary).

use serde_json::value::RawValue;

use crate::channel::{Channel, OwnedPayload, Payload, Reply, Socket};

/// The `echo:*` channel.
pub struct EchoChannel;

#[derive(serde::Serialize)]
struct Joined<'a> {
    params: serde_json::Map<String, serde_json::Value>,
    auth_token: Option<&'a str>,
    user_id: Option<&'a str>,
    topic: &'a str,
    join: Option<&'a RawValue>,
}

impl Channel for EchoChannel {
    fn join(&self, topic: &str, payload: Payload<'_>, socket: &mut Socket<'_>) -> Reply {
        let connect = socket.connect_info();
        let params = connect
            .map(|c| {
                c.params
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect()
            })
            .unwrap_or_default();
        let join = match payload {
            Payload::Json(text) => serde_json::from_str::<&RawValue>(text).ok(),
            Payload::Binary(_) => None,
        };
        let joined = Joined {
            params,
            auth_token: connect.and_then(|c| c.auth_token.as_deref()),
            user_id: socket.user_id(),
            topic,
            join,
        };
        OwnedPayload::json(&joined)
            .map_err(|_| OwnedPayload::Json(r#"{"reason":"not encodable"}"#.into()))
    }

    fn handle_in(
        &self,
        _event: &str,
        payload: Payload<'_>,
        _socket: &mut Socket<'_>,
    ) -> Option<Reply> {
        Some(Ok(payload.into()))
    }
}
