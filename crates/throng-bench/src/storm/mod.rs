//! The reconnect storm scenario (`throng bench --storm`): many clients on a
//! few topics that keep history, numbered messages published through the
//! server API, every client's socket cut at once and rejoining with
//! `since` = the last ref it saw; each client checks that it saw every
//! number of its topic exactly once, in order. The run itself is
//! `controller::storm`; this module owns what its processes share:
//!
//! - [`Orders`], [`Command`] and [`Status`]: what the controller tells a
//!   client process (its orders as an argument, commands as JSON lines on
//!   its stdin) and what the process answers (a status line on its stdout
//!   every [`STATUS_EVERY`]). Pipes to a child of our own, not the agents'
//!   TCP protocol: the storm runs only on this machine, and a pipe needs
//!   no authentication.
//! - [`client`]: the client process, [`publisher`]: the numbered messages
//!   through the server API, [`report`]: the figures.
//!
//! With `--tls` each client connects over TLS keeping its own session
//! ticket (`join::tls`), so a reconnect resumes where the server still
//! knows the ticket's key; with `--auth jwt` each connects with its own
//! user's token, its secret handed to the client processes in their
//! environment ([`JWT_SECRET_ENV`]), never on a command line. With
//! `--storm-restart` the server is stopped with SIGTERM (its drain closes
//! every socket with 1012) and started again instead of the cut: the
//! clients then reconnect as phoenix.js does, after its backoff, counting
//! each failed connect by kind and each close by its code.
//!
//! Why not the agents' engine: the engine runs a scenario of steps on an
//! arrival schedule; the storm needs per-client state across reconnects
//! (the last ref and number) and a cut on command, which tokio tasks on one
//! thread per process give in little code (as the hooks scenario's clients).

pub mod client;
pub mod publisher;
pub mod report;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use report::StormReport;

use crate::join::tls::TlsPlan;

/// The environment variable that hands a storm client process
/// `--auth jwt`'s secret (a command line is readable by any user).
pub const JWT_SECRET_ENV: &str = "THRONG_BENCH_JWT_SECRET";

/// The event every numbered message is published as; its payload is
/// `{"n": N}`, N counting from 1 on each topic.
pub const EVENT: &str = "n";

/// How often a client process prints its status.
pub const STATUS_EVERY: Duration = Duration::from_millis(200);

/// The name of topic `t`.
pub fn topic(t: u32) -> String {
    format!("storm:{t}")
}

/// A client process's orders.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Orders {
    /// Where clients connect: client `g` to `targets[(g / topics) % len]`
    /// (several independent servers, or one address for a cluster).
    pub targets: Vec<SocketAddr>,
    pub topics: u32,
    /// This process's clients: global indices `first..first + count`;
    /// client `g` joins topic `g % topics`.
    pub first: u64,
    pub count: u64,
    /// This process's index (its source addresses).
    pub process: u32,
    /// Connects and joins in flight at once (a closed loop).
    pub window: usize,
    /// `--tls`: connect over TLS, trusting this CA.
    #[serde(default)]
    pub tls: Option<TlsPlan>,
    /// `--auth jwt`: each client connects with its own token (user
    /// `u<g>`), signed with the secret in [`JWT_SECRET_ENV`].
    #[serde(default)]
    pub jwt: bool,
}

impl Orders {
    /// Client `g`'s topic index and target.
    pub fn of(&self, g: u64) -> (u32, SocketAddr) {
        let t = (g % u64::from(self.topics)) as u32;
        let s = (g / u64::from(self.topics)) as usize % self.targets.len();
        (t, self.targets[s])
    }
}

/// A command to a client process (one JSON line on its stdin).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Close every socket at once; each client reconnects and rejoins with
    /// `since` = the last ref it saw.
    Cut,
    /// Count the clients whose last number on their topic is at least
    /// this (one per topic), and when the last of them got there.
    Target(Vec<u64>),
    /// Close everything, print the last status and exit.
    Stop,
}

/// A client process's counts (cumulative), one JSON line each
/// [`STATUS_EVERY`]; the controller sums them over processes.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Status {
    pub clients: u64,
    /// Joined now.
    pub joined: u64,
    /// `ok` join replies, all rounds.
    pub joins: u64,
    /// `ok` join replies after a cut (or a close by the server).
    pub rejoins: u64,
    /// Rejoins answered `recovered: true` / anything else.
    pub recovered: u64,
    pub not_recovered: u64,
    /// Numbered messages received, and those of them replayed (carrying
    /// the rejoin's join_ref).
    pub received: u64,
    pub replayed: u64,
    /// A number more than one past the last: events, and numbers skipped.
    pub gaps: u64,
    pub missing: u64,
    /// A number at or below the last.
    pub duplicates: u64,
    /// Clients at the [`Command::Target`], and CLOCK_REALTIME (ns) when
    /// the last of them got there.
    pub at_target: u64,
    pub target_ns: u64,
    /// CLOCK_REALTIME (ns) of the latest recovered reply, and of the
    /// latest replayed message.
    pub last_recovered_ns: u64,
    pub last_replayed_ns: u64,
    /// Connects that failed (retried), sockets the server closed, joins
    /// refused or timed out, frames that did not parse.
    pub connect_errors: u64,
    pub server_closes: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// The failed connects by kind ([`client::FailKind`]): `refused`
    /// (nothing listening), `reset` (closed before the upgrade's answer),
    /// `http_503` (the server's refusal, with Retry-After), `http_NNN`,
    /// `tls`, `timeout`, `other`.
    #[serde(default)]
    pub connect_failures: BTreeMap<String, u64>,
    /// Sockets the server closed, by close code (`none`: the connection
    /// ended without a close frame).
    #[serde(default)]
    pub closes_by_code: BTreeMap<String, u64>,
    /// CLOCK_REALTIME (ns) of the first close with code 1012 (0: none).
    #[serde(default)]
    pub first_1012_ns: u64,
    /// TLS handshakes that joined: full, and resumed with the client's
    /// ticket (all rounds).
    #[serde(default)]
    pub tls_full: u64,
    #[serde(default)]
    pub tls_resumed: u64,
    /// The process's last line.
    pub done: bool,
}

impl Status {
    /// Adds another process's counts (times: the latest).
    pub fn add(&mut self, o: &Status) {
        self.clients += o.clients;
        self.joined += o.joined;
        self.joins += o.joins;
        self.rejoins += o.rejoins;
        self.recovered += o.recovered;
        self.not_recovered += o.not_recovered;
        self.received += o.received;
        self.replayed += o.replayed;
        self.gaps += o.gaps;
        self.missing += o.missing;
        self.duplicates += o.duplicates;
        self.at_target += o.at_target;
        self.target_ns = self.target_ns.max(o.target_ns);
        self.last_recovered_ns = self.last_recovered_ns.max(o.last_recovered_ns);
        self.last_replayed_ns = self.last_replayed_ns.max(o.last_replayed_ns);
        self.connect_errors += o.connect_errors;
        self.server_closes += o.server_closes;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
        for (k, v) in &o.connect_failures {
            *self.connect_failures.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.closes_by_code {
            *self.closes_by_code.entry(k.clone()).or_default() += v;
        }
        if o.first_1012_ns != 0 {
            self.first_1012_ns = match self.first_1012_ns {
                0 => o.first_1012_ns,
                t => t.min(o.first_1012_ns),
            };
        }
        self.tls_full += o.tls_full;
        self.tls_resumed += o.tls_resumed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_spread_over_topics_and_targets() {
        let o = Orders {
            targets: vec![
                "127.0.0.1:1".parse().unwrap(),
                "127.0.0.1:2".parse().unwrap(),
            ],
            topics: 10,
            first: 0,
            count: 40,
            process: 0,
            window: 1,
            tls: None,
            jwt: false,
        };
        let mut per = std::collections::HashMap::new();
        for g in 0..40 {
            *per.entry(o.of(g)).or_insert(0) += 1;
        }
        // 10 topics x 2 servers, 2 clients each.
        assert_eq!(per.len(), 20);
        assert!(per.values().all(|&c| c == 2));
    }

    #[test]
    fn statuses_add_up_kinds_and_keep_the_first_1012() {
        let mut a = Status {
            first_1012_ns: 0,
            ..Status::default()
        };
        a.connect_failures.insert("refused".into(), 2);
        let mut b = Status {
            first_1012_ns: 50,
            tls_resumed: 3,
            ..Status::default()
        };
        b.connect_failures.insert("refused".into(), 1);
        b.closes_by_code.insert("1012".into(), 4);
        let c = Status {
            first_1012_ns: 40,
            ..Status::default()
        };
        a.add(&b);
        a.add(&c);
        assert_eq!(a.connect_failures["refused"], 3);
        assert_eq!(a.closes_by_code["1012"], 4);
        assert_eq!(a.first_1012_ns, 40);
        assert_eq!(a.tls_resumed, 3);
    }

    #[test]
    fn commands_are_one_json_line() {
        for c in [Command::Cut, Command::Target(vec![3, 4]), Command::Stop] {
            let line = serde_json::to_string(&c).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(serde_json::from_str::<Command>(&line).unwrap(), c);
        }
    }
}
