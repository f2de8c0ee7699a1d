//! The HTTP API's triggers: `POST /apps/{id}/events` and
//! `POST /apps/{id}/batch_events` bodies, with Pusher's bounds, and their
//! answers (`rest-api.md`, "Events").
//!
//! An event is `{"name": .., "data": .., "channels": [..] | "channel": ..,
//! "socket_id": .., "info": ..}`: up to 100 channels, a name of up to 200
//! characters, `data` (a string; the SDKs always send one) of up to the
//! app's limit, 10 KB by default, counted as the string's length (413 when
//! over). A batch is `{"batch": [event, ..]}`, each with its own `channel`,
//! at most 10 by default. `data` is kept as the body's JSON token
//! ([`Data::Literal`]) so the broadcast frame copies it as it came.
//!
//! Choices where Pusher's reference is silent: `channels` wins when both
//! `channels` and `channel` are given (as Soketi does); a channel listed
//! twice gets the event once (the answer lists unique channels); names
//! starting with `pusher:` or `pusher_internal:` are refused, since clients
//! would take them for the protocol's own events; `data` that is not a
//! string (Sockudo and Soketi accept objects) is sent as the string of its
//! JSON text, which clients parse back into the object.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::api_error::{bad, ApiError};
use super::channels::{channel_type, write_counts, ChannelCounts, Info};
use super::client::MAX_EVENT_NAME_LEN;
use super::event;
use super::json::{is_object, push_str, raw_str};
use super::server::Data;
use super::socket_id;

/// The most channels one event goes to.
pub const MAX_CHANNELS: usize = 100;

/// The default most events in one batch (Pusher's multi-tenant clusters).
pub const MAX_BATCH: usize = 10;

/// The default largest `data`, in bytes (Pusher's 10 KB).
pub const MAX_EVENT_BYTES: usize = 10 * 1024;

/// Per-app bounds on triggers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest `data`, in bytes of the string (413 when over).
    pub max_event_bytes: usize,
    /// The most events in a batch.
    pub max_batch: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_event_bytes: MAX_EVENT_BYTES,
            max_batch: MAX_BATCH,
        }
    }
}

/// One event to trigger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger<'a> {
    /// The event name.
    pub name: Cow<'a, str>,
    /// The data, as it goes in the frame.
    pub data: Data<'a>,
    /// The channels, each valid and listed once.
    pub channels: Vec<Cow<'a, str>>,
    /// The socket to leave out (a well-formed socket id).
    pub socket_id: Option<Cow<'a, str>>,
    /// The counts to answer with.
    pub info: Info,
}

#[derive(Deserialize)]
struct EventIn<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    #[serde(borrow, default)]
    channels: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    channel: Option<&'a RawValue>,
    #[serde(borrow, default)]
    socket_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    info: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct BatchIn<'a> {
    #[serde(borrow, default)]
    batch: Option<Vec<&'a RawValue>>,
}

/// Reads a `POST /events` body.
pub fn parse_events<'a>(body: &'a [u8], limits: &Limits) -> Result<Trigger<'a>, ApiError> {
    let not_object = || {
        bad("The body is not a JSON object: send {\"name\": .., \"data\": .., \"channels\": [..]}")
    };
    if !is_object(body) {
        return Err(not_object());
    }
    let event: EventIn<'a> = serde_json::from_slice(body).map_err(|_| not_object())?;
    check(event, limits)
}

/// Reads a `POST /batch_events` body.
pub fn parse_batch<'a>(body: &'a [u8], limits: &Limits) -> Result<Vec<Trigger<'a>>, ApiError> {
    let not_object = || bad("The body is not a JSON object: send {\"batch\": [event, ..]}");
    if !is_object(body) {
        return Err(not_object());
    }
    let batch: BatchIn<'a> = serde_json::from_slice(body).map_err(|_| not_object())?;
    let batch = batch.batch.filter(|b| !b.is_empty()).ok_or_else(|| {
        bad("Missing batch: send {\"batch\": [event, ..]} with at least one event")
    })?;
    if batch.len() > limits.max_batch {
        return Err(bad(format!(
            "{} events in the batch, over the limit of {}: split the batch",
            batch.len(),
            limits.max_batch
        )));
    }
    let mut triggers = Vec::with_capacity(batch.len());
    for (i, raw) in batch.into_iter().enumerate() {
        let not_object = || bad("The event is not a JSON object").within(&format!("batch[{i}]"));
        if !is_object(raw.get().as_bytes()) {
            return Err(not_object());
        }
        let event: EventIn<'a> = serde_json::from_str(raw.get()).map_err(|_| not_object())?;
        triggers.push(check(event, limits).map_err(|e| e.within(&format!("batch[{i}]")))?);
    }
    Ok(triggers)
}

/// Reads a `POST /users/{user_id}/events` body, `{"name": .., "data": ..}`
/// (and `socket_id`, `info` as for `/events`): an event for the user's own
/// channel, `#server-to-user-{user_id}`, what the SDKs' `sendToUser`
/// triggers through `/events`. A `channel` or `channels` in it is refused.
pub fn parse_user_event<'a>(
    body: &'a [u8],
    user_id: &str,
    limits: &Limits,
) -> Result<Trigger<'a>, ApiError> {
    let not_object = || bad("The body is not a JSON object: send {\"name\": .., \"data\": ..}");
    if !is_object(body) {
        return Err(not_object());
    }
    let event: EventIn<'a> = serde_json::from_slice(body).map_err(|_| not_object())?;
    let channel = format!("{}{user_id}", super::channel::SERVER_TO_USER_PREFIX);
    check_with(event, limits, |list, one| {
        if list.is_some() || one.is_some() {
            return Err(bad(
                "A user's events go to the user's own channel: leave out channel and channels",
            ));
        }
        channel_type(&channel)?;
        Ok(vec![Cow::Owned(channel)])
    })
}

/// Checks one event against Pusher's rules and `limits`.
fn check<'a>(event: EventIn<'a>, limits: &Limits) -> Result<Trigger<'a>, ApiError> {
    check_with(event, limits, channels)
}

/// [`check`], with the event's channels read by `channels`.
fn check_with<'a>(
    event: EventIn<'a>,
    limits: &Limits,
    channels: impl FnOnce(
        Option<Vec<&'a RawValue>>,
        Option<&'a RawValue>,
    ) -> Result<Vec<Cow<'a, str>>, ApiError>,
) -> Result<Trigger<'a>, ApiError> {
    let name = event
        .name
        .and_then(raw_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad("Missing name: give the event's name as a string"))?;
    if name.chars().count() > MAX_EVENT_NAME_LEN {
        return Err(bad(format!(
            "The event name is {} characters long, over the limit of 200: use a shorter name",
            name.chars().count()
        )));
    }
    if name.starts_with(event::PUSHER_PREFIX) || name.starts_with(event::INTERNAL_PREFIX) {
        return Err(bad(
            "Event names starting with pusher: or pusher_internal: are the protocol's own: use another name",
        ));
    }
    let data = event
        .data
        .filter(|d| d.get() != "null")
        .map(|d| Data::from_json(d.get()))
        .ok_or_else(|| bad("Missing data: give the event's data, a string (JSON text, usually)"))?;
    if data.len() > limits.max_event_bytes {
        return Err(ApiError::TooLarge(format!(
            "The data of event {:?} is {} bytes, over the app's limit of {}: send less data, or raise the app's max_event_bytes",
            name.chars().take(60).collect::<String>(),
            data.len(),
            limits.max_event_bytes
        )));
    }
    let channels = channels(event.channels, event.channel)?;
    let socket_id = match event.socket_id.filter(|s| s.get() != "null") {
        None => None,
        Some(raw) => Some(raw_str(raw).filter(|s| socket_id::is_well_formed(s)).ok_or_else(|| {
            bad("Invalid socket_id: a socket id is two numbers joined by a dot, like 1234.5678")
        })?),
    };
    let info = match event.info.filter(|i| i.get() != "null") {
        None => Info::default(),
        Some(raw) => Info::parse(&raw_str(raw).ok_or_else(|| bad("info must be a string"))?)?,
    };
    Ok(Trigger {
        name,
        data,
        channels,
        socket_id,
        info,
    })
}

/// The event's channels: `channels` if given, else `channel`; each valid,
/// each once, at most [`MAX_CHANNELS`].
fn channels<'a>(
    list: Option<Vec<&'a RawValue>>,
    one: Option<&'a RawValue>,
) -> Result<Vec<Cow<'a, str>>, ApiError> {
    let raws =
        match (list, one) {
            (Some(list), _) if !list.is_empty() => list,
            (_, Some(one)) => vec![one],
            _ => return Err(bad(
                "Missing channels: give \"channels\", a list of up to 100 names, or \"channel\"",
            )),
        };
    if raws.len() > MAX_CHANNELS {
        return Err(bad(format!(
            "{} channels, over the limit of 100 per event: trigger to fewer channels at a time",
            raws.len()
        )));
    }
    let mut channels: Vec<Cow<'a, str>> = Vec::with_capacity(raws.len());
    for raw in raws {
        let name = raw_str(raw).ok_or_else(|| bad("A channel name is not a string"))?;
        channel_type(&name)?;
        if !channels.contains(&name) {
            channels.push(name);
        }
    }
    Ok(channels)
}

/// The answer to `POST /events`: `{}`, or with `info` asked for,
/// `{"channels":{name: counts}}` for each channel triggered to.
pub fn encode_events_answer<'c>(
    out: &mut Vec<u8>,
    info: Info,
    channels: impl IntoIterator<Item = (&'c str, ChannelCounts)>,
) {
    if !info.any() {
        out.extend_from_slice(b"{}");
        return;
    }
    out.extend_from_slice(b"{\"channels\":{");
    for (i, (name, counts)) in channels.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_str(out, name);
        out.push(b':');
        write_counts(out, counts);
    }
    out.extend_from_slice(b"}}");
}

/// The answer to `POST /batch_events`: `{}`, or when any event asked for
/// `info`, `{"batch":[counts or {}, ..]}` in the batch's order.
pub fn encode_batch_answer(out: &mut Vec<u8>, items: &[Option<ChannelCounts>]) {
    if items.iter().all(Option::is_none) {
        out.extend_from_slice(b"{}");
        return;
    }
    out.extend_from_slice(b"{\"batch\":[");
    for (i, counts) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_counts(out, counts.unwrap_or_default());
    }
    out.extend_from_slice(b"]}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn events(body: &str) -> Result<Trigger<'_>, ApiError> {
        parse_events(body.as_bytes(), &Limits::default())
    }

    /// What the Node and Python SDKs send for `trigger`.
    #[test]
    fn reads_sdk_triggers() {
        let t = events(r#"{"name":"foo","data":"{\"some\":\"data\"}","channels":["project-3"]}"#)
            .unwrap();
        assert_eq!(t.name, "foo");
        assert_eq!(t.data, Data::Literal(r#""{\"some\":\"data\"}""#));
        assert_eq!(t.channels, ["project-3"]);
        assert_eq!((t.socket_id, t.info), (None, Info::default()));
        let t = events(r#"{"name": "e", "channels": ["a", "b", "a"], "data": "x", "socket_id": "123.456", "info": "user_count,subscription_count"}"#).unwrap();
        assert_eq!(t.channels, ["a", "b"]);
        assert_eq!(t.socket_id.as_deref(), Some("123.456"));
        assert!(t.info.user_count && t.info.subscription_count);
        // `channel` alone, `channels` over `channel`, object data, sendToUser.
        assert_eq!(
            events(r#"{"name":"e","data":"x","channel":"one"}"#)
                .unwrap()
                .channels,
            ["one"]
        );
        assert_eq!(
            events(r#"{"name":"e","data":"x","channel":"one","channels":["two"]}"#)
                .unwrap()
                .channels,
            ["two"]
        );
        assert_eq!(
            events(r#"{"name":"e","data":{"a":1},"channel":"one"}"#)
                .unwrap()
                .data,
            Data::Text(r#"{"a":1}"#)
        );
        assert!(events(r##"{"name":"e","data":"x","channels":["#server-to-user-42"]}"##).is_ok());
    }

    #[test]
    fn reads_user_events() {
        let limits = Limits::default();
        let t = parse_user_event(br#"{"name":"e","data":"{\"a\":1}"}"#, "u-7", &limits).unwrap();
        assert_eq!(t.channels, ["#server-to-user-u-7"]);
        assert_eq!(t.name, "e");
        let status = |body: &str, user: &str| {
            parse_user_event(body.as_bytes(), user, &limits)
                .unwrap_err()
                .status()
        };
        assert_eq!(status(r#"{"name":"e","data":"x","channel":"a"}"#, "u"), 400);
        assert_eq!(status(r#"{"name":"e"}"#, "u"), 400);
        assert_eq!(status(r#"{"name":"e","data":"x"}"#, ""), 400);
        assert_eq!(status("[]", "u"), 400);
        let big = format!(r#"{{"name":"e","data":"{}"}}"#, "x".repeat(20_000));
        assert_eq!(status(&big, "u"), 413);
    }

    #[test]
    fn refuses_with_pushers_statuses() {
        let status = |body: &str| events(body).unwrap_err().status();
        assert_eq!(status("nope"), 400);
        assert_eq!(status("[]"), 400);
        assert_eq!(status(r#"["e","x",["a"]]"#), 400);
        assert_eq!(status(r#"{"data":"x","channel":"a"}"#), 400);
        assert_eq!(status(r#"{"name":"","data":"x","channel":"a"}"#), 400);
        assert_eq!(status(r#"{"name":"e","channel":"a"}"#), 400);
        assert_eq!(status(r#"{"name":"e","data":null,"channel":"a"}"#), 400);
        assert_eq!(status(r#"{"name":"e","data":"x"}"#), 400);
        assert_eq!(status(r#"{"name":"e","data":"x","channels":[]}"#), 400);
        assert_eq!(status(r#"{"name":"e","data":"x","channels":[1]}"#), 400);
        assert_eq!(
            status(r#"{"name":"e","data":"x","channel":"bad name"}"#),
            400
        );
        assert_eq!(
            status(r#"{"name":"e","data":"x","channel":"a","socket_id":"1"}"#),
            400
        );
        assert_eq!(
            status(r#"{"name":"e","data":"x","channel":"a","info":"members"}"#),
            400
        );
        assert_eq!(
            status(r#"{"name":"pusher:foo","data":"x","channel":"a"}"#),
            400
        );
        assert_eq!(
            status(r#"{"name":"pusher_internal:member_added","data":"x","channel":"a"}"#),
            400
        );
        let long = format!(
            r#"{{"name":"{}","data":"x","channel":"a"}}"#,
            "n".repeat(201)
        );
        assert_eq!(status(&long), 400);
        let many: Vec<String> = (0..101).map(|i| format!("c{i}")).collect();
        let many = serde_json::json!({"name": "e", "data": "x", "channels": many}).to_string();
        assert!(events(&many)
            .unwrap_err()
            .message()
            .contains("101 channels"));
        let hundred: Vec<String> = (0..100).map(|i| format!("c{i}")).collect();
        assert!(events(
            &serde_json::json!({"name": "e", "data": "x", "channels": hundred}).to_string()
        )
        .is_ok());
    }

    #[test]
    fn data_is_bounded_by_its_string_length() {
        let at = |n: usize, s: &str| {
            serde_json::json!({"name": "e", "channel": "a", "data": s.repeat(n)}).to_string()
        };
        assert!(events(&at(10240, "x")).is_ok());
        let over = events(&at(10241, "x")).unwrap_err();
        assert_eq!(over.status(), 413);
        assert!(
            over.message().contains("10241 bytes") && over.message().contains("max_event_bytes")
        );
        // Escapes count as the characters they stand for: 10240 quotes fit.
        assert!(events(&at(10240, "\"")).is_ok());
        let small = Limits {
            max_event_bytes: 4,
            ..Limits::default()
        };
        assert_eq!(
            parse_events(at(5, "x").as_bytes(), &small)
                .unwrap_err()
                .status(),
            413
        );
    }

    #[test]
    fn batches() {
        let body = r#"{"batch":[{"channel":"a","name":"e1","data":"1"},{"channel":"b","name":"e2","data":"2","socket_id":"1.2","info":"subscription_count"}]}"#;
        let batch = parse_batch(body.as_bytes(), &Limits::default()).unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(
            (
                batch[1].channels[0].as_ref(),
                batch[1].info.subscription_count
            ),
            ("b", true)
        );
        let eleven: Vec<_> = (0..11)
            .map(|_| serde_json::json!({"channel": "a", "name": "e", "data": "x"}))
            .collect();
        let eleven = serde_json::json!({ "batch": eleven }).to_string();
        assert!(parse_batch(eleven.as_bytes(), &Limits::default())
            .unwrap_err()
            .message()
            .contains("11 events"));
        for bad in [
            r#"{}"#,
            r#"{"batch":[]}"#,
            r#"{"batch":{}}"#,
            "x",
            r#"[[{"channel":"a","name":"e","data":"1"}]]"#,
            r#"{"batch":[["e","1"]]}"#,
        ] {
            assert_eq!(
                parse_batch(bad.as_bytes(), &Limits::default())
                    .unwrap_err()
                    .status(),
                400,
                "{bad}"
            );
        }
        let second_bad =
            r#"{"batch":[{"channel":"a","name":"e","data":"1"},{"channel":"a","name":"e"}]}"#;
        assert!(parse_batch(second_bad.as_bytes(), &Limits::default())
            .unwrap_err()
            .message()
            .starts_with("batch[1]: Missing data"));
        let second_big = format!(
            r#"{{"batch":[{{"channel":"a","name":"e","data":"{}"}}]}}"#,
            "x".repeat(10241)
        );
        assert_eq!(
            parse_batch(second_big.as_bytes(), &Limits::default())
                .unwrap_err()
                .status(),
            413
        );
    }

    #[test]
    fn answers() {
        let text = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut out = Vec::new();
            f(&mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            text(&|o| encode_events_answer(o, Info::default(), [])),
            "{}"
        );
        let info = Info {
            user_count: true,
            subscription_count: true,
        };
        let counts = [
            (
                "presence-foobar",
                ChannelCounts {
                    user_count: Some(42),
                    subscription_count: Some(51),
                },
            ),
            (
                "another",
                ChannelCounts {
                    user_count: None,
                    subscription_count: Some(13),
                },
            ),
        ];
        assert_eq!(
            text(&|o| encode_events_answer(o, info, counts)),
            r#"{"channels":{"presence-foobar":{"user_count":42,"subscription_count":51},"another":{"subscription_count":13}}}"#
        );
        assert_eq!(text(&|o| encode_batch_answer(o, &[None, None])), "{}");
        let items = [
            Some(ChannelCounts {
                user_count: Some(42),
                subscription_count: Some(51),
            }),
            None,
        ];
        assert_eq!(
            text(&|o| encode_batch_answer(o, &items)),
            r#"{"batch":[{"user_count":42,"subscription_count":51},{}]}"#
        );
    }

    proptest! {
        #[test]
        fn valid_triggers_read_back(name in "[a-z-]{1,20}", data in "\\PC{0,60}",
                                    channels in proptest::collection::btree_set("[a-z0-9_-]{1,20}", 1..5)) {
            let channels: Vec<String> = channels.into_iter().collect();
            let body = serde_json::json!({"name": name, "data": data, "channels": channels}).to_string();
            let t = events(&body).unwrap();
            prop_assert_eq!(t.name.as_ref(), name.as_str());
            prop_assert_eq!(t.data.len(), data.len());
            let Data::Literal(literal) = t.data else { panic!() };
            prop_assert_eq!(serde_json::from_str::<String>(literal).unwrap(), data);
            prop_assert_eq!(t.channels, channels);
        }

        #[test]
        fn never_panics(body in "\\PC{0,200}") {
            let _ = events(&body);
            let _ = parse_batch(body.as_bytes(), &Limits::default());
        }
    }
}
