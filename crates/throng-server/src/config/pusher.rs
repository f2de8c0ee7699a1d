//! The `[pusher]` settings: the Pusher Channels protocol's apps and timings
//! (`crate::protocol::pusher`). The flags (`--pusher-*`, each with its
//! `THRONG_PUSHER_*` variable) are one [`settings!`] definition; the file
//! also takes `[[pusher.apps]]` tables, one per app with its own limits
//! ([`AppSpec`]). Resolved into [`PusherConfig`]; Pusher is off unless an
//! app is configured.
//!
//! Every app's secret goes through the weak-secret rule
//! (`crate::auth::secret`, [`Kind::PusherSecret`]).

use serde::{Deserialize, Serialize};

use crate::auth::secret::{Judged, Kind, Source};
use crate::setting::{settings, whole};

settings! {
    /// The `[pusher]` keys, and the `--pusher-*` flags flattened into
    /// `throng serve`'s.
    pub struct PusherArgs {
        /// A Pusher Channels app, as ID:KEY:SECRET (repeatable; the variable takes a comma-separated list): pusher-js, Laravel Echo and the Pusher server SDKs connect with this app's key and sign with its secret (20 bytes or more) [default: none, Pusher off]
        #[arg(long = "pusher-app", help_heading = "Pusher Channels", value_name = "ID:KEY:SECRET", env = "THRONG_PUSHER_APPS", value_delimiter = ',', hide_env_values = true)]
        pub app: Vec<String>,
        /// The webhook URL of every app given by --pusher-app or THRONG_PUSHER_APPS: channel_occupied, channel_vacated, member_added, member_removed, client_event and cache_miss events, signed with the app's secret, as Pusher sends them [default: none, no webhooks]
        #[arg(long = "pusher-webhook-url", help_heading = "Pusher Channels", value_name = "URL", env = "THRONG_PUSHER_WEBHOOK_URL")]
        pub webhook_url: Option<String>,
        /// Webhook events an app may have waiting for its webhook URL; past it new ones are dropped and counted (throng_pusher_webhook_events_dropped_total)
        #[arg(long = "pusher-webhook-queue", help_heading = "Pusher Channels", value_name = "N", value_parser = whole::<usize>, env = "THRONG_PUSHER_WEBHOOK_QUEUE")]
        pub webhook_queue: Option<usize> = 10000,
        /// Webhook events in one POST at most (a batch also goes out 100 ms after its first event)
        #[arg(long = "pusher-webhook-batch", help_heading = "Pusher Channels", value_name = "N", value_parser = whole::<usize>, env = "THRONG_PUSHER_WEBHOOK_BATCH")]
        pub webhook_batch: Option<usize> = 100,
        /// Milliseconds a webhook URL has to answer a POST; a POST not answered 2xx in time is sent again, with backoff, until it is
        #[arg(long = "pusher-webhook-timeout-ms", help_heading = "Pusher Channels", value_name = "MS", value_parser = whole::<u64>, env = "THRONG_PUSHER_WEBHOOK_TIMEOUT_MS")]
        pub webhook_timeout_ms: Option<u64> = 5000,
        /// Seconds without a message from a Pusher socket before the server sends it pusher:ping (it also tells clients this in pusher:connection_established); one that stays silent 30 s more (or as long again, when that is shorter) is closed with 4201
        #[arg(long = "pusher-activity-timeout", help_heading = "Pusher Channels", value_name = "SECS", value_parser = whole::<u32>, env = "THRONG_PUSHER_ACTIVITY_TIMEOUT")]
        pub activity_timeout: Option<u32> = 120,
        /// Client events (client-*) a Pusher socket may send a second (as Pusher: 10); past it they are dropped and answered pusher:error 4301
        #[arg(long = "pusher-client-event-rate", help_heading = "Pusher Channels", value_name = "N", value_parser = whole::<u32>, env = "THRONG_PUSHER_CLIENT_EVENT_RATE")]
        pub client_event_rate: Option<u32> = 10,
        /// Seconds a cache channel (cache-*, private-cache-*, presence-cache-*) keeps its last event for the next subscriber
        #[arg(long = "pusher-cache-ttl", help_heading = "Pusher Channels", value_name = "SECS", value_parser = whole::<u64>, env = "THRONG_PUSHER_CACHE_TTL")]
        pub cache_ttl: Option<u64> = 1800,
        /// Largest body the Pusher HTTP API reads (POST /apps/ID/events and batch_events); a larger one gets 413 before it is read
        #[arg(long = "pusher-max-api-body-bytes", help_heading = "Pusher Channels", value_name = "BYTES", value_parser = whole::<usize>, env = "THRONG_PUSHER_MAX_API_BODY_BYTES")]
        pub max_api_body_bytes: Option<usize> = 262144,
        /// Pusher HTTP API requests that may wait on the cluster's figures at once on this server (channel and user queries, triggers with info); past it one gets 503 at once
        #[arg(long = "pusher-max-api-requests", help_heading = "Pusher Channels", value_name = "N", value_parser = whole::<usize>, env = "THRONG_PUSHER_MAX_API_REQUESTS")]
        pub max_api_requests: Option<usize> = 256,
        /// Seconds a Pusher HTTP API request may wait on the cluster's figures; past it it gets 504
        // Its own id: the server API's `api_timeout` (limits.rs) has the field's name.
        #[arg(id = "pusher_api_timeout", long = "pusher-api-timeout", help_heading = "Pusher Channels", value_name = "SECS", value_parser = whole::<u64>, env = "THRONG_PUSHER_API_TIMEOUT")]
        pub api_timeout: Option<u64> = 10,
        /// The [[pusher.apps]] tables as JSON (set by the supervisor for its workers: use [[pusher.apps]] in the config file)
        #[arg(long = "pusher-apps-json", hide = true, env = "THRONG_PUSHER_APPS_JSON", hide_env_values = true)]
        #[serde(skip_deserializing)]
        pub apps_json: Option<String>,
    }
}

/// The `[pusher]` table of the config file: its keys, and its
/// `[[pusher.apps]]`.
#[derive(Deserialize, Default, Debug)]
pub(super) struct PusherFile {
    #[serde(flatten)]
    pub args: PusherArgs,
    #[serde(default)]
    pub apps: Vec<AppSpec>,
}

/// The keys of a `[[pusher.apps]]` table (checked against [`AppSpec`] by a
/// test).
pub(super) const APP_KEYS: &[&str] = &[
    "id",
    "key",
    "secret",
    "webhook_url",
    "max_connections",
    "client_events",
    "max_presence_members",
    "max_event_bytes",
    "encrypted_channels",
];

/// One app as the file gives it.
#[derive(Deserialize, Serialize, Clone, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct AppSpec {
    pub id: String,
    pub key: String,
    pub secret: String,
    #[serde(default)]
    pub webhook_url: Option<String>,
    #[serde(default)]
    pub max_connections: Option<usize>,
    #[serde(default)]
    pub client_events: Option<bool>,
    #[serde(default)]
    pub max_presence_members: Option<usize>,
    #[serde(default)]
    pub max_event_bytes: Option<usize>,
    #[serde(default)]
    pub encrypted_channels: Option<bool>,
}

/// One Pusher app, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PusherApp {
    pub id: String,
    pub key: String,
    pub secret: String,
    /// Where its webhooks go; `None`: none.
    pub webhook_url: Option<String>,
    /// Sockets the app may hold at once (per node); past it a new one is
    /// closed with 4004. `None`: no limit of its own.
    pub max_connections: Option<usize>,
    /// `client-*` events allowed (Pusher's "Enable client events").
    pub client_events: bool,
    /// Distinct users a presence channel may hold (Pusher: 100).
    pub max_presence_members: usize,
    /// The largest event's `data`, in bytes (Pusher: 10 KB).
    pub max_event_bytes: usize,
    /// `private-encrypted-*` channels allowed.
    pub encrypted_channels: bool,
}

/// Resolved Pusher settings: off when `apps` is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PusherConfig {
    pub apps: Vec<PusherApp>,
    /// Seconds: see `--pusher-activity-timeout`.
    pub activity_timeout: u32,
    /// Client events a second per socket.
    pub client_event_rate: u32,
    /// Seconds a cache channel keeps its last event.
    pub cache_ttl: u64,
    /// The HTTP API's body bound.
    pub max_api_body_bytes: usize,
    /// HTTP API requests waiting on the cluster at once.
    pub max_api_requests: usize,
    /// Seconds an HTTP API request may wait on the cluster.
    pub api_timeout: u64,
    /// Webhook events queued per app at most.
    pub webhook_queue: usize,
    /// Webhook events per POST at most.
    pub webhook_batch: usize,
    /// How long a webhook URL has to answer.
    pub webhook_timeout: std::time::Duration,
}

impl PusherConfig {
    /// What the apps' webhooks need of these settings.
    pub fn webhooks(&self) -> crate::hooks::WebhookSettings {
        use crate::hooks::{WebhookApp, WebhookSettings};
        let apps = self.apps.iter().map(|a| WebhookApp {
            id: a.id.clone(),
            key: a.key.clone(),
            secret: a.secret.clone(),
            url: a.webhook_url.clone(),
        });
        WebhookSettings {
            apps: apps.collect(),
            queue: self.webhook_queue,
            batch: self.webhook_batch,
            timeout: self.webhook_timeout,
        }
    }
}

impl Default for PusherConfig {
    fn default() -> Self {
        PusherArgs::default()
            .resolve(&[], None)
            .expect("the default Pusher settings resolve")
    }
}

/// Pusher's limits for an app that does not say.
const MAX_PRESENCE_MEMBERS: usize = 100;
const MAX_EVENT_BYTES: usize = 10 * 1024;

impl PusherArgs {
    /// The apps given by flag or variable, then the file's (`file_apps`),
    /// with their limits and the timings; `file`: the config file, for the
    /// weak-secret rule's message.
    pub fn resolve(
        &self,
        file_apps: &[AppSpec],
        file: Option<&std::path::Path>,
    ) -> Result<PusherConfig, String> {
        let mut apps = Vec::new();
        let mut judged = Judged::default();
        for spec in &self.app {
            let app = flag_app(spec, self.webhook_url.clone())?;
            judged.add(
                Kind::PusherSecret,
                Some(&app.secret),
                &Source::of_arg(Kind::PusherSecret, &app.secret),
            );
            apps.push(app);
        }
        let json_apps: Vec<AppSpec> = match &self.apps_json {
            Some(json) => serde_json::from_str(json).map_err(|e| format!("pusher apps: {e}"))?,
            None => Vec::new(),
        };
        for spec in file_apps.iter().chain(&json_apps) {
            let source = file.map_or(Source::Settings, |p| Source::File(p.to_path_buf()));
            judged.add(Kind::PusherSecret, Some(&spec.secret), &source);
            apps.push(table_app(spec)?);
        }
        judged.result()?;
        check_unique(&apps)?;
        let activity_timeout = self.activity_timeout();
        if !(1..=3600).contains(&activity_timeout) {
            return Err(format!(
                "pusher activity_timeout must be 1..=3600 seconds, got {activity_timeout} \
                 (pusher-js pings after the least of its own 120 s and this)"
            ));
        }
        let (max_api_requests, api_timeout) = (self.max_api_requests(), self.api_timeout());
        if max_api_requests == 0 || !(1..=3600).contains(&api_timeout) {
            return Err(format!(
                "pusher max_api_requests must be at least 1 and api_timeout 1..=3600 seconds, \
                 got {max_api_requests} and {api_timeout}"
            ));
        }
        let webhook_timeout_ms = self.webhook_timeout_ms();
        if !(1..=600_000).contains(&webhook_timeout_ms) {
            return Err(format!(
                "pusher webhook_timeout_ms must be 1..=600000, got {webhook_timeout_ms}"
            ));
        }
        Ok(PusherConfig {
            apps,
            activity_timeout,
            client_event_rate: self.client_event_rate(),
            cache_ttl: self.cache_ttl(),
            max_api_body_bytes: self.max_api_body_bytes(),
            max_api_requests,
            api_timeout,
            webhook_queue: self.webhook_queue().max(1),
            webhook_batch: self.webhook_batch().max(1),
            webhook_timeout: std::time::Duration::from_millis(webhook_timeout_ms),
        })
    }
}

/// An app of `--pusher-app ID:KEY:SECRET`.
fn flag_app(spec: &str, webhook_url: Option<String>) -> Result<PusherApp, String> {
    let mut parts = spec.splitn(3, ':');
    let (Some(id), Some(key), Some(secret)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!(
            "--pusher-app takes ID:KEY:SECRET, such as --pusher-app '1:app-key:{}', got {} \
             part(s) (the secret itself is not shown)",
            "s".repeat(20),
            spec.split(':').count().min(2)
        ));
    };
    table_app(&AppSpec {
        id: id.trim().into(),
        key: key.trim().into(),
        secret: secret.into(),
        webhook_url,
        ..Default::default()
    })
}

/// An app of a `[[pusher.apps]]` table (or a flag's, made one).
fn table_app(spec: &AppSpec) -> Result<PusherApp, String> {
    let word = |what: &str, v: &str| {
        let ok = !v.is_empty()
            && v.len() <= 64
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if ok {
            Ok(())
        } else {
            Err(format!(
                "a Pusher app's {what} must be 1 to 64 letters, digits, '-', '_' or '.', \
                 got {v:?}"
            ))
        }
    };
    word("id", &spec.id)?;
    word("key", &spec.key)?;
    if let Some(url) = &spec.webhook_url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "app {}'s webhook_url must be an http:// or https:// URL, got {url:?}",
                spec.id
            ));
        }
    }
    let max_event_bytes = spec.max_event_bytes.unwrap_or(MAX_EVENT_BYTES);
    if max_event_bytes == 0 || max_event_bytes > 1 << 20 {
        return Err(format!(
            "app {}'s max_event_bytes must be 1..={}, got {max_event_bytes}",
            spec.id,
            1 << 20
        ));
    }
    Ok(PusherApp {
        id: spec.id.clone(),
        key: spec.key.clone(),
        secret: spec.secret.clone(),
        webhook_url: spec.webhook_url.clone(),
        max_connections: spec.max_connections,
        client_events: spec.client_events.unwrap_or(true),
        max_presence_members: spec.max_presence_members.unwrap_or(MAX_PRESENCE_MEMBERS),
        max_event_bytes,
        encrypted_channels: spec.encrypted_channels.unwrap_or(true),
    })
}

/// Two apps may not share an id or a key: a key names the app a socket
/// connects to, an id the app an HTTP API request is for.
fn check_unique(apps: &[PusherApp]) -> Result<(), String> {
    for (i, a) in apps.iter().enumerate() {
        for b in &apps[..i] {
            if a.id == b.id {
                return Err(format!("two Pusher apps have the id {:?}", a.id));
            }
            if a.key == b.key {
                return Err(format!("two Pusher apps have the key {:?}", a.key));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123";

    #[test]
    fn apps_from_flags_and_tables() {
        let args = PusherArgs {
            app: vec![
                format!("1:key-one:{SECRET}"),
                format!("2:key-two:{SECRET}x"),
            ],
            webhook_url: Some("http://127.0.0.1:9/hooks".into()),
            ..Default::default()
        };
        let table = AppSpec {
            id: "3".into(),
            key: "key-three".into(),
            secret: SECRET.into(),
            client_events: Some(false),
            max_connections: Some(7),
            ..Default::default()
        };
        let c = args.resolve(&[table], None).unwrap();
        assert_eq!(c.apps.len(), 3);
        assert_eq!(c.apps[0].id, "1");
        assert_eq!(c.apps[1].secret, format!("{SECRET}x"));
        assert_eq!(
            c.apps[0].webhook_url.as_deref(),
            Some("http://127.0.0.1:9/hooks")
        );
        assert!(c.apps[0].client_events && !c.apps[2].client_events);
        assert_eq!(c.apps[2].webhook_url, None);
        assert_eq!(c.apps[2].max_connections, Some(7));
        assert_eq!((c.activity_timeout, c.client_event_rate), (120, 10));
        assert!(PusherConfig::default().apps.is_empty());
    }

    #[test]
    fn refusals_say_what_to_write() {
        let bad = |spec: &str| {
            let args = PusherArgs {
                app: vec![spec.into()],
                ..Default::default()
            };
            args.resolve(&[], None).unwrap_err()
        };
        assert!(bad("1:key").contains("ID:KEY:SECRET"));
        assert!(
            !bad("1:key").contains("1:key"),
            "the value given is not shown"
        );
        // Two parts: the second may be a secret given without its key.
        let two = bad("1:s3cr3t-given-alone");
        assert!(!two.contains("s3cr3t"), "no secret shown: {two}");
        assert!(bad("1:key:short").contains("too short, needs 20"));
        assert!(bad(&format!("a/b:key:{SECRET}")).contains("id must be"));
        let twice = PusherArgs {
            app: vec![format!("1:k:{SECRET}"), format!("2:k:{SECRET}")],
            ..Default::default()
        };
        assert!(twice.resolve(&[], None).unwrap_err().contains("the key"));
    }

    #[test]
    fn app_keys_are_the_struct_fields() {
        let mut table = toml::Table::new();
        for key in APP_KEYS {
            let value = match *key {
                "client_events" | "encrypted_channels" => toml::Value::Boolean(true),
                "max_connections" | "max_presence_members" | "max_event_bytes" => {
                    toml::Value::Integer(1)
                }
                _ => toml::Value::String("x".into()),
            };
            table.insert(key.to_string(), value);
        }
        toml::from_str::<AppSpec>(&toml::to_string(&table).unwrap()).unwrap();
    }
}
