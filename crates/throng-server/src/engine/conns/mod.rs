//! [`Conns`]: a shard's connections, their registry of subscriptions, and
//! everything their output writes: the engine's port, which the protocols
//! answer through (`engine/mod.rs` lists its calls). The struct and its
//! fields are here; what it does is one concept per file beside this one,
//! each an `impl Conns` block:
//! - `output.rs`: writing to a connection, its bounded output queue,
//!   delivering a broadcast to the shard's subscribers;
//! - `closing.rs`: the one way a connection ends ([`Conns::close`] with a
//!   reason from `crate::engine::close`'s table), the half-close, removing
//!   a connection;
//! - `admission.rs`: connection caps at accept, the HTTP head deadline;
//! - `topics.rs`: subscribing and unsubscribing a socket, which keeps the
//!   node's topics and the backplane's subscriptions, and publishing;
//! - `deflate.rs`: permessage-deflate's buffers, and compressing what a
//!   connection is sent (the inflating side is the shard's input:
//!   `shard/inflate.rs`).
//!
//! What a protocol keeps per shard (Phoenix's long-poll sessions, hook
//! waits, presences) is the protocol's own state, not here; the history
//! feature's recovery of a rejoin, which delivery consults, is
//! [`Recovery`] (`crate::history::recovery`), a part this struct holds.
//!
//! Why apart from [`Shard`](super::Shard): the shard's loop holds the node,
//! the protocol and the scratch buffers beside this, so they can be read
//! while this is borrowed mutably.

mod admission;
mod closing;
pub(crate) mod deflate;
pub(crate) mod output;
mod topics;

use std::sync::Arc;

use slab::Slab;
use throng_pubsub::Registry;

use super::close::CloseReason;
use super::conn::Conn;
use super::outlet::{Closed, SessionWork};
use super::users;
use crate::config::Config;
use crate::history::recovery::Recovery;
use crate::metrics::ShardStats;

/// The bounds a shard's connections are held to, read once from the
/// configuration when the shard is built (not from the node's config on
/// the hot path).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// `--max-outbound-bytes`: a connection with more queued is cut.
    pub max_outbound: usize,
    /// `--max-outbound-total-bytes` (`budget.rs`).
    pub max_outbound_total: usize,
    /// `--max-message-bytes`: a whole message, in or out of a frame.
    pub max_message: usize,
}

impl Settings {
    pub fn of(config: &Config) -> Settings {
        Settings {
            max_outbound: config.max_outbound_bytes,
            max_outbound_total: config.limits.max_outbound_total_bytes,
            max_message: config.max_message_bytes,
        }
    }
}

/// A shard's connections and everything their handling writes: the slab,
/// the registry of their subscriptions, the frames gathered for the
/// connection being processed, counters, and what an event leaves for the
/// protocols (closed connections, sessions' work).
pub(crate) struct Conns {
    /// The shard's number (its index in the node's shards).
    pub id: usize,
    pub settings: Settings,
    /// The connections, by key (a connection's key is its epoll token).
    pub slab: Slab<Conn>,
    /// The topics this shard's sockets joined, and each topic's
    /// subscribers (by registry key: an [`Outlet`](super::outlet::Outlet)).
    pub registry: Registry,
    /// For (re)registering sockets with the shard's epoll.
    pub poll: mio::Registry,
    /// The shard's counters, read by `/metrics`.
    pub stats: Arc<ShardStats>,
    /// The authenticated users of this shard's sockets.
    pub users: users::Users,
    /// Frames for the connection being processed, written in one syscall.
    pub reply: Vec<u8>,
    /// Connections to close at the end of this event ([`Conns::doom`]).
    pub doomed: Vec<(usize, CloseReason<'static>)>,
    /// Connections closed during this event, for their protocol
    /// ([`Protocol::closed`](super::Protocol::closed)).
    pub closed: std::collections::VecDeque<Closed>,
    /// Broadcasts and dooms for sessions (subscribers a protocol holds),
    /// for their protocol after this event.
    pub sessions: Vec<SessionWork>,
    /// Connections whose protocol answered what they waited on, to read
    /// again at the end of the turn (what they sent meanwhile waits in
    /// their input).
    pub resume: Vec<usize>,
    /// Seconds since the shard started.
    pub now: u32,
    /// Milliseconds since the shard started (wrapping), for push budgets.
    pub now_ms: u32,
    /// Milliseconds since the shard started, for a protocol's deadlines.
    pub clock_ms: u64,
    /// Messages written, counted locally, added to `stats` once per loop
    /// turn ([`Conns::flush_counters`]).
    pub msgs_out: u64,
    /// Bytes written, as `msgs_out`.
    pub bytes_out: u64,
    /// With `--max-connections-per-ip`: the address of each connection, by
    /// slab key (`conns/admission.rs`). Empty otherwise.
    pub peer_ips: Vec<Option<std::net::IpAddr>>,
    /// Rejoins recovering history: what delivery skips or holds for them
    /// (`crate::history::recovery`).
    pub recovery: Recovery,
    /// With `--tls-cert`: every connection's TLS session (`crate::tls`).
    pub tls: Option<crate::tls::session::Tls>,
    /// permessage-deflate's inflater and buffers, the shard's
    /// (`conns/deflate.rs`).
    pub deflate: deflate::ShardDeflate,
}

impl Conns {
    /// Adds the turn's local counts to the shared counters.
    pub fn flush_counters(&mut self) {
        if self.msgs_out > 0 || self.bytes_out > 0 {
            ShardStats::add(&self.stats.messages_out, self.msgs_out);
            ShardStats::add(&self.stats.bytes_out, self.bytes_out);
            self.msgs_out = 0;
            self.bytes_out = 0;
        }
    }

    /// Whether an event left work for the protocols or closes to make.
    pub fn unsettled(&self) -> bool {
        !self.doomed.is_empty() || !self.closed.is_empty() || !self.sessions.is_empty()
    }
}
