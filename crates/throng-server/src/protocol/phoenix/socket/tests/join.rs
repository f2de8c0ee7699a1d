//! Joining: refused and unmatched joins, duplicate joins, the socket's join
//! budget and channel cap, what a channel sees of who connected, topic rules.

use super::*;

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
            r#"[null,"3","nowhere","phx_reply",{"response":{"reason":"unmatched topic"},"status":"error"}]"#
        ]
    );
    assert_eq!(h.joins.len(), 1);
    assert_eq!(h.t.registry.len(), 1, "refused joins subscribe nothing");
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(h.t.stats.joins.load(Relaxed), 1);
    assert_eq!(h.t.stats.refused_joins.load(Relaxed), 2);
    assert_eq!(h.t.stats.channels.load(Relaxed), 1);
}

/// Refs keep their JSON type, as Phoenix's serializers pass them through:
/// numbers come back as numbers in replies, pushes and `phx_close`, strings
/// as strings, on both serializers.
#[test]
fn numeric_refs_come_back_as_numbers() {
    let mut h = Harness::new(Vsn::V2);
    assert_eq!(
        h.input(r#"[1,1,"room:a","phx_join",{}]"#),
        vec![r#"[1,1,"room:a","phx_reply",{"response":{},"status":"ok"}]"#]
    );
    assert_eq!(
        h.input(r#"[null,2,"phoenix","heartbeat",{}]"#),
        vec![r#"[null,2,"phoenix","phx_reply",{"response":{},"status":"ok"}]"#]
    );
    assert_eq!(
        h.input(r#"[5,"5","room:a","phx_join",{}]"#),
        vec![
            r#"[5,"5","room:a","phx_reply",{"response":{},"status":"ok"}]"#,
            r#"[1,1,"room:a","phx_close",{}]"#,
        ]
    );
    assert_eq!(
        h.input(r#"[9,9,"nowhere","phx_join",{}]"#),
        vec![
            r#"[null,9,"nowhere","phx_reply",{"response":{"reason":"unmatched topic"},"status":"error"}]"#
        ]
    );
    assert_eq!(
        h.input(r#"[5,10,"room:a","phx_leave",{}]"#),
        vec![
            r#"[5,10,"room:a","phx_reply",{"response":{},"status":"ok"}]"#,
            r#"[5,5,"room:a","phx_close",{}]"#,
        ]
    );
    let mut h = Harness::new(Vsn::V1);
    assert_eq!(
        h.input(r#"{"topic":"room:a","event":"phx_join","payload":{},"ref":3}"#),
        vec![
            r#"{"event":"phx_reply","payload":{"response":{},"status":"ok"},"ref":3,"topic":"room:a"}"#
        ]
    );
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
    assert_eq!(h.joins[0].join_ref.as_ref().map(|r| r.text()), Some("5"));
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
    // room for two joins with 1-byte join_refs (2 bytes kept, with the
    // byte that tells a number from a string) and 300-byte topics, and one
    // with a short topic
    h.max_join_bytes = 2 * (per_join + 2 + 300) + per_join + 20;
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
fn topic_rules_and_reserved_topics() {
    let mut h = Harness::new(Vsn::V2);
    h.router = Router::new().channel("*", h.probe.clone());
    h.policy = crate::rules::Policy::new(vec![crate::rules::TopicRule {
        hooks: vec![],
        pattern: "room:{user}".into(),
        join: crate::rules::JoinRule::Users,
        push: vec!["shout".into()],
        anonymous_push: None,
        history_size: None,
        history_ttl: None,
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
