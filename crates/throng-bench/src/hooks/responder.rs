//! The built-in app backend of the hooks scenario and the soak: a hyper
//! HTTP/1.1 server (keep-alive, any number of connections) on one thread of
//! its own, on loopback, answering `POST .../connect` and `.../join` with
//! fixed JSON carrying [`ASSIGNS`], and `.../push` with an empty reply. It
//! reads each body (as a backend must) but checks nothing expensive, so the
//! server's hook path, not the backend, is what the scenario measures.
//!
//! For the soak, three answers read the body: a connect whose socket params
//! carry `user` makes it the socket's user, a push of event
//! [`SHOUT`] is answered with a broadcast of it to the topic, and
//! `.../events` takes lifecycle event batches (counted by batch).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// The assigns every answer carries: 50 bytes of JSON, as an app's user
/// id, role and room might be.
pub const ASSIGNS: &str = r#"{"user_id":"0000000042","role":"member","room":17}"#;

/// `{url}/join`'s answer.
fn join_answer() -> String {
    format!(r#"{{"reply":{{}},"assigns":{ASSIGNS}}}"#)
}

/// `{url}/connect`'s answer: anonymous, with the same assigns.
fn connect_answer() -> String {
    format!(r#"{{"user":null,"assigns":{ASSIGNS}}}"#)
}

/// The push event answered with a broadcast of it (the soak's).
pub const SHOUT: &str = "shout";

/// What a connect or push request says that changes its answer.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Asked {
    params: std::collections::BTreeMap<String, String>,
    event: String,
}

/// `{url}/connect`'s answer to a socket whose params name a `user`; `None`
/// for the fixed answer.
fn connect_as(body: &[u8]) -> Option<String> {
    let asked: Asked = serde_json::from_slice(body).ok()?;
    let user = asked.params.get("user")?;
    let user = serde_json::to_string(user).ok()?;
    Some(format!(r#"{{"user":{user},"assigns":{ASSIGNS}}}"#))
}

/// `{url}/push`'s answer: a broadcast of a [`SHOUT`], else an empty reply.
fn push_answer(body: &[u8]) -> Bytes {
    match serde_json::from_slice::<Asked>(body) {
        Ok(a) if a.event == SHOUT => Bytes::from_static(
            br#"{"reply":{},"broadcast":{"event":"shout","payload":{"from":"the backend"}}}"#,
        ),
        _ => Bytes::from_static(br#"{"reply":{}}"#),
    }
}

/// Requests the responder answered, by hook.
#[derive(Default, Debug)]
pub struct Served {
    /// Connections the server opened to it (its hook client's pool).
    pub connections: AtomicU64,
    pub connect: AtomicU64,
    pub join: AtomicU64,
    pub push: AtomicU64,
    /// Lifecycle event batches.
    pub events: AtomicU64,
    pub other: AtomicU64,
}

/// A running responder.
pub struct Responder {
    pub addr: SocketAddr,
    pub served: Arc<Served>,
}

impl Responder {
    /// Binds 127.0.0.1 on a free port and serves on a thread of its own
    /// for as long as the process lives.
    pub fn start() -> io::Result<Responder> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let served = Arc::new(Served::default());
        let counts = Arc::clone(&served);
        let answers = Arc::new((Bytes::from(join_answer()), Bytes::from(connect_answer())));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("hook-responder".into())
            .spawn(move || rt.block_on(serve(listener, counts, answers)))?;
        Ok(Responder { addr, served })
    }

    /// The base URL for `--hook-url`.
    pub fn url(&self) -> String {
        format!("http://{}/throng", self.addr)
    }
}

async fn serve(
    listener: std::net::TcpListener,
    served: Arc<Served>,
    answers: Arc<(Bytes, Bytes)>,
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        served.connections.fetch_add(1, Relaxed);
        let (served, answers) = (Arc::clone(&served), Arc::clone(&answers));
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                answer(req, Arc::clone(&served), Arc::clone(&answers))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    req: Request<Incoming>,
    served: Arc<Served>,
    answers: Arc<(Bytes, Bytes)>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    // Read the body, as a backend must.
    let asked = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body = if path.ends_with("/join") {
        served.join.fetch_add(1, Relaxed);
        answers.0.clone()
    } else if path.ends_with("/connect") {
        served.connect.fetch_add(1, Relaxed);
        connect_as(&asked).map_or_else(|| answers.1.clone(), Bytes::from)
    } else if path.ends_with("/push") {
        served.push.fetch_add(1, Relaxed);
        push_answer(&asked)
    } else if path.ends_with("/events") {
        served.events.fetch_add(1, Relaxed);
        Bytes::from_static(b"{}")
    } else {
        served.other.fetch_add(1, Relaxed);
        let mut r = Response::new(Full::new(Bytes::from_static(b"not found")));
        *r.status_mut() = StatusCode::NOT_FOUND;
        return Ok(r);
    };
    let mut r = Response::new(Full::new(body));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_answers_read_the_request() {
        let c = connect_as(br#"{"transport":"websocket","params":{"user":"u7","vsn":"2.0.0"}}"#);
        let v: serde_json::Value = serde_json::from_str(&c.unwrap()).unwrap();
        assert_eq!(v["user"], "u7");
        assert!(v["assigns"].is_object());
        assert_eq!(connect_as(br#"{"params":{}}"#), None);
        let p = push_answer(br#"{"topic":"t","event":"shout","payload":{}}"#);
        let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
        assert_eq!(v["broadcast"]["event"], SHOUT);
        let p = push_answer(br#"{"topic":"t","event":"other"}"#);
        assert_eq!(&p[..], br#"{"reply":{}}"#);
    }

    #[test]
    fn assigns_are_50_bytes_of_json_objects() {
        assert_eq!(ASSIGNS.len(), 50);
        for a in [join_answer(), connect_answer()] {
            let v: serde_json::Value = serde_json::from_str(&a).unwrap();
            assert!(v["assigns"].is_object(), "{a}");
        }
    }
}
