//! JWT connect tokens, verified with the `jsonwebtoken` crate: HS256 with a
//! shared secret, RS256 or ES256 with the issuer's public key (PEM).
//!
//! Claims: `sub` is the user id (a string, or a number written as one);
//! `exp` is required and honoured with no leeway; `nbf`, when present, and
//! `iat` may be at most [`CLOCK_SKEW`] in the future; an optional
//! `channels` claim (a list of topic patterns, as in `[[topics]]`) limits
//! what the socket may join. The algorithm is fixed by the configuration,
//! never taken from the token's header (no `alg: none`, no HS256 signed
//! with a public key).

use jsonwebtoken::errors::ErrorKind;
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
    sub: serde_json::Value,
    iat: Option<i64>,
    #[serde(default)]
    channels: Option<Vec<String>>,
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
                "RS256" => Ok(Algorithm::RS256),
                "ES256" => Ok(Algorithm::ES256),
                other => Err(bad(format!(
                    "jwt_algorithm {other:?}: HS256, RS256 or ES256"
                ))),
            })
            .transpose()?;
        let (key, alg) = match (&config.jwt_secret, pem) {
            (Some(_), Some(_)) => {
                return Err(bad("give jwt_secret or a public key, not both".into()))
            }
            (Some(secret), None) => {
                if wanted.is_some_and(|a| a != Algorithm::HS256) {
                    return Err(bad("jwt_secret is for HS256".into()));
                }
                (
                    DecodingKey::from_secret(secret.as_bytes()),
                    Algorithm::HS256,
                )
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
                Some(_) => return Err(bad("HS256 needs jwt_secret, not a public key".into())),
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
        let mut validation = Validation::new(alg);
        validation.leeway = 0;
        validation.validate_nbf = true;
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp"]);
        Ok(Jwt { key, validation })
    }

    pub fn verify(&self, token: &str, now_ms: i64) -> Result<Verified, Refusal> {
        let data =
            decode::<Claims>(token, &self.key, &self.validation).map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => Refusal::Expired,
                ErrorKind::ImmatureSignature => Refusal::SignedInFuture,
                other => Refusal::Invalid(format!("{other:?}")),
            })?;
        let claims = data.claims;
        let id = match claims.sub {
            serde_json::Value::String(s) if !s.is_empty() => s,
            serde_json::Value::Number(n) => n.to_string(),
            _ => return Err(Refusal::Invalid("sub is not a user id".into())),
        };
        let signed_at_ms = claims.iat.map(|s| s.saturating_mul(1000));
        if signed_at_ms.is_some_and(|t| t > now_ms + CLOCK_SKEW.as_millis() as i64) {
            return Err(Refusal::SignedInFuture);
        }
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
}
