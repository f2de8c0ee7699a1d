//! The channel API: what `Phoenix.Channel` gives an application.
//!
//! An app implements [`Channel`] and mounts it on a topic pattern in a
//! [`Router`] (`"rooms:*"` matches every topic starting with `rooms:`).
//! Callbacks run on the event-loop shard that owns the socket, so they must
//! be quick and must not block; they talk to the world through [`Socket`]:
//! `push` to this client, `broadcast` to every subscriber of the topic.
//!
//! A refused join is a reply (`Err(json)`), not an error.

use std::sync::Arc;

pub use throng_protocol::{OwnedPayload, Payload};

/// What `handle_in` answers, as Phoenix's `{:reply, {status, payload}, socket}`
/// or `{:noreply, socket}`.
#[derive(Debug, PartialEq, Eq)]
pub enum HandleIn {
    NoReply,
    Reply { ok: bool, response: OwnedPayload },
}

/// Why a channel ended, passed to [`Channel::terminate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminate {
    /// The client sent `phx_leave`.
    Leave,
    /// The client joined the same topic again on the same socket.
    DuplicateJoin,
    /// The connection closed (or was closed: idle, slow reader, protocol error).
    Closed,
}

/// Side effects a callback asks for; applied by the shard after it returns.
#[derive(Default, Debug)]
pub(crate) struct Effects {
    pub pushes: Vec<(String, OwnedPayload)>,
    /// (event, payload, include the sender?)
    pub broadcasts: Vec<(String, OwnedPayload, bool)>,
}

/// The joined socket, as a callback sees it.
pub struct Socket<'a> {
    pub(crate) topic: &'a str,
    pub(crate) join_ref: Option<&'a str>,
    pub(crate) effects: &'a mut Effects,
}

impl Socket<'_> {
    /// The channel's topic, e.g. `rooms:lobby`.
    pub fn topic(&self) -> &str {
        self.topic
    }

    /// The `join_ref` of this channel's join, if the client sent one.
    pub fn join_ref(&self) -> Option<&str> {
        self.join_ref
    }

    /// Sends `event` to this client only (Phoenix's `push/3`).
    pub fn push(&mut self, event: impl Into<String>, payload: OwnedPayload) {
        self.effects.pushes.push((event.into(), payload));
    }

    /// Sends `event` to every subscriber of the topic, this one included
    /// (Phoenix's `broadcast!/3`). Encoded once per serializer.
    pub fn broadcast(&mut self, event: impl Into<String>, payload: OwnedPayload) {
        self.effects.broadcasts.push((event.into(), payload, true));
    }

    /// As [`Socket::broadcast`], but not to this socket (`broadcast_from!/3`).
    pub fn broadcast_from(&mut self, event: impl Into<String>, payload: OwnedPayload) {
        self.effects.broadcasts.push((event.into(), payload, false));
    }
}

/// A channel: the app's handler for a family of topics.
pub trait Channel: Send + Sync + 'static {
    /// A client asks to join `topic` with `payload` (the join params).
    /// `Ok(response)` joins and replies `ok`; `Err(response)` refuses with `error`.
    fn join(
        &self,
        topic: &str,
        payload: Payload<'_>,
        socket: &mut Socket<'_>,
    ) -> Result<OwnedPayload, OwnedPayload>;

    /// A client pushed `event` on a topic it joined.
    fn handle_in(&self, event: &str, payload: Payload<'_>, socket: &mut Socket<'_>) -> HandleIn;

    /// The channel ended; pushes made here are dropped.
    fn terminate(&self, _reason: Terminate, _socket: &mut Socket<'_>) {}
}

/// Topic patterns to channels, matched in the order they were added.
#[derive(Clone, Default)]
pub struct Router {
    routes: Vec<(String, Arc<dyn Channel>)>,
}

impl Router {
    pub fn new() -> Router {
        Router::default()
    }

    /// Mounts `channel` on `pattern`: an exact topic, or a prefix ending in `*`.
    pub fn channel(mut self, pattern: &str, channel: impl Channel) -> Router {
        self.routes.push((pattern.to_string(), Arc::new(channel)));
        self
    }

    /// The channel for `topic`, if any.
    pub fn route(&self, topic: &str) -> Option<&Arc<dyn Channel>> {
        self.routes.iter().find_map(|(pattern, ch)| {
            let hit = match pattern.strip_suffix('*') {
                Some(prefix) => topic.starts_with(prefix),
                None => topic == pattern,
            };
            hit.then_some(ch)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nop;
    impl Channel for Nop {
        fn join(
            &self,
            _: &str,
            _: Payload<'_>,
            _: &mut Socket<'_>,
        ) -> Result<OwnedPayload, OwnedPayload> {
            Ok(OwnedPayload::empty())
        }
        fn handle_in(&self, _: &str, _: Payload<'_>, _: &mut Socket<'_>) -> HandleIn {
            HandleIn::NoReply
        }
    }

    #[test]
    fn routes_by_prefix_and_exact() {
        let r = Router::new().channel("rooms:*", Nop).channel("exact", Nop);
        assert!(r.route("rooms:lobby").is_some());
        assert!(r.route("rooms:").is_some());
        assert!(r.route("exact").is_some());
        assert!(r.route("exactly").is_none());
        assert!(r.route("room:lobby").is_none());
    }
}
