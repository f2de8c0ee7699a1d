//! The conformance suite (`throng_pubsub::conformance`) against every
//! backplane: in memory, and Redis with a real `redis-server` this test
//! starts on a free port (and restarts for the outage check).

mod common;

use std::sync::Arc;

use common::Redis;
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
fn memory_cluster_control() {
    conformance::cluster_control(&mut memory());
}

#[test]
fn memory_retained_control() {
    conformance::retained_control(&mut memory());
}

#[test]
fn memory_resubscribes_after_outage() {
    conformance::resubscribes_after_outage(&mut memory());
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

#[test]
fn redis_cluster_control() {
    conformance::cluster_control(&mut Redis::start());
}

#[test]
fn redis_retained_control() {
    conformance::retained_control(&mut Redis::start());
}

/// The same suite on a Redis Cluster (3 masters): sharded pub/sub.
struct Sharded(common::cluster::RedisCluster);

impl Cluster for Sharded {
    fn backplane(&mut self) -> Arc<dyn Backplane> {
        Arc::new(RedisBackplane::connect(&self.0.url()).expect("connect to the test's cluster"))
    }
    fn outage(&mut self) {
        self.0.restart();
    }
}

/// A cluster, or `None` (the test passes saying so) without Redis 7.
fn sharded() -> Option<Sharded> {
    if !common::cluster::RedisCluster::available() {
        eprintln!("skipped: needs redis-server 7 and redis-cli (sharded pub/sub)");
        return None;
    }
    Some(Sharded(common::cluster::RedisCluster::start()))
}

#[test]
fn redis_cluster_conformance() {
    // One cluster for the whole suite (starting one takes a second or two).
    let Some(mut c) = sharded() else { return };
    conformance::exactly_once(&mut c);
    conformance::own_broadcasts_skipped(&mut c);
    conformance::only_subscribed_nodes(&mut c);
    conformance::direct_messages(&mut c);
    conformance::cluster_control(&mut c);
    conformance::retained_control(&mut c);
    conformance::resubscribes_after_outage(&mut c);
}

#[test]
fn redis_cluster_acl_user() {
    // An ACL user applies to every node of the cluster; a wrong password is
    // an error at connect naming the URL with the password masked.
    let Some(c) = sharded() else { return };
    for p in &c.0.ports {
        let out = std::process::Command::new("redis-cli")
            .args([
                "-p",
                &p.to_string(),
                "ACL",
                "SETUSER",
                "throng",
                "on",
                ">s3cret",
            ])
            .args(["~throng:*", "&throng:*", "+@all"])
            .output()
            .expect("redis-cli");
        assert!(out.status.success());
    }
    let hosts: Vec<String> = c.0.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let wrong = format!("redis+cluster://throng:nope@{}", hosts.join(","));
    let err = match RedisBackplane::connect(&wrong) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("connected with a wrong password"),
    };
    assert!(
        err.contains("throng:***@") && !err.contains("nope"),
        "{err}"
    );
    struct Acl(String);
    impl Cluster for Acl {
        fn backplane(&mut self) -> Arc<dyn Backplane> {
            Arc::new(RedisBackplane::connect(&self.0).expect("connect as the ACL user"))
        }
        fn outage(&mut self) {}
    }
    let mut acl = Acl(format!("redis+cluster://throng:s3cret@{}", hosts.join(",")));
    conformance::exactly_once(&mut acl);
    conformance::direct_messages(&mut acl);
    drop(c);
}
