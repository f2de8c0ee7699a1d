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

/// A ref or join_ref as the client sent it: its text, and whether it came as
/// a JSON number. Phoenix's serializers pass a ref through as the JSON value
/// it came as (`lib/phoenix/socket/serializers/v2_json_serializer.ex` puts
/// the decoded term back into the reply), and clients such as `phxsocket`
/// and `chunnel` file their pending replies under the number they sent:
/// answering `7` with `"7"` leaves them waiting. A ref is kept as its text
/// (what the binary layouts and the channel API see), plus one bit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ref<'a> {
    text: Cow<'a, str>,
    number: bool,
}

impl<'a> Ref<'a> {
    /// A ref that was a JSON string.
    pub fn string(text: impl Into<Cow<'a, str>>) -> Ref<'a> {
        Ref {
            text: text.into(),
            number: false,
        }
    }

    /// A ref that was a JSON number, kept as the number's text; `None` when
    /// `text` is not a JSON number (it would be written to the wire as is).
    pub fn number(text: impl Into<Cow<'a, str>>) -> Option<Ref<'a>> {
        let text = text.into();
        text.parse::<serde_json::Number>().ok()?;
        Some(Ref { text, number: true })
    }

    /// A number already checked by the JSON parser.
    pub(crate) fn number_unchecked(text: Cow<'a, str>) -> Ref<'a> {
        Ref { text, number: true }
    }

    /// The ref's text (a number's digits, a string's characters).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the client sent it as a JSON number.
    pub fn is_number(&self) -> bool {
        self.number
    }

    /// A borrowed copy, to hand to an encoder.
    pub fn borrowed(&self) -> Ref<'_> {
        Ref {
            text: Cow::Borrowed(&self.text),
            number: self.number,
        }
    }

    /// An owned copy, to outlive the frame it was decoded from.
    pub fn into_owned(self) -> Ref<'static> {
        Ref {
            text: Cow::Owned(self.text.into_owned()),
            number: self.number,
        }
    }
}

/// The ref's text, so `msg.msg_ref.as_deref()` is an `Option<&str>`.
impl std::ops::Deref for Ref<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl<'a> From<&'a str> for Ref<'a> {
    fn from(s: &'a str) -> Ref<'a> {
        Ref::string(s)
    }
}

impl From<String> for Ref<'static> {
    fn from(s: String) -> Ref<'static> {
        Ref::string(s)
    }
}

impl<'a> From<Cow<'a, str>> for Ref<'a> {
    fn from(s: Cow<'a, str>) -> Ref<'a> {
        Ref::string(s)
    }
}

/// A ref kept for a long time (a join's join_ref, for every message of the
/// channel): its text after a one-byte tag, `#` for a number and `"` for a
/// string. The tag costs one byte rather than a field (and its padding) in
/// every join. Up to [`RefBuf::INLINE`] bytes (tag and text: the refs
/// clients count up, `"1"` to `"99999999999999"`) are kept inline, so an
/// idle joined socket pays no heap allocation for its join_ref (one was a
/// 32-byte heap chunk); longer ones in one allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefBuf(Repr);

/// Inline when it fits (always, so that equal refs compare equal), 16
/// bytes either way, and 16 as an `Option` too (a join's join_ref is one):
/// the inline form's first byte is a [`Len`], whose unused values tell the
/// heap form (a thin pointer, in the bytes after it) and `None` apart.
/// A `Box<str>` here (16 bytes, its only niche taken by the inline form)
/// made `Option<RefBuf>` 24 bytes, and every joined socket 8 bytes bigger.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Repr {
    Inline {
        len: Len,
        bytes: [u8; RefBuf::INLINE],
    },
    /// Refs longer than the inline room (rare: clients count up).
    #[allow(clippy::redundant_allocation)]
    Heap(Box<Box<str>>),
}

/// An inline ref's length, tag included: 1 to [`RefBuf::INLINE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Len {
    L1 = 1,
    L2,
    L3,
    L4,
    L5,
    L6,
    L7,
    L8,
    L9,
    L10,
    L11,
    L12,
    L13,
    L14,
    L15,
}

impl Len {
    const ALL: [Len; RefBuf::INLINE] = [
        Len::L1,
        Len::L2,
        Len::L3,
        Len::L4,
        Len::L5,
        Len::L6,
        Len::L7,
        Len::L8,
        Len::L9,
        Len::L10,
        Len::L11,
        Len::L12,
        Len::L13,
        Len::L14,
        Len::L15,
    ];
}

const _: () = assert!(std::mem::size_of::<Option<RefBuf>>() == 16);

impl RefBuf {
    const NUMBER: char = '#';
    const STRING: char = '"';
    /// Bytes kept inline, tag included.
    pub const INLINE: usize = 15;

    fn as_str(&self) -> &str {
        match &self.0 {
            // Copied from a whole `str` (`From<&Ref>`): valid UTF-8.
            Repr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..*len as usize]).unwrap_or("#")
            }
            Repr::Heap(s) => s,
        }
    }

    /// The ref, borrowed.
    pub fn to_ref(&self) -> Ref<'_> {
        let s = self.as_str();
        Ref {
            text: Cow::Borrowed(&s[1..]),
            number: s.starts_with(Self::NUMBER),
        }
    }

    /// The ref's text.
    pub fn text(&self) -> &str {
        &self.as_str()[1..]
    }

    /// The bytes it holds (text and tag), for memory budgets.
    pub fn len(&self) -> usize {
        self.as_str().len()
    }

    /// Never true: the tag is always there (the text may be empty).
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl From<&Ref<'_>> for RefBuf {
    fn from(r: &Ref<'_>) -> RefBuf {
        let tag = if r.number {
            RefBuf::NUMBER
        } else {
            RefBuf::STRING
        };
        if r.text.len() < RefBuf::INLINE {
            let mut bytes = [0; RefBuf::INLINE];
            bytes[0] = tag as u8;
            bytes[1..=r.text.len()].copy_from_slice(r.text.as_bytes());
            let len = Len::ALL[r.text.len()];
            return RefBuf(Repr::Inline { len, bytes });
        }
        let mut s = String::with_capacity(r.text.len() + 1);
        s.push(tag);
        s.push_str(&r.text);
        RefBuf(Repr::Heap(Box::new(s.into_boxed_str())))
    }
}

/// A message as Phoenix's `%Phoenix.Socket.Message{}`: what a client pushes,
/// and, decoded on the client side, what a server sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub join_ref: Option<Ref<'a>>,
    pub msg_ref: Option<Ref<'a>>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refbuf_keeps_text_and_type_inline_or_not() {
        for text in [
            "",
            "1",
            "999999",
            "1000000",
            "ééé",
            "éééé",
            "12345678901234",
            "123456789012345",
            "ééééééé",
            "éééééééé",
            "a longer string ref",
        ] {
            for number in [false, true] {
                let r = Ref {
                    text: Cow::Borrowed(text),
                    number,
                };
                let kept = RefBuf::from(&r);
                assert_eq!(kept.to_ref(), r);
                assert_eq!(kept.text(), text);
                assert_eq!(kept.len(), text.len() + 1);
                assert_eq!(
                    kept,
                    RefBuf::from(&kept.to_ref()),
                    "the same ref compares equal"
                );
            }
        }
    }

    #[test]
    fn refbuf_is_two_words() {
        assert_eq!(std::mem::size_of::<RefBuf>(), 16);
        assert_eq!(std::mem::size_of::<Option<RefBuf>>(), 16);
    }
}
