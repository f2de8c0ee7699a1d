//! `throng bench --auth jwt`: each simulated user's connect token, an HS256
//! JWT `{"sub":"u<user>","exp":<now + 1 day>}` signed with the run's secret,
//! so every socket is its own user (the server's costliest case: one entry
//! per socket in its user table).
//!
//! Tokens are made when a connection sends its upgrade, into one buffer
//! the engine reuses: nothing is stored per connection, and once the buffer
//! has grown to a token's size no connect allocates, so the generator's
//! memory per connection is the same with auth as without. The JWT is
//! written here rather than by a JWT crate because those build each token
//! in fresh `String`s; it is three base64url parts (RFC 7519), the last an
//! HMAC-SHA256 of the first two (RFC 7515), done by `hmac`, `sha2` and
//! `base64`.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// base64url of `{"alg":"HS256","typ":"JWT"}`, the same for every token.
const HEADER: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";

/// How long a token is good for: a day, longer than any run.
const LIFETIME_SECS: u64 = 86_400;

/// Signs the connect tokens of one engine.
pub struct Signer {
    /// Keyed once with the secret; cloned (on the stack) per token.
    mac: Hmac<Sha256>,
    /// The claims' JSON, reused.
    claims: Vec<u8>,
    /// The connect path with the token, reused.
    path: String,
}

impl Signer {
    /// A signer for HS256 tokens with `secret`.
    pub fn new(secret: &str) -> Signer {
        Signer {
            mac: Hmac::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length"),
            claims: Vec::with_capacity(64),
            path: String::with_capacity(256),
        }
    }

    /// `path` with `token=<user's JWT>` added to its query string.
    pub fn path(&mut self, path: &str, user: u32) -> &str {
        self.path.clear();
        self.path.push_str(path);
        self.path.push(if path.contains('?') { '&' } else { '?' });
        self.path.push_str("token=");
        let start = self.path.len();
        self.path.push_str(HEADER);
        self.path.push('.');
        let exp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            + LIFETIME_SECS;
        self.claims.clear();
        let _ = write!(self.claims, r#"{{"sub":"u{user}","exp":{exp}}}"#);
        URL_SAFE_NO_PAD.encode_string(&self.claims, &mut self.path);
        let mut mac = self.mac.clone();
        mac.update(&self.path.as_bytes()[start..]);
        let signature = mac.finalize().into_bytes();
        self.path.push('.');
        URL_SAFE_NO_PAD.encode_string(signature, &mut self.path);
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_hs256_jwts_of_their_user() {
        let mut s = Signer::new("s3cret");
        let path = s.path("/socket/websocket?vsn=2.0.0", 42).to_string();
        let token = path
            .strip_prefix("/socket/websocket?vsn=2.0.0&token=")
            .unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header = URL_SAFE_NO_PAD.decode(parts[0]).unwrap();
        assert_eq!(header, br#"{"alg":"HS256","typ":"JWT"}"#);
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["sub"], "u42");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let exp = claims["exp"].as_u64().unwrap();
        assert!(exp > now + 86_000 && exp <= now + 86_400 + 5, "{exp}");
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(format!("{}.{}", parts[0], parts[1]).as_bytes());
        mac.verify_slice(&URL_SAFE_NO_PAD.decode(parts[2]).unwrap())
            .unwrap();
        let mut wrong = Hmac::<Sha256>::new_from_slice(b"other").unwrap();
        wrong.update(format!("{}.{}", parts[0], parts[1]).as_bytes());
        assert!(wrong
            .verify_slice(&URL_SAFE_NO_PAD.decode(parts[2]).unwrap())
            .is_err());
        assert!(s
            .path("/socket/websocket", 7)
            .starts_with("/socket/websocket?token="));
        let other = s.path("/p?vsn=2.0.0", 43).to_string();
        assert_ne!(
            other.split('.').nth(1),
            Some(parts[1]),
            "each user its own claims"
        );
    }
}
