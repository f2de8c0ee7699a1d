//! The weak-secret rule: one function ([`check`]) and one table of
//! minimums ([`Kind::minimum`]) decide whether a secret the server signs or
//! checks with is good enough to start with. Every secret goes through it:
//! the JWT secret, the Phoenix `secret_key_base`, the hooks secret and the
//! server API key, at `throng serve` (before any port or worker is
//! started), in `throng check-config` and in `throng token`; a secret a
//! later feature adds is one more [`Kind`] and one more row.
//!
//! Lengths are bytes of the value as given (the bytes the HMAC keys with);
//! an empty value is refused like a short one, so a variable set but empty
//! (`THRONG_AUTH_JWT_SECRET=`, a deploy that lost its secret) never reads
//! as "no secret". The value itself never appears in a message: only its
//! length and where it came from.

use std::fmt;
use std::path::{Path, PathBuf};

/// How to make a good secret, as every refusal says.
pub const HOW_TO_MAKE_ONE: &str =
    "make one with `openssl rand -base64 48`, or copy a fresh one from `throng gen-config`";

/// The HMAC a JWT secret keys: its hash size is the key's minimum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JwtHmac {
    Hs256,
    Hs384,
    Hs512,
}

/// A secret the server signs or checks with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `--auth-jwt-secret`: the HMAC key of JWTs (`[auth] jwt_secret`).
    JwtSecret(JwtHmac),
    /// `--auth-secret-key-base`: the Phoenix endpoint's `secret_key_base`
    /// (`[auth] secret_key_base`), which Phoenix.Token keys derive from.
    SecretKeyBase,
    /// `--hook-secret`: the key of the hook requests' HMAC-SHA256
    /// signature (`[hooks] secret`).
    HookSecret,
    /// `--api-key`: the key server API requests send (`api_key`).
    ApiKey,
    /// A Pusher app's secret (`--pusher-app ID:KEY:SECRET`,
    /// `[[pusher.apps]] secret`): the key of the channel, user, HTTP API
    /// and webhook signatures.
    PusherSecret,
}

/// One row of the table: below `refuse` bytes the server does not start;
/// below `warn` it starts and says why it should not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Minimum {
    pub refuse: usize,
    pub warn: usize,
    /// Why the minimum is what it is, for a refusal.
    pub why: &'static str,
    /// Why a length between `refuse` and `warn` is suspect, for a warning.
    pub warn_why: &'static str,
}

impl Kind {
    /// The table of minimums, one row per kind.
    pub fn minimum(self) -> Minimum {
        match self {
            // RFC 7518 section 3.2: "A key of the same size as the hash
            // output (for instance, 256 bits for "HS256") or larger MUST be
            // used". HS384 and HS512 are only ever chosen explicitly
            // (`--auth-jwt-algorithm`; a secret alone means HS256), so their
            // larger hash sizes, 48 and 64 bytes, apply when they are.
            Kind::JwtSecret(JwtHmac::Hs256) => Minimum {
                refuse: 32,
                warn: 32,
                why: "an HS256 key under 32 bytes can be guessed, and whoever guesses it signs \
                      tokens as any user (RFC 7518 section 3.2: at least the hash's size)",
                warn_why: "",
            },
            Kind::JwtSecret(JwtHmac::Hs384) => Minimum {
                refuse: 48,
                warn: 48,
                why: "an HS384 key under 48 bytes can be guessed, and whoever guesses it signs \
                      tokens as any user (RFC 7518 section 3.2: at least the hash's size)",
                warn_why: "",
            },
            Kind::JwtSecret(JwtHmac::Hs512) => Minimum {
                refuse: 64,
                warn: 64,
                why: "an HS512 key under 64 bytes can be guessed, and whoever guesses it signs \
                      tokens as any user (RFC 7518 section 3.2: at least the hash's size)",
                warn_why: "",
            },
            // Phoenix.Token refuses a key base under 20 bytes (phoenix's
            // lib/phoenix/token.ex: `get_key_base/1` only matches
            // `byte_size(string) >= 20`, and its doc asks for "at least 20
            // randomly generated characters"); `mix phx.gen.secret` makes 64
            // (lib/mix/tasks/phx.gen.secret.ex) and Plug's cookie session
            // store refuses fewer (plug's lib/plug/session/cookie.ex,
            // `validate_secret_key_base/1`), so the app's own key base is
            // 64 bytes or more and a shorter one is most likely not it.
            Kind::SecretKeyBase => Minimum {
                refuse: 20,
                warn: 64,
                why: "Phoenix.Token itself refuses a secret_key_base under 20 bytes, and \
                      whoever guesses it signs tokens as any user",
                warn_why: "Phoenix.Token takes it, but `mix phx.gen.secret` makes 64 bytes and \
                           Phoenix's cookie sessions need 64, so it is likely not your app's \
                           own secret_key_base, and short enough to weaken its tokens",
            },
            // The hooks secret keys HMAC-SHA256 over every request body:
            // the same rule as an HS256 JWT secret (RFC 2104 section 3: a
            // key shorter than the hash output "is strongly discouraged"),
            // since whoever has it can send the backend requests it trusts.
            Kind::HookSecret => Minimum {
                refuse: 32,
                warn: 32,
                why: "whoever guesses a hooks secret under 32 bytes can sign requests your \
                      backend takes for throng's (HMAC-SHA256 wants a key at least as long as \
                      its 32-byte hash, RFC 2104 section 3)",
                warn_why: "",
            },
            // The API key is compared, not used as an HMAC key: 16 bytes
            // of random text are past any online guessing.
            Kind::ApiKey => Minimum {
                refuse: 16,
                warn: 16,
                why: "whoever guesses an API key under 16 bytes can broadcast to any topic and \
                      disconnect any user (leave --api-key out for an API without a key, on \
                      loopback only)",
                warn_why: "",
            },
            // Hosted Pusher issues 20-character secrets (80 bits of hex),
            // which apps that move here keep in their SDKs' configuration:
            // the minimum takes those, and nothing shorter.
            Kind::PusherSecret => Minimum {
                refuse: 20,
                warn: 20,
                why: "whoever guesses a Pusher app secret under 20 bytes can sign private and \
                      presence subscriptions as any user and trigger events through the HTTP \
                      API (hosted Pusher's own secrets are 20 characters)",
                warn_why: "",
            },
        }
    }

    /// What a person calls it.
    pub fn what(self) -> &'static str {
        match self {
            Kind::JwtSecret(_) => "the JWT secret",
            Kind::SecretKeyBase => "the Phoenix secret_key_base",
            Kind::HookSecret => "the hooks secret",
            Kind::ApiKey => "the server API key",
            Kind::PusherSecret => "a Pusher app's secret",
        }
    }

    /// How to get a good one, as its refusal says.
    pub fn fix(self) -> String {
        match self {
            // It must be the Phoenix app's, whose tokens throng verifies.
            Kind::SecretKeyBase => format!(
                "give your Phoenix app's own secret_key_base (`mix phx.gen.secret` makes one \
                 of 64 bytes); to try throng alone, {HOW_TO_MAKE_ONE}"
            ),
            _ => HOW_TO_MAKE_ONE.to_string(),
        }
    }

    /// Its flag.
    pub fn flag(self) -> &'static str {
        match self {
            Kind::JwtSecret(_) => "--auth-jwt-secret",
            Kind::SecretKeyBase => "--auth-secret-key-base",
            Kind::HookSecret => "--hook-secret",
            Kind::ApiKey => "--api-key",
            Kind::PusherSecret => "--pusher-app ID:KEY:SECRET",
        }
    }

    /// Its environment variable.
    pub fn env(self) -> &'static str {
        match self {
            Kind::JwtSecret(_) => "THRONG_AUTH_JWT_SECRET",
            Kind::SecretKeyBase => "THRONG_AUTH_SECRET_KEY_BASE",
            Kind::HookSecret => "THRONG_HOOK_SECRET",
            Kind::ApiKey => "THRONG_API_KEY",
            Kind::PusherSecret => "THRONG_PUSHER_APPS",
        }
    }

    /// Its key in the config file, with its table.
    pub fn key(self) -> &'static str {
        match self {
            Kind::JwtSecret(_) => "[auth] jwt_secret",
            Kind::SecretKeyBase => "[auth] secret_key_base",
            Kind::HookSecret => "[hooks] secret",
            Kind::ApiKey => "api_key",
            Kind::PusherSecret => "[[pusher.apps]] secret",
        }
    }
}

/// Where a secret came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Its flag on the command line.
    Flag,
    /// Its environment variable.
    Env,
    /// Its key in this config file.
    File(PathBuf),
    /// Settings built in code (the library's `Config`), not read from
    /// flags, the environment or a file.
    Settings,
}

impl Source {
    /// Where a value the command line gave (the flag, or clap's fallback,
    /// the variable) came from: the variable when it holds this value.
    pub fn of_arg(kind: Kind, value: &str) -> Source {
        match std::env::var(kind.env()) {
            Ok(v) if v == value => Source::Env,
            _ => Source::Flag,
        }
    }

    /// Where a value came from when the command line (`from_args`) goes
    /// over the file `file` (`None`: no file given).
    pub fn of(kind: Kind, from_args: Option<&str>, file: Option<&Path>) -> Source {
        match (from_args, file) {
            (Some(v), _) => Source::of_arg(kind, v),
            (None, Some(path)) => Source::File(path.to_path_buf()),
            (None, None) => Source::Settings,
        }
    }
}

/// What the rule decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Long enough.
    Ok,
    /// The server starts, and logs this.
    Warn(String),
    /// The server does not start: this is why, and the fix.
    Refuse(String),
}

/// A secret's length as `check-config` shows it instead of its value:
/// `(empty)`, `(12 bytes: too short, needs 32)`, or, once it is long
/// enough, `[REDACTED]`.
pub fn shown(kind: Kind, value: &str) -> String {
    match state(kind, value) {
        Some(state) => state,
        None => "[REDACTED]".into(),
    }
}

/// `(empty)` or `(N bytes: too short, needs M)` for a refused value.
fn state(kind: Kind, value: &str) -> Option<String> {
    let min = kind.minimum();
    match value.len() {
        0 => Some("(empty)".into()),
        n if n < min.refuse => Some(format!("({n} bytes: too short, needs {})", min.refuse)),
        _ => None,
    }
}

/// Names the setting and where this value of it came from.
struct Origin<'a>(Kind, &'a Source);

impl fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Origin(kind, source) = *self;
        let (flag, env, key) = (kind.flag(), kind.env(), kind.key());
        match source {
            Source::Flag => write!(f, "{flag} (the flag; or {env})"),
            Source::Env => write!(f, "{env} (the environment variable; or {flag})"),
            Source::File(path) => write!(
                f,
                "{key} in {} (the config file; or {flag}, {env})",
                path.display()
            ),
            Source::Settings => write!(f, "{flag} ({env}, {key})"),
        }
    }
}

/// The rule: whether `value`, given for `kind` through `source`, is good
/// enough to start with.
pub fn check(kind: Kind, value: &str, source: &Source) -> Verdict {
    let min = kind.minimum();
    let what = kind.what();
    let origin = Origin(kind, source);
    if let Some(state) = state(kind, value) {
        let set_but_empty = match (value.is_empty(), source) {
            (true, Source::Env) => {
                ", set but empty (which is not unset: a variable the deploy did not fill?)"
            }
            _ => "",
        };
        return Verdict::Refuse(format!(
            "{what}, {origin}, is refused {state}{set_but_empty}: {}. Give one of at least {} \
             bytes: {}",
            min.why,
            min.refuse,
            kind.fix()
        ));
    }
    if value.len() < min.warn {
        return Verdict::Warn(format!(
            "{what}, {origin}, is {} bytes: {}. At least {} bytes: {}",
            value.len(),
            min.warn_why,
            min.warn,
            kind.fix()
        ));
    }
    Verdict::Ok
}

/// A fresh secret that every row of the table takes without a warning:
/// 48 random bytes from the OS, base64url (64 characters), what
/// `openssl rand -base64 48` makes, without `+` and `/`; `throng gen-config`
/// writes one for each secret key.
pub fn generate() -> Result<String, getrandom::Error> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    let mut bytes = [0u8; 48];
    getrandom::fill(&mut bytes)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// What [`check`] found for several secrets: every refusal and warning.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Judged {
    pub refusals: Vec<String>,
    pub warnings: Vec<String>,
}

impl Judged {
    /// Checks one more secret, if it is set.
    pub fn add(&mut self, kind: Kind, value: Option<&str>, source: &Source) {
        let Some(value) = value else { return };
        match check(kind, value, source) {
            Verdict::Ok => {}
            Verdict::Warn(w) => self.warnings.push(w),
            Verdict::Refuse(r) => self.refusals.push(r),
        }
    }

    /// Every refusal as one error text, one per line; `Ok` when none.
    pub fn result(&self) -> Result<(), String> {
        if self.refusals.is_empty() {
            Ok(())
        } else {
            Err(self.refusals.join("\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(kind: Kind, value: &str, source: &Source) -> String {
        match check(kind, value, source) {
            Verdict::Refuse(text) => text,
            other => panic!("{kind:?} of {} bytes: {other:?}", value.len()),
        }
    }

    /// Each kind: empty, 1 byte and one byte short are refused (saying
    /// the length, the flag, the variable and the fix); the minimum is not.
    fn refuses_below(kind: Kind, minimum: usize) {
        assert_eq!(kind.minimum().refuse, minimum);
        for len in [0, 1, minimum - 1] {
            let text = refused(kind, &"x".repeat(len), &Source::Flag);
            let state = if len == 0 {
                "(empty)".to_string()
            } else {
                format!("({len} bytes: too short, needs {minimum})")
            };
            assert!(text.contains(&state), "{text}");
            assert!(
                text.contains(kind.flag()) && text.contains(kind.env()),
                "{text}"
            );
            assert!(text.contains("openssl rand -base64 48"), "{text}");
            assert!(text.contains("throng gen-config"), "{text}");
            assert_eq!(shown(kind, &"x".repeat(len)), state);
        }
        assert!(!matches!(
            check(kind, &"x".repeat(minimum), &Source::Flag),
            Verdict::Refuse(_)
        ));
        assert_eq!(shown(kind, &"x".repeat(minimum)), "[REDACTED]");
    }

    #[test]
    fn jwt_secrets_need_the_hash_size() {
        refuses_below(Kind::JwtSecret(JwtHmac::Hs256), 32);
        refuses_below(Kind::JwtSecret(JwtHmac::Hs384), 48);
        refuses_below(Kind::JwtSecret(JwtHmac::Hs512), 64);
        let kind = Kind::JwtSecret(JwtHmac::Hs256);
        assert_eq!(check(kind, &"k".repeat(32), &Source::Env), Verdict::Ok);
        assert!(refused(kind, "short", &Source::Flag).contains("RFC 7518"));
    }

    #[test]
    fn secret_key_base_refused_under_20_and_warned_under_64() {
        refuses_below(Kind::SecretKeyBase, 20);
        let Verdict::Warn(w) = check(Kind::SecretKeyBase, &"k".repeat(63), &Source::Flag) else {
            panic!("63 bytes: a warning");
        };
        assert!(
            w.contains("63 bytes") && w.contains("phx.gen.secret"),
            "{w}"
        );
        assert_eq!(
            check(Kind::SecretKeyBase, &"k".repeat(64), &Source::Flag),
            Verdict::Ok
        );
    }

    #[test]
    fn hook_secret_needs_32_bytes() {
        refuses_below(Kind::HookSecret, 32);
        assert_eq!(
            check(Kind::HookSecret, &"k".repeat(32), &Source::Flag),
            Verdict::Ok
        );
    }

    #[test]
    fn api_key_needs_16_bytes() {
        refuses_below(Kind::ApiKey, 16);
        assert_eq!(
            check(Kind::ApiKey, &"k".repeat(16), &Source::Flag),
            Verdict::Ok
        );
    }

    #[test]
    fn pusher_secret_needs_20_bytes() {
        refuses_below(Kind::PusherSecret, 20);
        // A hosted Pusher app's secret: 20 hex characters.
        assert_eq!(
            check(Kind::PusherSecret, "7ad3773142a6692b25b8", &Source::Flag),
            Verdict::Ok
        );
    }

    #[test]
    fn the_message_says_where_the_secret_came_from() {
        let kind = Kind::JwtSecret(JwtHmac::Hs256);
        let env = refused(kind, "", &Source::Env);
        assert!(
            env.starts_with("the JWT secret, THRONG_AUTH_JWT_SECRET"),
            "{env}"
        );
        assert!(env.contains("set but empty"), "{env}");
        let file = refused(kind, "abc", &Source::File("/etc/throng.toml".into()));
        assert!(
            file.contains("[auth] jwt_secret in /etc/throng.toml")
                && file.contains("--auth-jwt-secret")
                && file.contains("THRONG_AUTH_JWT_SECRET")
                && file.contains("(3 bytes: too short, needs 32)"),
            "{file}"
        );
        // The value is never in the text.
        let secret = "hunter2-hunter2";
        assert!(!refused(kind, secret, &Source::Flag).contains(secret));
    }

    #[test]
    fn a_generated_secret_passes_every_row() {
        let kinds = [
            Kind::JwtSecret(JwtHmac::Hs256),
            Kind::JwtSecret(JwtHmac::Hs384),
            Kind::JwtSecret(JwtHmac::Hs512),
            Kind::SecretKeyBase,
            Kind::HookSecret,
            Kind::ApiKey,
        ];
        let a = generate().unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, generate().unwrap());
        for kind in kinds {
            assert_eq!(check(kind, &a, &Source::Settings), Verdict::Ok, "{kind:?}");
        }
    }

    #[test]
    fn judged_gathers_every_refusal() {
        let mut j = Judged::default();
        j.add(Kind::ApiKey, Some("k"), &Source::Flag);
        j.add(Kind::HookSecret, None, &Source::Flag);
        j.add(Kind::SecretKeyBase, Some(&"k".repeat(40)), &Source::Flag);
        assert_eq!(j.refusals.len(), 1);
        assert_eq!(j.warnings.len(), 1);
        assert!(j.result().unwrap_err().contains("--api-key"));
        assert_eq!(Judged::default().result(), Ok(()));
    }
}
