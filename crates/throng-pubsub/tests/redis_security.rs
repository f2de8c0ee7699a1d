//! The Redis link secured and distrusted (issue 12, items 7 and 9), with a
//! real `redis-server`: a password and an ACL user limited to throng's
//! channels; TLS (`rediss://`) with a private CA; messages from Redis that
//! are not valid envelopes for their channel dropped and counted, never
//! delivered; the publish queue bounded in bytes while Redis stalls.

mod common;

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_port, Redis};
use throng_protocol::{OwnedPayload, Payload};
use throng_pubsub::backplane::envelope::Envelope;
use throng_pubsub::conformance::Node;
use throng_pubsub::{Backplane, Broadcast, RedisBackplane, RedisOptions};

/// Two nodes through Redis at `url`: a broadcast from one reaches the other.
fn assert_link_works(url: &str, options: &RedisOptions) {
    let a = Node::new(Arc::new(
        RedisBackplane::connect_with(url, options).expect("node a"),
    ));
    let b = Node::new(Arc::new(
        RedisBackplane::connect_with(url, options).expect("node b"),
    ));
    a.join("rooms:lobby");
    // The SUBSCRIBE travels to Redis: publish until one gets through.
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.events("rooms:lobby").is_empty() {
        assert!(Instant::now() < deadline, "no broadcast got through {url}");
        b.publish("rooms:lobby", "hello");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn connect_error(url: &str, options: &RedisOptions) -> String {
    match RedisBackplane::connect_with(url, options) {
        Ok(_) => panic!("{url} connected"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn password_and_an_acl_user_limited_to_throng_channels() {
    let port = free_port();
    let args = [
        "--port",
        &port.to_string(),
        "--requirepass",
        "s3cret",
        // What a throng node's backplane needs, and no more: PING, PUBLISH
        // and (UN)SUBSCRIBE on throng's topic and control channels, and
        // SET, SCAN and MGET of its retained control messages.
        "--user",
        "throng",
        "on",
        ">n0de-pw",
        "resetchannels",
        "&throng:t:*",
        "&throng:n:*",
        "&throng:c",
        "resetkeys",
        "~throng:k:*",
        "+ping",
        "+publish",
        "+subscribe",
        "+unsubscribe",
        "+set",
        "+scan",
        "+mget",
    ]
    .map(String::from)
    .to_vec();
    let url = format!("redis://:s3cret@127.0.0.1:{port}");
    let _redis = Redis::start_with(port, args, url.clone(), RedisOptions::default());
    let none = RedisOptions::default();
    assert_link_works(&url, &none);
    assert_link_works(&format!("redis://throng:n0de-pw@127.0.0.1:{port}"), &none);

    // Wrong or missing credentials fail at start, saying so, password masked.
    for url in [
        format!("redis://:wrong@127.0.0.1:{port}"),
        format!("redis://throng:wrong@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let err = connect_error(&url, &none);
        assert!(!err.contains("wrong"), "password shown: {err}");
        assert!(
            err.contains("WRONGPASS") || err.contains("NOAUTH") || err.contains("uthentication"),
            "{err}"
        );
    }
}

/// A private CA and a certificate it signed for 127.0.0.1, as PEM files in
/// a fresh directory: (ca.pem, server.pem, server.key).
fn certificates() -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let dir = std::env::temp_dir().join(format!("throng-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "throng test CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    );
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    (paths.0, paths.1, paths.2)
}

#[test]
fn tls_with_a_private_ca() {
    let (ca, cert, key) = certificates();
    let port = free_port();
    let args = vec![
        "--port".to_string(),
        "0".into(),
        "--tls-port".into(),
        port.to_string(),
        "--tls-cert-file".into(),
        cert.display().to_string(),
        "--tls-key-file".into(),
        key.display().to_string(),
        "--tls-ca-cert-file".into(),
        ca.display().to_string(),
        "--tls-auth-clients".into(),
        "no".into(),
        "--requirepass".into(),
        "s3cret".into(),
    ];
    let url = format!("rediss://:s3cret@127.0.0.1:{port}");
    let trusted = RedisOptions {
        ca_file: Some(ca.clone()),
        ..RedisOptions::default()
    };
    let _redis = Redis::start_with(port, args, url.clone(), trusted.clone());
    assert_link_works(&url, &trusted);

    // Without the CA the server's certificate is not trusted.
    let err = connect_error(&url, &RedisOptions::default());
    assert!(
        err.contains("cannot connect") && !err.contains("s3cret"),
        "{err}"
    );
    // Plain redis:// to the TLS port fails; a CA file with redis:// is refused.
    let plain = format!("redis://:s3cret@127.0.0.1:{port}");
    assert!(RedisBackplane::connect(&plain).is_err());
    let err = connect_error(&plain, &trusted);
    assert!(err.contains("rediss://"), "{err}");
    let missing = RedisOptions {
        ca_file: Some("/nonexistent/ca.pem".into()),
        ..RedisOptions::default()
    };
    let err = connect_error(&url, &missing);
    assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    let _ = std::fs::remove_dir_all(ca.parent().unwrap());
}

#[test]
fn invalid_envelopes_are_counted_and_never_delivered() {
    let redis = Redis::start();
    let backplane = Arc::new(RedisBackplane::connect(&redis.url()).unwrap());
    let node = Node::new(backplane.clone());
    node.join("t");
    // Subscribers of another topic, whom a message forged on t's channel
    // must not reach.
    node.join("rooms:admin");
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let mut publish = |bytes: Vec<u8>| {
        redis::cmd("PUBLISH")
            .arg("throng:t:t")
            .arg(bytes)
            .query::<i64>(&mut conn)
            .unwrap()
    };
    let envelope = |topic: &str, event: &str, payload: Payload<'_>| {
        Envelope {
            node: 7,
            topic,
            event,
            payload,
        }
        .to_vec()
    };
    // Until the node's SUBSCRIBE is in place:
    let deadline = Instant::now() + Duration::from_secs(10);
    while publish(envelope("t", "ready", Payload::Json("{}"))) == 0 {
        assert!(Instant::now() < deadline, "the node never subscribed");
        std::thread::sleep(Duration::from_millis(20));
    }
    node.await_event("t", "ready");
    let invalid_before = backplane.stats().invalid.load(Relaxed);
    publish(b"not an envelope".to_vec());
    publish(envelope("rooms:admin", "bad-topic", Payload::Json("{}")));
    publish(envelope(
        "t",
        "bad-json",
        Payload::Json(r#"{"unterminated":"#),
    ));
    publish(envelope("t", "good", Payload::Json(r#"{"ok":true}"#)));
    // Redis keeps a connection's order: once "good" is in, the rest was read.
    node.await_event("t", "good");
    let events = node.events("t");
    assert!(
        events.iter().all(|e| e == "ready" || e == "good"),
        "{events:?}"
    );
    assert_eq!(node.events("rooms:admin"), Vec::<String>::new());
    assert_eq!(backplane.stats().invalid.load(Relaxed) - invalid_before, 3);
    let metrics = throng_pubsub::metrics::text(|s| backplane.describe(s));
    assert!(
        metrics.contains("\nthrong_backplane_invalid_total 3\n"),
        "{metrics}"
    );
}

#[test]
fn the_publish_queue_is_bounded_in_bytes_while_redis_stalls() {
    let redis = Redis::start();
    const BOUND: usize = 1 << 20;
    let options = RedisOptions {
        queue_bytes: BOUND,
        ..RedisOptions::default()
    };
    let sender = Arc::new(RedisBackplane::connect_with(&redis.url(), &options).unwrap());
    let _sender_node = Node::new(sender.clone());
    let receiver = Node::new(Arc::new(RedisBackplane::connect(&redis.url()).unwrap()));
    receiver.join("t");
    let up = || Broadcast::new("t".into(), "up".into(), OwnedPayload::empty(), None);
    let deadline = Instant::now() + Duration::from_secs(10);
    while receiver.events("t").is_empty() {
        assert!(Instant::now() < deadline, "the receiver never subscribed");
        sender.publish(&up());
        std::thread::sleep(Duration::from_millis(20));
    }

    let signal = |sig: i32| {
        #[allow(unsafe_code)]
        // SAFETY: kill(2) on the redis-server child this test started and
        // has not reaped.
        let rc = unsafe { libc::kill(redis.pid() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill {sig}");
    };
    signal(libc::SIGSTOP);
    let big = format!("\"{}\"", "x".repeat(100_000));
    let stats = sender.stats();
    let dropped_before = stats.dropped.load(Relaxed);
    let mut most = 0;
    for i in 0..100 {
        let b = Broadcast::new(
            "t".into(),
            format!("big{i}"),
            OwnedPayload::Json(big.clone()),
            None,
        );
        sender.publish(&b);
        most = most.max(stats.queued_bytes.load(Relaxed));
    }
    let dropped = stats.dropped.load(Relaxed) - dropped_before;
    signal(libc::SIGCONT);
    assert!(most <= BOUND, "{most} bytes queued, bound {BOUND}");
    // 10 MB offered: the queue took about 1 MiB, the pipeline in flight 1 MiB.
    assert!(dropped >= 75, "only {dropped} of 100 dropped");
    let metrics = throng_pubsub::metrics::text(|s| sender.describe(s));
    assert!(
        metrics.contains("throng_backplane_queued_bytes"),
        "{metrics}"
    );

    // Redis back: broadcasts flow again.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !receiver.events("t").iter().any(|e| e == "after") {
        assert!(
            Instant::now() < deadline,
            "no broadcast after Redis came back"
        );
        sender.publish(&Broadcast::new(
            "t".into(),
            "after".into(),
            OwnedPayload::empty(),
            None,
        ));
        std::thread::sleep(Duration::from_millis(50));
    }
}
