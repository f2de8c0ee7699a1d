//! The controller <-> agent protocol: JSON lines over one TCP connection.
//!
//! ```text
//! agent -> controller   hello {pid}
//! controller -> agent   plan {index, agents, scenario, target, ...}
//! agent -> controller   ready {rss, users, conn_size}
//! controller -> agent   start                      (arrivals begin)
//! agent -> controller   progress {counters}        (every 100 ms; 1 s once settled)
//! controller -> agent   release                    (the barrier opens)
//! controller -> agent   storm                      (drop every connection)
//! agent -> controller   storm_done
//! controller -> agent   finish
//! agent -> controller   final {counters, hists, bcasts, slots}   (then it exits)
//! ```
//! An agent whose controller connection closes exits.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::plan::Plan;
use crate::stats::{BcastSeen, Counters, HistsWire};

/// What the controller tells an agent.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToAgent {
    Plan(Box<Plan>),
    Start,
    Release,
    Storm,
    Finish,
}

/// An agent's last word.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Final {
    pub counters: Counters,
    pub hists: HistsWire,
    pub bcasts: Vec<(u64, BcastSeen)>,
    pub slots: crate::slots::Slots,
}

/// What an agent tells the controller.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToController {
    /// The agent's pid: the controller samples a local agent's CPU from `/proc`.
    Hello {
        pid: u32,
    },
    Ready {
        rss: u64,
        users: u64,
        conn_size: usize,
    },
    Progress(Counters),
    StormDone,
    Final(Box<Final>),
}

/// Writes one message as a JSON line.
pub fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), BenchError> {
    let mut line = serde_json::to_vec(msg)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()?;
    Ok(())
}

/// Reads one JSON line; `Ok(None)` at end of stream.
pub fn recv<T: for<'de> Deserialize<'de>>(r: &mut impl BufRead) -> Result<Option<T>, BenchError> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    serde_json::from_str(&line)
        .map(Some)
        .map_err(|e| BenchError::Protocol(format!("{e}: {}", line.trim_end())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{chat, Phase};
    use throng_protocol::Vsn;

    #[test]
    fn round_trips_as_json_lines() {
        let plan = ToAgent::Plan(Box::new(Plan {
            index: 1,
            agents: 2,
            scenario: chat(Phase::at_rate(10, 100.0), 1, 1, 0.1, Vsn::V1),
            target: "127.0.0.1:4000".parse().unwrap(),
            host: "127.0.0.1:4000".into(),
            bind_sources: true,
            capacity: 19_000,
        }));
        let mut buf = Vec::new();
        send(&mut buf, &plan).unwrap();
        send(&mut buf, &ToAgent::Start).unwrap();
        assert!(buf.starts_with(b"{\"type\":\"plan\""));
        let mut r = std::io::BufReader::new(&buf[..]);
        let Some(ToAgent::Plan(p)) = recv::<ToAgent>(&mut r).unwrap() else {
            panic!()
        };
        assert_eq!(
            p.scenario,
            chat(Phase::at_rate(10, 100.0), 1, 1, 0.1, Vsn::V1)
        );
        assert!(matches!(
            recv::<ToAgent>(&mut r).unwrap(),
            Some(ToAgent::Start)
        ));
        assert!(recv::<ToAgent>(&mut r).unwrap().is_none());
    }
}
