//! The history conformance suite (`throng_pubsub::history::conformance`)
//! against both stores: in memory, and Redis Streams on a real
//! `redis-server` this test starts on a free port (and restarts, without
//! persistence, to lose the history).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Redis;
use throng_protocol::OwnedPayload;
use throng_pubsub::history::conformance::{self, Cluster};
use throng_pubsub::{HistoryStore, MemoryHistory, Position, RedisHistory, Replay};

/// Every node of an in-memory "cluster" shares one store; losing the
/// history is a new process's empty store.
#[derive(Clone, Default)]
struct Memory(Arc<Mutex<Option<Arc<MemoryHistory>>>>);

impl Memory {
    fn current(&self) -> Arc<MemoryHistory> {
        let mut s = self.0.lock().unwrap();
        s.get_or_insert_with(|| Arc::new(MemoryHistory::new(64 << 20)))
            .clone()
    }
}

impl HistoryStore for Memory {
    fn append(
        &self,
        topic: &Arc<str>,
        size: usize,
        ttl: Duration,
        event: &str,
        payload: OwnedPayload,
        done: Box<dyn FnOnce(Result<Position, String>) + Send>,
    ) {
        self.current()
            .append(topic, size, ttl, event, payload, done)
    }

    fn fetch(
        &self,
        topic: &str,
        since: Option<&str>,
        limit: usize,
        size: usize,
        then: Box<dyn FnOnce(Replay) + Send>,
    ) {
        self.current().fetch(topic, since, limit, size, then)
    }
}

impl Cluster for Memory {
    fn node(&mut self) -> Arc<dyn HistoryStore> {
        Arc::new(self.clone())
    }
    fn lose(&mut self) {
        *self.0.lock().unwrap() = None;
    }
}

/// Nodes, each with its own connection to one `redis-server`; losing the
/// history restarts it without persistence.
struct OnRedis(Redis);

impl Cluster for OnRedis {
    fn node(&mut self) -> Arc<dyn HistoryStore> {
        let node_id = throng_pubsub::link::random_node_id();
        let store = RedisHistory::connect_with(&self.0.url(), &self.0.options, node_id)
            .expect("connect to the test's Redis");
        Arc::new(store)
    }
    fn lose(&mut self) {
        self.0.stop();
        self.0.spawn();
    }
}

macro_rules! both {
    ($($name:ident),*) => {
        mod memory {
            use super::*;
            $(#[test] fn $name() { conformance::$name(&mut Memory::default()); })*
        }
        mod redis {
            use super::*;
            $(#[test] fn $name() { conformance::$name(&mut OnRedis(Redis::start())); })*
        }
    };
}

both!(
    ordering,
    trimming,
    ttl,
    epoch_changes_when_lost,
    bad_positions,
    concurrent_publishers
);
