//! The Pusher Channels protocol on the bench's side (`throng bench
//! --protocol pusher`): what a run over Pusher needs beyond the engine's
//! Phoenix client, built on `throng_protocol::pusher` for every frame and
//! signature, in the engine's lean style (templates made once, a
//! subscription's signature the only thing computed per socket).
//!
//! - [`PusherSpec`]: the app, the channel and how broadcasts are sent,
//!   carried in the scenario (the app's secret is not: it travels in each
//!   agent's plan, as `--auth jwt`'s does).
//! - The client frames as templates: `pusher:subscribe` (with `%%auth%%`
//!   on a private channel), the stamped client event, the HTTP API's
//!   trigger body, `pusher:ping`; and the frame a broadcast arrives as,
//!   for the floor ([`event_frame`]).
//! - [`trigger`]: broadcasts triggered through the HTTP API
//!   (`POST /apps/{id}/events`, signed as the Pusher server SDKs sign),
//!   from a thread of the agent beside its engine.
//!
//! How the run maps onto Pusher: a user connects to `/app/{key}?protocol=7`
//! and waits for `pusher:connection_established` (its socket id, which a
//! private channel's signature covers); a join is `pusher:subscribe`,
//! answered by `pusher_internal:subscription_succeeded` (the join's time)
//! or `pusher:subscription_error`; a broadcast is an event triggered
//! through the HTTP API (every subscriber receives it) or a client event
//! (private channels only; Pusher does not echo it to its sender); the
//! heartbeat is `pusher:ping`, every 120 s by default as `pusher-js` sends
//! it after its activity timeout, and a server's ping is answered
//! `pusher:pong`.

pub mod trigger;

use serde::{Deserialize, Serialize};
use throng_protocol::pusher::{client, server};

use crate::error::BenchError;

/// The app a run uses on the embedded server when `--pusher-app` is not
/// given (its secret is drawn fresh for each run).
pub const DEFAULT_APP_ID: &str = "throng-bench";
/// The embedded server's app key when `--pusher-app` is not given.
pub const DEFAULT_APP_KEY: &str = "throng-bench-key";

/// Seconds between a Pusher socket's pings: `pusher-js` pings after its
/// activity timeout (120 s, the server's `activity_timeout` too) without
/// receiving anything.
pub const PING_SECS: f64 = 120.0;

/// The event frame a client sends as its heartbeat.
pub const PING: &str = r#"{"event":"pusher:ping","data":{}}"#;

/// What a run over Pusher subscribes to and how it broadcasts.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PusherSpec {
    /// The app's id (the HTTP API's path) and key (the socket's URL).
    pub app_id: String,
    pub key: String,
    /// How the publishers' broadcasts are sent.
    pub trigger: Trigger,
}

/// How a publisher's broadcast reaches the channel.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// `POST /apps/{id}/events` on the server's HTTP API (as an app's
    /// backend triggers through a Pusher server SDK): every subscriber
    /// receives it.
    #[default]
    Api,
    /// A `client-*` event sent on the publisher's own socket (private
    /// channels only): every other subscriber receives it.
    ClientEvent,
}

/// The kind of channel a run's users subscribe to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Channel {
    /// `lobby`: no signature.
    #[default]
    Public,
    /// `private-lobby`: each subscription signed with the app's secret,
    /// as an app's auth endpoint signs it.
    Private,
}

impl Channel {
    /// The channel's name in the built-in scenario.
    pub fn name(self) -> &'static str {
        match self {
            Channel::Public => "lobby",
            Channel::Private => "private-lobby",
        }
    }
}

impl PusherSpec {
    /// The socket's path, as `pusher-js` opens it.
    pub fn connect_path(&self) -> String {
        format!(
            "/app/{}?protocol=7&client=throng-bench&version={}",
            self.key,
            env!("CARGO_PKG_VERSION")
        )
    }
}

/// `ID:KEY:SECRET` (`--pusher-app`): the app's id, key and secret.
pub fn parse_app(s: &str) -> Result<(String, String, String), String> {
    let mut parts = s.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(id), Some(key), Some(secret))
            if !id.is_empty() && !key.is_empty() && !secret.is_empty() =>
        {
            Ok((id.into(), key.into(), secret.into()))
        }
        _ => Err("write the app as ID:KEY:SECRET, as the server was given it (throng serve --pusher-app ID:KEY:SECRET)".into()),
    }
}

/// Whether a channel needs a signature to subscribe (private, encrypted,
/// presence).
pub fn needs_auth(channel: &str) -> bool {
    throng_protocol::pusher::ChannelType::of(channel).is_ok_and(|t| t.needs_auth())
}

/// The subscribe frame's template: `%%auth%%` where a private channel's
/// signature goes.
pub fn subscribe_template(channel: &str) -> String {
    let mut out = Vec::new();
    let auth = needs_auth(channel).then_some("%%auth%%");
    client::encode_subscribe(&mut out, channel, auth, None);
    String::from_utf8_lossy(&out).into_owned()
}

/// The unsubscribe frame (Pusher answers none).
pub fn unsubscribe_frame(channel: &str) -> String {
    let mut out = Vec::new();
    client::encode_unsubscribe(&mut out, channel);
    String::from_utf8_lossy(&out).into_owned()
}

/// A client event's name: `client-` and the scenario's event.
pub fn client_event_name(event: &str) -> String {
    if event.starts_with("client-") {
        event.to_string()
    } else {
        format!("client-{}", event.replace(':', "-"))
    }
}

/// A client event frame's template, `payload` (JSON text) as its data.
pub fn client_event_template(channel: &str, event: &str, payload: &str) -> String {
    let mut out = Vec::new();
    client::encode_client_event(&mut out, &client_event_name(event), channel, payload);
    String::from_utf8_lossy(&out).into_owned()
}

/// The HTTP API trigger's body template, as the SDKs send it: `data` the
/// payload's JSON text as a string.
pub fn trigger_body_template(channel: &str, event: &str, payload: &str) -> String {
    serde_json::json!({"name": event, "channel": channel, "data": payload}).to_string()
}

/// The frame every subscriber receives for a broadcast of `payload` (JSON
/// text) named `event` on `channel`, as the server encodes it (a trigger's
/// `data` string as it came; a client event's object as a string: the
/// same bytes).
pub fn event_frame(out: &mut Vec<u8>, trigger: Trigger, event: &str, channel: &str, payload: &str) {
    let name = match trigger {
        Trigger::Api => event.to_string(),
        Trigger::ClientEvent => client_event_name(event),
    };
    server::event(out, &name, channel, Some(server::Data::Text(payload)), None);
}

/// Checks a run's Pusher choices against each other: client events are
/// taken on private channels only.
pub fn check(channel: Channel, trigger: Trigger, broadcasts: bool) -> Result<(), BenchError> {
    if broadcasts && trigger == Trigger::ClientEvent && channel == Channel::Public {
        return Err(BenchError::Usage(
            "--pusher-trigger client-event needs --pusher-channel private: Pusher takes client events on private and presence channels only".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_as_pusher_js_sends_them() {
        assert_eq!(
            subscribe_template("lobby"),
            r#"{"event":"pusher:subscribe","data":{"channel":"lobby"}}"#
        );
        assert_eq!(
            subscribe_template("private-lobby"),
            r#"{"event":"pusher:subscribe","data":{"auth":"%%auth%%","channel":"private-lobby"}}"#
        );
        assert_eq!(
            client_event_template("private-lobby", "new:msg", r#"{"a":1}"#),
            r#"{"event":"client-new-msg","data":{"a":1},"channel":"private-lobby"}"#
        );
        let body: serde_json::Value =
            serde_json::from_str(&trigger_body_template("lobby", "new-msg", r#"{"a":1}"#)).unwrap();
        assert_eq!(body["data"], r#"{"a":1}"#);
        assert_eq!(body["channel"], "lobby");
    }

    #[test]
    fn the_broadcast_frame_carries_the_stamp_either_way() {
        let payload = r#"{"user":"0","body":"throng:0:7:99"}"#;
        for trigger in [Trigger::Api, Trigger::ClientEvent] {
            let mut out = Vec::new();
            event_frame(&mut out, trigger, "new-msg", "lobby", payload);
            let f = server::decode(&out).unwrap();
            assert_eq!(f.data_json().as_deref(), Some(payload));
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains("throng:0:7:99"), "{text}");
        }
    }

    #[test]
    fn apps_and_choices() {
        assert_eq!(
            parse_app("1:k:s:with:colons").unwrap(),
            ("1".into(), "k".into(), "s:with:colons".into())
        );
        assert!(parse_app("1:k").unwrap_err().contains("ID:KEY:SECRET"));
        assert!(check(Channel::Public, Trigger::ClientEvent, true).is_err());
        assert!(check(Channel::Public, Trigger::ClientEvent, false).is_ok());
        assert!(check(Channel::Private, Trigger::ClientEvent, true).is_ok());
    }
}
