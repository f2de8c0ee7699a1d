//! Pusher channel names: which are valid, which kind a name is, and what
//! each kind allows.
//!
//! Pusher's rules (docs/channels/using_channels/channels.md): letters,
//! digits and `_ - = @ , . ;` only; `#` is reserved for Pusher's own
//! channels. Pusher's page gives 164 characters as the limit, but its server
//! SDKs (Node lib/pusher.js, Python pusher/util.py) accept up to 200 and
//! Sockudo and Soketi use 200, so 200 it is: a name an SDK triggers to is
//! never refused here. The one reserved name a client may use is the user's
//! own `#server-to-user-{user_id}`, which `pusher-js` subscribes to after a
//! sign-in (src/core/user.ts) and the SDKs' `sendToUser` triggers to.
//!
//! The kind is the prefix (`pusher-js`'s src/core/channels/channels.ts,
//! Pusher's cache channel page): `private-encrypted-cache-`,
//! `private-encrypted-`, `private-cache-`, `private-`, `presence-cache-`,
//! `presence-`, `cache-`, else public.

use super::presence;

/// The longest channel name, in bytes (names are ASCII).
pub const MAX_NAME_LEN: usize = 200;

/// The prefix of a user's own channel (`#server-to-user-{user_id}`).
pub const SERVER_TO_USER_PREFIX: &str = "#server-to-user-";

/// What a channel name says about the channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChannelKind {
    /// Anyone may subscribe.
    Public,
    /// `private-`: a subscription needs the app's signature.
    Private,
    /// `private-encrypted-`: private, and the server relays `data` it cannot
    /// read; client events are refused (no Pusher client can encrypt them).
    Encrypted,
    /// `presence-`: private, and the server tracks who is in it.
    Presence,
    /// `#server-to-user-{user_id}`: events sent to a signed-in user.
    User,
}

/// A valid channel name's kind, and whether it is a cache channel (its last
/// event replayed to new subscribers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChannelType {
    /// The kind of channel.
    pub kind: ChannelKind,
    /// Whether the name has a `cache-` prefix.
    pub cache: bool,
}

/// Why a channel name is not valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChannelNameError {
    #[error("the channel name is empty: give a channel name")]
    Empty,
    #[error("the channel name is {0} characters long, over the limit of 200: use a shorter name")]
    TooLong(usize),
    #[error("the channel name has {0:?} in it: use only letters, digits and _ - = @ , . ;")]
    BadCharacter(char),
    #[error("channel names starting with '#' are reserved: remove the '#'")]
    Reserved,
    #[error("'#server-to-user-' must be followed by a user id of 1 to 128 characters")]
    BadUserId,
}

/// The prefix of private channels.
pub const PREFIX_PRIVATE: &str = "private-";

/// The prefix of presence channels.
pub const PREFIX_PRESENCE: &str = "presence-";

/// The prefix of encrypted channels.
pub const PREFIX_ENCRYPTED: &str = "private-encrypted-";

/// Prefixes and the types they make, longest first where one starts another.
const PREFIXES: [(&str, ChannelKind, bool); 7] = [
    ("private-encrypted-cache-", ChannelKind::Encrypted, true),
    ("private-encrypted-", ChannelKind::Encrypted, false),
    ("private-cache-", ChannelKind::Private, true),
    ("private-", ChannelKind::Private, false),
    ("presence-cache-", ChannelKind::Presence, true),
    ("presence-", ChannelKind::Presence, false),
    ("cache-", ChannelKind::Public, true),
];

/// Whether `b` may appear in a channel name.
pub fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_-=@,.;".contains(&b)
}

impl ChannelType {
    /// The type of a channel name, if the name is valid.
    pub fn of(name: &str) -> Result<ChannelType, ChannelNameError> {
        if name.is_empty() {
            return Err(ChannelNameError::Empty);
        }
        if name.len() > MAX_NAME_LEN {
            return Err(ChannelNameError::TooLong(name.chars().count()));
        }
        if let Some(user_id) = name.strip_prefix(SERVER_TO_USER_PREFIX) {
            if !presence::is_valid_user_id(user_id) {
                return Err(ChannelNameError::BadUserId);
            }
            return Ok(ChannelType {
                kind: ChannelKind::User,
                cache: false,
            });
        }
        if let Some(bad) = name.bytes().position(|b| !is_name_byte(b)) {
            return Err(match name.as_bytes()[bad] {
                b'#' => ChannelNameError::Reserved,
                _ => ChannelNameError::BadCharacter(name[bad..].chars().next().unwrap_or('?')),
            });
        }
        let (kind, cache) = PREFIXES
            .iter()
            .find(|(prefix, ..)| name.starts_with(prefix))
            .map_or((ChannelKind::Public, false), |&(_, kind, cache)| {
                (kind, cache)
            });
        Ok(ChannelType { kind, cache })
    }

    /// Whether a subscription needs the app's signature (`auth`).
    pub fn needs_auth(self) -> bool {
        matches!(
            self.kind,
            ChannelKind::Private | ChannelKind::Encrypted | ChannelKind::Presence
        )
    }

    /// Whether the channel tracks its members.
    pub fn is_presence(self) -> bool {
        self.kind == ChannelKind::Presence
    }

    /// Whether clients may send `client-` events on it: private and presence
    /// channels only (Pusher's events page), not encrypted ones.
    pub fn allows_client_events(self) -> bool {
        matches!(self.kind, ChannelKind::Private | ChannelKind::Presence)
    }
}

/// The user id of a `#server-to-user-{user_id}` channel name.
pub fn user_of(name: &str) -> Option<&str> {
    name.strip_prefix(SERVER_TO_USER_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind(name: &str) -> (ChannelKind, bool) {
        let t = ChannelType::of(name).unwrap();
        (t.kind, t.cache)
    }

    #[test]
    fn kinds_by_prefix() {
        use ChannelKind::*;
        assert_eq!(kind("my-channel"), (Public, false));
        assert_eq!(kind("cache-location"), (Public, true));
        assert_eq!(kind("private-chat"), (Private, false));
        assert_eq!(kind("private-cache-chat"), (Private, true));
        assert_eq!(kind("private-encrypted-chat"), (Encrypted, false));
        assert_eq!(kind("private-encrypted-cache-chat"), (Encrypted, true));
        assert_eq!(kind("presence-room"), (Presence, false));
        assert_eq!(kind("presence-cache-room"), (Presence, true));
        assert_eq!(kind("#server-to-user-42"), (User, false));
        assert_eq!(kind("foo-bar_1234@=,.;"), (Public, false));
        // A prefix is a prefix: these are public.
        assert_eq!(kind("privatechat"), (Public, false));
        assert_eq!(kind("my-private-chat"), (Public, false));
    }

    #[test]
    fn what_each_kind_allows() {
        let t = |n| ChannelType::of(n).unwrap();
        assert!(!t("news").needs_auth() && !t("cache-news").needs_auth());
        for name in [
            "private-a",
            "private-cache-a",
            "presence-a",
            "presence-cache-a",
        ] {
            assert!(
                t(name).needs_auth() && t(name).allows_client_events(),
                "{name}"
            );
        }
        for name in ["private-encrypted-a", "private-encrypted-cache-a"] {
            assert!(
                t(name).needs_auth() && !t(name).allows_client_events(),
                "{name}"
            );
        }
        assert!(!t("news").allows_client_events());
        assert!(!t("#server-to-user-1").allows_client_events());
        assert!(t("presence-cache-a").is_presence() && !t("private-a").is_presence());
        assert_eq!(user_of("#server-to-user-u1"), Some("u1"));
        assert_eq!(user_of("private-u1"), None);
    }

    #[test]
    fn invalid_names() {
        use ChannelNameError::*;
        let err = |n: &str| ChannelType::of(n).unwrap_err();
        assert_eq!(err(""), Empty);
        assert_eq!(err(&"a".repeat(201)), TooLong(201));
        assert!(ChannelType::of(&"a".repeat(200)).is_ok());
        assert_eq!(err("a b"), BadCharacter(' '));
        assert_eq!(err("room/1"), BadCharacter('/'));
        assert_eq!(err("café"), BadCharacter('é'));
        assert_eq!(err("#room"), Reserved);
        assert_eq!(err("private-#room"), Reserved);
        assert_eq!(err("#server-to-user-"), BadUserId);
        assert_eq!(
            err(&format!("#server-to-user-{}", "u".repeat(129))),
            BadUserId
        );
        assert!(err("a b").to_string().contains("_ - = @ , . ;"));
    }

    proptest! {
        #[test]
        fn valid_names_are_valid(name in "[A-Za-z0-9_=@,.;-]{1,200}") {
            prop_assert!(ChannelType::of(&name).is_ok());
        }

        #[test]
        fn never_panics(name in "\\PC{0,250}") {
            let ok = ChannelType::of(&name).is_ok();
            let plain = !name.is_empty() && name.len() <= MAX_NAME_LEN && name.bytes().all(is_name_byte);
            prop_assert!(ok == plain || name.starts_with(SERVER_TO_USER_PREFIX));
        }
    }
}
