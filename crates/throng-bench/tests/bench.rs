//! Runs the real `throng` binary: `throng bench` against its embedded server,
//! and checks the JSON it writes counts every connection and receipt.
//!
//! The binary lives in another crate, so Cargo cannot build it for us here:
//! build it first (`cargo build -p throng` or `--release`). The newest of
//! `target/release/throng` and `target/debug/throng` is used; set
//! `THRONG_BIN` to pick one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn throng_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("THRONG_BIN") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let newest = ["release", "debug"]
        .iter()
        .map(|p| target.join(p).join("throng"))
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max();
    match newest {
        Some((_, p)) => p,
        None => panic!(
            "no throng binary under {}: build it first with `cargo build -p throng` (or --release)",
            target.display()
        ),
    }
}

fn run_bench(args: &[&str], limit: Duration) -> std::process::Output {
    let mut child = Command::new(throng_bin())
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start throng bench");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "throng bench ran over {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("throng-bench-test-{}-{name}", std::process::id()))
}

#[test]
fn bench_2000_connections_two_agents_three_broadcasts() {
    let json = tmp("run.json");
    let html = tmp("run.html");
    let out = run_bench(
        &[
            "--connections",
            "2000",
            "--agents",
            "2",
            "--broadcasts",
            "3",
            "--json",
            json.to_str().unwrap(),
            "--report",
            html.to_str().unwrap(),
            "--dashboard-port",
            "0",
        ],
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "throng bench failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid JSON");
    let ctx = || {
        format!(
            "report: {}\nstderr:\n{stderr}",
            serde_json::to_string_pretty(&r).unwrap()
        )
    };
    assert_eq!(r["connections"]["target"], 2000, "{}", ctx());
    assert_eq!(r["connections"]["connected"], 2000, "{}", ctx());
    assert_eq!(r["connections"]["joined"], 2000, "{}", ctx());
    assert_eq!(r["errors"]["total"], 0, "{}", ctx());
    assert_eq!(r["errors"]["by_kind"]["refused"], 0, "{}", ctx());
    assert_eq!(r["broadcast"]["sent"], 3, "{}", ctx());
    assert_eq!(r["broadcast"]["receivers"], 2000 * 3, "{}", ctx());
    for key in [
        "/arrival/per_sec",
        "/join/p99_ms",
        "/broadcast/p99_ms",
        "/broadcast/last_ms",
        "/server/bytes_per_conn",
        "/agent/bytes_per_conn",
    ] {
        assert!(
            r.pointer(key).and_then(|v| v.as_f64()).is_some(),
            "{key} missing\n{}",
            ctx()
        );
    }
    assert!(
        r["broadcast"]["last_ms"].as_f64().unwrap() >= r["broadcast"]["p50_ms"].as_f64().unwrap()
    );
    assert_eq!(r["storm"]["connections"], 2000, "{}", ctx());
    assert!(
        r["storm"]["secs_to_zero"].as_f64().is_some(),
        "the server never reported 0 connections\n{}",
        ctx()
    );
    let page = std::fs::read_to_string(&html).expect("report written");
    assert!(
        page.contains("<svg") || page.contains("function chart"),
        "report has charts"
    );
    assert!(!page.contains("src=\"http"), "report is self-contained");
    assert!(
        stdout.contains("broadcast latency ms"),
        "summary table printed:\n{stdout}"
    );
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(html);
}

#[test]
fn bench_runs_the_phoenix_tsung_config_scaled_down() {
    let json = tmp("tsung.json");
    let xml = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/phoenix.xml");
    let out = run_bench(
        &[
            "--tsung",
            xml.to_str().unwrap(),
            "--max-users",
            "600",
            "--arrival-rate",
            "1000",
            "--hold",
            "1",
            "--json",
            json.to_str().unwrap(),
            "--dashboard-port",
            "0",
        ],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr:\n{stderr}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["scenario"]["serializer"], "v1");
    assert_eq!(r["connections"]["connected"], 600, "{r}");
    assert_eq!(r["connections"]["joined"], 600, "{r}");
    assert_eq!(r["errors"]["total"], 0, "{r}");
    assert_eq!(r["agent"]["count"], 3, "one local agent per Tsung client");
    assert!(stderr.contains("mapped onto 3 local agent"), "{stderr}");
    let _ = std::fs::remove_file(json);
}
