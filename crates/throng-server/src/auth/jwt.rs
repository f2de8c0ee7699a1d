//! JWT connect tokens, verified with the `jsonwebtoken` crate: HS256 (or,
//! chosen with `jwt_algorithm`, HS384 or HS512) with a shared secret, RS256
//! or ES256 with the issuer's public key (PEM). The secret's length is the
//! weak-secret rule's (`secret.rs`), checked before this is built.
//!
//! Claims (`docs/authentication.md`'s table says the same):
//! - `sub`: the user id, a non-empty string or an integer (written in
//!   decimal); any other value (a fraction such as `4.2`, a list) is refused;
//! - `exp`: required, a number of seconds (integer or fraction, as standard
//!   libraries emit); refused from that instant on, with no leeway;
//! - `nbf`, `iat`: optional numbers; refused more than [`CLOCK_SKEW`] in the
//!   future (the clock skew between the signer and this server). `iat` is
//!   the signing time that revocations compare with;
//! - `aud`, `iss`: checked only when configured (`jwt_audience`,
//!   `jwt_issuer`), then required: `aud` a string or a list holding the
//!   audience, `iss` the issuer. The `jsonwebtoken` crate checks these two;
//! - `channels`: optional list of topic patterns (as in `[[topics]]`)
//!   limiting what the socket may join;
//! - anything else is ignored.
//!
//! The time claims are checked here, not by the crate, which reads them as
//! whole seconds and refuses a fractional `exp`. The algorithm is fixed by
//! the configuration, never taken from the token's header (no `alg: none`,
//! no HS256 signed with a public key).

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::Algorithm::{HS256, HS384, HS512};
use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::{AuthConfig, Refusal, User, Verified, CLOCK_SKEW};
use crate::Error;

pub(super) struct Jwt {
    key: DecodingKey,
    validation: Validation,
}

#[derive(Deserialize)]
struct Claims {
    sub: Option<serde_json::Value>,
    exp: Option<serde_json::Value>,
    nbf: Option<serde_json::Value>,
    iat: Option<serde_json::Value>,
    #[serde(default)]
    channels: Option<Vec<String>>,
}

/// A time claim (seconds since the epoch, whole or fractional) in ms.
fn time_ms(claim: &'static str, v: Option<&serde_json::Value>) -> Result<Option<i64>, Refusal> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            // `as` saturates: a date past the range is forever.
            Some(s) if s.is_finite() => Ok(Some((s * 1000.0).trunc() as i64)),
            _ => Err(Refusal::Invalid(format!(
                "{claim} is not a number of seconds"
            ))),
        },
    }
}

impl Jwt {
    pub fn new(config: &AuthConfig) -> Result<Jwt, Error> {
        let bad = |what: String| Error::Config(format!("[auth] jwt: {what}"));
        let pem = match (&config.jwt_public_key, &config.jwt_public_key_file) {
            (Some(pem), _) => Some(pem.clone().into_bytes()),
            (None, Some(path)) => {
                Some(std::fs::read(path).map_err(|e| bad(format!("{}: {e}", path.display())))?)
            }
            (None, None) => None,
        };
        let wanted = config
            .jwt_algorithm
            .as_deref()
            .map(|a| match a.to_ascii_uppercase().as_str() {
                "HS256" => Ok(Algorithm::HS256),
                "HS384" => Ok(Algorithm::HS384),
                "HS512" => Ok(Algorithm::HS512),
                "RS256" => Ok(Algorithm::RS256),
                "ES256" => Ok(Algorithm::ES256),
                other => Err(bad(format!(
                    "jwt_algorithm {other:?}: HS256, HS384, HS512, RS256 or ES256"
                ))),
            })
            .transpose()?;
        let (key, alg) = match (&config.jwt_secret, pem) {
            (Some(_), Some(_)) => {
                return Err(bad("give jwt_secret or a public key, not both".into()))
            }
            (Some(secret), None) => {
                let alg = wanted.unwrap_or(Algorithm::HS256);
                if !matches!(alg, HS256 | HS384 | HS512) {
                    return Err(bad("jwt_secret is for HS256, HS384 or HS512".into()));
                }
                (DecodingKey::from_secret(secret.as_bytes()), alg)
            }
            (None, Some(pem)) => match wanted {
                Some(Algorithm::ES256) => (
                    DecodingKey::from_ec_pem(&pem).map_err(|e| bad(format!("EC key: {e}")))?,
                    Algorithm::ES256,
                ),
                Some(Algorithm::RS256) => (
                    DecodingKey::from_rsa_pem(&pem).map_err(|e| bad(format!("RSA key: {e}")))?,
                    Algorithm::RS256,
                ),
                Some(_) => {
                    return Err(bad(
                        "HS256, HS384 and HS512 need jwt_secret, not a public key".into(),
                    ))
                }
                None => match DecodingKey::from_rsa_pem(&pem) {
                    Ok(k) => (k, Algorithm::RS256),
                    Err(_) => (
                        DecodingKey::from_ec_pem(&pem).map_err(|e| {
                            bad(format!(
                                "the public key is neither RSA nor EC P-256 PEM: {e}"
                            ))
                        })?,
                        Algorithm::ES256,
                    ),
                },
            },
            (None, None) => {
                return Err(bad(
                    "mode jwt needs jwt_secret, jwt_public_key or jwt_public_key_file".into(),
                ))
            }
        };
        // exp, nbf and iat are checked in `verify`; aud and iss by the crate.
        let mut validation = Validation::new(alg);
        validation.leeway = 0;
        validation.validate_exp = false;
        validation.validate_nbf = false;
        let mut required = Vec::new();
        match &config.jwt_audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &config.jwt_issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        Ok(Jwt { key, validation })
    }

    pub fn verify(&self, token: &str, now_ms: i64) -> Result<Verified, Refusal> {
        let data =
            decode::<Claims>(token, &self.key, &self.validation).map_err(|e| match e.kind() {
                ErrorKind::InvalidAudience => Refusal::Invalid("aud is not this server's".into()),
                ErrorKind::InvalidIssuer => Refusal::Invalid("iss is not the issuer".into()),
                ErrorKind::MissingRequiredClaim(c) => Refusal::Invalid(format!("no {c} claim")),
                other => Refusal::Invalid(format!("{other:?}")),
            })?;
        let claims = data.claims;
        let Some(exp) = time_ms("exp", claims.exp.as_ref())? else {
            return Err(Refusal::Invalid("no exp claim".into()));
        };
        if now_ms >= exp {
            return Err(Refusal::Expired);
        }
        let ahead = now_ms.saturating_add(CLOCK_SKEW.as_millis() as i64);
        if time_ms("nbf", claims.nbf.as_ref())?.is_some_and(|t| t > ahead) {
            return Err(Refusal::SignedInFuture);
        }
        let signed_at_ms = time_ms("iat", claims.iat.as_ref())?;
        if signed_at_ms.is_some_and(|t| t > ahead) {
            return Err(Refusal::SignedInFuture);
        }
        // An integer, not a fraction: 4.2 is nobody's id (and would not be
        // the string "4.2" an app compares with).
        let id = match claims.sub {
            Some(serde_json::Value::String(s)) if !s.is_empty() => s,
            Some(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => {
                return Err(Refusal::Invalid(
                    "sub is not a user id (a non-empty string or an integer)".into(),
                ))
            }
        };
        Ok(Verified {
            user: User {
                id,
                channels: claims.channels,
            },
            signed_at_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    //! Tokens signed with the `jsonwebtoken` crate's encoder and keys made
    //! once with openssl (`genrsa 2048`, `ecparam -name prime256v1`).

    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;

    use super::*;
    use crate::auth::{now_ms, Mode};

    pub(crate) const RSA_PRIVATE: &str = include_str!("testdata/rsa_private.pem");
    pub(crate) const RSA_PUBLIC: &str = include_str!("testdata/rsa_public.pem");
    pub(crate) const EC_PRIVATE: &str = include_str!("testdata/ec_private.pem");
    pub(crate) const EC_PUBLIC: &str = include_str!("testdata/ec_public.pem");

    fn cfg(secret: Option<&str>, public: Option<&str>) -> AuthConfig {
        AuthConfig {
            mode: Mode::Jwt,
            jwt_secret: secret.map(String::from),
            jwt_public_key: public.map(String::from),
            ..Default::default()
        }
    }

    fn now_s() -> i64 {
        now_ms() / 1000
    }

    fn hs(claims: serde_json::Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(b"shh"),
        )
        .unwrap()
    }

    #[test]
    fn hs256_sub_exp_and_channels() {
        let v = Jwt::new(&cfg(Some("shh"), None)).unwrap();
        let t =
            hs(json!({"sub": "u1", "exp": now_s() + 60, "channels": ["private:u1", "rooms:*"]}));
        let ok = v.verify(&t, now_ms()).unwrap();
        assert_eq!(ok.user.id, "u1");
        assert_eq!(
            ok.user.channels.as_deref(),
            Some(&["private:u1".to_string(), "rooms:*".to_string()][..])
        );
        assert_eq!(ok.signed_at_ms, None);
        let n = hs(json!({"sub": 42, "exp": now_s() + 60, "iat": now_s()}));
        let ok = v.verify(&n, now_ms()).unwrap();
        assert_eq!((ok.user.id.as_str(), ok.user.channels), ("42", None));
        assert!(ok.signed_at_ms.is_some());
        let expired = hs(json!({"sub": "u1", "exp": now_s() - 1}));
        assert_eq!(v.verify(&expired, now_ms()).unwrap_err(), Refusal::Expired);
        let no_exp = hs(json!({"sub": "u1"}));
        assert!(matches!(
            v.verify(&no_exp, now_ms()),
            Err(Refusal::Invalid(_))
        ));
        let no_sub = hs(json!({"exp": now_s() + 60}));
        assert!(matches!(
            v.verify(&no_sub, now_ms()),
            Err(Refusal::Invalid(_))
        ));
        let future = hs(json!({"sub": "u1", "exp": now_s() + 9999, "iat": now_s() + 3600}));
        assert_eq!(
            v.verify(&future, now_ms()).unwrap_err(),
            Refusal::SignedInFuture
        );
        let nbf = hs(json!({"sub": "u1", "exp": now_s() + 9999, "nbf": now_s() + 3600}));
        assert_eq!(
            v.verify(&nbf, now_ms()).unwrap_err(),
            Refusal::SignedInFuture
        );
        // nbf and iat within the 60 s allowance are accepted.
        let soon = hs(
            json!({"sub": "u1", "exp": now_s() + 9999, "nbf": now_s() + 30, "iat": now_s() + 30}),
        );
        assert!(v.verify(&soon, now_ms()).is_ok());
        let other_key = encode(
            &Header::new(Algorithm::HS256),
            &json!({"sub": "u1", "exp": now_s() + 60}),
            &EncodingKey::from_secret(b"not it"),
        )
        .unwrap();
        assert!(matches!(
            v.verify(&other_key, now_ms()),
            Err(Refusal::Invalid(_))
        ));
        // Tampered: alice's signature on bob's claims.
        let alice = hs(json!({"sub": "alice", "exp": now_s() + 60}));
        let bob = hs(json!({"sub": "bob", "exp": now_s() + 60}));
        let (a_head, a_rest) = alice.split_once('.').unwrap();
        let a_sig = a_rest.split_once('.').unwrap().1;
        let b_claims = bob.split('.').nth(1).unwrap();
        let forged = format!("{a_head}.{b_claims}.{a_sig}");
        assert!(matches!(
            v.verify(&forged, now_ms()),
            Err(Refusal::Invalid(_))
        ));
    }

    #[test]
    fn rs256_and_es256_public_keys() {
        let claims = json!({"sub": "u2", "exp": now_s() + 60});
        let rs = encode(
            &Header::new(Algorithm::RS256),
            &claims,
            &EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap(),
        )
        .unwrap();
        let es = encode(
            &Header::new(Algorithm::ES256),
            &claims,
            &EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()).unwrap(),
        )
        .unwrap();
        let rsa = Jwt::new(&cfg(None, Some(RSA_PUBLIC))).unwrap();
        let ec = Jwt::new(&cfg(None, Some(EC_PUBLIC))).unwrap();
        assert_eq!(rsa.verify(&rs, now_ms()).unwrap().user.id, "u2");
        assert_eq!(ec.verify(&es, now_ms()).unwrap().user.id, "u2");
        // Each key accepts only its own algorithm.
        assert!(rsa.verify(&es, now_ms()).is_err());
        assert!(ec.verify(&rs, now_ms()).is_err());
        // An HS256 token "signed" with the public key text is refused.
        let confused = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(RSA_PUBLIC.as_bytes()),
        )
        .unwrap();
        assert!(rsa.verify(&confused, now_ms()).is_err());
        let expired = encode(
            &Header::new(Algorithm::ES256),
            &json!({"sub": "u2", "exp": now_s() - 5}),
            &EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()).unwrap(),
        )
        .unwrap();
        assert_eq!(ec.verify(&expired, now_ms()).unwrap_err(), Refusal::Expired);
    }

    #[test]
    fn hs384_and_hs512_when_the_algorithm_says_so() {
        let claims = json!({"sub": "u3", "exp": now_s() + 60});
        let secret = "k".repeat(64);
        let token = |alg| {
            encode(
                &Header::new(alg),
                &claims,
                &EncodingKey::from_secret(secret.as_bytes()),
            )
            .unwrap()
        };
        for (name, alg) in [("HS384", Algorithm::HS384), ("hs512", Algorithm::HS512)] {
            let mut c = cfg(Some(&secret), None);
            c.jwt_algorithm = Some(name.into());
            let v = Jwt::new(&c).unwrap();
            assert_eq!(v.verify(&token(alg), now_ms()).unwrap().user.id, "u3");
            // The configuration chooses, not the token's header.
            assert!(v.verify(&token(Algorithm::HS256), now_ms()).is_err());
        }
        let hs256 = Jwt::new(&cfg(Some(&secret), None)).unwrap();
        assert!(hs256.verify(&token(Algorithm::HS512), now_ms()).is_err());
    }

    #[test]
    fn bad_configs_are_errors() {
        assert!(Jwt::new(&cfg(None, None)).is_err());
        assert!(Jwt::new(&cfg(Some("s"), Some(RSA_PUBLIC))).is_err());
        assert!(Jwt::new(&cfg(None, Some("not a pem"))).is_err());
        let mut c = cfg(Some("s"), None);
        c.jwt_algorithm = Some("RS256".into());
        assert!(Jwt::new(&c).is_err());
        c.jwt_algorithm = Some("none".into());
        assert!(Jwt::new(&c).is_err());
    }

    #[test]
    fn time_claims_may_be_fractional_and_sub_must_be_an_integer_or_a_string() {
        let v = Jwt::new(&cfg(Some("shh"), None)).unwrap();
        let now = now_ms();
        let t = now as f64 / 1000.0;
        let float = hs(json!({"sub": "u", "exp": t + 60.5, "iat": t - 0.25, "nbf": t}));
        let ok = v.verify(&float, now).unwrap();
        assert_eq!(ok.signed_at_ms, Some(((t - 0.25) * 1000.0).trunc() as i64));
        // exp is exclusive: the token is dead from that instant.
        let exp = hs(json!({"sub": "u", "exp": 1_700_000_000.5}));
        assert!(v.verify(&exp, 1_700_000_000_499).is_ok());
        assert_eq!(
            v.verify(&exp, 1_700_000_000_500).unwrap_err(),
            Refusal::Expired
        );
        for bad in [
            json!({"sub": 4.2, "exp": t + 60.0}),
            json!({"sub": "", "exp": t + 60.0}),
            json!({"sub": ["u"], "exp": t + 60.0}),
            json!({"sub": "u", "exp": "tomorrow"}),
            json!({"sub": "u", "exp": t + 60.0, "iat": "now"}),
        ] {
            assert!(
                matches!(v.verify(&hs(bad.clone()), now), Err(Refusal::Invalid(_))),
                "{bad}"
            );
        }
        let big = hs(json!({"sub": 18_446_744_073_709_551_615u64, "exp": t + 60.0}));
        assert_eq!(v.verify(&big, now).unwrap().user.id, "18446744073709551615");
    }

    #[test]
    fn audience_and_issuer_are_required_when_configured() {
        let mut c = cfg(Some("shh"), None);
        let exp = now_s() + 60;
        let open = Jwt::new(&c).unwrap();
        let any = hs(json!({"sub": "u", "exp": exp, "aud": "someone else", "iss": "x"}));
        assert!(
            open.verify(&any, now_ms()).is_ok(),
            "not checked unless configured"
        );
        c.jwt_audience = Some("throng".into());
        c.jwt_issuer = Some("https://auth.example".into());
        let v = Jwt::new(&c).unwrap();
        for good in [
            json!({"sub": "u", "exp": exp, "aud": "throng", "iss": "https://auth.example"}),
            json!({"sub": "u", "exp": exp, "aud": ["api", "throng"], "iss": "https://auth.example"}),
        ] {
            assert!(v.verify(&hs(good.clone()), now_ms()).is_ok(), "{good}");
        }
        for bad in [
            json!({"sub": "u", "exp": exp, "iss": "https://auth.example"}),
            json!({"sub": "u", "exp": exp, "aud": "api", "iss": "https://auth.example"}),
            json!({"sub": "u", "exp": exp, "aud": "throng"}),
            json!({"sub": "u", "exp": exp, "aud": "throng", "iss": "https://evil.example"}),
        ] {
            assert!(
                matches!(
                    v.verify(&hs(bad.clone()), now_ms()),
                    Err(Refusal::Invalid(_))
                ),
                "{bad}"
            );
        }
    }
}
