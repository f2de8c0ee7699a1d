//! The storm's numbered messages, published through the server API
//! (`POST /api/broadcast`, event [`EVENT`], payload `{"n": N}`): on every
//! API given (several independent servers each get every message; a
//! cluster's one API reaches all its nodes), each (API, topic) on its own
//! keep-alive connection, one request at a time, so each topic's numbers
//! reach its history in order while topics go in parallel.
//!
//! Two shapes: [`burst`] (a count per topic, as fast as the API answers:
//! the throughput figure) and [`Steady`] (a rate for all topics together,
//! round robin, until stopped, finishing each topic at a number known in
//! advance).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use super::{topic, EVENT};

/// A publish the API did not take is retried this long, then counted
/// lost (the clients will count the gap: the bench's, not the server's).
const RETRY_FOR: Duration = Duration::from_secs(10);

/// What a publisher saw.
#[derive(Debug, Default)]
pub struct Published {
    /// Requests the API answered 200.
    pub ok: AtomicU64,
    /// Requests retried (an error answer or a lost connection).
    pub retried: AtomicU64,
    /// Messages given up on after [`RETRY_FOR`].
    pub lost: AtomicU64,
    pub first_error: Mutex<Option<String>>,
}

impl Published {
    fn error(&self, why: String) {
        self.first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why);
    }
}

/// One keep-alive connection to an API.
struct Api {
    addr: SocketAddr,
    send: Option<SendRequest<Full<Bytes>>>,
}

impl Api {
    fn new(addr: SocketAddr) -> Api {
        Api { addr, send: None }
    }

    /// Publishes `n` on `topic`, retrying for [`RETRY_FOR`] (a new
    /// connection after an error); `false`: given up.
    async fn publish(&mut self, topic: &str, n: u64, stats: &Published) -> bool {
        let body = Bytes::from(
            serde_json::json!({"topic": topic, "event": EVENT, "payload": {"n": n}}).to_string(),
        );
        let deadline = Instant::now() + RETRY_FOR;
        loop {
            match self.once(body.clone()).await {
                Ok(()) => {
                    stats.ok.fetch_add(1, Relaxed);
                    return true;
                }
                Err(e) => {
                    self.send = None;
                    stats.error(format!("POST http://{}/api/broadcast: {e}", self.addr));
                    if Instant::now() > deadline {
                        stats.lost.fetch_add(1, Relaxed);
                        return false;
                    }
                    stats.retried.fetch_add(1, Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    async fn once(&mut self, body: Bytes) -> Result<(), String> {
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
        let req = hyper::Request::post("/api/broadcast")
            .header(hyper::header::HOST, self.addr.to_string())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let res = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = res.status();
        let text = res
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if status != hyper::StatusCode::OK {
            return Err(format!(
                "{status}: {}",
                String::from_utf8_lossy(&text).trim()
            ));
        }
        Ok(())
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

/// Publishes numbers `from+1..=from+count` on each of `topics` topics, to
/// every API, as fast as they answer; returns how long that took.
pub fn burst(
    apis: &[SocketAddr],
    topics: u32,
    from: u64,
    count: u64,
    stats: &Arc<Published>,
) -> Duration {
    let started = Instant::now();
    runtime().block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for &addr in apis {
            for t in 0..topics {
                let stats = Arc::clone(stats);
                set.spawn(async move {
                    let mut api = Api::new(addr);
                    let name = topic(t);
                    for n in from + 1..=from + count {
                        api.publish(&name, n, &stats).await;
                    }
                });
            }
        }
        while set.join_next().await.is_some() {}
    });
    started.elapsed()
}

/// Publishing at a steady rate on a thread of its own, until [`Steady::stop`].
pub struct Steady {
    /// Messages (all topics) to publish in all; `u64::MAX` until stopped.
    stop_at: Arc<AtomicU64>,
    started: Instant,
    rate: f64,
    topics: u32,
    /// Each topic's last number before this publisher's first.
    base: Vec<u64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Steady {
    /// Message `i` (from 0) goes out at `i / rate` seconds from now, on
    /// topic `i % topics`, numbered on from `base[topic]`.
    pub fn start(
        apis: &[SocketAddr],
        topics: u32,
        base: Vec<u64>,
        rate: f64,
        stats: &Arc<Published>,
    ) -> Steady {
        let stop_at = Arc::new(AtomicU64::new(u64::MAX));
        let started = Instant::now();
        let (apis, stop, stats, bases) = (
            apis.to_vec(),
            Arc::clone(&stop_at),
            Arc::clone(stats),
            base.clone(),
        );
        let thread = std::thread::Builder::new()
            .name("storm-publisher".into())
            .spawn(move || {
                runtime().block_on(async move {
                    let mut set = tokio::task::JoinSet::new();
                    for addr in apis {
                        for t in 0..topics {
                            let (stop, stats) = (Arc::clone(&stop), Arc::clone(&stats));
                            let base = bases[t as usize];
                            set.spawn(async move {
                                let mut api = Api::new(addr);
                                let name = topic(t);
                                let mut i = u64::from(t);
                                while i < stop.load(Relaxed) {
                                    let due = started + Duration::from_secs_f64(i as f64 / rate);
                                    tokio::time::sleep_until(due.into()).await;
                                    if i >= stop.load(Relaxed) {
                                        break;
                                    }
                                    let n = base + i / u64::from(topics) + 1;
                                    api.publish(&name, n, &stats).await;
                                    i += u64::from(topics);
                                }
                            });
                        }
                    }
                    while set.join_next().await.is_some() {}
                })
            })
            .expect("a publisher thread");
        Steady {
            stop_at,
            started,
            rate,
            topics,
            base,
            thread: Some(thread),
        }
    }

    /// The numbers published so far or due now, per topic (what a client
    /// must have once they are delivered).
    pub fn due(&self) -> Vec<u64> {
        let i = (self.started.elapsed().as_secs_f64() * self.rate).floor() as u64;
        self.last_of(i.min(self.stop_at.load(Relaxed)))
    }

    /// Each topic's last number when `total` messages (all topics) are out.
    fn last_of(&self, total: u64) -> Vec<u64> {
        let k = u64::from(self.topics);
        (0..k)
            .map(|t| self.base[t as usize] + total.saturating_sub(t).div_ceil(k))
            .collect()
    }

    /// Stops once the messages due now are out; returns each topic's last
    /// number.
    pub fn stop(mut self) -> Vec<u64> {
        let i = (self.started.elapsed().as_secs_f64() * self.rate).floor() as u64 + 1;
        self.stop_at.store(i, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.last_of(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_numbers_follow_the_round_robin() {
        let s = Steady {
            stop_at: Arc::new(AtomicU64::new(u64::MAX)),
            started: Instant::now(),
            rate: 1.0,
            topics: 3,
            base: vec![10, 10, 10],
            thread: None,
        };
        // Messages 0..7: topics 0,1,2,0,1,2,0 -> 3, 2 and 2 each.
        assert_eq!(s.last_of(7), vec![13, 12, 12]);
        assert_eq!(s.last_of(0), vec![10, 10, 10]);
        assert_eq!(s.last_of(1), vec![11, 10, 10]);
    }
}
