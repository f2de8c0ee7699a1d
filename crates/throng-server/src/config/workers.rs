//! What a supervisor hands each worker process: every resolved setting
//! spelled out as `throng serve` arguments, and the secrets in its
//! environment. Kept with its round-trip test, apart from loading.

use super::Config;

impl Config {
    /// Secrets for worker `index`, passed in its environment rather than
    /// on its command line (where `ps` shows them).
    pub fn worker_env(&self) -> Vec<(&'static str, String)> {
        let mut env = Vec::new();
        let a = &self.auth;
        let secrets = [
            ("THRONG_AUTH_SECRET_KEY_BASE", &a.secret_key_base),
            ("THRONG_AUTH_JWT_SECRET", &a.jwt_secret),
            ("THRONG_AUTH_JWT_PUBLIC_KEY", &a.jwt_public_key),
            ("THRONG_API_KEY", &self.api_key),
            // The Redis URL carries its password, if it has one.
            ("THRONG_REDIS", &self.redis),
        ];
        for (name, value) in secrets {
            if let Some(v) = value {
                env.push((name, v.clone()));
            }
        }
        env.extend(self.hooks.worker_env());
        if !self.topics.is_empty() {
            if let Ok(json) = serde_json::to_string(&self.topics) {
                env.push(("THRONG_TOPIC_RULES_JSON", json));
            }
        }
        env
    }

    /// The `throng serve` arguments that make worker `index` of a supervisor:
    /// every resolved setting spelled out (so a worker reads no config file and
    /// no `THRONG_*` default can differ), on the supervisor's chosen `port`.
    pub fn worker_args(&self, index: usize, port: u16) -> Vec<String> {
        let mut args = vec![
            "serve".to_string(),
            "--bind".into(),
            self.addr.ip().to_string(),
            "--port".into(),
            port.to_string(),
            "--shards".into(),
            self.shards.to_string(),
            "--idle-timeout".into(),
            self.idle_timeout.map_or(0, |d| d.as_secs()).to_string(),
            "--max-message-bytes".into(),
            self.max_message_bytes.to_string(),
            "--max-outbound-bytes".into(),
            self.max_outbound_bytes.to_string(),
            "--max-channels-per-socket".into(),
            self.max_channels_per_socket.to_string(),
            "--longpoll-window".into(),
            self.longpoll_window.map_or(0, |d| d.as_secs()).to_string(),
            "--max-longpoll-batch".into(),
            self.max_longpoll_batch.to_string(),
            "--workers".into(),
            "1".into(),
            "--worker-index".into(),
            index.to_string(),
            "--presence-interval".into(),
            self.presence_interval.as_millis().to_string(),
            "--presence-count-rate".into(),
            self.presence_count_rate.to_string(),
            "--presence-timeout".into(),
            self.presence_timeout.as_secs().to_string(),
            "--max-presence-bytes".into(),
            self.max_presence_bytes.to_string(),
        ];
        args.extend(self.limits.worker_args());
        args.extend(self.hooks.worker_args());
        // `--redis` goes in the environment (`worker_env`): it may hold a password.
        for rule in &self.presence {
            args.extend(["--presence".into(), rule.spec()]);
        }
        if let Some(ca) = &self.redis_ca_file {
            args.extend(["--redis-ca-file".into(), ca.display().to_string()]);
        }
        if self.echo {
            args.push("--echo".into());
        }
        if !self.deflate {
            args.push("--no-deflate".into());
        }
        if self.log_requests {
            args.push("--log-requests".into());
        }
        let a = &self.auth;
        args.extend([
            "--auth".into(),
            clap::ValueEnum::to_possible_value(&a.mode)
                .map_or("none".into(), |v| v.get_name().to_string()),
            "--check-origin".into(),
            self.check_origin.to_string(),
            "--push-rate".into(),
            self.push_rate.to_string(),
            "--push-burst".into(),
            self.push_burst.to_string(),
            "--push-strikes".into(),
            self.push_strikes.to_string(),
            "--api-bind".into(),
            match self.api_bind {
                // Each worker its own API port: PORT+i (or any free one).
                Some(mut addr) => {
                    if addr.port() != 0 {
                        addr.set_port(addr.port().saturating_add(index as u16));
                    }
                    addr.to_string()
                }
                None => "none".into(),
            },
        ]);
        if let Some(salt) = &a.salt {
            args.extend(["--auth-salt".into(), salt.clone()]);
        }
        if let Some(age) = a.max_age {
            args.extend(["--auth-max-age".into(), age.to_string()]);
        }
        if let Some(alg) = &a.jwt_algorithm {
            args.extend(["--auth-jwt-algorithm".into(), alg.clone()]);
        }
        if let Some(aud) = &a.jwt_audience {
            args.extend(["--auth-jwt-audience".into(), aud.clone()]);
        }
        if let Some(iss) = &a.jwt_issuer {
            args.extend(["--auth-jwt-issuer".into(), iss.clone()]);
        }
        if let Some(path) = &a.jwt_public_key_file {
            args.extend([
                "--auth-jwt-public-key-file".into(),
                path.display().to_string(),
            ]);
        }
        if self.public_metrics {
            args.push("--public-metrics".into());
        }
        // Each worker loads (and reloads) the same files.
        if let Some(t) = &self.tls {
            args.extend([
                "--tls-cert".into(),
                t.cert.display().to_string(),
                "--tls-key".into(),
                t.key.display().to_string(),
            ]);
        }
        if let Some(t) = &self.api_tls {
            args.extend([
                "--api-tls-cert".into(),
                t.cert.display().to_string(),
                "--api-tls-key".into(),
                t.key.display().to_string(),
            ]);
        }
        args
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
            hooks: crate::hooks::HookArgs {
                url: Some("http://127.0.0.1:8000/throng".into()),
                secret: Some("hook-s3cret".into()),
                timeout_ms: Some(70),
                max_in_flight_per_socket: Some(3),
                ..Default::default()
            },
            auth_max_age: Some("0.25".parse().unwrap()),
            auth_jwt_audience: Some("throng".into()),
            auth_jwt_issuer: Some("https://auth.example".into()),
            tls_cert: Some("/etc/throng/cert.pem".into()),
            tls_key: Some("/etc/throng/key.pem".into()),
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
        assert!(c
            .worker_env()
            .contains(&("THRONG_REDIS", "redis://:s3cret@127.0.0.1:7000".to_string())));
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
        assert!(c
            .worker_env()
            .contains(&("THRONG_HOOK_SECRET", "hook-s3cret".to_string())));
        let mut hooks = w.hooks.clone();
        hooks.secret = c.hooks.secret.clone();
        assert_eq!(hooks, c.hooks);
        assert_eq!(w.auth, c.auth);
        assert_eq!(w.auth.max_age.map(|m| m.as_millis()), Some(250));
        assert_eq!(w.tls, c.tls);
        assert!(w.tls.is_some() && w.api_tls.is_none());
    }
}
