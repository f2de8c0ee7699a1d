//! The WebSocket opening handshake (RFC 6455 §4), both sides.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use sha1::{Digest, Sha1};

const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Why an upgrade request was refused; each carries its HTTP status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("WebSocket upgrade needs GET, got {0}")]
    Method(String),
    #[error("WebSocket upgrade needs HTTP/1.1")]
    Version,
    #[error("missing Host header")]
    NoHost,
    #[error("missing or wrong Upgrade header (expected websocket)")]
    Upgrade,
    #[error("Connection header lacks the upgrade token")]
    Connection,
    #[error("unsupported Sec-WebSocket-Version (only 13)")]
    WsVersion,
    #[error("missing or malformed Sec-WebSocket-Key")]
    Key,
}

impl HandshakeError {
    /// The HTTP status to answer with: 426 for a version we do not speak.
    pub fn status(&self) -> u16 {
        match self {
            HandshakeError::Method(_) => 405,
            HandshakeError::WsVersion => 426,
            _ => 400,
        }
    }
}

/// `Sec-WebSocket-Accept` for a client's key.
pub fn accept_key(key: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(key);
    h.update(GUID);
    B64.encode(h.finalize())
}

fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Checks every header RFC 6455 §4.2.1 requires and returns the accept key.
pub fn check_request(req: &httparse::Request<'_, '_>) -> Result<String, HandshakeError> {
    let method = req.method.unwrap_or("");
    if method != "GET" {
        return Err(HandshakeError::Method(method.to_string()));
    }
    if req.version != Some(1) {
        return Err(HandshakeError::Version);
    }
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    header("host").ok_or(HandshakeError::NoHost)?;
    match header("upgrade") {
        Some(v) if has_token(v, "websocket") => {}
        _ => return Err(HandshakeError::Upgrade),
    }
    match header("connection") {
        Some(v) if has_token(v, "upgrade") => {}
        _ => return Err(HandshakeError::Connection),
    }
    match header("sec-websocket-version") {
        Some(v) if v.trim_ascii() == b"13" => {}
        _ => return Err(HandshakeError::WsVersion),
    }
    let key = header("sec-websocket-key")
        .ok_or(HandshakeError::Key)?
        .trim_ascii();
    match B64.decode(key) {
        Ok(raw) if raw.len() == 16 => Ok(accept_key(key)),
        _ => Err(HandshakeError::Key),
    }
}

/// Appends the `101 Switching Protocols` response.
pub fn write_response(out: &mut Vec<u8>, accept: &str) {
    write_response_with_protocol(out, accept, None);
}

/// Appends the `101 Switching Protocols` response, selecting `protocol`
/// (one of the client's `Sec-WebSocket-Protocol` offers) if given.
pub fn write_response_with_protocol(out: &mut Vec<u8>, accept: &str, protocol: Option<&str>) {
    write_response_with(out, accept, protocol, None);
}

/// Appends the `101 Switching Protocols` response with a subprotocol and a
/// `Sec-WebSocket-Extensions` answer (permessage-deflate), each if given.
pub fn write_response_with(
    out: &mut Vec<u8>,
    accept: &str,
    protocol: Option<&str>,
    extensions: Option<&str>,
) {
    out.extend_from_slice(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ",
    );
    out.extend_from_slice(accept.as_bytes());
    if let Some(p) = protocol {
        out.extend_from_slice(b"\r\nSec-WebSocket-Protocol: ");
        out.extend_from_slice(p.as_bytes());
    }
    if let Some(e) = extensions {
        out.extend_from_slice(b"\r\nSec-WebSocket-Extensions: ");
        out.extend_from_slice(e.as_bytes());
    }
    out.extend_from_slice(b"\r\n\r\n");
}

/// The client's `Sec-WebSocket-Extensions` values (each a comma-separated
/// list of offers), for [`crate::deflate::negotiate`].
pub fn offered_extensions<'a>(
    req: &'a httparse::Request<'_, '_>,
) -> impl Iterator<Item = &'a str> + 'a {
    req.headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("sec-websocket-extensions"))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
}

/// The subprotocols a client offers in `Sec-WebSocket-Protocol` (one header
/// or several, comma-separated), trimmed.
pub fn offered_protocols<'a>(
    req: &'a httparse::Request<'_, '_>,
) -> impl Iterator<Item = &'a str> + 'a {
    req.headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("sec-websocket-protocol"))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
}

/// Client side: appends an upgrade request for `path` (with query) on `host`.
/// `nonce` is 16 bytes the caller chose; returns the accept value to expect.
pub fn write_client_request(out: &mut Vec<u8>, host: &str, path: &str, nonce: [u8; 16]) -> String {
    write_client_request_with(out, host, path, nonce, None)
}

/// As [`write_client_request`], offering `extensions` in
/// `Sec-WebSocket-Extensions` (permessage-deflate) if given.
pub fn write_client_request_with(
    out: &mut Vec<u8>,
    host: &str,
    path: &str,
    nonce: [u8; 16],
    extensions: Option<&str>,
) -> String {
    let key = B64.encode(nonce);
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(
        b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ",
    );
    out.extend_from_slice(key.as_bytes());
    if let Some(e) = extensions {
        out.extend_from_slice(b"\r\nSec-WebSocket-Extensions: ");
        out.extend_from_slice(e.as_bytes());
    }
    out.extend_from_slice(b"\r\n\r\n");
    accept_key(key.as_bytes())
}

/// Why a server's answer to an upgrade request is not an upgrade.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    /// The server answered with another status (403 refused, 404, ...).
    #[error("HTTP {0}")]
    Status(u16),
    #[error("bad Sec-WebSocket-Accept")]
    Accept,
    #[error("bad HTTP response: {0}")]
    Malformed(String),
}

/// Client side: parses the server's answer. `Ok(None)` means read more;
/// `Ok(Some(n))` means upgraded, with the response taking `n` bytes.
pub fn parse_client_response(
    buf: &[u8],
    expected_accept: &str,
) -> Result<Option<usize>, ResponseError> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(n)) => {
            if resp.code != Some(101) {
                return Err(ResponseError::Status(resp.code.unwrap_or(0)));
            }
            let accept = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("sec-websocket-accept"))
                .map(|h| h.value);
            if accept != Some(expected_accept.as_bytes()) {
                return Err(ResponseError::Accept);
            }
            Ok(Some(n))
        }
        Err(e) => Err(ResponseError::Malformed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_example_key() {
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    fn check(raw: &str) -> Result<String, HandshakeError> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        req.parse(raw.as_bytes()).unwrap();
        check_request(&req)
    }

    #[test]
    fn checks_each_header() {
        let ok = "GET /socket/websocket HTTP/1.1\r\nHost: x\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
        assert!(check(ok).is_ok());
        assert_eq!(
            check(&ok.replace("Host: x\r\n", "")),
            Err(HandshakeError::NoHost)
        );
        assert_eq!(
            check(&ok.replace("WebSocket", "h2c")),
            Err(HandshakeError::Upgrade)
        );
        assert_eq!(
            check(&ok.replace("keep-alive, Upgrade", "close")),
            Err(HandshakeError::Connection)
        );
        assert_eq!(check(&ok.replace(": 13", ": 8")).unwrap_err().status(), 426);
        assert_eq!(
            check(&ok.replace("dGhlIHNhbXBsZSBub25jZQ==", "abc")),
            Err(HandshakeError::Key)
        );
        assert_eq!(check(&ok.replace("GET", "POST")).unwrap_err().status(), 405);
    }

    #[test]
    fn client_round_trip() {
        let mut req = Vec::new();
        let expect = write_client_request(&mut req, "h", "/socket/websocket?vsn=2.0.0", [9; 16]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Request::new(&mut headers);
        r.parse(&req).unwrap();
        let accept = check_request(&r).unwrap();
        assert_eq!(accept, expect);
        let mut resp = Vec::new();
        write_response(&mut resp, &accept);
        assert_eq!(parse_client_response(&resp, &expect), Ok(Some(resp.len())));
        assert_eq!(parse_client_response(&resp[..10], &expect), Ok(None));
    }
}
