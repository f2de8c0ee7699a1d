//! The chat app of the Phoenix team's 2M-connection benchmark
//! (phoenix_chat_example's `RoomChannel`,
//! bench branch: no `after_join` broadcast, no per-socket ping timer).
//!
//! - `rooms:lobby` is open to anyone;
//! - any other `rooms:*` is refused with `{"reason":"unauthorized"}`;
//! - `new:msg` `{user, body}` is broadcast to the topic as `new:msg`, and the
//!   sender gets the reply `{"msg": body}`;
//! - with presence on for the topic (`--presence 'rooms:lobby=param:user'`:
//!   that benchmark runs without), `presence:update` with an object
//!   (`{"status": "away"}`) replaces the meta of the sender's presence.
//!
//! Under `[[topics]]` rules ([`router_under_rules`]) the rules decide who
//! joins: [`RuledRoomChannel`] takes every `rooms:*` topic they let through
//! (so `pattern = "rooms:*"` with `join = "anyone"` opens every room, as a
//! reader of the rule expects), and relays events other than the two above
//! as the relay channel does (`crate::protocol::phoenix::relay`). [`rule_warnings`] says what
//! differs from the relay on those topics.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::channel::{Channel, OwnedPayload, Payload, Reply, Router, Socket};

/// `Chat.RoomChannel`.
pub struct RoomChannel;

#[derive(Deserialize)]
struct NewMsgIn<'a> {
    #[serde(borrow, default)]
    user: Option<&'a RawValue>,
    #[serde(borrow, default)]
    body: Option<&'a RawValue>,
}

/// Phoenix builds `%{user: .., body: ..}`, which Jason writes with sorted keys.
#[derive(Serialize)]
struct NewMsgOut<'a> {
    body: Option<&'a RawValue>,
    user: Option<&'a RawValue>,
}

impl Channel for RoomChannel {
    fn join(&self, topic: &str, _payload: Payload<'_>, _socket: &mut Socket<'_>) -> Reply {
        if topic == "rooms:lobby" {
            Ok(OwnedPayload::empty())
        } else {
            Err(OwnedPayload::Json(r#"{"reason":"unauthorized"}"#.into()))
        }
    }

    fn handle_in(
        &self,
        event: &str,
        payload: Payload<'_>,
        socket: &mut Socket<'_>,
    ) -> Option<Reply> {
        if event == "presence:update" {
            let meta = match payload {
                Payload::Json(text) => serde_json::from_str::<&RawValue>(text).ok(),
                Payload::Binary(_) => None,
            };
            let updated = meta.map(|m| socket.presence().update_tracked(&m));
            return Some(match updated {
                Some(Ok(())) => Ok(OwnedPayload::empty()),
                _ => Err(OwnedPayload::Json(
                    r#"{"reason":"presence:update needs an object"}"#.into(),
                )),
            });
        }
        if event != "new:msg" {
            return None;
        }
        match payload {
            Payload::Json(text) => {
                let Ok(msg) = serde_json::from_str::<NewMsgIn<'_>>(text) else {
                    return Some(Err(OwnedPayload::Json(
                        r#"{"reason":"new:msg needs an object {user, body}"}"#.into(),
                    )));
                };
                // Raw JSON values re-written as they came: this cannot fail.
                let out = OwnedPayload::json(&NewMsgOut {
                    body: msg.body,
                    user: msg.user,
                });
                match out {
                    Ok(out) => socket.broadcast("new:msg", out),
                    Err(e) => tracing::error!("new:msg not encodable: {e}"),
                }
                let body = msg.body.map(|b| b.get()).unwrap_or("null");
                Some(Ok(OwnedPayload::Json(format!("{{\"msg\":{body}}}"))))
            }
            Payload::Binary(bytes) => {
                socket.broadcast("new:msg", OwnedPayload::Binary(bytes.to_vec()));
                None
            }
        }
    }
}

/// The chat app's routes: `rooms:*` to [`RoomChannel`].
pub fn router() -> Router {
    Router::new().channel("rooms:*", RoomChannel)
}

/// The chat app when `[[topics]]` rules are configured: they decided the
/// join already (a topic no rule matches cannot be joined), so any
/// `rooms:*` topic joins; `new:msg` and `presence:update` as
/// [`RoomChannel`], any other event relayed as it came
/// ([`Relay`](crate::protocol::phoenix::relay::Relay)).
pub struct RuledRoomChannel;

impl Channel for RuledRoomChannel {
    fn join(&self, _topic: &str, _payload: Payload<'_>, _socket: &mut Socket<'_>) -> Reply {
        Ok(OwnedPayload::empty())
    }

    fn handle_in(
        &self,
        event: &str,
        payload: Payload<'_>,
        socket: &mut Socket<'_>,
    ) -> Option<Reply> {
        match event {
            "new:msg" | "presence:update" => RoomChannel.handle_in(event, payload, socket),
            _ => crate::protocol::phoenix::relay::Relay.handle_in(event, payload, socket),
        }
    }
}

/// The chat app's routes under `[[topics]]` rules: `rooms:*` to
/// [`RuledRoomChannel`].
pub fn router_under_rules() -> Router {
    Router::new().channel("rooms:*", RuledRoomChannel)
}

pub use crate::rules::chat::rule_warnings;
