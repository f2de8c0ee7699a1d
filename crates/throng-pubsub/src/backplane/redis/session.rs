//! The `throng-redis` thread's side of the backplane: a [`Worker`] of the
//! [Redis link](crate::link) that publishes queued broadcasts and control
//! messages in pipelines, reconciles subscriptions with the node's topic
//! set, hands messages from other nodes to the [`Handler`], and on each new
//! session subscribes everything again and replays the retained control
//! messages. Connecting, timeouts and reconnecting are the link's.

use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock, Weak};

use tokio::sync::mpsc;

use super::{
    Change, Kind, Names, Outgoing, Stats, CHANNEL_PREFIX, MAX_BATCH, MAX_BATCH_BYTES,
    MAX_SUBSCRIBE_BATCH, RETAINED_BATCH,
};
use crate::backplane::envelope::Envelope;
use crate::backplane::{control, Handler};
use crate::link::{timed, End, Health, Link, RResult, Worker};
use crate::Broadcast;

/// What one session has subscribed.
pub(super) struct Session {
    /// Topics this session has SUBSCRIBEd.
    subscribed: HashSet<Arc<str>>,
}

/// The `throng-redis` thread's state.
pub(super) struct Task {
    pub node_id: u64,
    /// This node's control channel.
    pub node_channel: String,
    /// Channel and key names (one Redis or a cluster).
    pub names: Names,
    pub handler: Arc<OnceLock<Weak<dyn Handler>>>,
    pub stats: Arc<Stats>,
    pub publish_rx: mpsc::Receiver<Outgoing>,
    pub topic_rx: mpsc::UnboundedReceiver<Change>,
    /// Attach calls waiting for the replay (queued while reconnecting).
    pub attached: Vec<std::sync::mpsc::SyncSender<()>>,
}

impl Worker for Task {
    type Session = Session;
    const WHAT: &'static str = "cluster backplane";
    const MEANWHILE: &'static str =
        "local delivery continues and broadcasts to other nodes are dropped";

    fn health(&self) -> &Health {
        &self.stats.link
    }

    /// Subscribes the control channels and every local topic, then hands
    /// the node the retained control messages (once attached).
    async fn setup(&mut self, link: &mut Link) -> RResult<Session> {
        timed(link.sink.subscribe(&self.node_channel)).await?;
        timed(link.sink.subscribe(self.names.all())).await?;
        // Changes queued from here on are reconciled by `serve`; everything
        // before is in the snapshot.
        self.drain();
        let mut s = Session {
            subscribed: HashSet::new(),
        };
        let topics = self.handler().map(|h| h.topics()).unwrap_or_default();
        set_subscribed(link, &mut s, topics, true, self.names).await?;
        self.replay(link).await?;
        for done in self.attached.drain(..) {
            let _ = done.try_send(());
        }
        Ok(s)
    }

    async fn serve(&mut self, link: &mut Link, s: &mut Session) -> End {
        loop {
            tokio::select! {
                msg = link.next_message() => match msg {
                    Ok(msg) => self.on_message(s, msg.get_channel_name(), msg.get_payload_bytes()),
                    Err(e) => return e.into(),
                },
                out = self.publish_rx.recv() => match out {
                    Some(first) => if let Err(e) = self.publish_batch(link, first).await {
                        return e.into();
                    },
                    None => return End::Stop,
                },
                change = self.topic_rx.recv() => match change {
                    Some(first) => if let Err(e) = self.reconcile(link, s, first).await {
                        return e.into();
                    },
                    None => return End::Stop,
                },
            }
        }
    }

    fn idle(&mut self) -> bool {
        self.drain()
    }

    fn back(&self, s: &Session) -> String {
        format!(
            "re-subscribed {} local topics (broadcasts dropped so far: {})",
            s.subscribed.len(),
            self.stats.dropped.load(Relaxed)
        )
    }
}

/// SUBSCRIBEs (or UNSUBSCRIBEs) `topics`, one command per channel but all
/// in flight at once: each reply then answers its own command.
async fn set_subscribed(
    link: &mut Link,
    s: &mut Session,
    topics: Vec<Arc<str>>,
    on: bool,
    names: Names,
) -> RResult<()> {
    for chunk in topics.chunks(MAX_SUBSCRIBE_BATCH) {
        let requests = chunk.iter().map(|t| {
            let mut sink = link.sink.clone();
            let channel = names.topic(t);
            async move {
                if on {
                    sink.subscribe(channel).await
                } else {
                    sink.unsubscribe(channel).await
                }
            }
        });
        timed(futures_util::future::try_join_all(requests)).await?;
        for t in chunk {
            if on {
                s.subscribed.insert(t.clone());
            } else {
                s.subscribed.remove(t);
            }
        }
    }
    Ok(())
}

impl Task {
    fn handler(&self) -> Option<Arc<dyn Handler>> {
        self.handler.get().and_then(Weak::upgrade)
    }

    /// Publishes `first` and whatever else is queued, as one pipeline of
    /// at most [`MAX_BATCH`] commands and about [`MAX_BATCH_BYTES`]. A
    /// retained control message is SET with its expiry in the same
    /// pipeline, before its PUBLISH.
    async fn publish_batch(&mut self, link: &mut Link, first: Outgoing) -> RResult<()> {
        let mut pipe = ::redis::pipe();
        let mut n = 0u64;
        let mut controls = 0u64;
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(out) = next {
            bytes += out.payload.len();
            self.stats
                .queued_bytes
                .fetch_sub(out.payload.len(), Relaxed);
            match out.kind {
                Kind::Broadcast => {}
                Kind::Control => controls += 1,
                Kind::Retained { key, ttl } => {
                    controls += 1;
                    pipe.cmd("SET")
                        .arg(key)
                        .arg(&out.payload)
                        .arg("PX")
                        .arg(ttl.as_millis().max(1) as u64)
                        .ignore();
                }
            }
            pipe.cmd(self.names.publish())
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
        match timed(pipe.query_async::<()>(&mut link.cmd)).await {
            Ok(()) => {
                self.stats.published.fetch_add(n - controls, Relaxed);
                self.stats.control_sent.fetch_add(controls, Relaxed);
                Ok(())
            }
            Err(e) => {
                self.stats.dropped.fetch_add(n, Relaxed);
                Err(e)
            }
        }
    }

    /// Brings the subscriptions of `first` and of every other queued topic
    /// change in line with the node's topic set. The set, not the call that
    /// queued the change, decides: two shards' first/last-subscriber calls
    /// may arrive out of order, the set is always current.
    async fn reconcile(&mut self, link: &mut Link, s: &mut Session, first: Change) -> RResult<()> {
        let mut changed = HashSet::new();
        let mut attached = Vec::new();
        let mut waiting = Vec::new();
        let mut next = Some(first);
        while let Some(change) = next {
            match change {
                Change::Topic(t) => {
                    changed.insert(t);
                }
                Change::Attached(done) => attached.push(done),
                // Reconciled with the rest, whichever shard's change came
                // first: the subscription is then active.
                Change::Subscribed(t, then) => {
                    changed.insert(t);
                    waiting.push(then);
                }
            }
            next = self.topic_rx.try_recv().ok();
        }
        if !attached.is_empty() {
            self.replay(link).await?;
            for done in attached {
                let _ = done.try_send(());
            }
        }
        let Some(handler) = self.handler() else {
            for then in waiting {
                then();
            }
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
            set_subscribed(link, s, add, true, self.names).await?;
        }
        if !remove.is_empty() {
            set_subscribed(link, s, remove, false, self.names).await?;
        }
        for then in waiting {
            then();
        }
        Ok(())
    }

    /// Hands the node every retained control message still in Redis (SCAN
    /// in steps of [`RETAINED_BATCH`], values read per step), if attached.
    async fn replay(&mut self, link: &mut Link) -> RResult<()> {
        if self.handler().is_none() {
            return Ok(());
        }
        let pattern = format!("{}*", self.names.retained());
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = timed(
                ::redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(RETAINED_BATCH)
                    .query_async(&mut link.cmd),
            )
            .await?;
            if !keys.is_empty() {
                // A key that expired between SCAN and MGET reads as nil.
                let values: Vec<Option<Vec<u8>>> =
                    timed(::redis::cmd("MGET").arg(&keys).query_async(&mut link.cmd)).await?;
                for v in values.into_iter().flatten() {
                    self.control(&v);
                }
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// A message from Redis on `channel`.
    fn on_message(&self, s: &Session, channel: &str, bytes: &[u8]) {
        if channel == self.node_channel || channel == self.names.all() {
            self.control(bytes);
        } else {
            self.deliver(s, channel, bytes);
        }
    }

    /// A control message (envelope) from another node, for this node's
    /// handler; this node's own are skipped.
    fn control(&self, bytes: &[u8]) {
        let (from, body) = match control::decode(bytes) {
            Ok(m) => m,
            Err(e) => return self.invalid(&e, "control"),
        };
        if from == self.node_id {
            return;
        }
        if let Some(handler) = self.handler() {
            self.stats.control_received.fetch_add(1, Relaxed);
            handler.control(from, body);
        }
    }

    /// Counts (and now and then logs) a message that was dropped.
    fn invalid(&self, error: &dyn std::fmt::Display, channel: &str) {
        let n = self.stats.invalid.fetch_add(1, Relaxed);
        if n.is_power_of_two() || n == 0 {
            tracing::warn!(
                %error,
                channel,
                count = n + 1,
                "cluster backplane: dropped an invalid message from Redis (not forwarded \
                 to any client; counted in throng_backplane_invalid_total)"
            );
        }
    }

    /// A message from Redis on `channel`: delivered only if it is a valid
    /// envelope for that channel (see `Envelope::validate`).
    fn deliver(&self, s: &Session, channel: &str, bytes: &[u8]) {
        let (env, positioned) = match Envelope::decode_any(bytes).and_then(|(env, p)| {
            let topic = self.names.topic_of(channel).unwrap_or("");
            env.validate(topic).map(|()| (env, p))
        }) {
            Ok(found) => found,
            Err(e) => return self.invalid(&e, channel),
        };
        // A broadcast with a position in its topic's history: every node
        // delivers it from here, its sender too (`envelope`, version 2).
        let position = match positioned.at.map(crate::position::Position::parse) {
            None => None,
            Some(Some(p)) => Some(p),
            Some(None) => return self.invalid(&"a malformed history position", channel),
        };
        if env.node == self.node_id && position.is_none() {
            return; // ours: the shards delivered it already
        }
        let exclude = positioned.exclude.filter(|_| env.node == self.node_id);
        let Some(handler) = self.handler() else {
            return;
        };
        let topic = s
            .subscribed
            .get(env.topic)
            .cloned()
            .unwrap_or_else(|| Arc::from(env.topic));
        self.stats.received.fetch_add(1, Relaxed);
        handler.deliver(Arc::new(Broadcast::positioned(
            topic,
            env.event.to_owned(),
            env.payload.into(),
            exclude,
            position.and(positioned.at).zip(position.map(|p| p.offset)),
        )));
    }

    /// Drops what piled up while disconnected: queued broadcasts (counted)
    /// and topic changes (the re-subscribe reads the node's whole set after,
    /// and replays the retained messages). Returns false once the backplane
    /// is gone.
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
                Ok(Change::Attached(done)) => self.attached.push(done),
                Ok(Change::Topic(_)) => {}
                // Not subscribed now: the reader finds Redis away too, or
                // a gap it reports (`crate::history`).
                Ok(Change::Subscribed(_, then)) => then(),
                Err(mpsc::error::TryRecvError::Empty) => return true,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
    }
}

pub(super) fn channel_of(topic: &str) -> String {
    let mut c = String::with_capacity(CHANNEL_PREFIX.len() + topic.len());
    c.push_str(CHANNEL_PREFIX);
    c.push_str(topic);
    c
}
