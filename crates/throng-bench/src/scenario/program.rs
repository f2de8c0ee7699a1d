//! Compiled sessions: each role's steps flattened into a [`Program`] of
//! [`Op`]s, so that a connection's whole progress is one program counter
//! and two loop counters. Messages are encoded here, once, by the protocol
//! crate's serializer with placeholder refs, and become [`Template`]s.

use throng_protocol::{serializer, Message, Opcode, Payload, Vsn};

use super::{Role, Scenario, Step, Template};
use crate::error::BenchError;
use crate::pusher::{self, PusherSpec};

/// What a send is, for accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendKind {
    Join,
    Push,
    Leave,
    /// A Pusher broadcast sent through the server's HTTP API, not the
    /// socket: the template is the request's body.
    Trigger,
}

/// One instruction of a compiled session.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Connect {
        path: String,
        vsn: Vsn,
    },
    /// Send a message in a frame of `opcode` (text, or binary for a raw
    /// `send_binary`). `track`: remember its ref and time its reply; `wait`:
    /// block the session until the reply. `fixed_ref`: the ref a raw message
    /// carries (otherwise `%%ref%%` takes the connection's next ref).
    /// `presence`: a join of a topic the scenario's presence rule covers
    /// (any raw join, when it has one): its time is recorded for join
    /// visibility. `auth`: the Pusher channel whose signature `%%auth%%`
    /// carries (a private channel's subscription).
    Send {
        tpl: Template,
        opcode: Opcode,
        kind: SendKind,
        track: bool,
        wait: bool,
        fixed_ref: Option<u32>,
        stamp: bool,
        presence: bool,
        auth: Option<Box<str>>,
    },
    Think {
        ms: u32,
    },
    LoopStart {
        times: u32,
        slot: u8,
        end: u16,
    },
    LoopEnd {
        start: u16,
        slot: u8,
    },
    Barrier,
    Hold,
    Disconnect,
}

/// A role's session compiled to a flat list of ops.
#[derive(Clone, Debug)]
pub struct Program {
    pub ops: Vec<Op>,
}

impl Program {
    /// Compiles one role's session for the scenario's serializer.
    pub fn compile(sc: &Scenario, role: &Role) -> Result<Program, BenchError> {
        let mut ops = Vec::new();
        let mut vsn = sc.serializer;
        compile_steps(sc, &role.session, 0, &mut ops, &mut vsn)?;
        if ops.len() > u16::MAX as usize {
            return Err(BenchError::Scenario("session too long".into()));
        }
        if !matches!(ops.first(), Some(Op::Connect { .. })) {
            return Err(BenchError::Scenario(format!(
                "role {}: a session must start with connect",
                role.name
            )));
        }
        Ok(Program { ops })
    }
}

fn message_template(
    vsn: Vsn,
    topic: &str,
    event: &str,
    payload: &str,
    is_join: bool,
) -> Result<Template, BenchError> {
    // Encode with placeholder refs, then split the placeholders out again:
    // the serializer writes the layout, the template only fills in numbers.
    let probe = Template::parse(payload)?;
    let sample = probe.sample();
    serde_json::from_str::<serde_json::Value>(&sample).map_err(|e| {
        BenchError::Scenario(format!(
            "payload is not JSON after substitution ({sample}): {e}"
        ))
    })?;
    let join_ref = match (vsn, is_join) {
        (Vsn::V1, _) => None,
        (Vsn::V2, true) => Some("%%ref%%"),
        (Vsn::V2, false) => Some("%%join_ref%%"),
    };
    let msg = Message {
        join_ref: join_ref.map(Into::into),
        msg_ref: Some("%%ref%%".into()),
        topic: topic.into(),
        event: event.into(),
        payload: Payload::Json(payload),
    };
    let mut out = Vec::new();
    serializer::encode_client(vsn, &mut out, &msg)
        .map_err(|e| BenchError::Scenario(e.to_string()))?;
    Template::parse(&String::from_utf8_lossy(&out))
}

fn compile_steps(
    sc: &Scenario,
    steps: &[Step],
    depth: u8,
    ops: &mut Vec<Op>,
    vsn: &mut Vsn,
) -> Result<(), BenchError> {
    for step in steps {
        if let Some(spec) = &sc.pusher {
            if let Some(op) = pusher_op(spec, step)? {
                ops.push(op);
                continue;
            }
        }
        match step {
            Step::Connect(path) => ops.push(connect_op(sc, path, vsn)?),
            Step::Join { topic, payload } => ops.push(Op::Send {
                tpl: message_template(*vsn, topic, "phx_join", payload, true)?,
                opcode: Opcode::Text,
                kind: SendKind::Join,
                track: true,
                wait: true,
                fixed_ref: None,
                stamp: false,
                presence: sc.presence_rule()?.is_some_and(|r| r.matches(topic)),
                auth: None,
            }),
            Step::Push {
                topic,
                event,
                payload,
                wait,
            } => {
                let tpl = message_template(*vsn, topic, event, payload, false)?;
                let stamp = tpl.has_stamp();
                ops.push(Op::Send {
                    tpl,
                    opcode: Opcode::Text,
                    kind: SendKind::Push,
                    track: *wait,
                    wait: *wait,
                    fixed_ref: None,
                    stamp,
                    presence: false,
                    auth: None,
                })
            }
            Step::Leave(topic) => ops.push(Op::Send {
                tpl: message_template(*vsn, topic, "phx_leave", "{}", false)?,
                opcode: Opcode::Text,
                kind: SendKind::Leave,
                track: true,
                wait: true,
                fixed_ref: None,
                stamp: false,
                presence: false,
                auth: None,
            }),
            Step::Send(text) => ops.push(raw_op(sc, *vsn, text, Opcode::Text)?),
            Step::SendBinary(text) => ops.push(raw_op(sc, *vsn, text, Opcode::Binary)?),
            Step::Think(secs) => {
                if secs.is_nan() || *secs < 0.0 {
                    return Err(BenchError::Scenario("think needs seconds >= 0".into()));
                }
                ops.push(Op::Think {
                    ms: (secs * 1000.0).round().min(u32::MAX as f64 / 2.0) as u32,
                })
            }
            Step::Loop { times, steps } => {
                compile_loop(sc, *times, depth, ops, vsn, |sc, ops, vsn| {
                    compile_steps(sc, steps, depth + 1, ops, vsn)
                })?
            }
            Step::Publish {
                topic,
                event,
                count,
                interval,
                payload,
            } => {
                let p = PublishStep {
                    topic,
                    event,
                    count: *count,
                    interval: *interval,
                    payload,
                };
                publish_ops(sc, &p, depth, ops, vsn)?
            }
            Step::Barrier => ops.push(Op::Barrier),
            Step::Hold => ops.push(Op::Hold),
            Step::Disconnect => ops.push(Op::Disconnect),
        }
    }
    Ok(())
}

/// A connect step's op: `path` (the default socket path when empty) with
/// the scenario's serializer added unless the path names one; `vsn`
/// becomes the connection's serializer.
fn connect_op(sc: &Scenario, path: &str, vsn: &mut Vsn) -> Result<Op, BenchError> {
    let path = if path.is_empty() {
        "/socket/websocket"
    } else {
        path
    };
    let query = path.split_once('?').map(|(_, q)| q).unwrap_or("");
    let has_vsn = query.split('&').any(|kv| kv.starts_with("vsn="));
    let mut full = path.to_string();
    if !has_vsn && sc.serializer == Vsn::V2 {
        full.push(if path.contains('?') { '&' } else { '?' });
        full.push_str("vsn=2.0.0");
    }
    let q = full.split_once('?').map(|(_, q)| q).unwrap_or("");
    *vsn = Vsn::from_query(q)
        .ok_or_else(|| BenchError::Scenario(format!("unsupported vsn in {full}")))?;
    Ok(Op::Connect {
        path: full,
        vsn: *vsn,
    })
}

/// A raw send step's op (`send` or `send_binary`): the frame as written,
/// tracked when it carries a ref the bench can read.
fn raw_op(sc: &Scenario, vsn: Vsn, text: &str, opcode: Opcode) -> Result<Op, BenchError> {
    let tpl = Template::parse(text)?;
    let (kind, fixed_ref) = raw_kind(vsn, opcode, &tpl.sample());
    let stamp = tpl.has_stamp();
    Ok(Op::Send {
        tpl,
        opcode,
        kind,
        track: fixed_ref.is_some(),
        wait: false,
        fixed_ref,
        stamp,
        presence: kind == SendKind::Join && sc.presence.is_some(),
        auth: None,
    })
}

/// A publish step's fields.
struct PublishStep<'a> {
    topic: &'a str,
    event: &'a str,
    count: u32,
    interval: f64,
    payload: &'a str,
}

/// A publish step's ops: `count` stamped sends (a push over Phoenix, a
/// trigger or client event over Pusher), `interval` apart.
fn publish_ops(
    sc: &Scenario,
    p: &PublishStep<'_>,
    depth: u8,
    ops: &mut Vec<Op>,
    vsn: &mut Vsn,
) -> Result<(), BenchError> {
    let (tpl, kind) = match &sc.pusher {
        Some(spec) => (
            pusher_publish(spec, p.topic, p.event, p.payload)?,
            match spec.trigger {
                pusher::Trigger::Api => SendKind::Trigger,
                pusher::Trigger::ClientEvent => SendKind::Push,
            },
        ),
        None => (
            message_template(*vsn, p.topic, p.event, p.payload, false)?,
            SendKind::Push,
        ),
    };
    if !tpl.has_stamp() {
        return Err(BenchError::Scenario(
            "a publish payload needs %%stamp%% so receivers can time it".into(),
        ));
    }
    let ms = (p.interval * 1000.0).round().max(0.0) as u32;
    compile_loop(sc, p.count, depth, ops, vsn, |_, ops, _| {
        ops.push(Op::Send {
            tpl: tpl.clone(),
            opcode: Opcode::Text,
            kind,
            track: false,
            wait: false,
            fixed_ref: None,
            stamp: true,
            presence: false,
            auth: None,
        });
        if ms > 0 {
            ops.push(Op::Think { ms });
        }
        Ok(())
    })
}

/// A step over Pusher (`--protocol pusher`), compiled to its op, or
/// `None` for the steps both protocols share (think, loops, barrier,
/// hold, disconnect; a publish compiles through [`pusher_publish`] inside
/// its loop).
fn pusher_op(spec: &PusherSpec, step: &Step) -> Result<Option<Op>, BenchError> {
    let send = |text: String, kind: SendKind, wait: bool, auth: Option<Box<str>>| {
        Ok::<_, BenchError>(Op::Send {
            tpl: Template::parse(&text)?,
            opcode: Opcode::Text,
            kind,
            track: wait,
            wait,
            fixed_ref: None,
            stamp: text.contains("%%stamp%%"),
            presence: false,
            auth,
        })
    };
    Ok(Some(match step {
        Step::Connect(path) => Op::Connect {
            path: if path.is_empty() {
                spec.connect_path()
            } else {
                path.clone()
            },
            vsn: Vsn::V2,
        },
        Step::Join { topic, .. } => {
            let auth = pusher::needs_auth(topic).then(|| topic.as_str().into());
            send(
                pusher::subscribe_template(topic),
                SendKind::Join,
                true,
                auth,
            )?
        }
        Step::Push {
            topic,
            event,
            payload,
            wait,
        } => {
            if *wait {
                return Err(BenchError::Scenario(format!(
                    "push {event:?} with wait: a Pusher client event gets no reply to wait for"
                )));
            }
            check_json(payload)?;
            send(
                pusher::client_event_template(topic, event, payload),
                SendKind::Push,
                false,
                None,
            )?
        }
        Step::Leave(topic) => send(
            pusher::unsubscribe_frame(topic),
            SendKind::Leave,
            false,
            None,
        )?,
        Step::Send(text) | Step::SendBinary(text) => Op::Send {
            tpl: Template::parse(text)?,
            opcode: if matches!(step, Step::SendBinary(_)) {
                Opcode::Binary
            } else {
                Opcode::Text
            },
            kind: SendKind::Push,
            track: false,
            wait: false,
            fixed_ref: None,
            stamp: text.contains("%%stamp%%"),
            presence: false,
            auth: None,
        },
        _ => return Ok(None),
    }))
}

/// A publish over Pusher: a trigger through the HTTP API, or a client
/// event on the publisher's socket.
fn pusher_publish(
    spec: &PusherSpec,
    channel: &str,
    event: &str,
    payload: &str,
) -> Result<Template, BenchError> {
    check_json(payload)?;
    Template::parse(&match spec.trigger {
        pusher::Trigger::Api => pusher::trigger_body_template(channel, event, payload),
        pusher::Trigger::ClientEvent => pusher::client_event_template(channel, event, payload),
    })
}

/// A payload that is JSON once its substitutions are made.
fn check_json(payload: &str) -> Result<(), BenchError> {
    let sample = Template::parse(payload)?.sample();
    serde_json::from_str::<serde_json::Value>(&sample)
        .map(|_| ())
        .map_err(|e| {
            BenchError::Scenario(format!(
                "payload is not JSON after substitution ({sample}): {e}"
            ))
        })
}

fn compile_loop(
    sc: &Scenario,
    times: u32,
    depth: u8,
    ops: &mut Vec<Op>,
    vsn: &mut Vsn,
    body: impl FnOnce(&Scenario, &mut Vec<Op>, &mut Vsn) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    if depth >= 2 {
        return Err(BenchError::Scenario("loops nest at most two deep".into()));
    }
    let start = ops.len();
    ops.push(Op::LoopStart {
        times,
        slot: depth,
        end: 0,
    });
    body(sc, ops, vsn)?;
    ops.push(Op::LoopEnd {
        start: start as u16,
        slot: depth,
    });
    let end = ops.len() as u16;
    if let Op::LoopStart { end: e, .. } = &mut ops[start] {
        *e = end;
    }
    Ok(())
}

/// What a raw message is, read as the server will read it: a join
/// (tracked by its numeric ref), a leave, or a push.
fn raw_kind(vsn: Vsn, opcode: Opcode, sample: &str) -> (SendKind, Option<u32>) {
    let Ok(m) = serializer::decode(vsn, opcode, sample.as_bytes(), serializer::Sender::Client)
    else {
        return (SendKind::Push, None);
    };
    let kind = match &*m.event {
        "phx_join" => SendKind::Join,
        "phx_leave" => SendKind::Leave,
        _ => SendKind::Push,
    };
    let r = m.msg_ref.as_deref().and_then(|r| r.parse::<u32>().ok());
    (kind, r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{chat, Phase};

    #[test]
    fn join_template_is_a_v2_array_with_refs() {
        let sc = chat(Phase::at_rate(10, 100.0), 1, 2, 0.0, Vsn::V2);
        let p = Program::compile(&sc, &sc.roles[0]).unwrap();
        let Op::Send { tpl, kind, .. } = &p.ops[1] else {
            panic!("{:?}", p.ops[1])
        };
        assert_eq!(*kind, SendKind::Join);
        assert_eq!(
            tpl.sample(),
            r#"["2","2","rooms:lobby","phx_join",{"user":"1"}]"#
        );
        let Op::Send { tpl, stamp, .. } = &p.ops[4] else {
            panic!("{:?}", p.ops[4])
        };
        assert!(*stamp);
        assert_eq!(
            tpl.sample(),
            r#"["1","2","rooms:lobby","new:msg",{"user":"1","body":"throng:1:2:3"}]"#
        );
    }

    #[test]
    fn raw_sends_keep_their_frame() {
        let sc = Scenario::from_toml(
            r#"
            serializer = "v1"
            [[phases]]
            duration = 1
            arrival_rate = 10
            [[roles]]
            name = "r"
            session = [{ connect = "/socket/websocket" }, { send_binary = '{"topic":"t","event":"phx_join","payload":{},"ref":"3"}' }, { send = '{"topic":"t","event":"x","payload":{},"ref":"4"}' }]
            "#,
        )
        .unwrap();
        let p = Program::compile(&sc, &sc.roles[0]).unwrap();
        let sends: Vec<(Opcode, SendKind, Option<u32>)> = p
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Send {
                    opcode,
                    kind,
                    fixed_ref,
                    ..
                } => Some((*opcode, *kind, *fixed_ref)),
                _ => None,
            })
            .collect();
        assert_eq!(
            sends,
            vec![
                (Opcode::Binary, SendKind::Join, Some(3)),
                (Opcode::Text, SendKind::Push, Some(4))
            ]
        );
    }

    #[test]
    fn v1_join_template() {
        let sc = chat(Phase::at_rate(10, 100.0), 0, 0, 0.0, Vsn::V1);
        let p = Program::compile(&sc, &sc.roles[0]).unwrap();
        assert_eq!(
            p.ops[0],
            Op::Connect {
                path: "/socket/websocket".into(),
                vsn: Vsn::V1
            }
        );
        let Op::Send { tpl, .. } = &p.ops[1] else {
            panic!()
        };
        assert_eq!(
            tpl.sample(),
            r#"{"topic":"rooms:lobby","event":"phx_join","payload":{"user":"1"},"ref":"2"}"#
        );
    }

    #[test]
    fn loops_compile_with_jump_targets() {
        let sc = Scenario::from_toml(
            r#"
            [[phases]]
            duration = 1
            arrival_rate = 10
            [[roles]]
            name = "r"
            session = [{ connect = "/socket/websocket" }, { loop = { times = 3, steps = [{ think = 1.5 }, { loop = { times = 2, steps = [{ think = 0 }] } }] } }, "disconnect"]
            "#,
        )
        .unwrap();
        let p = Program::compile(&sc, &sc.roles[0]).unwrap();
        assert_eq!(
            p.ops[1],
            Op::LoopStart {
                times: 3,
                slot: 0,
                end: 7
            }
        );
        assert_eq!(p.ops[2], Op::Think { ms: 1500 });
        assert_eq!(p.ops[6], Op::LoopEnd { start: 1, slot: 0 });
        assert_eq!(p.ops[7], Op::Disconnect);
        let too_deep = r#"
            [[phases]]
            duration = 1
            arrival_rate = 10
            [[roles]]
            name = "r"
            session = [{ connect = "/" }, { loop = { times = 1, steps = [{ loop = { times = 1, steps = [{ loop = { times = 1, steps = [] } }] } }] } }]
        "#;
        assert!(Scenario::from_toml(too_deep).is_err());
    }
}
