//! A private network namespace with a TCP hash table sized for the run.
//!
//! The kernel finds the socket of every arriving TCP segment in one hash
//! table (`net.ipv4.tcp_ehash_entries`), sized at boot from memory: 262,144
//! buckets on a 24 GiB machine. A million loopback connections are two
//! million sockets in it, chains of eight, and at 1M the lookup
//! (`__inet_lookup_established`) was 18% of the machine during a broadcast.
//! A booted server fixes this with the `thash_entries=` kernel parameter; a
//! benchmark cannot reboot, but a new network namespace gets a table of
//! `net.ipv4.tcp_child_ehash_entries` buckets (Linux 5.19+). So the
//! controller moves itself, and with it the server workers, Redis and the
//! agents it starts, into one, then restores the host's setting.
//!
//! The system calls themselves (`unshare`, the loopback ioctls) are in
//! [`crate::sys`], with the crate's other `unsafe` code.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};

use crate::error::BenchError;
use crate::{sys, NetnsMode};

const CHILD_EHASH: &str = "/proc/sys/net/ipv4/tcp_child_ehash_entries";
/// The kernel's largest `tcp_child_ehash_entries`.
const MAX_BUCKETS: u64 = 1 << 24;

/// The network settings carried into the new namespace, which starts from
/// kernel defaults: every `net.*` one of `throng tune` (those that are not
/// per-namespace are absent or shared there, and skipped), and the
/// congestion control.
fn carried() -> impl Iterator<Item = &'static str> {
    crate::tune::SETTINGS
        .iter()
        .map(|s| s.name)
        .filter(|k| k.starts_with("net."))
        .chain(["net.ipv4.tcp_congestion_control"])
}

/// The kernel's TCP established-hash table a run has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpTable {
    /// Its buckets (`None`: unreadable).
    pub buckets: Option<u64>,
    /// A private network namespace's own table, not the host's.
    pub private: bool,
}

/// Moves the run into a private network namespace when `mode` asks (`auto`:
/// when the run's `users` overfill the host's table, the run is
/// `local_only` and we are root); returns the table the run gets.
pub fn for_run(mode: NetnsMode, local_only: bool, users: u64) -> Result<TcpTable, BenchError> {
    let host = TcpTable {
        buckets: sys::tcp_ehash_buckets(),
        private: false,
    };
    let wanted = match mode {
        NetnsMode::Off => false,
        NetnsMode::On => {
            if !local_only {
                return Err(BenchError::Scenario(
                    "--netns on needs the embedded server and local agents (no --target, no --remote-agents)".into(),
                ));
            }
            true
        }
        NetnsMode::Auto => {
            local_only && host.buckets.is_some_and(|h| overfills(users, h)) && sys::is_root()
        }
    };
    if !wanted {
        return Ok(host);
    }
    match enter(buckets_for(users)) {
        Ok(got) => {
            eprintln!(
                "note: {users} loopback connections are {} sockets for the kernel's TCP hash table ({} buckets here): running the server and agents in a private network namespace with {got} buckets (`--netns off` keeps the host's)",
                users * 2,
                host.buckets.map_or("?".into(), |h| h.to_string()),
            );
            Ok(TcpTable {
                buckets: Some(got),
                private: true,
            })
        }
        Err(e) if mode == NetnsMode::On => Err(BenchError::Scenario(format!("--netns on: {e}"))),
        Err(e) => {
            eprintln!(
                "note: staying in the host's network namespace ({e}); TCP lookups slow down past {} connections",
                host.buckets.unwrap_or(0)
            );
            Ok(host)
        }
    }
}

/// Buckets for `connections` loopback connections (two sockets each): the
/// next power of two at or above the socket count, within the kernel's bounds.
pub fn buckets_for(connections: u64) -> u64 {
    connections
        .saturating_mul(2)
        .next_power_of_two()
        .clamp(1 << 16, MAX_BUCKETS)
}

/// Whether a run of `connections` loopback connections (two sockets each)
/// overfills the host's table: more than two sockets per bucket on average.
pub fn overfills(connections: u64, host: u64) -> bool {
    connections > host
}

/// Moves this thread (and all it starts afterwards) into a new network
/// namespace with `buckets` TCP hash buckets and loopback up; returns the
/// buckets the new table has. Call before any other thread is started.
pub fn enter(buckets: u64) -> Result<u64, BenchError> {
    let err = |step| move |source| BenchError::Netns { step, source };
    let carried: Vec<(&str, String)> = carried()
        .filter_map(|k| sys::sysctl_read(k).map(|v| (k, v)))
        .collect();
    // Opened before the move, so the restore below writes the host's value.
    let mut knob = OpenOptions::new()
        .read(true)
        .write(true)
        .open(CHILD_EHASH)
        .map_err(err(
            "opening net.ipv4.tcp_child_ehash_entries (needs root and Linux 5.19+)",
        ))?;
    let mut before = String::new();
    knob.read_to_string(&mut before)
        .map_err(err("reading net.ipv4.tcp_child_ehash_entries"))?;
    let _ = knob.seek(SeekFrom::Start(0));
    knob.write_all(buckets.to_string().as_bytes())
        .map_err(err("writing net.ipv4.tcp_child_ehash_entries"))?;
    let moved = sys::unshare_net();
    let _ = knob.seek(SeekFrom::Start(0));
    let _ = knob.write_all(before.trim().as_bytes());
    moved.map_err(err("unshare(CLONE_NEWNET)"))?;
    sys::loopback_up().map_err(err("bringing up lo"))?;
    for (k, v) in carried {
        let path = format!("/proc/sys/{}", k.replace('.', "/"));
        let _ = std::fs::write(path, v.replace(' ', "\t"));
    }
    sys::tcp_ehash_buckets().ok_or_else(|| BenchError::Netns {
        step: "reading the new namespace's net.ipv4.tcp_ehash_entries",
        source: std::io::ErrorKind::NotFound.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_both_ends_of_every_connection() {
        assert_eq!(buckets_for(1_000_000), 2_097_152);
        assert_eq!(buckets_for(200_000), 524_288);
        assert_eq!(buckets_for(10), 65_536);
        assert_eq!(buckets_for(u64::MAX / 4), MAX_BUCKETS);
    }

    #[test]
    fn carries_the_tuned_network_settings() {
        let c: Vec<&str> = carried().collect();
        for k in [
            "net.core.somaxconn",
            "net.ipv4.ip_local_port_range",
            "net.ipv4.tcp_rmem",
            "net.ipv4.tcp_wmem",
            "net.ipv4.tcp_congestion_control",
            "net.netfilter.nf_conntrack_max",
        ] {
            assert!(c.contains(&k), "{k} not carried: {c:?}");
        }
        assert!(c.iter().all(|k| k.starts_with("net.")));
    }

    #[test]
    fn only_runs_past_the_host_table_move() {
        assert!(!overfills(19_000, 262_144));
        assert!(!overfills(262_144, 262_144));
        assert!(overfills(300_000, 262_144));
        assert!(overfills(1_000_000, 262_144));
    }
}
