//! The socket state machine against a recording transport: no sockets, no
//! shard. Each test feeds decoded messages and reads what went out.
//!
//! This file owns the recording transport (`Fake`), the recording channel
//! (`Probe`) and the `Harness`; the tests live beside it by topic.

mod history;
mod join;
mod leave;
mod presence;
mod push;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use throng_protocol::frame::Opcode;
use throng_protocol::serializer::{decode, Sender};
use throng_protocol::{OwnedPayload, Payload, Vsn};
use throng_pubsub::{LocalPresence, Registry, Slot, Tracker};

use super::{Cx, Join, Mux, Scratch, Tracked, Transport};
use crate::auth::rate::Verdict;
use crate::channel::{Channel, ConnectInfo, Info, Reply, Router, Socket, Terminate, Who};
use crate::metrics::ShardStats;

/// Everything the socket did, in order.
#[derive(Default)]
struct Log {
    sent: Vec<String>,
}

struct Fake {
    registry: Registry,
    stats: ShardStats,
    log: Log,
    /// What `allow_push` answers next (then Allow).
    verdicts: Vec<Verdict>,
    closed: Option<u16>,
    tracker: Arc<Tracker>,
    tracked: HashMap<u32, Tracked>,
    started: usize,
    /// Joins with `since` on `room:h*` waiting for their history read.
    held: Vec<(String, crate::history::HeldJoin)>,
}

impl Fake {
    fn new() -> Fake {
        Fake {
            registry: Registry::default(),
            stats: ShardStats::default(),
            log: Log::default(),
            verdicts: Vec::new(),
            closed: None,
            tracker: Tracker::new(Arc::new(LocalPresence::new())),
            tracked: HashMap::new(),
            started: 0,
            held: Vec::new(),
        }
    }
}

impl Transport for Fake {
    fn subscribe(&mut self, topic: &str) -> Slot {
        self.registry.subscribe(topic, 1).0
    }
    fn unsubscribe(&mut self, slot: Slot) {
        self.registry.unsubscribe(slot);
    }
    fn topic_index(&self, topic: &str) -> Option<u32> {
        self.registry.find(topic)
    }
    fn topic_name(&self, index: u32) -> Option<Arc<str>> {
        self.registry.name(index).cloned()
    }
    fn send(&mut self, opcode: Opcode, body: &[u8]) {
        assert_eq!(opcode, Opcode::Text);
        self.log
            .sent
            .push(String::from_utf8(body.to_vec()).unwrap());
    }
    fn broadcast(
        &mut self,
        topic: Arc<str>,
        event: String,
        payload: OwnedPayload,
        include_self: bool,
    ) {
        let OwnedPayload::Json(p) = payload else {
            panic!("binary")
        };
        self.log
            .sent
            .push(format!("BROADCAST {topic} {event} {p} self={include_self}"));
    }
    fn stats(&self) -> &ShardStats {
        &self.stats
    }
    fn allow_push(&mut self) -> Verdict {
        if self.verdicts.is_empty() {
            Verdict::Allow
        } else {
            self.verdicts.remove(0)
        }
    }
    fn close(&mut self, reason: crate::engine::close::CloseReason<'static>) {
        // As the shard's close: counted once, the reason's code sent.
        reason.count(&self.stats);
        self.closed = reason.row().code;
    }
    fn tracker(&self) -> &Tracker {
        &self.tracker
    }
    fn tracked(&mut self, index: u32) -> &mut Tracked {
        self.tracked.entry(index).or_default()
    }
    fn take_tracked(&mut self, index: u32) -> Tracked {
        self.tracked.remove(&index).unwrap_or_default()
    }
    fn send_shared(&mut self, opcode: Opcode, head: &[u8], shared: &Arc<str>, tail: &[u8]) {
        let mut body = head.to_vec();
        body.extend_from_slice(shared.as_bytes());
        body.extend_from_slice(tail);
        self.send(opcode, &body);
    }
    fn presence_started(&mut self) {
        self.started += 1;
    }
    fn recover(&mut self, topic: &str, _since: &str, held: crate::history::HeldJoin) -> bool {
        let kept = topic.starts_with("room:h");
        if kept {
            self.held.push((topic.to_string(), held));
        }
        kept
    }
}

/// A channel that records its callbacks and exercises the API.
#[derive(Clone, Default)]
struct Probe {
    calls: Arc<Mutex<Vec<String>>>,
}

impl Probe {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl Channel for Probe {
    fn join(&self, topic: &str, payload: Payload<'_>, socket: &mut Socket<'_>) -> Reply {
        self.calls.lock().unwrap().push(format!("join {topic}"));
        if topic == "room:secret" {
            return Err(OwnedPayload::Json(r#"{"reason":"unauthorized"}"#.into()));
        }
        socket.assign(0u32);
        if let Payload::Json(p) = payload {
            if p.contains("after") {
                socket.send_info("after_join");
            }
        }
        Ok(OwnedPayload::empty())
    }

    fn handle_in(
        &self,
        event: &str,
        payload: Payload<'_>,
        socket: &mut Socket<'_>,
    ) -> Option<Reply> {
        *socket.assigns_mut::<u32>().unwrap() += 1;
        let n = *socket.assigns::<u32>().unwrap();
        let Payload::Json(p) = payload else {
            return None;
        };
        match event {
            "shout" => {
                socket.broadcast("shout", OwnedPayload::Json(p.into()));
                Some(Ok(OwnedPayload::Json(format!("{{\"n\":{n}}}"))))
            }
            "whisper" => {
                socket.broadcast_from("whisper", OwnedPayload::Json(p.into()));
                None
            }
            "bad" => Some(Err(OwnedPayload::Json(r#"{"reason":"bad"}"#.into()))),
            "user" => Some(Ok(OwnedPayload::json(&socket.user_id()).unwrap())),
            "track" | "update" | "untrack" | "state" => {
                let v: serde_json::Value = serde_json::from_str(p).unwrap();
                let key = v["key"].as_str().unwrap_or("");
                let mut presence = socket.presence();
                let r = match event {
                    "track" => presence.track(key, &v["meta"]),
                    "update" => presence.update(key, &v["meta"]),
                    "untrack" => {
                        presence.untrack(key);
                        Ok(())
                    }
                    _ => {
                        presence.push_state();
                        Ok(())
                    }
                };
                Some(
                    r.map(|_| OwnedPayload::empty())
                        .map_err(|e| OwnedPayload::Json(format!("{{\"reason\":\"{e}\"}}"))),
                )
            }
            _ => None,
        }
    }

    fn handle_info(&self, msg: &Info, socket: &mut Socket<'_>) {
        let what = msg.downcast_ref::<&str>().copied().unwrap_or("?");
        self.calls.lock().unwrap().push(format!("info {what}"));
        let n = *socket.assigns::<u32>().unwrap();
        socket.push("state", OwnedPayload::Json(format!("{{\"n\":{n}}}")));
    }

    fn terminate(&self, reason: Terminate, socket: &mut Socket<'_>) {
        self.calls
            .lock()
            .unwrap()
            .push(format!("terminate {} {reason:?}", socket.topic()));
    }
}

struct Harness {
    router: Router,
    probe: Probe,
    t: Fake,
    joins: crate::protocol::phoenix::socket::Joins,
    scratch: Scratch,
    vsn: Vsn,
    connect: Option<ConnectInfo>,
    max_channels: usize,
    max_join_bytes: usize,
    policy: crate::rules::Policy,
    presence: Vec<crate::presence::PresenceRule>,
}

impl Harness {
    fn new(vsn: Vsn) -> Harness {
        let probe = Probe::default();
        Harness {
            router: Router::new().channel("room:*", probe.clone()),
            probe,
            t: Fake::new(),
            joins: Default::default(),
            scratch: Scratch::default(),
            vsn,
            connect: None,
            max_channels: 100,
            max_join_bytes: 1 << 20,
            policy: Default::default(),
            presence: Vec::new(),
        }
    }

    fn mux(&mut self) -> Mux<'_, Fake> {
        Mux {
            cx: Cx {
                router: &self.router,
                policy: &self.policy,
                vsn: self.vsn,
                who: Who {
                    user: self.connect.as_ref().and_then(|c| c.user_id.as_deref()),
                    connect: self.connect.as_ref(),
                },
                max_channels: self.max_channels,
                max_join_bytes: self.max_join_bytes,
                presence: &self.presence,
                max_presence_bytes: 64,
                max_json_depth: 128,
            },
            t: &mut self.t,
            joins: &mut self.joins,
            scratch: &mut self.scratch,
        }
    }

    /// Feeds one client message (v2 array or v1 object text) and returns
    /// what went out for it.
    fn input(&mut self, text: &str) -> Vec<String> {
        let vsn = self.vsn;
        let msg = decode(vsn, Opcode::Text, text.as_bytes(), Sender::Client).unwrap();
        self.mux().handle_in(msg);
        std::mem::take(&mut self.t.log.sent)
    }
}
