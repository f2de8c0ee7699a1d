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

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};

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
        .map(|(k, _, _)| *k)
        .filter(|k| k.starts_with("net."))
        .chain(["net.ipv4.tcp_congestion_control"])
}

/// The host's TCP established-hash buckets.
pub fn host_buckets() -> Option<u64> {
    crate::sys::sysctl_read("net.ipv4.tcp_ehash_entries")?
        .trim()
        .trim_start_matches('-')
        .parse()
        .ok()
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
pub fn enter(buckets: u64) -> Result<u64, String> {
    let carried: Vec<(&str, String)> = carried()
        .filter_map(|k| crate::sys::sysctl_read(k).map(|v| (k, v)))
        .collect();
    // Opened before the move, so the restore below writes the host's value.
    let mut knob = OpenOptions::new()
        .read(true)
        .write(true)
        .open(CHILD_EHASH)
        .map_err(|e| format!("{CHILD_EHASH}: {e} (needs root and Linux 5.19+)"))?;
    let mut before = String::new();
    knob.read_to_string(&mut before)
        .map_err(|e| format!("{CHILD_EHASH}: {e}"))?;
    let _ = knob.seek(SeekFrom::Start(0));
    knob.write_all(buckets.to_string().as_bytes())
        .map_err(|e| format!("{CHILD_EHASH}: {e}"))?;
    let moved = unshare_net();
    let _ = knob.seek(SeekFrom::Start(0));
    let _ = knob.write_all(before.trim().as_bytes());
    moved?;
    loopback_up()?;
    for (k, v) in carried {
        let path = format!("/proc/sys/{}", k.replace('.', "/"));
        let _ = std::fs::write(path, v.replace(' ', "\t"));
    }
    host_buckets().ok_or_else(|| "cannot read the new namespace's tcp_ehash_entries".into())
}

#[allow(unsafe_code)]
fn unshare_net() -> Result<(), String> {
    // SAFETY: unshare takes flags only; it affects the calling thread.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// `ip link set lo up`, with ioctls on a throwaway socket.
#[allow(unsafe_code)]
fn loopback_up() -> Result<(), String> {
    let err = |what: &str| {
        format!(
            "bringing up lo: {what}: {}",
            std::io::Error::last_os_error()
        )
    };
    // SAFETY: plain libc calls on an owned descriptor and a zeroed, owned
    // ifreq whose name is NUL-terminated; the descriptor is closed on every path.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(err("socket"));
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *s as libc::c_char;
        }
        let r = if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr) != 0 {
            Err(err("SIOCGIFFLAGS"))
        } else {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &ifr) != 0 {
                Err(err("SIOCSIFFLAGS"))
            } else {
                Ok(())
            }
        };
        libc::close(fd);
        r
    }
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
