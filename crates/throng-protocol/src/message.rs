//! Phoenix Channels wire types: inert data, borrowed from the frame they came in.

use std::borrow::Cow;

/// Events of the protocol itself.
pub mod event {
    pub const JOIN: &str = "phx_join";
    pub const LEAVE: &str = "phx_leave";
    pub const REPLY: &str = "phx_reply";
    pub const ERROR: &str = "phx_error";
    pub const CLOSE: &str = "phx_close";
    pub const HEARTBEAT: &str = "heartbeat";
    /// The topic heartbeats are sent on.
    pub const HEARTBEAT_TOPIC: &str = "phoenix";
}

/// A message's payload: JSON text (already valid JSON), or raw bytes (v2 binary frames).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Valid JSON text, written to the wire as it is.
    Json(&'a str),
    /// Binary data, only expressible with the v2 serializer's binary frames.
    Binary(&'a [u8]),
}

impl Payload<'_> {
    /// The empty JSON object, Phoenix's `%{}`.
    pub const EMPTY: Payload<'static> = Payload::Json("{}");
}

/// An owned [`Payload`]: what replies, pushes and broadcasts carry once they
/// outlive the frame they were decoded from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedPayload {
    /// JSON text; valid JSON by construction (see [`OwnedPayload::json`]).
    Json(String),
    /// Raw bytes; reaches v2 sockets as a binary frame, skipped for v1 sockets.
    Binary(Vec<u8>),
}

impl OwnedPayload {
    /// `{}`.
    pub fn empty() -> OwnedPayload {
        OwnedPayload::Json("{}".into())
    }

    /// Serializes a value to a JSON payload. A value serde cannot write (a
    /// map with non-string keys, a failing `Serialize`) is an error, never a
    /// silent `null`.
    pub fn json<T: serde::Serialize + ?Sized>(
        value: &T,
    ) -> Result<OwnedPayload, serde_json::Error> {
        serde_json::to_string(value).map(OwnedPayload::Json)
    }

    /// Borrows as a wire [`Payload`].
    pub fn as_payload(&self) -> Payload<'_> {
        match self {
            OwnedPayload::Json(s) => Payload::Json(s),
            OwnedPayload::Binary(b) => Payload::Binary(b),
        }
    }
}

impl From<Payload<'_>> for OwnedPayload {
    fn from(p: Payload<'_>) -> Self {
        match p {
            Payload::Json(s) => OwnedPayload::Json(s.to_owned()),
            Payload::Binary(b) => OwnedPayload::Binary(b.to_vec()),
        }
    }
}

/// A message as Phoenix's `%Phoenix.Socket.Message{}`: what a client pushes,
/// and, decoded on the client side, what a server sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub join_ref: Option<Cow<'a, str>>,
    pub msg_ref: Option<Cow<'a, str>>,
    pub topic: Cow<'a, str>,
    pub event: Cow<'a, str>,
    pub payload: Payload<'a>,
}

/// The serializer a socket negotiated with its `vsn` query parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vsn {
    /// `{topic, event, payload, ref}` objects; the default with no `vsn`.
    V1,
    /// `[join_ref, ref, topic, event, payload]` arrays, plus binary frames.
    V2,
}

impl Vsn {
    /// Picks the serializer from a request's query string, as Phoenix's
    /// `~> 1.0.0` / `~> 2.0.0` requirements do: no `vsn` is 1.0.0; `None`
    /// for an unsupported `vsn`.
    pub fn from_query(query: &str) -> Option<Vsn> {
        let vsn = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "vsn")
            .map(|(_, v)| v);
        match vsn {
            None => Some(Vsn::V1),
            Some(v) => Vsn::from_requirement(v),
        }
    }

    /// The serializer for a `vsn` value: `1.x` or `2.x`.
    pub fn from_requirement(vsn: &str) -> Option<Vsn> {
        if vsn.starts_with("1.") {
            Some(Vsn::V1)
        } else if vsn.starts_with("2.") {
            Some(Vsn::V2)
        } else {
            None
        }
    }

    /// Both serializers, for encode-once fan-out.
    pub const ALL: [Vsn; 2] = [Vsn::V1, Vsn::V2];

    /// A small index (0 or 1) for per-serializer arrays.
    pub fn index(self) -> usize {
        match self {
            Vsn::V1 => 0,
            Vsn::V2 => 1,
        }
    }
}
