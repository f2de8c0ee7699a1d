//! Joins and pushes the app backend decides (`[[topics]] hooks`, see
//! `crate::hooks`). A hooked join is held open: the request goes out, and
//! the socket joins (or is refused) when the answer comes back through the
//! shard ([`Mux::hook_joined`]); a leave or another join of the topic
//! meanwhile drops it. A hooked push is answered, and its broadcast sent,
//! when its answer comes ([`Mux::hook_pushed`]); the transport sends one
//! push of a socket and topic at a time, so they are answered in order.

use std::sync::Arc;

use serde_json::value::RawValue;
use throng_protocol::{OwnedPayload, Payload, Ref, RefBuf};

use super::refused::Refused;
use super::{Join, Mux, Transport};
use crate::hooks::{Failure, Hook, JoinRequest, Outcome, PushRequest, TopicHook, Waiting};
use crate::metrics::ShardStats;

/// A hooked join's assigns: the backend's JSON object, sent with the join's
/// pushes.
pub(crate) struct HookAssigns(Box<RawValue>);

/// Assigns of a socket no hook gave any.
const NO_ASSIGNS: &str = "{}";

fn raw(json: &str) -> &RawValue {
    serde_json::from_str(json).unwrap_or_else(|_| serde_json::from_str(NO_ASSIGNS).unwrap())
}

impl<T: Transport> Mux<'_, T> {
    /// Whether the app backend decides `hook` on `topic` for this socket.
    pub(super) fn hooked(&self, topic: &str, hook: TopicHook) -> bool {
        self.cx.policy.hooked(topic, self.cx.who.user, hook)
    }

    /// Sends a join to the backend; the client is answered when it answers.
    pub(super) fn hook_join(
        &mut self,
        join_ref: Option<&Ref<'_>>,
        msg_ref: Option<&Ref<'_>>,
        topic: &str,
        payload: Payload<'_>,
        presence_key: Option<String>,
    ) {
        let Payload::Json(json) = payload else {
            return self.hook_refused(join_ref, msg_ref, topic, Failure::Binary);
        };
        let socket_id = self.t.socket_id();
        let assigns = self.t.hook_assigns();
        let body = serde_json::to_vec(&JoinRequest {
            topic,
            payload: raw(json),
            user: self.cx.who.user,
            socket_id: &socket_id,
            assigns: raw(assigns.as_deref().unwrap_or(NO_ASSIGNS)),
            at: crate::hooks::now_ms(),
        })
        .unwrap_or_default();
        let wait = Waiting::Join {
            join_ref: join_ref.map(RefBuf::from),
            msg_ref: msg_ref.map(RefBuf::from),
            presence_key,
            since: crate::history::since_of(payload),
        };
        if let Err(f) = self.t.hook_call(Hook::Join, topic, body, wait) {
            self.hook_refused(join_ref, msg_ref, topic, f);
        }
    }

    fn hook_refused(
        &mut self,
        join_ref: Option<&Ref<'_>>,
        msg_ref: Option<&Ref<'_>>,
        topic: &str,
        f: Failure,
    ) {
        let reply = Payload::Json(f.reply());
        self.refuse_join(Refused::HookFailed(f), join_ref, msg_ref, topic, reply);
    }

    /// The backend's answer to a join this socket holds open.
    pub(crate) fn hook_joined(&mut self, topic: &str, what: Waiting, outcome: Outcome) {
        let Waiting::Join {
            join_ref,
            msg_ref,
            presence_key,
            since,
        } = what
        else {
            return;
        };
        let (join_ref, msg_ref) = (
            join_ref.as_ref().map(RefBuf::to_ref),
            msg_ref.as_ref().map(RefBuf::to_ref),
        );
        let (join_ref, msg_ref) = (join_ref.as_ref(), msg_ref.as_ref());
        if self.joined(topic).is_some() {
            // Joined since by a way that did not cancel this one.
            return;
        }
        let answer = match outcome {
            Outcome::Failed(f) => return self.hook_refused(join_ref, msg_ref, topic, f),
            // Only a connect is refused by status.
            Outcome::Refused(_) => {
                return self.hook_refused(join_ref, msg_ref, topic, Failure::BadAnswer)
            }
            Outcome::Answer(a) => a,
        };
        if let Some(error) = &answer.error {
            let error = error.get();
            let why = Refused::Hook(error);
            return self.refuse_join(why, join_ref, msg_ref, topic, Payload::Json(error));
        }
        // Other joins may have completed while this one waited.
        if self.joins.len() >= self.cx.max_channels {
            let too_many = Payload::Json(super::TOO_MANY);
            return self.refuse_join(Refused::TooMany, join_ref, msg_ref, topic, too_many);
        }
        let slot = self.t.subscribe(topic);
        let assigns = answer
            .assigns
            .map(|a| Box::new(Box::new(HookAssigns(a)) as Box<dyn std::any::Any + Send>));
        super::push_join(
            self.joins,
            Join {
                slot,
                join_ref: join_ref.map(RefBuf::from),
                assigns,
            },
        );
        let stats = self.t.stats();
        ShardStats::add(&stats.channels, 1);
        ShardStats::add(&stats.joins, 1);
        let reply = answer.reply.as_deref().map_or("{}", RawValue::get);
        match since {
            None => self.reply(join_ref, msg_ref, topic, Ok(Payload::Json(reply))),
            // Subscribed above: the replay joins the live messages exactly.
            Some(since) => self.join_since(join_ref, msg_ref, topic, since, Payload::Json(reply)),
        }
        let i = self.joins.len() - 1;
        if self.cx.presence.iter().any(|r| r.matches(topic)) {
            self.auto_presence(i, presence_key);
        }
    }

    /// Sends push `ev` on join `i` to the backend.
    pub(super) fn hook_push(
        &mut self,
        i: usize,
        ev: &str,
        msg_ref: Option<&Ref<'_>>,
        payload: Payload<'_>,
    ) {
        let Some(topic) = self.t.topic_name(self.joins[i].slot.topic) else {
            return;
        };
        let join_ref = self.joins[i].join_ref.clone();
        let Payload::Json(json) = payload else {
            let refused = Err(Payload::Json(Failure::Binary.reply()));
            let join_ref = join_ref.as_ref().map(RefBuf::to_ref);
            return self.reply(join_ref.as_ref(), msg_ref, &topic, refused);
        };
        let assigns = self.joins[i]
            .assigns
            .as_ref()
            .and_then(|a| a.downcast_ref::<HookAssigns>())
            .map_or(NO_ASSIGNS, |a| a.0.get());
        let socket_id = self.t.socket_id();
        let body = serde_json::to_vec(&PushRequest {
            topic: &topic,
            event: ev,
            payload: raw(json),
            user: self.cx.who.user,
            socket_id: &socket_id,
            assigns: raw(assigns),
            msg_ref,
            at: crate::hooks::now_ms(),
        })
        .unwrap_or_default();
        let wait = Waiting::Push {
            join_ref: join_ref.clone(),
            msg_ref: msg_ref.map(RefBuf::from),
        };
        if let Err(f) = self.t.hook_call(Hook::Push, &topic, body, wait) {
            let refused = Err(Payload::Json(f.reply()));
            let join_ref = join_ref.as_ref().map(RefBuf::to_ref);
            self.reply(join_ref.as_ref(), msg_ref, &topic, refused);
        }
    }

    /// The backend's answer to a push of this socket: the broadcast it
    /// asks for, then the reply (Phoenix's order).
    pub(crate) fn hook_pushed(&mut self, topic: &Arc<str>, what: Waiting, outcome: Outcome) {
        let Waiting::Push { join_ref, msg_ref } = what else {
            return;
        };
        // Left (or joined again) since: the reply has no channel to reach.
        let Some(i) = self.joined(topic) else {
            return;
        };
        if self.joins[i].join_ref != join_ref {
            return;
        }
        let (join_ref, msg_ref) = (
            join_ref.as_ref().map(RefBuf::to_ref),
            msg_ref.as_ref().map(RefBuf::to_ref),
        );
        let (join_ref, msg_ref) = (join_ref.as_ref(), msg_ref.as_ref());
        let answer = match outcome {
            Outcome::Failed(f) => {
                return self.reply(join_ref, msg_ref, topic, Err(Payload::Json(f.reply())))
            }
            Outcome::Refused(_) => {
                let bad = Err(Payload::Json(Failure::BadAnswer.reply()));
                return self.reply(join_ref, msg_ref, topic, bad);
            }
            Outcome::Answer(a) => a,
        };
        if let Some(error) = &answer.error {
            self.reply(join_ref, msg_ref, topic, Err(Payload::Json(error.get())));
            return;
        }
        if let Some(b) = answer.broadcast {
            let payload = b.payload.as_deref().map_or("{}", RawValue::get);
            let payload = OwnedPayload::Json(payload.to_string());
            self.t
                .broadcast(topic.clone(), b.event, payload, !b.exclude_sender);
        }
        let reply = answer.reply.as_deref().map_or("{}", RawValue::get);
        self.reply(join_ref, msg_ref, topic, Ok(Payload::Json(reply)));
    }
}
