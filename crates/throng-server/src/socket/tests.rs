//! The socket state machine against a recording transport: no sockets, no
//! shard. Each test feeds decoded messages and reads what went out.

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
    fn close(&mut self, code: u16, _reason: &'static str) {
        self.closed = Some(code);
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
    joins: Vec<Join>,
    scratch: Scratch,
    vsn: Vsn,
    connect: Option<ConnectInfo>,
    max_channels: usize,
    max_join_bytes: usize,
    policy: crate::auth::Policy,
    presence: Vec<crate::presence::PresenceRule>,
}

impl Harness {
    fn new(vsn: Vsn) -> Harness {
        let probe = Probe::default();
        Harness {
            router: Router::new().channel("room:*", probe.clone()),
            probe,
            t: Fake::new(),
            joins: Vec::new(),
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

#[test]
fn heartbeat_is_answered_on_the_phoenix_topic() {
    let mut h = Harness::new(Vsn::V2);
    assert_eq!(
        h.input(r#"[null,"9","phoenix","heartbeat",{}]"#),
        vec![r#"[null,"9","phoenix","phx_reply",{"response":{},"status":"ok"}]"#]
    );
}

#[test]
fn join_refused_join_and_unmatched_topic() {
    let mut h = Harness::new(Vsn::V2);
    assert_eq!(
        h.input(r#"["1","1","room:a","phx_join",{}]"#),
        vec![r#"["1","1","room:a","phx_reply",{"response":{},"status":"ok"}]"#]
    );
    assert_eq!(h.joins.len(), 1);
    assert!(h.t.registry.find("room:a").is_some());
    assert_eq!(
        h.input(r#"["2","2","room:secret","phx_join",{}]"#),
        vec![
            r#"["2","2","room:secret","phx_reply",{"response":{"reason":"unauthorized"},"status":"error"}]"#
        ]
    );
    assert_eq!(
        h.input(r#"["3","3","nowhere","phx_join",{}]"#),
        vec![
            r#"["3","3","nowhere","phx_reply",{"response":{"reason":"unmatched topic"},"status":"error"}]"#
        ]
    );
    assert_eq!(h.joins.len(), 1);
    assert_eq!(h.t.registry.len(), 1, "refused joins subscribe nothing");
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(h.t.stats.joins.load(Relaxed), 1);
    assert_eq!(h.t.stats.refused_joins.load(Relaxed), 2);
    assert_eq!(h.t.stats.channels.load(Relaxed), 1);
}

#[test]
fn push_broadcasts_before_its_reply_and_keeps_assigns() {
    let mut h = Harness::new(Vsn::V2);
    h.input(r#"["1","1","room:a","phx_join",{}]"#);
    assert_eq!(
        h.input(r#"["1","2","room:a","shout",{"x":1}]"#),
        vec![
            r#"BROADCAST room:a shout {"x":1} self=true"#.to_string(),
            r#"["1","2","room:a","phx_reply",{"response":{"n":1},"status":"ok"}]"#.to_string(),
        ]
    );
    assert_eq!(
        h.input(r#"["1","3","room:a","shout",{}]"#)[1],
        r#"["1","3","room:a","phx_reply",{"response":{"n":2},"status":"ok"}]"#,
        "assigns persist between callbacks"
    );
    assert_eq!(
        h.input(r#"["1","4","room:a","whisper",{}]"#),
        vec![r#"BROADCAST room:a whisper {} self=false"#]
    );
    assert_eq!(
        h.input(r#"["1","5","room:a","bad",{}]"#),
        vec![r#"["1","5","room:a","phx_reply",{"response":{"reason":"bad"},"status":"error"}]"#]
    );
}

#[test]
fn push_to_a_topic_not_joined_is_unmatched() {
    let mut h = Harness::new(Vsn::V2);
    assert_eq!(
        h.input(r#"[null,"7","room:a","shout",{}]"#),
        vec![
            r#"[null,"7","room:a","phx_reply",{"response":{"reason":"unmatched topic"},"status":"error"}]"#
        ]
    );
}

#[test]
fn leave_on_v2_replies_then_closes_by_join_ref() {
    let mut h = Harness::new(Vsn::V2);
    h.input(r#"["1","1","room:a","phx_join",{}]"#);
    assert_eq!(
        h.input(r#"["1","2","room:a","phx_leave",{}]"#),
        vec![
            r#"["1","2","room:a","phx_reply",{"response":{},"status":"ok"}]"#,
            r#"["1","1","room:a","phx_close",{}]"#,
        ]
    );
    assert!(h.joins.is_empty());
    assert!(h.t.registry.is_empty());
    assert_eq!(h.probe.calls().last().unwrap(), "terminate room:a Leave");
}

#[test]
fn leave_on_v1_sends_no_phx_close() {
    let mut h = Harness::new(Vsn::V1);
    h.input(r#"{"topic":"room:a","event":"phx_join","payload":{},"ref":"1"}"#);
    assert_eq!(
        h.input(r#"{"topic":"room:a","event":"phx_leave","payload":{},"ref":"2"}"#),
        vec![
            r#"{"event":"phx_reply","payload":{"response":{},"status":"ok"},"ref":"2","topic":"room:a"}"#
        ]
    );
    // the rejoin at once is not disturbed by anything
    assert_eq!(
        h.input(r#"{"topic":"room:a","event":"phx_join","payload":{},"ref":"3"}"#),
        vec![
            r#"{"event":"phx_reply","payload":{"response":{},"status":"ok"},"ref":"3","topic":"room:a"}"#
        ]
    );
    assert_eq!(h.joins.len(), 1);
}

#[test]
fn leave_with_a_stale_join_ref_is_ignored() {
    let mut h = Harness::new(Vsn::V2);
    h.input(r#"["1","1","room:a","phx_join",{}]"#);
    assert!(h.input(r#"["0","2","room:a","phx_leave",{}]"#).is_empty());
    assert_eq!(h.joins.len(), 1);
}

#[test]
fn duplicate_join_answers_the_new_join_then_closes_the_old() {
    let mut h = Harness::new(Vsn::V2);
    h.input(r#"["1","1","room:a","phx_join",{}]"#);
    assert_eq!(
        h.input(r#"["5","5","room:a","phx_join",{}]"#),
        vec![
            r#"["5","5","room:a","phx_reply",{"response":{},"status":"ok"}]"#,
            r#"["1","1","room:a","phx_close",{}]"#,
        ]
    );
    assert_eq!(h.joins.len(), 1);
    assert_eq!(h.joins[0].join_ref.as_deref(), Some("5"));
    assert_eq!(
        h.t.registry.topics[h.joins[0].slot.topic as usize]
            .subs
            .len(),
        1
    );
    assert!(h
        .probe
        .calls()
        .contains(&"terminate room:a DuplicateJoin".to_string()));
}

#[test]
fn joins_past_the_socket_budget_are_refused() {
    let mut h = Harness::new(Vsn::V2);
    let per_join = std::mem::size_of::<Join>();
    // room for two joins with 1-byte join_refs and 300-byte topics, and
    // one with a short topic
    h.max_join_bytes = 2 * (per_join + 1 + 300) + per_join + 20;
    let topic = |c: char| format!("room:{}", c.to_string().repeat(295));
    for (i, c) in ['a', 'b'].into_iter().enumerate() {
        let out = h.input(&format!(r#"["{i}","{i}","{}","phx_join",{{}}]"#, topic(c)));
        assert!(out[0].contains(r#""status":"ok""#), "{out:?}");
    }
    let out = h.input(&format!(r#"["7","7","{}","phx_join",{{}}]"#, topic('c')));
    assert_eq!(
        out,
        vec![format!(
            r#"["7","7","{}","phx_reply",{{"response":{{"reason":"socket memory budget exceeded"}},"status":"error"}}]"#,
            topic('c')
        )]
    );
    // a short topic still fits, and rejoining replaces rather than adds
    assert!(h.input(r#"["8","8","room:x","phx_join",{}]"#)[0].contains("ok"));
    let out = h.input(&format!(r#"["9","9","{}","phx_join",{{}}]"#, topic('a')));
    assert!(out[0].contains(r#""status":"ok""#), "{out:?}");
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(h.t.stats.socket_budget_refusals.load(Relaxed), 1);
    assert_eq!(h.joins.len(), 3);
}

#[test]
fn channel_cap_refuses_as_phoenix() {
    let mut h = Harness::new(Vsn::V2);
    h.max_channels = 2;
    h.input(r#"["1","1","room:a","phx_join",{}]"#);
    h.input(r#"["2","2","room:b","phx_join",{}]"#);
    assert_eq!(
        h.input(r#"["3","3","room:c","phx_join",{}]"#),
        vec![
            r#"["3","3","room:c","phx_reply",{"response":{"reason":"too many channels joined"},"status":"error"}]"#
        ]
    );
    // rejoining a joined topic replaces it, so it is not over the cap
    assert_eq!(h.input(r#"["4","4","room:b","phx_join",{}]"#).len(), 2);
    h.input(r#"["1","5","room:a","phx_leave",{}]"#);
    assert_eq!(
        h.input(r#"["6","6","room:c","phx_join",{}]"#),
        vec![r#"["6","6","room:c","phx_reply",{"response":{},"status":"ok"}]"#]
    );
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(h.t.stats.channel_limit_refusals.load(Relaxed), 1);
}

#[test]
fn infos_run_after_the_join_reply() {
    let mut h = Harness::new(Vsn::V2);
    assert_eq!(
        h.input(r#"["1","1","room:a","phx_join",{"after":true}]"#),
        vec![
            r#"["1","1","room:a","phx_reply",{"response":{},"status":"ok"}]"#,
            r#"["1",null,"room:a","state",{"n":0}]"#,
        ]
    );
    assert_eq!(h.probe.calls(), vec!["join room:a", "info after_join"]);
    // from outside: an info by topic index
    let idx = h.joins[0].slot.topic;
    let info: Info = Arc::new("tick");
    h.mux().handle_info(idx, &info);
    assert_eq!(h.t.log.sent, vec![r#"["1",null,"room:a","state",{"n":0}]"#]);
}

#[test]
fn close_terminates_every_channel() {
    let mut h = Harness::new(Vsn::V2);
    h.input(r#"["1","1","room:a","phx_join",{}]"#);
    h.input(r#"["2","2","room:b","phx_join",{}]"#);
    h.mux().close();
    assert!(h.joins.is_empty() && h.t.registry.is_empty());
    let calls = h.probe.calls();
    assert!(calls.contains(&"terminate room:a Closed".to_string()));
    assert!(calls.contains(&"terminate room:b Closed".to_string()));
    assert!(h.t.log.sent.is_empty(), "a closed socket sends nothing");
}

#[test]
fn channels_see_who_connected() {
    let mut h = Harness::new(Vsn::V2);
    h.connect = Some(ConnectInfo {
        params: vec![("token".into(), "t".into())],
        auth_token: None,
        user_id: Some("u7".into()),
        ..Default::default()
    });
    h.input(r#"["1","1","room:a","phx_join",{}]"#);
    assert_eq!(
        h.input(r#"["1","2","room:a","user",{}]"#),
        vec![r#"["1","2","room:a","phx_reply",{"response":"u7","status":"ok"}]"#]
    );
}

#[test]
fn pushes_over_the_budget_are_refused_then_closed() {
    let mut h = Harness::new(Vsn::V2);
    h.input(r#"["1","1","room:a","phx_join",{}]"#);
    h.t.verdicts = vec![Verdict::Limited, Verdict::Abuse];
    assert_eq!(
        h.input(r#"["1","2","room:a","shout",{"x":1}]"#),
        vec![
            r#"["1","2","room:a","phx_reply",{"response":{"reason":"rate limited"},"status":"error"}]"#
        ]
    );
    assert_eq!(h.t.closed, None);
    assert_eq!(h.input(r#"["1","3","room:a","shout",{"x":1}]"#).len(), 1);
    assert_eq!(h.t.closed, Some(1008));
    let stats = &h.t.stats;
    let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        (get(&stats.rate_limited), get(&stats.rate_limit_closes)),
        (2, 1)
    );
    // Heartbeats, joins and leaves are not pushes: never limited.
    h.t.verdicts = vec![Verdict::Limited; 3];
    assert!(h.input(r#"[null,"4","phoenix","heartbeat",{}]"#)[0].contains(r#""status":"ok""#));
    assert_eq!(h.t.verdicts.len(), 3);
}

#[test]
fn topic_rules_and_reserved_topics() {
    let mut h = Harness::new(Vsn::V2);
    h.router = Router::new().channel("*", h.probe.clone());
    h.policy = crate::auth::Policy::new(vec![crate::auth::TopicRule {
        pattern: "room:{user}".into(),
        join: crate::auth::JoinRule::Users,
        push: vec!["shout".into()],
        anonymous_push: None,
    }]);
    h.connect = Some(ConnectInfo {
        user_id: Some("u7".into()),
        ..Default::default()
    });
    let refused = |out: Vec<String>| out.len() == 1 && out[0].contains("unauthorized");
    assert!(refused(h.input(r#"["1","1","room:u8","phx_join",{}]"#)));
    assert!(h.input(r#"["2","2","room:u7","phx_join",{}]"#)[0].contains(r#""status":"ok""#));
    assert!(h
        .input(r#"["2","3","room:u7","shout",{}]"#)
        .iter()
        .any(|m| m.starts_with("BROADCAST")));
    assert!(refused(h.input(r#"["2","4","room:u7","whisper",{}]"#)));
    // The socket id and control topics cannot be joined, whatever routes.
    for t in ["users_socket:u7", "throng:control"] {
        let out = h.input(&format!(r#"["3","5","{t}","phx_join",{{}}]"#));
        assert!(out[0].contains("unmatched topic"), "{out:?}");
    }
    let refusals =
        h.t.stats
            .policy_refusals
            .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(refusals, 2);
}

/// The presence broadcasts of one flush: (event, payload).
fn flush(h: &Harness) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    h.t.tracker.flush_all(&mut out);
    out.iter()
        .map(|b| {
            let OwnedPayload::Json(p) = &b.payload else {
                panic!("binary")
            };
            (b.event.clone(), serde_json::from_str(p).unwrap())
        })
        .collect()
}

fn keys(v: &serde_json::Value, side: &str) -> Vec<String> {
    v[side].as_object().unwrap().keys().cloned().collect()
}

#[test]
fn a_presence_rule_sends_state_and_tracks_until_leave() {
    let mut h = Harness::new(Vsn::V2);
    h.presence = vec![crate::presence::PresenceRule::parse("room:*=param:user").unwrap()];
    let out = h.input(r#"["1","1","room:a","phx_join",{"user":"alice"}]"#);
    assert_eq!(
        out,
        vec![
            r#"["1","1","room:a","phx_reply",{"response":{},"status":"ok"}]"#,
            r#"["1",null,"room:a","presence_state",{}]"#,
        ],
        "the state (as of the last diff) after the reply, with the join_ref"
    );
    assert_eq!(h.t.started, 1, "the first presence topic wakes the shards");
    let diffs = flush(&h);
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0].0, "presence_diff");
    assert_eq!(keys(&diffs[0].1, "joins"), vec!["alice"]);
    // a second socket joining now gets alice in its state
    let mut h2 = Harness::new(Vsn::V1);
    h2.t.tracker = h.t.tracker.clone();
    h2.presence = h.presence.clone();
    let out =
        h2.input(r#"{"topic":"room:a","event":"phx_join","payload":{"user":"bob"},"ref":"1"}"#);
    let state: serde_json::Value = serde_json::from_str(&out[1]).unwrap();
    assert_eq!(state["event"], "presence_state");
    assert!(state["payload"]["alice"]["metas"][0]["phx_ref"].is_string());
    // leaving untracks; so does a rejoin (the old join's presence leaves)
    h.input(r#"["1","2","room:a","phx_leave",{}]"#);
    h2.input(r#"{"topic":"room:a","event":"phx_join","payload":{"user":"bob"},"ref":"2"}"#);
    let diffs = flush(&h);
    assert_eq!(keys(&diffs[0].1, "leaves"), vec!["alice"]);
    assert_eq!(
        keys(&diffs[0].1, "joins"),
        vec!["bob"],
        "bob's first join and its leave cancel out"
    );
    h2.mux().close();
    let diffs = flush(&h);
    assert_eq!(keys(&diffs[0].1, "leaves"), vec!["bob"]);
    assert!(h2.t.tracked.is_empty() && h.t.tracked.is_empty());
}

#[test]
fn presence_keys_too_long_or_missing() {
    let mut h = Harness::new(Vsn::V2);
    h.presence = vec![crate::presence::PresenceRule::parse("room:*=param:user").unwrap()];
    let long = "x".repeat(65);
    assert_eq!(
        h.input(&format!(
            r#"["1","1","room:a","phx_join",{{"user":"{long}"}}]"#
        )),
        vec![
            r#"["1","1","room:a","phx_reply",{"response":{"reason":"presence key too long"},"status":"error"}]"#
        ]
    );
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(h.t.stats.presence_refused.load(Relaxed), 1);
    assert!(h.joins.is_empty());
    // no key: the join watches (gets the state) but is not tracked
    let out = h.input(r#"["2","2","room:a","phx_join",{}]"#);
    assert_eq!(out.len(), 2);
    assert!(flush(&h).is_empty());
}

#[test]
fn the_presence_api_tracks_updates_and_untracks() {
    let mut h = Harness::new(Vsn::V2);
    h.input(r#"["1","1","room:a","phx_join",{}]"#);
    let ok = r#"["1","2","room:a","phx_reply",{"response":{},"status":"ok"}]"#;
    assert_eq!(
        h.input(r#"["1","2","room:a","state",{}]"#),
        vec![r#"["1",null,"room:a","presence_state",{}]"#, ok],
        "a push from handle_in goes before its reply, as in Phoenix"
    );
    assert_eq!(
        h.input(r#"["1","2","room:a","track",{"key":"u1","meta":{"s":"on"}}]"#),
        vec![ok]
    );
    h.input(r#"["1","2","room:a","track",{"key":"u1","meta":{}}]"#);
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        h.t.stats.presence_refused.load(Relaxed),
        1,
        "one key per join"
    );
    let joined = flush(&h);
    let meta = &joined[0].1["joins"]["u1"]["metas"][0];
    assert_eq!(meta["s"], "on");
    let first = meta["phx_ref"].as_str().unwrap().to_string();
    h.input(r#"["1","2","room:a","update",{"key":"u1","meta":{"s":"away"}}]"#);
    let updated = flush(&h);
    let d = &updated[0].1;
    assert_eq!(d["leaves"]["u1"]["metas"][0]["phx_ref"], first.as_str());
    assert_eq!(d["joins"]["u1"]["metas"][0]["phx_ref_prev"], first.as_str());
    assert_eq!(d["joins"]["u1"]["metas"][0]["s"], "away");
    assert_eq!(
        h.input(r#"["1","2","room:a","track",{"key":"u2","meta":[1]}]"#),
        vec![
            r#"["1","2","room:a","phx_reply",{"response":{"reason":"a presence meta must be a JSON object"},"status":"error"}]"#
        ]
    );
    h.input(r#"["1","2","room:a","untrack",{"key":"nobody"}]"#);
    h.input(r#"["1","2","room:a","update",{"key":"nobody","meta":{}}]"#);
    assert_eq!(h.t.stats.presence_refused.load(Relaxed), 3);
    h.input(r#"["1","2","room:a","untrack",{"key":"u1"}]"#);
    assert_eq!(keys(&flush(&h)[0].1, "leaves"), vec!["u1"]);
}

#[test]
fn without_presence_nothing_is_tracked_or_sent() {
    let mut h = Harness::new(Vsn::V2);
    assert_eq!(
        h.input(r#"["1","1","room:a","phx_join",{"user":"alice"}]"#)
            .len(),
        1
    );
    h.input(r#"["1","2","room:a","phx_leave",{}]"#);
    assert!(flush(&h).is_empty());
    assert!(!h.t.tracker.is_active() && h.t.started == 0 && h.t.tracked.is_empty());
}
