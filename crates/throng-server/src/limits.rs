//! Limits: the bounds that keep one client, a burst or a fault from hurting
//! everyone else, their settings (flags, `THRONG_*` variables and TOML keys,
//! merged into [`Config`](crate::Config)), and the admission of new
//! connections against the connection caps ([`Admission`]).
//!
//! Each bound, its default and what a client sees when it hits it is in the
//! "Limits and defaults" table of `docs/configuration.md`. The bounds that live elsewhere:
//! `--max-message-bytes`, `--max-outbound-bytes` and
//! `--max-channels-per-socket` (config.rs), and where each is enforced:
//! - the HTTP head deadline: the shard's once-a-second sweep
//!   (`engine/shard/sweep.rs`), against the connection's `last_active`,
//!   which for an HTTP connection is when its current request began (no
//!   timer per connection);
//! - connection caps: [`Admission`], at accept, and at a long-poll
//!   session's start (a session is a connection, whatever carries its
//!   requests; `protocol/phoenix/longpoll/shard.rs`, with its start rate per
//!   address);
//! - a connection's turn of its shard's loop (reads, messages) and the
//!   control budget (heartbeats, joins, leaves, control frames, tiny
//!   fragments): `engine/shard/input.rs`, `socket/`;
//! - payloads: [`json_too_deep`] for pushes, joins and API broadcasts,
//!   [`topic_error`] for API topics;
//! - the server API's timeouts and connection cap: `api.rs`;
//! - a socket's memory: a message in progress (kept fragments plus a
//!   half-received frame) is bounded by `--max-message-bytes` as a whole
//!   (`engine/shard/input.rs`), and what its joins store (join_refs, topic names)
//!   by what `--max-socket-bytes` leaves after that (`socket/`), refs by
//!   [`check_refs`];
//! - outbound memory: per connection in `engine/conns/output.rs`, for
//!   the node in `budget.rs`; shard inboxes in `node.rs`; the
//!   Redis publish queue in `throng-pubsub`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use throng_protocol::Message;

use crate::setting::settings;
use crate::Error;

settings! {
    /// The limit flags, flattened into `throng serve`'s; the same names (with
    /// underscores) are keys of the TOML file. All optional, so that the file
    /// can fill what the command line leaves out.
    pub struct LimitArgs {
        /// Seconds a connection has to send a whole HTTP request head (the WebSocket upgrade included), from accept or from the end of its previous request; then it is closed (408 if a head had begun)
        #[arg(long, value_parser = crate::setting::whole::<u64>, value_name = "SECS", env = "THRONG_HANDSHAKE_TIMEOUT")]
        pub handshake_timeout: Option<u64> = 10,
        /// Open connections this process accepts; past it a new one gets 503 and is closed; 0 = no cap
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "N", env = "THRONG_MAX_CONNECTIONS")]
        pub max_connections: Option<usize> = 0,
        /// Open connections from one source IP address; past it a new one gets 503 and is closed; 0 = no cap (behind a load balancer every client has its address)
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "N", env = "THRONG_MAX_CONNECTIONS_PER_IP")]
        pub max_connections_per_ip: Option<usize> = 0,
        /// Longest join_ref or ref a message may carry; a longer one closes the socket with 1008 (phoenix.js sends short counters)
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_REF_BYTES")]
        pub max_ref_bytes: Option<usize> = 64,
        /// Memory one socket may pin: a message in progress (up to --max-message-bytes) plus what its joins store (join_refs, topic names); a join past it is refused [default: --max-message-bytes + 65536]
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_SOCKET_BYTES")]
        pub max_socket_bytes: Option<usize>,
        /// On SIGTERM or Ctrl-C: stop accepting and close sockets with 1012 (phoenix.js reconnects elsewhere) in batches over one second per 1,000 open sockets, at most this many seconds, then exit
        #[arg(long, value_parser = crate::setting::whole::<u64>, value_name = "SECS", env = "THRONG_DRAIN_SECONDS")]
        pub drain_seconds: Option<u64> = 10,
        /// Outbound memory of the whole process (queued output of every connection, and the broadcasts it holds); past it, a connection that needs to queue more is closed with 1013
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_OUTBOUND_TOTAL_BYTES")]
        pub max_outbound_total_bytes: Option<usize> = 1073741824,
        /// Bytes of broadcasts waiting in one shard's inbox; past it, broadcasts for that shard are dropped and counted
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_SHARD_INBOX_BYTES")]
        pub max_shard_inbox_bytes: Option<usize> = 67108864,
        /// Bytes the history of every topic may hold together ([[topics]] history_size); past it a topic's oldest messages are dropped and a rejoin from before them gets recovered: false
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_HISTORY_BYTES")]
        pub max_history_bytes: Option<usize> = 67108864,
        /// Bytes of broadcasts waiting to be published to Redis; past it, broadcasts to other nodes are dropped and counted
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "BYTES", env = "THRONG_REDIS_QUEUE_BYTES")]
        pub redis_queue_bytes: Option<usize> = 67108864,
        /// Control messages a second a socket may sustain: heartbeats, joins, leaves, ping and pong frames, and fragments under 1 KiB; excess ones get {"reason":"rate limited"} and, --push-strikes past the burst, the socket is closed with 1008; 0 = no limit (phoenix.js sends a heartbeat every 30 s)
        #[arg(long, value_name = "N", env = "THRONG_CONTROL_RATE")]
        pub control_rate: Option<f64> = 10.0,
        /// Control messages a socket may send at once before --control-rate applies (a reconnect rejoins every channel at once)
        #[arg(long, value_parser = crate::setting::whole::<u32>, value_name = "N", env = "THRONG_CONTROL_BURST")]
        pub control_burst: Option<u32> = 250,
        /// Seconds the server API gives a client to send a request's head, and then its body; past it the connection is closed
        #[arg(long, value_parser = crate::setting::whole::<u64>, value_name = "SECS", env = "THRONG_API_TIMEOUT")]
        pub api_timeout: Option<u64> = 10,
        /// Open connections to the server API; past it a new one gets 503 and is closed
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "N", env = "THRONG_MAX_API_CONNECTIONS")]
        pub max_api_connections: Option<usize> = 256,
        /// Live streams of the dashboard page (GET /dashboard) open at once; each is also one of --max-api-connections; past it a new one gets 503; 0 = the dashboard's figures are off
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "N", env = "THRONG_MAX_DASHBOARD_STREAMS")]
        pub max_dashboard_streams: Option<usize> = 8,
        /// Long-poll sessions this process keeps at once (each is also a connection for --max-connections and --max-connections-per-ip); past it a new session gets {"status":503}
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "N", env = "THRONG_MAX_LONGPOLL_SESSIONS")]
        pub max_longpoll_sessions: Option<usize> = 100000,
        /// New long-poll sessions a second one address may start on one event loop (a burst of 50 first); past it {"status":503}; 0 = no limit
        #[arg(long, value_name = "N", env = "THRONG_LONGPOLL_SESSION_RATE")]
        pub longpoll_session_rate: Option<f64> = 5.0,
        /// Arrays and objects a JSON payload may nest, from clients and from the server API; deeper is refused with {"reason":"payload nested too deeply"} (serde_json's default limit is 128)
        #[arg(long, value_parser = crate::setting::whole::<usize>, value_name = "N", env = "THRONG_MAX_JSON_DEPTH")]
        pub max_json_depth: Option<usize> = 128,
        /// With --redis: seconds the connection to Redis may stay lost before GET /readyz answers 503 (a load balancer then stops sending new clients to this node, whose broadcasts no longer reach the cluster)
        #[arg(long, value_parser = crate::setting::whole::<u64>, value_name = "SECS", env = "THRONG_READY_REDIS_GRACE")]
        pub ready_redis_grace: Option<u64> = 10,
        /// Memory the host (or the container's memory limit) must have available for this process to take new connections: below it a new connection gets 503 with Retry-After and is closed, and the sockets open keep being served; checked once a second (MemAvailable in /proc/meminfo, and the cgroup's memory.max less its use); 0 = no check
        #[arg(long, value_parser = crate::setting::whole::<u64>, value_name = "BYTES", env = "THRONG_MIN_AVAILABLE_MEMORY_BYTES")]
        pub min_available_memory_bytes: Option<u64> = 67108864,
        /// Test only: read the available memory from this file (a number of bytes) instead of the host's. Never set it in production.
        #[arg(long, hide = true)]
        #[serde(skip_deserializing)]
        pub test_available_memory_file: Option<std::path::PathBuf>,
        /// Test only: with --echo, an /echo message equal to this text panics the shard thread that reads it (to test that a panic ends the process). Never set it in production.
        #[arg(long, hide = true)]
        #[serde(skip_deserializing)]
        pub test_panic_message: Option<String>,
    }
}

/// Resolved limits. See [`LimitArgs`] for what each means.
#[derive(Clone, Debug)]
pub struct Limits {
    pub handshake_timeout: Duration,
    /// 0: no cap.
    pub max_connections: usize,
    /// 0: no cap.
    pub max_connections_per_ip: usize,
    pub max_ref_bytes: usize,
    pub max_socket_bytes: usize,
    pub drain: Duration,
    pub max_outbound_total_bytes: usize,
    pub max_shard_inbox_bytes: usize,
    pub redis_queue_bytes: usize,
    /// Bytes of topic history kept in this process.
    pub max_history_bytes: usize,
    /// Control messages a second per socket (0 = no limit), and the burst.
    pub control_rate: f64,
    pub control_burst: u32,
    /// The server API's head and body deadlines, and its connection cap.
    pub api_timeout: Duration,
    pub max_api_connections: usize,
    /// Dashboard streams open at once (0: none).
    pub max_dashboard_streams: usize,
    /// Long-poll sessions at once, and new ones a second per address.
    pub max_longpoll_sessions: usize,
    pub longpoll_session_rate: f64,
    /// Arrays and objects a payload may nest.
    pub max_json_depth: usize,
    /// How long the backplane may be down before `/readyz` says 503.
    pub ready_redis_grace: Duration,
    /// Test only (hidden flag): see [`LimitArgs::test_panic_message`].
    pub test_panic_message: Option<String>,
    /// Below this available memory new connections are refused (0: no check).
    pub min_available_memory: u64,
    /// Test only (hidden flag): where the available memory is read.
    pub test_available_memory_file: Option<std::path::PathBuf>,
}

/// What a socket may pin beyond its message limit by default: room for
/// 100 joins with a 64-byte join_ref and a 500-byte topic each.
pub const SOCKET_JOIN_BYTES: usize = 64 << 10;

impl Limits {
    /// The defaults stated in [`LimitArgs`], for a server whose message
    /// limit is `max_message_bytes`.
    pub fn defaults(max_message_bytes: usize) -> Limits {
        LimitArgs::default()
            .resolve(max_message_bytes)
            .expect("the default limits resolve")
    }

    /// What the joins of one socket may store: the socket budget less a
    /// message in progress (its frame header and a control frame included).
    pub fn join_bytes(&self, max_message_bytes: usize) -> usize {
        self.max_socket_bytes
            .saturating_sub(max_message_bytes + MESSAGE_SLACK)
    }
}

/// Beyond the message itself, what a message in progress may hold: two
/// frame headers and a control frame read between fragments.
pub const MESSAGE_SLACK: usize = 2 * throng_protocol::frame::MAX_HEADER_LEN + 127;

impl LimitArgs {
    /// These settings (flags over the file's keys, merged with
    /// [`LimitArgs::or`]) over their defaults.
    pub fn resolve(&self, max_message_bytes: usize) -> Result<Limits, Error> {
        let limits = Limits {
            handshake_timeout: Duration::from_secs(self.handshake_timeout()),
            max_connections: self.max_connections(),
            max_connections_per_ip: self.max_connections_per_ip(),
            max_ref_bytes: self.max_ref_bytes(),
            max_socket_bytes: self
                .max_socket_bytes
                .unwrap_or(max_message_bytes + SOCKET_JOIN_BYTES),
            drain: Duration::from_secs(self.drain_seconds()),
            max_outbound_total_bytes: self.max_outbound_total_bytes(),
            max_shard_inbox_bytes: self.max_shard_inbox_bytes(),
            redis_queue_bytes: self.redis_queue_bytes(),
            max_history_bytes: self.max_history_bytes(),
            control_rate: self.control_rate(),
            control_burst: self.control_burst(),
            api_timeout: Duration::from_secs(self.api_timeout()),
            max_api_connections: self.max_api_connections(),
            max_dashboard_streams: self.max_dashboard_streams(),
            max_longpoll_sessions: self.max_longpoll_sessions(),
            longpoll_session_rate: self.longpoll_session_rate(),
            max_json_depth: self.max_json_depth(),
            ready_redis_grace: Duration::from_secs(self.ready_redis_grace()),
            test_panic_message: self.test_panic_message.clone(),
            min_available_memory: self.min_available_memory_bytes(),
            test_available_memory_file: self.test_available_memory_file.clone(),
        };
        if cfg!(not(feature = "test-hooks")) && limits.test_panic_message.is_some() {
            return Err(Error::Config(
                "--test-panic-message is a test hook: build with --features throng/test-hooks"
                    .into(),
            ));
        }
        if limits.handshake_timeout.is_zero() {
            return Err(Error::Config("handshake_timeout must be at least 1".into()));
        }
        if limits.max_ref_bytes < 8 {
            return Err(Error::Config("max_ref_bytes must be at least 8".into()));
        }
        if limits.api_timeout.is_zero() || limits.max_api_connections == 0 {
            return Err(Error::Config(
                "api_timeout and max_api_connections must be at least 1".into(),
            ));
        }
        if limits.max_json_depth == 0 {
            return Err(Error::Config("max_json_depth must be at least 1".into()));
        }
        if !(0.0..=100_000.0).contains(&limits.longpoll_session_rate) {
            return Err(Error::Config(format!(
                "longpoll_session_rate must be 0 (no limit) to 100000 a second, got {}",
                limits.longpoll_session_rate
            )));
        }
        if !(0.0..=100_000.0).contains(&limits.control_rate) {
            return Err(Error::Config(format!(
                "control_rate must be 0 (no limit) to 100000 a second, got {}",
                limits.control_rate
            )));
        }
        let least = max_message_bytes + MESSAGE_SLACK + 1024;
        if limits.max_socket_bytes < least {
            return Err(Error::Config(format!(
                "max_socket_bytes must be at least max_message_bytes + {} ({least}): \
                 a socket must be able to hold one message in progress and a join",
                least - max_message_bytes
            )));
        }
        Ok(limits)
    }
}

/// Refuses a message whose join_ref or ref is longer than `max` bytes.
/// Refs are stored (a join keeps its join_ref for every message of the
/// channel) and echoed, so their length is bounded; phoenix.js sends
/// decimal counters. The answer is a close with 1008 (policy violation),
/// not an error reply: a reply would have to echo the oversized ref back,
/// and no Phoenix client sends one.
pub fn check_refs(msg: &Message<'_>, max: usize) -> Result<(), &'static str> {
    let too_long =
        |r: &Option<throng_protocol::Ref<'_>>| r.as_deref().is_some_and(|r| r.len() > max);
    if too_long(&msg.join_ref) {
        return Err("join_ref too long");
    }
    if too_long(&msg.msg_ref) {
        return Err("ref too long");
    }
    Ok(())
}

/// Whether JSON text nests arrays and objects deeper than `max`. One pass
/// over the bytes, no allocation: the text is valid JSON already (the
/// serializer checked it), so only strings (where brackets are text) need
/// telling apart. Numbers are kept as they came (`1e400`, a 5,000-digit
/// integer: JSON allows them; the docs say what receivers may do).
pub fn json_too_deep(json: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in json {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// The longest topic the server API accepts, and what a topic may not hold.
pub const MAX_TOPIC_BYTES: usize = 1024;

/// Why `topic` is not a topic: empty, longer than [`MAX_TOPIC_BYTES`], or
/// holding a control character (a NUL, a newline: no client sends them,
/// and logs and Redis keys would carry them).
pub fn topic_error(topic: &str) -> Option<&'static str> {
    if topic.is_empty() {
        Some("the topic is empty")
    } else if topic.len() > MAX_TOPIC_BYTES {
        Some("the topic is longer than 1024 bytes")
    } else if topic.chars().any(char::is_control) {
        Some("the topic holds a control character")
    } else {
        None
    }
}

/// Why a new connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `--max-connections` are open.
    Total,
    /// `--max-connections-per-ip` are open from its address.
    PerIp,
    /// `--max-longpoll-sessions` are open (long-poll only).
    Sessions,
    /// The host has less memory available than `--min-available-memory-bytes`.
    Memory,
    /// The process is at its open-files limit (`ulimit -n`): the connection
    /// was taken with a descriptor kept in reserve, answered and closed.
    Files,
}

impl Refusal {
    /// The response a refused connection gets before it is closed: 503,
    /// which phoenix.js sees as a failed connection and retries with backoff.
    pub fn response(self) -> &'static [u8] {
        match self {
            Refusal::Total => b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n\r\ntoo many connections\n",
            Refusal::PerIp | Refusal::Sessions => b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: 38\r\n\r\ntoo many connections from your address\n",
            Refusal::Memory => b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 5\r\nContent-Type: text/plain\r\nContent-Length: 34\r\n\r\nserver low on memory: retry later\n",
            Refusal::Files => b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 5\r\nContent-Type: text/plain\r\nContent-Length: 44\r\n\r\nserver at its open-files limit: retry later\n",
        }
    }
}

/// Stripes of the per-address table: shards accepting at once rarely wait
/// for each other.
const STRIPES: usize = 64;

/// Admission of new connections against `--max-connections` and
/// `--max-connections-per-ip`, shared by the node's shards. With both caps
/// off (the default) it does nothing and costs nothing.
pub struct Admission {
    max_total: usize,
    max_per_ip: usize,
    open: AtomicUsize,
    per_ip: Vec<Mutex<HashMap<IpAddr, u32>>>,
    /// `--max-longpoll-sessions`, and the sessions open.
    max_sessions: usize,
    sessions: AtomicUsize,
    /// `--min-available-memory-bytes` (0: no check), where it is read, and
    /// whether the last check found less (set by [`Admission::check_memory`],
    /// once a second).
    min_memory: u64,
    memory_file: Option<std::path::PathBuf>,
    low_memory: std::sync::atomic::AtomicBool,
    /// The memory available at the last check (0: not checked).
    pub available_memory: std::sync::atomic::AtomicU64,
}

impl Admission {
    pub fn new(limits: &Limits) -> Admission {
        Admission {
            max_total: limits.max_connections,
            max_per_ip: limits.max_connections_per_ip,
            open: AtomicUsize::new(0),
            per_ip: (0..if limits.max_connections_per_ip > 0 {
                STRIPES
            } else {
                0
            })
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            max_sessions: limits.max_longpoll_sessions,
            sessions: AtomicUsize::new(0),
            min_memory: limits.min_available_memory,
            memory_file: limits.test_available_memory_file.clone(),
            low_memory: std::sync::atomic::AtomicBool::new(false),
            available_memory: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Reads the memory available now against `--min-available-memory-bytes`
    /// (once a second, by one shard); logs when new connections start and
    /// stop being refused for it.
    pub fn check_memory(&self) {
        if self.min_memory == 0 {
            return;
        }
        let available = match &self.memory_file {
            Some(f) => std::fs::read_to_string(f)
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            None => crate::sys::available_memory(),
        };
        let Some(available) = available else {
            return;
        };
        self.available_memory.store(available, Relaxed);
        let low = available < self.min_memory;
        if self.low_memory.swap(low, Relaxed) != low {
            let mib = |b: u64| b >> 20;
            if low {
                tracing::warn!(
                    "memory available is {} MiB, under --min-available-memory-bytes ({} MiB): \
                     new connections are refused with 503 until it is back; the sockets open \
                     keep being served",
                    mib(available),
                    mib(self.min_memory)
                );
            } else {
                tracing::info!(
                    "memory available is {} MiB again: new connections are taken",
                    mib(available)
                );
            }
        }
    }

    /// Counts a new long-poll session from `ip`: against
    /// `--max-longpoll-sessions`, and as a connection (a session is a
    /// Phoenix socket, whatever TCP connections carry its requests).
    pub fn admit_session(&self, ip: IpAddr) -> Result<(), Refusal> {
        if self.sessions.fetch_add(1, Relaxed) >= self.max_sessions {
            self.sessions.fetch_sub(1, Relaxed);
            return Err(Refusal::Sessions);
        }
        self.admit(ip).inspect_err(|_| {
            self.sessions.fetch_sub(1, Relaxed);
        })
    }

    /// Un-counts a session admitted by [`Admission::admit_session`].
    pub fn release_session(&self, ip: Option<IpAddr>) {
        self.sessions.fetch_sub(1, Relaxed);
        self.release(ip);
    }

    /// Whether connections are counted per address (their address must
    /// then be given back to [`Admission::release`]).
    pub fn per_ip(&self) -> bool {
        self.max_per_ip > 0
    }

    /// Counts a new connection from `ip`, or refuses it.
    pub fn admit(&self, ip: IpAddr) -> Result<(), Refusal> {
        if self.low_memory.load(Relaxed) {
            return Err(Refusal::Memory);
        }
        if self.max_total > 0 && self.open.fetch_add(1, Relaxed) >= self.max_total {
            self.open.fetch_sub(1, Relaxed);
            return Err(Refusal::Total);
        }
        if self.max_per_ip > 0 {
            let mut map = self.stripe(ip).lock().unwrap_or_else(|e| e.into_inner());
            let n = map.entry(ip).or_insert(0);
            if *n as usize >= self.max_per_ip {
                drop(map);
                if self.max_total > 0 {
                    self.open.fetch_sub(1, Relaxed);
                }
                return Err(Refusal::PerIp);
            }
            *n += 1;
        }
        Ok(())
    }

    /// Un-counts a connection admitted from `ip` (`None` when addresses are
    /// not counted).
    pub fn release(&self, ip: Option<IpAddr>) {
        if self.max_total > 0 {
            self.open.fetch_sub(1, Relaxed);
        }
        if let (true, Some(ip)) = (self.per_ip(), ip) {
            let mut map = self.stripe(ip).lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = map.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&ip);
                }
            }
        }
    }

    fn stripe(&self, ip: IpAddr) -> &Mutex<HashMap<IpAddr, u32>> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let h = BuildHasherDefault::<DefaultHasher>::default().hash_one(ip);
        &self.per_ip[h as usize % STRIPES]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_ip: usize) -> Limits {
        Limits {
            max_connections: total,
            max_connections_per_ip: per_ip,
            ..Limits::defaults(1024)
        }
    }

    #[test]
    fn json_depth_is_counted_outside_strings() {
        assert!(!json_too_deep(br#"{"a":[1,{"b":[]}]}"#, 4));
        assert!(json_too_deep(br#"{"a":[1,{"b":[]}]}"#, 3));
        assert!(!json_too_deep(br#"{"a":"[[[[[[\"[[["}"#, 1));
        let deep = "[".repeat(30_000) + &"]".repeat(30_000);
        assert!(json_too_deep(deep.as_bytes(), 128));
        assert!(topic_error("rooms:lobby").is_none());
        assert!(topic_error("a\0b").is_some());
        assert!(topic_error(&"x".repeat(1025)).is_some());
        assert!(topic_error("").is_some());
    }

    #[test]
    fn admission_refuses_under_the_memory_floor_unless_it_is_off() {
        let dir = std::env::temp_dir().join(format!("throng-admission-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("available");
        std::fs::write(&file, "1000\n").unwrap();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let with = |floor| Limits {
            min_available_memory: floor,
            test_available_memory_file: Some(file.clone()),
            ..Limits::defaults(1024)
        };
        let off = Admission::new(&with(0));
        off.check_memory();
        assert_eq!(off.admit(ip), Ok(()));
        assert_eq!(off.available_memory.load(Relaxed), 0, "off: never read");
        let on = Admission::new(&with(4096));
        assert_eq!(on.admit(ip), Ok(()), "not checked yet");
        on.check_memory();
        assert_eq!(on.admit(ip), Err(Refusal::Memory));
        std::fs::write(&file, "5000").unwrap();
        on.check_memory();
        assert_eq!(on.admit(ip), Ok(()));
        assert_eq!(on.available_memory.load(Relaxed), 5000);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn admission_counts_total_and_per_address() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let adm = Admission::new(&limits(3, 2));
        assert_eq!(adm.admit(a), Ok(()));
        assert_eq!(adm.admit(a), Ok(()));
        assert_eq!(adm.admit(a), Err(Refusal::PerIp));
        assert_eq!(adm.admit(b), Ok(()));
        assert_eq!(adm.admit(b), Err(Refusal::Total));
        adm.release(Some(a));
        assert_eq!(adm.admit(b), Ok(()));
        assert_eq!(adm.admit(a), Err(Refusal::Total));
        let off = Admission::new(&limits(0, 0));
        for _ in 0..1000 {
            assert_eq!(off.admit(a), Ok(()));
        }
        assert!(!off.per_ip());
    }

    #[test]
    fn refs_over_the_bound_are_refused() {
        let msg = |join_ref: &str, r: &str| Message {
            join_ref: Some(join_ref.to_string().into()),
            msg_ref: Some(r.to_string().into()),
            topic: "t".into(),
            event: "e".into(),
            payload: throng_protocol::Payload::EMPTY,
        };
        assert_eq!(check_refs(&msg("1", "2"), 8), Ok(()));
        assert_eq!(
            check_refs(&msg("123456789", "2"), 8),
            Err("join_ref too long")
        );
        assert_eq!(check_refs(&msg("1", "123456789"), 8), Err("ref too long"));
    }

    #[test]
    fn socket_budget_holds_a_message_and_joins() {
        let l = Limits::defaults(64 << 10);
        assert_eq!(l.join_bytes(64 << 10), SOCKET_JOIN_BYTES - MESSAGE_SLACK);
        let args = LimitArgs {
            max_socket_bytes: Some(1000),
            ..Default::default()
        };
        let err = args.resolve(64 << 10).unwrap_err();
        assert!(err.to_string().contains("max_socket_bytes"), "{err}");
    }
}
