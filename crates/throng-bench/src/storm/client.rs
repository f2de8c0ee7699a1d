//! A storm client process (`throng agent --storm-client ORDERS`, started by
//! `throng bench --storm`): its clients as tokio tasks on one thread, each
//! keeping across reconnects what phoenix.js's recovery snippet keeps (the
//! last ref seen, sent as `since` on every rejoin), what a TLS stack keeps
//! (its session ticket, with `--tls`) and what the bench checks (the last
//! number seen on its topic: the next must be one more).
//!
//! Each client connects (from a source address of this process and of its
//! own count of reconnects, so a reconnect never meets the last session's
//! TIME_WAIT sockets), over TLS with `--tls`, upgrades (with its user's
//! token with `--auth jwt`), joins its topic, and reads until a
//! [`Command::Cut`] closes every socket at once or the server closes it;
//! then it rejoins, `window` connects and joins in flight at once for the
//! whole process (a closed loop: the server sets the pace). After the
//! server closed it, and after each failed connect, it waits as phoenix.js
//! does ([`reconnect_after`]). Commands come as JSON lines on stdin; a
//! [`Status`] line goes to stdout every [`STATUS_EVERY`].

use std::cell::{Cell, RefCell};
use std::io::{self, BufRead, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use throng_protocol::frame::{decode_frame, Opcode, Role};
use tokio::sync::{mpsc, watch, Semaphore};

use super::{topic, Command, Orders, Status, EVENT, JWT_SECRET_ENV, STATUS_EVERY};
use crate::error::BenchError;
use crate::join::tls::{Connector, Ticket};
use crate::join::{self, Stream};
use crate::jwt::Signer;
use crate::sys;

/// A connect, upgrade and join that takes longer is retried. Long: on a
/// starved machine the servers' queues of joins can take tens of seconds,
/// and a client that gives up and retries only queues again behind its
/// own abandoned attempt (with 30 s, a storm's tail once made no progress
/// for minutes, every attempt timing out).
const JOIN_TIMEOUT: Duration = Duration::from_secs(120);
/// The round number that means "stop".
const STOP: u64 = u64::MAX;

/// phoenix.js's `reconnectAfterMs` (`assets/js/phoenix/socket.js` in
/// phoenixframework/phoenix): the wait before reconnect number `tries`
/// (from 1) since the socket last opened: 10 ms, then longer, at most 5 s.
pub fn reconnect_after(tries: u32) -> Duration {
    const MS: [u64; 9] = [10, 50, 100, 150, 200, 250, 500, 1000, 2000];
    let i = tries.saturating_sub(1) as usize;
    Duration::from_millis(MS.get(i).copied().unwrap_or(5000))
}

/// Runs a client process on `orders` (JSON) until [`Command::Stop`] or
/// the end of stdin.
pub fn run(orders: &str) -> Result<(), BenchError> {
    let orders: Orders = serde_json::from_str(orders)?;
    if orders.targets.is_empty() || orders.topics == 0 {
        return Err(BenchError::Usage(
            "storm client: orders need a target and a topic".into(),
        ));
    }
    let connector = orders.tls.as_ref().map(Connector::new).transpose()?;
    let signer = match (orders.jwt, std::env::var(JWT_SECRET_ENV)) {
        (false, _) => None,
        (true, Ok(secret)) if !secret.is_empty() => Some(RefCell::new(Signer::new(&secret))),
        (true, _) => {
            return Err(BenchError::Usage(format!(
                "storm client: --auth jwt needs the secret in {JWT_SECRET_ENV}"
            )))
        }
    };
    sys::raise_fd_limit();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, main(orders, connector, signer));
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
    /// `--tls`: the clients' TLS (each with its own [`Ticket`]).
    connector: Option<Connector>,
    /// `--auth jwt`: the tokens' signer (its buffers reused).
    signer: Option<RefCell<Signer>>,
}

impl Shared {
    fn error(&self, why: String) {
        let mut s = self.status.borrow_mut();
        s.errors += 1;
        s.first_error.get_or_insert(why);
    }

    /// A failed connect, upgrade or join, counted by its kind.
    fn failed(&self, f: &Failed) {
        let mut s = self.status.borrow_mut();
        *s.connect_failures.entry(f.kind.name()).or_default() += 1;
        match f.kind {
            FailKind::JoinRefused | FailKind::Timeout => s.errors += 1,
            _ => s.connect_errors += 1,
        }
        // Refused connects are what a restart's gap looks like: not news.
        if f.kind != FailKind::Refused {
            s.first_error.get_or_insert_with(|| f.why.clone());
        }
    }

    /// The server ended client's session: counted by its close code.
    fn closed(&self, code: Option<u16>, why: String) {
        let mut s = self.status.borrow_mut();
        s.server_closes += 1;
        let key = code.map_or_else(|| "none".to_string(), |c| c.to_string());
        *s.closes_by_code.entry(key).or_default() += 1;
        if code == Some(1012) {
            let now = sys::realtime_ns();
            s.first_1012_ns = if s.first_1012_ns == 0 {
                now
            } else {
                s.first_1012_ns.min(now)
            };
        } else {
            s.first_error.get_or_insert(why);
        }
    }

    /// The upgrade's path for client `g`: with `--auth jwt`, its token.
    fn path(&self, g: u64) -> String {
        match &self.signer {
            Some(s) => s.borrow_mut().path(join::SOCKET_PATH, g as u32).to_string(),
            None => join::SOCKET_PATH.to_string(),
        }
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

async fn main(orders: Orders, connector: Option<Connector>, signer: Option<RefCell<Signer>>) {
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
        connector,
        signer,
    });
    for i in 0..n {
        tokio::task::spawn_local(client(Rc::clone(&shared), i));
    }
    let mut rx = stdin_commands::<Command>("storm client");
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

/// The source address of this process for its clients' `session`-th
/// connection (each cut or server close starts the next).
fn source(process: u32, session: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        10 + (session % 200) as u8,
        (process / 250) as u8,
        2 + (process % 250) as u8,
    ))
}

/// What one client keeps across its connections.
struct Client {
    g: u64,
    target: SocketAddr,
    topic: Rc<str>,
    /// What phoenix.js's snippet keeps: the last ref seen.
    since: Option<String>,
    joined_before: bool,
    join_n: u64,
    /// Sessions ended so far (its source address's round).
    sessions: u64,
    /// Failed attempts since it last joined, and the server closed its
    /// last session: what phoenix.js's backoff counts.
    tries: u32,
    /// `--tls`: its own session ticket.
    ticket: Option<Arc<Ticket>>,
}

/// One client, for the process's life.
async fn client(sh: Rc<Shared>, i: usize) {
    let g = sh.orders.first + i as u64;
    let (t, target) = sh.orders.of(g);
    let mut c = Client {
        g,
        target,
        topic: Rc::clone(&sh.topics[t as usize]),
        since: None,
        joined_before: false,
        join_n: 0,
        sessions: 0,
        tries: 0,
        ticket: sh.connector.as_ref().map(|_| Arc::new(Ticket::default())),
    };
    let mut rounds = sh.round.subscribe();
    loop {
        if *rounds.borrow_and_update() == STOP {
            return;
        }
        if c.tries > 0 {
            tokio::time::sleep(reconnect_after(c.tries)).await;
        }
        let Ok(permit) = sh.window.acquire().await else {
            return;
        };
        c.join_n += 1;
        let jr = c.join_n.to_string();
        let attempt = tokio::time::timeout(JOIN_TIMEOUT, connect_and_join(&sh, &c, &jr));
        let joined = match attempt.await {
            Ok(j) => j,
            Err(_) => Err(Failed {
                kind: FailKind::Timeout,
                why: format!("no join reply within {JOIN_TIMEOUT:?}"),
            }),
        };
        drop(permit);
        let (stream, buf, recovered) = match joined {
            Ok(j) => j,
            Err(f) => {
                sh.failed(&f);
                c.tries += 1;
                continue;
            }
        };
        c.tries = 0;
        count_join(&sh, &c, recovered);
        c.joined_before = true;
        let end = session(&sh, i, &mut rounds, stream, buf, &jr, &mut c.since).await;
        sh.status.borrow_mut().joined -= 1;
        c.sessions += 1;
        if let End::Closed { code, why } = end {
            sh.closed(code, why);
            // phoenix.js reconnects after its first backoff step.
            c.tries = 1;
        }
    }
}

/// A join's `ok` reply: counted, and a rejoin's `recovered`.
fn count_join(sh: &Shared, c: &Client, recovered: Option<bool>) {
    let mut s = sh.status.borrow_mut();
    s.joined += 1;
    s.joins += 1;
    if !c.joined_before {
        return;
    }
    s.rejoins += 1;
    if c.since.is_none() {
        return;
    }
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

/// Why a session ended.
enum End {
    /// A cut (or stop): the client closed its socket.
    Cut,
    /// The server closed it (with a close frame's code, if it sent one),
    /// or sent what ends the channel.
    Closed { code: Option<u16>, why: String },
}

/// Why a connect, upgrade or join failed, as the status counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailKind {
    /// Nothing listening (ECONNREFUSED): the gap of a restart.
    Refused,
    /// The connection reset or closed before the join's reply.
    Reset,
    /// The upgrade answered with this HTTP status (503: the server's
    /// refusal at a cap, with Retry-After).
    Http(u16),
    /// The TLS handshake failed.
    Tls,
    /// No join reply within [`JOIN_TIMEOUT`].
    Timeout,
    /// The join was answered with an error.
    JoinRefused,
    Other,
}

impl FailKind {
    /// Its key in [`Status::connect_failures`].
    pub fn name(self) -> String {
        match self {
            FailKind::Refused => "refused".into(),
            FailKind::Reset => "reset".into(),
            FailKind::Http(code) => format!("http_{code}"),
            FailKind::Tls => "tls".into(),
            FailKind::Timeout => "timeout".into(),
            FailKind::JoinRefused => "join_refused".into(),
            FailKind::Other => "other".into(),
        }
    }

    /// The kind of an error at a stage of the way in (`tls`: the TLS
    /// handshake, whose own failures are [`FailKind::Tls`]).
    pub fn of(e: &io::Error, tls: bool) -> FailKind {
        use io::ErrorKind as K;
        match e.kind() {
            K::ConnectionRefused => return FailKind::Refused,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                return FailKind::Reset
            }
            K::TimedOut => return FailKind::Timeout,
            _ => {}
        }
        let text = e.to_string();
        if let Some(code) = text
            .strip_prefix("upgrade refused: HTTP ")
            .and_then(|c| c.parse().ok())
        {
            return FailKind::Http(code);
        }
        if text.starts_with("join refused") {
            return FailKind::JoinRefused;
        }
        if text.contains("the server closed the connection") {
            return FailKind::Reset;
        }
        if tls {
            return FailKind::Tls;
        }
        FailKind::Other
    }
}

/// A failed way in.
struct Failed {
    kind: FailKind,
    why: String,
}

impl Failed {
    fn at(stage: &str, tls: bool) -> impl Fn(io::Error) -> Failed + '_ {
        move |e| Failed {
            kind: FailKind::of(&e, tls),
            why: format!("{stage}: {e}"),
        }
    }
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

/// A close frame's code (none in an empty payload).
fn close_code(payload: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*payload.first()?, *payload.get(1)?]))
}

/// Reads until a cut or a close, checking each numbered message.
async fn session(
    sh: &Shared,
    i: usize,
    rounds: &mut watch::Receiver<u64>,
    mut stream: Stream,
    mut buf: Vec<u8>,
    jr: &str,
    since: &mut Option<String>,
) -> End {
    let closed = |code, why: &str| End::Closed {
        code,
        why: why.to_string(),
    };
    loop {
        let mut at = 0;
        loop {
            let f = match decode_frame(&mut buf[at..], Role::Client, join::MAX_FRAME) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return closed(None, &format!("a frame I cannot read: {e}")),
            };
            let payload = at + f.payload.start..at + f.payload.end;
            at += f.consumed;
            match f.opcode {
                Opcode::Text if f.fin => {
                    if let Some(end) = message(sh, i, &buf[payload], jr, since) {
                        return end;
                    }
                }
                Opcode::Close => {
                    let code = close_code(&buf[payload]);
                    let why = format!("the server sent a close frame ({code:?})");
                    return closed(code, &why);
                }
                Opcode::Ping | Opcode::Pong => {}
                _ => return closed(None, "a binary or fragmented frame"),
            }
        }
        buf.drain(..at);
        tokio::select! {
            biased;
            _ = rounds.changed() => return End::Cut,
            r = join::receive(&mut stream, &mut buf) => {
                if let Err(e) = r {
                    return closed(None, &format!("read: {e}"));
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
        return Some(End::Closed {
            code: None,
            why: format!("the server sent {event}"),
        });
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

/// TCP connect from the client's source, TLS with its ticket (`--tls`),
/// the upgrade (with its token, `--auth jwt`), `phx_join` (with `since`
/// when there is one) and its `ok` reply; returns the socket, what came
/// after the reply, and the reply's `recovered`.
async fn connect_and_join(
    sh: &Shared,
    c: &Client,
    jr: &str,
) -> Result<(Stream, Vec<u8>, Option<bool>), Failed> {
    let src = source(sh.orders.process, c.sessions);
    let tcp = join::connect(c.target, src)
        .await
        .map_err(Failed::at("connect", false))?;
    let mut stream = match (&sh.connector, &c.ticket) {
        (Some(tls), Some(ticket)) => {
            let (stream, resumed) = tls
                .connect(tcp, ticket)
                .await
                .map_err(Failed::at("TLS handshake", true))?;
            let mut s = sh.status.borrow_mut();
            if resumed {
                s.tls_resumed += 1;
            } else {
                s.tls_full += 1;
            }
            stream
        }
        _ => Stream::Plain(tcp),
    };
    let mut buf = Vec::with_capacity(512);
    let path = sh.path(c.g);
    join::upgrade_to(&mut stream, c.target, &path, &mut buf)
        .await
        .map_err(Failed::at("upgrade", false))?;
    let recovered = join::phx_join(&mut stream, &mut buf, &c.topic, jr, c.since.as_deref())
        .await
        .map_err(Failed::at("join", false))?;
    Ok((stream, buf, recovered))
}

/// The controller's commands, one JSON line each on stdin, read on a
/// thread of its own (a blocking read); a line that is no command is said
/// on stderr by `who` and skipped. Shared by the storm's and the soak's
/// client processes.
pub(crate) fn stdin_commands<C>(who: &'static str) -> mpsc::UnboundedReceiver<C>
where
    C: serde::de::DeserializeOwned + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<C>(&line) {
                Ok(c) => {
                    if tx.send(c).is_err() {
                        break;
                    }
                }
                Err(e) => eprintln!("{who}: a command I cannot read ({e}): {line}"),
            }
        }
    });
    rx
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
    fn failures_are_counted_by_kind() {
        use io::ErrorKind as K;
        let kind = |e: io::Error, tls| FailKind::of(&e, tls).name();
        assert_eq!(kind(K::ConnectionRefused.into(), false), "refused");
        assert_eq!(kind(K::ConnectionReset.into(), true), "reset");
        assert_eq!(kind(K::UnexpectedEof.into(), false), "reset");
        let refused = io::Error::other("upgrade refused: HTTP 503");
        assert_eq!(kind(refused, false), "http_503");
        let join = io::Error::other("join refused: [..]");
        assert_eq!(kind(join, false), "join_refused");
        let alert = io::Error::new(K::InvalidData, "received fatal alert");
        assert_eq!(kind(alert, true), "tls");
        assert_eq!(kind(io::Error::other("odd"), false), "other");
        assert_eq!(close_code(&[0x03, 0xf4]), Some(1012));
        assert_eq!(close_code(&[]), None);
    }

    #[test]
    fn reconnects_wait_as_phoenix_js_does() {
        assert_eq!(reconnect_after(1), Duration::from_millis(10));
        assert_eq!(reconnect_after(9), Duration::from_millis(2000));
        assert_eq!(reconnect_after(10), Duration::from_millis(5000));
        assert_eq!(reconnect_after(0), Duration::from_millis(10));
    }

    #[test]
    fn each_round_and_process_has_its_own_source() {
        assert_ne!(source(0, 0), source(0, 1));
        assert_ne!(source(0, 0), source(1, 0));
        assert_ne!(source(0, 0), source(250, 0));
    }
}
