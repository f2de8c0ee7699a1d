//! An interrupted `throng bench` (the real binary, see `common`) leaves no
//! child process behind.

mod common;

use common::spawn_bench;
use std::process::Command;
use std::time::{Duration, Instant};

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
