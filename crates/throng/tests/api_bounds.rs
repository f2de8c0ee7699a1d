//! The server API listener is bounded like the public one: slow heads and
//! slow bodies time out (`--api-timeout`), a wrong key is answered 401 at
//! once whatever body it declares, a declared body over the limit 413 at
//! once, connections past `--max-api-connections` 503, a repeated
//! `X-API-Key` refused, and an empty `--api-key` refused at start (the
//! weak-secret rule; `secrets.rs` tries every secret).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{throng_bin, Server};

const KEY: &str = "k3y-for-the-api-tests";

fn api_server(extra: &[&str]) -> Server {
    let mut args = vec!["--shards", "1", "--api-key", KEY];
    if !extra.contains(&"--api-timeout") {
        args.extend(["--api-timeout", "1"]);
    }
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn connect(server: &Server) -> TcpStream {
    let s = TcpStream::connect(server.api.expect("api listener")).unwrap();
    // A bound on the test, not a timed assertion: the answers come at once
    // or after --api-timeout (1 s).
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// What the server sent until it closed (or the test's bound passed).
fn read_all(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                // One response is enough: no body is sent after these heads.
                let text = String::from_utf8_lossy(&out);
                if let Some(head_end) = text.find("\r\n\r\n") {
                    let len = text[..head_end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length: ")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if out.len() >= head_end + 4 + len {
                        break;
                    }
                }
            }
            Err(e) => panic!("no answer: {e} after {:?}", String::from_utf8_lossy(&out)),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn status(resp: &str) -> &str {
    resp.split(' ').nth(1).unwrap_or("")
}

#[test]
fn wrong_key_with_a_huge_body_is_answered_at_once() {
    let server = api_server(&[]);
    let mut s = connect(&server);
    // 100 MB declared, none of it sent: the key decides first.
    s.write_all(
        b"POST /api/broadcast HTTP/1.1\r\nHost: t\r\nX-API-Key: wrong\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{\"topic\":",
    )
    .unwrap();
    let resp = read_all(&mut s);
    assert_eq!(status(&resp), "401", "{resp}");
    // The right key with the same declared body: 413, before any is read.
    let mut s = connect(&server);
    s.write_all(
        format!("POST /api/broadcast HTTP/1.1\r\nHost: t\r\nX-API-Key: {KEY}\r\nContent-Length: 100000000\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let resp = read_all(&mut s);
    assert_eq!(status(&resp), "413", "{resp}");
    // Two keys, even if one is right: refused.
    let mut s = connect(&server);
    s.write_all(
        format!("POST /api/broadcast HTTP/1.1\r\nHost: t\r\nX-API-Key: wrong\r\nX-API-Key: {KEY}\r\nContent-Length: 2\r\n\r\n{{}}").as_bytes(),
    )
    .unwrap();
    let resp = read_all(&mut s);
    assert_eq!(status(&resp), "401", "{resp}");
    assert_eq!(server.metric("throng_api_refusals_total"), 2);
    // And the right key alone is served.
    let mut s = connect(&server);
    let body = r#"{"topic":"rooms:lobby","event":"e","payload":{}}"#;
    s.write_all(
        format!("POST /api/broadcast HTTP/1.1\r\nHost: t\r\nX-API-Key: {KEY}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes(),
    )
    .unwrap();
    let resp = read_all(&mut s);
    assert_eq!(status(&resp), "200", "{resp}");
}

#[test]
fn slow_heads_and_slow_bodies_time_out() {
    let server = api_server(&[]);
    // A head that never ends: closed after --api-timeout.
    let mut head = connect(&server);
    head.write_all(b"GET /api/stats HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    let resp = read_all(&mut head);
    assert!(resp.is_empty() || status(&resp) == "408", "{resp}");
    // A body that never comes: 408 after --api-timeout.
    let mut body = connect(&server);
    body.write_all(
        format!("POST /api/disconnect HTTP/1.1\r\nHost: t\r\nX-API-Key: {KEY}\r\nContent-Length: 100\r\n\r\n{{\"user\"").as_bytes(),
    )
    .unwrap();
    let resp = read_all(&mut body);
    assert_eq!(status(&resp), "408", "{resp}");
    // An idle connection is no different from a slow head.
    let mut idle = connect(&server);
    assert_eq!(read_all(&mut idle), "");
    assert!(server.metric("throng_api_timeouts_total") >= 2);
}

#[test]
fn connections_past_the_cap_get_503() {
    let server = api_server(&["--max-api-connections", "2", "--api-timeout", "30"]);
    let held: Vec<TcpStream> = (0..2).map(|_| connect(&server)).collect();
    // Accepted in order: the two held ones have their places first.
    let mut third = connect(&server);
    let resp = read_all(&mut third);
    assert_eq!(status(&resp), "503", "{resp}");
    drop(held);
    // Served again once they are gone (their tasks see the EOF).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = connect(&server);
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        if status(&body) == "200" {
            let busy = body
                .lines()
                .find_map(|l| l.strip_prefix("throng_api_busy_total "))
                .and_then(|v| v.trim().parse::<u64>().ok());
            assert!(busy.is_some_and(|n| n >= 1), "{body}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still refused: {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_empty_api_key_is_refused_at_start() {
    let out = Command::new(throng_bin())
        .args(["serve", "--port", "0", "--api-key", ""])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--api-key") && err.contains("(empty)"),
        "{err}"
    );
}

/// A POST to the API with the right key: (status, body).
fn post(server: &Server, path: &str, body: &str) -> (String, String) {
    let mut s = connect(server);
    s.write_all(
        format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nX-API-Key: {KEY}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let resp = read_all(&mut s);
    (status(&resp).to_string(), resp)
}

#[test]
fn the_api_refuses_what_would_break_receivers() {
    let server = api_server(&[]);
    let deep = "[".repeat(400_000) + &"]".repeat(400_000);
    let huge_topic = "t".repeat(900_000);
    for (body, why) in [
        (
            r#"{"topic":"rooms:\u0000lobby","event":"e","payload":{}}"#.to_string(),
            "control character",
        ),
        (
            format!(r#"{{"topic":"{huge_topic}","event":"e","payload":{{}}}}"#),
            "longer than 1024",
        ),
        (
            r#"{"topic":"rooms:lobby","event":"phx_close","payload":{}}"#.to_string(),
            "starts with phx_",
        ),
        (
            format!(r#"{{"topic":"rooms:lobby","event":"e","payload":{deep}}}"#),
            "more than 128 deep",
        ),
    ] {
        assert!(body.len() < 1 << 20, "under the body limit");
        let (status, resp) = post(&server, "/api/broadcast", &body);
        assert_eq!(status, "400", "{resp}");
        assert!(resp.contains(why), "{why}: {resp}");
    }
    // 128 levels pass.
    let ok = "[".repeat(127) + &"]".repeat(127);
    let (status, resp) = post(
        &server,
        "/api/broadcast",
        &format!(r#"{{"topic":"rooms:lobby","event":"e","payload":{{"a":{ok}}}}}"#),
    );
    assert_eq!(status, "200", "{resp}");
}

/// The same bounds on what clients push.
#[test]
fn pushes_too_deep_or_of_phx_events_get_an_error_reply() {
    let server = api_server(&[]);
    let mut c = common::Client::connect(server.addr);
    c.join_lobby();
    let deep = "[".repeat(30_000) + &"]".repeat(30_000);
    c.push("rooms:lobby", "new:msg", &format!(r#"{{"body":{deep}}}"#));
    let (_, event, payload) = c.next_message();
    assert_eq!(event, "phx_reply");
    assert!(payload.contains("payload nested too deeply"), "{payload}");
    c.push("rooms:lobby", "phx_close", "{}");
    let (_, event, payload) = c.next_message();
    assert_eq!(event, "phx_reply");
    assert!(payload.contains("reserved event"), "{payload}");
    assert_eq!(server.metric("throng_payload_refusals_total"), 2);
    // The socket goes on.
    c.push("rooms:lobby", "new:msg", r#"{"user":"u","body":"b"}"#);
    let (_, event, _) = c.next_message();
    assert_eq!(event, "new:msg");
}

#[test]
fn wrong_keys_with_big_bodies_pin_no_memory() {
    // 200 connections at once, each with a wrong key and a whole 1 MiB body
    // sent (as much as the kernel takes): a listener that read bodies
    // before the key held up to 200 MiB here (300 such held 306 MB before
    // the key was checked first). The key is checked first, so the bodies
    // are never buffered: the server grew by 0.4 MB here, against 19 MB
    // for the build that read bodies first.
    let server = api_server(&["--max-api-connections", "1000"]);
    let before = server.rss_kib();
    let body = vec![b' '; 1 << 20];
    let mut conns = Vec::new();
    for _ in 0..200 {
        let mut s = connect(&server);
        s.write_all(
            b"POST /api/broadcast HTTP/1.1\r\nHost: t\r\nX-API-Key: wrong\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n",
        )
        .unwrap();
        s.set_nonblocking(true).unwrap();
        let mut sent = 0;
        while sent < body.len() {
            match s.write(&body[sent..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => sent += n,
            }
        }
        conns.push(s);
    }
    let during = server.rss_kib();
    // Every one of them was answered 401.
    for s in &mut conns {
        s.set_nonblocking(false).unwrap();
        let resp = read_all(s);
        assert_eq!(status(&resp), "401", "{resp}");
    }
    eprintln!("RSS: {before} KiB before, {during} KiB with 200 wrong-key 1 MiB bodies sent");
    assert!(
        during.saturating_sub(before) < 8 * 1024,
        "the server grew by {} KiB holding 200 refused bodies",
        during - before
    );
}
