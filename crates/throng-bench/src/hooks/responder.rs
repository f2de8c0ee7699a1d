//! The built-in app backend of the hooks scenario: a hyper HTTP/1.1 server
//! (keep-alive, any number of connections) on one thread of its own, on
//! loopback, answering `POST .../connect` and `.../join` with fixed JSON
//! carrying [`ASSIGNS`], and `.../push` with an empty reply. It reads each
//! body (as a backend must) but checks nothing expensive, so the server's
//! hook path, not the backend, is what the scenario measures.

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

/// Requests the responder answered, by hook.
#[derive(Default, Debug)]
pub struct Served {
    /// Connections the server opened to it (its hook client's pool).
    pub connections: AtomicU64,
    pub connect: AtomicU64,
    pub join: AtomicU64,
    pub push: AtomicU64,
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
    // Read the body, as a backend must, and throw it away.
    let _ = req.into_body().collect().await;
    let body = if path.ends_with("/join") {
        served.join.fetch_add(1, Relaxed);
        answers.0.clone()
    } else if path.ends_with("/connect") {
        served.connect.fetch_add(1, Relaxed);
        answers.1.clone()
    } else if path.ends_with("/push") {
        served.push.fetch_add(1, Relaxed);
        Bytes::from_static(br#"{"reply":{}}"#)
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
    fn assigns_are_50_bytes_of_json_objects() {
        assert_eq!(ASSIGNS.len(), 50);
        for a in [join_answer(), connect_answer()] {
            let v: serde_json::Value = serde_json::from_str(&a).unwrap();
            assert!(v["assigns"].is_object(), "{a}");
        }
    }
}
