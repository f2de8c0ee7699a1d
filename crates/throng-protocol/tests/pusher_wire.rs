//! The Pusher wire layer against the official clients and SDKs, through two
//! files under `tests/pusher/`:
//! - `server_frames.json`: frames this crate encodes, byte for byte (this
//!   test; `THRONG_BLESS=1` rewrites them after a deliberate change), which
//!   `tests/pusher/wire_vectors.test.mjs` feeds to `pusher-js`'s own decoder
//!   and to a real `pusher-js` and Laravel Echo session, plus the close codes
//!   and a webhook the Node and Python SDKs validate.
//! - `vectors.json`: what the `pusher` Node and Python SDKs compute and send
//!   (channel and user signatures, every HTTP API request they sign, webhook
//!   signatures) and the frames `pusher-js` and Laravel Echo send, recorded
//!   by `tests/pusher/vectors.mjs` and re-checked against the live SDKs by
//!   the node test. This test checks that this crate accepts all of it and
//!   computes the same signatures.

use std::path::PathBuf;

use serde_json::{json, Value};
use throng_protocol::pusher::api_auth::{sign_query, SignedQuery};
use throng_protocol::pusher::channels::{channel_query, channels_query, users_query};
use throng_protocol::pusher::client::{self, ClientFrame};
use throng_protocol::pusher::error_code::{reconnect_after_close, Reconnect};
use throng_protocol::pusher::presence::{parse_channel_data, parse_user_data};
use throng_protocol::pusher::signature::{
    channel_auth, user_auth, verify_channel_auth, verify_user_auth, verify_webhook,
    webhook_signature,
};
use throng_protocol::pusher::trigger::{parse_batch, parse_events, Limits};
use throng_protocol::pusher::webhook::{self, WebhookEvent};
use throng_protocol::pusher::{server, ChannelType, Data};

fn file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/pusher")
        .join(name)
}

fn read(name: &str) -> Value {
    let path = file(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn bless() -> bool {
    std::env::var_os("THRONG_BLESS").is_some()
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key} in {v}"))
}

fn opt<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Encodes one recipe of `server_frames.json` with this crate's encoders.
fn encode(recipe: &Value) -> String {
    let a = &recipe["args"];
    let mut out = Vec::new();
    match s(recipe, "encode") {
        "connection_established" => server::connection_established(
            &mut out,
            s(a, "socket_id"),
            a["activity_timeout"].as_u64().unwrap() as u32,
        ),
        "error" => server::error(
            &mut out,
            a["code"].as_u64().map(|c| c as u16),
            s(a, "message"),
        ),
        "ping" => server::ping(&mut out),
        "pong" => server::pong(&mut out),
        "subscription_succeeded" => server::subscription_succeeded(&mut out, s(a, "channel")),
        "presence_subscription_succeeded" => {
            let members: Vec<(&str, Option<&str>)> = a["members"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| (m[0].as_str().unwrap(), m[1].as_str()))
                .collect();
            server::presence_subscription_succeeded(&mut out, s(a, "channel"), members)
        }
        "member_added" => server::member_added(
            &mut out,
            s(a, "channel"),
            s(a, "user_id"),
            opt(a, "user_info"),
        ),
        "member_removed" => server::member_removed(&mut out, s(a, "channel"), s(a, "user_id")),
        "subscription_error" => server::subscription_error(
            &mut out,
            s(a, "channel"),
            s(a, "type"),
            s(a, "error"),
            a["status"].as_u64().unwrap() as u16,
        ),
        "cache_miss" => server::cache_miss(&mut out, s(a, "channel")),
        "signin_success" => server::signin_success(&mut out, s(a, "user_data")),
        "event" => {
            let data = opt(a, "literal")
                .map(Data::Literal)
                .or(opt(a, "text").map(Data::Text));
            server::event(
                &mut out,
                s(a, "event"),
                s(a, "channel"),
                data,
                opt(a, "user_id"),
            )
        }
        other => panic!("no encoder {other}"),
    }
    String::from_utf8(out).unwrap()
}

/// `pusher-js`'s name for what it does after a close code.
fn action(code: u16) -> Value {
    match reconnect_after_close(code) {
        None => Value::Null,
        Some(Reconnect::WithTls) => json!("tls_only"),
        Some(Reconnect::Never) => json!("refused"),
        Some(Reconnect::AfterBackoff) => json!("backoff"),
        Some(Reconnect::Immediately) => json!("retry"),
    }
}

fn webhook_body(hook: &Value) -> String {
    let events: Vec<WebhookEvent<'_>> = hook["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let channel = s(e, "channel");
            match s(e, "name") {
                "channel_occupied" => WebhookEvent::ChannelOccupied { channel },
                "channel_vacated" => WebhookEvent::ChannelVacated { channel },
                "member_added" => WebhookEvent::MemberAdded {
                    channel,
                    user_id: s(e, "user_id"),
                },
                "member_removed" => WebhookEvent::MemberRemoved {
                    channel,
                    user_id: s(e, "user_id"),
                },
                "cache_miss" => WebhookEvent::CacheMiss { channel },
                "client_event" => WebhookEvent::ClientEvent {
                    channel,
                    event: s(e, "event"),
                    data: opt(e, "data").map(Data::Text),
                    socket_id: s(e, "socket_id"),
                    user_id: opt(e, "user_id"),
                },
                other => panic!("no webhook event {other}"),
            }
        })
        .collect();
    let mut out = Vec::new();
    webhook::encode(&mut out, hook["time_ms"].as_u64().unwrap(), &events);
    String::from_utf8(out).unwrap()
}

#[test]
fn server_frames_are_the_golden_ones() {
    let mut doc = read("server_frames.json");
    let mut changed = false;
    let mut set = |slot: &mut Value, now: Value| {
        if *slot != now {
            assert!(
                bless(),
                "{slot} changed to {now}: run with THRONG_BLESS=1 if meant"
            );
            *slot = now;
            changed = true;
        }
    };
    for f in doc["frames"].as_array_mut().unwrap() {
        let frame = encode(f);
        let decoded = server::decode(frame.as_bytes()).expect("a server frame decodes");
        assert_eq!(decoded.event, f["expect"]["event"].as_str().unwrap());
        set(&mut f["frame"], json!(frame));
    }
    for c in doc["close_codes"].as_array_mut().unwrap() {
        let code = c["code"].as_u64().unwrap() as u16;
        set(&mut c["action"], action(code));
    }
    let hook = &mut doc["webhook"];
    let body = webhook_body(hook);
    let parsed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(parsed["events"], hook["events"]);
    let sig = webhook_signature(s(hook, "secret").as_bytes(), body.as_bytes()).to_hex();
    set(&mut hook["body"], json!(body));
    set(&mut hook["signature"], json!(sig));
    if changed {
        let text = serde_json::to_string_pretty(&doc).unwrap() + "\n";
        std::fs::write(file("server_frames.json"), text).unwrap();
    }
}

fn vectors() -> Value {
    read("vectors.json")
}

#[test]
fn channel_and_user_signatures_match_the_sdks() {
    let v = vectors();
    let (key, secret) = (s(&v["app"], "key"), s(&v["app"], "secret").as_bytes());
    for (sdk, vs) in v["sdks"].as_object().unwrap() {
        for c in vs["channel_auth"].as_array().unwrap() {
            let (sid, ch, cd, auth) = (
                s(c, "socket_id"),
                s(c, "channel"),
                opt(c, "channel_data"),
                s(c, "auth"),
            );
            assert_eq!(channel_auth(key, secret, sid, ch, cd), auth, "{sdk}: {c}");
            assert_eq!(
                verify_channel_auth(key, secret, sid, ch, cd, auth),
                Ok(()),
                "{sdk}: {c}"
            );
            assert!(ChannelType::of(ch).unwrap().needs_auth(), "{ch}");
            if let Some(cd) = cd {
                parse_channel_data(cd).unwrap_or_else(|e| panic!("{sdk}: {cd}: {e}"));
            }
        }
        for u in vs["user_auth"].as_array().unwrap() {
            let (sid, data, auth) = (s(u, "socket_id"), s(u, "user_data"), s(u, "auth"));
            assert_eq!(user_auth(key, secret, sid, data), auth, "{sdk}: {u}");
            assert_eq!(
                verify_user_auth(key, secret, sid, data, auth),
                Ok(()),
                "{sdk}: {u}"
            );
            assert_eq!(parse_user_data(data).unwrap().id, s(u, "id"), "{sdk}: {u}");
        }
        for w in vs["webhooks"].as_array().unwrap() {
            let (body, sig) = (s(w, "body").as_bytes(), s(w, "signature"));
            assert!(verify_webhook(secret, body, sig), "{sdk}: {w}");
            assert_eq!(webhook_signature(secret, body).to_hex(), sig, "{sdk}: {w}");
        }
    }
}

/// Every HTTP API request the SDKs sent verifies, its body reads, and this
/// crate signs the same parameters with the same signature.
#[test]
fn sdk_requests_verify() {
    let v = vectors();
    let (key, secret) = (s(&v["app"], "key"), s(&v["app"], "secret").as_bytes());
    let ts = v["timestamp"].as_u64().unwrap();
    for (sdk, vs) in v["sdks"].as_object().unwrap() {
        for r in vs["requests"].as_array().unwrap() {
            let (method, path, query, body) =
                (s(r, "method"), s(r, "path"), s(r, "query"), s(r, "body"));
            let q = SignedQuery::parse(query).unwrap();
            assert_eq!(q.auth_key(), Ok(key));
            assert_eq!(q.verify(method, path, secret, ts), Ok(()), "{sdk}: {r}");
            assert_eq!(q.verify_body(body.as_bytes()), Ok(()), "{sdk}: {r}");
            assert!(q.verify(method, path, secret, ts + 600).is_err());
            assert!(q.verify(method, path, b"another secret", ts).is_err());
            let params: Vec<(String, String)> = form_pairs(query)
                .into_iter()
                .filter(|(k, _)| !k.starts_with("auth_") && k != "body_md5")
                .collect();
            let params: Vec<(&str, &str)> = params
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let body_opt = (!body.is_empty()).then_some(body.as_bytes());
            let ours = SignedQuery::parse(&sign_query(
                key, secret, method, path, ts, &params, body_opt,
            ))
            .unwrap()
            .get("auth_signature")
            .map(str::to_string);
            // The Python SDK signs body_md5 on GET requests too (an empty body).
            if q.get("body_md5").is_some() == body_opt.is_some() {
                assert_eq!(ours.as_deref(), q.get("auth_signature"), "{sdk}: {r}");
            }
            check_route(sdk, method, path, &q, body);
        }
    }
}

fn form_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The request reads as the route it is for. (The Python SDK 3.3.4 sends
/// `terminate_connections` without the `/apps/{id}` prefix: the app is the
/// one that owns `auth_key`.)
fn check_route(sdk: &str, method: &str, path: &str, q: &SignedQuery<'_>, body: &str) {
    let route = path
        .strip_prefix("/apps/3/")
        .or_else(|| path.strip_prefix('/').filter(|p| p.starts_with("users/")))
        .unwrap_or_else(|| panic!("{sdk}: {path}"));
    let limits = Limits::default();
    match (method, route.split('/').collect::<Vec<_>>().as_slice()) {
        ("POST", ["events"]) => {
            let t = parse_events(body.as_bytes(), &limits)
                .unwrap_or_else(|e| panic!("{sdk}: {body}: {e}"));
            assert!(!t.channels.is_empty());
        }
        ("POST", ["batch_events"]) => {
            let b = parse_batch(body.as_bytes(), &limits)
                .unwrap_or_else(|e| panic!("{sdk}: {body}: {e}"));
            assert!(!b.is_empty());
        }
        ("GET", ["channels"]) => {
            channels_query(q.get("filter_by_prefix"), q.get("info"))
                .unwrap_or_else(|e| panic!("{sdk}: {e}"));
        }
        ("GET", ["channels", channel]) => {
            channel_query(channel, q.get("info")).unwrap_or_else(|e| panic!("{sdk}: {e}"));
        }
        ("GET", ["channels", channel, "users"]) => {
            users_query(channel).unwrap_or_else(|e| panic!("{sdk}: {e}"));
        }
        ("POST", ["users", _, "terminate_connections"]) => {}
        other => panic!("{sdk}: no route {other:?}"),
    }
}

/// The frames `pusher-js` and Laravel Echo sent decode to what they mean.
#[test]
fn client_frames_from_pusher_js_and_echo_decode() {
    let v = vectors();
    for (client, frames) in v["clients"].as_object().unwrap() {
        for f in frames.as_array().unwrap() {
            let text = f.as_str().unwrap();
            let frame = client::decode(text.as_bytes(), 10 * 1024)
                .unwrap_or_else(|e| panic!("{client}: {text}: {e}"));
            let sent: Value = serde_json::from_str(text).unwrap();
            match frame {
                ClientFrame::Ping | ClientFrame::Pong => {}
                ClientFrame::Subscribe(sub) => {
                    assert_eq!(sub.channel, sent["data"]["channel"].as_str().unwrap());
                    assert_eq!(
                        sub.auth.is_some(),
                        ChannelType::of(&sub.channel).unwrap().needs_auth(),
                        "{text}"
                    );
                }
                ClientFrame::Unsubscribe { channel } => {
                    assert_eq!(channel, sent["data"]["channel"].as_str().unwrap())
                }
                ClientFrame::Signin { user_data, .. } => {
                    parse_user_data(&user_data).unwrap();
                }
                ClientFrame::ClientEvent(e) => {
                    assert!(
                        ChannelType::of(&e.channel).unwrap().allows_client_events(),
                        "{text}"
                    );
                    assert_eq!(
                        e.data.map(|d| serde_json::from_str::<Value>(d).unwrap()),
                        sent.get("data").cloned()
                    );
                }
            }
        }
    }
}
