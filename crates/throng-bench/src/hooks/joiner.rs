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

use crate::hist::new_hist;
use crate::join;

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
            let mut part = Part::new();
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
    let mut all = Part::new();
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
    fn new() -> Part {
        Part {
            ok: 0,
            failed: 0,
            first_error: None,
            last: Instant::now(),
            join_us: new_hist(),
            sockets: Vec::new(),
        }
    }

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
    let mut stream = join::connect(target, src).await?;
    *stage = Stage::Upgrade;
    let mut buf = Vec::with_capacity(512);
    join::upgrade(&mut stream, target, &mut buf).await?;
    *stage = Stage::Join;
    let sent = Instant::now();
    join::phx_join(&mut stream, &mut buf, topic, "1", None).await?;
    let us = sent.elapsed().as_micros() as u64;
    Ok((stream.into_std()?, us))
}
