//! The Phoenix socket: one connection's channels, multiplexed over it, as
//! `Phoenix.Socket` does it (`lib/phoenix/socket.ex`: heartbeat, join,
//! leave, duplicate join, dispatch to the channel, `phx_reply`/`phx_close`).
//!
//! It is a state machine with no I/O: it takes decoded [`Message`]s and
//! answers through a [`Transport`], which subscribes the connection in the
//! shard's registry, sends encoded messages to the client and broadcasts.
//! The WebSocket transport and the long-poll transport both run it; the
//! unit tests below run it against a recording transport, with no socket.
//!
//! The state of one connection is its [`Join`]s (the transport keeps them
//! in the connection and lends them for each call). Channel callbacks run
//! here and return effects (pushes, broadcasts, infos), applied in
//! Phoenix's order: a broadcast goes out before the reply of the push that
//! made it (the fastlane), and infos after the reply (`send(self(), msg)`).

mod hooked;
mod presence;
mod refused;

use std::sync::Arc;

use throng_protocol::frame::Opcode;
use throng_protocol::serializer::{encode_message_refs, encode_reply_refs};
use throng_protocol::{event, Message, OwnedPayload, Payload, Ref, RefBuf, Vsn};
use throng_pubsub::{Slot, Tracker};

use crate::auth::is_reserved;
use crate::auth::rate::Verdict;
use crate::channel::{Channel, Effects, Info, Reply, Router, Socket, Terminate, Who};
use crate::engine::close::CloseReason;
use crate::metrics::ShardStats;
use crate::presence::PresenceRule;
use crate::rules::Policy;
use crate::rules::UNAUTHORIZED;
use refused::Refused;

pub(crate) use crate::engine::socket::{push_join, Join, Joins};
pub(crate) use presence::Tracked;

/// The channel's view of join `join` on `topic`, for one callback.
#[inline]
fn join_socket<'s>(
    join: &'s mut Join,
    topic: &'s str,
    who: Who<'s>,
    effects: &'s mut Effects,
) -> Socket<'s> {
    Socket {
        topic,
        join_ref: join.join_ref.as_ref().map(RefBuf::text),
        who,
        assigns: &mut join.assigns,
        effects,
    }
}

/// What the socket needs from the transport that carries it.
pub(crate) trait Transport {
    /// Subscribes this connection to `topic`.
    fn subscribe(&mut self, topic: &str) -> Slot;
    /// Ends a subscription made by [`Transport::subscribe`].
    fn unsubscribe(&mut self, slot: Slot);
    /// The registry's index of `topic`, if it has subscribers on this shard.
    fn topic_index(&self, topic: &str) -> Option<u32>;
    /// The name of the registry's topic `index`.
    fn topic_name(&self, index: u32) -> Option<Arc<str>>;
    /// One message to this client: `body` as the serializer encoded it, to
    /// be sent as `opcode` (text or binary).
    fn send(&mut self, opcode: Opcode, body: &[u8]);
    /// A broadcast from this connection's channel on `topic` to every
    /// subscriber, on this node and the others (`include_self: false` skips
    /// this connection). Messages sent before it reach this client first.
    fn broadcast(
        &mut self,
        topic: Arc<str>,
        event: String,
        payload: OwnedPayload,
        include_self: bool,
    );
    /// The shard's counters.
    fn stats(&self) -> &ShardStats;
    /// Spends one push of this connection's budget (`auth::rate`). A
    /// transport with no budget allows every push.
    fn allow_push(&mut self) -> Verdict {
        Verdict::Allow
    }
    /// Spends one control message (heartbeat, join, leave) of this
    /// connection's control budget (`--control-rate`). A transport with no
    /// budget allows every one.
    fn allow_control(&mut self) -> Verdict {
        Verdict::Allow
    }
    /// Asks for the connection to be closed for `reason` once this call is
    /// done (a WebSocket close frame; long-poll ends the session), counted
    /// by the close (`crate::engine::close`).
    fn close(&mut self, _reason: CloseReason<'static>) {}
    /// The node's presence.
    fn tracker(&self) -> &Tracker;
    /// This connection's presences on the registry's topic `index`.
    fn tracked(&mut self, index: u32) -> &mut Tracked;
    /// Takes (and forgets) this connection's presences on topic `index`;
    /// nothing, cheaply, when presence is not in use.
    fn take_tracked(&mut self, index: u32) -> Tracked;
    /// One message whose body is `head`, `shared`, `tail`: the middle part
    /// is the same for many sockets (a presence state), and is not copied
    /// where the transport can avoid it.
    fn send_shared(&mut self, opcode: Opcode, head: &[u8], shared: &Arc<str>, tail: &[u8]);
    /// The node started keeping presence for a topic: every shard must now
    /// flush presence diffs.
    fn presence_started(&mut self);
    /// Sends a hook request of this connection to the app backend
    /// (`crate::hooks`); its answer comes back to [`Mux::hook_joined`] or
    /// [`Mux::hook_pushed`]. `Err`: refused at once. A join drops one
    /// this connection holds open on `topic`.
    fn hook_call(
        &mut self,
        _hook: crate::hooks::Hook,
        _topic: &str,
        _body: Vec<u8>,
        _wait: crate::hooks::Waiting,
    ) -> Result<(), crate::hooks::Failure> {
        Err(crate::hooks::Failure::Unavailable)
    }
    /// Where refused joins are logged (`crate::refusals`); none, nothing is.
    fn refusals(&self) -> Option<&crate::refusals::RefusalLog> {
        None
    }
    /// Drops a join this connection holds open on `topic` (a leave).
    fn hook_cancel_join(&mut self, _topic: &str) {}
    /// What the connect hook gave this connection as its assigns.
    fn hook_assigns(&self) -> Option<String> {
        None
    }
    /// A `presence_join` or `presence_leave` lifecycle event of this
    /// connection's presence `key` on `topic` (nothing without `[hooks]
    /// events`).
    fn presence_event(
        &mut self,
        _kind: crate::hooks::EventType,
        _topic: &str,
        _key: &Arc<str>,
        _user: Option<&str>,
    ) {
    }
    /// This connection's id in hook requests.
    fn socket_id(&mut self) -> String {
        String::new()
    }
    /// For a join on `topic` (subscribed already) with a `since` position:
    /// starts the read of what the topic's history holds after it
    /// (`crate::history`), which answers later with the join's reply
    /// ([`Mux::since_answered`]), and returns true; false when the topic
    /// keeps no history.
    fn recover(&mut self, _topic: &str, _since: &str, _held: crate::history::HeldJoin) -> bool {
        false
    }
}

/// Buffers a shard lends each call, so that a message costs no allocation.
#[derive(Default)]
pub(crate) struct Scratch {
    body: Vec<u8>,
    effects: Effects,
}

/// Settings of one call: fixed per node or per connection.
#[derive(Clone, Copy)]
pub(crate) struct Cx<'a> {
    pub router: &'a Router,
    /// Topic rules (who may join, who may push what).
    pub policy: &'a Policy,
    pub vsn: Vsn,
    pub who: Who<'a>,
    /// Joins one socket may hold (`--max-channels-per-socket`).
    pub max_channels: usize,
    /// What the joins of one socket may store (join_refs, topic names):
    /// the socket budget less a message in progress (`limits.rs`).
    pub max_join_bytes: usize,
    /// Topics with presence turned on by configuration (`--presence`).
    pub presence: &'a [PresenceRule],
    /// `--max-presence-bytes`: a presence's key and meta together.
    pub max_presence_bytes: usize,
    /// `--max-json-depth`: arrays and objects nested in a payload.
    pub max_json_depth: usize,
}

/// The reply of a join over the cap, as Phoenix 1.8's socket answers it
/// (`max_channels`-like limit, checked before the channel runs).
const TOO_MANY: &str = r#"{"reason":"too many channels joined"}"#;
/// The reply of a join whose join_ref and topic do not fit the socket's
/// memory budget (`--max-socket-bytes`); Phoenix has no such bound.
const OVER_BUDGET: &str = r#"{"reason":"socket memory budget exceeded"}"#;
const UNMATCHED: &str = r#"{"reason":"unmatched topic"}"#;
/// A join with `since` whose history could not be read (Redis away).
const UNAVAILABLE: &str = r#"{"reason":"history unavailable"}"#;
/// The reply to a push over the socket's budget.
const RATE_LIMITED: &str = r#"{"reason":"rate limited"}"#;
/// A payload nested deeper than `--max-json-depth`: relayed, it would
/// break receivers (serde_json stops at 128 levels, Python's json at ~1,000).
const TOO_DEEP: &str = r#"{"reason":"payload nested too deeply"}"#;
/// A push of an event phoenix.js treats as channel control (`phx_reply`,
/// `phx_close`, `phx_error`...): the server's alone.
const RESERVED_EVENT: &str = r#"{"reason":"reserved event"}"#;
/// A join whose presence key (from `--presence`) is over `--max-presence-bytes`.
const KEY_TOO_LONG: &str = r#"{"reason":"presence key too long"}"#;
/// Infos one callback chain may trigger (an info that sends itself another
/// info forever would otherwise hold the shard).
const MAX_INFOS: usize = 64;

/// One call into a connection's socket.
pub(crate) struct Mux<'a, T: Transport> {
    pub cx: Cx<'a>,
    pub t: &'a mut T,
    pub joins: &'a mut Joins,
    pub scratch: &'a mut Scratch,
}

impl<'a, T: Transport> Mux<'a, T> {
    /// A message from the client.
    pub fn handle_in(&mut self, msg: Message<'_>) {
        let topic: &str = &msg.topic;
        let msg_ref = msg.msg_ref.as_ref();
        let control = matches!(msg.event.as_ref(), event::JOIN | event::LEAVE)
            || (topic == event::HEARTBEAT_TOPIC && msg.event == event::HEARTBEAT);
        if control && !self.control_allowed(msg.join_ref.as_ref(), msg_ref, topic) {
            return;
        }
        if topic == event::HEARTBEAT_TOPIC && msg.event == event::HEARTBEAT {
            self.reply(None, msg_ref, topic, Ok(Payload::EMPTY));
            return;
        }
        if let Payload::Json(json) = msg.payload {
            if crate::limits::json_too_deep(json.as_bytes(), self.cx.max_json_depth) {
                ShardStats::add(&self.t.stats().payload_refusals, 1);
                let join_ref = msg.join_ref.as_ref();
                self.reply(join_ref, msg_ref, topic, Err(Payload::Json(TOO_DEEP)));
                return;
            }
        }
        let joined = self.joined(topic);
        match msg.event.as_ref() {
            event::JOIN => {
                // A second join replaces the first. Phoenix answers the new
                // join first and sends the old one's phx_close after it
                // (through the socket's mailbox); we keep that order.
                let replaced = joined.map(|i| self.leave(i, Terminate::DuplicateJoin));
                self.join(msg.join_ref.as_ref(), msg_ref, topic, msg.payload);
                if let Some(old) = replaced {
                    let old = old.as_ref().map(RefBuf::to_ref);
                    let old = old.as_ref();
                    self.message(old, old, topic, event::CLOSE, Payload::EMPTY);
                }
            }
            event::LEAVE => match joined {
                Some(i) => {
                    let stored = self.joins[i].join_ref.as_ref().map(RefBuf::text);
                    if let (Some(sent), Some(stored)) = (msg.join_ref.as_deref(), stored) {
                        if sent != stored {
                            // The client raced a close we already sent.
                            return;
                        }
                    }
                    let old = self.leave(i, Terminate::Leave);
                    let old = old.as_ref().map(RefBuf::to_ref);
                    let old = old.as_ref();
                    self.reply(old, msg_ref, topic, Ok(Payload::EMPTY));
                    // The ok reply already ends the channel in the client. A
                    // v1 phx_close carries no join_ref, so phoenix.js would
                    // route it to a channel the client has joined on the same
                    // topic since (leave, then join at once) and close that
                    // one: Phoenix 1.7 loses that race sometimes; on v1 we
                    // send none. On v2 the join_ref makes it harmless, and
                    // Phoenix sends it.
                    if self.cx.vsn == Vsn::V2 {
                        self.message(old, old, topic, event::CLOSE, Payload::EMPTY);
                    }
                }
                None => {
                    // A join held open for the app backend ends here.
                    self.t.hook_cancel_join(topic);
                    self.reply(msg.join_ref.as_ref(), msg_ref, topic, Ok(Payload::EMPTY))
                }
            },
            ev if ev.starts_with("phx_") => {
                ShardStats::add(&self.t.stats().payload_refusals, 1);
                let join_ref = joined.and_then(|i| self.joins[i].join_ref.clone());
                let join_ref = join_ref.as_ref().map(RefBuf::to_ref);
                let refused = Err(Payload::Json(RESERVED_EVENT));
                self.reply(join_ref.as_ref(), msg_ref, topic, refused);
            }
            ev => {
                let verdict = self.t.allow_push();
                if verdict != Verdict::Allow {
                    ShardStats::add(&self.t.stats().rate_limited, 1);
                    let join_ref = joined.and_then(|i| self.joins[i].join_ref.clone());
                    let join_ref = join_ref.as_ref().map(RefBuf::to_ref);
                    let limited = Err(Payload::Json(RATE_LIMITED));
                    self.reply(join_ref.as_ref(), msg_ref, topic, limited);
                    if verdict == Verdict::Abuse {
                        self.t.close(CloseReason::RateLimited);
                    }
                    return;
                }
                match joined {
                    Some(i) if !self.cx.policy.may_push(topic, ev, self.cx.who) => {
                        ShardStats::add(&self.t.stats().policy_refusals, 1);
                        let join_ref = self.joins[i].join_ref.clone();
                        let join_ref = join_ref.as_ref().map(RefBuf::to_ref);
                        let refused = Err(Payload::Json(UNAUTHORIZED));
                        self.reply(join_ref.as_ref(), msg_ref, topic, refused);
                    }
                    Some(i) => self.push_in(i, ev, msg_ref, msg.payload),
                    None => self.reply(None, msg_ref, topic, Err(Payload::Json(UNMATCHED))),
                }
            }
        }
    }

    /// Spends one control message of the budget; when it is spent, answers
    /// `{"reason":"rate limited"}` (and asks for a close with 1008 when the
    /// client kept on) and returns false. Heartbeats, joins and leaves are
    /// outside the push budget, and a client that reads its replies is never
    /// a slow reader: without this, a client sending them as fast as the
    /// shard answers held a core (phoenix.js sends a heartbeat every 30 s).
    fn control_allowed(
        &mut self,
        join_ref: Option<&Ref<'_>>,
        msg_ref: Option<&Ref<'_>>,
        topic: &str,
    ) -> bool {
        let verdict = self.t.allow_control();
        if verdict == Verdict::Allow {
            return true;
        }
        ShardStats::add(&self.t.stats().control_limited, 1);
        self.reply(join_ref, msg_ref, topic, Err(Payload::Json(RATE_LIMITED)));
        if verdict == Verdict::Abuse {
            self.t.close(CloseReason::ControlMessages);
        }
        false
    }

    /// A message for the channel joined on the registry's topic `index`
    /// (from an [`Endpoint`](crate::Endpoint)); ignored if not joined.
    pub fn handle_info(&mut self, index: u32, info: &Info) {
        if let Some(i) = self.joins.iter().position(|j| j.slot.topic == index) {
            self.run_infos(i, vec![info.clone()]);
        }
    }

    /// The connection is gone: every channel ends, with no more output.
    pub fn close(&mut self) {
        while let Some(join) = self.joins.pop() {
            self.end_join(join, Terminate::Closed);
        }
    }

    fn joined(&self, topic: &str) -> Option<usize> {
        let idx = self.t.topic_index(topic)?;
        self.joins.iter().position(|j| j.slot.topic == idx)
    }

    fn join(
        &mut self,
        join_ref: Option<&Ref<'_>>,
        msg_ref: Option<&Ref<'_>>,
        topic: &str,
        payload: Payload<'_>,
    ) {
        let router: &'a Router = self.cx.router;
        // The socket id and control topics are the server's own.
        let reserved = is_reserved(topic);
        let route = (!reserved).then(|| router.route(topic)).flatten();
        let Some(channel) = route else {
            // A null join_ref, as Phoenix: a join no channel routes is
            // answered by `encode_ignore/2`, whose `%Reply{}` sets `ref` and
            // `topic` only (phoenixframework/phoenix, `lib/phoenix/socket.ex`).
            // No client we tried needs the join_ref echoed.
            let why = Refused::Unmatched { reserved };
            return self.refuse_join(why, None, msg_ref, topic, Payload::Json(UNMATCHED));
        };
        if !self.cx.policy.may_join(topic, self.cx.who) {
            let unauthorized = Payload::Json(UNAUTHORIZED);
            return self.refuse_join(Refused::Rule, join_ref, msg_ref, topic, unauthorized);
        }
        if self.joins.len() >= self.cx.max_channels {
            let too_many = Payload::Json(TOO_MANY);
            return self.refuse_join(Refused::TooMany, join_ref, msg_ref, topic, too_many);
        }
        let stored = join_ref.map(RefBuf::from);
        if self.over_join_bytes(stored.as_ref().map(RefBuf::len), topic.len()) {
            let over = Payload::Json(OVER_BUDGET);
            return self.refuse_join(Refused::Budget, join_ref, msg_ref, topic, over);
        }
        let (rule, key) = self.presence_key(topic, payload);
        if let Some(n) = key
            .as_ref()
            .map(String::len)
            .filter(|n| *n > self.cx.max_presence_bytes)
        {
            let why = Refused::PresenceKey(n);
            return self.refuse_join(why, join_ref, msg_ref, topic, Payload::Json(KEY_TOO_LONG));
        }
        if self.hooked(topic, crate::hooks::TopicHook::Join) {
            return self.hook_join(join_ref, msg_ref, topic, payload, key);
        }
        let mut effects = std::mem::take(&mut self.scratch.effects);
        let mut assigns = None;
        let result = channel.join(
            topic,
            payload,
            &mut Socket {
                topic,
                join_ref: join_ref.map(Ref::text),
                who: self.cx.who,
                assigns: &mut assigns,
                effects: &mut effects,
            },
        );
        match result {
            Ok(response) => {
                self.add_join(topic, stored, assigns);
                match crate::history::since_of(payload) {
                    None => self.reply(join_ref, msg_ref, topic, Ok(response.as_payload())),
                    Some(since) => {
                        self.join_since(join_ref, msg_ref, topic, since, response.as_payload())
                    }
                }
                let i = self.joins.len() - 1;
                self.after_join(i, effects, rule.is_some(), key);
            }
            Err(response) => {
                let reply = response.as_payload();
                self.refuse_join(Refused::Channel, join_ref, msg_ref, topic, reply);
                effects.clear();
                self.scratch.effects = effects;
            }
        }
    }

    /// Whether a join holding `join_ref` bytes of join_ref and `topic`
    /// bytes of topic name would pass the bytes the socket's joins may hold.
    #[inline]
    fn over_join_bytes(&self, join_ref: Option<usize>, topic: usize) -> bool {
        let cost = |join_ref: Option<usize>, topic: usize| {
            std::mem::size_of::<Join>() + join_ref.unwrap_or(0) + topic
        };
        let held: usize = self
            .joins
            .iter()
            .map(|j| {
                let topic = self.t.topic_name(j.slot.topic).map_or(0, |t| t.len());
                cost(j.join_ref.as_ref().map(RefBuf::len), topic)
            })
            .sum();
        held + cost(join_ref, topic) > self.cx.max_join_bytes
    }

    /// Presence configured for the topic: its rule and the join's key,
    /// found before the channel runs so that a key too long refuses the
    /// join.
    #[inline]
    fn presence_key(
        &self,
        topic: &str,
        payload: Payload<'_>,
    ) -> (Option<&'a PresenceRule>, Option<String>) {
        let rules: &'a [PresenceRule] = self.cx.presence;
        let rule = rules.iter().find(|r| r.matches(topic));
        let key = rule.and_then(|r| r.key_of(payload, self.cx.who));
        (rule, key)
    }

    /// Subscribes the socket to `topic` and keeps the join, counted.
    #[inline]
    fn add_join(&mut self, topic: &str, stored: Option<RefBuf>, assigns: crate::channel::Assigns) {
        let slot = self.t.subscribe(topic);
        push_join(
            self.joins,
            Join {
                slot,
                join_ref: stored,
                assigns,
            },
        );
        let stats = self.t.stats();
        ShardStats::add(&stats.channels, 1);
        ShardStats::add(&stats.joins, 1);
    }

    /// After join `i`'s reply: what its channel's join did (pushes,
    /// broadcasts), its presence when `tracked`, then its infos.
    #[inline]
    fn after_join(&mut self, i: usize, mut effects: Effects, tracked: bool, key: Option<String>) {
        self.apply(i, &mut effects);
        if tracked {
            self.auto_presence(i, key);
        }
        let infos = std::mem::take(&mut effects.infos);
        self.scratch.effects = effects;
        if !infos.is_empty() {
            self.run_infos(i, infos);
        }
    }

    /// The ok reply of a join that asked for the messages after `since`
    /// (`None`: a `since` that is no string), with `"recovered"` in an
    /// object reply, then those messages with the join's join_ref, oldest
    /// first; the live ones follow (`crate::history`).
    fn join_since(
        &mut self,
        join_ref: Option<&Ref<'_>>,
        msg_ref: Option<&Ref<'_>>,
        topic: &str,
        since: Option<String>,
        response: Payload<'_>,
    ) {
        if let Some(s) = since.as_deref() {
            let held = crate::history::HeldJoin {
                join_ref: join_ref.map(RefBuf::from),
                msg_ref: msg_ref.map(RefBuf::from),
                response: response.into(),
            };
            if self.t.recover(topic, s, held) {
                return;
            }
        }
        // No history, or a `since` that is no position.
        let found = throng_pubsub::Replay::default();
        self.send_since(join_ref, msg_ref, topic, response, found);
    }

    /// The answer to a history read [`Transport::recover_later`] started
    /// for the join of `topic` that `held` replies to: the join's reply and
    /// the replay, if the socket still holds that join.
    pub(crate) fn since_answered(
        &mut self,
        topic: &str,
        held: crate::history::HeldJoin,
        found: throng_pubsub::Replay,
    ) {
        let Some(i) = self.joined(topic) else {
            return;
        };
        if self.joins[i].join_ref != held.join_ref {
            return; // left and joined again meanwhile
        }
        let (join_ref, msg_ref) = (
            held.join_ref.as_ref().map(RefBuf::to_ref),
            held.msg_ref.as_ref().map(RefBuf::to_ref),
        );
        let response = held.response.as_payload();
        self.send_since(join_ref.as_ref(), msg_ref.as_ref(), topic, response, found);
    }

    /// The join of `topic` that `held` replies to, whose history read found
    /// the store unavailable (Redis away or later than
    /// `--redis-timeout-ms`): undone and refused with
    /// `{"reason":"history unavailable"}`, rather than answered
    /// `recovered: false`, which would tell the client its messages are
    /// gone. phoenix.js joins a refused channel again after
    /// `rejoinAfterMs`, with the same `since` (phoenix's
    /// assets/js/phoenix/channel.js: `joinPush.receive("error", ...)`
    /// schedules the rejoin timer), and recovers once Redis is back.
    pub(crate) fn since_refused(&mut self, topic: &str, held: crate::history::HeldJoin) {
        let Some(i) = self.joined(topic) else {
            return;
        };
        if self.joins[i].join_ref != held.join_ref {
            return; // left and joined again meanwhile
        }
        self.leave(i, Terminate::Refused);
        let (join_ref, msg_ref) = (
            held.join_ref.as_ref().map(RefBuf::to_ref),
            held.msg_ref.as_ref().map(RefBuf::to_ref),
        );
        let why = Refused::HistoryUnavailable;
        let reply = Payload::Json(UNAVAILABLE);
        self.refuse_join(why, join_ref.as_ref(), msg_ref.as_ref(), topic, reply);
    }

    /// The ok reply of a join with `since`, with `"recovered"`, then what
    /// `found` holds.
    fn send_since(
        &mut self,
        join_ref: Option<&Ref<'_>>,
        msg_ref: Option<&Ref<'_>>,
        topic: &str,
        response: Payload<'_>,
        found: throng_pubsub::Replay,
    ) {
        let answer = match response {
            Payload::Json(json) => crate::history::with_recovered(json, found.recovered),
            Payload::Binary(_) => None,
        };
        let response = answer.as_deref().map_or(response, Payload::Json);
        self.reply(join_ref, msg_ref, topic, Ok(response));
        for entry in &found.messages {
            let (ev, payload) = (&*entry.event, entry.payload.as_payload());
            if self.cx.vsn == Vsn::V1 && matches!(payload, Payload::Binary(_)) {
                // v1 cannot carry it: skipped, as its live broadcast is.
                continue;
            }
            let at = Ref::string(found.ref_of(entry));
            self.message(join_ref, Some(&at), topic, ev, payload);
        }
        let stats = self.t.stats();
        ShardStats::add(&stats.history_recoveries, u64::from(found.recovered));
        ShardStats::add(&stats.history_misses, u64::from(!found.recovered));
        ShardStats::add(&stats.history_replayed, found.messages.len() as u64);
    }

    /// `event` pushed by the client on join `i`.
    fn push_in(&mut self, i: usize, ev: &str, msg_ref: Option<&Ref<'_>>, payload: Payload<'_>) {
        let Some((channel, topic)) = self.channel_of(i) else {
            return;
        };
        if self.hooked(&topic, crate::hooks::TopicHook::Push) {
            return self.hook_push(i, ev, msg_ref, payload);
        }
        let mut effects = std::mem::take(&mut self.scratch.effects);
        let reply = {
            let join = &mut self.joins[i];
            channel.handle_in(
                ev,
                payload,
                &mut join_socket(join, &topic, self.cx.who, &mut effects),
            )
        };
        // Phoenix's order: the broadcast (fastlaned) before the reply.
        self.apply(i, &mut effects);
        if let Some(reply) = reply {
            let join_ref = self.joins[i].join_ref.clone();
            let join_ref = join_ref.as_ref().map(RefBuf::to_ref);
            self.reply(join_ref.as_ref(), msg_ref, &topic, payload_of(&reply));
        }
        let infos = std::mem::take(&mut effects.infos);
        self.scratch.effects = effects;
        if !infos.is_empty() {
            self.run_infos(i, infos);
        }
    }

    /// Runs `handle_info` for `infos` and for whatever infos they send, on
    /// join `i`, at most [`MAX_INFOS`] in all.
    fn run_infos(&mut self, i: usize, mut infos: Vec<Info>) {
        let Some((channel, topic)) = self.channel_of(i) else {
            return;
        };
        let mut done = 0;
        while !infos.is_empty() {
            let mut effects = std::mem::take(&mut self.scratch.effects);
            for info in infos.drain(..) {
                done += 1;
                if done > MAX_INFOS {
                    tracing::warn!(topic = %topic, "dropping infos: a channel sent itself more than {MAX_INFOS} in one chain");
                    effects.clear();
                    self.scratch.effects = effects;
                    return;
                }
                let join = &mut self.joins[i];
                channel.handle_info(
                    &info,
                    &mut join_socket(join, &topic, self.cx.who, &mut effects),
                );
            }
            self.apply(i, &mut effects);
            infos = std::mem::take(&mut effects.infos);
            self.scratch.effects = effects;
        }
    }

    /// The channel and topic of join `i`. The channel is borrowed from the
    /// router, not cloned: its reference count is shared by every shard.
    fn channel_of(&self, i: usize) -> Option<(&'a Arc<dyn Channel>, Arc<str>)> {
        let topic = self.t.topic_name(self.joins[i].slot.topic)?;
        let router: &'a Router = self.cx.router;
        let channel = router.route(&topic)?;
        Some((channel, topic))
    }

    /// Removes join `i`; returns its join_ref.
    fn leave(&mut self, i: usize, reason: Terminate) -> Option<RefBuf> {
        let join = self.joins.swap_remove(i);
        self.end_join(join, reason)
    }

    /// Ends a join already taken off the connection: unsubscribes it and
    /// tells the channel. Returns its join_ref.
    fn end_join(&mut self, mut join: Join, reason: Terminate) -> Option<RefBuf> {
        let name = self.t.topic_name(join.slot.topic);
        if let Some(topic) = &name {
            self.untrack_all(join.slot.topic, topic);
        }
        self.t.unsubscribe(join.slot);
        ShardStats::sub(&self.t.stats().channels, 1);
        let router: &'a Router = self.cx.router;
        if let Some(topic) = name {
            if let Some(channel) = router.route(&topic) {
                let mut effects = std::mem::take(&mut self.scratch.effects);
                channel.terminate(
                    reason,
                    &mut join_socket(&mut join, &topic, self.cx.who, &mut effects),
                );
                effects.clear();
                self.scratch.effects = effects;
            }
        }
        join.join_ref
    }

    /// Applies a callback's pushes and broadcasts on join `i`.
    fn apply(&mut self, i: usize, effects: &mut Effects) {
        if !effects.presence.is_empty() {
            let ops = std::mem::take(&mut effects.presence);
            // Pushes made with it go first, as they were made first in
            // Phoenix's `:after_join` (the state, then the track).
            self.apply_pushes(i, effects);
            self.presence_ops(i, ops);
        }
        self.apply_pushes(i, effects);
    }

    fn apply_pushes(&mut self, i: usize, effects: &mut Effects) {
        if effects.pushes.is_empty() && effects.broadcasts.is_empty() {
            return;
        }
        let Some(topic) = self.t.topic_name(self.joins[i].slot.topic) else {
            effects.clear();
            return;
        };
        let join_ref = self.joins[i].join_ref.clone();
        let join_ref = join_ref.as_ref().map(RefBuf::to_ref);
        for (ev, payload) in effects.pushes.drain(..) {
            self.message(join_ref.as_ref(), None, &topic, &ev, payload.as_payload());
        }
        for (ev, payload, include_self) in effects.broadcasts.drain(..) {
            self.t.broadcast(topic.clone(), ev, payload, include_self);
        }
    }

    fn reply(
        &mut self,
        join_ref: Option<&Ref<'_>>,
        msg_ref: Option<&Ref<'_>>,
        topic: &str,
        reply: Result<Payload<'_>, Payload<'_>>,
    ) {
        let (status, response) = match reply {
            Ok(p) => ("ok", p),
            Err(p) => ("error", p),
        };
        let body = &mut self.scratch.body;
        body.clear();
        match encode_reply_refs(
            self.cx.vsn,
            body,
            join_ref,
            msg_ref,
            topic,
            status,
            response,
        ) {
            Ok(op) => self.t.send(op, body),
            Err(e) => tracing::warn!("reply not encodable: {e}"),
        }
    }

    fn message(
        &mut self,
        join_ref: Option<&Ref<'_>>,
        msg_ref: Option<&Ref<'_>>,
        topic: &str,
        ev: &str,
        payload: Payload<'_>,
    ) {
        let body = &mut self.scratch.body;
        body.clear();
        match encode_message_refs(self.cx.vsn, body, join_ref, msg_ref, topic, ev, payload) {
            Ok(op) => self.t.send(op, body),
            Err(e) => tracing::warn!("push not encodable: {e}"),
        }
    }
}

fn payload_of(reply: &Reply) -> Result<Payload<'_>, Payload<'_>> {
    match reply {
        Ok(p) => Ok(p.as_payload()),
        Err(p) => Err(p.as_payload()),
    }
}

#[cfg(test)]
mod tests;
