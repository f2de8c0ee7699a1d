//! Who may connect, join and push: connect authentication (Phoenix.Token or
//! JWT), the origin check, topic rules, the per-socket push rate, and
//! revocations.
//!
//! Phoenix's `UserSocket.connect/3` verifies a token and returns the socket
//! or `:error` (a 403 before the upgrade); `Socket.id/1` names the user's
//! sockets so `Endpoint.broadcast("users_socket:" <> id, "disconnect", %{})`
//! can close them all. Here the same is configured, not coded:
//!
//! - [`Auth::authenticate`] takes what a transport learned before the
//!   upgrade ([`ConnectInfo`]: the `token` param or the `authToken`) and
//!   answers the [`User`] or a [`Refusal`]. The WebSocket transport and the
//!   long-poll transport both call it, so both refuse alike.
//! - `phoenix_token.rs`: `Phoenix.Token.verify/4`, byte for byte.
//! - `jwt.rs`: JWTs (HS256 with a secret, RS256/ES256 with a public key),
//!   through the `jsonwebtoken` crate.
//! - `origin.rs`: `check_origin`, as `Phoenix.Socket.Transport`.
//! - `rules.rs`: `[[topics]]` rules: who may join which topic and push
//!   which events, and the JWT `channels` claim.
//! - `rate.rs`: the per-socket push budget, 4 bytes in the connection.
//! - [`mint`]: test tokens (`throng token`), signed with the same settings
//!   and checked by [`Auth::authenticate`] before they are handed out.
//! - [`secret`]: the weak-secret rule every secret goes through (the JWT
//!   secret and `secret_key_base` here, the hooks secret and the API key
//!   in `config`).
//!
//! Revocations are kept in memory on every node (a `disconnect` with
//! `revoke` from the server API reaches every node through the backplane):
//! tokens of that user signed before the revocation, or up to the revoke
//! skew (`--auth-revoke-skew`) after it, are refused from then on, for
//! [`REVOCATION_TTL`] or the configured max age if longer. With
//! `--redis` they are also kept in Redis for that long (see the `control` module),
//! so a node started later knows them before it serves; a single node
//! forgets them when it restarts.

mod jwt;
pub mod mint;
pub(crate) mod origin;
mod phoenix_token;
pub(crate) mod rate;
pub mod secret;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

pub use origin::CheckOrigin;
pub use rate::PushLimit;

use crate::channel::ConnectInfo;
use crate::Error;

/// The topic prefix of a user's sockets (Phoenix's `Socket.id/1` convention,
/// `"users_socket:" <> user_id`). Clients cannot join such topics.
pub const SOCKET_ID_PREFIX: &str = "users_socket:";
/// Topics of the nodes' own traffic (requests between nodes); reserved.
pub const CONTROL_PREFIX: &str = "throng:";
/// How far in the future a token may say it was signed (clock skew between
/// the app that signs and this server) before it is refused.
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);
/// How long a revocation is kept at least.
pub const REVOCATION_TTL: Duration = Duration::from_secs(86_400);
/// Seconds after a revocation within which a token signed is still taken
/// for one from before it (`--auth-revoke-skew`'s default): the app that
/// signs may run a little ahead of this server's clock. Short, so that a
/// user who logs out and back in gets a token that connects. Apart from
/// [`CLOCK_SKEW`], which bounds how far ahead any token may claim to be.
pub const REVOKE_SKEW_SECS: u64 = 2;
/// The largest `--auth-revoke-skew`.
pub const MAX_REVOKE_SKEW_SECS: u64 = 3600;

/// Whether clients may join or broadcast on `topic` (the socket id and
/// control topics are the server's own; `pusher/...` topics are the Pusher
/// protocol's channels, which Phoenix clients and the server API do not
/// name).
pub fn is_reserved(topic: &str) -> bool {
    topic.starts_with(SOCKET_ID_PREFIX)
        || topic.starts_with(CONTROL_PREFIX)
        || topic.starts_with(throng_protocol::PUSHER_TOPIC_PREFIX)
}

/// How connections are authenticated (`[auth] mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Mode {
    /// Everyone connects, anonymous (the chat demo).
    #[default]
    None,
    /// `Phoenix.Token.sign(secret_key_base, salt, user_id)` tokens.
    PhoenixToken,
    /// JWTs with `sub` = the user id.
    Jwt,
}

impl Mode {
    /// As written in the flag and the file: `none`, `phoenix_token`, `jwt`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::PhoenixToken => "phoenix_token",
            Mode::Jwt => "jwt",
        }
    }
}

/// The `[auth]` settings, as configured.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub mode: Mode,
    /// Phoenix.Token: the endpoint's `secret_key_base`.
    pub secret_key_base: Option<String>,
    /// Phoenix.Token: the salt given to `Phoenix.Token.sign/4` [default: "user socket"].
    pub salt: Option<String>,
    /// Phoenix.Token: refuse tokens older than this many seconds (the
    /// `max_age` of `Phoenix.Token.verify/4`, a whole or fractional number);
    /// default: the age signed in the token (86400 unless the app chose
    /// another).
    pub max_age: Option<MaxAge>,
    /// JWT: the HS256 secret.
    pub jwt_secret: Option<String>,
    /// JWT: a PEM public key (RSA for RS256, EC P-256 for ES256).
    pub jwt_public_key: Option<String>,
    /// JWT: a file holding the PEM public key.
    pub jwt_public_key_file: Option<std::path::PathBuf>,
    /// JWT: HS256, HS384, HS512, RS256 or ES256 [default: from the key].
    pub jwt_algorithm: Option<String>,
    /// JWT: when set, the `aud` claim is required and must name it.
    pub jwt_audience: Option<String>,
    /// JWT: when set, the `iss` claim is required and must be it.
    pub jwt_issuer: Option<String>,
    /// Seconds after a revocation within which signed tokens are revoked
    /// too [default: [`REVOKE_SKEW_SECS`]].
    pub revoke_skew: Option<u64>,
}

impl AuthConfig {
    /// The HMAC a `jwt_secret` keys: HS384 or HS512 when `jwt_algorithm`
    /// names it, else HS256.
    pub fn jwt_hmac(&self) -> secret::JwtHmac {
        match self.jwt_algorithm.as_deref().map(str::to_ascii_uppercase) {
            Some(a) if a == "HS384" => secret::JwtHmac::Hs384,
            Some(a) if a == "HS512" => secret::JwtHmac::Hs512,
            _ => secret::JwtHmac::Hs256,
        }
    }

    /// The weak-secret rule ([`secret::check`]) on the secrets this holds,
    /// all come from `source`.
    pub fn judge_secrets(&self, judged: &mut secret::Judged, source: &secret::Source) {
        use secret::Kind;
        judged.add(
            Kind::JwtSecret(self.jwt_hmac()),
            self.jwt_secret.as_deref(),
            source,
        );
        judged.add(Kind::SecretKeyBase, self.secret_key_base.as_deref(), source);
    }
}

/// A max age in seconds, whole or fractional (`86400`, `86400.0`, `0.5`), as
/// Plug.Crypto takes it: `trunc(max_age * 1000)` milliseconds
/// (`lib/plug/crypto.ex`, `expired?/2`). Kept in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct MaxAge {
    ms: u64,
}

impl MaxAge {
    /// The max age in milliseconds.
    pub fn as_millis(self) -> u64 {
        self.ms
    }
}

impl TryFrom<f64> for MaxAge {
    type Error = String;
    fn try_from(secs: f64) -> Result<MaxAge, String> {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!(
                "max age {secs}: give a number of seconds, 0 or more (e.g. 86400)"
            ));
        }
        // `as` saturates: a max age past u64 milliseconds is forever.
        Ok(MaxAge {
            ms: (secs * 1000.0).trunc() as u64,
        })
    }
}

impl From<MaxAge> for f64 {
    fn from(m: MaxAge) -> f64 {
        m.ms as f64 / 1000.0
    }
}

impl std::str::FromStr for MaxAge {
    type Err = String;
    fn from_str(s: &str) -> Result<MaxAge, String> {
        let secs: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("max age {s:?}: give a number of seconds (e.g. 86400)"))?;
        MaxAge::try_from(secs)
    }
}

/// Seconds, as `--auth-max-age` reads them back (the workers' command line).
impl std::fmt::Display for MaxAge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ms % 1000 {
            0 => write!(f, "{}", self.ms / 1000),
            frac => write!(f, "{}.{frac:03}", self.ms / 1000),
        }
    }
}

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub id: String,
    /// The JWT `channels` claim: topic patterns this user may join.
    pub channels: Option<Vec<String>>,
}

/// Why a connect was refused (HTTP 403 before the upgrade).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no token (send the token param or phoenix.js authToken)")]
    Missing,
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("token expired")]
    Expired,
    #[error("token signed in the future")]
    SignedInFuture,
    #[error("token revoked")]
    Revoked,
}

/// What a token verifier found.
#[derive(Debug)]
struct Verified {
    user: User,
    /// When the token was signed (Phoenix.Token's signed_at, JWT `iat`).
    signed_at_ms: Option<i64>,
}

enum Verifier {
    None,
    PhoenixToken(phoenix_token::PhoenixToken),
    Jwt(Box<jwt::Jwt>),
}

/// Connect authentication of one node: the verifier built once from the
/// settings (the Phoenix.Token key is derived here, not per connect) and
/// the revocations this node has heard of.
pub struct Auth {
    verifier: Verifier,
    revoked: Mutex<HashMap<String, i64>>,
    /// `revoked.len()`, read without the lock on every connect.
    revoked_len: AtomicUsize,
    revocation_ttl_ms: i64,
    /// `--auth-revoke-skew` in ms.
    revoke_skew_ms: i64,
}

impl Auth {
    /// Builds the verifier for `config`; a missing or unreadable key is an
    /// error, and so is a secret the weak-secret rule refuses (the settings
    /// of the command line were checked as they were read, saying where
    /// each came from; this holds for settings built in code too).
    pub fn new(config: &AuthConfig) -> Result<Auth, Error> {
        let mut judged = secret::Judged::default();
        config.judge_secrets(&mut judged, &secret::Source::Settings);
        judged.result().map_err(Error::Config)?;
        let skew = config.revoke_skew.unwrap_or(REVOKE_SKEW_SECS);
        if skew > MAX_REVOKE_SKEW_SECS {
            return Err(Error::Config(format!(
                "revoke_skew must be 0..={MAX_REVOKE_SKEW_SECS} seconds, got {skew}"
            )));
        }
        let verifier = match config.mode {
            Mode::None => Verifier::None,
            Mode::PhoenixToken => {
                let secret = config.secret_key_base.as_deref().ok_or_else(|| {
                    Error::Config("auth mode phoenix_token needs secret_key_base".into())
                })?;
                let salt = config.salt.as_deref().unwrap_or("user socket");
                Verifier::PhoenixToken(phoenix_token::PhoenixToken::new(
                    secret.as_bytes(),
                    salt.as_bytes(),
                    config.max_age,
                ))
            }
            Mode::Jwt => Verifier::Jwt(Box::new(jwt::Jwt::new(config)?)),
        };
        let ttl =
            (REVOCATION_TTL.as_millis() as u64).max(config.max_age.map_or(0, MaxAge::as_millis));
        Ok(Auth {
            verifier,
            revoked: Mutex::new(HashMap::new()),
            revoked_len: AtomicUsize::new(0),
            revocation_ttl_ms: ttl.min(i64::MAX as u64) as i64,
            revoke_skew_ms: (skew * 1000) as i64,
        })
    }

    /// Whether connects need a token.
    pub fn required(&self) -> bool {
        !matches!(self.verifier, Verifier::None)
    }

    /// Verifies the token a client connected with: the phoenix.js
    /// `authToken` (subprotocol, or `X-Phoenix-AuthToken` on long-poll) or
    /// else the `token` socket param. `Ok(None)`: anonymous (mode none).
    pub fn authenticate(&self, connect: Option<&ConnectInfo>) -> Result<Option<User>, Refusal> {
        self.authenticate_at(connect, now_ms())
    }

    fn authenticate_at(
        &self,
        connect: Option<&ConnectInfo>,
        now_ms: i64,
    ) -> Result<Option<User>, Refusal> {
        let token = connect.and_then(|c| c.auth_token.as_deref().or_else(|| c.param("token")));
        let verified = match &self.verifier {
            Verifier::None => return Ok(None),
            Verifier::PhoenixToken(v) => v.verify(token.ok_or(Refusal::Missing)?, now_ms)?,
            Verifier::Jwt(v) => v.verify(token.ok_or(Refusal::Missing)?, now_ms)?,
        };
        if self.revoked_len.load(Ordering::Relaxed) > 0 {
            let revoked = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(&at) = revoked.get(&verified.user.id) {
                // A token with no signing time cannot be told from the old ones.
                if verified.signed_at_ms.is_none_or(|t| t <= at) {
                    return Err(Refusal::Revoked);
                }
            }
        }
        Ok(Some(verified.user))
    }

    /// How long a revocation is kept ([`REVOCATION_TTL`], or the max age
    /// if longer).
    pub fn revocation_ttl(&self) -> Duration {
        Duration::from_millis(self.revocation_ttl_ms.max(0) as u64)
    }

    /// Refuses `user`'s tokens signed up to `at_ms` (Unix ms) plus the
    /// revoke skew (`--auth-revoke-skew`, [`REVOKE_SKEW_SECS`] by default)
    /// from now on: one minted just before the revocation by an app whose
    /// clock runs a little ahead is refused too, and one signed after that
    /// (a user who logged out and back in) connects. Every node applies its
    /// own skew to the revocation time it hears (`Request::Revoke`'s `at`).
    pub fn revoke(&self, user: &str, at_ms: i64) {
        let at_ms = at_ms.saturating_add(self.revoke_skew_ms);
        let mut revoked = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
        // Expired ones go each time the map reaches a power of two: amortized
        // O(1), so the revocations a node reads from Redis at start (one call
        // each) do not scan the map once per revocation.
        if revoked.len().is_power_of_two() {
            let horizon = now_ms() - self.revocation_ttl_ms;
            revoked.retain(|_, t| *t > horizon);
        }
        let t = revoked.entry(user.to_string()).or_insert(at_ms);
        *t = (*t).max(at_ms);
        self.revoked_len.store(revoked.len(), Ordering::Relaxed);
    }
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect(token: &str) -> ConnectInfo {
        ConnectInfo {
            params: vec![("token".into(), token.into())],
            ..Default::default()
        }
    }

    #[test]
    fn none_is_anonymous_and_tokens_are_required_otherwise() {
        let none = Auth::new(&AuthConfig::default()).unwrap();
        assert_eq!(none.authenticate(None), Ok(None));
        assert!(!none.required());
        let cfg = AuthConfig {
            mode: Mode::PhoenixToken,
            secret_key_base: Some("k".repeat(64)),
            ..Default::default()
        };
        let auth = Auth::new(&cfg).unwrap();
        assert_eq!(auth.authenticate(None), Err(Refusal::Missing));
        assert!(matches!(
            auth.authenticate(Some(&connect("nope"))),
            Err(Refusal::Invalid(_))
        ));
        let err = Auth::new(&AuthConfig {
            mode: Mode::PhoenixToken,
            ..Default::default()
        })
        .err()
        .unwrap();
        assert!(err.to_string().contains("secret_key_base"), "{err}");
    }

    #[test]
    fn weak_secrets_build_no_verifier() {
        for (cfg, says) in [
            (
                AuthConfig {
                    mode: Mode::Jwt,
                    jwt_secret: Some(String::new()),
                    ..Default::default()
                },
                "(empty)",
            ),
            (
                AuthConfig {
                    mode: Mode::Jwt,
                    jwt_secret: Some("j".repeat(40)),
                    jwt_algorithm: Some("HS384".into()),
                    ..Default::default()
                },
                "(40 bytes: too short, needs 48)",
            ),
            (
                AuthConfig {
                    mode: Mode::PhoenixToken,
                    secret_key_base: Some("k".repeat(19)),
                    ..Default::default()
                },
                "(19 bytes: too short, needs 20)",
            ),
        ] {
            let err = Auth::new(&cfg).err().expect("refused").to_string();
            assert!(err.contains(says), "{err}");
        }
        // Long enough: HS384 with 48 bytes verifies.
        Auth::new(&AuthConfig {
            mode: Mode::Jwt,
            jwt_secret: Some("j".repeat(48)),
            jwt_algorithm: Some("HS384".into()),
            ..Default::default()
        })
        .unwrap();
    }

    #[test]
    fn revocation_refuses_tokens_up_to_the_skew_after_it() {
        let secret = "s".repeat(64);
        let cfg = AuthConfig {
            mode: Mode::PhoenixToken,
            secret_key_base: Some(secret.clone()),
            salt: Some("user socket".into()),
            ..Default::default()
        };
        let auth = Auth::new(&cfg).unwrap();
        let now = now_ms();
        let skew = REVOKE_SKEW_SECS as i64 * 1000;
        let sign = |user: &[u8], at: i64| {
            phoenix_token::tests::sign_binary(&secret, "user socket", user, at, 86400)
        };
        let old = sign(b"7", now - 1000);
        let at_revoke = sign(b"7", now);
        // Signed ahead by the skew exactly: taken for one from before.
        let within = sign(b"7", now + skew);
        // Signed 3 s after the revocation (a user who logged in again).
        let after = sign(b"7", now + 3000);
        let other = sign(b"8", now - 1000);
        assert_eq!(
            auth.authenticate(Some(&connect(&old))).unwrap().unwrap().id,
            "7"
        );
        auth.revoke("7", now);
        for revoked in [&old, &at_revoke, &within] {
            assert_eq!(
                auth.authenticate_at(Some(&connect(revoked)), now),
                Err(Refusal::Revoked)
            );
        }
        assert_eq!(
            auth.authenticate_at(Some(&connect(&after)), now)
                .unwrap()
                .unwrap()
                .id,
            "7"
        );
        assert_eq!(
            auth.authenticate(Some(&connect(&other)))
                .unwrap()
                .unwrap()
                .id,
            "8"
        );
        // A longer skew reaches further; 0 revokes only up to the instant.
        let long = Auth::new(&AuthConfig {
            revoke_skew: Some(10),
            ..cfg.clone()
        })
        .unwrap();
        long.revoke("7", now);
        assert_eq!(
            long.authenticate_at(Some(&connect(&after)), now),
            Err(Refusal::Revoked)
        );
        let none = Auth::new(&AuthConfig {
            revoke_skew: Some(0),
            ..cfg.clone()
        })
        .unwrap();
        none.revoke("7", now);
        assert_eq!(
            none.authenticate_at(Some(&connect(&at_revoke)), now),
            Err(Refusal::Revoked)
        );
        let just_after = sign(b"7", now + 1);
        assert!(none
            .authenticate_at(Some(&connect(&just_after)), now)
            .is_ok());
        assert!(Auth::new(&AuthConfig {
            revoke_skew: Some(MAX_REVOKE_SKEW_SECS + 1),
            ..cfg
        })
        .is_err());
        // The authToken wins over the param.
        let both = ConnectInfo {
            params: vec![("token".into(), "garbage".into())],
            auth_token: Some(other),
            ..Default::default()
        };
        assert_eq!(auth.authenticate(Some(&both)).unwrap().unwrap().id, "8");
    }
}
