//! The one reconnect policy of the Redis link (`throng_pubsub::link`),
//! checked once for every user of it: two nodes, each with a backplane and
//! a presence store on one real `redis-server`; Redis restarts (losing
//! everything, no persistence); both the backplane and the presence store
//! of both nodes come back by themselves, count a reconnect, and carry
//! broadcasts, control messages and presence changes again.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Redis;
use throng_pubsub::conformance::{self, Node};
use throng_pubsub::presence::conformance::Node as PresenceNode;
use throng_pubsub::{Backplane, PresenceStore, RedisBackplane, RedisPresence};

/// Bounds every wait; the backoff reaches Redis again within 5 s.
const WAIT: Duration = Duration::from_secs(15);

#[test]
fn backplane_and_presence_recover_after_a_redis_restart() {
    let mut redis = Redis::start();
    let url = redis.url();
    let backplanes: Vec<Arc<RedisBackplane>> = (0..2)
        .map(|_| Arc::new(RedisBackplane::connect(&url).expect("backplane")))
        .collect();
    let stores: Vec<Arc<RedisPresence>> = (0..2)
        .map(|_| Arc::new(RedisPresence::connect(&url, Duration::from_secs(30)).expect("presence")))
        .collect();
    let nodes: Vec<Arc<Node>> = backplanes
        .iter()
        .map(|b| Node::new(b.clone() as Arc<dyn Backplane>))
        .collect();
    let watchers: Vec<PresenceNode> = stores
        .iter()
        .map(|s| PresenceNode::new(s.clone() as Arc<dyn PresenceStore>))
        .collect();
    let (a, b) = (&nodes[0], &nodes[1]);
    let (pa, pb) = (&watchers[0], &watchers[1]);
    a.join("room");
    b.join("room");
    pa.watch("lobby");
    pb.watch("lobby");
    pa.track("lobby", "alice");
    conformance::await_route(a, &[b], "room");
    pb.await_count("lobby", 1, WAIT);

    redis.stop();
    redis.spawn();

    a.await_connected();
    b.await_connected();
    conformance::await_route(a, &[b], "room");
    conformance::await_route(b, &[a], "room");
    conformance::await_direct_route(a, b);
    // Redis lost everything; alice is back because a rewrote its state,
    // and a presence made after the restart reaches a.
    pb.await_count("lobby", 1, WAIT);
    pb.track("lobby", "bob");
    pa.await_count("lobby", 2, WAIT);
    for bp in &backplanes {
        assert!(
            bp.stats()
                .link
                .reconnects
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 1
        );
    }
    for s in &stores {
        assert!(s.is_connected());
        assert!(
            s.stats()
                .link
                .reconnects
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 1
        );
    }
}
