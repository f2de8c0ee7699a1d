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
    wait_bench(spawn_bench(args), limit)
}

fn spawn_bench(args: &[&str]) -> std::process::Child {
    Command::new(throng_bin())
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start throng bench")
}

/// Waits for a bench run, killing it (and failing) past `limit` from now.
fn wait_bench(mut child: std::process::Child, limit: Duration) -> std::process::Output {
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
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
            dashboard = Some(r);
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
    assert_eq!(r["scenario"]["heartbeat_secs"], 0.0, "{r}");
    assert_eq!(r["connections"]["joined"], 500, "{r}");
    assert_eq!(r["broadcast"]["receivers"], 500, "{r}");
    assert_eq!(r["errors"]["total"], 0, "{r}");
    let _ = std::fs::remove_file(json);
}

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
    let run = |extra: &[&str], name: &str| -> serde_json::Value {
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
        assert!(out.status.success(), "stderr:\n{stderr}");
        let r = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(json);
        r
    };
    let r = run(&[], "adaptive.json");
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
    let fixed = run(&["--arrival-rate", "2000"], "fixed.json");
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

/// The live (not zombie) children of `pid`, from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some((state, ppid)) = proc_state(p) {
            if ppid == pid && state != 'Z' {
                out.push(p);
            }
        }
    }
    out
}

/// (state, ppid) of a process, if it exists.
fn proc_state(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: the fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Ctrl-C during a run: the bench kills its embedded server and its agents
/// before it exits (a signal runs no `Drop`; an interrupted 1,000,000 run
/// had left the supervisor, its workers and Redis behind).
#[test]
fn an_interrupted_run_leaves_no_child_behind() {
    let bench = spawn_bench(&[
        "--connections",
        "40",
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
    ]);
    let pid = bench.id();
    // The server and an agent, once the run has started them.
    let deadline = Instant::now() + Duration::from_secs(30);
    let kids = loop {
        let kids = children_of(pid);
        if kids.len() >= 2 {
            break kids;
        }
        assert!(Instant::now() < deadline, "the run started {kids:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    // Its exit status first: its output pipes stay open as long as any
    // child it left behind holds them.
    let mut bench = bench;
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(s) = bench.try_wait().expect("wait") {
            break s.code();
        }
        if Instant::now() > deadline {
            let _ = bench.kill();
            panic!("throng bench did not stop within 30 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let alive: Vec<u32> = kids
            .iter()
            .copied()
            .filter(|k| proc_state(*k).is_some_and(|(s, _)| s != 'Z'))
            .collect();
        if alive.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            for k in &alive {
                let _ = Command::new("kill")
                    .args(["-KILL", &k.to_string()])
                    .status();
            }
            panic!(
                "children {alive:?} of the interrupted run were still alive 15 s after it ended"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = bench.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("stopped by signal 2"), "{stderr}");
    assert_eq!(code, Some(130), "{stderr}");
}
