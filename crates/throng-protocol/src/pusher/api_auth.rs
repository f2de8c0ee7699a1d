//! The HTTP API's request signature, checked as Pusher checks it.
//!
//! Every request carries `auth_key`, `auth_timestamp` (seconds, within 600 s
//! of the server's clock), `auth_version=1.0`, `body_md5` (the hex MD5 of a
//! non-empty body) and `auth_signature`: the hex HMAC-SHA256, with the app's
//! secret, of `METHOD\nPATH\nQUERY` where QUERY is every other parameter,
//! keys lowercased, sorted by key, joined `key=value` with `&`, values not
//! URL-escaped (docs/channels/library_auth_reference/rest-api.md,
//! "Authentication"). The order of the checks and the error texts are those
//! of Pusher's own `signature` library (its spec): the key, then the
//! version, the timestamp, the signature; each refusal is a 401.
//!
//! The check comes in two steps so a server reads a body only for a known
//! app: [`SignedQuery::parse`] and [`SignedQuery::auth_key`] (look the app
//! up), [`SignedQuery::verify`] (version, clock, signature), then, once the
//! body is read, [`SignedQuery::verify_body`].
//!
//! [`sign_query`] is the client side, what the SDKs' `createSignedQueryString`
//! does (Node lib/requests.js, Python pusher/http.py).

use std::borrow::Cow;
use std::fmt::Write as _;

use md5::{Digest, Md5};

use super::signature::{sign, Signature};

/// How far `auth_timestamp` may be from the server's clock (exclusive).
pub const MAX_SKEW_SECS: u64 = 600;

/// The one `auth_version` there is.
pub const AUTH_VERSION: &str = "1.0";

/// The most query parameters a request may have (the API's own need a
/// handful).
pub const MAX_PARAMS: usize = 64;

/// A request's query string, parsed for its signature.
#[derive(Clone, Debug)]
pub struct SignedQuery<'q> {
    /// Parameters in the order given, keys lowercased, values decoded.
    params: Vec<(Cow<'q, str>, Cow<'q, str>)>,
}

/// Why a request's signature was refused. Every one is a 401.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiAuthError {
    #[error("Too many query parameters: a request may have at most 64")]
    TooManyParams,
    #[error("Missing parameter: auth_key: sign the request with the app's key and secret")]
    MissingKey,
    #[error("Unknown auth_key: use the key of an app this server has")]
    UnknownKey,
    #[error("Version required: add auth_version=1.0")]
    MissingVersion,
    #[error("Version not supported: use auth_version=1.0")]
    UnsupportedVersion,
    #[error("Timestamp required: add auth_timestamp, the number of seconds since 1970")]
    MissingTimestamp,
    #[error("Timestamp expired: Given timestamp ({given}) not within 600s of server time ({now}): check the clock of the machine that signs the request")]
    Expired { given: String, now: String },
    #[error("Invalid signature: you should have sent HmacSHA256Hex({expected:?}, your_secret_key), but you sent {given:?}")]
    BadSignature { expected: String, given: String },
    #[error("body_md5 required: a request with a body must sign the hex MD5 of the body")]
    MissingBodyMd5,
    #[error("Invalid body_md5: it must be the hex MD5 of the request body as sent")]
    BodyMd5Mismatch,
}

impl ApiAuthError {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> u16 {
        401
    }
}

impl<'q> SignedQuery<'q> {
    /// Parses a query string (the part after `?`).
    pub fn parse(query: &'q str) -> Result<SignedQuery<'q>, ApiAuthError> {
        let mut params = Vec::new();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            if params.len() == MAX_PARAMS {
                return Err(ApiAuthError::TooManyParams);
            }
            let key = match key {
                k if k.bytes().any(|b| b.is_ascii_uppercase()) => {
                    Cow::Owned(k.to_ascii_lowercase())
                }
                k => k,
            };
            params.push((key, value));
        }
        Ok(SignedQuery { params })
    }

    /// The first value of a parameter (`name` lowercase).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_ref())
    }

    /// The app key that signed the request, to look the app up.
    pub fn auth_key(&self) -> Result<&str, ApiAuthError> {
        self.get("auth_key").ok_or(ApiAuthError::MissingKey)
    }

    /// Checks the version, the timestamp against `now_unix` (seconds) and
    /// the signature, for a request `method` on `path` (as sent).
    pub fn verify(
        &self,
        method: &str,
        path: &str,
        secret: &[u8],
        now_unix: u64,
    ) -> Result<(), ApiAuthError> {
        match self.get("auth_version") {
            None => return Err(ApiAuthError::MissingVersion),
            Some(AUTH_VERSION) => {}
            Some(_) => return Err(ApiAuthError::UnsupportedVersion),
        }
        let timestamp = self
            .get("auth_timestamp")
            .ok_or(ApiAuthError::MissingTimestamp)?;
        // Pusher's library reads a timestamp that is not a number as 0.
        let given = timestamp.parse::<u64>().unwrap_or(0);
        if given.abs_diff(now_unix) >= MAX_SKEW_SECS {
            return Err(ApiAuthError::Expired {
                given: iso8601(given),
                now: iso8601(now_unix),
            });
        }
        let sent = self.get("auth_signature").unwrap_or("");
        let expected = self.string_to_sign(method, path);
        if signed(secret, &expected).matches_hex(sent) {
            return Ok(());
        }
        Err(ApiAuthError::BadSignature {
            expected,
            given: sent.chars().take(80).collect(),
        })
    }

    /// Checks `body_md5` against the body read after [`SignedQuery::verify`].
    pub fn verify_body(&self, body: &[u8]) -> Result<(), ApiAuthError> {
        match self.get("body_md5") {
            None if body.is_empty() => Ok(()),
            None => Err(ApiAuthError::MissingBodyMd5),
            Some(given) if given.eq_ignore_ascii_case(&md5_hex(body)) => Ok(()),
            Some(_) => Err(ApiAuthError::BodyMd5Mismatch),
        }
    }

    /// `METHOD\nPATH\nQUERY`, what the signature signs.
    pub fn string_to_sign(&self, method: &str, path: &str) -> String {
        let mut params: Vec<&(Cow<'q, str>, Cow<'q, str>)> = self
            .params
            .iter()
            .filter(|(k, _)| k != "auth_signature")
            .collect();
        // Stable: repeated keys keep their order, as Pusher's library does.
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let mut s = String::with_capacity(64 + path.len());
        s.push_str(&method.to_ascii_uppercase());
        s.push('\n');
        s.push_str(path);
        s.push('\n');
        for (i, (k, v)) in params.into_iter().enumerate() {
            if i > 0 {
                s.push('&');
            }
            let _ = write!(s, "{k}={v}");
        }
        s
    }
}

fn signed(secret: &[u8], string_to_sign: &str) -> Signature {
    sign(secret, &[string_to_sign.as_bytes()])
}

/// The hex MD5 of a body (`body_md5`).
pub fn md5_hex(body: &[u8]) -> String {
    hex::encode(Md5::digest(body))
}

/// Client side: the signed query string for a request, as the SDKs build
/// it: `params` plus `auth_key`, `auth_timestamp`, `auth_version` and
/// `body_md5` (when there is a body), signed, then `auth_signature`. Values
/// are URL-escaped in the result; the signature covers them unescaped.
pub fn sign_query(
    key: &str,
    secret: &[u8],
    method: &str,
    path: &str,
    timestamp: u64,
    params: &[(&str, &str)],
    body: Option<&[u8]>,
) -> String {
    let timestamp = timestamp.to_string();
    let md5 = body.map(md5_hex);
    let mut all: Vec<(&str, &str)> = vec![
        ("auth_key", key),
        ("auth_timestamp", &timestamp),
        ("auth_version", AUTH_VERSION),
    ];
    if let Some(md5) = &md5 {
        all.push(("body_md5", md5));
    }
    all.extend_from_slice(params);
    all.sort_by(|a, b| a.0.cmp(b.0));
    let mut signing = format!("{}\n{path}\n", method.to_ascii_uppercase());
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (i, (k, v)) in all.iter().enumerate() {
        if i > 0 {
            signing.push('&');
        }
        let _ = write!(signing, "{k}={v}");
        query.append_pair(k, v);
    }
    query.append_pair("auth_signature", &signed(secret, &signing).to_hex());
    query.finish()
}

/// `secs` since 1970 as `YYYY-MM-DDThh:mm:ssZ` (for the expired-timestamp
/// message; days to a civil date by Howard Hinnant's `civil_from_days`).
fn iso8601(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &str = "278d425bdf160c739803";
    const SECRET: &[u8] = b"7ad3773142a6692b25b8";

    /// Pusher's worked example (`rest-api.md`, "Worked authentication example").
    #[test]
    fn pushers_worked_example() {
        let body = br#"{"name":"foo","channels":["project-3"],"data":"{\"some\":\"data\"}"}"#;
        assert_eq!(md5_hex(body), "ec365a775a4cd0599faeb73354201b6f");
        let query = sign_query(
            KEY,
            SECRET,
            "POST",
            "/apps/3/events",
            1353088179,
            &[],
            Some(body),
        );
        assert_eq!(
            query,
            "auth_key=278d425bdf160c739803&auth_timestamp=1353088179&auth_version=1.0\
             &body_md5=ec365a775a4cd0599faeb73354201b6f\
             &auth_signature=da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"
        );
        let q = SignedQuery::parse(&query).unwrap();
        assert_eq!(q.auth_key(), Ok(KEY));
        assert_eq!(
            q.verify("POST", "/apps/3/events", SECRET, 1353088179 + 10),
            Ok(())
        );
        assert_eq!(q.verify_body(body), Ok(()));
        assert_eq!(q.verify_body(b"{}"), Err(ApiAuthError::BodyMd5Mismatch));
    }

    /// Pusher's `signature` library's spec: keys lowercased, the exact
    /// string signed, its error texts and its 600 s window.
    #[test]
    fn as_pushers_signature_library() {
        let signed = "auth_key=key&auth_timestamp=1234&auth_version=1.0&go=here&Query=params\
                      &auth_signature=3b237953a5ba6619875cbb2a2d43e8da9ef5824e8a2c689f6284ac85bc1ea0db";
        let q = SignedQuery::parse(signed).unwrap();
        assert_eq!(
            q.string_to_sign("post", "/some/path"),
            "POST\n/some/path\nauth_key=key&auth_timestamp=1234&auth_version=1.0&go=here&query=params"
        );
        assert_eq!(
            q.verify("POST", "/some/path", b"secret", 1234 + 599),
            Ok(())
        );
        assert_eq!(
            q.verify("POST", "/some/path", b"secret", 1234 - 599),
            Ok(())
        );
        let expired = q
            .verify("POST", "/some/path", b"secret", 1234 + 600)
            .unwrap_err();
        assert!(expired.to_string().starts_with(
            "Timestamp expired: Given timestamp (1970-01-01T00:20:34Z) not within 600s of server time (1970-01-01T00:30:34Z)"
        ), "{expired}");
        let early = q
            .verify("POST", "/some/path", b"secret", 1234 - 600)
            .unwrap_err();
        assert!(early
            .to_string()
            .contains("server time (1970-01-01T00:10:34Z)"));
        let bad = q
            .verify("POST", "/other/path", b"secret", 1234)
            .unwrap_err();
        assert_eq!(
            bad.to_string(),
            r#"Invalid signature: you should have sent HmacSHA256Hex("POST\n/other/path\nauth_key=key&auth_timestamp=1234&auth_version=1.0&go=here&query=params", your_secret_key), but you sent "3b237953a5ba6619875cbb2a2d43e8da9ef5824e8a2c689f6284ac85bc1ea0db""#
        );
        assert!(q.verify("POST", "/some/path", b"wrong", 1234).is_err());
        assert_eq!(bad.status(), 401);
    }

    #[test]
    fn each_missing_piece() {
        let verify = |query: &str| {
            SignedQuery::parse(query)
                .unwrap()
                .verify("GET", "/p", b"s", 1000)
        };
        assert_eq!(
            SignedQuery::parse("a=1").unwrap().auth_key(),
            Err(ApiAuthError::MissingKey)
        );
        assert_eq!(
            verify("auth_key=k&auth_timestamp=1000"),
            Err(ApiAuthError::MissingVersion)
        );
        assert_eq!(
            verify("auth_key=k&auth_version=1.1&auth_timestamp=1000"),
            Err(ApiAuthError::UnsupportedVersion)
        );
        assert_eq!(
            verify("auth_key=k&auth_version=1.0"),
            Err(ApiAuthError::MissingTimestamp)
        );
        assert!(matches!(
            verify("auth_key=k&auth_version=1.0&auth_timestamp=soon"),
            Err(ApiAuthError::Expired { .. })
        ));
        assert!(matches!(
            verify("auth_key=k&auth_version=1.0&auth_timestamp=1000"),
            Err(ApiAuthError::BadSignature { .. })
        ));
        let many: String = (0..65).map(|i| format!("p{i}=1&")).collect();
        assert_eq!(
            SignedQuery::parse(&many).unwrap_err(),
            ApiAuthError::TooManyParams
        );
    }

    #[test]
    fn body_md5_rules() {
        let check = |md5: &str, body: &[u8]| {
            let query = format!("body_md5={md5}");
            SignedQuery::parse(&query).unwrap().verify_body(body)
        };
        let none = SignedQuery::parse("").unwrap();
        assert_eq!(none.verify_body(b""), Ok(()));
        assert_eq!(none.verify_body(b"{}"), Err(ApiAuthError::MissingBodyMd5));
        // The Python SDK signs the MD5 of an empty body on GET requests.
        assert_eq!(check("d41d8cd98f00b204e9800998ecf8427e", b""), Ok(()));
        assert_eq!(check("99914B932BD37A50B983C5E7C90AE93B", b"{}"), Ok(()));
        assert_eq!(check("0", b"{}"), Err(ApiAuthError::BodyMd5Mismatch));
    }

    #[test]
    fn civil_dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(1353088179), "2012-11-16T17:49:39Z");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601(4_102_444_799), "2099-12-31T23:59:59Z");
    }

    proptest! {
        #[test]
        fn signed_queries_verify(params in proptest::collection::btree_map("[a-z_]{1,8}", "\\PC{0,12}", 0..5),
                                 method in "(GET|POST)", path in "/apps/[0-9]{1,3}/[a-z/_-]{0,20}",
                                 body in proptest::option::of("\\PC{0,30}"), ts in 0u64..4_000_000_000) {
            let params: Vec<(&str, &str)> = params.iter()
                .filter(|(k, _)| !k.starts_with("auth_") && *k != "body_md5")
                .map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let body = body.as_deref().map(str::as_bytes);
            let query = sign_query(KEY, SECRET, &method, &path, ts, &params, body);
            let q = SignedQuery::parse(&query).unwrap();
            prop_assert_eq!(q.verify(&method, &path, SECRET, ts), Ok(()));
            prop_assert_eq!(q.verify_body(body.unwrap_or_default()), Ok(()));
            for (k, v) in &params {
                prop_assert_eq!(q.get(k), Some(*v));
            }
            let other_path = format!("{path}x");
            prop_assert!(q.verify(&method, &other_path, SECRET, ts).is_err());
            prop_assert!(q.verify(&method, &path, b"other", ts).is_err());
        }

        #[test]
        fn never_panics(query in "\\PC{0,200}", now in any::<u64>()) {
            if let Ok(q) = SignedQuery::parse(&query) {
                let _ = q.auth_key();
                let _ = q.verify("POST", "/apps/1/events", SECRET, now);
                let _ = q.verify_body(b"{}");
            }
        }
    }
}
