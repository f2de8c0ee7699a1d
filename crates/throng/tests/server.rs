//! Integration tests: the real `throng` binary on 127.0.0.1, port 0, driven
//! by a small blocking client built on `throng-protocol`. These cover what the
//! phoenix.js suite (tests/e2e) cannot see: the idle sweep, slow readers,
//! fan-out across shards, and the process's memory per connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use throng_protocol::frame::{decode_frame, encode_frame, Opcode, Role};
use throng_protocol::handshake::{parse_client_response, write_client_request};
use throng_protocol::serializer::{decode, Sender};
use throng_protocol::Vsn;

struct Server {
    child: Child,
    addr: SocketAddr,
    /// The server API listener (`/metrics` lives there).
    api: SocketAddr,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_throng"))
            .args(["serve", "--port", "0", "--bind", "127.0.0.1"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start throng");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut api = None;
        let addr = loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "no listening line");
            if let Some(a) = line.trim().strip_prefix("api at ") {
                api = Some(a.parse().unwrap());
            }
            if let Some(a) = line.trim().strip_prefix("listening on ") {
                break a.parse().unwrap();
            }
        };
        let api = api.expect("the server API listens by default");
        Server { child, addr, api }
    }

    fn metric(&self, name: &str) -> u64 {
        let mut s = TcpStream::connect(self.api).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| v as u64)
            .unwrap_or_else(|| panic!("no metric {name}"))
    }

    /// Polls a metric until `pred` holds; panics after `secs`.
    fn await_metric(&self, name: &str, secs: u64, pred: impl Fn(u64) -> bool) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.metric(name);
            if pred(v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{name} stayed at {v}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking WebSocket client speaking v2.
struct Client {
    sock: TcpStream,
    buf: Vec<u8>,
    next_ref: u64,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let mut sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut req = Vec::new();
        let accept = write_client_request(&mut req, "t", "/socket/websocket?vsn=2.0.0", [7; 16]);
        sock.write_all(&req).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = sock.read(&mut chunk).unwrap();
            assert!(n > 0, "closed during handshake");
            buf.extend_from_slice(&chunk[..n]);
            if let Some(used) = parse_client_response(&buf, &accept).unwrap() {
                buf.drain(..used);
                break;
            }
        }
        Client {
            sock,
            buf,
            next_ref: 0,
        }
    }

    fn send_text(&mut self, text: &str) {
        let mut out = Vec::new();
        encode_frame(&mut out, Opcode::Text, text.as_bytes(), Some([1, 2, 3, 4]));
        self.sock.write_all(&out).unwrap();
    }

    fn push(&mut self, topic: &str, event: &str, payload: &str) -> String {
        self.next_ref += 1;
        let r = self.next_ref.to_string();
        self.send_text(&format!(r#"["1","{r}","{topic}","{event}",{payload}]"#));
        r
    }

    /// The next frame: (opcode, payload). `None` when the server closed.
    fn next_frame(&mut self) -> Option<(Opcode, Vec<u8>)> {
        let mut chunk = [0u8; 65536];
        loop {
            if let Some(f) = decode_frame(&mut self.buf, Role::Client, 1 << 24).unwrap() {
                let payload = self.buf[f.payload.clone()].to_vec();
                self.buf.drain(..f.consumed);
                return Some((f.opcode, payload));
            }
            match self.sock.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The next text message's (topic, event, payload JSON).
    fn next_message(&mut self) -> (String, String, String) {
        let (op, data) = self.next_frame().expect("connection closed");
        let m = decode(Vsn::V2, op, &data, Sender::Server).unwrap();
        let throng_protocol::Payload::Json(p) = m.payload else {
            panic!("binary")
        };
        (m.topic.into_owned(), m.event.into_owned(), p.to_string())
    }

    fn join_lobby(&mut self) {
        self.push("rooms:lobby", "phx_join", "{}");
        let (_, event, payload) = self.next_message();
        assert_eq!(event, "phx_reply");
        assert!(payload.contains(r#""status":"ok""#), "{payload}");
    }
}

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
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        sock.connect(&server.addr.into()).unwrap();
        let mut c = Client {
            sock: sock.into(),
            buf: Vec::new(),
            next_ref: 0,
        };
        let mut req = Vec::new();
        let accept = write_client_request(&mut req, "t", "/socket/websocket?vsn=2.0.0", [3; 16]);
        c.sock.write_all(&req).unwrap();
        let mut chunk = [0u8; 1024];
        loop {
            let n = c.sock.read(&mut chunk).unwrap();
            c.buf.extend_from_slice(&chunk[..n]);
            if let Some(used) = parse_client_response(&c.buf, &accept).unwrap() {
                c.buf.drain(..used);
                break;
            }
        }
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
    drop(slow);
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
