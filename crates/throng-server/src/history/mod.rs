//! Topic history and recovery on rejoin, on the server's side: which
//! broadcasts get a position (a topic whose `[[topics]]` rule has
//! `history_size`), how a join asks for what it missed, and the server
//! API's `GET /api/history` ([`api`]). The store itself is
//! [`throng_pubsub::MemoryHistory`].
//!
//! ## A broadcast
//! Every broadcast on a history topic (a channel's, a relay push, the
//! server API's, the app backend's) goes through `Node::publish_history`:
//! the store gives it the next offset and keeps it, and, under the topic's
//! lock, the one encoded broadcast (with `<epoch>.<offset>` as its `ref`)
//! is queued for every shard with subscribers, the origin shard included.
//! So each shard gets a topic's messages in offset order.
//!
//! ## A join with `since`
//! phoenix.js re-evaluates join params given as a function on every rejoin,
//! so an app passes the ref of the last message it saw:
//! `socket.channel("feed:1", () => (since ? {since} : {}))`. On such a join
//! the shard subscribes the socket first, then reads the history under the
//! topic's lock ([`crate::protocol::phoenix::socket`]'s `join_since`): every message after the
//! newest one read is queued for this shard after the read, and reaches
//! the socket live; the ones up to it that are still in the shard's inbox
//! were sent in the replay, and the shard skips them for this socket
//! (`Conns::replayed`, an entry per such join until the shard's inbox is
//! next empty, nothing per idle socket). So replay and live meet with no gap and no
//! duplicate. The ok reply gains `"recovered": true|false` (an object
//! reply; other replies go as they are), then come the messages after
//! `since`, oldest first, each with the new join's join_ref and its own
//! ref. A `since` that is malformed, of another topic or epoch, in the
//! future or older than what is kept gets `recovered: false` and no
//! message.
//!
//! ## With `--redis`: history in Redis Streams
//! The store is [`throng_pubsub::RedisHistory`]: a broadcast of a history
//! topic is handed to its thread, whose Lua script gives it its offset,
//! keeps it and PUBLISHes it with its position; every node delivers it
//! from Redis, this one too, so every subscriber in the cluster sees the
//! topic's messages in offset order (a channel's broadcast is thus sent a
//! round trip later than without history). The server API's publish waits
//! for the script's answer to return the ref (503 when Redis is away).
//!
//! A join with `since` is answered later: the socket is subscribed, the
//! read waits until this node's SUBSCRIBE of the topic is active
//! (`Backplane::when_subscribed`), then reads the stream in batches, and
//! the answer comes back through the shard's inbox (`ShardMsg::Replay`),
//! as a hook's does. Meanwhile the topic's live messages for that socket
//! are held aside (`Conns::pending`); with the answer go the reply, the
//! replay, then the held messages after the replay's last, and later live
//! messages up to it are skipped (`Conns::replayed`, kept until a newer
//! message passes it). Every message after the read came through the
//! subscription, so there is no gap and no duplicate. A read Redis cannot
//! answer now (away, or later than `--redis-timeout-ms`) comes back
//! "unavailable" (`Replay::unavailable`): the join is undone and refused
//! with `{"reason":"history unavailable"}` (`Mux::since_refused`), and
//! phoenix.js joins again with the same `since`, rather than being told
//! `recovered: false` about messages Redis still keeps.
//!
//! A shard also watches each history topic's positions as they arrive
//! (`Topic::last`): an offset that skips one (the node's Redis connection
//! was lost meanwhile, or a shard's inbox dropped one) or an epoch that
//! changes (Redis lost the history) closes the topic's subscribers on the
//! shard, as slow readers; phoenix.js rejoins with `since` and recovers
//! what it missed, or gets `recovered: false`. Never a silent gap.

pub mod api;
pub(crate) mod recovery;

/// A join with `since` waiting for its history read (in Redis): what its
/// reply needs.
pub(crate) struct HeldJoin {
    pub join_ref: Option<throng_protocol::RefBuf>,
    pub msg_ref: Option<throng_protocol::RefBuf>,
    /// The channel's ok reply.
    pub response: throng_protocol::OwnedPayload,
}

// In the node's shard inboxes, below this module (`crate::node`).
pub(crate) use crate::node::ReplayAnswer;

use std::sync::atomic::Ordering::Relaxed;

use serde::Deserialize;
use throng_protocol::Payload;
use throng_pubsub::metrics::{Metric, Sink};
use throng_pubsub::MemoryHistory;

/// The `since` of a join's payload: `None` when it has none (or `null`),
/// `Some(None)` when it has one that is not a string (no position, so
/// `recovered: false`).
pub(crate) fn since_of(payload: Payload<'_>) -> Option<Option<String>> {
    let Payload::Json(json) = payload else {
        return None;
    };
    // Most joins have no `since`: no parse for them. Only an object has
    // keys (serde would read a struct from an array too).
    if !json.contains("\"since\"") || !json.trim_start().starts_with('{') {
        return None;
    }
    #[derive(Deserialize)]
    struct Since {
        #[serde(default)]
        since: Option<serde_json::Value>,
    }
    match serde_json::from_str::<Since>(json) {
        Ok(Since { since: None }) => None,
        Ok(Since {
            since: Some(serde_json::Value::String(s)),
        }) => Some(Some(s)),
        // A number, an object, a repeated key...
        _ => Some(None),
    }
}

/// `response` (a join's JSON reply) with `"recovered"` added when it is an
/// object; `None` leaves it as it is.
pub(crate) fn with_recovered(response: &str, recovered: bool) -> Option<String> {
    let body = response.trim_start().strip_prefix('{')?;
    let sep = if body.trim_start().starts_with('}') {
        ""
    } else {
        ","
    };
    Some(format!("{{\"recovered\":{recovered}{sep}{body}"))
}

/// Reads `topic`'s history after `since` (without: the newest messages
/// kept, as a Pusher cache channel's subscription reads its last event;
/// `rule` keeps it) and hands what it found to `then`: at once from this
/// process's store, or once Redis answers (the read waits until the
/// node's subscription of the topic is active: every later message then
/// comes live). The one read of a rejoin, whichever store keeps the
/// history.
pub(crate) fn read(
    node: &crate::node::Node,
    rule: crate::rules::HistoryRule,
    topic: std::sync::Arc<str>,
    since: Option<&str>,
    then: impl FnOnce(throng_pubsub::Replay) + Send + 'static,
) {
    if let Some(redis) = node.history_redis.clone() {
        let since = since.map(str::to_string);
        let name = std::sync::Arc::clone(&topic);
        let read = move || {
            redis.read(
                &name,
                since.as_deref(),
                usize::MAX,
                rule.size,
                Box::new(then),
            )
        };
        node.backplane.when_subscribed(&topic, Box::new(read));
    } else if let Some(store) = &node.history {
        let now = std::time::Instant::now();
        store.read(&topic, since, usize::MAX, now, then);
    } else {
        then(throng_pubsub::Replay::default());
    }
}

/// Every metric of the history in this process, and the figure it reads.
pub(crate) static METRICS: [throng_pubsub::metrics::Shared<MemoryHistory>; 7] = [
    (
        &Metric::gauge(
            "throng_history_bytes",
            "Bytes the topics' history holds, against --max-history-bytes.",
        ),
        |h| h.stats.bytes.load(Relaxed).into(),
    ),
    (
        &Metric::gauge(
            "throng_history_budget_bytes",
            "--max-history-bytes.",
        ),
        |h| h.budget().into(),
    ),
    (
        &Metric::gauge(
            "throng_history_messages",
            "Messages kept in topic history.",
        ),
        |h| h.stats.messages.load(Relaxed).into(),
    ),
    (
        &Metric::gauge(
            "throng_history_topics",
            "Topics with a history.",
        ),
        |h| h.stats.topics.load(Relaxed).into(),
    ),
    (&throng_pubsub::history::PUBLISHED, |h| h.stats.published.load(Relaxed).into()),
    (
        &Metric::counter(
            "throng_history_evicted_total",
            "Messages dropped from history, or never kept, for --max-history-bytes (a rejoin from before them gets recovered: false).",
        ),
        |h| h.stats.evicted.load(Relaxed).into(),
    ),
    (
        &Metric::counter(
            "throng_history_expired_total",
            "Topic histories forgotten history_ttl after their last message.",
        ),
        |h| h.stats.expired.load(Relaxed).into(),
    ),
];

/// The store's metrics.
pub(crate) fn describe(h: &MemoryHistory, out: &mut dyn Sink) {
    for (m, figure) in &METRICS {
        out.put(m, figure(h));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_in_a_join_payload() {
        let j = |s: &'static str| since_of(Payload::Json(s));
        assert_eq!(j("{}"), None);
        assert_eq!(j(r#"{"user":"since"}"#), None);
        assert_eq!(j(r#"{"since":null}"#), None);
        assert_eq!(j(r#"{"since":"ab.1","x":[1]}"#), Some(Some("ab.1".into())));
        assert_eq!(j(r#"{"since":"a\"b"}"#), Some(Some("a\"b".into())));
        assert_eq!(j(r#"{"since":12}"#), Some(None));
        assert_eq!(j(r#"{"since":{"a":1}}"#), Some(None));
        assert_eq!(j(r#"["since"]"#), None);
        assert_eq!(since_of(Payload::Binary(b"\"since\"")), None);
    }

    #[test]
    fn recovered_goes_into_object_replies() {
        assert_eq!(with_recovered("{}", true).unwrap(), r#"{"recovered":true}"#);
        assert_eq!(
            with_recovered(r#"{"a":1}"#, false).unwrap(),
            r#"{"recovered":false,"a":1}"#
        );
        assert_eq!(with_recovered("[1]", true), None);
        assert_eq!(with_recovered("null", true), None);
    }
}
