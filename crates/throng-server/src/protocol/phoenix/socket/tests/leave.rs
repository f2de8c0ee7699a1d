//! Leaving: `phx_leave` on v1 and v2, stale join refs, and a closing socket
//! terminating every channel.

use super::*;

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
