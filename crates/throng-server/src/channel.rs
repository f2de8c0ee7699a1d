//! The channel API: what `Phoenix.Channel` gives an application.
//!
//! An app implements [`Channel`] and mounts it on a topic pattern in a
//! [`Router`] (`"rooms:*"` matches every topic starting with `rooms:`).
//! Callbacks run on the event-loop shard that owns the socket, so they must
//! be quick and must not block; they talk to the world through [`Socket`]:
//! `push` to this client, `broadcast` to every subscriber of the topic,
//! `send_info` to this channel's own [`Channel::handle_info`] after the
//! callback (Phoenix's `send(self(), msg)`, e.g. `:after_join`), and
//! `assign` to keep state for this join (Phoenix's `socket.assigns`), and
//! `presence()` for Phoenix.Presence's `track`/`update`/`untrack` and the
//! `presence_state` push of the `:after_join` pattern ([`Presence`]).
//! From outside a callback (an HTTP handler, a timer thread of the app, the
//! server API) use an [`Endpoint`](crate::Endpoint).
//!
//! Join and handle_in answer the same way: a [`Reply`] is `Ok(payload)` or
//! `Err(payload)`, sent as a `phx_reply` with status `ok` or `error`. A
//! refused join is such a reply, not an error of the server.

use std::any::Any;
use std::sync::Arc;

pub use throng_protocol::{OwnedPayload, Payload};

/// A reply to the client: `Ok` is status `ok`, `Err` is status `error`
/// (Phoenix's `{:ok, payload}` / `{:error, payload}`).
pub type Reply = Result<OwnedPayload, OwnedPayload>;

/// Why a channel ended, passed to [`Channel::terminate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminate {
    /// The client sent `phx_leave`.
    Leave,
    /// The client joined the same topic again on the same socket.
    DuplicateJoin,
    /// The connection closed (or was closed: idle, slow reader, protocol error).
    Closed,
    /// The server refused the join after it began: a join with `since` whose
    /// history could not be read (Redis away); the client joins again.
    Refused,
}

/// A message for [`Channel::handle_info`]: any value the app chooses.
pub type Info = Arc<dyn Any + Send + Sync>;

/// Per-join state kept between callbacks (Phoenix's `socket.assigns`).
/// Boxed twice so that it is one word in every join: most joins assign
/// nothing, and a `Box<dyn Any>` is two (its vtable), 8 bytes in every
/// joined socket; a join that assigns pays the second allocation instead.
#[allow(clippy::redundant_allocation)]
pub type Assigns = Option<Box<Box<dyn Any + Send>>>;

/// Who a socket is, as its callbacks and the topic rules see it: the
/// authenticated user (kept once per user per shard, not per socket) and
/// what the client connected with (kept only when it sent params).
#[derive(Clone, Copy, Debug, Default)]
pub struct Who<'a> {
    pub user: Option<&'a str>,
    pub connect: Option<&'a ConnectInfo>,
}

/// Who connected: what the transport learned before any join. Shared by
/// every channel of one connection.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ConnectInfo {
    /// The socket `params` from the connect URL (phoenix.js `params`),
    /// without `vsn`, in order, percent-decoded.
    pub params: Vec<(String, String)>,
    /// The token of phoenix.js's `authToken` option (the
    /// `base64url.bearer.phx.*` subprotocol), decoded.
    pub auth_token: Option<String>,
    /// The authenticated user, when connect authentication has one.
    pub user_id: Option<String>,
    /// The topic patterns the user's token limits joins to (the JWT
    /// `channels` claim), if it does.
    pub channels: Option<Vec<String>>,
}

impl ConnectInfo {
    /// The value of param `name`; the last one when the URL repeats it
    /// (`?token=a&token=b` is `b`), as Plug's query decoding does: a later
    /// key overwrites an earlier one (`Plug.Conn.Query.decode/2`). The
    /// WebSocket and long-poll transports both read the `token` here.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Side effects a callback asks for; applied by the socket after it returns.
#[derive(Default)]
pub(crate) struct Effects {
    pub pushes: Vec<(String, OwnedPayload)>,
    /// (event, payload, include the sender?)
    pub broadcasts: Vec<(String, OwnedPayload, bool)>,
    /// Messages to this channel's own `handle_info`, after the callback.
    pub infos: Vec<Info>,
    /// Presence calls (`socket.presence()`), in order.
    pub presence: Vec<PresenceOp>,
}

impl Effects {
    pub fn clear(&mut self) {
        self.pushes.clear();
        self.broadcasts.clear();
        self.infos.clear();
        self.presence.clear();
    }
}

/// The joined socket, as a callback sees it.
pub struct Socket<'a> {
    pub(crate) topic: &'a str,
    pub(crate) join_ref: Option<&'a str>,
    pub(crate) who: Who<'a>,
    pub(crate) assigns: &'a mut Assigns,
    pub(crate) effects: &'a mut Effects,
}

impl<'a> Socket<'a> {
    /// The channel's topic, e.g. `rooms:lobby`.
    pub fn topic(&self) -> &str {
        self.topic
    }

    /// The `join_ref` of this channel's join, if the client sent one.
    pub fn join_ref(&self) -> Option<&str> {
        self.join_ref
    }

    /// What the client connected with (params, token, user).
    pub fn connect_info(&self) -> Option<&ConnectInfo> {
        self.who.connect
    }

    /// The authenticated user's id, if any.
    pub fn user_id(&self) -> Option<&str> {
        self.who.user
    }

    /// Socket param `name` from the connect URL.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.who.connect.and_then(|c| c.param(name))
    }

    /// Keeps `value` as this join's state, replacing what was there.
    pub fn assign<T: Any + Send>(&mut self, value: T) {
        *self.assigns = Some(Box::new(Box::new(value)));
    }

    /// This join's state, if it is a `T`.
    pub fn assigns<T: Any + Send>(&self) -> Option<&T> {
        self.assigns.as_ref().and_then(|b| b.downcast_ref())
    }

    /// This join's state, mutably, if it is a `T`.
    pub fn assigns_mut<T: Any + Send>(&mut self) -> Option<&mut T> {
        self.assigns.as_mut().and_then(|b| b.downcast_mut())
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

    /// Presence on this channel's topic: track, update, untrack this join,
    /// push the topic's state (Phoenix.Presence).
    pub fn presence(&mut self) -> Presence<'_, 'a> {
        Presence { socket: self }
    }

    /// Hands `msg` to this channel's [`Channel::handle_info`] once the current
    /// callback is done and its reply is sent (Phoenix's `send(self(), msg)`).
    pub fn send_info(&mut self, msg: impl Any + Send + Sync) {
        self.effects.infos.push(Arc::new(msg));
    }
}

/// A channel: the app's handler for a family of topics.
pub trait Channel: Send + Sync + 'static {
    /// A client asks to join `topic` with `payload` (the join params).
    /// `Ok(response)` joins and replies `ok`; `Err(response)` refuses with `error`.
    fn join(&self, topic: &str, payload: Payload<'_>, socket: &mut Socket<'_>) -> Reply;

    /// A client pushed `event` on a topic it joined; `Some(reply)` answers
    /// it, `None` does not (Phoenix's `{:noreply, socket}`).
    fn handle_in(
        &self,
        event: &str,
        payload: Payload<'_>,
        socket: &mut Socket<'_>,
    ) -> Option<Reply>;

    /// A message sent to this channel ([`Socket::send_info`], or an
    /// [`Endpoint`](crate::Endpoint) on its topic). Pushes and broadcasts
    /// made here go out as from any callback.
    fn handle_info(&self, _msg: &Info, _socket: &mut Socket<'_>) {}

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

    /// The patterns mounted, in order.
    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.routes.iter().map(|(p, _)| p.as_str())
    }

    /// The channel for `topic`, if any.
    pub fn route(&self, topic: &str) -> Option<&Arc<dyn Channel>> {
        self.routes
            .iter()
            .find_map(|(pattern, ch)| topic_matches(pattern, topic).then_some(ch))
    }
}

/// Why a presence call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PresenceError {
    #[error("a presence meta must be a JSON object")]
    NotAnObject,
    #[error("the presence meta could not be encoded: {0}")]
    Encode(String),
}

/// What a callback asked of presence; applied after it returns, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PresenceOp {
    Track(Arc<str>, Box<str>),
    Update(Arc<str>, Box<str>),
    Untrack(Arc<str>),
    /// Update every presence the join tracks.
    UpdateTracked(Box<str>),
    PushState,
}

/// Presence for the joined channel of a callback (Phoenix.Presence with
/// `socket` as its first argument). Calls take effect when the callback
/// returns; a key already tracked by this join, an update or untrack of a
/// key it does not track, and a key and meta longer than
/// `--max-presence-bytes` are refused then (counted in
/// `throng_presence_refused_total`, logged at debug). A join's presences
/// are untracked when it ends (leave, rejoin, close).
pub struct Presence<'s, 'a> {
    pub(crate) socket: &'s mut Socket<'a>,
}

fn fields_of(meta: &impl serde::Serialize) -> Result<Box<str>, PresenceError> {
    let json = serde_json::to_string(meta).map_err(|e| PresenceError::Encode(e.to_string()))?;
    throng_pubsub::presence::meta_fields(&json).map_err(|_| PresenceError::NotAnObject)
}

impl Presence<'_, '_> {
    /// Tracks this join as a presence of `key` with `meta` (a JSON object,
    /// e.g. `json!({"online_at": 1700000000})`): `Presence.track/3`.
    pub fn track(&mut self, key: &str, meta: &impl serde::Serialize) -> Result<(), PresenceError> {
        let fields = fields_of(meta)?;
        self.socket
            .effects
            .presence
            .push(PresenceOp::Track(key.into(), fields));
        Ok(())
    }

    /// Replaces the meta of this join's presence of `key`: clients see the
    /// old meta leave and the new one join with `phx_ref_prev`
    /// (`Presence.update/3`).
    pub fn update(&mut self, key: &str, meta: &impl serde::Serialize) -> Result<(), PresenceError> {
        let fields = fields_of(meta)?;
        self.socket
            .effects
            .presence
            .push(PresenceOp::Update(key.into(), fields));
        Ok(())
    }

    /// Replaces the meta of every presence this join tracks, whatever its
    /// key: for a channel whose presence a `--presence` rule tracks (one
    /// presence, keyed by the rule).
    pub fn update_tracked(&mut self, meta: &impl serde::Serialize) -> Result<(), PresenceError> {
        let fields = fields_of(meta)?;
        self.socket
            .effects
            .presence
            .push(PresenceOp::UpdateTracked(fields));
        Ok(())
    }

    /// Ends this join's presence of `key` (`Presence.untrack/2`).
    pub fn untrack(&mut self, key: &str) {
        self.socket
            .effects
            .presence
            .push(PresenceOp::Untrack(key.into()));
    }

    /// Pushes the topic's presence to this client: `presence_state` (or
    /// `presence_count` for a count-mode topic), the state as of the last
    /// diff, shared by every joiner of the interval
    /// (`push(socket, "presence_state", Presence.list(socket))`).
    pub fn push_state(&mut self) {
        self.socket.effects.presence.push(PresenceOp::PushState);
    }
}

/// Whether `topic` matches `pattern`: an exact topic, or a prefix ending in `*`.
pub(crate) fn topic_matches(pattern: &str, topic: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => topic.starts_with(prefix),
        None => topic == pattern,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nop;
    impl Channel for Nop {
        fn join(&self, _: &str, _: Payload<'_>, _: &mut Socket<'_>) -> Reply {
            Ok(OwnedPayload::empty())
        }
        fn handle_in(&self, _: &str, _: Payload<'_>, _: &mut Socket<'_>) -> Option<Reply> {
            None
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

    #[test]
    fn assigns_are_typed() {
        let mut assigns: Assigns = None;
        let mut effects = Effects::default();
        let mut s = Socket {
            topic: "t",
            join_ref: None,
            who: Who::default(),
            assigns: &mut assigns,
            effects: &mut effects,
        };
        assert!(s.assigns::<u32>().is_none());
        s.assign(5u32);
        *s.assigns_mut::<u32>().unwrap() += 1;
        assert_eq!(s.assigns::<u32>(), Some(&6));
        assert!(s.assigns::<String>().is_none());
        s.send_info("after_join");
        assert_eq!(effects.infos.len(), 1);
    }
}
