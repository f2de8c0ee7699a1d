//! What a supervisor hands each worker process: the same settings it was
//! given ([`Config::settings`], flags over the file), passed on as
//! `throng serve` arguments by [`ServeArgs::pass_on`](super::ServeArgs)
//! (which every `settings!` struct has: no flag is forwarded by hand),
//! secrets in the worker's environment, and the few values the supervisor
//! decides for it (port, shards, API port, index). Kept with its
//! round-trip test, apart from loading.

use super::Config;
use crate::setting::PassOn;

impl Config {
    /// The command line and environment of worker `index` on the
    /// supervisor's chosen `port`.
    fn worker(&self, index: usize, port: u16) -> PassOn {
        let mut s = self.settings.clone();
        s.config = None;
        s.port = Some(port);
        // Resolved here: a worker's own default would count every core.
        s.shards = Some(self.shards);
        s.workers = Some(1);
        s.worker_index = Some(index);
        // Each worker its own API port: PORT+i (or any free one).
        s.api_bind = Some(match self.api_bind {
            Some(mut addr) => {
                if addr.port() != 0 {
                    addr.set_port(addr.port().saturating_add(index as u16));
                }
                addr.to_string()
            }
            None => "none".into(),
        });
        let mut out = PassOn {
            args: vec!["serve".into()],
            env: Vec::new(),
        };
        s.pass_on(&mut out);
        out
    }

    /// Secrets for worker `index`, passed in its environment rather than on
    /// its command line (where `ps` shows them): every setting whose env
    /// value `--help` hides (the auth secrets, the API and hook keys, the
    /// Redis URL with its password, the `[[topics]]` rules as JSON).
    pub fn worker_env(&self) -> Vec<(String, String)> {
        self.worker(0, 0).env
    }

    /// The `throng serve` arguments that make worker `index` of a supervisor:
    /// every setting given to the supervisor (so a worker reads no config
    /// file), on the supervisor's chosen `port`.
    pub fn worker_args(&self, index: usize, port: u16) -> Vec<String> {
        self.worker(index, port).args
    }
}

/// What worker `index` on `port` resolves from the command line
/// [`Config::worker_args`] gives it, parsed as `throng serve` would.
#[cfg(test)]
pub(super) fn as_worker(c: &Config, index: usize, port: u16) -> Config {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }
    #[derive(clap::Subcommand)]
    enum Cmd {
        Serve(super::ServeArgs),
    }
    let argv = std::iter::once("throng".to_string()).chain(c.worker_args(index, port));
    let Cmd::Serve(args) = <Cli as clap::Parser>::parse_from(argv).cmd;
    args.resolve().unwrap()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::ServeArgs;
    use super::as_worker;
    use crate::limits::LimitArgs;

    #[test]
    fn worker_args_round_trip() {
        // The files a setting names must be there (`files.rs`).
        let dir = std::env::temp_dir().join(format!("throng-workers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, "").unwrap();
        std::fs::write(&key, "").unwrap();
        let c = ServeArgs {
            workers: Some(3),
            shards: Some(2),
            idle_timeout: Some(0),
            echo: true,
            redis: Some("redis://:s3cret@127.0.0.1:7000".into()),
            max_channels_per_socket: Some(7),
            limits: LimitArgs {
                drain_seconds: Some(3),
                max_connections_per_ip: Some(9),
                ..Default::default()
            },
            longpoll_window: Some(3),
            max_longpoll_batch: Some(9),
            hooks: crate::config::HookArgs {
                url: Some("http://127.0.0.1:8000/throng".into()),
                secret: Some("hook-s3cret-of-at-least-32-bytes".into()),
                timeout_ms: Some(70),
                max_in_flight_per_socket: Some(3),
                ..Default::default()
            },
            auth: crate::config::AuthArgs {
                max_age: Some("0.25".parse().unwrap()),
                jwt_audience: Some("throng".into()),
                jwt_issuer: Some("https://auth.example".into()),
                ..Default::default()
            },
            tls_cert: Some(cert),
            tls_key: Some(key),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        let w = as_worker(&c, 1, 4321);
        assert_eq!(w.addr.port(), 4321);
        assert_eq!((w.workers, w.worker_index, w.shards), (1, Some(1), 2));
        assert_eq!(w.idle_timeout, None);
        // The Redis URL (and its password) goes in the environment, not on
        // the command line where `ps` shows it.
        assert!(!c.worker_args(1, 4321).iter().any(|a| a.contains("s3cret")));
        assert!(c.worker_env().contains(&(
            "THRONG_REDIS".into(),
            "redis://:s3cret@127.0.0.1:7000".into()
        )));
        assert!(w.echo && !w.log_requests);
        assert_eq!(w.max_message_bytes, c.max_message_bytes);
        assert_eq!(w.max_channels_per_socket, 7);
        assert_eq!(w.limits.drain, Duration::from_secs(3));
        assert_eq!(w.limits.max_connections_per_ip, 9);
        assert_eq!(w.limits.max_socket_bytes, c.limits.max_socket_bytes);
        assert_eq!(w.longpoll_window, Some(Duration::from_secs(3)));
        assert_eq!(w.max_longpoll_batch, 9);
        // The hook secret, as the Redis password, only in the environment.
        assert!(!c
            .worker_args(1, 4321)
            .iter()
            .any(|a| a.contains("hook-s3cret")));
        assert!(c.worker_env().contains(&(
            "THRONG_HOOK_SECRET".into(),
            "hook-s3cret-of-at-least-32-bytes".into()
        )));
        let mut hooks = w.hooks.clone();
        hooks.secret = c.hooks.secret.clone();
        assert_eq!(hooks, c.hooks);
        assert_eq!(w.auth, c.auth);
        assert_eq!(w.auth.max_age.map(|m| m.as_millis()), Some(250));
        assert_eq!(w.tls, c.tls);
        assert!(w.tls.is_some() && w.api_tls.is_none());
        let _ = std::fs::remove_dir_all(dir);
    }
}
