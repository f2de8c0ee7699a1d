//! `throng check-config FILE`: reads a config file as `throng serve`
//! would (flags and `THRONG_*` variables over the file over defaults,
//! through the same [`ServeArgs::resolve`]), and reports for a person or a
//! CI job: each unknown key with the nearest known one, the effective value
//! of every key and where it came from, and the warnings a start would log.
//! Exit code 0 when `serve` would accept the settings, 1 when not.

use std::fmt::Write as _;
use std::path::Path;

use clap::parser::ValueSource;
use clap::ArgMatches;

use super::template::{file_keys, FileKey, TABLE_ONLY};
use super::{Config, ServeArgs};

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
            let _ = writeln!(report, "error: {e}");
            for hint in unknown_keys(&table, &keys) {
                let _ = writeln!(report, "{hint}");
            }
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
        match effective(k, &table, matches) {
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

/// The value a key takes and where it came from, secrets masked.
/// `None`: not set, and its default is described rather than a value.
fn effective(
    k: &FileKey,
    file: &toml::Table,
    matches: &ArgMatches,
) -> Option<(String, &'static str)> {
    let from_args = matches
        .value_source(&k.id)
        .filter(|s| matches!(s, ValueSource::CommandLine | ValueSource::EnvVariable));
    let (value, source) = if let Some(source) = from_args {
        let raw: Vec<String> = matches
            .get_raw(&k.id)
            .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
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
        (value, source)
    } else if let Some(v) = lookup(file, k) {
        (v.to_string(), "file")
    } else {
        (k.default_value()?, "default")
    };
    Some((mask(k, value), source))
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

/// Each key of `file` that is no key of the config, with the nearest known
/// one when there is a close one.
pub fn unknown_keys(file: &toml::Table, keys: &[FileKey]) -> Vec<String> {
    let mut top: Vec<String> = keys
        .iter()
        .filter(|k| k.table.is_none())
        .map(|k| k.key.clone())
        .collect();
    top.extend(keys.iter().filter_map(|k| k.table.map(str::to_string)));
    top.extend(TABLE_ONLY.iter().map(|(k, _)| k.to_string()));
    let mut out = Vec::new();
    for (key, value) in file {
        if !top.contains(key) {
            // An `--auth-*` flag spelt as a top-level key: its table's key.
            let in_table = keys.iter().find(|k| {
                k.table
                    .is_some_and(|t| key == &format!("{t}_{}", k.key) || *key == k.key)
            });
            let hint = match in_table {
                Some(k) => format!(
                    "; it belongs in the [{}] table: [{0}] {} = ...",
                    k.table.unwrap_or_default(),
                    k.key
                ),
                None => nearest(key, top.iter().map(String::as_str))
                    .map(|n| format!("; did you mean `{n}`?"))
                    .unwrap_or_default(),
            };
            out.push(format!("unknown key `{key}`{hint}"));
            continue;
        }
        let Some(inner) = value.as_table() else {
            continue;
        };
        let known: Vec<&str> = keys
            .iter()
            .filter(|k| k.table == Some(key.as_str()))
            .map(|k| k.key.as_str())
            .collect();
        if known.is_empty() {
            continue;
        }
        for ik in inner.keys() {
            if !known.contains(&ik.as_str()) {
                let hint = nearest(ik, known.iter().copied())
                    .map(|n| format!("; did you mean `{n}`?"))
                    .unwrap_or_default();
                out.push(format!("unknown key `{ik}` in [{key}]{hint}"));
            }
        }
    }
    out
}

/// The known name closest to `key`, if it is close (a typo, not another word).
fn nearest<'a>(key: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    known
        .map(|k| (strsim::damerau_levenshtein(key, k), k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// What a start with `config` would warn about.
pub fn warnings(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(api) = config.api_bind {
        if config.api_key.is_none() && !api.ip().is_loopback() {
            out.push(format!(
                "the server API listens beyond loopback ({api}) with no api_key: anyone who \
                 reaches it can broadcast and disconnect users; set api_key or bind it to 127.0.0.1"
            ));
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_name_the_nearest() {
        let keys = file_keys();
        let file: toml::Table = toml::from_str(
            "idle_timout = 5\nport = 1\nauth_jwt_secret = \"x\"\nzzzzzzzz = 1\n[auth]\njwt_secert = \"y\"\n",
        )
        .unwrap();
        let found = unknown_keys(&file, &keys).join("\n");
        assert!(
            found.contains("unknown key `idle_timout`; did you mean `idle_timeout`?"),
            "{found}"
        );
        assert!(found.contains("[auth] jwt_secret"), "{found}");
        assert!(
            found.contains("`jwt_secert` in [auth]; did you mean `jwt_secret`?"),
            "{found}"
        );
        assert!(found.contains("unknown key `zzzzzzzz`\n") || found.ends_with("`zzzzzzzz`"));
        assert!(!found.contains("`port`"), "{found}");
    }
}
