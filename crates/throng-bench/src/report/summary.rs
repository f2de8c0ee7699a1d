//! The summary table printed at the end of a run, from the [`Report`].
//!
//! Counts print grouped (`19,000`), fractions with two decimals below 100
//! and rounded above, and a figure the run could not get as `-`.

use std::fmt::Write as _;

use super::{PresenceReport, Report, Spread, TrafficRow};

/// A count: `1,234,567`.
fn int(n: u64) -> String {
    group(n as i64)
}

/// A measured figure: two decimals below 100, rounded and grouped above.
fn float(f: f64) -> String {
    if f.abs() >= 100.0 {
        group(f.round() as i64)
    } else {
        format!("{f:.2}")
    }
}

/// A figure the run may not have: `-` when it has not.
fn opt(f: Option<f64>) -> String {
    f.map_or_else(|| "-".into(), float)
}

fn group(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn bytes(b: Option<f64>) -> String {
    match b {
        Some(b) if b.abs() >= 1073741824.0 => format!("{:.2} GiB", b / 1073741824.0),
        Some(b) if b.abs() >= 1048576.0 => format!("{:.1} MiB", b / 1048576.0),
        Some(b) if b.abs() >= 10240.0 => format!("{:.1} KiB", b / 1024.0),
        Some(b) => format!("{b:.0} B"),
        None => "-".into(),
    }
}

/// Segments the kernel dropped at a full input backlog, and what to do.
fn backlog_line(drops: u64, os: &crate::report::OsSettings) -> String {
    let max = os
        .settings
        .get("net.core.netdev_max_backlog")
        .map_or("?", |v| v.as_str());
    if drops == 0 {
        format!("0 (net.core.netdev_max_backlog {max})")
    } else {
        format!(
            "{} segments (net.core.netdev_max_backlog {max}): the kernel's; TCP resent each 200 ms or more later, so receipts behind them were late; `throng tune --apply --connections 50000` raises it (`throng tune --revert` undoes it)",
            int(drops)
        )
    }
}

/// The OS settings in force, in one line: whether they were `throng
/// tune`'s, the ones that matter most, and what the run lacked.
fn os_line(r: &Report) -> String {
    let o = &r.os;
    let get = |k: &str| o.settings.get(k).map_or("-", |v| v.as_str());
    let mut line = format!(
        "{}: somaxconn {}, tcp_mem {}, netdev_max_backlog {}, tcp_rmem {}, file-max {}, nf_conntrack_max {}",
        if o.tuned {
            "enough for this run"
        } else {
            "short of this run's needs"
        },
        get("net.core.somaxconn"),
        get("net.ipv4.tcp_mem"),
        get("net.core.netdev_max_backlog"),
        get("net.ipv4.tcp_rmem"),
        get("fs.file-max"),
        get("net.netfilter.nf_conntrack_max"),
    );
    if !o.lacking.is_empty() {
        let names: Vec<&str> = o.lacking.iter().map(|l| l.name.as_str()).collect();
        let _ = write!(
            line,
            "; this run lacked {}: run `{}` first (`throng tune --revert` undoes it)",
            names.join(", "),
            o.advice.as_deref().unwrap_or("throng tune --apply")
        );
    }
    line
}

/// Messages, bytes and their rates: `19,000 msgs (1,900/s), 1.2 MiB (120 KiB/s)`.
fn traffic(t: &TrafficRow) -> String {
    format!(
        "{} msgs ({}/s), {} ({}/s)",
        int(t.messages),
        float(t.messages_per_sec),
        bytes(Some(t.bytes as f64)),
        bytes(Some(t.bytes_per_sec))
    )
}

/// The presence rows: the rule, traffic by kind, per join, join visibility.
fn presence_rows(s: &mut String, p: &PresenceReport, row: &dyn Fn(&mut String, &str, String)) {
    row(
        s,
        "presence",
        match &p.rule {
            Some(rule) => format!(
                "{rule} ({}){}",
                p.mode.as_deref().unwrap_or("-"),
                if p.server_args.is_empty() {
                    String::new()
                } else {
                    format!("; embedded server: {}", p.server_args.join(" "))
                }
            ),
            None => "no rule: presence messages from the server all the same".into(),
        },
    );
    let window = format!("over {} s", float(p.window_secs));
    row(s, "presence_state to clients", traffic(&p.state));
    row(s, "presence_diff to clients", traffic(&p.diff));
    row(s, "presence_count to clients", traffic(&p.count));
    row(
        s,
        "other messages to clients",
        format!("{} ({window})", traffic(&p.other)),
    );
    if let Some(secs) = p.settle_secs {
        row(
            s,
            "presence traffic after the ramp-up",
            format!("{} s until the last presence message", float(secs)),
        );
    }
    row(
        s,
        "presence per join",
        format!(
            "{} msgs, {} ({} presence joins)",
            float(p.messages_per_join),
            bytes(Some(p.bytes_per_join)),
            int(p.joins)
        ),
    );
    let v = &p.join_visible;
    row(
        s,
        "join visible to all subscribers ms",
        if p.rule.is_none() {
            "-".into()
        } else {
            format!(
                "p50 {}  p99 {}  max {} ({} joins seen, {} unseen)",
                float(v.p50_ms),
                float(v.p99_ms),
                float(v.max_ms),
                int(v.count),
                int(p.join_visible_unseen)
            )
        },
    );
}

/// One row of the table.
fn row(s: &mut String, k: &str, v: String) {
    let _ = writeln!(s, "  {k:<34} {v}");
}

/// What the table's own words mean, printed under it.
const GLOSSARY: &str = concat!(
    "  Words used above:\n",
    "    receipt    one broadcast message arriving at one client (3 broadcasts to 1,000 clients: 3,000 receipts)\n",
    "    floor      the same fan-out as a broadcast, written by minimal writers with no server logic on this\n",
    "               machine, measured in the same run: `1.2x the floor` is 20% over what the machine itself needs\n",
    "    plateau    everyone connected, before the broadcasts; its `quiet` part has only heartbeats flowing\n",
    "    storm      every client disconnecting at once at the end\n",
    "    adaptive   with no --arrival-rate, the bench raises the arrival rate while handshakes stay quick and\n",
    "               lowers it when they queue; `sustained` is the rate it could keep\n",
);

/// The summary table: the result, each section, then the glossary.
pub fn table(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n== throng bench: {} ==", r.scenario.description);
    row(
        &mut s,
        "result",
        if r.failures.is_empty() {
            "passed: every user joined, no error, every broadcast sent".into()
        } else {
            format!("FAILED: {}", r.failures.join("; "))
        },
    );
    row(&mut s, "verdict", r.verdict.clone());
    agent_rows(&mut s, r);
    arrival_rows(&mut s, r);
    broadcast_rows(&mut s, r);
    if let Some(p) = &r.presence {
        presence_rows(&mut s, p, &row);
    }
    traffic_rows(&mut s, r);
    resource_rows(&mut s, r);
    super::tls::rows(&mut s, r, &row);
    end_rows(&mut s, r);
    s.push_str(GLOSSARY);
    s
}

/// Agents lost (the run ended early) and agents that were slow.
fn agent_rows(s: &mut String, r: &Report) {
    for l in &r.agents_lost {
        row(
            s,
            "agent lost (the run ended early)",
            format!(
                "agent {} (pid {}) went away during the {}: {}; its last progress ({:.1} s before): {}; the figures below are those so far",
                l.agent, l.pid, l.phase, l.why, l.silent_secs, l.last_progress
            ),
        );
    }
    for a in &r.slow_agents {
        row(
            s,
            "slow agent (waited for)",
            format!(
                "agent {} (pid {}) sent nothing for {:.0} s from the {} (its process {}), then went on",
                a.agent, a.pid, a.silent_secs, a.phase, a.state
            ),
        );
    }
}

/// Connections, arrival and handshake latency.
fn arrival_rows(s: &mut String, r: &Report) {
    let c = &r.connections;
    row(s, "connections target", int(c.target));
    row(s, "connected (handshakes)", int(c.connected));
    row(s, "joined", int(c.joined));
    row(
        s,
        "open at plateau (server says)",
        format!(
            "{} ({})",
            int(c.open_at_plateau),
            opt(c.server_conns_at_plateau)
        ),
    );
    let a = &r.arrival;
    match &a.adaptive {
        Some(ad) => {
            row(
                s,
                "arrival: joins/s achieved (adaptive)",
                format!(
                    "{}, peak {} joins/s (best second), ramp {} s; rate {} -> {}/s, lowered {} time(s) as handshakes queued",
                    float(a.per_sec),
                    float(a.peak_per_sec),
                    float(a.ramp_secs),
                    float(ad.start_per_sec),
                    float(ad.max_per_sec),
                    ad.cuts
                ),
            );
            row(
                s,
                "arrival rate sustained",
                match ad.sustainable_per_sec {
                    Some(r) => format!("{}/s, set by {}", float(r), ad.limited_by),
                    None => format!("no limit found: {}", ad.limited_by),
                },
            );
        }
        None => row(
            s,
            "arrival: joins/s achieved (target)",
            format!(
                "{} ({}), peak {} joins/s (best second), ramp {} s",
                float(a.per_sec),
                opt(a.target_per_sec),
                float(a.peak_per_sec),
                float(a.ramp_secs)
            ),
        ),
    }
    for (name, h) in [
        ("connect latency ms", &r.connect),
        ("join latency ms", &r.join),
    ] {
        row(
            s,
            name,
            format!(
                "p50 {}  p90 {}  p99 {}  max {}",
                float(h.p50_ms),
                float(h.p90_ms),
                float(h.p99_ms),
                float(h.max_ms)
            ),
        );
    }
}

/// Broadcasts, against the floor when measured.
fn broadcast_rows(s: &mut String, r: &Report) {
    let b = &r.broadcast;
    if b.sent > 0 {
        row(
            s,
            "broadcasts sent / receipts",
            format!("{} / {}", int(b.sent), int(b.receivers)),
        );
        row(
            s,
            "broadcast latency ms",
            format!(
                "p50 {}  p90 {}  p99 {}  max {}",
                float(b.p50_ms),
                float(b.p90_ms),
                float(b.p99_ms),
                float(b.max_ms)
            ),
        );
        row(
            s,
            "time to last receiver ms",
            format!(
                "worst {}  median {}",
                float(b.last_ms),
                float(b.last_p50_ms)
            ),
        );
        if let Some(f) = &r.floor {
            floor_rows(s, r, f);
        } else {
            row(
                s,
                "CPU per receiver us",
                format!(
                    "server {}, agents {}, machine {}",
                    opt(b.server_cpu_us_per_receiver),
                    opt(b.agent_cpu_us_per_receiver),
                    opt(b.machine_cpu_us_per_receiver)
                ),
            );
        }
    }
}

/// The floor's rounds, the broadcasts' ratio to it, and CPU per receiver
/// beside the floor's.
fn floor_rows(s: &mut String, r: &Report, f: &crate::report::FloorReport) {
    let b = &r.broadcast;
    row(
        s,
        "floor (same fan-out, no server) ms",
        format!(
            "last receiver median {}  worst {} (rounds {}; {} writer(s) x {} thread(s){}){}",
            float(f.last_p50_ms),
            float(f.last_ms),
            f.rounds_last_ms
                .iter()
                .map(|x| float(*x))
                .collect::<Vec<_>>()
                .join(", "),
            f.writers,
            f.threads_per_writer,
            if f.heartbeats_per_sec > 0.0 {
                format!(
                    "; over {} heartbeats/s, answered",
                    float(f.heartbeats_per_sec)
                )
            } else {
                String::new()
            },
            if f.train_last_ms.is_empty() {
                String::new()
            } else {
                format!(
                    "; on the broadcasts' schedule ({} s apart): {}",
                    f.train_interval_secs,
                    f.train_last_ms
                        .iter()
                        .map(|x| float(*x))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
    );
    if f.scale > 1.0 {
        row(
            s,
            "floor sample",
            format!(
                "measured on {} of the {} users' sockets, times above x{:.2} (per receiver; as measured: {} ms); see floor.note for what scaling does not carry (--floor-sample 0: every socket)",
                int(f.sockets),
                int(f.users),
                f.scale,
                f.sample_rounds_last_ms
                    .iter()
                    .map(|x| float(*x))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    if let Some(why) = &f.incomplete {
        row(s, "floor incomplete", why.clone());
    }
    row(
        s,
        "last receiver / floor",
        format!(
            "{} median, {} worst: {}",
            b.floor_ratio.map_or("-".into(), |x| format!("{x:.2}x")),
            b.floor_ratio_worst
                .map_or("-".into(), |x| format!("{x:.2}x")),
            b.floor_compared.as_deref().unwrap_or("-")
        ),
    );
    row(
        s,
        "CPU per receiver us",
        format!(
            "server {}, agents {}, machine {}; floor: writers {}, agents {}, machine {}",
            opt(b.server_cpu_us_per_receiver),
            opt(b.agent_cpu_us_per_receiver),
            opt(b.machine_cpu_us_per_receiver),
            float(f.writer_cpu_us_per_receiver),
            float(f.reader_cpu_us_per_receiver),
            opt(f.machine_cpu_us_per_receiver)
        ),
    );
}

/// Messages, bytes and errors.
fn traffic_rows(s: &mut String, r: &Report) {
    let m = &r.messages;
    row(
        s,
        "messages/s out / in (clients)",
        format!("{} / {}", float(m.out_per_sec), float(m.in_per_sec)),
    );
    row(
        s,
        "bytes to clients, per join",
        format!(
            "{} in all, {} per join",
            bytes(Some(m.bytes_in as f64)),
            bytes(Some(m.bytes_in_per_join))
        ),
    );
    let kinds: Vec<String> = r
        .errors
        .attributed
        .iter()
        .map(|a| format!("{} {}: {}", a.kind, int(a.count), a.whose))
        .collect();
    row(
        s,
        "errors",
        format!(
            "{}{}{}",
            int(r.errors.total),
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            },
            match (
                r.errors.closed_by_second.first(),
                r.errors.closed_by_second.last()
            ) {
                (Some(a), Some(b)) => format!(
                    "; the server's closes from {} s to {} s after arrivals began",
                    a.0, b.0
                ),
                _ => String::new(),
            }
        ),
    );
}

/// Memory and CPU per connection, the kernel's share.
fn resource_rows(s: &mut String, r: &Report) {
    if r.server.auth == "jwt" {
        let server = if r.server.embedded {
            "the embedded server runs with --auth jwt"
        } else {
            "signed with --auth-jwt-secret"
        };
        row(
            s,
            "auth",
            format!("jwt: each socket its own user's token ({server})"),
        );
    }
    row(
        s,
        "server RSS per connection",
        format!(
            "{} ({} without the binary's shared code pages; {} PSS, every page counted once)",
            bytes(r.server.bytes_per_conn),
            bytes(r.server.private_bytes_per_conn),
            bytes(r.server.pss_bytes_per_conn)
        ),
    );
    row(
        s,
        "server CPU during ramp-up",
        format!(
            "{}% of a core; {} us per join",
            opt(r.server.cpu_pct_ramp),
            opt(r.arrival.server_cpu_us_per_join)
        ),
    );
    row(
        s,
        "agent RSS per connection",
        format!(
            "{} (Conn struct {} B)",
            bytes(r.agent.bytes_per_conn),
            int(r.agent.conn_struct_bytes as u64)
        ),
    );
    row(
        s,
        "kernel Slab per connection",
        format!(
            "{} (machine-wide, both ends)",
            bytes(r.kernel.bytes_per_conn)
        ),
    );
    if let Some(d) = r.kernel.backlog_drops {
        row(s, "kernel input backlog drops", backlog_line(d, &r.os));
    }
    if let Some(b) = r.kernel.tcp_ehash_buckets {
        row(
            s,
            "kernel TCP hash table",
            format!(
                "{} buckets for {} sockets{}",
                int(b),
                int(r.connections.target * 2),
                if r.kernel.private_netns {
                    " (the run's own network namespace)"
                } else {
                    ""
                }
            ),
        );
    }
    let cpus: Vec<f64> = r
        .agent
        .processes
        .iter()
        .filter_map(|p| p.cpu_pct_ramp)
        .collect();
    row(
        s,
        "agent CPU during ramp-up",
        format!("{} (% of a core)", Spread::of(&cpus).agents_pct()),
    );
}

/// Heartbeats, OS settings, the storm and the bottlenecks.
fn end_rows(s: &mut String, r: &Report) {
    let h = &r.heartbeats;
    row(
        s,
        "heartbeats (background load)",
        if h.interval_secs > 0.0 {
            format!(
                "every {} s per connection, spread evenly{}: {}/s while held, at most {} ms late; with only heartbeats flowing (the quiet plateau) the server used {}%, {}, the machine {}% (of a core)",
                float(h.interval_secs),
                if h.grid_secs > 0.0 {
                    format!(" on a {} s grid the agents share", float(h.grid_secs))
                } else {
                    String::new()
                },
                float(h.per_sec_at_hold),
                h.late_max_ms,
                opt(h.background.server_pct),
                h.background.agents.agents_pct(),
                opt(h.background.machine_pct)
            )
        } else {
            "none".into()
        },
    );
    row(s, "OS settings in force", os_line(r));
    let st = &r.storm;
    row(
        s,
        "disconnect storm",
        format!(
            "{} dropped; server at 0 after {} s using {} CPU s",
            int(st.connections),
            opt(st.secs_to_zero),
            opt(st.server_cpu_secs)
        ),
    );
    row(s, "bottleneck (ramp-up)", r.bottleneck.clone());
    if let Some(b) = &r.broadcast_bottleneck {
        row(s, "bottleneck (broadcasts)", b.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(int(1234567), "1,234,567");
        assert_eq!(float(1.234), "1.23");
        assert_eq!(float(1234.5), "1,235");
        assert_eq!(float(-1234.0), "-1,234");
        assert_eq!(opt(None), "-");
        assert_eq!(bytes(Some(3.0 * 1048576.0)), "3.0 MiB");
        assert_eq!(bytes(Some(136882.0)), "133.7 KiB");
        assert_eq!(bytes(Some(9000.0)), "9000 B");
        let t = table(&Report::default());
        assert!(t.contains("connections target"), "{t}");
        let many = Spread::of(&[1.0, 2.0, 3.0]).agents_pct();
        assert_eq!(many, "agents 6% in all (3: mean 2.0%, max 3.0%)");
        assert!(
            !t.contains("broadcast latency"),
            "no broadcasts, no row: {t}"
        );
        assert!(!t.contains("presence_diff"), "no presence, no row: {t}");
        let r = Report {
            presence: Some(PresenceReport {
                rule: Some("rooms:lobby=param:user".into()),
                mode: Some("list".into()),
                diff: TrafficRow {
                    messages: 2000,
                    bytes: 3 << 20,
                    ..Default::default()
                },
                joins: 1000,
                join_visible: crate::stats::Summary {
                    p99_ms: 812.5,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        };
        let t = table(&r);
        assert!(t.contains("2,000 msgs") && t.contains("3.0 MiB"), "{t}");
        assert!(t.contains("p99 813"), "{t}");
    }
}
