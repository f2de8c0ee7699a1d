//! The server API calls a soak makes while its clients churn, as an app's
//! backend would: broadcasts to rooms (five a second) and to every history
//! topic (twice a second each, round robin), a user's disconnect, a topic's
//! presence and the node's stats (one a second each), and the topic list
//! and a history read (one every five seconds), spread over the API of
//! every server worker. Each route's answers are counted (a status other
//! than 200 is an error).
//!
//! One thread with a tokio runtime of its own, one keep-alive connection
//! per API (hyper), one request at a time.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::Serialize;

use super::{user, Topics, API_EVENT};

/// One tick of the caller: broadcasts go every tick.
const TICK: Duration = Duration::from_millis(200);

/// A route's answers.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
pub struct RouteCount {
    pub ok: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// The API calls' counts, by route (`POST /api/broadcast`, ...).
pub type Counts = BTreeMap<String, RouteCount>;

/// The caller's thread, until [`Caller::stop`].
pub struct Caller {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Counts>,
}

impl Caller {
    /// Starts calling `apis` about a population of `population` spread
    /// over `topics`.
    pub fn start(
        apis: Vec<SocketAddr>,
        topics: Topics,
        population: u64,
        seed: u64,
    ) -> std::io::Result<Caller> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("soak-api".into())
            .spawn(move || rt.block_on(calls(apis, topics, population, seed, flag)))?;
        Ok(Caller { stop, thread })
    }

    /// Stops the calls and returns their counts.
    pub fn stop(self) -> Counts {
        self.stop.store(true, Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// One keep-alive connection to an API.
struct Api {
    addr: SocketAddr,
    send: Option<SendRequest<Full<Bytes>>>,
}

impl Api {
    /// `method path` with `body` (JSON); the answer's status and text.
    async fn call(&mut self, method: &str, path: &str, body: String) -> Result<String, String> {
        if self.send.is_none() {
            let stream = tokio::net::TcpStream::connect(self.addr)
                .await
                .map_err(|e| e.to_string())?;
            let _ = stream.set_nodelay(true);
            let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            self.send = Some(send);
        }
        let send = self.send.as_mut().expect("connected above");
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.addr.to_string())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let answer = async {
            let res = send.send_request(req).await.map_err(|e| e.to_string())?;
            let status = res.status();
            let text = res.into_body().collect().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((status, text.to_bytes()))
        };
        let answered = tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .unwrap_or_else(|_| Err("no answer within 10 s".to_string()));
        if answered.is_err() {
            self.send = None;
        }
        let (status, text) = answered?;
        let text = String::from_utf8_lossy(&text).into_owned();
        if status != hyper::StatusCode::OK {
            return Err(format!("{status}: {}", text.trim()));
        }
        Ok(text)
    }
}

/// The calls, each tick, until `stop`.
async fn calls(
    apis: Vec<SocketAddr>,
    topics: Topics,
    population: u64,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> Counts {
    let mut apis: Vec<Api> = apis
        .into_iter()
        .map(|addr| Api { addr, send: None })
        .collect();
    let mut counts = Counts::new();
    if apis.is_empty() {
        return counts;
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut tick = tokio::time::interval(TICK);
    let mut n = 0u64;
    // History topics a tick, for twice a second each.
    let per_tick = (f64::from(topics.history) * 2.0 * TICK.as_secs_f64()).ceil() as u32;
    let mut next_history = 0u32;
    while !stop.load(Relaxed) {
        tick.tick().await;
        n += 1;
        let mut todo = vec![broadcast(Topics::room(rng.u32(0..topics.rooms)), n)];
        for _ in 0..per_tick {
            todo.push(broadcast(Topics::history(next_history), n));
            next_history = (next_history + 1) % topics.history.max(1);
        }
        if n.is_multiple_of(5) {
            let u = user(rng.u64(0..population.max(1)));
            todo.push((
                "POST",
                "/api/disconnect".into(),
                format!("{{\"user\":\"{u}\"}}"),
            ));
            let q = Topics::presence(rng.u32(0..topics.presence));
            todo.push(("GET", format!("/api/presence?topic={q}"), String::new()));
            todo.push(("GET", "/api/stats".into(), String::new()));
        }
        if n.is_multiple_of(25) {
            todo.push(("GET", "/api/topics".into(), String::new()));
            let h = Topics::history(rng.u32(0..topics.history));
            todo.push((
                "GET",
                format!("/api/history?topic={h}&limit=10"),
                String::new(),
            ));
        }
        for (method, path, body) in todo {
            let k = rng.usize(0..apis.len());
            let route = format!("{method} {}", path.split('?').next().unwrap_or(&path));
            let c = counts.entry(route).or_default();
            match apis[k].call(method, &path, body).await {
                Ok(_) => c.ok += 1,
                Err(e) => {
                    c.errors += 1;
                    c.first_error
                        .get_or_insert_with(|| format!("{method} {path}: {e}"));
                }
            }
        }
    }
    counts
}

/// A broadcast of [`API_EVENT`] to `topic`.
fn broadcast(topic: String, n: u64) -> (&'static str, String, String) {
    let body = format!(
        "{{\"topic\":\"{topic}\",\"event\":\"{API_EVENT}\",\"payload\":{{\"n\":{n},\"body\":\"from the app's backend\"}}}}"
    );
    ("POST", "/api/broadcast".into(), body)
}
