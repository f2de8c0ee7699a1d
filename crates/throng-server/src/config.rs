//! Settings: command-line flags, each with an environment variable, over an
//! optional TOML file, over defaults. `throng serve --help` documents each.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::auth::{self, AuthConfig, CheckOrigin, Mode, TopicRule};
use crate::limits::{LimitArgs, Limits};
use crate::presence::{PresenceRule, RuleFile};
use crate::Error;

/// `throng serve` flags. Every field is optional so that a config file can
/// fill what the command line leaves out.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// TCP port to listen on (0 picks a free one) [default: 4000]
    #[arg(long, env = "THRONG_PORT")]
    pub port: Option<u16>,
    /// Address to bind [default: 0.0.0.0]
    #[arg(long, env = "THRONG_BIND")]
    pub bind: Option<IpAddr>,
    /// A TOML file with any of these settings (keys as the flags, with underscores)
    #[arg(long, env = "THRONG_CONFIG")]
    pub config: Option<PathBuf>,
    /// Event-loop shards; connections and subscribers are sharded across them [default: number of cores]
    #[arg(long, env = "THRONG_SHARDS")]
    pub shards: Option<usize>,
    /// Close a WebSocket that sent nothing (no heartbeat) for SECS seconds; 0 = never [default: 60]
    #[arg(long, value_name = "SECS", env = "THRONG_IDLE_TIMEOUT")]
    pub idle_timeout: Option<u64>,
    /// Largest WebSocket message accepted; larger ones are closed with 1009. Kept far below --max-outbound-bytes, so one message can never make a subscriber a slow reader [default: 65536]
    #[arg(long, value_name = "BYTES", env = "THRONG_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: Option<usize>,
    /// Outbound bytes a slow reader may have queued behind the message being written before it is disconnected [default: 1048576]
    #[arg(long, value_name = "BYTES", env = "THRONG_MAX_OUTBOUND_BYTES")]
    pub max_outbound_bytes: Option<usize>,
    /// Channels one socket may join at once; a join past it is refused with {"reason":"too many channels joined"}, as Phoenix 1.8 [default: 100]
    #[arg(long, value_name = "N", env = "THRONG_MAX_CHANNELS_PER_SOCKET")]
    pub max_channels_per_socket: Option<usize>,
    /// The other bounds (limits.rs): handshake deadline, connection caps, socket memory, drain, queues.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Serve a WebSocket echo endpoint at /echo (for the Autobahn TestSuite)
    /// Long-poll transport (/socket/longpoll): seconds a poll waits for messages before it is answered 204 (Phoenix's window_ms); a session ends after 1.5x this without a poll; 0 turns long-poll off [default: 10]
    #[arg(long, value_name = "SECS", env = "THRONG_LONGPOLL_WINDOW")]
    pub longpoll_window: Option<u64>,
    /// Messages one long-poll POST may carry (phoenix.js sends up to 100); a larger batch is refused with {"status":413} [default: 100]
    #[arg(long, value_name = "N", env = "THRONG_MAX_LONGPOLL_BATCH")]
    pub max_longpoll_batch: Option<usize>,
    /// Test-only: serve a WebSocket echo at /echo (for the Autobahn TestSuite) and mount the channel echo:*, whose join replies with the socket's params, authToken and user
    #[arg(long, env = "THRONG_ECHO")]
    pub echo: bool,
    /// Log every HTTP request (off by default: logging halves throughput)
    #[arg(long, env = "THRONG_LOG_REQUESTS")]
    pub log_requests: bool,
    /// Join a cluster through this Redis (redis://HOST:PORT): broadcasts reach every node subscribed to the topic [default: none, a single node]
    #[arg(long, value_name = "URL", env = "THRONG_REDIS")]
    pub redis: Option<String>,
    /// PEM file of the certificate authorities to trust for a rediss:// URL (a private CA) [default: the system's roots]
    #[arg(long, value_name = "FILE", env = "THRONG_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,
    /// Worker processes sharing the port (SO_REUSEPORT), each a node with its own open-files limit; more than 1 needs --redis [default: 1]
    #[arg(long, value_name = "N", env = "THRONG_WORKERS")]
    pub workers: Option<usize>,
    /// Presence for topics matching PATTERN (an exact topic or a prefix
    /// ending in *): each join gets presence_state and is tracked under KEY:
    /// user_id, param:NAME (a join param) or connect:NAME (a socket param);
    /// /count sends {"count": N} (presence_count) instead. Repeatable, or
    /// space-separated in the env var [default: none]
    #[arg(
        long,
        value_name = "PATTERN=KEY[/count]",
        env = "THRONG_PRESENCE",
        value_delimiter = ' '
    )]
    pub presence: Vec<String>,
    /// Milliseconds between presence diffs: every change of an interval goes
    /// out as one presence_diff per topic [default: 1000]
    #[arg(long, value_name = "MS", env = "THRONG_PRESENCE_INTERVAL")]
    pub presence_interval: Option<u64>,
    /// Seconds after which a node that stopped (crashed, lost Redis) has
    /// its presences leave everywhere; with --redis [default: 30]
    #[arg(long, value_name = "SECS", env = "THRONG_PRESENCE_TIMEOUT")]
    pub presence_timeout: Option<u64>,
    /// Largest presence key and meta together; a join whose key is longer is
    /// refused with {"reason":"presence key too long"} [default: 1024]
    #[arg(long, value_name = "BYTES", env = "THRONG_MAX_PRESENCE_BYTES")]
    pub max_presence_bytes: Option<usize>,
    /// Set by the supervisor on the worker processes it starts.
    #[arg(long, hide = true)]
    pub worker_index: Option<usize>,
    /// Connect authentication: none, phoenix_token or jwt ([auth] mode) [default: none]
    #[arg(long, value_name = "MODE", env = "THRONG_AUTH")]
    pub auth: Option<Mode>,
    /// Phoenix.Token: the Phoenix endpoint's secret_key_base
    #[arg(
        long,
        value_name = "KEY",
        env = "THRONG_AUTH_SECRET_KEY_BASE",
        hide_env_values = true
    )]
    pub auth_secret_key_base: Option<String>,
    /// Phoenix.Token: the salt the app signs with [default: "user socket"]
    #[arg(long, value_name = "SALT", env = "THRONG_AUTH_SALT")]
    pub auth_salt: Option<String>,
    /// Phoenix.Token: refuse tokens signed longer ago than SECS [default: the max age in the token]
    #[arg(long, value_name = "SECS", env = "THRONG_AUTH_MAX_AGE")]
    pub auth_max_age: Option<u64>,
    /// JWT: the HS256 secret
    #[arg(
        long,
        value_name = "SECRET",
        env = "THRONG_AUTH_JWT_SECRET",
        hide_env_values = true
    )]
    pub auth_jwt_secret: Option<String>,
    /// JWT: a PEM file with the RS256 (RSA) or ES256 (EC P-256) public key
    #[arg(long, value_name = "FILE", env = "THRONG_AUTH_JWT_PUBLIC_KEY_FILE")]
    pub auth_jwt_public_key_file: Option<PathBuf>,
    /// JWT: the PEM public key itself (instead of a file)
    #[arg(
        long,
        value_name = "PEM",
        env = "THRONG_AUTH_JWT_PUBLIC_KEY",
        hide = true
    )]
    pub auth_jwt_public_key: Option<String>,
    /// JWT: HS256, RS256 or ES256 [default: from the key]
    #[arg(long, value_name = "ALG", env = "THRONG_AUTH_JWT_ALGORITHM")]
    pub auth_jwt_algorithm: Option<String>,
    /// Origins allowed to open sockets: true (the Origin's host must be the request's Host), false, or a comma-separated list (https://a.com,//*.b.com); requests without an Origin are always allowed [default: true]
    #[arg(long, value_name = "POLICY", env = "THRONG_CHECK_ORIGIN")]
    pub check_origin: Option<String>,
    /// Pushes a second a socket may sustain; excess pushes get {"reason":"rate limited"}; 0 = no limit [default: 20]
    #[arg(long, value_name = "N", env = "THRONG_PUSH_RATE")]
    pub push_rate: Option<f64>,
    /// Pushes a socket may make at once before the rate applies [default: 50]
    #[arg(long, value_name = "N", env = "THRONG_PUSH_BURST")]
    pub push_burst: Option<u32>,
    /// Rate-limited pushes (not paid back by waiting) after which the socket is closed with 1008; 0 = never [default: 20]
    #[arg(long, value_name = "N", env = "THRONG_PUSH_STRIKES")]
    pub push_strikes: Option<u32>,
    /// The server API listener (broadcast, disconnect, topics, stats, /metrics); "none" = no API; with --workers, worker i listens on PORT+i [default: 127.0.0.1:4001, or 127.0.0.1:0 with --port 0]
    #[arg(long, value_name = "ADDR", env = "THRONG_API_BIND")]
    pub api_bind: Option<String>,
    /// The key API requests must send in X-API-Key (GET /metrics needs none) [default: none: no key needed]
    #[arg(
        long,
        value_name = "KEY",
        env = "THRONG_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
    /// Also serve /metrics on the public port (it is always on the API listener)
    #[arg(long, env = "THRONG_PUBLIC_METRICS")]
    pub public_metrics: bool,
    /// Topic rules as JSON (set by the supervisor for its workers; use [[topics]] in the config file)
    #[arg(long, hide = true, env = "THRONG_TOPIC_RULES_JSON")]
    pub topic_rules_json: Option<String>,
}

/// The config file's shape: the same settings as the flags.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    port: Option<u16>,
    bind: Option<IpAddr>,
    shards: Option<usize>,
    idle_timeout: Option<u64>,
    max_message_bytes: Option<usize>,
    max_outbound_bytes: Option<usize>,
    max_channels_per_socket: Option<usize>,
    #[serde(flatten)]
    limits: LimitArgs,
    longpoll_window: Option<u64>,
    max_longpoll_batch: Option<usize>,
    echo: Option<bool>,
    log_requests: Option<bool>,
    redis: Option<String>,
    redis_ca_file: Option<PathBuf>,
    workers: Option<usize>,
    auth: Option<AuthConfig>,
    check_origin: Option<auth::origin::CheckOriginToml>,
    push_rate: Option<f64>,
    push_burst: Option<u32>,
    push_strikes: Option<u32>,
    api_bind: Option<String>,
    api_key: Option<String>,
    public_metrics: Option<bool>,
    topics: Option<Vec<TopicRule>>,
    presence: Option<Vec<RuleFile>>,
    presence_interval: Option<u64>,
    presence_timeout: Option<u64>,
    max_presence_bytes: Option<usize>,
}

/// Resolved settings.
#[derive(Clone, Debug)]
pub struct Config {
    pub addr: SocketAddr,
    pub shards: usize,
    /// `None`: never close idle sockets.
    pub idle_timeout: Option<Duration>,
    pub max_message_bytes: usize,
    pub max_outbound_bytes: usize,
    /// Joins one socket may hold at once.
    pub max_channels_per_socket: usize,
    /// The other bounds: see [`Limits`].
    pub limits: Limits,
    /// How long a long-poll waits for messages; `None`: no long-poll.
    pub longpoll_window: Option<Duration>,
    /// Messages one long-poll POST may carry.
    pub max_longpoll_batch: usize,
    pub echo: bool,
    pub log_requests: bool,
    /// The cluster backplane's Redis URL; `None`: a single node.
    pub redis: Option<String>,
    /// CA certificates to trust for `rediss://`; `None`: the system's.
    pub redis_ca_file: Option<PathBuf>,
    /// Worker processes; above 1 this process only supervises them.
    pub workers: usize,
    /// `Some(i)` in a worker process started by the supervisor.
    pub worker_index: Option<usize>,
    /// Connect authentication.
    pub auth: AuthConfig,
    pub check_origin: CheckOrigin,
    /// `[[topics]]`: who may join and push where.
    pub topics: Vec<TopicRule>,
    /// Pushes a second per socket (0 = unlimited), burst, strikes before 1008.
    pub push_rate: f64,
    pub push_burst: u32,
    pub push_strikes: u32,
    /// The server API's address; `None`: no API listener.
    pub api_bind: Option<SocketAddr>,
    pub api_key: Option<String>,
    /// `/metrics` on the public port too.
    pub public_metrics: bool,
    /// Topics with presence turned on without Rust.
    pub presence: Vec<PresenceRule>,
    /// Between presence diffs.
    pub presence_interval: Duration,
    /// A silent node's presences leave after this (with Redis).
    pub presence_timeout: Duration,
    /// A presence's key and meta together.
    pub max_presence_bytes: usize,
}

/// The most worker processes `--workers` accepts.
pub const MAX_WORKERS: usize = 64;

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 4000),
            shards: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            idle_timeout: Some(Duration::from_secs(60)),
            // As uWebSockets and Centrifugo: a message limit far below the
            // outbound limit, so no single message makes a reader "slow".
            max_message_bytes: 64 << 10,
            max_outbound_bytes: 1 << 20,
            max_channels_per_socket: 100,
            limits: Limits::defaults(64 << 10),
            longpoll_window: Some(Duration::from_secs(10)),
            max_longpoll_batch: 100,
            echo: false,
            log_requests: false,
            redis: None,
            redis_ca_file: None,
            workers: 1,
            worker_index: None,
            auth: AuthConfig::default(),
            check_origin: CheckOrigin::default(),
            topics: Vec::new(),
            push_rate: 20.0,
            push_burst: 50,
            push_strikes: 20,
            api_bind: Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4001)),
            api_key: None,
            public_metrics: false,
            presence: Vec::new(),
            presence_interval: Duration::from_millis(1000),
            presence_timeout: Duration::from_secs(30),
            max_presence_bytes: 1024,
        }
    }
}

impl ServeArgs {
    /// Merges flags over the config file over defaults.
    pub fn resolve(self) -> Result<Config, Error> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?
            }
            None => FileConfig::default(),
        };
        let d = Config::default();
        let port = self.port.or(file.port).unwrap_or(d.addr.port());
        let bind = self.bind.or(file.bind).unwrap_or(d.addr.ip());
        let workers = self.workers.or(file.workers).unwrap_or(d.workers);
        if workers == 0 || workers > MAX_WORKERS {
            return Err(Error::Config(format!(
                "workers must be 1..={MAX_WORKERS}, got {workers}"
            )));
        }
        let redis = self
            .redis
            .clone()
            .or(file.redis)
            .filter(|url| !url.is_empty());
        if workers > 1 && redis.is_none() {
            return Err(Error::Config(format!(
                "--workers {workers} needs --redis URL: each worker is a separate node, \
                 and only a backplane carries broadcasts between them"
            )));
        }
        // The cores are shared by the workers: by default each runs its share.
        let shards = self
            .shards
            .or(file.shards)
            .unwrap_or((d.shards / workers).max(1));
        if shards == 0 || shards > throng_pubsub::MAX_SHARDS {
            return Err(Error::Config(format!(
                "shards must be 1..={}, got {shards}",
                throng_pubsub::MAX_SHARDS
            )));
        }
        let idle = self.idle_timeout.or(file.idle_timeout).unwrap_or(60);
        let window = self.longpoll_window.or(file.longpoll_window).unwrap_or(10);
        if window > 3600 {
            return Err(Error::Config(format!(
                "longpoll_window must be 0..=3600 seconds, got {window}"
            )));
        }
        let max_message_bytes = self
            .max_message_bytes
            .or(file.max_message_bytes)
            .unwrap_or(d.max_message_bytes);
        if max_message_bytes < 125 {
            return Err(Error::Config(
                "max_message_bytes must be at least 125".into(),
            ));
        }
        let auth = merge_auth(&self, file.auth.unwrap_or_default());
        let check_origin = match (&self.check_origin, file.check_origin) {
            (Some(flag), _) => flag.parse().map_err(Error::Config)?,
            (None, Some(t)) => t.try_into().map_err(Error::Config)?,
            (None, None) => CheckOrigin::default(),
        };
        let topics = match &self.topic_rules_json {
            Some(json) => serde_json::from_str(json)
                .map_err(|e| Error::Config(format!("topic rules: {e}")))?,
            None => file.topics.unwrap_or_default(),
        };
        let push_rate = self.push_rate.or(file.push_rate).unwrap_or(d.push_rate);
        if !(0.0..=1000.0).contains(&push_rate) {
            return Err(Error::Config(format!(
                "push_rate must be 0 (no limit) to 1000 a second, got {push_rate}"
            )));
        }
        let api_bind = match self.api_bind.or(file.api_bind).as_deref() {
            // `--port 0` (tests, the bench) picks a free API port too.
            None if port == 0 => Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)),
            None => d.api_bind,
            Some("none" | "off" | "") => None,
            Some(a) => Some(a.parse().map_err(|e| {
                Error::Config(format!("api_bind {a:?}: {e} (want IP:PORT or none)"))
            })?),
        };
        let presence = if self.presence.is_empty() {
            let rules = file.presence.unwrap_or_default();
            rules
                .into_iter()
                .map(PresenceRule::from_file)
                .collect::<Result<Vec<_>, _>>()
        } else {
            self.presence
                .iter()
                .map(|s| PresenceRule::parse(s))
                .collect()
        }
        .map_err(Error::Config)?;
        let interval = self
            .presence_interval
            .or(file.presence_interval)
            .unwrap_or(d.presence_interval.as_millis() as u64);
        if !(10..=60_000).contains(&interval) {
            return Err(Error::Config(format!(
                "presence_interval must be 10..=60000 ms, got {interval}"
            )));
        }
        let timeout = self
            .presence_timeout
            .or(file.presence_timeout)
            .unwrap_or(d.presence_timeout.as_secs());
        if timeout == 0 {
            return Err(Error::Config(
                "presence_timeout must be at least 1 s".into(),
            ));
        }
        Ok(Config {
            auth,
            check_origin,
            topics,
            push_rate,
            push_burst: self
                .push_burst
                .or(file.push_burst)
                .unwrap_or(d.push_burst)
                .max(1),
            push_strikes: self
                .push_strikes
                .or(file.push_strikes)
                .unwrap_or(d.push_strikes),
            api_bind,
            api_key: self.api_key.or(file.api_key).filter(|k| !k.is_empty()),
            public_metrics: self.public_metrics || file.public_metrics.unwrap_or(false),
            addr: SocketAddr::new(bind, port),
            shards,
            idle_timeout: (idle > 0).then(|| Duration::from_secs(idle)),
            max_message_bytes,
            max_outbound_bytes: self
                .max_outbound_bytes
                .or(file.max_outbound_bytes)
                .unwrap_or(d.max_outbound_bytes),
            max_channels_per_socket: self
                .max_channels_per_socket
                .or(file.max_channels_per_socket)
                .unwrap_or(d.max_channels_per_socket),
            limits: self.limits.resolve(&file.limits, max_message_bytes)?,
            longpoll_window: (window > 0).then(|| Duration::from_secs(window)),
            max_longpoll_batch: self
                .max_longpoll_batch
                .or(file.max_longpoll_batch)
                .unwrap_or(d.max_longpoll_batch),
            echo: self.echo || file.echo.unwrap_or(false),
            log_requests: self.log_requests || file.log_requests.unwrap_or(false),
            redis,
            redis_ca_file: self.redis_ca_file.or(file.redis_ca_file),
            workers,
            worker_index: self.worker_index,
            presence,
            presence_interval: Duration::from_millis(interval),
            presence_timeout: Duration::from_secs(timeout),
            max_presence_bytes: self
                .max_presence_bytes
                .or(file.max_presence_bytes)
                .unwrap_or(d.max_presence_bytes),
        })
    }
}

/// The `[auth]` table with the flags over it.
fn merge_auth(args: &ServeArgs, file: AuthConfig) -> AuthConfig {
    AuthConfig {
        mode: args.auth.unwrap_or(file.mode),
        secret_key_base: args.auth_secret_key_base.clone().or(file.secret_key_base),
        salt: args.auth_salt.clone().or(file.salt),
        max_age: args.auth_max_age.or(file.max_age),
        jwt_secret: args.auth_jwt_secret.clone().or(file.jwt_secret),
        jwt_public_key: match (&args.auth_jwt_public_key, &args.auth_jwt_public_key_file) {
            (Some(pem), _) => Some(pem.clone()),
            (None, Some(_)) => None,
            (None, None) => file.jwt_public_key,
        },
        jwt_public_key_file: args
            .auth_jwt_public_key_file
            .clone()
            .or(file.jwt_public_key_file),
        jwt_algorithm: args.auth_jwt_algorithm.clone().or(file.jwt_algorithm),
    }
}

impl Config {
    /// How to reach the Redis of `--redis`, beyond its URL.
    pub fn redis_options(&self) -> throng_pubsub::RedisOptions {
        throng_pubsub::RedisOptions {
            ca_file: self.redis_ca_file.clone(),
            queue_bytes: self.limits.redis_queue_bytes,
        }
    }

    /// Secrets for worker `index`, passed in its environment rather than
    /// on its command line (where `ps` shows them).
    pub fn worker_env(&self) -> Vec<(&'static str, String)> {
        let mut env = Vec::new();
        let a = &self.auth;
        let secrets = [
            ("THRONG_AUTH_SECRET_KEY_BASE", &a.secret_key_base),
            ("THRONG_AUTH_JWT_SECRET", &a.jwt_secret),
            ("THRONG_AUTH_JWT_PUBLIC_KEY", &a.jwt_public_key),
            ("THRONG_API_KEY", &self.api_key),
            // The Redis URL carries its password, if it has one.
            ("THRONG_REDIS", &self.redis),
        ];
        for (name, value) in secrets {
            if let Some(v) = value {
                env.push((name, v.clone()));
            }
        }
        if !self.topics.is_empty() {
            if let Ok(json) = serde_json::to_string(&self.topics) {
                env.push(("THRONG_TOPIC_RULES_JSON", json));
            }
        }
        env
    }

    /// The `throng serve` arguments that make worker `index` of a supervisor:
    /// every resolved setting spelled out (so a worker reads no config file and
    /// no `THRONG_*` default can differ), on the supervisor's chosen `port`.
    pub fn worker_args(&self, index: usize, port: u16) -> Vec<String> {
        let mut args = vec![
            "serve".to_string(),
            "--bind".into(),
            self.addr.ip().to_string(),
            "--port".into(),
            port.to_string(),
            "--shards".into(),
            self.shards.to_string(),
            "--idle-timeout".into(),
            self.idle_timeout.map_or(0, |d| d.as_secs()).to_string(),
            "--max-message-bytes".into(),
            self.max_message_bytes.to_string(),
            "--max-outbound-bytes".into(),
            self.max_outbound_bytes.to_string(),
            "--max-channels-per-socket".into(),
            self.max_channels_per_socket.to_string(),
            "--longpoll-window".into(),
            self.longpoll_window.map_or(0, |d| d.as_secs()).to_string(),
            "--max-longpoll-batch".into(),
            self.max_longpoll_batch.to_string(),
            "--workers".into(),
            "1".into(),
            "--worker-index".into(),
            index.to_string(),
            "--presence-interval".into(),
            self.presence_interval.as_millis().to_string(),
            "--presence-timeout".into(),
            self.presence_timeout.as_secs().to_string(),
            "--max-presence-bytes".into(),
            self.max_presence_bytes.to_string(),
        ];
        args.extend(self.limits.worker_args());
        // `--redis` goes in the environment (`worker_env`): it may hold a password.
        for rule in &self.presence {
            args.extend(["--presence".into(), rule.spec()]);
        }
        if let Some(ca) = &self.redis_ca_file {
            args.extend(["--redis-ca-file".into(), ca.display().to_string()]);
        }
        if self.echo {
            args.push("--echo".into());
        }
        if self.log_requests {
            args.push("--log-requests".into());
        }
        let a = &self.auth;
        args.extend([
            "--auth".into(),
            clap::ValueEnum::to_possible_value(&a.mode)
                .map_or("none".into(), |v| v.get_name().to_string()),
            "--check-origin".into(),
            self.check_origin.to_string(),
            "--push-rate".into(),
            self.push_rate.to_string(),
            "--push-burst".into(),
            self.push_burst.to_string(),
            "--push-strikes".into(),
            self.push_strikes.to_string(),
            "--api-bind".into(),
            match self.api_bind {
                // Each worker its own API port: PORT+i (or any free one).
                Some(mut addr) => {
                    if addr.port() != 0 {
                        addr.set_port(addr.port().saturating_add(index as u16));
                    }
                    addr.to_string()
                }
                None => "none".into(),
            },
        ]);
        if let Some(salt) = &a.salt {
            args.extend(["--auth-salt".into(), salt.clone()]);
        }
        if let Some(age) = a.max_age {
            args.extend(["--auth-max-age".into(), age.to_string()]);
        }
        if let Some(alg) = &a.jwt_algorithm {
            args.extend(["--auth-jwt-algorithm".into(), alg.clone()]);
        }
        if let Some(path) = &a.jwt_public_key_file {
            args.extend([
                "--auth-jwt-public-key-file".into(),
                path.display().to_string(),
            ]);
        }
        if self.public_metrics {
            args.push("--public-metrics".into());
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_file_beat_defaults() {
        let dir = std::env::temp_dir().join(format!("throng-cfg-{}", std::process::id()));
        std::fs::write(
            &dir,
            "port = 5000\nidle_timeout = 0\nshards = 3\nmax_connections = 7\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(dir.clone()),
            shards: Some(2),
            ..Default::default()
        };
        let c = args.resolve().unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(c.addr.port(), 5000);
        assert_eq!(c.shards, 2);
        assert_eq!(c.idle_timeout, None);
        assert_eq!(c.limits.max_connections, 7);
        assert_eq!(c.max_message_bytes, 64 << 10);
        assert!(c.max_message_bytes * 16 <= c.max_outbound_bytes);
    }

    #[test]
    fn workers_need_redis() {
        let err = ServeArgs {
            workers: Some(2),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().contains("--redis"), "{err}");
        let c = ServeArgs {
            workers: Some(2),
            redis: Some("redis://127.0.0.1:6379".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(c.workers, 2);
        assert!(c.shards >= 1);
    }

    #[test]
    fn worker_args_round_trip() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            cmd: Cmd,
        }
        #[derive(clap::Subcommand)]
        enum Cmd {
            Serve(ServeArgs),
        }
        let c = ServeArgs {
            workers: Some(3),
            shards: Some(2),
            idle_timeout: Some(0),
            echo: true,
            redis: Some("redis://:s3cret@127.0.0.1:7000".into()),
            max_channels_per_socket: Some(7),
            limits: LimitArgs {
                drain_seconds: Some(3),
                max_connections_per_ip: Some(9),
                ..Default::default()
            },
            longpoll_window: Some(3),
            max_longpoll_batch: Some(9),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        let argv = std::iter::once("throng".to_string()).chain(c.worker_args(1, 4321));
        let Cmd::Serve(args) = <Cli as clap::Parser>::parse_from(argv).cmd;
        let w = args.resolve().unwrap();
        assert_eq!(w.addr.port(), 4321);
        assert_eq!((w.workers, w.worker_index, w.shards), (1, Some(1), 2));
        assert_eq!(w.idle_timeout, None);
        // The Redis URL (and its password) goes in the environment, not on
        // the command line where `ps` shows it.
        assert!(!c.worker_args(1, 4321).iter().any(|a| a.contains("s3cret")));
        assert!(c
            .worker_env()
            .contains(&("THRONG_REDIS", "redis://:s3cret@127.0.0.1:7000".to_string())));
        assert!(w.echo && !w.log_requests);
        assert_eq!(w.max_message_bytes, c.max_message_bytes);
        assert_eq!(w.max_channels_per_socket, 7);
        assert_eq!(w.limits.drain, Duration::from_secs(3));
        assert_eq!(w.limits.max_connections_per_ip, 9);
        assert_eq!(w.limits.max_socket_bytes, c.limits.max_socket_bytes);
        assert_eq!(w.longpoll_window, Some(Duration::from_secs(3)));
        assert_eq!(w.max_longpoll_batch, 9);
    }

    #[test]
    fn the_jwt_example_config_resolves() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/jwt.toml");
        let c = ServeArgs {
            config: Some(path.into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(c.auth.mode, Mode::Jwt);
        assert_eq!(c.topics.len(), 3);
        assert!(matches!(c.check_origin, CheckOrigin::List(ref l) if l.len() == 2));
        crate::auth::Auth::new(&c.auth).unwrap();
        // Workers get the rules and secrets through their environment.
        let env = c.worker_env();
        assert!(env.iter().any(|(k, _)| *k == "THRONG_TOPIC_RULES_JSON"));
        assert!(env.iter().any(|(k, _)| *k == "THRONG_AUTH_JWT_SECRET"));
        assert!(!c
            .worker_args(1, 4000)
            .iter()
            .any(|a| a.contains("change-me")));
        assert!(c
            .worker_args(1, 4000)
            .contains(&"127.0.0.1:4002".to_string()));
    }

    #[test]
    fn presence_from_flags_file_and_workers() {
        let path = std::env::temp_dir().join(format!("throng-cfg-pres-{}", std::process::id()));
        std::fs::write(
            &path,
            "presence_interval = 500\n[[presence]]\npattern = \"rooms:*\"\nkey = \"param:user\"\n\n[[presence]]\npattern = \"live:*\"\nkey = \"user_id\"\nmode = \"count\"\n",
        )
        .unwrap();
        let c = ServeArgs {
            config: Some(path.clone()),
            presence_timeout: Some(5),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(c.presence.len(), 2);
        assert_eq!(c.presence[1].mode, crate::presence::Mode::Count);
        assert_eq!(c.presence_interval, Duration::from_millis(500));
        assert_eq!(c.presence_timeout, Duration::from_secs(5));
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            cmd: Cmd,
        }
        #[derive(clap::Subcommand)]
        enum Cmd {
            Serve(ServeArgs),
        }
        let argv = std::iter::once("throng".to_string()).chain(c.worker_args(0, 1));
        let Cmd::Serve(args) = <Cli as clap::Parser>::parse_from(argv).cmd;
        let w = args.resolve().unwrap();
        assert_eq!(w.presence, c.presence);
        assert_eq!(
            (w.presence_interval, w.presence_timeout),
            (c.presence_interval, c.presence_timeout)
        );
        assert_eq!(w.max_presence_bytes, 1024);
        let flag = ServeArgs {
            presence: vec!["a=user_id".into()],
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(flag.presence[0].pattern, "a");
        assert!(ServeArgs {
            presence: vec!["nokey".into()],
            ..Default::default()
        }
        .resolve()
        .is_err());
        assert!(ServeArgs {
            presence_interval: Some(1),
            ..Default::default()
        }
        .resolve()
        .is_err());
    }

    #[test]
    fn unknown_keys_are_errors() {
        let dir = std::env::temp_dir().join(format!("throng-cfg-bad-{}", std::process::id()));
        std::fs::write(&dir, "prot = 5000\n").unwrap();
        let err = ServeArgs {
            config: Some(dir.clone()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        std::fs::remove_file(&dir).unwrap();
        assert!(err.to_string().contains("prot"), "{err}");
    }
}
