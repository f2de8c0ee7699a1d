//! A host that runs short (issue 42 item 4): at the process's open-files
//! limit, under `--min-available-memory-bytes`, and behind a burst larger
//! than the server takes at once, new clients get a 503 they can act on
//! (never a connection left hanging), the sockets open keep being served,
//! and the server takes connections again once the host has room.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Client, Server};

/// Opens a WebSocket, or says what the server answered instead.
fn try_connect(server: &Server) -> Result<Client, String> {
    let sock = TcpStream::connect(server.addr).map_err(|e| e.to_string())?;
    Client::try_over(sock)
}

/// Retries `f` (every 20 ms, 10 s at most) until it gives `Some`.
fn within<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A joined client still gets a broadcast from another.
fn still_served(a: &mut Client, b: &mut Client) {
    b.push(
        "rooms:lobby",
        "new:msg",
        r#"{"user":"b","body":"still here"}"#,
    );
    loop {
        let (_, event, payload) = a.next_message();
        if event == "new:msg" {
            assert!(payload.contains("still here"), "{payload}");
            return;
        }
    }
}

#[test]
fn at_the_open_files_limit_a_new_client_gets_503_and_the_open_ones_are_served() {
    // `ulimit -n` in the shell sets both limits, so the server cannot raise
    // its soft limit past it.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -n 96 && exec \"$0\" serve --port 0 --bind 127.0.0.1 --shards 1")
        .arg(common::throng_bin());
    let server = Server::spawn(cmd, Stdio::null());
    let mut open = Vec::new();
    let refused = loop {
        assert!(
            open.len() < 96,
            "no refusal after {} connections",
            open.len()
        );
        match try_connect(&server) {
            Ok(mut c) => {
                c.join_lobby();
                open.push(c);
            }
            Err(answer) => break answer,
        }
    };
    assert!(
        refused.starts_with("HTTP/1.1 503") && refused.contains("open-files limit"),
        "{refused}"
    );
    assert!(refused.contains("Retry-After:"), "{refused}");
    assert!(
        open.len() > 40,
        "only {} connections before the limit",
        open.len()
    );

    // A second refusal: the reserve was taken again.
    let again = try_connect(&server).err().expect("refused again");
    assert!(again.contains("open-files limit"), "{again}");

    let (a, rest) = open.split_first_mut().unwrap();
    still_served(a, &mut rest[0]);

    // Room again: connections are taken.
    open.truncate(open.len() - 8);
    let mut fresh = within("a connection after some closed", || {
        try_connect(&server).ok()
    });
    fresh.join_lobby();
    assert!(server.metric("throng_connections_refused_files_total") >= 2);
    assert!(server.metric("throng_accept_errors_total") >= 2);
}

#[test]
fn under_the_available_memory_floor_new_clients_get_503_until_it_is_back() {
    let dir = std::env::temp_dir().join(format!("throng-host-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("available");
    std::fs::write(&file, "8000000000\n").unwrap();
    let server = Server::start(&[
        "--min-available-memory-bytes",
        "100000000",
        "--test-available-memory-file",
        file.to_str().unwrap(),
    ]);
    let mut a = Client::connect(server.addr);
    a.join_lobby();
    let mut b = Client::connect(server.addr);
    b.join_lobby();
    server.await_metric("throng_available_memory_bytes", 10, |v| v == 8_000_000_000);

    std::fs::write(&file, "50000000\n").unwrap();
    let refused = within("a refusal for memory", || try_connect(&server).err());
    assert!(
        refused.starts_with("HTTP/1.1 503") && refused.contains("low on memory"),
        "{refused}"
    );
    assert!(refused.contains("Retry-After: 5"), "{refused}");
    still_served(&mut a, &mut b);
    assert!(server.metric("throng_connections_refused_memory_total") >= 1);
    assert_eq!(server.metric("throng_available_memory_bytes"), 50_000_000);

    std::fs::write(&file, "8000000000\n").unwrap();
    let mut c = within("a connection once memory is back", || {
        try_connect(&server).ok()
    });
    c.join_lobby();
    still_served(&mut c, &mut a);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_burst_that_waits_while_the_server_is_stopped_is_served_whole() {
    let server = Server::start(&["--shards", "2"]);
    const BURST: usize = 400;
    server.signal(libc::SIGSTOP);
    let mut socks = Vec::with_capacity(BURST);
    let mut req = Vec::new();
    throng_protocol::handshake::write_client_request(
        &mut req,
        "t",
        "/socket/websocket?vsn=2.0.0",
        [7; 16],
    );
    for _ in 0..BURST {
        let mut s = TcpStream::connect(server.addr).expect("the kernel queues the connect");
        s.write_all(&req).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        socks.push(s);
    }
    server.signal(libc::SIGCONT);
    let mut upgraded = 0;
    for mut s in socks {
        let mut head = [0u8; 12];
        s.read_exact(&mut head)
            .expect("an answer to every queued connect");
        assert_eq!(&head, b"HTTP/1.1 101", "{}", String::from_utf8_lossy(&head));
        upgraded += 1;
    }
    assert_eq!(upgraded, BURST);
    assert_eq!(server.metric("throng_connections_refused_files_total"), 0);
    // The host's accept-queue overflows are reported (this burst fits the
    // queue; other tests on the host may have overflowed theirs).
    let _ = server.metric("throng_host_listen_overflows_total");
}
