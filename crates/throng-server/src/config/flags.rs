//! `throng serve`'s flags (`ServeArgs`): one clap argument per setting, each
//! with its environment variable; kept apart from resolving them because the
//! flag list alone is long.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::auth::Mode;
use crate::limits::LimitArgs;

/// Parses a whole number of 0 or more, saying so for a negative one.
pub fn whole<T: std::str::FromStr>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    s.trim().parse().map_err(|e| {
        if s.trim_start().starts_with('-') {
            "must be 0 or more".to_string()
        } else {
            format!("{e}: want a whole number, such as 10")
        }
    })
}

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

/// `throng serve` flags. Every field is optional so that a config file can
/// fill what the command line leaves out.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// TCP port to listen on (0 picks a free one); a port another process holds is refused unless --reuse-port [default: 4000]
    #[arg(long, help_heading = "Listening", env = "THRONG_PORT")]
    pub port: Option<u16>,
    /// Address to bind: an IP address or a host name such as localhost [default: 0.0.0.0]
    #[arg(long, help_heading = "Listening", value_name = "ADDR", env = "THRONG_BIND", value_parser = parse_bind)]
    pub bind: Option<IpAddr>,
    /// A TOML file with any of these settings: keys as the flags without -- and with underscores (idle_timeout = 0), except the --auth-* flags, which are keys of an [auth] table (--auth-jwt-secret is jwt_secret under [auth]); flags win over the file
    #[arg(
        long,
        help_heading = "Listening",
        value_name = "FILE",
        env = "THRONG_CONFIG"
    )]
    pub config: Option<PathBuf>,
    /// Event-loop shards; connections and subscribers are sharded across them [default: number of cores]
    #[arg(long, help_heading = "Listening", value_parser = whole::<usize>, value_name = "N", env = "THRONG_SHARDS")]
    pub shards: Option<usize>,
    /// Close a WebSocket that sent nothing (no heartbeat) for SECS seconds; 0 = never [default: 60]
    #[arg(long, help_heading = "Connections and messages", value_parser = whole::<u64>, value_name = "SECS", env = "THRONG_IDLE_TIMEOUT")]
    pub idle_timeout: Option<u64>,
    /// Largest WebSocket message accepted; larger ones are closed with 1009. Kept far below --max-outbound-bytes, so one message can never make a subscriber a slow reader [default: 65536]
    #[arg(long, help_heading = "Connections and messages", value_parser = whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: Option<usize>,
    /// Outbound bytes a slow reader may have queued behind the message being written before it is disconnected [default: 1048576]
    #[arg(long, help_heading = "Connections and messages", value_parser = whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_OUTBOUND_BYTES")]
    pub max_outbound_bytes: Option<usize>,
    /// Channels one socket may join at once; a join past it is refused with {"reason":"too many channels joined"}, as Phoenix 1.8 [default: 100]
    #[arg(long, help_heading = "Connections and messages", value_parser = whole::<usize>, value_name = "N", env = "THRONG_MAX_CHANNELS_PER_SOCKET")]
    pub max_channels_per_socket: Option<usize>,
    /// The app backend's hooks ([hooks] in the file; crate::hooks).
    #[command(flatten, next_help_heading = "App backend hooks")]
    pub hooks: crate::hooks::HookArgs,
    /// The other bounds (limits.rs): handshake deadline, connection caps, socket memory, drain, queues.
    #[command(flatten, next_help_heading = "Limits")]
    pub limits: LimitArgs,
    /// Long-poll transport (/socket/longpoll): seconds a poll waits for messages before it is answered 204 (Phoenix's window_ms); a session ends after 1.5x this without a poll; 0 turns long-poll off [default: 10]
    #[arg(long, help_heading = "Connections and messages", value_parser = whole::<u64>, value_name = "SECS", env = "THRONG_LONGPOLL_WINDOW")]
    pub longpoll_window: Option<u64>,
    /// Messages one long-poll POST may carry (phoenix.js sends up to 100); a larger batch is refused with {"status":413} [default: 100]
    #[arg(long, help_heading = "Connections and messages", value_parser = whole::<usize>, value_name = "N", env = "THRONG_MAX_LONGPOLL_BATCH")]
    pub max_longpoll_batch: Option<usize>,
    /// Turn permessage-deflate (RFC 7692 WebSocket compression) off; on by default, it compresses messages of 256 bytes or more for clients that offer it (browsers, Node's ws), each broadcast once for all its subscribers
    #[arg(
        long,
        help_heading = "Connections and messages",
        env = "THRONG_NO_DEFLATE"
    )]
    pub no_deflate: bool,
    /// Test-only: serve a WebSocket echo at /echo (for the Autobahn TestSuite) and mount the channel echo:*, whose join replies with the socket's params, authToken and user
    #[arg(long, help_heading = "Testing", env = "THRONG_ECHO")]
    pub echo: bool,
    /// Log every HTTP request (off by default: logging halves throughput)
    #[arg(long, help_heading = "Listening", env = "THRONG_LOG_REQUESTS")]
    pub log_requests: bool,
    /// Join a cluster through this Redis (redis://HOST:PORT), or a Redis Cluster (redis+cluster://HOST:PORT,HOST:PORT: sharded pub/sub): broadcasts reach every node subscribed to the topic [default: none, a single node]
    #[arg(
        long,
        help_heading = "Cluster (Redis)",
        value_name = "URL",
        env = "THRONG_REDIS"
    )]
    pub redis: Option<String>,
    /// PEM file of the certificate authorities to trust for a rediss:// URL (a private CA) [default: the system's roots]
    #[arg(
        long,
        help_heading = "Cluster (Redis)",
        value_name = "FILE",
        env = "THRONG_REDIS_CA_FILE"
    )]
    pub redis_ca_file: Option<PathBuf>,
    /// Share the port with other processes that bind it with SO_REUSEPORT (such as a second throng serve started before this one drains); without it, a port another process holds is refused at start
    #[arg(long, help_heading = "Listening", env = "THRONG_REUSE_PORT")]
    pub reuse_port: bool,
    /// Worker processes sharing the port (SO_REUSEPORT), each a node with its own open-files limit; more than 1 needs --redis [default: 1]
    #[arg(long, help_heading = "Listening", value_parser = whole::<usize>, value_name = "N", env = "THRONG_WORKERS")]
    pub workers: Option<usize>,
    /// Presence for topics matching PATTERN (an exact topic or a prefix
    /// ending in *): each join gets presence_state and is tracked under KEY:
    /// user_id, param:NAME (a join param) or connect:NAME (a socket param);
    /// /count sends {"count": N} (presence_count) instead. Repeatable, or
    /// space-separated in the env var [default: none]
    #[arg(
        help_heading = "Presence",
        long,
        value_name = "PATTERN=KEY[/count]",
        env = "THRONG_PRESENCE",
        value_delimiter = ' '
    )]
    pub presence: Vec<String>,
    /// Milliseconds between presence diffs: every change of an interval goes
    /// out as one presence_diff per topic [default: 1000]
    #[arg(long, help_heading = "Presence", value_parser = whole::<u64>, value_name = "MS", env = "THRONG_PRESENCE_INTERVAL")]
    pub presence_interval: Option<u64>,
    /// Count mode's bound: presence_count broadcasts per second per topic;
    /// a topic of N users gets its changed count at most once per
    /// max(interval, N / rate) seconds; 0: every interval [default: 20000]
    #[arg(long, help_heading = "Presence", value_parser = whole::<u64>, value_name = "N", env = "THRONG_PRESENCE_COUNT_RATE")]
    pub presence_count_rate: Option<u64>,
    /// Seconds after which a node that stopped (crashed, lost Redis) has
    /// its presences leave everywhere; with --redis [default: 30]
    #[arg(long, help_heading = "Presence", value_parser = whole::<u64>, value_name = "SECS", env = "THRONG_PRESENCE_TIMEOUT")]
    pub presence_timeout: Option<u64>,
    /// Largest presence key and meta together; a join whose key is longer is
    /// refused with {"reason":"presence key too long"} [default: 1024]
    #[arg(long, help_heading = "Presence", value_parser = whole::<usize>, value_name = "BYTES", env = "THRONG_MAX_PRESENCE_BYTES")]
    pub max_presence_bytes: Option<usize>,
    /// Set by the supervisor on the worker processes it starts.
    #[arg(long, hide = true)]
    pub worker_index: Option<usize>,
    /// Connect authentication: none, phoenix_token or jwt ([auth] mode) [default: none]
    #[arg(
        long,
        help_heading = "Authentication",
        value_name = "MODE",
        env = "THRONG_AUTH"
    )]
    pub auth: Option<Mode>,
    /// Phoenix.Token: the Phoenix endpoint's secret_key_base
    #[arg(
        help_heading = "Authentication",
        long,
        value_name = "KEY",
        env = "THRONG_AUTH_SECRET_KEY_BASE",
        hide_env_values = true
    )]
    pub auth_secret_key_base: Option<String>,
    /// Phoenix.Token: the salt the app signs with [default: "user socket"]
    #[arg(
        long,
        help_heading = "Authentication",
        value_name = "SALT",
        env = "THRONG_AUTH_SALT"
    )]
    pub auth_salt: Option<String>,
    /// Phoenix.Token: refuse tokens signed longer ago than SECS (whole or fractional) [default: the max age in the token]
    #[arg(
        long,
        help_heading = "Authentication",
        value_name = "SECS",
        env = "THRONG_AUTH_MAX_AGE"
    )]
    pub auth_max_age: Option<crate::auth::MaxAge>,
    /// JWT: the HS256 secret
    #[arg(
        help_heading = "Authentication",
        long,
        value_name = "SECRET",
        env = "THRONG_AUTH_JWT_SECRET",
        hide_env_values = true
    )]
    pub auth_jwt_secret: Option<String>,
    /// JWT: a PEM file with the RS256 (RSA) or ES256 (EC P-256) public key
    #[arg(
        long,
        help_heading = "Authentication",
        value_name = "FILE",
        env = "THRONG_AUTH_JWT_PUBLIC_KEY_FILE"
    )]
    pub auth_jwt_public_key_file: Option<PathBuf>,
    /// JWT: the PEM public key itself (instead of a file)
    #[arg(
        help_heading = "Authentication",
        long,
        value_name = "PEM",
        env = "THRONG_AUTH_JWT_PUBLIC_KEY",
        hide = true
    )]
    pub auth_jwt_public_key: Option<String>,
    /// JWT: HS256, RS256 or ES256 [default: from the key]
    #[arg(
        long,
        help_heading = "Authentication",
        value_name = "ALG",
        env = "THRONG_AUTH_JWT_ALGORITHM"
    )]
    pub auth_jwt_algorithm: Option<String>,
    /// JWT: require the aud claim to name AUD (a string, or a list holding it) [default: aud not checked]
    #[arg(
        long,
        help_heading = "Authentication",
        value_name = "AUD",
        env = "THRONG_AUTH_JWT_AUDIENCE"
    )]
    pub auth_jwt_audience: Option<String>,
    /// JWT: require the iss claim to be ISS [default: iss not checked]
    #[arg(
        long,
        help_heading = "Authentication",
        value_name = "ISS",
        env = "THRONG_AUTH_JWT_ISSUER"
    )]
    pub auth_jwt_issuer: Option<String>,
    /// Origins allowed to open sockets: true (the Origin's host must be the request's Host), false, or a comma-separated list (https://a.com,//*.b.com); requests without an Origin are always allowed [default: true]
    #[arg(
        long,
        help_heading = "Authentication",
        value_name = "POLICY",
        env = "THRONG_CHECK_ORIGIN"
    )]
    pub check_origin: Option<String>,
    /// Pushes a second a socket may sustain; excess pushes get {"reason":"rate limited"}; 0 = no limit [default: 20]
    #[arg(
        long,
        help_heading = "Push rate",
        value_name = "N",
        env = "THRONG_PUSH_RATE"
    )]
    pub push_rate: Option<f64>,
    /// Pushes a socket may make at once before the rate applies [default: 50]
    #[arg(long, help_heading = "Push rate", value_parser = whole::<u32>, value_name = "N", env = "THRONG_PUSH_BURST")]
    pub push_burst: Option<u32>,
    /// Rate-limited pushes (not paid back by waiting) after which the socket is closed with 1008; 0 = never [default: 20]
    #[arg(long, help_heading = "Push rate", value_parser = whole::<u32>, value_name = "N", env = "THRONG_PUSH_STRIKES")]
    pub push_strikes: Option<u32>,
    /// The server API listener (broadcast, disconnect, topics, stats, /metrics); "none" = no API; with --workers, worker i listens on PORT+i [default: 127.0.0.1:4001, or 127.0.0.1:0 with --port 0]
    #[arg(
        long,
        help_heading = "Server API",
        value_name = "ADDR",
        env = "THRONG_API_BIND"
    )]
    pub api_bind: Option<String>,
    /// The key API requests must send in X-API-Key (GET /metrics needs none) [default: none: no key needed]
    #[arg(
        help_heading = "Server API",
        long,
        value_name = "KEY",
        env = "THRONG_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
    /// Also serve /metrics on the public port (it is always on the API listener)
    #[arg(long, help_heading = "Server API", env = "THRONG_PUBLIC_METRICS")]
    pub public_metrics: bool,
    /// Serve TLS (https://, wss://) on the public port with this PEM certificate chain (the server's certificate first); with --tls-key. Reloaded on SIGHUP and when the file changes [default: none: plain HTTP]
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "FILE",
        env = "THRONG_TLS_CERT"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, SEC1 EC or PKCS#1 RSA)
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "FILE",
        env = "THRONG_TLS_KEY"
    )]
    pub tls_key: Option<PathBuf>,
    /// Serve the server API over TLS (https://) with this PEM certificate chain; with --api-tls-key [default: none: plain HTTP]
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "FILE",
        env = "THRONG_API_TLS_CERT"
    )]
    pub api_tls_cert: Option<PathBuf>,
    /// The PEM private key of --api-tls-cert
    #[arg(
        long,
        help_heading = "TLS",
        value_name = "FILE",
        env = "THRONG_API_TLS_KEY"
    )]
    pub api_tls_key: Option<PathBuf>,
    /// Topic rules as JSON (set by the supervisor for its workers; use [[topics]] in the config file)
    #[arg(long, hide = true, env = "THRONG_TOPIC_RULES_JSON")]
    pub topic_rules_json: Option<String>,
}
