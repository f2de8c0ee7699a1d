//! Adaptive arrival on the real `throng bench`, against a stand-in server
//! that is slow on purpose (see `common` for the binary it runs).

mod common;

use common::{run_bench, tmp};
use std::time::Duration;

/// A stand-in Phoenix server that is slow on purpose: one thread completes
/// the upgrades one at a time, `per_upgrade` each (so at most
/// `1 / per_upgrade` a second), answers each connection's join `ok` as it
/// comes, then keeps the socket without reading it again. `/metrics` and
/// anything else gets a 404.
fn slow_server(per_upgrade: Duration) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    use throng_protocol::frame::{decode_frame, encode_frame};
    use throng_protocol::handshake::{accept_key, write_response};
    use throng_protocol::{serializer, Role, Vsn};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { break };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut chunk) {
                    Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => break,
                }
            }
            let head = String::from_utf8_lossy(&buf).to_string();
            let Some(key) = head
                .lines()
                .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
                .map(|k| k.trim().to_string())
            else {
                let _ = s.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                continue;
            };
            std::thread::sleep(per_upgrade);
            let mut out = Vec::new();
            write_response(&mut out, &accept_key(key.as_bytes()));
            if s.write_all(&out).is_err() {
                continue;
            }
            // The join comes right after the upgrade: answer it.
            let mut pending: Vec<u8> = Vec::new();
            let frame = loop {
                if let Ok(Some(f)) = decode_frame(&mut pending, Role::Server, 1 << 20) {
                    break Some(pending[f.payload.clone()].to_vec());
                }
                match s.read(&mut chunk) {
                    Ok(n) if n > 0 => pending.extend_from_slice(&chunk[..n]),
                    _ => break None,
                }
            };
            if let Some(data) = frame {
                let m = serializer::decode(
                    Vsn::V2,
                    throng_protocol::frame::Opcode::Text,
                    &data,
                    serializer::Sender::Client,
                );
                if let Ok(m) = m {
                    let mut msg = Vec::new();
                    let op = serializer::encode_reply(
                        Vsn::V2,
                        &mut msg,
                        m.join_ref.as_deref(),
                        m.msg_ref.as_deref(),
                        &m.topic,
                        "ok",
                        throng_protocol::Payload::Json("{}"),
                    )
                    .unwrap();
                    let mut f = Vec::new();
                    encode_frame(&mut f, op, &msg, None);
                    let _ = s.write_all(&f);
                }
            }
            kept.push(s);
        }
    });
    addr
}

/// Adaptive arrival against a server slowed on purpose (100 upgrades a
/// second at most, a 2 s connect timeout): the controller backs off and
/// every user joins with no timeout, and the report says what set the
/// rate. The same load on a fixed schedule of 2,000 a second times out,
/// and each timeout is attributed.
#[test]
fn adaptive_arrival_backs_off_from_a_slow_server() {
    let addr = slow_server(Duration::from_millis(10));
    let target = addr.to_string();
    // `passes`: the run meets its own criteria (every user joined, no
    // error), so `throng bench` exits 0; else 1.
    let run = |extra: &[&str], name: &str, passes: bool| -> serde_json::Value {
        let json = tmp(name);
        let mut args = vec![
            "--target",
            &target,
            "--connections",
            "300",
            "--connect-timeout",
            "2",
            "--heartbeat",
            "0",
            "--hold",
            "0.5",
            "--dashboard-port",
            "0",
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = run_bench(&args, Duration::from_secs(90));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(if passes { 0 } else { 1 }),
            "stderr:\n{stderr}"
        );
        let r = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(json);
        r
    };
    let r = run(&[], "adaptive.json", true);
    assert_eq!(r["connections"]["joined"], 300, "{r}");
    assert_eq!(r["errors"]["total"], 0, "{r}");
    let a = &r["arrival"]["adaptive"];
    assert!(
        a["cuts"].as_u64().is_some_and(|c| c >= 1),
        "it backed off: {a}"
    );
    assert!(
        a["limited_by"].as_str().is_some_and(|l| !l.is_empty()),
        "{a}"
    );
    let fixed = run(&["--arrival-rate", "2000"], "fixed.json", false);
    let timeouts = fixed["errors"]["by_kind"]["timeout"].as_u64().unwrap_or(0);
    assert!(timeouts > 0, "a fixed 2,000/s overloads it: {fixed}");
    let attributed = fixed["errors"]["attributed"].as_array().unwrap();
    assert!(
        attributed.iter().any(
            |a| a["kind"].as_str().is_some_and(|k| k.starts_with("timeout"))
                && !a["whose"].as_str().unwrap_or("").is_empty()
        ),
        "{fixed}"
    );
    assert!(fixed["arrival"]["adaptive"].is_null(), "a fixed schedule");
}
