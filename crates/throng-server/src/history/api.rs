//! `GET /api/history?topic=T&since=REF&limit=N`: a topic's history for an
//! app's backend, as `{"messages": [{"ref", "event", "payload"}...],
//! "recovered": bool}`: the messages after `since` (all of them when
//! `recovered`), oldest first, at most `limit`; without `since`, the newest
//! `limit` kept (`recovered` is then false: there was no position to
//! recover from); 503 `history_unavailable` while the history in Redis
//! cannot be read. The route and its key check are in `crate::api`.

use std::time::Instant;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};
use throng_protocol::OwnedPayload;

use crate::node::Endpoint;

/// Messages an answer holds when the query gives no `limit`.
pub const DEFAULT_LIMIT: usize = 100;

/// The query string.
#[derive(Deserialize, Debug, Default)]
pub struct HistoryQuery {
    #[serde(default)]
    pub topic: Option<String>,
    #[serde(default)]
    pub since: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Why a history query has no answer: a stable code and a message.
#[derive(Debug)]
pub struct NoHistory {
    pub code: &'static str,
    pub message: String,
}

/// The answer to a query of `topic`'s history.
pub async fn answer(
    endpoint: &Endpoint,
    topic: &str,
    q: &HistoryQuery,
) -> Result<Value, NoHistory> {
    let node = endpoint.node();
    let rule = node.policy.history(topic);
    let kept = node.history.is_some() || node.history_redis.is_some();
    let (true, Some(rule)) = (kept, rule) else {
        return Err(NoHistory {
            code: "no_history",
            message: format!(
                "topic {topic:?} keeps no history: give its [[topics]] rule a history_size \
                 (docs/history.md)"
            ),
        });
    };
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > crate::rules::MAX_HISTORY_SIZE {
        return Err(NoHistory {
            code: "bad_limit",
            message: format!(
                "limit must be 1..={}, got {limit}",
                crate::rules::MAX_HISTORY_SIZE
            ),
        });
    }
    let found = match (&node.history, &node.history_redis) {
        (Some(store), _) => store.read(topic, q.since.as_deref(), limit, Instant::now(), |r| r),
        (None, Some(redis)) => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let then = Box::new(move |r| {
                let _ = tx.send(r);
            });
            redis.read(topic, q.since.as_deref(), limit, rule.size, then);
            rx.await
                .unwrap_or_else(|_| throng_pubsub::Replay::unavailable())
        }
        (None, None) => Default::default(),
    };
    if found.unavailable {
        return Err(NoHistory {
            code: "history_unavailable",
            message: "the history could not be read from Redis now (it is away or slow): \
                      try again shortly; throng reconnects by itself"
                .into(),
        });
    }
    let messages: Vec<Value> = found
        .messages
        .iter()
        .map(|e| {
            let payload = match &e.payload {
                OwnedPayload::Json(text) => serde_json::from_str(text).unwrap_or(Value::Null),
                OwnedPayload::Binary(bytes) => {
                    json!({"binary": base64::engine::general_purpose::STANDARD.encode(bytes)})
                }
            };
            json!({"ref": found.ref_of(e), "event": &*e.event, "payload": payload})
        })
        .collect();
    Ok(json!({"messages": messages, "recovered": found.recovered}))
}
