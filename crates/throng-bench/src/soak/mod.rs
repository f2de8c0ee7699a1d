//! The soak scenario (`throng bench --soak DURATION`): a steady population
//! churned for a long time, while the server's memory, open files, threads
//! and every gauge of its `/metrics` are sampled once a second, to show
//! that nothing grows. The run itself is `controller::soak`; this module
//! owns what its processes share and what it concludes:
//!
//! - [`Orders`], [`Command`] and [`Status`]: what the controller tells a
//!   client process (orders as an argument, commands as JSON lines on its
//!   stdin) and what it answers (a status line on stdout every
//!   [`STATUS_EVERY`]), as the storm's client processes do.
//! - [`client`]: the client process: each of its slots is one member of
//!   the population, for ever connecting (a WebSocket, or a long-poll
//!   session: [`longpoll`]), joining and leaving topics, pushing,
//!   heartbeating, and ending its session (a close frame, a reset, or the
//!   socket dropped) after a random life, then starting again.
//! - [`api`]: the server API calls the controller makes meanwhile
//!   (broadcasts, disconnects, presence, stats, topics, history).
//! - [`series`]: the samples (per server worker and summed) and the
//!   Prometheus gauges read from `/metrics`; [`fit`]: least squares with a
//!   noise band, and the verdict on each series; [`report`]: the figures,
//!   as JSON, a terminal summary and the HTML report's charts.
//!
//! What a session does is drawn from a seeded generator (one per slot), so
//! two runs of the same size do the same things in the same proportions.
//! A population of P has P slots; a slot's life is exponential with mean
//! P / churn seconds, so P / mean connects a second keep the population
//! steady (a slot's next session starts a moment after its last ends).

pub mod api;
mod channels;
pub mod client;
pub mod fit;
pub mod longpoll;
pub mod report;
pub mod series;
mod shared;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use report::SoakReport;

/// How often a client process prints its status.
pub const STATUS_EVERY: Duration = Duration::from_secs(1);

/// The event of the clients' pushes on room topics (the relay broadcasts
/// them to the room), of their pushes on hooked topics (the backend answers
/// with a broadcast) and of the server API's broadcasts.
pub const PUSH_EVENT: &str = "new:msg";
pub const HOOK_EVENT: &str = crate::hooks::responder::SHOUT;
pub const API_EVENT: &str = "api:msg";

/// How many topics of each kind a population of `p` is spread over:
/// rooms of ~50, presence topics of ~50 (half the sessions join one),
/// hooked topics of ~70 (a third join one), history topics of ~500 (half
/// the slots keep one, rejoining it with `since`), at most 50 of them: the
/// server API publishes to each twice a second, so that every topic's
/// history is full (in Redis too, whose approximate trimming keeps a
/// stream's last ~100 entries) long before the soak's second half.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topics {
    pub rooms: u32,
    pub presence: u32,
    pub hooked: u32,
    pub history: u32,
}

impl Topics {
    pub fn for_population(p: u64) -> Topics {
        let n = |per: u64, min: u64, max: u64| (p / per).clamp(min, max) as u32;
        Topics {
            rooms: n(50, 4, 100_000),
            presence: n(100, 2, 100_000),
            hooked: n(200, 2, 100_000),
            history: n(1000, 2, 50),
        }
    }

    pub fn room(r: u32) -> String {
        format!("soak:room:{r}")
    }

    pub fn presence(q: u32) -> String {
        format!("soak:pres:{q}")
    }

    pub fn hooked(k: u32) -> String {
        format!("soak:hook:{k}")
    }

    pub fn history(h: u32) -> String {
        format!("soak:hist:{h}")
    }
}

/// The user of slot `g`: the connect hook answers it as the socket's user
/// (the users table, presence keys, `/api/disconnect` by user).
pub fn user(g: u64) -> String {
    format!("u{g}")
}

/// A client process's orders.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Orders {
    /// Where every session connects (the server, or its workers' shared port).
    pub target: SocketAddr,
    /// This process's slots: global numbers `first..first + count`.
    pub first: u64,
    pub count: u64,
    pub topics: Topics,
    /// A session's mean life (exponential), seconds.
    pub mean_life_secs: f64,
    /// The first sessions start spread over this many seconds.
    pub ramp_secs: f64,
    /// The share of sessions that are long-poll sessions.
    pub longpoll_share: f64,
    /// A session's mean time between two of its actions (a push, a leave
    /// and a join), seconds; heartbeats go every 30 s besides.
    pub action_secs: f64,
    pub seed: u64,
}

/// The source address of slot `g`: each slot its own, so no address meets
/// its own sockets' TIME_WAIT or a per-address bound of the server.
pub fn source(g: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        20 + ((g / 62_500) % 200) as u8,
        ((g / 250) % 250) as u8,
        2 + (g % 250) as u8,
    ))
}

/// A command to a client process (one JSON line on its stdin).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// End every session (each the way its life would have ended), print
    /// the last status and exit.
    Stop,
}

/// A client process's counts (cumulative, except the `open` ones), one
/// JSON line each [`STATUS_EVERY`]; the controller sums them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct Status {
    pub slots: u64,
    /// WebSockets and long-poll sessions open now.
    pub ws_open: u64,
    pub longpoll_open: u64,
    /// Sessions started (a TCP connect and upgrade, or a long-poll session
    /// opened), and attempts that failed (retried after a pause).
    pub connects: u64,
    pub connect_errors: u64,
    pub longpoll_sessions: u64,
    pub longpoll_polls: u64,
    /// `ok` join replies; joins refused (or answered with an error).
    pub joins: u64,
    pub join_errors: u64,
    /// Rejoins of a history topic with `since`, by their `recovered`.
    pub recovered: u64,
    pub not_recovered: u64,
    pub leaves: u64,
    pub heartbeats: u64,
    /// Pushes sent, and their `ok` and error replies.
    pub pushes: u64,
    pub push_ok: u64,
    pub push_errors: u64,
    /// Messages received that were not replies (broadcasts, presence).
    pub received: u64,
    /// How sessions ended: a close frame, a reset (SO_LINGER 0), the
    /// socket dropped (a FIN without a close frame), a long-poll session
    /// left to expire, a long-poll session whose parked poll was cut.
    pub ended_close: u64,
    pub ended_reset: u64,
    pub ended_drop: u64,
    pub ended_longpoll_expire: u64,
    pub ended_longpoll_cut: u64,
    /// Sessions the server ended: a WebSocket closed with 1001 (the server
    /// API's disconnects), and any other close or 410 (errors).
    pub server_disconnects: u64,
    pub server_closes: u64,
    /// Anything unexpected: frames or answers that did not parse, closes
    /// other than 1001, a push or join answered with an error.
    pub errors: u64,
    pub first_error: Option<String>,
    /// Errors and connect errors by kind (their text with topic numbers
    /// left out), at most [`KINDS`] kinds (then `other`).
    pub error_kinds: std::collections::BTreeMap<String, u64>,
    /// The process's last line.
    pub done: bool,
}

/// Kinds of errors a status keeps apart.
pub const KINDS: usize = 32;

/// An error's kind: its text with each topic's number left out
/// (`soak:hook:85` -> `soak:hook:*`).
pub fn kind_of(why: &str) -> String {
    why.split(' ')
        .map(
            |w| match w.strip_prefix("soak:").and_then(|r| r.split_once(':')) {
                Some((k, _)) => format!("soak:{k}:*"),
                None => w.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join(" ")
}

impl Status {
    /// Adds another process's counts.
    pub fn add(&mut self, o: &Status) {
        let pairs = [
            (&mut self.slots, o.slots),
            (&mut self.ws_open, o.ws_open),
            (&mut self.longpoll_open, o.longpoll_open),
            (&mut self.connects, o.connects),
            (&mut self.connect_errors, o.connect_errors),
            (&mut self.longpoll_sessions, o.longpoll_sessions),
            (&mut self.longpoll_polls, o.longpoll_polls),
            (&mut self.joins, o.joins),
            (&mut self.join_errors, o.join_errors),
            (&mut self.recovered, o.recovered),
            (&mut self.not_recovered, o.not_recovered),
            (&mut self.leaves, o.leaves),
            (&mut self.heartbeats, o.heartbeats),
            (&mut self.pushes, o.pushes),
            (&mut self.push_ok, o.push_ok),
            (&mut self.push_errors, o.push_errors),
            (&mut self.received, o.received),
            (&mut self.ended_close, o.ended_close),
            (&mut self.ended_reset, o.ended_reset),
            (&mut self.ended_drop, o.ended_drop),
            (&mut self.ended_longpoll_expire, o.ended_longpoll_expire),
            (&mut self.ended_longpoll_cut, o.ended_longpoll_cut),
            (&mut self.server_disconnects, o.server_disconnects),
            (&mut self.server_closes, o.server_closes),
            (&mut self.errors, o.errors),
        ];
        for (mine, theirs) in pairs {
            *mine += theirs;
        }
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
        for (k, n) in &o.error_kinds {
            self.count_kind(k, *n);
        }
    }

    /// Counts `n` errors of kind `kind`.
    pub fn count_kind(&mut self, kind: &str, n: u64) {
        let key = if self.error_kinds.len() >= KINDS && !self.error_kinds.contains_key(kind) {
            "other"
        } else {
            kind
        };
        *self.error_kinds.entry(key.to_string()).or_default() += n;
    }

    /// Notes an error's text: its kind counted, the first one kept.
    pub fn note(&mut self, why: String) {
        self.count_kind(&kind_of(&why), 1);
        self.first_error.get_or_insert(why);
    }

    /// Sessions open now.
    pub fn open(&self) -> u64 {
        self.ws_open + self.longpoll_open
    }
}

/// `--soak`'s duration: seconds, or a number with `s`, `m` or `h`
/// (`180`, `90s`, `3m`, `1.5h`).
pub fn parse_duration(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1.0),
        Some((i, 'm')) => (&t[..i], 60.0),
        Some((i, 'h')) => (&t[..i], 3600.0),
        _ => (t, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * scale),
        _ => Err(format!(
            "{s:?}: not a duration; write seconds, or a number with s, m or h, such as 3m or 30m"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("180"), Ok(180.0));
        assert_eq!(parse_duration("90s"), Ok(90.0));
        assert_eq!(parse_duration("3m"), Ok(180.0));
        assert_eq!(parse_duration("1.5h"), Ok(5400.0));
        for bad in ["", "0", "-3m", "3 minutes", "m", "nan"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn topics_scale_with_the_population() {
        let t = Topics::for_population(5000);
        assert_eq!((t.rooms, t.presence, t.hooked, t.history), (100, 50, 25, 5));
        assert_eq!(Topics::for_population(1_000_000).history, 50);
        let t = Topics::for_population(10);
        assert_eq!((t.rooms, t.presence, t.hooked, t.history), (4, 2, 2, 2));
    }

    #[test]
    fn every_slot_has_its_own_source() {
        let mut seen = std::collections::HashSet::new();
        for g in 0..200_000 {
            assert!(seen.insert(source(g)), "slot {g}");
        }
    }

    #[test]
    fn statuses_add_up() {
        let a = Status {
            ws_open: 3,
            errors: 1,
            first_error: Some("x".into()),
            ..Status::default()
        };
        let mut sum = Status::default();
        sum.add(&a);
        sum.add(&a);
        assert_eq!((sum.ws_open, sum.errors), (6, 2));
        let mut s = Status::default();
        s.note("a push on soak:hook:85 was answered error (backend timeout)".into());
        s.note("a push on soak:hook:3 was answered error (backend timeout)".into());
        assert_eq!(
            s.error_kinds["a push on soak:hook:* was answered error (backend timeout)"],
            2
        );
        for i in 0..40 {
            s.count_kind(&format!("kind {i}"), 1);
        }
        assert_eq!(s.error_kinds.len(), KINDS + 1);
        assert_eq!(s.error_kinds["other"], 40 - (KINDS as u64 - 1));
        assert_eq!(sum.first_error.as_deref(), Some("x"));
        let line = serde_json::to_string(&Command::Stop).unwrap();
        assert_eq!(
            serde_json::from_str::<Command>(&line).unwrap(),
            Command::Stop
        );
    }
}
