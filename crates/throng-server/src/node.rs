//! The node: what every shard of one server process shares, and the
//! [`Endpoint`] through which code outside a channel callback reaches the
//! node's subscribers (Phoenix's `Endpoint.broadcast/3`).
//!
//! Immutable after start except for atomics (metrics) and [`NodeTopics`]
//! (locked only when a shard gains its first or loses its last subscriber of
//! a topic, and once per broadcast). The node is the backplane's
//! [`Handler`]: broadcasts from other nodes come in through it, and so do
//! the control messages of other nodes (`crate::control`: cluster-wide
//! questions, disconnects, revocations, long-poll requests and answers
//! forwarded, see `crate::protocol::phoenix::longpoll`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use mio::Waker;
use throng_protocol::OwnedPayload;
use throng_pubsub::presence::Flushed;
use throng_pubsub::{Backplane, Broadcast, Handler, NodeTopics, Route, Tracker};

use crate::auth::{Auth, PushLimit};
use crate::channel::{Info, Router};
use crate::config::Config;
use crate::control::{self, Collector, Control, Message, NodeReport, Request, StatsSummary};
use crate::forward::pusher::{PusherMsg, RemoteTrigger};
use crate::forward::wire::Forward;
use crate::forward::{self, Answer, Request as LongPollRequest};
use crate::hooks::{Event, EventType};
use crate::limits::Admission;
use crate::metrics::ShardStats;
use crate::page::Pages;
use crate::rules::Policy;

/// Sockets a second a drain closes, at most (see [`Node::drain_window`]).
pub const DRAIN_RATE: u64 = 1000;

/// A message to a shard's event loop.
pub(crate) enum ShardMsg {
    /// Deliver to the shard's subscribers of the broadcast's topic.
    Broadcast(Arc<Broadcast>),
    /// Call `handle_info` of every channel joined on the topic.
    Info(Arc<str>, Info),
    /// A long-poll request for a session of this shard.
    LongPoll(Box<LongPollRequest>),
    /// The answer to a long-poll request a connection of this shard holds.
    LongPollAnswer(Box<Answer>),
    /// Add this shard's subscriber counts to a node report.
    Report(Arc<Collector>),
    /// Close every socket of this user (with 1001).
    Disconnect(Arc<str>),
    /// The app backend's answer to a hook call of this shard.
    Hook(Box<crate::hooks::HookAnswer>),
    /// A broadcast of this topic's history was dropped for this shard (its
    /// inbox was full): its subscribers here are closed, so that they
    /// rejoin with `since` and get it back instead of skipping it
    /// (`crate::history`).
    HistoryLost(Arc<str>),
    /// The answer to a history read of a join with `since` (Redis).
    Replay(Box<ReplayAnswer>),
    /// The Pusher protocol's: a trigger that leaves out one of this
    /// shard's sockets, an HTTP API answer (`crate::forward::pusher`).
    Pusher(Box<PusherMsg>),
}

/// The answer to a history read of a join of connection `key` on `topic`,
/// back on its shard ([`ShardMsg::Replay`]; `history/recovery.rs` and its protocol read it).
pub(crate) struct ReplayAnswer {
    /// The shard's number for the read: a later join of the same socket
    /// and topic has another.
    pub id: u64,
    pub key: usize,
    pub topic: std::sync::Arc<str>,
    pub replay: throng_pubsub::Replay,
}

impl ShardMsg {
    /// What it counts against the inbox bound: a broadcast's bytes (its
    /// memory is shared with other shards' inboxes, so this overstates it),
    /// a flat 64 and the topic for an info, a flat 256 for the rest.
    fn cost(&self) -> usize {
        match self {
            ShardMsg::Broadcast(b) => b.held(),
            ShardMsg::Info(topic, _) | ShardMsg::HistoryLost(topic) => 64 + topic.len(),
            ShardMsg::Pusher(m) => m.cost(),
            _ => 256,
        }
    }

    /// Whether a full inbox may drop it: broadcasts and infos, which have
    /// no one waiting for an answer. Long-poll requests and answers and
    /// control messages always go through (they are few and small).
    fn droppable(&self) -> bool {
        matches!(self, ShardMsg::Broadcast(_) | ShardMsg::Info(..))
    }
}

/// How to reach a shard from another thread: its inbox (bounded in bytes,
/// `--max-shard-inbox-bytes`) and the waker of its loop.
pub(crate) struct Peer {
    shard: usize,
    tx: Sender<ShardMsg>,
    waker: Arc<Waker>,
    max: usize,
    /// Bytes waiting in the inbox ([`ShardMsg::cost`]).
    pub queued: AtomicUsize,
    /// Messages dropped because the inbox was full.
    pub dropped: AtomicU64,
    /// The "inbox full" warning was logged since the inbox was last empty.
    full_logged: AtomicBool,
}

impl Peer {
    pub(crate) fn new(shard: usize, tx: Sender<ShardMsg>, waker: Arc<Waker>, max: usize) -> Peer {
        Peer {
            shard,
            tx,
            waker,
            max,
            queued: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            full_logged: AtomicBool::new(false),
        }
    }

    /// Queues `msg` for the shard, or drops it (counted, one warning per
    /// episode) when the inbox holds its bound. An empty inbox always
    /// takes one message, however big.
    pub(crate) fn send(&self, msg: ShardMsg) {
        let cost = msg.cost();
        let before = self.queued.fetch_add(cost, Relaxed);
        if before > 0 && before + cost > self.max && msg.droppable() {
            self.queued.fetch_sub(cost, Relaxed);
            self.dropped.fetch_add(1, Relaxed);
            if !self.full_logged.swap(true, Relaxed) {
                tracing::warn!(
                    shard = self.shard,
                    queued_bytes = before,
                    "shard {} is {before} bytes behind on broadcasts (--max-shard-inbox-bytes): \
                     dropping broadcasts for its subscribers until it catches up \
                     (counted in throng_shard_inbox_dropped_total)",
                    self.shard,
                );
            }
            if let ShardMsg::Broadcast(b) = &msg {
                if b.offset != 0 {
                    self.send(ShardMsg::HistoryLost(b.topic.clone()));
                }
            }
            return;
        }
        match self.tx.send(msg) {
            Ok(()) => {
                let _ = self.waker.wake();
            }
            Err(_) => {
                self.queued.fetch_sub(cost, Relaxed);
            }
        }
    }

    /// The shard took `msg` out of its inbox.
    pub(crate) fn received(&self, msg: &ShardMsg) {
        let cost = msg.cost();
        if self.queued.fetch_sub(cost, Relaxed) == cost {
            self.full_logged.store(false, Relaxed);
        }
    }
}

/// Shared state of one server process.
pub struct Node {
    pub config: Config,
    pub router: Router,
    pub stats: Vec<Arc<ShardStats>>,
    pub topics: NodeTopics,
    pub backplane: Arc<dyn Backplane>,
    /// Presence: the topics this node keeps it for, and the cluster's.
    pub presence: Arc<Tracker>,
    pub(crate) peers: Vec<Peer>,
    pub(crate) pages: Pages,
    /// Open-files limit after raising the soft limit to the hard one.
    pub fd_limit: u64,
    /// New connections against `--max-connections` and `--max-connections-per-ip`.
    pub(crate) admission: Admission,
    /// When the drain began and how long it spreads its closes over,
    /// once it has (`engine/shard/drain.rs`).
    /// The log lines of refused clients, one per reason per interval.
    pub refusals: crate::refusals::RefusalLog,
    pub(crate) drain: OnceLock<(Instant, Duration)>,
    /// Every listener is up and the start logged (`Server::start`): until
    /// then `/readyz` answers 503 (`crate::health`).
    pub(crate) listening: AtomicBool,
    /// Connect authentication and revocations.
    pub auth: Auth,
    /// `[[topics]]` rules.
    pub policy: Policy,
    pub push_limit: PushLimit,
    /// Heartbeats, joins, leaves, control frames, tiny fragments
    /// (`--control-rate`, `--control-burst`, `--push-strikes`).
    pub control_limit: PushLimit,
    /// New long-poll sessions per address (`--longpoll-session-rate`).
    pub session_limit: PushLimit,
    /// Cluster-wide questions and their answers.
    pub control: Control,
    /// The app backend's client, when `[hooks]` has a url.
    pub hooks: Option<Arc<crate::hooks::HookClient>>,
    /// Who decides `occupied`/`vacated` events, with `[hooks] events`
    /// or Pusher webhooks.
    pub occupancy: OnceLock<crate::hooks::Occupancy>,
    /// Pusher apps' webhooks, when some app has a webhook URL.
    pub webhooks: Option<crate::hooks::Webhooks>,
    /// TLS on the public port and on the server API (`crate::tls`).
    pub tls: Option<Arc<crate::tls::Tls>>,
    pub api_tls: Option<Arc<crate::tls::Tls>>,
    /// Topic history, when some `[[topics]]` rule keeps it (`crate::history`):
    /// in this process without `--redis`...
    pub history: Option<Arc<throng_pubsub::MemoryHistory>>,
    /// ...in Redis Streams with it.
    pub history_redis: Option<Arc<throng_pubsub::RedisHistory>>,
    /// The node itself, for answers that come back from other threads
    /// (a history replay read in Redis).
    pub(crate) this: OnceLock<std::sync::Weak<Node>>,
    /// The server API's and the dashboard's counters (`crate::api_stats`).
    pub api: crate::api_stats::ApiStats,
}

impl Node {
    /// Starts the graceful drain: the shards stop accepting, close their
    /// sockets with 1012 in batches over [`Node::drain_window`], and end,
    /// after the clients' FINs; the process then exits. Idempotent.
    pub fn drain(&self) {
        let window = self.drain_window();
        if self.drain.set((Instant::now(), window)).is_ok() {
            for peer in &self.peers {
                let _ = peer.waker.wake();
            }
        }
    }

    /// How long a drain starting now spreads its closes over: the sockets
    /// open at [`DRAIN_RATE`] a second, at most `--drain-seconds`. Spreading
    /// keeps a crowd's reconnects from landing on the other nodes at once;
    /// a few sockets have no crowd, and close at once.
    pub fn drain_window(&self) -> Duration {
        if let Some((_, window)) = self.drain.get() {
            return *window;
        }
        let open: u64 = self.stats.iter().map(|s| s.websockets.load(Relaxed)).sum();
        let needed = Duration::from_secs_f64(open as f64 / DRAIN_RATE as f64);
        needed.min(self.config.limits.drain)
    }

    /// When the drain began, if it has.
    pub fn drain_started(&self) -> Option<Instant> {
        self.drain.get().map(|(at, _)| *at)
    }

    /// Sends a broadcast made on this node to the other nodes, and to the
    /// node's shards that have subscribers, except `from_shard` (which
    /// delivered it already).
    pub(crate) fn broadcast(&self, from_shard: Option<usize>, b: Arc<Broadcast>) {
        self.backplane.publish(&b);
        self.fan_out(from_shard, b);
    }

    /// A broadcast on a topic that keeps history (`rule`): the history
    /// store gives it its position, the message's `ref` in its one
    /// encoding, and, under the topic's lock, it goes to the other nodes
    /// and to every shard with subscribers, the origin's too: each shard
    /// then gets the topic's messages in offset order. Returns the ref.
    pub(crate) fn publish_history(
        &self,
        rule: crate::rules::HistoryRule,
        topic: Arc<str>,
        event: String,
        payload: OwnedPayload,
        exclude: Option<throng_pubsub::Exclude>,
    ) -> Option<String> {
        if let Some(redis) = &self.history_redis {
            // Redis gives the position and publishes it; every node, this
            // one too, delivers it from there (`crate::history`).
            let payload = payload.as_payload();
            redis.publish(&topic, rule.size, rule.ttl, &event, payload, exclude, None);
            return None;
        }
        let Some(store) = &self.history else {
            let b = Arc::new(Broadcast::new(topic, event, payload, exclude));
            self.broadcast(None, b);
            return None;
        };
        // What the history keeps: a copy, once per broadcast.
        let (name, kept) = (event.clone(), payload.clone());
        let now = Instant::now();
        let (size, ttl) = (rule.size, rule.ttl);
        Some(
            store.publish(&topic.clone(), size, ttl, &name, kept, now, |at| {
                let msg_ref = at.to_ref();
                let position = Some((msg_ref.as_str(), at.offset));
                let b = Broadcast::positioned(topic, event, payload, exclude, position);
                self.broadcast(None, Arc::new(b));
                msg_ref
            }),
        )
    }

    /// Bytes of broadcasts waiting in the shards' inboxes.
    pub fn shard_inbox_bytes(&self) -> u64 {
        self.peers
            .iter()
            .map(|p| p.queued.load(Relaxed) as u64)
            .sum()
    }

    /// Counts this node's subscribers (each shard its own) and hands the
    /// report to `done`, on the thread of the last shard to answer.
    pub fn report(&self, done: impl FnOnce(NodeReport) + Send + 'static) {
        self.report_under(None, done);
    }

    /// [`Node::report`], of the topics under `prefix` only (and without
    /// the counters) when it is set.
    pub(crate) fn report_under(
        &self,
        prefix: Option<Arc<str>>,
        done: impl FnOnce(NodeReport) + Send + 'static,
    ) {
        let counters = match prefix {
            // The node's metrics are described in `crate::scrape` (above
            // the node): the trait's method reaches them.
            None => {
                let mut shown = throng_pubsub::metrics::Shown::default();
                throng_pubsub::metrics::Source::describe(self, &mut shown);
                shown.0
            }
            Some(_) => Default::default(),
        };
        let report = NodeReport {
            node: self.control.node_id.clone(),
            stats: StatsSummary::of(&self.stats, self.shard_inbox_bytes()),
            counters,
            ..Default::default()
        };
        let c = Collector::new(self.peers.len(), report, prefix, Box::new(done));
        for peer in &self.peers {
            peer.send(ShardMsg::Report(c.clone()));
        }
    }

    /// A cluster-wide request or answer from node `from`.
    fn on_request(&self, from: u64, req: Request) {
        match req {
            Request::Gather { id, prefix } => {
                let backplane = self.backplane.clone();
                self.report_under(prefix.map(Arc::from), move |report| {
                    let report = Box::new(report);
                    let msg = Message::Request(Request::Report { id, report });
                    backplane.send_control(Route::Node(from), msg.encode());
                });
            }
            Request::Report { id, report } => self.control.on_report(id, *report),
            Request::Revoke { user, at } => self.auth.revoke(&user, at),
            Request::Disconnect { user } => self.disconnect_local(&user),
        }
    }

    /// A long-poll request or answer forwarded by another node.
    fn on_forward(&self, forward: Forward) {
        match forward {
            Forward::Request(req) => {
                let reply = req.reply;
                if req.token.node != self.backplane.node_id() || !self.forward_request(req) {
                    // Not a session of this node (a stale token): gone.
                    self.forward_answer(Answer {
                        reply,
                        body: forward::status_body(410),
                    });
                }
            }
            Forward::Answer(answer) => {
                if answer.reply.node == self.backplane.node_id() {
                    self.forward_answer(answer);
                }
            }
        }
    }

    /// Sends a long-poll request to the shard (of this node or another)
    /// that holds its session; false if it cannot get there.
    pub(crate) fn forward_request(&self, req: LongPollRequest) -> bool {
        if req.token.node != self.backplane.node_id() {
            let to = req.token.node;
            let msg = Message::LongPoll(Forward::Request(req));
            return self.backplane.send_control(Route::Node(to), msg.encode());
        }
        match self.peers.get(req.token.shard as usize) {
            Some(peer) => {
                peer.send(ShardMsg::LongPoll(Box::new(req)));
                true
            }
            None => false,
        }
    }

    /// Sends the answer of a long-poll request to the shard (of this node or
    /// another) whose connection holds the request. Lost if that node is gone:
    /// its connection is gone with it.
    pub(crate) fn forward_answer(&self, answer: Answer) {
        if answer.reply.node != self.backplane.node_id() {
            let to = answer.reply.node;
            let msg = Message::LongPoll(Forward::Answer(answer));
            self.backplane.send_control(Route::Node(to), msg.encode());
            return;
        }
        if let Some(peer) = self.peers.get(answer.reply.shard as usize) {
            peer.send(ShardMsg::LongPollAnswer(Box::new(answer)));
        }
    }

    /// A Pusher trigger from another node: to the shard its socket id
    /// names (shard 0 if there is no such shard here), which delivers it
    /// to the node's subscribers.
    fn on_pusher_trigger(&self, t: RemoteTrigger) {
        let shard = usize::from(t.shard);
        let peer = self.peers.get(shard).or_else(|| self.peers.first());
        if let Some(peer) = peer {
            peer.send(ShardMsg::Pusher(Box::new(PusherMsg::Remote(Box::new(t)))));
        }
    }

    /// Closes every socket of `user` on this node's shards.
    fn disconnect_local(&self, user: &str) {
        let user: Arc<str> = Arc::from(user);
        for peer in &self.peers {
            peer.send(ShardMsg::Disconnect(user.clone()));
        }
    }

    /// Wakes every shard (they then compute their poll timeout again).
    pub(crate) fn wake_shards(&self) {
        for peer in &self.peers {
            let _ = peer.waker.wake();
        }
    }

    /// Hands a broadcast for this node's subscribers only (a presence
    /// diff: each node makes its own) to the shards with subscribers,
    /// except `skip`.
    pub(crate) fn fan_out(&self, skip: Option<usize>, b: Arc<Broadcast>) {
        let shards = self.topics.shards(&b.topic);
        for i in shards.iter() {
            if Some(i) == skip {
                continue;
            }
            if let Some(peer) = self.peers.get(i) {
                peer.send(ShardMsg::Broadcast(b.clone()));
            }
        }
    }

    /// Whether the occupancy engine follows `topic` (it is told of the
    /// node's first and last subscribers of it): a Phoenix topic with
    /// `[hooks] events`, a Pusher channel (or a presence member's key) of
    /// an app with a webhook URL.
    pub(crate) fn wants_occupancy(&self, topic: &str) -> bool {
        match throng_protocol::Family::of_topic(topic) {
            throng_protocol::Family::Pusher => {
                self.webhooks.as_ref().is_some_and(|w| w.wants(topic))
            }
            throng_protocol::Family::Phoenix => {
                self.hooks.as_ref().and_then(|h| h.events()).is_some()
            }
        }
    }

    /// Tells the occupancy engine, if it follows `topic`, that the node's
    /// first subscriber of it came or its last went.
    pub(crate) fn occupancy_changed(&self, topic: &Arc<str>) {
        if let Some(o) = self.occupancy.get() {
            if self.wants_occupancy(topic) {
                o.changed(self, topic);
            }
        }
    }

    /// Queues an `occupied` or `vacated` event for `topic`.
    pub(crate) fn topic_event(&self, kind: EventType, topic: &str) {
        if let Some(events) = self.hooks.as_ref().and_then(|h| h.events()) {
            let mut e = Event::new(kind);
            e.topic = Some(Arc::from(topic));
            events.push(e);
        }
    }
}

impl Handler for Node {
    fn deliver(&self, b: Arc<Broadcast>) {
        self.fan_out(None, b);
    }

    fn has_topic(&self, topic: &str) -> bool {
        self.topics.contains(topic)
    }

    fn topics(&self) -> Vec<Arc<str>> {
        self.topics.names()
    }

    fn control(&self, from: u64, body: &[u8]) {
        match Message::decode(body) {
            Some(Message::Request(req)) => self.on_request(from, req),
            Some(Message::LongPoll(forward)) => self.on_forward(forward),
            Some(Message::Pusher(t)) => self.on_pusher_trigger(t),
            None => tracing::debug!(
                from = format_args!("{from:016x}"),
                "dropped an unreadable control message"
            ),
        }
    }
}

impl crate::hooks::Answers for Node {
    fn hook_answer(&self, shard: usize, answer: crate::hooks::HookAnswer) {
        if let Some(peer) = self.peers.get(shard) {
            peer.send(ShardMsg::Hook(Box::new(answer)));
        }
    }
}

impl throng_pubsub::OccupancySink for Node {
    fn has_topic(&self, topic: &str) -> bool {
        // A Pusher presence member's key: whether the node has a socket
        // of that user there.
        if let Some(has) = self.webhooks.as_ref().and_then(|w| w.has_member(topic)) {
            return has;
        }
        self.topics.contains(topic) && self.wants_occupancy(topic)
    }

    fn topics(&self) -> Vec<Arc<str>> {
        let mut topics = self.topics.names();
        topics.retain(|t| self.wants_occupancy(t));
        if let Some(w) = &self.webhooks {
            topics.extend(w.member_keys());
        }
        topics
    }

    fn occupied(&self, topic: &str) {
        match &self.webhooks {
            Some(w)
                if throng_protocol::Family::of_topic(topic) == throng_protocol::Family::Pusher =>
            {
                w.occupancy(topic, true)
            }
            _ => self.topic_event(EventType::Occupied, topic),
        }
    }

    fn vacated(&self, topic: &str) {
        match &self.webhooks {
            Some(w)
                if throng_protocol::Family::of_topic(topic) == throng_protocol::Family::Pusher =>
            {
                w.occupancy(topic, false)
            }
            _ => self.topic_event(EventType::Vacated, topic),
        }
    }
}

/// How long [`Endpoint::presence`] waits for the presence store.
pub const PRESENCE_READ_WAIT: Duration = Duration::from_secs(5);

/// A topic's presence as [`Endpoint::presence`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PresenceView {
    /// `presence_state` JSON: `{key: {"metas": [...]}}`.
    pub state: String,
    /// Distinct keys (users).
    pub count: usize,
    pub source: PresenceSource,
}

/// Where a [`PresenceView`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PresenceSource {
    /// This node's copy (it watches the topic), as of its last diff.
    Node,
    /// The presence store: every live node's presences as stored.
    Store,
}

impl PresenceSource {
    pub fn name(self) -> &'static str {
        match self {
            PresenceSource::Node => "node",
            PresenceSource::Store => "store",
        }
    }
}

/// A handle on a running node for code outside channel callbacks: an HTTP
/// API, the app's own threads. Cheap to clone; every method returns at
/// once (the work is queued to the shards).
#[derive(Clone)]
pub struct Endpoint {
    node: Arc<Node>,
}

impl Endpoint {
    pub(crate) fn new(node: Arc<Node>) -> Endpoint {
        Endpoint { node }
    }

    /// Broadcasts `event` on `topic` to every subscriber, on this node and,
    /// through the backplane, on the others (Phoenix's
    /// `Endpoint.broadcast/3`). Encoded once per serializer.
    ///
    /// On a topic that keeps history (`[[topics]] history_size`) in this
    /// process, returns the message's ref, its position in the topic's
    /// history; with history in Redis the position comes later: use
    /// [`Endpoint::publish`] to wait for it.
    pub fn broadcast(&self, topic: &str, event: &str, payload: OwnedPayload) -> Option<String> {
        if let Some(rule) = self.node.policy.history(topic) {
            let (topic, event) = (topic.into(), event.into());
            return self.node.publish_history(rule, topic, event, payload, None);
        }
        let b = Arc::new(Broadcast::new(topic.into(), event.into(), payload, None));
        self.node.broadcast(None, b);
        None
    }

    /// [`Endpoint::broadcast`], waiting, on a topic whose history is in
    /// Redis, for Redis to give the message its position: the ref, or why
    /// the message was not sent (Redis away).
    pub async fn publish(
        &self,
        topic: &str,
        event: &str,
        payload: OwnedPayload,
    ) -> Result<Option<String>, String> {
        let node = &self.node;
        let (Some(redis), Some(rule)) = (&node.history_redis, node.policy.history(topic)) else {
            return Ok(self.broadcast(topic, event, payload));
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let done = Box::new(move |r| {
            let _ = tx.send(r);
        });
        let topic = Arc::from(topic);
        let payload = payload.as_payload();
        redis.publish(
            &topic,
            rule.size,
            rule.ttl,
            event,
            payload,
            None,
            Some(done),
        );
        match tokio::time::timeout(PRESENCE_READ_WAIT * 2, rx).await {
            Ok(Ok(r)) => r.map(Some),
            _ => Err("no answer from Redis in time".into()),
        }
    }

    /// Hands `info` to [`Channel::handle_info`](crate::Channel::handle_info)
    /// of every channel joined on `topic` on this node.
    pub fn info(&self, topic: &str, info: Info) {
        let topic: Arc<str> = Arc::from(topic);
        for i in self.node.topics.shards(&topic).iter() {
            if let Some(peer) = self.node.peers.get(i) {
                peer.send(ShardMsg::Info(topic.clone(), info.clone()));
            }
        }
    }

    /// Closes every socket of `user`, on every node (Phoenix's
    /// `Endpoint.broadcast("users_socket:" <> id, "disconnect", %{})`), with
    /// close code 1001 so clients reconnect. With `revoke`, every node first
    /// refuses the user's tokens signed until now, so the reconnects fail;
    /// the revocation is retained on the backplane (with Redis, kept there
    /// until it expires), so nodes started later refuse them too.
    pub fn disconnect(&self, user: &str, revoke: bool) {
        let backplane = &self.node.backplane;
        if revoke {
            let at = crate::auth::now_ms();
            self.node.auth.revoke(user, at);
            let msg = Message::Request(Request::Revoke {
                user: user.to_string(),
                at,
            });
            let key = format!("revoke:{user}");
            let ttl = self.node.auth.revocation_ttl();
            if !backplane.retain_control(&key, msg.encode(), ttl)
                && self.node.config.redis.is_some()
            {
                tracing::warn!(
                    user,
                    "the revocation of user {user} could not be sent to Redis (not connected \
                     now): this node refuses the user's tokens, other nodes may not; \
                     revoke again once Redis is back (throng_backplane_connected 1)"
                );
            }
        }
        // Phoenix broadcasts `disconnect` on the socket id topic; here the
        // users are indexed per shard, so one control message reaches them.
        self.node.disconnect_local(user);
        let msg = Message::Request(Request::Disconnect {
            user: user.to_string(),
        });
        backplane.send_control(Route::Cluster, msg.encode());
    }

    /// Asks every node for its report; the reports that arrive within
    /// [`control::GATHER_WAIT`] (this node's always).
    pub async fn gather(&self) -> Vec<NodeReport> {
        self.gather_timed()
            .await
            .into_iter()
            .map(|(r, _)| r)
            .collect()
    }

    /// [`Endpoint::gather`], each report with the time it took to arrive
    /// from the question (for another node: a round trip over the
    /// backplane's control lane and its shards' counting).
    pub async fn gather_timed(&self) -> Vec<(NodeReport, Duration)> {
        self.gather_under(None).await
    }

    /// [`Endpoint::gather_timed`], each node counting only the topics
    /// under `prefix` (and sending no counters) when it is set: what a
    /// question about a few topics needs.
    pub(crate) async fn gather_under(&self, prefix: Option<&str>) -> Vec<(NodeReport, Duration)> {
        let node = &self.node;
        let asked = tokio::time::Instant::now();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let id = node.control.expect(tx.clone());
        let local = tx.clone();
        node.report_under(prefix.map(Arc::from), move |r| {
            let _ = local.send(r);
        });
        let mut out = Vec::new();
        let prefix = prefix.map(str::to_owned);
        let ask = Message::Request(Request::Gather { id, prefix });
        if node.backplane.send_control(Route::Cluster, ask.encode()) {
            let deadline = asked + control::GATHER_WAIT;
            while let Ok(Some(r)) = tokio::time::timeout_at(deadline, rx.recv()).await {
                out.push((r, asked.elapsed()));
            }
        } else if let Ok(Some(r)) = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            out.push((r, asked.elapsed()));
        }
        node.control.forget(id);
        out
    }

    /// The presences of `topic` as `presence_state` JSON
    /// (`{key: {"metas": [..]}}`), as of the last diff, from this node's
    /// copy; `None` if this node does not keep presence for the topic (it
    /// has no subscriber of it), or keeps only a count-mode census of it
    /// ([`Endpoint::presence`] then reads the store).
    pub fn presence_list(&self, topic: &str) -> Option<String> {
        self.node.presence.list(topic)
    }

    /// Distinct presence keys (users) on `topic`, as [`Endpoint::presence_list`].
    pub fn presence_count(&self, topic: &str) -> Option<usize> {
        self.node.presence.count(topic)
    }

    /// `topic`'s presence cluster-wide, for the server API: this node's
    /// copy when it watches the topic and keeps every meta (as
    /// [`Endpoint::presence_list`]), else what the presence store keeps of every live node's (with Redis,
    /// one read; a lone node without subscribers there has none). Waits at
    /// most [`PRESENCE_READ_WAIT`] for the store.
    pub async fn presence(&self, topic: &str) -> Result<PresenceView, throng_pubsub::Error> {
        let tracker = &self.node.presence;
        if let Some((state, count)) = tracker.list_and_count(topic) {
            return Ok(PresenceView {
                state,
                count,
                source: PresenceSource::Node,
            });
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        tracker.store().fetch(
            topic,
            Box::new(move |found| {
                let _ = tx.send(found);
            }),
        );
        let unavailable = |why: &str| throng_pubsub::Error::PresenceUnavailable(why.into());
        let found = match tokio::time::timeout(PRESENCE_READ_WAIT, rx).await {
            Ok(Ok(found)) => found?,
            Ok(Err(_)) => return Err(unavailable("the presence store dropped the read")),
            Err(_) => {
                return Err(unavailable(&format!(
                    "no answer from the presence store within {PRESENCE_READ_WAIT:?}"
                )))
            }
        };
        let flushed = Flushed::from_entries(found.iter().flat_map(|(_, e)| e));
        Ok(PresenceView {
            state: flushed.state_json(),
            count: flushed.key_count(),
            source: PresenceSource::Store,
        })
    }

    /// The node this endpoint serves.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_inbox_is_bounded_in_bytes() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let (tx, rx) = crossbeam_channel::unbounded();
        let big = || {
            ShardMsg::Broadcast(Arc::new(Broadcast::new(
                "t".into(),
                "e".into(),
                OwnedPayload::Json(format!("\"{}\"", "x".repeat(1000))),
                None,
            )))
        };
        let cost = big().cost();
        // Room for two; an empty inbox takes one whatever its size.
        let peer = Peer::new(3, tx, waker, 2 * cost + 10);
        for _ in 0..5 {
            peer.send(big());
        }
        assert_eq!(rx.len(), 2);
        assert_eq!(peer.dropped.load(Relaxed), 3);
        assert_eq!(peer.queued.load(Relaxed), 2 * cost);
        // The shard catches up: broadcasts are taken again.
        for msg in rx.try_iter() {
            peer.received(&msg);
        }
        assert_eq!(peer.queued.load(Relaxed), 0);
        peer.send(big());
        assert_eq!(rx.len(), 1);
        let tiny = Peer::new(0, crossbeam_channel::unbounded().0, peer.waker.clone(), 1);
        tiny.send(big());
        assert_eq!(
            tiny.dropped.load(Relaxed),
            0,
            "one message larger than the bound"
        );
        // A history broadcast dropped leaves a mark in its place.
        let (tx, rx) = crossbeam_channel::unbounded();
        let peer = Peer::new(0, tx, peer.waker.clone(), 1);
        let positioned = |offset| {
            let payload = OwnedPayload::empty();
            let at = Some(("e.1", offset));
            ShardMsg::Broadcast(Arc::new(Broadcast::positioned(
                "h".into(),
                "e".into(),
                payload,
                None,
                at,
            )))
        };
        peer.send(positioned(1));
        peer.send(positioned(2));
        let got: Vec<_> = rx.try_iter().collect();
        assert!(
            matches!(&got[..], [ShardMsg::Broadcast(_), ShardMsg::HistoryLost(t)] if &**t == "h")
        );
    }
}
