//! A storm client process (`throng agent --storm-client ORDERS`, started by
//! `throng bench --storm`): its clients as tokio tasks on one thread, each
//! keeping across reconnects what phoenix.js's recovery snippet keeps (the
//! last ref seen, sent as `since` on every rejoin) and what the bench
//! checks (the last number seen on its topic: the next must be one more).
//!
//! Each client connects (from a source address of this process and
//! round, so a round never meets the last one's TIME_WAIT sockets),
//! upgrades, joins its topic, and reads until a [`Command::Cut`] closes
//! every socket at once or the server closes it; then it rejoins, `window`
//! connects and joins in flight at once for the whole process (a closed
//! loop: the server sets the pace, as it would for phoenix.js clients
//! backing off). Commands come as JSON lines on stdin; a [`Status`] line
//! goes to stdout every [`STATUS_EVERY`].

use std::cell::{Cell, RefCell};
use std::io::{self, BufRead, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use serde::Deserialize;
use throng_protocol::frame::{decode_frame, Opcode, Role};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Semaphore};

use super::{topic, Command, Orders, Status, EVENT, STATUS_EVERY};
use crate::error::BenchError;
use crate::join;
use crate::sys;

/// A connect, upgrade and join that takes longer is retried. Long: on a
/// starved machine the servers' queues of joins can take tens of seconds,
/// and a client that gives up and retries only queues again behind its
/// own abandoned attempt (with 30 s, a storm's tail once made no progress
/// for minutes, every attempt timing out).
const JOIN_TIMEOUT: Duration = Duration::from_secs(120);
/// Wait before retrying a failed connect or join.
const RETRY_AFTER: Duration = Duration::from_millis(200);
/// The round number that means "stop".
const STOP: u64 = u64::MAX;

/// Runs a client process on `orders` (JSON) until [`Command::Stop`] or
/// the end of stdin.
pub fn run(orders: &str) -> Result<(), BenchError> {
    let orders: Orders = serde_json::from_str(orders)?;
    if orders.targets.is_empty() || orders.topics == 0 {
        return Err(BenchError::Usage(
            "storm client: orders need a target and a topic".into(),
        ));
    }
    sys::raise_fd_limit();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, main(orders));
    Ok(())
}

/// What the process's clients share (one thread: `Cell`s, no locks).
struct Shared {
    orders: Orders,
    topics: Vec<Rc<str>>,
    status: RefCell<Status>,
    /// Each client's last number on its topic.
    lasts: Vec<Cell<u64>>,
    /// Per topic, the [`Command::Target`] (`u64::MAX`: none).
    targets: RefCell<Vec<u64>>,
    window: Semaphore,
    /// The round: bumped by a cut; [`STOP`] ends every client.
    round: watch::Sender<u64>,
}

impl Shared {
    fn error(&self, why: String) {
        let mut s = self.status.borrow_mut();
        s.errors += 1;
        s.first_error.get_or_insert(why);
    }

    /// Client `i` got number `n` (`prev` before): its count toward the target.
    fn reached(&self, i: usize, prev: u64, n: u64) {
        let t = self.orders.of(self.orders.first + i as u64).0 as usize;
        let target = self.targets.borrow()[t];
        if prev < target && n >= target {
            let mut s = self.status.borrow_mut();
            s.at_target += 1;
            s.target_ns = s.target_ns.max(sys::realtime_ns());
        }
    }

    fn print(&self, done: bool) {
        let mut s = self.status.borrow().clone();
        s.done = done;
        let mut out = io::stdout().lock();
        let _ = serde_json::to_writer(&mut out, &s);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    }
}

async fn main(orders: Orders) {
    let (round, _) = watch::channel(0u64);
    let n = orders.count as usize;
    let topics = (0..orders.topics).map(|t| topic(t).into()).collect();
    let shared = Rc::new(Shared {
        window: Semaphore::new(orders.window.max(1)),
        topics,
        status: RefCell::new(Status {
            clients: orders.count,
            ..Status::default()
        }),
        lasts: (0..n).map(|_| Cell::new(0)).collect(),
        targets: RefCell::new(vec![u64::MAX; orders.topics as usize]),
        orders,
        round,
    });
    for i in 0..n {
        tokio::task::spawn_local(client(Rc::clone(&shared), i));
    }
    // stdin is read on a thread of its own (a blocking read).
    let (tx, mut rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<Command>(&line) {
                Ok(c) => {
                    if tx.send(c).is_err() {
                        break;
                    }
                }
                Err(e) => eprintln!("storm client: a command I cannot read ({e}): {line}"),
            }
        }
    });
    let mut tick = tokio::time::interval(STATUS_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => shared.print(false),
            c = rx.recv() => match c {
                Some(Command::Cut) => shared.round.send_modify(|r| *r += 1),
                Some(Command::Target(t)) => target(&shared, t),
                Some(Command::Stop) | None => break,
            },
        }
    }
    shared.round.send_replace(STOP);
    shared.print(true);
}

/// Sets the targets and counts the clients already there.
fn target(shared: &Shared, t: Vec<u64>) {
    let mut targets = shared.targets.borrow_mut();
    for (k, v) in targets.iter_mut().enumerate() {
        *v = t.get(k).copied().unwrap_or(u64::MAX);
    }
    let o = &shared.orders;
    let at = (0..shared.lasts.len())
        .filter(|&i| shared.lasts[i].get() >= targets[o.of(o.first + i as u64).0 as usize])
        .count() as u64;
    let mut s = shared.status.borrow_mut();
    s.at_target = at;
    s.target_ns = if at > 0 { sys::realtime_ns() } else { 0 };
}

/// The source address of this process in `round`.
fn source(process: u32, round: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        10 + (round % 200) as u8,
        (process / 250) as u8,
        2 + (process % 250) as u8,
    ))
}

/// One client, for the process's life.
async fn client(sh: Rc<Shared>, i: usize) {
    let g = sh.orders.first + i as u64;
    let (t, target) = sh.orders.of(g);
    let topic = Rc::clone(&sh.topics[t as usize]);
    let mut rounds = sh.round.subscribe();
    // What phoenix.js's snippet keeps: the last ref seen.
    let mut since: Option<String> = None;
    let mut joined_before = false;
    let mut join_n = 0u64;
    loop {
        let round = *rounds.borrow_and_update();
        if round == STOP {
            return;
        }
        let Ok(permit) = sh.window.acquire().await else {
            return;
        };
        join_n += 1;
        let jr = join_n.to_string();
        let attempt = tokio::time::timeout(
            JOIN_TIMEOUT,
            join(
                target,
                source(sh.orders.process, round),
                &topic,
                &jr,
                since.as_deref(),
            ),
        );
        let (stream, buf, recovered) = match attempt.await {
            Ok(Ok(j)) => j,
            Ok(Err(Failed::Connect(e))) => {
                drop(permit);
                {
                    let mut s = sh.status.borrow_mut();
                    s.connect_errors += 1;
                    s.first_error.get_or_insert(format!("connect: {e}"));
                }
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
            Ok(Err(Failed::Join(e))) => {
                drop(permit);
                sh.error(e);
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
            Err(_) => {
                drop(permit);
                sh.error(format!("no join reply within {JOIN_TIMEOUT:?}"));
                continue;
            }
        };
        drop(permit);
        {
            let mut s = sh.status.borrow_mut();
            s.joined += 1;
            s.joins += 1;
            if joined_before {
                s.rejoins += 1;
                if since.is_some() {
                    if recovered == Some(true) {
                        s.recovered += 1;
                        s.last_recovered_ns = s.last_recovered_ns.max(sys::realtime_ns());
                    } else {
                        s.not_recovered += 1;
                        s.first_error.get_or_insert(format!(
                            "a rejoin with since was answered recovered: {recovered:?}"
                        ));
                    }
                }
            }
        }
        joined_before = true;
        let end = session(&sh, i, &mut rounds, stream, buf, &jr, &mut since).await;
        sh.status.borrow_mut().joined -= 1;
        match end {
            End::Cut => {}
            End::Closed(why) => {
                let mut s = sh.status.borrow_mut();
                s.server_closes += 1;
                s.first_error.get_or_insert(why);
            }
        }
    }
}

/// Why a session ended.
enum End {
    /// A cut (or stop): the client closed its socket.
    Cut,
    /// The server closed it, or sent what ends the channel.
    Closed(String),
}

/// Why a connect and join failed.
enum Failed {
    Connect(io::Error),
    Join(String),
}

/// The parts of a Phoenix v2 message the client reads.
#[derive(Deserialize)]
struct Message<'a>(
    Option<&'a str>,
    #[serde(borrow)] Option<&'a str>,
    &'a str,
    &'a str,
    Body,
);

/// A payload: a numbered message's `n` (a join's reply is read by
/// [`join::phx_join`]).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Body {
    n: Option<u64>,
}

/// Reads until a cut or a close, checking each numbered message.
async fn session(
    sh: &Shared,
    i: usize,
    rounds: &mut watch::Receiver<u64>,
    stream: TcpStream,
    mut buf: Vec<u8>,
    jr: &str,
    since: &mut Option<String>,
) -> End {
    loop {
        let mut at = 0;
        loop {
            let f = match decode_frame(&mut buf[at..], Role::Client, join::MAX_FRAME) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return End::Closed(format!("a frame I cannot read: {e}")),
            };
            let payload = at + f.payload.start..at + f.payload.end;
            at += f.consumed;
            match f.opcode {
                Opcode::Text if f.fin => {
                    if let Some(end) = message(sh, i, &buf[payload], jr, since) {
                        return end;
                    }
                }
                Opcode::Close => return End::Closed("the server sent a close frame".into()),
                Opcode::Ping | Opcode::Pong => {}
                _ => return End::Closed("a binary or fragmented frame".into()),
            }
        }
        buf.drain(..at);
        tokio::select! {
            biased;
            _ = rounds.changed() => return End::Cut,
            r = join::read_more(&stream, &mut buf) => {
                if let Err(e) = r {
                    return End::Closed(format!("read: {e}"));
                }
            }
        }
    }
}

/// Handles one message; `Some` ends the session.
fn message(
    sh: &Shared,
    i: usize,
    text: &[u8],
    jr: &str,
    since: &mut Option<String>,
) -> Option<End> {
    let Ok(Message(join_ref, r, _topic, event, body)) = serde_json::from_slice::<Message>(text)
    else {
        sh.error(format!(
            "a message I cannot read: {}",
            String::from_utf8_lossy(&text[..text.len().min(200)])
        ));
        return None;
    };
    if event == "phx_error" || event == "phx_close" {
        return Some(End::Closed(format!("the server sent {event}")));
    }
    if event != EVENT {
        return None;
    }
    let Some(n) = body.n else {
        sh.error("a numbered message without n".into());
        return None;
    };
    let prev = sh.lasts[i].get();
    let mut s = sh.status.borrow_mut();
    s.received += 1;
    if join_ref == Some(jr) {
        s.replayed += 1;
        s.last_replayed_ns = s.last_replayed_ns.max(sys::realtime_ns());
    }
    if n <= prev {
        s.duplicates += 1;
        s.first_error
            .get_or_insert(format!("number {n} again after {prev}"));
        return None;
    }
    if n > prev + 1 {
        s.gaps += 1;
        s.missing += n - prev - 1;
        s.first_error
            .get_or_insert(format!("number {n} after {prev}: a gap"));
    }
    drop(s);
    sh.lasts[i].set(n);
    match (since.as_mut(), r) {
        (Some(s), Some(r)) => {
            s.clear();
            s.push_str(r);
        }
        (None, Some(r)) => *since = Some(r.to_string()),
        _ => {}
    }
    sh.reached(i, prev, n);
    None
}

/// TCP connect from `src`, the upgrade, `phx_join` (with `since` when
/// there is one) and its `ok` reply; returns the socket, what came after
/// the reply, and the reply's `recovered`.
async fn join(
    target: SocketAddr,
    src: IpAddr,
    topic: &str,
    jr: &str,
    since: Option<&str>,
) -> Result<(TcpStream, Vec<u8>, Option<bool>), Failed> {
    let stream = join::connect(target, src).await.map_err(Failed::Connect)?;
    let failed = |e: io::Error| Failed::Join(format!("{e}"));
    let mut buf = Vec::with_capacity(512);
    join::upgrade(&stream, target, &mut buf)
        .await
        .map_err(failed)?;
    let recovered = join::phx_join(&stream, &mut buf, topic, jr, since)
        .await
        .map_err(failed)?;
    Ok((stream, buf, recovered))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_messages_and_replays() {
        let m: Message =
            serde_json::from_slice(br#"[null,"00ab.7","storm:3","n",{"n":7}]"#).unwrap();
        assert_eq!(
            (m.0, m.1, m.2, m.3, m.4.n),
            (None, Some("00ab.7"), "storm:3", "n", Some(7))
        );
        let m: Message = serde_json::from_slice(
            br#"["2","2","storm:3","phx_reply",{"status":"ok","response":{"recovered":true}}]"#,
        )
        .unwrap();
        assert_eq!((m.3, m.4.n), ("phx_reply", None));
    }

    #[test]
    fn each_round_and_process_has_its_own_source() {
        assert_ne!(source(0, 0), source(0, 1));
        assert_ne!(source(0, 0), source(1, 0));
        assert_ne!(source(0, 0), source(250, 0));
    }
}
