//! `GET /socket/check`: what a socket connecting with these params and
//! token would be told, without connecting. A browser cannot read the body
//! of a refused WebSocket upgrade (its 403 says why: a token expired, the
//! app backend's connect hook refused), so the chat page, after a connect
//! fails, asks here with the same params (and phoenix.js's `authToken` in
//! the `X-Phoenix-AuthToken` header, as the long-poll transport sends it;
//! a same-origin fetch carries the page's cookies, which a connect hook
//! reads). The transport runs the connect's checks (token, connect hook)
//! and answers what the upgrade would have got, `204 No Content` in place
//! of the `101`: a 403 with the reason, or a 503.
//!
//! It costs what a refused upgrade costs (one request, at most one hook
//! call), within the same bounds (connections per IP, hooks in flight).

use throng_protocol::{Vsn, Wire};

use super::upgrade::{check_origin, query_params, Open};
use crate::channel::ConnectInfo;
use crate::config::Config;
use crate::engine::http::{Head, Route};
use crate::engine::http::{HttpError, Upgrade};

/// The path.
pub(crate) const CHECK_PATH: &str = "/socket/check";

/// The route of a check: refused as an upgrade would be (its origin
/// first), else an [`Upgrade`] whose response is the `204`.
pub(super) fn route<R>(head: &Head<'_, '_>, config: &Config) -> Route<Open, R> {
    match check_origin(head, config)
        .and_then(|()| request(head.req, head.query, config.hooks.connect))
    {
        Ok(u) => Route::Upgrade(Box::new(u)),
        Err(e) => Route::Error(e),
    }
}

/// The answer of a check the connect would pass.
const WOULD_CONNECT: &[u8] =
    b"HTTP/1.1 204 No Content\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";

/// The check asked by `req` (GET or HEAD, no body), as an [`Upgrade`]
/// whose response is the `204`.
fn request(
    req: &httparse::Request<'_, '_>,
    query: &str,
    hook_headers: bool,
) -> Result<Upgrade<Open>, HttpError> {
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let method = req.method.unwrap_or("");
    let has_body = header("content-length").is_some_and(|v| v.trim_ascii() != b"0")
        || header("transfer-encoding").is_some();
    if has_body || (method != "GET" && method != "HEAD") {
        let mut e = HttpError::new(405, "Method Not Allowed", "only GET and HEAD are served\n");
        e.extra_headers = "Allow: GET, HEAD\r\n";
        return Err(e);
    }
    let (vsn_param, params) = query_params(query);
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
    let auth_token = header("x-phoenix-authtoken")
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_owned);
    let connect = (!params.is_empty() || auth_token.is_some()).then_some(ConnectInfo {
        params,
        auth_token,
        ..Default::default()
    });
    Ok(Upgrade {
        response: WOULD_CONNECT.to_vec(),
        wire: Wire::Phoenix(vsn),
        deflate: 0,
        open: Open {
            connect,
            hook_headers: if hook_headers {
                crate::hooks::connect_headers(req.headers)
            } else {
                Vec::new()
            },
            check: true,
        },
    })
}
