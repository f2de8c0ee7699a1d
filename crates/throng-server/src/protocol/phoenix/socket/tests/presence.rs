//! Presence on the socket: rule-driven tracking, key limits, the Socket's
//! presence API, and that nothing is tracked without it.

use super::*;

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
