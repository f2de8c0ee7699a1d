//! The hooks scenario's clients: sockets that connect, upgrade, join one
//! topic and stay joined, `window` at a time (a closed loop: a new socket
//! starts as soon as one is joined, so the server, not a schedule, sets the
//! rate). Each join is timed from its `phx_join` to its reply.
//!
//! Why not the agents' engine: the engine runs a scenario on an arrival
//! schedule, one run per process; this scenario alternates many short
//! phases against one server and needs each phase's own rate and
//! latencies, which a few threads of tokio tasks give in little code.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use socket2::{Domain, Protocol, Socket, Type};
use throng_protocol::frame::{decode_frame, encode_frame, Opcode, Role};
use throng_protocol::handshake::{parse_client_response, write_client_request};
use tokio::net::TcpStream;

use crate::hist::new_hist;
use crate::sys;

/// What one phase of joins measured.
pub struct Joined {
    /// Sockets joined (an `ok` reply).
    pub ok: u64,
    /// Sockets that failed (refused, error reply, reset, timeout), with the
    /// first failure's text.
    pub failed: u64,
    pub first_error: Option<String>,
    /// From the first connect to the last join reply.
    pub elapsed: Duration,
    /// Join latency, µs: `phx_join` sent to its reply.
    pub join_us: Histogram<u64>,
    /// The joined sockets, held open until dropped.
    pub sockets: Vec<std::net::TcpStream>,
}

impl Joined {
    /// Joins per second over the phase.
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// `n` sockets from source address `src` connect to `target` and join
/// `topic`, `window` at a time over `threads` threads; each step of a
/// socket has `timeout`.
pub fn join_all(
    target: SocketAddr,
    src: IpAddr,
    topic: &str,
    n: u64,
    window: usize,
    threads: usize,
    timeout: Duration,
) -> Joined {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let handles: Vec<_> = (0..threads.max(1))
        .map(|t| {
            let next = Arc::clone(&next);
            let topic = topic.to_string();
            let tasks = window / threads.max(1) + usize::from(t < window % threads.max(1));
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime");
                rt.block_on(thread_joins(target, src, topic, n, tasks, next, timeout))
            })
        })
        .collect();
    let mut all = Joined {
        ok: 0,
        failed: 0,
        first_error: None,
        elapsed: Duration::ZERO,
        join_us: new_hist(),
        sockets: Vec::with_capacity(n as usize),
    };
    for h in handles {
        let part = match h.join() {
            Ok(p) => p,
            Err(_) => {
                all.failed += 1;
                all.first_error
                    .get_or_insert("a client thread panicked".into());
                continue;
            }
        };
        all.ok += part.ok;
        all.failed += part.failed;
        if all.first_error.is_none() {
            all.first_error = part.first_error;
        }
        all.elapsed = all
            .elapsed
            .max(part.last.saturating_duration_since(started));
        let _ = all.join_us.add(&part.join_us);
        all.sockets.extend(part.sockets);
    }
    all
}

/// One thread's share.
struct Part {
    ok: u64,
    failed: u64,
    first_error: Option<String>,
    last: Instant,
    join_us: Histogram<u64>,
    sockets: Vec<std::net::TcpStream>,
}

async fn thread_joins(
    target: SocketAddr,
    src: IpAddr,
    topic: String,
    n: u64,
    tasks: usize,
    next: Arc<AtomicU64>,
    timeout: Duration,
) -> Part {
    let topic: Arc<str> = topic.into();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (next, topic) = (Arc::clone(&next), Arc::clone(&topic));
        set.spawn(async move {
            let mut part = Part {
                ok: 0,
                failed: 0,
                first_error: None,
                last: Instant::now(),
                join_us: new_hist(),
                sockets: Vec::new(),
            };
            while next.fetch_add(1, Relaxed) < n {
                let mut stage = Stage::Connect;
                let one = join_one(target, src, &topic, &mut stage);
                match tokio::time::timeout(timeout, one).await {
                    Ok(Ok((sock, us))) => {
                        part.ok += 1;
                        part.last = Instant::now();
                        let _ = part.join_us.record(us.max(1));
                        part.sockets.push(sock);
                    }
                    Ok(Err(e)) => part.fail(e.to_string()),
                    Err(_) => part.fail(format!("{} within {timeout:?}", stage.missing())),
                }
            }
            part
        });
    }
    let mut all = Part {
        ok: 0,
        failed: 0,
        first_error: None,
        last: Instant::now(),
        join_us: new_hist(),
        sockets: Vec::new(),
    };
    let mut last = None::<Instant>;
    while let Some(r) = set.join_next().await {
        let Ok(p) = r else {
            all.fail("a client task panicked".into());
            continue;
        };
        all.ok += p.ok;
        all.failed += p.failed;
        if all.first_error.is_none() {
            all.first_error = p.first_error;
        }
        if p.ok > 0 {
            last = Some(last.map_or(p.last, |l| l.max(p.last)));
        }
        let _ = all.join_us.add(&p.join_us);
        all.sockets.extend(p.sockets);
    }
    all.last = last.unwrap_or(all.last);
    all
}

impl Part {
    fn fail(&mut self, why: String) {
        self.failed += 1;
        self.first_error.get_or_insert(why);
    }
}

/// How far a socket got, for the error of one that timed out.
#[derive(Clone, Copy)]
enum Stage {
    Connect,
    Upgrade,
    Join,
}

impl Stage {
    fn missing(self) -> &'static str {
        match self {
            Stage::Connect => "TCP connect not done",
            Stage::Upgrade => "no 101 to the upgrade request",
            Stage::Join => "no reply to phx_join",
        }
    }
}

/// One socket: TCP connect from `src`, the upgrade, `phx_join` to `topic`
/// and its `ok` reply. Returns the socket and the join's latency in µs.
async fn join_one(
    target: SocketAddr,
    src: IpAddr,
    topic: &str,
    stage: &mut Stage,
) -> io::Result<(std::net::TcpStream, u64)> {
    let sock = Socket::new(
        Domain::IPV4,
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    sock.set_nodelay(true)?;
    let _ = sys::set_bind_no_port(&sock);
    sock.bind(&SocketAddr::new(src, 0).into())?;
    match sock.connect(&target.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let stream = TcpStream::from_std(std::net::TcpStream::from(sock))?;
    stream.writable().await?;
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    *stage = Stage::Upgrade;
    let mut out = Vec::with_capacity(256);
    let host = target.to_string();
    let accept = write_client_request(&mut out, &host, "/socket/websocket?vsn=2.0.0", [7; 16]);
    write_all(&stream, &out).await?;
    let mut buf = Vec::with_capacity(512);
    loop {
        read_some(&stream, &mut buf).await?;
        match parse_client_response(&buf, &accept) {
            Ok(Some(n)) => {
                buf.drain(..n);
                break;
            }
            Ok(None) => {}
            Err(e) => return Err(io::Error::other(format!("upgrade refused: {e}"))),
        }
    }
    let join = format!(r#"["1","1","{topic}","phx_join",{{}}]"#);
    out.clear();
    encode_frame(&mut out, Opcode::Text, join.as_bytes(), Some([1, 2, 3, 4]));
    let sent = Instant::now();
    *stage = Stage::Join;
    write_all(&stream, &out).await?;
    loop {
        while let Some(f) = decode_frame(&mut buf, Role::Client, 1 << 20)
            .map_err(|e| io::Error::other(format!("bad frame from the server: {e}")))?
        {
            let text = &buf[f.payload.clone()];
            if f.opcode == Opcode::Close {
                return Err(io::Error::other("the server closed the socket"));
            }
            if text.starts_with(br#"["1","1","#) && contains(text, b"phx_reply") {
                let us = sent.elapsed().as_micros() as u64;
                if !contains(text, br#""status":"ok""#) {
                    let reply = String::from_utf8_lossy(text).into_owned();
                    return Err(io::Error::other(format!("join refused: {reply}")));
                }
                return Ok((stream.into_std()?, us));
            }
            buf.drain(..f.consumed);
        }
        read_some(&stream, &mut buf).await?;
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

async fn write_all(stream: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        stream.writable().await?;
        match stream.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads what is there (at least one byte) onto `buf`.
async fn read_some(stream: &TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut chunk = [0u8; 2048];
    loop {
        stream.readable().await?;
        match stream.try_read(&mut chunk) {
            Ok(0) => return Err(io::Error::other("the server closed the connection")),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}
