//! Phoenix's routes on the public port: `GET /socket/websocket` upgrades to
//! a Phoenix socket, as Phoenix's WebSocket transport does, and
//! `/socket/longpoll` is the long-poll transport (`longpoll/http.rs`).
//!
//! An upgrade: `check_origin` first (a browser page of another site is
//! refused with 403, as Phoenix checks the origin before anything else),
//! then `vsn` picks the serializer (missing: 1.0.0; unsupported: 403, as
//! `Phoenix.Socket` refuses a serializer it cannot negotiate), the other
//! query params are the socket's connect params, and phoenix.js's
//! `authToken` arrives as the subprotocols `phoenix` and
//! `base64url.bearer.phx.<base64 token, unpadded>`, answered with
//! `Sec-WebSocket-Protocol: phoenix` (Phoenix 1.8,
//! `lib/phoenix/transports/websocket.ex`; phoenix.js `socket.js`). Connect
//! authentication happens when the shard opens the socket
//! (`Protocol::upgraded`), which holds the node's verifier.

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use throng_protocol::{handshake, Vsn, Wire};

use crate::channel::ConnectInfo;
use crate::config::Config;
use crate::engine::http::Route;
use crate::engine::http::{accept_websocket, check_websocket, Head, HttpError, Upgrade};

/// phoenix.js's `authToken` subprotocol prefix (`constants.js`).
const AUTH_TOKEN_PREFIX: &str = "base64url.bearer.phx.";
/// The WebSocket transport's path.
pub(crate) const WEBSOCKET_PATH: &str = "/socket/websocket";
/// The long-poll transport's path (Phoenix's `"/longpoll"` under the socket).
pub(crate) const LONGPOLL_PATH: &str = "/socket/longpoll";

/// What a Phoenix upgrade carries to the shard that opens its socket.
#[derive(Debug, Default)]
pub(crate) struct Open {
    /// Params and token, when the client sent any.
    pub connect: Option<ConnectInfo>,
    /// With the connect hook: the request headers it is sent
    /// ([`crate::hooks::CONNECT_HEADERS`]); empty otherwise.
    pub hook_headers: Vec<(&'static str, String)>,
    /// A `GET /socket/check` (`check.rs`): the response is its `204`,
    /// sent, and the connection closed, where an upgrade would switch.
    pub check: bool,
}

/// An upgrade at [`WEBSOCKET_PATH`]: the socket to open, or the refusal.
pub(crate) fn websocket<R>(head: &Head<'_, '_>, config: &Config) -> Route<Open, R> {
    match upgrade(head, config) {
        Ok(u) => Route::Upgrade(Box::new(u)),
        Err(e) => Route::Error(e),
    }
}

/// The query's `vsn`, and its other params in order. A repeated `vsn` is
/// its last value, as Plug decodes a query (a later key wins).
pub(crate) fn query_params(query: &str) -> (Option<String>, Vec<(String, String)>) {
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

/// Refuses (403) a request whose `Origin` is not allowed (`check_origin`).
pub(crate) fn check_origin(head: &Head<'_, '_>, config: &Config) -> Result<(), HttpError> {
    let origin = head.header("origin");
    let origin_text = origin.map(|o| std::str::from_utf8(o).unwrap_or("null"));
    let host = head
        .header("host")
        .and_then(|h| std::str::from_utf8(h).ok());
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
        return Err(e);
    }
    Ok(())
}

/// Checks a Phoenix upgrade request and builds its `101` response.
fn upgrade(head: &Head<'_, '_>, config: &Config) -> Result<Upgrade<Open>, HttpError> {
    // Phoenix checks the origin before anything else of the upgrade.
    check_origin(head, config)?;
    let req = head.req;
    // The handshake's own errors (426, 400) come before the socket's.
    let accept = check_websocket(req)?;
    let (vsn_param, params) = query_params(head.query);
    let vsn = match vsn_param.as_deref() {
        None => Vsn::V1,
        Some(v) => Vsn::from_requirement(v).ok_or_else(|| {
            HttpError::new(
                403,
                "Forbidden",
                format!("unsupported vsn {v:?}: this server speaks 1.0.0 and 2.0.0\n"),
            )
        })?,
    };
    let (offered_phoenix, auth_token) = auth_subprotocols(req)?;
    let protocol = offered_phoenix.then_some("phoenix");
    let connect = (!params.is_empty() || auth_token.is_some()).then_some(ConnectInfo {
        params,
        auth_token,
        ..Default::default()
    });
    let (response, deflate) = accept_websocket(req, &accept, protocol, config.deflate);
    let hook_headers = if config.hooks.connect {
        crate::hooks::connect_headers(req.headers)
    } else {
        Vec::new()
    };
    Ok(Upgrade {
        response,
        wire: Wire::Phoenix(vsn),
        deflate,
        open: Open {
            connect,
            hook_headers,
            check: false,
        },
    })
}

/// Whether the client offered the `phoenix` subprotocol, and the token
/// phoenix.js's `authToken` subprotocol carries.
fn auth_subprotocols(req: &httparse::Request<'_, '_>) -> Result<(bool, Option<String>), HttpError> {
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
    Ok((offered_phoenix, auth_token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::http::{handle, Action};
    use crate::engine::Protocol;
    use crate::protocol::phoenix::longpoll::http::LongPoll;
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

    pub(crate) fn ws(target: &str, extra: &str) -> String {
        format!(
            "GET {target} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n{KEY}{extra}\r\n"
        )
    }

    fn upgrade_of(req: &str) -> Upgrade<Open> {
        match h(req.as_bytes(), &cfg()) {
            (n, Action::Upgrade(u)) if n == req.len() => *u,
            (_, other) => panic!("expected an upgrade, got {other:?}"),
        }
    }

    fn error_of(req: &str) -> HttpError {
        match h(req.as_bytes(), &cfg()) {
            (_, Action::Error(e)) => e,
            (_, other) => panic!("expected an error, got {other:?}"),
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
        match h(req.as_bytes(), &off) {
            (_, Action::Upgrade(u)) => {
                assert_eq!(u.deflate, 0);
                assert!(!String::from_utf8(u.response)
                    .unwrap()
                    .contains("Extensions"));
            }
            (_, other) => panic!("expected an upgrade, got {other:?}"),
        }
    }

    #[test]
    fn vsn_picks_the_serializer() {
        assert_eq!(
            upgrade_of(&ws("/socket/websocket", "")).wire,
            Wire::Phoenix(Vsn::V1)
        );
        assert_eq!(
            upgrade_of(&ws("/socket/websocket?vsn=2.0.0", "")).wire,
            Wire::Phoenix(Vsn::V2)
        );
        assert_eq!(
            upgrade_of(&ws("/socket/websocket?vsn=1.0.0", "")).wire,
            Wire::Phoenix(Vsn::V1)
        );
        let e = error_of(&ws("/socket/websocket?vsn=3.0.0", ""));
        assert_eq!(e.status, 403);
        assert!(e.body.contains("3.0.0"), "{}", e.body);
    }

    #[test]
    fn a_repeated_param_is_its_last_value_as_plug() {
        let u = upgrade_of(&ws(
            "/socket/websocket?token=first&vsn=1.0.0&token=last&vsn=2.0.0",
            "",
        ));
        assert_eq!(u.wire, Wire::Phoenix(Vsn::V2));
        assert_eq!(u.open.connect.expect("params").param("token"), Some("last"));
    }

    #[test]
    fn params_are_decoded_without_vsn() {
        let u = upgrade_of(&ws(
            "/socket/websocket?token=a%20b&vsn=2.0.0&user=%C3%A9&x=",
            "",
        ));
        let c = u.open.connect.expect("params");
        assert_eq!(c.param("token"), Some("a b"));
        assert_eq!(c.param("user"), Some("é"));
        assert_eq!(c.param("x"), Some(""));
        assert_eq!(c.param("vsn"), None);
        assert!(upgrade_of(&ws("/socket/websocket?vsn=2.0.0", ""))
            .open
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
        assert_eq!(u.open.connect.unwrap().auth_token.as_deref(), Some("1234"));
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
            assert_eq!(u.open.connect.unwrap().auth_token.as_deref(), Some("??>"));
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
        assert!(matches!(h(req.as_bytes(), &off), (_, Action::Upgrade(_))));
    }
}
