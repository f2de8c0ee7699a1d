//! Tsung XML import: runs a Tsung config (such as the Phoenix team's
//! `phoenix.xml`) as a throng [`Scenario`].
//!
//! What maps, and how:
//! - `<arrivalphase duration unit>` + `<users maxnumber arrivalrate|interarrival unit>`
//!   become [`Phase`]s (rates converted to per second);
//! - each `<session probability>` becomes a [`Role`] weighted by its probability;
//! - `<websocket type="connect" path>`, `type="message"` (sent as it is,
//!   after `%%ts_user_server:get_unique_id%%` substitution, in the frame
//!   Tsung uses: binary unless `frame="text"`), `type="close"`;
//!   `<thinktime value>` (or `min`/`max`: their mean), `<for from to incr>`,
//!   and `<transaction>` (flattened);
//! - `<clients>` are mapped onto local agents (one per client, each capped by
//!   its `maxusers` and by the agent's open-file limit);
//! - `<servers>` is replaced by the embedded server or `--target`.
//!
//! Anything else is refused with its name, rather than silently run wrong.

use roxmltree::{Document, Node, ParsingOptions};

use crate::error::BenchError;
use crate::scenario::{Phase, Role, Scenario, Step};
use throng_protocol::Vsn;

/// A Tsung `<client>`: a load-generating host.
#[derive(Clone, Debug, PartialEq)]
pub struct TsungClient {
    pub host: String,
    pub maxusers: Option<u64>,
}

/// A Tsung config, imported.
#[derive(Clone, Debug)]
pub struct TsungImport {
    pub scenario: Scenario,
    pub clients: Vec<TsungClient>,
    /// The `<server host port>` the config targets (replaced when run here).
    pub server: Option<(String, u16)>,
    /// What was read but not reproduced exactly, for the terminal.
    pub notes: Vec<String>,
}

fn attr<'a>(n: Node<'a, '_>, name: &str) -> Option<&'a str> {
    n.attribute(name)
}

fn num(n: Node<'_, '_>, name: &str) -> Result<f64, BenchError> {
    let v = attr(n, name)
        .ok_or_else(|| BenchError::Tsung(format!("<{}> lacks {name}=", n.tag_name().name())))?;
    v.trim().parse::<f64>().map_err(|_| {
        BenchError::Tsung(format!(
            "<{} {name}=\"{v}\">: not a number",
            n.tag_name().name()
        ))
    })
}

fn unit_secs(unit: Option<&str>) -> Result<f64, BenchError> {
    Ok(match unit.unwrap_or("second") {
        "second" => 1.0,
        "minute" => 60.0,
        "hour" => 3600.0,
        "millisecond" => 0.001,
        other => return Err(BenchError::Tsung(format!("unknown unit {other}"))),
    })
}

fn elements<'a, 'i>(n: Node<'a, 'i>) -> impl Iterator<Item = Node<'a, 'i>> {
    n.children().filter(|c| c.is_element())
}

/// Imports a Tsung XML config.
pub fn import(xml: &str) -> Result<TsungImport, BenchError> {
    let doc = Document::parse_with_options(
        xml,
        ParsingOptions {
            allow_dtd: true,
            ..ParsingOptions::default()
        },
    )
    .map_err(|e| BenchError::Tsung(e.to_string()))?;
    let root = doc.root_element();
    if root.tag_name().name() != "tsung" {
        return Err(BenchError::Tsung("root element is not <tsung>".into()));
    }
    let mut notes = Vec::new();
    let mut clients = Vec::new();
    let mut server = None;
    let mut phases = Vec::new();
    let mut roles = Vec::new();
    for section in elements(root) {
        match section.tag_name().name() {
            "clients" => {
                for c in elements(section).filter(|c| c.has_tag_name("client")) {
                    clients.push(TsungClient {
                        host: attr(c, "host").unwrap_or("localhost").to_string(),
                        maxusers: attr(c, "maxusers").and_then(|m| m.parse().ok()),
                    });
                }
            }
            "servers" => {
                if let Some(s) = elements(section).find(|s| s.has_tag_name("server")) {
                    let host = attr(s, "host").unwrap_or("localhost").to_string();
                    let port = num(s, "port")? as u16;
                    server = Some((host, port));
                }
            }
            "load" => {
                for p in elements(section).filter(|p| p.has_tag_name("arrivalphase")) {
                    phases.push(phase(p)?);
                }
            }
            "options" => {
                for o in elements(section) {
                    let name = attr(o, "name").unwrap_or("?");
                    notes.push(format!(
                        "option {name} is not needed here (each agent binds its own source addresses)"
                    ));
                }
            }
            "sessions" => {
                for s in elements(section).filter(|s| s.has_tag_name("session")) {
                    roles.push(session_role(s, &mut notes)?);
                }
            }
            "monitoring" => {
                notes.push("<monitoring> ignored: throng samples its own server".into())
            }
            other => notes.push(format!("<{other}> ignored")),
        }
    }
    if phases.is_empty() {
        return Err(BenchError::Tsung("no <arrivalphase> in <load>".into()));
    }
    if roles.is_empty() {
        return Err(BenchError::Tsung("no <session> in <sessions>".into()));
    }
    let scenario = Scenario {
        name: "tsung".into(),
        serializer: Vsn::V1,
        heartbeat: 0.0,
        heartbeat_grid: 0.1,
        connect_timeout: 10.0,
        reply_timeout: 10.0,
        presence: None,
        deflate: false,
        pusher: None,
        phases,
        roles,
    };
    scenario.validate()?;
    Ok(TsungImport {
        scenario,
        clients,
        server,
        notes,
    })
}

/// A `<session>` as a role: its steps, its probability as the weight.
fn session_role(s: Node<'_, '_>, notes: &mut Vec<String>) -> Result<Role, BenchError> {
    if let Some(t) = attr(s, "type") {
        if t != "ts_websocket" {
            return Err(BenchError::Tsung(format!(
                "session type {t}: only ts_websocket sessions can run"
            )));
        }
    }
    let mut steps = Vec::new();
    session_steps(s, &mut steps, notes)?;
    Ok(Role {
        name: attr(s, "name").unwrap_or("session").to_string(),
        count: None,
        weight: Some(
            attr(s, "probability")
                .and_then(|p| p.parse().ok())
                .unwrap_or(100.0),
        ),
        session: steps,
    })
}

fn phase(p: Node<'_, '_>) -> Result<Phase, BenchError> {
    let duration = num(p, "duration")? * unit_secs(attr(p, "unit"))?;
    let users = elements(p)
        .find(|u| u.has_tag_name("users"))
        .ok_or_else(|| BenchError::Tsung("<arrivalphase> without <users>".into()))?;
    let per = unit_secs(attr(users, "unit"))?;
    let arrival_rate = if users.has_attribute("arrivalrate") {
        num(users, "arrivalrate")? / per
    } else if users.has_attribute("interarrival") {
        1.0 / (num(users, "interarrival")? * per)
    } else {
        return Err(BenchError::Tsung(
            "<users> needs arrivalrate= or interarrival=".into(),
        ));
    };
    let max_users = match attr(users, "maxnumber") {
        Some(m) => Some(
            m.parse::<u64>()
                .map_err(|_| BenchError::Tsung(format!("maxnumber=\"{m}\"")))?,
        ),
        None => None,
    };
    Ok(Phase {
        duration,
        arrival_rate,
        max_users,
    })
}

fn session_steps(
    n: Node<'_, '_>,
    out: &mut Vec<Step>,
    notes: &mut Vec<String>,
) -> Result<(), BenchError> {
    for c in elements(n) {
        match c.tag_name().name() {
            "request" => {
                let ws = elements(c)
                    .find(|w| w.has_tag_name("websocket"))
                    .ok_or_else(|| {
                        BenchError::Tsung("<request> without <websocket>: only websocket requests run".into())
                    })?;
                match attr(ws, "type").unwrap_or("message") {
                    "connect" => out.push(Step::Connect(
                        attr(ws, "path").unwrap_or("/").to_string(),
                    )),
                    "message" => {
                        let text: String = ws.text().unwrap_or("").to_string();
                        if attr(c, "subst") != Some("true") && text.contains("%%") {
                            notes.push("a message without subst=\"true\" has %% in it: substituted anyway".into());
                        }
                        // Tsung sends a message in a binary frame unless the
                        // element says frame="text" (processone/tsung:
                        // src/tsung_controller/ts_config_websocket.erl reads
                        // `frame` with default "binary"; src/tsung/ts_websocket.erl
                        // get_message/2 encodes "text" as a text frame and
                        // anything else as binary). Phoenix's V1 serializer
                        // reads JSON from either.
                        out.push(if attr(ws, "frame") == Some("text") {
                            Step::Send(text)
                        } else {
                            Step::SendBinary(text)
                        });
                    }
                    "close" | "disconnect" => out.push(Step::Disconnect),
                    other => {
                        return Err(BenchError::Tsung(format!(
                            "websocket type=\"{other}\" is not supported"
                        )))
                    }
                }
            }
            "thinktime" => {
                let secs = if c.has_attribute("value") {
                    num(c, "value")?
                } else if c.has_attribute("min") && c.has_attribute("max") {
                    notes.push("random thinktime min..max runs as its mean".into());
                    (num(c, "min")? + num(c, "max")?) / 2.0
                } else {
                    return Err(BenchError::Tsung("<thinktime> needs value= (or min= and max=)".into()));
                };
                out.push(Step::Think(secs));
            }
            "for" => {
                let from = num(c, "from")?;
                let to = num(c, "to")?;
                let incr = if c.has_attribute("incr") { num(c, "incr")? } else { 1.0 };
                if incr <= 0.0 {
                    return Err(BenchError::Tsung("<for incr> must be > 0".into()));
                }
                let times = if to < from { 0 } else { ((to - from) / incr).floor() as u32 + 1 };
                let mut body = Vec::new();
                session_steps(c, &mut body, notes)?;
                out.push(Step::Loop { times, steps: body });
            }
            "transaction" => session_steps(c, out, notes)?,
            other => {
                return Err(BenchError::Tsung(format!(
                    "<{other}> in a session is not supported (supported: request/websocket, thinktime, for, transaction)"
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Op, Program, SendKind};
    use throng_protocol::Opcode;

    const PHOENIX: &str = include_str!("../../../scenarios/phoenix.xml");

    #[test]
    fn imports_the_phoenix_config_exactly() {
        let t = import(PHOENIX).unwrap();
        assert_eq!(t.clients.len(), 3);
        assert_eq!(t.clients[0].host, "phoenix1");
        assert_eq!(t.clients[2].maxusers, Some(64_000));
        assert_eq!(t.server, Some(("server_ip_address".into(), 4000)));
        let sc = &t.scenario;
        assert_eq!(
            sc.phases,
            vec![Phase {
                duration: 100.0,
                arrival_rate: 1000.0,
                max_users: Some(100_000)
            }]
        );
        assert_eq!(sc.total_users(), 100_000);
        assert_eq!(sc.serializer, Vsn::V1);
        assert_eq!(sc.heartbeat, 0.0);
        assert_eq!(sc.roles.len(), 1);
        assert_eq!(sc.roles[0].name, "websocket");
        assert_eq!(sc.roles[0].weight, Some(100.0));
        assert_eq!(
            sc.roles[0].session,
            vec![
                Step::Connect("/socket/websocket".into()),
                Step::SendBinary(r#"{"topic":"rooms:lobby", "event":"phx_join", "payload": {"user":"%%ts_user_server:get_unique_id%%"}, "ref":"1"}"#.into()),
                Step::Loop { times: 1000, steps: vec![Step::Think(30.0)] },
            ]
        );
        assert!(t.notes.iter().any(|n| n.contains("ports_range")));
    }

    #[test]
    fn phoenix_program_tracks_the_join_by_its_ref() {
        let t = import(PHOENIX).unwrap();
        let p = Program::compile(&t.scenario, &t.scenario.roles[0]).unwrap();
        assert_eq!(
            p.ops[0],
            Op::Connect {
                path: "/socket/websocket".into(),
                vsn: Vsn::V1
            }
        );
        let Op::Send {
            tpl,
            opcode,
            kind,
            track,
            wait,
            fixed_ref,
            ..
        } = &p.ops[1]
        else {
            panic!("{:?}", p.ops[1])
        };
        assert_eq!(*opcode, Opcode::Binary, "Tsung's default frame");
        assert_eq!(*kind, SendKind::Join);
        assert!(*track && !*wait);
        assert_eq!(*fixed_ref, Some(1));
        assert!(tpl.sample().contains(r#"{"user":"1"}"#));
        assert_eq!(
            p.ops[2],
            Op::LoopStart {
                times: 1000,
                slot: 0,
                end: 5
            }
        );
        assert_eq!(p.ops[3], Op::Think { ms: 30_000 });
    }

    /// Tsung's `frame` attribute: binary by default, text when it says so
    /// (anything else is binary too, as in Tsung).
    #[test]
    fn messages_go_in_the_frame_tsung_sends() {
        let xml = |frame: &str| {
            format!(
                r#"<tsung><load><arrivalphase phase="1" duration="1" unit="second">
                <users arrivalrate="10" unit="second"/></arrivalphase></load>
                <sessions><session name="s" probability="100" type="ts_websocket">
                  <request><websocket type="connect" path="/socket/websocket"/></request>
                  <request><websocket type="message" {frame}>{{"topic":"t","event":"phx_join","payload":{{}},"ref":"7"}}</websocket></request>
                </session></sessions></tsung>"#
            )
        };
        let opcode = |frame: &str| {
            let sc = import(&xml(frame)).unwrap().scenario;
            let p = Program::compile(&sc, &sc.roles[0]).unwrap();
            let Op::Send {
                opcode, fixed_ref, ..
            } = &p.ops[1]
            else {
                panic!("{:?}", p.ops[1])
            };
            assert_eq!(*fixed_ref, Some(7), "tracked either way");
            (sc.roles[0].session[1].clone(), *opcode)
        };
        let text = r#"{"topic":"t","event":"phx_join","payload":{},"ref":"7"}"#.to_string();
        assert_eq!(opcode(""), (Step::SendBinary(text.clone()), Opcode::Binary));
        assert_eq!(
            opcode(r#"frame="binary""#),
            (Step::SendBinary(text.clone()), Opcode::Binary)
        );
        assert_eq!(
            opcode(r#"frame="text""#),
            (Step::Send(text.clone()), Opcode::Text)
        );
        assert_eq!(
            opcode(r#"frame="other""#),
            (Step::SendBinary(text), Opcode::Binary)
        );
    }

    #[test]
    fn phoenix_scales_with_flags() {
        let mut sc = import(PHOENIX).unwrap().scenario;
        sc.set_arrival_rate(5000.0);
        sc.set_max_users(10_000);
        assert_eq!(sc.total_users(), 10_000);
        sc.set_duration(1.0);
        assert_eq!(sc.total_users(), 5000);
    }

    #[test]
    fn units_loops_and_refusals() {
        let xml = r#"<tsung><load><arrivalphase phase="1" duration="1" unit="minute">
            <users interarrival="0.5" unit="second"/></arrivalphase></load>
            <sessions><session name="a" probability="25" type="ts_websocket">
              <transaction name="t"><request><websocket type="connect" path="/s"/></request></transaction>
              <for var="i" from="0" to="10" incr="5"><thinktime min="1" max="3"/></for>
              <request><websocket type="close"/></request>
            </session></sessions></tsung>"#;
        let t = import(xml).unwrap();
        assert_eq!(t.scenario.phases[0].duration, 60.0);
        assert_eq!(t.scenario.phases[0].arrival_rate, 2.0);
        assert_eq!(
            t.scenario.roles[0].session,
            vec![
                Step::Connect("/s".into()),
                Step::Loop {
                    times: 3,
                    steps: vec![Step::Think(2.0)]
                },
                Step::Disconnect
            ]
        );
        let http = xml.replace("ts_websocket", "ts_http");
        assert!(import(&http).is_err());
        let dyn_var = xml.replace("<transaction", "<setdynvars/><transaction");
        let e = import(&dyn_var).unwrap_err().to_string();
        assert!(e.contains("setdynvars"), "{e}");
    }
}
