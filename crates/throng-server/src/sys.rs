//! Process facts from the OS: the open-files limit, RSS, CPU time; and what
//! the kernel knows of a TCP socket that this process's clock does not.

/// Raises the soft open-files limit to the hard limit; returns the new soft limit.
#[allow(unsafe_code)]
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(lim.rlim_cur)
}

/// Resident set size of this process, from /proc/self/statm.
pub fn rss_bytes() -> Option<u64> {
    rss_of("self")
}

/// Resident set size of process `pid` ("self" for this one).
pub fn rss_of(pid: &str) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Memory available to this process: the host's `MemAvailable`
/// (/proc/meminfo), or, in a cgroup (v2) with a memory limit, what its
/// limit leaves (`memory.max` less `memory.current`) when that is less.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let host = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())?
        * 1024;
    let cgroup = (|| {
        let max = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok()?;
        let max: u64 = max.trim().parse().ok()?; // "max": no limit
        let used: u64 = std::fs::read_to_string("/sys/fs/cgroup/memory.current")
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Some(max.saturating_sub(used))
    })();
    Some(cgroup.map_or(host, |c| c.min(host)))
}

/// The host's count of connections dropped because a listener's accept
/// queue was full (`ListenOverflows` in /proc/net/netstat): the kernel's,
/// for every listener of the machine.
pub fn listen_overflows() -> Option<u64> {
    let netstat = std::fs::read_to_string("/proc/net/netstat").ok()?;
    let mut lines = netstat.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next()?, lines.next()?);
    let at = names
        .split_whitespace()
        .position(|n| n == "ListenOverflows")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// User + system CPU seconds of this process, from /proc/self/stat.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Makes glibc's allocator give big buffers back to the OS when they are
/// freed. By default its mmap threshold grows to the largest buffer freed
/// (up to 32 MiB), after which such buffers come from the heap and stay in
/// the process's RSS once freed: a few sockets that briefly held a
/// megabyte each (a big message in progress) would leave the server that
/// much bigger for good. Fixing the threshold at 128 KiB (glibc's initial
/// value) keeps every buffer above it in its own mapping, unmapped on free;
/// the hot path allocates nothing that large. No-op on other C libraries.
#[allow(unsafe_code)]
pub fn return_big_frees() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called at start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// What the allocator holds: `(allocated, free)` bytes, from glibc's
/// `mallinfo2`: handed out and not given back (the arenas' chunks in use
/// plus the blocks in mappings of their own), and freed but kept in the
/// arenas. After a peak the process's RSS stays up (freed memory is kept
/// for reuse), so a long run's growth shows in `allocated`, not in the
/// RSS. It walks the arenas' free lists under their locks: for a scrape,
/// not a hot path. `None` on other C libraries.
#[allow(unsafe_code)]
pub fn heap() -> Option<(u64, u64)> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
        let m = unsafe { libc::mallinfo2() };
        Some(((m.uordblks + m.hblkhd) as u64, m.fordblks as u64))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// Milliseconds since the kernel last received data on TCP socket `sock`
/// (`tcpi_last_data_recv` of `TCP_INFO`), by the kernel's clock: whether
/// this process read it, and when, does not move it. `None` if the kernel
/// would not say.
#[allow(unsafe_code)]
pub fn tcp_last_data_recv_ms(sock: &impl std::os::fd::AsRawFd) -> Option<u32> {
    // `struct tcp_info` (linux/tcp.h): eight u8 fields, then u32 fields of
    // which `tcpi_last_data_recv` is the twelfth (byte 52), stable since
    // Linux 2.6. The libc crate's copy of the struct is read the same way.
    const LAST_DATA_RECV: usize = 52;
    let mut buf = [0u8; 104];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into our buffer.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 || (len as usize) < LAST_DATA_RECV + 4 {
        return None;
    }
    let field = buf[LAST_DATA_RECV..LAST_DATA_RECV + 4].try_into().ok()?;
    Some(u32::from_ne_bytes(field))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_own_process() {
        assert!(super::rss_bytes().unwrap() > 0);
        assert!(super::cpu_seconds().unwrap() >= 0.0);
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            let (before, _) = super::heap().unwrap();
            let held = std::hint::black_box(vec![7u8; 4 << 20]);
            let (with, _) = super::heap().unwrap();
            assert!(with >= before + (4 << 20), "{before} then {with}");
            drop(std::hint::black_box(held));
        }
        assert!(super::raise_fd_limit().unwrap() >= 256);
        assert!(super::available_memory().unwrap() > 0);
        assert!(super::listen_overflows().is_some());
    }

    /// The kernel's clock of a socket's last data, on a real loopback pair:
    /// data received (and read) a second ago is a second old, whenever
    /// this process got round to it; a socket that never got data has
    /// gone unheard since it was set up.
    #[test]
    fn kernel_says_when_a_socket_last_received_data() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let unheard = super::tcp_last_data_recv_ms(&server).unwrap();
        assert!(unheard >= 1000, "no data yet, but heard {unheard} ms ago");
        client.write_all(b"heartbeat").unwrap();
        let mut buf = [0u8; 9];
        server.read_exact(&mut buf).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let heard = super::tcp_last_data_recv_ms(&server).unwrap();
        // 2.4 s after setup, 1.2 s after the data.
        assert!(
            (1000..2000).contains(&heard),
            "data 1.2 s ago read at once: {heard} ms"
        );
        client.write_all(b"again").unwrap();
        server.read_exact(&mut buf[..5]).unwrap();
        let now = super::tcp_last_data_recv_ms(&server).unwrap();
        assert!(now < 500, "data just now: {now} ms");
    }
}
