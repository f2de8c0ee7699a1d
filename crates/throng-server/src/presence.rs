//! Presence rules in the server: what turns presence on for topic patterns
//! without Rust (`--presence`, `[[presence]]` in TOML). The handle a
//! channel callback gets from `socket.presence()` is part of the channel
//! API ([`Presence`](crate::channel::Presence) in `channel.rs`). The
//! node's state and the cluster are `throng_pubsub::presence`; applying
//! both to a socket (the join's presences, untracked when the join ends)
//! is `socket/presence.rs`.

use serde::Deserialize;
use throng_protocol::Payload;
pub use throng_pubsub::presence::Mode;

use crate::channel::{topic_matches, Who};

/// Where a rule takes a presence's key from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// The authenticated user (`Socket::user_id`).
    UserId,
    /// A field of the join's payload (`param:user`: phoenix.js
    /// `socket.channel(topic, {user: ..})`).
    Param(String),
    /// A socket param of the connect URL (`connect:user`).
    ConnectParam(String),
}

/// Presence for the topics matching `pattern`: each join is sent the
/// topic's presence and tracked under its key (a join without a key
/// watches only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PresenceRule {
    /// An exact topic, or a prefix ending in `*` (as the router's).
    pub pattern: String,
    pub key: KeySource,
    pub mode: Mode,
}

/// A `[[presence]]` table of the config file.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    pub pattern: String,
    pub key: String,
    #[serde(default)]
    pub mode: Option<String>,
}

impl KeySource {
    fn parse(s: &str) -> Result<KeySource, String> {
        match s.split_once(':') {
            None if s == "user_id" => Ok(KeySource::UserId),
            Some(("param", name)) if !name.is_empty() => Ok(KeySource::Param(name.into())),
            Some(("connect", name)) if !name.is_empty() => Ok(KeySource::ConnectParam(name.into())),
            _ => Err(format!(
                "presence key {s:?}: expected user_id, param:NAME (a join param, e.g. \
                 param:user) or connect:NAME (a socket param)"
            )),
        }
    }

    fn spec(&self) -> String {
        match self {
            KeySource::UserId => "user_id".into(),
            KeySource::Param(n) => format!("param:{n}"),
            KeySource::ConnectParam(n) => format!("connect:{n}"),
        }
    }
}

fn parse_mode(s: Option<&str>) -> Result<Mode, String> {
    match s {
        None | Some("list") => Ok(Mode::List),
        Some("count") => Ok(Mode::Count),
        Some(other) => Err(format!("presence mode {other:?}: expected list or count")),
    }
}

impl PresenceRule {
    /// `PATTERN=KEY` or `PATTERN=KEY/count` (the `--presence` flag).
    pub fn parse(spec: &str) -> Result<PresenceRule, String> {
        let (pattern, key) = spec.split_once('=').ok_or_else(|| {
            let pattern = if spec.is_empty() { "rooms:lobby" } else { spec };
            format!(
                "--presence {spec:?}: expected PATTERN=KEY[/count], the topics and what keys \
                 each join's presence, e.g. --presence '{pattern}=param:user' (the join's \
                 `user` param), '{pattern}=user_id' (the authenticated user) or \
                 '{pattern}=user_id/count' (a count instead of the list)"
            )
        })?;
        let (key, mode) = match key.rsplit_once('/') {
            Some((k, m @ ("count" | "list"))) => (k, Some(m)),
            _ => (key, None),
        };
        PresenceRule::from_file(RuleFile {
            pattern: pattern.into(),
            key: key.into(),
            mode: mode.map(Into::into),
        })
    }

    pub fn from_file(f: RuleFile) -> Result<PresenceRule, String> {
        if f.pattern.is_empty() {
            return Err("a presence pattern cannot be empty".into());
        }
        Ok(PresenceRule {
            pattern: f.pattern,
            key: KeySource::parse(&f.key)?,
            mode: parse_mode(f.mode.as_deref())?,
        })
    }

    /// The rule as the `--presence` flag spells it.
    pub fn spec(&self) -> String {
        let mode = match self.mode {
            Mode::List => "",
            Mode::Count => "/count",
        };
        format!("{}={}{mode}", self.pattern, self.key.spec())
    }

    pub fn matches(&self, topic: &str) -> bool {
        topic_matches(&self.pattern, topic)
    }

    /// The key of a join under this rule, if it has one: a string as it
    /// is, a number as written; anything else (absent, null, an object) is
    /// no key.
    pub fn key_of(&self, payload: Payload<'_>, who: Who<'_>) -> Option<String> {
        match &self.key {
            KeySource::UserId => who.user.map(Into::into),
            KeySource::ConnectParam(name) => {
                who.connect.and_then(|c| c.param(name)).map(Into::into)
            }
            KeySource::Param(name) => {
                let Payload::Json(text) = payload else {
                    return None;
                };
                let map: std::collections::HashMap<
                    std::borrow::Cow<'_, str>,
                    &serde_json::value::RawValue,
                > = serde_json::from_str(text).ok()?;
                let raw = map.get(name.as_str())?.get();
                match raw.as_bytes().first()? {
                    b'"' => serde_json::from_str::<String>(raw).ok(),
                    b'-' | b'0'..=b'9' => Some(raw.to_string()),
                    _ => None,
                }
            }
        }
    }
}

/// The mode for `topic` under `rules` (list unless a count rule matches).
pub(crate) fn mode_for(rules: &[PresenceRule], topic: &str) -> Mode {
    rules
        .iter()
        .find(|r| r.matches(topic))
        .map(|r| r.mode)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_print() {
        let r = PresenceRule::parse("rooms:*=param:user").unwrap();
        assert_eq!(r.key, KeySource::Param("user".into()));
        assert_eq!(r.mode, Mode::List);
        assert!(r.matches("rooms:lobby") && !r.matches("room"));
        let c = PresenceRule::parse("live:*=user_id/count").unwrap();
        assert_eq!((c.key.clone(), c.mode), (KeySource::UserId, Mode::Count));
        for rule in [r, c, PresenceRule::parse("x=connect:name").unwrap()] {
            assert_eq!(PresenceRule::parse(&rule.spec()).unwrap(), rule);
        }
        for bad in ["rooms:*", "a=b", "a=param:", "=user_id", "a=user_id/many"] {
            assert!(PresenceRule::parse(bad).is_err(), "{bad}");
        }
        // The wrong form shows the right one.
        let err = PresenceRule::parse("rooms:lobby").unwrap_err();
        assert!(err.contains("--presence 'rooms:lobby=param:user'"), "{err}");
        assert!(PresenceRule::parse("a=b")
            .unwrap_err()
            .contains("param:user"));
    }

    #[test]
    fn keys_come_from_the_join_or_the_connection() {
        let r = PresenceRule::parse("t=param:user").unwrap();
        let key = |p: &str| r.key_of(Payload::Json(p), Who::default());
        assert_eq!(key(r#"{"user":"alice"}"#).as_deref(), Some("alice"));
        assert_eq!(key(r#"{"user":"\u00e9"}"#).as_deref(), Some("é"));
        assert_eq!(key(r#"{"user":42}"#).as_deref(), Some("42"));
        assert_eq!(key(r#"{"user":null}"#), None);
        assert_eq!(key(r#"{"user":{"a":1}}"#), None);
        assert_eq!(key(r#"{}"#), None);
        assert_eq!(key("[1]"), None);
        let info = crate::channel::ConnectInfo {
            params: vec![("name".into(), "bob".into())],
            user_id: Some("u7".into()),
            ..Default::default()
        };
        let who = Who {
            user: Some("u7"),
            connect: Some(&info),
        };
        let by_user = PresenceRule::parse("t=user_id").unwrap();
        assert_eq!(by_user.key_of(Payload::EMPTY, who).as_deref(), Some("u7"));
        let by_param = PresenceRule::parse("t=connect:name").unwrap();
        assert_eq!(by_param.key_of(Payload::EMPTY, who).as_deref(), Some("bob"));
        assert_eq!(by_param.key_of(Payload::EMPTY, Who::default()), None);
    }
}
