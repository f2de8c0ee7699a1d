//! Metrics: the counters each shard keeps ([`ShardStats`]) and their
//! `/metrics` names and help ([`SHARD_METRICS`]); the page that sums them
//! is `scrape.rs` (it reads the whole node, so it sits above it).
//!
//! Each shard writes only its own counters, so they stay in its cache until
//! a scrape reads them; a scrape sums every shard's.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use throng_pubsub::metrics::Metric;

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
    /// Sockets their protocol refused once upgraded (Pusher: an unknown
    /// app key, an app over its connection quota).
    pub protocol_refusals: AtomicU64,
    /// Pusher sockets open (`crate::protocol::pusher`).
    pub pusher_sockets: AtomicU64,
    /// Pusher cache channel subscriptions that got the channel's last event.
    pub pusher_cache_hits: AtomicU64,
    /// Pusher cache channel subscriptions that got `pusher:cache_miss`.
    pub pusher_cache_misses: AtomicU64,
    pub joins: AtomicU64,
    pub refused_joins: AtomicU64,
    /// Joins refused because the socket had `--max-channels-per-socket`.
    pub channel_limit_refusals: AtomicU64,
    /// Connections refused at accept: `--max-connections` were open.
    pub refused_total_cap: AtomicU64,
    /// Connections refused at accept: `--max-connections-per-ip` were open from its address.
    pub refused_per_ip: AtomicU64,
    /// Connections refused at accept: memory available was under
    /// `--min-available-memory-bytes`.
    pub refused_memory: AtomicU64,
    /// Connections refused at accept: the process was at its open-files
    /// limit (taken with the descriptor kept in reserve, answered 503).
    pub refused_files: AtomicU64,
    /// HTTP connections closed because a head took longer than `--handshake-timeout`.
    pub handshake_timeouts: AtomicU64,
    /// Sockets closed (1008) for a join_ref or ref over `--max-ref-bytes`.
    pub ref_refusals: AtomicU64,
    /// Joins refused because the socket's joins would pass `--max-socket-bytes`.
    pub socket_budget_refusals: AtomicU64,
    /// WebSockets closed with 1012 by a drain.
    pub drain_closes: AtomicU64,
    /// HTTP requests answered with an error (400, 403, 405, 426, 431).
    pub http_errors: AtomicU64,
    /// Connections cut because the process's outbound memory passed `--max-outbound-total-bytes`.
    pub outbound_budget_closes: AtomicU64,
    /// Upgrades refused by connect authentication (403).
    pub auth_refusals: AtomicU64,
    /// Upgrades refused by `check_origin` (403).
    pub origin_refusals: AtomicU64,
    /// Joins and pushes refused by topic rules or the `channels` claim.
    pub policy_refusals: AtomicU64,
    /// Pushes answered `{"reason":"rate limited"}`.
    pub rate_limited: AtomicU64,
    /// Sockets closed with 1008 for pushing past their budget.
    pub rate_limit_closes: AtomicU64,
    /// Heartbeats, joins, leaves and control frames over `--control-rate`.
    pub control_limited: AtomicU64,
    /// Sockets closed with 1008 for control messages past their budget.
    pub control_limit_closes: AtomicU64,
    /// Messages refused at the edge: a payload nested past
    /// `--max-json-depth`, a push of a `phx_` event.
    pub payload_refusals: AtomicU64,
    /// Times a connection used its turn's read budget and yielded.
    pub read_yields: AtomicU64,
    /// TLS handshakes completed on the public port (`--tls-cert`).
    pub tls_handshakes: AtomicU64,
    /// Of those, resumed sessions (a ticket or session ID).
    pub tls_resumptions: AtomicU64,
    /// Connections whose TLS handshake failed (a protocol version or
    /// cipher the server refuses, a bad record, an untrusted certificate).
    pub tls_handshake_failures: AtomicU64,
    /// Plaintext requests (or other non-TLS bytes) to the TLS port.
    pub tls_plaintext_refusals: AtomicU64,
    /// Sockets closed by a `disconnect` to their user's socket id.
    pub user_disconnects: AtomicU64,
    /// Open long-poll sessions (owned by this shard).
    pub longpoll_sessions: AtomicU64,
    /// Polls parked, waiting for messages.
    pub longpoll_parked: AtomicU64,
    pub longpoll_expired: AtomicU64,
    pub longpoll_overflows: AtomicU64,
    pub longpoll_forwarded: AtomicU64,
    pub longpoll_forward_timeouts: AtomicU64,
    /// Messages of answers that found their poll's connection gone, put
    /// back in their session's buffer.
    pub longpoll_returned: AtomicU64,
    pub longpoll_refused: AtomicU64,
    /// New long-poll sessions refused past `--longpoll-session-rate`.
    pub longpoll_rate_limited: AtomicU64,
    /// New long-poll sessions refused past `--max-longpoll-sessions`.
    pub longpoll_cap_refusals: AtomicU64,
    /// `presence_state`/`presence_count` pushes to joiners, and their bytes.
    pub presence_states: AtomicU64,
    pub presence_state_bytes: AtomicU64,
    /// `presence_diff`/`presence_count` broadcasts delivered to sockets,
    /// and their frame bytes.
    pub presence_diffs_out: AtomicU64,
    pub presence_diff_bytes_out: AtomicU64,
    /// Presence calls refused (see `crate::channel::Presence`).
    pub presence_refused: AtomicU64,
    /// Joins with `since` that recovered, that could not, and the messages
    /// their replays sent (`crate::history`).
    pub history_recoveries: AtomicU64,
    pub history_misses: AtomicU64,
    pub history_replayed: AtomicU64,
    /// Joins with `since` refused because the history could not be read
    /// (Redis away): the client joins again.
    pub history_unavailable: AtomicU64,
    /// WebSockets that negotiated permessage-deflate.
    pub deflate_sockets: AtomicU64,
    /// Messages sent compressed, and the bytes compression saved on them
    /// (plain frame minus compressed frame).
    pub deflate_messages_out: AtomicU64,
    pub deflate_bytes_saved: AtomicU64,
    /// Compressed messages received (inflated).
    pub deflate_messages_in: AtomicU64,
    /// Sockets closed (1009) because a message inflated past `--max-message-bytes`.
    pub deflate_too_big: AtomicU64,
    /// Pusher HTTP API requests answered, by route and status
    /// ([`PUSHER_API_ROUTES`], [`PUSHER_API_STATUSES`]).
    pub pusher_api: [[AtomicU64; PUSHER_API_STATUSES.len() + 1]; PUSHER_API_ROUTES.len()],
    /// Pusher HTTP API requests waiting on the cluster's figures.
    pub pusher_api_waiting: AtomicU64,
    /// The sizes of the shard's tables, set by its once-a-second sweep
    /// ([`ShardStats::sizes`]): what a long run must not see grow.
    pub users: AtomicU64,
    pub user_sockets: AtomicU64,
    pub hook_waits: AtomicU64,
    pub hook_socket_ids: AtomicU64,
    pub hook_assigns: AtomicU64,
    pub history_reads_waiting: AtomicU64,
    pub presence_joins: AtomicU64,
    pub longpoll_requests_waiting: AtomicU64,
    pub longpoll_rate_entries: AtomicU64,
}

/// The routes of the Pusher HTTP API, as `/metrics` labels them.
pub const PUSHER_API_ROUTES: [&str; 8] = [
    "events",
    "batch_events",
    "channels",
    "channel",
    "channel_users",
    "terminate_connections",
    "user_events",
    "unknown",
];

/// The statuses the Pusher HTTP API answers with, as `/metrics` labels
/// them; any other is counted as `other`.
pub const PUSHER_API_STATUSES: [u16; 9] = [200, 400, 401, 404, 405, 411, 413, 503, 504];

impl ShardStats {
    /// Counts a Pusher HTTP API answer of route `route` (an index of
    /// [`PUSHER_API_ROUTES`]) with `status`.
    pub fn pusher_api_answered(&self, route: usize, status: u16) {
        let col = PUSHER_API_STATUSES
            .iter()
            .position(|&s| s == status)
            .unwrap_or(PUSHER_API_STATUSES.len());
        if let Some(row) = self.pusher_api.get(route) {
            ShardStats::add(&row[col], 1);
        }
    }
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

    /// Sets the table sizes (owner-only; once a second, off the hot path).
    pub fn sizes(&self, sizes: &TableSizes) {
        let set = |c: &AtomicU64, n: usize| c.store(n as u64, Relaxed);
        set(&self.users, sizes.users);
        set(&self.user_sockets, sizes.user_sockets);
        set(&self.hook_waits, sizes.hook_waits);
        set(&self.hook_socket_ids, sizes.hook_socket_ids);
        set(&self.hook_assigns, sizes.hook_assigns);
        set(&self.history_reads_waiting, sizes.history_reads_waiting);
        set(&self.presence_joins, sizes.presence_joins);
        set(
            &self.longpoll_requests_waiting,
            sizes.longpoll_requests_waiting,
        );
        set(&self.longpoll_rate_entries, sizes.longpoll_rate_entries);
    }
}

/// The entries of a shard's tables that live as long as what they are for
/// (a socket, a join, a request): each must come back down when those end.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TableSizes {
    pub users: usize,
    pub user_sockets: usize,
    pub hook_waits: usize,
    pub hook_socket_ids: usize,
    pub hook_assigns: usize,
    pub history_reads_waiting: usize,
    pub presence_joins: usize,
    pub longpoll_requests_waiting: usize,
    pub longpoll_rate_entries: usize,
}

/// One metric per counter of [`ShardStats`] (summed over the shards).
type Counter = fn(&ShardStats) -> &AtomicU64;
pub(crate) static SHARD_METRICS: &[(Metric, Counter)] = &[
    (
        Metric::gauge(
            "throng_connections",
            "Open TCP connections (HTTP and WebSocket).",
        ),
        |s| &s.connections,
    ),
    (
        Metric::gauge(
            "throng_websockets",
            "Open WebSocket connections.",
        ),
        |s| &s.websockets,
    ),
    (
        Metric::gauge(
            "throng_pusher_sockets",
            "Open Pusher Channels sockets (of throng_websockets).",
        ),
        |s| &s.pusher_sockets,
    ),
    (
        Metric::counter(
            "throng_pusher_cache_hits_total",
            "Pusher cache channel subscriptions that got the channel's last event.",
        ),
        |s| &s.pusher_cache_hits,
    ),
    (
        Metric::counter(
            "throng_pusher_cache_misses_total",
            "Pusher cache channel subscriptions that got pusher:cache_miss (no event kept, or kept longer than --pusher-cache-ttl).",
        ),
        |s| &s.pusher_cache_misses,
    ),
    (
        Metric::gauge(
            "throng_longpoll_sessions",
            "Open long-poll sessions.",
        ),
        |s| &s.longpoll_sessions,
    ),
    (
        Metric::gauge(
            "throng_longpoll_polls_waiting",
            "Long-polls waiting for messages (answered when one arrives, or 204 after --longpoll-window).",
        ),
        |s| &s.longpoll_parked,
    ),
    (
        Metric::gauge(
            "throng_channels_joined",
            "Joined channels over all sockets and long-poll sessions.",
        ),
        |s| &s.channels,
    ),
    (
        Metric::counter(
            "throng_connections_accepted_total",
            "Connections accepted.",
        ),
        |s| &s.accepted,
    ),
    (
        Metric::counter(
            "throng_connections_closed_total",
            "Connections closed.",
        ),
        |s| &s.closed,
    ),
    (
        Metric::counter(
            "throng_accept_errors_total",
            "Failed accepts (e.g. out of file descriptors).",
        ),
        |s| &s.accept_errors,
    ),
    (
        Metric::counter(
            "throng_http_requests_total",
            "HTTP requests served.",
        ),
        |s| &s.http_requests,
    ),
    (
        Metric::counter(
            "throng_joins_total",
            "Successful channel joins.",
        ),
        |s| &s.joins,
    ),
    (
        Metric::counter(
            "throng_refused_joins_total",
            "Refused or unmatched joins.",
        ),
        |s| &s.refused_joins,
    ),
    (
        Metric::counter(
            "throng_channel_limit_refusals_total",
            "Joins refused because the socket had --max-channels-per-socket channels.",
        )
        .limit(),
        |s| &s.channel_limit_refusals,
    ),
    (
        Metric::counter(
            "throng_auth_refusals_total",
            "Upgrades refused by connect authentication (HTTP 403).",
        )
        .limit(),
        |s| &s.auth_refusals,
    ),
    (
        Metric::counter(
            "throng_origin_refusals_total",
            "Upgrades refused by check_origin (HTTP 403).",
        )
        .limit(),
        |s| &s.origin_refusals,
    ),
    (
        Metric::counter(
            "throng_policy_refusals_total",
            "Joins and pushes refused by topic rules or the token's channels claim.",
        )
        .limit(),
        |s| &s.policy_refusals,
    ),
    (
        Metric::counter(
            "throng_rate_limited_total",
            "Pushes answered {\"reason\":\"rate limited\"} (--push-rate, --push-burst).",
        )
        .limit(),
        |s| &s.rate_limited,
    ),
    (
        Metric::counter(
            "throng_rate_limit_closes_total",
            "Sockets closed with 1008 after --push-strikes rate-limited pushes.",
        )
        .limit(),
        |s| &s.rate_limit_closes,
    ),
    (
        Metric::counter(
            "throng_control_limited_total",
            "Heartbeats, joins, leaves, control frames and tiny fragments over --control-rate, --control-burst.",
        )
        .limit(),
        |s| &s.control_limited,
    ),
    (
        Metric::counter(
            "throng_control_limit_closes_total",
            "Sockets closed with 1008 after --push-strikes control messages over their budget.",
        )
        .limit(),
        |s| &s.control_limit_closes,
    ),
    (
        Metric::counter(
            "throng_payload_refusals_total",
            "Messages answered with an error for a payload nested past --max-json-depth or a push of a phx_ event.",
        )
        .limit(),
        |s| &s.payload_refusals,
    ),
    (
        Metric::counter(
            "throng_read_yields_total",
            "Times a connection had more to read than one loop turn allows and waited for the next turn.",
        ),
        |s| &s.read_yields,
    ),
    (
        Metric::counter(
            "throng_tls_handshakes_total",
            "TLS handshakes completed on the public port.",
        ),
        |s| &s.tls_handshakes,
    ),
    (
        Metric::counter(
            "throng_tls_resumptions_total",
            "TLS handshakes on the public port that resumed a session (a ticket or session ID): cheaper than a full one.",
        ),
        |s| &s.tls_resumptions,
    ),
    (
        Metric::counter(
            "throng_tls_handshake_failures_total",
            "TLS handshakes on the public port that failed (a refused protocol version or cipher, a bad record, a client that does not trust the certificate).",
        ),
        |s| &s.tls_handshake_failures,
    ),
    (
        Metric::counter(
            "throng_tls_plaintext_refusals_total",
            "Connections to the TLS port that sent plaintext (http:// or ws://) instead; an HTTP request is answered 400.",
        ),
        |s| &s.tls_plaintext_refusals,
    ),
    (
        Metric::counter(
            "throng_user_disconnects_total",
            "Sockets closed (1001) by a disconnect of their user.",
        ),
        |s| &s.user_disconnects,
    ),
    (
        Metric::counter(
            "throng_messages_in_total",
            "Phoenix messages received (WebSocket frames and long-poll POSTed messages).",
        ),
        |s| &s.messages_in,
    ),
    (
        Metric::counter(
            "throng_messages_out_total",
            "Messages sent (WebSocket frames and messages handed to long-polls).",
        ),
        |s| &s.messages_out,
    ),
    (
        Metric::counter(
            "throng_broadcasts_total",
            "Broadcasts fanned out by this node's shards.",
        ),
        |s| &s.broadcasts,
    ),
    (
        Metric::counter(
            "throng_bytes_in_total",
            "Bytes read from sockets.",
        ),
        |s| &s.bytes_in,
    ),
    (
        Metric::counter(
            "throng_bytes_out_total",
            "Bytes written to sockets.",
        ),
        |s| &s.bytes_out,
    ),
    (
        Metric::counter(
            "throng_slow_reader_closes_total",
            "Connections closed because their outbound queue passed its bound.",
        )
        .limit(),
        |s| &s.slow_reader_closes,
    ),
    (
        Metric::counter(
            "throng_idle_timeout_closes_total",
            "Connections closed by the idle sweep.",
        )
        .limit(),
        |s| &s.idle_timeout_closes,
    ),
    (
        Metric::counter(
            "throng_protocol_errors_total",
            "Connections and long-poll sessions closed for protocol errors.",
        )
        .limit(),
        |s| &s.protocol_errors,
    ),
    (
        Metric::counter(
            "throng_protocol_refusals_total",
            "Sockets their protocol refused once upgraded, with the protocol's close code (Pusher: 4001 an unknown app key, 4004 an app over its max_connections).",
        ),
        |s| &s.protocol_refusals,
    ),
    (
        Metric::counter(
            "throng_connections_refused_total",
            "Connections refused with 503 because --max-connections were open.",
        )
        .limit(),
        |s| &s.refused_total_cap,
    ),
    (
        Metric::counter(
            "throng_connections_refused_per_ip_total",
            "Connections refused with 503 because --max-connections-per-ip were open from the address.",
        )
        .limit(),
        |s| &s.refused_per_ip,
    ),
    (
        Metric::counter(
            "throng_connections_refused_memory_total",
            "Connections refused (503) because memory available was under --min-available-memory-bytes.",
        ),
        |s| &s.refused_memory,
    ),
    (
        Metric::counter(
            "throng_connections_refused_files_total",
            "Connections refused (503) because the process was at its open-files limit (ulimit -n): run more workers or raise the limit.",
        ),
        |s| &s.refused_files,
    ),
    (
        Metric::counter(
            "throng_handshake_timeouts_total",
            "HTTP connections closed because a request head took longer than --handshake-timeout.",
        )
        .limit(),
        |s| &s.handshake_timeouts,
    ),
    (
        Metric::counter(
            "throng_ref_too_long_closes_total",
            "Sockets closed with 1008 for a join_ref or ref over --max-ref-bytes.",
        )
        .limit(),
        |s| &s.ref_refusals,
    ),
    (
        Metric::counter(
            "throng_socket_budget_refusals_total",
            "Joins refused because the socket's joins would pass --max-socket-bytes.",
        )
        .limit(),
        |s| &s.socket_budget_refusals,
    ),
    (
        Metric::counter(
            "throng_drain_closes_total",
            "WebSockets closed with 1012 (server restart) by a drain.",
        ),
        |s| &s.drain_closes,
    ),
    (
        Metric::counter(
            "throng_http_errors_total",
            "HTTP requests answered with an error status (malformed, head over 16 KiB, bad upgrade).",
        )
        .limit(),
        |s| &s.http_errors,
    ),
    (
        Metric::counter(
            "throng_outbound_budget_closes_total",
            "Connections cut (1013) because the process's outbound memory passed --max-outbound-total-bytes.",
        )
        .limit(),
        |s| &s.outbound_budget_closes,
    ),
    (
        Metric::counter(
            "throng_longpoll_expired_total",
            "Long-poll sessions ended after 1.5x --longpoll-window without a poll.",
        ),
        |s| &s.longpoll_expired,
    ),
    (
        Metric::counter(
            "throng_longpoll_overflows_total",
            "Long-poll sessions ended (their messages dropped) because messages waiting for a poll passed --max-outbound-bytes.",
        )
        .limit(),
        |s| &s.longpoll_overflows,
    ),
    (
        Metric::counter(
            "throng_longpoll_forwarded_total",
            "Long-poll requests forwarded to the shard or node holding their session.",
        ),
        |s| &s.longpoll_forwarded,
    ),
    (
        Metric::counter(
            "throng_longpoll_forward_timeouts_total",
            "Forwarded long-poll requests with no answer in the window + 5 s (answered 410).",
        ),
        |s| &s.longpoll_forward_timeouts,
    ),
    (
        Metric::counter(
            "throng_longpoll_returned_total",
            "Messages of long-poll answers whose connection had closed, put back for the session's next poll.",
        ),
        |s| &s.longpoll_returned,
    ),
    (
        Metric::counter(
            "throng_longpoll_refused_total",
            "Long-poll requests refused: 403 (unsupported vsn) or 413 (more than --max-longpoll-batch messages).",
        )
        .limit(),
        |s| &s.longpoll_refused,
    ),
    (
        Metric::counter(
            "throng_longpoll_rate_limited_total",
            "New long-poll sessions refused ({\"status\":503}) past --longpoll-session-rate from their address.",
        )
        .limit(),
        |s| &s.longpoll_rate_limited,
    ),
    (
        Metric::counter(
            "throng_longpoll_sessions_refused_total",
            "New long-poll sessions refused ({\"status\":503}) past --max-longpoll-sessions.",
        )
        .limit(),
        |s| &s.longpoll_cap_refusals,
    ),
    (
        Metric::counter(
            "throng_presence_states_total",
            "presence_state (or presence_count) pushes to joiners.",
        ),
        |s| &s.presence_states,
    ),
    (
        Metric::counter(
            "throng_presence_state_bytes_total",
            "Message bytes of those pushes.",
        ),
        |s| &s.presence_state_bytes,
    ),
    (
        Metric::counter(
            "throng_presence_diffs_delivered_total",
            "presence_diff (or presence_count) broadcasts delivered to sockets.",
        ),
        |s| &s.presence_diffs_out,
    ),
    (
        Metric::counter(
            "throng_presence_diff_bytes_delivered_total",
            "Frame bytes of those deliveries.",
        ),
        |s| &s.presence_diff_bytes_out,
    ),
    (
        Metric::counter(
            "throng_presence_refused_total",
            "Presence refused: a join whose key is over --max-presence-bytes, a track or update over it, a key tracked twice by a join, an update or untrack of a key not tracked.",
        )
        .limit(),
        |s| &s.presence_refused,
    ),
    (
        Metric::counter(
            "throng_history_recoveries_total",
            "Joins with since that got every message they missed (recovered: true).",
        ),
        |s| &s.history_recoveries,
    ),
    (
        Metric::counter(
            "throng_history_misses_total",
            "Joins with since that could not recover (recovered: false): a position too old, of another epoch, malformed, or a topic without history.",
        ),
        |s| &s.history_misses,
    ),
    (
        Metric::counter(
            "throng_history_unavailable_total",
            "Joins with since refused with {\"reason\":\"history unavailable\"} because the history in Redis could not be read (Redis away or slower than --redis-timeout-ms); phoenix.js joins again.",
        ),
        |s| &s.history_unavailable,
    ),
    (
        Metric::counter(
            "throng_history_replayed_total",
            "Messages sent to joins from topic history.",
        ),
        |s| &s.history_replayed,
    ),
    (
        Metric::counter(
            "throng_deflate_sockets_total",
            "WebSockets that negotiated permessage-deflate (compression; off with --no-deflate).",
        ),
        |s| &s.deflate_sockets,
    ),
    (
        Metric::counter(
            "throng_deflate_messages_out_total",
            "Messages sent compressed (permessage-deflate); a broadcast counts once per socket it reached compressed.",
        ),
        |s| &s.deflate_messages_out,
    ),
    (
        Metric::counter(
            "throng_deflate_bytes_saved_total",
            "Bytes compression saved on those messages (plain frame minus compressed frame).",
        ),
        |s| &s.deflate_bytes_saved,
    ),
    (
        Metric::counter(
            "throng_deflate_messages_in_total",
            "Compressed messages received and inflated.",
        ),
        |s| &s.deflate_messages_in,
    ),
    (
        Metric::counter(
            "throng_deflate_too_big_total",
            "Sockets closed with 1009 because a compressed message inflated past --max-message-bytes (checked while inflating).",
        ),
        |s| &s.deflate_too_big,
    ),
    (
        Metric::gauge(
            "throng_registry_topics",
            "Topics in the shards' registries: each shard counts those its own sockets joined (a topic with subscribers on two shards counts twice).",
        ),
        |s| &s.topics,
    ),
    (
        Metric::gauge(
            "throng_users",
            "Authenticated users with a socket, counted per shard (a user with sockets on two shards counts twice); as of the shards' last once-a-second sweep.",
        ),
        |s| &s.users,
    ),
    (
        Metric::gauge(
            "throng_user_sockets",
            "Sockets with an authenticated user in the users table (what a disconnect of a user looks up); as of the last sweep.",
        ),
        |s| &s.user_sockets,
    ),
    (
        Metric::gauge(
            "throng_hook_waits",
            "Connects, joins and pushes waiting for the app backend's answer, or queued behind a push of the same socket and topic; as of the last sweep.",
        ),
        |s| &s.hook_waits,
    ),
    (
        Metric::gauge(
            "throng_hook_socket_ids",
            "Open sockets a hook request or event has named (their socket_id number, kept until they close); as of the last sweep.",
        ),
        |s| &s.hook_socket_ids,
    ),
    (
        Metric::gauge(
            "throng_hook_assigns",
            "Open sockets whose connect hook answered assigns (kept until they close); as of the last sweep.",
        ),
        |s| &s.hook_assigns,
    ),
    (
        Metric::gauge(
            "throng_history_reads_waiting",
            "Joins with since waiting for their history read in Redis; as of the last sweep.",
        ),
        |s| &s.history_reads_waiting,
    ),
    (
        Metric::gauge(
            "throng_presence_joins",
            "Joins whose presence the shards track (each leaves with its join); as of the last sweep.",
        ),
        |s| &s.presence_joins,
    ),
    (
        Metric::gauge(
            "throng_longpoll_requests_waiting",
            "Long-poll requests whose connection waits for an answer from another shard or node; as of the last sweep.",
        ),
        |s| &s.longpoll_requests_waiting,
    ),
    (
        Metric::gauge(
            "throng_longpoll_rate_entries",
            "Addresses whose new long-poll sessions are being counted against --longpoll-session-rate (dropped once their budget is full again); as of the last sweep.",
        ),
        |s| &s.longpoll_rate_entries,
    ),
];

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
