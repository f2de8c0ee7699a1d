//! Target `redis_messages`: what a node reads from Redis, as it reads it:
//! byte 0 picks the kind, the rest is the message.
//! 0. a broadcast's envelope, version 1 or 2 (`backplane::envelope`),
//!    checked as a node checks it before delivery (`Envelope::validate`,
//!    on the channel of its own topic), and the position a version 2 one
//!    carries (`Position::parse`);
//! 1. a control envelope (`backplane::control`) and the body the server
//!    gives it (`crate::control::Message`: a JSON request, or a forwarded
//!    long-poll request);
//! 2. a presence message and a presence's hash value (`presence::wire`);
//! 3. a forwarded long-poll request or answer (`forward::wire`).
//!
//! Asserts, beside no panic, that whatever decodes re-encodes to the same
//! bytes (the version 1 envelope, a version 2 one from its tail, the
//! control envelope, the presence message and value, the forward; a JSON
//! request to the same request), a position to the same ref, and that what
//! would reach clients is what they can read: a validated broadcast's frame
//! decodes, on both serializers, to its topic, event and payload; a
//! presence's meta writes a JSON object.

use throng_protocol::frame::{decode_frame, Role};
use throng_protocol::serializer::{decode, Sender};
use throng_protocol::{OwnedPayload, Payload, Vsn};
use throng_pubsub::backplane::{control, envelope::Envelope};
use throng_pubsub::presence::wire;
use throng_pubsub::{Broadcast, Position};

use crate::forward::wire::Forward;

/// Feeds `data` as a message from Redis; panics if an invariant breaks.
pub fn redis_messages(data: &[u8]) {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    match kind % 4 {
        0 => broadcast_envelope(bytes),
        1 => control_message(bytes),
        2 => presence(bytes),
        _ => {
            if let Some(f) = Forward::decode(bytes) {
                assert_eq!(f.encode(), bytes, "{f:?}");
            }
        }
    }
}

fn broadcast_envelope(bytes: &[u8]) {
    let Ok((env, positioned)) = Envelope::decode_any(bytes) else {
        return;
    };
    match positioned.at {
        None => assert_eq!(env.to_vec(), bytes, "a version 1 envelope"),
        Some(at) => {
            let mut again = vec![throng_pubsub::backplane::envelope::VERSION_POSITIONED];
            again.extend_from_slice(&(at.len() as u32).to_be_bytes());
            again.extend_from_slice(at.as_bytes());
            again.extend_from_slice(&env.positioned_tail(positioned.exclude));
            assert_eq!(again, bytes, "a version 2 envelope");
            if let Some(p) = Position::parse(at) {
                assert_eq!(p.to_ref(), at, "a position read from {at:?}");
            }
        }
    }
    if env.validate(env.topic).is_err() {
        return; // dropped and counted
    }
    let b = Broadcast::new(
        env.topic.into(),
        env.event.to_string(),
        OwnedPayload::from(env.payload),
        None,
    );
    for vsn in [Vsn::V1, Vsn::V2] {
        let Some(frame) = b.frame(vsn) else {
            continue; // binary: not for v1 sockets
        };
        let mut frame = frame.to_vec();
        let f = decode_frame(&mut frame, Role::Client, u64::MAX)
            .expect("a frame")
            .expect("a whole frame");
        let msg = decode(vsn, f.opcode, &frame[f.payload], Sender::Server)
            .expect("clients read a validated broadcast");
        assert_eq!((&*msg.topic, &*msg.event), (env.topic, env.event));
        // JSON goes out as it came, but for the whitespace around it.
        let sent = match env.payload {
            Payload::Json(text) => Payload::Json(text.trim_matches([' ', '\t', '\n', '\r'])),
            binary => binary,
        };
        assert_eq!(msg.payload, sent, "{vsn:?}");
    }
}

fn control_message(bytes: &[u8]) {
    let Ok((from, body)) = control::decode(bytes) else {
        return;
    };
    assert_eq!(control::encode(from, body), bytes);
    let Some(msg) = crate::control::Message::decode(body) else {
        return;
    };
    let again = msg.encode();
    let back = crate::control::Message::decode(&again).expect("a message re-encoded decodes");
    assert_eq!(format!("{back:?}"), format!("{msg:?}"));
    if let crate::control::Message::LongPoll(_) = msg {
        assert_eq!(again, body, "a forwarded request");
    }
}

fn presence(bytes: &[u8]) {
    if let Ok(msg) = wire::decode(bytes) {
        let metas = match &msg {
            wire::Message::Delta(d) => &d.joins[..],
            wire::Message::Replace { entries, .. } => &entries[..],
        };
        for (_, meta) in metas {
            let mut out = Vec::new();
            meta.write_json(&mut out);
            if let Err(e) = serde_json::from_slice::<serde_json::Map<_, _>>(&out) {
                panic!(
                    "a presence from Redis writes {:?}: {e}",
                    String::from_utf8_lossy(&out)
                );
            }
        }
        // The header: version, kind, then the owner.
        let owner = u64::from_be_bytes(bytes[2..10].try_into().expect("a read header"));
        let again = match &msg {
            wire::Message::Delta(d) => wire::delta(owner, d),
            wire::Message::Replace { owner, entries } => wire::replace(*owner, entries),
        };
        assert_eq!(again, bytes, "a presence message");
    }
    // A presence's hash field (8 bytes) and value.
    if bytes.len() >= 8 {
        let (field, value) = bytes.split_at(8);
        if let Ok((key, meta)) = wire::read_value(7, field, value) {
            assert_eq!(wire::value(&key, &meta), value);
            assert_eq!(wire::field(&meta), field);
        }
    }
}
