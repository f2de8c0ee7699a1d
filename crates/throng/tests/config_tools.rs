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
    let pusher_at = text.find("\n[pusher]\n").expect("a [pusher] table");
    for flag in &flags {
        if flag == "--help" || flag == "--config" {
            continue;
        }
        let marker = format!("# ({flag}");
        let at = text
            .find(&marker)
            .unwrap_or_else(|| panic!("{flag} is missing from gen-config"));
        if flag.starts_with("--pusher-") {
            assert!(at > pusher_at, "{flag} belongs under [pusher]");
        } else if flag.starts_with("--hook-") {
            assert!(
                at > hooks_at && at < pusher_at,
                "{flag} belongs under [hooks]"
            );
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

/// `serve --config` reports bad keys as `check-config` does (one code path,
/// issue 38 item 3): each on its own line, at its line and column, with
/// the nearest known key, and a key of another table says where it
/// belongs.
#[test]
fn serve_and_check_config_report_bad_keys_alike() {
    let path = temp_file(
        "keys.toml",
        "port = 0\nidle_timout = 5\nhistory_size = 100\n[auth]\njwt_secert = \"x\"\n",
    );
    let file = path.to_str().unwrap();
    let (ok, _, serve_err) = throng(&["serve", "--config", file], &[]);
    assert!(!ok, "serve started with bad keys");
    let (ok, report, _) = throng(&["check-config", file], &[]);
    assert!(!ok, "{report}");
    for said in [
        format!("{file}:2:1: unknown key `idle_timout`; did you mean `idle_timeout`?"),
        format!(
            "{file}:3:1: unknown key `history_size`; history_size belongs in a [[topics]] table"
        ),
        format!("{file}:5:1: unknown key `jwt_secert` in [auth]; did you mean `jwt_secret`?"),
    ] {
        assert!(serve_err.contains(&said), "serve: {said:?} in\n{serve_err}");
        assert!(
            report.contains(&said),
            "check-config: {said:?} in\n{report}"
        );
    }
    // One per line.
    assert_eq!(
        serve_err.matches(": unknown key `").count(),
        3,
        "{serve_err}"
    );
}

/// A file a flag names that is not there names the flag (issue 38, item 3).
#[test]
fn a_missing_file_names_its_flag() {
    let dir = std::env::temp_dir();
    for (flag, other) in [
        ("--tls-cert", "--tls-key"),
        ("--api-tls-cert", "--api-tls-key"),
    ] {
        let (ok, _, err) = throng(
            &[
                "serve",
                "--port",
                "0",
                flag,
                "missing.pem",
                other,
                "missing.pem",
            ],
            &[],
        );
        assert!(!ok);
        assert!(
            err.contains(&format!("{flag} missing.pem: no such file")),
            "{err}"
        );
    }
    let missing = dir.join("throng-no-such-ca.pem");
    let (ok, _, err) = throng(
        &[
            "serve",
            "--port",
            "0",
            "--hook-url",
            "https://127.0.0.1:9/throng",
            "--hook-ca-file",
            missing.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "--hook-ca-file {}: no such file",
            missing.display()
        )),
        "{err}"
    );
}

/// Flags of the wrong form show the right one.
#[test]
fn presence_and_history_flags_of_the_wrong_form_show_an_example() {
    let (ok, _, err) = throng(&["serve", "--port", "0", "--presence", "rooms:lobby"], &[]);
    assert!(!ok);
    assert!(err.contains("--presence 'rooms:lobby=param:user'"), "{err}");
    let (ok, _, err) = throng(&["serve", "--port", "0", "--history", "rooms:*"], &[]);
    assert!(!ok);
    assert!(err.contains("--history 'rooms:*=100'"), "{err}");
    let (ok, _, err) = throng(
        &["serve", "--port", "0"],
        &[("THRONG_HISTORY", "rooms:*=100,feed:*=0")],
    );
    assert!(!ok);
    assert!(
        err.contains("--history \"feed:*=0\": SIZE must be 1..=10000"),
        "{err}"
    );
}

/// A rule over the chat channel's topics: check-config says how they
/// differ from the relay channel's, and what to do.
#[test]
fn check_config_warns_of_rules_over_the_chat_topics() {
    let path = temp_file(
        "rooms.toml",
        "[[topics]]\npattern = \"rooms:*\"\njoin = \"anyone\"\n[[topics]]\npattern = \"chat:*\"\n",
    );
    let (ok, report, err) = throng(&["check-config", path.to_str().unwrap()], &[]);
    assert!(ok, "{report}\n{err}");
    let warning = report
        .lines()
        .find(|l| l.starts_with("warning: [[topics]] pattern = \"rooms:*\""))
        .unwrap_or_else(|| panic!("no warning in\n{report}"));
    assert!(warning.contains("built-in chat"), "{warning}");
    assert!(warning.contains("use a prefix of your own"), "{warning}");
    assert!(!report.contains("pattern = \"chat:*\" covers"), "{report}");
}
