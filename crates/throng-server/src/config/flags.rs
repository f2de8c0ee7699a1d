//! `throng serve`'s settings (`ServeArgs`): the top-level keys of the
//! config file, each also a flag and a `THRONG_*` variable, defined once
//! with [`settings!`] (see `setting.rs`); kept apart from resolving them
//! because the list alone is long.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use super::auth::AuthArgs;
use crate::auth::origin::CheckOriginToml;
use crate::auth::CheckOrigin;
use crate::limits::LimitArgs;
use crate::presence::{PresenceRule, RuleFile};
use crate::setting::{settings, whole};

/// `--bind`: an IP address, or a host name resolved to its first address
/// (as `throng bench --target localhost:4000` does).
pub fn parse_bind(s: &str) -> Result<IpAddr, String> {
    if let Ok(ip) = s.parse() {
        return Ok(ip);
    }
    std::net::ToSocketAddrs::to_socket_addrs(&(s, 0))
        .ok()
        .and_then(|mut addrs| addrs.next())
        .map(|a| a.ip())
        .ok_or_else(|| {
            format!("{s:?} is neither an IP address nor a host name that resolves (try 0.0.0.0 or 127.0.0.1)")
        })
}

settings! {
    /// `throng serve`'s settings: the config file's top-level keys, each
    /// also a flag and a `THRONG_*` variable; the groups below are its
    /// tables (`[auth]`, `[hooks]`) and the limits. Every field is optional
    /// so that a config file can fill what the command line leaves out.
    pub struct ServeArgs {
        /// TCP port to listen on (0 picks a free one); a port another process holds is refused unless --reuse-port
        #[arg(long, help_heading = "Listening", env = "THRONG_PORT")]
        pub port: Option<u16> = 4000,
        /// Address to bind: an IP address or a host name such as localhost
        #[arg(long, help_heading = "Listening", value_name = "ADDR", env = "THRONG_BIND", value_parser = parse_bind)]
        #[serde(deserialize_with = "de_bind")]
        pub bind: Option<IpAddr> = IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        /// A TOML file with any of these settings: keys as the flags without -- and with underscores (idle_timeout = 0), except the --auth-* flags, which are keys of an [auth] table (--auth-jwt-secret is jwt_secret under [auth]); flags win over the file
        #[arg(long, help_heading = "Listening", value_name = "FILE", env = "THRONG_CONFIG")]
        #[serde(skip)]
        pub config: Option<PathBuf>,
        /// Event-loop shards; connections and subscribers are sharded across them [default: number of cores]
        #[arg(long, help_heading = "Listening", value_parser = whole::<usize>, value_name = "N", env = "THRONG_SHARDS")]
        pub shards: Option<usize>,
        /// Close a WebSocket that sent nothing (no heartbeat) for SECS seconds; 0 = never
        #[arg(long, help_heading = "Connections and messages", value_parser = whole::<u64>, value_name = "SECS", env = "THRONG_IDLE_TIMEOUT")]
        pub idle_timeout: Option<u64> = 60,
        /// Largest WebSocket message accepted; larger ones are closed with 1009. Kept far below --max-outbound-bytes, so one message can never make a subscriber a slow reader
        #[arg(long, help_heading = "Connections and messages", value_parser = whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_MESSAGE_BYTES")]
        pub max_message_bytes: Option<usize> = 65536,
        /// Outbound bytes a slow reader may have queued behind the message being written before it is disconnected
        #[arg(long, help_heading = "Connections and messages", value_parser = whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_OUTBOUND_BYTES")]
        pub max_outbound_bytes: Option<usize> = 1048576,
        /// Channels one socket may join at once; a join past it is refused with {"reason":"too many channels joined"}, as Phoenix 1.8
        #[arg(long, help_heading = "Connections and messages", value_parser = whole::<usize>, value_name = "N", env = "THRONG_MAX_CHANNELS_PER_SOCKET")]
        pub max_channels_per_socket: Option<usize> = 100,
        /// Long-poll transport (/socket/longpoll): seconds a poll waits for messages before it is answered 204 (Phoenix's window_ms); a session ends after 1.5x this without a poll; 0 turns long-poll off
        #[arg(long, help_heading = "Connections and messages", value_parser = whole::<u64>, value_name = "SECS", env = "THRONG_LONGPOLL_WINDOW")]
        pub longpoll_window: Option<u64> = 10,
        /// Messages one long-poll POST may carry (phoenix.js sends up to 100); a larger batch is refused with {"status":413}
        #[arg(long, help_heading = "Connections and messages", value_parser = whole::<usize>, value_name = "N", env = "THRONG_MAX_LONGPOLL_BATCH")]
        pub max_longpoll_batch: Option<usize> = 100,
        /// Turn permessage-deflate (RFC 7692 WebSocket compression) off; on by default, it compresses messages of 256 bytes or more for clients that offer it (browsers, Node's ws), each broadcast once for all its subscribers
        #[arg(long, help_heading = "Connections and messages", env = "THRONG_NO_DEFLATE")]
        #[serde(rename(deserialize = "deflate"), deserialize_with = "de_negated")]
        pub no_deflate: bool,
        /// Test-only: serve a WebSocket echo at /echo (for the Autobahn TestSuite) and mount the channel echo:*, whose join replies with the socket's params, authToken and user
        #[arg(long, help_heading = "Testing", env = "THRONG_ECHO")]
        pub echo: bool,
        /// Log every HTTP request (off by default: logging halves throughput)
        #[arg(long, help_heading = "Listening", env = "THRONG_LOG_REQUESTS")]
        pub log_requests: bool,
        /// Join a cluster through this Redis (redis://HOST:PORT), or a Redis Cluster (redis+cluster://HOST:PORT,HOST:PORT: sharded pub/sub): broadcasts reach every node subscribed to the topic [default: none, a single node]
        #[arg(long, help_heading = "Cluster (Redis)", value_name = "URL", env = "THRONG_REDIS", hide_env_values = true)]
        pub redis: Option<String>,
        /// PEM file of the certificate authorities to trust for a rediss:// URL (a private CA) [default: the system's roots]
        #[arg(long, help_heading = "Cluster (Redis)", value_name = "FILE", env = "THRONG_REDIS_CA_FILE")]
        pub redis_ca_file: Option<PathBuf>,
        /// Milliseconds Redis may take to answer (a connection attempt, a command, the PING every connection to Redis gets each second); past it the connection counts as lost and is made again, so a stalled or half-open connection (the network path gone without a FIN) is noticed within this plus 1 s
        #[arg(long, help_heading = "Cluster (Redis)", value_parser = whole::<u64>, value_name = "MS", env = "THRONG_REDIS_TIMEOUT_MS")]
        pub redis_timeout_ms: Option<u64> = 5000,
        /// Share the port with other processes that bind it with SO_REUSEPORT (such as a second throng serve started before this one drains); without it, a port another process holds is refused at start
        #[arg(long, help_heading = "Listening", env = "THRONG_REUSE_PORT")]
        pub reuse_port: bool,
        /// Worker processes sharing the port (SO_REUSEPORT), each a node with its own open-files limit; more than 1 needs --redis
        #[arg(long, help_heading = "Listening", value_parser = whole::<usize>, value_name = "N", env = "THRONG_WORKERS")]
        pub workers: Option<usize> = 1,
        /// Presence for topics matching PATTERN (an exact topic or a prefix
        /// ending in *): each join gets presence_state and is tracked under KEY:
        /// user_id, param:NAME (a join param) or connect:NAME (a socket param);
        /// /count sends {"count": N} (presence_count) instead. Repeatable, or
        /// space-separated in the env var [default: none]
        #[arg(help_heading = "Presence", long, value_name = "PATTERN=KEY[/count]", env = "THRONG_PRESENCE", value_delimiter = ' ')]
        #[serde(deserialize_with = "de_presence")]
        pub presence: Vec<String>,
        /// History for topics matching PATTERN (an exact topic, or with * for any run of characters): the last SIZE messages of each (1..=10000), kept SECS seconds after its last one (600 when not given), so a client that rejoins with `since` gets what it missed, as a [[topics]] rule's history_size gives it (a rule that matches a topic first and has history_size wins). History only: who may join stays the topic rules' to say. Repeatable, or comma-separated in the env var; e.g. --history 'rooms:*=100' [default: none]
        #[arg(long, help_heading = "History", value_name = "PATTERN=SIZE[/SECS]", env = "THRONG_HISTORY", value_delimiter = ',')]
        pub history: Vec<String>,
        /// Milliseconds between presence diffs: every change of an interval goes
        /// out as one presence_diff per topic
        #[arg(long, help_heading = "Presence", value_parser = whole::<u64>, value_name = "MS", env = "THRONG_PRESENCE_INTERVAL")]
        pub presence_interval: Option<u64> = 1000,
        /// Count mode's bound: presence_count broadcasts per second per topic;
        /// a topic of N users gets its changed count at most once per
        /// max(interval, N / rate) seconds; 0: every interval
        #[arg(long, help_heading = "Presence", value_parser = whole::<u64>, value_name = "N", env = "THRONG_PRESENCE_COUNT_RATE")]
        pub presence_count_rate: Option<u64> = 20000,
        /// Seconds after which a node that stopped (crashed, lost Redis) has
        /// its presences leave everywhere; with --redis
        #[arg(long, help_heading = "Presence", value_parser = whole::<u64>, value_name = "SECS", env = "THRONG_PRESENCE_TIMEOUT")]
        pub presence_timeout: Option<u64> = 30,
        /// Largest presence key and meta together; a join whose key is longer is
        /// refused with {"reason":"presence key too long"}
        #[arg(long, help_heading = "Presence", value_parser = whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_PRESENCE_BYTES")]
        pub max_presence_bytes: Option<usize> = 1024,
        /// Set by the supervisor on the worker processes it starts.
        #[arg(long, hide = true)]
        #[serde(skip_deserializing)]
        pub worker_index: Option<usize>,
        /// Origins allowed to open sockets: true (the Origin's host must be the request's Host), false, or a comma-separated list (https://a.com,//*.b.com); requests without an Origin are always allowed [default: true]
        #[arg(long, help_heading = "Authentication", value_name = "POLICY", env = "THRONG_CHECK_ORIGIN")]
        #[serde(deserialize_with = "de_check_origin")]
        pub check_origin: Option<String>,
        /// Pushes a second a socket may sustain; excess pushes get {"reason":"rate limited"}; 0 = no limit
        #[arg(long, help_heading = "Push rate", value_name = "N", env = "THRONG_PUSH_RATE")]
        pub push_rate: Option<f64> = 20.0,
        /// Pushes a socket may make at once before the rate applies
        #[arg(long, help_heading = "Push rate", value_parser = whole::<u32>, value_name = "N", env = "THRONG_PUSH_BURST")]
        pub push_burst: Option<u32> = 50,
        /// Rate-limited pushes (not paid back by waiting) after which the socket is closed with 1008; 0 = never
        #[arg(long, help_heading = "Push rate", value_parser = whole::<u32>, value_name = "N", env = "THRONG_PUSH_STRIKES")]
        pub push_strikes: Option<u32> = 20,
        /// The server API listener (broadcast, disconnect, topics, stats, /metrics); "none" = no API; with --workers, worker i listens on PORT+i [default: 127.0.0.1:4001, or 127.0.0.1:0 with --port 0]
        #[arg(long, help_heading = "Server API", value_name = "ADDR", env = "THRONG_API_BIND")]
        pub api_bind: Option<String>,
        /// The key API requests must send in X-API-Key (GET /metrics needs none), 16 bytes or more [default: none: no key needed]
        #[arg(help_heading = "Server API", long, value_name = "KEY", env = "THRONG_API_KEY", hide_env_values = true)]
        pub api_key: Option<String>,
        /// Also serve /metrics on the public port (it is always on the API listener)
        #[arg(long, help_heading = "Server API", env = "THRONG_PUBLIC_METRICS")]
        pub public_metrics: bool,
        /// Serve TLS (https://, wss://) on the public port with this PEM certificate chain (the server's certificate first); with --tls-key. Reloaded on SIGHUP and when the file changes [default: none: plain HTTP]
        #[arg(long, help_heading = "TLS", value_name = "FILE", env = "THRONG_TLS_CERT")]
        pub tls_cert: Option<PathBuf>,
        /// The PEM private key of --tls-cert (PKCS#8, SEC1 EC or PKCS#1 RSA)
        #[arg(long, help_heading = "TLS", value_name = "FILE", env = "THRONG_TLS_KEY")]
        pub tls_key: Option<PathBuf>,
        /// Serve the server API over TLS (https://) with this PEM certificate chain; with --api-tls-key [default: none: plain HTTP]
        #[arg(long, help_heading = "TLS", value_name = "FILE", env = "THRONG_API_TLS_CERT")]
        pub api_tls_cert: Option<PathBuf>,
        /// The PEM private key of --api-tls-cert
        #[arg(long, help_heading = "TLS", value_name = "FILE", env = "THRONG_API_TLS_KEY")]
        pub api_tls_key: Option<PathBuf>,
        /// Topic rules as JSON (set by the supervisor for its workers; use [[topics]] in the config file)
        #[arg(long, hide = true, env = "THRONG_TOPIC_RULES_JSON", hide_env_values = true)]
        #[serde(skip_deserializing)]
        pub topic_rules_json: Option<String>,
    }
    groups {
        /// Connect authentication: the `[auth]` table (`auth.rs`).
        #[command(flatten, next_help_heading = "Authentication")]
        pub auth: AuthArgs,
        /// The app backend's hooks: the `[hooks]` table (`crate::hooks`).
        #[command(flatten, next_help_heading = "App backend hooks")]
        pub hooks: super::HookArgs,
        /// The Pusher Channels protocol: the `[pusher]` table (`pusher.rs`).
        #[command(flatten, next_help_heading = "Pusher Channels")]
        pub pusher: super::pusher::PusherArgs,
        /// The other bounds (`limits.rs`): top-level keys, as these.
        #[command(flatten, next_help_heading = "Limits")]
        pub limits: LimitArgs,
    }
}

/// `bind` in the file: an IP address or a host name (`localhost`).
fn de_bind<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    let s = String::deserialize(d)?;
    parse_bind(&s).map(Some).map_err(D::Error::custom)
}

/// A `--no-*` switch in the file, keyed by what it turns off:
/// `deflate = false` is `--no-deflate`.
fn de_negated<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    bool::deserialize(d).map(|on| !on)
}

/// `check_origin` in the file: true, false or a list of origins, as the
/// flag's text (which `resolve` parses).
fn de_check_origin<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let t = CheckOriginToml::deserialize(d)?;
    CheckOrigin::try_from(t)
        .map(|c| Some(c.to_string()))
        .map_err(D::Error::custom)
}

/// `[[presence]]` tables in the file, as the flag's `PATTERN=KEY[/count]`.
fn de_presence<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Vec::<RuleFile>::deserialize(d)?
        .into_iter()
        .map(|r| PresenceRule::from_file(r).map(|r| r.spec()))
        .collect::<Result<_, _>>()
        .map_err(D::Error::custom)
}
