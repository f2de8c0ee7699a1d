//! The `throng-redis` thread: one [`Session`] (a publisher and a subscriber
//! connection) at a time, the loop that publishes queued broadcasts and
//! direct messages in pipelines, reconciles subscriptions with the node's
//! topic set, hands messages from other nodes to the [`Handler`], and
//! rebuilds the session with backoff when Redis goes away.

use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use ::redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::{
    Outgoing, Stats, BACKOFF_MAX, BACKOFF_MIN, CHANNEL_PREFIX, CONNECT_TIMEOUT, MAX_BATCH,
    MAX_BATCH_BYTES, MAX_SUBSCRIBE_BATCH, PING_EVERY, RESPONSE_TIMEOUT,
};
use crate::backplane::envelope::Envelope;
use crate::backplane::Handler;
use crate::Broadcast;

/// One pair of connections to Redis.
pub(super) struct Session {
    publisher: MultiplexedConnection,
    sink: PubSubSink,
    stream: PubSubStream,
    /// Topics this session has SUBSCRIBEd.
    subscribed: HashSet<Arc<str>>,
}

impl Session {
    /// Connects both connections and subscribes the node's own channel
    /// (`node_channel`), so direct messages reach a connected node.
    pub async fn connect(
        client: &::redis::Client,
        node_channel: &str,
    ) -> ::redis::RedisResult<Session> {
        let attempt = async {
            let config = ::redis::AsyncConnectionConfig::new()
                .set_connection_timeout(CONNECT_TIMEOUT)
                .set_response_timeout(RESPONSE_TIMEOUT);
            let mut publisher = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            let (mut sink, stream) = client.get_async_pubsub().await?.split();
            // Both connections answer now: a wrong password, a missing ACL
            // permission or a TLS problem shows here, not at the first publish.
            ::redis::cmd("PING")
                .query_async::<()>(&mut publisher)
                .await?;
            sink.subscribe(node_channel).await?;
            Ok(Session {
                publisher,
                sink,
                stream,
                subscribed: HashSet::new(),
            })
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {CONNECT_TIMEOUT:?}"),
            )
            .into()),
        }
    }

    /// SUBSCRIBEs (or UNSUBSCRIBEs) `topics`, one command per channel but
    /// all in flight at once: each reply then answers its own command.
    async fn set_subscribed(
        &mut self,
        topics: Vec<Arc<str>>,
        on: bool,
    ) -> ::redis::RedisResult<()> {
        for chunk in topics.chunks(MAX_SUBSCRIBE_BATCH) {
            let requests = chunk.iter().map(|t| {
                let mut sink = self.sink.clone();
                let channel = channel_of(t);
                async move {
                    if on {
                        sink.subscribe(channel).await
                    } else {
                        sink.unsubscribe(channel).await
                    }
                }
            });
            with_timeout(futures_util::future::try_join_all(requests)).await?;
            for t in chunk {
                if on {
                    self.subscribed.insert(t.clone());
                } else {
                    self.subscribed.remove(t);
                }
            }
        }
        Ok(())
    }
}

/// The `throng-redis` thread's state.
pub(super) struct Task {
    pub client: ::redis::Client,
    pub url: String,
    pub node_id: u64,
    /// This node's direct-message channel.
    pub node_channel: String,
    pub handler: Arc<OnceLock<Weak<dyn Handler>>>,
    pub stats: Arc<Stats>,
    pub publish_rx: mpsc::Receiver<Outgoing>,
    pub topic_rx: mpsc::UnboundedReceiver<Arc<str>>,
}

/// Why a session ended.
enum End {
    /// The backplane was dropped: stop.
    Closed,
    /// Redis went away.
    Lost(::redis::RedisError),
}

impl From<::redis::RedisError> for End {
    fn from(e: ::redis::RedisError) -> End {
        End::Lost(e)
    }
}

impl Task {
    pub async fn run(mut self, first: Session) {
        let mut session = first;
        // Topics that got subscribers before the node was attached (none,
        // in practice) are picked up by the first reconcile.
        loop {
            let err = match self.serve(&mut session).await {
                End::Closed => return,
                End::Lost(e) => e,
            };
            self.stats.connected.store(false, Relaxed);
            drop(session);
            let down_at = Instant::now();
            let dropped_before = self.stats.dropped.load(Relaxed);
            tracing::error!(
                "cluster backplane: lost the connection to Redis at {}: {err}; reconnecting \
                 with backoff ({BACKOFF_MIN:?} doubling to {BACKOFF_MAX:?}). Until then local \
                 delivery continues and broadcasts to other nodes are dropped",
                self.url
            );
            session = match self.reconnect().await {
                Some(s) => s,
                None => return,
            };
            self.stats.reconnects.fetch_add(1, Relaxed);
            self.stats.connected.store(true, Relaxed);
            tracing::info!(
                url = %self.url,
                down_ms = down_at.elapsed().as_millis() as u64,
                topics = session.subscribed.len(),
                dropped = self.stats.dropped.load(Relaxed) - dropped_before,
                "cluster backplane: reconnected to Redis at {} and re-subscribed every local topic",
                self.url
            );
        }
    }

    fn handler(&self) -> Option<Arc<dyn Handler>> {
        self.handler.get().and_then(Weak::upgrade)
    }

    /// Runs a connected session until Redis goes away or the backplane is dropped.
    async fn serve(&mut self, s: &mut Session) -> End {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            tokio::select! {
                msg = s.stream.next() => match msg {
                    Some(msg) if msg.get_channel_name() == self.node_channel => {
                        self.direct(msg.get_payload_bytes())
                    }
                    Some(msg) => self.deliver(s, msg.get_channel_name(), msg.get_payload_bytes()),
                    None => return End::Lost(closed("the subscriber connection closed")),
                },
                out = self.publish_rx.recv() => match out {
                    Some(first) => if let Err(e) = self.publish_batch(s, first).await {
                        return e;
                    },
                    None => return End::Closed,
                },
                topic = self.topic_rx.recv() => match topic {
                    Some(first) => if let Err(e) = self.reconcile(s, first).await {
                        return e.into();
                    },
                    None => return End::Closed,
                },
                _ = ping.tick() => {
                    if let Err(e) = with_timeout(s.sink.ping::<::redis::Value>()).await {
                        return e.into();
                    }
                }
            }
        }
    }

    /// Publishes `first` and whatever else is queued, as one pipeline of
    /// at most [`MAX_BATCH`] commands and about [`MAX_BATCH_BYTES`].
    async fn publish_batch(&mut self, s: &mut Session, first: Outgoing) -> Result<(), End> {
        let mut pipe = ::redis::pipe();
        let mut n = 0u64;
        let mut direct = 0u64;
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(out) = next {
            direct += out.direct as u64;
            bytes += out.payload.len();
            self.stats
                .queued_bytes
                .fetch_sub(out.payload.len(), Relaxed);
            pipe.cmd("PUBLISH")
                .arg(out.channel)
                .arg(out.payload)
                .ignore();
            n += 1;
            next = if n < MAX_BATCH as u64 && bytes < MAX_BATCH_BYTES {
                self.publish_rx.try_recv().ok()
            } else {
                None
            };
        }
        match pipe.query_async::<()>(&mut s.publisher).await {
            Ok(()) => {
                self.stats.published.fetch_add(n - direct, Relaxed);
                self.stats.direct_sent.fetch_add(direct, Relaxed);
                Ok(())
            }
            Err(e) => {
                self.stats.dropped.fetch_add(n, Relaxed);
                Err(End::Lost(e))
            }
        }
    }

    /// Brings the subscriptions of `first` and of every other queued topic
    /// change in line with the node's topic set. The set, not the call that
    /// queued the change, decides: two shards' first/last-subscriber calls
    /// may arrive out of order, the set is always current.
    async fn reconcile(&mut self, s: &mut Session, first: Arc<str>) -> ::redis::RedisResult<()> {
        let mut changed = HashSet::from([first]);
        while let Ok(t) = self.topic_rx.try_recv() {
            changed.insert(t);
        }
        let Some(handler) = self.handler() else {
            return Ok(());
        };
        let (mut add, mut remove) = (Vec::new(), Vec::new());
        for t in changed {
            let wanted = handler.has_topic(&t);
            match (wanted, s.subscribed.contains(&t)) {
                (true, false) => add.push(t),
                (false, true) => remove.push(t),
                _ => {}
            }
        }
        if !add.is_empty() {
            s.set_subscribed(add, true).await?;
        }
        if !remove.is_empty() {
            s.set_subscribed(remove, false).await?;
        }
        Ok(())
    }

    /// A direct message from another node, for this node's handler.
    fn direct(&self, bytes: &[u8]) {
        if let Some(handler) = self.handler() {
            self.stats.direct_received.fetch_add(1, Relaxed);
            handler.direct(bytes);
        }
    }

    /// A message from Redis on `channel`: delivered only if it is a valid
    /// envelope for that channel (see `Envelope::validate`).
    fn deliver(&self, s: &Session, channel: &str, bytes: &[u8]) {
        let env = match Envelope::decode(bytes).and_then(|env| {
            let topic = channel.strip_prefix(CHANNEL_PREFIX).unwrap_or("");
            env.validate(topic).map(|()| env)
        }) {
            Ok(env) => env,
            Err(e) => {
                let n = self.stats.invalid.fetch_add(1, Relaxed);
                if n.is_power_of_two() || n == 0 {
                    tracing::warn!(
                        error = %e,
                        channel,
                        count = n + 1,
                        "cluster backplane: dropped an invalid message from Redis (not forwarded \
                         to any client; counted in throng_backplane_invalid_total)"
                    );
                }
                return;
            }
        };
        if env.node == self.node_id {
            return; // ours: the shards delivered it already
        }
        let Some(handler) = self.handler() else {
            return;
        };
        let topic = s
            .subscribed
            .get(env.topic)
            .cloned()
            .unwrap_or_else(|| Arc::from(env.topic));
        self.stats.received.fetch_add(1, Relaxed);
        handler.deliver(Arc::new(Broadcast::new(
            topic,
            env.event.to_owned(),
            env.payload.into(),
            None,
        )));
    }

    /// Drops what piled up while disconnected: queued broadcasts (counted)
    /// and topic changes (the re-subscribe reads the node's whole set after).
    /// Returns false once the backplane is gone.
    fn drain(&mut self) -> bool {
        let mut n = 0;
        loop {
            match self.publish_rx.try_recv() {
                Ok(out) => {
                    self.stats
                        .queued_bytes
                        .fetch_sub(out.payload.len(), Relaxed);
                    n += 1;
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
        self.stats.dropped.fetch_add(n, Relaxed);
        loop {
            match self.topic_rx.try_recv() {
                Ok(_) => {}
                Err(mpsc::error::TryRecvError::Empty) => return true,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
    }

    /// Reconnects with backoff and re-subscribes every local topic.
    async fn reconnect(&mut self) -> Option<Session> {
        let mut delay = BACKOFF_MIN;
        let mut attempt = 0u32;
        loop {
            tokio::time::sleep(delay).await;
            attempt += 1;
            if !self.drain() {
                return None;
            }
            match Session::connect(&self.client, &self.node_channel).await {
                Ok(mut s) => {
                    // Changes queued from here on are reconciled by `serve`;
                    // everything before is in the snapshot.
                    if !self.drain() {
                        return None;
                    }
                    let topics = self.handler().map(|h| h.topics()).unwrap_or_default();
                    match s.set_subscribed(topics, true).await {
                        Ok(()) => return Some(s),
                        Err(e) => tracing::debug!(attempt, error = %e, "re-subscribe failed"),
                    }
                }
                Err(e) => tracing::debug!(attempt, error = %e, "reconnect failed"),
            }
            delay = (delay * 2).min(BACKOFF_MAX);
        }
    }
}

pub(super) fn channel_of(topic: &str) -> String {
    let mut c = String::with_capacity(CHANNEL_PREFIX.len() + topic.len());
    c.push_str(CHANNEL_PREFIX);
    c.push_str(topic);
    c
}

fn closed(what: &'static str) -> ::redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, what).into()
}

async fn with_timeout<T>(
    f: impl std::future::Future<Output = ::redis::RedisResult<T>>,
) -> ::redis::RedisResult<T> {
    match tokio::time::timeout(RESPONSE_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("Redis did not answer within {RESPONSE_TIMEOUT:?}"),
        )
        .into()),
    }
}
