//! The JSON layouts: v1's objects (keys `event, payload, ref, topic`) and
//! v2's arrays (`[join_ref, ref, topic, event, payload]`), with the lenient
//! ref reading both decoders share.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::DecodeError;
use crate::message::{Ref, Vsn};

/// A ref or join_ref as JSON: a string, null, or a number (kept as the
/// number's text, and written back as that number).
pub(super) fn json_ref(raw: Option<&RawValue>) -> Result<Option<Ref<'_>>, DecodeError> {
    let Some(raw) = raw else { return Ok(None) };
    let text = raw.get();
    match text.as_bytes().first() {
        // The parser checked the string: one without escapes is its text
        // between the quotes, borrowed (serde's `Cow<str>` always allocates,
        // two allocations a message for phoenix.js's refs).
        Some(b'"') if text.len() >= 2 && !text.contains('\\') => {
            Ok(Some(Ref::string(Cow::Borrowed(&text[1..text.len() - 1]))))
        }
        Some(b'"') => {
            let s: Cow<'_, str> =
                serde_json::from_str(text).map_err(|e| DecodeError::Json(e.to_string()))?;
            Ok(Some(Ref::string(s)))
        }
        Some(b'n') => Ok(None),
        // The parser checked it is a number; its text is written back as is.
        Some(b'-' | b'0'..=b'9') => Ok(Some(Ref::number_unchecked(Cow::Borrowed(text)))),
        _ => Err(DecodeError::Shape("ref must be a string, number or null")),
    }
}

#[derive(Deserialize)]
pub(super) struct V1In<'a> {
    #[serde(borrow)]
    pub(super) topic: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) event: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) payload: &'a RawValue,
    #[serde(borrow, rename = "ref", default)]
    pub(super) msg_ref: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) join_ref: Option<&'a RawValue>,
}

pub(super) fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Writes a ref as the JSON value it came as: a number, a string, or null.
pub(super) fn json_opt(out: &mut Vec<u8>, r: Option<&Ref<'_>>) {
    match r {
        Some(r) if r.is_number() => out.extend_from_slice(r.text().as_bytes()),
        Some(r) => json_str(out, r.text()),
        None => out.extend_from_slice(b"null"),
    }
}

/// Writes a JSON message in the serializer's layout. `payload` is JSON text.
pub(super) fn json_message(
    vsn: Vsn,
    out: &mut Vec<u8>,
    join_ref: Option<&Ref<'_>>,
    msg_ref: Option<&Ref<'_>>,
    topic: &str,
    event: &str,
    payload: &dyn Fn(&mut Vec<u8>),
) {
    match vsn {
        Vsn::V1 => {
            out.extend_from_slice(b"{\"event\":");
            json_str(out, event);
            out.extend_from_slice(b",\"payload\":");
            payload(out);
            out.extend_from_slice(b",\"ref\":");
            json_opt(out, msg_ref);
            out.extend_from_slice(b",\"topic\":");
            json_str(out, topic);
            out.push(b'}');
        }
        Vsn::V2 => {
            out.push(b'[');
            json_opt(out, join_ref);
            out.push(b',');
            json_opt(out, msg_ref);
            out.push(b',');
            json_str(out, topic);
            out.push(b',');
            json_str(out, event);
            out.push(b',');
            payload(out);
            out.push(b']');
        }
    }
}
