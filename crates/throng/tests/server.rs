//! Integration tests: the real `throng` binary on 127.0.0.1, port 0, driven
//! by a small blocking client built on `throng-protocol`. These cover what the
//! phoenix.js suite (tests/e2e) cannot see: the idle sweep, slow readers,
//! fan-out across shards, and the process's memory per connection.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::{Client, Server};

#[test]
fn broadcast_reaches_subscribers_on_every_shard() {
    let server = Server::start(&["--shards", "4"]);
    let mut clients: Vec<Client> = (0..64).map(|_| Client::connect(server.addr)).collect();
    for c in &mut clients {
        c.join_lobby();
    }
    assert_eq!(server.metric("throng_channels_joined"), 64);
    clients[0].push("rooms:lobby", "new:msg", r#"{"user":"u","body":"b"}"#);
    for (i, c) in clients.iter_mut().enumerate() {
        let (topic, event, payload) = c.next_message();
        assert_eq!(
            (topic.as_str(), event.as_str()),
            ("rooms:lobby", "new:msg"),
            "client {i}"
        );
        assert_eq!(payload, r#"{"body":"b","user":"u"}"#);
    }
    // Every shard that holds a subscriber counted the broadcast once.
    let fanouts = server.metric("throng_broadcasts_total");
    assert!(
        (2..=4).contains(&fanouts),
        "64 sockets over 4 shards gave {fanouts} shard deliveries"
    );
}

#[test]
fn idle_sockets_are_swept_and_active_ones_stay() {
    let server = Server::start(&["--idle-timeout", "2"]);
    let mut idle = Client::connect(server.addr);
    idle.join_lobby();
    let mut active = Client::connect(server.addr);
    active.join_lobby();
    let start = Instant::now();
    // The active one heartbeats every 500 ms; the idle one says nothing.
    let mut closed = None;
    while start.elapsed() < Duration::from_secs(8) && closed.is_none() {
        active.push("phoenix", "heartbeat", "{}");
        let (_, event, _) = active.next_message();
        assert_eq!(event, "phx_reply");
        idle.sock
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut b = [0u8; 64];
        match idle.sock.read(&mut b) {
            Ok(0) => closed = Some(start.elapsed()),
            Ok(n) => {
                // The going-away close frame, then EOF.
                assert_eq!(b[0], 0x88, "expected a close frame, got {:?}", &b[..n]);
                assert_eq!(u16::from_be_bytes([b[2], b[3]]), 1001);
                closed = Some(start.elapsed());
            }
            Err(_) => {}
        }
    }
    let after = closed.expect("idle socket was never closed");
    assert!(
        after >= Duration::from_secs(1),
        "closed too early: {after:?}"
    );
    assert_eq!(server.metric("throng_idle_timeout_closes_total"), 1);
    assert_eq!(server.await_metric("throng_websockets", 5, |v| v == 1), 1);
}

/// A socket whose client spoke is not idle, even when the server has not
/// read it yet: the server is stopped past the idle timeout while 1,100
/// clients (more than one turn's batch of events) each send a heartbeat,
/// then resumed. Every one must get its reply and none an idle close.
#[test]
fn unread_input_is_not_idleness() {
    let server = Server::start(&["--idle-timeout", "2", "--shards", "1"]);
    let mut clients: Vec<Client> = (0..1100).map(|_| Client::connect(server.addr)).collect();
    assert_eq!(
        server.await_metric("throng_websockets", 10, |v| v == 1100),
        1100
    );
    server.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    for c in &mut clients {
        c.push("phoenix", "heartbeat", "{}");
    }
    // Stopped for longer than the timeout, as a loop busy writing is.
    std::thread::sleep(Duration::from_millis(3500).saturating_sub(stopped.elapsed()));
    server.signal(libc::SIGCONT);
    for c in &mut clients {
        c.sock
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        // Closed as idle, the client would read the close frame instead.
        let (_, event, _) = c.next_message();
        assert_eq!(event, "phx_reply", "a client that spoke was answered");
    }
}

#[test]
fn slow_reader_is_cut_and_others_keep_receiving() {
    // The fast client pushes a broadcast per round trip, past the default
    // push budget: no budget here.
    let server = Server::start(&[
        "--max-outbound-bytes",
        "65536",
        "--shards",
        "1",
        "--push-rate",
        "0",
    ]);
    // A reader that never reads, with a tiny receive buffer.
    let slow = {
        let mut c = Client::over(common::small_buffer_socket(server.addr, 4096));
        c.join_lobby();
        c
    };
    let mut fast = Client::connect(server.addr);
    fast.join_lobby();
    let body = "x".repeat(4000);
    let mut sent = 0;
    while server.metric("throng_slow_reader_closes_total") == 0 {
        assert!(sent < 2000, "slow reader never cut after {sent} broadcasts");
        fast.push(
            "rooms:lobby",
            "new:msg",
            &format!(r#"{{"user":"f","body":"{body}"}}"#),
        );
        sent += 1;
        // The fast reader gets its broadcast and its reply every time.
        let mut got = 0;
        while got < 2 {
            let (_, event, _) = fast.next_message();
            if event == "new:msg" || event == "phx_reply" {
                got += 1;
            }
        }
    }
    assert!(sent > 5, "cut after only {sent} broadcasts");
    assert_eq!(server.await_metric("throng_websockets", 5, |v| v == 1), 1);
    // Reading now, the slow reader gets what was in flight, whole frames,
    // then a close frame saying why (policy violation, "slow reader").
    let mut slow = slow;
    assert_eq!(slow.read_to_end(), common::End::Close(Some(1008)));
    // The server still serves everyone else.
    fast.push("phoenix", "heartbeat", "{}");
    assert_eq!(fast.next_message().1, "phx_reply");
}

#[test]
fn idle_joined_connections_cost_little_memory() {
    // A sanity bound, not the benchmark (BENCHMARKS.md has the figures at 18,000).
    let server = Server::start(&["--idle-timeout", "0"]);
    let before = server.metric("throng_process_resident_memory_bytes");
    let mut clients: Vec<Client> = (0..2000).map(|_| Client::connect(server.addr)).collect();
    for c in &mut clients {
        c.join_lobby();
    }
    let after = server.metric("throng_process_resident_memory_bytes");
    let per_conn = after.saturating_sub(before) / 2000;
    assert!(
        per_conn < 2048,
        "{per_conn} bytes of server RSS per idle joined connection"
    );
}
