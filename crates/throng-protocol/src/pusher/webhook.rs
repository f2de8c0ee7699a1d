//! Webhook bodies in Pusher's format (docs/channels/server_api/webhooks.md):
//! a POST of `{"time_ms": .., "events": [..]}` (batched: several events per
//! body), signed with the app's secret in `X-Pusher-Signature`
//! ([`super::signature::webhook_signature`]) and naming the key in
//! `X-Pusher-Key`. What the SDKs check: the Node SDK's `WebHook.isValid`
//! wants `content-type: application/json`, the key and the signature; the
//! Python SDK's `validate_webhook` also wants `time_ms` within 300 s of its
//! clock.

use super::json::push_str;
use super::json::push_u64;
use super::server::Data;

/// The header naming the app key that signed the body.
pub const KEY_HEADER: &str = "X-Pusher-Key";

/// The header holding the body's signature.
pub const SIGNATURE_HEADER: &str = "X-Pusher-Signature";

/// One webhook event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookEvent<'a> {
    /// A channel got its first subscriber (cluster-wide).
    ChannelOccupied {
        /// The channel.
        channel: &'a str,
    },
    /// A channel lost its last subscriber (cluster-wide).
    ChannelVacated {
        /// The channel.
        channel: &'a str,
    },
    /// A user joined a presence channel.
    MemberAdded {
        /// The presence channel.
        channel: &'a str,
        /// The user.
        user_id: &'a str,
    },
    /// A user left a presence channel.
    MemberRemoved {
        /// The presence channel.
        channel: &'a str,
        /// The user.
        user_id: &'a str,
    },
    /// A client event was sent on a private or presence channel.
    ClientEvent {
        /// The channel.
        channel: &'a str,
        /// The event name.
        event: &'a str,
        /// Its data (a string, as the subscribers got it).
        data: Option<Data<'a>>,
        /// The sender's socket.
        socket_id: &'a str,
        /// The sender's user, on presence channels.
        user_id: Option<&'a str>,
    },
    /// A cache channel had nothing to replay to a new subscriber.
    CacheMiss {
        /// The channel.
        channel: &'a str,
    },
}

impl WebhookEvent<'_> {
    /// The event's `name`.
    pub fn name(&self) -> &'static str {
        match self {
            WebhookEvent::ChannelOccupied { .. } => "channel_occupied",
            WebhookEvent::ChannelVacated { .. } => "channel_vacated",
            WebhookEvent::MemberAdded { .. } => "member_added",
            WebhookEvent::MemberRemoved { .. } => "member_removed",
            WebhookEvent::ClientEvent { .. } => "client_event",
            WebhookEvent::CacheMiss { .. } => "cache_miss",
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"name\":\"");
        out.extend_from_slice(self.name().as_bytes());
        out.extend_from_slice(b"\",\"channel\":");
        match *self {
            WebhookEvent::ChannelOccupied { channel }
            | WebhookEvent::ChannelVacated { channel }
            | WebhookEvent::CacheMiss { channel } => push_str(out, channel),
            WebhookEvent::MemberAdded { channel, user_id }
            | WebhookEvent::MemberRemoved { channel, user_id } => {
                push_str(out, channel);
                out.extend_from_slice(b",\"user_id\":");
                push_str(out, user_id);
            }
            WebhookEvent::ClientEvent {
                channel,
                event,
                data,
                socket_id,
                user_id,
            } => {
                push_str(out, channel);
                out.extend_from_slice(b",\"event\":");
                push_str(out, event);
                if let Some(data) = data {
                    out.extend_from_slice(b",\"data\":");
                    data.write(out);
                }
                out.extend_from_slice(b",\"socket_id\":");
                push_str(out, socket_id);
                if let Some(user_id) = user_id {
                    out.extend_from_slice(b",\"user_id\":");
                    push_str(out, user_id);
                }
            }
        }
        out.push(b'}');
    }
}

/// Writes a webhook body: `{"time_ms":..,"events":[..]}`.
pub fn encode<'e>(
    out: &mut Vec<u8>,
    time_ms: u64,
    events: impl IntoIterator<Item = &'e WebhookEvent<'e>>,
) {
    out.extend_from_slice(b"{\"time_ms\":");
    push_u64(out, time_ms);
    out.extend_from_slice(b",\"events\":[");
    for (i, event) in events.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        event.write(out);
    }
    out.extend_from_slice(b"]}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn bodies_as_pusher_documents_them() {
        let events = [
            WebhookEvent::ChannelOccupied {
                channel: "my-channel",
            },
            WebhookEvent::ChannelVacated {
                channel: "my-channel",
            },
            WebhookEvent::MemberAdded {
                channel: "presence-a",
                user_id: "1",
            },
            WebhookEvent::MemberRemoved {
                channel: "presence-a",
                user_id: "1",
            },
            WebhookEvent::ClientEvent {
                channel: "presence-a",
                event: "client-typing",
                data: Some(Data::Text(r#"{"id":1}"#)),
                socket_id: "1.2",
                user_id: Some("1"),
            },
            WebhookEvent::ClientEvent {
                channel: "private-a",
                event: "client-x",
                data: None,
                socket_id: "1.2",
                user_id: None,
            },
            WebhookEvent::CacheMiss { channel: "cache-a" },
        ];
        let mut out = Vec::new();
        encode(&mut out, 1327078148132, &events);
        let body: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            body,
            json!({"time_ms": 1327078148132u64, "events": [
                {"name": "channel_occupied", "channel": "my-channel"},
                {"name": "channel_vacated", "channel": "my-channel"},
                {"name": "member_added", "channel": "presence-a", "user_id": "1"},
                {"name": "member_removed", "channel": "presence-a", "user_id": "1"},
                {"name": "client_event", "channel": "presence-a", "event": "client-typing",
                 "data": "{\"id\":1}", "socket_id": "1.2", "user_id": "1"},
                {"name": "client_event", "channel": "private-a", "event": "client-x", "socket_id": "1.2"},
                {"name": "cache_miss", "channel": "cache-a"},
            ]})
        );
        out.clear();
        encode(&mut out, 5, &[]);
        assert_eq!(out, br#"{"time_ms":5,"events":[]}"#);
    }
}
