//! A soak slot's long-poll session (`/socket/longpoll`, as phoenix.js's
//! `LongPoll` speaks it): a `GET` opens it (`{"status":410,"token":T}`),
//! each `POST` carries the channels' messages as NDJSON, and `GET`s with
//! the token poll for what the server sends (answered at once when
//! messages wait, else with 204 after the server's window). All of one
//! session's requests go over one keep-alive connection, one at a time.
//!
//! Its life ends one of the two ways a long-poll client goes away: it just
//! stops polling (the server ends the session 1.5 windows later), or its
//! connection is cut while a poll is parked (the server takes the poll back
//! from the session, which then expires the same way). A `410` means the
//! server ended the session (the server API's disconnect of its user).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::channels::Channels;
use super::shared::{stopped_during, Shared};
use super::{source, user};
use crate::join;

/// A request that takes longer fails the session: the server's window
/// (10 s by default) plus a margin.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);
/// How often the session heartbeats (as phoenix.js does over long-poll).
const HEARTBEAT: Duration = Duration::from_secs(30);

/// A long-poll answer.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Answer {
    status: u16,
    token: Option<String>,
    messages: Vec<String>,
}

/// Why a request failed.
enum Failed {
    /// The server ended the session (410).
    Gone,
    Error(String),
}

/// One keep-alive connection to the long-poll transport.
struct Conn {
    send: SendRequest<Full<Bytes>>,
    task: tokio::task::JoinHandle<()>,
    host: String,
}

impl Conn {
    async fn open(sh: &Shared, g: u64) -> Result<Conn, String> {
        let target = sh.orders.target;
        let stream = join::connect(target, source(g))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("long-poll handshake: {e}"))?;
        let task = tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        Ok(Conn {
            send,
            task,
            host: target.to_string(),
        })
    }

    /// A request and its answer (`POST` when `body` is given).
    async fn request(&mut self, path: &str, body: Option<String>) -> Result<Answer, Failed> {
        let method = if body.is_some() { "POST" } else { "GET" };
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.host);
        if body.is_some() {
            req = req.header(hyper::header::CONTENT_TYPE, "application/x-ndjson");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| Failed::Error(e.to_string()))?;
        let fetch = async {
            let res = self.send.send_request(req).await?;
            res.into_body().collect().await.map(|b| b.to_bytes())
        };
        let body = match tokio::time::timeout(REQUEST_TIMEOUT, fetch).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return Err(Failed::Error(format!("long-poll {method}: {e}"))),
            Err(_) => {
                return Err(Failed::Error(format!(
                    "long-poll {method}: no answer within {REQUEST_TIMEOUT:?}"
                )))
            }
        };
        let a: Answer = serde_json::from_slice(&body).map_err(|e| {
            Failed::Error(format!(
                "long-poll {method}: an answer I cannot read ({e}): {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))
        })?;
        match a.status {
            410 if path.contains("token=") => Err(Failed::Gone),
            200 | 204 | 410 => Ok(a),
            s => Err(Failed::Error(format!("long-poll {method} answered {s}"))),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The connection goes with the session, a poll in flight or not.
        self.task.abort();
    }
}

/// A long-poll session of slot `g` for `life`; `false` when it could not
/// open one (the slot pauses longer before the next).
pub(super) async fn session(
    sh: &Shared,
    g: u64,
    rng: &mut fastrand::Rng,
    life: Duration,
    stop: &mut watch::Receiver<bool>,
    since: &mut Option<String>,
) -> bool {
    let base = format!("/socket/longpoll?vsn=2.0.0&user={}", user(g));
    let opened = async {
        let mut conn = Conn::open(sh, g).await?;
        match conn.request(&base, None).await {
            Ok(Answer {
                status: 410,
                token: Some(t),
                ..
            }) => Ok((conn, t)),
            Ok(a) => Err(format!("long-poll open answered {}", a.status)),
            Err(Failed::Gone) => Err("long-poll open answered 410 without a token".into()),
            Err(Failed::Error(e)) => Err(e),
        }
    };
    let (mut conn, token) = match opened.await {
        Ok(x) => x,
        Err(e) => {
            sh.count(|s| {
                s.connect_errors += 1;
                s.note(e);
            });
            return false;
        }
    };
    sh.count(|s| {
        s.connects += 1;
        s.longpoll_sessions += 1;
        s.longpoll_open += 1;
    });
    let path = format!("{base}&token={token}");
    let mut ch = Channels::new(sh, g, since);
    ch.join_first(rng);
    let end = polls(&mut conn, &path, &mut ch, rng, life, stop).await;
    match end {
        Ok(()) if rng.bool() => {
            sh.count(|s| s.ended_longpoll_expire += 1);
        }
        Ok(()) => {
            // A poll left parked, then its connection cut.
            let poll = conn.request(&path, None);
            let _ = tokio::time::timeout(Duration::from_millis(200), poll).await;
            sh.count(|s| s.ended_longpoll_cut += 1);
        }
        Err(Failed::Gone) => sh.count(|s| s.server_disconnects += 1),
        Err(Failed::Error(e)) => {
            sh.count(|s| s.server_closes += 1);
            sh.error(e);
        }
    }
    drop(conn);
    sh.count(|s| s.longpoll_open -= 1);
    true
}

/// Posts what the channels have to send and polls, until the session's
/// life ends or the run stops (`Ok`), or a request fails.
async fn polls(
    conn: &mut Conn,
    path: &str,
    ch: &mut Channels<'_>,
    rng: &mut fastrand::Rng,
    life: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), Failed> {
    let now = Instant::now();
    let end_at = now + life;
    let mut heartbeat_at = now + HEARTBEAT;
    let mut action_at = now + ch.next_action(rng);
    loop {
        if !ch.outbox.is_empty() {
            let body = ch.outbox.join("\n");
            ch.outbox.clear();
            conn.request(path, Some(body)).await?;
        }
        let poll = tokio::select! {
            biased;
            _ = stop.changed() => return Ok(()),
            _ = tokio::time::sleep_until(end_at) => return Ok(()),
            a = conn.request(path, None) => a?,
        };
        ch.sh.count(|s| s.longpoll_polls += 1);
        for m in &poll.messages {
            ch.message(m.as_bytes());
        }
        let now = Instant::now();
        if now >= heartbeat_at {
            ch.heartbeat();
            heartbeat_at = now + HEARTBEAT;
        }
        if now >= action_at {
            ch.act(rng);
            action_at = now + ch.next_action(rng);
        }
        // A poll answered at once (messages waiting) is not followed by
        // another at once: phoenix.js polls again right away, but a soak
        // of thousands gains nothing from spinning.
        if poll.status == 200 && stopped_during(stop, Duration::from_millis(50)).await {
            return Ok(());
        }
    }
}
