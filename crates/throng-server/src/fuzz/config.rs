//! Target `config_toml`: a config file as `throng serve --config` and
//! `throng check-config` read it: the bytes are written to a file, which
//! [`check_config`] reads as `serve` would (`ServeArgs::resolve`: the TOML,
//! the settings structs, `[[topics]]`, every range check), then reports.
//!
//! Asserts, beside no panic:
//! - check-config accepts the file exactly when `serve` resolves it;
//! - its report never shows a secret of the file (an `api_key`, a
//!   `*secret*` or `*password*` key, a Redis URL's password), accepted or
//!   refused: secrets never appear in an error or check-config's output.
//!
//! A file whose `bind` or `api_bind` is a host name (not an address) is
//! skipped: it would be resolved by DNS, which a fuzzer must not wait on.

use std::path::PathBuf;
use std::sync::OnceLock;

use clap::FromArgMatches as _;

use crate::config::{check_config, serve_command, ServeArgs};

/// A file of this process and thread to write inputs to.
fn scratch_file() -> PathBuf {
    let thread = format!("{:?}", std::thread::current().id());
    let name: String = thread.chars().filter(char::is_ascii_digit).collect();
    std::env::temp_dir().join(format!("throng-fuzz-{}-{name}.toml", std::process::id()))
}

/// `check-config FILE` with no flags, as the command line gives it.
fn check(path: &std::path::Path) -> crate::config::Checked {
    let matches = serve_command()
        .try_get_matches_from(["serve"])
        .expect("no flags parse");
    let args = ServeArgs::from_arg_matches(&matches).expect("no flags parse");
    check_config(path, args, &matches)
}

/// The report of an empty file: text a secret may match by chance.
fn baseline() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| {
        let path = scratch_file();
        std::fs::write(&path, "").expect("a scratch file");
        let c = check(&path);
        let _ = std::fs::remove_file(&path);
        c.report
    })
}

/// Feeds `data` as a config file; panics if an invariant breaks.
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return; // `serve` refuses a file that is not UTF-8 before reading it
    };
    let table: Option<toml::Table> = toml::from_str(text).ok();
    if table.as_ref().is_some_and(names_a_host) {
        return;
    }
    let path = scratch_file();
    std::fs::write(&path, data).expect("a scratch file");
    let checked = check(&path);
    let resolved = ServeArgs {
        config: Some(path.clone()),
        ..ServeArgs::default()
    }
    .resolve();
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        checked.ok,
        resolved.is_ok(),
        "check-config and serve disagree: {}",
        checked.report
    );
    let Some(table) = table else {
        return;
    };
    let base = baseline();
    for secret in secrets(&table) {
        // Only a secret that could not be in the report for another reason.
        if secret.len() < 8 || text.matches(&secret).count() != 1 || base.contains(&secret) {
            continue;
        }
        assert!(
            !checked.report.contains(&secret),
            "check-config shows the secret {secret:?}:\n{}",
            checked.report
        );
    }
}

/// Whether `bind` or `api_bind` is a host name, which resolving would look
/// up in DNS.
fn names_a_host(table: &toml::Table) -> bool {
    let bind = table.get("bind").and_then(|v| v.as_str());
    let api = table.get("api_bind").and_then(|v| v.as_str());
    bind.is_some_and(|b| b.parse::<std::net::IpAddr>().is_err())
        || api.is_some_and(|a| {
            !["none", "off", ""].contains(&a) && a.parse::<std::net::SocketAddr>().is_err()
        })
}

/// Every secret of the file: strings under a secret's key, at any depth,
/// and the password of a Redis URL.
fn secrets(table: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    for (key, value) in table {
        let secret = ["secret", "password", "api_key"]
            .iter()
            .any(|s| key.contains(s));
        if secret {
            strings(value, &mut out);
        } else if key == "redis" {
            if let Some(p) = value.as_str().and_then(redis_password) {
                out.push(p.to_string());
            }
        } else if let Some(inner) = value.as_table() {
            out.extend(secrets(inner));
        }
    }
    out
}

fn strings(v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::String(s) => out.push(s.clone()),
        toml::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        toml::Value::Table(t) => t.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// `p` of `scheme://u:p@host...` (or of `u:p@host` without a scheme).
fn redis_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    userinfo.split_once(':').map(|(_, p)| p)
}
