//! The bench as production runs the server: over TLS, every client with
//! its own token, topics keeping history. The restart storm (the server
//! stopped with SIGTERM, its drain's 1012 to every socket, started again
//! on its port; history in Redis) at a small size, and a load with
//! `--compare-plain`'s plaintext run and the handshake rounds, whose
//! returning clients resume their TLS sessions.
//!
//! Needs `redis-server` on the PATH (the restart storm starts its own).

mod common;

use common::{run_bench, tmp};
use std::time::Duration;

fn report(out: &std::process::Output, json: &std::path::Path) -> (serde_json::Value, String) {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "throng bench failed\nstdout:\n{}\nstderr:\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let r = serde_json::from_str(&std::fs::read_to_string(json).expect("json written"))
        .expect("valid JSON");
    let _ = std::fs::remove_file(json);
    (r, stderr)
}

/// 600 clients over TLS with JWT on 3 topics through a restart: every
/// socket closed with 1012, every client back with its token and
/// recovered from the history in Redis, each counting every number once.
#[test]
fn a_restart_storm_over_tls_with_tokens_loses_nothing() {
    let json = tmp("tls-storm.json");
    let out = run_bench(
        &[
            "--storm",
            "--storm-restart",
            "--tls",
            "--auth",
            "jwt",
            "--connections",
            "600",
            "--storm-topics",
            "3",
            "--storm-rate",
            "20",
            "--storm-hold",
            "1",
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    let (r, stderr) = report(&out, &json);
    let ctx = || {
        format!(
            "{}\nstderr:\n{stderr}",
            serde_json::to_string_pretty(&r).unwrap()
        )
    };
    assert_eq!(r["tls"], true, "{}", ctx());
    assert_eq!(r["auth"], "jwt", "{}", ctx());
    assert_eq!(r["store"], "redis", "{}", ctx());
    let storm = &r["storm"];
    assert_eq!(storm["mode"], "restart", "{}", ctx());
    assert_eq!(storm["complete"], true, "{}", ctx());
    assert_eq!(storm["rejoins"], 600, "{}", ctx());
    assert_eq!(storm["recovered"], 600, "{}", ctx());
    assert_eq!(storm["not_recovered"], 0, "{}", ctx());
    // Every socket got the drain's close, with its code.
    assert_eq!(storm["closes_by_code"]["1012"], 600, "{}", ctx());
    assert!(
        storm["first_1012_to_all_recovered_secs"].as_f64() > Some(0.0),
        "{}",
        ctx()
    );
    // The restarted server cannot read its predecessor's tickets: every
    // rejoin's handshake is a full one, none failed for TLS.
    let handshakes = storm["tls_full"].as_u64().unwrap() + storm["tls_resumed"].as_u64().unwrap();
    assert!(handshakes >= 600, "{}", ctx());
    assert!(storm["connect_failures"].get("tls").is_none(), "{}", ctx());
    assert!(
        storm["server_cpu_us_per_rejoin"].as_f64() > Some(0.0),
        "{}",
        ctx()
    );
    assert_eq!(r["loss"]["errors"], 0, "{}", ctx());
    assert_eq!(r["loss"]["duplicates"], 0, "{}", ctx());
    let last = r["loss"]["last_numbers"].as_array().expect("last numbers");
    let received: u64 = last.iter().map(|n| n.as_u64().unwrap() * 200).sum();
    assert_eq!(r["clients_status"]["received"], received, "{}", ctx());
}

/// A load over TLS with JWT and a history of 100 on the broadcast topic,
/// after the same load in plaintext (`--compare-plain`): both runs' figures
/// side by side, and the handshake rounds' returning clients resume.
#[test]
fn compare_plain_puts_tls_beside_plaintext_and_returning_clients_resume() {
    let json = tmp("compare-plain.json");
    let out = run_bench(
        &[
            "--connections",
            "400",
            "--broadcasts",
            "2",
            "--tls",
            "--auth",
            "jwt",
            "--history",
            "100",
            "--compare-plain",
            "--handshake-sample",
            "150",
            "--json",
            json.to_str().unwrap(),
            "--dashboard-port",
            "0",
        ],
        Duration::from_secs(240),
    );
    let (r, stderr) = report(&out, &json);
    let ctx = || {
        format!(
            "{}\nstderr:\n{stderr}",
            serde_json::to_string_pretty(&r).unwrap()
        )
    };
    assert!(stderr.contains("keeps the last 100 messages"), "{}", ctx());
    assert_eq!(r["server"]["tls"], true, "{}", ctx());
    assert_eq!(r["server"]["history_size"], 100, "{}", ctx());
    assert_eq!(r["connections"]["joined"], 400, "{}", ctx());
    assert_eq!(r["errors"]["total"], 0, "{}", ctx());
    let c = &r["tls_vs_plain"];
    assert_eq!(c["plain_joined"], 400, "{}", ctx());
    assert_eq!(c["plain_errors"], 0, "{}", ctx());
    assert!(
        c["broadcast_last_ms"]["plain"].as_f64().is_some(),
        "{}",
        ctx()
    );
    assert!(
        c["broadcast_last_ms"]["tls"].as_f64().is_some(),
        "{}",
        ctx()
    );
    let h = &r["handshakes"];
    assert_eq!(h["tls"], true, "{}", ctx());
    assert_eq!(h["failed"], 0, "{}", ctx());
    // 3 rounds of 150 returning clients, every one offering its ticket
    // to the process that issued it.
    assert_eq!(h["returning"], 450, "{}", ctx());
    assert_eq!(h["resumed"], 450, "{}", ctx());
    assert!(h["new_cpu_us"].as_f64().is_some(), "{}", ctx());
    assert!(
        c["connect_cpu_us_returning"]["plain"].as_f64().is_some(),
        "{}",
        ctx()
    );
}
