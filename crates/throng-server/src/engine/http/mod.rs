//! HTTP: what one request at the front of a connection's bytes asks for,
//! decided without I/O (the shard does what the [`Action`] says).
//!
//! The engine serves its own paths and hands every other request to its
//! protocols ([`Protocol::route`]): Phoenix's `/socket/websocket` and
//! `/socket/longpoll` are `crate::protocol::phoenix`'s. Its own:
//! - `/healthz`, `/readyz`: liveness and readiness (`crate::health`);
//! - `/`, `/assets/*`: the chat page; `/metrics`: Prometheus text, only
//!   with `--public-metrics` (it lives on the API listener);
//! - `/echo` upgrades to a WebSocket echo (Autobahn), with `--echo`.
//!
//! Anything else is 404; bodies and methods other than GET/HEAD are 405
//! (outside a protocol's routes); malformed heads 400, heads over
//! [`MAX_REQUEST_HEAD`] 431. An upgrade negotiates permessage-deflate
//! (RFC 7692) with the client's `Sec-WebSocket-Extensions` offers unless
//! `--no-deflate` ([`accept_websocket`], which every protocol's upgrade
//! goes through).

use throng_protocol::{handshake, Wire};

use crate::config::Config;

/// Largest request head accepted.
pub(crate) const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// Headers a request may have.
const MAX_HEADERS: usize = 48;

/// The fixed pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Page {
    Index,
    AppJs,
    AppCss,
    Metrics,
    Healthz,
    Readyz,
    NotFound,
}

/// A request head, parsed, for a protocol to route.
pub(crate) struct Head<'h, 'b> {
    pub req: &'h httparse::Request<'h, 'b>,
    pub path: &'b str,
    pub query: &'b str,
    /// The bytes the head came in, and what follows it (a body).
    pub data: &'b [u8],
    pub head_len: usize,
    pub keep_alive: bool,
}

impl<'h, 'b> Head<'h, 'b> {
    /// The value of header `name` (any case), if present.
    pub fn header(&self, name: &str) -> Option<&'b [u8]> {
        self.req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

/// An upgrade to a protocol's socket: the `101` to send once the protocol
/// opens it, the wire it speaks, and what the protocol needs to open it.
#[derive(Debug)]
pub(crate) struct Upgrade<O> {
    /// The whole `101` response.
    pub response: Vec<u8>,
    pub wire: Wire,
    /// permessage-deflate's server window bits, 0 if not negotiated.
    pub deflate: u8,
    pub open: O,
}

/// An error response; the connection closes after it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HttpError {
    pub status: u16,
    pub reason: &'static str,
    pub extra_headers: &'static str,
    pub body: String,
    /// Refused by `check_origin` (counted).
    pub origin_refused: bool,
}

impl HttpError {
    pub(crate) fn new(status: u16, reason: &'static str, body: impl Into<String>) -> HttpError {
        HttpError {
            status,
            reason,
            extra_headers: "",
            body: body.into(),
            origin_refused: false,
        }
    }
}

/// What a protocol made of an HTTP request.
pub(crate) enum Route<O, R> {
    /// An upgrade to one of its WebSockets (the engine writes nothing yet:
    /// [`Protocol::upgraded`] decides).
    Upgrade(Box<Upgrade<O>>),
    /// A request it answers itself ([`Protocol::request`]), with the bytes
    /// it used (head and body).
    Request(usize, Box<R>),
    /// Refused: the engine writes the error and closes the connection.
    Error(HttpError),
    /// Its body is not all here yet: read more.
    Incomplete,
}

/// What the request at the front of the bytes asks for, for a server
/// whose protocols' upgrades carry `O` and whose own requests are `R`.
pub(crate) enum Action<O, R> {
    /// The head is not complete yet: read more.
    Incomplete,
    /// Serve a page; the connection stays open if `keep_alive`.
    Page {
        page: Page,
        head_only: bool,
        keep_alive: bool,
    },
    /// The WebSocket echo (`--echo`): the `101` and deflate's window bits.
    Echo(Vec<u8>, u8),
    /// An upgrade to a protocol's socket.
    Upgrade(Box<Upgrade<O>>),
    /// A protocol's own request.
    Request(Box<R>),
    Error(HttpError),
}

impl<O, R> std::fmt::Debug for Action<O, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Incomplete => f.write_str("Incomplete"),
            Action::Page { page, .. } => write!(f, "Page({page:?})"),
            Action::Echo(..) => f.write_str("Echo"),
            Action::Upgrade(u) => write!(f, "Upgrade({:?})", u.wire),
            Action::Request(_) => f.write_str("Request"),
            Action::Error(e) => write!(f, "Error({e:?})"),
        }
    }
}

/// Reads one request head from `data`; returns the bytes it used (all of
/// them for an error, which ends the connection) and what to do.
/// What is not the engine's own goes to `route` (the protocols'
/// [`Protocol::route`](super::Protocol::route)).
pub(crate) fn handle<O, R>(
    data: &[u8],
    config: &Config,
    route: impl FnOnce(&Head<'_, '_>, &Config) -> Option<Route<O, R>>,
) -> (usize, Action<O, R>) {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(data) {
        Ok(httparse::Status::Complete(n)) if n <= MAX_REQUEST_HEAD => n,
        // The bound holds for a head that arrived whole in one read, too.
        Ok(httparse::Status::Complete(_)) => {
            return (data.len(), too_large("request head too large\n"))
        }
        Ok(httparse::Status::Partial) if data.len() > MAX_REQUEST_HEAD => {
            return (data.len(), too_large("request head too large\n"))
        }
        Ok(httparse::Status::Partial) => return (0, Action::Incomplete),
        Err(httparse::Error::TooManyHeaders) => {
            return (data.len(), too_large("too many headers\n"))
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
        tracing::info!("{method} {}", redact(target));
    }
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let keep_alive = match header("connection") {
        Some(v) if v.eq_ignore_ascii_case(b"close") => false,
        Some(v) if v.eq_ignore_ascii_case(b"keep-alive") => true,
        _ => req.version == Some(1),
    };
    let has_body = header("content-length").is_some_and(|v| v.trim_ascii() != b"0")
        || header("transfer-encoding").is_some();
    if config.echo && path == "/echo" {
        return match check_websocket(&req) {
            Ok(accept) => {
                let (response, deflate) = accept_websocket(&req, &accept, None, config.deflate);
                (head_len, Action::Echo(response, deflate))
            }
            Err(e) => (data.len(), Action::Error(e)),
        };
    }
    let head = Head {
        req: &req,
        path,
        query,
        data,
        head_len,
        keep_alive,
    };
    match route(&head, config) {
        Some(Route::Upgrade(u)) => return (head_len, Action::Upgrade(u)),
        Some(Route::Request(used, r)) => return (used, Action::Request(r)),
        Some(Route::Error(e)) => return (data.len(), Action::Error(e)),
        Some(Route::Incomplete) => return (0, Action::Incomplete),
        None => {}
    }
    if has_body || (method != "GET" && method != "HEAD") {
        let mut e = HttpError::new(405, "Method Not Allowed", "only GET and HEAD are served\n");
        e.extra_headers = "Allow: GET, HEAD\r\n";
        return (data.len(), Action::Error(e));
    }
    let page = match path {
        "/" => Page::Index,
        "/assets/app.js" => Page::AppJs,
        "/assets/app.css" => Page::AppCss,
        "/metrics" if config.public_metrics => Page::Metrics,
        "/healthz" => Page::Healthz,
        "/readyz" => Page::Readyz,
        _ => Page::NotFound,
    };
    let action = Action::Page {
        page,
        head_only: method == "HEAD",
        keep_alive,
    };
    (head_len, action)
}

fn too_large<O, R>(body: &'static str) -> Action<O, R> {
    Action::Error(HttpError::new(431, "Request Header Fields Too Large", body))
}

/// Checks a WebSocket upgrade request (RFC 6455); returns its
/// `Sec-WebSocket-Accept` value, for [`accept_websocket`].
pub(crate) fn check_websocket(req: &httparse::Request<'_, '_>) -> Result<String, HttpError> {
    handshake::check_request(req).map_err(|e| {
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
    })
}

/// The `101` of a checked upgrade ([`check_websocket`] gave `accept`),
/// answering subprotocol `protocol` and agreeing permessage-deflate when
/// `deflate` and the client offers it; returns the response and the server
/// window bits (0 without deflate). Every protocol's upgrade goes through
/// both.
pub(crate) fn accept_websocket(
    req: &httparse::Request<'_, '_>,
    accept: &str,
    protocol: Option<&str>,
    deflate: bool,
) -> (Vec<u8>, u8) {
    // permessage-deflate, with whatever the client offers that we can honour.
    let agreed = deflate
        .then(|| throng_protocol::deflate::negotiate(handshake::offered_extensions(req)))
        .flatten();
    let extensions = agreed.map(|a| a.response());
    let mut response = Vec::with_capacity(192);
    handshake::write_response_with(&mut response, accept, protocol, extensions.as_deref());
    (response, agreed.map_or(0, |a| a.server_window))
}

/// The body length a request declares: `Content-Length` (all copies
/// agreeing), at most `max`; chunked bodies are refused with 411.
pub(crate) fn body_length(req: &httparse::Request<'_, '_>, max: usize) -> Result<usize, HttpError> {
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

/// Query params whose values are secrets: never written to the log.
const SECRET_PARAMS: [&str; 9] = [
    "token",
    "auth_token",
    "authtoken",
    "access_token",
    "jwt",
    "api_key",
    "apikey",
    "secret",
    "password",
];

/// A request target fit for the log: the value of every param named in
/// [`SECRET_PARAMS`] (any case, percent-encoded or not) replaced by
/// `[REDACTED]`; the rest as it came.
fn redact(target: &str) -> std::borrow::Cow<'_, str> {
    let Some((path, query)) = target.split_once('?') else {
        return target.into();
    };
    let secret = |pair: &str| {
        let key = pair.split_once('=').map_or(pair, |(k, _)| k);
        let key: String = form_urlencoded::parse(key.as_bytes())
            .next()
            .map(|(k, _)| k.to_ascii_lowercase())
            .unwrap_or_default();
        SECRET_PARAMS.contains(&key.as_str())
    };
    if !query.split('&').any(secret) {
        return target.into();
    }
    let mut out = String::with_capacity(target.len());
    out.push_str(path);
    out.push('?');
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match pair.split_once('=') {
            Some((k, _)) if secret(pair) => {
                out.push_str(k);
                out.push_str("=[REDACTED]");
            }
            _ => out.push_str(pair),
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Protocol;
    use crate::protocol::phoenix::longpoll::http::LongPoll;
    use crate::protocol::phoenix::upgrade::Open;
    use crate::protocol::phoenix::Phoenix;

    fn cfg() -> Config {
        Config {
            echo: true,
            public_metrics: true,
            ..Config::default()
        }
    }

    fn h(data: &[u8], config: &Config) -> (usize, Action<Open, LongPoll>) {
        handle(data, config, |head, config| Phoenix.route(head, config))
    }

    const KEY: &str = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";

    fn ws(target: &str, extra: &str) -> String {
        format!(
            "GET {target} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n{KEY}{extra}\r\n"
        )
    }

    fn error_of(req: &str) -> HttpError {
        match h(req.as_bytes(), &cfg()) {
            (_, Action::Error(e)) => e,
            (_, other) => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn secrets_are_redacted_from_logged_targets() {
        assert_eq!(redact("/socket/websocket"), "/socket/websocket");
        assert_eq!(
            redact("/socket/websocket?vsn=2.0.0&user=a"),
            "/socket/websocket?vsn=2.0.0&user=a"
        );
        assert_eq!(
            redact("/socket/websocket?token=SFMyNTY.abc&vsn=2.0.0&TOKEN=x&%74oken=y&api_key=k&tokens=ok"),
            "/socket/websocket?token=[REDACTED]&vsn=2.0.0&TOKEN=[REDACTED]&%74oken=[REDACTED]&api_key=[REDACTED]&tokens=ok"
        );
        // A bare key has no value to hide.
        assert_eq!(redact("/x?token&a=1"), "/x?token&a=1");
    }

    #[test]
    fn metrics_only_with_public_metrics() {
        let get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        let private = Config::default();
        match h(get, &private) {
            (_, Action::Page { page, .. }) => assert_eq!(page, Page::NotFound),
            (_, other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn pages_and_errors() {
        let get = |t: &str| format!("GET {t} HTTP/1.1\r\nHost: x\r\n\r\n");
        for (path, want) in [
            ("/", Page::Index),
            ("/assets/app.js", Page::AppJs),
            ("/metrics", Page::Metrics),
            ("/healthz", Page::Healthz),
            ("/readyz?verbose", Page::Readyz),
            ("/nope", Page::NotFound),
        ] {
            match h(get(path).as_bytes(), &cfg()) {
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
            h(b"GET / HTTP/1.1\r\nHo", &cfg()),
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
        let whole = format!("{big}\r\n\r\n");
        assert_eq!(
            error_of(&whole).status,
            431,
            "a complete head over the bound"
        );
        let upgrade = ws(
            "/socket/websocket",
            &format!("X: {}\r\n", "a".repeat(MAX_REQUEST_HEAD)),
        );
        assert_eq!(
            error_of(&upgrade).status,
            431,
            "a complete upgrade over the bound"
        );
        assert_eq!(
            error_of(&ws("/socket/websocket", "").replace(": 13", ": 8")).status,
            426
        );
        assert!(matches!(
            h(ws("/echo", "").as_bytes(), &cfg()),
            (_, Action::Echo(..))
        ));
    }
}
