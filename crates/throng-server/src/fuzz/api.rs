//! Target `api_body`: what an app's backend sends the server API, read as
//! the API reads it: the JSON bodies of `POST /api/broadcast` and `POST
//! /api/disconnect` (`api::broadcast_request`, `api::disconnect_request`)
//! and the query strings of `GET /api/presence` and `GET /api/history`
//! (axum's `Query`, as the routes extract them). Byte 0 picks the route;
//! the rest is the body or the query.
//!
//! Asserts, beside no panic:
//! - a refusal is a 400 with a code and a message, whose JSON body renders;
//! - a broadcast taken has a topic a client may join (`topic_ok`), an event
//!   that is not Phoenix's own (`phx_*`), a payload that serde_json reads
//!   (within the nesting bound, as receivers such as serde_json need), and
//!   reaches clients as it came: the frame each serializer makes of it
//!   decodes to the same topic, event and payload;
//! - a disconnect taken names a user; a query taken names a valid topic.

use std::sync::Arc;

use axum::http::{StatusCode, Uri};
use throng_protocol::frame::{decode_frame, Role};
use throng_protocol::serializer::{decode, Sender};
use throng_protocol::{OwnedPayload, Payload, Vsn};
use throng_pubsub::Broadcast;

use crate::api::{broadcast_request, disconnect_request, topic_ok, ApiError, PresenceQuery};
use crate::history::api::HistoryQuery;

/// The API's nesting bound by default (`--max-json-depth`).
const DEPTH: usize = 128;

/// Feeds `data` to one route's reader; panics if an invariant breaks.
pub fn api_body(data: &[u8]) {
    let Some((&route, body)) = data.split_first() else {
        return;
    };
    match route % 4 {
        0 => match broadcast_request(body, DEPTH) {
            Ok(b) => check_broadcast(&b.topic, &b.event, &b.payload),
            Err(e) => check_refusal(&e),
        },
        1 => match disconnect_request(body) {
            Ok(d) => assert!(!d.user.is_empty()),
            Err(e) => check_refusal(&e),
        },
        route => {
            let Ok(query) = std::str::from_utf8(body) else {
                return;
            };
            let Ok(uri) = format!("/api/x?{query}").parse::<Uri>() else {
                return; // hyper refuses the request line first
            };
            let topic = if route == 2 {
                axum::extract::Query::<PresenceQuery>::try_from_uri(&uri).map(|q| q.0.topic)
            } else {
                axum::extract::Query::<HistoryQuery>::try_from_uri(&uri).map(|q| q.0.topic)
            };
            if let Ok(Some(topic)) = topic {
                if topic_ok(&topic).is_ok() {
                    assert!(crate::limits::topic_error(&topic).is_none());
                    assert!(!crate::auth::is_reserved(&topic));
                }
            }
        }
    }
}

fn check_refusal(e: &ApiError) {
    assert_eq!(e.status, StatusCode::BAD_REQUEST);
    assert!(!e.code.is_empty() && !e.message.is_empty());
    let body = serde_json::json!({"error": {"code": e.code, "message": e.message}});
    assert!(serde_json::to_vec(&body).is_ok());
}

/// The broadcast reaches clients of both serializers as it was sent.
fn check_broadcast(topic: &str, event: &str, payload: &OwnedPayload) {
    assert!(topic_ok(topic).is_ok(), "topic {topic:?} taken");
    assert!(
        !event.is_empty() && !event.starts_with("phx_"),
        "event {event:?}"
    );
    let OwnedPayload::Json(json) = payload else {
        panic!("a binary payload from JSON");
    };
    if let Err(e) = serde_json::from_str::<serde_json::Value>(json) {
        panic!("payload {json:?} taken, which serde_json cannot read: {e}");
    }
    let b = Broadcast::new(Arc::from(topic), event.to_string(), payload.clone(), None);
    for vsn in [Vsn::V1, Vsn::V2] {
        let mut frame = b.frame(vsn).expect("a JSON broadcast has a frame").to_vec();
        let f = decode_frame(&mut frame, Role::Client, u64::MAX)
            .expect("a frame")
            .expect("a whole frame");
        let msg = decode(vsn, f.opcode, &frame[f.payload], Sender::Server)
            .expect("clients read the broadcast");
        assert_eq!((&*msg.topic, &*msg.event), (topic, event));
        assert_eq!(msg.payload, Payload::Json(json), "{vsn:?}");
    }
}
