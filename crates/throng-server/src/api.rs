//! The server API: what an app's backend (Rails, Django, Node, Phoenix)
//! calls to publish to topics and manage users, on its own listener
//! (`--api-bind`, 127.0.0.1:4001 by default), never on the public port.
//!
//! - `POST /api/broadcast` `{topic, event, payload}`: a broadcast to every
//!   subscriber of the topic on every node (`Endpoint::broadcast`).
//! - `POST /api/disconnect` `{user, revoke?}`: closes every socket of the
//!   user on every node with 1001 (`Endpoint::disconnect`); with `revoke`,
//!   the user's tokens signed until now plus the 60 s clock-skew allowance
//!   (`auth::CLOCK_SKEW`) are refused from then on.
//! - `GET /api/topics`: topics and their subscriber counts, cluster-wide.
//! - `GET /api/stats`: this node's and the cluster's counters.
//! - `GET /api/presence?topic=T`: the topic's presence cluster-wide, as
//!   `presence_state` JSON (`state`) and its distinct keys (`count`): this
//!   node's copy when it has subscribers of the topic, else read from the
//!   presence store (Redis keeps every node's presences), `Endpoint::presence`.
//! - `GET /api/history?topic=T&since=REF&limit=N`: a history topic's
//!   messages after a position (`crate::history::api`); `POST
//!   /api/broadcast` on such a topic answers the message's `ref` too.
//! - `GET /metrics`: this node's Prometheus text (no key needed).
//! - `GET /healthz`, `GET /readyz`: liveness and readiness, as on the
//!   public port (`crate::health`; no key needed).
//! - `GET /dashboard`: the live dashboard page; `GET /api/dashboard`: its
//!   figures, a sample a second (`crate::dashboard`).
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
//!
//! A drain's end stops it gracefully ([`Api::stop`], from `Server::wait`):
//! it accepts no more connections, closes the idle ones, and lets each
//! request in progress finish and get its answer (`Connection: close`),
//! for up to [`STOP_WAIT`], before the process exits. Without that, a
//! `POST /api/broadcast` the node had already published got no answer when
//! the process exited, and a backend that retried it elsewhere (the right
//! thing on a connection error) published it twice. So a request that gets
//! a connection error at a drain was not acted upon, and is safe to retry.
//!
//! Bounded as the public listener is: at most `--max-api-connections` open
//! (a new one past it gets 503), a request's head within `--api-timeout`
//! (hyper's header-read timeout, which needs the timer given here), its
//! body within `--api-timeout` too. The key is checked before any body is
//! read, so a wrong key gets 401 at once whatever it sends, and a declared
//! `Content-Length` over [`MAX_BODY`] gets 413 at once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use subtle::ConstantTimeEq;
use throng_protocol::OwnedPayload;

pub use crate::api_error::ApiError;
use crate::node::Endpoint;

/// The largest request body accepted.
pub const MAX_BODY: usize = 1 << 20;

#[derive(Clone)]
struct Api {
    endpoint: Endpoint,
    key: Option<String>,
    /// `--api-timeout`: for a request's body.
    timeout: Duration,
    dashboard: Arc<crate::dashboard::Dashboard>,
    /// Turns true when the API stops: streams (the dashboard's) end then,
    /// so a stop waits for no open stream.
    stopped: tokio::sync::watch::Receiver<bool>,
}

impl Api {
    fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        self.endpoint.node().api.requests.fetch_add(1, Relaxed);
        let Some(key) = &self.key else {
            return Ok(());
        };
        let mut sent = headers.get_all("x-api-key").iter();
        let first = sent.next().map(|v| v.as_bytes()).unwrap_or_default();
        // Two keys: which one counts would differ between proxies and us.
        let one = sent.next().is_none();
        if one && bool::from(first.ct_eq(key.as_bytes())) {
            Ok(())
        } else {
            self.endpoint.node().api.refusals.fetch_add(1, Relaxed);
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing, repeated or wrong X-API-Key: send the key given to --api-key once",
            ))
        }
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!("the body is over {MAX_BODY} bytes"),
    )
}

/// The body, read only now (after the key was checked), within
/// `--api-timeout`; or the 413 (over [`MAX_BODY`], at once when the
/// `Content-Length` says so), 408 or 400 that says why not.
async fn bytes_of(api: &Api, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        // Answered at once. What the client still sends of the body is read
        // and thrown away (for at most --api-timeout): a connection closed
        // with unread input is reset by the kernel, and a client still
        // sending its body would see the reset instead of this 413.
        let limit = api.timeout;
        tokio::spawn(async move {
            use http_body_util::BodyExt;
            let mut body = body;
            let drain = async { while let Some(Ok(_)) = body.frame().await {} };
            let _ = tokio::time::timeout(limit, drain).await;
        });
        return Err(too_large());
    }
    let read = axum::body::to_bytes(body, MAX_BODY);
    match tokio::time::timeout(api.timeout, read).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let too_big = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_big {
                Err(too_large())
            } else {
                Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_body",
                    e.to_string(),
                ))
            }
        }
        Err(_) => {
            api.endpoint.node().api.timeouts.fetch_add(1, Relaxed);
            Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!(
                    "the body did not arrive within {} s (--api-timeout)",
                    api.timeout.as_secs()
                ),
            ))
        }
    }
}

/// A JSON body as `T`, or the 400 that says why not.
fn body<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_json", e.to_string()))
}

pub(crate) fn topic_ok(topic: &str) -> Result<(), ApiError> {
    if let Some(why) = crate::limits::topic_error(topic) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_topic",
            format!("{why}: send a topic as clients join it, e.g. rooms:lobby"),
        ));
    }
    if crate::auth::is_reserved(topic) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_topic",
            format!("topic {topic:?} is empty or reserved (users_socket:*, throng:*, and pusher/* for Pusher channels: trigger those through the Pusher HTTP API)"),
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

/// A broadcast the API takes: its topic, event and payload.
#[derive(Debug)]
pub(crate) struct BroadcastReq {
    pub topic: String,
    pub event: String,
    pub payload: OwnedPayload,
}

/// Reads and checks a `POST /api/broadcast` body (JSON nesting within
/// `depth`), or the 400 that says why not.
pub(crate) fn broadcast_request(bytes: &[u8], depth: usize) -> Result<BroadcastReq, ApiError> {
    let req: BroadcastIn<'_> = body(bytes)?;
    topic_ok(&req.topic)?;
    if req.event.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_event",
            "event is empty",
        ));
    }
    if req.event.starts_with("phx_") {
        // phoenix.js treats phx_reply, phx_close, phx_error as channel control.
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_event",
            format!(
                "event {:?} starts with phx_, which Phoenix clients read as channel control: pick another name",
                req.event
            ),
        ));
    }
    if req
        .payload
        .is_some_and(|raw| crate::limits::json_too_deep(raw.get().as_bytes(), depth))
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "too_deep",
            format!(
                "the payload nests arrays and objects more than {depth} deep (--max-json-depth); receivers such as serde_json stop at 128"
            ),
        ));
    }
    let payload = match req.payload {
        Some(raw) => OwnedPayload::Json(raw.get().to_string()),
        None => OwnedPayload::empty(),
    };
    Ok(BroadcastReq {
        topic: req.topic,
        event: req.event,
        payload,
    })
}

async fn broadcast(
    State(api): State<Api>,
    headers: HeaderMap,
    raw: Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    api.check(&headers)?;
    let bytes = bytes_of(&api, &headers, raw).await?;
    let depth = api.endpoint.node().config.limits.max_json_depth;
    let req = broadcast_request(&bytes, depth)?;
    let payload = req.payload;
    match api.endpoint.publish(&req.topic, &req.event, payload).await {
        // A topic with history: the message's position (`crate::history`).
        Ok(Some(msg_ref)) => Ok(Json(json!({"ok": true, "ref": msg_ref}))),
        Ok(None) => Ok(Json(json!({"ok": true}))),
        // History in Redis, and Redis did not give it a position: not sent.
        Err(why) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "history_unavailable",
            format!(
                "the message was not sent: topic {:?} keeps history in Redis, which did not \
                 give it a position ({why}); retry once Redis is back \
                 (throng_history_redis_connected 1 in /metrics)",
                req.topic
            ),
        )),
    }
}

#[derive(Deserialize, Debug)]
pub(crate) struct DisconnectIn {
    pub user: String,
    #[serde(default)]
    pub revoke: bool,
}

/// Reads and checks a `POST /api/disconnect` body, or the 400 that says why not.
pub(crate) fn disconnect_request(bytes: &[u8]) -> Result<DisconnectIn, ApiError> {
    let req: DisconnectIn = body(bytes)?;
    if req.user.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_user",
            "user is empty",
        ));
    }
    Ok(req)
}

async fn disconnect(
    State(api): State<Api>,
    headers: HeaderMap,
    raw: Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    api.check(&headers)?;
    let bytes = bytes_of(&api, &headers, raw).await?;
    let req = disconnect_request(&bytes)?;
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
        "cluster": crate::control::cluster(&reports),
    })))
}

#[derive(Deserialize)]
pub(crate) struct PresenceQuery {
    #[serde(default)]
    pub topic: Option<String>,
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

/// `GET /api/history?topic=T&since=REF&limit=N` (`crate::history::api`).
async fn history(
    State(api): State<Api>,
    headers: HeaderMap,
    query: Result<
        Query<crate::history::api::HistoryQuery>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Result<Json<serde_json::Value>, ApiError> {
    api.check(&headers)?;
    let Query(q) =
        query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", e.body_text()))?;
    let Some(topic) = q.topic.as_deref() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_topic",
            "the topic query parameter is missing (GET /api/history?topic=feed:1&since=REF)",
        ));
    };
    topic_ok(topic)?;
    let status = |code| match code {
        "no_history" => StatusCode::NOT_FOUND,
        "history_unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    };
    crate::history::api::answer(&api.endpoint, topic, &q)
        .await
        .map(Json)
        .map_err(|e| ApiError::new(status(e.code), e.code, e.message))
}

async fn metrics(State(api): State<Api>) -> Response {
    let body = crate::scrape::render(api.endpoint.node());
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

async fn healthz() -> Response {
    (
        [
            ("content-type", "application/json"),
            ("cache-control", "no-store"),
        ],
        crate::health::ALIVE,
    )
        .into_response()
}

async fn readyz(State(api): State<Api>) -> Response {
    let (status, body) = crate::health::readyz(api.endpoint.node());
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    (
        status,
        [
            ("content-type", "application/json"),
            ("cache-control", "no-store"),
        ],
        body,
    )
        .into_response()
}

/// `GET /api/dashboard`: the dashboard's live figures (`crate::dashboard`).
async fn dashboard_stream(
    State(api): State<Api>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    api.check(&headers)?;
    api.dashboard.open(&api.endpoint, api.stopped.clone())
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
    ("GET", "/api/history?topic=T&since=REF&limit=N", "a history topic's messages after a position, and whether none was lost"),
    ("GET", "/metrics", "this node's Prometheus text (no key needed)"),
    ("GET", "/healthz", "200 while the process is alive (no key needed)"),
    ("GET", "/readyz", "200 when this node should get new clients; 503 {reason} while starting, draining or cut off from Redis (no key needed)"),
    ("GET", "/dashboard", "the live dashboard page, for a browser (its figures need the key)"),
    ("GET", "/api/dashboard", "the dashboard's figures, a sample a second (Server-Sent Events)"),
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
        .route("/api/history", get(history))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/dashboard", get(dashboard_stream))
        .route(
            "/dashboard",
            get(|| async { crate::dashboard::page("/dashboard") }),
        )
        .route(
            "/dashboard/app.js",
            get(|| async { crate::dashboard::page("/dashboard/app.js") }),
        )
        .route(
            "/dashboard/app.css",
            get(|| async { crate::dashboard::page("/dashboard/app.css") }),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::map_response(end_with_newline))
        .with_state(api)
}

/// How long a drain's end waits for the server API's requests in progress
/// (and streams, such as the dashboard's) before the process exits: within
/// the margin the supervisor of `--workers` gives a draining worker after
/// its sockets' close linger.
pub const STOP_WAIT: Duration = Duration::from_secs(3);

/// The running server API, for stopping it at a drain's end.
pub(crate) struct Running {
    stop: tokio::sync::watch::Sender<bool>,
    thread: JoinHandle<()>,
}

impl Running {
    /// Stops accepting and closes idle connections; the requests in
    /// progress get up to [`STOP_WAIT`] from now to be answered.
    pub(crate) fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Returns once the API has stopped (after [`Running::stop`]).
    pub(crate) fn join(self) {
        let _ = self.thread.join();
    }
}

/// Serves the API on `listener` (bound by `Server::start`, so a taken port
/// fails it: `bind::api_listener`) on its own thread; returns its address.
pub(crate) fn start(
    listener: std::net::TcpListener,
    endpoint: Endpoint,
    key: Option<String>,
    tls: Option<Arc<crate::tls::Tls>>,
) -> std::io::Result<(SocketAddr, Running)> {
    let bound = listener.local_addr()?;
    if key.is_none() && !bound.ip().is_loopback() {
        tracing::warn!(%bound, "the server API listens beyond loopback with no --api-key");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
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
                let limits = endpoint.node().config.limits.clone();
                let node = endpoint.node().clone();
                let app = router(Api {
                    endpoint,
                    key,
                    timeout: limits.api_timeout,
                    dashboard: Default::default(),
                    stopped: stopped.clone(),
                });
                let tls = tls.map(|t| tokio_rustls::TlsAcceptor::from(t.config.clone()));
                serve(listener, app, &limits, node, tls, stopped).await;
            })
        })?;
    Ok((bound, Running { stop, thread }))
}

/// The answer to a connection past `--max-api-connections`.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: 25\r\n\r\ntoo many API connections\n";

/// Accepts API connections, at most `--max-api-connections` at once, and
/// serves each with hyper: a head within `--api-timeout` (hyper's
/// header-read timeout, on with the timer given here; `axum::serve` gives
/// none, so it was silently off), keep-alive connections waiting for their
/// next head bounded the same way. Once `stopped` turns true: no more
/// accepts, and each connection shuts down gracefully (hyper answers the
/// request in progress with `Connection: close`, closes an idle one), for
/// up to [`STOP_WAIT`].
async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: &crate::limits::Limits,
    node: Arc<crate::node::Node>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let max = limits.max_api_connections.min(u32::MAX as usize);
    let open = Arc::new(tokio::sync::Semaphore::new(max));
    let head = limits.api_timeout;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop_asked(&mut stopped) => break,
        };
        let (stream, _) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors, most likely: wait for some to close.
                tracing::warn!("server API accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            node.api.busy.fetch_add(1, Relaxed);
            let _ = stream.try_write(BUSY);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let node = node.clone();
        let tls = tls.clone();
        let stopped = stopped.clone();
        tokio::spawn(async move {
            let builder = {
                let mut b = hyper::server::conn::http1::Builder::new();
                b.timer(TokioTimer::new()).header_read_timeout(head);
                b
            };
            let served = match tls {
                None => {
                    until_stopped(
                        builder.serve_connection(TokioIo::new(stream), service),
                        stopped,
                    )
                    .await
                }
                Some(tls) => {
                    // The handshake is bounded as a head is.
                    match tokio::time::timeout(head, tls.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let conn = builder.serve_connection(TokioIo::new(stream), service);
                            until_stopped(conn, stopped).await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!("server API TLS handshake: {e}");
                            return;
                        }
                        Err(_) => {
                            node.api.timeouts.fetch_add(1, Relaxed);
                            return;
                        }
                    }
                }
            };
            if let Err(e) = served {
                if e.is_timeout() {
                    node.api.timeouts.fetch_add(1, Relaxed);
                }
                tracing::debug!("server API connection: {e}");
            }
            drop(permit);
        });
    }
    // The listener closes here: the kernel sends new connections to the
    // other processes on the port (`--workers`), or refuses them.
    drop(listener);
    let busy = max - open.available_permits();
    if busy > 0 {
        tracing::info!(
            connections = busy,
            "server API: closing its {busy} open connections once their requests in progress are answered (up to {STOP_WAIT:?})"
        );
        if tokio::time::timeout(STOP_WAIT, open.acquire_many(max as u32))
            .await
            .is_err()
        {
            let left = max - open.available_permits();
            tracing::warn!(
                connections = left,
                "server API: {left} connections still busy after {STOP_WAIT:?}; closing them"
            );
        }
    }
}

/// Resolves once the API is told to stop; never when its `Server` was
/// dropped without a drain (the API then serves until the process ends).
async fn stop_asked(stopped: &mut tokio::sync::watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, not held across awaits.
    if stopped.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Serves one API connection; once `stopped` turns true, shuts it down
/// gracefully: the request in progress is answered (with `Connection:
/// close`), an idle connection closes at once.
async fn until_stopped<I, S, B>(
    conn: hyper::server::conn::http1::Connection<I, S>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> Result<(), hyper::Error>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => served,
        _ = stop_asked(&mut stopped) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
