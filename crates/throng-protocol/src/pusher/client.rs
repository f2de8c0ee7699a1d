//! Frames a client sends, as `pusher-js` writes them: `{"event": .., "data": ..}`
//! with `data` a JSON object for the protocol's own events
//! (src/core/connection/connection.ts `send_event`,
//! src/core/channels/channel.ts `subscribe`/`unsubscribe`,
//! src/core/user.ts `_onAuthorize`), and `{"event": "client-..",
//! "channel": .., "data": ..}` for client events, whose `data` is whatever
//! the app passed (an object, a string, a number; absent when undefined).
//!
//! Decoding is bounded (a frame over `max_len` bytes is refused before it
//! is parsed) and borrows from the frame. Every refusal is a [`FrameError`]
//! with Pusher's code 4300 ("any other type of error"): the server answers
//! it with `pusher:error` and keeps the socket, as a bad frame from one app
//! bug is no reason to drop the connection (and a close with 43xx would
//! stop `pusher-js` from ever reconnecting).
//!
//! The encoders at the bottom are the client side (the load generator and
//! tests), byte-compatible with `pusher-js`'s `JSON.stringify`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::error_code::ErrorCode;
use super::event;
use super::json::{is_null, is_object, push_str, raw_str};

/// The longest event name, as the HTTP API bounds it (Pusher's HTTP API
/// reference and the server SDKs: 200 characters).
pub const MAX_EVENT_NAME_LEN: usize = 200;

/// A decoded client frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientFrame<'a> {
    /// `pusher:ping`: answer `pusher:pong`.
    Ping,
    /// `pusher:pong`: the answer to the server's ping.
    Pong,
    /// `pusher:subscribe`.
    Subscribe(Subscribe<'a>),
    /// `pusher:unsubscribe`.
    Unsubscribe {
        /// The channel to leave.
        channel: Cow<'a, str>,
    },
    /// `pusher:signin`.
    Signin {
        /// `KEY:signature` from the app's backend.
        auth: Cow<'a, str>,
        /// The signed user data, JSON text (see [`super::presence::parse_user_data`]).
        user_data: Cow<'a, str>,
    },
    /// A `client-` event to relay to the channel's other subscribers.
    ClientEvent(ClientEvent<'a>),
}

/// A `pusher:subscribe` frame's `data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscribe<'a> {
    /// The channel to join.
    pub channel: Cow<'a, str>,
    /// `KEY:signature`, for private and presence channels (`pusher-js`
    /// sends `""` for public ones; read as `None`).
    pub auth: Option<Cow<'a, str>>,
    /// For presence channels, the signed member JSON text (see
    /// [`super::presence::parse_channel_data`]).
    pub channel_data: Option<Cow<'a, str>>,
}

/// A client event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientEvent<'a> {
    /// The event name (starts with `client-`).
    pub event: Cow<'a, str>,
    /// The channel it is sent on.
    pub channel: Cow<'a, str>,
    /// Its data, JSON text as sent (`None` when the client sent none):
    /// relay it with [`super::server::Data::from_json`].
    pub data: Option<&'a str>,
}

/// Why a client frame was refused. Every one is answered with `pusher:error`
/// code 4300 ([`FrameError::code`]) on a socket that stays open.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("the message is {len} bytes, over the limit of {max}: send less data per event")]
    TooLarge { len: usize, max: usize },
    #[error("the message is not JSON: send {{\"event\": .., \"data\": ..}} as text")]
    NotJson,
    #[error("the message is not a JSON object with an \"event\" string: send {{\"event\": .., \"data\": ..}}")]
    NotAnEvent,
    #[error("{event}: {problem}")]
    BadData {
        event: &'static str,
        problem: &'static str,
    },
    #[error("unknown event {0:?}: this server takes pusher:subscribe, pusher:unsubscribe, pusher:ping, pusher:pong, pusher:signin and client- events")]
    UnknownEvent(String),
    #[error(
        "event {0:?} is not a client event: events sent by clients must start with \"client-\""
    )]
    NotClientEvent(String),
    #[error("the event name is {0} characters long, over the limit of 200: use a shorter name")]
    EventNameTooLong(usize),
    #[error("client event {0:?} has no \"channel\": say which channel it is for")]
    NoChannel(String),
}

impl FrameError {
    /// Pusher's code for the refusal.
    pub fn code(&self) -> ErrorCode {
        ErrorCode::BadRequest
    }
}

/// An event name as echoed in an error: at most 64 bytes of it.
fn echo(name: &str) -> String {
    let mut end = name.len().min(64);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    event: Cow<'a, str>,
    #[serde(borrow, default)]
    channel: Option<&'a RawValue>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

/// The fields of the protocol's own events' `data`, read leniently (each
/// checked below) so every problem gets its own message.
#[derive(Deserialize, Default)]
struct Fields<'a> {
    #[serde(borrow, default)]
    channel: Option<&'a RawValue>,
    #[serde(borrow, default)]
    auth: Option<&'a RawValue>,
    #[serde(borrow, default)]
    channel_data: Option<&'a RawValue>,
    #[serde(borrow, default)]
    user_data: Option<&'a RawValue>,
}

/// Decodes one client frame of at most `max_len` bytes.
pub fn decode(frame: &[u8], max_len: usize) -> Result<ClientFrame<'_>, FrameError> {
    if frame.len() > max_len {
        return Err(FrameError::TooLarge {
            len: frame.len(),
            max: max_len,
        });
    }
    if !is_object(frame) {
        return Err(match serde_json::from_slice::<&RawValue>(frame) {
            Ok(_) => FrameError::NotAnEvent,
            Err(_) => FrameError::NotJson,
        });
    }
    let env: Envelope<'_> = serde_json::from_slice(frame).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => FrameError::NotAnEvent,
        _ => FrameError::NotJson,
    })?;
    let name = env.event;
    // Characters, as the SDKs count them (bytes first: cheaper, and a
    // bound on the count).
    if name.len() > MAX_EVENT_NAME_LEN && name.chars().count() > MAX_EVENT_NAME_LEN {
        return Err(FrameError::EventNameTooLong(name.chars().count()));
    }
    match &*name {
        event::PING => Ok(ClientFrame::Ping),
        event::PONG => Ok(ClientFrame::Pong),
        event::SUBSCRIBE => subscribe(fields(env.data, event::SUBSCRIBE)?),
        event::UNSUBSCRIBE => {
            let f = fields(env.data, event::UNSUBSCRIBE)?;
            let channel = string(
                f.channel,
                event::UNSUBSCRIBE,
                "data.channel must be a string",
            )?;
            Ok(ClientFrame::Unsubscribe { channel })
        }
        event::SIGNIN => {
            let f = fields(env.data, event::SIGNIN)?;
            let auth = string(f.auth, event::SIGNIN, "data.auth must be a string")?;
            let user_data = string(
                f.user_data,
                event::SIGNIN,
                "data.user_data must be a string holding JSON",
            )?;
            Ok(ClientFrame::Signin { auth, user_data })
        }
        n if n.starts_with(event::CLIENT_PREFIX) => {
            let channel = env
                .channel
                .and_then(raw_str)
                .ok_or_else(|| FrameError::NoChannel(echo(n)))?;
            let data = env.data.filter(|d| !is_null(d)).map(RawValue::get);
            Ok(ClientFrame::ClientEvent(ClientEvent {
                event: name,
                channel,
                data,
            }))
        }
        n if n.starts_with(event::PUSHER_PREFIX) || n.starts_with(event::INTERNAL_PREFIX) => {
            Err(FrameError::UnknownEvent(echo(n)))
        }
        n => Err(FrameError::NotClientEvent(echo(n))),
    }
}

/// A protocol event's `data`, which must be a JSON object.
fn fields<'a>(data: Option<&'a RawValue>, event: &'static str) -> Result<Fields<'a>, FrameError> {
    let bad = FrameError::BadData {
        event,
        problem: "data must be a JSON object",
    };
    match data {
        Some(d) if d.get().starts_with('{') => serde_json::from_str(d.get()).map_err(|_| bad),
        _ => Err(bad),
    }
}

/// A required string field.
fn string<'a>(
    raw: Option<&'a RawValue>,
    event: &'static str,
    problem: &'static str,
) -> Result<Cow<'a, str>, FrameError> {
    raw.and_then(raw_str)
        .ok_or(FrameError::BadData { event, problem })
}

/// An optional string field: absent, `null` and `""` are none.
fn optional<'a>(
    raw: Option<&'a RawValue>,
    event: &'static str,
    problem: &'static str,
) -> Result<Option<Cow<'a, str>>, FrameError> {
    match raw.filter(|r| !is_null(r)) {
        None => Ok(None),
        Some(r) => Ok(Some(string(Some(r), event, problem)?).filter(|s| !s.is_empty())),
    }
}

fn subscribe(f: Fields<'_>) -> Result<ClientFrame<'_>, FrameError> {
    let e = event::SUBSCRIBE;
    Ok(ClientFrame::Subscribe(Subscribe {
        channel: string(f.channel, e, "data.channel must be a string")?,
        auth: optional(f.auth, e, "data.auth must be a string")?,
        channel_data: optional(
            f.channel_data,
            e,
            "data.channel_data must be a string holding JSON",
        )?,
    }))
}

/// Client side: `{"event":"pusher:subscribe","data":{...}}`, the keys in
/// `pusher-js`'s order (`auth`, `channel_data` when present, `channel`).
pub fn encode_subscribe(
    out: &mut Vec<u8>,
    channel: &str,
    auth: Option<&str>,
    channel_data: Option<&str>,
) {
    out.extend_from_slice(b"{\"event\":\"pusher:subscribe\",\"data\":{");
    if let Some(auth) = auth {
        out.extend_from_slice(b"\"auth\":");
        push_str(out, auth);
        out.push(b',');
    }
    if let Some(cd) = channel_data {
        out.extend_from_slice(b"\"channel_data\":");
        push_str(out, cd);
        out.push(b',');
    }
    out.extend_from_slice(b"\"channel\":");
    push_str(out, channel);
    out.extend_from_slice(b"}}");
}

/// Client side: `{"event":"pusher:unsubscribe","data":{"channel":..}}`.
pub fn encode_unsubscribe(out: &mut Vec<u8>, channel: &str) {
    out.extend_from_slice(b"{\"event\":\"pusher:unsubscribe\",\"data\":{\"channel\":");
    push_str(out, channel);
    out.extend_from_slice(b"}}");
}

/// Client side: `{"event":"pusher:signin","data":{"auth":..,"user_data":..}}`.
pub fn encode_signin(out: &mut Vec<u8>, auth: &str, user_data: &str) {
    out.extend_from_slice(b"{\"event\":\"pusher:signin\",\"data\":{\"auth\":");
    push_str(out, auth);
    out.extend_from_slice(b",\"user_data\":");
    push_str(out, user_data);
    out.extend_from_slice(b"}}");
}

/// Client side: a client event, `data` JSON text written as is.
pub fn encode_client_event(out: &mut Vec<u8>, event: &str, channel: &str, data: &str) {
    out.extend_from_slice(b"{\"event\":");
    push_str(out, event);
    out.extend_from_slice(b",\"data\":");
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(b",\"channel\":");
    push_str(out, channel);
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: usize = 10 * 1024;

    fn ok(frame: &str) -> ClientFrame<'_> {
        decode(frame.as_bytes(), MAX).unwrap()
    }

    fn err(frame: &str) -> FrameError {
        decode(frame.as_bytes(), MAX).unwrap_err()
    }

    fn sub<'a>(channel: &'a str, auth: Option<&'a str>, cd: Option<&'a str>) -> ClientFrame<'a> {
        ClientFrame::Subscribe(Subscribe {
            channel: channel.into(),
            auth: auth.map(Cow::from),
            channel_data: cd.map(Cow::from),
        })
    }

    /// The frames `pusher-js` 8 sends, byte for byte (`JSON.stringify` of
    /// what `send_event` builds; `undefined` fields are left out).
    #[test]
    fn decodes_what_pusher_js_sends() {
        assert_eq!(
            ok(r#"{"event":"pusher:ping","data":{}}"#),
            ClientFrame::Ping
        );
        assert_eq!(
            ok(r#"{"event":"pusher:pong","data":{}}"#),
            ClientFrame::Pong
        );
        assert_eq!(
            ok(r#"{"event":"pusher:subscribe","data":{"auth":"","channel":"my-channel"}}"#),
            sub("my-channel", None, None)
        );
        assert_eq!(
            ok(r#"{"event":"pusher:subscribe","data":{"auth":"k:5f","channel":"private-a"}}"#),
            sub("private-a", Some("k:5f"), None)
        );
        let presence = r#"{"event":"pusher:subscribe","data":{"auth":"k:5f","channel_data":"{\"user_id\":\"1\",\"user_info\":{\"name\":\"A\"}}","channel":"presence-a"}}"#;
        assert_eq!(
            ok(presence),
            sub(
                "presence-a",
                Some("k:5f"),
                Some(r#"{"user_id":"1","user_info":{"name":"A"}}"#)
            )
        );
        assert_eq!(
            ok(r#"{"event":"pusher:unsubscribe","data":{"channel":"private-a"}}"#),
            ClientFrame::Unsubscribe {
                channel: "private-a".into()
            }
        );
        assert_eq!(
            ok(
                r#"{"event":"pusher:signin","data":{"auth":"k:9a","user_data":"{\"id\":\"12345\"}"}}"#
            ),
            ClientFrame::Signin {
                auth: "k:9a".into(),
                user_data: r#"{"id":"12345"}"#.into()
            }
        );
    }

    #[test]
    fn decodes_client_events_with_any_data() {
        for (frame, data) in [
            (
                r#"{"event":"client-typing","data":{"id":1},"channel":"private-a"}"#,
                Some(r#"{"id":1}"#),
            ),
            (
                r#"{"event":"client-typing","data":"hi","channel":"private-a"}"#,
                Some(r#""hi""#),
            ),
            (
                r#"{"event":"client-typing","data":3,"channel":"private-a"}"#,
                Some("3"),
            ),
            (r#"{"event":"client-typing","channel":"private-a"}"#, None),
            (
                r#"{"event":"client-typing","data":null,"channel":"private-a"}"#,
                None,
            ),
        ] {
            let ClientFrame::ClientEvent(e) = ok(frame) else {
                panic!("{frame}")
            };
            assert_eq!(
                (e.event.as_ref(), e.channel.as_ref()),
                ("client-typing", "private-a")
            );
            assert_eq!(e.data, data, "{frame}");
        }
    }

    #[test]
    fn strings_borrow_from_the_frame() {
        let frame = r#"{"event":"pusher:subscribe","data":{"channel":"news","auth":null}}"#;
        let ClientFrame::Subscribe(s) = ok(frame) else {
            panic!()
        };
        assert!(matches!(s.channel, Cow::Borrowed(_)));
        assert_eq!(s.auth, None);
    }

    #[test]
    fn refuses_bad_frames_with_4300() {
        use FrameError::*;
        let big = format!(
            r#"{{"event":"pusher:subscribe","data":{{"channel":"a","auth":"{}"}}}}"#,
            "k".repeat(100 * 1024)
        );
        assert!(matches!(err(&big), TooLarge { max: MAX, .. }));
        assert_eq!(err("not json"), NotJson);
        assert_eq!(err(r#"{"event":"pusher:ping""#), NotJson);
        assert_eq!(err("[1,2]"), NotAnEvent);
        assert_eq!(err(r#"["pusher:ping"]"#), NotAnEvent);
        assert_eq!(err(r#""pusher:ping""#), NotAnEvent);
        assert_eq!(err(r#"{"data":{}}"#), NotAnEvent);
        assert_eq!(err(r#"{"event":7}"#), NotAnEvent);
        let no_object = BadData {
            event: "pusher:subscribe",
            problem: "data must be a JSON object",
        };
        assert_eq!(err(r#"{"event":"pusher:subscribe"}"#), no_object);
        assert_eq!(
            err(r#"{"event":"pusher:subscribe","data":"{\"channel\":\"a\"}"}"#),
            no_object
        );
        assert!(matches!(
            err(r#"{"event":"pusher:subscribe","data":{}}"#),
            BadData { .. }
        ));
        assert!(matches!(
            err(r#"{"event":"pusher:subscribe","data":{"channel":1}}"#),
            BadData { .. }
        ));
        let cd_object = r#"{"event":"pusher:subscribe","data":{"channel":"presence-a","auth":"k:1","channel_data":{"user_id":"1"}}}"#;
        assert!(err(cd_object)
            .to_string()
            .contains("channel_data must be a string"));
        assert!(matches!(
            err(r#"{"event":"pusher:signin","data":{"auth":"k:1"}}"#),
            BadData { .. }
        ));
        assert!(matches!(
            err(r#"{"event":"pusher:unsubscribe","data":{}}"#),
            BadData { .. }
        ));
        assert_eq!(
            err(r#"{"event":"pusher:watchlist","data":{}}"#),
            UnknownEvent("pusher:watchlist".into())
        );
        assert_eq!(
            err(r#"{"event":"pusher_internal:member_added","data":{}}"#),
            UnknownEvent("pusher_internal:member_added".into())
        );
        assert_eq!(
            err(r#"{"event":"my-event","channel":"private-a"}"#),
            NotClientEvent("my-event".into())
        );
        assert_eq!(
            err(r#"{"event":"client-x","data":{}}"#),
            NoChannel("client-x".into())
        );
        assert_eq!(
            err(r#"{"event":"client-x","channel":5}"#),
            NoChannel("client-x".into())
        );
        let long = format!(
            r#"{{"event":"client-{}","channel":"private-a"}}"#,
            "e".repeat(200)
        );
        assert_eq!(err(&long), EventNameTooLong(207));
        let unknown = format!(r#"{{"event":"pusher:{}"}}"#, "é".repeat(90));
        assert!(matches!(err(&unknown), UnknownEvent(n) if n.len() <= 64));
        for e in [NotJson, NotAnEvent, UnknownEvent("x".into())] {
            assert_eq!(e.code().code(), 4300);
        }
    }

    fn name() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_=@,.;\"\\\\é-]{1,30}"
    }

    proptest! {
        #[test]
        fn subscribe_round_trips(channel in name(), auth in proptest::option::of(name()),
                                 cd in proptest::option::of(name())) {
            let mut out = Vec::new();
            encode_subscribe(&mut out, &channel, auth.as_deref(), cd.as_deref());
            let text = String::from_utf8(out).unwrap();
            prop_assert_eq!(ok(&text), sub(&channel, auth.as_deref(), cd.as_deref()));
        }

        #[test]
        fn other_frames_round_trip(channel in name(), auth in name(), user in name(), n in any::<i32>()) {
            let mut out = Vec::new();
            encode_unsubscribe(&mut out, &channel);
            prop_assert_eq!(decode(&out, MAX).unwrap(), ClientFrame::Unsubscribe { channel: channel.as_str().into() });
            out.clear();
            encode_signin(&mut out, &auth, &user);
            prop_assert_eq!(decode(&out, MAX).unwrap(), ClientFrame::Signin { auth: auth.as_str().into(), user_data: user.as_str().into() });
            out.clear();
            let data = serde_json::json!({"n": n, "s": user}).to_string();
            encode_client_event(&mut out, "client-x", &channel, &data);
            let ClientFrame::ClientEvent(e) = decode(&out, MAX).unwrap() else { panic!() };
            prop_assert_eq!(e.channel.as_ref(), channel.as_str());
            prop_assert_eq!(e.data, Some(data.as_str()));
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), max in 0usize..400) {
            let _ = decode(&bytes, max);
        }

        #[test]
        fn never_panics_on_near_frames(event in "(pusher:|pusher_internal:|client-)?[a-z_]{0,12}",
                                       data in "\\PC{0,40}") {
            let frame = format!(r#"{{"event":"{event}","channel":"c","data":{data}}}"#);
            let _ = decode(frame.as_bytes(), MAX);
        }
    }
}
