//! The server API: what an app's backend (Rails, Django, Node, Phoenix)
//! calls to publish to topics and manage users, on its own listener
//! (`--api-bind`, 127.0.0.1:4001 by default), never on the public port.
//!
//! - `POST /api/broadcast` `{topic, event, payload}`: a broadcast to every
//!   subscriber of the topic on every node (`Endpoint::broadcast`).
//! - `POST /api/disconnect` `{user, revoke?}`: closes every socket of the
//!   user on every node with 1001 (`Endpoint::disconnect`); with `revoke`,
//!   the user's tokens signed until now are refused from then on.
//! - `GET /api/topics`: topics and their subscriber counts, cluster-wide.
//! - `GET /api/stats`: this node's and the cluster's counters.
//! - `GET /api/presence?topic=T`: the topic's presence cluster-wide, as
//!   `presence_state` JSON (`state`) and its distinct keys (`count`): this
//!   node's copy when it has subscribers of the topic, else read from the
//!   presence store (Redis keeps every node's presences), `Endpoint::presence`.
//! - `GET /metrics`: this node's Prometheus text (no key needed).
//!
//! - `GET /`: these routes, as JSON.
//!
//! JSON in and out, each answer ending with a newline; errors (405 for a
//! wrong method and 404 for an unknown route included) are
//! `{"error":{"code","message"}}` with the HTTP status. Requests need the
//! key in `X-API-Key` when `--api-key` is set. Bodies over [`MAX_BODY`] get
//! 413; JSON that does not parse gets 400 with serde's reason.
//!
//! This is not the per-connection hot path, so it is axum on a small
//! current-thread tokio runtime in its own thread, not the shards' hand-
//! written HTTP.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::thread::JoinHandle;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use throng_protocol::OwnedPayload;

use crate::control::{NodeReport, StatsSummary};
use crate::node::Endpoint;

/// The largest request body accepted.
pub const MAX_BODY: usize = 1 << 20;

/// An error answer: status, a stable code, a message for people.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

#[derive(Clone)]
struct Api {
    endpoint: Endpoint,
    key: Option<String>,
}

impl Api {
    fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        self.endpoint.node().api_requests.fetch_add(1, Relaxed);
        let Some(key) = &self.key else {
            return Ok(());
        };
        let sent = headers
            .get("x-api-key")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if constant_time_eq(sent, key.as_bytes()) {
            Ok(())
        } else {
            self.endpoint.node().api_refusals.fetch_add(1, Relaxed);
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong X-API-Key",
            ))
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

type BodyBytes = Result<Bytes, axum::extract::rejection::BytesRejection>;

/// The body, or the 413 (over [`MAX_BODY`]) or 400 that says why not.
fn bytes_of(b: BodyBytes) -> Result<Bytes, ApiError> {
    b.map_err(|e| {
        let status = e.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "too_large"
        } else {
            "bad_body"
        };
        ApiError::new(
            status,
            code,
            format!("{} (at most {MAX_BODY} bytes)", e.body_text()),
        )
    })
}

/// A JSON body as `T`, or the 400 that says why not.
fn body<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_json", e.to_string()))
}

fn topic_ok(topic: &str) -> Result<(), ApiError> {
    if topic.is_empty() || crate::auth::is_reserved(topic) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_topic",
            format!("topic {topic:?} is empty or reserved (users_socket:*, throng:*)"),
        ));
    }
    Ok(())
}

#[derive(Deserialize)]
struct BroadcastIn<'a> {
    topic: String,
    event: String,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
}

async fn broadcast(
    State(api): State<Api>,
    headers: HeaderMap,
    bytes: BodyBytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    api.check(&headers)?;
    let bytes = bytes_of(bytes)?;
    let req: BroadcastIn<'_> = body(&bytes)?;
    topic_ok(&req.topic)?;
    if req.event.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_event",
            "event is empty",
        ));
    }
    let payload = match req.payload {
        Some(raw) => OwnedPayload::Json(raw.get().to_string()),
        None => OwnedPayload::empty(),
    };
    api.endpoint.broadcast(&req.topic, &req.event, payload);
    Ok(Json(json!({"ok": true})))
}

#[derive(Deserialize, Debug)]
struct DisconnectIn {
    user: String,
    #[serde(default)]
    revoke: bool,
}

async fn disconnect(
    State(api): State<Api>,
    headers: HeaderMap,
    bytes: BodyBytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    api.check(&headers)?;
    let bytes = bytes_of(bytes)?;
    let req: DisconnectIn = body(&bytes)?;
    if req.user.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_user",
            "user is empty",
        ));
    }
    api.endpoint.disconnect(&req.user, req.revoke);
    Ok(Json(json!({"ok": true, "revoked": req.revoke})))
}

async fn topics(
    State(api): State<Api>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    api.check(&headers)?;
    let reports = api.endpoint.gather().await;
    let mut topics: BTreeMap<String, u64> = BTreeMap::new();
    for r in &reports {
        for (t, n) in &r.topics {
            *topics.entry(t.clone()).or_default() += n;
        }
    }
    Ok(Json(json!({"nodes": reports.len(), "topics": topics})))
}

async fn stats(
    State(api): State<Api>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    api.check(&headers)?;
    let reports = api.endpoint.gather().await;
    let me = &api.endpoint.node().control.node_id;
    let this = reports.iter().find(|r| &r.node == me).cloned();
    Ok(Json(json!({
        "node": this,
        "cluster": cluster(&reports),
    })))
}

/// The sum of the nodes' counters.
fn cluster(reports: &[NodeReport]) -> serde_json::Value {
    let mut total = serde_json::Map::new();
    for r in reports {
        if let Ok(serde_json::Value::Object(stats)) =
            serde_json::to_value::<&StatsSummary>(&r.stats)
        {
            for (k, v) in stats {
                let n = v.as_u64().unwrap_or(0);
                let e = total.entry(k).or_insert(json!(0));
                *e = json!(e.as_u64().unwrap_or(0) + n);
            }
        }
    }
    let users: u64 = reports.iter().map(|r| r.users).sum();
    let topics: std::collections::BTreeSet<&String> =
        reports.iter().flat_map(|r| r.topics.keys()).collect();
    total.insert("nodes".into(), json!(reports.len()));
    total.insert("users".into(), json!(users));
    total.insert("topics".into(), json!(topics.len()));
    serde_json::Value::Object(total)
}

#[derive(Deserialize)]
struct PresenceQuery {
    #[serde(default)]
    topic: Option<String>,
}

async fn presence(
    State(api): State<Api>,
    headers: HeaderMap,
    query: Result<Query<PresenceQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    api.check(&headers)?;
    let Query(q) =
        query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", e.body_text()))?;
    let Some(topic) = q.topic else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_topic",
            "the topic query parameter is missing (GET /api/presence?topic=rooms:lobby)",
        ));
    };
    topic_ok(&topic)?;
    let view = api.endpoint.presence(&topic).await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "presence_unavailable",
            e.to_string(),
        )
    })?;
    // The state is JSON already (encoded once, possibly megabytes): it
    // goes into the body as it is, not through a value tree.
    let head = json!({"topic": topic, "count": view.count, "source": view.source.name()});
    let mut body = head.to_string();
    body.pop();
    body.push_str(",\"state\":");
    body.push_str(&view.state);
    body.push('}');
    Ok(([("content-type", "application/json")], body).into_response())
}

async fn metrics(State(api): State<Api>) -> Response {
    let body = crate::metrics::render(api.endpoint.node());
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such API route")
}

/// The routes, as `GET /` lists them: method, path, what it does.
const ROUTES: &[(&str, &str, &str)] = &[
    ("POST", "/api/broadcast", "{topic, event, payload}: a broadcast to every subscriber of the topic, on every node"),
    ("POST", "/api/disconnect", "{user, revoke?}: close every socket of the user on every node (1001); revoke refuses the tokens it holds now"),
    ("GET", "/api/topics", "topics and their subscriber counts, cluster-wide"),
    ("GET", "/api/stats", "this node's counters and the cluster's sums"),
    ("GET", "/api/presence?topic=T", "who is on a topic, cluster-wide (presence_state JSON)"),
    ("GET", "/metrics", "this node's Prometheus text (no key needed)"),
];

/// `GET /`: the routes, so a curl at the API's address shows what it has.
async fn index() -> Response {
    #[derive(serde::Serialize)]
    struct Route {
        method: &'static str,
        path: &'static str,
        does: &'static str,
    }
    #[derive(serde::Serialize)]
    struct Index {
        routes: Vec<Route>,
        key_header: &'static str,
    }
    let routes = ROUTES
        .iter()
        .map(|&(method, path, does)| Route { method, path, does })
        .collect();
    Json(Index {
        routes,
        key_header: "X-API-Key",
    })
    .into_response()
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route takes another method: GET / lists each route's",
    )
}

/// Every JSON answer ends with a newline, as a shell prompt after curl wants.
async fn end_with_newline(res: Response) -> Response {
    let json = res
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !json {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let mut bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => Vec::from(b),
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    if bytes.last() != Some(&b'\n') {
        bytes.push(b'\n');
    }
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// The routes.
fn router(api: Api) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/api/broadcast", post(broadcast))
        .route("/api/disconnect", post(disconnect))
        .route("/api/topics", get(topics))
        .route("/api/stats", get(stats))
        .route("/api/presence", get(presence))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::map_response(end_with_newline))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(api)
}

/// Serves the API on `listener` (bound by `Server::start`, so a taken port
/// fails it: `bind::api_listener`) on its own thread; returns its address.
pub(crate) fn start(
    listener: std::net::TcpListener,
    endpoint: Endpoint,
    key: Option<String>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let bound = listener.local_addr()?;
    if key.is_none() && !bound.ip().is_loopback() {
        tracing::warn!(%bound, "the server API listens beyond loopback with no --api-key");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let thread = std::thread::Builder::new()
        .name("throng-api".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("server API listener: {e}");
                        return;
                    }
                };
                let app = router(Api { endpoint, key });
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!("server API stopped: {e}");
                }
            })
        })?;
    Ok((bound, thread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"ab", b"abc"));
        assert!(!constant_time_eq(b"", b"abc"));
    }

    #[test]
    fn bad_json_says_why() {
        let e = body::<DisconnectIn>(b"{\"user\": 5}").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("invalid type"), "{}", e.message);
        assert!(topic_ok("users_socket:1").is_err());
        assert!(topic_ok("throng:control").is_err());
        assert!(topic_ok("rooms:lobby").is_ok());
    }
}
