//! A port held by another process is refused at start (issue 27, item 1):
//! the listeners use `SO_REUSEPORT` (one per shard, and `--workers`), which
//! would otherwise let a second `throng serve` join the port silently and
//! take half its connections. Two real processes: the second must exit
//! with one error naming the port and the way out, unless it opts in with
//! `--reuse-port`; the server API port is never shared.

mod common;

use std::process::{Command, Output, Stdio};

use common::{throng_bin, Server};

/// Runs `throng serve ARGS` to its exit (it must fail at start).
fn serve_fails(args: &[&str]) -> Output {
    let out = Command::new(throng_bin())
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run throng");
    assert!(
        !out.status.success(),
        "a second throng serve {args:?} started: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

#[test]
fn a_second_server_on_a_busy_port_fails_with_a_hint() {
    let first = Server::start(&[]);
    let port = first.addr.port().to_string();
    let out = serve_fails(&["--bind", "127.0.0.1", "--port", &port, "--api-bind", "none"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another process holds the port"), "{err}");
    assert!(err.contains("--reuse-port"), "{err}");
    assert_eq!(
        err.matches("cannot listen on").count(),
        1,
        "the error is printed once: {err}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening on"));
    // 0.0.0.0 overlaps 127.0.0.1: refused too.
    serve_fails(&["--bind", "0.0.0.0", "--port", &port, "--api-bind", "none"]);
    // The first one still serves.
    first.metric("throng_connections_accepted_total");
}

#[test]
fn the_api_port_is_never_shared_by_accident() {
    let first = Server::start(&[]);
    let api = first.api.unwrap().to_string();
    let out = serve_fails(&["--bind", "127.0.0.1", "--port", "0", "--api-bind", &api]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("(the server API)"), "{err}");
    assert!(err.contains("--api-bind"), "{err}");
}

#[test]
fn reuse_port_is_the_opt_in() {
    let first = Server::start(&[]);
    let port = first.addr.port().to_string();
    let args = [
        "--bind",
        "127.0.0.1",
        "--port",
        &port,
        "--reuse-port",
        "--api-bind",
        "none",
    ];
    let second = Server::start_exact(&args, Stdio::null());
    assert_eq!(second.addr, first.addr);
}
