//! The envelope: how a broadcast travels through Redis between nodes.
//!
//! Like `phoenix_pubsub_redis`'s `{vsn, node_ref, from_pid, topic, msg}`
//! term, it starts with a version and names the sending node, so a node can
//! skip the copies of its own broadcasts that Redis hands back (it delivered
//! them locally already). Unlike Erlang's term format it is a fixed binary
//! layout, so any language can read it. All integers are big-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | version, [`VERSION`] (1) |
//! | 8 | sender node id (random per process) |
//! | 4 + n | topic length, topic (UTF-8) |
//! | 4 + n | event length, event (UTF-8) |
//! | 1 | payload kind: 0 = JSON text, 1 = binary |
//! | 4 + n | payload length, payload |
//!
//! Nothing may follow. A reader drops (and counts) what it cannot read:
//! an unknown version, a truncated or oversized field, invalid UTF-8.
//! Decoding never panics on any input.
//!
//! ## Version 2: a broadcast with its place in the topic's history
//! A broadcast on a topic that keeps history in Redis is published by the
//! history's Lua script (`crate::history::redis`), which gives it its
//! position atomically with the PUBLISH, so the envelope carries it:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | version, [`VERSION_POSITIONED`] (2) |
//! | 4 + n | position length, position: the message's ref, `<16 hex epoch>.<offset>` |
//! | 8 | the subscriber of the sender node that must not receive it (`broadcast_from`): `(shard << 32 \| key) + 1`, 0 for none |
//! | ... | the version 1 fields after the version byte (node, topic, event, kind, payload) |
//!
//! The script prepends the first two fields to what the node wrote, so it
//! never decodes anything. Every node, the sender included, delivers a
//! version 2 envelope from Redis: the order of positions is then the order
//! of delivery everywhere.

use throng_protocol::Payload;

use crate::fields::{put, Reader, Truncated};

/// The envelope version this build writes and reads.
pub const VERSION: u8 = 1;
/// The version of a broadcast with its position in the topic's history.
pub const VERSION_POSITIONED: u8 = 2;

const KIND_JSON: u8 = 0;
const KIND_BINARY: u8 = 1;

/// A decoded envelope, borrowing from the Redis message.
#[derive(Debug, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// The node that made the broadcast.
    pub node: u64,
    pub topic: &'a str,
    pub event: &'a str,
    pub payload: Payload<'a>,
}

/// Why an envelope could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("empty message")]
    Empty,
    #[error("envelope version {0}, this node reads version {VERSION}")]
    Version(u8),
    #[error("truncated envelope")]
    Truncated,
    #[error("{0} is not UTF-8")]
    Utf8(&'static str),
    #[error("unknown payload kind {0}")]
    Kind(u8),
    #[error("{0} bytes after the payload")]
    Trailing(usize),
    #[error("topic {topic:?} arrived on the channel of topic {channel:?}")]
    TopicMismatch { topic: String, channel: String },
    #[error("JSON payload is not JSON: {0}")]
    Json(String),
}

impl From<Truncated> for DecodeError {
    fn from(_: Truncated) -> DecodeError {
        DecodeError::Truncated
    }
}

impl<'a> Envelope<'a> {
    /// Appends the encoded envelope to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (kind, body) = match self.payload {
            Payload::Json(s) => (KIND_JSON, s.as_bytes()),
            Payload::Binary(b) => (KIND_BINARY, b),
        };
        out.reserve(1 + 8 + 4 * 3 + 1 + self.topic.len() + self.event.len() + body.len());
        out.push(VERSION);
        out.extend_from_slice(&self.node.to_be_bytes());
        put(out, self.topic.as_bytes());
        put(out, self.event.as_bytes());
        out.push(kind);
        put(out, body);
    }

    /// The encoded envelope.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// What the history script needs to make a version 2 envelope of
    /// this one: the excluded subscriber (see the module docs), then the
    /// version 1 fields after the version byte.
    pub fn positioned_tail(&self, exclude: Option<(usize, usize)>) -> Vec<u8> {
        let mut out = Vec::new();
        let exclude = exclude.map_or(0, |(shard, key)| ((shard as u64) << 32 | key as u64) + 1);
        out.extend_from_slice(&exclude.to_be_bytes());
        self.encode(&mut out);
        out.remove(8);
        out
    }

    /// Reads an envelope of either version: for a version 2 one, also its
    /// position (the message's ref, unchecked) and its excluded subscriber.
    pub fn decode_any(bytes: &'a [u8]) -> Result<(Envelope<'a>, Positioned<'a>), DecodeError> {
        let (&version, rest) = bytes.split_first().ok_or(DecodeError::Empty)?;
        match version {
            VERSION => Ok((Envelope::decode_fields(rest)?, Positioned::default())),
            VERSION_POSITIONED => {
                let mut r = Reader::new(rest);
                let at = std::str::from_utf8(r.field()?).map_err(|_| DecodeError::Utf8("ref"))?;
                let exclude = r.u64()?;
                let exclude = exclude
                    .checked_sub(1)
                    .map(|x| ((x >> 32) as usize, (x & 0xffff_ffff) as usize));
                let env = Envelope::decode_fields(r.rest())?;
                let at = Some(at);
                Ok((env, Positioned { at, exclude }))
            }
            v => Err(DecodeError::Version(v)),
        }
    }

    /// Reads an envelope; checks every length against what is there.
    pub fn decode(bytes: &'a [u8]) -> Result<Envelope<'a>, DecodeError> {
        let (&version, rest) = bytes.split_first().ok_or(DecodeError::Empty)?;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        Envelope::decode_fields(rest)
    }

    /// The version 1 fields after the version byte.
    fn decode_fields(rest: &'a [u8]) -> Result<Envelope<'a>, DecodeError> {
        let mut r = Reader::new(rest);
        let node = r.u64()?;
        let topic = std::str::from_utf8(r.field()?).map_err(|_| DecodeError::Utf8("topic"))?;
        let event = std::str::from_utf8(r.field()?).map_err(|_| DecodeError::Utf8("event"))?;
        let kind = r.u8()?;
        let body = r.field()?;
        let payload = match kind {
            KIND_JSON => {
                Payload::Json(std::str::from_utf8(body).map_err(|_| DecodeError::Utf8("payload"))?)
            }
            KIND_BINARY => Payload::Binary(body),
            k => return Err(DecodeError::Kind(k)),
        };
        if !r.rest().is_empty() {
            return Err(DecodeError::Trailing(r.rest().len()));
        }
        Ok(Envelope {
            node,
            topic,
            event,
            payload,
        })
    }
}

/// What a version 2 envelope adds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Positioned<'a> {
    /// The message's ref (its position), as the script wrote it.
    pub at: Option<&'a str>,
    /// The sender node's subscriber that must not receive it.
    pub exclude: Option<(usize, usize)>,
}

impl Envelope<'_> {
    /// Whether a decoded envelope may be delivered to clients: it must
    /// carry the topic of the channel it arrived on (`channel_topic`; a
    /// message published by hand on one topic's channel must not reach
    /// another topic's subscribers), and a JSON payload must be valid JSON
    /// (it is written into every client's frame as it is).
    pub fn validate(&self, channel_topic: &str) -> Result<(), DecodeError> {
        if self.topic != channel_topic {
            return Err(DecodeError::TopicMismatch {
                topic: self.topic.chars().take(100).collect(),
                channel: channel_topic.chars().take(100).collect(),
            });
        }
        if let Payload::Json(text) = self.payload {
            serde_json::from_str::<serde::de::IgnoredAny>(text)
                .map_err(|e| DecodeError::Json(e.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_is_as_documented() {
        let e = Envelope {
            node: 0x0102030405060708,
            topic: "rooms:lobby",
            event: "new:msg",
            payload: Payload::Json(r#"{"a":1}"#),
        };
        let bytes = e.to_vec();
        let mut want = vec![1u8, 1, 2, 3, 4, 5, 6, 7, 8];
        want.extend_from_slice(&[0, 0, 0, 11]);
        want.extend_from_slice(b"rooms:lobby");
        want.extend_from_slice(&[0, 0, 0, 7]);
        want.extend_from_slice(b"new:msg");
        want.push(0);
        want.extend_from_slice(&[0, 0, 0, 7]);
        want.extend_from_slice(br#"{"a":1}"#);
        assert_eq!(bytes, want);
        assert_eq!(Envelope::decode(&bytes).unwrap(), e);
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        let good = Envelope {
            node: 7,
            topic: "t",
            event: "e",
            payload: Payload::Binary(&[0xff, 0]),
        }
        .to_vec();
        assert_eq!(Envelope::decode(&[]), Err(DecodeError::Empty));
        let mut v2 = good.clone();
        v2[0] = 2;
        assert_eq!(Envelope::decode(&v2), Err(DecodeError::Version(2)));
        for n in 1..good.len() {
            assert_eq!(
                Envelope::decode(&good[..n]),
                Err(DecodeError::Truncated),
                "{n}"
            );
        }
        let mut long = good.clone();
        long.push(0);
        assert_eq!(Envelope::decode(&long), Err(DecodeError::Trailing(1)));
        let mut kind = good.clone();
        let at = 1 + 8 + 5 + 5;
        kind[at] = 9;
        assert_eq!(Envelope::decode(&kind), Err(DecodeError::Kind(9)));
        kind[at] = KIND_JSON;
        assert_eq!(Envelope::decode(&kind), Err(DecodeError::Utf8("payload")));
    }

    #[test]
    fn validates_topic_and_json() {
        let env = |topic, payload| Envelope {
            node: 1,
            topic,
            event: "e",
            payload,
        };
        assert_eq!(
            env("a", Payload::Json(r#"{"x":[1]}"#)).validate("a"),
            Ok(())
        );
        assert_eq!(env("a", Payload::Binary(b"\xff{")).validate("a"), Ok(()));
        assert!(matches!(
            env("a", Payload::Json("{}")).validate("b"),
            Err(DecodeError::TopicMismatch { .. })
        ));
        for bad in [r#"{"x":"#, "", r#"{"x":1}]"#, "{'x':1}"] {
            assert!(
                matches!(
                    env("a", Payload::Json(bad)).validate("a"),
                    Err(DecodeError::Json(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn version_2_is_what_the_script_makes_of_the_tail() {
        let e = Envelope {
            node: 9,
            topic: "feed:1",
            event: "new",
            payload: Payload::Json("{}"),
        };
        let tail = e.positioned_tail(Some((1, 7)));
        let at = "00000000000000ab.3";
        // As the Lua script does: version, ref length and ref, the tail.
        let mut bytes = vec![VERSION_POSITIONED, 0, 0, 0, at.len() as u8];
        bytes.extend_from_slice(at.as_bytes());
        bytes.extend_from_slice(&tail);
        let (got, p) = Envelope::decode_any(&bytes).unwrap();
        assert_eq!(got, e);
        assert_eq!(p.at, Some(at));
        assert_eq!(p.exclude, Some((1, 7)));
        let tail = e.positioned_tail(None);
        let mut bytes = vec![VERSION_POSITIONED, 0, 0, 0, 0];
        bytes.extend_from_slice(&tail);
        assert_eq!(Envelope::decode_any(&bytes).unwrap().1.exclude, None);
        assert_eq!(
            Envelope::decode_any(&e.to_vec()).unwrap().1,
            Positioned::default()
        );
        for n in 0..bytes.len() {
            assert!(Envelope::decode_any(&bytes[..n]).is_err(), "{n}");
        }
    }

    proptest! {
        #[test]
        fn round_trips(node: u64, topic in ".{0,40}", event in ".{0,20}", json in ".{0,200}",
                       bin in proptest::collection::vec(any::<u8>(), 0..200), binary: bool) {
            let payload = if binary { Payload::Binary(&bin) } else { Payload::Json(&json) };
            let e = Envelope { node, topic: &topic, event: &event, payload };
            let bytes = e.to_vec();
            prop_assert_eq!(Envelope::decode(&bytes).unwrap(), e);
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Envelope::decode(&bytes);
            let mut v1 = bytes.clone();
            if !v1.is_empty() { v1[0] = VERSION; }
            let _ = Envelope::decode(&v1);
            let _ = Envelope::decode_any(&bytes);
            let mut v2 = bytes.clone();
            if !v2.is_empty() { v2[0] = VERSION_POSITIONED; }
            let _ = Envelope::decode_any(&v2);
        }
    }
}
