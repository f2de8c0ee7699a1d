//! The HTTP API's answers that need the whole cluster: which channels are
//! occupied, their subscription counts (sockets) and user counts (distinct
//! presence members), a presence channel's users, and a trigger's `info`.
//!
//! They are worked out off the shards, on a small current-thread tokio
//! runtime in its own thread (`throng-pusher-api`), started the first time
//! one is asked (the server API's runtime exists only with `--api-bind`):
//! subscription counts from a node report of every node, each counting
//! only the app's topics (`Endpoint::gather_under`, over the control lane,
//! waiting `control::GATHER_WAIT` for the other nodes), user counts and
//! users from the presence tracker or store (`Endpoint::presence`: this
//! node's copy when it has subscribers, else the store of every node's).
//! The answer, its JSON made there, goes back to the shard whose
//! connection holds the request, through its inbox.
//!
//! Bounded: at most `--pusher-max-api-requests` at once on a node (the
//! shard answers 503 past it), each within `--pusher-api-timeout` (504).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use throng_protocol::pusher::channels::{
    encode_channel, encode_channels, encode_users, ChannelCounts, Info,
};
use throng_protocol::pusher::trigger::{encode_batch_answer, encode_events_answer};
use throng_protocol::pusher::ChannelType;
use tokio::runtime::Handle;

use super::super::socket::topic_of;
use super::{answer_msg, error_body};
use crate::node::{Endpoint, Node, ShardMsg};

/// What a held request waits for (its app by id).
pub(crate) enum Question {
    /// `GET /channels`: occupied channels under `prefix`, with each one's
    /// user count if asked (presence channels only).
    Channels {
        app_id: String,
        prefix: Option<String>,
        user_count: bool,
    },
    /// `GET /channels/{channel}`.
    Channel {
        app_id: String,
        channel: String,
        info: Info,
    },
    /// `GET /channels/{channel}/users`.
    Users { app_id: String, channel: String },
    /// A trigger's `info`, for each of its channels.
    Events {
        app_id: String,
        channels: Vec<String>,
        info: Info,
    },
    /// A batch's `info`: each event's channel and what it asked.
    Batch {
        app_id: String,
        items: Vec<Option<(String, Info)>>,
    },
}

/// The figures' runtime and bounds, one per node.
pub(crate) struct Figures {
    runtime: OnceLock<Option<Handle>>,
    in_flight: Arc<AtomicUsize>,
    max: usize,
    timeout: Duration,
}

impl Figures {
    pub fn new(max: usize, timeout: Duration) -> Figures {
        Figures {
            runtime: OnceLock::new(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            max,
            timeout,
        }
    }

    /// `--pusher-max-api-requests`.
    pub fn max(&self) -> usize {
        self.max
    }

    /// `--pusher-api-timeout`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Works out `q` for request `id` of connection `key` of `shard`, whose
    /// answer then comes to that shard's inbox; false when it cannot now
    /// (the node holds its most, or is stopping).
    pub fn ask(&self, node: &Node, shard: usize, key: usize, id: u64, q: Question) -> bool {
        let Some(handle) = self.runtime.get_or_init(start) else {
            return false;
        };
        let Some(node) = node.this.get().and_then(Weak::upgrade) else {
            return false;
        };
        let max = self.max;
        if self
            .in_flight
            .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
            .is_err()
        {
            return false;
        }
        let (in_flight, timeout) = (self.in_flight.clone(), self.timeout);
        handle.spawn(async move {
            let endpoint = Endpoint::new(node.clone());
            let (status, body) = match tokio::time::timeout(timeout, answer(&endpoint, q)).await {
                Ok(answered) => answered,
                Err(_) => {
                    let why = format!(
                        "no answer from the cluster within {} s (--pusher-api-timeout): retry",
                        timeout.as_secs()
                    );
                    (504, error_body(&why))
                }
            };
            in_flight.fetch_sub(1, Relaxed);
            if let Some(peer) = node.peers.get(shard) {
                peer.send(ShardMsg::Pusher(answer_msg(key, id, status, body)));
            }
        });
        true
    }
}

/// Starts the figures' thread; `None` (logged) if it cannot.
fn start() -> Option<Handle> {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("throng-pusher-api".into())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    let _ = tx.send(Ok(rt.handle().clone()));
                    rt.block_on(std::future::pending::<()>());
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        });
    let started = spawned.map_err(|e| e.to_string()).and_then(|_| {
        rx.recv()
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
    });
    match started {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::error!(
                "the Pusher HTTP API's thread did not start ({e}): channel and user \
                 queries are answered 503"
            );
            None
        }
    }
}

/// The status and JSON body that answer `q`.
async fn answer(e: &Endpoint, q: Question) -> (u16, Vec<u8>) {
    let answered = match q {
        Question::Channels {
            app_id,
            prefix,
            user_count,
        } => channels(e, &app_id, prefix.as_deref().unwrap_or(""), user_count).await,
        Question::Channel {
            app_id,
            channel,
            info,
        } => one_channel(e, &app_id, &channel, info).await,
        Question::Users { app_id, channel } => users(e, &app_id, &channel).await,
        Question::Events {
            app_id,
            channels,
            info,
        } => {
            let asks: Vec<(&str, Info)> = channels.iter().map(|c| (c.as_str(), info)).collect();
            counts(e, &app_id, &asks).await.map(|counts| {
                let mut out = Vec::new();
                let named = channels.iter().map(String::as_str).zip(counts);
                encode_events_answer(&mut out, info, named);
                out
            })
        }
        Question::Batch { app_id, items } => {
            let asks: Vec<(&str, Info)> = items
                .iter()
                .map(|i| {
                    i.as_ref()
                        .map_or(("", Info::default()), |(c, i)| (c.as_str(), *i))
                })
                .collect();
            counts(e, &app_id, &asks).await.map(|counts| {
                let items: Vec<Option<ChannelCounts>> = items
                    .iter()
                    .zip(counts)
                    .map(|(i, c)| i.as_ref().map(|_| c))
                    .collect();
                let mut out = Vec::new();
                encode_batch_answer(&mut out, &items);
                out
            })
        }
    };
    match answered {
        Ok(body) => (200, body),
        Err(why) => (503, error_body(&why)),
    }
}

/// Subscribed sockets of every topic under `prefix` with any, cluster-wide
/// (each node that answered within the gather's wait).
async fn subscriptions(e: &Endpoint, prefix: &str) -> BTreeMap<String, u64> {
    let mut subs = BTreeMap::new();
    for (report, _) in e.gather_under(Some(prefix)).await {
        // A node built before the prefix sends every topic.
        for (topic, n) in report.topics {
            if n > 0 && topic.starts_with(prefix) {
                *subs.entry(topic).or_default() += n;
            }
        }
    }
    subs
}

/// Distinct users on presence topic `topic`, cluster-wide.
async fn user_count(e: &Endpoint, topic: &str) -> Result<u64, String> {
    e.presence(topic)
        .await
        .map(|view| view.count as u64)
        .map_err(|err| format!("{err}: retry shortly"))
}

fn is_presence(channel: &str) -> bool {
    ChannelType::of(channel).is_ok_and(ChannelType::is_presence)
}

/// `GET /channels`: `{"channels":{name: {..}}}`, the occupied channels
/// under `prefix`.
async fn channels(
    e: &Endpoint,
    app_id: &str,
    prefix: &str,
    user_count: bool,
) -> Result<Vec<u8>, String> {
    let base = topic_of(app_id, "");
    let subs = subscriptions(e, &topic_of(app_id, prefix)).await;
    // A signed-in user's own channel is no channel of the app's list
    // unless asked for by name.
    let users_asked = prefix.starts_with('#');
    let names: Vec<&str> = subs
        .keys()
        .filter_map(|t| t.strip_prefix(base.as_str()))
        .filter(|c| users_asked || !c.starts_with('#'))
        .collect();
    let users = join_all(names.iter().map(|c| async {
        if user_count && is_presence(c) {
            user_count_of(e, app_id, c).await.map(Some)
        } else {
            Ok(None)
        }
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::new();
    encode_channels(&mut out, names.into_iter().zip(users));
    Ok(out)
}

async fn user_count_of(e: &Endpoint, app_id: &str, channel: &str) -> Result<u64, String> {
    user_count(e, &topic_of(app_id, channel)).await
}

/// `GET /channels/{channel}`: `{"occupied":..,..}`.
async fn one_channel(
    e: &Endpoint,
    app_id: &str,
    channel: &str,
    info: Info,
) -> Result<Vec<u8>, String> {
    let topic = topic_of(app_id, channel);
    let subscribed = subscriptions(e, &topic)
        .await
        .get(&topic)
        .copied()
        .unwrap_or(0);
    let users = match info.user_count {
        true => Some(user_count(e, &topic).await?),
        false => None,
    };
    let counts = ChannelCounts {
        user_count: users,
        subscription_count: info.subscription_count.then_some(subscribed),
    };
    let mut out = Vec::new();
    encode_channel(&mut out, subscribed > 0, counts);
    Ok(out)
}

/// `GET /channels/{channel}/users`: `{"users":[{"id":..},..]}`.
async fn users(e: &Endpoint, app_id: &str, channel: &str) -> Result<Vec<u8>, String> {
    let view = e
        .presence(&topic_of(app_id, channel))
        .await
        .map_err(|err| format!("{err}: retry shortly"))?;
    let state: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&view.state).unwrap_or_default();
    let mut out = Vec::new();
    encode_users(&mut out, state.keys().map(String::as_str));
    Ok(out)
}

/// The counts each of `asks` (a channel and what it asks for; an empty
/// channel asks nothing) wants, cluster-wide.
async fn counts(
    e: &Endpoint,
    app_id: &str,
    asks: &[(&str, Info)],
) -> Result<Vec<ChannelCounts>, String> {
    let subs = if asks.iter().any(|(_, i)| i.subscription_count) {
        let prefix = match asks {
            [(channel, _)] => topic_of(app_id, channel),
            _ => topic_of(app_id, ""),
        };
        subscriptions(e, &prefix).await
    } else {
        BTreeMap::new()
    };
    let users = join_all(asks.iter().map(|(c, i)| async {
        if i.user_count && is_presence(c) {
            user_count_of(e, app_id, c).await.map(Some)
        } else {
            Ok(None)
        }
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    Ok(asks
        .iter()
        .zip(users)
        .map(|((c, i), users)| ChannelCounts {
            user_count: users,
            subscription_count: i
                .subscription_count
                .then(|| subs.get(&topic_of(app_id, c)).copied().unwrap_or(0)),
        })
        .collect())
}
