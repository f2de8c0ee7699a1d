//! `throng tune`: the OS settings from the Phoenix team's 2-million run, and
//! the limits that will cap a run on this machine.
//!
//! Prints each setting with its current value; `--apply` writes them with
//! `sysctl -w` (root). Then it reports the caps: open files per process
//! (soft/hard; each agent and each server process hold at most that many
//! sockets, so a larger run takes several agents and server workers),
//! ephemeral ports per source address, listen backlog and memory.

use std::collections::BTreeMap;
use std::process::Command;

use crate::error::BenchError;
use crate::report::{Lacking, OsSettings};
use crate::sys;

/// The Phoenix team's 2M-connection benchmark's settings (fs.nr_open and the port range added for load generators).
pub const SETTINGS: &[(&str, &str, &str)] = &[
    ("fs.file-max", "12000500", "system-wide open files"),
    (
        "fs.nr_open",
        "20000500",
        "the most one process may raise its open-files limit to",
    ),
    (
        "net.ipv4.tcp_mem",
        "10000000 10000000 10000000",
        "pages all TCP sockets may use",
    ),
    (
        "net.ipv4.tcp_rmem",
        "1024 4096 16384",
        "per-socket receive buffer: small, many sockets",
    ),
    (
        "net.ipv4.tcp_wmem",
        "1024 4096 16384",
        "per-socket send buffer: small, many sockets",
    ),
    ("net.core.rmem_max", "16384", "largest receive buffer"),
    ("net.core.wmem_max", "16384", "largest send buffer"),
    (
        "net.ipv4.ip_local_port_range",
        "1025 65535",
        "ephemeral ports per source address (Tsung's ports_range)",
    ),
    (
        "net.core.somaxconn",
        "65535",
        "listen backlog: arrival bursts wait here",
    ),
    (
        "net.core.netdev_max_backlog",
        "262144",
        "packets a CPU queues on input: every loopback segment passes here, and past it the kernel drops them (not in the Phoenix team's 2M-connection benchmark)",
    ),
    (
        "net.netfilter.nf_conntrack_max",
        "2500000",
        "tracked connections, where netfilter is loaded: each loopback connection is one (not in the Phoenix team's 2M-connection benchmark)",
    ),
];

/// Runs `throng tune`.
pub fn run(apply: bool, connections: Option<u64>) -> Result<(), BenchError> {
    println!("OS settings (from \"The Road to 2 Million WebSocket Connections\"):");
    let mut failed = 0;
    for (name, want, why) in SETTINGS {
        let Some(now) = sys::sysctl_read(name) else {
            if name.starts_with("net.netfilter.") {
                println!(
                    "  {name:<30} absent: netfilter is not loaded, nothing tracks connections"
                );
            } else {
                println!("  {name:<30} cannot be read here");
            }
            continue;
        };
        let ok = now == *want;
        println!(
            "  {:<30} now {:<28} want {:<28} {}",
            name,
            now,
            want,
            if ok { "ok" } else { why }
        );
        if apply && !ok {
            let status = Command::new("sysctl")
                .arg("-w")
                .arg(format!("{name}={want}"))
                .status();
            match status {
                Ok(s) if s.success() => {}
                Ok(s) => {
                    failed += 1;
                    eprintln!(
                        "  sysctl -w {name} failed ({s}); in a container some keys are read-only"
                    );
                }
                Err(e) => {
                    failed += 1;
                    eprintln!("  cannot run sysctl: {e}");
                }
            }
        }
    }
    if !apply {
        println!("  (dry run: `throng tune --apply` runs `sysctl -w` for each; `ulimit -n` is per process: throng raises its soft limit to the hard limit itself)");
    }
    println!();
    print!("{}", limits_report(connections));
    if failed > 0 {
        return Err(BenchError::Limit(format!(
            "{failed} setting(s) could not be applied"
        )));
    }
    Ok(())
}

/// The settings in force, and those a run of `connections` loopback
/// connections (both ends on this machine) needs and lacks:
/// - `fs.file-max`: two files per connection, and room for the rest;
/// - `net.ipv4.tcp_mem`: its top (pages all TCP sockets may use) at least a
///   page per connection, for when a broadcast leaves a frame in every
///   receive queue at once (past it the kernel prunes queues and drops);
/// - `net.core.netdev_max_backlog`: a segment per connection in flight at
///   once when a broadcast goes out (1,000, Debian's default, dropped 293
///   segments in a 100,000-connection run here; 262,144: none at 1,000,000);
/// - `net.netfilter.nf_conntrack_max`, where netfilter is loaded: one entry
///   per connection (past it new connections' SYNs are dropped).
pub fn os_settings(connections: u64) -> OsSettings {
    let settings: BTreeMap<String, String> = SETTINGS
        .iter()
        .filter_map(|(k, _, _)| Some((k.to_string(), sys::sysctl_read(k)?)))
        .collect();
    let tuned = SETTINGS
        .iter()
        .all(|(k, want, _)| settings.get(*k).is_none_or(|v| v == want));
    let last =
        |k: &str| -> Option<u64> { settings.get(k)?.split_whitespace().last()?.parse().ok() };
    let mut lacking = Vec::new();
    let mut need = |name: &str, needed: u64, why: &str| {
        if let Some(now) = last(name).filter(|&v| v < needed) {
            lacking.push(Lacking {
                name: name.into(),
                now: settings
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| now.to_string()),
                needed: format!(">= {needed}"),
                why: why.into(),
            });
        }
    };
    need(
        "fs.file-max",
        connections * 2 + 100_000,
        "each loopback connection is two open files on this machine",
    );
    need(
        "net.ipv4.tcp_mem",
        connections,
        "pages for every socket's queued frame during a broadcast (past it the kernel drops)",
    );
    need(
        "net.core.netdev_max_backlog",
        tune_value("net.core.netdev_max_backlog").map_or(connections, |v| connections.min(v)),
        "a broadcast puts a segment per connection on loopback at once (past the backlog the kernel drops them, and TCP resends each 200 ms+ later)",
    );
    need(
        "net.netfilter.nf_conntrack_max",
        connections + 100_000,
        "one tracked entry per connection (past it new connections' SYNs are dropped)",
    );
    let advice = (!lacking.is_empty()).then(|| "throng tune --apply".to_string());
    OsSettings {
        settings,
        tuned,
        lacking,
        advice,
    }
}

/// The value `throng tune` sets for a one-number setting.
fn tune_value(name: &str) -> Option<u64> {
    SETTINGS
        .iter()
        .find(|(k, _, _)| *k == name)
        .and_then(|(_, v, _)| v.parse().ok())
}

/// What caps a run here, as text.
pub fn limits_report(connections: Option<u64>) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let (soft0, _) = sys::fd_limit();
    let (soft, hard) = sys::raise_fd_limit();
    let per_process = hard.saturating_sub(crate::agent::FD_MARGIN);
    let _ = writeln!(s, "Limits that cap a run:");
    let _ = writeln!(s, "  open files per process          soft {soft0} (raised to {soft}), hard {hard}: one server process or agent holds at most ~{per_process} connections");
    let ports = sys::sysctl_read("net.ipv4.ip_local_port_range")
        .and_then(|r| {
            let v: Vec<u64> = r
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (v.len() == 2).then(|| v[1].saturating_sub(v[0]) + 1)
        })
        .unwrap_or(28_232);
    let _ = writeln!(s, "  ephemeral ports per source addr {ports} per destination (agents bind 8 loopback addresses each, ports picked at connect)");
    if let Some(b) = sys::sysctl_read("net.core.somaxconn") {
        let _ = writeln!(s, "  listen backlog (somaxconn)      {b}");
    }
    if let Some(b) = sys::tcp_ehash_buckets() {
        let _ = writeln!(s, "  TCP established-hash buckets    {b} (net.ipv4.tcp_ehash_entries, set at boot): past ~{b} TCP sockets per machine (a loopback connection is two) every segment's socket lookup walks longer chains; a server booted with thash_entries=N gets N; `throng bench` runs past it in a private network namespace with its own table (--netns)");
    }
    if let Some(f) = sys::sysctl_read("fs.file-max") {
        let _ = writeln!(s, "  system-wide open files          {f}");
    }
    if let Some(m) = sys::mem_total() {
        let _ = writeln!(s, "  memory                          {:.1} GiB (each connection costs kernel socket buffers on both ends, plus the server's and agent's state)", m as f64 / 1073741824.0);
    }
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let _ = writeln!(
        s,
        "  CPUs                            {cpus} (server and agents share them when co-located)"
    );
    if let Some(n) = connections {
        let agents = n.div_ceil(per_process.max(1));
        let server = if n > per_process {
            let w = crate::controller::server_workers(n, hard);
            format!("{w} server workers joined through Redis (`throng bench` starts `throng serve --workers {w}` and a local redis-server itself)")
        } else {
            "one server process".to_string()
        };
        let _ = writeln!(
            s,
            "  for {n} connections: {agents} agent process(es), {server}"
        );
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn reports_limits() {
        let r = super::limits_report(Some(100_000));
        assert!(r.contains("open files per process"));
        assert!(r.contains("agent process"));
        let (_, hard) = crate::sys::fd_limit();
        if hard < 100_000 {
            assert!(r.contains("server workers"), "{r}");
        }
        // The seed's eight, the port range and somaxconn for load generators,
        // the input backlog, conntrack.
        assert_eq!(super::SETTINGS.len(), 11);
        assert_eq!(
            super::tune_value("net.core.netdev_max_backlog"),
            Some(262_144)
        );
        assert!(super::SETTINGS
            .iter()
            .any(|(k, _, _)| *k == "net.netfilter.nf_conntrack_max"));
    }

    #[test]
    fn names_what_a_big_run_lacks() {
        let small = super::os_settings(10);
        assert!(small.lacking.is_empty(), "{small:?}");
        assert!(small.advice.is_none());
        assert!(small.settings.contains_key("net.core.somaxconn"));
        // Past every host's tcp_mem: lacking, with the command that fixes it.
        let huge = super::os_settings(u64::MAX / 4);
        assert!(
            huge.lacking.iter().any(|l| l.name == "net.ipv4.tcp_mem"),
            "{huge:?}"
        );
        assert_eq!(huge.advice.as_deref(), Some("throng tune --apply"));
    }
}
