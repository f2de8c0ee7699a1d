//! What a client says about its user: a presence subscription's
//! `channel_data` (`{"user_id": .., "user_info": ..}`) and a sign-in's
//! `user_data` (`{"id": .., ...}`), both JSON text inside a JSON string,
//! signed by the app's backend as that text.
//!
//! Pusher's limits (docs/channels/using_channels/presence-channels.md):
//! 100 members per presence channel, a user id of at most 128 characters
//! (a number is allowed, as its text), a `user_info` of at most 1 KB.
//! Sign-in ids must be non-empty strings (`pusher-js`'s src/core/user.ts
//! drops a sign-in whose id is not one); the same 128-character bound
//! applies, so a user's `#server-to-user-{id}` channel is always a valid
//! name.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::json::{is_object, raw_str};

/// Pusher's limit on members of one presence channel (a per-app setting's
/// default).
pub const MAX_MEMBERS: usize = 100;

/// The longest user id, in bytes.
pub const MAX_USER_ID_LEN: usize = 128;

/// The largest `user_info`, in bytes of JSON.
pub const MAX_USER_INFO_BYTES: usize = 1024;

/// Why a `channel_data` or `user_data` was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PresenceError {
    #[error("{0} is not a JSON object: the app's backend must sign JSON text like {{\"user_id\":\"1\"}}")]
    NotAnObject(&'static str),
    #[error("channel_data has no user_id: a presence subscription needs {{\"user_id\": .., \"user_info\": ..}}")]
    NoUserId,
    #[error("user_data has no id: a sign-in needs {{\"id\":\"..\"}} with the id as a string")]
    NoId,
    #[error("the user id is not 1 to 128 characters of text (or a number)")]
    BadUserId,
    #[error("user_info is {0} bytes, over the limit of 1024: send less about the user")]
    UserInfoTooLarge(usize),
}

/// A presence channel member as a subscription declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member<'a> {
    /// The user id (a number is kept as its text).
    pub user_id: Cow<'a, str>,
    /// The user's info, JSON text as sent (`None` when absent or `null`).
    pub user_info: Option<&'a str>,
}

/// A signed-in user as a `pusher:signin` declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SigninUser<'a> {
    /// The user id.
    pub id: Cow<'a, str>,
}

/// Whether `id` may be a user id: 1 to 128 bytes, no control characters.
pub fn is_valid_user_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_USER_ID_LEN && !id.chars().any(char::is_control)
}

#[derive(Deserialize)]
struct ChannelData<'a> {
    #[serde(borrow, default)]
    user_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    user_info: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct UserData<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
}

/// Reads a presence subscription's `channel_data` (the text inside the
/// string the client sent, exactly what the backend signed).
pub fn parse_channel_data(text: &str) -> Result<Member<'_>, PresenceError> {
    let not_object = PresenceError::NotAnObject("channel_data");
    if !is_object(text.as_bytes()) {
        return Err(not_object);
    }
    let data: ChannelData<'_> = serde_json::from_str(text).map_err(|_| not_object)?;
    let raw = data.user_id.ok_or(PresenceError::NoUserId)?;
    let user_id = match raw.get().as_bytes().first() {
        Some(b'"') => raw_str(raw).ok_or(PresenceError::BadUserId)?,
        Some(b'-' | b'0'..=b'9') => Cow::Borrowed(raw.get()),
        _ => return Err(PresenceError::BadUserId),
    };
    if !is_valid_user_id(&user_id) {
        return Err(PresenceError::BadUserId);
    }
    let user_info = data.user_info.map(RawValue::get);
    if let Some(info) = user_info {
        if info.len() > MAX_USER_INFO_BYTES {
            return Err(PresenceError::UserInfoTooLarge(info.len()));
        }
    }
    Ok(Member { user_id, user_info })
}

/// Reads a sign-in's `user_data` (the text inside the string the client
/// sent, exactly what the backend signed).
pub fn parse_user_data(text: &str) -> Result<SigninUser<'_>, PresenceError> {
    let not_object = PresenceError::NotAnObject("user_data");
    if !is_object(text.as_bytes()) {
        return Err(not_object);
    }
    let data: UserData<'_> = serde_json::from_str(text).map_err(|_| not_object)?;
    let id = data.id.and_then(raw_str).ok_or(PresenceError::NoId)?;
    if !is_valid_user_id(&id) {
        return Err(PresenceError::BadUserId);
    }
    Ok(SigninUser { id })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_members_as_pusher_documents_them() {
        // Pusher's worked example: a numeric user id.
        let m =
            parse_channel_data(r#"{"user_id":10,"user_info":{"name":"Mr. Channels"}}"#).unwrap();
        assert_eq!(m.user_id, "10");
        assert_eq!(m.user_info, Some(r#"{"name":"Mr. Channels"}"#));
        let m = parse_channel_data(r#"{ "user_id": "a\"b", "user_info": null }"#).unwrap();
        assert_eq!((m.user_id.as_ref(), m.user_info), ("a\"b", None));
        let m = parse_channel_data(r#"{"user_id":"u1"}"#).unwrap();
        assert!(matches!(m.user_id, Cow::Borrowed("u1")));
    }

    #[test]
    fn refuses_bad_channel_data() {
        use PresenceError::*;
        let err = |t: &str| parse_channel_data(t).unwrap_err();
        assert_eq!(err("not json"), NotAnObject("channel_data"));
        assert_eq!(err("[1]"), NotAnObject("channel_data"));
        assert_eq!(err(r#"{"user_info":{}}"#), NoUserId);
        assert_eq!(err(r#"{"user_id":null}"#), NoUserId);
        assert_eq!(err(r#"{"user_id":""}"#), BadUserId);
        assert_eq!(err(r#"{"user_id":true}"#), BadUserId);
        assert_eq!(err(r#"{"user_id":{}}"#), BadUserId);
        assert_eq!(
            err(&format!(r#"{{"user_id":"{}"}}"#, "u".repeat(129))),
            BadUserId
        );
        let big = format!(r#"{{"user_id":"1","user_info":"{}"}}"#, "x".repeat(1023));
        assert_eq!(err(&big), UserInfoTooLarge(1025));
    }

    #[test]
    fn reads_signin_user_data() {
        // Pusher's worked example, and the Python SDK's spaced JSON.
        assert_eq!(parse_user_data(r#"{"id":"12345"}"#).unwrap().id, "12345");
        assert_eq!(
            parse_user_data(r#"{"id": "7", "name": "x"}"#).unwrap().id,
            "7"
        );
        assert_eq!(parse_user_data(r#"{"id":7}"#), Err(PresenceError::NoId));
        assert_eq!(parse_user_data(r#"{"name":"x"}"#), Err(PresenceError::NoId));
        assert_eq!(
            parse_user_data(r#"{"id":""}"#),
            Err(PresenceError::BadUserId)
        );
        assert_eq!(
            parse_user_data(r#"{"id":"a\u0000"}"#),
            Err(PresenceError::BadUserId)
        );
        assert_eq!(
            parse_user_data("1"),
            Err(PresenceError::NotAnObject("user_data"))
        );
        assert_eq!(
            parse_user_data(r#"["7"]"#),
            Err(PresenceError::NotAnObject("user_data"))
        );
    }

    proptest! {
        #[test]
        fn string_ids_round_trip(id in "\\PC{1,30}", info in proptest::option::of("[a-z]{0,20}")) {
            let info = info.map(|i| serde_json::json!({"name": i}));
            let text = serde_json::json!({"user_id": id, "user_info": info}).to_string();
            let m = parse_channel_data(&text).unwrap();
            prop_assert_eq!(m.user_id.as_ref(), id.as_str());
            prop_assert_eq!(m.user_info.map(str::to_string), info.map(|i| i.to_string()));
        }

        #[test]
        fn never_panics(text in "\\PC{0,80}") {
            let _ = parse_channel_data(&text);
            let _ = parse_user_data(&text);
        }
    }
}
