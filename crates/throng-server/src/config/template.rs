//! The config file's keys, read off `throng serve`'s own flag definitions
//! ([`ServeArgs`]'s clap command), and `throng gen-config`: a complete,
//! commented TOML file with every key and its default. One definition per
//! setting, as ripgrep generates its help and man page from one list of
//! flag definitions (its crates/core/flags/defs.rs): a new flag appears
//! here by itself, with the help and `[default: ...]` that `--help` shows,
//! so the two cannot drift.
//!
//! A flag's key is its long name with underscores (`--idle-timeout` is
//! `idle_timeout`), except the `--auth-*` flags, which are keys of the
//! `[auth]` table (`--auth-jwt-secret` is `jwt_secret`, `--auth` is
//! `mode`), and the `--hook-*` flags, keys of the `[hooks]` table
//! (`--hook-timeout-ms` is `timeout_ms`), and a `--no-*` switch, whose key
//! is what it turns off (`--no-deflate` is `deflate = false`). Flags that are not file keys: `--config` itself and hidden ones
//! (test and worker plumbing). Keys with no flag (`[[topics]]`,
//! `[[presence]]` tables) are [`TABLE_ONLY`].

use clap::{Arg, ArgAction, Args, Command};

use super::ServeArgs;

/// A flag whose key lives in a table instead of the top level: the flag's
/// prefix, the table, and the key the bare prefix flag sets.
const TABLES: &[(&str, &str, &str)] = &[
    ("auth", "auth", "mode"),
    ("hook", "hooks", "url"),
    ("pusher", "pusher", "app"),
];

/// Flags that are no file keys.
const NOT_KEYS: &[&str] = &["config"];

/// Top-level keys with no flag: arrays of tables, each with an example.
pub const TABLE_ONLY: &[(&str, &str)] = &[
    (
        "topics",
        "# Topic rules: who may join and push where (docs/topic-rules.md).\n\
         # [[topics]]\n\
         # pattern = \"rooms:*\"\n\
         # join = \"anyone\"\n\
         # push = [\"new:msg\"]\n\
         # history_size = 100   # messages kept for recovery on rejoin (docs/history.md)\n\
         # history_ttl = 600    # seconds kept after the topic's last message\n",
    ),
    (
        "presence",
        "# Presence rules, as --presence PATTERN=KEY[/count] (docs/presence.md).\n\
         # [[presence]]\n\
         # pattern = \"rooms:*\"\n\
         # key = \"user_id\"\n\
         # mode = \"count\"\n",
    ),
];

/// One key of the config file, from its flag.
#[derive(Debug, Clone)]
pub struct FileKey {
    /// `None`: a top-level key; else the table it belongs to.
    pub table: Option<&'static str>,
    pub key: String,
    /// The flag, with its dashes (`--idle-timeout`).
    pub flag: String,
    /// clap's id of the argument (for its value source).
    pub id: String,
    pub env: Option<String>,
    pub heading: Option<String>,
    /// The help, without its `[default: ...]`.
    pub help: String,
    /// The text of `[default: ...]`, if the help has one.
    pub default: Option<String>,
    /// A switch (`--echo`): `false` unless given.
    pub switch: bool,
    /// A switch that turns something off (`--no-deflate`): its key is the
    /// thing (`deflate`), `true` unless the flag is given.
    pub negated: bool,
    pub value_name: Option<String>,
}

impl FileKey {
    /// `table.key` or `key`, as a person names it.
    pub fn path(&self) -> String {
        match self.table {
            Some(t) => format!("{t}.{}", self.key),
            None => self.key.clone(),
        }
    }

    /// The default as a TOML value, when it is one: a number, a switch's
    /// `false`, or a single word; `None` when the default is described
    /// rather than given ("number of cores", "none").
    pub fn default_value(&self) -> Option<String> {
        if self.switch {
            return Some((if self.negated { "true" } else { "false" }).into());
        }
        let d = self.default.as_deref()?.trim();
        if d.is_empty() || d == "none" || d.contains(' ') || d.contains(',') || d.starts_with('-') {
            return None;
        }
        if d.parse::<f64>().is_ok() || d == "true" || d == "false" {
            return Some(d.to_string());
        }
        Some(toml::Value::String(d.to_string()).to_string())
    }
}

/// `throng serve`'s command, as clap builds it for `--help`.
pub fn serve_command() -> Command {
    ServeArgs::augment_args(Command::new("serve"))
}

/// Every config file key that a flag sets, in `--help`'s order.
pub fn file_keys() -> Vec<FileKey> {
    serve_command()
        .get_arguments()
        .filter_map(file_key)
        .collect()
}

fn file_key(arg: &Arg) -> Option<FileKey> {
    let long = arg.get_long()?;
    if arg.is_hide_set() || NOT_KEYS.contains(&long) {
        return None;
    }
    let (table, key) = match TABLES
        .iter()
        .find(|(prefix, _, _)| long == *prefix || long.starts_with(&format!("{prefix}-")))
    {
        Some((prefix, table, bare)) if long == *prefix => (Some(*table), bare.to_string()),
        Some((prefix, table, _)) => (Some(*table), long[prefix.len() + 1..].replace('-', "_")),
        None => (None, long.replace('-', "_")),
    };
    let switch = matches!(arg.get_action(), ArgAction::SetTrue);
    let negated = switch && key.starts_with("no_");
    let key = if negated { key[3..].to_string() } else { key };
    let text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let (help, default) = match text.rfind("[default: ") {
        Some(at) if text.ends_with(']') => (
            text[..at].trim_end().to_string(),
            Some(text[at + "[default: ".len()..text.len() - 1].to_string()),
        ),
        _ => (text, None),
    };
    Some(FileKey {
        table,
        key,
        flag: format!("--{long}"),
        id: arg.get_id().to_string(),
        env: arg.get_env().map(|e| e.to_string_lossy().into_owned()),
        heading: arg.get_help_heading().map(str::to_string),
        help,
        default,
        switch,
        negated,
        value_name: arg
            .get_value_names()
            .and_then(|v| v.first())
            .map(|v| v.to_string()),
    })
}

/// Wraps `text` into `# ` comment lines of about 78 columns.
fn comment(out: &mut String, text: &str) {
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > 78 && line.len() > 1 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
}

fn entry(out: &mut String, k: &FileKey) {
    comment(out, &k.help);
    let env = k
        .env
        .as_deref()
        .map(|e| format!(", env {e}"))
        .unwrap_or_default();
    if super::secrets::kind_of_key(&k.path(), None).is_some() {
        // A secret: a fresh one, long enough for every minimum of the
        // weak-secret rule, commented out like any unset key.
        out.push_str(&format!("# ({}{env}; default: unset)\n", k.flag));
        match crate::auth::secret::generate() {
            Ok(fresh) => {
                out.push_str("# A fresh random value, made for this file; uncomment to use it:\n");
                out.push_str(&format!("# {} = \"{fresh}\"\n\n", k.key));
            }
            Err(_) => {
                out.push_str(&format!(
                    "# {} = \"...\"   # {}\n\n",
                    k.key,
                    crate::auth::secret::HOW_TO_MAKE_ONE
                ));
            }
        }
        return;
    }
    match (k.default_value(), &k.default) {
        (Some(v), _) => {
            out.push_str(&format!("# ({}{env})\n", k.flag));
            out.push_str(&format!("{} = {v}\n\n", k.key));
        }
        (None, described) => {
            let default = described.as_deref().unwrap_or("unset");
            out.push_str(&format!("# ({}{env}; default: {default})\n", k.flag));
            let value = k.value_name.as_deref().unwrap_or("VALUE");
            out.push_str(&format!("# {} = {value}\n\n", k.key));
        }
    }
}

/// The whole commented config file (`throng gen-config`).
pub fn gen_config() -> String {
    let keys = file_keys();
    let mut out = String::new();
    out.push_str(
        "# throng serve's settings, every key with its default (generated by\n\
         # `throng gen-config` from the same definitions as `throng serve --help`).\n\
         # Use with `throng serve --config FILE`; check with `throng check-config FILE`.\n\
         # Flags and THRONG_* variables win over this file. Keys whose default is\n\
         # described rather than a value (\"number of cores\") are commented out.\n\n",
    );
    // Grouped as --help groups them, in the order of each group's first flag.
    let top: Vec<&FileKey> = keys.iter().filter(|k| k.table.is_none()).collect();
    let mut headings: Vec<Option<&str>> = Vec::new();
    for k in &top {
        if !headings.contains(&k.heading.as_deref()) {
            headings.push(k.heading.as_deref());
        }
    }
    for h in headings {
        out.push_str(&format!("# ---- {} ----\n\n", h.unwrap_or("General")));
        for k in top.iter().filter(|k| k.heading.as_deref() == h) {
            entry(&mut out, k);
        }
    }
    for (_, example) in TABLE_ONLY {
        out.push_str(example);
        out.push('\n');
    }
    for (_, table, _) in TABLES {
        out.push_str(&format!("[{table}]\n\n"));
        for k in keys.iter().filter(|k| k.table == Some(table)) {
            entry(&mut out, k);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_flags() {
        let keys = file_keys();
        let find = |p: &str| keys.iter().find(|k| k.path() == p).cloned();
        let idle = find("idle_timeout").expect("idle_timeout");
        assert_eq!(idle.flag, "--idle-timeout");
        assert_eq!(idle.default_value().as_deref(), Some("60"));
        assert!(!idle.help.contains("[default"), "{}", idle.help);
        assert_eq!(find("auth.mode").expect("auth.mode").flag, "--auth");
        assert_eq!(
            find("auth.jwt_secret").expect("jwt_secret").flag,
            "--auth-jwt-secret"
        );
        assert!(find("config").is_none() && find("worker_index").is_none());
        assert_eq!(
            find("echo").unwrap().default_value().as_deref(),
            Some("false")
        );
        let deflate = find("deflate").expect("deflate");
        assert_eq!(deflate.flag, "--no-deflate");
        assert_eq!(deflate.default_value().as_deref(), Some("true"));
        // Described defaults are not values.
        assert_eq!(find("shards").unwrap().default_value(), None);
    }

    #[test]
    fn the_secrets_it_writes_pass_the_weak_secret_rule() {
        let text = gen_config();
        let mut found = Vec::new();
        let mut table = None;
        for line in text.lines() {
            if let Some(t) = line.strip_prefix('[') {
                table = t.strip_suffix(']');
            }
            let Some((key, value)) = line.strip_prefix("# ").and_then(|l| l.split_once(" = "))
            else {
                continue;
            };
            let path = match table {
                Some(t) => format!("{t}.{key}"),
                None => key.to_string(),
            };
            if let Some(kind) = super::super::secrets::kind_of_key(&path, Some("HS512")) {
                let value: String = toml::from_str::<toml::Table>(&format!("v = {value}"))
                    .expect("a TOML string")["v"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let source = crate::auth::secret::Source::Settings;
                assert_eq!(
                    crate::auth::secret::check(kind, &value, &source),
                    crate::auth::secret::Verdict::Ok,
                    "{path}"
                );
                found.push(path);
            }
        }
        assert_eq!(
            found,
            [
                "api_key",
                "auth.secret_key_base",
                "auth.jwt_secret",
                "hooks.secret"
            ]
        );
    }

    #[test]
    fn the_file_parses_as_toml_and_tables_come_last() {
        let text = gen_config();
        let table: toml::Table = toml::from_str(&text).expect("valid TOML");
        assert!(table.contains_key("port"));
        assert!(table["auth"].is_table());
        assert!(text.contains("\n# idle_timeout") || text.contains("\nidle_timeout = 60\n"));
    }
}
