//! The presence conformance suite (`throng_pubsub::presence::conformance`)
//! against every store: in memory, and Redis with a real `redis-server`
//! this test starts on a free port (and restarts for the outage check).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use throng_pubsub::presence::conformance::{self, Cluster};
use throng_pubsub::{MemoryPresenceBus, PresenceStore, RedisPresence};

/// Short, so that deaths are quick to test; long enough for a restarted
/// redis-server to be reconnected to well within `0.4 x` of it.
const MEMORY_TIMEOUT: Duration = Duration::from_millis(1500);
const REDIS_TIMEOUT: Duration = Duration::from_secs(3);

struct Memory(Arc<MemoryPresenceBus>);

impl Cluster for Memory {
    fn store(&mut self) -> Arc<dyn PresenceStore> {
        Arc::new(self.0.node())
    }
    fn kill(&mut self, node_id: u64) {
        self.0.kill(node_id);
    }
    fn outage(&mut self) {
        self.0.outage();
        self.0.restore();
    }
    fn timeout(&self) -> Duration {
        MEMORY_TIMEOUT
    }
}

fn memory() -> Memory {
    Memory(MemoryPresenceBus::new(MEMORY_TIMEOUT))
}

#[test]
fn memory_replicates() {
    conformance::replicates(&mut memory());
}

#[test]
fn memory_late_watcher_reads_snapshot() {
    conformance::late_watcher_reads_snapshot(&mut memory());
}

#[test]
fn memory_metas_and_updates() {
    conformance::metas_and_updates(&mut memory());
}

#[test]
fn memory_dead_node_leaves() {
    conformance::dead_node_leaves(&mut memory());
}

#[test]
fn memory_restart_without_storm() {
    conformance::restart_without_storm(&mut memory());
}

#[test]
fn memory_survives_outage() {
    conformance::survives_outage(&mut memory());
}

/// A `redis-server` of this test's own, and the stores made on it.
struct Redis {
    port: u16,
    child: Option<Child>,
    stores: Vec<Arc<RedisPresence>>,
}

impl Redis {
    fn start() -> Redis {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let mut r = Redis {
            port,
            child: None,
            stores: Vec::new(),
        };
        r.spawn();
        r
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server; scripts/test.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while throng_pubsub::backplane::redis::check(&self.url()).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        for s in &self.stores {
            s.halt();
        }
        self.stop();
    }
}

impl Cluster for Redis {
    fn store(&mut self) -> Arc<dyn PresenceStore> {
        let s = Arc::new(
            RedisPresence::connect(&self.url(), REDIS_TIMEOUT)
                .expect("connect to the test's Redis"),
        );
        self.stores.push(s.clone());
        s
    }
    fn kill(&mut self, node_id: u64) {
        for s in &self.stores {
            if s.node_id() == node_id {
                s.halt();
            }
        }
    }
    fn outage(&mut self) {
        self.stop();
        self.spawn();
    }
    fn timeout(&self) -> Duration {
        REDIS_TIMEOUT
    }
}

#[test]
fn redis_replicates() {
    conformance::replicates(&mut Redis::start());
}

#[test]
fn redis_late_watcher_reads_snapshot() {
    conformance::late_watcher_reads_snapshot(&mut Redis::start());
}

#[test]
fn redis_metas_and_updates() {
    conformance::metas_and_updates(&mut Redis::start());
}

#[test]
fn redis_dead_node_leaves() {
    conformance::dead_node_leaves(&mut Redis::start());
}

#[test]
fn redis_restart_without_storm() {
    conformance::restart_without_storm(&mut Redis::start());
}

#[test]
fn redis_survives_outage() {
    conformance::survives_outage(&mut Redis::start());
}
