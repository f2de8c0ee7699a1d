//! Topic rules (`[[topics]]` in the config file): who may join which topic
//! and push which events, so the common policies need no Rust.
//!
//! ```toml
//! [[topics]]
//! pattern = "private:{user}"   # only the user whose id is in the topic
//! join = "users"
//! push = ["new:msg"]
//!
//! [[topics]]
//! pattern = "rooms:*"          # anyone may join and read
//! join = "anyone"
//! push = ["new:msg"]           # authenticated members may push new:msg
//! anonymous_push = []          # anonymous members may push nothing
//! ```
//!
//! A pattern is a topic where `*` matches any run of characters and
//! `{user}` matches exactly the socket's user id (so a topic with `{user}`
//! never matches an anonymous socket). The first rule whose pattern matches
//! the topic decides; with rules configured, a topic no rule matches cannot
//! be joined; with none, every topic the app routes can be (as before).
//! The JWT `channels` claim, when present, must also match the topic.
//! Refusals are error replies `{"reason":"unauthorized"}`, as Phoenix apps
//! conventionally answer, and are counted.
//!
//! Rules decide before the app's channel runs; the app's own `join` may
//! still refuse. `throng serve` mounts a relay channel (join, and push =
//! broadcast the same event to the topic) on every rule's pattern that the
//! chat app does not route, so a config-only deployment has channels.

pub mod chat;

use serde::{Deserialize, Serialize};

use crate::channel::Who;

/// Who may join a topic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinRule {
    /// Anonymous sockets too.
    #[default]
    Anyone,
    /// Authenticated sockets only.
    Users,
    /// No client (server broadcasts only... to nobody: a closed topic).
    Nobody,
}

/// One `[[topics]]` rule.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TopicRule {
    pub pattern: String,
    #[serde(default)]
    pub join: JoinRule,
    /// Events authenticated members may push (`"*"`: any) [default: any].
    #[serde(default = "any_event")]
    pub push: Vec<String>,
    /// Events anonymous members may push [default: as `push`].
    #[serde(default)]
    pub anonymous_push: Option<Vec<String>>,
    /// What the app backend decides on these topics (`crate::hooks`):
    /// `"join"`, `"push"` [default: none].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<TopicHook>,
    /// Messages of history kept per topic, for recovery on rejoin
    /// (`crate::history`) [default: none].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_size: Option<usize>,
    /// Seconds a topic's history is kept after its last message
    /// [default: [`DEFAULT_HISTORY_TTL`] with `history_size`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_ttl: Option<u64>,
}

/// `history_ttl` when a rule gives `history_size` alone.
pub const DEFAULT_HISTORY_TTL: u64 = 600;
/// The largest `history_size`: a replay is at most this many messages.
pub const MAX_HISTORY_SIZE: usize = 10_000;
/// The largest `history_ttl`: a day.
pub const MAX_HISTORY_TTL: u64 = 86_400;

/// What a rule keeps of its topics' history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRule {
    /// Messages kept.
    pub size: usize,
    /// Kept this long after the topic's last message.
    pub ttl: std::time::Duration,
}

impl TopicRule {
    /// Checks the history keys: a clear error naming the rule, with a fix.
    pub fn check_history(&self) -> Result<(), String> {
        let p = &self.pattern;
        match (self.history_size, self.history_ttl) {
            (None, Some(_)) => Err(format!(
                "[[topics]] pattern = {p:?}: history_ttl needs history_size (the messages to \
                 keep): add history_size = 100, or remove history_ttl"
            )),
            (Some(n), _) if n == 0 || n > MAX_HISTORY_SIZE => Err(format!(
                "[[topics]] pattern = {p:?}: history_size must be 1..={MAX_HISTORY_SIZE} \
                 messages, got {n} (leave it out for no history)"
            )),
            (Some(_), Some(t)) if t == 0 || t > MAX_HISTORY_TTL => Err(format!(
                "[[topics]] pattern = {p:?}: history_ttl must be 1..={MAX_HISTORY_TTL} \
                 seconds, got {t}"
            )),
            _ => Ok(()),
        }
    }

    /// The history this rule keeps, if any.
    pub fn history(&self) -> Option<HistoryRule> {
        Some(HistoryRule {
            size: self.history_size?,
            ttl: std::time::Duration::from_secs(self.history_ttl.unwrap_or(DEFAULT_HISTORY_TTL)),
        })
    }
}

/// `--history PATTERN=SIZE[/SECS]`: history for the topics matching
/// PATTERN without a config file, as a `[[topics]]` rule's `history_size`
/// (and `history_ttl`) give it. It gives history only: who may join stays
/// the rules' to say. A `[[topics]]` rule that matches a topic first and
/// has `history_size` wins over the flag for that topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryPattern {
    /// Topics it is for: `*` any run, `{user}` any user.
    pub pattern: String,
    pub history: HistoryRule,
}

impl HistoryPattern {
    /// `PATTERN=SIZE` or `PATTERN=SIZE/SECS` (the `--history` flag).
    pub fn parse(spec: &str) -> Result<HistoryPattern, String> {
        let example = |pattern: &str| {
            format!(
                "e.g. --history '{pattern}=100' (the last 100 messages of each matching topic, \
                 kept {DEFAULT_HISTORY_TTL} s after its last one) or '{pattern}=100/3600' \
                 (kept an hour)"
            )
        };
        let bad = |why: String| format!("--history {spec:?}: {why}");
        let Some((pattern, size)) = spec.split_once('=') else {
            let pattern = if spec.is_empty() { "rooms:*" } else { spec };
            return Err(bad(format!(
                "expected PATTERN=SIZE[/SECS], {}",
                example(pattern)
            )));
        };
        if pattern.is_empty() {
            return Err(bad(format!("the pattern is empty, {}", example("rooms:*"))));
        }
        let (size, ttl) = match size.split_once('/') {
            Some((size, ttl)) => (size, Some(ttl)),
            None => (size, None),
        };
        let size: usize = size
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=MAX_HISTORY_SIZE).contains(n))
            .ok_or_else(|| {
                bad(format!(
                    "SIZE must be 1..={MAX_HISTORY_SIZE} messages, got {size:?}; {}",
                    example(pattern)
                ))
            })?;
        let ttl: u64 = match ttl {
            None => DEFAULT_HISTORY_TTL,
            Some(t) => t
                .trim()
                .parse()
                .ok()
                .filter(|t| (1..=MAX_HISTORY_TTL).contains(t))
                .ok_or_else(|| {
                    bad(format!(
                        "SECS must be 1..={MAX_HISTORY_TTL} seconds, got {t:?}; {}",
                        example(pattern)
                    ))
                })?,
        };
        Ok(HistoryPattern {
            pattern: pattern.to_string(),
            history: HistoryRule {
                size,
                ttl: std::time::Duration::from_secs(ttl),
            },
        })
    }
}

fn any_event() -> Vec<String> {
    vec!["*".into()]
}

/// The rules of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub rules: Vec<TopicRule>,
    /// Some rule lists hooks: without, joins and pushes skip the lookup.
    any_hooks: bool,
    /// When some rule keeps history: every rule's pattern with `{user}`
    /// as `*`, and its history (empty otherwise, so broadcasts skip it).
    history: Vec<(String, Option<HistoryRule>)>,
    /// `--history` patterns (`{user}` as `*`): for topics whose first
    /// matching rule keeps none.
    flag_history: Vec<(String, HistoryRule)>,
    /// With Pusher apps: what a Pusher cache channel keeps (its last
    /// event, `--pusher-cache-ttl`). Other Pusher channels keep none,
    /// whatever the patterns say.
    pusher_cache: Option<HistoryRule>,
}

/// The reply to a join or push the rules refuse.
pub const UNAUTHORIZED: &str = r#"{"reason":"unauthorized"}"#;

impl Policy {
    pub fn new(rules: Vec<TopicRule>) -> Policy {
        let any_hooks = rules.iter().any(|r| !r.hooks.is_empty());
        let history = if rules.iter().any(|r| r.history_size.is_some()) {
            let rule = |r: &TopicRule| (r.pattern.replace(USER, "*"), r.history());
            rules.iter().map(rule).collect()
        } else {
            Vec::new()
        };
        Policy {
            rules,
            any_hooks,
            history,
            flag_history: Vec::new(),
            pusher_cache: None,
        }
    }

    /// These rules with the `--history` patterns `flags` added.
    pub fn with_history(mut self, flags: &[HistoryPattern]) -> Policy {
        let flag = |h: &HistoryPattern| (h.pattern.replace(USER, "*"), h.history);
        self.flag_history = flags.iter().map(flag).collect();
        self
    }

    /// These rules with Pusher's cache channels keeping their last event
    /// `ttl` (a Pusher channel's history is this, or none).
    pub fn with_pusher_cache(mut self, ttl: std::time::Duration) -> Policy {
        self.pusher_cache = Some(HistoryRule { size: 1, ttl });
        self
    }

    /// Whether some rule or `--history` pattern keeps history (or Pusher's
    /// cache channels do).
    pub fn any_history(&self) -> bool {
        !self.history.is_empty() || !self.flag_history.is_empty() || self.pusher_cache.is_some()
    }

    /// The history kept for `topic`: that of the first rule whose pattern
    /// matches it, with `{user}` matching any user (a broadcast has no
    /// socket, and the topic names the user already); when that rule keeps
    /// none (or no rule matches), that of the first `--history` pattern
    /// matching it.
    pub fn history(&self, topic: &str) -> Option<HistoryRule> {
        if let Some(channel) = topic.strip_prefix(throng_protocol::PUSHER_TOPIC_PREFIX) {
            // `pusher/<app id>/<channel>`: a cache channel's last event.
            let cache = channel.split_once('/').is_some_and(|(_, c)| {
                throng_protocol::pusher::ChannelType::of(c).is_ok_and(|t| t.cache)
            });
            return self.pusher_cache.filter(|_| cache);
        }
        let found = self.history.iter().find(|(p, _)| matches(p, topic, None));
        found.and_then(|(_, h)| *h).or_else(|| {
            let flag = self
                .flag_history
                .iter()
                .find(|(p, _)| matches(p, topic, None));
            flag.map(|(_, h)| *h)
        })
    }

    fn rule(&self, topic: &str, user: Option<&str>) -> Option<&TopicRule> {
        self.rules.iter().find(|r| matches(&r.pattern, topic, user))
    }

    /// Whether this socket may join `topic`.
    pub fn may_join(&self, topic: &str, who: Who<'_>) -> bool {
        let user = who.user;
        if let Some(channels) = who.connect.and_then(|c| c.channels.as_deref()) {
            if !channels.iter().any(|p| matches(p, topic, user)) {
                return false;
            }
        }
        if self.rules.is_empty() {
            return true;
        }
        match self.rule(topic, user).map(|r| r.join) {
            Some(JoinRule::Anyone) => true,
            Some(JoinRule::Users) => user.is_some(),
            Some(JoinRule::Nobody) | None => false,
        }
    }

    /// Why [`Policy::may_join`] refuses this socket `topic` (for the log;
    /// call it only for a refused join).
    pub fn join_refusal<'a>(&'a self, topic: &str, who: Who<'a>) -> JoinRefusal<'a> {
        let user = who.user;
        if let Some(channels) = who.connect.and_then(|c| c.channels.as_deref()) {
            if !channels.iter().any(|p| matches(p, topic, user)) {
                return JoinRefusal::ChannelsClaim;
            }
        }
        match self.rule(topic, user) {
            Some(rule) => JoinRefusal::Rule {
                rule,
                anonymous: user.is_none(),
            },
            // A rule for the topic of another user (or of a user, for an
            // anonymous socket).
            None => match self.rules.iter().find(|r| {
                r.pattern.contains(USER) && matches(&r.pattern.replace(USER, "*"), topic, None)
            }) {
                Some(rule) => JoinRefusal::OtherUser { rule, user },
                None => JoinRefusal::NoRule,
            },
        }
    }

    /// Whether this socket, joined on `topic`, may push `event`.
    pub fn may_push(&self, topic: &str, event: &str, who: Who<'_>) -> bool {
        if self.rules.is_empty() {
            return true;
        }
        let user = who.user;
        let Some(rule) = self.rule(topic, user) else {
            return false;
        };
        let events = match (user, &rule.anonymous_push) {
            (None, Some(anon)) => anon,
            _ => &rule.push,
        };
        events.iter().any(|e| e == "*" || e == event)
    }

    /// Whether the rule of `topic` sends `hook` to the app backend.
    pub fn hooked(&self, topic: &str, user: Option<&str>, hook: TopicHook) -> bool {
        self.any_hooks
            && self
                .rule(topic, user)
                .is_some_and(|r| r.hooks.contains(&hook))
    }

    /// The router patterns (`prefix*` or exact) of the rules' topics.
    pub fn route_patterns(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.rules {
            let cut = r.pattern.find(['*', '{']);
            let p = match cut {
                Some(i) => format!("{}*", &r.pattern[..i]),
                None => r.pattern.clone(),
            };
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }
}

/// Why the rules refused a join ([`Policy::join_refusal`]), written for
/// the log: what refused it and how to let it through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinRefusal<'a> {
    /// The token's `channels` claim lists no pattern matching the topic.
    ChannelsClaim,
    /// Rules are configured and none matches the topic.
    NoRule,
    /// The first rule matching the topic refuses this socket.
    Rule {
        rule: &'a TopicRule,
        anonymous: bool,
    },
    /// A `{user}` rule matches the topic for another user than this
    /// socket's (`None`: an anonymous socket).
    OtherUser {
        rule: &'a TopicRule,
        user: Option<&'a str>,
    },
}

impl std::fmt::Display for JoinRefusal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinRefusal::ChannelsClaim => f.write_str(
                "the token's `channels` claim lists no pattern matching it \
                 (mint the token with this topic in `channels`, or without the claim)",
            ),
            JoinRefusal::NoRule => f.write_str(
                "no [[topics]] rule matches it, and with rules configured a topic no rule \
                 matches cannot be joined (add a rule whose pattern matches it)",
            ),
            JoinRefusal::OtherUser { rule, user } => {
                let p = &rule.pattern;
                match user {
                    None => write!(
                        f,
                        "[[topics]] pattern = {p:?} takes only the user the topic names, and \
                         this socket has no user (connect with a token ([auth]) or through a \
                         connect hook that names the user)"
                    ),
                    Some(u) => write!(
                        f,
                        "[[topics]] pattern = {p:?} takes only the user the topic names, and \
                         this socket's user is {u:?}"
                    ),
                }
            }
            JoinRefusal::Rule { rule, anonymous } => {
                let p = &rule.pattern;
                match rule.join {
                    JoinRule::Users if *anonymous => write!(
                        f,
                        "[[topics]] pattern = {p:?} has join = \"users\" and this socket has \
                         no user (connect with a token ([auth]) or through a connect hook that \
                         names the user, or make the rule join = \"anyone\")"
                    ),
                    join => write!(
                        f,
                        "[[topics]] pattern = {p:?} has join = \"{}\" (change the rule, or \
                         add one for this topic above it)",
                        match join {
                            JoinRule::Anyone => "anyone",
                            JoinRule::Users => "users",
                            JoinRule::Nobody => "nobody",
                        }
                    ),
                }
            }
        }
    }
}

/// Whether `topic` matches `pattern` (`*` any run, `{user}` the user id).
/// Linear in the topic for each `*` (leftmost match of each literal piece
/// between stars is enough for `*`-only globs), so a long topic from a
/// client cannot make it backtrack.
fn matches(pattern: &str, topic: &str, user: Option<&str>) -> bool {
    use std::borrow::Cow;
    fn piece<'p>(p: &'p str, user: Option<&str>) -> Option<Cow<'p, str>> {
        if p.contains(USER) {
            user.map(|u| Cow::Owned(p.replace(USER, u)))
        } else {
            Some(Cow::Borrowed(p))
        }
    }
    let piece = |p| piece(p, user);
    let mut pieces = pattern.split('*');
    let Some(first) = pieces.next().and_then(piece) else {
        return false;
    };
    let Some(mut rest) = topic.strip_prefix(&*first) else {
        return false;
    };
    let mut pieces = pieces.peekable();
    if pieces.peek().is_none() {
        return rest.is_empty();
    }
    while let Some(p) = pieces.next() {
        let Some(p) = piece(p) else {
            return false;
        };
        if pieces.peek().is_none() {
            return rest.ends_with(&*p);
        }
        match rest.find(&*p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

const USER: &str = "{user}";

/// What a `[[topics]]` rule's `hooks` may list (the app backend's hooks,
/// `crate::hooks`, a topic's joins or pushes go through).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TopicHook {
    Join,
    Push,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::ConnectInfo;

    fn w(c: &ConnectInfo) -> Who<'_> {
        Who {
            user: c.user_id.as_deref(),
            connect: Some(c),
        }
    }

    fn who(user: Option<&str>, channels: Option<&[&str]>) -> ConnectInfo {
        ConnectInfo {
            user_id: user.map(String::from),
            channels: channels.map(|c| c.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    fn policy() -> Policy {
        let text = r#"
            [[topics]]
            pattern = "private:{user}"
            join = "users"
            push = ["new:msg"]
            [[topics]]
            pattern = "rooms:*"
            push = ["new:msg"]
            anonymous_push = []
            [[topics]]
            pattern = "admin:*"
            join = "nobody"
        "#;
        #[derive(Deserialize)]
        struct F {
            topics: Vec<TopicRule>,
        }
        Policy::new(toml::from_str::<F>(text).unwrap().topics)
    }

    #[test]
    fn patterns() {
        assert!(matches("rooms:*", "rooms:", None));
        assert!(matches("rooms:*", "rooms:lobby", None));
        assert!(!matches("rooms:*", "room:lobby", None));
        assert!(matches("a:*:b", "a:x:y:b", None));
        assert!(matches("private:{user}", "private:42", Some("42")));
        assert!(!matches("private:{user}", "private:421", Some("42")));
        assert!(!matches("private:{user}", "private:42", Some("4")));
        assert!(!matches("private:{user}", "private:42", None));
        assert!(matches("dm:{user}:*", "dm:7:8", Some("7")));
        assert!(matches("exact", "exact", None));
        assert!(matches("*", "", None));
        assert!(matches("a*a", "aa", None));
        assert!(!matches("a*a", "a", None));
        // A long topic against many stars is linear, not exponential.
        let long = "a".repeat(100_000);
        assert!(!matches("*a*a*a*a*a*a*b", &long, None));
        assert!(!matches("exact", "exactly", None));
    }

    #[test]
    fn private_topic_per_user() {
        let p = policy();
        let alice = who(Some("alice"), None);
        let bob = who(Some("bob"), None);
        let anon = who(None, None);
        assert!(p.may_join("private:alice", w(&alice)));
        assert!(!p.may_join("private:alice", w(&bob)));
        assert!(!p.may_join("private:alice", w(&anon)));
        assert!(!p.may_join("private:alice", Who::default()));
        assert!(p.may_push("private:alice", "new:msg", w(&alice)));
        assert!(!p.may_push("private:alice", "other", w(&alice)));
    }

    #[test]
    fn public_rooms_with_read_only_anonymous_members() {
        let p = policy();
        let alice = who(Some("alice"), None);
        assert!(p.may_join("rooms:lobby", Who::default()));
        assert!(p.may_join("rooms:lobby", w(&alice)));
        assert!(p.may_push("rooms:lobby", "new:msg", w(&alice)));
        assert!(!p.may_push("rooms:lobby", "new:msg", Who::default()));
        assert!(!p.may_join("admin:x", w(&alice)));
        assert!(!p.may_join("elsewhere", w(&alice)), "no rule: refused");
        assert!(Policy::default().may_join("elsewhere", Who::default()));
        assert!(Policy::default().may_push("elsewhere", "x", Who::default()));
        assert_eq!(
            p.route_patterns(),
            vec!["private:*".to_string(), "rooms:*".into(), "admin:*".into()]
        );
    }

    #[test]
    fn refusals_say_which_rule() {
        let p = policy();
        let alice = who(Some("alice"), None);
        let anon = who(None, None);
        let said = |topic: &str, c: &ConnectInfo| p.join_refusal(topic, w(c)).to_string();
        assert!(
            said("admin:x", &alice).contains(r#"pattern = "admin:*" has join = "nobody""#),
            "{}",
            said("admin:x", &alice)
        );
        assert!(said("private:alice", &anon)
            .contains("takes only the user the topic names, and this socket has no user"));
        let bob = who(Some("bob"), None);
        assert!(said("private:alice", &bob).contains("this socket's user is \"bob\""));
        let users: Vec<TopicRule> =
            serde_json::from_str(r#"[{"pattern":"members:*","join":"users"}]"#).unwrap();
        let members = Policy::new(users);
        assert!(members
            .join_refusal("members:1", w(&anon))
            .to_string()
            .contains(r#"has join = "users" and this socket has no user"#));
        assert!(said("elsewhere", &alice).contains("no [[topics]] rule matches it"));
        let limited = who(Some("u"), Some(&["rooms:lobby"]));
        assert_eq!(
            p.join_refusal("rooms:x", w(&limited)),
            JoinRefusal::ChannelsClaim
        );
        assert!(said("rooms:x", &limited).contains("`channels` claim"));
    }

    #[test]
    fn history_flags_and_rules_combine() {
        let flags: Vec<HistoryPattern> = ["rooms:*=100", "inbox:{user}=5/60", "*=7"]
            .iter()
            .map(|s| HistoryPattern::parse(s).unwrap())
            .collect();
        let rules: Vec<TopicRule> = serde_json::from_str(
            r#"[{"pattern":"rooms:vip","history_size":3},{"pattern":"rooms:*"},{"pattern":"inbox:*"}]"#,
        )
        .unwrap();
        let p = Policy::new(rules).with_history(&flags);
        let size = |t: &str| p.history(t).map(|h| (h.size, h.ttl.as_secs()));
        // A rule with history_size wins for its topics.
        assert_eq!(size("rooms:vip"), Some((3, 600)));
        // A rule without: the flag's.
        assert_eq!(size("rooms:lobby"), Some((100, 600)));
        assert_eq!(size("inbox:42"), Some((5, 60)));
        assert_eq!(size("other"), Some((7, 600)));
        // The flag gives history, not access: the rules still refuse.
        assert!(!p.may_join("other", Who::default()));
        // Flags alone.
        let alone = Policy::default().with_history(&flags[..1]);
        assert!(alone.any_history() && !Policy::default().any_history());
        // Pusher channels: a cache channel keeps its last event, whatever
        // the patterns say ("*=7" above matches every topic).
        assert_eq!(size("pusher/1/cache-x"), None, "no Pusher apps");
        let ttl = std::time::Duration::from_secs(30);
        let p = p.with_pusher_cache(ttl);
        let size = |t: &str| p.history(t).map(|h| (h.size, h.ttl.as_secs()));
        for cache in [
            "cache-x",
            "private-cache-x",
            "presence-cache-x",
            "private-encrypted-cache-x",
        ] {
            assert_eq!(size(&format!("pusher/1/{cache}")), Some((1, 30)), "{cache}");
        }
        for other in [
            "x",
            "private-x",
            "presence-x",
            "cache",
            "#server-to-user-cache-1",
        ] {
            assert_eq!(size(&format!("pusher/1/{other}")), None, "{other}");
        }
        assert!(Policy::default().with_pusher_cache(ttl).any_history());
        assert_eq!(alone.history("rooms:lobby").map(|h| h.size), Some(100));
        assert!(alone.history("feed:1").is_none());
        assert!(alone.may_join("feed:1", Who::default()));
    }

    #[test]
    fn history_flags_parse_with_examples() {
        let h = HistoryPattern::parse("rooms:*=100/3600").unwrap();
        assert_eq!((h.history.size, h.history.ttl.as_secs()), (100, 3600));
        for (bad, says) in [
            ("rooms:*", "--history 'rooms:*=100'"),
            ("rooms:*=0", "SIZE must be 1..=10000"),
            ("rooms:*=lots", "SIZE must be 1..=10000"),
            ("rooms:*=10001", "SIZE must be 1..=10000"),
            ("rooms:*=5/0", "SECS must be 1..=86400"),
            ("=5", "the pattern is empty"),
        ] {
            let err = HistoryPattern::parse(bad).unwrap_err();
            assert!(err.contains(says) && err.contains("e.g."), "{bad}: {err}");
        }
    }

    #[test]
    fn jwt_channels_claim_limits_joins() {
        let p = Policy::default();
        let limited = who(Some("u"), Some(&["rooms:lobby", "private:{user}"]));
        assert!(p.may_join("rooms:lobby", w(&limited)));
        assert!(p.may_join("private:u", w(&limited)));
        assert!(!p.may_join("private:v", w(&limited)));
        assert!(!p.may_join("rooms:other", w(&limited)));
        let nothing = who(Some("u"), Some(&[]));
        assert!(!p.may_join("rooms:lobby", w(&nothing)));
    }

    #[test]
    fn hooks_per_rule() {
        let rules: Vec<TopicRule> = serde_json::from_str(
            r#"[{"pattern":"rooms:*","hooks":["join","push"]},{"pattern":"plain:*"},{"pattern":"j:*","hooks":["join"]}]"#,
        )
        .unwrap();
        let p = Policy::new(rules.clone());
        assert!(p.hooked("rooms:1", None, TopicHook::Join));
        assert!(p.hooked("rooms:1", None, TopicHook::Push));
        assert!(p.hooked("j:1", None, TopicHook::Join));
        assert!(!p.hooked("j:1", None, TopicHook::Push));
        assert!(!p.hooked("plain:1", None, TopicHook::Join));
        assert!(!Policy::new(rules[1..2].to_vec()).hooked("plain:1", None, TopicHook::Join));
        // Workers get the rules as JSON: the hooks go with them.
        let json = serde_json::to_string(&rules).unwrap();
        assert_eq!(
            serde_json::from_str::<Vec<TopicRule>>(&json).unwrap(),
            rules
        );
        assert!(
            serde_json::from_str::<Vec<TopicRule>>(r#"[{"pattern":"a","hooks":["connect"]}]"#)
                .is_err()
        );
    }
}
