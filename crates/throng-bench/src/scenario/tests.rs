//! The scenario model: parsing, validation, and the built-in scenarios.

use super::*;

const CHAT: &str = include_str!("../../../../scenarios/chat.toml");

#[test]
fn parses_the_example_chat_scenario() {
    let sc = Scenario::from_toml(CHAT).unwrap();
    assert_eq!(sc.name, "chat");
    assert_eq!(sc.serializer, Vsn::V2);
    assert_eq!(sc.heartbeat, 30.0);
    assert_eq!(sc.total_users(), 10_000);
    assert_eq!(sc.roles.len(), 2);
    assert_eq!(sc.role_of(0), 0);
    assert_eq!(sc.role_of(9), 0);
    assert_eq!(sc.role_of(10), 1);
    assert_eq!(sc.expected_broadcasts(), 10 * 5);
    let p = Program::compile(&sc, &sc.roles[1]).unwrap();
    assert_eq!(
        p.ops[0],
        Op::Connect {
            path: "/socket/websocket?vsn=2.0.0".into(),
            vsn: Vsn::V2
        }
    );
}

#[test]
fn presence_scenario_turns_presence_on() {
    let sc = Scenario::from_toml(include_str!("../../../../scenarios/presence.toml")).unwrap();
    let rule = sc.presence_rule().unwrap().expect("a rule");
    assert!(rule.count && rule.matches("rooms:lobby"));
    let p = Program::compile(&sc, &sc.roles[0]).unwrap();
    assert!(
        matches!(p.ops[1], Op::Send { presence: true, .. }),
        "the join of rooms:lobby is a presence join"
    );
    let mut other = sc.clone();
    other.presence = Some("rooms:other=param:user".into());
    let p = Program::compile(&other, &other.roles[0]).unwrap();
    assert!(matches!(
        p.ops[1],
        Op::Send {
            presence: false,
            ..
        }
    ));
    let bad = CHAT.replace(
        "heartbeat = 30",
        "heartbeat = 30\npresence = \"rooms:lobby\"",
    );
    assert!(Scenario::from_toml(&bad).is_err(), "a rule needs =KEY");
}

#[test]
fn delay_publish_waits_before_the_first_broadcast() {
    let mut delayed = chat(Phase::at_rate(10, 100.0), 1, 2, 0.0, Vsn::V2);
    delay_publish(&mut delayed, 120.0);
    let publisher = &delayed.roles[0].session;
    let at = publisher
        .iter()
        .position(|s| matches!(s, Step::Publish { .. }))
        .unwrap();
    assert_eq!(publisher[at - 1], Step::Think(120.0));
    assert_eq!(publisher[at - 2], Step::Barrier);
    assert!(!delayed.roles[1].session.contains(&Step::Think(120.0)));
}

#[test]
fn scheduled_after_barrier_counts_thinks_and_intervals() {
    let mut sc = chat(Phase::at_rate(10, 100.0), 1, 5, 0.5, Vsn::V2);
    assert_eq!(
        sc.scheduled_after_barrier(),
        2.0,
        "5 broadcasts 0.5 s apart"
    );
    delay_publish(&mut sc, 120.0);
    assert_eq!(sc.scheduled_after_barrier(), 122.0);
}

#[test]
fn rejects_bad_scenarios() {
    assert!(Scenario::from_toml("[[roles]]\nname='x'\nsession=[]").is_err());
    let no_connect =
        "[[phases]]\nduration=1\narrival_rate=1\n[[roles]]\nname='x'\nsession=[{think=1}]";
    assert!(Scenario::from_toml(no_connect).is_err());
    let bad_json = "[[phases]]\nduration=1\narrival_rate=1\n[[roles]]\nname='x'\nsession=[{connect='/'},{join={topic='t',payload='{nope'}}]";
    assert!(Scenario::from_toml(bad_json).is_err());
    let v1 = "serializer='v1'\n[[phases]]\nduration=1\narrival_rate=1\n[[roles]]\nname='x'\nsession=[{connect='/'}]";
    assert_eq!(Scenario::from_toml(v1).unwrap().serializer, Vsn::V1);
    let e = Scenario::from_toml(&v1.replace("v1", "v3"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("v3"), "{e}");
}

#[test]
fn scaling_flags() {
    let mut sc = chat(Phase::at_rate(1000, 100.0), 1, 1, 0.0, Vsn::V2);
    sc.set_arrival_rate(500.0);
    sc.set_max_users(2000);
    assert_eq!(sc.total_users(), 2000);
    assert!(sc.phases[0].duration >= 4.0);
    sc.set_duration(2.0);
    assert_eq!(sc.total_users(), 1000);
}

#[test]
fn weighted_roles_split_the_rest() {
    let mut sc = chat(Phase::at_rate(10, 1.0), 0, 0, 0.0, Vsn::V2);
    let mut other = sc.roles[0].clone();
    other.name = "b".into();
    sc.roles[0].weight = Some(3.0);
    sc.roles.push(other);
    let a = (0..10_000).filter(|i| sc.role_of(*i) == 0).count();
    assert!((7000..8000).contains(&a), "{a}");
}
