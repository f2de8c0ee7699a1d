//! Long-poll sessions count as connections: a flood of session starts from
//! one address (keep-alive GETs without a token, each of which used to make
//! a session) meets `--max-connections-per-ip`, `--max-connections`,
//! `--max-longpoll-sessions` and `--longpoll-session-rate`, and sessions
//! that expire give their places back.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Server;

/// One keep-alive HTTP connection asking for new sessions.
struct Poller {
    sock: TcpStream,
    buf: Vec<u8>,
}

impl Poller {
    fn connect(server: &Server) -> Poller {
        let sock = TcpStream::connect(server.addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Poller {
            sock,
            buf: Vec::new(),
        }
    }

    /// `GET /socket/longpoll` without a token: the JSON status answered.
    fn start_session(&mut self) -> u16 {
        self.sock
            .write_all(b"GET /socket/longpoll?vsn=2.0.0 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&self.buf).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .expect("content-length");
                if self.buf.len() >= end + 4 + len {
                    let body = text[end + 4..end + 4 + len].to_string();
                    self.buf.drain(..end + 4 + len);
                    // Every answer opens with its status: {"status":N,...
                    let digits = body
                        .strip_prefix("{\"status\":")
                        .unwrap_or_else(|| panic!("{body}"));
                    return digits[..3].parse().unwrap();
                }
            }
            let n = self.sock.read(&mut chunk).unwrap();
            assert!(n > 0, "closed after {text:?}");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Statuses of `n` session starts over one keep-alive connection.
fn starts(server: &Server, n: usize) -> Vec<u16> {
    let mut p = Poller::connect(server);
    (0..n).map(|_| p.start_session()).collect()
}

#[test]
fn sessions_count_against_the_per_address_cap() {
    let server = Server::start(&["--shards", "1", "--max-connections-per-ip", "10"]);
    let mut poller = Poller::connect(&server);
    let seen: Vec<u16> = (0..30).map(|_| poller.start_session()).collect();
    // The connection carrying the GETs is one of the ten.
    assert_eq!(seen.iter().filter(|&&s| s == 410).count(), 9, "{seen:?}");
    assert!(seen[9..].iter().all(|&s| s == 503), "{seen:?}");
    assert_eq!(server.metric("throng_connections_refused_per_ip_total"), 21);
    // And against the WebSockets from that address: none left.
    let sock = TcpStream::connect(server.addr).unwrap();
    assert!(common::Client::try_over(sock).is_err());
    drop(poller);
}

#[test]
fn sessions_have_their_own_cap_and_give_it_back_when_they_expire() {
    let server = Server::start(&[
        "--shards",
        "1",
        "--max-longpoll-sessions",
        "5",
        "--longpoll-window",
        "1",
    ]);
    let seen = starts(&server, 8);
    assert_eq!(seen, [410, 410, 410, 410, 410, 503, 503, 503]);
    assert_eq!(server.metric("throng_longpoll_sessions_refused_total"), 3);
    // Never polled, they expire after 1.5x the window and free their places.
    server.await_metric("throng_longpoll_expired_total", 20, |n| n == 5);
    assert_eq!(server.metric("throng_longpoll_sessions"), 0);
    assert_eq!(starts(&server, 1), [410]);
}

#[test]
fn sessions_start_at_a_bounded_rate_per_address() {
    let server = Server::start(&["--shards", "1", "--longpoll-session-rate", "1"]);
    let seen = starts(&server, 80);
    // A burst of 50, then one a second: all 80 would take 30 s.
    let made = seen.iter().filter(|&&s| s == 410).count();
    assert!((50..80).contains(&made), "{made} sessions: {seen:?}");
    assert!(seen[..50].iter().all(|&s| s == 410), "{seen:?}");
    let refused = server.metric("throng_longpoll_rate_limited_total");
    assert_eq!(refused as usize, 80 - made);
}

#[test]
fn memory_comes_back_after_a_flood_of_sessions_expires() {
    let server = Server::start(&[
        "--shards",
        "1",
        "--longpoll-session-rate",
        "0",
        "--longpoll-window",
        "1",
    ]);
    let start = server.rss_kib();
    // Pipelined, as the flood that found it: 50,000 session starts, 500 at a
    // time; each batch's answers are read before the next is sent, so the
    // test does not depend on the socket buffers holding a whole flood's
    // answers (with `throng tune`'s 16 KiB buffers they did not).
    let mut p = Poller::connect(&server);
    let n = 50_000;
    let batch = 500;
    let req = b"GET /socket/longpoll?vsn=2.0.0 HTTP/1.1\r\nHost: t\r\n\r\n".repeat(batch);
    let needle = b"\"status\":410";
    let mut buf = vec![0u8; 1 << 16];
    let mut tail = Vec::new();
    for _ in 0..n / batch {
        p.sock.write_all(&req).unwrap();
        let mut seen = 0usize;
        while seen < batch {
            let k = p.sock.read(&mut buf).unwrap();
            assert!(k > 0, "the server closed the connection");
            tail.extend_from_slice(&buf[..k]);
            seen += tail.windows(needle.len()).filter(|w| w == needle).count();
            let keep = tail.len().min(needle.len() - 1);
            tail.drain(..tail.len() - keep);
        }
    }
    let peak = server.rss_kib();
    assert_eq!(server.metric("throng_longpoll_sessions"), n as u64);
    server.await_metric("throng_longpoll_sessions", 30, |s| s == 0);
    // The sweep that ends the last ones shrinks the table: await it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut after = server.rss_kib();
    while after.saturating_sub(start) >= (peak - start) / 2 && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
        after = server.rss_kib();
    }
    eprintln!(
        "RSS: {start} KiB at start, {peak} KiB with {n} sessions, {after} KiB after they expired"
    );
    assert!(
        after.saturating_sub(start) < (peak - start) / 2,
        "RSS {start} -> {peak} -> {after} KiB"
    );
}
