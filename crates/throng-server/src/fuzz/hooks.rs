//! Target `hook_answer`: the body of an app backend's 2xx answer to a hook
//! (connect, join, push), through `hooks::Answer::parse` as the hook
//! thread reads it, then what a shard makes of it for the client: the
//! reply (or error) in a `phx_reply`, the broadcast's payload.
//!
//! Asserts, beside no panic:
//! - an answer taken is a JSON object; its `assigns`, when given, an
//!   object; its broadcast's event not empty;
//! - every JSON it passes on to clients (reply, error, broadcast payload)
//!   is one serde_json reads, and reaches the client as it came: the
//!   `phx_reply` each serializer makes of the reply decodes to a response
//!   equal to it;
//! - a user id is a string or a number, as text.

use serde_json::Value;
use throng_protocol::serializer::{decode, encode_reply, Sender};
use throng_protocol::{Payload, Vsn};

use crate::hooks::Answer;

/// Feeds `data` as an answer's body; panics if an invariant breaks.
pub fn hook_answer(data: &[u8]) {
    let Ok(a) = Answer::parse(data) else {
        return;
    };
    serde_json::from_slice::<serde::de::IgnoredAny>(data).expect("an answer taken is JSON");
    // A field the server skips may hold a number no reader takes (1e999):
    // the whole answer is then no `Value`, but nothing of it goes on.
    let whole: Value =
        serde_json::from_slice(data).unwrap_or_else(|_| Value::Object(Default::default()));
    assert!(
        data.trim_ascii_start().starts_with(b"{"),
        "an answer taken that is no object"
    );
    if let Some(assigns) = &a.assigns {
        assert!(read(assigns.get()).is_object(), "assigns {}", assigns.get());
    }
    if let Some(b) = &a.broadcast {
        assert!(!b.event.is_empty());
        if let Some(p) = &b.payload {
            read(p.get());
        }
    }
    if let Some(error) = &a.error {
        check_reply(error.get(), "error");
    }
    check_reply(a.reply.as_deref().map_or("{}", |r| r.get()), "ok");
    if let Some(user) = a.user {
        let text = user.into_string();
        if whole.get("user").is_some() {
            assert!(matches!(whole["user"], Value::String(_) | Value::Number(_)));
            assert!(!text.is_empty() || whole["user"] == "");
        }
    }
}

/// JSON a client gets, as serde_json reads it.
fn read(json: &str) -> Value {
    match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => panic!("passed on to clients, {json:?} is not JSON serde_json reads: {e}"),
    }
}

/// The reply reaches the client as it came, on both serializers.
fn check_reply(json: &str, status: &str) {
    let want = read(json);
    for vsn in [Vsn::V1, Vsn::V2] {
        let mut out = Vec::new();
        let op = encode_reply(
            vsn,
            &mut out,
            Some("1"),
            Some("2"),
            "room:a",
            status,
            Payload::Json(json),
        )
        .expect("a JSON reply encodes");
        let msg = decode(vsn, op, &out, Sender::Server).expect("the client reads the reply");
        let Payload::Json(p) = msg.payload else {
            panic!("a JSON reply arrived binary");
        };
        let got: Value = serde_json::from_str(p).expect("the reply's payload is JSON");
        assert_eq!(got["response"], want, "{vsn:?}");
        assert_eq!(got["status"], status);
    }
}
