//! HTTP: what one request at the front of a connection's bytes asks for,
//! decided without I/O (the transport does what the [`Action`] says).
//!
//! - `GET /socket/websocket` upgrades to a Phoenix socket, as Phoenix's
//!   WebSocket transport does: `vsn` picks the serializer (missing: 1.0.0;
//!   unsupported: 403, as `Phoenix.Socket` refuses a serializer it cannot
//!   negotiate), the other query params are the socket's connect params,
//!   and phoenix.js's `authToken` arrives as the subprotocols `phoenix` and
//!   `base64url.bearer.phx.<base64 token, unpadded>`, answered with
//!   `Sec-WebSocket-Protocol: phoenix` (Phoenix 1.8,
//!   `lib/phoenix/transports/websocket.ex`; phoenix.js `socket.js`).
//! - `/socket/longpoll` is the long-poll transport (`crate::longpoll`):
//!   GET, POST with a body, and OPTIONS (CORS preflight). Its `vsn`, params
//!   (without `vsn` and the session's `token`) and phoenix.js's
//!   `X-Phoenix-AuthToken` header make the same [`ConnectInfo`] as a
//!   WebSocket's. The session token is the last `token` param that is one
//!   (`crate::longpoll::token`); any other `token` is the app's param. A body needs
//!   `Content-Length` (chunked: 411, as phoenix.js always sends a length)
//!   and may be `--max-message-bytes` long (413 past it); the request is
//!   incomplete until all of it is read.
//! - `/echo` upgrades to a WebSocket echo (Autobahn), with `--echo`.
//! - `/`, `/assets/*`: the chat page; `/metrics`: Prometheus text.
//! - Anything else is 404; bodies and methods other than GET/HEAD are 405
//!   (outside the long-poll path); malformed heads 400, heads over
//!   [`MAX_REQUEST_HEAD`] 431.

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use throng_protocol::{handshake, Vsn};

use crate::channel::ConnectInfo;
use crate::config::Config;
use crate::longpoll::Token;

/// Largest request head accepted.
pub(crate) const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// Headers a request may have.
const MAX_HEADERS: usize = 48;
/// phoenix.js's `authToken` subprotocol prefix (`constants.js`).
const AUTH_TOKEN_PREFIX: &str = "base64url.bearer.phx.";
/// The long-poll transport's path (Phoenix's `"/longpoll"` under the socket).
pub(crate) const LONGPOLL_PATH: &str = "/socket/longpoll";

/// The fixed pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Page {
    Index,
    AppJs,
    AppCss,
    Metrics,
    NotFound,
}

/// An upgrade the transport should perform.
#[derive(Debug)]
pub(crate) struct Upgrade {
    /// The whole `101` response.
    pub response: Vec<u8>,
    pub vsn: Vsn,
    pub echo: bool,
    /// Params and token, when the client sent any.
    pub connect: Option<ConnectInfo>,
}

/// The method of a long-poll request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LongPollMethod {
    Get,
    Post,
    /// A CORS preflight.
    Options,
}

/// A request to the long-poll transport, body included.
#[derive(Debug)]
pub(crate) struct LongPoll {
    pub method: LongPollMethod,
    /// The session the request is for (a `token` param that is one).
    pub token: Option<Token>,
    /// The serializer `vsn` asks for (missing: 1.0.0); `None` when
    /// unsupported (refused with 403, as a WebSocket's upgrade).
    pub vsn: Option<Vsn>,
    /// Params and token, when the client sent any.
    pub connect: Option<ConnectInfo>,
    pub body: Vec<u8>,
    /// `Content-Type: application/x-ndjson`: one message per line.
    pub ndjson: bool,
    pub keep_alive: bool,
    /// A preflight's `Access-Control-Request-Headers`.
    pub request_headers: String,
}

/// An error response; the connection closes after it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HttpError {
    pub status: u16,
    pub reason: &'static str,
    pub extra_headers: &'static str,
    pub body: String,
}

impl HttpError {
    fn new(status: u16, reason: &'static str, body: impl Into<String>) -> HttpError {
        HttpError {
            status,
            reason,
            extra_headers: "",
            body: body.into(),
        }
    }
}

/// What the request at the front of the bytes asks for.
#[derive(Debug)]
pub(crate) enum Action {
    /// The head is not complete yet: read more.
    Incomplete,
    /// Serve a page; the connection stays open if `keep_alive`.
    Page {
        page: Page,
        head_only: bool,
        keep_alive: bool,
    },
    Upgrade(Box<Upgrade>),
    LongPoll(Box<LongPoll>),
    Error(HttpError),
}

/// Reads one request head from `data`; returns the bytes it used (all of
/// them for an error, which ends the connection) and what to do.
pub(crate) fn handle(data: &[u8], config: &Config) -> (usize, Action) {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(data) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if data.len() > MAX_REQUEST_HEAD {
                let e = HttpError::new(
                    431,
                    "Request Header Fields Too Large",
                    "request head too large\n",
                );
                return (data.len(), Action::Error(e));
            }
            return (0, Action::Incomplete);
        }
        Err(httparse::Error::TooManyHeaders) => {
            let e = HttpError::new(431, "Request Header Fields Too Large", "too many headers\n");
            return (data.len(), Action::Error(e));
        }
        Err(e) => {
            let e = HttpError::new(400, "Bad Request", format!("malformed request: {e}\n"));
            return (data.len(), Action::Error(e));
        }
    };
    let method = req.method.unwrap_or("");
    let target = req.path.unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if config.log_requests {
        tracing::info!("{method} {target}");
    }
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let is_ws_path = path == "/socket/websocket" || (config.echo && path == "/echo");
    if is_ws_path {
        return match upgrade(&req, path == "/echo", query) {
            Ok(u) => (head_len, Action::Upgrade(Box::new(u))),
            Err(e) => (data.len(), Action::Error(e)),
        };
    }
    let keep_alive = match header("connection") {
        Some(v) if v.eq_ignore_ascii_case(b"close") => false,
        Some(v) if v.eq_ignore_ascii_case(b"keep-alive") => true,
        _ => req.version == Some(1),
    };
    if path == LONGPOLL_PATH && config.longpoll_window.is_some() {
        return longpoll(&req, data, head_len, query, config, keep_alive);
    }
    let has_body = header("content-length").is_some_and(|v| v.trim_ascii() != b"0")
        || header("transfer-encoding").is_some();
    if has_body || (method != "GET" && method != "HEAD") {
        let mut e = HttpError::new(405, "Method Not Allowed", "only GET and HEAD are served\n");
        e.extra_headers = "Allow: GET, HEAD\r\n";
        return (data.len(), Action::Error(e));
    }
    let page = match path {
        "/" => Page::Index,
        "/assets/app.js" => Page::AppJs,
        "/assets/app.css" => Page::AppCss,
        "/metrics" => Page::Metrics,
        _ => Page::NotFound,
    };
    let action = Action::Page {
        page,
        head_only: method == "HEAD",
        keep_alive,
    };
    (head_len, action)
}

/// Reads a long-poll request: its query, headers and whole body.
fn longpoll(
    req: &httparse::Request<'_, '_>,
    data: &[u8],
    head_len: usize,
    query: &str,
    config: &Config,
    keep_alive: bool,
) -> (usize, Action) {
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let method = match req.method {
        Some("GET") => LongPollMethod::Get,
        Some("POST") => LongPollMethod::Post,
        Some("OPTIONS") => LongPollMethod::Options,
        // As Phoenix's long-poll: any other method is a bad request.
        _ => {
            let e = HttpError::new(
                400,
                "Bad Request",
                "long-poll takes GET, POST and OPTIONS\n",
            );
            return (data.len(), Action::Error(e));
        }
    };
    let body_len = match body_length(req, config.max_message_bytes) {
        Ok(n) => n,
        Err(e) => return (data.len(), Action::Error(e)),
    };
    let Some(end) = head_len.checked_add(body_len).filter(|&e| e <= data.len()) else {
        return (0, Action::Incomplete);
    };
    let (vsn_param, mut params) = query_params(query);
    // phoenix.js appends the session's token after the socket params.
    let token = params
        .iter()
        .rev()
        .filter(|(k, _)| k == "token")
        .find_map(|(_, v)| Token::parse(v));
    params.retain(|(k, v)| k != "token" || Token::parse(v).is_none());
    let vsn = match vsn_param.as_deref() {
        None => Some(Vsn::V1),
        Some(v) => Vsn::from_requirement(v),
    };
    // phoenix.js's long-poll sends the `authToken` as this header, as is.
    let auth_token = header("x-phoenix-authtoken")
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_owned);
    let connect = (!params.is_empty() || auth_token.is_some()).then_some(ConnectInfo {
        params,
        auth_token,
        user_id: None,
    });
    let ndjson = header("content-type").is_some_and(|v| {
        let mime = v.split(|&b| b == b';').next().unwrap_or(v);
        mime.trim_ascii()
            .eq_ignore_ascii_case(b"application/x-ndjson")
    });
    let request_headers = header("access-control-request-headers")
        .and_then(|v| std::str::from_utf8(v).ok())
        .unwrap_or("")
        .to_owned();
    let lp = LongPoll {
        method,
        token,
        vsn,
        connect,
        body: data[head_len..end].to_vec(),
        ndjson,
        keep_alive,
        request_headers,
    };
    (end, Action::LongPoll(Box::new(lp)))
}

/// The body length a request declares: `Content-Length` (all copies
/// agreeing), at most `max`; chunked bodies are refused with 411.
fn body_length(req: &httparse::Request<'_, '_>, max: usize) -> Result<usize, HttpError> {
    if req
        .headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding"))
    {
        return Err(HttpError::new(
            411,
            "Length Required",
            "send the body with Content-Length, not chunked\n",
        ));
    }
    let mut len = None;
    for h in req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
    {
        let v = h.value.trim_ascii();
        let n = std::str::from_utf8(v)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<usize>().ok())
            .ok_or_else(|| HttpError::new(400, "Bad Request", "bad Content-Length\n"))?;
        if len.is_some_and(|l| l != n) {
            return Err(HttpError::new(
                400,
                "Bad Request",
                "conflicting Content-Length\n",
            ));
        }
        len = Some(n);
    }
    let len = len.unwrap_or(0);
    if len > max {
        return Err(HttpError::new(
            413,
            "Payload Too Large",
            format!("a body may have {max} bytes (--max-message-bytes)\n"),
        ));
    }
    Ok(len)
}

/// The query's `vsn`, and its other params in order.
fn query_params(query: &str) -> (Option<String>, Vec<(String, String)>) {
    let mut params: Vec<(String, String)> = Vec::new();
    let mut vsn = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k == "vsn" {
            vsn.get_or_insert(v.into_owned());
        } else {
            params.push((k.into_owned(), v.into_owned()));
        }
    }
    (vsn, params)
}

/// Checks an upgrade request and builds its `101` response.
fn upgrade(req: &httparse::Request<'_, '_>, echo: bool, query: &str) -> Result<Upgrade, HttpError> {
    let accept = handshake::check_request(req).map_err(|e| {
        let reason = match e.status() {
            426 => "Upgrade Required",
            405 => "Method Not Allowed",
            _ => "Bad Request",
        };
        let mut err = HttpError::new(e.status(), reason, format!("{e}\n"));
        if e.status() == 426 {
            err.extra_headers = "Sec-WebSocket-Version: 13\r\n";
        }
        err
    })?;
    let (vsn_param, params) = query_params(query);
    let vsn = if echo {
        Vsn::V2
    } else {
        match vsn_param.as_deref() {
            None => Vsn::V1,
            Some(v) => Vsn::from_requirement(v).ok_or_else(|| {
                HttpError::new(
                    403,
                    "Forbidden",
                    format!("unsupported vsn {v:?}: this server speaks 1.0.0 and 2.0.0\n"),
                )
            })?,
        }
    };
    let mut protocol = None;
    let mut auth_token = None;
    let mut offered_phoenix = false;
    for p in handshake::offered_protocols(req) {
        if p == "phoenix" {
            offered_phoenix = true;
        } else if let Some(encoded) = p.strip_prefix(AUTH_TOKEN_PREFIX) {
            // phoenix.js encodes with btoa (standard alphabet) and strips the
            // padding; Phoenix decodes it so. The URL-safe alphabet the
            // prefix's name suggests is accepted too.
            let raw = STANDARD_NO_PAD
                .decode(encoded)
                .or_else(|_| URL_SAFE_NO_PAD.decode(encoded))
                .map_err(|_| {
                    HttpError::new(400, "Bad Request", "authToken subprotocol is not base64\n")
                })?;
            let token = String::from_utf8(raw)
                .map_err(|_| HttpError::new(400, "Bad Request", "authToken is not UTF-8\n"))?;
            auth_token = Some(token);
        }
    }
    if offered_phoenix {
        protocol = Some("phoenix");
    }
    let connect = (!params.is_empty() || auth_token.is_some()).then_some(ConnectInfo {
        params,
        auth_token,
        user_id: None,
    });
    let mut response = Vec::with_capacity(192);
    handshake::write_response_with_protocol(&mut response, &accept, protocol);
    Ok(Upgrade {
        response,
        vsn,
        echo,
        connect,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config {
            echo: true,
            ..Config::default()
        }
    }

    const KEY: &str = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";

    fn ws(target: &str, extra: &str) -> String {
        format!(
            "GET {target} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n{KEY}{extra}\r\n"
        )
    }

    fn upgrade_of(req: &str) -> Upgrade {
        match handle(req.as_bytes(), &cfg()) {
            (n, Action::Upgrade(u)) if n == req.len() => *u,
            (_, other) => panic!("expected an upgrade, got {other:?}"),
        }
    }

    fn error_of(req: &str) -> HttpError {
        match handle(req.as_bytes(), &cfg()) {
            (_, Action::Error(e)) => e,
            (_, other) => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn vsn_picks_the_serializer() {
        assert_eq!(upgrade_of(&ws("/socket/websocket", "")).vsn, Vsn::V1);
        assert_eq!(
            upgrade_of(&ws("/socket/websocket?vsn=2.0.0", "")).vsn,
            Vsn::V2
        );
        assert_eq!(
            upgrade_of(&ws("/socket/websocket?vsn=1.0.0", "")).vsn,
            Vsn::V1
        );
        let e = error_of(&ws("/socket/websocket?vsn=3.0.0", ""));
        assert_eq!(e.status, 403);
        assert!(e.body.contains("3.0.0"), "{}", e.body);
    }

    #[test]
    fn params_are_decoded_without_vsn() {
        let u = upgrade_of(&ws(
            "/socket/websocket?token=a%20b&vsn=2.0.0&user=%C3%A9&x=",
            "",
        ));
        let c = u.connect.expect("params");
        assert_eq!(c.param("token"), Some("a b"));
        assert_eq!(c.param("user"), Some("é"));
        assert_eq!(c.param("x"), Some(""));
        assert_eq!(c.param("vsn"), None);
        assert!(upgrade_of(&ws("/socket/websocket?vsn=2.0.0", ""))
            .connect
            .is_none());
    }

    #[test]
    fn auth_token_subprotocol() {
        // phoenix.js: ["phoenix", "base64url.bearer.phx." + btoa("1234") without "="]
        let u = upgrade_of(&ws(
            "/socket/websocket?vsn=2.0.0",
            "Sec-WebSocket-Protocol: phoenix, base64url.bearer.phx.MTIzNA\r\n",
        ));
        assert_eq!(u.connect.unwrap().auth_token.as_deref(), Some("1234"));
        let text = String::from_utf8(u.response).unwrap();
        assert!(
            text.contains("\r\nSec-WebSocket-Protocol: phoenix\r\n"),
            "{text}"
        );
        // "??>" encodes to "Pz8+" in the standard alphabet, "Pz8-" URL-safe
        for enc in ["Pz8+", "Pz8-"] {
            let u = upgrade_of(&ws(
                "/socket/websocket",
                &format!("Sec-WebSocket-Protocol: phoenix\r\nSec-WebSocket-Protocol: {AUTH_TOKEN_PREFIX}{enc}\r\n"),
            ));
            assert_eq!(u.connect.unwrap().auth_token.as_deref(), Some("??>"));
        }
        let plain = upgrade_of(&ws("/socket/websocket", ""));
        assert!(!String::from_utf8(plain.response)
            .unwrap()
            .contains("Sec-WebSocket-Protocol"));
        let e = error_of(&ws(
            "/socket/websocket",
            "Sec-WebSocket-Protocol: phoenix, base64url.bearer.phx.***\r\n",
        ));
        assert_eq!(e.status, 400);
    }

    #[test]
    fn pages_and_errors() {
        let get = |t: &str| format!("GET {t} HTTP/1.1\r\nHost: x\r\n\r\n");
        for (path, want) in [
            ("/", Page::Index),
            ("/assets/app.js", Page::AppJs),
            ("/metrics", Page::Metrics),
            ("/nope", Page::NotFound),
        ] {
            match handle(get(path).as_bytes(), &cfg()) {
                (
                    _,
                    Action::Page {
                        page,
                        keep_alive,
                        head_only,
                    },
                ) => {
                    assert_eq!(page, want);
                    assert!(keep_alive && !head_only);
                }
                (_, other) => panic!("{path}: {other:?}"),
            }
        }
        assert!(matches!(
            handle(b"GET / HTTP/1.1\r\nHo", &cfg()),
            (0, Action::Incomplete)
        ));
        assert_eq!(error_of("POST / HTTP/1.1\r\nHost: x\r\n\r\n").status, 405);
        assert_eq!(
            error_of("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc").status,
            405
        );
        assert_eq!(error_of("GARBAGE\r\n\r\n").status, 400);
        let big = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(MAX_REQUEST_HEAD));
        assert_eq!(error_of(&big).status, 431);
        assert_eq!(
            error_of(&ws("/socket/websocket", "").replace(": 13", ": 8")).status,
            426
        );
        assert!(upgrade_of(&ws("/echo", "")).echo);
    }

    fn longpoll_of(req: &str) -> (usize, LongPoll) {
        match handle(req.as_bytes(), &cfg()) {
            (n, Action::LongPoll(lp)) => (n, *lp),
            (_, other) => panic!("expected a long-poll request, got {other:?}"),
        }
    }

    #[test]
    fn longpoll_get_has_vsn_params_token_and_auth_header() {
        let t = Token {
            node: 1,
            shard: 2,
            key: 3,
            secret: crate::longpoll::Secret([7; 16]),
        };
        // phoenix.js: the app's params (a `token` among them), vsn, then the session's token
        let (n, lp) = longpoll_of(&format!(
            "GET /socket/longpoll?token=app&user=b%20c&vsn=2.0.0&token={t} HTTP/1.1\r\nHost: x\r\nX-Phoenix-AuthToken: s3cret\r\n\r\n",
        ));
        assert!(n > 0);
        assert_eq!(lp.method, LongPollMethod::Get);
        assert_eq!(lp.vsn, Some(Vsn::V2));
        assert_eq!(lp.token, Some(t));
        let c = lp.connect.unwrap();
        let want = [("token", "app"), ("user", "b c")].map(|(k, v)| (k.to_string(), v.to_string()));
        assert_eq!(c.params, want);
        assert_eq!(c.auth_token.as_deref(), Some("s3cret"));
        // the first GET has no session token: the app's `token` is a param
        let (_, first) = longpoll_of("GET /socket/longpoll?token=app&vsn=2.0.0& HTTP/1.1\r\n\r\n");
        assert_eq!(first.token, None);
        assert_eq!(first.connect.unwrap().param("token"), Some("app"));
        assert!(lp.keep_alive && lp.body.is_empty());
        let (_, plain) = longpoll_of("GET /socket/longpoll HTTP/1.1\r\n\r\n");
        assert_eq!(
            (plain.vsn, plain.connect, plain.token),
            (Some(Vsn::V1), None, None)
        );
        let (_, bad) = longpoll_of("GET /socket/longpoll?vsn=9.0.0 HTTP/1.1\r\n\r\n");
        assert_eq!(bad.vsn, None);
    }

    #[test]
    fn longpoll_post_reads_the_whole_body() {
        let head = "POST /socket/longpoll?vsn=2.0.0&token=T HTTP/1.1\r\nContent-Type: application/x-ndjson; charset=utf-8\r\nContent-Length: 7\r\n\r\n";
        let req = format!("{head}[1]\n[2]GET / HTTP/1.1\r\n\r\n");
        // not all of the body yet: read more
        for cut in [head.len() - 3, head.len(), head.len() + 6] {
            assert!(matches!(
                handle(&req.as_bytes()[..cut], &cfg()),
                (0, Action::Incomplete)
            ));
        }
        let (n, lp) = longpoll_of(&req);
        assert_eq!(n, head.len() + 7, "the next request is left");
        assert_eq!(lp.method, LongPollMethod::Post);
        assert_eq!(lp.body, b"[1]\n[2]");
        assert!(lp.ndjson);
        let (_, json) = longpoll_of(
            "POST /socket/longpoll?token=T HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        );
        assert!(!json.ndjson && !json.keep_alive);
        assert_eq!(json.body, b"{}");
    }

    #[test]
    fn longpoll_bodies_are_bounded_and_need_a_length() {
        let small = Config {
            max_message_bytes: 200,
            ..cfg()
        };
        let over = "POST /socket/longpoll HTTP/1.1\r\nContent-Length: 201\r\n\r\n";
        match handle(over.as_bytes(), &small) {
            (_, Action::Error(e)) => assert_eq!(e.status, 413),
            (_, other) => panic!("{other:?}"),
        }
        let chunked = "POST /socket/longpoll HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
        assert_eq!(error_of(chunked).status, 411);
        let twice =
            "POST /socket/longpoll HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}";
        assert_eq!(error_of(twice).status, 400);
        let junk = "POST /socket/longpoll HTTP/1.1\r\nContent-Length: -2\r\n\r\n{}";
        assert_eq!(error_of(junk).status, 400);
        assert_eq!(
            error_of("PUT /socket/longpoll HTTP/1.1\r\n\r\n").status,
            400
        );
        let (_, pre) = longpoll_of(
            "OPTIONS /socket/longpoll HTTP/1.1\r\nAccess-Control-Request-Headers: x-phoenix-authtoken\r\n\r\n",
        );
        assert_eq!(pre.method, LongPollMethod::Options);
        assert_eq!(pre.request_headers, "x-phoenix-authtoken");
        // with long-poll off, the path is like any other
        let off = Config {
            longpoll_window: None,
            ..cfg()
        };
        assert!(matches!(
            handle(b"GET /socket/longpoll HTTP/1.1\r\n\r\n", &off),
            (
                _,
                Action::Page {
                    page: Page::NotFound,
                    ..
                }
            )
        ));
    }
}
