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
//!   GET, POST with a body, and OPTIONS (CORS preflight), read by
//!   `longpoll.rs` with the same connect info as an upgrade.
//! - An upgrade negotiates permessage-deflate (RFC 7692) with the client's
//!   `Sec-WebSocket-Extensions` offers unless `--no-deflate`
//!   (`throng_protocol::deflate`).
//! - `GET /socket/check` answers what an upgrade with the same params and
//!   token would get, `204` for its `101` (`check.rs`): how a browser page
//!   learns why its socket was refused.
//! - `/echo` upgrades to a WebSocket echo (Autobahn), with `--echo`.
//! - `/healthz`, `/readyz`: liveness and readiness (`crate::health`).
//! - `/`, `/assets/*`: the chat page; `/metrics`: Prometheus text, only
//!   with `--public-metrics` (it lives on the API listener).
//! - An upgrade from a browser page of another site is refused with 403
//!   (`check_origin`, `crate::auth`); connect authentication happens in the
//!   transport, which holds the node's verifier.
//! - Anything else is 404; bodies and methods other than GET/HEAD are 405
//!   (outside the long-poll path); malformed heads 400, heads over
//!   [`MAX_REQUEST_HEAD`] 431.

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use throng_protocol::{handshake, Vsn};

use crate::channel::ConnectInfo;
use crate::config::Config;

mod check;
mod longpoll;

pub(crate) use check::CHECK_PATH;
pub(crate) use longpoll::{LongPoll, LongPollMethod};

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
    Healthz,
    Readyz,
    NotFound,
}

/// An upgrade the transport should perform.
#[derive(Debug)]
pub(crate) struct Upgrade {
    /// The whole `101` response.
    pub response: Vec<u8>,
    pub vsn: Vsn,
    pub echo: bool,
    /// permessage-deflate's server window bits, 0 if not negotiated.
    pub deflate: u8,
    /// Params and token, when the client sent any.
    pub connect: Option<ConnectInfo>,
    /// With the connect hook: the request headers it is sent
    /// ([`crate::hooks::CONNECT_HEADERS`]); empty otherwise.
    pub hook_headers: Vec<(&'static str, String)>,
    /// A `GET /socket/check` (`check.rs`): `response` is its `204`, sent,
    /// and the connection closed, where an upgrade would switch.
    pub check: bool,
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
    pub(super) fn new(status: u16, reason: &'static str, body: impl Into<String>) -> HttpError {
        HttpError {
            status,
            reason,
            extra_headers: "",
            body: body.into(),
            origin_refused: false,
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
    /// A request to the long-poll transport, body included.
    LongPoll(Box<LongPoll>),
    Error(HttpError),
}

/// Reads one request head from `data`; returns the bytes it used (all of
/// them for an error, which ends the connection) and what to do.
pub(crate) fn handle(data: &[u8], config: &Config) -> (usize, Action) {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(data) {
        Ok(httparse::Status::Complete(n)) if n <= MAX_REQUEST_HEAD => n,
        Ok(httparse::Status::Complete(_)) => {
            // The bound holds for a head that arrived whole in one read, too.
            let e = HttpError::new(
                431,
                "Request Header Fields Too Large",
                "request head too large\n",
            );
            return (data.len(), Action::Error(e));
        }
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
        tracing::info!("{method} {}", redact(target));
    }
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let is_ws_path = path == "/socket/websocket" || (config.echo && path == "/echo");
    if path == "/socket/websocket" || path == CHECK_PATH {
        // Phoenix checks the origin before anything else of the upgrade.
        let origin = header("origin");
        let origin_text = origin.map(|o| std::str::from_utf8(o).unwrap_or("null"));
        let host = header("host").and_then(|h| std::str::from_utf8(h).ok());
        if !config.check_origin.allows(origin_text, host) {
            let mut e = HttpError::new(
                403,
                "Forbidden",
                format!(
                    "origin {} not allowed (check_origin)\n",
                    String::from_utf8_lossy(origin.unwrap_or_default())
                ),
            );
            e.origin_refused = true;
            return (data.len(), Action::Error(e));
        }
    }
    if path == CHECK_PATH {
        return match check::request(&req, query, config.hooks.connect) {
            Ok(u) => (head_len, Action::Upgrade(Box::new(u))),
            Err(e) => (data.len(), Action::Error(e)),
        };
    }
    if is_ws_path {
        return match upgrade(
            &req,
            path == "/echo",
            query,
            config.hooks.connect,
            config.deflate,
        ) {
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
        return longpoll::request(&req, data, head_len, query, config, keep_alive);
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

/// The query's `vsn`, and its other params in order. A repeated `vsn` is
/// its last value, as Plug decodes a query (a later key wins).
pub(super) fn query_params(query: &str) -> (Option<String>, Vec<(String, String)>) {
    let mut params: Vec<(String, String)> = Vec::new();
    let mut vsn = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k == "vsn" {
            vsn = Some(v.into_owned());
        } else {
            params.push((k.into_owned(), v.into_owned()));
        }
    }
    (vsn, params)
}

/// Checks an upgrade request and builds its `101` response.
fn upgrade(
    req: &httparse::Request<'_, '_>,
    echo: bool,
    query: &str,
    hook_headers: bool,
    deflate: bool,
) -> Result<Upgrade, HttpError> {
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
        ..Default::default()
    });
    // permessage-deflate, with whatever the client offers that we can honour.
    let agreed = deflate
        .then(|| throng_protocol::deflate::negotiate(handshake::offered_extensions(req)))
        .flatten();
    let extensions = agreed.map(|a| a.response());
    let mut response = Vec::with_capacity(192);
    handshake::write_response_with(&mut response, &accept, protocol, extensions.as_deref());
    let hook_headers = if hook_headers && !echo {
        crate::hooks::connect_headers(req.headers)
    } else {
        Vec::new()
    };
    Ok(Upgrade {
        response,
        vsn,
        echo,
        deflate: agreed.map_or(0, |a| a.server_window),
        connect,
        hook_headers,
        check: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config {
            echo: true,
            public_metrics: true,
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

    #[test]
    fn negotiates_deflate_unless_turned_off() {
        let offer = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n";
        let u = upgrade_of(&ws("/socket/websocket?vsn=2.0.0", offer));
        assert_eq!(u.deflate, 15);
        let text = String::from_utf8(u.response).unwrap();
        assert!(
            text.contains("\r\nSec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n\r\n"),
            "{text}"
        );
        let none = upgrade_of(&ws("/socket/websocket?vsn=2.0.0", ""));
        assert_eq!(none.deflate, 0);
        assert!(!String::from_utf8(none.response)
            .unwrap()
            .contains("Extensions"));
        let req = ws("/socket/websocket?vsn=2.0.0", offer);
        let off = Config {
            deflate: false,
            ..cfg()
        };
        match handle(req.as_bytes(), &off) {
            (_, Action::Upgrade(u)) => {
                assert_eq!(u.deflate, 0);
                assert!(!String::from_utf8(u.response)
                    .unwrap()
                    .contains("Extensions"));
            }
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
    fn a_repeated_param_is_its_last_value_as_plug() {
        let u = upgrade_of(&ws(
            "/socket/websocket?token=first&vsn=1.0.0&token=last&vsn=2.0.0",
            "",
        ));
        assert_eq!(u.vsn, Vsn::V2);
        assert_eq!(u.connect.expect("params").param("token"), Some("last"));
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
    fn check_origin_refuses_other_sites() {
        let same = ws("/socket/websocket", "Origin: http://x:4000\r\n");
        upgrade_of(&same);
        upgrade_of(&ws("/socket/websocket", ""));
        let e = error_of(&ws("/socket/websocket", "Origin: https://evil.example\r\n"));
        assert_eq!(e.status, 403);
        assert!(
            e.origin_refused && e.body.contains("evil.example"),
            "{}",
            e.body
        );
        let e = error_of(&ws("/socket/websocket", "Origin: null\r\n"));
        assert!(e.origin_refused);
        let off = Config {
            check_origin: crate::auth::CheckOrigin::Off,
            ..cfg()
        };
        let req = ws("/socket/websocket", "Origin: https://evil.example\r\n");
        assert!(matches!(
            handle(req.as_bytes(), &off),
            (_, Action::Upgrade(_))
        ));
    }

    #[test]
    fn metrics_only_with_public_metrics() {
        let get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        let private = Config::default();
        match handle(get, &private) {
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
        assert!(upgrade_of(&ws("/echo", "")).echo);
    }
}
