//! The signatures of Pusher's protocol, all HMAC-SHA256 with the app's
//! secret, written as lowercase hex (docs/channels/library_auth_reference/auth-signatures.md,
//! server_api/webhooks.md):
//! - channel authorization: `KEY:HMAC(secret, "socket_id:channel")`, with
//!   `":channel_data"` appended for presence channels;
//! - user sign-in: `KEY:HMAC(secret, "socket_id::user::user_data")`;
//! - webhooks: `X-Pusher-Signature: HMAC(secret, body)`.
//!
//! (The HTTP API's request signature is [`super::api_auth`].)
//!
//! Verification decodes the hex and compares the MACs in constant time
//! (`subtle`), after a length check that refuses an oversized `auth`
//! before any hashing. The signing side is here too, for tests, the load
//! generator and example backends; it matches the `pusher` Node SDK's
//! `authorizeChannel` and `authenticateUser` (lib/auth.js) byte for byte.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::error_code::ErrorCode;

type HmacSha256 = Hmac<Sha256>;

/// Length of a signature in hex.
pub const HEX_LEN: usize = 64;

/// An HMAC-SHA256 signature.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature(pub [u8; 32]);

impl Signature {
    /// The signature as lowercase hex, as Pusher writes it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Whether `given` is this signature in hex (either case), compared in
    /// constant time.
    pub fn matches_hex(&self, given: &str) -> bool {
        let mut bytes = [0u8; 32];
        if given.len() != HEX_LEN || hex::decode_to_slice(given, &mut bytes).is_err() {
            return false;
        }
        bool::from(self.0.ct_eq(&bytes))
    }
}

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signature({})", self.to_hex())
    }
}

/// HMAC-SHA256 of the concatenated `parts`, without concatenating them.
pub fn sign(secret: &[u8], parts: &[&[u8]]) -> Signature {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    for part in parts {
        mac.update(part);
    }
    Signature(mac.finalize().into_bytes().into())
}

/// The signature of a channel subscription: over `socket_id:channel`, or
/// `socket_id:channel:channel_data` for presence channels.
pub fn channel_signature(
    secret: &[u8],
    socket_id: &str,
    channel: &str,
    channel_data: Option<&str>,
) -> Signature {
    let (sep, data) = match channel_data {
        Some(d) => (&b":"[..], d.as_bytes()),
        None => (&b""[..], &b""[..]),
    };
    sign(
        secret,
        &[socket_id.as_bytes(), b":", channel.as_bytes(), sep, data],
    )
}

/// The signature of a user sign-in: over `socket_id::user::user_data`.
pub fn user_signature(secret: &[u8], socket_id: &str, user_data: &str) -> Signature {
    sign(
        secret,
        &[socket_id.as_bytes(), b"::user::", user_data.as_bytes()],
    )
}

/// The signature of a webhook body (`X-Pusher-Signature`).
pub fn webhook_signature(secret: &[u8], body: &[u8]) -> Signature {
    sign(secret, &[body])
}

/// Whether `signature` (hex, from `X-Pusher-Signature`) signs `body`.
pub fn verify_webhook(secret: &[u8], body: &[u8], signature: &str) -> bool {
    webhook_signature(secret, body).matches_hex(signature)
}

/// The `auth` an app's backend returns for a channel: `KEY:signature`.
pub fn channel_auth(
    key: &str,
    secret: &[u8],
    socket_id: &str,
    channel: &str,
    channel_data: Option<&str>,
) -> String {
    let sig = channel_signature(secret, socket_id, channel, channel_data);
    format!("{key}:{}", sig.to_hex())
}

/// The `auth` an app's backend returns for a sign-in: `KEY:signature`.
pub fn user_auth(key: &str, secret: &[u8], socket_id: &str, user_data: &str) -> String {
    let sig = user_signature(secret, socket_id, user_data);
    format!("{key}:{}", sig.to_hex())
}

/// Why an `auth` was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error(
        "no auth: private and presence channels need the auth string from the app's auth endpoint"
    )]
    Missing,
    #[error(
        "the auth is not KEY:SIGNATURE: send the auth string the app's auth endpoint returned"
    )]
    Malformed,
    #[error("the auth was signed with another app's key: the auth endpoint must use this app's key and secret")]
    WrongKey,
    #[error(
        "invalid signature: the auth endpoint must sign {0} for this socket with this app's secret"
    )]
    BadSignature(&'static str),
}

impl AuthError {
    /// Pusher's code for the refusal (a refused sign-in is a `pusher:error`
    /// 4009; a refused subscription is a `pusher:subscription_error` with
    /// status 401).
    pub fn code(&self) -> ErrorCode {
        ErrorCode::Unauthorized
    }
}

/// Splits `KEY:signature`, refusing anything longer than a key and a hex
/// signature could be (no work for a 100 KB `auth`).
fn split<'a>(key: &str, auth: &'a str) -> Result<&'a str, AuthError> {
    if auth.is_empty() {
        return Err(AuthError::Missing);
    }
    if auth.len() > key.len() + 1 + HEX_LEN {
        return Err(AuthError::Malformed);
    }
    let (given_key, sig) = auth.rsplit_once(':').ok_or(AuthError::Malformed)?;
    if given_key != key {
        return Err(AuthError::WrongKey);
    }
    Ok(sig)
}

/// Checks a subscription's `auth` (from `pusher:subscribe`).
pub fn verify_channel_auth(
    key: &str,
    secret: &[u8],
    socket_id: &str,
    channel: &str,
    channel_data: Option<&str>,
    auth: &str,
) -> Result<(), AuthError> {
    let sig = split(key, auth)?;
    if channel_signature(secret, socket_id, channel, channel_data).matches_hex(sig) {
        return Ok(());
    }
    Err(AuthError::BadSignature(match channel_data {
        Some(_) => "\"socket_id:channel_name:channel_data\"",
        None => "\"socket_id:channel_name\"",
    }))
}

/// Checks a sign-in's `auth` (from `pusher:signin`).
pub fn verify_user_auth(
    key: &str,
    secret: &[u8],
    socket_id: &str,
    user_data: &str,
    auth: &str,
) -> Result<(), AuthError> {
    let sig = split(key, auth)?;
    if user_signature(secret, socket_id, user_data).matches_hex(sig) {
        return Ok(());
    }
    Err(AuthError::BadSignature("\"socket_id::user::user_data\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &str = "278d425bdf160c739803";
    const SECRET: &[u8] = b"7ad3773142a6692b25b8";

    /// Pusher's worked examples (`auth-signatures.md`).
    #[test]
    fn pushers_worked_examples() {
        assert_eq!(
            channel_auth(KEY, SECRET, "1234.1234", "private-foobar", None),
            "278d425bdf160c739803:58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4"
        );
        // The page prints afaed369... for this one, which is not the HMAC
        // of its own string to sign; the Node and Python SDKs and Python's
        // hmac module all give 31935e7d... (tests/pusher/vectors.json).
        let data = r#"{"user_id":10,"user_info":{"name":"Mr. Channels"}}"#;
        assert_eq!(
            channel_auth(KEY, SECRET, "1234.1234", "presence-foobar", Some(data)),
            "278d425bdf160c739803:31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80"
        );
        assert_eq!(
            user_auth(KEY, SECRET, "1234.1234", r#"{"id":"12345"}"#),
            "278d425bdf160c739803:4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba"
        );
    }

    #[test]
    fn verifies_and_refuses() {
        let auth = channel_auth(KEY, SECRET, "1.2", "private-a", None);
        assert_eq!(
            verify_channel_auth(KEY, SECRET, "1.2", "private-a", None, &auth),
            Ok(())
        );
        assert_eq!(
            verify_channel_auth(
                KEY,
                SECRET,
                "1.2",
                "private-a",
                None,
                &auth.to_uppercase().replace(&KEY.to_uppercase(), KEY)
            ),
            Ok(()),
            "hex of either case"
        );
        let bad = |sid, ch, cd, auth: &str| {
            verify_channel_auth(KEY, SECRET, sid, ch, cd, auth).unwrap_err()
        };
        assert!(matches!(
            bad("1.3", "private-a", None, &auth),
            AuthError::BadSignature(_)
        ));
        assert!(matches!(
            bad("1.2", "private-b", None, &auth),
            AuthError::BadSignature(_)
        ));
        assert!(matches!(
            bad("1.2", "private-a", Some("{}"), &auth),
            AuthError::BadSignature(_)
        ));
        assert_eq!(bad("1.2", "private-a", None, ""), AuthError::Missing);
        assert_eq!(
            bad("1.2", "private-a", None, "nocolon"),
            AuthError::Malformed
        );
        assert_eq!(
            bad("1.2", "private-a", None, &"k".repeat(100 * 1024)),
            AuthError::Malformed
        );
        let other = channel_auth("otherkey", SECRET, "1.2", "private-a", None);
        assert_eq!(bad("1.2", "private-a", None, &other), AuthError::WrongKey);
        assert!(matches!(
            bad("1.2", "private-a", None, &format!("{KEY}:zz")),
            AuthError::BadSignature(_)
        ));
        assert!(matches!(
            bad(
                "1.2",
                "private-a",
                None,
                &format!("{KEY}:{}", "g".repeat(64))
            ),
            AuthError::BadSignature(_)
        ));
        let wrong_secret = channel_auth(KEY, b"other", "1.2", "private-a", None);
        assert!(matches!(
            bad("1.2", "private-a", None, &wrong_secret),
            AuthError::BadSignature(_)
        ));
        assert_eq!(AuthError::Missing.code().code(), 4009);

        let user = r#"{"id":"1"}"#;
        let auth = user_auth(KEY, SECRET, "1.2", user);
        assert_eq!(verify_user_auth(KEY, SECRET, "1.2", user, &auth), Ok(()));
        assert!(verify_user_auth(KEY, SECRET, "1.2", r#"{"id":"2"}"#, &auth).is_err());
        // A channel signature is not a sign-in signature.
        let channel = channel_auth(KEY, SECRET, "1.2", "private-a", None);
        assert!(verify_user_auth(KEY, SECRET, "1.2", user, &channel).is_err());
    }

    #[test]
    fn webhooks() {
        let body =
            br#"{"time_ms":1327078148132,"events":[{"name":"channel_occupied","channel":"a"}]}"#;
        let sig = webhook_signature(SECRET, body).to_hex();
        assert_eq!(sig.len(), 64);
        assert!(verify_webhook(SECRET, body, &sig));
        assert!(!verify_webhook(SECRET, b"{}", &sig));
        assert!(!verify_webhook(b"other", body, &sig));
        assert!(!verify_webhook(SECRET, body, &sig[..63]));
    }

    proptest! {
        #[test]
        fn sign_then_verify(socket in "[0-9]{1,10}\\.[0-9]{1,10}", channel in "[a-z-]{1,30}",
                            data in proptest::option::of("\\PC{0,30}"), secret in proptest::collection::vec(any::<u8>(), 0..40)) {
            let auth = channel_auth(KEY, &secret, &socket, &channel, data.as_deref());
            prop_assert_eq!(verify_channel_auth(KEY, &secret, &socket, &channel, data.as_deref(), &auth), Ok(()));
        }

        #[test]
        fn verify_never_panics(auth in "\\PC{0,120}") {
            let _ = verify_channel_auth(KEY, SECRET, "1.2", "private-a", None, &auth);
            let _ = verify_user_auth(KEY, SECRET, "1.2", "{}", &auth);
            let _ = verify_webhook(SECRET, b"{}", &auth);
        }
    }
}
