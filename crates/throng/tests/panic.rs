//! A panic ends the process (issue 12, item 6): a shard thread that panics
//! must not leave a half-alive server (its sockets open but unanswered, its
//! subscriptions still counted) but abort, so that a supervisor restarts
//! it. The panic is made with the hidden, test-only `--test-panic-message`,
//! which works only with `--echo` (tests/cluster/faults.test.mjs checks that
//! the `--workers` supervisor restarts such a worker). The hook is compiled
//! in only with the `test-hooks` feature, as scripts/test.sh builds:
//! `cargo test -p throng --features test-hooks --test panic`.
#![cfg(feature = "test-hooks")]

mod common;

use std::net::TcpStream;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::{Client, Server};

#[test]
fn a_panicking_shard_aborts_the_process() {
    let mut server = Server::start(&["--echo", "--test-panic-message", "boom", "--shards", "2"]);
    let mut lobby = Client::connect(server.addr);
    lobby.join_lobby();
    let mut echo =
        Client::try_over_path(TcpStream::connect(server.addr).unwrap(), "/echo").unwrap();
    echo.send_text("hello");
    assert_eq!(echo.next_frame().unwrap().1, b"hello");
    echo.send_text("boom");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server is still running 10 s after a shard panicked"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}");
    // Every client sees the connection end.
    assert!(lobby.next_frame().is_none());
}

#[test]
fn the_panic_trigger_needs_echo() {
    // Without --echo there is no /echo, so no message can reach the trigger.
    let server = Server::start(&["--test-panic-message", "boom"]);
    let refused = Client::try_over_path(TcpStream::connect(server.addr).unwrap(), "/echo");
    match refused {
        Ok(_) => panic!("/echo upgraded without --echo"),
        Err(e) => assert!(e.starts_with("HTTP/1.1 404"), "{e}"),
    }
}
