//! A request to the long-poll transport (`/socket/longpoll`, see
//! `crate::protocol::phoenix::longpoll`): its method, the session token and connect info from
//! the query and headers, and its whole body, decided without I/O.
//!
//! The query's `vsn` and params (without the session's `token`) and
//! phoenix.js's `X-Phoenix-AuthToken` header make the same [`ConnectInfo`]
//! as a WebSocket upgrade's. The session token is the last `token` param
//! that is one (`crate::protocol::phoenix::longpoll::token`); any other `token` is the app's
//! param. A body needs `Content-Length` (chunked: 411, as phoenix.js always
//! sends a length) and may be `--max-message-bytes` long (413 past it); the
//! request is incomplete until all of it is read. Every long-poll request
//! passes `check_origin` first, as in Phoenix's `LongPoll.call/2` (refused:
//! `{"status":403}`, the transport answers it).

use throng_protocol::Vsn;

use crate::channel::ConnectInfo;
use crate::config::Config;
use crate::engine::http::Route;
use crate::engine::http::{body_length, Head, HttpError};
use crate::protocol::phoenix::longpoll::Token;
use crate::protocol::phoenix::upgrade::{query_params, Open};

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
    /// Refused by `check_origin` (answered 403, counted).
    pub origin_refused: bool,
    /// With the connect hook, for a new session: the headers it is sent.
    pub hook_headers: Vec<(&'static str, String)>,
}

/// Reads a long-poll request: its query, headers and whole body.
pub(crate) fn request(head: &Head<'_, '_>, config: &Config) -> Route<Open, LongPoll> {
    let (req, data, head_len) = (head.req, head.data, head.head_len);
    let header = |name: &str| head.header(name);
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
            return Route::Error(e);
        }
    };
    let body_len = match body_length(req, config.max_message_bytes) {
        Ok(n) => n,
        Err(e) => return Route::Error(e),
    };
    let Some(end) = head_len.checked_add(body_len).filter(|&e| e <= data.len()) else {
        return Route::Incomplete;
    };
    let (vsn_param, mut params) = query_params(head.query);
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
        ..Default::default()
    });
    let origin = header("origin").map(|o| std::str::from_utf8(o).unwrap_or("null"));
    let host = header("host").and_then(|h| std::str::from_utf8(h).ok());
    let origin_refused = !config.check_origin.allows(origin, host);
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
        keep_alive: head.keep_alive,
        request_headers,
        origin_refused,
        hook_headers: if config.hooks.connect && token.is_none() {
            crate::hooks::connect_headers(req.headers)
        } else {
            Vec::new()
        },
    };
    Route::Request(end, Box::new(lp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::http::{handle, Action, Page};
    use crate::engine::Protocol;
    use crate::protocol::phoenix::Phoenix;

    fn h(data: &[u8], config: &Config) -> (usize, Action<Open, LongPoll>) {
        handle(data, config, |head, config| Phoenix.route(head, config))
    }

    fn cfg() -> Config {
        Config {
            echo: true,
            ..Config::default()
        }
    }

    fn error_of(req: &str) -> HttpError {
        match h(req.as_bytes(), &cfg()) {
            (_, Action::Error(e)) => e,
            (_, other) => panic!("expected an error, got {other:?}"),
        }
    }

    fn longpoll_of(req: &str) -> (usize, LongPoll) {
        match h(req.as_bytes(), &cfg()) {
            (n, Action::Request(lp)) => (n, *lp),
            (_, other) => panic!("expected a long-poll request, got {other:?}"),
        }
    }

    #[test]
    fn longpoll_get_has_vsn_params_token_and_auth_header() {
        let t = Token {
            node: 1,
            shard: 2,
            key: 3,
            secret: crate::protocol::phoenix::longpoll::Secret([7; 16]),
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
        // a repeated app token: the last, as on the WebSocket (Plug's rule)
        let (_, twice) =
            longpoll_of("GET /socket/longpoll?token=a&token=b&vsn=2.0.0 HTTP/1.1\r\n\r\n");
        assert_eq!(twice.connect.unwrap().param("token"), Some("b"));
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
                h(&req.as_bytes()[..cut], &cfg()),
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
        match h(over.as_bytes(), &small) {
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
        // check_origin, as for an upgrade
        let (_, evil) = longpoll_of(
            "GET /socket/longpoll HTTP/1.1\r\nHost: x\r\nOrigin: https://evil.example\r\n\r\n",
        );
        assert!(evil.origin_refused);
        let (_, same) = longpoll_of(
            "GET /socket/longpoll HTTP/1.1\r\nHost: x:4000\r\nOrigin: http://x:4000\r\n\r\n",
        );
        assert!(!same.origin_refused);
        // with long-poll off, the path is like any other
        let off = Config {
            longpoll_window: None,
            ..cfg()
        };
        assert!(matches!(
            h(b"GET /socket/longpoll HTTP/1.1\r\n\r\n", &off),
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
