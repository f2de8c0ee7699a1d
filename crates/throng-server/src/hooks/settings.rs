//! The `[hooks]` settings: one [`settings!`] definition serves as the
//! `--hook-*` flags (each with its `THRONG_HOOK_*` variable), as the keys
//! of the config file's `[hooks]` table and as their defaults, so they
//! cannot drift; resolved into [`HooksConfig`].

use std::path::PathBuf;
use std::time::Duration;

use crate::setting::settings;

settings! {
    /// The `[hooks]` keys, and the `--hook-*` flags flattened into
    /// `throng serve`'s. All optional, so the file fills what flags leave out.
    #[serde(deny_unknown_fields)]
    pub struct HookArgs {
        /// The app backend's base URL: throng POSTs to URL/connect, URL/join, URL/push and URL/events (http:// or https://) [default: none, no hooks]
        #[arg(long = "hook-url", value_name = "URL", env = "THRONG_HOOK_URL")]
        pub url: Option<String>,
        /// Ask URL/connect whether to accept every new socket, WebSocket (the 101 waits for the answer) and long-poll (its first poll waits) [default: off]
        #[arg(long = "hook-connect", env = "THRONG_HOOK_CONNECT")]
        pub connect: bool,
        /// Send lifecycle events (connect, disconnect, occupied, vacated, presence_join, presence_leave) to URL/events, in batched POSTs of a JSON array, retried until taken [default: off]
        #[arg(long = "hook-events", env = "THRONG_HOOK_EVENTS")]
        pub events: bool,
        /// The app's page where users sign in (http:// or https://), when the connect hook decides who connects: the start banner points there, and a connect the backend refuses says to sign in there [default: none]
        #[arg(long = "hook-page-url", value_name = "URL", env = "THRONG_HOOK_PAGE_URL")]
        pub page_url: Option<String>,
        /// The key of every request's x-throng-signature: sha256=<hex HMAC-SHA256(secret, body)>, 32 bytes or more [default: none, requests unsigned]
        #[arg(long = "hook-secret", value_name = "SECRET", env = "THRONG_HOOK_SECRET", hide_env_values = true)]
        pub secret: Option<String>,
        /// PEM file of the certificate authorities to trust for an https:// backend (a private CA) [default: the system's roots]
        #[arg(long = "hook-ca-file", value_name = "FILE", env = "THRONG_HOOK_CA_FILE")]
        pub ca_file: Option<PathBuf>,
        /// Milliseconds the backend has to answer a hook request; then the client gets {"reason":"backend timeout"}
        #[arg(long = "hook-timeout-ms", value_name = "MS", env = "THRONG_HOOK_TIMEOUT_MS")]
        pub timeout_ms: Option<u64> = 3000,
        /// Hook requests this process has in flight at once; past it a join or push gets {"reason":"too many backend requests"}
        #[arg(long = "hook-max-in-flight", value_name = "N", env = "THRONG_HOOK_MAX_IN_FLIGHT")]
        pub max_in_flight: Option<usize> = 1024,
        /// Hook requests one socket may have waiting (in flight or queued behind an earlier push on the same topic); past it {"reason":"too many backend requests"}
        #[arg(long = "hook-max-in-flight-per-socket", value_name = "N", env = "THRONG_HOOK_MAX_IN_FLIGHT_PER_SOCKET")]
        pub max_in_flight_per_socket: Option<usize> = 16,
        /// Largest answer body accepted from the backend; a larger one is a bad answer
        #[arg(long = "hook-max-answer-bytes", value_name = "BYTES", env = "THRONG_HOOK_MAX_ANSWER_BYTES")]
        pub max_answer_bytes: Option<usize> = 65536,
        /// Lifecycle events waiting for the backend at most; past it new events are dropped and counted (throng_hook_events_dropped_total)
        #[arg(long = "hook-events-queue", value_name = "N", env = "THRONG_HOOK_EVENTS_QUEUE")]
        pub events_queue: Option<usize> = 10000,
        /// Lifecycle events in one POST to URL/events at most (a batch also goes out 100 ms after its first event)
        #[arg(long = "hook-events-batch", value_name = "N", env = "THRONG_HOOK_EVENTS_BATCH")]
        pub events_batch: Option<usize> = 500,
        /// Consecutive failures (unreachable, timeout, 5xx) after which the circuit opens: hooks are answered {"reason":"backend unavailable"} at once, and one request a second probes the backend until it answers
        #[arg(long = "hook-breaker-failures", value_name = "N", env = "THRONG_HOOK_BREAKER_FAILURES")]
        pub breaker_failures: Option<u32> = 5,
        /// Milliseconds a keep-alive connection to the backend may stay idle before throng closes it (keep it under the backend's own keep-alive timeout)
        #[arg(long = "hook-idle-timeout-ms", value_name = "MS", env = "THRONG_HOOK_IDLE_TIMEOUT_MS")]
        pub idle_timeout_ms: Option<u64> = 30000,
    }
}

/// Resolved hook settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HooksConfig {
    /// The base URL, without a trailing `/`; `None`: no hooks.
    pub url: Option<String>,
    pub connect: bool,
    pub events: bool,
    /// The app's sign-in page (`--hook-page-url`), for people.
    pub page_url: Option<String>,
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
    /// How long an idle keep-alive connection to the backend is kept
    /// (`--hook-idle-timeout-ms`).
    pub idle_timeout: Duration,
}

impl Default for HooksConfig {
    /// The defaults stated in [`HookArgs`].
    fn default() -> Self {
        HookArgs::default()
            .resolve()
            .expect("the default hook settings resolve")
    }
}

impl HookArgs {
    /// These settings (flags over the file's `[hooks]`, merged with
    /// [`HookArgs::or`]) over their defaults.
    pub fn resolve(&self) -> Result<HooksConfig, String> {
        let url = self
            .url
            .clone()
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
        let page_url = self.page_url.clone().filter(|u| !u.is_empty());
        if let Some(u) = &page_url {
            let ok = u.parse::<hyper::Uri>().is_ok_and(|uri| {
                matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
            });
            if !ok {
                return Err(format!(
                    "--hook-page-url {u:?} ([hooks] page_url): want the page's address, \
                     http://HOST[:PORT][/PATH] or https://..., e.g. http://127.0.0.1:8000/"
                ));
            }
        }
        if (self.connect || self.events) && url.is_none() {
            return Err("hooks connect/events need a url: set [hooks] url or --hook-url".into());
        }
        let timeout_ms = self.timeout_ms();
        if !(1..=600_000).contains(&timeout_ms) {
            return Err(format!(
                "hooks timeout_ms must be 1..=600000, got {timeout_ms}"
            ));
        }
        let idle_ms = self.idle_timeout_ms();
        if !(1..=86_400_000).contains(&idle_ms) {
            return Err(format!(
                "hooks idle_timeout_ms must be 1..=86400000 (a day), got {idle_ms}"
            ));
        }
        Ok(HooksConfig {
            url,
            connect: self.connect,
            events: self.events,
            page_url,
            secret: self.secret.clone().filter(|s| !s.is_empty()),
            ca_file: self.ca_file.clone(),
            timeout: Duration::from_millis(timeout_ms),
            max_in_flight: self.max_in_flight().max(1),
            max_in_flight_per_socket: self.max_in_flight_per_socket().max(1),
            max_answer_bytes: self.max_answer_bytes().max(1),
            breaker_failures: self.breaker_failures().max(1),
            events_queue: self.events_queue().max(1),
            events_batch: self.events_batch().max(1),
            idle_timeout: Duration::from_millis(idle_ms),
        })
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
        let c = flags.clone().or(file.clone()).resolve().unwrap();
        assert_eq!(c.url.as_deref(), Some("http://127.0.0.1:8000/throng"));
        assert!(c.connect && !c.events);
        let events = HookArgs {
            events: true,
            events_batch: Some(7),
            ..file
        };
        let e = flags.or(events).resolve().unwrap();
        assert!(e.events && e.events_batch == 7 && e.events_queue == 10_000);
        let mut out = crate::setting::PassOn::default();
        HookArgs {
            events: true,
            ..Default::default()
        }
        .pass_on(&mut out);
        assert!(out.args.contains(&"--hook-events".to_string()));
        assert_eq!(c.secret.as_deref(), Some("s"));
        assert_eq!(c.timeout, Duration::from_millis(70));
        assert_eq!(c.max_in_flight_per_socket, 16);
        assert_eq!(c.idle_timeout, Duration::from_secs(30));
        assert!(HookArgs::default().resolve().unwrap().url.is_none());
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = |a: HookArgs| a.resolve().unwrap_err();
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
        assert!(bad(HookArgs {
            url: Some("http://x".into()),
            idle_timeout_ms: Some(0),
            ..Default::default()
        })
        .contains("idle_timeout_ms"));
        assert!(toml::from_str::<HookArgs>("urll = \"x\"").is_err());
        assert!(bad(HookArgs {
            page_url: Some("127.0.0.1:8000".into()),
            ..Default::default()
        })
        .contains("--hook-page-url \"127.0.0.1:8000\""));
    }
}
