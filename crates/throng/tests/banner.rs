//! The start banner tells the truth (issue 38, item 4): with TLS on it
//! gives `https://` and `wss://` addresses, and with a connect hook it
//! points at the app's sign-in page when `--hook-page-url` names it (the
//! chat page opens only for a socket the backend accepts).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::throng_bin;

/// The `open ...` line `throng serve ARGS` prints once it serves, and the
/// port it listens on; the server is stopped after.
fn banner(args: &[&str]) -> (String, u16) {
    let mut child = Command::new(throng_bin())
        .args(["serve", "--port", "0", "--bind", "127.0.0.1"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start throng");
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut port = 0;
    let mut open = None;
    for line in out.lines().map_while(Result::ok) {
        if let Some(addr) = line.strip_prefix("listening on ") {
            port = addr.rsplit(':').next().unwrap().parse().unwrap();
        }
        if line.starts_with("open ") {
            open = Some(line);
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    (open.expect("no `open` line"), port)
}

#[test]
fn plain_http_says_http() {
    let (line, port) = banner(&[]);
    assert_eq!(
        line,
        format!(
            "open http://127.0.0.1:{port}/ for the chat page, and again in a second tab to chat \
             between them (Ctrl-C stops)"
        )
    );
}

#[test]
fn with_tls_the_banner_says_https_and_wss() {
    let dir = std::env::temp_dir().join(format!("throng-banner-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_pem, key_pem) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_pem, cert.pem()).unwrap();
    std::fs::write(&key_pem, key.serialize_pem()).unwrap();
    let (line, port) = banner(&[
        "--tls-cert",
        cert_pem.to_str().unwrap(),
        "--tls-key",
        key_pem.to_str().unwrap(),
    ]);
    assert!(
        line.starts_with(&format!("open https://127.0.0.1:{port}/ for the chat page")),
        "{line}"
    );
    assert!(
        line.contains(&format!("wss://127.0.0.1:{port}/socket")),
        "{line}"
    );
    assert!(
        !line.contains("http://") && !line.contains("ws://"),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn with_a_connect_hook_the_banner_points_at_the_sign_in_page() {
    let hook = ["--hook-url", "http://127.0.0.1:9/throng", "--hook-connect"];
    let mut args = hook.to_vec();
    args.extend(["--hook-page-url", "http://127.0.0.1:8000/"]);
    let (line, port) = banner(&args);
    assert!(
        line.starts_with("open http://127.0.0.1:8000/ (the app's page) to sign in"),
        "{line}"
    );
    assert!(line.contains("http://127.0.0.1:9/throng/connect"), "{line}");
    assert!(
        line.contains(&format!("http://127.0.0.1:{port}/")),
        "{line}"
    );
    // Without the page named: the chat page, and who decides.
    let (line, _) = banner(&hook);
    assert!(line.starts_with("open http://127.0.0.1:"), "{line}");
    assert!(line.contains("--hook-page-url"), "{line}");
}
