//! The presence conformance suite (`throng_pubsub::presence::conformance`)
//! against every store: in memory, and Redis with a real `redis-server`
//! this test starts on a free port (and restarts for the outage check).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use throng_pubsub::presence::conformance::{self, Cluster};
use throng_pubsub::{MemoryPresenceBus, PresenceStore, RedisPresence};

/// Short, so that deaths are quick to test; long enough for a restarted
/// redis-server to be reconnected to well within `0.4 x` of it.
const MEMORY_TIMEOUT: Duration = Duration::from_millis(1500);
const REDIS_TIMEOUT: Duration = Duration::from_secs(3);
/// How much later than the others a node reconnects after an outage.
const LATE: Duration = Duration::from_millis(500);

struct Memory(Arc<MemoryPresenceBus>);

impl Cluster for Memory {
    fn store(&mut self) -> Arc<dyn PresenceStore> {
        Arc::new(self.0.node())
    }
    fn kill(&mut self, node_id: u64) {
        self.0.kill(node_id);
    }
    fn outage(&mut self, late: u64) {
        self.0.outage();
        self.0.hold(late);
        self.0.restore();
        std::thread::sleep(LATE);
        self.0.release(late);
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

#[test]
fn memory_fetch_reads_every_node() {
    conformance::fetch_reads_every_node(&mut memory());
}

#[test]
fn memory_counts_converge() {
    conformance::counts_converge(&mut memory());
}

#[test]
fn local_fetch_reads_nothing_elsewhere() {
    let store: Arc<dyn PresenceStore> = Arc::new(throng_pubsub::LocalPresence::new());
    assert_eq!(conformance::fetched(&store, "t"), Ok(Default::default()));
}

/// A TCP proxy between one store and Redis, which can cut that store off
/// (a node whose network to Redis fails, or that reconnects late).
struct Proxy {
    port: u16,
    blocked: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a proxy port");
        let port = listener.local_addr().unwrap().port();
        let blocked = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (b, o) = (blocked.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if b.load(Relaxed) {
                    continue; // dropped: the store's connect fails
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let mut all = o.lock().unwrap();
                all.push(client.try_clone().unwrap());
                all.push(server.try_clone().unwrap());
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        Proxy {
            port,
            blocked,
            open,
        }
    }

    /// Cuts the store off (its connections close, new ones fail) or lets it back.
    fn block(&self, on: bool) {
        self.blocked.store(on, Relaxed);
        if on {
            for s in self.open.lock().unwrap().drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

/// A `redis-server` of this test's own, and the stores made on it, each
/// through its own [`Proxy`].
struct Redis {
    port: u16,
    child: Option<Child>,
    stores: Vec<(Arc<RedisPresence>, Proxy)>,
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
        for (s, _) in &self.stores {
            s.halt();
        }
        self.stop();
    }
}

impl Cluster for Redis {
    fn store(&mut self) -> Arc<dyn PresenceStore> {
        let proxy = Proxy::start(self.port);
        let url = format!("redis://127.0.0.1:{}", proxy.port);
        let s = Arc::new(
            RedisPresence::connect(&url, REDIS_TIMEOUT).expect("connect to the test's Redis"),
        );
        self.stores.push((s.clone(), proxy));
        s
    }
    fn kill(&mut self, node_id: u64) {
        for (s, _) in &self.stores {
            if s.node_id() == node_id {
                s.halt();
            }
        }
    }
    fn outage(&mut self, late: u64) {
        let at = self.stores.iter().position(|(s, _)| s.node_id() == late);
        if let Some(i) = at {
            self.stores[i].1.block(true);
        }
        self.stop();
        self.spawn();
        std::thread::sleep(LATE);
        if let Some(i) = at {
            self.stores[i].1.block(false);
        }
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

#[test]
fn redis_fetch_reads_every_node() {
    conformance::fetch_reads_every_node(&mut Redis::start());
}

#[test]
fn redis_counts_converge() {
    conformance::counts_converge(&mut Redis::start());
}

/// The same suite on a Redis Cluster (3 masters): hash-tagged keys, one-slot
/// scripts, sharded pub/sub. No proxy (the cluster hands out its nodes'
/// own addresses): an outage restarts every node, no store comes back late.
struct Sharded {
    cluster: common::cluster::RedisCluster,
    stores: Vec<Arc<RedisPresence>>,
}

impl Drop for Sharded {
    fn drop(&mut self) {
        for s in &self.stores {
            s.halt();
        }
    }
}

impl Cluster for Sharded {
    fn store(&mut self) -> Arc<dyn PresenceStore> {
        let s = Arc::new(
            RedisPresence::connect(&self.cluster.url(), REDIS_TIMEOUT)
                .expect("connect to the test's cluster"),
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
    fn outage(&mut self, _late: u64) {
        self.cluster.restart();
    }
    fn timeout(&self) -> Duration {
        REDIS_TIMEOUT
    }
}

#[test]
fn redis_cluster_conformance() {
    if !common::cluster::RedisCluster::available() {
        eprintln!("skipped: needs redis-server 7 and redis-cli (sharded pub/sub)");
        return;
    }
    // A fresh cluster per case, one case at a time (a cluster is 3 processes).
    type Case = fn(&mut Sharded);
    let cases: [(&str, Case); 8] = [
        ("replicates", |c| conformance::replicates(c)),
        ("late_watcher_reads_snapshot", |c| {
            conformance::late_watcher_reads_snapshot(c)
        }),
        ("metas_and_updates", |c| conformance::metas_and_updates(c)),
        ("dead_node_leaves", |c| conformance::dead_node_leaves(c)),
        ("restart_without_storm", |c| {
            conformance::restart_without_storm(c)
        }),
        ("survives_outage", |c| conformance::survives_outage(c)),
        ("fetch_reads_every_node", |c| {
            conformance::fetch_reads_every_node(c)
        }),
        ("counts_converge", |c| conformance::counts_converge(c)),
    ];
    for (name, case) in cases {
        eprintln!("cluster presence conformance: {name}");
        let mut c = Sharded {
            cluster: common::cluster::RedisCluster::start(),
            stores: Vec::new(),
        };
        case(&mut c);
    }
}
