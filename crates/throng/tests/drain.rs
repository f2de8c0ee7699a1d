//! The graceful drain (issue 12, item 5): on SIGTERM a node stops
//! accepting, closes its sockets with 1012 (Service Restart, so phoenix.js
//! reconnects elsewhere) in batches over `--drain-seconds`, and exits 0.
//! No client may see its connection end without a close frame (what a
//! browser reports as 1006). Five thousand clients, watched with one epoll.

mod common;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use common::{Client, End, Server};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use throng_protocol::frame::{decode_frame, encode_close, parse_close, Opcode, Role};

/// One client being drained.
struct Watched {
    sock: TcpStream,
    buf: Vec<u8>,
    /// The close frame's code and when it came.
    close: Option<(Option<u16>, Duration)>,
    end: Option<End>,
}

impl Watched {
    /// Reads what is there; answers a close frame as a browser does.
    fn on_readable(&mut self, t: Duration) {
        let mut chunk = [0u8; 16384];
        let mut eof = false;
        loop {
            match self.sock.read(&mut chunk) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.end = Some(End::Abnormal(e.to_string()));
                    return;
                }
            }
        }
        while let Ok(Some(f)) = decode_frame(&mut self.buf, Role::Client, 1 << 24) {
            if f.opcode == Opcode::Close && self.close.is_none() {
                let code = parse_close(&self.buf[f.payload.clone()]).unwrap_or(None);
                self.close = Some((code, t));
                let mut out = Vec::new();
                encode_close(&mut out, code.unwrap_or(1000), "", Some([1, 2, 3, 4]));
                let _ = self.sock.write_all(&out);
            }
            self.buf.drain(..f.consumed);
        }
        if eof {
            self.end = Some(match self.close {
                Some((code, _)) => End::Close(code),
                None => End::Abnormal("EOF without a close frame".into()),
            });
        }
    }
}

#[test]
fn sigterm_closes_5000_clients_with_1012_in_batches_and_exits() {
    const N: usize = 5000;
    const WINDOW: u64 = 4;
    let mut server = Server::start(&[
        "--drain-seconds",
        &WINDOW.to_string(),
        "--shards",
        "2",
        "--idle-timeout",
        "0",
    ]);
    let addr = server.addr;
    let mut poll = Poll::new().unwrap();
    let mut watched = HashMap::new();
    for i in 0..N {
        let mut c = Client::connect(addr);
        c.join_lobby();
        c.sock.set_nonblocking(true).unwrap();
        let mut sock = TcpStream::from_std(c.sock);
        poll.registry()
            .register(&mut sock, Token(i), Interest::READABLE)
            .unwrap();
        let w = Watched {
            sock,
            buf: c.buf,
            close: None,
            end: None,
        };
        watched.insert(i, w);
    }
    assert_eq!(server.metric("throng_channels_joined"), N as u64);

    #[allow(unsafe_code)]
    // SAFETY: kill(2) on the child we started and have not reaped.
    unsafe {
        libc::kill(server.pid(), libc::SIGTERM);
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs(WINDOW + 15);
    let mut events = Events::with_capacity(1024);
    let mut open = N;
    let mut refused_new = false;
    while open > 0 && Instant::now() < deadline {
        poll.poll(&mut events, Some(Duration::from_millis(200)))
            .unwrap();
        let t = start.elapsed();
        for ev in events.iter() {
            let w = watched.get_mut(&ev.token().0).unwrap();
            if w.end.is_none() {
                w.on_readable(t);
                if w.end.is_some() {
                    open -= 1;
                }
            }
        }
        // Draining: the port takes no new connections.
        if !refused_new && t > Duration::from_secs(1) {
            refused_new = std::net::TcpStream::connect(addr).is_err();
        }
    }
    let mut closes: Vec<Duration> = watched
        .values()
        .filter_map(|w| w.close.map(|c| c.1))
        .collect();
    closes.sort();
    let bad: Vec<(usize, String)> = watched
        .iter()
        .filter_map(|(i, w)| match &w.end {
            Some(End::Close(Some(1012))) => None,
            Some(other) => Some((*i, format!("{other:?}"))),
            None => Some((*i, "still open".into())),
        })
        .take(5)
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {N} did not end with 1012 and a clean EOF, e.g. {bad:?}",
        N - closes.len()
    );
    let (first, last) = (closes[0], closes[N - 1]);
    eprintln!(
        "{N} clients got 1012: first {first:?}, median {:?}, last {last:?} after SIGTERM (window {WINDOW} s)",
        closes[N / 2]
    );
    // In batches over the window, not all at once.
    assert!(
        last - first >= Duration::from_secs(WINDOW) / 2,
        "closes from {first:?} to {last:?}"
    );
    assert!(
        refused_new,
        "new connections were still accepted while draining"
    );
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not exit after its drain"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// A few sockets have no crowd to spread: the drain window scales with what
/// is open (one second per thousand, at most `--drain-seconds`), so two
/// idle tabs close at once instead of over the whole window (issue 27,
/// item 8). Checked through the window the server announces and the order
/// of events, not a clock.
#[test]
fn a_few_sockets_drain_at_once() {
    use std::io::BufRead;
    let mut server = Server::start_with(
        &["--drain-seconds", "30", "--idle-timeout", "0"],
        std::process::Stdio::piped(),
    );
    let mut clients: Vec<Client> = (0..2)
        .map(|_| {
            let mut c = Client::connect(server.addr);
            c.join_lobby();
            c
        })
        .collect();
    server.signal(libc::SIGTERM);
    for c in &mut clients {
        assert!(
            matches!(c.read_to_end(), End::Close(Some(1012))),
            "not a 1012"
        );
    }
    // As a closed tab: the clients' FINs let the server exit.
    drop(clients);
    let status = server.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let stderr = std::io::BufReader::new(server.child.stderr.take().unwrap());
    let line = stderr
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("draining"))
        .expect("the drain's log line");
    assert!(
        line.contains("closing 2 sockets with 1012 over 0.0 s"),
        "{line}"
    );
}

/// Nothing a client leaves open holds the exit after the drain (issue 38,
/// item 4): a browser keeps the page's keep-alive HTTP connection open and
/// never answers the server's half-close (the drain waited the 3 s close
/// linger for it, swept once a second: 2 to 3 s), and a dashboard tab keeps
/// its stream open on the server API (whose stop waited its 3 s for it).
/// The exit is awaited for 1.9 s from the signal, under the 2 s the
/// shorter of those waits took at the least (the exit itself takes about
/// 0.1 s, the drain's first step); the API's stop must not have given up
/// on a busy connection either.
#[test]
fn the_exit_waits_for_no_idle_connection_or_open_stream() {
    use std::io::BufRead;
    let mut server = Server::start_with(&[], std::process::Stdio::piped());
    // The page, on a keep-alive connection left open.
    let mut page = std::net::TcpStream::connect(server.addr).unwrap();
    page.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    page.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    while !got.windows(7).any(|w| w == b"</html>") {
        let n = page.read(&mut chunk).unwrap();
        assert!(n > 0, "the page did not come");
        got.extend_from_slice(&chunk[..n]);
    }
    // A dashboard stream, its first sample read.
    let mut stream = std::net::TcpStream::connect(server.api.unwrap()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /api/dashboard HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    while !got.windows(13).any(|w| w == b"event: sample") {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "the dashboard stream did not start");
        got.extend_from_slice(&chunk[..n]);
    }
    server.signal(libc::SIGTERM);
    let signalled = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_millis(1900),
            "still running 1.9 s after SIGTERM: something waits for the idle page connection \
             or the dashboard stream"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
    let stderr = std::io::BufReader::new(server.child.stderr.take().unwrap());
    let lines: Vec<String> = stderr.lines().map_while(Result::ok).collect();
    assert!(
        lines.iter().any(|l| l.contains("drained; exiting")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("still busy")),
        "the API waited for a stream: {lines:#?}"
    );
    drop((page, stream));
}
