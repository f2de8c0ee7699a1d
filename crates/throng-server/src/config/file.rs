//! The config file's shape (`FileConfig`): the same [`settings!`](super::setting)
//! structs as the flags (top-level keys, `[auth]`, `[hooks]`, the limits),
//! plus `[[topics]]`, which has no flag; read by
//! [`ServeArgs::resolve`](super::ServeArgs::resolve) under the flags.

use serde::Deserialize;

use super::auth::AuthArgs;
use super::HookArgs;
use super::ServeArgs;
use crate::limits::LimitArgs;
use crate::rules::TopicRule;

/// The config file's shape: the same settings as the flags.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    #[serde(flatten)]
    top: ServeArgs,
    #[serde(flatten)]
    limits: LimitArgs,
    #[serde(default)]
    auth: AuthArgs,
    #[serde(default)]
    hooks: HookArgs,
    topics: Option<Vec<TopicRule>>,
}

impl FileConfig {
    /// The file as one [`ServeArgs`], its tables in their groups and the
    /// `[[topics]]` as the JSON a worker gets them in.
    pub(super) fn into_args(self) -> Result<ServeArgs, String> {
        let topic_rules_json = match self.topics {
            Some(rules) => Some(serde_json::to_string(&rules).map_err(|e| e.to_string())?),
            None => None,
        };
        Ok(ServeArgs {
            limits: self.limits,
            auth: self.auth,
            hooks: self.hooks,
            topic_rules_json,
            ..self.top
        })
    }
}
