//! The WebSocket URL a Pusher client opens: `/app/{key}?protocol=7&client=js&version=8.6.0`
//! (`pusher-js`'s src/core/transports/url_schemes.ts; Pusher's protocol
//! document, "WebSocket connection"). The key picks the app; `protocol` is
//! the protocol version, which must be one this server speaks: 5 (clients
//! answer `pusher:ping`), 6 (close codes instead of a `pusher:error` before
//! closing) and 7 (`activity_timeout` in `pusher:connection_established`).
//! Every current client sends 7. A missing `protocol` is refused with 4008,
//! which Pusher's document announces in place of its deprecated fallback to
//! protocol 1.

use std::borrow::Cow;
use std::ops::RangeInclusive;

use super::error_code::ErrorCode;

/// The protocol versions this server speaks.
pub const PROTOCOLS: RangeInclusive<u32> = 5..=7;

/// The path every app's WebSocket URL starts with.
pub const APP_PATH: &str = "/app/";

/// A client's connection request, read from its URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connect<'a> {
    /// The app key from the path (the server looks it up; an unknown key
    /// gets 4001).
    pub key: &'a str,
    /// The protocol version.
    pub protocol: u32,
    /// The client library (`js` for `pusher-js`), for logs and metrics.
    pub client: Option<Cow<'a, str>>,
    /// The client library's version, for logs and metrics.
    pub version: Option<Cow<'a, str>>,
}

/// Why a connection URL was refused, each with Pusher's code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error("the path is not /app/{{key}}: connect to /app/ followed by the app key")]
    NotAnAppPath,
    #[error("no protocol version: add ?protocol=7 to the URL, as Pusher clients do")]
    NoProtocol,
    #[error("the protocol version is not a number: use ?protocol=7")]
    BadProtocol,
    #[error("protocol version {0} is not supported: this server speaks versions 5 to 7, use 7")]
    UnsupportedProtocol(u32),
}

impl ConnectError {
    /// Pusher's code for the refusal (all in 4000-4099: clients do not retry).
    pub fn code(&self) -> ErrorCode {
        match self {
            ConnectError::NotAnAppPath => ErrorCode::PathNotFound,
            ConnectError::NoProtocol => ErrorCode::NoProtocolVersion,
            ConnectError::BadProtocol => ErrorCode::InvalidVersionFormat,
            ConnectError::UnsupportedProtocol(_) => ErrorCode::UnsupportedProtocolVersion,
        }
    }
}

/// Reads a connection URL's path and query (the part after `?`, empty if
/// none).
pub fn parse<'a>(path: &'a str, query: &'a str) -> Result<Connect<'a>, ConnectError> {
    let key = path
        .strip_prefix(APP_PATH)
        .filter(|k| !k.is_empty() && !k.contains('/'))
        .ok_or(ConnectError::NotAnAppPath)?;
    let (mut protocol, mut client, mut version) = (None, None, None);
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*name {
            "protocol" => protocol = Some(value),
            "client" => client = Some(value),
            "version" => version = Some(value),
            _ => {}
        }
    }
    let protocol = protocol.ok_or(ConnectError::NoProtocol)?;
    if protocol.is_empty() || !protocol.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConnectError::BadProtocol);
    }
    let protocol = protocol.parse::<u32>().unwrap_or(u32::MAX);
    if !PROTOCOLS.contains(&protocol) {
        return Err(ConnectError::UnsupportedProtocol(protocol));
    }
    Ok(Connect {
        key,
        protocol,
        client,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_what_pusher_js_opens() {
        let c = parse(
            "/app/278d425bdf160c739803",
            "protocol=7&client=js&version=8.6.0&flash=false",
        )
        .unwrap();
        assert_eq!(c.key, "278d425bdf160c739803");
        assert_eq!(c.protocol, 7);
        assert_eq!(c.client.as_deref(), Some("js"));
        assert_eq!(c.version.as_deref(), Some("8.6.0"));
        assert_eq!(parse("/app/k", "protocol=5").unwrap().protocol, 5);
    }

    #[test]
    fn refusals_have_pushers_codes() {
        let err = |path, query| parse(path, query).unwrap_err();
        assert_eq!(err("/socket/websocket", "protocol=7").code().code(), 4005);
        assert_eq!(err("/app/", "protocol=7").code().code(), 4005);
        assert_eq!(err("/app/k/extra", "protocol=7").code().code(), 4005);
        assert_eq!(err("/app/k", "client=js").code().code(), 4008);
        assert_eq!(err("/app/k", "protocol=seven").code().code(), 4006);
        assert_eq!(err("/app/k", "protocol=7.0").code().code(), 4006);
        assert_eq!(err("/app/k", "protocol=").code().code(), 4006);
        assert_eq!(
            err("/app/k", "protocol=4"),
            ConnectError::UnsupportedProtocol(4)
        );
        assert_eq!(err("/app/k", "protocol=8").code().code(), 4007);
        assert_eq!(err("/app/k", "protocol=99999999999").code().code(), 4007);
    }

    proptest! {
        #[test]
        fn never_panics(path in "\\PC{0,40}", query in "\\PC{0,60}") {
            let _ = parse(&path, &query);
        }
    }
}
