//! [`Token`]: what a long-poll client carries between requests (`?token=`),
//! naming its session: the node (the backplane's node id), the shard and the
//! session's key there, and a random 128-bit secret.
//!
//! Phoenix signs `{endpoint id, server pid, private topic}` with
//! `Phoenix.Token` (`lib/phoenix/transports/long_poll.ex`) so the token can
//! neither be forged nor name another session. Here the address is in the
//! clear and the secret, drawn from the OS's CSPRNG and compared in
//! constant time, is what cannot be guessed; a session is found by address,
//! then the secret is checked. Written as `lp1.` and 60 hex digits
//! (URL-safe, no escaping): node (16), shard (4), key (8), secret (32).
//!
//! The prefix tells a session token from the app's own `token` socket param
//! (phoenix.js's classic `params: {token: userToken}`), which shares the
//! query string: phoenix.js appends the session's `token` after the params,
//! and a `token` that is not a session's is a param (Phoenix reads the last
//! `token`, and starts a new session when it is not one of its own).

use std::fmt;

use subtle::ConstantTimeEq;

/// The random part of a token.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Secret(pub [u8; 16]);

impl Secret {
    /// A fresh secret from the OS's random source.
    pub fn random() -> Result<Secret, getrandom::Error> {
        let mut s = [0u8; 16];
        getrandom::fill(&mut s)?;
        Ok(Secret(s))
    }

    /// Whether `other` is this secret, in time that does not depend on
    /// where they differ.
    pub fn matches(&self, other: &Secret) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A session's address and secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub node: u64,
    pub shard: u16,
    pub key: u32,
    pub secret: Secret,
}

/// What every session token starts with (its format's version 1).
pub(crate) const TOKEN_PREFIX: &str = "lp1.";
/// Hex digits in a token, after the prefix.
pub(crate) const TOKEN_HEX: usize = 16 + 4 + 8 + 32;

impl Token {
    /// Reads a token written by [`Token`]'s `Display`; `None` for anything
    /// else.
    pub fn parse(s: &str) -> Option<Token> {
        let s = s.strip_prefix(TOKEN_PREFIX)?;
        let b = s.as_bytes();
        if b.len() != TOKEN_HEX || !b.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let node = u64::from_str_radix(&s[0..16], 16).ok()?;
        let shard = u16::from_str_radix(&s[16..20], 16).ok()?;
        let key = u32::from_str_radix(&s[20..28], 16).ok()?;
        let mut secret = [0u8; 16];
        for (i, out) in secret.iter_mut().enumerate() {
            let at = 28 + 2 * i;
            *out = u8::from_str_radix(&s[at..at + 2], 16).ok()?;
        }
        Some(Token {
            node,
            shard,
            key,
            secret: Secret(secret),
        })
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{TOKEN_PREFIX}{:016x}{:04x}{:08x}",
            self.node, self.shard, self.key
        )?;
        for b in self.secret.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_the_rest() {
        let t = Token {
            node: 0x0123_4567_89ab_cdef,
            shard: 3,
            key: 0x8000_0001,
            secret: Secret::random().unwrap(),
        };
        let s = t.to_string();
        assert_eq!(s.len(), TOKEN_PREFIX.len() + TOKEN_HEX);
        assert!(s.starts_with("lp1.0123456789abcdef000380000001"), "{s}");
        assert_eq!(Token::parse(&s), Some(t));
        let hex = &s[TOKEN_PREFIX.len()..];
        assert_eq!(
            Token::parse(&format!("lp1.{}", hex.to_uppercase())),
            Some(t)
        );
        assert_eq!(Token::parse(hex), None, "no prefix: an app's own token");
        assert_eq!(Token::parse(&s[..s.len() - 1]), None);
        assert_eq!(Token::parse(&format!("{s}0")), None);
        assert_eq!(Token::parse(&s.replace('0', "g")), None);
        assert_eq!(Token::parse(&format!("lp1.+{}", &hex[1..])), None);
        assert_eq!(Token::parse(""), None);
        // multi-byte characters of the right byte length are refused too
        assert_eq!(
            Token::parse(&format!("lp1.{}", "é".repeat(TOKEN_HEX / 2))),
            None
        );
    }

    #[test]
    fn secrets_differ_and_compare() {
        let a = Secret::random().unwrap();
        let b = Secret::random().unwrap();
        assert_ne!(a.0, b.0);
        assert!(a.matches(&a) && !a.matches(&b));
    }
}
