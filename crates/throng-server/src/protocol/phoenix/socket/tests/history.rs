//! Joins with `since` whose history read answers later: recovered, or
//! refused when the store could not be read (Redis away).

use std::sync::atomic::Ordering::Relaxed;

use throng_pubsub::Replay;

use super::*;

#[test]
fn a_join_whose_history_is_unavailable_is_refused_and_undone() {
    let mut h = Harness::new(Vsn::V2);
    assert!(h
        .input(r#"["1","1","room:h1","phx_join",{"since":"ab.3"}]"#)
        .is_empty());
    assert_eq!(h.joins.len(), 1, "subscribed while the read runs");
    let (topic, held) = h.t.held.pop().unwrap();
    h.mux().since_refused(&topic, held);
    assert_eq!(
        std::mem::take(&mut h.t.log.sent),
        vec![
            r#"["1","1","room:h1","phx_reply",{"response":{"reason":"history unavailable"},"status":"error"}]"#
        ]
    );
    assert!(h.joins.is_empty());
    assert_eq!(h.t.registry.len(), 0, "the subscription is undone");
    assert_eq!(
        h.probe.calls(),
        vec!["join room:h1", "terminate room:h1 Refused"]
    );
    assert_eq!(h.t.stats.refused_joins.load(Relaxed), 1);
    assert_eq!(h.t.stats.history_unavailable.load(Relaxed), 1);
    assert_eq!(h.t.stats.channels.load(Relaxed), 0);
    assert_eq!(h.t.stats.history_misses.load(Relaxed), 0, "not a miss");

    // The client joins again; Redis answers this time.
    assert!(h
        .input(r#"["2","2","room:h1","phx_join",{"since":"ab.3"}]"#)
        .is_empty());
    let (topic, held) = h.t.held.pop().unwrap();
    let found = Replay {
        recovered: true,
        ..Replay::default()
    };
    h.mux().since_answered(&topic, held, found);
    assert_eq!(
        std::mem::take(&mut h.t.log.sent),
        vec![r#"["2","2","room:h1","phx_reply",{"response":{"recovered":true},"status":"ok"}]"#]
    );
    assert_eq!(h.joins.len(), 1);
    assert_eq!(h.t.stats.history_recoveries.load(Relaxed), 1);
}

/// A late answer for a join the client already replaced changes nothing.
#[test]
fn an_unavailable_answer_for_a_replaced_join_is_ignored() {
    let mut h = Harness::new(Vsn::V2);
    h.input(r#"["1","1","room:h1","phx_join",{"since":"ab.3"}]"#);
    let (topic, stale) = h.t.held.pop().unwrap();
    // Joined again on the same socket (phoenix.js after a join timeout).
    h.input(r#"["2","2","room:h1","phx_join",{"since":"ab.3"}]"#);
    h.t.log.sent.clear();
    h.mux().since_refused(&topic, stale);
    assert!(h.t.log.sent.is_empty());
    assert_eq!(h.joins.len(), 1);
    assert_eq!(h.t.stats.history_unavailable.load(Relaxed), 0);
}
