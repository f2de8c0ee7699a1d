//! The conformance suite (`throng_pubsub::conformance`) against every
//! backplane: in memory, and Redis with a real `redis-server` this test
//! starts on a free port (and restarts for the outage check).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use throng_pubsub::conformance::{self, Cluster};
use throng_pubsub::{Backplane, MemoryBus, RedisBackplane};

struct Memory(Arc<MemoryBus>);

impl Cluster for Memory {
    fn backplane(&mut self) -> Arc<dyn Backplane> {
        Arc::new(self.0.node())
    }
    fn outage(&mut self) {
        self.0.outage();
        self.0.restore();
    }
}

fn memory() -> Memory {
    Memory(MemoryBus::new())
}

#[test]
fn memory_exactly_once() {
    conformance::exactly_once(&mut memory());
}

#[test]
fn memory_own_broadcasts_skipped() {
    conformance::own_broadcasts_skipped(&mut memory());
}

#[test]
fn memory_only_subscribed_nodes() {
    conformance::only_subscribed_nodes(&mut memory());
}

#[test]
fn memory_direct_messages() {
    conformance::direct_messages(&mut memory());
}

#[test]
fn memory_resubscribes_after_outage() {
    conformance::resubscribes_after_outage(&mut memory());
}

/// A `redis-server` of this test's own, on a port picked at start.
struct Redis {
    port: u16,
    child: Option<Child>,
}

impl Redis {
    fn start() -> Redis {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let mut r = Redis { port, child: None };
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
        self.stop();
    }
}

impl Cluster for Redis {
    fn backplane(&mut self) -> Arc<dyn Backplane> {
        Arc::new(RedisBackplane::connect(&self.url()).expect("connect to the test's Redis"))
    }
    fn outage(&mut self) {
        self.stop();
        self.spawn();
    }
}

#[test]
fn redis_exactly_once() {
    conformance::exactly_once(&mut Redis::start());
}

#[test]
fn redis_own_broadcasts_skipped() {
    conformance::own_broadcasts_skipped(&mut Redis::start());
}

#[test]
fn redis_only_subscribed_nodes() {
    conformance::only_subscribed_nodes(&mut Redis::start());
}

#[test]
fn redis_direct_messages() {
    conformance::direct_messages(&mut Redis::start());
}

#[test]
fn redis_resubscribes_after_outage() {
    conformance::resubscribes_after_outage(&mut Redis::start());
}
