//! What the tests that run the real `throng bench` share: the binary (the
//! newest of `target/release/throng` and `target/debug/throng`, or
//! `THRONG_BIN`), running it bounded in time, free ports and temporary
//! file names.
#![allow(dead_code)] // each test crate uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn throng_bin() -> PathBuf {
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

pub fn run_bench(args: &[&str], limit: Duration) -> std::process::Output {
    wait_bench(spawn_bench(args), limit)
}

pub fn spawn_bench(args: &[&str]) -> std::process::Child {
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
pub fn wait_bench(mut child: std::process::Child, limit: Duration) -> std::process::Output {
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

/// A loopback port that was free a moment ago (nothing listens there now).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("throng-bench-test-{}-{name}", std::process::id()))
}
