//! Minting connect tokens for testing (`throng token`): a Phoenix.Token or
//! a JWT for a user, signed with the server's own `[auth]` settings, and
//! checked with the server's verifier before it is handed out, so what
//! `throng token` prints is what `throng serve` accepts. An app's backend
//! mints its own tokens in production (`Phoenix.Token.sign/4`, a JWT
//! library); this is for trying a config out.
//!
//! The Phoenix.Token is built as `lib/phoenix/token.ex` and Plug.Crypto's
//! message verifier sign (see `phoenix_token.rs` for the layout): the term
//! `{user_id_binary, signed_at_ms, max_age_s}` in Erlang's external term
//! format, HMAC-SHA256 with the PBKDF2-derived key.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde::Serialize;
use sha2::Sha256;

use super::secret::JwtHmac;
use super::{now_ms, phoenix_token, Auth, AuthConfig, Mode};
use crate::channel::ConnectInfo;
use crate::Error;

/// What to put in a token.
#[derive(Clone, Debug)]
pub struct Claims {
    /// The user id (Phoenix.Token's data, the JWT's `sub`).
    pub user: String,
    /// Seconds the token is valid for.
    pub ttl_secs: u64,
    /// The JWT `channels` claim: topic patterns the token may join.
    pub channels: Option<Vec<String>>,
}

/// Mints a token for `claims` with `config` (mode `phoenix_token` or
/// `jwt`; for RS256/ES256 the issuer's private key in PEM), then verifies
/// it as a connecting client's would be.
pub fn mint(
    config: &AuthConfig,
    private_key_pem: Option<&[u8]>,
    claims: &Claims,
) -> Result<String, Error> {
    // The server's verifier first: a secret it would refuse (the
    // weak-secret rule) mints nothing.
    let auth = Auth::new(config)?;
    let now = now_ms();
    let token = match config.mode {
        Mode::None => {
            return Err(Error::Config(
                "auth mode is none: the server takes no token. Give --config with an [auth] \
                 table, or --mode phoenix_token / jwt with its secret"
                    .into(),
            ))
        }
        Mode::PhoenixToken => {
            let secret = config.secret_key_base.as_deref().ok_or_else(|| {
                Error::Config("phoenix_token needs secret_key_base (--secret-key-base)".into())
            })?;
            let salt = config.salt.as_deref().unwrap_or("user socket");
            phoenix(secret, salt, &claims.user, now, claims.ttl_secs)
        }
        Mode::Jwt => jwt(config, private_key_pem, claims, now / 1000)?,
    };
    let connect = ConnectInfo {
        params: Vec::new(),
        auth_token: Some(token.clone()),
        user_id: None,
        channels: None,
    };
    match auth.authenticate(Some(&connect)) {
        Ok(Some(user)) if user.id == claims.user => Ok(token),
        Ok(_) => Err(Error::Config("the minted token named another user".into())),
        Err(refusal) => Err(Error::Config(format!(
            "the server's settings refuse the minted token: {refusal}"
        ))),
    }
}

/// `Phoenix.Token.sign(secret, salt, user, signed_at: now, max_age: ttl)`.
fn phoenix(secret: &str, salt: &str, user: &str, now_ms: i64, ttl_secs: u64) -> String {
    // {Binary, SignedAt, MaxAge}: 131 (version), SMALL_TUPLE_EXT of 3.
    let mut term = vec![131, 104, 3, 109];
    term.extend((user.len() as u32).to_be_bytes());
    term.extend_from_slice(user.as_bytes());
    integer(&mut term, now_ms);
    integer(&mut term, ttl_secs.min(i64::MAX as u64) as i64);
    let key = phoenix_token::derive_key(secret.as_bytes(), salt.as_bytes());
    let plain = format!(
        "{}.{}",
        phoenix_token::PROTECTED,
        URL_SAFE_NO_PAD.encode(&term)
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(plain.as_bytes());
    let sig = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{plain}.{sig}")
}

/// A non-negative integer as Erlang writes it: SMALL_INTEGER_EXT,
/// INTEGER_EXT, or SMALL_BIG_EXT (little-endian magnitude).
fn integer(out: &mut Vec<u8>, n: i64) {
    let n = n.max(0);
    if n <= 255 {
        out.extend([97, n as u8]);
    } else if n <= i32::MAX as i64 {
        out.push(98);
        out.extend((n as i32).to_be_bytes());
    } else {
        let mut digits = Vec::new();
        let mut m = n as u64;
        while m > 0 {
            digits.push((m & 0xff) as u8);
            m >>= 8;
        }
        out.extend([110, digits.len() as u8, 0]);
        out.extend(digits);
    }
}

#[derive(Serialize)]
struct JwtClaims<'a> {
    sub: &'a str,
    iat: i64,
    exp: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    channels: Option<&'a [String]>,
}

fn jwt(
    config: &AuthConfig,
    private_key_pem: Option<&[u8]>,
    claims: &Claims,
    now_s: i64,
) -> Result<String, Error> {
    let bad = |what: String| Error::Config(format!("jwt: {what}"));
    let (alg, key) = match (&config.jwt_secret, private_key_pem) {
        (Some(secret), _) => (
            match config.jwt_hmac() {
                JwtHmac::Hs256 => Algorithm::HS256,
                JwtHmac::Hs384 => Algorithm::HS384,
                JwtHmac::Hs512 => Algorithm::HS512,
            },
            EncodingKey::from_secret(secret.as_bytes()),
        ),
        (None, Some(pem)) => match config.jwt_algorithm.as_deref().map(str::to_ascii_uppercase) {
            Some(a) if a == "ES256" => (
                Algorithm::ES256,
                EncodingKey::from_ec_pem(pem).map_err(|e| bad(format!("private key: {e}")))?,
            ),
            _ => match EncodingKey::from_rsa_pem(pem) {
                Ok(k) => (Algorithm::RS256, k),
                Err(_) => (
                    Algorithm::ES256,
                    EncodingKey::from_ec_pem(pem)
                        .map_err(|e| bad(format!("private key (RSA or EC P-256 PEM): {e}")))?,
                ),
            },
        },
        (None, None) => {
            return Err(bad(
                "the server verifies with a public key: give the issuer's private key \
                 (--private-key-file), or a jwt_secret"
                    .into(),
            ))
        }
    };
    let body = JwtClaims {
        sub: &claims.user,
        iat: now_s,
        exp: now_s.saturating_add(claims.ttl_secs.min(i64::MAX as u64) as i64),
        channels: claims.channels.as_deref(),
    };
    encode(&Header::new(alg), &body, &key).map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            user: "42".into(),
            ttl_secs: 3600,
            channels: Some(vec!["rooms:*".into()]),
        }
    }

    #[test]
    fn minted_tokens_verify_with_the_same_settings() {
        let pt = AuthConfig {
            mode: Mode::PhoenixToken,
            secret_key_base: Some("s".repeat(64)),
            ..Default::default()
        };
        assert!(mint(&pt, None, &claims()).unwrap().starts_with("SFMyNTY."));
        let jwt = AuthConfig {
            mode: Mode::Jwt,
            jwt_secret: Some("j".repeat(32)),
            ..Default::default()
        };
        assert_eq!(mint(&jwt, None, &claims()).unwrap().split('.').count(), 3);
        let hs512 = AuthConfig {
            jwt_secret: Some("j".repeat(64)),
            jwt_algorithm: Some("HS512".into()),
            ..jwt.clone()
        };
        let token = mint(&hs512, None, &claims()).unwrap();
        let header = URL_SAFE_NO_PAD
            .decode(token.split('.').next().unwrap())
            .unwrap();
        assert!(
            String::from_utf8_lossy(&header).contains("\"HS512\""),
            "{token}"
        );
        assert!(mint(&AuthConfig::default(), None, &claims()).is_err());
    }

    #[test]
    fn a_secret_the_server_would_refuse_mints_nothing() {
        for config in [
            AuthConfig {
                mode: Mode::Jwt,
                jwt_secret: Some(String::new()),
                ..Default::default()
            },
            AuthConfig {
                mode: Mode::Jwt,
                jwt_secret: Some("j".repeat(31)),
                ..Default::default()
            },
            AuthConfig {
                mode: Mode::PhoenixToken,
                secret_key_base: Some("k".repeat(19)),
                ..Default::default()
            },
        ] {
            let err = mint(&config, None, &claims()).unwrap_err().to_string();
            assert!(
                err.contains("too short") || err.contains("(empty)"),
                "{err}"
            );
        }
    }
}
