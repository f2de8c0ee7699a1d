//! The handshake rounds' run (the clients are [`crate::handshakes`]): on
//! the embedded server, once the run's load has left it, [`ROUNDS`]
//! rounds each of new clients (no ticket: over TLS a full handshake) and
//! of the same clients returning (over TLS each offering the ticket the
//! server sent it), the server's CPU read around each round less what it
//! spends idle over as long (its timers, its workers' Redis links).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::probe::ServerProbe;
use crate::handshakes::{Clients, Round};
use crate::join::tls::TlsPlan;
use crate::report::Handshakes;

/// Rounds of each kind; the report gives the median.
pub(super) const ROUNDS: u32 = 3;
/// Connects and joins in flight at once.
const WINDOW: usize = 64;
/// Each client's connect, handshake, upgrade and join.
const TIMEOUT: Duration = Duration::from_secs(20);
/// How long the server's idle CPU is read before each round.
const IDLE: Duration = Duration::from_millis(500);

/// What the rounds need: where, how the clients get in, how many.
pub(super) struct Setup {
    pub target: SocketAddr,
    pub tls: Option<TlsPlan>,
    pub jwt_secret: Option<String>,
    /// A topic the run's users joined (the rules let clients join it).
    pub topic: String,
    pub sockets: u64,
    /// The first token's user number (past the run's users).
    pub first_user: u64,
}

/// The source address of round `r`'s clients of `kind` (0: new, 1:
/// returning): each round its own, so none meets another's TIME_WAIT.
fn source(r: u32, kind: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 31, r as u8, 2 + kind))
}

impl Setup {
    /// Runs the rounds and reports them.
    pub fn measure(&self, probe: &ServerProbe) -> Handshakes {
        let mut h = Handshakes {
            tls: self.tls.is_some(),
            sockets: self.sockets,
            rounds: ROUNDS,
            window: WINDOW,
            note: note(self.tls.is_some()),
            ..Handshakes::default()
        };
        eprintln!(
            "handshake rounds: {ROUNDS} x ({} new clients, then the same returning){}",
            self.sockets,
            if self.tls.is_some() { " over TLS" } else { "" }
        );
        let mut clients = match Clients::new(
            self.tls.as_ref(),
            self.jwt_secret.as_deref(),
            self.sockets as usize,
            self.first_user,
        ) {
            Ok(c) => c,
            Err(e) => {
                h.first_error = Some(format!("the clients' TLS: {e}"));
                return h;
            }
        };
        let (mut new, mut ret) = (Vec::new(), Vec::new());
        for r in 0..ROUNDS {
            clients.forget();
            new.push(self.timed(probe, &clients, source(r, 0), false, &mut h));
            ret.push(self.timed(probe, &clients, source(r, 1), true, &mut h));
        }
        let (cpu, rate) = medians(&new);
        (h.new_cpu_us, h.new_per_sec) = (cpu, rate);
        let (cpu, rate) = medians(&ret);
        (h.returning_cpu_us, h.returning_per_sec) = (cpu, rate);
        h.new_rounds_cpu_us = new.iter().filter_map(|r| r.0).collect();
        h.returning_rounds_cpu_us = ret.iter().filter_map(|r| r.0).collect();
        h
    }

    /// One round: the server's idle CPU rate first, then the round; its
    /// CPU per joined client (µs, less the idle rate over the round) and
    /// its joins a second. Its sockets are closed after the CPU is read.
    fn timed(
        &self,
        probe: &ServerProbe,
        clients: &Clients,
        src: IpAddr,
        returning: bool,
        h: &mut Handshakes,
    ) -> (Option<f64>, f64) {
        let cpu = || probe.proc().map(|p| p.cpu_secs);
        let a = cpu();
        std::thread::sleep(IDLE);
        let b = cpu();
        let started = Instant::now();
        let round = clients.round(self.target, src, &self.topic, WINDOW, TIMEOUT);
        let c = cpu();
        let secs = started.elapsed().as_secs_f64();
        let round = round.unwrap_or_else(|e| Round {
            failed: self.sockets,
            first_error: Some(e.to_string()),
            ..Round::default()
        });
        let per_client = match (a, b, c) {
            (Some(a), Some(b), Some(c)) if round.ok > 0 => {
                let idle = (b - a) / IDLE.as_secs_f64();
                Some(((c - b) - idle * secs).max(0.0) * 1e6 / round.ok as f64)
            }
            _ => None,
        };
        if returning {
            h.returning += round.ok;
            h.resumed += round.resumed;
        }
        h.failed += round.failed;
        if h.first_error.is_none() {
            h.first_error.clone_from(&round.first_error);
        }
        let rate = round.ok as f64 / round.elapsed.as_secs_f64().max(1e-9);
        // Closed now: the server's work for the closes falls before the
        // next round's idle reading.
        drop(round);
        (per_client, rate)
    }
}

/// The median round's CPU per client and rate (by CPU).
fn medians(rounds: &[(Option<f64>, f64)]) -> (Option<f64>, f64) {
    let mut v: Vec<(f64, f64)> = rounds
        .iter()
        .filter_map(|(c, r)| c.map(|c| (c, *r)))
        .collect();
    if v.is_empty() {
        return (None, 0.0);
    }
    v.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (c, r) = v[v.len() / 2];
    (Some(c), r)
}

/// What the rounds' figures are.
fn note(tls: bool) -> String {
    let way = if tls {
        "new clients do a full TLS handshake; returning clients offer the ticket the server sent them and resume where the process that issued it still holds its key (a restarted server, or another worker of --workers, does a full handshake instead: see `resumed`)"
    } else {
        "plain TCP: new and returning clients connect the same way"
    };
    format!(
        "server CPU per connect + upgrade + join (and the token's check with --auth jwt), less the server's idle CPU over as long, on the server the run's load has left; {ROUNDS} rounds of each, the median round's figure; {way}"
    )
}
