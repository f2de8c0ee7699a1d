//! Pusher's webhooks: each Pusher app with a `webhook_url` (or
//! `--pusher-webhook-url`) gets batched POSTs of
//! `{"time_ms":..,"events":[{"name":"channel_occupied","channel":..},..]}`
//! with `X-Pusher-Key` and `X-Pusher-Signature` (hex HMAC-SHA256 of the
//! body with the app's secret), as Pusher sends them and its SDKs check
//! them (`throng_protocol::pusher::webhook`).
//!
//! Each app's events go through the lifecycle events' queue and sender
//! (`events.rs`: a bounded queue, batches, retries with backoff until a
//! 2xx, at least once), in this format ([`PusherFormat`]), all apps on one
//! thread of their own and counted together in `/metrics`.
//!
//! Who sends what, so that each event is sent once cluster-wide:
//! - `channel_occupied` / `channel_vacated`: the occupancy engine
//!   (`occupancy.rs`: this node alone, or Redis with `--redis`) decides
//!   each transition of a channel's topic once, as it does for the
//!   `[hooks]` events of Phoenix topics;
//! - `member_added` / `member_removed`: the same engine, on a member's
//!   own key (`pusher/<app>/<channel>#<user_id>`), which a node holds
//!   while it has a socket of that user on the channel ([`Webhooks::member`]):
//!   the user's first socket anywhere adds it, its last one anywhere
//!   removes it, and a dead node's members are removed with its topics;
//! - `client_event` and `cache_miss`: the node of the socket that sent
//!   the event or missed the cache.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use throng_protocol::pusher::server::Data;
use throng_protocol::pusher::signature::webhook_signature;
use throng_protocol::pusher::webhook::{self, WebhookEvent, KEY_HEADER, SIGNATURE_HEADER};
use throng_protocol::PUSHER_TOPIC_PREFIX;
use throng_pubsub::metrics::{Metric, Sink};

use super::events::{EventStats, Events, Format, Names, Target};
use super::request::now_ms;

/// One webhook event, as a shard or the occupancy queues it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Webhook {
    Occupied {
        channel: Box<str>,
    },
    Vacated {
        channel: Box<str>,
    },
    MemberAdded {
        channel: Box<str>,
        user_id: Box<str>,
    },
    MemberRemoved {
        channel: Box<str>,
        user_id: Box<str>,
    },
    ClientEvent {
        channel: Box<str>,
        event: Box<str>,
        /// The event's `data` as the client sent it (JSON text).
        data: Option<Box<str>>,
        socket_id: Box<str>,
        /// The sender's user, on a presence channel.
        user_id: Option<Box<str>>,
    },
    CacheMiss {
        channel: Box<str>,
    },
}

impl Webhook {
    /// The event as the wire layer writes it.
    fn wire(&self) -> WebhookEvent<'_> {
        match self {
            Webhook::Occupied { channel } => WebhookEvent::ChannelOccupied { channel },
            Webhook::Vacated { channel } => WebhookEvent::ChannelVacated { channel },
            Webhook::MemberAdded { channel, user_id } => {
                WebhookEvent::MemberAdded { channel, user_id }
            }
            Webhook::MemberRemoved { channel, user_id } => {
                WebhookEvent::MemberRemoved { channel, user_id }
            }
            Webhook::ClientEvent {
                channel,
                event,
                data,
                socket_id,
                user_id,
            } => WebhookEvent::ClientEvent {
                channel,
                event,
                data: data.as_deref().map(Data::from_json),
                socket_id,
                user_id: user_id.as_deref(),
            },
            Webhook::CacheMiss { channel } => WebhookEvent::CacheMiss { channel },
        }
    }
}

/// An app's webhook bodies and headers.
pub struct PusherFormat {
    key: String,
    secret: String,
}

impl Format for PusherFormat {
    type Event = Webhook;

    fn body(&self, batch: &[(String, Webhook)]) -> Vec<u8> {
        let events: Vec<WebhookEvent<'_>> = batch.iter().map(|(_, e)| e.wire()).collect();
        let mut out = Vec::with_capacity(32 + 96 * events.len());
        // `time_ms` is this attempt's: the Python SDK refuses a body more
        // than 300 s old.
        webhook::encode(&mut out, now_ms(), &events);
        out
    }

    fn headers(&self, body: &[u8]) -> Vec<(&'static str, String)> {
        let signature = webhook_signature(self.secret.as_bytes(), body).to_hex();
        vec![
            (KEY_HEADER, self.key.clone()),
            (SIGNATURE_HEADER, signature),
        ]
    }
}

/// Stripes of the member counts (no lock shared by every join).
const STRIPES: usize = 16;

/// How long an idle connection to a webhook URL is kept for the next batch
/// (as the hooks' `idle_timeout_ms` default).
const WEBHOOK_IDLE: Duration = Duration::from_secs(30);

/// The separator of a member's key: `#` is in no presence channel's name.
const MEMBER_SEP: char = '#';

/// One stripe of the member counts: sockets of this node per member key.
type MemberCounts = HashMap<Arc<str>, u32>;

/// What the webhooks need of the Pusher settings (`--pusher-webhook-*`,
/// each app's `webhook_url`), given by the node's start (the settings'
/// module sits above this one).
pub struct WebhookSettings {
    /// Every Pusher app, in the settings' order.
    pub apps: Vec<WebhookApp>,
    /// Events queued per app at most.
    pub queue: usize,
    /// Events per POST at most.
    pub batch: usize,
    /// How long a webhook URL has to answer a POST.
    pub timeout: Duration,
}

/// One Pusher app's webhook: where it goes and what signs it.
pub struct WebhookApp {
    pub id: String,
    pub key: String,
    pub secret: String,
    /// `None`: this app has no webhooks.
    pub url: Option<String>,
}

/// Every Pusher app's webhooks, with this node's members of presence
/// channels (for `member_added` / `member_removed`).
pub struct Webhooks {
    /// By app (the order of [`WebhookSettings::apps`]): its queue, when it has
    /// a webhook URL.
    apps: Vec<Option<Arc<Events<PusherFormat>>>>,
    by_id: HashMap<String, usize>,
    /// This node's sockets per member key, of apps with a webhook URL.
    members: Box<[Mutex<MemberCounts>]>,
    stats: Arc<EventStats>,
}

impl Webhooks {
    /// Starts the webhooks' thread when some app has a webhook URL
    /// (`ca_file`: the roots an https:// URL is checked against).
    pub fn start(config: &WebhookSettings, ca_file: Option<&Path>) -> io::Result<Option<Webhooks>> {
        if config.apps.iter().all(|a| a.url.is_none()) {
            return Ok(None);
        }
        let runtime = super::client::runtime("throng-webhooks")?;
        let client = super::client::http_client(config.timeout, WEBHOOK_IDLE, ca_file)?;
        let stats = Arc::new(EventStats::default());
        let mut apps = Vec::new();
        for app in &config.apps {
            let Some(url) = &app.url else {
                apps.push(None);
                continue;
            };
            let uri = url.parse::<hyper::Uri>().map_err(|e| {
                let why = format!("app {}'s webhook_url {url:?}: {e}", app.id);
                io::Error::new(io::ErrorKind::InvalidInput, why)
            })?;
            let target = Target {
                client: client.clone(),
                uri,
                timeout: config.timeout,
                batch: config.batch,
            };
            let format = PusherFormat {
                key: app.key.clone(),
                secret: app.secret.clone(),
            };
            let names = Names {
                what: format!("app {}'s Pusher webhooks", app.id),
                target: format!("app {}'s webhook_url", app.id),
                queue: "--pusher-webhook-queue",
                dropped_metric: "throng_pusher_webhook_events_dropped_total",
                retries_metric: "throng_pusher_webhook_retries_total",
            };
            let queue = config.queue;
            let events = Events::start_with(&runtime, queue, target, format, names, stats.clone());
            apps.push(Some(events));
        }
        let by_id = config
            .apps
            .iter()
            .enumerate()
            .map(|(i, a)| (a.id.clone(), i))
            .collect();
        Ok(Some(Webhooks {
            apps,
            by_id,
            members: (0..STRIPES).map(|_| Mutex::default()).collect(),
            stats,
        }))
    }

    /// Whether app `app` (its index) has a webhook URL.
    pub fn has_app(&self, app: usize) -> bool {
        self.apps.get(app).is_some_and(Option::is_some)
    }

    /// Queues `event` for app `app`'s webhook URL, if it has one.
    pub fn push(&self, app: usize, event: Webhook) {
        if let Some(Some(events)) = self.apps.get(app) {
            events.push(event);
        }
    }

    /// The app of a Pusher topic or member key, and the rest of it
    /// (`<channel>` or `<channel>#<user_id>`).
    fn app_of<'t>(&self, topic: &'t str) -> Option<(usize, &'t str)> {
        let (id, rest) = topic.strip_prefix(PUSHER_TOPIC_PREFIX)?.split_once('/')?;
        Some((*self.by_id.get(id)?, rest))
    }

    /// Whether the occupancy of `topic` (a channel's, or a member key)
    /// goes to a webhook: a Pusher channel of an app with a URL (not a
    /// user's own `#server-to-user-` channel).
    pub fn wants(&self, topic: &str) -> bool {
        self.app_of(topic)
            .is_some_and(|(app, rest)| self.has_app(app) && !rest.starts_with('#'))
    }

    /// `topic`'s channel, and its user when it is a member key.
    fn split(rest: &str) -> (&str, Option<&str>) {
        match rest.split_once(MEMBER_SEP) {
            Some((channel, user)) if !channel.is_empty() => (channel, Some(user)),
            _ => (rest, None),
        }
    }

    /// The occupancy engine found `topic` (a channel, or a member key)
    /// occupied, or (`occupied` false) vacated, cluster-wide.
    pub fn occupancy(&self, topic: &str, occupied: bool) {
        let Some((app, rest)) = self.app_of(topic) else {
            return;
        };
        let (channel, user) = Webhooks::split(rest);
        let channel: Box<str> = channel.into();
        let event = match (user, occupied) {
            (None, true) => Webhook::Occupied { channel },
            (None, false) => Webhook::Vacated { channel },
            (Some(user), true) => Webhook::MemberAdded {
                channel,
                user_id: user.into(),
            },
            (Some(user), false) => Webhook::MemberRemoved {
                channel,
                user_id: user.into(),
            },
        };
        self.push(app, event);
    }

    /// The member key of user `user` on presence channel topic `topic`.
    pub fn member_key(topic: &str, user: &str) -> Arc<str> {
        let mut key = String::with_capacity(topic.len() + 1 + user.len());
        key.push_str(topic);
        key.push(MEMBER_SEP);
        key.push_str(user);
        key.into()
    }

    fn stripe(&self, key: &str) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, u32>> {
        let i = BuildHasherDefault::<DefaultHasher>::default().hash_one(key) as usize % STRIPES;
        self.members[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A socket of this node joined (`joined`) or left member `key`: true
    /// when that was the node's first or last one (the occupancy engine is
    /// then told).
    pub fn member(&self, key: &Arc<str>, joined: bool) -> bool {
        let mut m = self.stripe(key);
        if joined {
            let n = m.entry(key.clone()).or_default();
            *n += 1;
            *n == 1
        } else {
            match m.get_mut(&**key) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    m.remove(&**key);
                    true
                }
                None => false,
            }
        }
    }

    /// Whether `topic` is a member key, and then whether this node has a
    /// socket of that member.
    pub fn has_member(&self, topic: &str) -> Option<bool> {
        let (_, rest) = self.app_of(topic)?;
        Webhooks::split(rest).1?;
        Some(self.stripe(topic).contains_key(topic))
    }

    /// Every member key this node has a socket of.
    pub fn member_keys(&self) -> Vec<Arc<str>> {
        let mut out = Vec::new();
        for stripe in self.members.iter() {
            let m = stripe.lock().unwrap_or_else(|e| e.into_inner());
            out.extend(m.keys().cloned());
        }
        out
    }

    /// Events waiting to be sent, every app's.
    pub fn queued(&self) -> usize {
        self.apps.iter().flatten().map(|e| e.queued()).sum()
    }

    /// Waits (blocking this thread) until every app's queued events
    /// reached their URL, at most `limit` in all; whether they all did.
    pub fn flush(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        self.apps.iter().flatten().all(|e| {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            e.flush(left)
        })
    }

    /// Hands the webhooks' metrics to `out`.
    pub fn describe(&self, out: &mut dyn Sink) {
        for (m, figure) in &METRICS {
            out.put(m, figure(self));
        }
    }
}

/// Every metric of the Pusher webhooks, and the figure it reads.
pub static METRICS: [throng_pubsub::metrics::Figure<Webhooks>; 5] = [
    (
        Metric::gauge(
            "throng_pusher_webhook_events_queued",
            "Pusher webhook events waiting for their app's webhook URL, every app's (bound per app: --pusher-webhook-queue).",
        ),
        |w| w.queued().into(),
    ),
    (
        Metric::counter(
            "throng_pusher_webhook_events_sent_total",
            "Pusher webhook events the webhook URLs took (2xx).",
        ),
        |w| w.stats.sent.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_pusher_webhook_batches_total",
            "Webhook POSTs the webhook URLs took (2xx).",
        ),
        |w| w.stats.batches.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_pusher_webhook_retries_total",
            "Webhook POSTs that failed (unreachable, timeout, not 2xx) and were sent again.",
        ),
        |w| w.stats.retries.load(Relaxed).into(),
    ),
    (
        Metric::counter(
            "throng_pusher_webhook_events_dropped_total",
            "Pusher webhook events dropped because --pusher-webhook-queue events of their app were waiting.",
        ),
        |w| w.stats.dropped.load(Relaxed).into(),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_pusher_s_body_signed_with_the_app_s_secret() {
        let f = PusherFormat {
            key: "app-key".into(),
            secret: "0123456789abcdef0123".into(),
        };
        let batch = [
            (
                "a-1".to_string(),
                Webhook::MemberAdded {
                    channel: "presence-a".into(),
                    user_id: "7".into(),
                },
            ),
            (
                "a-2".to_string(),
                Webhook::ClientEvent {
                    channel: "private-a".into(),
                    event: "client-x".into(),
                    data: Some(r#"{"a":1}"#.into()),
                    socket_id: "1.2".into(),
                    user_id: None,
                },
            ),
        ];
        let body = f.body(&batch);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(v["time_ms"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(v["events"][0]["name"], "member_added");
        assert_eq!(v["events"][0]["user_id"], "7");
        assert_eq!(v["events"][1]["data"], r#"{"a":1}"#);
        let headers = f.headers(&body);
        assert_eq!(headers[0], ("X-Pusher-Key", "app-key".to_string()));
        let sig = &headers[1].1;
        assert!(throng_protocol::pusher::signature::verify_webhook(
            b"0123456789abcdef0123",
            &body,
            sig
        ));
    }

    #[test]
    fn topics_and_member_keys_name_their_app_channel_and_user() {
        assert_eq!(
            Webhooks::split("presence-a#u#1"),
            ("presence-a", Some("u#1"))
        );
        assert_eq!(Webhooks::split("private-a"), ("private-a", None));
        assert_eq!(
            Webhooks::split("#server-to-user-1"),
            ("#server-to-user-1", None)
        );
        assert_eq!(
            &*Webhooks::member_key("pusher/1/presence-a", "u"),
            "pusher/1/presence-a#u"
        );
    }
}
