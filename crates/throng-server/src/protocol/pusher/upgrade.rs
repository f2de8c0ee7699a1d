//! Pusher's route on the public port: `GET /app/{key}?protocol=7` upgrades
//! to a Pusher socket. A client whose key, URL or app is refused still gets
//! its upgrade, then `pusher:error` and a close with Pusher's code: pusher-js
//! reads codes from a WebSocket only, and a refused upgrade (an HTTP error)
//! is to it a network error it retries every second forever; 4001 (no such
//! app) and 4005-4008 (a bad URL) make it stop (pusher-js
//! src/core/connection/protocol/protocol.ts, `getCloseAction`).

use throng_protocol::pusher::connect::{self, APP_PATH};
use throng_protocol::pusher::error_code::ErrorCode;
use throng_protocol::Wire;

use super::apps::Apps;
use crate::config::Config;
use crate::engine::http::{accept_websocket, check_websocket, Head, Route, Upgrade};

/// What a Pusher upgrade carries to the shard that opens its socket.
#[derive(Debug)]
pub(crate) enum Open {
    /// The app's socket.
    App(u16),
    /// Refused once upgraded: Pusher's code and why.
    Refused(u16, String),
}

/// Pusher's route for a request on the public port, if it is for `/app/`.
pub(crate) fn route<R>(
    head: &Head<'_, '_>,
    config: &Config,
    apps: &Apps,
) -> Option<Route<Open, R>> {
    if !head.path.starts_with(APP_PATH) || apps.is_empty() {
        return None;
    }
    let accept = match check_websocket(head.req) {
        Ok(accept) => accept,
        Err(e) => return Some(Route::Error(e)),
    };
    let open = match connect::parse(head.path, head.query) {
        Err(e) => Open::Refused(e.code().code(), e.to_string()),
        Ok(c) => match apps.by_key(c.key) {
            Some(app) => Open::App(app),
            None => Open::Refused(
                ErrorCode::AppDoesNotExist.code(),
                format!(
                    "App key {} not in this cluster: connect with the key of a --pusher-app",
                    c.key
                ),
            ),
        },
    };
    let (response, deflate) = accept_websocket(head.req, &accept, None, config.deflate);
    Some(Route::Upgrade(Box::new(Upgrade {
        response,
        wire: Wire::Pusher,
        deflate,
        open,
    })))
}
