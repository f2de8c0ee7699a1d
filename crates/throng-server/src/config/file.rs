//! The config file's shape (`FileConfig`): the TOML twin of the flags, read
//! by [`ServeArgs::resolve`](super::ServeArgs::resolve) under the flags.

use std::net::IpAddr;
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
    pub(super) bind: Option<IpAddr>,
    pub(super) shards: Option<usize>,
    pub(super) idle_timeout: Option<u64>,
    pub(super) max_message_bytes: Option<usize>,
    pub(super) max_outbound_bytes: Option<usize>,
    pub(super) max_channels_per_socket: Option<usize>,
    #[serde(flatten)]
    pub(super) limits: LimitArgs,
    pub(super) longpoll_window: Option<u64>,
    pub(super) max_longpoll_batch: Option<usize>,
    pub(super) echo: Option<bool>,
    pub(super) log_requests: Option<bool>,
    pub(super) redis: Option<String>,
    pub(super) redis_ca_file: Option<PathBuf>,
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
}
