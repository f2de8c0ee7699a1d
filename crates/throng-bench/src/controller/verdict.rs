//! Whose each error is, and the run's verdict: whether the server, the load
//! generator (with the machine it shares with a co-located server), or
//! nothing was the limit.
//!
//! An error is the server's when the server answered it (a close frame, a
//! refused upgrade or join, a reset) or failed to answer in time while the
//! machine had CPU to spare (or the server itself used most of it); the
//! load generator's when it timed out while an agent was saturated, or the
//! machine was and the agents used more of it than the server (the server
//! cannot be blamed for a queue its own load generator's CPU use built), or
//! when an agent was full; other processes' when they saturated the
//! machine; the kernel's (the load generator's host) when a local resource
//! ran out: ports, files, socket memory; the run's settings' when the
//! server refused the clients' upgrade for their credentials (HTTP 401 or
//! 403): no limit was reached, the bench and the server disagree on auth.

use crate::report::{AdaptiveArrival, Attributed};
use crate::stats::Errors;

pub(super) const SERVER: &str = "server";
pub(super) const LOAD_GENERATOR: &str = "load generator";
pub(super) const KERNEL: &str = "kernel";
pub(super) const OTHERS: &str = "other processes";
/// The bench's flags against the server's settings (auth refused).
pub(super) const SETTINGS: &str = "settings";

/// Timeouts set beside the CPU of the moment they waited through: how many
/// struck while the load generator had saturated an agent or the machine,
/// while other processes had saturated the machine, or neither.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TimeoutContext {
    pub load_generator: u64,
    pub others: u64,
    pub total: u64,
    /// The machine's busiest CPU use while they waited, % of all cores.
    pub machine_pct: f64,
    /// Heartbeats: the interval and the most one went out late, s. Late by
    /// a whole interval, a connection was quiet for two: past Phoenix's
    /// and throng's 60 s idle timeout at phoenix.js's 30 s.
    pub hb_interval_secs: f64,
    pub hb_late_secs: f64,
}

impl TimeoutContext {
    /// Counts `n` timeouts that waited through CPU use `w` (% of one core):
    /// an agent saturated, or the machine saturated with the agents using
    /// more than the server: the load generator's; the machine saturated
    /// mostly by other processes: theirs; else the server's.
    pub fn add(&mut self, n: u64, w: &crate::report::CpuWindow) {
        let capacity = w.cores.max(1) as f64 * 100.0;
        let machine = w.machine_pct.unwrap_or(0.0);
        let agents: f64 = w.agents_pct.iter().sum();
        let agent = w.agents_pct.iter().copied().fold(0.0, f64::max);
        let server = w.server_pct.unwrap_or(0.0);
        self.total += n;
        self.machine_pct = self.machine_pct.max(machine);
        if agent >= 90.0
            || (machine >= 0.9 * capacity && agents > server && agents >= machine - w.throng_pct)
        {
            self.load_generator += n;
        } else if machine >= 0.9 * capacity && machine - w.throng_pct > w.throng_pct {
            self.others += n;
        }
    }
}

/// Each finer kind of error with a count, and whose it is; `jwt`: the
/// clients connected with tokens (`--auth jwt`).
pub(super) fn attribute(e: &Errors, t: TimeoutContext, jwt: bool) -> Vec<Attributed> {
    let mut out = Tally(Vec::new());
    timeouts(&mut out, e, t);
    closes(&mut out, e, t);
    refusals(&mut out, e);
    upgrades_refused(&mut out, e, jwt);
    local_limits(&mut out, e);
    out.push("other", e.other, "unknown", "I/O or protocol errors".into());
    out.0
}

/// The errors attributed so far, in the report's order.
struct Tally(Vec<Attributed>);

impl Tally {
    /// Adds `count` errors of `kind` as `whose`, for `why`; none when 0.
    fn push(&mut self, kind: &str, count: u64, whose: &str, why: String) {
        if count > 0 {
            self.0.push(Attributed {
                kind: kind.into(),
                count,
                whose: whose.into(),
                why,
            });
        }
    }
}

/// Whose most of the timeouts were, and the CPU context that says so.
fn timeout_owner(t: TimeoutContext) -> (&'static str, String) {
    let server = t.total - t.load_generator - t.others;
    if t.load_generator * 2 > t.total {
        (
            LOAD_GENERATOR,
            format!(
                "{} of {} timeouts waited through a saturated agent or machine (up to {:.0}% busy) the load generator used more of than the server: it overloaded the machine it shares with the server",
                t.load_generator, t.total, t.machine_pct
            ),
        )
    } else if t.others * 2 > t.total {
        (
            OTHERS,
            format!(
                "{} of {} timeouts waited through a machine saturated (up to {:.0}% busy) mostly by processes other than the bench and its server",
                t.others, t.total, t.machine_pct
            ),
        )
    } else {
        (
            SERVER,
            format!(
                "{server} of {} timeouts waited while the machine had CPU to spare or the server used most of it",
                t.total
            ),
        )
    }
}

/// The timeouts (TCP, upgrade, reply), all attributed to whose most were.
fn timeouts(out: &mut Tally, e: &Errors, t: TimeoutContext) {
    let d = &e.detail;
    let (whose, context) = timeout_owner(t);
    out.push(
        "timeout_tcp",
        d.timeout_tcp,
        whose,
        format!("no SYN-ACK in time: the server's listen queue was full (it did not accept fast enough) or the SYN was dropped; {context}"),
    );
    out.push(
        "timeout_upgrade",
        d.timeout_upgrade,
        whose,
        format!("connected, but no 101 in time; {context}"),
    );
    out.push(
        "timeout_reply",
        d.timeout_reply,
        whose,
        format!("no reply to a join or push in time; {context}"),
    );
    // Timeouts from before the detail existed (an older agent).
    let detailed = d.timeout_tcp + d.timeout_upgrade + d.timeout_reply;
    out.push(
        "timeout",
        e.timeout.saturating_sub(detailed),
        whose,
        context.clone(),
    );
}

/// Connections the server closed: by close code (an idle close after late
/// heartbeats is the load generator's), reset, or with no close frame.
fn closes(out: &mut Tally, e: &Errors, t: TimeoutContext) {
    let d = &e.detail;
    for (code, n) in &d.close_codes {
        let starved =
            *code == 1001 && t.hb_interval_secs > 0.0 && t.hb_late_secs >= t.hb_interval_secs;
        if starved {
            out.push(
                &format!("close_code_{code}"),
                *n,
                LOAD_GENERATOR,
                format!(
                    "the server closed with code 1001 (going away: an idle timeout) connections its agents left quiet: heartbeats due every {:.0} s went out up to {:.1} s late from agents starved of CPU",
                    t.hb_interval_secs, t.hb_late_secs
                ),
            );
            continue;
        }
        out.push(
            &format!("close_code_{code}"),
            *n,
            SERVER,
            format!("the server closed with code {code} ({})", close_code(*code)),
        );
    }
    out.push(
        "reset",
        d.reset,
        SERVER,
        "the connection was reset with no close frame (the server, or its kernel, dropped it)"
            .into(),
    );
    out.push(
        "eof",
        d.eof,
        SERVER,
        "the server closed the connection with no close frame".into(),
    );
    let closed = d.close_codes.values().sum::<u64>() + d.reset + d.eof;
    out.push(
        "closed",
        e.closed.saturating_sub(closed),
        SERVER,
        "the server closed the connection".into(),
    );
}

/// What the server refused: the connection, the upgrade, a join or push.
fn refusals(out: &mut Tally, e: &Errors) {
    out.push(
        "refused",
        e.refused,
        SERVER,
        "connection refused (ECONNREFUSED): nothing listening, or the server's listen backlog overflowed".into(),
    );
    out.push(
        "error_reply",
        e.error_reply,
        SERVER,
        "the server refused a join or push (its answer: the application's choice)".into(),
    );
}

/// Upgrades the server answered with something other than 101, by HTTP
/// status: 401 and 403 are its auth refusing the clients (the run's
/// settings: `jwt` says whether they carried tokens), the others its own.
fn upgrades_refused(out: &mut Tally, e: &Errors, jwt: bool) {
    let d = &e.detail;
    for (&status, &n) in &d.handshake_status {
        let kind = format!("handshake_{status}");
        match status {
            401 | 403 => out.push(&kind, n, SETTINGS, auth_refused(status, jwt)),
            404 => out.push(
                &kind,
                n,
                SETTINGS,
                "the server answered the upgrade with HTTP 404 (not found): it has no WebSocket endpoint at the scenario's path; check --target and the scenario's connect path".into(),
            ),
            _ => out.push(
                &kind,
                n,
                SERVER,
                format!("the server answered the upgrade with HTTP {status} instead of 101"),
            ),
        }
    }
    out.push(
        "handshake",
        e.handshake
            .saturating_sub(d.handshake_status.values().sum::<u64>()),
        SERVER,
        "the server's answer to the upgrade was no 101 (malformed, too long, or a wrong Sec-WebSocket-Accept)".into(),
    );
}

/// What an auth refusal of the upgrade means, and the fix.
fn auth_refused(status: u16, jwt: bool) -> String {
    if jwt {
        format!("the server refused the clients' tokens (HTTP {status}): --auth-jwt-secret must be the secret the server checks tokens with (its --auth-jwt-secret or THRONG_AUTH_JWT_SECRET)")
    } else {
        format!("the server refused the clients' authentication (HTTP {status}): it wants a token; pass --auth jwt and --auth-jwt-secret with the secret the server checks tokens with")
    }
}

/// Local resources that ran out: the kernel's (ports, files, socket
/// memory) and an agent's capacity.
fn local_limits(out: &mut Tally, e: &Errors) {
    let d = &e.detail;
    out.push(
        "ports",
        d.ports,
        KERNEL,
        "no local port left (EADDRNOTAVAIL): `sysctl -w net.ipv4.ip_local_port_range=\"1025 65535\"` widens the port range".into(),
    );
    out.push(
        "fds",
        d.fds,
        KERNEL,
        "no file descriptor left (EMFILE, ENFILE): the open-files limits (`throng tune`)".into(),
    );
    out.push(
        "buffers",
        d.buffers,
        KERNEL,
        "no socket memory left (ENOBUFS): `throng tune --apply --connections N` raises net.ipv4.tcp_mem".into(),
    );
    out.push(
        "capacity",
        d.capacity,
        LOAD_GENERATOR,
        "an agent already held all the connections it can (more agents: --agents)".into(),
    );
    let local = d.ports + d.fds + d.buffers + d.capacity;
    out.push(
        "local_limit",
        e.local_limit.saturating_sub(local),
        KERNEL,
        "a local resource ran out".into(),
    );
}

/// A close code's meaning (RFC 6455 section 7.4.1).
fn close_code(code: u16) -> &'static str {
    match code {
        1000 => "normal closure",
        1001 => "going away",
        1002 => "protocol error",
        1003 => "unsupported data",
        1005 => "no code given",
        1007 => "invalid payload",
        1008 => "policy violation",
        1009 => "message too big",
        1011 => "server error",
        1012 => "service restart",
        1013 => "try again later",
        _ => "application-defined",
    }
}

/// The run's verdict: who was the limit, in one line.
pub(super) fn verdict(
    attributed: &[Attributed],
    adaptive: Option<&AdaptiveArrival>,
    target: u64,
    joined: u64,
) -> String {
    let count = |whose: &str| -> u64 {
        attributed
            .iter()
            .filter(|a| a.whose == whose && a.kind != "error_reply")
            .map(|a| a.count)
            .sum()
    };
    let kinds = |whose: &str| -> String {
        attributed
            .iter()
            .filter(|a| a.whose == whose)
            .map(|a| format!("{} {}", a.kind, a.count))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (server, generator, kernel, others) = (
        count(SERVER),
        count(LOAD_GENERATOR),
        count(KERNEL),
        count(OTHERS),
    );
    // Refused for their credentials (or sent where no socket is): no
    // limit was reached, and no other figure of the run means much.
    let settings = count(SETTINGS);
    if settings > 0 && settings >= server + generator + kernel + others {
        let first = attributed.iter().find(|a| a.whose == SETTINGS);
        return format!(
            "{}; {settings} of {target} users were refused so (no limit was reached)",
            first.map_or("", |a| a.why.as_str())
        );
    }
    if others > server + generator + kernel {
        return format!("other processes on the machine were the limit: {others} errors struck while they saturated it ({})", kinds(OTHERS));
    }
    if server > 0 && server >= generator + kernel {
        return format!(
            "the server was the limit: {server} errors were its ({})",
            kinds(SERVER)
        );
    }
    if generator + kernel > 0 {
        let what = if kernel > generator {
            format!("the load generator's host settings were the limit: {kernel} errors ({}); run `throng tune --apply --connections N` with the run's connections", kinds(KERNEL))
        } else {
            format!(
                "the load generator was the limit: {generator} errors were its ({})",
                kinds(LOAD_GENERATOR)
            )
        };
        return if server > 0 {
            format!("{what}; {server} were the server's ({})", kinds(SERVER))
        } else {
            what
        };
    }
    match adaptive {
        Some(a) if a.sustainable_per_sec.is_some() => {
            let side = if a.limited_by.starts_with("a server thread")
                || a.limited_by.starts_with("the server")
            {
                "the server"
            } else if a.limited_by.starts_with("an agent") {
                "the load generator"
            } else {
                "the machine the server and load generator share"
            };
            format!(
                "{side} set the arrival rate: {:.0}/s sustained ({}); {joined} of {target} joined, no errors",
                a.sustainable_per_sec.unwrap_or(0.0),
                a.limited_by
            )
        }
        Some(a) => format!(
            "no limit reached: {joined} of {target} joined with no errors; arrivals rose to {:.0}/s and no handshake waited past {} ms, where adaptive arrival backs off",
            a.max_per_sec,
            super::arrival::TARGET_MS
        ),
        None if joined >= target => {
            format!("no limit reached: {joined} of {target} joined with no errors on the schedule given")
        }
        None => format!(
            "{joined} of {target} joined; no limit reached (a refused join is the application's answer)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_says_whose_it_is() {
        let mut e = Errors {
            timeout: 3,
            closed: 2,
            local_limit: 1,
            ..Default::default()
        };
        e.detail.timeout_tcp = 3;
        e.detail.close_codes.insert(1011, 2);
        e.detail.ports = 1;
        // Timeouts on a machine with CPU to spare: the server's.
        let mut calm = TimeoutContext::default();
        calm.add(3, &cpu(120.0, 60.0, 40.0));
        let a = attribute(&e, calm, false);
        let find = |k: &str| a.iter().find(|x| x.kind == k).unwrap().clone();
        assert_eq!(find("timeout_tcp").whose, SERVER);
        assert_eq!(find("close_code_1011").whose, SERVER);
        assert!(find("close_code_1011").why.contains("server error"));
        assert_eq!(find("ports").whose, KERNEL);
        assert_eq!(a.len(), 3, "{a:?}");
        assert!(verdict(&a, None, 10, 4).starts_with("the server was the limit: 5 errors"));
        // The same timeouts while the agents saturated the machine: the
        // load generator's.
        let mut busy = TimeoutContext::default();
        busy.add(3, &cpu(199.0, 60.0, 130.0));
        let a = attribute(&e, busy, false);
        assert_eq!(
            a.iter().find(|x| x.kind == "timeout_tcp").unwrap().whose,
            LOAD_GENERATOR
        );
        let v = verdict(&a, None, 10, 4);
        assert!(
            v.starts_with("the load generator was the limit: 3 errors"),
            "{v}"
        );
        assert!(v.contains("2 were the server's"), "{v}");
        // Saturated by someone else: theirs.
        let mut others = TimeoutContext::default();
        others.add(3, &cpu(199.0, 5.0, 5.0));
        let a = attribute(&e, others, false);
        assert_eq!(
            a.iter().find(|x| x.kind == "timeout_tcp").unwrap().whose,
            OTHERS
        );
        // A saturated agent: the load generator's, however busy the machine.
        let mut agent = TimeoutContext::default();
        agent.add(3, &cpu(120.0, 10.0, 95.0));
        assert_eq!(agent.load_generator, 3);
    }

    /// An idle close (1001) is the server's, unless the agents sent their
    /// heartbeats a whole interval late.
    #[test]
    fn idle_closes_after_late_heartbeats_are_the_load_generators() {
        let mut e = Errors {
            closed: 5,
            ..Default::default()
        };
        e.detail.close_codes.insert(1001, 5);
        let mut t = TimeoutContext {
            hb_interval_secs: 30.0,
            hb_late_secs: 2.0,
            ..Default::default()
        };
        assert_eq!(attribute(&e, t, false)[0].whose, SERVER);
        t.hb_late_secs = 31.0;
        let a = attribute(&e, t, false);
        assert_eq!(a[0].whose, LOAD_GENERATOR);
        assert!(a[0].why.contains("31.0 s late"), "{}", a[0].why);
    }

    /// Upgrades refused with 403 are the run's settings, not a limit: the
    /// verdict says what to pass, with or without tokens already.
    #[test]
    fn a_refused_upgrade_names_its_status_and_the_fix() {
        let mut e = Errors {
            handshake: 50,
            ..Default::default()
        };
        e.detail.handshake_status.insert(403, 49);
        let a = attribute(&e, TimeoutContext::default(), false);
        assert_eq!(a[0].kind, "handshake_403");
        assert_eq!(a[0].whose, SETTINGS);
        assert_eq!((a[1].kind.as_str(), a[1].count), ("handshake", 1));
        let v = verdict(&a, None, 50, 0);
        assert!(
            v.starts_with("the server refused the clients' authentication (HTTP 403): it wants a token; pass --auth jwt and --auth-jwt-secret"),
            "{v}"
        );
        assert!(!v.contains("was the limit"), "{v}");
        let a = attribute(&e, TimeoutContext::default(), true);
        let v = verdict(&a, None, 50, 0);
        assert!(
            v.starts_with(
                "the server refused the clients' tokens (HTTP 403): --auth-jwt-secret must be"
            ),
            "{v}"
        );
        // Another status is the server's own answer.
        e.detail.handshake_status = [(503, 50)].into();
        let a = attribute(&e, TimeoutContext::default(), false);
        assert_eq!(a[0].whose, SERVER);
        assert!(verdict(&a, None, 50, 0).starts_with("the server was the limit"));
    }

    /// A CPU window: the machine, the server and one agent, % of a core.
    fn cpu(machine: f64, server: f64, agent: f64) -> crate::report::CpuWindow {
        crate::report::CpuWindow {
            cores: 2,
            machine_pct: Some(machine),
            server_pct: Some(server),
            agents_pct: vec![agent],
            throng_pct: server + agent,
            ..Default::default()
        }
    }

    #[test]
    fn with_no_error_the_verdict_names_what_set_the_rate() {
        let a = AdaptiveArrival {
            sustainable_per_sec: Some(8000.0),
            limited_by: "the machine's CPU: 2 cores 199% of 200% busy".into(),
            ..Default::default()
        };
        let v = verdict(&[], Some(&a), 100, 100);
        assert!(
            v.starts_with(
                "the machine the server and load generator share set the arrival rate: 8000/s"
            ),
            "{v}"
        );
        let none = AdaptiveArrival {
            max_per_sec: 25_000.0,
            ..Default::default()
        };
        assert!(verdict(&[], Some(&none), 100, 100).starts_with("no limit reached"));
        // A refused join is the application's answer, not a limit.
        let refused = [Attributed {
            kind: "error_reply".into(),
            count: 5,
            whose: SERVER.into(),
            why: String::new(),
        }];
        assert!(verdict(&refused, None, 10, 5).starts_with("5 of 10 joined"));
    }
}
