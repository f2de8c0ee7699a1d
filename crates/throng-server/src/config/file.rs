//! The config file's shape (`FileConfig`): the same [`settings!`](super::setting)
//! structs as the flags (top-level keys, `[auth]`, `[hooks]`, the limits),
//! plus `[[topics]]`, which has no flag; read by
//! [`ServeArgs::resolve`](super::ServeArgs::resolve) under the flags.

use serde::Deserialize;

use super::auth::AuthArgs;
use super::pusher::PusherFile;
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
    #[serde(default)]
    pusher: PusherFile,
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
        let mut pusher = self.pusher.args;
        if !self.pusher.apps.is_empty() {
            pusher.apps_json =
                Some(serde_json::to_string(&self.pusher.apps).map_err(|e| e.to_string())?);
        }
        Ok(ServeArgs {
            limits: self.limits,
            auth: self.auth,
            hooks: self.hooks,
            pusher,
            topic_rules_json,
            ..self.top
        })
    }
}

/// A TOML error for a person, without the file's text where it could show
/// a secret: toml quotes the lines the error is on, which for a secret's
/// key (`api_key`, `*secret*`, `*password*`) or the Redis URL is the
/// secret itself; those lines are left out, the position kept.
pub(super) fn toml_error(e: &toml::de::Error, text: &str) -> String {
    let Some(span) = e.span() else {
        return e.to_string();
    };
    let start = text[..span.start.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let end = text[span.end.min(text.len())..]
        .find('\n')
        .map_or(text.len(), |i| span.end + i);
    let lines = text.get(start..end).unwrap_or(text).to_ascii_lowercase();
    let secret = ["secret", "password", "api_key", "redis"]
        .iter()
        .any(|k| lines.contains(k));
    if !secret {
        return e.to_string();
    }
    let line = 1 + text[..start].matches('\n').count();
    format!(
        "TOML error at line {line} (not shown: it holds a secret): {}",
        e.message().trim_end()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `config_toml` fuzz target: a secret of the wrong type
    /// was quoted back in the error (and so in serve's log and in
    /// check-config's report).
    #[test]
    fn a_toml_error_never_quotes_a_secret() {
        for text in [
            "port = 1\n[auth]\njwt_secret = [\"leaked-secret-in-an-array\"]\n",
            "api_key = \"unterminated-api-key-value\nport = 2\n",
            "redis = 7 # redis://u:pa55word@h\n",
        ] {
            let e = toml::from_str::<FileConfig>(text).expect_err(text);
            let shown = toml_error(&e, text);
            assert!(
                !shown.contains("leaked")
                    && !shown.contains("unterminated")
                    && !shown.contains("pa55"),
                "{shown}"
            );
            assert!(shown.contains("line "), "{shown}");
        }
        // Other errors keep toml's quote of the line.
        let text = "port = \"x\"\n";
        let e = toml::from_str::<FileConfig>(text).expect_err(text);
        assert!(toml_error(&e, text).contains("port = \"x\""));
    }
}
