//! A soak client process (`throng agent --soak-client ORDERS`, started by
//! `throng bench --soak`): its slots as tokio tasks on one thread, each one
//! member of the population for the whole run.
//!
//! A slot's session is a WebSocket (or, for [`Orders::longpoll_share`] of
//! them, a long-poll session: `super::longpoll`) connected from the slot's
//! own source address with the slot's user as a socket param (the server's
//! connect hook makes it the socket's user). It joins a room, and by chance
//! a presence topic and a topic whose joins and pushes go to the app
//! backend; every other slot also keeps a history topic, rejoined in each
//! session with `since` = the last ref it saw there. While it lives it
//! heartbeats every 30 s and, every [`Orders::action_secs`] on average,
//! pushes to its room (the relay broadcasts it), pushes to its hooked topic
//! (the backend answers with a broadcast), changes rooms (a leave and a
//! join), or joins or leaves a presence topic. Its life ends after an
//! exponential time: with a close frame, a reset (`SO_LINGER` 0) or the
//! socket dropped, a third each; then the slot starts its next session.
//!
//! Every reply is matched to what it answers: an error reply, a close other
//! than the server API's disconnect (1001), or a frame that does not parse
//! is an error, counted with the first one's text. The controller judges
//! the server, not the clients, but a soak whose clients saw errors says
//! so.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::Duration;

use throng_protocol::frame::{decode_frame, encode_frame, Opcode, Role};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::channels::Channels;
use super::shared::{exp, stopped_during, Shared};
use super::{source, user, Command, Orders, Status, STATUS_EVERY};
use crate::error::BenchError;
use crate::{join, sys};

/// A connect and upgrade that takes longer fails (and is retried).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// phoenix.js's heartbeat interval.
const HEARTBEAT: Duration = Duration::from_secs(30);
/// How long a closing session waits for the server's close frame.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// How long the process waits for its slots to end after [`Command::Stop`].
const STOP_WAIT: Duration = Duration::from_secs(20);

/// Runs a client process on `orders` (JSON) until [`Command::Stop`] or the
/// end of stdin.
pub fn run(orders: &str) -> Result<(), BenchError> {
    let orders: Orders = serde_json::from_str(orders)?;
    if !(orders.mean_life_secs > 0.0 && orders.action_secs > 0.0) {
        return Err(BenchError::Usage(
            "soak client: orders need a life and an action interval".into(),
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

async fn main(orders: Orders) {
    let (stop, _) = watch::channel(false);
    let n = orders.count;
    let shared = Rc::new(Shared {
        status: RefCell::new(Status {
            slots: n,
            ..Status::default()
        }),
        orders,
        stop,
        live: Cell::new(n),
    });
    for i in 0..n {
        tokio::task::spawn_local(slot(Rc::clone(&shared), i));
    }
    let mut rx = crate::storm::client::stdin_commands::<Command>("soak client");
    let mut tick = tokio::time::interval(STATUS_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => shared.print(false),
            c = rx.recv() => match c {
                Some(Command::Stop) | None => break,
            },
        }
    }
    shared.stop.send_replace(true);
    let deadline = Instant::now() + STOP_WAIT;
    while shared.live.get() > 0 && Instant::now() < deadline {
        tick.tick().await;
        shared.print(false);
    }
    shared.print(true);
}

/// One slot, for the process's life: session after session.
async fn slot(sh: Rc<Shared>, i: u64) {
    let g = sh.orders.first + i;
    let mut rng = fastrand::Rng::with_seed(sh.orders.seed ^ g.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut stop = sh.stop.subscribe();
    // What the slot keeps across sessions: the last ref of its history topic.
    let mut since: Option<String> = None;
    let first = Duration::from_secs_f64(rng.f64() * sh.orders.ramp_secs);
    if !stopped_during(&mut stop, first).await {
        loop {
            let life = Duration::from_secs_f64(exp(&mut rng, sh.orders.mean_life_secs));
            let ok = if rng.f64() < sh.orders.longpoll_share {
                super::longpoll::session(&sh, g, &mut rng, life, &mut stop, &mut since).await
            } else {
                ws_session(&sh, g, &mut rng, life, &mut stop, &mut since).await
            };
            let pause = if ok {
                rng.u64(10..200)
            } else {
                rng.u64(500..1500)
            };
            if stopped_during(&mut stop, Duration::from_millis(pause)).await {
                break;
            }
        }
    }
    sh.live.set(sh.live.get() - 1);
}

/// How a session ends.
#[derive(Clone, Debug, PartialEq, Eq)]
enum End {
    /// A close frame (1000), then the server's close.
    Close,
    /// A reset: `SO_LINGER` 0, then the socket closed.
    Reset,
    /// The socket closed without a close frame (a FIN).
    Drop,
    /// The server closed it (its close frame's code and reason), or the
    /// connection was lost.
    Server(u16, String),
    Lost,
}

impl End {
    fn draw(rng: &mut fastrand::Rng) -> End {
        match rng.u32(0..3) {
            0 => End::Close,
            1 => End::Reset,
            _ => End::Drop,
        }
    }
}

/// A WebSocket session of slot `g` for `life`; `false` when it could not
/// connect (the slot pauses longer before the next).
async fn ws_session(
    sh: &Shared,
    g: u64,
    rng: &mut fastrand::Rng,
    life: Duration,
    stop: &mut watch::Receiver<bool>,
    since: &mut Option<String>,
) -> bool {
    let target = sh.orders.target;
    let path = format!("/socket/websocket?vsn=2.0.0&user={}", user(g));
    let attempt = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let mut stream = join::connect(target, source(g)).await?;
        let mut buf = Vec::with_capacity(1024);
        join::upgrade_to(&mut stream, target, &path, &mut buf).await?;
        Ok::<_, io::Error>((stream, buf))
    })
    .await;
    let (stream, buf) = match attempt {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            sh.count(|s| {
                s.connect_errors += 1;
                s.note(format!("connect: {e}"));
            });
            return false;
        }
        Err(_) => {
            sh.count(|s| {
                s.connect_errors += 1;
                s.note(format!("connect: no upgrade within {CONNECT_TIMEOUT:?}"));
            });
            return false;
        }
    };
    sh.count(|s| {
        s.connects += 1;
        s.ws_open += 1;
    });
    let mut ws = Ws {
        stream,
        buf,
        out: Vec::with_capacity(512),
        ch: Channels::new(sh, g, since),
    };
    let end = ws.live(rng, life, stop).await;
    ws.end(end).await;
    sh.count(|s| s.ws_open -= 1);
    true
}

/// A WebSocket session.
struct Ws<'a> {
    stream: TcpStream,
    /// What was read and not yet handled.
    buf: Vec<u8>,
    out: Vec<u8>,
    ch: Channels<'a>,
}

impl Ws<'_> {
    /// Writes the channels' outbox, each message a masked text frame.
    async fn flush(&mut self) -> io::Result<()> {
        for m in self.ch.outbox.drain(..) {
            encode_frame(
                &mut self.out,
                Opcode::Text,
                m.as_bytes(),
                Some([3, 1, 4, 1]),
            );
        }
        let r = join::write_all(&self.stream, &self.out).await;
        self.out.clear();
        r
    }

    /// The session's life: joins, then heartbeats and actions, reading
    /// everything that arrives, until its life ends, the run stops, or the
    /// server closes it.
    async fn live(
        &mut self,
        rng: &mut fastrand::Rng,
        life: Duration,
        stop: &mut watch::Receiver<bool>,
    ) -> End {
        self.ch.join_first(rng);
        let now = Instant::now();
        let end_at = now + life;
        let mut heartbeat_at = now + HEARTBEAT.mul_f64(rng.f64());
        let mut action_at = now + self.ch.next_action(rng);
        loop {
            if let Err(e) = self.flush().await {
                self.ch.sh.count(|s| s.note(format!("write: {e}")));
                return End::Lost;
            }
            let next = end_at.min(heartbeat_at).min(action_at);
            tokio::select! {
                biased;
                _ = stop.changed() => return End::draw(rng),
                _ = tokio::time::sleep_until(next) => {
                    let now = Instant::now();
                    if now >= end_at {
                        return End::draw(rng);
                    }
                    if now >= heartbeat_at {
                        self.ch.heartbeat();
                        heartbeat_at = now + HEARTBEAT;
                    }
                    if now >= action_at {
                        self.ch.act(rng);
                        action_at = now + self.ch.next_action(rng);
                    }
                }
                r = join::read_more(&self.stream, &mut self.buf) => {
                    if r.is_err() {
                        return End::Lost;
                    }
                    if let Some(end) = self.read_frames() {
                        return end;
                    }
                }
            }
        }
    }

    /// Handles every whole frame read; `Some` when the server closed.
    fn read_frames(&mut self) -> Option<End> {
        let mut buf = std::mem::take(&mut self.buf);
        let mut at = 0;
        let mut end = None;
        while end.is_none() {
            let f = match decode_frame(&mut buf[at..], Role::Client, join::MAX_FRAME) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    self.ch.sh.error(format!("a frame I cannot read: {e}"));
                    end = Some(End::Lost);
                    break;
                }
            };
            let payload = &buf[at + f.payload.start..at + f.payload.end];
            at += f.consumed;
            match f.opcode {
                Opcode::Text => self.ch.message(payload),
                Opcode::Close => {
                    let (code, reason) = match payload {
                        [a, b, rest @ ..] => (
                            u16::from_be_bytes([*a, *b]),
                            String::from_utf8_lossy(rest).into_owned(),
                        ),
                        _ => (1005, String::new()),
                    };
                    end = Some(End::Server(code, reason));
                }
                _ => {}
            }
        }
        buf.drain(..at);
        self.buf = buf;
        end
    }

    /// Ends the session as `end` says, counted.
    async fn end(mut self, end: End) {
        let sh = self.ch.sh;
        match end {
            End::Close => {
                self.ch.outbox.clear();
                encode_frame(
                    &mut self.out,
                    Opcode::Close,
                    &1000u16.to_be_bytes(),
                    Some([1; 4]),
                );
                if self.flush().await.is_ok() {
                    // Until the server's close (or it hangs up), briefly.
                    let _ = tokio::time::timeout(CLOSE_WAIT, async {
                        while join::read_more(&self.stream, &mut self.buf).await.is_ok() {
                            if self.read_frames().is_some() {
                                break;
                            }
                        }
                    })
                    .await;
                }
                sh.count(|s| s.ended_close += 1);
            }
            End::Reset => {
                let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
                sh.count(|s| s.ended_reset += 1);
            }
            End::Drop => sh.count(|s| s.ended_drop += 1),
            // The server API's disconnect of the session's user.
            End::Server(1001, reason) if reason == "disconnect" => {
                sh.count(|s| s.server_disconnects += 1);
            }
            End::Server(code, reason) => {
                sh.count(|s| s.server_closes += 1);
                sh.error(format!("the server closed a socket with {code} {reason:?}"));
            }
            End::Lost => {
                sh.count(|s| s.server_closes += 1);
                sh.error("the connection was lost without a close frame".to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lives_average_their_mean() {
        let mut rng = fastrand::Rng::with_seed(7);
        let n = 100_000;
        let mean = (0..n).map(|_| exp(&mut rng, 10.0)).sum::<f64>() / n as f64;
        assert!((9.8..10.2).contains(&mean), "{mean}");
    }
}
