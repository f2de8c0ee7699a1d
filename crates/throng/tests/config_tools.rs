//! `throng gen-config` and `throng check-config` (issue 26, item 5) on the
//! real binary: the generated file passes the check, every flag of
//! `serve --help` is in it (the `--auth-*` ones under `[auth]`), a
//! misspelt key is refused with the nearest known name, and flags and
//! `THRONG_*` variables show as the source of what they set.

mod common;

use std::process::{Command, Stdio};

use common::throng_bin;

fn throng(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(throng_bin());
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run throng");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("throng-config-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The long flags `serve --help` lists.
fn help_flags() -> Vec<String> {
    let (ok, help, err) = throng(&["serve", "--help"], &[]);
    assert!(ok, "{err}");
    let mut flags = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        let t = match t.split_once(", ") {
            Some((short, rest)) if short.starts_with('-') && short.len() == 2 => rest,
            _ => t,
        };
        if let Some(rest) = t.strip_prefix("--") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            flags.push(format!("--{name}"));
        }
    }
    flags
}

#[test]
fn gen_config_has_every_flag_and_passes_check_config() {
    let (ok, text, err) = throng(&["gen-config"], &[]);
    assert!(ok, "{err}");
    let flags = help_flags();
    assert!(flags.len() > 40, "flags read off --help: {flags:?}");
    let auth_at = text.find("\n[auth]\n").expect("an [auth] table");
    let hooks_at = text.find("\n[hooks]\n").expect("a [hooks] table");
    for flag in &flags {
        if flag == "--help" || flag == "--config" {
            continue;
        }
        let marker = format!("# ({flag}");
        let at = text
            .find(&marker)
            .unwrap_or_else(|| panic!("{flag} is missing from gen-config"));
        if flag.starts_with("--hook-") {
            assert!(at > hooks_at, "{flag} belongs under [hooks]");
        } else if flag == "--auth" || flag.starts_with("--auth-") {
            assert!(at > auth_at && at < hooks_at, "{flag} belongs under [auth]");
        } else {
            assert!(at < auth_at, "{flag} is a top-level key");
        }
    }
    let path = temp_file("generated.toml", &text);
    let (ok, report, err) = throng(&["check-config", path.to_str().unwrap()], &[]);
    assert!(
        ok,
        "check-config refused gen-config's file:\n{report}\n{err}"
    );
    assert!(report.contains("accepted"), "{report}");
    assert!(report.contains("idle_timeout = 60  # file"), "{report}");
}

#[test]
fn check_config_refuses_a_misspelt_key_and_names_the_right_one() {
    let path = temp_file("typo.toml", "idle_timout = 5\n[auth]\njwt_secert = \"x\"\n");
    let (ok, report, _) = throng(&["check-config", path.to_str().unwrap()], &[]);
    assert!(!ok, "a misspelt key must fail the check:\n{report}");
    assert!(
        report.contains("unknown key `idle_timout`; did you mean `idle_timeout`?"),
        "{report}"
    );
    assert!(
        report.contains("unknown key `jwt_secert` in [auth]; did you mean `jwt_secret`?"),
        "{report}"
    );
    let bad = temp_file("bad.toml", "port = \"many\"\n");
    let (ok, report, _) = throng(&["check-config", bad.to_str().unwrap()], &[]);
    assert!(!ok && report.contains("refused"), "{report}");
}

#[test]
fn check_config_shows_sources_masks_secrets_and_warns_as_a_start_would() {
    let path = temp_file(
        "sources.toml",
        "port = 4100\napi_bind = \"0.0.0.0:4999\"\n[auth]\nmode = \"jwt\"\njwt_secret = \"s3cret-s3cret-s3cret-s3cret-s3cret\"\n",
    );
    let (ok, report, err) = throng(
        &["check-config", path.to_str().unwrap(), "--shards", "3"],
        &[("THRONG_IDLE_TIMEOUT", "7")],
    );
    assert!(ok, "{report}\n{err}");
    for line in [
        "port = 4100  # file",
        "shards = 3  # flag",
        "idle_timeout = 7  # env",
        "drain_seconds = 10  # default",
        "jwt_secret = \"[REDACTED]\"  # file",
    ] {
        assert!(report.contains(line), "{line:?} in\n{report}");
    }
    assert!(!report.contains("s3cret"), "{report}");
    assert!(
        report.contains("warning: the server API listens beyond loopback"),
        "{report}"
    );
}
