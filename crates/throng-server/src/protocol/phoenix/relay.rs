//! [`Relay`]: the channel of topics that only config rules describe. A
//! join is accepted (the `[[topics]]` rules have decided already) and a
//! push is broadcast as it came, the same event and payload, to every
//! subscriber of the topic, and answered `ok`: what a config-only app
//! needs for rooms, private topics and notifications, with no Rust.

use crate::channel::{Channel, OwnedPayload, Payload, Reply, Socket};

/// Joins always succeed; pushes are broadcast to the topic as they came.
pub struct Relay;

impl Channel for Relay {
    fn join(&self, _topic: &str, _payload: Payload<'_>, _socket: &mut Socket<'_>) -> Reply {
        Ok(OwnedPayload::empty())
    }

    fn handle_in(
        &self,
        event: &str,
        payload: Payload<'_>,
        socket: &mut Socket<'_>,
    ) -> Option<Reply> {
        socket.broadcast(event.to_string(), OwnedPayload::from(payload));
        Some(Ok(OwnedPayload::empty()))
    }
}
