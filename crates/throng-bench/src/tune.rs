//! `throng tune`: the OS settings a planned run needs, and the limits that
//! will cap it on this machine.
//!
//! Each setting is shown with its value now, what a run of `--connections`
//! needs and why, and the value the Phoenix team's 2M-connection benchmark
//! used (<https://phoenixframework.org/blog/the-road-to-2-million-websocket-connections>).
//! `--apply` (root) only raises what the run lacks, never lowers anything:
//! the benchmark's 4 KiB socket buffers save memory at two million sockets
//! but slow co-located broadcasts, so they are shown, not applied. The
//! values it replaces are saved first ([`state_file`]), and `--revert`
//! writes them back. Sysctls are files under a root ([`Sysctls`]),
//! `/proc/sys` on the host and a temporary directory in the tests.
//! Then it reports the caps: open files per process (soft/hard; each agent
//! and each server process hold at most that many sockets, so a larger run
//! takes several agents and server workers), ephemeral ports per source
//! address, listen backlog and memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::BenchError;
use crate::report::{Lacking, OsSettings};
use crate::sys;

/// The run size `throng tune` plans for without `--connections`.
pub const DEFAULT_CONNECTIONS: u64 = 1_000_000;

/// From this many connections a run names `net.core.netdev_max_backlog`:
/// 19,000 ran with Debian's 1,000 and no segment dropped, 100,000 dropped
/// 293 (BENCHMARKS.md, "The kernel's input backlog").
pub const BACKLOG_FROM: u64 = 50_000;

/// One OS setting: its name, the Phoenix benchmark's value, and what a run
/// of `n` connections needs (the least value of each field; `None`: never
/// applied, only shown).
pub struct Setting {
    pub name: &'static str,
    pub benchmark: &'static str,
    pub why: &'static str,
    pub need: fn(u64) -> Option<Vec<u64>>,
}

/// Every setting `throng tune` shows.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "fs.file-max",
        benchmark: "12000500",
        why: "system-wide open files: each loopback connection is two",
        need: |n| Some(vec![n * 2 + 100_000]),
    },
    Setting {
        name: "fs.nr_open",
        benchmark: "20000500",
        why: "the most one process may raise its open-files limit to",
        need: |n| Some(vec![n.min(20_000_500) + 1000]),
    },
    Setting {
        name: "net.ipv4.tcp_mem",
        benchmark: "10000000 10000000 10000000",
        why: "pages all TCP sockets may use (min, pressure, max): a broadcast leaves a frame in every receive queue at once, and past it the kernel drops",
        need: |n| Some(vec![n, n, n]),
    },
    Setting {
        name: "net.ipv4.tcp_rmem",
        benchmark: "1024 4096 16384",
        why: "per-socket receive buffer: not applied, the benchmark's small buffers save memory at 2M sockets but slow co-located broadcasts",
        need: |_| None,
    },
    Setting {
        name: "net.ipv4.tcp_wmem",
        benchmark: "1024 4096 16384",
        why: "per-socket send buffer: not applied, as tcp_rmem",
        need: |_| None,
    },
    Setting {
        name: "net.core.rmem_max",
        benchmark: "16384",
        why: "largest receive buffer: not applied, as tcp_rmem",
        need: |_| None,
    },
    Setting {
        name: "net.core.wmem_max",
        benchmark: "16384",
        why: "largest send buffer: not applied, as tcp_rmem",
        need: |_| None,
    },
    Setting {
        name: "net.ipv4.ip_local_port_range",
        benchmark: "1025 65535",
        why: "ephemeral ports per source address: not applied, each agent connects from 8 loopback addresses, 8 times the range",
        need: |_| None,
    },
    Setting {
        name: "net.core.somaxconn",
        benchmark: "65535",
        why: "listen backlog: arrival bursts wait here",
        need: |n| Some(vec![n.min(65_535)]),
    },
    Setting {
        name: "net.core.netdev_max_backlog",
        benchmark: "262144",
        why: "packets a CPU queues on input: a broadcast puts a segment per connection on loopback at once, and past the backlog the kernel drops them (TCP resends 200 ms+ later)",
        need: |n| (n >= BACKLOG_FROM).then(|| vec![n.min(262_144)]),
    },
    Setting {
        name: "net.netfilter.nf_conntrack_max",
        benchmark: "2500000",
        why: "tracked connections, where netfilter is loaded: one per loopback connection, and past it new connections' SYNs are dropped",
        need: |n| Some(vec![n + 100_000]),
    },
];

/// The sysctls under a root directory: `/proc/sys` on the host.
pub struct Sysctls {
    root: PathBuf,
}

impl Sysctls {
    /// The host's (or this network namespace's).
    pub fn host() -> Sysctls {
        Sysctls::at("/proc/sys")
    }

    /// Files under `root` (a fake tree in tests).
    pub fn at(root: impl Into<PathBuf>) -> Sysctls {
        Sysctls { root: root.into() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name.replace('.', "/"))
    }

    /// A value, its fields separated by one space (`None`: absent).
    pub fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.path(name))
            .ok()
            .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
    }

    pub fn write(&self, name: &str, value: &str) -> std::io::Result<()> {
        std::fs::write(self.path(name), value)
    }
}

/// A change `--apply` would make: from `now` to `to`, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub name: &'static str,
    pub now: String,
    pub to: String,
    pub why: &'static str,
}

/// What a run of `n` connections lacks here: each setting below its need
/// raised field by field to it, nothing lowered.
pub fn plan(ctl: &Sysctls, n: u64) -> Vec<Change> {
    SETTINGS
        .iter()
        .filter_map(|s| {
            let now = ctl.read(s.name)?;
            let need = (s.need)(n)?;
            let fields: Vec<u64> = now
                .split_whitespace()
                .map(|f| f.parse().ok())
                .collect::<Option<_>>()?;
            if fields.len() != need.len() || fields.iter().zip(&need).all(|(f, w)| f >= w) {
                return None;
            }
            let to: Vec<String> = fields
                .iter()
                .zip(&need)
                .map(|(f, w)| (*f).max(*w).to_string())
                .collect();
            Some(Change {
                name: s.name,
                now,
                to: to.join(" "),
                why: s.why,
            })
        })
        .collect()
}

/// Where `--apply` saves the values it replaces: `$XDG_STATE_HOME/throng`,
/// else `/var/lib/throng` for root, else `~/.local/state/throng`.
pub fn state_file() -> PathBuf {
    let dir = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d).join("throng"),
        None if sys::is_root() => PathBuf::from("/var/lib/throng"),
        None => std::env::var_os("HOME")
            .map_or_else(|| PathBuf::from("."), PathBuf::from)
            .join(".local/state/throng"),
    };
    dir.join("tune-previous.json")
}

/// Saves `changes`' values now to `state` (keeping the values an earlier
/// `--apply` saved: a revert restores what was there before the first),
/// then writes each change. Returns how many could not be written.
pub fn apply(ctl: &Sysctls, changes: &[Change], state: &Path) -> Result<usize, BenchError> {
    let mut saved = read_state(state)?;
    for c in changes {
        saved
            .entry(c.name.to_string())
            .or_insert_with(|| c.now.clone());
    }
    if let Some(dir) = state.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(state, serde_json::to_string_pretty(&saved)?)?;
    let mut failed = 0;
    for c in changes {
        match ctl.write(c.name, &c.to) {
            Ok(()) => println!("  set {:<30} {} -> {}", c.name, c.now, c.to),
            Err(e) => {
                failed += 1;
                eprintln!(
                    "  cannot set {} ({e}): run as root; in a container some keys are read-only",
                    c.name
                );
            }
        }
    }
    Ok(failed)
}

/// Writes back the values `--apply` saved in `state`, and removes it.
pub fn revert(ctl: &Sysctls, state: &Path) -> Result<usize, BenchError> {
    let saved = read_state(state)?;
    if saved.is_empty() {
        println!(
            "nothing to revert: {} holds no saved values",
            state.display()
        );
        return Ok(0);
    }
    let mut failed = 0;
    for (name, value) in &saved {
        let now = ctl.read(name).unwrap_or_default();
        match ctl.write(name, value) {
            Ok(()) => println!("  restored {name:<30} {now} -> {value}"),
            Err(e) => {
                failed += 1;
                eprintln!("  cannot restore {name} to {value} ({e}): run as root");
            }
        }
    }
    if failed == 0 {
        std::fs::remove_file(state)?;
    }
    Ok(failed)
}

fn read_state(state: &Path) -> Result<BTreeMap<String, String>, BenchError> {
    match std::fs::read_to_string(state) {
        Ok(s) => serde_json::from_str(&s).map_err(|e| {
            BenchError::Limit(format!(
                "{}: {e}: not a file `throng tune --apply` wrote; move it away",
                state.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(e.into()),
    }
}

/// Runs `throng tune` on the host: show, `--apply` or `--revert`.
pub fn run(apply_it: bool, revert_it: bool, connections: Option<u64>) -> Result<(), BenchError> {
    let ctl = Sysctls::host();
    let state = state_file();
    if revert_it {
        let failed = revert(&ctl, &state)?;
        return if failed > 0 {
            Err(BenchError::Limit(format!(
                "{failed} setting(s) could not be restored; the saved values stay in {}",
                state.display()
            )))
        } else {
            Ok(())
        };
    }
    let n = connections.unwrap_or(DEFAULT_CONNECTIONS);
    let changes = plan(&ctl, n);
    print!("{}", show(&ctl, n, connections.is_some(), &changes));
    let mut failed = 0;
    if apply_it && !changes.is_empty() {
        failed = apply(&ctl, &changes, &state)?;
        println!(
            "  previous values saved to {}; `throng tune --revert` restores them",
            state.display()
        );
    } else if !changes.is_empty() {
        println!(
            "  (dry run: `throng tune --apply{}` makes the {} change(s) above as root, saving the values now to {}; `ulimit -n` is per process: throng raises its soft limit to the hard limit itself)",
            connections.map_or(String::new(), |n| format!(" --connections {n}")),
            changes.len(),
            state.display()
        );
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

/// Every setting: now, what the run needs (or why it is left alone), and
/// the benchmark's value.
fn show(ctl: &Sysctls, n: u64, given: bool, changes: &[Change]) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "OS settings for a run of {n} connections{}; `bench`: the value in the Phoenix team's 2M-connection benchmark (https://phoenixframework.org/blog/the-road-to-2-million-websocket-connections):\n",
        if given { "" } else { " (--connections N plans another size)" }
    );
    for set in SETTINGS {
        let Some(now) = ctl.read(set.name) else {
            let _ = writeln!(
                s,
                "  {:<30} absent{}",
                set.name,
                if set.name.starts_with("net.netfilter.") {
                    ": netfilter is not loaded, nothing tracks connections"
                } else {
                    ""
                }
            );
            continue;
        };
        let verdict = match changes.iter().find(|c| c.name == set.name) {
            Some(c) => format!("raise to {}: {}", c.to, c.why),
            None if (set.need)(n).is_some() => "enough".to_string(),
            None if (set.need)(1 << 40).is_some() => "enough at this size".to_string(),
            None => set.why.to_string(),
        };
        let _ = writeln!(
            s,
            "  {:<30} now {:<26} bench {:<26} {verdict}",
            set.name, now, set.benchmark
        );
    }
    if changes.is_empty() {
        let _ = writeln!(s, "  nothing to change for {n} connections");
    }
    s
}

/// The settings in force, and those a run of `connections` loopback
/// connections (both ends on this machine) needs and lacks ([`plan`]).
pub fn os_settings(connections: u64) -> OsSettings {
    let ctl = Sysctls::host();
    let settings: BTreeMap<String, String> = SETTINGS
        .iter()
        .filter_map(|s| Some((s.name.to_string(), ctl.read(s.name)?)))
        .collect();
    let lacking: Vec<Lacking> = plan(&ctl, connections)
        .into_iter()
        .map(|c| Lacking {
            name: c.name.into(),
            now: c.now,
            needed: format!(">= {}", c.to),
            why: c.why.into(),
        })
        .collect();
    let advice =
        (!lacking.is_empty()).then(|| format!("throng tune --apply --connections {connections}"));
    OsSettings {
        settings,
        tuned: lacking.is_empty(),
        lacking,
        advice,
    }
}

/// Open files a server worker keeps back from its hard limit when the
/// controller sizes `--workers`: room for the worker's own files and for the
/// kernel's uneven spread of connections over `SO_REUSEPORT` listeners, so
/// that no worker reaches its limit.
const WORKER_MARGIN: u64 = 600;

/// Server workers for `users` connections, each holding at most its hard
/// open-files limit less [`WORKER_MARGIN`].
pub(crate) fn server_workers(users: u64, hard: u64) -> u64 {
    users.div_ceil(worker_capacity(hard))
}

/// The connections one server worker holds under the open-files limit
/// `hard` (less [`WORKER_MARGIN`]).
pub(crate) fn worker_capacity(hard: u64) -> u64 {
    hard.saturating_sub(WORKER_MARGIN).max(1)
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
            let w = server_workers(n, hard);
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
    use super::*;

    #[test]
    fn reports_limits() {
        let r = limits_report(Some(100_000));
        assert!(r.contains("open files per process"));
        assert!(r.contains("agent process"));
        let (_, hard) = crate::sys::fd_limit();
        if hard < 100_000 {
            assert!(r.contains("server workers"), "{r}");
        }
        assert!(SETTINGS
            .iter()
            .any(|s| s.name == "net.netfilter.nf_conntrack_max"));
    }

    /// A fake `/proc/sys` with Debian's defaults.
    fn fake_root(name: &str) -> (PathBuf, Sysctls) {
        let root = std::env::temp_dir().join(format!("throng-tune-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let debian = [
            ("fs.file-max", "9223372036854775807"),
            ("fs.nr_open", "1048576"),
            ("net.ipv4.tcp_mem", "283614\t378154\t567228"),
            ("net.ipv4.tcp_rmem", "4096\t131072\t6291456"),
            ("net.ipv4.tcp_wmem", "4096\t16384\t4194304"),
            ("net.core.rmem_max", "212992"),
            ("net.core.wmem_max", "212992"),
            ("net.ipv4.ip_local_port_range", "32768\t60999"),
            ("net.core.somaxconn", "4096"),
            ("net.core.netdev_max_backlog", "1000"),
        ];
        for (k, v) in debian {
            let p = root.join(k.replace('.', "/"));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("{v}\n")).unwrap();
        }
        let ctl = Sysctls::at(&root);
        (root, ctl)
    }

    #[test]
    fn a_small_run_needs_nothing() {
        let (root, ctl) = fake_root("small");
        assert_eq!(plan(&ctl, 3000), vec![], "3,000 connections need no change");
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn apply_raises_only_what_the_run_lacks_and_revert_restores_it() {
        let (root, ctl) = fake_root("apply");
        let state = root.join("state/tune-previous.json");
        let changes = plan(&ctl, 1_000_000);
        let names: Vec<&str> = changes.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "net.ipv4.tcp_mem",
                "net.core.somaxconn",
                "net.core.netdev_max_backlog"
            ]
        );
        let tcp_mem = &changes[0];
        assert_eq!(tcp_mem.to, "1000000 1000000 1000000");
        assert_eq!(apply(&ctl, &changes, &state).unwrap(), 0);
        assert_eq!(ctl.read("net.core.netdev_max_backlog").unwrap(), "262144");
        assert_eq!(ctl.read("net.core.somaxconn").unwrap(), "65535");
        // Buffers and the port range untouched; file-max not lowered.
        assert_eq!(
            ctl.read("net.ipv4.tcp_rmem").unwrap(),
            "4096 131072 6291456"
        );
        assert_eq!(ctl.read("net.core.rmem_max").unwrap(), "212992");
        assert_eq!(ctl.read("fs.file-max").unwrap(), "9223372036854775807");
        assert!(plan(&ctl, 1_000_000).is_empty(), "applied: nothing left");
        // A second apply for a larger run keeps the first values saved.
        let more = plan(&ctl, 2_000_000);
        assert_eq!(apply(&ctl, &more, &state).unwrap(), 0);
        assert_eq!(revert(&ctl, &state).unwrap(), 0);
        assert_eq!(ctl.read("net.core.netdev_max_backlog").unwrap(), "1000");
        assert_eq!(
            ctl.read("net.ipv4.tcp_mem").unwrap(),
            "283614 378154 567228"
        );
        assert_eq!(ctl.read("fs.nr_open").unwrap(), "1048576");
        assert!(!state.exists(), "the saved values are gone once restored");
        assert_eq!(revert(&ctl, &state).unwrap(), 0, "nothing to revert");
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn show_says_what_changes_and_what_is_left_alone() {
        let (root, ctl) = fake_root("show");
        let changes = plan(&ctl, 100_000);
        let s = show(&ctl, 100_000, true, &changes);
        assert!(
            s.contains("raise to 262144") || s.contains("raise to 100000"),
            "{s}"
        );
        assert!(s.contains("not applied"), "{s}");
        assert!(s.contains("absent"), "conntrack absent: {s}");
        assert!(!s.contains("seed"), "{s}");
        let small = show(&ctl, 3000, true, &plan(&ctl, 3000));
        assert!(small.contains("enough at this size"), "{small}");
        assert!(small.contains("nothing to change"), "{small}");
        let _ = std::fs::remove_dir_all(root);
    }
}
