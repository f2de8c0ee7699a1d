//! The node: what every shard of one server process shares. Immutable after
//! start except for atomics (metrics) and [`NodeTopics`] (locked only when a
//! shard gains its first or loses its last subscriber of a topic).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crossbeam_channel::Sender;
use mio::Waker;

use crate::channel::Router;
use crate::config::Config;
use crate::page::Pages;
use crate::pubsub::{Backplane, Broadcast, NodeTopics};
use crate::sys;

/// Appends one metric in Prometheus text format: its HELP, TYPE and value.
/// Every `/metrics` line, the backplane's included, is written here.
pub fn write_metric(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    value: impl std::fmt::Display,
) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

/// A message to a shard's event loop.
pub(crate) enum ShardMsg {
    Broadcast(Arc<Broadcast>),
}

/// How to reach a shard from another thread.
pub(crate) struct Peer {
    pub tx: Sender<ShardMsg>,
    pub waker: Arc<Waker>,
}

/// Counters one shard writes and `/metrics` reads. Only the owning shard
/// writes them, so they stay in its cache until scraped.
#[derive(Default)]
#[repr(align(128))]
pub struct ShardStats {
    pub connections: AtomicU64,
    pub websockets: AtomicU64,
    pub channels: AtomicU64,
    pub topics: AtomicU64,
    pub accepted: AtomicU64,
    pub closed: AtomicU64,
    pub accept_errors: AtomicU64,
    pub http_requests: AtomicU64,
    pub messages_in: AtomicU64,
    pub messages_out: AtomicU64,
    pub broadcasts: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub slow_reader_closes: AtomicU64,
    pub idle_timeout_closes: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub joins: AtomicU64,
    pub refused_joins: AtomicU64,
}

impl ShardStats {
    /// Adds `n` to a counter; owner-only, so a plain load+store is enough.
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
    }

    #[inline]
    pub fn sub(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Relaxed).wrapping_sub(n), Relaxed);
    }
}

/// Shared state of one server process.
pub struct Node {
    pub config: Config,
    pub router: Router,
    pub stats: Vec<Arc<ShardStats>>,
    pub topics: NodeTopics,
    pub backplane: Arc<dyn Backplane>,
    pub(crate) peers: Vec<Peer>,
    pub(crate) pages: Pages,
    /// Open-files limit after raising the soft limit to the hard one.
    pub fd_limit: u64,
}

impl Node {
    /// Sends a broadcast made on `from_shard` (already delivered there) to the
    /// node's other shards that have subscribers, and to the other nodes.
    pub(crate) fn broadcast(&self, from_shard: usize, b: Arc<Broadcast>) {
        self.backplane.publish(&b);
        self.fan_out(Some(from_shard), b);
    }

    /// Delivers a broadcast that came from another node over the backplane.
    pub fn deliver_remote(&self, b: Arc<Broadcast>) {
        self.fan_out(None, b);
    }

    fn fan_out(&self, skip: Option<usize>, b: Arc<Broadcast>) {
        let mask = self.topics.shards(&b.topic);
        for (i, peer) in self.peers.iter().enumerate() {
            if Some(i) == skip || mask & (1 << (i % 64)) == 0 {
                continue;
            }
            if peer.tx.send(ShardMsg::Broadcast(b.clone())).is_ok() {
                let _ = peer.waker.wake();
            }
        }
    }

    /// The `/metrics` page, Prometheus text format.
    pub fn render_metrics(&self) -> String {
        let sum = |f: fn(&ShardStats) -> &AtomicU64| -> u64 {
            self.stats.iter().map(|s| f(s).load(Relaxed)).sum()
        };
        let mut out = String::with_capacity(2048);
        let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
            write_metric(&mut out, name, kind, help, value);
        };
        metric(
            "throng_connections",
            "gauge",
            "Open TCP connections (HTTP and WebSocket).",
            sum(|s| &s.connections),
        );
        metric(
            "throng_websockets",
            "gauge",
            "Open WebSocket connections.",
            sum(|s| &s.websockets),
        );
        metric(
            "throng_channels_joined",
            "gauge",
            "Joined channels over all sockets.",
            sum(|s| &s.channels),
        );
        metric(
            "throng_topics",
            "gauge",
            "Topics with at least one local subscriber.",
            self.topics.len() as u64,
        );
        metric(
            "throng_connections_accepted_total",
            "counter",
            "Connections accepted.",
            sum(|s| &s.accepted),
        );
        metric(
            "throng_connections_closed_total",
            "counter",
            "Connections closed.",
            sum(|s| &s.closed),
        );
        metric(
            "throng_accept_errors_total",
            "counter",
            "Failed accepts (e.g. out of file descriptors).",
            sum(|s| &s.accept_errors),
        );
        metric(
            "throng_http_requests_total",
            "counter",
            "HTTP requests served.",
            sum(|s| &s.http_requests),
        );
        metric(
            "throng_joins_total",
            "counter",
            "Successful channel joins.",
            sum(|s| &s.joins),
        );
        metric(
            "throng_refused_joins_total",
            "counter",
            "Refused or unmatched joins.",
            sum(|s| &s.refused_joins),
        );
        metric(
            "throng_messages_in_total",
            "counter",
            "WebSocket messages received.",
            sum(|s| &s.messages_in),
        );
        metric(
            "throng_messages_out_total",
            "counter",
            "WebSocket messages sent.",
            sum(|s| &s.messages_out),
        );
        metric(
            "throng_broadcasts_total",
            "counter",
            "Broadcasts fanned out by this node's shards.",
            sum(|s| &s.broadcasts),
        );
        metric(
            "throng_bytes_in_total",
            "counter",
            "Bytes read from sockets.",
            sum(|s| &s.bytes_in),
        );
        metric(
            "throng_bytes_out_total",
            "counter",
            "Bytes written to sockets.",
            sum(|s| &s.bytes_out),
        );
        metric(
            "throng_slow_reader_closes_total",
            "counter",
            "Connections closed because their outbound queue passed its bound.",
            sum(|s| &s.slow_reader_closes),
        );
        metric(
            "throng_idle_timeout_closes_total",
            "counter",
            "Connections closed by the idle sweep.",
            sum(|s| &s.idle_timeout_closes),
        );
        metric(
            "throng_protocol_errors_total",
            "counter",
            "Connections closed for protocol errors.",
            sum(|s| &s.protocol_errors),
        );
        metric(
            "throng_max_connections",
            "gauge",
            "Connections the open-files limit allows.",
            self.fd_limit.saturating_sub(crate::FD_MARGIN),
        );
        metric(
            "throng_process_resident_memory_bytes",
            "gauge",
            "Resident set size.",
            sys::rss_bytes().unwrap_or(0),
        );
        write_metric(
            &mut out,
            "throng_process_cpu_seconds_total",
            "counter",
            "User and system CPU time.",
            format_args!("{:.3}", sys::cpu_seconds().unwrap_or(0.0)),
        );
        self.backplane.render_metrics(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_only_counters() {
        let s = ShardStats::default();
        ShardStats::add(&s.messages_out, 5);
        ShardStats::sub(&s.messages_out, 2);
        assert_eq!(s.messages_out.load(Relaxed), 3);
        assert_eq!(std::mem::align_of::<ShardStats>(), 128);
    }
}
