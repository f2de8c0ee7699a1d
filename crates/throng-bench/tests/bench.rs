//! Runs the real `throng` binary: `throng bench` against its embedded server,
//! and checks the JSON it writes counts every connection and receipt.
//!
//! The binary lives in another crate, so Cargo cannot build it for us here:
//! build it first (`cargo build -p throng` or `--release`). The newest of
//! `target/release/throng` and `target/debug/throng` is used; set
//! `THRONG_BIN` to pick one.

mod common;

use common::{run_bench, spawn_bench, tmp, wait_bench};
use std::path::Path;
use std::time::{Duration, Instant};
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
            // Closer than a fan-out takes: they overlap, and the floor
            // adds a train of rounds on the same schedule.
            "--broadcast-interval",
            "0.002",
            // Heartbeats every second: the floor's sockets beat too, and
            // its rounds run over them.
            "--heartbeat",
            "1",
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
    assert_eq!(
        r["messages"]["out_binary"],
        0,
        "the built-in scenario sends text frames\n{}",
        ctx()
    );
    assert_eq!(r["broadcast"]["receivers"], 2000 * 3, "{}", ctx());
    // Adaptive arrival by default: the rates it chose are reported.
    assert!(
        r["arrival"]["adaptive"]["steps"]
            .as_array()
            .is_some_and(|s| !s.is_empty()),
        "{}",
        ctx()
    );
    assert!(
        r["verdict"].as_str().is_some_and(|v| !v.is_empty()),
        "{}",
        ctx()
    );
    assert_eq!(
        r["errors"]["attributed"],
        serde_json::json!([]),
        "{}",
        ctx()
    );
    // The floor, on by default with broadcasts: the same fan-out with no
    // server, a positive time to the last receiver, and the ratio to it.
    assert_eq!(r["floor"]["sockets"], 2000, "{}", ctx());
    assert_eq!(r["floor"]["receivers"], 2000 * 3, "{}", ctx());
    assert!(
        r["floor"]["last_p50_ms"].as_f64().is_some_and(|x| x > 0.0),
        "{}",
        ctx()
    );
    assert!(
        r["broadcast"]["floor_ratio"]
            .as_f64()
            .is_some_and(|x| x > 0.0),
        "{}",
        ctx()
    );
    assert!(
        r["floor"]["writer_cpu_us_per_receiver"].as_f64().is_some(),
        "{}",
        ctx()
    );
    assert!(
        r["floor"]["heartbeats_per_sec"]
            .as_f64()
            .is_some_and(|x| x > 0.0),
        "the floor runs over the users' heartbeats\n{}",
        ctx()
    );
    assert!(
        r["floor"]["train_last_ms"]
            .as_array()
            .is_some_and(|t| t.len() == 3 && t.iter().all(|x| x.as_f64().unwrap_or(0.0) > 0.0)),
        "{}",
        ctx()
    );
    assert!(
        r["broadcast"]["floor_compared"]
            .as_str()
            .is_some_and(|s| s.contains("on their schedule")),
        "{}",
        ctx()
    );
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
    assert!(
        r["presence"].is_null(),
        "no presence rule, no presence: {}",
        ctx()
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
    assert!(stdout.contains("last receiver / floor"), "{stdout}");
    assert!(stdout.contains("OS settings in force"), "{stdout}");
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(html);
}

/// `--presence`: the embedded server keeps presence for rooms:lobby (list,
/// then count mode, a diff every 100 ms), two agents; the report counts
/// presence messages apart from the rest (their bytes add up to every
/// byte the clients received), and every join's time until the last
/// subscriber saw it.
#[test]
fn bench_with_presence_counts_its_traffic_and_join_visibility() {
    let users = 1500;
    for (rule, kind) in [
        ("rooms:lobby=param:user", "diff"),
        ("rooms:lobby=param:user/count", "count"),
    ] {
        let json = tmp(&format!("presence-{kind}.json"));
        let out = run_bench(
            &[
                "--connections",
                &users.to_string(),
                "--agents",
                "2",
                "--presence",
                rule,
                "--server-arg=--presence-interval",
                "--server-arg=100",
                "--json",
                json.to_str().unwrap(),
                "--dashboard-port",
                "0",
            ],
            Duration::from_secs(60),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        let p = &r["presence"];
        let ctx = format!(
            "{rule}: {}\nstderr:\n{stderr}",
            serde_json::to_string_pretty(p).unwrap()
        );
        assert_eq!(r["connections"]["joined"], users, "{ctx}");
        assert_eq!(r["errors"]["total"], 0, "{ctx}");
        assert_eq!(p["rule"], rule, "{ctx}");
        assert_eq!(p["joins"], users, "{ctx}");
        let n = |k: &str, f: &str| p[k][f].as_u64().unwrap();
        if kind == "diff" {
            assert_eq!(
                n("state", "messages"),
                users,
                "a presence_state per join: {ctx}"
            );
            assert!(n("diff", "messages") > 0 && n("diff", "bytes") > 0, "{ctx}");
            assert_eq!(n("count", "messages"), 0, "{ctx}");
            assert!(p["diffs_distinct"].as_u64().unwrap() > 0, "{ctx}");
            assert_eq!(p["diffs_unparsed"], 0, "{ctx}");
        } else {
            assert!(
                n("count", "messages") > users,
                "one on join, then changes: {ctx}"
            );
            assert_eq!(n("state", "messages") + n("diff", "messages"), 0, "{ctx}");
        }
        assert!(n("other", "messages") >= users, "the join replies: {ctx}");
        let all: u64 = ["state", "diff", "count", "other"]
            .iter()
            .map(|k| n(k, "bytes"))
            .sum();
        assert_eq!(Some(all), r["messages"]["bytes_in"].as_u64(), "{ctx}");
        assert!(p[kind]["bytes_per_sec"].as_f64().unwrap() > 0.0, "{ctx}");
        assert!(p["bytes_per_join"].as_f64().unwrap() > 0.0, "{ctx}");
        // Every join was seen by every subscriber, and timed.
        let v = &p["join_visible"];
        assert_eq!(v["count"], users, "{ctx}");
        assert_eq!(p["join_visible_unseen"], 0, "{ctx}");
        let ms = |k: &str| v[k].as_f64().unwrap();
        assert!(
            ms("p50_ms") > 0.0 && ms("p50_ms") <= ms("p99_ms") && ms("p99_ms") <= ms("max_ms"),
            "{ctx}"
        );
        assert!(
            r["arrival"]["server_cpu_us_per_join"].as_f64().is_some(),
            "{ctx}"
        );
        assert!(
            stdout.contains("join visible to all subscribers"),
            "{stdout}"
        );
    }
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
    // Tsung sends `<websocket type="message">` in binary frames (no
    // frame="text" in phoenix.xml), and so does the import: every join went
    // binary, and the server answered them all (joined above).
    assert_eq!(r["messages"]["out"], 600, "{r}");
    assert_eq!(r["messages"]["out_binary"], 600, "{r}");
    assert_eq!(r["messages"]["server_in_total"], 600.0, "{r}");
    assert!(stderr.contains("mapped onto 3 local agent"), "{stderr}");
    let _ = std::fs::remove_file(json);
}

/// `--netns on`: the server and agents run in a private network namespace
/// with their own TCP hash table, the host's setting is left as it was, and
/// the dashboard (bound before the move) still answers from the host.
#[test]
fn bench_in_a_private_network_namespace() {
    let knob = "/proc/sys/net/ipv4/tcp_child_ehash_entries";
    if !throng_bench::sys::is_root() || std::fs::metadata(knob).is_err() {
        eprintln!("skipped: --netns needs root and Linux 5.19+ ({knob})");
        return;
    }
    let before = std::fs::read_to_string(knob).unwrap();
    let json = tmp("netns.json");
    let port = common::free_port();
    let port_arg = port.to_string();
    let mut child = spawn_bench(&[
        "--connections",
        "500",
        "--netns",
        "on",
        "--heartbeat",
        "0",
        "--broadcasts",
        "1",
        "--hold",
        "3",
        "--dashboard-port",
        &port_arg,
        "--json",
        json.to_str().unwrap(),
    ]);
    // The dashboard answers from the host's namespace while the run is on.
    let start = Instant::now();
    let mut dashboard = None;
    while dashboard.is_none() && start.elapsed() < Duration::from_secs(20) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(b"GET /data.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
            // The listener is bound (and accepts) before the dashboard is
            // served: an empty answer means not yet (a loaded CI machine
            // took over 2 s).
            if !r.is_empty() {
                dashboard = Some(r);
            }
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let out = wait_bench(child, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr:\n{stderr}");
    let dashboard = dashboard.expect("dashboard reachable from the host during the run");
    assert!(dashboard.starts_with("HTTP/1.1 200"), "{dashboard}");
    assert_eq!(
        std::fs::read_to_string(knob).unwrap(),
        before,
        "host setting restored"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["kernel"]["private_netns"], true, "{r}");
    assert_eq!(r["kernel"]["tcp_ehash_buckets"], 65536, "{r}");
    // Machine-wide figures and global settings, read on the host.
    assert!(r["kernel"]["backlog_drops"].is_u64(), "{r}");
    for k in ["net.ipv4.tcp_mem", "net.core.netdev_max_backlog"] {
        assert!(r["os"]["settings"][k].is_string(), "{k}: {r}");
    }
    assert_eq!(r["scenario"]["heartbeat_secs"], 0.0, "{r}");
    assert_eq!(r["connections"]["joined"], 500, "{r}");
    assert_eq!(r["broadcast"]["receivers"], 500, "{r}");
    assert_eq!(r["errors"]["total"], 0, "{r}");
    let _ = std::fs::remove_file(json);
}

/// The reconnect storm at a tiny size (2,000 clients on 4 topics: one
/// server and one client process), every client cut and rejoining with
/// `since`, each counting every number once, in order; and without
/// history, the same joins and burst with no cut.
#[test]
fn bench_storm_every_client_recovers_every_number() {
    let json = tmp("storm.json");
    let out = run_bench(
        &[
            "--storm",
            "--connections",
            "2000",
            "--storm-topics",
            "4",
            "--storm-rate",
            "20",
            "--storm-hold",
            "1",
            "--json",
            json.to_str().unwrap(),
            "--dashboard-port",
            "0",
        ],
        Duration::from_secs(90),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "throng bench --storm failed\nstdout:\n{}\nstderr:\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid JSON");
    let ctx = || serde_json::to_string_pretty(&r).unwrap();
    assert_eq!(r["clients"], 2000, "{}", ctx());
    assert_eq!(r["history"], true, "{}", ctx());
    let storm = &r["storm"];
    assert_eq!(storm["complete"], true, "{}", ctx());
    assert_eq!(storm["rejoins"], 2000, "{}", ctx());
    assert_eq!(storm["recovered"], 2000, "{}", ctx());
    assert_eq!(r["loss"]["errors"], 0, "{}", ctx());
    // 4 topics x 10 burst messages each, then 20 a second: every client
    // holds its topic's last number, past the burst.
    let last = r["loss"]["last_numbers"].as_array().expect("last numbers");
    assert_eq!(last.len(), 4, "{}", ctx());
    assert!(last.iter().all(|n| n.as_u64() > Some(10)), "{}", ctx());
    assert!(storm["replayed"].as_u64() > Some(0), "{}", ctx());
    // Every client received every number of its topic exactly once.
    let received: u64 = last.iter().map(|n| n.as_u64().unwrap() * 500).sum();
    assert_eq!(r["clients_status"]["received"], received, "{}", ctx());
    assert!(
        r["burst"]["deliveries_per_sec"].as_f64() > Some(0.0),
        "{}",
        ctx()
    );

    let off = tmp("storm-off.json");
    let out = run_bench(
        &[
            "--storm",
            "--storm-history",
            "off",
            "--connections",
            "1000",
            "--storm-topics",
            "4",
            "--json",
            off.to_str().unwrap(),
            "--dashboard-port",
            "0",
        ],
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&off).expect("json written"))
            .expect("valid JSON");
    assert_eq!(r["history"], false);
    assert!(r["storm"].is_null(), "no cut without history");
    assert_eq!(r["loss"]["errors"], 0);
    assert_eq!(r["clients_status"]["received"], 1000 * 10);
}

/// `--floor-sample` under the run's users: the floor opens that many
/// sockets, spread over both agents, gets every receipt of every round,
/// and reports its times scaled to the run (users / sockets) beside the
/// times measured, saying so in the summary.
#[test]
fn a_floor_on_a_sample_is_scaled_and_says_so() {
    let json = tmp("floor-sample.json");
    let out = run_bench(
        &[
            "--connections",
            "3000",
            "--agents",
            "2",
            "--broadcasts",
            "1",
            "--floor-sample",
            "1000",
            "--heartbeat",
            "5",
            "--json",
            json.to_str().unwrap(),
            "--dashboard-port",
            "0",
        ],
        Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(out.status.success(), "{ctx}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).unwrap();
    let _ = std::fs::remove_file(&json);
    let f = &r["floor"];
    assert_eq!(f["sockets"], 1000, "{ctx}");
    assert_eq!(f["users"], 3000, "{ctx}");
    assert_eq!(f["scale"], 3.0, "{ctx}");
    assert_eq!(f["complete"], true, "{ctx}");
    assert!(f["incomplete"].is_null(), "{ctx}");
    assert_eq!(f["receivers"], 1000 * 3, "every receipt of 3 rounds: {ctx}");
    let (scaled, measured) = (
        f["rounds_last_ms"].as_array().unwrap(),
        f["sample_rounds_last_ms"].as_array().unwrap(),
    );
    assert_eq!(scaled.len(), 3, "{ctx}");
    for (s, m) in scaled.iter().zip(measured) {
        let (s, m) = (s.as_f64().unwrap(), m.as_f64().unwrap());
        assert!(m > 0.0 && (s - 3.0 * m).abs() < 1e-6, "{s} vs {m}: {ctx}");
    }
    assert!(
        f["note"]
            .as_str()
            .unwrap()
            .contains("on a sample: 1000 of the 3000 users' sockets"),
        "{ctx}"
    );
    assert!(r["broadcast"]["floor_ratio"].as_f64().is_some(), "{ctx}");
    assert!(
        stdout.contains("measured on 1,000 of the 3,000 users' sockets, times above x3.00"),
        "{ctx}"
    );
}

/// On a terminal, with the dashboard on, the run ends by itself: it once
/// kept the dashboard up until Enter was pressed. `script` gives the run a
/// terminal for stdin and stderr; nothing is ever typed into it.
#[test]
fn a_run_on_a_terminal_ends_by_itself() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no `script` (util-linux) to give the run a terminal");
        return;
    }
    let port = common::free_port().to_string();
    let bench = common::throng_bin();
    let cmd = format!(
        "{} bench --connections 20 --arrival-rate 200 --heartbeat 0 --floor off --dashboard-port {port}",
        bench.display()
    );
    // stdin stays open (a pipe script forwards to the terminal) and silent.
    let child = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start script");
    let out = wait_bench(child, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("dashboard: http://"),
        "the dashboard was on: {text}"
    );
    assert!(!text.contains("press Enter"), "{text}");
}
