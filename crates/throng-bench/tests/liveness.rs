//! A bench's agents (the real binary, see `common`) as the controller sees
//! them: one stopped past the link's old 60 s read timeout is slow, not
//! gone, and the run completes; one killed is named with the phase and its
//! last progress, and the run ends early with the figures so far.

mod common;

use common::{spawn_bench, tmp, wait_bench};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// The bench's agent processes (`throng agent --controller ...`), by pid.
fn agents_of(bench: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let mut f = rest.split(' ');
        let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<u32>().ok()));
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if ppid == Some(bench)
            && state != Some("Z")
            && args.get(1) == Some(&&b"agent"[..])
            && !args.contains(&&b"--floor-writer"[..])
        {
            out.push(pid);
        }
    }
    out.sort();
    out
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// The bench's stderr, line by line, on a channel; and what it said so far.
fn stderr_lines(bench: &mut Child) -> Receiver<String> {
    let stderr = BufReader::new(bench.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Reads `lines` into `seen` until one satisfies `done` (within `limit`;
/// the bench is killed and the test fails past it).
fn await_line(
    bench: &mut Child,
    lines: &Receiver<String>,
    seen: &mut String,
    limit: Duration,
    done: impl Fn(&str) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
                if done(&line) {
                    return;
                }
            }
            Err(_) => {
                let _ = bench.kill();
                panic!("not seen within {limit:?}:\n{seen}");
            }
        }
    }
}

/// The `joined N` of a progress line.
fn joined(line: &str) -> Option<u64> {
    line.split("joined ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// An agent stopped (SIGSTOP) from the hold's start for 65 s, past the 60 s
/// read timeout that used to declare such an agent gone, through the hold,
/// the storm and into the collection of final reports: the controller says
/// it is slow and waits; once continued (SIGCONT) it reports, the run
/// passes, and the report says for how long it was silent.
#[test]
fn a_stopped_agent_is_slow_not_gone() {
    let json = tmp("slow-agent.json");
    let mut bench = spawn_bench(&[
        "--connections",
        "400",
        "--agents",
        "2",
        "--arrival-rate",
        "400",
        "--heartbeat",
        "0",
        "--hold",
        "20",
        "--floor",
        "off",
        "--dashboard-port",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    let lines = stderr_lines(&mut bench);
    let mut seen = String::new();
    await_line(
        &mut bench,
        &lines,
        &mut seen,
        Duration::from_secs(60),
        |l| l.starts_with("hold "),
    );
    let agents = agents_of(bench.id());
    assert_eq!(agents.len(), 2, "{agents:?}\n{seen}");
    let stopped = agents[1];
    signal(stopped, "STOP");
    // Past the old timeout; the controller says so meanwhile.
    let until = Instant::now() + Duration::from_secs(65);
    while Instant::now() < until {
        if let Ok(line) = lines.recv_timeout(until.saturating_duration_since(Instant::now())) {
            seen.push_str(&line);
            seen.push('\n');
        }
    }
    signal(stopped, "CONT");
    std::thread::spawn(move || lines.iter().for_each(drop));
    let out = wait_bench(bench, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ctx = format!("stderr:\n{seen}\nstdout:\n{stdout}");
    assert_eq!(out.status.code(), Some(0), "{ctx}");
    assert!(
        seen.contains(&format!(
            "(pid {stopped}) has sent nothing for 5 s during the hold; its process is stopped"
        )),
        "{ctx}"
    );
    assert!(!seen.contains("went away"), "{ctx}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(r["connections"]["joined"], 400, "{ctx}");
    assert_eq!(r["agents_lost"].as_array().map(Vec::len), Some(0), "{ctx}");
    let slow = &r["slow_agents"][0];
    assert_eq!(slow["pid"], stopped, "{ctx}");
    assert_eq!(slow["phase"], "hold", "{ctx}");
    let secs = slow["silent_secs"].as_f64().unwrap();
    assert!(secs >= 60.0, "silent {secs} s: {ctx}");
    assert!(
        stdout.contains(&format!("sent nothing for {secs:.0} s from the hold")),
        "{ctx}"
    );
}

/// An agent killed (SIGKILL) during the ramp-up: the bench names it, the
/// phase and its last progress, ends the run there (no broadcast is
/// released, no wait for the rest of the arrivals), and writes the report
/// with the figures so far, failing its criteria.
#[test]
fn a_killed_agent_ends_the_run_with_the_figures_so_far() {
    let json = tmp("lost-agent.json");
    let mut bench = spawn_bench(&[
        "--connections",
        "3000",
        "--agents",
        "2",
        "--arrival-rate",
        "100",
        "--heartbeat",
        "0",
        "--broadcasts",
        "1",
        "--floor",
        "off",
        "--dashboard-port",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    let lines = stderr_lines(&mut bench);
    let mut seen = String::new();
    await_line(
        &mut bench,
        &lines,
        &mut seen,
        Duration::from_secs(60),
        |l| l.starts_with("ramp-up") && joined(l).is_some_and(|n| n >= 200),
    );
    let agents = agents_of(bench.id());
    assert_eq!(agents.len(), 2, "{agents:?}\n{seen}");
    let killed = agents[0];
    signal(killed, "KILL");
    std::thread::spawn(move || lines.iter().for_each(drop));
    let out = wait_bench(bench, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ctx = format!("stderr:\n{seen}{stderr}\nstdout:\n{stdout}");
    assert_eq!(out.status.code(), Some(1), "{ctx}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let lost = &r["agents_lost"][0];
    assert_eq!(lost["pid"], killed, "{ctx}");
    let index = lost["agent"].as_u64().unwrap();
    assert_eq!(lost["phase"], "ramp-up", "{ctx}");
    assert!(
        lost["why"]
            .as_str()
            .unwrap()
            .contains("signal: 9 (SIGKILL)"),
        "{ctx}"
    );
    let progress = lost["last_progress"].as_str().unwrap();
    assert!(
        progress.contains("users started") && progress.contains("joined"),
        "{ctx}"
    );
    assert!(
        r["status"].as_str().unwrap().starts_with(&format!(
            "ended early: agent {index} went away during the ramp-up"
        )),
        "{ctx}"
    );
    // The figures so far: the arrivals (30 s of them) stopped at the loss.
    let joined = r["connections"]["joined"].as_u64().unwrap();
    let started = r["connections"]["started"].as_u64().unwrap();
    assert!(
        joined >= 200 && started < 3000,
        "{joined} joined, {started} started: {ctx}"
    );
    assert_eq!(r["broadcast"]["sent"], 0, "no broadcast released: {ctx}");
    let failures = r["failures"].to_string();
    assert!(
        failures.contains(&format!(
            "agent {index} (pid {killed}) went away during the ramp-up: the run ended there, with the figures so far"
        )),
        "{ctx}"
    );
    assert!(
        stdout.contains("agent lost (the run ended early)") && stdout.contains(progress),
        "{ctx}"
    );
}
