//! Target `http_request`: a request head (and a long-poll body) at the
//! front of a connection's bytes, through `http::handle` as the public
//! listener reads it, under a configuration byte 0 picks (echo, long-poll,
//! origin policy, deflate, the connect hook, the message bound).
//!
//! Asserts, beside no panic:
//! - "read more" only while the head (or a long-poll body) is incomplete
//!   and within its bound, having used nothing;
//! - a refusal uses every byte (the connection ends) and has the status
//!   its cause calls for: 400 for what httparse refuses, 431 past the head
//!   bound or the header count, 403 for an origin `check_origin` refuses,
//!   405 for a method or body outside the long-poll path, the status
//!   `handshake::check_request` gives a bad upgrade; the reason phrase is
//!   the status's, and the body a line of text;
//! - a page, an upgrade or a long-poll request uses at most the head bound
//!   (plus the body), and every shorter prefix of those bytes is
//!   "read more": a request split across reads is read as one;
//! - an upgrade's `101` is one our own client accepts
//!   (`handshake::parse_client_response` with the key's accept value), and
//!   permessage-deflate is in it exactly when agreed (and allowed);
//! - a long-poll body is within `--max-message-bytes`; its session token,
//!   if any, prints as the client sent it.

use std::sync::OnceLock;

use throng_protocol::handshake;

use crate::config::Config;
use crate::engine::http::{handle, Action, HttpError, MAX_REQUEST_HEAD};
use crate::engine::Protocol;
use crate::protocol::phoenix::longpoll::http::LongPoll;
use crate::protocol::phoenix::upgrade::{Open, LONGPOLL_PATH};
use crate::protocol::phoenix::Phoenix;

/// The configurations a run picks from (resolving one per input would
/// cost more than the input).
fn configs() -> &'static [Config] {
    static CONFIGS: OnceLock<Vec<Config>> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let base = Config::default();
        (0u8..16)
            .map(|c| Config {
                echo: c & 1 != 0,
                longpoll_window: (c & 2 == 0).then_some(std::time::Duration::from_secs(10)),
                check_origin: if c & 4 == 0 {
                    crate::auth::CheckOrigin::default()
                } else {
                    crate::auth::CheckOrigin::Off
                },
                deflate: c & 8 == 0,
                max_message_bytes: if c & 1 == 0 { 300 } else { 1 << 16 },
                hooks: crate::config::HooksConfig {
                    connect: c & 2 != 0,
                    ..base.hooks.clone()
                },
                public_metrics: c & 4 != 0,
                ..base.clone()
            })
            .collect()
    })
}

/// A request as the public port reads it: the engine's routes, then
/// Phoenix's.
fn read(data: &[u8], config: &Config) -> (usize, Action<Open, LongPoll>) {
    handle(data, config, |head, config| Phoenix.route(head, config))
}

/// Feeds `data` to the request reader; panics if an invariant breaks.
pub fn http_request(data: &[u8]) {
    let Some((&conf, data)) = data.split_first() else {
        return;
    };
    let config = &configs()[(conf & 15) as usize];
    let (used, action) = read(data, config);
    match action {
        Action::Incomplete => {
            assert_eq!(used, 0, "read more, having used {used} bytes");
            let bound = MAX_REQUEST_HEAD + config.max_message_bytes;
            assert!(
                data.len() <= bound,
                "{} bytes and still reading",
                data.len()
            );
            return;
        }
        Action::Error(e) => {
            assert_eq!(used, data.len(), "a refusal ends the connection");
            check_refusal(data, config, &e);
            return;
        }
        Action::Page { head_only, .. } => {
            assert!(used <= MAX_REQUEST_HEAD);
            let mut headers = [httparse::EMPTY_HEADER; 48];
            let mut req = httparse::Request::new(&mut headers);
            assert!(matches!(req.parse(data), Ok(httparse::Status::Complete(n)) if n == used));
            assert_eq!(head_only, req.method == Some("HEAD"), "{:?}", req.method);
        }
        Action::Upgrade(u) => {
            assert!(used <= MAX_REQUEST_HEAD);
            if !u.open.check {
                check_upgrade(&data[..used], config, &u.response, u.deflate);
            }
        }
        Action::Echo(response, deflate) => {
            assert!(used <= MAX_REQUEST_HEAD);
            check_upgrade(&data[..used], config, &response, deflate);
        }
        Action::Request(lp) => check_longpoll(data, used, config, &lp),
    }
    // A request split across reads is read as one: each prefix waits.
    for cut in [used - 1, used / 2, used.saturating_sub(2)] {
        let (n, action) = read(&data[..cut], config);
        assert!(
            n == 0 && matches!(action, Action::Incomplete),
            "{cut} of the {used} bytes of a request: {action:?}"
        );
    }
}

/// The status a refusal should have, from what httparse and the handshake
/// make of the same bytes.
fn check_refusal(data: &[u8], config: &Config, e: &HttpError) {
    let phrase = match e.status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Payload Too Large",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        s => panic!("refused with {s}"),
    };
    assert_eq!(e.reason, phrase);
    assert!(e.body.ends_with('\n') && !e.body.trim().is_empty());
    let mut headers = [httparse::EMPTY_HEADER; 48];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(data) {
        Err(httparse::Error::TooManyHeaders) => return assert_eq!(e.status, 431),
        Err(_) => return assert_eq!(e.status, 400),
        Ok(httparse::Status::Partial) => return assert_eq!(e.status, 431),
        Ok(httparse::Status::Complete(n)) => n,
    };
    if head_len > MAX_REQUEST_HEAD {
        return assert_eq!(e.status, 431);
    }
    let target = req.path.unwrap_or("/");
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let ws = path == "/socket/websocket" || (config.echo && path == "/echo");
    if e.origin_refused {
        assert_eq!(e.status, 403);
        assert!(
            ["/socket/websocket", "/socket/check"].contains(&path),
            "{path}"
        );
    } else if ws {
        match handshake::check_request(&req) {
            Err(h) => assert_eq!(e.status, h.status(), "{h}"),
            // A good handshake is refused only for its vsn (403) or its
            // authToken subprotocol (400).
            Ok(_) => assert!(e.status == 403 || e.status == 400, "{e:?}"),
        }
    } else if path == "/socket/check" {
        assert!([403, 405].contains(&e.status), "{e:?}");
    } else if path == LONGPOLL_PATH && config.longpoll_window.is_some() {
        assert!([400, 411, 413].contains(&e.status), "{e:?}");
    } else {
        assert_eq!(e.status, 405, "{e:?}");
    }
}

fn check_upgrade(head: &[u8], config: &Config, response: &[u8], deflate: u8) {
    let mut headers = [httparse::EMPTY_HEADER; 48];
    let mut req = httparse::Request::new(&mut headers);
    assert!(matches!(req.parse(head), Ok(httparse::Status::Complete(_))));
    let accept = handshake::check_request(&req).expect("an upgrade passed the handshake");
    let got = handshake::parse_client_response(response, &accept);
    assert_eq!(got, Ok(Some(response.len())), "our client refuses the 101");
    let text = String::from_utf8_lossy(response);
    let offered = text.contains("Sec-WebSocket-Extensions: permessage-deflate");
    assert_eq!(offered, deflate != 0, "{text}");
    assert!(deflate == 0 || (config.deflate && (8..=15).contains(&deflate)));
}

fn check_longpoll(data: &[u8], used: usize, config: &Config, lp: &LongPoll) {
    assert!(used <= data.len());
    assert!(lp.body.len() <= config.max_message_bytes);
    assert!(used - lp.body.len() <= MAX_REQUEST_HEAD);
    assert_eq!(&data[used - lp.body.len()..used], &lp.body[..]);
    if let Some(t) = lp.token {
        let text = t.to_string();
        let mut headers = [httparse::EMPTY_HEADER; 48];
        let mut req = httparse::Request::new(&mut headers);
        let _ = req.parse(data);
        let query = req.path.and_then(|p| p.split_once('?')).map_or("", |q| q.1);
        let sent = form_urlencoded::parse(query.as_bytes())
            .any(|(k, v)| k == "token" && v.eq_ignore_ascii_case(&text));
        assert!(sent, "token {text} is none of the request's");
    }
}
