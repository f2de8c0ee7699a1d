//! Broadcasts triggered through a Pusher server's HTTP API: `POST
//! /apps/{id}/events?auth_key=..&auth_timestamp=..&auth_version=1.0&body_md5=..&auth_signature=..`
//! with `{"name","channel","data"}`, signed as the Pusher server SDKs sign
//! (`throng_protocol::pusher::api_auth::sign_query`), on one keep-alive
//! HTTP/1.1 connection to the server's own port.
//!
//! Why a thread: the agent's engine is one mio loop that must never wait,
//! and an HTTP request is answered only once the server has taken the
//! event, which may be after it has written the broadcast to every
//! subscriber this very agent is reading. So the engine renders the body
//! (stamped: the broadcast's clock starts there) and hands it over a
//! channel; this thread sends the requests one at a time, in order, and
//! counts what the server answered. A request the server refuses is a
//! broadcast lost, counted as an error of the run; there is no retry but
//! one on a fresh connection when the kept-alive one was closed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use throng_protocol::pusher::api_auth::sign_query;

/// How long one request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the trigger thread saw.
#[derive(Debug, Default)]
pub struct Triggered {
    /// Requests the API answered 2xx.
    pub ok: AtomicU64,
    /// Requests refused (another status) or lost (no answer).
    pub failed: AtomicU64,
    /// The first failure, for the agent's log.
    pub first_error: Mutex<Option<String>>,
}

/// Where and as whom the trigger thread sends.
#[derive(Clone, Debug)]
pub struct Api {
    pub target: SocketAddr,
    /// The Host header.
    pub host: String,
    pub app_id: String,
    pub key: String,
    pub secret: String,
}

/// The engine's handle on its trigger thread: dropping it ends the thread.
pub struct TriggerThread {
    tx: mpsc::Sender<Vec<u8>>,
    pub stats: Arc<Triggered>,
}

impl TriggerThread {
    /// Starts the thread for `api`.
    pub fn start(api: Api) -> std::io::Result<TriggerThread> {
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        let stats = Arc::new(Triggered::default());
        let seen = Arc::clone(&stats);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("pusher-trigger".into())
            .spawn(move || {
                let mut conn = Conn { api, send: None };
                while let Ok(body) = rx.recv() {
                    let result = rt.block_on(async {
                        tokio::time::timeout(REQUEST_TIMEOUT, conn.trigger(body))
                            .await
                            .unwrap_or_else(|_| Err("no answer within 10 s".into()))
                    });
                    match result {
                        Ok(()) => {
                            seen.ok.fetch_add(1, Relaxed);
                        }
                        Err(e) => {
                            seen.failed.fetch_add(1, Relaxed);
                            let mut first =
                                seen.first_error.lock().unwrap_or_else(|e| e.into_inner());
                            if first.is_none() {
                                tracing::warn!("a broadcast's trigger failed: {e}");
                                *first = Some(e);
                            }
                        }
                    }
                }
            })?;
        Ok(TriggerThread { tx, stats })
    }

    /// Queues one trigger's body (JSON), to be sent in order.
    pub fn send(&self, body: &[u8]) {
        if self.tx.send(body.to_vec()).is_err() {
            self.stats.failed.fetch_add(1, Relaxed);
        }
    }
}

/// The thread's one keep-alive connection.
struct Conn {
    api: Api,
    send: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    /// One trigger, on a fresh connection once more if the kept-alive one
    /// turns out closed before it answered.
    async fn trigger(&mut self, body: Vec<u8>) -> Result<(), String> {
        let body = Bytes::from(body);
        let reused = self.send.is_some();
        match self.once(body.clone()).await {
            Err(f) if reused && !f.answered => self.once(body).await.map_err(|f| f.why),
            r => r.map_err(|f| f.why),
        }
    }

    async fn once(&mut self, body: Bytes) -> Result<(), Failure> {
        let lost = |why: String| Failure {
            why,
            answered: false,
        };
        if self.send.as_ref().is_none_or(|s| s.is_closed()) {
            let stream = tokio::net::TcpStream::connect(self.api.target)
                .await
                .map_err(|e| lost(format!("connect to {}: {e}", self.api.target)))?;
            let _ = stream.set_nodelay(true);
            let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| lost(e.to_string()))?;
            tokio::spawn(conn);
            self.send = Some(send);
        }
        let path = format!("/apps/{}/events", self.api.app_id);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let query = sign_query(
            &self.api.key,
            self.api.secret.as_bytes(),
            "POST",
            &path,
            now,
            &[],
            Some(&body),
        );
        let req = hyper::Request::post(format!("{path}?{query}"))
            .header(hyper::header::HOST, &self.api.host)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| lost(e.to_string()))?;
        let send = self
            .send
            .as_mut()
            .ok_or_else(|| lost("no connection".into()))?;
        let res = match send.send_request(req).await {
            Ok(r) => r,
            Err(e) => {
                self.send = None;
                return Err(lost(format!("POST {path}: {e}")));
            }
        };
        let status = res.status();
        let text = res
            .into_body()
            .collect()
            .await
            .map_err(|e| lost(format!("POST {path}: the answer was cut: {e}")))?
            .to_bytes();
        if !status.is_success() {
            return Err(Failure {
                why: format!(
                    "POST {path}: {status}: {}",
                    String::from_utf8_lossy(&text).trim()
                ),
                answered: true,
            });
        }
        Ok(())
    }
}

/// A trigger that failed: why, and whether the server answered (a
/// refusal, not retried) or not (the connection was lost).
struct Failure {
    why: String,
    answered: bool,
}
