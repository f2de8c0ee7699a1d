//! Slow handshakes and connection caps (issue 12, item 3): an HTTP head
//! (the WebSocket upgrade included) must arrive whole within
//! `--handshake-timeout` however the bytes trickle in; heads over 16 KiB are
//! refused even when they arrive whole; `--max-connections` and
//! `--max-connections-per-ip` refuse (and count) what is over them.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{Client, Server};

/// Whether the server has ended `sock` (read EOF or a reset; a 408 first is fine).
fn ended(sock: &mut TcpStream) -> bool {
    let mut b = [0u8; 256];
    loop {
        match sock.read(&mut b) {
            Ok(0) => return true,
            Ok(n) => assert!(
                b[..n].starts_with(b"HTTP/1.1 408") || !b.starts_with(b"HTTP"),
                "{}",
                String::from_utf8_lossy(&b[..n])
            ),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn slowloris_sockets_are_closed_by_the_deadline_while_others_are_served() {
    const SLOW: usize = 1000;
    const DEADLINE: u64 = 3;
    let server = Server::start(&[
        "--handshake-timeout",
        &DEADLINE.to_string(),
        "--shards",
        "2",
    ]);
    let head = b"GET /socket/websocket?vsn=2.0.0 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n";
    let start = Instant::now();
    let mut slow: Vec<Option<TcpStream>> = (0..SLOW)
        .map(|_| {
            let s = TcpStream::connect(server.addr).unwrap();
            s.set_nonblocking(true).unwrap();
            Some(s)
        })
        .collect();
    let mut closed_at = Vec::new();
    let mut normal_served = 0;
    // A byte a second to every slow socket; each second a normal client
    // connects, joins and heartbeats. Bounded: 10 deadlines.
    for tick in 0..10 * DEADLINE as usize {
        for s in slow.iter_mut() {
            let Some(sock) = s else { continue };
            let gone = ended(sock) || sock.write(&head[tick % head.len()..][..1]).is_err();
            if gone {
                *s = None;
                closed_at.push(start.elapsed());
            }
        }
        if closed_at.len() == SLOW {
            break;
        }
        let mut c = Client::connect(server.addr);
        c.join_lobby();
        c.push("phoenix", "heartbeat", "{}");
        assert_eq!(c.next_message().1, "phx_reply");
        normal_served += 1;
        std::thread::sleep(Duration::from_secs(1));
    }
    let open = slow.iter().filter(|s| s.is_some()).count();
    assert_eq!(
        open,
        0,
        "{open} of {SLOW} trickling sockets still open after {:?}",
        start.elapsed()
    );
    eprintln!(
        "{SLOW} slowloris sockets closed between {:?} and {:?} (deadline {DEADLINE} s, swept once a second); {normal_served} normal clients served meanwhile",
        closed_at.iter().min().unwrap(),
        closed_at.iter().max().unwrap()
    );
    assert!(normal_served >= DEADLINE as usize);
    assert!(server.metric("throng_handshake_timeouts_total") >= SLOW as u64);
}

#[test]
fn a_whole_head_over_16_kib_is_refused() {
    let server = Server::start(&[]);
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "GET /socket/websocket HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(20 << 10)
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp);
    assert!(text.starts_with("HTTP/1.1 431 "), "{text}");
    assert_eq!(server.metric("throng_http_errors_total"), 1);
}

/// Reads a refused connection's answer.
fn refusal(mut s: TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    String::from_utf8_lossy(&resp).into_owned()
}

/// A TCP connection to `server` from source address `from`.
fn connect_from(from: &str, server: SocketAddr) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    sock.bind(&local.into()).unwrap();
    sock.connect(&server.into()).unwrap();
    sock.into()
}

/// Upgrades a connection from `from`, retrying (bounded) while refused;
/// returns it and how many times it was refused (each one counted by the
/// server: the place it waits for frees when the server has seen a close).
fn client_when_admitted(from: &str, server: SocketAddr) -> (Client, u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut refused = 0;
    loop {
        match Client::try_over(connect_from(from, server)) {
            Ok(c) => return (c, refused),
            Err(e) => assert!(
                e.starts_with("HTTP/1.1 503") && Instant::now() < deadline,
                "{e}"
            ),
        }
        refused += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn connection_caps_refuse_with_503_and_count() {
    let server = Server::start(&["--max-connections", "20", "--shards", "2"]);
    let mut clients: Vec<Client> = (0..20).map(|_| Client::connect(server.addr)).collect();
    let text = refusal(TcpStream::connect(server.addr).unwrap());
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    assert!(text.ends_with("too many connections\n"), "{text}");
    // The ones in keep working; one leaves and a new one gets in.
    clients[0].join_lobby();
    clients.pop();
    let (mut late, retried) = client_when_admitted("127.0.0.1", server.addr);
    late.join_lobby();
    drop(late);
    clients.clear();
    server.await_metric("throng_connections", 5, |v| v == 0);
    assert_eq!(
        server.metric("throng_connections_refused_total"),
        1 + retried
    );

    let server = Server::start(&["--max-connections-per-ip", "5", "--shards", "2"]);
    let mine: Vec<Client> = (0..5)
        .map(|_| Client::over(connect_from("127.0.0.3", server.addr)))
        .collect();
    let text = refusal(connect_from("127.0.0.3", server.addr));
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    assert!(text.contains("from your address"), "{text}");
    // Another address is not affected (the metrics come from 127.0.0.1).
    let mut other = Client::over(connect_from("127.0.0.2", server.addr));
    other.join_lobby();
    assert_eq!(server.metric("throng_connections_refused_per_ip_total"), 1);
    // Its places come back when its connections close.
    drop(mine);
    let (mut again, _) = client_when_admitted("127.0.0.3", server.addr);
    again.join_lobby();
}

/// A head that arrived before its deadline is read, not timed out, even when
/// the server reads it late: the server is stopped past the deadline while
/// 1,100 connections (more than one turn's batch of events) each send their
/// whole upgrade, then resumed. Every one must get its 101.
#[test]
fn a_head_sent_in_time_is_not_late_when_the_server_is() {
    const N: u64 = 1100;
    let server = Server::start(&["--handshake-timeout", "2", "--shards", "1"]);
    let mut socks: Vec<TcpStream> = (0..N)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    assert_eq!(
        server.await_metric("throng_connections_accepted_total", 10, |v| v == N),
        N
    );
    server.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    let mut req = Vec::new();
    throng_protocol::handshake::write_client_request(
        &mut req,
        "t",
        "/socket/websocket?vsn=2.0.0",
        [7; 16],
    );
    for s in &mut socks {
        s.write_all(&req).unwrap();
    }
    // Stopped past the deadline, as a worker starved of CPU is.
    std::thread::sleep(Duration::from_millis(3500).saturating_sub(stopped.elapsed()));
    server.signal(libc::SIGCONT);
    for (i, s) in socks.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 512];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut b) {
                Ok(n) if n > 0 => head.extend_from_slice(&b[..n]),
                end => panic!(
                    "connection {i} of {N}: closed before its 101 ({end:?}) after {:?}",
                    String::from_utf8_lossy(&head)
                ),
            }
        }
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&head)
        );
    }
    assert_eq!(server.metric("throng_handshake_timeouts_total"), 0);
}
