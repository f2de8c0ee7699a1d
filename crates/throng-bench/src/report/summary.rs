//! The summary table printed at the end of a run, from the [`Report`].
//!
//! Counts print grouped (`19,000`), fractions with two decimals below 100
//! and rounded above, and a figure the run could not get as `-`.

use std::fmt::Write as _;

use super::Report;

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
        Some(b) if b.abs() >= 1048576.0 => format!("{:.1} MiB", b / 1048576.0),
        Some(b) => format!("{b:.0} B"),
        None => "-".into(),
    }
}

/// The summary table.
pub fn table(r: &Report) -> String {
    let mut s = String::new();
    let row = |s: &mut String, k: &str, v: String| {
        let _ = writeln!(s, "  {k:<34} {v}");
    };
    let _ = writeln!(s, "\n== throng bench: {} ==", r.scenario.description);
    let c = &r.connections;
    row(&mut s, "connections target", int(c.target));
    row(&mut s, "connected (handshakes)", int(c.connected));
    row(&mut s, "joined", int(c.joined));
    row(
        &mut s,
        "open at plateau (server says)",
        format!(
            "{} ({})",
            int(c.open_at_plateau),
            opt(c.server_conns_at_plateau)
        ),
    );
    let a = &r.arrival;
    row(
        &mut s,
        "arrival: joins/s achieved (target)",
        format!(
            "{} ({}), peak {} joins/s (best second), ramp {} s",
            float(a.per_sec),
            opt(a.target_per_sec),
            float(a.peak_per_sec),
            float(a.ramp_secs)
        ),
    );
    for (name, h) in [
        ("connect latency ms", &r.connect),
        ("join latency ms", &r.join),
    ] {
        row(
            &mut s,
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
    let b = &r.broadcast;
    if b.sent > 0 {
        row(
            &mut s,
            "broadcasts sent / receipts",
            format!("{} / {}", int(b.sent), int(b.receivers)),
        );
        row(
            &mut s,
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
            &mut s,
            "time to last receiver ms",
            format!(
                "worst {}  median {}",
                float(b.last_ms),
                float(b.last_p50_ms)
            ),
        );
    }
    let m = &r.messages;
    row(
        &mut s,
        "messages/s out / in (clients)",
        format!("{} / {}", float(m.out_per_sec), float(m.in_per_sec)),
    );
    let kinds: Vec<String> = r
        .errors
        .by_kind
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    row(
        &mut s,
        "errors",
        format!(
            "{}{}",
            int(r.errors.total),
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            }
        ),
    );
    row(
        &mut s,
        "server RSS per connection",
        bytes(r.server.bytes_per_conn),
    );
    row(
        &mut s,
        "server CPU during ramp-up",
        format!("{}% of a core", opt(r.server.cpu_pct_ramp)),
    );
    row(
        &mut s,
        "agent RSS per connection",
        format!(
            "{} (Conn struct {} B)",
            bytes(r.agent.bytes_per_conn),
            int(r.agent.conn_struct_bytes as u64)
        ),
    );
    row(
        &mut s,
        "kernel Slab per connection",
        format!(
            "{} (machine-wide, both ends)",
            bytes(r.kernel.bytes_per_conn)
        ),
    );
    if let Some(b) = r.kernel.tcp_ehash_buckets {
        row(
            &mut s,
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
    let cpus: Vec<String> = r
        .agent
        .processes
        .iter()
        .map(|p| format!("{}%", opt(p.cpu_pct_ramp)))
        .collect();
    row(
        &mut s,
        "agent CPU during ramp-up",
        format!("{} agent(s): {}", cpus.len(), cpus.join(", ")),
    );
    let st = &r.storm;
    row(
        &mut s,
        "disconnect storm",
        format!(
            "{} dropped; server at 0 after {} s using {} CPU s",
            int(st.connections),
            opt(st.secs_to_zero),
            opt(st.server_cpu_secs)
        ),
    );
    row(&mut s, "bottleneck (ramp-up)", r.bottleneck.clone());
    if let Some(b) = &r.broadcast_bottleneck {
        row(&mut s, "bottleneck (broadcasts)", b.clone());
    }
    s
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
        let t = table(&Report::default());
        assert!(t.contains("connections target"), "{t}");
        assert!(
            !t.contains("broadcast latency"),
            "no broadcasts, no row: {t}"
        );
    }
}
