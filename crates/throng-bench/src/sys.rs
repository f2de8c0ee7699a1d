//! The operating system: file limits, `/proc` samples and sysctls, a socket
//! option, writing to a non-blocking socket until it blocks, the scheduling
//! class, a new network namespace, and a minimal HTTP GET for the server's
//! `/metrics`.
//!
//! The few `unsafe` blocks here are plain libc calls with owned, valid
//! arguments; they are the only ones in the crate (the workspace denies
//! `unsafe_code`; each function here allows it for itself).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Raises the open-files soft limit to the hard limit; returns (soft, hard).
#[allow(unsafe_code)]
pub fn raise_fd_limit() -> (u64, u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 {
            return (1024, 1024);
        }
        if rl.rlim_cur < rl.rlim_max {
            let want = libc::rlimit {
                rlim_cur: rl.rlim_max,
                rlim_max: rl.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                rl.rlim_cur = rl.rlim_max;
            }
        }
    }
    (rl.rlim_cur, rl.rlim_max)
}

/// The open-files limit (soft, hard) as it stands.
#[allow(unsafe_code)]
pub fn fd_limit() -> (u64, u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer to a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return (1024, 1024);
    }
    (rl.rlim_cur, rl.rlim_max)
}

/// Linux's `IP_BIND_ADDRESS_NO_PORT` (not in the libc crate): bind picks the
/// address now and the port at connect, when the 4-tuple is known, so one
/// source address serves many more connections.
const IP_BIND_ADDRESS_NO_PORT: libc::c_int = 24;

#[allow(unsafe_code)]
pub fn set_bind_no_port(sock: &impl AsRawFd) -> std::io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on an fd we own, with a pointer to a local int and its size.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            IP_BIND_ADDRESS_NO_PORT,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Clock ticks per second, for `/proc/PID/stat` times.
#[allow(unsafe_code)]
fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// A process's resident set size and CPU time, from `/proc`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcSample {
    pub rss: u64,
    /// The anonymous part of `rss` (`RssAnon`): what the process allocated
    /// itself, without the pages of its binary and libraries, which the
    /// kernel holds once however many processes map them.
    pub anon: u64,
    /// The proportional set size (`Pss` of `smaps_rollup`): the process's
    /// own pages, plus each shared page divided by the processes mapping
    /// it, so that a sum over processes counts every page once. 0 unless
    /// read with [`proc_pss`]: [`proc_sample`] leaves it out (see there).
    pub pss: u64,
    pub cpu_secs: f64,
}

/// The bytes of the `/proc` line `NAME:   N kB` of `text`.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with(':')))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Samples `/proc/<pid>` (`"self"` for this process): RSS and CPU, from
/// `status` and `stat`, which the kernel keeps as counters. Not the PSS
/// ([`proc_pss`]): it is computed by walking the process's page tables
/// under its memory-map lock, and this sample is taken ten times a second
/// by every agent while users arrive; at 1,000,000 (53 agents, 52 workers)
/// that walk was 4% of the machine's CPU, and it holds up the process's
/// own page faults while it runs.
pub fn proc_sample(pid: &str) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name| kib_field(&status, name).unwrap_or(0);
    let (rss, anon) = (field("VmRSS"), field("RssAnon"));
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime 15.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some(ProcSample {
        rss,
        anon,
        pss: 0,
        cpu_secs: (utime + stime) / clock_ticks(),
    })
}

/// CPU seconds of `/proc/<pid>` and of its children it has waited for
/// (`utime + stime + cutime + cstime`): readable until the process is
/// reaped, so a supervisor that exited and waited for its workers, read
/// before its parent reaps it, gives the whole group's CPU.
pub fn cpu_with_children(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f
        .get(11..15)?
        .iter()
        .map(|v| v.parse::<f64>().ok())
        .sum::<Option<f64>>()?;
    Some(ticks / clock_ticks())
}

/// The proportional set size of `/proc/<pid>` (see [`ProcSample::pss`]),
/// for a memory figure taken once (before the run, at its plateau), not
/// for periodic samples.
pub fn proc_pss(pid: &str) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    kib_field(&rollup, "Pss")
}

/// CPU seconds of each thread of a process: `(tid, seconds)`.
pub fn thread_cpu(pid: u32) -> Vec<(u32, f64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let ticks = clock_ticks();
    dir.flatten()
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let t: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some((tid, t / ticks))
        })
        .collect()
}

/// Machine-wide CPU time from `/proc/stat`: (busy, total) in seconds summed
/// over cores; busy counts user, nice, system, irq, softirq and steal.
pub fn machine_cpu() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<f64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 8 {
        return None;
    }
    let idle = v[3] + v[4];
    let total: f64 = v[..8].iter().sum();
    let t = clock_ticks();
    Some(((total - idle) / t, total / t))
}

/// Total memory of the machine, bytes.
pub fn mem_total() -> Option<u64> {
    meminfo("MemTotal")
}

/// Memory the kernel estimates can be had without swapping
/// (`MemAvailable`), bytes.
pub fn mem_available() -> Option<u64> {
    meminfo("MemAvailable")
}

/// Writes as much of `data` as a non-blocking socket takes now (retrying
/// an interrupted write, stopping at `WouldBlock`): how many bytes it took.
pub fn write_until_blocked(sock: &mut impl Write, data: &[u8]) -> std::io::Result<usize> {
    let mut written = 0;
    while written < data.len() {
        match sock.write(&data[written..]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// Bytes in the send queue of TCP socket `sock` that the peer has not
/// acknowledged yet (`SIOCOUTQ`): sent or not, 0 once it has them all.
#[allow(unsafe_code)]
pub fn unacked_bytes(sock: &impl AsRawFd) -> Option<u32> {
    let mut n: libc::c_int = 0;
    // SAFETY: ioctl(SIOCOUTQ) writes one int into our local.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    (rc == 0).then_some(n.max(0) as u32)
}

/// Packets the kernel has dropped since boot because a CPU's input backlog
/// was full (`/proc/net/softnet_stat`, second column, all CPUs). Every
/// loopback segment goes through that backlog, so a drop here is a
/// segment TCP resends 200 ms or more later: a delay no process caused.
pub fn softnet_dropped() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/net/softnet_stat").ok()?;
    stat.lines()
        .map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .sum()
}

/// The kernel's slab allocations (socket state among them), bytes: the
/// machine-wide memory a connection costs outside any process's RSS.
pub fn slab() -> Option<u64> {
    meminfo("Slab")
}

/// One `/proc/meminfo` field, bytes.
fn meminfo(field: &str) -> Option<u64> {
    kib_field(&std::fs::read_to_string("/proc/meminfo").ok()?, field)
}

/// Reads a sysctl from `/proc/sys` (`net.core.somaxconn` style name).
pub fn sysctl_read(name: &str) -> Option<String> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The TCP established-hash buckets of this network namespace
/// (`net.ipv4.tcp_ehash_entries`; negative when the table is the host's,
/// shared with a child namespace).
pub fn tcp_ehash_buckets() -> Option<u64> {
    sysctl_read("net.ipv4.tcp_ehash_entries")?
        .trim()
        .trim_start_matches('-')
        .parse()
        .ok()
}

/// `GET path` over HTTP/1.1 with a short timeout; returns the body.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err(std::io::Error::other("no HTTP body"));
    };
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(std::io::Error::other(format!(
            "HTTP {}",
            head.lines().next().unwrap_or("")
        )));
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Ok(dechunk(body));
    }
    Ok(body.to_string())
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The value of an unlabelled Prometheus sample (`name value`), or the sum
/// over its label sets.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let value = if let Some(r) = rest.strip_prefix('{') {
            r.split_once('}').map(|(_, v)| v)
        } else if rest.starts_with(' ') {
            Some(rest)
        } else {
            None
        };
        if let Some(v) = value.and_then(|v| v.split_whitespace().next()) {
            if let Ok(x) = v.parse::<f64>() {
                *found.get_or_insert(0.0) += x;
            }
        }
    }
    found
}

/// CLOCK_REALTIME nanoseconds, the clock broadcast stamps use.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Whether this process runs as root (effective uid 0).
#[allow(unsafe_code)]
pub fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Hands the allocator's free memory back to the kernel (glibc's
/// `malloc_trim(0)`, which also releases free pages inside the heap): an
/// agent does so when a burst of traffic is over, so its resident size
/// says what its connections hold, not the burst's high-water mark.
#[allow(unsafe_code)]
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes a size and touches only the allocator's own state.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Puts this process in the `SCHED_BATCH` class: its wakeups no longer
/// preempt the running task. An agent is woken by every frame a co-located
/// server writes to one of its sockets; with normal wakeup preemption each
/// such write can switch to the agent for a single message and back, and
/// with a hundred processes on two cores that switching, not the work,
/// decides how long a broadcast takes. Batch agents let a server worker
/// finish writing a broadcast, then read many sockets per wakeup.
#[allow(unsafe_code)]
pub fn set_batch_scheduling() -> bool {
    // SAFETY: sched_param is plain integers (priority 0, and on musl its
    // unused sporadic-server fields), so all-zero is a valid value;
    // sched_setscheduler reads the struct we pass; pid 0 is this process.
    unsafe {
        let param: libc::sched_param = std::mem::zeroed();
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) == 0
    }
}

/// Puts the calling thread back in the normal class (`SCHED_OTHER`) of a
/// `SCHED_BATCH` process: the link's writing thread of an agent, which
/// says `alive` every second and must get the CPU when it wakes however
/// busy the agent's engine keeps the process's other threads.
#[allow(unsafe_code)]
pub fn set_thread_normal_scheduling() -> bool {
    // SAFETY: as in `set_batch_scheduling`; on Linux pid 0 names the
    // calling thread, and only it changes.
    unsafe {
        let param: libc::sched_param = std::mem::zeroed();
        libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) == 0
    }
}

/// A process's state letter (`/proc/PID/stat`: `R` running, `S` sleeping,
/// `D` waiting on I/O, `T` stopped, `t` traced, `Z` zombie), if it exists.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: the state follows the last ')'.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// Moves this thread into a new network namespace (`unshare(CLONE_NEWNET)`).
#[allow(unsafe_code)]
pub fn unshare_net() -> std::io::Result<()> {
    // SAFETY: unshare takes flags only; it affects the calling thread.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `ip link set lo up`, with ioctls on a throwaway socket.
#[allow(unsafe_code)]
pub fn loopback_up() -> std::io::Result<()> {
    let err = |what: &str| {
        let e = std::io::Error::last_os_error();
        std::io::Error::new(e.kind(), format!("{what}: {e}"))
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
        // The request's type differs between C libraries (c_ulong in
        // glibc, c_int in musl, the static build's): `as libc::Ioctl`.
        let r = if libc::ioctl(fd, libc::SIOCGIFFLAGS as libc::Ioctl, &mut ifr) != 0 {
            Err(err("SIOCGIFFLAGS"))
        } else {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS as libc::Ioctl, &ifr) != 0 {
                Err(err("SIOCSIFFLAGS"))
            } else {
                Ok(())
            }
        };
        libc::close(fd);
        r
    }
}

/// Sends SIGKILL to `pid` (a child of ours; an error, e.g. already gone, is
/// of no interest to the caller).
pub fn kill_pid(pid: u32) {
    signal_pid(pid, libc::SIGKILL);
}

/// Sends `pid` signal `sig` (a child of ours, by its pid).
#[allow(unsafe_code)]
pub fn signal_pid(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) with plain integer arguments.
    unsafe {
        libc::kill(pid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_prometheus_samples() {
        let text = "# HELP throng_connections open\n# TYPE throng_connections gauge\nthrong_connections 42\nthrong_connections_total 7\nthrong_messages_out_total{kind=\"a\"} 3\nthrong_messages_out_total{kind=\"b\"} 4.5\n";
        assert_eq!(metric(text, "throng_connections"), Some(42.0));
        assert_eq!(metric(text, "throng_messages_out_total"), Some(7.5));
        assert_eq!(metric(text, "throng_nope"), None);
    }

    #[test]
    fn samples_this_process() {
        let s = proc_sample("self").unwrap();
        assert!(s.rss > 0);
        assert!(s.cpu_secs >= 0.0);
        assert_eq!(
            s.pss, 0,
            "the periodic sample leaves the page-table walk out"
        );
        let pss = proc_pss("self").unwrap();
        assert!(pss > 0 && pss <= s.rss * 2, "pss {pss}, rss {}", s.rss);
        let (soft, hard) = raise_fd_limit();
        assert!(soft <= hard && soft >= 1);
    }

    #[test]
    fn dechunks() {
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
    }
}
