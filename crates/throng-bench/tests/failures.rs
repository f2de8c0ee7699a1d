//! `throng bench` (the real binary, see `common`) fails loudly: bad flags
//! are refused before anything starts, a target with nothing listening is
//! named, a run that fails its own success criteria exits non-zero, and an
//! interrupted run writes what it measured so far.

mod common;

use common::{run_bench, spawn_bench, tmp};
use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::{Duration, Instant};

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_flags_are_refused_before_anything_starts() {
    for (args, says) in [
        (
            &["--arrival-rate", "0"][..],
            "--arrival-rate 0: users per second must be more than 0",
        ),
        (
            &["--connections", "0"][..],
            "--connections 0: a run needs at least 1 user",
        ),
        (
            &["--scenario", "nope.toml"][..],
            "--scenario nope.toml: cannot read it",
        ),
        (
            &["--hold", "-5"][..],
            "--hold -5: seconds must be 0 or more",
        ),
    ] {
        let out = run_bench(args, Duration::from_secs(20));
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("throng bench:"),
            "nothing started: {stderr}"
        );
    }
}

#[test]
fn a_target_with_nothing_listening_is_named() {
    // A port that was free a moment ago: nothing listens there now.
    let port = common::free_port();
    let target = format!("127.0.0.1:{port}");
    let out = run_bench(
        &[
            "--target",
            &target,
            "--connections",
            "10",
            "--dashboard-port",
            "0",
        ],
        Duration::from_secs(20),
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("nothing is listening at {target}")),
        "{stderr}"
    );
}

/// A server that takes 5 of 20 connections: the run reports FAILED and
/// exits 1, so a CI job can gate on it.
#[test]
fn a_run_that_fails_its_criteria_exits_non_zero() {
    let out = run_bench(
        &[
            "--connections",
            "20",
            "--arrival-rate",
            "200",
            "--heartbeat",
            "0",
            "--floor",
            "off",
            "--dashboard-port",
            "0",
            "--server-arg=--max-connections=5",
        ],
        Duration::from_secs(90),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = stderr_of(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("FAILED: 5 of 20 users joined"), "{stdout}");
    assert!(
        stderr.contains("the run failed: 5 of 20 users joined"),
        "{stderr}"
    );
}

/// `--min-available` above anything the machine has: the ramp-up stops at
/// the first check, the users connected stay and get the broadcast, and
/// the report says where it stopped (and fails: not everyone joined).
#[test]
fn a_ramp_up_stopped_by_min_available_keeps_its_users_and_broadcasts() {
    let json = tmp("min-available.json");
    let out = run_bench(
        &[
            "--connections",
            "400",
            "--arrival-rate",
            "40",
            "--heartbeat",
            "0",
            "--broadcasts",
            "1",
            "--floor",
            "off",
            "--min-available",
            "1000000GiB",
            "--dashboard-port",
            "0",
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(90),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("under --min-available"), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let stop = &r["arrival"]["stopped_by_memory"];
    let joined = r["connections"]["joined"].as_u64().unwrap();
    assert!(stop["connected"].as_u64().is_some(), "{stop}");
    assert!((1..400).contains(&joined), "joined {joined}: {stdout}");
    assert_eq!(r["errors"]["total"], 0, "{stdout}");
    assert_eq!(r["broadcast"]["sent"], 1, "{stdout}");
    assert_eq!(
        r["broadcast"]["receivers"].as_u64(),
        Some(joined),
        "the broadcast reaches everyone who joined: {stdout}"
    );
    assert!(
        stdout.contains("users joined (the ramp-up stopped at"),
        "{stdout}"
    );
}

/// SIGTERM during the hold: the children are gone, and the JSON and HTML
/// reports hold what was measured so far.
#[test]
fn sigterm_writes_a_partial_report() {
    let json = tmp("partial.json");
    let html = tmp("partial.html");
    let mut bench = spawn_bench(&[
        "--connections",
        "30",
        "--arrival-rate",
        "1000",
        "--hold",
        "120",
        "--heartbeat",
        "0",
        "--floor",
        "off",
        "--dashboard-port",
        "0",
        "--json",
        json.to_str().unwrap(),
        "--report",
        html.to_str().unwrap(),
    ]);
    let pid = bench.id();
    let stderr = BufReader::new(bench.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = String::new();
    while !seen.contains("hold ") {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
            }
            Err(_) => {
                let _ = bench.kill();
                panic!("no hold within 60 s:\n{seen}");
            }
        }
    }
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(s) = bench.try_wait().expect("wait") {
            break s.code();
        }
        if Instant::now() > deadline {
            let _ = bench.kill();
            panic!("throng bench did not stop within 30 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let rest: String = rx.iter().collect::<Vec<_>>().join("\n");
    assert_eq!(code, Some(143), "{seen}{rest}");
    assert!(rest.contains("stopped by signal 15"), "{rest}");
    assert!(rest.contains("partial report"), "{rest}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("partial json")).unwrap();
    assert_eq!(v["partial"], true, "{v}");
    assert_eq!(
        v["status"], "interrupted by signal 15 during the hold",
        "{v}"
    );
    assert_eq!(v["counters"]["joined"], 30, "{v}");
    let page = std::fs::read_to_string(&html).expect("partial html");
    assert!(page.contains("interrupted by signal 15"));
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(html);
}

/// `throng agent` with no controller listening says so at once (and keeps
/// retrying), instead of sitting silent.
#[test]
fn an_agent_with_no_controller_says_so_at_once() {
    let port = common::free_port();
    let controller = format!("127.0.0.1:{port}");
    let mut agent = Command::new(common::throng_bin())
        .args(["agent", "--controller", &controller, "--token", "t"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start throng agent");
    let stderr = BufReader::new(agent.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(10));
    let _ = agent.kill();
    let _ = agent.wait();
    let first = first.expect("a message within 10 s");
    assert!(
        first.contains(&format!("no controller at {controller}")) && first.contains("retrying"),
        "{first}"
    );
}
