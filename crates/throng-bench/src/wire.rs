//! The controller <-> agent protocol: JSON lines over one TCP connection,
//! opened by mutual authentication with a shared token.
//!
//! ```text
//! agent -> controller   hello {pid, role, nonce}   (role: agent or floor_writer)
//! controller -> agent   challenge {nonce, proof}     proof = HMAC-SHA256(token, "controller" a c)
//! agent -> controller   proof {proof}                proof = HMAC-SHA256(token, "agent" a c)
//!                       (a, c: the agent's and the controller's nonces)
//! controller -> agent   plan {index, agents, scenario, target, ...}
//! agent -> controller   ready {rss, users, conn_size}
//! controller -> agent   floor {writers}            (open a floor socket per user: crate::floor)
//! controller -> agent   floor_end                  (reset them)
//! agent -> controller   floor_closed
//! controller -> agent   start                      (arrivals begin)
//! controller -> agent   rate {per_sec}             (adaptive arrival: the rate from now on)
//! agent -> controller   progress {counters}        (every 100 ms; 1 s once settled or idle)
//! controller -> agent   release                    (the barrier opens)
//! controller -> agent   storm                      (drop every connection)
//! agent -> controller   storm_done
//! controller -> agent   finish
//! agent -> controller   final {counters, hists, bcasts, slots}   (then it exits)
//! controller -> agent   ping                       (every few seconds: the link is alive)
//! agent -> controller   alive                      (each second nothing else went out)
//! ```
//!
//! A floor writer ([`crate::floor`]) opens its link the same way, then:
//!
//! ```text
//! controller -> writer   floor_write {expect, threads, frame}
//! writer -> controller   listening {addr}, then accepted {sockets} every second
//! controller -> writer   fire {round, stamp_ns}     (write the frame to every socket)
//! writer -> controller   fired {round, write_secs, failed}
//! controller -> writer   finish
//! ```
//!
//! Bounds, so that neither a stranger on the controller's port nor a peer
//! gone wrong can hold the other: before authentication a line is at most
//! [`MAX_HELLO_LINE`] bytes and must come within [`HELLO_TIMEOUT`]; after, at
//! most [`MAX_LINE`], and a link that will not take a line for
//! [`LINK_TIMEOUT`] is dropped. The token proves each side to the other
//! without crossing the wire; an agent whose controller connection closes,
//! or whose controller says nothing for [`LINK_TIMEOUT`] (it pings every
//! [`PING_EVERY`]), exits.
//!
//! Liveness, the other way: an agent says `alive` every [`ALIVE_EVERY`]
//! from its link's writing thread, which the load cannot starve (the
//! engine's turns can take seconds on a saturated machine). The controller
//! has no read timeout: an agent silent for [`SLOW_AFTER`] is looked at
//! (its process alive: stopped, running, waiting) and reported slow, with
//! for how long, never gone; only a closed link, a process that exited, or
//! [`HUNG_AFTER`] of silence ends it. (A 60 s read timeout once declared a
//! starved agent of a 1,000,000 run "gone: Resource temporarily
//! unavailable (os error 11)", and threw the run away.)

use std::io::{self, BufRead, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use sha2::Sha256;

use std::net::SocketAddr;

use crate::error::BenchError;
use crate::floor::FloorOrder;
use crate::plan::Plan;
use crate::stats::{BcastSeen, Counters, HistsWire};

/// The longest line before a peer has authenticated (hello, challenge, proof).
pub const MAX_HELLO_LINE: usize = 4 * 1024;
/// The longest line after: a plan (a whole scenario) or an agent's final
/// report (histograms, per-broadcast receipts, 100 ms slots) of a long run.
pub const MAX_LINE: usize = 64 * 1024 * 1024;
/// How long authentication may take.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// An agent whose controller says nothing for this long exits; a link that
/// takes no line for this long is dead.
pub const LINK_TIMEOUT: Duration = Duration::from_secs(60);
/// An agent says `alive` this often when it has said nothing else.
pub const ALIVE_EVERY: Duration = Duration::from_secs(1);
/// An agent silent this long is looked at and reported slow.
pub const SLOW_AFTER: Duration = Duration::from_secs(5);
/// An agent silent this long, its process alive, is hung: the run ends
/// without it (a stopped or starved agent speaks well before).
pub const HUNG_AFTER: Duration = Duration::from_secs(300);
/// The controller pings each link this often (agents send progress at
/// least once a second).
pub const PING_EVERY: Duration = Duration::from_secs(5);
/// The environment variable carrying the token to local agents (and the
/// `--token` flags' default).
pub const TOKEN_ENV: &str = "THRONG_BENCH_TOKEN";

/// What the controller tells an agent.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToAgent {
    /// The controller's answer to a hello: its nonce and its proof of the token.
    Challenge {
        nonce: String,
        proof: String,
    },
    Plan(Box<Plan>),
    Start,
    Release,
    Storm,
    Finish,
    /// Nothing to do: the link is alive.
    Ping,
    /// Adaptive arrival: users arrive at this rate (all agents together)
    /// from now on; 0 pauses.
    Rate {
        per_sec: f64,
    },
    /// Open a floor socket per user (per user of the first `sockets`: a
    /// sample), user `g` to `writers[g % len]`, each heartbeating every
    /// user interval times `heartbeat_scale` (default 1).
    Floor {
        writers: Vec<SocketAddr>,
        #[serde(default)]
        sockets: Option<u64>,
        #[serde(default)]
        heartbeat_scale: Option<f64>,
    },
    /// Reset every floor socket.
    FloorEnd,
    /// Start no more users: the arrivals are over with those started
    /// (`--min-available`: the machine's memory ran short).
    StopArrivals,
    /// To a floor writer: what to accept and write.
    FloorWrite(Box<FloorOrder>),
    /// To a floor writer: write round `round`'s frame, stamped `stamp_ns`,
    /// to every socket.
    Fire {
        round: u32,
        stamp_ns: u64,
    },
}

/// What a peer of the controller is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    #[default]
    Agent,
    /// A floor writer (`throng agent --floor-writer`).
    FloorWriter,
}

/// An agent's last word.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Final {
    pub counters: Counters,
    pub hists: HistsWire,
    pub bcasts: Vec<(u64, BcastSeen)>,
    pub slots: crate::slots::Slots,
    /// The floor's frames as this agent received them.
    #[serde(default)]
    pub floor: Vec<(u64, BcastSeen)>,
    /// Presence joins' times, diffs and count steps (see [`crate::presence`]).
    #[serde(default)]
    pub presence: crate::presence::PresenceWire,
}

/// What an agent tells the controller.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToController {
    /// The agent's pid (the controller samples a local agent's CPU from
    /// `/proc`) and its nonce for the challenge.
    Hello {
        pid: u32,
        #[serde(default)]
        role: Role,
        nonce: String,
    },
    /// The agent's proof of the token.
    Proof {
        proof: String,
    },
    Ready {
        rss: u64,
        users: u64,
        conn_size: usize,
    },
    Progress(Box<Counters>),
    StormDone,
    Final(Box<Final>),
    /// The agent has reset its floor sockets.
    FloorClosed,
    /// A floor writer listens here.
    Listening {
        addr: SocketAddr,
    },
    /// A floor writer holds this many sockets (every second).
    Accepted {
        sockets: u64,
    },
    /// A floor writer wrote round `round` in `write_secs`; `failed` writes failed.
    Fired {
        round: u32,
        write_secs: f64,
        failed: u64,
    },
    /// Nothing else to say: the agent is alive (every [`ALIVE_EVERY`]).
    Alive,
}

/// Whether a link's error is a read or write timeout (which the socket
/// reports as `WouldBlock`, "Resource temporarily unavailable").
pub fn is_timeout(e: &BenchError) -> bool {
    matches!(e, BenchError::Io(io) if matches!(io.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
}

/// Writes one message as a JSON line.
pub fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), BenchError> {
    let mut line = serde_json::to_vec(msg)?;
    line.push(b'\n');
    w.write_all(&line)
        .and_then(|()| w.flush())
        .map_err(|e| match e.kind() {
            // The write timeout (LINK_TIMEOUT) struck: say so, not EAGAIN.
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                e.kind(),
                format!(
                    "the other end of the link read nothing for {} s",
                    LINK_TIMEOUT.as_secs()
                ),
            ),
            _ => e,
        })?;
    Ok(())
}

/// Reads one JSON line of at most `max` bytes; `Ok(None)` at end of stream.
/// A longer line, or one cut short by the end of the stream, is an error
/// (and the link is not to be read again).
pub fn recv<T: DeserializeOwned>(
    r: &mut impl BufRead,
    max: usize,
) -> Result<Option<T>, BenchError> {
    let mut line = Vec::new();
    let n = r
        .by_ref()
        .take(max as u64 + 1)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(BenchError::Protocol(if line.len() > max {
            format!("a line longer than {max} bytes")
        } else {
            "the link closed in the middle of a line".into()
        }));
    }
    serde_json::from_slice(&line).map(Some).map_err(|e| {
        let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
        BenchError::Protocol(format!("{e}: {}", shown.trim_end()))
    })
}

/// A fresh random token: 128 bits, hex.
pub fn new_token() -> Result<String, BenchError> {
    Ok(hex(&random::<16>()?))
}

/// A fresh nonce: 128 bits, hex.
fn nonce() -> Result<String, BenchError> {
    Ok(hex(&random::<16>()?))
}

fn random<const N: usize>() -> Result<[u8; N], BenchError> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Who proves: the two sides sign different messages, so one side's proof
/// is never the other's.
#[derive(Clone, Copy)]
enum Side {
    Controller,
    Agent,
}

fn mac(token: &str, side: Side, agent_nonce: &str, controller_nonce: &str) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(token.as_bytes())
        .expect("HMAC takes a key of any length");
    m.update(match side {
        Side::Controller => b"throng-bench controller\n",
        Side::Agent => b"throng-bench agent\n",
    });
    m.update(agent_nonce.as_bytes());
    m.update(b"\n");
    m.update(controller_nonce.as_bytes());
    m
}

fn prove(token: &str, side: Side, a: &str, c: &str) -> String {
    hex(&mac(token, side, a, c).finalize().into_bytes())
}

/// Checks a proof in constant time.
fn verify(token: &str, side: Side, a: &str, c: &str, proof: &str) -> bool {
    unhex(proof).is_some_and(|p| mac(token, side, a, c).verify_slice(&p).is_ok())
}

/// The agent's side of opening a link: hello, check the controller's proof,
/// send ours. Reads are bounded by [`HELLO_TIMEOUT`] here and by
/// [`LINK_TIMEOUT`] afterwards.
pub fn authenticate_to_controller(
    stream: &TcpStream,
    input: &mut impl BufRead,
    token: &str,
    role: Role,
) -> Result<(), BenchError> {
    stream.set_read_timeout(Some(HELLO_TIMEOUT))?;
    stream.set_write_timeout(Some(LINK_TIMEOUT))?;
    let mut out = stream;
    let a = nonce()?;
    send(
        &mut out,
        &ToController::Hello {
            pid: std::process::id(),
            role,
            nonce: a.clone(),
        },
    )?;
    let (c, proof) = match recv::<ToAgent>(input, MAX_HELLO_LINE)? {
        Some(ToAgent::Challenge { nonce, proof }) => (nonce, proof),
        Some(_) => return Err(BenchError::Protocol("expected a challenge".into())),
        None => {
            return Err(BenchError::Protocol(
                "the controller closed the link (a wrong --token?)".into(),
            ))
        }
    };
    if !verify(token, Side::Controller, &a, &c, &proof) {
        return Err(BenchError::Protocol(
            "the controller does not know the token: check --token (or THRONG_BENCH_TOKEN)".into(),
        ));
    }
    send(
        &mut out,
        &ToController::Proof {
            proof: prove(token, Side::Agent, &a, &c),
        },
    )?;
    stream.set_read_timeout(Some(LINK_TIMEOUT))?;
    Ok(())
}

/// The controller's side: read the hello, prove ourselves, check the
/// agent's proof. Returns the agent's pid and role. On error the caller
/// drops the link (a stranger, or an agent with another token) and goes on.
pub fn authenticate_agent(
    stream: &TcpStream,
    input: &mut impl BufRead,
    token: &str,
) -> Result<(u32, Role), BenchError> {
    stream.set_read_timeout(Some(HELLO_TIMEOUT))?;
    stream.set_write_timeout(Some(HELLO_TIMEOUT))?;
    let mut out = stream;
    let (pid, role, a) = match recv::<ToController>(input, MAX_HELLO_LINE)? {
        Some(ToController::Hello { pid, role, nonce }) if nonce.len() <= 128 => (pid, role, nonce),
        _ => return Err(BenchError::Protocol("expected a hello".into())),
    };
    let c = nonce()?;
    send(
        &mut out,
        &ToAgent::Challenge {
            proof: prove(token, Side::Controller, &a, &c),
            nonce: c.clone(),
        },
    )?;
    match recv::<ToController>(input, MAX_HELLO_LINE)? {
        Some(ToController::Proof { proof }) if verify(token, Side::Agent, &a, &c, &proof) => {}
        Some(ToController::Proof { .. }) => return Err(BenchError::Protocol("wrong token".into())),
        Some(_) => return Err(BenchError::Protocol("expected a proof".into())),
        None => {
            return Err(BenchError::Protocol(
                "the peer left before proving the token (another --token?)".into(),
            ))
        }
    }
    // No read timeout: silence is the controller's to judge (see the
    // module docs), not the socket's.
    stream.set_read_timeout(None)?;
    stream.set_write_timeout(Some(LINK_TIMEOUT))?;
    Ok((pid, role))
}

#[cfg(test)]
mod tests {
    use std::io::BufReader;
    use std::net::TcpListener;

    use super::*;
    use crate::scenario::{chat, Phase};
    use throng_protocol::Vsn;

    #[test]
    fn round_trips_as_json_lines() {
        let plan = ToAgent::Plan(Box::new(Plan {
            index: 1,
            agents: 2,
            scenario: chat(Phase::at_rate(10, 100.0), 1, 1, 0.1, Vsn::V1),
            target: "127.0.0.1:4000".parse().unwrap(),
            host: "127.0.0.1:4000".into(),
            bind_sources: true,
            capacity: 19_000,
            adaptive: false,
            tls: None,
            auth_jwt_secret: None,
        }));
        let mut buf = Vec::new();
        send(&mut buf, &plan).unwrap();
        send(&mut buf, &ToAgent::Start).unwrap();
        assert!(buf.starts_with(b"{\"type\":\"plan\""));
        let mut r = std::io::BufReader::new(&buf[..]);
        let Some(ToAgent::Plan(p)) = recv::<ToAgent>(&mut r, MAX_LINE).unwrap() else {
            panic!()
        };
        assert_eq!(
            p.scenario,
            chat(Phase::at_rate(10, 100.0), 1, 1, 0.1, Vsn::V1)
        );
        assert!(matches!(
            recv::<ToAgent>(&mut r, MAX_LINE).unwrap(),
            Some(ToAgent::Start)
        ));
        assert!(recv::<ToAgent>(&mut r, MAX_LINE).unwrap().is_none());
    }

    /// Progress with server close codes crosses the link (the codes are map
    /// keys inside a tagged message).
    #[test]
    fn progress_with_close_codes_round_trips() {
        let mut counters = crate::stats::Counters::default();
        counters.errors.closed = 3;
        counters.errors.detail.close_codes.insert(1001, 2);
        counters.errors.detail.close_codes.insert(1011, 1);
        let mut buf = Vec::new();
        send(
            &mut buf,
            &ToController::Progress(Box::new(counters.clone())),
        )
        .unwrap();
        let mut r = std::io::BufReader::new(&buf[..]);
        let Some(ToController::Progress(c)) = recv::<ToController>(&mut r, MAX_LINE).unwrap()
        else {
            panic!("not a progress message")
        };
        assert_eq!(
            c.errors.detail.close_codes,
            counters.errors.detail.close_codes
        );
    }

    #[test]
    fn lines_are_bounded() {
        let mut long = vec![b'x'; 100];
        long.push(b'\n');
        let e = recv::<ToAgent>(&mut &long[..], 50).unwrap_err().to_string();
        assert!(e.contains("longer than 50"), "{e}");
        // Cut short by the end of the stream.
        let e = recv::<ToAgent>(&mut &b"{\"type\":"[..], 50)
            .unwrap_err()
            .to_string();
        assert!(e.contains("middle of a line"), "{e}");
        // Exactly at the bound is fine.
        let ok = b"{\"type\":\"ping\"}\n";
        assert!(matches!(
            recv::<ToAgent>(&mut &ok[..], ok.len()).unwrap(),
            Some(ToAgent::Ping)
        ));
    }

    #[test]
    fn proofs_bind_token_side_and_nonces() {
        let p = prove("t", Side::Agent, "a", "c");
        assert!(verify("t", Side::Agent, "a", "c", &p));
        assert!(!verify("u", Side::Agent, "a", "c", &p));
        assert!(!verify("t", Side::Controller, "a", "c", &p));
        assert!(!verify("t", Side::Agent, "a", "d", &p));
        assert!(!verify("t", Side::Agent, "a", "c", "zz"));
        assert_eq!(new_token().unwrap().len(), 32);
        assert_ne!(new_token().unwrap(), new_token().unwrap());
    }

    /// Both sides of the handshake over a real socket: the same token opens
    /// the link, another is refused by whichever side checks first.
    fn handshake(
        controller_token: &str,
        agent_token: &str,
    ) -> (Result<(u32, Role), String>, Result<(), String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let agent_token = agent_token.to_string();
        let agent = std::thread::spawn(move || {
            let s = TcpStream::connect(addr).unwrap();
            let mut input = BufReader::new(s.try_clone().unwrap());
            authenticate_to_controller(&s, &mut input, &agent_token, Role::FloorWriter)
                .map_err(|e| e.to_string())
        });
        let (s, _) = l.accept().unwrap();
        let mut input = BufReader::new(s.try_clone().unwrap());
        let c = authenticate_agent(&s, &mut input, controller_token).map_err(|e| e.to_string());
        drop(s);
        (c, agent.join().unwrap())
    }

    #[test]
    fn agents_and_controllers_prove_the_token_to_each_other() {
        let (c, a) = handshake("secret", "secret");
        assert_eq!(c, Ok((std::process::id(), Role::FloorWriter)));
        assert_eq!(a, Ok(()));
        let (c, a) = handshake("secret", "guess");
        let a = a.unwrap_err();
        assert!(a.contains("does not know the token"), "{a}");
        assert!(c.is_err(), "the agent sent no proof");
    }

    /// A stranger that sends an endless line is dropped after 4 KiB (one
    /// that says nothing, after `HELLO_TIMEOUT`: not waited for here).
    #[test]
    fn strangers_are_bounded() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let flood = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let _ = s.write_all(&vec![b'{'; 64 * 1024]);
            s
        });
        let (s, _) = l.accept().unwrap();
        let mut input = BufReader::new(s.try_clone().unwrap());
        let e = authenticate_agent(&s, &mut input, "t").unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
        // Closed before waiting for the flood: with small socket buffers
        // (`throng tune`'s 4 KiB) its write would block on us forever.
        drop((input, s));
        drop(flood.join());
    }
}
