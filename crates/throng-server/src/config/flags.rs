//! `throng serve`'s settings (`ServeArgs`): the top-level keys of the
//! config file, each also a flag and a `THRONG_*` variable, defined once
//! with [`settings!`] (see `setting.rs`), and each one's check (its range,
//! its syntax: `checked_*`), which [`ServeArgs::resolve`] calls in order;
//! the merge itself stays in `mod.rs`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use super::auth::AuthArgs;
use crate::auth::origin::CheckOriginToml;
use crate::auth::CheckOrigin;
use crate::limits::LimitArgs;
use crate::presence::{PresenceRule, RuleFile};
use crate::rules::{HistoryPattern, TopicRule};
use crate::setting::{settings, whole};
use crate::tls::TlsFiles;
use crate::Error;

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

impl ServeArgs {
    /// `workers`, within 1..=[`MAX_WORKERS`](super::MAX_WORKERS).
    pub(super) fn checked_workers(&self) -> Result<usize, Error> {
        let workers = self.workers();
        if workers == 0 || workers > super::MAX_WORKERS {
            return Err(Error::Config(format!(
                "workers must be 1..={}, got {workers}",
                super::MAX_WORKERS
            )));
        }
        Ok(workers)
    }

    /// `redis`, a Redis URL if given (none when empty); more than one
    /// worker needs it.
    pub(super) fn checked_redis(&self, workers: usize) -> Result<Option<String>, Error> {
        let redis = self.redis.clone().filter(|url| !url.is_empty());
        if let Some(url) = &redis {
            let schemes = [
                "redis://",
                "rediss://",
                "redis+unix://",
                "unix://",
                "redis+cluster://",
                "rediss+cluster://",
            ];
            if !schemes.iter().any(|s| url.starts_with(s)) {
                // Its password, if it has one, is not shown.
                let url = match url.contains("://") {
                    true => throng_pubsub::link::redact(url),
                    false => {
                        throng_pubsub::link::redact(&format!("redis://{url}"))[8..].to_string()
                    }
                };
                return Err(Error::Config(format!(
                    "redis {url:?} is not a Redis URL: write redis://{url} (rediss:// for TLS, \
                     redis://USER:PASSWORD@HOST:PORT with a password, \
                     redis+cluster://HOST:PORT,HOST:PORT for a Redis Cluster)"
                )));
            }
        }
        if workers > 1 && redis.is_none() {
            return Err(Error::Config(format!(
                "--workers {workers} needs --redis URL: each worker is a separate node, \
                 and only a backplane carries broadcasts between them"
            )));
        }
        Ok(redis)
    }

    /// `shards`, within 1..=MAX_SHARDS; by default each worker's share of
    /// the cores.
    pub(super) fn checked_shards(&self, workers: usize) -> Result<usize, Error> {
        // The cores are shared by the workers: by default each runs its share.
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let shards = self.shards.unwrap_or((cores / workers).max(1));
        if shards == 0 || shards > throng_pubsub::MAX_SHARDS {
            return Err(Error::Config(format!(
                "shards must be 1..={}, got {shards}",
                throng_pubsub::MAX_SHARDS
            )));
        }
        Ok(shards)
    }

    /// `longpoll_window`, within 0..=3600 seconds.
    pub(super) fn checked_longpoll_window(&self) -> Result<u64, Error> {
        let window = self.longpoll_window();
        if window > 3600 {
            return Err(Error::Config(format!(
                "longpoll_window must be 0..=3600 seconds, got {window}"
            )));
        }
        Ok(window)
    }

    /// `max_message_bytes`, at least 125.
    pub(super) fn checked_max_message_bytes(&self) -> Result<usize, Error> {
        let max_message_bytes = self.max_message_bytes();
        if max_message_bytes < 125 {
            return Err(Error::Config(
                "max_message_bytes must be at least 125".into(),
            ));
        }
        Ok(max_message_bytes)
    }

    /// `check_origin` parsed; the default policy when not given.
    pub(super) fn checked_check_origin(&self) -> Result<CheckOrigin, Error> {
        Ok(match &self.check_origin {
            Some(policy) => policy.parse().map_err(Error::Config)?,
            None => CheckOrigin::default(),
        })
    }

    /// `topic_rules_json` parsed, each rule's history checked.
    pub(super) fn checked_topic_rules(&self) -> Result<Vec<TopicRule>, Error> {
        let topics: Vec<TopicRule> = match &self.topic_rules_json {
            Some(json) => serde_json::from_str(json)
                .map_err(|e| Error::Config(format!("topic rules: {e}")))?,
            None => Vec::new(),
        };
        for rule in &topics {
            rule.check_history().map_err(Error::Config)?;
        }
        Ok(topics)
    }

    /// `history`'s patterns parsed.
    pub(super) fn checked_history(&self) -> Result<Vec<HistoryPattern>, Error> {
        self.history
            .iter()
            .map(|spec| HistoryPattern::parse(spec))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::Config)
    }

    /// `push_rate`, within 0..=1000 a second.
    pub(super) fn checked_push_rate(&self) -> Result<f64, Error> {
        let push_rate = self.push_rate();
        if !(0.0..=1000.0).contains(&push_rate) {
            return Err(Error::Config(format!(
                "push_rate must be 0 (no limit) to 1000 a second, got {push_rate}"
            )));
        }
        Ok(push_rate)
    }

    /// `api_bind` as an address (a host name resolved), none for "none";
    /// by default localhost's DEFAULT_API_PORT, or a free port with `port` 0.
    pub(super) fn checked_api_bind(&self, port: u16) -> Result<Option<SocketAddr>, Error> {
        Ok(match self.api_bind.as_deref() {
            // `--port 0` (tests, the bench) picks a free API port too.
            None if port == 0 => Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)),
            None => Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                super::DEFAULT_API_PORT,
            )),
            Some("none" | "off" | "") => None,
            // IP:PORT, or HOST:PORT resolved (localhost:4001).
            Some(a) => Some(
                a.parse()
                    .ok()
                    .or_else(|| {
                        std::net::ToSocketAddrs::to_socket_addrs(a)
                            .ok()
                            .and_then(|mut addrs| addrs.next())
                    })
                    .ok_or_else(|| {
                        Error::Config(format!(
                            "api_bind {a:?}: want IP:PORT or HOST:PORT (127.0.0.1:4001), or none"
                        ))
                    })?,
            ),
        })
    }

    /// `presence`'s rules parsed.
    pub(super) fn checked_presence(&self) -> Result<Vec<PresenceRule>, Error> {
        self.presence
            .iter()
            .map(|spec| PresenceRule::parse(spec))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::Config)
    }

    /// `presence_interval`, within 10..=60000 ms.
    pub(super) fn checked_presence_interval(&self) -> Result<u64, Error> {
        let interval = self.presence_interval();
        if !(10..=60_000).contains(&interval) {
            return Err(Error::Config(format!(
                "presence_interval must be 10..=60000 ms, got {interval}"
            )));
        }
        Ok(interval)
    }

    /// `presence_timeout`, at least 1 s.
    pub(super) fn checked_presence_timeout(&self) -> Result<u64, Error> {
        let timeout = self.presence_timeout();
        if timeout == 0 {
            return Err(Error::Config(
                "presence_timeout must be at least 1 s".into(),
            ));
        }
        Ok(timeout)
    }

    /// `redis_timeout_ms`: 100 ms to 5 minutes.
    pub(super) fn checked_redis_timeout(&self) -> Result<u64, Error> {
        let redis_timeout = self.redis_timeout_ms();
        if !(100..=300_000).contains(&redis_timeout) {
            return Err(Error::Config(format!(
                "redis_timeout_ms must be 100..=300000 ms, got {redis_timeout}"
            )));
        }
        Ok(redis_timeout)
    }

    /// `tls_cert`/`tls_key` and `api_tls_cert`/`api_tls_key`, each pair
    /// given whole or not at all.
    pub(super) fn checked_tls(&self) -> Result<(Option<TlsFiles>, Option<TlsFiles>), Error> {
        let tls = TlsFiles::pair(self.tls_cert.clone(), self.tls_key.clone(), "tls")
            .map_err(Error::Config)?;
        let api_tls = TlsFiles::pair(
            self.api_tls_cert.clone(),
            self.api_tls_key.clone(),
            "api_tls",
        )
        .map_err(Error::Config)?;
        Ok((tls, api_tls))
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
