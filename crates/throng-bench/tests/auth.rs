//! `throng bench --auth jwt` on the real binary: every user joins with its
//! own token against the embedded server, and against a `--target` the
//! server really checks them: a wrong secret is refused by the server
//! (counted in its `throng_auth_refusals_total`), the right one joins all.

mod common;

use common::{run_bench, throng_bin, tmp};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The run's JSON report, and what to print when a check fails.
fn report(out: &std::process::Output, json: &std::path::Path) -> (serde_json::Value, String) {
    let ctx = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(json).unwrap_or_else(|e| panic!("no JSON ({e})\n{ctx}"));
    (serde_json::from_str(&text).expect("valid JSON"), ctx)
}

/// A run of `users` with `extra` flags, its JSON in `name`.
fn bench(
    name: &str,
    users: &str,
    extra: &[&str],
) -> (std::process::Output, serde_json::Value, String) {
    let json = tmp(name);
    let mut args = vec![
        "--connections",
        users,
        "--arrival-rate",
        "1000",
        "--hold",
        "0",
        "--floor",
        "off",
        "--dashboard-port",
        "0",
        "--json",
        json.to_str().unwrap(),
        "--report",
    ];
    let html = tmp(&format!("{name}.html"));
    args.push(html.to_str().unwrap());
    args.extend_from_slice(extra);
    let out = run_bench(&args, Duration::from_secs(60));
    let (r, ctx) = report(&out, &json);
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(html);
    (out, r, ctx)
}

#[test]
fn every_user_joins_with_its_own_token_on_the_embedded_server() {
    let (out, r, ctx) = bench("auth-embedded.json", "200", &["--auth", "jwt"]);
    assert!(out.status.success(), "{ctx}");
    assert_eq!(r["connections"]["joined"], 200, "{ctx}");
    assert_eq!(r["errors"]["total"], 0, "{ctx}");
    assert_eq!(r["server"]["auth"], "jwt", "{ctx}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("each socket its own user's token"),
        "{ctx}"
    );
}

/// `throng serve --auth jwt` with `secret`, killed when dropped.
struct Server(Child, SocketAddr);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve_jwt(secret: &str) -> Server {
    let mut child = Command::new(throng_bin())
        .args(["serve", "--port", "0", "--bind", "127.0.0.1"])
        .args([
            "--public-metrics",
            "--api-bind",
            "none",
            "--idle-timeout",
            "0",
        ])
        .args(["--auth", "jwt"])
        .env("THRONG_AUTH_JWT_SECRET", secret)
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
    // Keep reading its stdout so it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Server(child, addr)
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

/// A secret of 32+ bytes: the server refuses shorter ones for HS256.
const SECRET: &str = "the-right-secret-of-forty-eight-bytes-for-hs256!!";

#[test]
fn a_target_checks_the_tokens() {
    let server = serve_jwt(SECRET);
    let target = server.1.to_string();
    let no_secret = run_bench(
        &[
            "--target",
            &target,
            "--auth",
            "jwt",
            "--dashboard-port",
            "0",
        ],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&no_secret.stderr);
    assert!(!no_secret.status.success(), "{stderr}");
    assert!(stderr.contains("--auth-jwt-secret"), "{stderr}");

    let wrong = [
        "--target",
        &target,
        "--auth",
        "jwt",
        "--auth-jwt-secret",
        "a-wrong-secret-also-long-enough-to-be-a-good-one",
    ];
    let (out, r, ctx) = bench("auth-wrong.json", "50", &wrong);
    assert!(!out.status.success(), "{ctx}");
    assert_eq!(r["connections"]["joined"], 0, "{ctx}");
    assert_eq!(r["errors"]["total"], 50, "{ctx}");
    assert_eq!(
        r["errors"]["detail"]["handshake_status"]["403"], 50,
        "{ctx}"
    );
    let verdict = r["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("the server refused the clients' tokens (HTTP 403): --auth-jwt-secret must be the secret the server checks tokens with"),
        "{ctx}"
    );
    assert_eq!(
        metric(server.1, "throng_auth_refusals_total"),
        50.0,
        "{ctx}"
    );

    let right = [
        "--target",
        &target,
        "--auth",
        "jwt",
        "--auth-jwt-secret",
        SECRET,
    ];
    let (out, r, ctx) = bench("auth-right.json", "50", &right);
    assert!(out.status.success(), "{ctx}");
    assert_eq!(r["connections"]["joined"], 50, "{ctx}");
    assert_eq!(r["errors"]["total"], 0, "{ctx}");
    assert_eq!(
        metric(server.1, "throng_auth_refusals_total"),
        50.0,
        "{ctx}"
    );
}

/// A bench without tokens against a server that wants them: the server
/// answers every upgrade 403, and the run says so, with the fix, instead
/// of calling the server its limit.
#[test]
fn a_refused_handshake_reports_its_status_and_the_fix() {
    let server = serve_jwt(SECRET);
    let target = server.1.to_string();
    let (out, r, ctx) = bench("auth-none.json", "40", &["--target", &target]);
    assert_eq!(out.status.code(), Some(1), "{ctx}");
    assert_eq!(r["connections"]["joined"], 0, "{ctx}");
    assert_eq!(r["errors"]["by_kind"]["handshake"], 40, "{ctx}");
    assert_eq!(
        r["errors"]["detail"]["handshake_status"]["403"], 40,
        "{ctx}"
    );
    let verdict = r["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("the server refused the clients' authentication (HTTP 403): it wants a token; pass --auth jwt and --auth-jwt-secret"),
        "{ctx}"
    );
    assert!(!verdict.contains("was the limit"), "{ctx}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("handshake_403 40: settings"), "{ctx}");
    assert!(
        stdout.contains("pass --auth jwt and --auth-jwt-secret"),
        "{ctx}"
    );
}
