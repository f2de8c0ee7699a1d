//! Settings: command-line flags, each with an environment variable, over an
//! optional TOML file, over defaults. `throng serve --help` documents each.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::limits::{LimitArgs, Limits};
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
    /// Set by the supervisor on the worker processes it starts.
    #[arg(long, hide = true)]
    pub worker_index: Option<usize>,
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
    echo: Option<bool>,
    log_requests: Option<bool>,
    redis: Option<String>,
    redis_ca_file: Option<PathBuf>,
    workers: Option<usize>,
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
            echo: false,
            log_requests: false,
            redis: None,
            redis_ca_file: None,
            workers: 1,
            worker_index: None,
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
        let redis = self.redis.or(file.redis).filter(|url| !url.is_empty());
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
        let max_message_bytes = self
            .max_message_bytes
            .or(file.max_message_bytes)
            .unwrap_or(d.max_message_bytes);
        if max_message_bytes < 125 {
            return Err(Error::Config(
                "max_message_bytes must be at least 125".into(),
            ));
        }
        Ok(Config {
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
            echo: self.echo || file.echo.unwrap_or(false),
            log_requests: self.log_requests || file.log_requests.unwrap_or(false),
            redis,
            redis_ca_file: self.redis_ca_file.or(file.redis_ca_file),
            workers,
            worker_index: self.worker_index,
        })
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
            "--workers".into(),
            "1".into(),
            "--worker-index".into(),
            index.to_string(),
        ];
        args.extend(self.limits.worker_args());
        if let Some(url) = &self.redis {
            args.extend(["--redis".into(), url.clone()]);
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
            redis: Some("redis://127.0.0.1:7000".into()),
            max_channels_per_socket: Some(7),
            limits: LimitArgs {
                drain_seconds: Some(3),
                max_connections_per_ip: Some(9),
                ..Default::default()
            },
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
        assert_eq!(w.redis, c.redis);
        assert!(w.echo && !w.log_requests);
        assert_eq!(w.max_message_bytes, c.max_message_bytes);
        assert_eq!(w.max_channels_per_socket, 7);
        assert_eq!(w.limits.drain, Duration::from_secs(3));
        assert_eq!(w.limits.max_connections_per_ip, 9);
        assert_eq!(w.limits.max_socket_bytes, c.limits.max_socket_bytes);
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
