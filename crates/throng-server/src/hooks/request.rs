//! The bodies throng POSTs to the backend, and their signature. Only the
//! documented fields are written, from typed structs: nothing a client
//! sends can add a field or a header. Every body carries `at` (Unix
//! milliseconds) under the signature, so a backend can refuse a replay.

use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::value::RawValue;
use sha2::Sha256;
use throng_protocol::Ref;

/// `POST {url}/join`.
#[derive(Serialize)]
pub(crate) struct JoinRequest<'a> {
    pub topic: &'a str,
    pub payload: &'a RawValue,
    pub user: Option<&'a str>,
    pub socket_id: &'a str,
    pub assigns: &'a RawValue,
    pub at: u64,
}

/// `POST {url}/push`.
#[derive(Serialize)]
pub(crate) struct PushRequest<'a> {
    pub topic: &'a str,
    pub event: &'a str,
    pub payload: &'a RawValue,
    pub user: Option<&'a str>,
    pub socket_id: &'a str,
    pub assigns: &'a RawValue,
    /// The push's ref as the client sent it: a number stays a number, a
    /// string a string, none (or null) is null.
    #[serde(rename = "ref", serialize_with = "json_ref")]
    pub msg_ref: Option<&'a Ref<'a>>,
    pub at: u64,
}

/// Writes a ref as the JSON value it came as (see [`Ref`]).
fn json_ref<S: serde::Serializer>(r: &Option<&Ref<'_>>, s: S) -> Result<S::Ok, S::Error> {
    match r {
        None => s.serialize_none(),
        // A number ref's text was checked as a JSON number when decoded.
        Some(r) if r.is_number() => match serde_json::from_str::<&RawValue>(r.text()) {
            Ok(raw) => raw.serialize(s),
            Err(_) => s.serialize_str(r.text()),
        },
        Some(r) => s.serialize_str(r.text()),
    }
}

/// `POST {url}/connect`.
#[derive(Serialize)]
pub(crate) struct ConnectRequest<'a> {
    pub transport: &'a str,
    pub vsn: &'a str,
    /// The connect URL's params (`vsn` aside); a repeated name keeps its last value.
    pub params: std::collections::BTreeMap<&'a str, &'a str>,
    pub headers: std::collections::BTreeMap<&'a str, &'a str>,
    pub remote_addr: String,
    pub at: u64,
}

/// The request headers a connect hook gets, when present.
pub const CONNECT_HEADERS: [&str; 5] = [
    "cookie",
    "authorization",
    "origin",
    "user-agent",
    "x-forwarded-for",
];

/// The [`CONNECT_HEADERS`] of a request (repeated ones joined with `, `).
pub(crate) fn connect_headers(headers: &[httparse::Header<'_>]) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for h in headers {
        let Some(name) = CONNECT_HEADERS
            .iter()
            .find(|n| h.name.eq_ignore_ascii_case(n))
        else {
            continue;
        };
        let value = String::from_utf8_lossy(h.value);
        match out.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => {
                v.push_str(if *name == "cookie" { "; " } else { ", " });
                v.push_str(&value);
            }
            None => out.push((name, value.into_owned())),
        }
    }
    out
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The `x-throng-signature` value: `sha256=<hex HMAC-SHA256(secret, body)>`.
pub(crate) fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in digest {
        use std::fmt::Write;
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_hex_hmac_sha256() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn connect_headers_are_only_the_documented_ones() {
        let h = |name, value: &'static str| httparse::Header {
            name,
            value: value.as_bytes(),
        };
        let headers = [
            h("Cookie", "a=1"),
            h("X-Evil", "1"),
            h("cookie", "b=2"),
            h("User-Agent", "ua"),
            h("X-Forwarded-For", "10.0.0.1"),
        ];
        assert_eq!(
            connect_headers(&headers),
            vec![
                ("cookie", "a=1; b=2".to_string()),
                ("user-agent", "ua".to_string()),
                ("x-forwarded-for", "10.0.0.1".to_string()),
            ]
        );
    }

    #[test]
    fn push_body_has_exactly_the_documented_fields() {
        let payload: &RawValue = serde_json::from_str(r#"{"body":"hi","x-evil":1}"#).unwrap();
        let assigns: &RawValue = serde_json::from_str("{}").unwrap();
        let body = serde_json::to_value(PushRequest {
            topic: "rooms:1",
            event: "new:msg",
            payload,
            user: None,
            socket_id: "s",
            assigns,
            msg_ref: Some(&Ref::string("3")),
            at: 1,
        })
        .unwrap();
        let keys: Vec<_> = body.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys.len(),
            8,
            "topic event payload user socket_id assigns ref at: {keys:?}"
        );
        assert_eq!(body["ref"], "3");
        assert_eq!(body["payload"]["x-evil"], 1);
    }

    #[test]
    fn push_ref_keeps_its_json_type() {
        let payload: &RawValue = serde_json::from_str("{}").unwrap();
        let body = |msg_ref: Option<&Ref<'_>>| {
            let json = serde_json::to_string(&PushRequest {
                topic: "t",
                event: "e",
                payload,
                user: None,
                socket_id: "s",
                assigns: payload,
                msg_ref,
                at: 1,
            })
            .unwrap();
            serde_json::from_str::<serde_json::Value>(&json).unwrap()["ref"].clone()
        };
        assert_eq!(body(Ref::number("7").as_ref()), serde_json::json!(7));
        assert_eq!(body(Some(&Ref::string("7"))), serde_json::json!("7"));
        assert_eq!(body(None), serde_json::Value::Null);
    }
}
