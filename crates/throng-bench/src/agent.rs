//! An agent: one process, one [`Engine`], taking orders from a controller.
//!
//! The main thread runs the engine; a reader thread turns the controller's
//! lines into commands and wakes the engine's poll with a mio `Waker`, and
//! a writer thread sends the replies (progress, final). The engine never
//! waits on the link: with `throng tune`'s 4 KiB socket buffers a
//! controller starved for a few seconds (1,000,000 connections saturating 2
//! cores) used to block the engine in a progress write, its heartbeats
//! stopped, and the server closed those connections as idle. A progress
//! report the writer has not sent yet is not queued behind: the next one
//! carries newer counters.
//! The link is authenticated first (see [`crate::wire`]); from then on the
//! writer thread says `alive` each second nothing else went out, in the
//! normal scheduling class however busy the engine keeps the rest of the
//! process, so the controller can tell a live agent from a gone one; an
//! agent that hears nothing from its controller for [`wire::LINK_TIMEOUT`]
//! exits.

use std::io::BufReader;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::engine::{Engine, CONN_SIZE};
use crate::error::BenchError;
use crate::sys;
use crate::wire::{self, Final, ToAgent, ToController};

/// File descriptors an agent keeps for itself (poll, controller, std streams).
pub const FD_MARGIN: u64 = 1000;

enum Cmd {
    Msg(ToAgent),
    /// The link to the controller ended: why.
    Lost(String),
}

/// The link's writing half, on its own thread (see the module docs), which
/// also says `alive` each [`wire::ALIVE_EVERY`] nothing else went out: the
/// controller's sign of a live agent, on a thread the engine's load cannot
/// starve (it runs in the normal scheduling class, not `SCHED_BATCH`).
pub(crate) struct Writer {
    tx: Option<mpsc::Sender<ToController>>,
    /// A progress report is queued or being written.
    progress_out: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<(), BenchError>>>,
}

impl Writer {
    /// Writes what it is given to `out`; a failed write ends the link,
    /// told (why) to `lost`.
    pub(crate) fn spawn(mut out: TcpStream, lost: impl FnOnce(String) + Send + 'static) -> Writer {
        let (tx, rx) = mpsc::channel::<ToController>();
        let progress_out = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&progress_out);
        let thread = std::thread::spawn(move || {
            if !sys::set_thread_normal_scheduling() {
                tracing::debug!("the link's writer keeps the process's scheduling policy");
            }
            loop {
                let msg = match rx.recv_timeout(wire::ALIVE_EVERY) {
                    Ok(msg) => msg,
                    Err(mpsc::RecvTimeoutError::Timeout) => ToController::Alive,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                };
                let progress = matches!(msg, ToController::Progress(_));
                if let Err(e) = wire::send(&mut out, &msg) {
                    lost(format!("writing to the controller: {e}"));
                    return Err(e);
                }
                if progress {
                    flag.store(false, Ordering::Release);
                }
            }
            close_delivered(&out, LINGER);
            Ok(())
        });
        Writer {
            tx: Some(tx),
            progress_out,
            thread: Some(thread),
        }
    }

    pub(crate) fn send(&self, msg: ToController) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(msg);
        }
    }

    /// Queues a progress report unless the last one is still going out.
    fn progress(&self, counters: &crate::stats::Counters) {
        if !self.progress_out.swap(true, Ordering::AcqRel) {
            self.send(ToController::Progress(Box::new(counters.clone())));
        }
    }

    /// Sends what is queued and ends the link.
    pub(crate) fn finish(mut self) -> Result<(), BenchError> {
        drop(self.tx.take());
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(BenchError::Protocol("the link's writer panicked".into())),
            None => Ok(()),
        }
    }
}

/// How long an agent waits, once its last words are written, for the
/// controller to have received them.
const LINGER: Duration = Duration::from_secs(20);

/// Ends the link's sending side once the controller has every byte
/// written to it (or `limit` has passed): FIN after the data, then wait
/// until the kernel's send queue is empty. An agent exits right after its
/// final report, and a socket closed with unread input (the controller's
/// pings) is reset, not closed: the kernel sends RST and throws away what
/// it had not sent yet. A final report larger than the socket buffers
/// (`throng tune`'s are 16 KiB at most) was cut short that way, and a
/// 1,000,000 run ended "agent 15 went away mid-run: connection reset; the
/// agent exit status: 0".
fn close_delivered(out: &TcpStream, limit: Duration) {
    let _ = out.shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + limit;
    while sys::unacked_bytes(out).is_some_and(|n| n > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How long an agent tries to reach its controller.
const CONNECT_FOR: Duration = Duration::from_secs(30);

/// Connects to the controller (retrying for [`CONNECT_FOR`], saying so at
/// the first failure and every 5 s: a remote agent started before its
/// controller used to sit silent) and authenticates as `role`: the link's
/// writing and reading halves.
pub(crate) fn link(
    controller: SocketAddr,
    token: &str,
    role: wire::Role,
) -> Result<(TcpStream, BufReader<TcpStream>), BenchError> {
    let start = Instant::now();
    let mut next_note = start;
    let stream = loop {
        match TcpStream::connect(controller) {
            Ok(s) => break s,
            Err(e) if start.elapsed() < CONNECT_FOR => {
                if Instant::now() >= next_note {
                    next_note += Duration::from_secs(5);
                    eprintln!(
                        "throng agent: no controller at {controller} ({e}); retrying for {} s more: start `throng bench --remote-agents N --listen {controller}` there",
                        CONNECT_FOR.saturating_sub(start.elapsed()).as_secs()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => {
                return Err(BenchError::Limit(format!(
                    "no controller at {controller} after {} s ({e}): start `throng bench --remote-agents N --listen {controller}` first, or fix --controller",
                    CONNECT_FOR.as_secs()
                )))
            }
        }
    };
    stream.set_nodelay(true)?;
    let out = stream.try_clone()?;
    let mut input = BufReader::new(stream);
    wire::authenticate_to_controller(&out, &mut input, token, role)?;
    Ok((out, input))
}

/// Connects to the controller (retrying briefly), proves the `token`, and
/// runs until `finish`.
pub fn run(controller: SocketAddr, token: &str) -> Result<(), BenchError> {
    // Before any thread starts, so every thread inherits it; see
    // `sys::set_batch_scheduling`. THRONG_AGENT_NO_BATCH=1 keeps the default
    // policy (for comparing).
    if std::env::var_os("THRONG_AGENT_NO_BATCH").is_none() && !sys::set_batch_scheduling() {
        tracing::debug!("SCHED_BATCH refused; keeping the default scheduling policy");
    }
    let (soft, _) = sys::raise_fd_limit();
    let capacity = soft.saturating_sub(FD_MARGIN).max(1);
    let (mut out, mut input) = link(controller, token, wire::Role::Agent)?;
    let mut plan = loop {
        match wire::recv::<ToAgent>(&mut input, wire::MAX_LINE)? {
            Some(ToAgent::Plan(p)) => break p,
            Some(ToAgent::Ping) => {}
            Some(other) => {
                return Err(BenchError::Protocol(format!(
                    "expected a plan, got {other:?}"
                )))
            }
            None => return Ok(()),
        }
    };
    plan.capacity = plan.capacity.min(capacity);
    let index = plan.index;
    let mut engine = Engine::new(*plan)?;
    // One waker for both threads: mio allows one per poll.
    let waker = Arc::new(engine.waker()?);
    let (tx, rx) = mpsc::channel();
    let reader_tx = tx.clone();
    let reader_waker = Arc::clone(&waker);
    std::thread::spawn(move || {
        let waker = reader_waker;
        let tx = reader_tx;
        loop {
            match wire::recv::<ToAgent>(&mut input, wire::MAX_LINE) {
                Ok(Some(ToAgent::Ping)) => continue,
                Ok(Some(m)) => {
                    if tx.send(Cmd::Msg(m)).is_err() {
                        break;
                    }
                }
                Ok(None) => {
                    let _ = tx.send(Cmd::Lost("the controller closed the link".into()));
                    break;
                }
                Err(e) => {
                    // Silent past LINK_TIMEOUT, or a bad line.
                    let why = if wire::is_timeout(&e) {
                        format!(
                            "the controller sent nothing for {} s (it pings every {} s): it is gone, stopped or hung",
                            wire::LINK_TIMEOUT.as_secs(),
                            wire::PING_EVERY.as_secs()
                        )
                    } else {
                        e.to_string()
                    };
                    let _ = tx.send(Cmd::Lost(why));
                    break;
                }
            }
            let _ = waker.wake();
        }
        let _ = waker.wake();
    });
    let rss = sys::proc_sample("self").map(|s| s.rss).unwrap_or(0);
    wire::send(
        &mut out,
        &ToController::Ready {
            rss,
            users: engine.planned_users(),
            conn_size: CONN_SIZE,
        },
    )?;
    let writer = Writer::spawn(out, move |why| {
        let _ = tx.send(Cmd::Lost(why));
        let _ = waker.wake();
    });
    let mut last_progress = Instant::now();
    // Bytes received at the last idle report, and at the last heap trim.
    let (mut idle_bytes, mut trimmed_bytes) = (u64::MAX, 0u64);
    loop {
        engine.turn(Duration::from_millis(50))?;
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Cmd::Lost(why) => {
                    // A warning: a run that loses an agent says only that
                    // the agent went away, so the agent says why.
                    tracing::warn!("agent {index}: link to the controller lost ({why}); exiting");
                    return Ok(());
                }
                Cmd::Msg(ToAgent::Start) => engine.start(),
                Cmd::Msg(ToAgent::Rate { per_sec }) => engine.set_rate(per_sec),
                Cmd::Msg(ToAgent::Floor {
                    writers,
                    sockets,
                    heartbeat_scale,
                }) => engine.floor_connect(writers, sockets, heartbeat_scale),
                Cmd::Msg(ToAgent::FloorEnd) => {
                    engine.floor_close();
                    writer.send(ToController::FloorClosed);
                }
                Cmd::Msg(ToAgent::Release) => engine.release(),
                Cmd::Msg(ToAgent::StopArrivals) => engine.stop_arrivals(),
                Cmd::Msg(ToAgent::Storm) => {
                    engine.storm();
                    writer.send(ToController::StormDone);
                }
                Cmd::Msg(ToAgent::Finish) => {
                    engine.refresh_gauges();
                    let fin = Final {
                        counters: engine.counters.clone(),
                        hists: engine.hists.to_wire(),
                        bcasts: engine.bcasts.iter().map(|(k, v)| (*k, *v)).collect(),
                        slots: engine.slots.clone(),
                        floor: engine.floor_bcasts.iter().map(|(k, v)| (*k, *v)).collect(),
                        presence: engine.presence.to_wire(),
                    };
                    writer.send(ToController::Final(Box::new(fin)));
                    return writer.finish();
                }
                Cmd::Msg(
                    m @ (ToAgent::Plan(_)
                    | ToAgent::Challenge { .. }
                    | ToAgent::Ping
                    | ToAgent::FloorWrite(_)
                    | ToAgent::Fire { .. }),
                ) => {
                    return Err(BenchError::Protocol(format!("unexpected {m:?}")));
                }
            }
        }
        // A gauge refresh walks every connection (~0.1 ms per 19,000): ten a
        // second while users arrive, one a second before they start and once
        // they have all settled, so 50 idle agents at 1M do not spend a core
        // counting (and the controller hears from each at least once a second).
        let c = &engine.counters;
        let arriving =
            engine.started() && !(c.arrivals_done && c.connecting == 0 && c.awaiting == 0);
        let floor = engine.floor_opening() || c.floor_connecting > 0 || c.floor_open > 0;
        let busy = arriving || floor;
        let every = Duration::from_millis(if busy { 100 } else { 1000 });
        if last_progress.elapsed() >= every {
            last_progress = Instant::now();
            // A burst of messages (presence states and diffs: gigabytes in
            // pieces on every connection at once) is over: hand the
            // buffers it left free back, so the RSS reported is what the
            // connections hold (see sys::trim_heap).
            // (Over: less than 1 MiB in the last second, after more than
            // 64 MiB since the last trim; heartbeats never stop entirely.)
            let received = engine.counters.bytes_in;
            let quiet = received.saturating_sub(idle_bytes) < 1 << 20;
            if !busy && quiet && received - trimmed_bytes > 64 << 20 {
                sys::trim_heap();
                trimmed_bytes = received;
            }
            idle_bytes = if busy { u64::MAX } else { received };
            engine.refresh_gauges();
            writer.progress(&engine.counters);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// The agent's last words reach a slow controller whole, though the
    /// agent exits with the controller's pings unread: 64 KiB through 4 KiB
    /// buffers, the sockets closed as soon as `close_delivered` returns.
    /// (Without it the kernel resets the connection and drops what it had
    /// not sent: the reader gets ECONNRESET after a fraction of the bytes.)
    #[test]
    fn last_words_arrive_whole_before_the_agent_exits() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let agent =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        agent.set_send_buffer_size(4096).unwrap();
        agent.connect(&l.local_addr().unwrap().into()).unwrap();
        let mut agent: TcpStream = agent.into();
        let (controller, _) = l.accept().unwrap();
        socket2::SockRef::from(&controller)
            .set_recv_buffer_size(4096)
            .unwrap();
        // The controller pings, and the agent never reads them.
        (&controller).write_all(b"ping\n").unwrap();
        let words = vec![b'x'; 64 << 10];
        let reader = std::thread::spawn(move || {
            let mut controller = controller;
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                std::thread::sleep(Duration::from_micros(200));
                match controller.read(&mut buf) {
                    Ok(0) => return Ok(got.len()),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => return Err(format!("{e} after {} bytes", got.len())),
                }
            }
        });
        agent.write_all(&words).unwrap();
        super::close_delivered(&agent, Duration::from_secs(20));
        drop(agent);
        assert_eq!(reader.join().unwrap(), Ok(64 << 10));
    }
}
