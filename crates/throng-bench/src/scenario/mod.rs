//! Scenarios: who arrives when (phases), what each user does (a session of
//! steps, per role), and the program an agent runs for it.
//!
//! A scenario is TOML (see `scenarios/README.md`), a Tsung XML file
//! imported by [`crate::tsung`], or the built-in [`chat`]. All become a
//! [`Scenario`], which travels to the agents as JSON; each agent compiles
//! every role's session into a flat [`Program`] of [`Op`]s so that a
//! connection's whole progress is one program counter and two loop counters.
//!
//! Layout: this module holds the scenario as written (phases, roles,
//! steps) and its scaling; `template` the messages with their
//! substitutions and the broadcast stamp; `program` the compiled session.

mod program;
mod template;

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use throng_protocol::Vsn;

pub use self::program::{Op, Program, SendKind};
pub use self::template::{find_stamp, Seg, Template, Vars, STAMP_PREFIX};
use crate::error::BenchError;
use crate::pusher::{self, PusherSpec};

/// The load: arrival phases, and what the users do.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Shown in reports.
    #[serde(default = "default_name")]
    pub name: String,
    /// The serializer every connection negotiates (`"v1"` JSON objects,
    /// `"v2"` arrays; v2 by default).
    #[serde(default = "default_vsn", with = "vsn_name")]
    pub serializer: Vsn,
    /// Seconds between heartbeats on each open connection (Phoenix clients
    /// send one every 30 s); 0 sends none.
    #[serde(default)]
    pub heartbeat: f64,
    /// Seconds between the points of the grid heartbeats fall on, shared by
    /// every agent on the host (0.1 s by default; 0: each connection at its
    /// own millisecond). See `Engine::grid_ms` in `engine`.
    #[serde(default = "default_heartbeat_grid")]
    pub heartbeat_grid: f64,
    /// Seconds a TCP connect plus WebSocket handshake may take.
    #[serde(default = "default_timeout")]
    pub connect_timeout: f64,
    /// Seconds a reply may take before it counts as a timeout.
    #[serde(default = "default_timeout")]
    pub reply_timeout: f64,
    /// Presence the server keeps, as `throng serve --presence` spells it
    /// (`"rooms:lobby=param:user/count"`): handed to the embedded server,
    /// and what the run measures presence against (see
    /// [`crate::presence`]). None by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence: Option<String>,
    /// Every connection offers permessage-deflate (RFC 7692), as browsers
    /// and Node's `ws` do, and inflates the messages that arrive
    /// compressed (`throng bench --deflate`). Off by default.
    #[serde(default)]
    pub deflate: bool,
    /// Speak the Pusher Channels protocol instead of Phoenix's (`throng
    /// bench --protocol pusher`): a topic is a channel, a join a
    /// subscription, a publish a trigger through the HTTP API or a client
    /// event (see [`crate::pusher`]). None by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pusher: Option<PusherSpec>,
    /// Arrival phases, run one after the other.
    pub phases: Vec<Phase>,
    /// Roles; each user takes one (see [`Scenario::role_of`]).
    pub roles: Vec<Role>,
}

fn default_name() -> String {
    "scenario".into()
}

/// Heartbeats at each connection's own millisecond, as phoenix.js clients
/// send them (each on a 30 s timer from its own join).
fn default_heartbeat_grid() -> f64 {
    0.0
}

fn default_timeout() -> f64 {
    10.0
}

fn default_vsn() -> Vsn {
    Vsn::V2
}

/// A [`Vsn`] as scenarios and reports write it: `"v1"` or `"v2"`.
pub mod vsn_name {
    use serde::{Deserialize, Deserializer, Serializer};
    use throng_protocol::Vsn;

    /// The name of a serializer.
    pub fn of(vsn: Vsn) -> &'static str {
        match vsn {
            Vsn::V1 => "v1",
            Vsn::V2 => "v2",
        }
    }

    pub fn serialize<S: Serializer>(vsn: &Vsn, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(of(*vsn))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vsn, D::Error> {
        match String::deserialize(d)?.as_str() {
            "v1" => Ok(Vsn::V1),
            "v2" => Ok(Vsn::V2),
            other => Err(serde::de::Error::unknown_variant(other, &["v1", "v2"])),
        }
    }
}

/// Users arrive at `arrival_rate` per second for `duration` seconds, at most
/// `max_users` of them (Tsung's `<arrivalphase>` with `<users maxnumber arrivalrate>`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    pub duration: f64,
    pub arrival_rate: f64,
    #[serde(default)]
    pub max_users: Option<u64>,
}

impl Phase {
    /// `users` arriving at `rate` per second: the phase lasts as long as
    /// that takes.
    pub fn at_rate(users: u64, rate: f64) -> Phase {
        Phase {
            duration: (users as f64 / rate).max(0.001),
            arrival_rate: rate,
            max_users: Some(users),
        }
    }

    /// How many users this phase starts in all.
    pub fn users(&self) -> u64 {
        let by_rate = (self.duration * self.arrival_rate).ceil().max(0.0) as u64;
        match self.max_users {
            Some(m) => m.min(by_rate),
            None => by_rate,
        }
    }
}

/// A kind of user: the first `count` users take the first role with a count
/// and so on; the rest are shared among roles without a count by `weight`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Role {
    pub name: String,
    #[serde(default)]
    pub count: Option<u64>,
    #[serde(default)]
    pub weight: Option<f64>,
    pub session: Vec<Step>,
}

/// One step of a session. In TOML: `"barrier"`, `"hold"`, `"disconnect"`, or
/// a one-key table such as `{ think = 30 }`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Open the WebSocket at this path (with query).
    Connect(String),
    /// Join a topic and wait for the reply (its latency is the join latency).
    Join {
        topic: String,
        #[serde(default = "empty_object")]
        payload: String,
    },
    /// Push an event; with `wait`, wait for its reply.
    Push {
        topic: String,
        event: String,
        #[serde(default = "empty_object")]
        payload: String,
        #[serde(default)]
        wait: bool,
    },
    /// Send a text frame as it is (after substitutions). A `phx_join` in it
    /// with a numeric ref is tracked for its reply.
    Send(String),
    /// The same in a binary frame: what Tsung's `<websocket type="message">`
    /// sends unless it says `frame="text"`.
    SendBinary(String),
    /// Sleep this many seconds.
    Think(f64),
    /// Repeat the steps `times` times (at most two loops deep).
    Loop { times: u32, steps: Vec<Step> },
    /// `count` timestamped broadcasts, `interval` seconds apart: every
    /// subscriber that receives one measures its latency.
    Publish {
        topic: String,
        #[serde(default = "new_msg")]
        event: String,
        count: u32,
        #[serde(default)]
        interval: f64,
        #[serde(default = "stamp_payload")]
        payload: String,
    },
    /// Leave a topic and wait for the reply.
    Leave(String),
    /// Wait until the ramp-up is over (every user of the run has arrived and
    /// settled), so that broadcasts reach the full audience.
    Barrier,
    /// Stay connected until the end of the run (then the disconnect storm).
    Hold,
    /// Close the connection (so does the end of the session).
    Disconnect,
}

fn empty_object() -> String {
    "{}".into()
}

fn new_msg() -> String {
    "new:msg".into()
}

fn stamp_payload() -> String {
    r#"{"user":"%%user_id%%","body":"%%stamp%%"}"#.into()
}

impl Scenario {
    /// Parses and checks a TOML scenario.
    pub fn from_toml(text: &str) -> Result<Scenario, BenchError> {
        let s: Scenario = toml::from_str(text).map_err(|e| BenchError::Scenario(e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    /// Checks what serde cannot: non-empty phases and roles, sessions that
    /// compile (loops, templates).
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.phases.is_empty() {
            return Err(BenchError::Scenario("no [[phases]]".into()));
        }
        for p in &self.phases {
            if p.duration.is_nan()
                || p.duration <= 0.0
                || p.arrival_rate.is_nan()
                || p.arrival_rate <= 0.0
            {
                return Err(BenchError::Scenario(
                    "a phase needs duration > 0 and arrival_rate > 0".into(),
                ));
            }
        }
        if self.roles.is_empty() {
            return Err(BenchError::Scenario("no [[roles]]".into()));
        }
        if !(self.heartbeat_grid.is_finite() && (0.0..=60.0).contains(&self.heartbeat_grid)) {
            return Err(BenchError::Scenario(format!(
                "heartbeat_grid {}: seconds from 0 (none) to 60",
                self.heartbeat_grid
            )));
        }
        if self.roles.len() > 255 {
            return Err(BenchError::Scenario("at most 255 roles".into()));
        }
        self.presence_rule()?;
        for r in &self.roles {
            Program::compile(self, r)?;
        }
        Ok(())
    }

    /// The presence rule, parsed (an error names a bad one).
    pub fn presence_rule(&self) -> Result<Option<crate::presence::Rule>, BenchError> {
        self.presence
            .as_deref()
            .map(crate::presence::Rule::parse)
            .transpose()
    }

    /// How many users the phases start in all.
    pub fn total_users(&self) -> u64 {
        self.phases.iter().map(Phase::users).sum()
    }

    /// The longest any role's session waits on purpose once the ramp-up is
    /// over (its think times and broadcast intervals after its barrier, or
    /// in all if it has none): the hold must last at least this long for
    /// its broadcasts to be sent and received.
    pub fn scheduled_after_barrier(&self) -> f64 {
        fn secs(steps: &[Step]) -> f64 {
            steps
                .iter()
                .map(|s| match s {
                    Step::Think(t) => *t,
                    Step::Publish {
                        count, interval, ..
                    } => count.saturating_sub(1) as f64 * interval,
                    Step::Loop { times, steps } => *times as f64 * secs(steps),
                    _ => 0.0,
                })
                .sum()
        }
        self.roles
            .iter()
            .map(|r| {
                let after = r
                    .session
                    .iter()
                    .position(|s| matches!(s, Step::Barrier))
                    .map_or(0, |i| i + 1);
                secs(&r.session[after..])
            })
            .fold(0.0, f64::max)
    }

    /// Sets the total number of users: the phases' caps are scaled so they add
    /// up to `n` (and each lasts long enough at its rate to start them).
    pub fn set_max_users(&mut self, n: u64) {
        let total: u64 = self.phases.iter().map(Phase::users).sum::<u64>().max(1);
        let mut left = n;
        let count = self.phases.len();
        for (i, p) in self.phases.iter_mut().enumerate() {
            let share = if i + 1 == count {
                left
            } else {
                ((p.users() as u128 * n as u128) / total as u128) as u64
            }
            .min(left);
            left -= share;
            p.max_users = Some(share);
            let needed = share as f64 / p.arrival_rate;
            if p.duration < needed {
                p.duration = needed;
            }
        }
    }

    /// Sets every phase's arrival rate.
    pub fn set_arrival_rate(&mut self, rate: f64) {
        for p in &mut self.phases {
            p.arrival_rate = rate;
        }
    }

    /// Sets the total ramp-up duration, split over phases in proportion.
    pub fn set_duration(&mut self, secs: f64) {
        let total: f64 = self.phases.iter().map(|p| p.duration).sum();
        for p in &mut self.phases {
            p.duration = secs * p.duration / total;
        }
    }

    /// Seconds the phases take, at most.
    pub fn ramp_secs(&self) -> f64 {
        self.phases.iter().map(|p| p.duration).sum()
    }

    /// The role of the user with 0-based global index `index`.
    pub fn role_of(&self, index: u64) -> u8 {
        let mut offset = 0;
        for (i, r) in self.roles.iter().enumerate() {
            if let Some(c) = r.count {
                if index < offset + c {
                    return i as u8;
                }
                offset += c;
            }
        }
        let weighted: Vec<(usize, f64)> = self
            .roles
            .iter()
            .enumerate()
            .filter(|(_, r)| r.count.is_none())
            .map(|(i, r)| (i, r.weight.unwrap_or(1.0).max(0.0)))
            .collect();
        let sum: f64 = weighted.iter().map(|w| w.1).sum();
        if weighted.is_empty() || sum <= 0.0 {
            // Every role has a count and they are used up: the last role repeats.
            return (self.roles.len() - 1) as u8;
        }
        // A deterministic spread (Fibonacci hashing) so every agent agrees.
        let x = (index.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64;
        let mut acc = 0.0;
        for (i, w) in &weighted {
            acc += w / sum;
            if x < acc {
                return *i as u8;
            }
        }
        weighted[weighted.len() - 1].0 as u8
    }

    /// Expected broadcasts each publishing user sends (for reports).
    pub fn publishes_per_user(&self, role: usize) -> u64 {
        fn walk(steps: &[Step], mult: u64) -> u64 {
            steps
                .iter()
                .map(|s| match s {
                    Step::Publish { count, .. } => mult * *count as u64,
                    Step::Loop { times, steps } => walk(steps, mult * *times as u64),
                    _ => 0,
                })
                .sum()
        }
        walk(&self.roles[role].session, 1)
    }

    /// Broadcasts the whole run sends (each role's publishes times its users).
    pub fn expected_broadcasts(&self) -> u64 {
        let total = self.total_users();
        let mut n = 0;
        for (i, _) in self.roles.iter().enumerate() {
            let per = self.publishes_per_user(i);
            if per == 0 {
                continue;
            }
            let users = (0..total)
                .filter(|u| self.role_of(*u) as usize == i)
                .count() as u64;
            n += users * per;
        }
        n
    }

    /// Whether any session sends heartbeats (for the server's idle timeout).
    pub fn sends_heartbeats(&self) -> bool {
        self.heartbeat > 0.0
    }
}

/// The built-in chat scenario behind `throng bench --connections N --broadcasts B`:
/// the users of `phase` join `rooms:lobby`; after the ramp-up, `publishers`
/// of them each send `broadcasts` timestamped `new:msg`s; everyone holds
/// until the storm.
pub fn chat(
    phase: Phase,
    publishers: u64,
    broadcasts: u32,
    interval: f64,
    serializer: Vsn,
) -> Scenario {
    let join = Step::Join {
        topic: "rooms:lobby".into(),
        payload: r#"{"user":"%%user_id%%"}"#.into(),
    };
    let connect = Step::Connect("/socket/websocket".into());
    let mut roles = Vec::new();
    let publishers = publishers.min(phase.users());
    if broadcasts > 0 && publishers > 0 {
        roles.push(Role {
            name: "publisher".into(),
            count: Some(publishers),
            weight: None,
            session: vec![
                connect.clone(),
                join.clone(),
                Step::Barrier,
                Step::Publish {
                    topic: "rooms:lobby".into(),
                    event: new_msg(),
                    count: broadcasts,
                    interval,
                    payload: stamp_payload(),
                },
                Step::Hold,
            ],
        });
    }
    roles.push(Role {
        name: "listener".into(),
        count: None,
        weight: None,
        session: vec![connect, join, Step::Barrier, Step::Hold],
    });
    Scenario {
        name: "chat".into(),
        serializer,
        heartbeat: 30.0,
        heartbeat_grid: default_heartbeat_grid(),
        connect_timeout: default_timeout(),
        reply_timeout: default_timeout(),
        presence: None,
        deflate: false,
        pusher: None,
        phases: vec![phase],
        roles,
    }
}

/// The built-in scenario over Pusher (`--protocol pusher`): every user
/// connects to the app's socket URL and subscribes to `channel`; the
/// publishers broadcast `new-msg` on it as `spec.trigger` says; each socket
/// pings every [`pusher::PING_SECS`], as `pusher-js` does.
pub fn over_pusher(sc: &mut Scenario, spec: PusherSpec, channel: &str) {
    let path = spec.connect_path();
    for role in &mut sc.roles {
        for step in &mut role.session {
            match step {
                Step::Connect(p) => *p = path.clone(),
                Step::Join { topic, payload } => {
                    *topic = channel.into();
                    *payload = empty_object();
                }
                Step::Publish { topic, event, .. } => {
                    *topic = channel.into();
                    *event = "new-msg".into();
                }
                _ => {}
            }
        }
    }
    sc.heartbeat = pusher::PING_SECS;
    sc.pusher = Some(spec);
}

/// Makes every publisher wait `secs` before its first broadcast (the
/// built-in scenario's `--broadcast-after`: hold everyone, then broadcast).
pub fn delay_publish(sc: &mut Scenario, secs: f64) {
    if secs <= 0.0 {
        return;
    }
    for role in &mut sc.roles {
        if let Some(i) = role
            .session
            .iter()
            .position(|s| matches!(s, Step::Publish { .. }))
        {
            role.session.insert(i, Step::Think(secs));
        }
    }
}

/// Adds `bytes` of notification-like JSON text to every publish's payload
/// (the built-in scenario's `--broadcast-pad`), as a `"pad"` field after
/// the timestamp: repetitive as real JSON notifications are, so it
/// compresses about as they do.
pub fn pad_publish(sc: &mut Scenario, bytes: usize) {
    if bytes == 0 {
        return;
    }
    const WORDS: &str =
        "order shipped to warehouse 17, status in_transit, carrier express, eta tomorrow; ";
    let pad: String = WORDS.chars().cycle().take(bytes).collect();
    for role in &mut sc.roles {
        for step in &mut role.session {
            if let Step::Publish { payload, .. } = step {
                *payload = format!(r#"{{"user":"%%user_id%%","body":"%%stamp%%","pad":"{pad}"}}"#);
            }
        }
    }
}

/// A one-line description of a scenario's load, for the terminal;
/// `adaptive`: its users arrive at a rate the controller chooses.
pub fn describe(sc: &Scenario, adaptive: bool) -> String {
    let mut s = String::new();
    match &sc.pusher {
        Some(p) => {
            let channel = sc
                .roles
                .iter()
                .flat_map(|r| &r.session)
                .find_map(|s| match s {
                    Step::Join { topic, .. } => Some(topic.as_str()),
                    _ => None,
                });
            let how = match p.trigger {
                pusher::Trigger::Api => "through the HTTP API",
                pusher::Trigger::ClientEvent => "as client events",
            };
            let _ = write!(
                s,
                "{} (Pusher, app {}, channel {}, broadcasts {how}",
                sc.name,
                p.app_id,
                channel.unwrap_or("-")
            );
        }
        None => {
            let _ = write!(s, "{} ({:?}", sc.name, sc.serializer);
        }
    }
    if adaptive {
        let _ = write!(
            s,
            ", {} users, adaptive arrival from {}/s)",
            sc.total_users(),
            sc.phases.first().map_or(0.0, |p| p.arrival_rate)
        );
        return s;
    }
    for (i, p) in sc.phases.iter().enumerate() {
        let _ = write!(
            s,
            ", phase {}: {} users at {}/s over {:.1}s",
            i + 1,
            p.users(),
            p.arrival_rate,
            p.duration
        );
    }
    s.push(')');
    s
}

#[cfg(test)]
mod tests;
