//! The real binary starved of CPU, as each of the 52 server workers of a
//! 1,000,000-connection run on 2 cores is: a cgroup gives the server 2% of
//! a core while clients heartbeat and a publisher keeps broadcasting, so
//! every turn of its loop takes long in wall-clock time.

mod common;

use std::io::{ErrorKind, Read};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Client, Server};

/// A CPU cgroup (v1 `cpu` controller or v2 `cpu.max`) holding one process
/// to a quota; the process goes back to the root cgroup when dropped.
struct CpuQuota {
    dir: PathBuf,
    root: PathBuf,
    pid: i32,
}

impl CpuQuota {
    /// Holds `pid` to `percent` of one core, or says why it cannot here.
    fn limit(pid: i32, percent: u32) -> Result<CpuQuota, String> {
        let name = format!("throng-test-{}", std::process::id());
        let (root, quota) = if std::path::Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists()
        {
            let root = PathBuf::from("/sys/fs/cgroup/cpu");
            (
                root,
                vec![
                    ("cpu.cfs_period_us", "100000".to_string()),
                    ("cpu.cfs_quota_us", (percent * 1000).to_string()),
                ],
            )
        } else if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            let root = PathBuf::from("/sys/fs/cgroup");
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
            (
                root,
                vec![("cpu.max", format!("{} 100000", percent * 1000))],
            )
        } else {
            return Err("no cgroup cpu controller mounted".into());
        };
        let dir = root.join(&name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let q = CpuQuota { dir, root, pid };
        for (file, value) in quota {
            std::fs::write(q.dir.join(file), value).map_err(|e| format!("{file}: {e}"))?;
        }
        std::fs::write(q.dir.join("cgroup.procs"), pid.to_string())
            .map_err(|e| format!("cgroup.procs: {e}"))?;
        Ok(q)
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        let _ = std::fs::write(self.root.join("cgroup.procs"), self.pid.to_string());
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Reads and drops whatever a client has been sent (broadcasts, replies),
/// so its receive buffer never fills whatever the host's socket buffers.
/// Writes stay blocking: a heartbeat is never half sent.
fn drain(c: &mut Client, buf: &mut [u8]) {
    c.sock.set_nonblocking(true).unwrap();
    loop {
        match c.sock.read(buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("client read: {e}"),
        }
    }
    c.sock.set_nonblocking(false).unwrap();
}

/// A heartbeat read late is still a heartbeat. A starved worker's turn
/// spends seconds delivering broadcasts before it reads the sockets that
/// were ready when it began; a read stamped with the turn's start made a
/// client heartbeating every ~0.6 s look quiet for the 2 s timeout, and the
/// sweep closed it (1,023 of 2,000 on the build before the fix). Clients
/// that say nothing are still closed.
#[test]
fn heartbeats_read_late_by_a_starved_server_are_not_idleness() {
    let server = Server::start(&["--idle-timeout", "2", "--shards", "1", "--push-rate", "0"]);
    let mut clients: Vec<Client> = (0..2000).map(|_| Client::connect(server.addr)).collect();
    for c in &mut clients {
        c.join_lobby();
    }
    let mut silent: Vec<Client> = (0..5).map(|_| Client::connect(server.addr)).collect();
    for c in &mut silent {
        c.join_lobby();
    }
    let quota = match CpuQuota::limit(server.pid(), 2) {
        Ok(q) => q,
        Err(why) => {
            eprintln!("SKIPPED: cannot starve the server here ({why}); needs root and a cgroup cpu controller");
            return;
        }
    };
    let mut buf = vec![0u8; 64 * 1024];
    let start = Instant::now();
    let mut rounds = 0;
    while start.elapsed() < Duration::from_secs(12) {
        for c in &mut clients {
            c.push("phoenix", "heartbeat", "{}");
            drain(c, &mut buf);
        }
        // Five broadcasts to all 2,005 between two heartbeats of each.
        for _ in 0..5 {
            clients[0].push("rooms:lobby", "new:msg", r#"{"user":"p","body":"hello"}"#);
            std::thread::sleep(Duration::from_millis(100));
        }
        for c in &mut silent {
            drain(c, &mut buf);
        }
        rounds += 1;
    }
    drop(quota);
    assert!(rounds >= 10, "only {rounds} heartbeat rounds in 12 s");
    // Fed again, the server closes the five silent ones, and only them.
    assert_eq!(
        server.await_metric("throng_idle_timeout_closes_total", 20, |v| v >= 5),
        5,
        "idle closes: the 5 silent clients and none of the 2,000 heartbeating"
    );
    assert_eq!(
        server.await_metric("throng_websockets", 10, |v| v == 2000),
        2000
    );
}
