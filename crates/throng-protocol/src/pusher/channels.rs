//! The HTTP API's channel queries and their answers (`rest-api.md`,
//! "Channels" and "Users"):
//! - `GET /apps/{id}/channels?filter_by_prefix=..&info=user_count`:
//!   `{"channels":{"presence-a":{"user_count":42},"news":{}}}`; `user_count`
//!   only with a `presence-` prefix (else 400, as Pusher answers).
//! - `GET /apps/{id}/channels/{channel}?info=user_count,subscription_count`:
//!   `{"occupied":true,"user_count":42,"subscription_count":51}`;
//!   `user_count` only on presence channels.
//! - `GET /apps/{id}/channels/{channel}/users`: `{"users":[{"id":"1"}]}`,
//!   presence channels only.
//!
//! Also the `info` attributes and per-channel counts the `events` and
//! `batch_events` answers share ([`super::trigger`]).

use super::api_error::{bad, ApiError};
use super::channel::{ChannelType, PREFIX_PRESENCE};
use super::json::{push_str, push_u64};

/// The attributes a request asks for with `info=` (a comma-separated list).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// `user_count`: distinct users (presence channels).
    pub user_count: bool,
    /// `subscription_count`: subscribed sockets.
    pub subscription_count: bool,
}

impl Info {
    /// Reads an `info` list.
    pub fn parse(list: &str) -> Result<Info, ApiError> {
        let mut info = Info::default();
        for attribute in list.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            match attribute {
                "user_count" => info.user_count = true,
                "subscription_count" => info.subscription_count = true,
                other => {
                    return Err(bad(format!(
                        "Unknown info attribute {:?}: ask for user_count and/or subscription_count",
                        other.chars().take(40).collect::<String>()
                    )))
                }
            }
        }
        Ok(info)
    }

    /// Whether any attribute was asked for.
    pub fn any(self) -> bool {
        self.user_count || self.subscription_count
    }
}

/// One channel's counts in an answer; `None` is left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelCounts {
    /// Distinct users.
    pub user_count: Option<u64>,
    /// Subscribed sockets.
    pub subscription_count: Option<u64>,
}

/// Writes `{"user_count":..,"subscription_count":..}` (the counts present).
pub(crate) fn write_counts(out: &mut Vec<u8>, counts: ChannelCounts) {
    out.push(b'{');
    if let Some(n) = counts.user_count {
        out.extend_from_slice(b"\"user_count\":");
        push_u64(out, n);
    }
    if let Some(n) = counts.subscription_count {
        if counts.user_count.is_some() {
            out.push(b',');
        }
        out.extend_from_slice(b"\"subscription_count\":");
        push_u64(out, n);
    }
    out.push(b'}');
}

/// A `GET /channels` request's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelsQuery<'q> {
    /// Only channels whose names start with this.
    pub prefix: Option<&'q str>,
    /// Whether to answer each channel's `user_count`.
    pub user_count: bool,
}

/// Reads `GET /channels`'s `filter_by_prefix` and `info`.
pub fn channels_query<'q>(
    filter_by_prefix: Option<&'q str>,
    info: Option<&str>,
) -> Result<ChannelsQuery<'q>, ApiError> {
    let info = Info::parse(info.unwrap_or(""))?;
    if info.subscription_count {
        return Err(bad(
            "subscription_count is not available for a list of channels: ask one channel, GET /channels/{channel}",
        ));
    }
    let prefix = filter_by_prefix.filter(|p| !p.is_empty());
    if info.user_count && !prefix.is_some_and(|p| p.starts_with(PREFIX_PRESENCE)) {
        return Err(bad(
            "user_count is only available for presence channels: add filter_by_prefix=presence-",
        ));
    }
    Ok(ChannelsQuery {
        prefix,
        user_count: info.user_count,
    })
}

/// Reads `GET /channels/{channel}`: the channel's type and the attributes
/// asked for.
pub fn channel_query(channel: &str, info: Option<&str>) -> Result<(ChannelType, Info), ApiError> {
    let kind = channel_type(channel)?;
    let info = Info::parse(info.unwrap_or(""))?;
    if info.user_count && !kind.is_presence() {
        return Err(bad(
            "user_count is only available for presence channels: leave it out of info",
        ));
    }
    Ok((kind, info))
}

/// Reads `GET /channels/{channel}/users`: the channel must be a presence
/// channel.
pub fn users_query(channel: &str) -> Result<ChannelType, ApiError> {
    let kind = channel_type(channel)?;
    if !kind.is_presence() {
        return Err(bad(
            "Users can only be listed on presence channels: ask a channel whose name starts with presence-",
        ));
    }
    Ok(kind)
}

/// A channel name from a request, or a 400 that says what is wrong with it.
pub(crate) fn channel_type(channel: &str) -> Result<ChannelType, ApiError> {
    ChannelType::of(channel).map_err(|e| {
        let shown: String = channel.chars().take(60).collect();
        bad(format!("Invalid channel {shown:?}: {e}"))
    })
}

/// `{"channels":{name: {"user_count": n} or {}}}`.
pub fn encode_channels<'c>(
    out: &mut Vec<u8>,
    channels: impl IntoIterator<Item = (&'c str, Option<u64>)>,
) {
    out.extend_from_slice(b"{\"channels\":{");
    for (i, (name, user_count)) in channels.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_str(out, name);
        out.push(b':');
        write_counts(
            out,
            ChannelCounts {
                user_count,
                subscription_count: None,
            },
        );
    }
    out.extend_from_slice(b"}}");
}

/// `{"occupied":..,"user_count":..,"subscription_count":..}`.
pub fn encode_channel(out: &mut Vec<u8>, occupied: bool, counts: ChannelCounts) {
    out.extend_from_slice(b"{\"occupied\":");
    out.extend_from_slice(if occupied { b"true" } else { b"false" });
    if let Some(n) = counts.user_count {
        out.extend_from_slice(b",\"user_count\":");
        push_u64(out, n);
    }
    if let Some(n) = counts.subscription_count {
        out.extend_from_slice(b",\"subscription_count\":");
        push_u64(out, n);
    }
    out.push(b'}');
}

/// `{"users":[{"id":..},..]}`.
pub fn encode_users<'u>(out: &mut Vec<u8>, ids: impl IntoIterator<Item = &'u str>) {
    out.extend_from_slice(b"{\"users\":[");
    for (i, id) in ids.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"id\":");
        push_str(out, id);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn info_lists() {
        assert_eq!(Info::parse(""), Ok(Info::default()));
        let both = Info::parse("user_count,subscription_count").unwrap();
        assert!(both.user_count && both.subscription_count && both.any());
        assert!(Info::parse("user_count, ").unwrap().user_count);
        assert!(Info::parse("members")
            .unwrap_err()
            .message()
            .contains("\"members\""));
    }

    #[test]
    fn channels_queries() {
        let q = channels_query(Some("presence-"), Some("user_count")).unwrap();
        assert_eq!(
            q,
            ChannelsQuery {
                prefix: Some("presence-"),
                user_count: true
            }
        );
        assert_eq!(
            channels_query(None, None).unwrap(),
            ChannelsQuery {
                prefix: None,
                user_count: false
            }
        );
        assert_eq!(channels_query(Some(""), None).unwrap().prefix, None);
        for (prefix, info) in [
            (None, "user_count"),
            (Some("private-"), "user_count"),
            (None, "subscription_count"),
        ] {
            assert_eq!(
                channels_query(prefix, Some(info)).unwrap_err().status(),
                400
            );
        }
    }

    #[test]
    fn channel_and_users_queries() {
        let (kind, info) =
            channel_query("presence-a", Some("user_count,subscription_count")).unwrap();
        assert!(kind.is_presence() && info.user_count && info.subscription_count);
        assert!(
            channel_query("news", Some("subscription_count"))
                .unwrap()
                .1
                .subscription_count
        );
        assert_eq!(
            channel_query("news", Some("user_count"))
                .unwrap_err()
                .status(),
            400
        );
        assert!(channel_query("bad name", None)
            .unwrap_err()
            .message()
            .starts_with("Invalid channel \"bad name\""));
        assert!(users_query("presence-a").is_ok());
        assert_eq!(users_query("private-a").unwrap_err().status(), 400);
    }

    #[test]
    fn answers() {
        let channels = [("presence-a", Some(42)), ("news", None)];
        assert_eq!(
            text(|o| encode_channels(o, channels)),
            r#"{"channels":{"presence-a":{"user_count":42},"news":{}}}"#
        );
        assert_eq!(text(|o| encode_channels(o, [])), r#"{"channels":{}}"#);
        let counts = ChannelCounts {
            user_count: Some(42),
            subscription_count: Some(51),
        };
        assert_eq!(
            text(|o| encode_channel(o, true, counts)),
            r#"{"occupied":true,"user_count":42,"subscription_count":51}"#
        );
        let subs = ChannelCounts {
            user_count: None,
            subscription_count: Some(0),
        };
        assert_eq!(
            text(|o| encode_channel(o, false, subs)),
            r#"{"occupied":false,"subscription_count":0}"#
        );
        assert_eq!(
            text(|o| encode_channel(o, false, ChannelCounts::default())),
            r#"{"occupied":false}"#
        );
        assert_eq!(
            text(|o| encode_users(o, ["1", "a\"b"])),
            r#"{"users":[{"id":"1"},{"id":"a\"b"}]}"#
        );
        assert_eq!(text(|o| encode_users(o, [])), r#"{"users":[]}"#);
    }
}
