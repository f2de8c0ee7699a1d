//! Frames the server sends, each encoded straight into a caller's buffer.
//!
//! The shapes are Pusher's protocol document's, checked against what
//! `pusher-js` reads (src/core/connection/protocol/protocol.ts
//! `decodeMessage`: `data` is `JSON.parse`d when it is a string;
//! src/core/channels/presence_channel.ts and `members.ts` for presence):
//! - `pusher:connection_established`: `data` is a JSON *string* holding
//!   `{"socket_id":..,"activity_timeout":..}`.
//! - app events, `pusher_internal:*`: `data` is a JSON string holding the
//!   payload (Pusher's "double encoding").
//! - `pusher:error`, `pusher:signin_success`, `pusher:ping`/`pong`,
//!   `pusher:subscription_error`: `data` is an object, as Pusher documents
//!   them (`pusher-js` takes either).
//!
//! An app event is encoded once per broadcast and the bytes shared by every
//! subscriber: [`Data::Literal`] carries the HTTP API's `data` string token
//! through as it came, so a trigger's payload is never decoded, re-encoded
//! or copied more than into this frame.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::client::FrameError;
use super::event;
use super::json::{
    decoded_len, is_object, push_as_string, push_escaped, push_str, push_u64, raw_str, Escaped,
};

/// An event's `data` as it goes on the wire: always a JSON string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Data<'a> {
    /// A JSON string literal, quotes and escapes included (the HTTP API's
    /// `data`), written as is.
    Literal(&'a str),
    /// Text to write as a JSON string: a client event's object `data` (its
    /// JSON text), which `pusher-js` parses back into the object.
    Text(&'a str),
}

impl<'a> Data<'a> {
    /// `data` as a client or the HTTP API sent it (valid JSON text): a
    /// string is carried through, any other value becomes a string of its
    /// text.
    pub fn from_json(text: &'a str) -> Data<'a> {
        if text.starts_with('"') {
            Data::Literal(text)
        } else {
            Data::Text(text)
        }
    }

    /// The size Pusher's limits count: the length of the string `data` is.
    pub fn len(&self) -> usize {
        match self {
            Data::Literal(l) => decoded_len(l),
            Data::Text(t) => t.len(),
        }
    }

    /// Whether the string is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        match self {
            Data::Literal(l) => out.extend_from_slice(l.as_bytes()),
            Data::Text(t) => push_as_string(out, t.as_bytes()),
        }
    }
}

/// `{"event":"<event>","channel":<channel>`, the start of a channel frame.
fn channel_frame(out: &mut Vec<u8>, event: &str, channel: &str) {
    out.extend_from_slice(b"{\"event\":");
    push_str(out, event);
    out.extend_from_slice(b",\"channel\":");
    push_str(out, channel);
}

/// `pusher:connection_established`, the first frame on every socket.
pub fn connection_established(out: &mut Vec<u8>, socket_id: &str, activity_timeout_secs: u32) {
    out.extend_from_slice(b"{\"event\":\"pusher:connection_established\",\"data\":\"{");
    out.extend_from_slice(b"\\\"socket_id\\\":\\\"");
    push_escaped(out, socket_id.as_bytes());
    out.extend_from_slice(b"\\\",\\\"activity_timeout\\\":");
    push_u64(out, u64::from(activity_timeout_secs));
    out.extend_from_slice(b"}\"}");
}

/// `pusher:error` with a code (or `null`, as Pusher sends for errors
/// without one) and a message.
pub fn error(out: &mut Vec<u8>, code: Option<u16>, message: &str) {
    out.extend_from_slice(b"{\"event\":\"pusher:error\",\"data\":{\"code\":");
    match code {
        Some(code) => push_u64(out, u64::from(code)),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"message\":");
    push_str(out, message);
    out.extend_from_slice(b"}}");
}

/// `pusher:ping`, the server asking an idle client whether it is there.
pub fn ping(out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"event\":\"pusher:ping\",\"data\":{}}");
}

/// `pusher:pong`, the answer to a client's `pusher:ping`.
pub fn pong(out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"event\":\"pusher:pong\",\"data\":{}}");
}

/// `pusher_internal:subscription_succeeded` for a channel that is not a
/// presence channel (`data` is an empty object, as a string).
pub fn subscription_succeeded(out: &mut Vec<u8>, channel: &str) {
    channel_frame(out, event::SUBSCRIPTION_SUCCEEDED, channel);
    out.extend_from_slice(b",\"data\":\"{}\"}");
}

/// `pusher_internal:subscription_succeeded` for a presence channel: the
/// members, each user once, as `(user_id, user_info JSON or None)`.
/// `data` holds `{"presence":{"ids":[..],"hash":{id: info},"count":n}}`; a
/// member without info is `null` in `hash` (the key must be there:
/// `pusher-js`'s `Members.get` looks the id up in `hash`).
pub fn presence_subscription_succeeded<'m, I>(out: &mut Vec<u8>, channel: &str, members: I)
where
    I: IntoIterator<Item = (&'m str, Option<&'m str>)>,
    I::IntoIter: Clone,
{
    let members = members.into_iter();
    channel_frame(out, event::SUBSCRIPTION_SUCCEEDED, channel);
    out.extend_from_slice(b",\"data\":\"{");
    out.extend_from_slice(br#"\"presence\":{\"ids\":["#);
    let mut count = 0u64;
    for (id, _) in members.clone() {
        if count > 0 {
            out.push(b',');
        }
        // The inner JSON string, escaped into the outer one.
        let _ = serde_json::to_writer(Escaped(out), id);
        count += 1;
    }
    out.extend_from_slice(br#"],\"hash\":{"#);
    for (i, (id, info)) in members.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(Escaped(out), id);
        out.push(b':');
        push_escaped(out, info.unwrap_or("null").as_bytes());
    }
    out.extend_from_slice(br#"},\"count\":"#);
    push_u64(out, count);
    out.extend_from_slice(b"}}\"}");
}

/// `pusher_internal:member_added`: a user's first socket joined.
pub fn member_added(out: &mut Vec<u8>, channel: &str, user_id: &str, user_info: Option<&str>) {
    channel_frame(out, event::MEMBER_ADDED, channel);
    out.extend_from_slice(br#","data":"{\"user_id\":"#);
    let _ = serde_json::to_writer(Escaped(out), user_id);
    out.extend_from_slice(br#",\"user_info\":"#);
    push_escaped(out, user_info.unwrap_or("null").as_bytes());
    out.extend_from_slice(b"}\"}");
}

/// `pusher_internal:member_removed`: a user's last socket left.
pub fn member_removed(out: &mut Vec<u8>, channel: &str, user_id: &str) {
    channel_frame(out, event::MEMBER_REMOVED, channel);
    out.extend_from_slice(br#","data":"{\"user_id\":"#);
    let _ = serde_json::to_writer(Escaped(out), user_id);
    out.extend_from_slice(b"}\"}");
}

/// `pusher:subscription_error` on the channel, `data` as `pusher-js` builds
/// its own (`src/core/channels/channel.ts`): `{"type": "AuthError",
/// "error": "...", "status": 401}`. `pusher-js` emits it on the channel
/// object, where apps bind to it.
pub fn subscription_error(out: &mut Vec<u8>, channel: &str, kind: &str, error: &str, status: u16) {
    channel_frame(out, event::SUBSCRIPTION_ERROR, channel);
    out.extend_from_slice(b",\"data\":{\"type\":");
    push_str(out, kind);
    out.extend_from_slice(b",\"error\":");
    push_str(out, error);
    out.extend_from_slice(b",\"status\":");
    push_u64(out, u64::from(status));
    out.extend_from_slice(b"}}");
}

/// `pusher:cache_miss`: a cache channel had no event to replay.
pub fn cache_miss(out: &mut Vec<u8>, channel: &str) {
    channel_frame(out, event::CACHE_MISS, channel);
    out.push(b'}');
}

/// `pusher:signin_success`, `data.user_data` the signed JSON text as a
/// string (`pusher-js` parses it and reads `id`).
pub fn signin_success(out: &mut Vec<u8>, user_data: &str) {
    out.extend_from_slice(b"{\"event\":\"pusher:signin_success\",\"data\":{\"user_data\":");
    push_str(out, user_data);
    out.extend_from_slice(b"}}");
}

/// An event on a channel: a trigger through the HTTP API, a relayed client
/// event (with the sender's `user_id` on presence channels), a cache
/// channel's replay. Encode once, send the bytes to every subscriber.
pub fn event(
    out: &mut Vec<u8>,
    name: &str,
    channel: &str,
    data: Option<Data<'_>>,
    user_id: Option<&str>,
) {
    channel_frame(out, name, channel);
    if let Some(data) = data {
        out.extend_from_slice(b",\"data\":");
        data.write(out);
    }
    if let Some(user_id) = user_id {
        out.extend_from_slice(b",\"user_id\":");
        push_str(out, user_id);
    }
    out.push(b'}');
}

/// A frame from the server, read as a client reads it (the load generator,
/// tests).
#[derive(Clone, Debug, Deserialize)]
pub struct ServerFrame<'a> {
    /// The event name.
    #[serde(borrow)]
    pub event: Cow<'a, str>,
    /// The channel, for channel events.
    #[serde(borrow, default)]
    pub channel: Option<&'a RawValue>,
    /// `data` as sent (a string for app events, an object for some of the
    /// protocol's own).
    #[serde(borrow, default)]
    pub data: Option<&'a RawValue>,
    /// The sender of a client event on a presence channel.
    #[serde(borrow, default)]
    pub user_id: Option<&'a RawValue>,
}

impl<'a> ServerFrame<'a> {
    /// The channel name.
    pub fn channel(&self) -> Option<Cow<'a, str>> {
        self.channel.and_then(raw_str)
    }

    /// `data` as `pusher-js` hands it to the app, as JSON text: a string's
    /// content when it is a string, the value's text otherwise.
    pub fn data_json(&self) -> Option<Cow<'a, str>> {
        let raw = self.data?;
        raw_str(raw).or(Some(Cow::Borrowed(raw.get())))
    }
}

/// Reads a server frame.
pub fn decode(frame: &[u8]) -> Result<ServerFrame<'_>, FrameError> {
    if !is_object(frame) {
        return Err(FrameError::NotAnEvent);
    }
    serde_json::from_slice(frame).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => FrameError::NotAnEvent,
        _ => FrameError::NotJson,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    /// A frame as `pusher-js`'s `Protocol.decodeMessage` sees it: the outer
    /// JSON, with `data` parsed again when it is a string.
    fn as_pusher_js(frame: &str) -> Value {
        let mut v: Value = serde_json::from_str(frame).unwrap();
        if let Some(Value::String(s)) = v.get("data") {
            if let Ok(parsed) = serde_json::from_str::<Value>(s) {
                v["data"] = parsed;
            }
        }
        v
    }

    #[test]
    fn protocol_frames_byte_for_byte() {
        assert_eq!(
            text(|o| connection_established(o, "123.456", 120)),
            r#"{"event":"pusher:connection_established","data":"{\"socket_id\":\"123.456\",\"activity_timeout\":120}"}"#
        );
        assert_eq!(
            text(|o| error(o, Some(4001), "App key k does not exist")),
            r#"{"event":"pusher:error","data":{"code":4001,"message":"App key k does not exist"}}"#
        );
        assert_eq!(
            text(|o| error(o, None, "x")),
            r#"{"event":"pusher:error","data":{"code":null,"message":"x"}}"#
        );
        assert_eq!(text(ping), r#"{"event":"pusher:ping","data":{}}"#);
        assert_eq!(text(pong), r#"{"event":"pusher:pong","data":{}}"#);
        assert_eq!(
            text(|o| subscription_succeeded(o, "my-channel")),
            r#"{"event":"pusher_internal:subscription_succeeded","channel":"my-channel","data":"{}"}"#
        );
        assert_eq!(
            text(|o| subscription_error(o, "private-a", "AuthError", "Invalid signature", 401)),
            r#"{"event":"pusher:subscription_error","channel":"private-a","data":{"type":"AuthError","error":"Invalid signature","status":401}}"#
        );
        assert_eq!(
            text(|o| cache_miss(o, "cache-a")),
            r#"{"event":"pusher:cache_miss","channel":"cache-a"}"#
        );
        assert_eq!(
            text(|o| signin_success(o, r#"{"id":"12345"}"#)),
            r#"{"event":"pusher:signin_success","data":{"user_data":"{\"id\":\"12345\"}"}}"#
        );
    }

    #[test]
    fn presence_frames() {
        let members = [("1", Some(r#"{"name":"A \"1\""}"#)), ("2", None)];
        let frame = text(|o| presence_subscription_succeeded(o, "presence-a", members));
        assert_eq!(
            frame,
            r#"{"event":"pusher_internal:subscription_succeeded","channel":"presence-a","data":"{\"presence\":{\"ids\":[\"1\",\"2\"],\"hash\":{\"1\":{\"name\":\"A \\\"1\\\"\"},\"2\":null},\"count\":2}}"}"#
        );
        assert_eq!(
            as_pusher_js(&frame)["data"],
            json!({"presence": {"ids": ["1", "2"], "hash": {"1": {"name": "A \"1\""}, "2": null}, "count": 2}})
        );
        let empty = text(|o| presence_subscription_succeeded(o, "presence-a", []));
        assert_eq!(
            as_pusher_js(&empty)["data"],
            json!({"presence": {"ids": [], "hash": {}, "count": 0}})
        );
        assert_eq!(
            text(|o| member_added(o, "presence-a", "1", Some(r#"{"name":"A"}"#))),
            r#"{"event":"pusher_internal:member_added","channel":"presence-a","data":"{\"user_id\":\"1\",\"user_info\":{\"name\":\"A\"}}"}"#
        );
        assert_eq!(
            text(|o| member_removed(o, "presence-a", "1")),
            r#"{"event":"pusher_internal:member_removed","channel":"presence-a","data":"{\"user_id\":\"1\"}"}"#
        );
    }

    #[test]
    fn events_carry_data_as_a_string() {
        // The HTTP API's data, carried through as it came.
        let body: Value = json!({"name": "e", "data": "{\"some\":\"data\"}"});
        let body = body.to_string();
        #[derive(Deserialize)]
        struct B<'a> {
            #[serde(borrow)]
            data: &'a RawValue,
        }
        let b: B<'_> = serde_json::from_str(&body).unwrap();
        let frame = text(|o| {
            event(
                o,
                "e",
                "project-3",
                Some(Data::from_json(b.data.get())),
                None,
            )
        });
        assert_eq!(
            frame,
            r#"{"event":"e","channel":"project-3","data":"{\"some\":\"data\"}"}"#
        );
        assert_eq!(as_pusher_js(&frame)["data"], json!({"some": "data"}));
        // A client event's object data becomes a string of it.
        let raw: &RawValue = serde_json::from_str(r#"{"id":1}"#).unwrap();
        let frame = text(|o| {
            event(
                o,
                "client-t",
                "presence-a",
                Some(Data::from_json(raw.get())),
                Some("7"),
            )
        });
        assert_eq!(
            frame,
            r#"{"event":"client-t","channel":"presence-a","data":"{\"id\":1}","user_id":"7"}"#
        );
        assert_eq!(
            text(|o| event(o, "client-t", "private-a", None, None)),
            r#"{"event":"client-t","channel":"private-a"}"#
        );
        // Sizes as Pusher counts them: the string's length.
        assert_eq!(Data::from_json(b.data.get()).len(), 15);
        assert_eq!(Data::from_json(raw.get()).len(), 8);
        assert!(Data::Literal("\"\"").is_empty());
    }

    #[test]
    fn decodes_server_frames() {
        let frame = text(|o| {
            event(
                o,
                "e",
                "c",
                Some(Data::Literal(r#""{\"a\":1}""#)),
                Some("u"),
            )
        });
        let f = decode(frame.as_bytes()).unwrap();
        assert_eq!((f.event.as_ref(), f.channel().as_deref()), ("e", Some("c")));
        assert_eq!(f.data_json().as_deref(), Some(r#"{"a":1}"#));
        let f = decode(br#"{"event":"pusher:error","data":{"code":4001}}"#).unwrap();
        assert_eq!(f.data_json().as_deref(), Some(r#"{"code":4001}"#));
        assert_eq!(f.channel(), None);
        assert!(decode(b"nope").is_err());
        assert!(decode(b"{}").is_err());
        assert!(decode(br#"["e"]"#).is_err());
    }

    fn id() -> impl Strategy<Value = String> {
        "\\PC{1,20}|[\"\\\\\\x00-\\x1f]{1,5}"
    }

    proptest! {
        #[test]
        fn presence_data_parses_back(members in proptest::collection::btree_map(id(), proptest::option::of("\\PC{0,20}"), 0..8)) {
            let members: Vec<(String, Option<String>)> = members.into_iter().collect();
            let infos: Vec<Option<String>> = members.iter().map(|(_, i)| i.as_ref().map(|i| json!({"n": i}).to_string())).collect();
            let list: Vec<(&str, Option<&str>)> = members.iter().zip(&infos).map(|((id, _), info)| (id.as_str(), info.as_deref())).collect();
            let frame = text(|o| presence_subscription_succeeded(o, "presence-a", list.iter().copied()));
            let data = &as_pusher_js(&frame)["data"]["presence"];
            let ids: Vec<Value> = list.iter().map(|(id, _)| json!(id)).collect();
            prop_assert_eq!(&data["ids"], &Value::Array(ids));
            prop_assert_eq!(&data["count"], &json!(list.len()));
            for (id, info) in &list {
                let expected = info.map_or(Value::Null, |i| serde_json::from_str(i).unwrap());
                prop_assert_eq!(&data["hash"][*id], &expected);
            }
        }

        #[test]
        fn events_parse_back(name in id(), channel in id(), payload in "\\PC{0,40}", user in proptest::option::of(id())) {
            let literal = serde_json::to_string(&payload).unwrap();
            let frame = text(|o| event(o, &name, &channel, Some(Data::Literal(&literal)), user.as_deref()));
            let v: Value = serde_json::from_str(&frame).unwrap();
            prop_assert_eq!(&v["event"], &json!(name));
            prop_assert_eq!(&v["channel"], &json!(channel));
            prop_assert_eq!(&v["data"], &json!(payload));
            let user_id = user.map(|u| json!(u));
            prop_assert_eq!(v.get("user_id"), user_id.as_ref());
            let added = text(|o| member_added(o, &channel, &name, None));
            prop_assert_eq!(&as_pusher_js(&added)["data"], &json!({"user_id": name, "user_info": null}));
            let err = text(|o| error(o, Some(4300), &payload));
            prop_assert_eq!(&as_pusher_js(&err)["data"]["message"], &json!(payload));
        }
    }
}
