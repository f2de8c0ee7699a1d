//! Pushes and what they cause: heartbeats, replies and broadcasts in order,
//! pushes to topics not joined, infos, the push budget.

use super::*;

#[test]
fn heartbeat_is_answered_on_the_phoenix_topic() {
    let mut h = Harness::new(Vsn::V2);
    assert_eq!(
        h.input(r#"[null,"9","phoenix","heartbeat",{}]"#),
        vec![r#"[null,"9","phoenix","phx_reply",{"response":{},"status":"ok"}]"#]
    );
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
