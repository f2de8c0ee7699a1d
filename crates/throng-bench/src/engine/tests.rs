//! The engine against a stand-in Phoenix server on threads: a whole
//! session (connect, join, barrier, broadcasts) for each serializer, and
//! replies sent as v2 binary frames.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use throng_protocol::frame::{decode_frame, encode_frame, Opcode};
use throng_protocol::{serializer, Payload, Vsn};

use super::Engine;
use crate::plan::Plan;
use crate::scenario::{chat, Phase};

/// A stand-in Phoenix server on threads: upgrades, answers joins (even
/// users `ok`, odd users `error`; with `binary_replies`, as v2 binary
/// reply frames), and sends every `new:msg` to everyone.
fn stand_in_server(vsn: Vsn, binary_replies: bool) -> SocketAddr {
    use std::io::{Read as _, Write as _};
    use std::sync::{Arc, Mutex};
    use throng_protocol::handshake::{accept_key, write_response};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peers: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { break };
            let peers = Arc::clone(&peers);
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut chunk).unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let key = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
                    .unwrap()
                    .trim()
                    .to_string();
                let mut out = Vec::new();
                write_response(&mut out, &accept_key(key.as_bytes()));
                s.write_all(&out).unwrap();
                peers.lock().unwrap().push(s.try_clone().unwrap());
                let mut pending: Vec<u8> = Vec::new();
                loop {
                    while let Ok(Some(f)) =
                        decode_frame(&mut pending, throng_protocol::Role::Server, 1 << 20)
                    {
                        let data = pending[f.payload.clone()].to_vec();
                        pending.drain(..f.consumed);
                        if f.opcode != Opcode::Text {
                            continue;
                        }
                        let m = serializer::decode(
                            vsn,
                            Opcode::Text,
                            &data,
                            serializer::Sender::Client,
                        )
                        .unwrap();
                        let mut msg = Vec::new();
                        match &*m.event {
                            "phx_join" => {
                                let user: u64 = match m.payload {
                                    Payload::Json(p) => {
                                        serde_json::from_str::<serde_json::Value>(p)
                                            .ok()
                                            .and_then(|v| v["user"].as_str()?.parse().ok())
                                            .unwrap_or(0)
                                    }
                                    Payload::Binary(_) => 0,
                                };
                                let odd = user % 2 == 1;
                                let (status, resp) = if odd {
                                    ("error", r#"{"reason":"odd"}"#)
                                } else {
                                    ("ok", "{}")
                                };
                                let response = if binary_replies {
                                    Payload::Binary(resp.as_bytes())
                                } else {
                                    Payload::Json(resp)
                                };
                                let opcode = serializer::encode_reply(
                                    vsn,
                                    &mut msg,
                                    m.join_ref.as_deref(),
                                    m.msg_ref.as_deref(),
                                    &m.topic,
                                    status,
                                    response,
                                )
                                .unwrap();
                                let mut frame = Vec::new();
                                encode_frame(&mut frame, opcode, &msg, None);
                                s.write_all(&frame).unwrap();
                            }
                            "new:msg" => {
                                serializer::encode_broadcast(
                                    vsn, &mut msg, &m.topic, &m.event, m.payload,
                                )
                                .unwrap();
                                let mut frame = Vec::new();
                                encode_frame(&mut frame, Opcode::Text, &msg, None);
                                for p in peers.lock().unwrap().iter_mut() {
                                    let _ = p.write_all(&frame);
                                }
                            }
                            _ => {}
                        }
                    }
                    let n = s.read(&mut chunk).unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    pending.extend_from_slice(&chunk[..n]);
                }
            });
        }
    });
    addr
}

fn run_engine(ser: Vsn, binary_replies: bool) {
    let addr = stand_in_server(ser, binary_replies);
    let users = 20;
    let mut engine = Engine::new(Plan {
        scenario: chat(Phase::at_rate(users, 2000.0), 1, 2, 0.0, ser),
        target: addr,
        host: addr.to_string(),
        bind_sources: true,
        index: 0,
        agents: 1,
        capacity: 1000,
        adaptive: false,
    })
    .unwrap();
    engine.start();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        engine.turn(Duration::from_millis(5)).unwrap();
        engine.refresh_gauges();
        let c = &engine.counters;
        if c.arrivals_done && c.connecting == 0 && c.awaiting == 0 && c.at_barrier == users {
            break;
        }
        assert!(Instant::now() < deadline, "did not settle: {c:?}");
    }
    engine.release();
    while engine.counters.bcast_recv < 2 * users {
        engine.turn(Duration::from_millis(5)).unwrap();
        assert!(
            Instant::now() < deadline,
            "broadcasts missing: {:?}",
            engine.counters
        );
    }
    engine.refresh_gauges();
    let c = &engine.counters;
    assert_eq!(c.connected, users);
    assert_eq!(c.joined, users / 2, "even users are accepted");
    assert_eq!(c.errors.error_reply, users / 2, "odd users are refused");
    assert_eq!(c.errors.total(), users / 2);
    assert_eq!(c.bcast_sent, 2);
    assert_eq!(c.holding, users, "everyone holds after the barrier");
    assert_eq!(engine.hists.join.len(), users);
    assert_eq!(engine.hists.broadcast.len(), 2 * users);
    assert_eq!(engine.bcasts.len(), 2);
    assert!(engine
        .bcasts
        .values()
        .all(|b| b.recv == users && b.sent_ns > 0));
    assert_eq!(engine.storm(), users as usize);
}

#[test]
fn engine_runs_a_session_against_a_stand_in_server_v2() {
    run_engine(Vsn::V2, false);
}

#[test]
fn engine_runs_a_session_against_a_stand_in_server_v1() {
    run_engine(Vsn::V1, false);
}

/// A v2 reply may come as a binary frame (Phoenix sends one when the
/// channel replies `{:binary, data}`): its status decodes where other
/// messages carry their event, and the join must still be timed and
/// counted, `ok` or not.
#[test]
fn engine_counts_binary_replies() {
    run_engine(Vsn::V2, true);
}

/// A server that upgrades every connection, then closes it with a close
/// frame of code 1011: each error is counted as closed, under its code.
#[test]
fn engine_counts_close_codes() {
    use std::io::{Read as _, Write as _};
    use throng_protocol::frame::encode_close;
    use throng_protocol::handshake::{accept_key, write_response};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { break };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut chunk) {
                    Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => break,
                }
            }
            let head = String::from_utf8_lossy(&buf).to_string();
            let Some(key) = head
                .lines()
                .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
            else {
                continue;
            };
            let mut out = Vec::new();
            write_response(&mut out, &accept_key(key.trim().as_bytes()));
            encode_close(&mut out, 1011, "test", None);
            let _ = s.write_all(&out);
        }
    });
    let users = 5;
    let mut engine = Engine::new(Plan {
        scenario: chat(Phase::at_rate(users, 1000.0), 0, 0, 0.0, Vsn::V2),
        target: addr,
        host: addr.to_string(),
        bind_sources: true,
        index: 0,
        agents: 1,
        capacity: 100,
        adaptive: false,
    })
    .unwrap();
    engine.start();
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.counters.errors.total() < users {
        engine.turn(Duration::from_millis(5)).unwrap();
        assert!(Instant::now() < deadline, "{:?}", engine.counters);
    }
    let e = &engine.counters.errors;
    assert_eq!(e.closed, users);
    assert_eq!(e.detail.close_codes.get(&1011), Some(&users));
}
