//! A Redis Cluster of a test's own: 3 masters (no replicas, to start fast)
//! on loopback ports picked at start, in a temporary directory; created with
//! `redis-cli --cluster create`. `outage` restarts every node (each keeps
//! its slots in its nodes.conf). Needs redis-server 7 (sharded pub/sub):
//! [`RedisCluster::available`] says whether it is here.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

pub struct RedisCluster {
    pub ports: Vec<u16>,
    dir: PathBuf,
    children: Vec<Child>,
}

impl RedisCluster {
    /// Whether redis-server is 7 or later and redis-cli is here.
    pub fn available() -> bool {
        let v = Command::new("redis-server").arg("--version").output();
        let major = v
            .ok()
            .and_then(|o| {
                let s = String::from_utf8_lossy(&o.stdout).to_string();
                let at = s.find("v=")? + 2;
                s[at..].split('.').next()?.parse::<u32>().ok()
            })
            .unwrap_or(0);
        let cli = Command::new("redis-cli").arg("--version").output().is_ok();
        major >= 7 && cli
    }

    pub fn start() -> RedisCluster {
        let mut ports = Vec::new();
        while ports.len() < 3 {
            let p = free_port();
            if p < 55000 && !ports.contains(&p) {
                ports.push(p);
            }
        }
        let dir = std::env::temp_dir().join(format!(
            "throng-cluster-{}-{}",
            std::process::id(),
            ports[0]
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut c = RedisCluster {
            ports,
            dir,
            children: Vec::new(),
        };
        c.spawn();
        let nodes: Vec<String> = c.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        c.wait_ok();
        c
    }

    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    fn spawn(&mut self) {
        for p in self.ports.clone() {
            let child = Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port", &p.to_string()])
                .args([
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--cluster-enabled",
                    "yes",
                ])
                .args(["--cluster-node-timeout", "1000"])
                .arg("--cluster-config-file")
                .arg(format!("nodes-{p}.conf"))
                .arg("--dir")
                .arg(&self.dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server (apt-get install redis-server)");
            self.children.push(child);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for p in &self.ports {
            while super::ping(*p).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "redis-server on {p} did not start"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Waits until every node says `cluster_state:ok`.
    fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        for p in &self.ports {
            loop {
                let out = Command::new("redis-cli")
                    .args(["-p", &p.to_string(), "CLUSTER", "INFO"])
                    .output()
                    .expect("redis-cli");
                if String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "the cluster did not come up");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Every node stopped and started again (data lost, slots kept).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
        self.wait_ok();
    }

    pub fn stop(&mut self) {
        for mut c in self.children.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
