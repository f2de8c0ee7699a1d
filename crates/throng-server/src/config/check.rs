//! `throng check-config FILE`: reads a config file as `throng serve`
//! would (flags and `THRONG_*` variables over the file over defaults,
//! through the same [`ServeArgs::resolve`]), and reports for a person or a
//! CI job: each unknown key with the nearest known one, the effective value
//! of every key and where it came from, and the warnings a start would log.
//! Secrets are never printed: one the weak-secret rule refuses is the error
//! (`(empty)`, `(12 bytes: too short, needs 32)`, never `[REDACTED]`), a
//! good one shows as `[REDACTED]`.
//! Exit code 0 when `serve` would accept the settings, 1 when not.

use std::fmt::Write as _;
use std::path::Path;

use clap::parser::ValueSource;
use clap::ArgMatches;

use super::template::{file_keys, FileKey, TABLE_ONLY};
use super::{Config, ServeArgs};
use crate::auth::secret;

/// What `check-config` found: the report to print, and whether `serve`
/// would start with these settings.
pub struct Checked {
    pub report: String,
    pub ok: bool,
}

/// Checks `file` with the flags and variables in `args` / `matches` (the
/// `check-config` subcommand's, which takes `serve`'s flags).
pub fn check_config(file: &Path, mut args: ServeArgs, matches: &ArgMatches) -> Checked {
    let mut report = String::new();
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(report, "error: cannot read {}: {e}", file.display());
            return Checked { report, ok: false };
        }
    };
    let table: toml::Table = match toml::from_str(&text) {
        Ok(t) => t,
        Err(e) => {
            let e = super::file::toml_error(&e, &text);
            let _ = writeln!(report, "error: {} is not valid TOML: {e}", file.display());
            return Checked { report, ok: false };
        }
    };
    let keys = file_keys();
    args.config = Some(file.to_path_buf());
    let config = match args.resolve() {
        Ok(c) => c,
        Err(e) => {
            // Unknown keys included, each at its line, as `serve` says them
            // (the same `ServeArgs::resolve`, `keys.rs`).
            let _ = writeln!(report, "error: {e}");
            let _ = writeln!(
                report,
                "\n{}: refused; `throng serve` would not start with it",
                file.display()
            );
            return Checked { report, ok: false };
        }
    };
    let _ = writeln!(
        report,
        "# {}: accepted. Effective settings (source: flag, env, file or default):\n",
        file.display()
    );
    let _ = writeln!(
        report,
        "# resolved: listening on {}, {} shards, {} worker(s), server API {}, auth {}, \
         cluster {}\n",
        config.addr,
        config.shards,
        config.workers,
        config.api_bind.map_or("off".to_string(), |a| a.to_string()),
        config.auth.mode.name(),
        config.redis.as_deref().map_or(
            "off (a single node)".to_string(),
            throng_pubsub::link::redact
        ),
    );
    // Top-level keys first, then each table's: the order TOML needs.
    let mut ordered: Vec<&FileKey> = keys.iter().filter(|k| k.table.is_none()).collect();
    ordered.extend(keys.iter().filter(|k| k.table.is_some()));
    let mut table_open: Option<&str> = None;
    for k in ordered {
        if k.table != table_open {
            table_open = k.table;
            if let Some(t) = k.table {
                let _ = writeln!(report, "\n[{t}]");
            }
        }
        match effective(k, &table, matches, config.auth.jwt_algorithm.as_deref()) {
            Some((value, source)) => {
                let _ = writeln!(report, "{} = {value}  # {source}", k.key);
            }
            None => {
                let default = k.default.as_deref().unwrap_or("none");
                let _ = writeln!(report, "# {} not set (default: {default})", k.key);
            }
        }
    }
    for (key, _) in TABLE_ONLY {
        if let Some(v) = table.get(*key).and_then(|v| v.as_array()) {
            let _ = writeln!(report, "# [[{key}]]: {} from the file", v.len());
        }
    }
    if let Ok(limit) = crate::sys::raise_fd_limit() {
        let _ = writeln!(
            report,
            "\n# here, the open-files limit {limit} allows about {} connections per process",
            limit.saturating_sub(crate::FD_MARGIN)
        );
    }
    let warnings = warnings(&config);
    if warnings.is_empty() {
        let _ = writeln!(report, "\n# no warnings");
    }
    for w in warnings {
        let _ = writeln!(report, "\nwarning: {w}");
    }
    Checked { report, ok: true }
}

/// The value a key takes and where it came from, secrets masked (a secret
/// of the weak-secret rule by its length, against `jwt_algorithm`'s
/// minimum for the JWT secret). `None`: not set, and its default is
/// described rather than a value.
fn effective(
    k: &FileKey,
    file: &toml::Table,
    matches: &ArgMatches,
    jwt_algorithm: Option<&str>,
) -> Option<(String, &'static str)> {
    let from_args = matches
        .value_source(&k.id)
        .filter(|s| matches!(s, ValueSource::CommandLine | ValueSource::EnvVariable));
    let (value, source, raw) = if let Some(source) = from_args {
        let raw: Vec<String> = matches
            .get_raw(&k.id)
            .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let one = raw.first().cloned();
        let value = if k.switch {
            (if k.negated { "false" } else { "true" }).to_string()
        } else {
            raw.iter()
                .map(|r| as_toml(r))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let source = if source == ValueSource::CommandLine {
            "flag"
        } else {
            "env"
        };
        (value, source, one)
    } else if let Some(v) = lookup(file, k) {
        (v.to_string(), "file", v.as_str().map(str::to_string))
    } else {
        (k.default_value()?, "default", None)
    };
    let value = match super::secrets::kind_of_key(&k.path(), jwt_algorithm) {
        // `(empty)`, `(12 bytes: too short, needs 32)`, or `[REDACTED]`.
        Some(kind) => match raw {
            Some(raw) => toml::Value::String(secret::shown(kind, &raw)).to_string(),
            None => mask(k, value),
        },
        None => mask(k, value),
    };
    Some((value, source))
}

/// A raw flag value as TOML: numbers and booleans bare, the rest quoted.
fn as_toml(raw: &str) -> String {
    if raw.parse::<f64>().is_ok() || raw == "true" || raw == "false" {
        raw.to_string()
    } else {
        toml::Value::String(raw.to_string()).to_string()
    }
}

fn lookup<'a>(file: &'a toml::Table, k: &FileKey) -> Option<&'a toml::Value> {
    match k.table {
        Some(t) => file.get(t)?.as_table()?.get(&k.key),
        None => file.get(&k.key),
    }
}

/// Secrets never printed: keys, secrets, passwords; a Redis URL's password.
fn mask(k: &FileKey, value: String) -> String {
    let secret = ["secret", "password", "api_key"]
        .iter()
        .any(|s| k.key.contains(s));
    if secret {
        return "\"[REDACTED]\"".into();
    }
    if k.key == "redis" {
        return throng_pubsub::link::redact(&value);
    }
    value
}

/// What a start with `config` would warn about.
pub fn warnings(config: &Config) -> Vec<String> {
    let mut out = config.secret_warnings.clone();
    if let Some(api) = config.api_bind {
        if config.api_key.is_none() && !api.ip().is_loopback() {
            out.push(format!(
                "the server API listens beyond loopback ({api}) with no api_key: anyone who \
                 reaches it can broadcast and disconnect users; set api_key or bind it to 127.0.0.1"
            ));
        }
    }
    out.extend(crate::rules::chat::rule_warnings(&config.topics));
    if let Ok(limit) = crate::sys::raise_fd_limit() {
        let room = limit.saturating_sub(crate::FD_MARGIN);
        let cap = config.limits.max_connections as u64;
        if cap > room {
            out.push(format!(
                "max_connections ({cap}) is above what the open-files limit here ({limit}) \
                 allows (about {room} connections per process): raise the limit (ulimit -n, \
                 LimitNOFILE= in systemd, --ulimit nofile=N:N for a container) where the \
                 server runs, or lower max_connections"
            ));
        }
    }
    out
}
