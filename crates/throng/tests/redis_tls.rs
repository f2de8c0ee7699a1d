//! `serve --workers` over a secured Redis (issue 12, item 7): TLS with a
//! private CA (`--redis-ca-file`) and a password, as the cluster example
//! of `docs/scaling.md`. A broadcast crosses the workers through it; a wrong password
//! stops the start with an error that names the URL with it masked.

mod common;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Client, Server};

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn workers_share_broadcasts_through_tls_redis_with_a_password() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let dir = std::env::temp_dir().join(format!("throng-serve-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let (ca_pem, cert_pem, key_pem) = (dir.join("ca.pem"), dir.join("s.pem"), dir.join("s.key"));
    std::fs::write(&ca_pem, ca.pem()).unwrap();
    std::fs::write(&cert_pem, cert.pem()).unwrap();
    std::fs::write(&key_pem, key.serialize_pem()).unwrap();

    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _redis = Redis(
        Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
            .arg("--tls-cert-file")
            .arg(&cert_pem)
            .arg("--tls-key-file")
            .arg(&key_pem)
            .arg("--tls-ca-cert-file")
            .arg(&ca_pem)
            .args(["--requirepass", "s3cret"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server"),
    );
    let ca_arg = ca_pem.display().to_string();
    let url = format!("rediss://:s3cret@127.0.0.1:{port}");
    // Redis takes a moment to listen: the supervisor's check fails until then.
    let deadline = Instant::now() + Duration::from_secs(10);
    let server = loop {
        let mut child = Command::new(common::throng_bin())
            .args([
                "serve",
                "--port",
                "0",
                "--bind",
                "127.0.0.1",
                "--workers",
                "2",
            ])
            .args(["--redis", &url, "--redis-ca-file", &ca_arg])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        use std::io::BufRead;
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut listening = None;
        let mut line = String::new();
        // Lines until `listening on` (worker and API lines come first), or EOF.
        while listening.is_none() && out.read_line(&mut line).unwrap_or(0) > 0 {
            listening = line
                .trim()
                .strip_prefix("listening on ")
                .map(str::to_string);
            line.clear();
        }
        if let Some(addr) = listening {
            // Keep reading stdout so the supervisor never blocks on it.
            std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
            break Server {
                api: None,
                addr: addr.parse().unwrap(),
                child,
            };
        }
        let _ = child.wait();
        assert!(Instant::now() < deadline, "the workers never started");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut clients: Vec<Client> = (0..20).map(|_| Client::connect(server.addr)).collect();
    for c in &mut clients {
        c.join_lobby();
    }
    // A worker's SUBSCRIBE travels to Redis after its first join: send
    // until every client has had one (each round waits at most a second).
    let mut pending: Vec<usize> = (0..clients.len()).collect();
    for round in 0..10 {
        clients[0].push(
            "rooms:lobby",
            "new:msg",
            &format!(r#"{{"user":"u","body":"over tls {round}"}}"#),
        );
        pending.retain(|&i| {
            let c = &mut clients[i];
            c.sock
                .set_read_timeout(Some(Duration::from_secs(1)))
                .unwrap();
            while let Some((_, data)) = c.next_frame() {
                if String::from_utf8_lossy(&data).contains("over tls") {
                    return false;
                }
            }
            true
        });
        if pending.is_empty() {
            break;
        }
    }
    assert!(
        pending.is_empty(),
        "clients {pending:?} never got a broadcast"
    );

    // A wrong password: the start fails, naming the URL, password masked.
    let out = Command::new(common::throng_bin())
        .args(["serve", "--port", "0", "--bind", "127.0.0.1"])
        .args(["--redis", &format!("rediss://:wrong-pw@127.0.0.1:{port}")])
        .args(["--redis-ca-file", &ca_arg])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("rediss://:***@127.0.0.1:{port}")),
        "{err}"
    );
    assert!(!err.contains("wrong-pw"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
