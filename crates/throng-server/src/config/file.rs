//! The config file's shape (`FileConfig`): the TOML twin of the flags, read
//! by [`ServeArgs::resolve`](super::ServeArgs::resolve) under the flags.

use std::path::PathBuf;

use serde::Deserialize;

use crate::auth::{self, AuthConfig, TopicRule};
use crate::limits::LimitArgs;
use crate::presence::RuleFile;

/// The config file's shape: the same settings as the flags.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) port: Option<u16>,
    /// An IP address or a host name (`localhost`).
    pub(super) bind: Option<String>,
    pub(super) shards: Option<usize>,
    pub(super) idle_timeout: Option<u64>,
    pub(super) max_message_bytes: Option<usize>,
    pub(super) max_outbound_bytes: Option<usize>,
    pub(super) max_channels_per_socket: Option<usize>,
    #[serde(flatten)]
    pub(super) limits: LimitArgs,
    pub(super) longpoll_window: Option<u64>,
    pub(super) max_longpoll_batch: Option<usize>,
    /// `deflate = false` is `--no-deflate`.
    pub(super) deflate: Option<bool>,
    pub(super) echo: Option<bool>,
    pub(super) log_requests: Option<bool>,
    pub(super) redis: Option<String>,
    pub(super) redis_ca_file: Option<PathBuf>,
    pub(super) reuse_port: Option<bool>,
    pub(super) workers: Option<usize>,
    pub(super) auth: Option<AuthConfig>,
    pub(super) check_origin: Option<auth::origin::CheckOriginToml>,
    pub(super) push_rate: Option<f64>,
    pub(super) push_burst: Option<u32>,
    pub(super) push_strikes: Option<u32>,
    pub(super) api_bind: Option<String>,
    pub(super) api_key: Option<String>,
    pub(super) public_metrics: Option<bool>,
    pub(super) topics: Option<Vec<TopicRule>>,
    pub(super) presence: Option<Vec<RuleFile>>,
    pub(super) presence_interval: Option<u64>,
    pub(super) presence_count_rate: Option<u64>,
    pub(super) presence_timeout: Option<u64>,
    pub(super) max_presence_bytes: Option<usize>,
    pub(super) hooks: Option<crate::hooks::HookArgs>,
    pub(super) tls_cert: Option<PathBuf>,
    pub(super) tls_key: Option<PathBuf>,
    pub(super) api_tls_cert: Option<PathBuf>,
    pub(super) api_tls_key: Option<PathBuf>,
}

/// The `[auth]` keys, which the `--auth-*` flags set.
const AUTH_KEYS: &[&str] = &[
    "mode",
    "secret_key_base",
    "salt",
    "max_age",
    "jwt_secret",
    "jwt_public_key",
    "jwt_public_key_file",
    "jwt_algorithm",
];

/// For a file refused by serde: if a top-level key is an `--auth-*` flag
/// spelt with underscores (`auth_jwt_secret`), how to write it instead.
pub(super) fn table_key_hint(text: &str) -> Option<String> {
    let table: toml::Table = toml::from_str(text).ok()?;
    table.keys().find_map(|key| {
        let inner = key.strip_prefix("auth_")?;
        AUTH_KEYS.contains(&inner).then(|| {
            format!(
                "\nhint: `{key}` belongs in the [auth] table, as `{inner}`:\n    [auth]\n    {inner} = ..."
            )
        })
    })
}
