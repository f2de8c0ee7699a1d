//! The weak-secret rule on the real binary (issue 38, item 1): `throng
//! serve` given an empty, 1-byte or one-byte-short secret, through its
//! flag, its environment variable or the config file, exits non-zero
//! without listening and says which setting, how long it was, and how to
//! make a good one; at the minimum it starts. The supervisor of
//! `--workers` refuses before it starts a worker; `check-config` shows a
//! weak secret by its length, never `[REDACTED]`, and exits 1; `throng
//! token` mints nothing with a secret the server would refuse.

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{throng_bin, Server};

/// A secret setting: its flag, variable, file table and key, the flags
/// that put it to use, and its minimum in bytes.
struct Secret {
    flag: &'static str,
    env: &'static str,
    table: Option<&'static str>,
    key: &'static str,
    uses: &'static [&'static str],
    minimum: usize,
}

const SECRETS: &[Secret] = &[
    Secret {
        flag: "--auth-jwt-secret",
        env: "THRONG_AUTH_JWT_SECRET",
        table: Some("auth"),
        key: "jwt_secret",
        uses: &["--auth", "jwt"],
        minimum: 32,
    },
    Secret {
        flag: "--auth-secret-key-base",
        env: "THRONG_AUTH_SECRET_KEY_BASE",
        table: Some("auth"),
        key: "secret_key_base",
        uses: &["--auth", "phoenix_token"],
        minimum: 20,
    },
    Secret {
        flag: "--hook-secret",
        env: "THRONG_HOOK_SECRET",
        table: Some("hooks"),
        key: "secret",
        uses: &["--hook-url", "http://127.0.0.1:9/throng"],
        minimum: 32,
    },
    Secret {
        flag: "--api-key",
        env: "THRONG_API_KEY",
        table: None,
        key: "api_key",
        uses: &[],
        minimum: 16,
    },
];

/// How a secret is given.
#[derive(Clone, Copy, Debug)]
enum Via {
    Flag,
    Env,
    File,
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("throng-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `throng ARGS` with `env`, and every secret variable not given removed.
fn command(args: &[String], env: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(throng_bin());
    cmd.args(args).stdin(Stdio::null());
    for s in SECRETS {
        cmd.env_remove(s.env);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// `throng serve` with `secret` set to `value` via `via`: its arguments
/// and environment.
fn serve_with(
    secret: &Secret,
    value: &str,
    via: Via,
) -> (Vec<String>, Vec<(&'static str, String)>) {
    let mut args: Vec<String> = ["serve", "--port", "0", "--bind", "127.0.0.1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(secret.uses.iter().map(|s| s.to_string()));
    let mut env = Vec::new();
    match via {
        Via::Flag => args.extend([secret.flag.to_string(), value.to_string()]),
        Via::Env => env.push((secret.env, value.to_string())),
        Via::File => {
            let text = match secret.table {
                Some(t) => format!("[{t}]\n{} = {:?}\n", secret.key, value),
                None => format!("{} = {:?}\n", secret.key, value),
            };
            let name = format!("{}-{}.toml", secret.key, value.len());
            args.extend(["--config".to_string(), path_text(&temp_file(&name, &text))]);
        }
    }
    (args, env)
}

fn path_text(p: &std::path::Path) -> String {
    p.to_str().unwrap().to_string()
}

/// Runs a command that must exit by itself within 20 s (a refused start);
/// (exit code, stdout, stderr). Killed, and the test failed, if it does not.
fn run_to_exit(mut cmd: Command) -> (Option<i32>, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start throng");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            panic!("still running after 20 s (it should have refused to start): {out}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), out, err)
}

#[test]
fn weak_secrets_never_start_a_server() {
    for secret in SECRETS {
        for via in [Via::Flag, Via::Env, Via::File] {
            for len in [0, 1, secret.minimum - 1] {
                // No "QQ" in any message: the value, once 2 bytes long, would show.
                let value = "Q".repeat(len);
                let (args, env) = serve_with(secret, &value, via);
                let (code, out, err) = run_to_exit(command(&args, &env));
                let what = format!("{} of {len} bytes via {via:?}", secret.flag);
                assert_eq!(code, Some(1), "{what}: exit code\n{err}");
                assert!(!out.contains("listening on"), "{what}: it listened\n{out}");
                assert!(
                    !err.contains("open-files limit"),
                    "{what}: it started\n{err}"
                );
                let state = if len == 0 {
                    "(empty)".to_string()
                } else {
                    format!("({len} bytes: too short, needs {})", secret.minimum)
                };
                for says in [secret.flag, secret.env, &state, "openssl rand -base64 48"] {
                    assert!(err.contains(says), "{what}: no {says:?} in\n{err}");
                }
                if let Via::File = via {
                    assert!(
                        err.contains(secret.key) && err.contains(".toml"),
                        "{what}\n{err}"
                    );
                }
                if len > 1 {
                    assert!(
                        !err.contains(&value),
                        "{what}: the value is in the error\n{err}"
                    );
                }
            }
        }
    }
}

#[test]
fn secrets_at_the_minimum_start() {
    for secret in SECRETS {
        for via in [Via::Flag, Via::Env, Via::File] {
            let value = "m".repeat(secret.minimum);
            let (args, env) = serve_with(secret, &value, via);
            let args: Vec<&str> = args[1..].iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            // Waits for `listening on` (and panics if it exits first); killed when dropped.
            let server = Server::start_exact_env(&args, &env, Stdio::null());
            assert!(server.addr.port() > 0, "{} via {via:?}", secret.flag);
        }
    }
}

#[test]
fn the_supervisor_refuses_before_starting_workers() {
    let args: Vec<String> = [
        "serve",
        "--port",
        "0",
        "--workers",
        "2",
        "--redis",
        "redis://127.0.0.1:9",
        "--auth",
        "jwt",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (code, out, err) = run_to_exit(command(
        &args,
        &[("THRONG_AUTH_JWT_SECRET", "w".repeat(31))],
    ));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("THRONG_AUTH_JWT_SECRET") && err.contains("(31 bytes: too short, needs 32)"),
        "{err}"
    );
    // Nothing was started: no worker, no port, no Redis connection tried.
    assert!(!out.contains("listening on"), "{out}");
    assert!(!err.to_lowercase().contains("worker"), "{err}");
    assert!(!err.contains("redis"), "{err}");
}

fn check_config(file_text: &str, name: &str, env: &[(&str, String)]) -> (Option<i32>, String) {
    let path = temp_file(name, file_text);
    let args = vec!["check-config".to_string(), path_text(&path)];
    let (code, out, err) = run_to_exit(command(&args, env));
    (code, format!("{out}{err}"))
}

#[test]
fn check_config_shows_a_weak_secret_by_its_length_and_fails() {
    for (value, state) in [
        ("", "(empty)".to_string()),
        (
            "twelve-bytes",
            "(12 bytes: too short, needs 32)".to_string(),
        ),
    ] {
        let file = format!("[auth]\nmode = \"jwt\"\njwt_secret = {value:?}\n");
        let (code, report) = check_config(&file, "weak.toml", &[]);
        assert_eq!(code, Some(1), "{report}");
        assert!(report.contains(&state), "{state} in\n{report}");
        assert!(report.contains("[auth] jwt_secret"), "{report}");
        assert!(!report.contains("[REDACTED]"), "{report}");
        assert!(value.is_empty() || !report.contains(value), "{report}");
    }
    // Set but empty in the environment: refused, not taken for unset.
    let (code, report) = check_config(
        "[auth]\nmode = \"jwt\"\n",
        "env.toml",
        &[("THRONG_AUTH_JWT_SECRET", String::new())],
    );
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains("THRONG_AUTH_JWT_SECRET") && report.contains("(empty)"),
        "{report}"
    );
    assert!(report.contains("set but empty"), "{report}");
    // A good one is still masked; a short Phoenix key base is warned about.
    let good = "g".repeat(32);
    let file = format!(
        "[auth]\nmode = \"jwt\"\njwt_secret = \"{good}\"\nsecret_key_base = \"{}\"\n",
        "k".repeat(40)
    );
    let (code, report) = check_config(&file, "good.toml", &[]);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains("jwt_secret = \"[REDACTED]\"  # file"),
        "{report}"
    );
    assert!(!report.contains(&good), "{report}");
    assert!(
        report.contains("warning: the Phoenix secret_key_base") && report.contains("40 bytes"),
        "{report}"
    );
}

#[test]
fn throng_token_mints_nothing_with_a_secret_the_server_would_refuse() {
    let token = |args: &[&str], env: &[(&str, String)]| {
        let mut all = vec!["token".to_string()];
        all.extend(args.iter().map(|s| s.to_string()));
        run_to_exit(command(&all, env))
    };
    let (code, out, err) = token(&["--mode", "jwt", "--jwt-secret", "short"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "a token was printed: {out}");
    assert!(err.contains("(5 bytes: too short, needs 32)"), "{err}");
    let (code, out, err) = token(
        &["--mode", "jwt"],
        &[("THRONG_AUTH_JWT_SECRET", String::new())],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty() && err.contains("(empty)"), "{out}{err}");
    let (code, _, err) = token(
        &[
            "--mode",
            "phoenix_token",
            "--auth-secret-key-base",
            &"k".repeat(19),
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("(19 bytes: too short, needs 20)"), "{err}");
    // At the minimum it mints (`--auth-jwt-secret`, serve's spelling, works too).
    let (code, out, err) = token(
        &["--mode", "jwt", "--auth-jwt-secret", &"g".repeat(32)],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim().split('.').count(), 3, "{out}");
}
