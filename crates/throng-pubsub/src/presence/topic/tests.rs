//! [`TopicPresence`]'s batching, state and count bound.

use super::*;

fn meta(owner: u64, seq: u64) -> Meta {
    Meta {
        owner,
        seq,
        prev: 0,
        fields: "".into(),
    }
}

fn diff(t: &mut TopicPresence) -> serde_json::Value {
    let f = t
        .flush(1, Instant::now(), 0, false)
        .expect("something pending");
    serde_json::from_str(&f.message.unwrap().1).unwrap()
}

fn refs(v: &serde_json::Value, side: &str, key: &str) -> Vec<String> {
    v[side][key]["metas"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| m["phx_ref"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn join_then_leave_in_one_interval_is_nothing() {
    let mut t = TopicPresence::new(Mode::List, 1);
    assert!(t.join("alice".into(), meta(1, 1)));
    assert!(t.leave("alice", (1, 1)));
    assert!(
        t.flush(1, Instant::now(), 0, false).is_none(),
        "clients hear of neither"
    );
    assert!(t.flushed().is_empty());
}

#[test]
fn many_joins_are_one_diff() {
    let mut t = TopicPresence::new(Mode::List, 1);
    for seq in 1..=1000 {
        t.join(format!("u{seq}").into(), meta(1, seq));
    }
    t.join("u1".into(), meta(2, 1)); // a second tab of u1, on another node
    let f = t.flush(1, Instant::now(), 0, false).unwrap();
    assert_eq!((f.joined, f.left), (1001, 0));
    assert_eq!(
        f.own.joins.len(),
        1000,
        "node 2's join is not ours to publish"
    );
    let v: serde_json::Value = serde_json::from_str(&f.message.unwrap().1).unwrap();
    assert_eq!(v["joins"].as_object().unwrap().len(), 1000);
    assert_eq!(refs(&v, "joins", "u1").len(), 2);
    assert!(v["leaves"].as_object().unwrap().is_empty());
    assert!(
        t.flush(1, Instant::now(), 0, false).is_none(),
        "nothing pending after a flush"
    );
    assert_eq!((t.flushed().len(), t.flushed().key_count()), (1001, 1000));
}

#[test]
fn leave_then_rejoin_of_a_known_presence_is_nothing() {
    let mut t = TopicPresence::new(Mode::List, 1);
    t.join("bob".into(), meta(2, 5));
    t.flush(1, Instant::now(), 0, false);
    assert!(t.leave("bob", (2, 5)));
    assert!(
        t.join("bob".into(), meta(2, 5)),
        "a replayed join cancels the leave"
    );
    assert!(t.flush(1, Instant::now(), 0, false).is_none());
    assert_eq!(t.flushed().len(), 1);
}

#[test]
fn replays_change_nothing() {
    let mut t = TopicPresence::new(Mode::List, 1);
    t.join("bob".into(), meta(2, 5));
    assert!(!t.join("bob".into(), meta(2, 5)));
    t.flush(1, Instant::now(), 0, false);
    assert!(!t.join("bob".into(), meta(2, 5)), "already there");
    assert!(!t.leave("carol", (2, 9)), "never there");
    assert!(t.leave("bob", (2, 5)));
    assert!(!t.leave("bob", (2, 5)), "already leaving");
    let v = diff(&mut t);
    assert_eq!(refs(&v, "leaves", "bob").len(), 1);
    assert!(v["joins"].as_object().unwrap().is_empty());
}

#[test]
fn update_is_a_leave_and_a_join_with_prev() {
    let mut t = TopicPresence::new(Mode::List, 1);
    t.join("alice".into(), meta(1, 1));
    t.flush(1, Instant::now(), 0, false);
    // as Tracker::update does it
    t.leave("alice", (1, 1));
    t.join(
        "alice".into(),
        Meta {
            owner: 1,
            seq: 2,
            prev: 1,
            fields: r#""status":"away""#.into(),
        },
    );
    let v = diff(&mut t);
    let old = super::super::entry::phx_ref(1, 1);
    assert_eq!(refs(&v, "leaves", "alice"), vec![old.clone()]);
    let joined = &v["joins"]["alice"]["metas"][0];
    assert_eq!(joined["phx_ref_prev"], old.as_str());
    assert_eq!(joined["status"], "away");
    // updated twice in one interval: clients see the last meta only, the
    // first never having been announced
    t.leave("alice", (1, 2));
    t.join("alice".into(), meta(1, 3));
    t.leave("alice", (1, 3));
    t.join(
        "alice".into(),
        Meta {
            owner: 1,
            seq: 4,
            prev: 3,
            fields: "".into(),
        },
    );
    let v = diff(&mut t);
    assert_eq!(
        refs(&v, "leaves", "alice"),
        vec![super::super::entry::phx_ref(1, 2)]
    );
    assert_eq!(
        refs(&v, "joins", "alice"),
        vec![super::super::entry::phx_ref(1, 4)]
    );
    assert_eq!(t.flushed().len(), 1);
}

#[test]
fn replace_and_drop_owner() {
    let mut t = TopicPresence::new(Mode::List, 1);
    t.join("a".into(), meta(2, 1));
    t.join("b".into(), meta(2, 2));
    t.join("c".into(), meta(3, 1));
    t.flush(1, Instant::now(), 0, false);
    // owner 2 now has b and d
    assert!(t.replace(2, vec![("b".into(), meta(2, 2)), ("d".into(), meta(2, 3))]));
    let v = diff(&mut t);
    assert_eq!(refs(&v, "leaves", "a").len(), 1);
    assert_eq!(refs(&v, "joins", "d").len(), 1);
    assert!(v["joins"].get("b").is_none() && v["leaves"].get("b").is_none());
    assert!(!t.replace(2, vec![("b".into(), meta(2, 2)), ("d".into(), meta(2, 3))]));
    assert!(t.replace(2, vec![]));
    let v = diff(&mut t);
    assert_eq!(v["leaves"].as_object().unwrap().len(), 2);
    assert_eq!(t.owners().collect::<Vec<_>>(), vec![3]);
}

#[test]
fn state_is_the_flushed_state_encoded_once() {
    let mut t = TopicPresence::new(Mode::List, 1);
    t.join("a".into(), meta(1, 1));
    t.flush(1, Instant::now(), 0, false);
    t.join("b".into(), meta(1, 2)); // pending: not in the state yet
    let StateSource::Encode(flushed, cell) = t.state() else {
        panic!("nothing encoded yet")
    };
    let json = cell.get_or_init(|| flushed.state_json().into()).clone();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v.as_object().unwrap().len(), 1);
    assert!(v.get("a").is_some());
    let StateSource::Ready(again) = t.state() else {
        panic!("encoded once per interval")
    };
    assert!(Arc::ptr_eq(&again, &json));
    t.flush(1, Instant::now(), 0, false);
    assert!(
        matches!(t.state(), StateSource::Encode(..)),
        "a flush invalidates it"
    );
}

#[test]
fn count_mode_sends_counts_when_they_change() {
    let mut t = TopicPresence::new(Mode::Count, 1);
    t.join("a".into(), meta(1, 1));
    t.join("a".into(), meta(1, 2)); // a second tab: still one user
    let f = t.flush(1, Instant::now(), 0, false).unwrap();
    assert_eq!(
        f.message,
        Some((encode::COUNT, r#"{"count":1}"#.to_string()))
    );
    t.join("b".into(), meta(2, 1));
    t.leave("b", (2, 1));
    assert!(t.flush(1, Instant::now(), 0, false).is_none());
    t.leave("a", (1, 2));
    let f = t.flush(1, Instant::now(), 0, false).unwrap();
    assert_eq!(f.message, None, "still one user");
    assert_eq!(f.own.leaves.len(), 1, "but the leave is replicated");
    let StateSource::Ready(s) = t.state() else {
        panic!()
    };
    assert_eq!(&*s, r#"{"count":1}"#);
}

/// A count-mode topic of `n` keys, `a0`..`a{n-1}`, its count sent at `t0`.
fn counted(n: u64, t0: Instant, rate: u64) -> TopicPresence {
    let mut t = TopicPresence::new(Mode::Count, 1);
    for seq in 0..n {
        t.join(format!("a{seq}").into(), meta(1, seq + 1));
    }
    let f = t.flush(1, t0, rate, false).unwrap();
    assert_eq!(f.message, Some((encode::COUNT, encode::count(n as usize))));
    t
}

fn secs(t0: Instant, s: f64) -> Instant {
    t0 + std::time::Duration::from_secs_f64(s)
}

#[test]
fn count_mode_sends_at_most_one_count_per_count_over_rate_seconds() {
    let t0 = Instant::now();
    // 100 keys at 50 a second: a count every 2 s at most
    let mut t = counted(100, t0, 50);
    t.join("b1".into(), meta(2, 1));
    let f = t.flush(1, secs(t0, 1.0), 50, false).unwrap();
    assert_eq!(f.message, None, "1 s after the last count: waits");
    assert!(f.deferred && t.dirty, "and stays dirty for the next flush");
    t.join("b2".into(), meta(1, 200));
    let f = t.flush(1, secs(t0, 2.0), 50, false).unwrap();
    assert_eq!(f.message, None, "102 keys / 50 a second: due at 2.04 s");
    assert!(f.deferred && t.dirty);
    let StateSource::Ready(s) = t.state() else {
        panic!()
    };
    assert_eq!(&*s, r#"{"count":102}"#, "a joiner gets the count of now");
    let f = t.flush(1, secs(t0, 2.5), 50, false).expect("a count waits");
    assert_eq!(
        f.message,
        Some((encode::COUNT, r#"{"count":102}"#.to_string())),
        "due: the latest count, once"
    );
    assert!(!f.deferred && !t.dirty);
    assert!(
        t.flush(1, secs(t0, 9.0), 50, false).is_none(),
        "nothing waits"
    );
    // the next one is 2.04 s after this one
    t.leave("b1", (2, 1));
    assert_eq!(t.flush(1, secs(t0, 4.5), 50, false).unwrap().message, None);
    let f = t.flush(1, secs(t0, 4.6), 50, false).unwrap();
    assert_eq!(f.message, Some((encode::COUNT, encode::count(101))));
}

#[test]
fn count_mode_without_a_rate_sends_every_flush() {
    let t0 = Instant::now();
    let mut t = counted(100, t0, 0);
    for i in 1..=3 {
        t.join(format!("b{i}").into(), meta(2, i));
        let f = t.flush(1, secs(t0, i as f64 * 0.01), 0, false).unwrap();
        assert_eq!(
            f.message,
            Some((encode::COUNT, encode::count(100 + i as usize)))
        );
        assert!(!f.deferred && !t.dirty);
    }
    // a small topic at the default rate: every flush too
    let mut t = counted(100, t0, 20_000);
    t.join("b".into(), meta(2, 1));
    let f = t.flush(1, secs(t0, 1.0), 20_000, false).unwrap();
    assert_eq!(f.message, Some((encode::COUNT, encode::count(101))));
}

#[test]
fn a_waiting_count_still_replicates_every_flush() {
    let t0 = Instant::now();
    let mut t = counted(100, t0, 50);
    t.join("mine".into(), meta(1, 500));
    t.join("theirs".into(), meta(2, 1));
    let f = t.flush(1, secs(t0, 0.5), 50, false).unwrap();
    assert!(f.deferred);
    assert_eq!(f.own.joins.len(), 1, "our join goes to the store now");
    assert_eq!((f.joined, f.own_change), (2, 1));
    t.leave("a0", (1, 1));
    let f = t.flush(1, secs(t0, 1.0), 50, false).unwrap();
    assert!(f.deferred);
    assert_eq!(f.own.leaves.len(), 1, "and our leave");
    assert_eq!(t.flushed().key_count(), 101);
}

#[test]
fn a_waiting_count_back_to_the_last_sent_sends_nothing() {
    let t0 = Instant::now();
    let mut t = counted(100, t0, 50);
    t.join("b".into(), meta(2, 1));
    assert!(t.flush(1, secs(t0, 1.0), 50, false).unwrap().deferred);
    t.leave("b", (2, 1));
    let f = t.flush(1, secs(t0, 1.5), 50, false).unwrap();
    assert_eq!(f.message, None, "clients still have the right count");
    assert!(!f.deferred && !t.dirty, "nothing waits any more");
    assert!(t.flush(1, secs(t0, 5.0), 50, false).is_none());
}

/// Count mode keeps other nodes' presences as a census: counted,
/// replaced and dropped by name, without their keys or metas; this
/// node's own keep their metas.
#[test]
fn count_mode_keeps_a_census_of_other_nodes() {
    let mut t = TopicPresence::new(Mode::Count, 1);
    let own = Meta {
        owner: 1,
        seq: 1,
        prev: 0,
        fields: r#""tab":1"#.into(),
    };
    t.join("a".into(), own.clone());
    t.join("a".into(), meta(2, 1)); // a's second tab, on node 2
    t.join("b".into(), meta(2, 2));
    t.join("c".into(), meta(3, 1));
    let f = t.flush(1, Instant::now(), 0, false).unwrap();
    assert_eq!(f.message.unwrap().1, r#"{"count":3}"#);
    assert_eq!((t.flushed().len(), t.flushed().key_count()), (4, 3));
    assert!(!t.flushed().is_complete(), "only node 1's metas are kept");
    let kept: Vec<_> = t
        .flushed()
        .keys()
        .map(|(k, m)| (k.to_string(), m.len()))
        .collect();
    assert_eq!(kept, vec![("a".to_string(), 1)]);
    assert_eq!(t.owned_by(1), vec![("a".into(), own)], "with its meta");
    assert!(!t.join("c".into(), meta(3, 1)), "a replay changes nothing");
    // node 2 leaves b, then its snapshot says it has nothing more
    assert!(t.leave("b", (2, 2)));
    assert!(!t.leave("b", (2, 2)));
    let f = t.flush(1, Instant::now(), 0, false).unwrap();
    assert_eq!(f.message.unwrap().1, r#"{"count":2}"#);
    assert!(f.own.is_empty(), "another node's leave is not published");
    assert_eq!(t.owned_by(2).len(), 1);
    assert!(t.replace(2, vec![]));
    let f = t.flush(1, Instant::now(), 0, false).unwrap();
    assert_eq!(f.message, None, "a is still there (node 1's tab)");
    assert_eq!(t.flushed().len(), 2);
    // node 3 dies
    assert!(t.replace(3, vec![]));
    let f = t.flush(1, Instant::now(), 0, false).unwrap();
    assert_eq!(f.message.unwrap().1, r#"{"count":1}"#);
    assert!(t.flushed().is_complete(), "only node 1's presence is left");
    assert_eq!(t.owners().collect::<Vec<_>>(), vec![1]);
    assert!(t.leave("a", (1, 1)));
    let f = t.flush(1, Instant::now(), 0, false).unwrap();
    assert_eq!(
        f.own.leaves.len(),
        1,
        "its own leave is published, with its key"
    );
    assert_eq!(&*f.own.leaves[0].0, "a");
    assert!(t.flushed().is_empty());
}

#[test]
fn members_come_and_go_once_per_key() {
    use super::MemberChange::{Added, Removed};
    let mut t = TopicPresence::new(Mode::List, 1);
    t.join("u1".into(), meta(1, 1));
    t.join("u1".into(), meta(1, 2));
    let f = t.flush(1, Instant::now(), 0, true).unwrap();
    assert_eq!(f.members, vec![Added("u1".into(), 1, meta(1, 1).fields)]);
    // A second tab of u1, and u2: only u2 is new.
    t.join("u1".into(), meta(1, 3));
    t.join("u2".into(), meta(1, 4));
    let f = t.flush(1, Instant::now(), 0, true).unwrap();
    assert_eq!(f.members, vec![Added("u2".into(), 1, meta(1, 4).fields)]);
    // u1 leaves one tab: still there; then its others: gone.
    t.leave("u1", (1, 1));
    assert!(t
        .flush(1, Instant::now(), 0, true)
        .unwrap()
        .members
        .is_empty());
    t.leave("u1", (1, 2));
    t.leave("u1", (1, 3));
    let f = t.flush(1, Instant::now(), 0, true).unwrap();
    assert_eq!(f.members, vec![Removed("u1".into())]);
    // Not asked: none computed.
    t.join("u3".into(), meta(1, 5));
    assert!(t
        .flush(1, Instant::now(), 0, false)
        .unwrap()
        .members
        .is_empty());
}
