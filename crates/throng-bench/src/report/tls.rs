//! The report's TLS figures: the handshake rounds ([`Handshakes`]: server
//! CPU per connect of a new client and of a returning one) and, with
//! `--compare-plain`, the TLS run beside the same run in plaintext
//! ([`TlsVsPlain`]).

use serde::{Deserialize, Serialize};

/// The handshake rounds, on the embedded server once the run's load is
/// gone: rounds of `sockets` clients connecting, upgrading and joining,
/// `window` at a time, each socket held open until its round is over.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Handshakes {
    /// Over TLS (else plain TCP).
    pub tls: bool,
    pub sockets: u64,
    pub rounds: u32,
    pub window: usize,
    /// Server CPU per connect + upgrade (+ token check) + join, µs, less
    /// the server's idle CPU over as long: new clients (over TLS a full
    /// handshake) and the same clients returning (over TLS each offering
    /// the ticket the server sent it); the median round's, and each round's.
    pub new_cpu_us: Option<f64>,
    pub returning_cpu_us: Option<f64>,
    pub new_rounds_cpu_us: Vec<f64>,
    pub returning_rounds_cpu_us: Vec<f64>,
    /// Joins a second in the median round of each.
    pub new_per_sec: f64,
    pub returning_per_sec: f64,
    /// Returning clients that joined, and those whose TLS handshake
    /// resumed their session.
    pub returning: u64,
    pub resumed: u64,
    /// Clients that failed (all rounds), and the first failure.
    pub failed: u64,
    pub first_error: Option<String>,
    /// What the figures include and what limits them.
    pub note: String,
}

/// One figure of the plaintext run and of the TLS run.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Pair {
    pub plain: Option<f64>,
    pub tls: Option<f64>,
    /// `tls / plain` (`null` without both).
    pub ratio: Option<f64>,
}

impl Pair {
    pub fn of(plain: Option<f64>, tls: Option<f64>) -> Pair {
        let ratio = match (plain, tls) {
            (Some(p), Some(t)) if p > 0.0 => Some(t / p),
            _ => None,
        };
        Pair { plain, tls, ratio }
    }
}

/// `--compare-plain`: the same run in plaintext first, then over TLS.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct TlsVsPlain {
    /// Server memory per idle joined socket (PSS), bytes; and what TLS
    /// adds (`tls - plain`).
    pub pss_bytes_per_conn: Pair,
    pub pss_added_by_tls: Option<f64>,
    /// The slowest and the median broadcast's last receiver, ms.
    pub broadcast_last_ms: Pair,
    pub broadcast_last_p50_ms: Pair,
    /// Server CPU per broadcast receipt, µs.
    pub server_cpu_us_per_receiver: Pair,
    /// Server CPU per join over the ramp-up, µs (over TLS: full handshakes).
    pub server_cpu_us_per_join: Pair,
    /// The handshake rounds: server CPU per connect + join of a new client
    /// (a plain connect beside a full TLS handshake), and of a returning
    /// client (a plain connect beside a resumed TLS handshake), µs.
    pub connect_cpu_us_new: Pair,
    pub connect_cpu_us_returning: Pair,
    /// The plaintext run: users joined, errors, and the criteria it failed.
    pub plain_joined: u64,
    pub plain_errors: u64,
    pub plain_failures: Vec<String>,
    pub plain_duration_secs: f64,
}

impl TlsVsPlain {
    /// The TLS run `tls` beside the plaintext run `plain`.
    pub fn of(plain: &super::Report, tls: &super::Report) -> TlsVsPlain {
        let pss = Pair::of(
            plain.server.pss_bytes_per_conn,
            tls.server.pss_bytes_per_conn,
        );
        let sent = |r: &super::Report| r.broadcast.receivers > 0;
        let last = |r: &super::Report| sent(r).then_some(r.broadcast.last_ms);
        let last_p50 = |r: &super::Report| sent(r).then_some(r.broadcast.last_p50_ms);
        let rounds = |r: &super::Report, returning: bool| {
            r.handshakes.as_ref().and_then(|h| {
                if returning {
                    h.returning_cpu_us
                } else {
                    h.new_cpu_us
                }
            })
        };
        TlsVsPlain {
            pss_bytes_per_conn: pss,
            pss_added_by_tls: pss.plain.zip(pss.tls).map(|(p, t)| t - p),
            broadcast_last_ms: Pair::of(last(plain), last(tls)),
            broadcast_last_p50_ms: Pair::of(last_p50(plain), last_p50(tls)),
            server_cpu_us_per_receiver: Pair::of(
                plain.broadcast.server_cpu_us_per_receiver,
                tls.broadcast.server_cpu_us_per_receiver,
            ),
            server_cpu_us_per_join: Pair::of(
                plain.arrival.server_cpu_us_per_join,
                tls.arrival.server_cpu_us_per_join,
            ),
            // A plaintext client connects the same way new or returning:
            // both TLS figures stand beside its new clients' figure.
            connect_cpu_us_new: Pair::of(rounds(plain, false), rounds(tls, false)),
            connect_cpu_us_returning: Pair::of(rounds(plain, false), rounds(tls, true)),
            plain_joined: plain.connections.joined,
            plain_errors: plain.errors.total,
            plain_failures: plain.failed_criteria(),
            plain_duration_secs: plain.duration_secs,
        }
    }
}

/// The summary's rows of the handshake rounds and of `--compare-plain`.
pub(super) fn rows(s: &mut String, r: &super::Report, row: &dyn Fn(&mut String, &str, String)) {
    let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} us"));
    if let Some(h) = &r.handshakes {
        let how = if h.tls { "over TLS" } else { "plain TCP" };
        let resumed = if h.tls {
            format!(
                "; {} of {} returning clients resumed",
                h.resumed, h.returning
            )
        } else {
            String::new()
        };
        let failed = match &h.first_error {
            Some(e) => format!("; {} failed (first: {e})", h.failed),
            None => String::new(),
        };
        row(
            s,
            "server CPU per connect + join",
            format!(
                "{how}, median of {} rounds of {} clients: new {} ({:.0}/s), returning {} ({:.0}/s){resumed}{failed}",
                h.rounds,
                h.sockets,
                us(h.new_cpu_us),
                h.new_per_sec,
                us(h.returning_cpu_us),
                h.returning_per_sec
            ),
        );
    }
    let Some(c) = &r.tls_vs_plain else {
        return;
    };
    let pair = |p: &Pair, unit: &str| {
        let v = |x: Option<f64>| match x {
            Some(x) if x < 100.0 => format!("{x:.1}{unit}"),
            Some(x) => format!("{x:.0}{unit}"),
            None => "-".to_string(),
        };
        let ratio = p.ratio.map_or(String::new(), |x| format!(" ({x:.2}x)"));
        format!("plaintext {}, TLS {}{ratio}", v(p.plain), v(p.tls))
    };
    row(
        s,
        "TLS against plaintext (--compare-plain)",
        format!(
            "the plaintext run first: {} joined, {} error(s), {:.0} s",
            c.plain_joined, c.plain_errors, c.plain_duration_secs
        ),
    );
    let added = c
        .pss_added_by_tls
        .map_or(String::new(), |a| format!("; TLS adds {a:.0} B"));
    row(
        s,
        "  memory per idle joined socket (PSS)",
        pair(&c.pss_bytes_per_conn, " B") + &added,
    );
    row(
        s,
        "  broadcasts' last receiver (slowest)",
        pair(&c.broadcast_last_ms, " ms"),
    );
    row(
        s,
        "  broadcasts' last receiver (median)",
        pair(&c.broadcast_last_p50_ms, " ms"),
    );
    row(
        s,
        "  server CPU per receiver",
        pair(&c.server_cpu_us_per_receiver, " us"),
    );
    row(
        s,
        "  server CPU per join (ramp-up)",
        pair(&c.server_cpu_us_per_join, " us"),
    );
    row(
        s,
        "  connect + join, new client",
        pair(&c.connect_cpu_us_new, " us"),
    );
    row(
        s,
        "  connect + join, returning client",
        pair(&c.connect_cpu_us_returning, " us") + " (TLS: resumed)",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_stands_beside_plaintext() {
        let mut plain = super::super::Report::default();
        plain.server.pss_bytes_per_conn = Some(2000.0);
        plain.broadcast.receivers = 10;
        plain.broadcast.last_ms = 100.0;
        plain.handshakes = Some(Handshakes {
            new_cpu_us: Some(40.0),
            returning_cpu_us: Some(41.0),
            ..Handshakes::default()
        });
        let mut tls = plain.clone();
        tls.server.pss_bytes_per_conn = Some(3200.0);
        tls.broadcast.last_ms = 130.0;
        tls.handshakes = Some(Handshakes {
            tls: true,
            new_cpu_us: Some(400.0),
            returning_cpu_us: Some(60.0),
            ..Handshakes::default()
        });
        let c = TlsVsPlain::of(&plain, &tls);
        assert_eq!(c.pss_added_by_tls, Some(1200.0));
        assert_eq!(c.broadcast_last_ms.ratio, Some(1.3));
        assert_eq!(c.connect_cpu_us_new.ratio, Some(10.0));
        assert_eq!(c.connect_cpu_us_returning.ratio, Some(1.5));
        assert_eq!(c.server_cpu_us_per_join, Pair::default());
        let none = Pair::of(Some(0.0), Some(1.0));
        assert_eq!(none.ratio, None);
        let mut report = tls.clone();
        report.tls_vs_plain = Some(c);
        let t = super::super::summary::table(&report);
        assert!(
            t.contains("plaintext 2000 B, TLS 3200 B (1.60x); TLS adds 1200 B"),
            "{t}"
        );
        assert!(t.contains("new 400 us"), "{t}");
    }
}
