//! `Phoenix.Token.verify/4`, so a Phoenix app moving its sockets here keeps
//! the tokens it already hands out (`Phoenix.Token.sign(endpoint, salt, id)`).
//!
//! As Phoenix 1.7 (`lib/phoenix/token.ex`) and Plug.Crypto 2
//! (`lib/plug/crypto.ex` `sign/verify`, `lib/plug/crypto/message_verifier.ex`,
//! `lib/plug/crypto/key_generator.ex`) do it:
//! - key = PBKDF2-HMAC-SHA256(secret_key_base, salt, 1000 iterations, 32
//!   bytes), derived once at start;
//! - token = `base64url("HS256") . base64url(payload) . base64url(HMAC-SHA256(key, first two parts))`,
//!   unpadded (`SFMyNTY.<payload>.<mac>`), compared in constant time;
//! - payload = `:erlang.term_to_binary({data, signed_at_ms, max_age_s})`;
//!   the older shapes mean a max age of 86400, as Plug.Crypto's `decode/2`
//!   reads them: `{data, signed_at_ms}` (Plug.Crypto 1.1) and the map
//!   `%{data: data, signed: signed_at_ms}` that Phoenix 1.3/1.4's
//!   `Phoenix.Token.sign` wrote (apps upgrading in place still hold them);
//! - expired when `signed_at + trunc(max_age * 1000) < now` (the configured
//!   max age overrides the token's, as `verify/4`'s `:max_age` option does;
//!   a max age may be an integer or a float, as `Phoenix.Token.sign(..,
//!   max_age: 86400.0)` writes it; 0 or less is always expired, `:infinity`
//!   never). Plug.Crypto's `lib/plug/crypto.ex` (`decode/2`, `expired?/2`).
//!
//! Plug.Crypto accepts a token signed in the future; we refuse one signed
//! more than [`CLOCK_SKEW`] ahead (a clock that far off, or a forged clock,
//! would otherwise stretch the token's life).
//!
//! The term is decoded with the `eetf` crate, and only after the signature
//! checked out: unsigned bytes never reach the decoder. The user id is the
//! data when it is an integer, a UTF-8 binary or an atom, or the `id` /
//! `user_id` of a map.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use eetf::Term;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{MaxAge, Refusal, User, Verified, CLOCK_SKEW};

/// `Base.url_encode64("HS256", padding: false)`.
pub(super) const PROTECTED: &str = "SFMyNTY";
/// Plug.Crypto's defaults: `:key_iterations`, `:key_length`.
const ITERATIONS: u32 = 1000;
const KEY_LEN: usize = 32;
/// The max age (ms) Plug.Crypto assumes for a token that does not carry one.
const DEFAULT_MAX_AGE_MS: i64 = 86_400_000;

/// A verifier for one secret_key_base and salt.
pub(super) struct PhoenixToken {
    key: [u8; KEY_LEN],
    max_age: Option<MaxAge>,
}

impl PhoenixToken {
    pub fn new(secret_key_base: &[u8], salt: &[u8], max_age: Option<MaxAge>) -> PhoenixToken {
        PhoenixToken {
            key: derive_key(secret_key_base, salt),
            max_age,
        }
    }

    pub fn verify(&self, token: &str, now_ms: i64) -> Result<Verified, Refusal> {
        let invalid = |why: &str| Refusal::Invalid(why.to_string());
        let mut parts = token.splitn(3, '.');
        let (Some(protected), Some(payload), Some(signature)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid("not a Phoenix.Token"));
        };
        if protected != PROTECTED {
            return Err(invalid("not an HS256 Phoenix.Token"));
        }
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| invalid("signature is not base64url"))?;
        let signed_len = protected.len() + 1 + payload.len();
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(&token.as_bytes()[..signed_len]);
        mac.verify_slice(&signature)
            .map_err(|_| invalid("bad signature"))?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| invalid("payload is not base64url"))?;
        let term =
            Term::decode(payload.as_slice()).map_err(|_| invalid("payload is not a term"))?;
        // max_age in ms; None: :infinity.
        let (data, signed, max_age) = match term {
            Term::Tuple(t) if t.elements.len() == 3 || t.elements.len() == 2 => {
                let mut e = t.elements.into_iter();
                let data = e.next().expect("length checked");
                let signed = e.next().expect("length checked");
                let max_age = match e.next() {
                    None => Some(DEFAULT_MAX_AGE_MS),
                    Some(Term::Atom(a)) if a.name == "infinity" => None,
                    Some(other) => Some(max_age_ms(&other).ok_or_else(|| invalid("bad max_age"))?),
                };
                (data, signed, max_age)
            }
            // Phoenix 1.3/1.4: %{data: data, signed: signed_at_ms}.
            Term::Map(mut m) if m.map.len() == 2 => {
                let mut take = |k: &str| m.map.remove(&Term::Atom(eetf::Atom::from(k)));
                match (take("data"), take("signed")) {
                    (Some(data), Some(signed)) => (data, signed, Some(DEFAULT_MAX_AGE_MS)),
                    _ => return Err(invalid("payload is not %{data, signed}")),
                }
            }
            _ => return Err(invalid("payload is not {data, signed_at, max_age}")),
        };
        let signed_at = integer(&signed).ok_or_else(|| invalid("bad signed_at"))?;
        let max_age = match self.max_age {
            Some(configured) => Some(configured.as_millis().min(i64::MAX as u64) as i64),
            None => max_age,
        };
        if let Some(age) = max_age {
            if age <= 0 || signed_at.saturating_add(age) < now_ms {
                return Err(Refusal::Expired);
            }
        }
        if signed_at > now_ms + CLOCK_SKEW.as_millis() as i64 {
            return Err(Refusal::SignedInFuture);
        }
        let id = user_id(&data).ok_or_else(|| invalid("token data is not a user id"))?;
        Ok(Verified {
            user: User { id, channels: None },
            signed_at_ms: Some(signed_at),
        })
    }
}

/// `Plug.Crypto.KeyGenerator.generate(secret, salt, 1000, 32, :sha256)`.
pub(super) fn derive_key(secret_key_base: &[u8], salt: &[u8]) -> [u8; KEY_LEN] {
    let mut key = [0u8; KEY_LEN];
    pbkdf2::pbkdf2_hmac::<Sha256>(secret_key_base, salt, ITERATIONS, &mut key);
    key
}

/// A token's max age in ms: whole or fractional seconds, `trunc(s * 1000)`.
fn max_age_ms(t: &Term) -> Option<i64> {
    match t {
        // `as` saturates, and a NaN (not writable by term_to_binary) is 0.
        Term::Float(f) => Some((f.value * 1000.0).trunc() as i64),
        other => integer(other).map(|s| s.saturating_mul(1000)),
    }
}

fn integer(t: &Term) -> Option<i64> {
    match t {
        Term::FixInteger(i) => Some(i.value as i64),
        Term::BigInteger(b) => i64::try_from(&b.value).ok(),
        _ => None,
    }
}

/// The user id a token's data names.
fn user_id(data: &Term) -> Option<String> {
    match data {
        Term::FixInteger(i) => Some(i.value.to_string()),
        Term::BigInteger(b) => Some(b.value.to_string()),
        Term::Binary(b) => String::from_utf8(b.bytes.clone()).ok(),
        Term::Atom(a) if !matches!(a.name.as_str(), "nil" | "true" | "false") => {
            Some(a.name.clone())
        }
        Term::Map(m) => ["id", "user_id"].iter().find_map(|k| {
            let atom = Term::Atom(eetf::Atom::from(*k));
            let binary = Term::Binary(eetf::Binary::from(k.as_bytes()));
            m.map
                .get(&atom)
                .or_else(|| m.map.get(&binary))
                .and_then(user_id)
        }),
        _ => None,
    }
    .filter(|id| !id.is_empty())
}

#[cfg(test)]
pub(super) mod tests {
    //! Tokens minted here from the spec in the module doc, with the term
    //! bytes written by hand (not by `eetf`), a fixed secret, salt and time.

    use super::*;

    const SECRET: &str = "iI1r9uQHk5aJm0Zp3nXvS8yT2wLcBdEfGhJkMnPqRsTuVwXyZ0123456789abcd";
    const SALT: &str = "user socket";
    /// 2023-11-14T22:13:20Z.
    const SIGNED_AT: i64 = 1_700_000_000_000;

    /// `:erlang.term_to_binary(n)` for an integer as Erlang writes it:
    /// SMALL_INTEGER_EXT, INTEGER_EXT, or SMALL_BIG_EXT with the fewest bytes.
    fn ext_integer(out: &mut Vec<u8>, n: i64) {
        if (0..=255).contains(&n) {
            out.extend([97, n as u8]);
        } else if i32::try_from(n).is_ok() {
            out.push(98);
            out.extend((n as i32).to_be_bytes());
        } else {
            let (sign, mut m) = (u8::from(n < 0), n.unsigned_abs());
            let mut digits = Vec::new();
            while m > 0 {
                digits.push((m & 0xff) as u8);
                m >>= 8;
            }
            out.extend([110, digits.len() as u8, sign]);
            out.extend(digits);
        }
    }

    /// `{data, signed_at, max_age}` with `data` already encoded (no 131 tag).
    fn payload(data: &[u8], signed_at: i64, max_age: i64) -> Vec<u8> {
        let mut p = vec![131, 104, 3];
        p.extend_from_slice(data);
        ext_integer(&mut p, signed_at);
        ext_integer(&mut p, max_age);
        p
    }

    fn binary_ext(b: &[u8]) -> Vec<u8> {
        let mut out = vec![109];
        out.extend((b.len() as u32).to_be_bytes());
        out.extend_from_slice(b);
        out
    }

    fn sign_payload(secret: &str, salt: &str, payload: &[u8]) -> String {
        let key = derive_key(secret.as_bytes(), salt.as_bytes());
        let plain = format!("{PROTECTED}.{}", URL_SAFE_NO_PAD.encode(payload));
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
        mac.update(plain.as_bytes());
        format!(
            "{plain}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        )
    }

    /// `Phoenix.Token.sign(secret, salt, "<data>", signed_at: .., max_age: ..)`.
    pub(in crate::auth) fn sign_binary(
        secret: &str,
        salt: &str,
        data: &[u8],
        signed_at_ms: i64,
        max_age: i64,
    ) -> String {
        sign_payload(
            secret,
            salt,
            &payload(&binary_ext(data), signed_at_ms, max_age),
        )
    }

    fn verifier(max_age: Option<u64>) -> PhoenixToken {
        let max_age = max_age.map(|s| MaxAge::try_from(s as f64).unwrap());
        PhoenixToken::new(SECRET.as_bytes(), SALT.as_bytes(), max_age)
    }

    /// `%{data: "<data>", signed: signed_at}`, as Phoenix 1.3/1.4's
    /// `Phoenix.Token.sign` wrote it: MAP_EXT with atom keys.
    fn legacy_payload(data: &[u8], signed_at: i64) -> Vec<u8> {
        let mut p = vec![131, 116, 0, 0, 0, 2];
        p.extend([119, 4]);
        p.extend(b"data");
        p.extend(binary_ext(data));
        p.extend([119, 6]);
        p.extend(b"signed");
        ext_integer(&mut p, signed_at);
        p
    }

    #[test]
    fn phoenix_1_3_map_tokens_verify_with_the_configured_max_age() {
        let t = sign_payload(SECRET, SALT, &legacy_payload(b"alice", SIGNED_AT));
        let day = 86_400_000;
        let v = verifier(None).verify(&t, SIGNED_AT + day).unwrap();
        assert_eq!(v.user.id, "alice");
        assert_eq!(v.signed_at_ms, Some(SIGNED_AT));
        // No max age inside: a day, as Plug.Crypto; or the configured one.
        assert_eq!(
            verifier(None).verify(&t, SIGNED_AT + day + 1).unwrap_err(),
            Refusal::Expired
        );
        assert!(verifier(Some(2 * 86_400))
            .verify(&t, SIGNED_AT + 2 * day)
            .is_ok());
        assert_eq!(
            verifier(Some(60))
                .verify(&t, SIGNED_AT + 60_001)
                .unwrap_err(),
            Refusal::Expired
        );
        // As OTP before 26 wrote it: ATOM_EXT (latin-1) keys.
        let mut old = vec![131, 116, 0, 0, 0, 2, 100, 0, 4];
        old.extend(b"data");
        old.extend(binary_ext(b"bob"));
        old.extend([100, 0, 6]);
        old.extend(b"signed");
        ext_integer(&mut old, SIGNED_AT);
        let t = sign_payload(SECRET, SALT, &old);
        assert_eq!(verifier(None).verify(&t, SIGNED_AT).unwrap().user.id, "bob");
        // A map without both keys is not a token payload.
        let mut p = vec![131, 116, 0, 0, 0, 2, 119, 4];
        p.extend(b"data");
        p.extend(binary_ext(b"alice"));
        p.extend([119, 4]);
        p.extend(b"sign");
        ext_integer(&mut p, SIGNED_AT);
        let bad = sign_payload(SECRET, SALT, &p);
        assert!(matches!(
            verifier(None).verify(&bad, SIGNED_AT),
            Err(Refusal::Invalid(_))
        ));
    }

    #[test]
    fn a_float_max_age_is_seconds() {
        // Phoenix.Token.sign(.., max_age: 1.5): NEW_FLOAT_EXT.
        let mut p = vec![131, 104, 3];
        p.extend(binary_ext(b"u"));
        ext_integer(&mut p, SIGNED_AT);
        p.push(70);
        p.extend(1.5f64.to_be_bytes());
        let t = sign_payload(SECRET, SALT, &p);
        assert!(verifier(None).verify(&t, SIGNED_AT + 1_500).is_ok());
        assert_eq!(
            verifier(None).verify(&t, SIGNED_AT + 1_501).unwrap_err(),
            Refusal::Expired
        );
        // The configured max age may be fractional too.
        let half: MaxAge = "0.5".parse().unwrap();
        let v = PhoenixToken::new(SECRET.as_bytes(), SALT.as_bytes(), Some(half));
        assert!(v.verify(&t, SIGNED_AT + 500).is_ok());
        assert_eq!(v.verify(&t, SIGNED_AT + 501).unwrap_err(), Refusal::Expired);
        assert_eq!(half.to_string(), "0.500");
        assert_eq!("86400.0".parse::<MaxAge>().unwrap().to_string(), "86400");
        assert!("-1".parse::<MaxAge>().is_err());
        assert!("inf".parse::<MaxAge>().is_err());
    }

    #[test]
    fn pbkdf2_key_is_rfc_7914s() {
        // RFC 7914 section 11: PBKDF2-HMAC-SHA256("passwd", "salt", 1, 64).
        let mut out = [0u8; 64];
        pbkdf2::pbkdf2_hmac::<Sha256>(b"passwd", b"salt", 1, &mut out);
        assert_eq!(&out[..8], &[0x55, 0xac, 0x04, 0x6e, 0x56, 0xe3, 0x08, 0x9f]);
    }

    #[test]
    fn integer_user_id_token_verifies() {
        // Phoenix.Token.sign(secret, "user socket", 42, signed_at: 1_700_000_000, max_age: 86400)
        let mut data = Vec::new();
        ext_integer(&mut data, 42);
        let token = sign_payload(SECRET, SALT, &payload(&data, SIGNED_AT, 86_400));
        assert!(token.starts_with("SFMyNTY.g2gDYSp"), "{token}");
        let v = verifier(None).verify(&token, SIGNED_AT + 5_000).unwrap();
        assert_eq!(v.user.id, "42");
        assert_eq!(v.signed_at_ms, Some(SIGNED_AT));
    }

    #[test]
    fn binary_and_map_ids() {
        let t = sign_binary(SECRET, SALT, b"alice", SIGNED_AT, 60);
        assert_eq!(
            verifier(None).verify(&t, SIGNED_AT).unwrap().user.id,
            "alice"
        );
        // %{id: 7} as term_to_binary writes it: MAP_EXT, atom key (SMALL_ATOM_UTF8_EXT).
        let mut map = vec![116, 0, 0, 0, 1, 119, 2, b'i', b'd'];
        ext_integer(&mut map, 7);
        let t = sign_payload(SECRET, SALT, &payload(&map, SIGNED_AT, 60));
        assert_eq!(verifier(None).verify(&t, SIGNED_AT).unwrap().user.id, "7");
        // A list is not a user id.
        let t = sign_payload(SECRET, SALT, &payload(&[106], SIGNED_AT, 60));
        assert!(matches!(
            verifier(None).verify(&t, SIGNED_AT),
            Err(Refusal::Invalid(_))
        ));
    }

    #[test]
    fn expired_by_the_tokens_max_age_or_the_configured_one() {
        let t = sign_binary(SECRET, SALT, b"u", SIGNED_AT, 60);
        assert!(verifier(None).verify(&t, SIGNED_AT + 60_000).is_ok());
        assert_eq!(
            verifier(None).verify(&t, SIGNED_AT + 60_001).unwrap_err(),
            Refusal::Expired
        );
        // The configured max age overrides the token's, both ways.
        assert_eq!(
            verifier(Some(10))
                .verify(&t, SIGNED_AT + 10_001)
                .unwrap_err(),
            Refusal::Expired
        );
        assert!(verifier(Some(3600)).verify(&t, SIGNED_AT + 600_000).is_ok());
        // max_age 0 is always expired, as Plug.Crypto's expired?/2.
        let zero = sign_binary(SECRET, SALT, b"u", SIGNED_AT, 0);
        assert_eq!(
            verifier(None).verify(&zero, SIGNED_AT).unwrap_err(),
            Refusal::Expired
        );
    }

    #[test]
    fn signed_in_the_future_is_refused() {
        let t = sign_binary(SECRET, SALT, b"u", SIGNED_AT, 86_400);
        let skew = CLOCK_SKEW.as_millis() as i64;
        assert!(verifier(None).verify(&t, SIGNED_AT - skew).is_ok());
        assert_eq!(
            verifier(None).verify(&t, SIGNED_AT - skew - 1).unwrap_err(),
            Refusal::SignedInFuture
        );
    }

    #[test]
    fn tampered_tokens_are_invalid() {
        let t = sign_binary(SECRET, SALT, b"alice", SIGNED_AT, 86_400);
        let now = SIGNED_AT + 1;
        let v = verifier(None);
        // Another user's payload under alice's signature.
        let (head, rest) = t.split_once('.').unwrap();
        let (_, sig) = rest.split_once('.').unwrap();
        let mallory = URL_SAFE_NO_PAD.encode(payload(&binary_ext(b"mallory"), SIGNED_AT, 86_400));
        for bad in [
            format!("{head}.{mallory}.{sig}"),
            format!("{t}x"),
            t.replace("SFMyNTY", "SFMzODQ"),
            t[..t.len() - 2].to_string(),
            "SFMyNTY..".to_string(),
            String::new(),
        ] {
            assert!(
                matches!(v.verify(&bad, now), Err(Refusal::Invalid(_))),
                "{bad}"
            );
        }
        // Another salt or secret.
        let other = PhoenixToken::new(SECRET.as_bytes(), b"user auth", None);
        assert!(matches!(other.verify(&t, now), Err(Refusal::Invalid(_))));
    }
}
