//! [`Conns`]: a shard's connections and Phoenix sockets, and everything
//! their handling writes. The struct and its fields are here; what it does
//! is one concept per file beside this one, each file an `impl Conns`
//! block (with the small types only that concept uses), so that all of
//! `Conns` is in this folder:
//! - `output.rs`: writing to a connection, its bounded output queue,
//!   delivering a broadcast to the shard's subscribers;
//! - `closing.rs`: the one way a connection ends ([`Conns::close`] with a
//!   reason from `crate::close`'s table), the half-close, removing a
//!   connection;
//! - `admission.rs`: connection caps at accept, the HTTP head deadline;
//! - `socket.rs`: the Phoenix socket of an outlet, whatever carries it
//!   (the dispatch on [`Outlet`](super::outlet::Outlet));
//! - `phoenix.rs`: a message through the Phoenix socket (`crate::socket`),
//!   and the [`Transport`](crate::socket::Transport) the socket answers
//!   through on this shard;
//! - `longpoll.rs`: the long-poll transport's requests and sessions
//!   (`crate::longpoll`), which run the same Phoenix socket;
//! - `hooks.rs`: the app backend's hooks and lifecycle events;
//! - `history.rs`: joins with `since` whose history read (Redis) answers
//!   later;
//! - `deflate.rs`: permessage-deflate's buffers, and compressing what a
//!   connection is sent (the inflating side is the shard's input:
//!   `shard/inflate.rs`).
//!
//! Why apart from [`Shard`](super::Shard): the shard's loop holds the node
//! (router, config) and the scratch buffers beside this, so they can be
//! read while this is borrowed mutably.

mod admission;
mod closing;
pub(super) mod deflate;
mod history;
mod hooks;
mod longpoll;
pub(super) mod output;
mod phoenix;
mod socket;

use std::collections::HashMap;
use std::sync::Arc;

use slab::Slab;
use throng_pubsub::Registry;

use super::conn::Conn;
use super::users;
use crate::close::CloseReason;
use crate::metrics::ShardStats;
use crate::socket::Tracked;

/// A shard's connections and everything their handling writes: the slab,
/// the registry of their subscriptions, the frames gathered for the
/// connection being processed, counters. Separate from
/// [`Shard`](super::Shard) so that the node (router, config) can be read
/// while this is borrowed mutably.
pub(crate) struct Conns {
    /// The shard's number (its index in the node's shards).
    pub id: usize,
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
    /// Seconds since the shard started.
    pub now: u32,
    /// Milliseconds since the shard started (wrapping), for push budgets.
    pub now_ms: u32,
    /// Messages written, counted locally, added to `stats` once per loop
    /// turn ([`Conns::flush_counters`]).
    pub msgs_out: u64,
    /// Bytes written, as `msgs_out`.
    pub bytes_out: u64,
    /// `--max-outbound-bytes`: a connection with more queued is cut.
    pub max_outbound: usize,
    /// `--max-outbound-total-bytes` (`budget.rs`).
    pub max_outbound_total: usize,
    /// With `--max-connections-per-ip`: the address of each connection, by
    /// slab key (`conns/admission.rs`). Empty otherwise.
    pub peer_ips: Vec<Option<std::net::IpAddr>>,
    /// Long-poll sessions owned here and requests waited on here.
    pub lp: crate::longpoll::State,
    /// Presences of this shard's joins, by (connection key, registry topic
    /// index); empty unless presence is in use.
    pub tracked: HashMap<(usize, u32), Tracked>,
    /// Joins that recovered history: by (connection key, registry topic
    /// index), the newest offset their replay held, so the live copies of
    /// those messages still in this shard's inbox are skipped
    /// (`crate::history`). Emptied whenever the inbox is, so it holds at
    /// most one turn's joins.
    pub replayed: HashMap<(usize, u32), u64>,
    /// Joins with `since` waiting for their history read in Redis, by
    /// (connection key, registry topic index): the read's number, the reply
    /// to send, and the topic's live messages held aside meanwhile
    /// (`crate::history`). An entry per such join, for one round trip.
    pub pending: HashMap<(usize, u32), history::Pending>,
    /// The number of the next history read.
    pub next_read: u64,
    /// Joins and pushes waiting for the app backend (`crate::hooks`).
    pub hook_waits: crate::hooks::Waits,
    /// With `--tls-cert`: every connection's TLS session (`transport/tls.rs`).
    pub tls: Option<super::tls::Tls>,
    /// permessage-deflate's inflater and buffers, the shard's
    /// (`conns/deflate.rs`).
    pub deflate: deflate::ShardDeflate,
}

impl Conns {
    /// Publishes the sizes of the shard's tables to its counters (once a
    /// second, from the sweep).
    pub fn publish_sizes(&self) {
        self.stats.sizes(&crate::metrics::TableSizes {
            users: self.users.len(),
            user_sockets: self.users.sockets_len(),
            hook_waits: self.hook_waits.len(),
            hook_socket_ids: self.hook_waits.socket_ids_len(),
            hook_assigns: self.hook_waits.assigns.len(),
            history_reads_waiting: self.pending.len(),
            presence_joins: self.tracked.len(),
            longpoll_requests_waiting: self.lp.waiting.len(),
            longpoll_rate_entries: self.lp.starts.len(),
        });
    }

    /// Adds the turn's local counts to the shared counters.
    pub fn flush_counters(&mut self) {
        if self.msgs_out > 0 || self.bytes_out > 0 {
            ShardStats::add(&self.stats.messages_out, self.msgs_out);
            ShardStats::add(&self.stats.bytes_out, self.bytes_out);
            self.msgs_out = 0;
            self.bytes_out = 0;
        }
    }
}
