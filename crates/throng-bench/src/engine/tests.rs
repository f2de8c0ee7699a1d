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

/// Reads an upgrade request from `s` and returns the 101 that answers it;
/// `None` when the peer closes (or errs) before a whole request with a
/// `Sec-WebSocket-Key`.
fn read_upgrade(s: &mut std::net::TcpStream) -> Option<Vec<u8>> {
    use std::io::Read as _;
    use throng_protocol::handshake::{accept_key, write_response};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut chunk) {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf);
    let key = head
        .lines()
        .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))?;
    let mut out = Vec::new();
    write_response(&mut out, &accept_key(key.trim().as_bytes()));
    Some(out)
}

/// A stand-in Phoenix server on threads: upgrades, answers joins (even
/// users `ok`, odd users `error`; with `binary_replies`, as v2 binary
/// reply frames), and sends every `new:msg` to everyone.
fn stand_in_server(vsn: Vsn, binary_replies: bool) -> SocketAddr {
    use std::io::{Read as _, Write as _};
    use std::sync::{Arc, Mutex};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peers: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { break };
            let peers = Arc::clone(&peers);
            std::thread::spawn(move || {
                let Some(out) = read_upgrade(&mut s) else {
                    return;
                };
                s.write_all(&out).unwrap();
                peers.lock().unwrap().push(s.try_clone().unwrap());
                let mut chunk = [0u8; 4096];
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

/// One agent's engine for `sc` against `addr`, started.
fn started_engine(sc: crate::scenario::Scenario, addr: SocketAddr) -> Engine {
    let mut engine = Engine::new(Plan {
        scenario: sc,
        target: addr,
        host: addr.to_string(),
        bind_sources: true,
        index: 0,
        agents: 1,
        capacity: 1000,
        adaptive: false,
        tls: None,
        auth_jwt_secret: None,
    })
    .unwrap();
    engine.start();
    engine
}

fn run_engine(ser: Vsn, binary_replies: bool) {
    let addr = stand_in_server(ser, binary_replies);
    let users = 20;
    let mut engine = started_engine(chat(Phase::at_rate(users, 2000.0), 1, 2, 0.0, ser), addr);
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
    use std::io::Write as _;
    use throng_protocol::frame::encode_close;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { break };
            let Some(mut out) = read_upgrade(&mut s) else {
                continue;
            };
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
        tls: None,
        auth_jwt_secret: None,
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

/// Writes `frame` in 48 KiB pieces with a pause between, so the client
/// reads it in many partial reads.
fn write_in_pieces(s: &mut std::net::TcpStream, frame: &[u8]) {
    use std::io::Write as _;
    for piece in frame.chunks(48 * 1024) {
        s.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A stand-in Phoenix server with presence, sending messages far larger
/// than the agent's 256 KiB read buffer: each join is answered `ok` and
/// pushed a `presence_state` of ~700 KB (list) or `presence_count` (count);
/// once all `users` have joined, one connection's thread sends everyone a
/// `presence_diff` of ~400 KB joining every user and 7,000 keys that are
/// not user ids and one of ~110 KB (within the read buffer) of leaves
/// (list), or `{"count": users}` (count), then a ~300 KB
/// `new:msg` carrying a broadcast stamp. Every large frame is written in
/// pieces.
fn presence_server(users: u64, count: bool) -> SocketAddr {
    use std::io::{Read as _, Write as _};
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::{Arc, Mutex};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peers: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
    // Joins answered, and states written (the diff waits for all of them).
    let joined = Arc::new(AtomicU64::new(0));
    let stated = Arc::new(AtomicU64::new(0));
    let frame = |event: &str, join_ref: Option<&str>, payload: &str| {
        let mut msg = Vec::new();
        serializer::encode_message(
            Vsn::V2,
            &mut msg,
            join_ref,
            None,
            "rooms:lobby",
            event,
            Payload::Json(payload),
        )
        .unwrap();
        let mut f = Vec::new();
        encode_frame(&mut f, Opcode::Text, &msg, None);
        f
    };
    let meta =
        |i: &str| format!(r#""{i}":{{"metas":[{{"phx_ref":"ref{i}","online_at":1700000000}}]}}"#);
    let state: Vec<String> = (0..12_000).map(|i| meta(&format!("x{i}"))).collect();
    let state = Arc::new(format!("{{{}}}", state.join(",")));
    let mut joins: Vec<String> = (1..=users).map(|u| meta(&u.to_string())).collect();
    joins.extend((0..7_000).map(|i| meta(&format!("p{i}"))));
    let diff = Arc::new(format!(
        r#"{{"joins":{{{}}},"leaves":{{}}}}"#,
        joins.join(",")
    ));
    // A second diff within the read buffer (~110 KB), also written in pieces.
    let leaves: Vec<String> = (0..2_000).map(|i| meta(&format!("p{i}"))).collect();
    let diff2 = Arc::new(format!(
        r#"{{"joins":{{}},"leaves":{{{}}}}}"#,
        leaves.join(",")
    ));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { break };
            let (peers, joined, stated, state, diff, diff2) = (
                Arc::clone(&peers),
                Arc::clone(&joined),
                Arc::clone(&stated),
                Arc::clone(&state),
                Arc::clone(&diff),
                Arc::clone(&diff2),
            );
            std::thread::spawn(move || {
                let Some(out) = read_upgrade(&mut s) else {
                    return;
                };
                s.write_all(&out).unwrap();
                peers.lock().unwrap().push(s.try_clone().unwrap());
                let mut chunk = [0u8; 4096];
                let mut pending: Vec<u8> = Vec::new();
                loop {
                    while let Ok(Some(f)) =
                        decode_frame(&mut pending, throng_protocol::Role::Server, 1 << 20)
                    {
                        let data = pending[f.payload.clone()].to_vec();
                        pending.drain(..f.consumed);
                        let m = serializer::decode(
                            Vsn::V2,
                            f.opcode,
                            &data,
                            serializer::Sender::Client,
                        )
                        .unwrap();
                        if m.event != "phx_join" {
                            continue;
                        }
                        let mut msg = Vec::new();
                        serializer::encode_reply(
                            Vsn::V2,
                            &mut msg,
                            m.join_ref.as_deref(),
                            m.msg_ref.as_deref(),
                            &m.topic,
                            "ok",
                            Payload::Json("{}"),
                        )
                        .unwrap();
                        let mut reply = Vec::new();
                        encode_frame(&mut reply, Opcode::Text, &msg, None);
                        s.write_all(&reply).unwrap();
                        let jr = m.join_ref.as_deref();
                        // The count before this join, as a server's last flush says.
                        let n = joined.fetch_add(1, SeqCst);
                        if count {
                            s.write_all(&frame(
                                "presence_count",
                                jr,
                                &format!(r#"{{"count":{n}}}"#),
                            ))
                            .unwrap();
                        } else {
                            write_in_pieces(&mut s, &frame("presence_state", jr, &state));
                        }
                        if stated.fetch_add(1, SeqCst) + 1 == users {
                            // Everyone has joined and had its state: the diff.
                            let mut d = if count {
                                frame("presence_count", None, &format!(r#"{{"count":{users}}}"#))
                            } else {
                                frame("presence_diff", None, &diff)
                            };
                            if !count {
                                d.extend(frame("presence_diff", None, &diff2));
                            }
                            let stamp = format!(
                                r#"{{"body":"throng:1:99:{}","pad":"{}"}}"#,
                                crate::sys::realtime_ns(),
                                "y".repeat(300_000)
                            );
                            let big = frame("new:msg", None, &stamp);
                            for p in peers.lock().unwrap().iter_mut() {
                                write_in_pieces(p, &d);
                                write_in_pieces(p, &big);
                            }
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

/// Presence through the engine, with messages up to ~700 KB (beyond the
/// shared read buffer): states and diffs counted by kind and bytes, the
/// diff recorded once with every receipt and its keys, each presence
/// join's time recorded; a large non-presence message still handled
/// whole (its stamp timed). Count mode: each subscriber's step from the
/// count it joined with to the broadcast count.
fn run_presence(count: bool) {
    let users = 12;
    let addr = presence_server(users, count);
    let mut sc = chat(Phase::at_rate(users, 2000.0), 0, 0, 0.0, Vsn::V2);
    sc.presence = Some(
        if count {
            "rooms:lobby=param:user/count"
        } else {
            "rooms:lobby=param:user"
        }
        .into(),
    );
    let mut engine = started_engine(sc, addr);
    let deadline = Instant::now() + Duration::from_secs(20);
    while engine.counters.bcast_recv < users {
        engine.turn(Duration::from_millis(5)).unwrap();
        assert!(Instant::now() < deadline, "{:?}", engine.counters);
    }
    engine.refresh_gauges();
    let c = &engine.counters;
    assert_eq!(
        (c.joined, c.errors.total(), c.open),
        (users, 0, users),
        "{c:?}"
    );
    assert_eq!(engine.presence.joins.len() as u64, users);
    let mut joiners: Vec<u32> = engine.presence.joins.iter().map(|j| j.0).collect();
    joiners.sort_unstable();
    assert_eq!(joiners, (1..=users as u32).collect::<Vec<_>>());
    let p = &c.presence;
    if count {
        assert_eq!(
            (p.count.messages, p.state.messages, p.diff.messages),
            (2 * users, 0, 0)
        );
        // The k-th joiner's state said k - 1: its step is (k - 1) -> users.
        let mut steps: Vec<(u32, u32)> = engine.presence.counts.keys().copied().collect();
        steps.sort_unstable();
        let want: Vec<(u32, u32)> = (0..users as u32).map(|k| (k, users as u32)).collect();
        assert_eq!(steps, want);
    } else {
        assert_eq!((p.state.messages, p.diff.messages), (users, 2 * users));
        assert!(p.state.bytes > users * 600_000, "{p:?}");
        assert!(p.diff.bytes / users > 400_000, "{p:?}");
        assert_eq!(engine.presence.diffs.len(), 2, "two distinct diffs");
        assert!(engine.presence.diffs.values().all(|d| d.receipts == users));
        let d = engine
            .presence
            .diffs
            .values()
            .find(|d| d.keys.as_ref().is_some_and(|k| !k.is_empty()))
            .expect("the diff of joins");
        let mut keys = d.keys.clone().expect("parsed once");
        keys.sort_unstable();
        assert_eq!(keys, (1..=users as u32).collect::<Vec<_>>());
        assert_eq!(d.unmatched, 7_000);
        assert!(
            engine.presence.heads.len() <= 2,
            "one reader per diff at most"
        );
    }
    assert!(
        c.bytes_in > p.total().bytes + users * 300_000,
        "the big new:msg counted too"
    );
    assert_eq!(engine.hists.broadcast.len(), users, "its stamp timed");
    // Nothing is kept once every message is whole.
    assert!(engine.conns.iter().all(|(_, c)| c.rx.is_none()));
}

#[test]
fn engine_reads_large_presence_messages_list() {
    run_presence(false);
}

#[test]
fn engine_follows_presence_counts() {
    run_presence(true);
}

/// Runs `users` connections beating every 0.3 s on a `grid` s grid until
/// each has sent three heartbeats; returns the wall-clock ms (Unix epoch)
/// of every heartbeat time the engine chose.
fn heartbeat_times(grid: f64) -> Vec<u64> {
    let addr = stand_in_server(Vsn::V2, false);
    let users = 16;
    let mut sc = chat(Phase::at_rate(users, 2000.0), 0, 1, 0.0, Vsn::V2);
    sc.heartbeat = 0.3;
    sc.heartbeat_grid = grid;
    let mut engine = started_engine(sc, addr);
    let wall0 = engine.epoch_rt_ns / 1_000_000;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while engine.counters.hb_sent < 3 * users {
        engine.turn(Duration::from_millis(5)).unwrap();
        for (_, c) in engine.conns.iter() {
            if c.hb_ms != 0 && !seen.contains(&(c.user, c.hb_ms)) {
                seen.push((c.user, c.hb_ms));
            }
        }
        assert!(
            Instant::now() < deadline,
            "heartbeats missing: {:?}",
            engine.counters
        );
    }
    seen.into_iter().map(|(_, ms)| wall0 + ms as u64).collect()
}

/// Heartbeats fall on the grid the agents share (points of the Unix epoch's
/// milliseconds), whatever the engine's own start; without a grid they
/// keep each connection's own phase.
#[test]
fn heartbeats_fall_on_the_shared_grid() {
    let on = heartbeat_times(0.1);
    assert!(on.len() >= 32, "{on:?}");
    // The engine's realtime mark and its monotonic zero are read one after
    // the other: a point may be 1 ms off.
    assert!(
        on.iter().all(|ms| matches!(ms % 100, 0 | 1 | 99)),
        "off the grid: {on:?}"
    );
    let off = heartbeat_times(0.0);
    let phases: std::collections::BTreeSet<u64> = off.iter().map(|ms| ms % 100 / 5).collect();
    assert!(phases.len() > 3, "without a grid, phases spread: {off:?}");
}

/// Floor sockets on a sample of this agent's users: only the sample's
/// count opens, and each heartbeats as many times more often as the
/// sample is smaller (the run's heartbeats a second, on fewer sockets).
#[test]
fn a_floor_sample_opens_its_share_and_beats_faster() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut sc = chat(Phase::at_rate(8, 1000.0), 0, 0, 0.0, Vsn::V2);
    sc.heartbeat = 30.0;
    let mut engine = Engine::new(Plan {
        scenario: sc,
        target: addr,
        host: addr.to_string(),
        bind_sources: true,
        index: 0,
        agents: 1,
        capacity: 100,
        adaptive: false,
        tls: None,
        auth_jwt_secret: None,
    })
    .unwrap();
    engine.floor_connect(vec![addr], Some(2), Some(0.25));
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.counters.floor_open < 2 {
        engine.turn(Duration::from_millis(5)).unwrap();
        assert!(Instant::now() < deadline, "{:?}", engine.counters);
    }
    engine.turn(Duration::from_millis(5)).unwrap();
    assert_eq!(engine.counters.floor_open, 2, "only the sample opens");
    let floor: Vec<usize> = engine
        .conns
        .iter()
        .filter(|(_, c)| c.state.is_floor())
        .map(|(t, _)| t)
        .collect();
    assert_eq!(floor.len(), 2);
    for t in floor {
        assert_eq!(engine.heartbeat_interval(t), 7_500);
    }
    // Without a sample: the users' own interval.
    engine.floor_close();
    engine.floor_connect(vec![addr], None, None);
    assert_eq!(engine.floor_hb_ms, 30_000);
    drop(listener);
}
