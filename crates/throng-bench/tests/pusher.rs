//! `throng bench --protocol pusher` on the real binary: the built-in
//! scenario over the Pusher protocol against the embedded server (client
//! events on a private channel, and triggers through the HTTP API), the
//! floor measured with Pusher's frame, and against a `--target` whose app
//! really checks each subscription's signature.

mod common;

use common::{run_bench, throng_bin, tmp};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A run of `users` with `extra` flags: its exit, its JSON report and
/// what to print when a check fails.
fn bench(name: &str, users: &str, extra: &[&str]) -> (bool, serde_json::Value, String) {
    let json = tmp(name);
    let html = tmp(&format!("{name}.html"));
    let mut args = vec![
        "--protocol",
        "pusher",
        "--connections",
        users,
        "--arrival-rate",
        "1000",
        "--dashboard-port",
        "0",
        "--json",
        json.to_str().unwrap(),
        "--report",
        html.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = run_bench(&args, Duration::from_secs(90));
    let ctx = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("no JSON ({e})\n{ctx}"));
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(html);
    (
        out.status.success(),
        serde_json::from_str(&text).expect("valid JSON"),
        ctx,
    )
}

/// Client events on a private channel: every user's subscription signed
/// and accepted, each broadcast received by every socket but its sender,
/// and the floor measured with the frame Pusher's subscribers receive.
#[test]
fn client_events_on_a_private_channel_with_the_floor() {
    let (ok, r, ctx) = bench(
        "pusher-private.json",
        "150",
        &[
            "--pusher-channel",
            "private",
            "--pusher-trigger",
            "client-event",
            "--broadcasts",
            "3",
            "--broadcast-interval",
            "0.3",
        ],
    );
    assert!(ok, "{ctx}");
    assert_eq!(r["scenario"]["protocol"], "pusher", "{ctx}");
    assert_eq!(r["connections"]["joined"], 150, "{ctx}");
    assert_eq!(r["errors"]["total"], 0, "{ctx}");
    assert_eq!(r["broadcast"]["sent"], 3, "{ctx}");
    assert_eq!(r["broadcast"]["receivers"], 3 * 149, "{ctx}");
    assert!(
        r["broadcast"]["per_broadcast"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["receivers"] == 149),
        "{ctx}"
    );
    // The floor read Pusher's frame (each round at every socket), and the
    // broadcasts compare with it.
    assert_eq!(r["floor"]["receivers"], 3 * 150, "{ctx}");
    assert!(
        r["broadcast"]["floor_ratio"].as_f64().unwrap() > 0.0,
        "{ctx}"
    );
    // The server answered subscriptions, not Phoenix joins.
    assert_eq!(r["server"]["channels_joined"], 150.0, "{ctx}");
}

/// `throng serve` with one Pusher app, killed when dropped.
struct Server(Child, SocketAddr);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const APP: &str = "7:bench-key:the-apps-secret-of-32-bytes-or-more";

fn serve_pusher() -> Server {
    let mut child = Command::new(throng_bin())
        .args(["serve", "--port", "0", "--bind", "127.0.0.1"])
        .args(["--public-metrics", "--api-bind", "none"])
        .env("THRONG_PUSHER_APPS", APP)
        .env("THRONG_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start throng serve");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let addr = lines
        .find_map(|l| l.ok()?.trim().strip_prefix("listening on ")?.parse().ok())
        .expect("throng serve prints `listening on ADDR`");
    std::thread::spawn(move || lines.for_each(drop));
    Server(child, addr)
}

/// The status line of a request to `addr`.
fn status_of(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.lines().next().unwrap_or("").to_string()
}

/// A counter from the server's /metrics.
fn metric(addr: SocketAddr, name: &str) -> f64 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{body}"))
}

/// Against a `--target`: the app is required; signed with the wrong
/// secret every private subscription is refused by the server; with the
/// right one all join.
#[test]
fn a_target_checks_the_signatures() {
    let server = serve_pusher();
    let target = server.1.to_string();
    let no_app = run_bench(
        &[
            "--protocol",
            "pusher",
            "--target",
            &target,
            "--dashboard-port",
            "0",
        ],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&no_app.stderr);
    assert!(!no_app.status.success(), "{stderr}");
    assert!(stderr.contains("--pusher-app ID:KEY:SECRET"), "{stderr}");

    let wrong = [
        "--target",
        &target,
        "--pusher-app",
        "7:bench-key:not-the-secret",
        "--pusher-channel",
        "private",
        "--hold",
        "0",
    ];
    let (ok, r, ctx) = bench("pusher-wrong.json", "40", &wrong);
    assert!(!ok, "{ctx}");
    assert_eq!(r["connections"]["joined"], 0, "{ctx}");
    assert_eq!(r["errors"]["by_kind"]["error_reply"], 40, "{ctx}");
    assert_eq!(
        metric(server.1, "throng_refused_joins_total"),
        40.0,
        "{ctx}"
    );

    let right = [
        "--target",
        &target,
        "--pusher-app",
        APP,
        "--pusher-channel",
        "private",
        "--hold",
        "0",
    ];
    let (ok, r, ctx) = bench("pusher-right.json", "40", &right);
    assert!(ok, "{ctx}");
    assert_eq!(r["connections"]["joined"], 40, "{ctx}");
    assert_eq!(r["errors"]["total"], 0, "{ctx}");
}

/// Triggers through the HTTP API (`POST /apps/{id}/events`, signed as
/// the server SDKs sign): every subscriber of the public channel receives
/// every broadcast, the publisher too.
#[test]
fn triggers_through_the_http_api_reach_every_subscriber() {
    let server = serve_pusher();
    let probe = format!(
        "POST /apps/7/events HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        server.1
    );
    // A server without the Pusher HTTP API answers 405 (it serves only
    // GET there); one with it refuses the unsigned request with 401.
    let status = status_of(server.1, &probe);
    if status.contains(" 405 ") {
        eprintln!("skipped: this build's server has no Pusher HTTP API ({status})");
        return;
    }
    drop(server);
    let (ok, r, ctx) = bench(
        "pusher-api.json",
        "150",
        &["--broadcasts", "3", "--broadcast-interval", "0.3"],
    );
    assert!(ok, "{ctx}");
    assert_eq!(r["errors"]["total"], 0, "{ctx}");
    assert_eq!(r["broadcast"]["sent"], 3, "{ctx}");
    assert_eq!(r["broadcast"]["receivers"], 3 * 150, "{ctx}");
    assert!(
        r["broadcast"]["floor_ratio"].as_f64().unwrap() > 0.0,
        "{ctx}"
    );
}

/// What Pusher cannot run is refused before anything starts, the flag named.
#[test]
fn pusher_choices_are_checked_up_front() {
    let err = |args: &[&str]| {
        let out = run_bench(args, Duration::from_secs(30));
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = err(&[
        "--protocol",
        "pusher",
        "--pusher-trigger",
        "client-event",
        "--broadcasts",
        "1",
        "--dashboard-port",
        "0",
    ]);
    assert!(e.contains("--pusher-channel private"), "{e}");
    let e = err(&[
        "--protocol",
        "pusher",
        "--presence",
        "rooms:lobby=param:user",
        "--dashboard-port",
        "0",
    ]);
    assert!(e.contains("--protocol pusher with --presence"), "{e}");
    let e = err(&[
        "--protocol",
        "pusher",
        "--pusher-app",
        "only-an-id",
        "--dashboard-port",
        "0",
    ]);
    assert!(e.contains("ID:KEY:SECRET"), "{e}");
}
