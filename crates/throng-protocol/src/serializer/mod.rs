//! The Phoenix Channels serializers, v1 (JSON objects) and v2 (JSON arrays and
//! binary frames), matching `Phoenix.Socket.V1.JSONSerializer` and
//! `Phoenix.Socket.V2.JSONSerializer` byte for byte where clients look: v1
//! writes exactly the keys `event, payload, ref, topic` in that (sorted) order
//! and never `join_ref`; replies carry `{"response": .., "status": ..}`.
//!
//! This file owns the entry points (decode, the encoders) and their errors;
//! `json.rs` writes and reads the JSON layouts, `binary.rs` v2's binary ones.

mod binary;
mod json;

use std::borrow::Cow;

use serde_json::value::RawValue;

use crate::frame::Opcode;
use crate::message::{Message, Payload, Ref, Vsn};
use binary::{binary, decode_binary, BROADCAST, PUSH, REPLY};
use json::{json_message, json_opt, json_ref, json_str, V1In};

/// Why a client's message could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("invalid JSON message: {0}")]
    Json(String),
    #[error("message is not a Phoenix message: {0}")]
    Shape(&'static str),
    #[error("malformed binary message")]
    Binary,
}

/// Why a message could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("binary payloads need the v2 serializer")]
    BinaryOnV1,
    #[error("{0} longer than 255 bytes in a binary message")]
    TooLong(&'static str),
}

/// Who sent the bytes being decoded: binary layouts differ by direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sender {
    Client,
    Server,
}

/// Decodes one WebSocket message. `opcode` is the message's (Text or Binary).
///
/// V1 reads JSON from text and binary frames alike, as Phoenix's
/// `Phoenix.Socket.V1.JSONSerializer.decode!/2` does (it ignores the opcode;
/// `lib/phoenix/socket/serializers/v1_json_serializer.ex`). Tsung's
/// `<websocket type="message">` sends binary frames, so the Phoenix team's 2M-connection benchmark's own load
/// test depends on it. V2 reads its binary layouts from binary frames.
pub fn decode<'a>(
    vsn: Vsn,
    opcode: Opcode,
    data: &'a [u8],
    from: Sender,
) -> Result<Message<'a>, DecodeError> {
    if opcode == Opcode::Binary && vsn == Vsn::V2 {
        return decode_binary(data, from);
    }
    match vsn {
        Vsn::V1 => {
            let m: V1In<'a> =
                serde_json::from_slice(data).map_err(|e| DecodeError::Json(e.to_string()))?;
            Ok(Message {
                join_ref: json_ref(m.join_ref)?,
                msg_ref: json_ref(m.msg_ref)?,
                topic: m.topic,
                event: m.event,
                payload: Payload::Json(m.payload.get()),
            })
        }
        Vsn::V2 => {
            let parts: Vec<&'a RawValue> =
                serde_json::from_slice(data).map_err(|e| DecodeError::Json(e.to_string()))?;
            if parts.len() < 5 {
                return Err(DecodeError::Shape(
                    "expected [join_ref, ref, topic, event, payload]",
                ));
            }
            let string = |raw: &'a RawValue, what| -> Result<Cow<'a, str>, DecodeError> {
                serde_json::from_str(raw.get()).map_err(|_| DecodeError::Shape(what))
            };
            Ok(Message {
                join_ref: json_ref(Some(parts[0]))?,
                msg_ref: json_ref(Some(parts[1]))?,
                topic: string(parts[2], "topic must be a string")?,
                event: string(parts[3], "event must be a string")?,
                payload: Payload::Json(parts[4].get()),
            })
        }
    }
}

/// Encodes a `%Message{}` (a push, `phx_close`, `phx_error`) from the server,
/// with string refs (see [`encode_message_refs`] for refs as they came).
/// Returns the frame opcode to send it with.
pub fn encode_message(
    vsn: Vsn,
    out: &mut Vec<u8>,
    join_ref: Option<&str>,
    msg_ref: Option<&str>,
    topic: &str,
    event: &str,
    payload: Payload<'_>,
) -> Result<Opcode, EncodeError> {
    let (jr, r) = (join_ref.map(Ref::string), msg_ref.map(Ref::string));
    encode_message_refs(vsn, out, jr.as_ref(), r.as_ref(), topic, event, payload)
}

/// Encodes a `%Message{}` from the server, each ref written as the JSON
/// value the client sent it as (a number stays a number).
pub fn encode_message_refs(
    vsn: Vsn,
    out: &mut Vec<u8>,
    join_ref: Option<&Ref<'_>>,
    msg_ref: Option<&Ref<'_>>,
    topic: &str,
    event: &str,
    payload: Payload<'_>,
) -> Result<Opcode, EncodeError> {
    match payload {
        Payload::Json(p) => {
            json_message(vsn, out, join_ref, msg_ref, topic, event, &|o| {
                o.extend_from_slice(p.as_bytes())
            });
            Ok(Opcode::Text)
        }
        Payload::Binary(data) => {
            let jr = join_ref.map_or("", Ref::text);
            let parts = [(jr, "join_ref"), (topic, "topic"), (event, "event")];
            binary(vsn, out, PUSH, &parts, data)
        }
    }
}

/// Encodes a JSON message (a push) without its payload, for a payload
/// shared by many messages (a presence state): returns where the payload
/// goes, so the message is `out[..at]`, the payload, then `out[at..]`.
pub fn encode_message_around(
    vsn: Vsn,
    out: &mut Vec<u8>,
    join_ref: Option<&Ref<'_>>,
    msg_ref: Option<&Ref<'_>>,
    topic: &str,
    event: &str,
) -> usize {
    let at = std::cell::Cell::new(0);
    json_message(vsn, out, join_ref, msg_ref, topic, event, &|o| {
        at.set(o.len())
    });
    at.get()
}

/// Encodes a `%Reply{}`: event `phx_reply`, payload `{"response": .., "status": ..}`,
/// with string refs (see [`encode_reply_refs`] for refs as they came).
pub fn encode_reply(
    vsn: Vsn,
    out: &mut Vec<u8>,
    join_ref: Option<&str>,
    msg_ref: Option<&str>,
    topic: &str,
    status: &str,
    response: Payload<'_>,
) -> Result<Opcode, EncodeError> {
    let (jr, r) = (join_ref.map(Ref::string), msg_ref.map(Ref::string));
    encode_reply_refs(vsn, out, jr.as_ref(), r.as_ref(), topic, status, response)
}

/// Encodes a `%Reply{}`, each ref written as the JSON value the client sent
/// it as (a number stays a number, as Phoenix's serializers do).
pub fn encode_reply_refs(
    vsn: Vsn,
    out: &mut Vec<u8>,
    join_ref: Option<&Ref<'_>>,
    msg_ref: Option<&Ref<'_>>,
    topic: &str,
    status: &str,
    response: Payload<'_>,
) -> Result<Opcode, EncodeError> {
    match response {
        Payload::Json(p) => {
            let body = |o: &mut Vec<u8>| {
                o.extend_from_slice(b"{\"response\":");
                o.extend_from_slice(p.as_bytes());
                o.extend_from_slice(b",\"status\":");
                json_str(o, status);
                o.push(b'}');
            };
            json_message(
                vsn,
                out,
                join_ref,
                msg_ref,
                topic,
                crate::message::event::REPLY,
                &body,
            );
            Ok(Opcode::Text)
        }
        Payload::Binary(data) => {
            let (jr, r) = (
                join_ref.map_or("", Ref::text),
                msg_ref.map_or("", Ref::text),
            );
            let parts = [
                (jr, "join_ref"),
                (r, "ref"),
                (topic, "topic"),
                (status, "status"),
            ];
            binary(vsn, out, REPLY, &parts, data)
        }
    }
}

/// Encodes a `%Broadcast{}` as the fastlane does: no join_ref, no ref.
pub fn encode_broadcast(
    vsn: Vsn,
    out: &mut Vec<u8>,
    topic: &str,
    event: &str,
    payload: Payload<'_>,
) -> Result<Opcode, EncodeError> {
    match payload {
        Payload::Json(_) => encode_message(vsn, out, None, None, topic, event, payload),
        Payload::Binary(data) => binary(
            vsn,
            out,
            BROADCAST,
            &[(topic, "topic"), (event, "event")],
            data,
        ),
    }
}

/// Client side: encodes a message to send to a server (v1 objects carry
/// `join_ref` too, as Phoenix's `Message.from_map!` accepts it).
pub fn encode_client(
    vsn: Vsn,
    out: &mut Vec<u8>,
    msg: &Message<'_>,
) -> Result<Opcode, EncodeError> {
    let (jr, r) = (msg.join_ref.as_ref(), msg.msg_ref.as_ref());
    match (vsn, msg.payload) {
        (Vsn::V1, Payload::Json(p)) => {
            out.extend_from_slice(b"{\"topic\":");
            json_str(out, &msg.topic);
            out.extend_from_slice(b",\"event\":");
            json_str(out, &msg.event);
            out.extend_from_slice(b",\"payload\":");
            out.extend_from_slice(p.as_bytes());
            out.extend_from_slice(b",\"ref\":");
            json_opt(out, r);
            if jr.is_some() {
                out.extend_from_slice(b",\"join_ref\":");
                json_opt(out, jr);
            }
            out.push(b'}');
            Ok(Opcode::Text)
        }
        (Vsn::V1, Payload::Binary(_)) => Err(EncodeError::BinaryOnV1),
        (Vsn::V2, Payload::Json(_)) => {
            encode_message_refs(vsn, out, jr, r, &msg.topic, &msg.event, msg.payload)
        }
        (Vsn::V2, Payload::Binary(data)) => {
            let (jr, r) = (jr.map_or("", Ref::text), r.map_or("", Ref::text));
            let parts = [
                (jr, "join_ref"),
                (r, "ref"),
                (&*msg.topic, "topic"),
                (&*msg.event, "event"),
            ];
            binary(vsn, out, PUSH, &parts, data)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::RefBuf;
    use proptest::prelude::*;

    fn s(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn v1_reply_matches_phoenix() {
        let mut out = Vec::new();
        encode_reply(
            Vsn::V1,
            &mut out,
            Some("1"),
            Some("1"),
            "rooms:lobby",
            "ok",
            Payload::EMPTY,
        )
        .unwrap();
        assert_eq!(
            s(out),
            r#"{"event":"phx_reply","payload":{"response":{},"status":"ok"},"ref":"1","topic":"rooms:lobby"}"#
        );
    }

    #[test]
    fn a_message_around_a_payload_is_the_message() {
        for vsn in Vsn::ALL {
            let mut whole = Vec::new();
            encode_message(
                vsn,
                &mut whole,
                Some("3"),
                None,
                "t",
                "presence_state",
                Payload::Json(r#"{"a":1}"#),
            )
            .unwrap();
            let mut around = Vec::new();
            let at = encode_message_around(
                vsn,
                &mut around,
                Some(&"3".into()),
                None,
                "t",
                "presence_state",
            );
            let mut joined = around[..at].to_vec();
            joined.extend_from_slice(br#"{"a":1}"#);
            joined.extend_from_slice(&around[at..]);
            assert_eq!(s(joined), s(whole));
        }
    }

    #[test]
    fn v1_broadcast_has_null_ref() {
        let mut out = Vec::new();
        encode_broadcast(
            Vsn::V1,
            &mut out,
            "rooms:lobby",
            "new:msg",
            Payload::Json(r#"{"body":"hi","user":"a"}"#),
        )
        .unwrap();
        assert_eq!(
            s(out),
            r#"{"event":"new:msg","payload":{"body":"hi","user":"a"},"ref":null,"topic":"rooms:lobby"}"#
        );
    }

    #[test]
    fn v2_reply_and_broadcast() {
        let mut out = Vec::new();
        encode_reply(
            Vsn::V2,
            &mut out,
            Some("3"),
            Some("4"),
            "t",
            "error",
            Payload::Json(r#"{"reason":"unauthorized"}"#),
        )
        .unwrap();
        assert_eq!(
            s(out),
            r#"["3","4","t","phx_reply",{"response":{"reason":"unauthorized"},"status":"error"}]"#
        );
        let mut out = Vec::new();
        encode_broadcast(Vsn::V2, &mut out, "t", "e", Payload::EMPTY).unwrap();
        assert_eq!(s(out), r#"[null,null,"t","e",{}]"#);
    }

    #[test]
    fn decodes_tsung_v1_join() {
        let raw =
            br#"{"topic":"rooms:lobby", "event":"phx_join", "payload": {"user":"42"}, "ref":"1"}"#;
        let m = decode(Vsn::V1, Opcode::Text, raw, Sender::Client).unwrap();
        assert_eq!(m.topic, "rooms:lobby");
        assert_eq!(m.event, "phx_join");
        assert_eq!(m.msg_ref.as_deref(), Some("1"));
        assert_eq!(m.join_ref, None);
        assert_eq!(m.payload, Payload::Json(r#"{"user":"42"}"#));
    }

    #[test]
    fn v1_reads_json_from_binary_frames() {
        let raw = br#"{"topic":"rooms:lobby","event":"phx_join","payload":{},"ref":"1"}"#;
        let text = decode(Vsn::V1, Opcode::Text, raw, Sender::Client).unwrap();
        let binary = decode(Vsn::V1, Opcode::Binary, raw, Sender::Client).unwrap();
        assert_eq!(text, binary);
        assert!(decode(Vsn::V1, Opcode::Binary, b"\xff{}", Sender::Client).is_err());
    }

    #[test]
    fn decodes_v2_with_numbers_and_extras() {
        let m = decode(
            Vsn::V2,
            Opcode::Text,
            br#"[null, 5, "phoenix", "heartbeat", {}, "extra"]"#,
            Sender::Client,
        )
        .unwrap();
        assert_eq!(m.msg_ref.as_deref(), Some("5"));
        assert!(m.msg_ref.unwrap().is_number());
        assert_eq!(m.join_ref, None);
    }

    #[test]
    fn string_refs_are_borrowed_unless_escaped() {
        let data = br#"[ "1" , "a\"b\u0041", "t", "e", {}]"#;
        let m = decode(Vsn::V2, Opcode::Text, data, Sender::Client).unwrap();
        let join_ref = m.join_ref.unwrap();
        assert_eq!((join_ref.text(), join_ref.is_number()), ("1", false));
        let at = join_ref.text().as_ptr() as usize - data.as_ptr() as usize;
        assert_eq!(at, 3, "borrowed from the message");
        assert_eq!(m.msg_ref.unwrap().text(), "a\"bA");
        let m = decode(
            Vsn::V1,
            Opcode::Text,
            br#"{"topic":"t","event":"e","payload":{},"ref": "", "join_ref":"12"}"#,
            Sender::Client,
        )
        .unwrap();
        assert_eq!(m.msg_ref.unwrap().text(), "");
        assert_eq!(m.join_ref.unwrap().text(), "12");
    }

    /// A ref comes back as the JSON value it came as: number, string or
    /// null, in replies and messages, on both serializers.
    #[test]
    fn refs_keep_their_json_type() {
        let cases: [(Vsn, &[u8], &str, &str); 4] = [
            (
                Vsn::V1,
                br#"{"topic":"t","event":"e","payload":{},"ref":1,"join_ref":2}"#,
                r#"{"event":"phx_reply","payload":{"response":{},"status":"ok"},"ref":1,"topic":"t"}"#,
                r#"{"event":"phx_close","payload":{},"ref":2,"topic":"t"}"#,
            ),
            (
                Vsn::V1,
                br#"{"topic":"t","event":"e","payload":{},"ref":"1","join_ref":null}"#,
                r#"{"event":"phx_reply","payload":{"response":{},"status":"ok"},"ref":"1","topic":"t"}"#,
                r#"{"event":"phx_close","payload":{},"ref":null,"topic":"t"}"#,
            ),
            (
                Vsn::V2,
                br#"[7, -1.5e3, "t", "e", {}]"#,
                r#"[7,-1.5e3,"t","phx_reply",{"response":{},"status":"ok"}]"#,
                r#"[7,7,"t","phx_close",{}]"#,
            ),
            (
                Vsn::V2,
                br#"[null, "7", "t", "e", {}]"#,
                r#"[null,"7","t","phx_reply",{"response":{},"status":"ok"}]"#,
                r#"[null,null,"t","phx_close",{}]"#,
            ),
        ];
        for (vsn, raw, reply, close) in cases {
            let m = decode(vsn, Opcode::Text, raw, Sender::Client).unwrap();
            let (jr, r) = (m.join_ref.as_ref(), m.msg_ref.as_ref());
            let mut out = Vec::new();
            encode_reply_refs(vsn, &mut out, jr, r, "t", "ok", Payload::EMPTY).unwrap();
            assert_eq!(s(out), reply);
            // A stored join_ref keeps its type too.
            let kept = jr.map(RefBuf::from);
            let kept = kept.as_ref().map(RefBuf::to_ref);
            let mut out = Vec::new();
            let (jr, r) = (kept.as_ref(), kept.as_ref());
            encode_message_refs(vsn, &mut out, jr, r, "t", "phx_close", Payload::EMPTY).unwrap();
            assert_eq!(s(out), close);
        }
        // Numbers are written back as they came, never re-formatted.
        let m = decode(
            Vsn::V2,
            Opcode::Text,
            br#"[1e2,0,"t","e",{}]"#,
            Sender::Client,
        )
        .unwrap();
        assert_eq!(m.join_ref.as_deref(), Some("1e2"));
        assert_eq!(Ref::number("12abc"), None);
        assert!(Ref::number("12").unwrap().is_number());
        // The binary layouts carry text: a number's digits.
        let mut out = Vec::new();
        let seven = Ref::number("7").unwrap();
        encode_reply_refs(
            Vsn::V2,
            &mut out,
            None,
            Some(&seven),
            "t",
            "ok",
            Payload::Binary(&[1]),
        )
        .unwrap();
        let back = decode(Vsn::V2, Opcode::Binary, &out, Sender::Server).unwrap();
        assert_eq!(back.msg_ref.as_deref(), Some("7"));
    }

    #[test]
    fn rejects_malformed() {
        for (vsn, raw) in [
            (Vsn::V1, &b"not json"[..]),
            (Vsn::V1, br#"{"topic":"t","event":"e"}"#),
            (Vsn::V1, br#"["1","1","t","e",{}]"#),
            (
                Vsn::V2,
                br#"{"topic":"t","event":"e","payload":{},"ref":"1"}"#,
            ),
            (Vsn::V2, br#"["1","1","t"]"#),
            (Vsn::V2, br#"["1","1",3,"e",{}]"#),
            (Vsn::V2, br#"[{},"1","t","e",{}]"#),
        ] {
            assert!(
                decode(vsn, Opcode::Text, raw, Sender::Client).is_err(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        assert!(matches!(
            decode(Vsn::V1, Opcode::Binary, b"\0", Sender::Client),
            Err(DecodeError::Json(_))
        ));
        assert_eq!(
            decode(Vsn::V2, Opcode::Binary, &[0, 9, 0, 0, 0], Sender::Client),
            Err(DecodeError::Binary)
        );
        assert_eq!(
            decode(Vsn::V2, Opcode::Binary, &[7], Sender::Client),
            Err(DecodeError::Binary)
        );
    }

    fn arb_str() -> impl Strategy<Value = String> {
        "[a-z:\"\\\\é\u{1F600} ]{0,20}"
    }

    proptest! {
        #[test]
        fn client_round_trip(v2 in any::<bool>(), jr in proptest::option::of(arb_str()), r in proptest::option::of(arb_str()),
                             topic in arb_str(), event in arb_str(), bin in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..50))) {
            let vsn = if v2 { Vsn::V2 } else { Vsn::V1 };
            let json = serde_json::to_string(&serde_json::json!({"k": topic})).unwrap();
            let payload = match &bin { Some(b) => Payload::Binary(b), None => Payload::Json(&json) };
            let jr = jr.filter(|s| !s.is_empty());
            let r = r.filter(|s| !s.is_empty());
            let msg = Message { join_ref: jr.as_deref().map(Ref::from), msg_ref: r.as_deref().map(Ref::from),
                                topic: Cow::Borrowed(&topic), event: Cow::Borrowed(&event), payload };
            let mut out = Vec::new();
            match encode_client(vsn, &mut out, &msg) {
                Ok(op) => {
                    let back = decode(vsn, op, &out, Sender::Client).unwrap();
                    prop_assert_eq!(back, msg);
                }
                Err(_) => prop_assert!(vsn == Vsn::V1 && bin.is_some()),
            }
        }

        #[test]
        fn server_messages_decode(v2 in any::<bool>(), topic in arb_str(), event in arb_str(), r in proptest::option::of("[0-9]{1,5}")) {
            let vsn = if v2 { Vsn::V2 } else { Vsn::V1 };
            let mut out = Vec::new();
            let op = encode_message(vsn, &mut out, None, r.as_deref(), &topic, &event, Payload::Json("[1,{}]")).unwrap();
            let back = decode(vsn, op, &out, Sender::Server).unwrap();
            prop_assert_eq!(back.topic.as_ref(), topic.as_str());
            prop_assert_eq!(back.event.as_ref(), event.as_str());
            prop_assert_eq!(back.msg_ref.as_deref(), r.as_deref());
            prop_assert_eq!(back.payload, Payload::Json("[1,{}]"));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), v2 in any::<bool>(), bin in any::<bool>()) {
            let vsn = if v2 { Vsn::V2 } else { Vsn::V1 };
            let op = if bin { Opcode::Binary } else { Opcode::Text };
            let _ = decode(vsn, op, &bytes, Sender::Client);
            let _ = decode(vsn, op, &bytes, Sender::Server);
        }
    }
}
