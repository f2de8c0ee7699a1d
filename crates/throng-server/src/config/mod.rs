//! Settings: command-line flags, each with an environment variable, over an
//! optional TOML file, over defaults. `throng serve --help` documents each.
//!
//! Each setting is defined once, as one field of a settings group made
//! with [`settings!`](crate::setting) (`setting.rs` says what a field gives): its
//! doc comment is the help, its name the flag (`--idle-timeout`) and the
//! file key (`idle_timeout`), its `#[arg(env = ...)]` the variable, its
//! `= VALUE` the default shown in `--help`. The groups, one per table of
//! the file:
//! - `flags.rs`: [`ServeArgs`], the top-level keys, with the groups below
//!   flattened into its flags;
//! - `auth.rs`: [`AuthArgs`], the `[auth]` table and the `--auth-*` flags;
//! - `hooks.rs`: `HookArgs`, `[hooks]` and `--hook-*` (what `crate::hooks` calls the backend with);
//! - `crate::limits` (`limits.rs`): `LimitArgs`, top-level keys kept beside
//!   the bounds they set.
//!
//! This file owns the resolved [`Config`] and the merge (flags over the
//! file, field by field, then defaults and checks); the file's shape
//! (`file.rs`, the same structs plus `[[topics]]`), what a worker of
//! `--workers` is handed (`workers.rs`: the same struct, passed on),
//! `throng gen-config` (`template.rs`: the keys, read off the flags'
//! definitions) and `throng check-config` (`check.rs`) live beside it.
//!
//! # Adding a setting
//! 1. One field in the group it belongs to (say `ServeArgs` in `flags.rs`):
//!    ```text
//!    /// What it does, for someone who has never seen the code; what a client sees past it
//!    #[arg(long, help_heading = "Connections and messages", value_parser = whole::<u64>, value_name = "SECS", env = "THRONG_MY_SETTING")]
//!    pub my_setting: Option<u64> = 30,
//!    ```
//!    A switch is `pub x: bool` (no default: off); a repeatable flag a
//!    `Vec<String>`; a default described rather than given ("number of
//!    cores") goes at the end of the doc comment as `[default: ...]`, with
//!    no `= VALUE`; a secret takes `hide_env_values = true` (workers then
//!    get it in their environment, not on their command line). The flag,
//!    `THRONG_MY_SETTING`, the file key `my_setting`, `gen-config`,
//!    `check-config` and the workers' command line follow from the field.
//! 2. Read it where [`ServeArgs::resolve`] builds the [`Config`]
//!    (`s.my_setting()` is the value with its default), into a `Config`
//!    field; a range to check gets a `checked_my_setting` beside the
//!    group's definition (`flags.rs` for `ServeArgs`), with an error that
//!    says the fix, which `resolve` calls.
//! 3. One row in a table of `docs/configuration.md` (flags, or limits): the cli test
//!    `readme_tables_list_exactly_the_serve_flags` fails until it is there.
//!
//! A flag from before this layout (a plain `#[arg]` field with
//! `[default: X]` in its doc, read as `self.x.or(file.x).unwrap_or(d.x)`)
//! ports by moving the default to `= X`, dropping its `FileConfig` field
//! (the file reads the same struct), its `Config::default` line and its
//! `worker_args` lines (the struct is passed on whole).

mod auth;
mod check;
mod file;
mod files;
mod flags;
mod keys;
pub mod pusher;
mod secrets;
mod template;
mod workers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::auth::{AuthConfig, CheckOrigin};
use crate::limits::Limits;
use crate::presence::PresenceRule;
use crate::rules::TopicRule;
use crate::Error;

pub use crate::hooks::settings::{HookArgs, HooksConfig};
pub use crate::setting::whole;
pub use auth::AuthArgs;
pub use check::{check_config, Checked};
use file::FileConfig;
pub use flags::{parse_bind, ServeArgs};
pub use template::{file_keys, gen_config, serve_command, FileKey};

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
    /// permessage-deflate offered to clients (`--no-deflate` turns it off).
    pub deflate: bool,
    pub echo: bool,
    pub log_requests: bool,
    /// The cluster backplane's Redis URL; `None`: a single node.
    pub redis: Option<String>,
    /// CA certificates to trust for `rediss://`; `None`: the system's.
    pub redis_ca_file: Option<PathBuf>,
    /// How long Redis may take to answer (`--redis-timeout-ms`).
    pub redis_timeout: Duration,
    /// Share the public port with other processes (`--reuse-port`)
    /// instead of refusing to start when it is held.
    pub reuse_port: bool,
    /// Worker processes; above 1 this process only supervises them.
    pub workers: usize,
    /// `Some(i)` in a worker process started by the supervisor.
    pub worker_index: Option<usize>,
    /// Connect authentication.
    pub auth: AuthConfig,
    pub check_origin: CheckOrigin,
    /// `[[topics]]`: who may join and push where.
    pub topics: Vec<TopicRule>,
    /// `--history`: history for topics, without a config file.
    pub history: Vec<crate::rules::HistoryPattern>,
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
    /// Count mode: `presence_count` broadcasts per second per topic, about,
    /// cluster-wide; a topic of N keys sends at most one per N / rate
    /// seconds. 0: one per interval whatever N.
    pub presence_count_rate: u64,
    /// A silent node's presences leave after this (with Redis).
    pub presence_timeout: Duration,
    /// A presence's key and meta together.
    pub max_presence_bytes: usize,
    /// `[hooks]`: the app backend (`crate::hooks`).
    pub hooks: HooksConfig,
    /// `[pusher]`: the Pusher Channels protocol's apps (`crate::protocol::pusher`).
    pub pusher: pusher::PusherConfig,
    /// TLS on the public port (`--tls-cert`, `--tls-key`).
    pub tls: Option<crate::tls::TlsFiles>,
    /// TLS on the server API (`--api-tls-cert`, `--api-tls-key`).
    pub api_tls: Option<crate::tls::TlsFiles>,
    /// What the weak-secret rule warns about (a secret long enough to
    /// start with, shorter than it should be): logged at start, listed by
    /// `check-config`. A secret it refuses is an error of `resolve`.
    pub secret_warnings: Vec<String>,
    /// The settings as given (flags over the file), before defaults: what
    /// the supervisor of `--workers` hands each worker (`workers.rs`).
    pub settings: ServeArgs,
}

/// The most worker processes `--workers` accepts: a bound on the
/// supervisor's children and on the API ports they take (one each, from
/// the API port up). 256 leaves room for 2,000,000 connections on a machine
/// whose open-files limit is 20,000 per process (104 workers).
pub const MAX_WORKERS: usize = 256;

/// The server API's port when `--api-bind` is not given (as its help says).
const DEFAULT_API_PORT: u16 = 4001;

impl Default for Config {
    /// The defaults, as each setting states its own (`flags.rs` and the
    /// groups it flattens).
    fn default() -> Self {
        ServeArgs::default()
            .resolve()
            .expect("the default settings resolve")
    }
}

impl ServeArgs {
    /// Merges flags over the config file over defaults; each setting's
    /// check lives beside its definition (`flags.rs`, `auth.rs`, the
    /// groups' `resolve`) and runs here in this order.
    pub fn resolve(self) -> Result<Config, Error> {
        let file = self.file_args()?;
        let auth = self.auth.clone().over(file.auth.clone());
        let args = self.clone();
        // Flags over the file, field by field; `settings` is what a worker
        // of `--workers` is handed (`workers.rs`).
        let settings = ServeArgs {
            auth,
            ..self.or(file)
        };
        // Before anything else is checked or started: a weak secret is
        // the first thing to fix.
        let judged = secrets::judge(&args, &settings);
        judged.result().map_err(Error::Config)?;
        let s = &settings;
        let port = s.port();
        let bind = s.bind();
        let workers = s.checked_workers()?;
        let redis = s.checked_redis(workers)?;
        let shards = s.checked_shards(workers)?;
        let idle = s.idle_timeout();
        let window = s.checked_longpoll_window()?;
        let max_message_bytes = s.checked_max_message_bytes()?;
        let auth = s.auth.clone().config();
        s.auth.check_revoke_skew()?;
        let hooks = s.hooks.resolve().map_err(Error::Config)?;
        let pusher = s
            .pusher
            .resolve(&[], args.config.as_deref())
            .map_err(Error::Config)?;
        let check_origin = s.checked_check_origin()?;
        let topics = s.checked_topic_rules()?;
        let history = s.checked_history()?;
        let push_rate = s.checked_push_rate()?;
        // Empty or short: refused above, by the weak-secret rule.
        let api_key = s.api_key.clone();
        let api_bind = s.checked_api_bind(port)?;
        let presence = s.checked_presence()?;
        let interval = s.checked_presence_interval()?;
        let timeout = s.checked_presence_timeout()?;
        let redis_timeout = s.checked_redis_timeout()?;
        let (tls, api_tls) = s.checked_tls()?;
        files::check(s).map_err(Error::Config)?;
        Ok(Config {
            tls,
            api_tls,
            secret_warnings: judged.warnings,
            auth,
            hooks,
            pusher,
            check_origin,
            topics,
            history,
            push_rate,
            push_burst: s.push_burst().max(1),
            push_strikes: s.push_strikes(),
            api_bind,
            api_key,
            public_metrics: s.public_metrics,
            addr: SocketAddr::new(bind, port),
            shards,
            idle_timeout: (idle > 0).then(|| Duration::from_secs(idle)),
            max_message_bytes,
            max_outbound_bytes: s.max_outbound_bytes(),
            max_channels_per_socket: s.max_channels_per_socket(),
            limits: s.limits.resolve(max_message_bytes)?,
            longpoll_window: (window > 0).then(|| Duration::from_secs(window)),
            max_longpoll_batch: s.max_longpoll_batch(),
            deflate: !s.no_deflate,
            echo: s.echo,
            log_requests: s.log_requests,
            redis,
            redis_ca_file: s.redis_ca_file.clone(),
            redis_timeout: Duration::from_millis(redis_timeout),
            reuse_port: s.reuse_port,
            workers,
            worker_index: s.worker_index,
            presence,
            presence_interval: Duration::from_millis(interval),
            presence_count_rate: s.presence_count_rate(),
            presence_timeout: Duration::from_secs(timeout),
            max_presence_bytes: s.max_presence_bytes(),
            settings,
        })
    }

    /// The settings of `--config`'s file (checked for unknown keys), or
    /// none.
    fn file_args(&self) -> Result<ServeArgs, Error> {
        Ok(match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
                keys::check(path, &text).map_err(Error::Config)?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|e| format!("{}: {}", path.display(), file::toml_error(&e, &text)))
                    .and_then(|f| {
                        f.into_args()
                            .map_err(|e| format!("{}: {e}", path.display()))
                    })
                    .map_err(Error::Config)?
            }
            None => ServeArgs::default(),
        })
    }
}

impl Config {
    /// The weak-secret rule ([`crate::auth::secret`]) on these settings'
    /// secrets, for settings built in code rather than read by
    /// [`ServeArgs::resolve`] (which checks them as it reads them, saying
    /// where each came from): [`Server::start`](crate::Server) calls it.
    pub fn check_secrets(&self) -> Result<(), Error> {
        use crate::auth::secret::{Judged, Kind, Source};
        let mut judged = Judged::default();
        self.auth.judge_secrets(&mut judged, &Source::Settings);
        judged.add(
            Kind::HookSecret,
            self.hooks.secret.as_deref(),
            &Source::Settings,
        );
        judged.add(Kind::ApiKey, self.api_key.as_deref(), &Source::Settings);
        judged.result().map_err(Error::Config)
    }

    /// Whether the public port may be held already: `--reuse-port`, or a
    /// worker of `--workers`, whose supervisor claimed it.
    pub fn public_share(&self) -> crate::bind::Share {
        if self.reuse_port || self.worker_index.is_some() {
            crate::bind::Share::Shared
        } else {
            crate::bind::Share::Exclusive
        }
    }

    /// Whether the API port may be held already: only in a worker (its
    /// supervisor claimed it; its replacement binds it while it drains).
    pub fn api_share(&self) -> crate::bind::Share {
        if self.worker_index.is_some() {
            crate::bind::Share::Shared
        } else {
            crate::bind::Share::Exclusive
        }
    }

    /// How to reach the Redis of `--redis`, beyond its URL.
    pub fn redis_options(&self) -> throng_pubsub::RedisOptions {
        throng_pubsub::RedisOptions {
            ca_file: self.redis_ca_file.clone(),
            queue_bytes: self.limits.redis_queue_bytes,
            timeout: self.redis_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting of `serve` has its own clap id: two flattened groups
    /// once shared `api_timeout`, and one flag then read the other's value
    /// (found by the config_toml fuzz target; clap checks this only in
    /// debug builds, so the test does it itself).
    #[test]
    fn serve_flags_have_unique_ids() {
        use clap::Args;
        let cmd = ServeArgs::augment_args(clap::Command::new("serve"));
        let mut seen = std::collections::HashSet::new();
        for arg in cmd.get_arguments() {
            assert!(
                seen.insert(arg.get_id().as_str().to_string()),
                "id {} twice",
                arg.get_id()
            );
        }
        assert!(seen.contains("pusher_api_timeout") && seen.contains("api_timeout"));
    }
    use crate::auth::Mode;

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

    /// Found by the `config_toml` fuzz target: a Redis URL without its
    /// scheme was shown whole, password and all, in the error.
    #[test]
    fn a_redis_url_refused_hides_its_password() {
        for url in ["u:pa55word@h:6379", "http://u:pa55word@h:6379"] {
            let args = ServeArgs {
                redis: Some(url.into()),
                ..Default::default()
            };
            let e = args.resolve().expect_err(url).to_string();
            assert!(!e.contains("pa55word") && e.contains("u:***@h:6379"), "{e}");
        }
    }

    #[test]
    fn deflate_is_on_unless_the_flag_or_the_file_says_off() {
        assert!(ServeArgs::default().resolve().unwrap().deflate);
        let off = ServeArgs {
            no_deflate: true,
            ..Default::default()
        };
        assert!(!off.resolve().unwrap().deflate);
        let path = std::env::temp_dir().join(format!("throng-deflate-{}", std::process::id()));
        std::fs::write(&path, "deflate = false\n").unwrap();
        let file = ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        };
        assert!(!file.resolve().unwrap().deflate);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn the_redis_timeout_reaches_the_link_and_is_bounded() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.redis_options().timeout, Duration::from_secs(5));
        let c = ServeArgs {
            redis_timeout_ms: Some(1500),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(c.redis_options().timeout, Duration::from_millis(1500));
        for bad in [0, 99, 300_001] {
            let err = ServeArgs {
                redis_timeout_ms: Some(bad),
                ..Default::default()
            }
            .resolve()
            .unwrap_err();
            assert!(err.to_string().contains("redis_timeout_ms"), "{err}");
        }
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
        let c = ServeArgs {
            workers: Some(2),
            redis: Some("redis+cluster://127.0.0.1:7000,127.0.0.1:7001".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(
            c.redis.as_deref(),
            Some("redis+cluster://127.0.0.1:7000,127.0.0.1:7001")
        );
        let err = ServeArgs {
            redis: Some("127.0.0.1:6379".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().contains("redis://127.0.0.1:6379"), "{err}");
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
    fn history_keys_of_topic_rules() {
        let resolve = |toml: &str| {
            let path = std::env::temp_dir().join(format!(
                "throng-cfg-hist-{}-{}",
                std::process::id(),
                toml.len()
            ));
            std::fs::write(&path, toml).unwrap();
            let c = ServeArgs {
                config: Some(path.clone()),
                ..Default::default()
            }
            .resolve();
            std::fs::remove_file(&path).unwrap();
            c
        };
        let c = resolve(
            "[[topics]]\npattern = \"feed:*\"\nhistory_size = 100\nhistory_ttl = 60\n\
             [[topics]]\npattern = \"inbox:{user}\"\nhistory_size = 5\n\
             [[topics]]\npattern = \"*\"\n",
        )
        .unwrap();
        let p = crate::rules::Policy::new(c.topics.clone());
        let h = p.history("feed:1").unwrap();
        assert_eq!((h.size, h.ttl), (100, Duration::from_secs(60)));
        let h = p.history("inbox:u1").unwrap();
        assert_eq!((h.size, h.ttl.as_secs()), (5, 600));
        assert!(p.history("rooms:1").is_none());
        // Workers get the rules as JSON, history included.
        let json = serde_json::to_string(&c.topics).unwrap();
        assert!(json.contains("\"history_size\":100"), "{json}");
        for (bad, says) in [
            ("history_size = 0", "history_size must be 1..=10000"),
            ("history_size = 10001", "history_size must be 1..=10000"),
            ("history_ttl = 5", "history_ttl needs history_size"),
            (
                "history_size = 1\nhistory_ttl = 0",
                "history_ttl must be 1..=86400",
            ),
            ("history_size = -1", "history_size"),
        ] {
            let err = resolve(&format!("[[topics]]\npattern = \"f:*\"\n{bad}\n")).unwrap_err();
            assert!(err.to_string().contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn presence_from_flags_file_and_workers() {
        let path = std::env::temp_dir().join(format!("throng-cfg-pres-{}", std::process::id()));
        std::fs::write(
            &path,
            "presence_interval = 500\npresence_count_rate = 50\n[[presence]]\npattern = \"rooms:*\"\nkey = \"param:user\"\n\n[[presence]]\npattern = \"live:*\"\nkey = \"user_id\"\nmode = \"count\"\n",
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
        assert_eq!(c.presence_count_rate, 50);
        let w = workers::as_worker(&c, 0, 1);
        assert_eq!(w.presence_count_rate, 50);
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

    #[test]
    fn a_flag_spelt_as_a_top_level_key_gets_its_table() {
        let path = std::env::temp_dir().join(format!("throng-cfg-auth-{}", std::process::id()));
        std::fs::write(&path, "auth_jwt_secret = \"s\"\nbind = \"localhost\"\n").unwrap();
        let err = ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(
            err.contains("[auth]") && err.contains("jwt_secret ="),
            "{err}"
        );
    }

    #[test]
    fn bind_takes_a_host_name() {
        let path = std::env::temp_dir().join(format!("throng-cfg-bind-{}", std::process::id()));
        std::fs::write(&path, "bind = \"localhost\"\n").unwrap();
        let c = ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(c.addr.ip().is_loopback(), "{}", c.addr);
        assert!(parse_bind("localhost").unwrap().is_loopback());
        let api = ServeArgs {
            api_bind: Some("localhost:4001".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap()
        .api_bind
        .unwrap();
        assert!(api.ip().is_loopback() && api.port() == 4001, "{api}");
        assert!(whole::<u64>("-5").unwrap_err().contains("0 or more"));
    }
}
