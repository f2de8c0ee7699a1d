//! The `[hooks]` settings: one definition serves as the `--hook-*` flags
//! (each with its `THRONG_HOOK_*` variable) and as the keys of the config
//! file's `[hooks]` table, so the two cannot drift; resolved into
//! [`HooksConfig`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The `[hooks]` keys, and the `--hook-*` flags flattened into
/// `throng serve`'s. All optional, so the file fills what flags leave out.
#[derive(clap::Args, Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct HookArgs {
    /// The app backend's base URL: throng POSTs to URL/connect, URL/join, URL/push and URL/events (http:// or https://) [default: none, no hooks]
    #[arg(long = "hook-url", value_name = "URL", env = "THRONG_HOOK_URL")]
    pub url: Option<String>,
    /// Ask URL/connect whether to accept every new socket, WebSocket (the 101 waits for the answer) and long-poll (its first poll waits) [default: off]
    #[arg(long = "hook-connect", env = "THRONG_HOOK_CONNECT")]
    #[serde(default)]
    pub connect: bool,
    /// Send lifecycle events (connect, disconnect, occupied, vacated, presence_join, presence_leave) to URL/events, in batched POSTs of a JSON array, retried until taken [default: off]
    #[arg(long = "hook-events", env = "THRONG_HOOK_EVENTS")]
    #[serde(default)]
    pub events: bool,
    /// The key of every request's x-throng-signature: sha256=<hex HMAC-SHA256(secret, body)> [default: none, requests unsigned]
    #[arg(
        long = "hook-secret",
        value_name = "SECRET",
        env = "THRONG_HOOK_SECRET",
        hide_env_values = true
    )]
    pub secret: Option<String>,
    /// PEM file of the certificate authorities to trust for an https:// backend (a private CA) [default: the system's roots]
    #[arg(
        long = "hook-ca-file",
        value_name = "FILE",
        env = "THRONG_HOOK_CA_FILE"
    )]
    pub ca_file: Option<PathBuf>,
    /// Milliseconds the backend has to answer a hook request; then the client gets {"reason":"backend timeout"} [default: 3000]
    #[arg(
        long = "hook-timeout-ms",
        value_name = "MS",
        env = "THRONG_HOOK_TIMEOUT_MS"
    )]
    pub timeout_ms: Option<u64>,
    /// Hook requests this process has in flight at once; past it a join or push gets {"reason":"too many backend requests"} [default: 1024]
    #[arg(
        long = "hook-max-in-flight",
        value_name = "N",
        env = "THRONG_HOOK_MAX_IN_FLIGHT"
    )]
    pub max_in_flight: Option<usize>,
    /// Hook requests one socket may have waiting (in flight or queued behind an earlier push on the same topic); past it {"reason":"too many backend requests"} [default: 16]
    #[arg(
        long = "hook-max-in-flight-per-socket",
        value_name = "N",
        env = "THRONG_HOOK_MAX_IN_FLIGHT_PER_SOCKET"
    )]
    pub max_in_flight_per_socket: Option<usize>,
    /// Largest answer body accepted from the backend; a larger one is a bad answer [default: 65536]
    #[arg(
        long = "hook-max-answer-bytes",
        value_name = "BYTES",
        env = "THRONG_HOOK_MAX_ANSWER_BYTES"
    )]
    pub max_answer_bytes: Option<usize>,
    /// Lifecycle events waiting for the backend at most; past it new events are dropped and counted (throng_hook_events_dropped_total) [default: 10000]
    #[arg(
        long = "hook-events-queue",
        value_name = "N",
        env = "THRONG_HOOK_EVENTS_QUEUE"
    )]
    pub events_queue: Option<usize>,
    /// Lifecycle events in one POST to URL/events at most (a batch also goes out 100 ms after its first event) [default: 500]
    #[arg(
        long = "hook-events-batch",
        value_name = "N",
        env = "THRONG_HOOK_EVENTS_BATCH"
    )]
    pub events_batch: Option<usize>,
    /// Consecutive failures (unreachable, timeout, 5xx) after which the circuit opens: hooks are answered {"reason":"backend unavailable"} at once, and one request a second probes the backend until it answers [default: 5]
    #[arg(
        long = "hook-breaker-failures",
        value_name = "N",
        env = "THRONG_HOOK_BREAKER_FAILURES"
    )]
    pub breaker_failures: Option<u32>,
}

/// Resolved hook settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HooksConfig {
    /// The base URL, without a trailing `/`; `None`: no hooks.
    pub url: Option<String>,
    pub connect: bool,
    pub events: bool,
    pub secret: Option<String>,
    /// CA certificates for an https:// backend; `None`: the system's.
    pub ca_file: Option<PathBuf>,
    pub timeout: Duration,
    pub max_in_flight: usize,
    pub max_in_flight_per_socket: usize,
    pub max_answer_bytes: usize,
    pub breaker_failures: u32,
    /// Lifecycle events queued at most (`--hook-events-queue`).
    pub events_queue: usize,
    /// Lifecycle events per POST at most (`--hook-events-batch`).
    pub events_batch: usize,
}

impl Default for HooksConfig {
    fn default() -> Self {
        HooksConfig {
            url: None,
            connect: false,
            events: false,
            secret: None,
            ca_file: None,
            timeout: Duration::from_millis(3000),
            max_in_flight: 1024,
            max_in_flight_per_socket: 16,
            max_answer_bytes: 64 << 10,
            breaker_failures: 5,
            events_queue: 10_000,
            events_batch: 500,
        }
    }
}

impl HookArgs {
    /// These flags over the file's `[hooks]` over the defaults.
    pub fn resolve(&self, file: Option<&HookArgs>) -> Result<HooksConfig, String> {
        let empty = HookArgs::default();
        let f = file.unwrap_or(&empty);
        let d = HooksConfig::default();
        let url = self
            .url
            .clone()
            .or_else(|| f.url.clone())
            .filter(|u| !u.is_empty())
            .map(|u| u.trim_end_matches('/').to_string());
        if let Some(u) = &url {
            let uri: hyper::Uri = u
                .parse()
                .map_err(|e| format!("hooks url {u:?}: {e} (want http://HOST:PORT/PATH)"))?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
                return Err(format!(
                    "hooks url {u:?}: want http://HOST[:PORT][/PATH] or https://HOST[:PORT][/PATH]"
                ));
            }
        }
        let connect = self.connect || f.connect;
        let events = self.events || f.events;
        if (connect || events) && url.is_none() {
            return Err("hooks connect/events need a url: set [hooks] url or --hook-url".into());
        }
        let timeout_ms = self
            .timeout_ms
            .or(f.timeout_ms)
            .unwrap_or(d.timeout.as_millis() as u64);
        if !(1..=600_000).contains(&timeout_ms) {
            return Err(format!(
                "hooks timeout_ms must be 1..=600000, got {timeout_ms}"
            ));
        }
        let pick = |a: Option<usize>, b: Option<usize>, d: usize| a.or(b).unwrap_or(d).max(1);
        Ok(HooksConfig {
            url,
            connect,
            events,
            secret: self
                .secret
                .clone()
                .or_else(|| f.secret.clone())
                .filter(|s| !s.is_empty()),
            ca_file: self.ca_file.clone().or_else(|| f.ca_file.clone()),
            timeout: Duration::from_millis(timeout_ms),
            max_in_flight: pick(self.max_in_flight, f.max_in_flight, d.max_in_flight),
            max_in_flight_per_socket: pick(
                self.max_in_flight_per_socket,
                f.max_in_flight_per_socket,
                d.max_in_flight_per_socket,
            ),
            max_answer_bytes: pick(
                self.max_answer_bytes,
                f.max_answer_bytes,
                d.max_answer_bytes,
            ),
            breaker_failures: self
                .breaker_failures
                .or(f.breaker_failures)
                .unwrap_or(d.breaker_failures)
                .max(1),
            events_queue: pick(self.events_queue, f.events_queue, d.events_queue),
            events_batch: pick(self.events_batch, f.events_batch, d.events_batch),
        })
    }
}

impl HooksConfig {
    /// The `throng serve` arguments that give a worker these settings (the
    /// secret goes in its environment: [`HooksConfig::worker_env`]).
    pub fn worker_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(url) = &self.url {
            args.extend(["--hook-url".into(), url.clone()]);
        }
        if self.connect {
            args.push("--hook-connect".into());
        }
        if self.events {
            args.push("--hook-events".into());
        }
        if let Some(ca) = &self.ca_file {
            args.extend(["--hook-ca-file".into(), ca.display().to_string()]);
        }
        args.extend([
            "--hook-timeout-ms".into(),
            self.timeout.as_millis().to_string(),
            "--hook-max-in-flight".into(),
            self.max_in_flight.to_string(),
            "--hook-max-in-flight-per-socket".into(),
            self.max_in_flight_per_socket.to_string(),
            "--hook-max-answer-bytes".into(),
            self.max_answer_bytes.to_string(),
            "--hook-breaker-failures".into(),
            self.breaker_failures.to_string(),
            "--hook-events-queue".into(),
            self.events_queue.to_string(),
            "--hook-events-batch".into(),
            self.events_batch.to_string(),
        ]);
        args
    }

    /// The secret, for a worker's environment.
    pub fn worker_env(&self) -> Option<(&'static str, String)> {
        self.secret.clone().map(|s| ("THRONG_HOOK_SECRET", s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_over_file_over_defaults() {
        let file: HookArgs = toml::from_str(
            "url = \"http://127.0.0.1:8000/throng/\"\nconnect = true\nsecret = \"s\"\ntimeout_ms = 50\n",
        )
        .unwrap();
        let flags = HookArgs {
            timeout_ms: Some(70),
            ..Default::default()
        };
        let c = flags.resolve(Some(&file)).unwrap();
        assert_eq!(c.url.as_deref(), Some("http://127.0.0.1:8000/throng"));
        assert!(c.connect && !c.events);
        let events = HookArgs {
            events: true,
            events_batch: Some(7),
            ..file
        };
        let e = flags.resolve(Some(&events)).unwrap();
        assert!(e.events && e.events_batch == 7 && e.events_queue == 10_000);
        assert!(e.worker_args().contains(&"--hook-events".to_string()));
        assert_eq!(c.secret.as_deref(), Some("s"));
        assert_eq!(c.timeout, Duration::from_millis(70));
        assert_eq!(c.max_in_flight_per_socket, 16);
        assert!(HookArgs::default().resolve(None).unwrap().url.is_none());
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = |a: HookArgs| a.resolve(None).unwrap_err();
        assert!(bad(HookArgs {
            url: Some("ftp://x".into()),
            ..Default::default()
        })
        .contains("http://"));
        assert!(bad(HookArgs {
            connect: true,
            ..Default::default()
        })
        .contains("url"));
        assert!(bad(HookArgs {
            url: Some("http://x".into()),
            timeout_ms: Some(0),
            ..Default::default()
        })
        .contains("timeout_ms"));
        assert!(toml::from_str::<HookArgs>("urll = \"x\"").is_err());
    }
}
