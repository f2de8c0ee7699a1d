//! Settings: command-line flags, each with an environment variable, over an
//! optional TOML file, over defaults. `throng serve --help` documents each.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

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
    /// Largest WebSocket message accepted; larger ones are closed with 1009 [default: 1048576]
    #[arg(long, value_name = "BYTES", env = "THRONG_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: Option<usize>,
    /// Outbound bytes a slow reader may have queued before it is disconnected [default: 262144]
    #[arg(long, value_name = "BYTES", env = "THRONG_MAX_OUTBOUND_BYTES")]
    pub max_outbound_bytes: Option<usize>,
    /// Serve a WebSocket echo endpoint at /echo (for the Autobahn TestSuite)
    #[arg(long, env = "THRONG_ECHO")]
    pub echo: bool,
    /// Log every HTTP request (off by default: logging halves throughput)
    #[arg(long, env = "THRONG_LOG_REQUESTS")]
    pub log_requests: bool,
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
    echo: Option<bool>,
    log_requests: Option<bool>,
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
    pub echo: bool,
    pub log_requests: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 4000),
            shards: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            idle_timeout: Some(Duration::from_secs(60)),
            max_message_bytes: 1 << 20,
            max_outbound_bytes: 256 << 10,
            echo: false,
            log_requests: false,
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
        let shards = self.shards.or(file.shards).unwrap_or(d.shards);
        if shards == 0 || shards > 256 {
            return Err(Error::Config(format!(
                "shards must be 1..=256, got {shards}"
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
            echo: self.echo || file.echo.unwrap_or(false),
            log_requests: self.log_requests || file.log_requests.unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_file_beat_defaults() {
        let dir = std::env::temp_dir().join(format!("throng-cfg-{}", std::process::id()));
        std::fs::write(&dir, "port = 5000\nidle_timeout = 0\nshards = 3\n").unwrap();
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
        assert_eq!(c.max_message_bytes, 1 << 20);
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
