//! Process facts from the OS: the open-files limit, RSS, CPU time.

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

#[cfg(test)]
mod tests {
    #[test]
    fn reads_own_process() {
        assert!(super::rss_bytes().unwrap() > 0);
        assert!(super::cpu_seconds().unwrap() >= 0.0);
        assert!(super::raise_fd_limit().unwrap() >= 256);
    }
}
