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
//! as the relay channel does (`crate::relay`). [`rule_warnings`] says what
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
/// ([`Relay`](crate::relay::Relay)).
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
            _ => crate::relay::Relay.handle_in(event, payload, socket),
        }
    }
}

/// The chat app's routes under `[[topics]]` rules: `rooms:*` to
/// [`RuledRoomChannel`].
pub fn router_under_rules() -> Router {
    Router::new().channel("rooms:*", RuledRoomChannel)
}

/// The topics the chat app serves.
const CHAT_TOPICS: &str = "rooms:";

/// What a start with `rules` should tell the operator about the chat app:
/// a rule whose pattern covers `rooms:*` topics sends them to the chat
/// channel, not to the relay channel its other topics get.
pub fn rule_warnings(rules: &[crate::rules::TopicRule]) -> Vec<String> {
    let covers = |pattern: &str| match pattern.find(['*', '{']) {
        None => pattern.starts_with(CHAT_TOPICS),
        Some(i) => pattern[..i].starts_with(CHAT_TOPICS) || CHAT_TOPICS.starts_with(&pattern[..i]),
    };
    // Where the chat channel does what the relay would not: a push of
    // new:msg or presence:update that reaches it (not the backend's).
    let differs = |r: &crate::rules::TopicRule| {
        let events = r.push.iter().chain(r.anonymous_push.iter().flatten());
        let pushed = |e: &str| events.clone().any(|p| p == "*" || p == e);
        r.join != crate::rules::JoinRule::Nobody
            && !r.hooks.contains(&crate::rules::TopicHook::Push)
            && (pushed("new:msg") || pushed("presence:update"))
    };
    rules
        .iter()
        .filter(|r| covers(&r.pattern) && differs(r))
        .map(|r| {
            format!(
                "[[topics]] pattern = {:?} covers rooms:* topics, which the built-in chat \
                 channel serves (not the relay channel): there a pushed new:msg is broadcast \
                 as {{\"body\", \"user\"}} only (other keys are dropped) and answered \
                 {{\"msg\": body}}; other events are relayed as they came. Every rooms:* \
                 topic the rules let through can be joined. For topics whose new:msg must \
                 reach subscribers untouched, use a prefix of your own (e.g. pattern = \
                 \"chat:*\")",
                r.pattern
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(patterns: &[&str]) -> Vec<crate::rules::TopicRule> {
        patterns
            .iter()
            .map(|p| serde_json::from_str(&format!("{{\"pattern\":{p:?}}}")).unwrap())
            .collect()
    }

    #[test]
    fn rules_over_chat_topics_are_named() {
        let patterns = [
            "rooms:*",
            "rooms:general",
            "*",
            "room*",
            "chat:*",
            "private:{user}",
            "{user}:x",
        ];
        let warned = rule_warnings(&rules(&patterns));
        let named: Vec<bool> = patterns
            .iter()
            .map(|p| {
                let said = format!("pattern = {p:?} covers");
                warned.iter().any(|w| w.contains(&said))
            })
            .collect();
        assert_eq!(
            named,
            [true, true, true, true, false, false, true],
            "{warned:#?}"
        );
        assert!(
            warned[0].contains("use a prefix of your own"),
            "{}",
            warned[0]
        );
        // Where the chat channel does what the relay would: no warning.
        let quiet: Vec<crate::rules::TopicRule> = serde_json::from_str(
            r#"[{"pattern":"rooms:*","hooks":["join","push"]},
                {"pattern":"rooms:a","push":["typing"]},
                {"pattern":"rooms:b","join":"nobody"}]"#,
        )
        .unwrap();
        assert!(rule_warnings(&quiet).is_empty());
    }
}
