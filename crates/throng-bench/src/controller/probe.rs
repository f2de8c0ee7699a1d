//! The server as the controller sees it: RSS and CPU from `/proc` for the
//! processes we started (the server, or every worker plus their Redis),
//! `/metrics` always (the only source for a `--target`), and its open
//! connections, from `/metrics` or, with several workers, from their open
//! files (`/metrics` on the shared port reaches one worker only).

use std::net::SocketAddr;
use std::time::Duration;

use crate::sys::{self, ProcSample};

/// Where server samples come from.
pub(super) struct ServerProbe {
    /// The server, or the supervisor of its workers (ours only).
    pub pid: Option<u32>,
    /// Processes whose RSS and CPU count as the server's: the server itself,
    /// or every worker plus the Redis between them.
    procs: Vec<u32>,
    /// With several workers, the processes whose open files are counted as
    /// connections, over the count they had before the run.
    fd_holders: Vec<u32>,
    fd_baseline: u64,
    /// Where `/metrics` is served: the server's address.
    pub metrics: SocketAddr,
}

impl ServerProbe {
    /// A probe of a `--target` (`/metrics` only) or of the embedded server
    /// whose connections `holders` hold (one process, or `workers`), with
    /// `redis` counted in its RSS and CPU.
    pub fn new(
        metrics: SocketAddr,
        pid: Option<u32>,
        holders: Vec<u32>,
        workers: usize,
        redis: Option<u32>,
    ) -> ServerProbe {
        let mut procs = holders.clone();
        procs.extend(redis);
        let fd_holders = if workers > 1 { holders } else { Vec::new() };
        ServerProbe {
            pid,
            procs,
            fd_baseline: open_fds(&fd_holders),
            fd_holders,
            metrics,
        }
    }

    /// RSS and CPU summed over the server's processes, from `/proc`.
    pub fn proc(&self) -> Option<ProcSample> {
        let samples: Vec<ProcSample> = self
            .procs
            .iter()
            .filter_map(|p| sys::proc_sample(&p.to_string()))
            .collect();
        if samples.is_empty() {
            return None;
        }
        Some(ProcSample {
            rss: samples.iter().map(|s| s.rss).sum(),
            anon: samples.iter().map(|s| s.anon).sum(),
            pss: 0,
            cpu_secs: samples.iter().map(|s| s.cpu_secs).sum(),
        })
    }

    /// Whether connections are counted from the workers' open files.
    pub fn counts_files(&self) -> bool {
        !self.fd_holders.is_empty()
    }

    /// The workers' open files now (one `stat` per worker).
    pub fn open_files(&self) -> u64 {
        open_fds(&self.fd_holders)
    }

    /// The server's open connections: from `/metrics`, or from the workers' files.
    pub fn conns(&self, metrics: Option<&str>) -> Option<f64> {
        if self.counts_files() {
            Some(self.open_files().saturating_sub(self.fd_baseline) as f64)
        } else {
            metrics.and_then(server_conns)
        }
    }

    /// CPU seconds of each server thread: `(tid, seconds)`.
    pub fn threads(&self) -> Vec<(u32, f64)> {
        self.procs
            .iter()
            .flat_map(|&p| sys::thread_cpu(p))
            .collect()
    }

    /// The server's `/metrics` text, if it answers within 500 ms.
    pub fn metrics(&self) -> Option<String> {
        sys::http_get(self.metrics, "/metrics", Duration::from_millis(500)).ok()
    }

    /// [`ServerProbe::sample`] with the PSS summed over the server's
    /// processes too: the memory figures before the run and at its plateau.
    pub fn memory(&self, metrics: Option<&str>) -> Option<ProcSample> {
        let mut s = self.sample(metrics)?;
        s.pss = self
            .procs
            .iter()
            .filter_map(|p| sys::proc_pss(&p.to_string()))
            .sum();
        Some(s)
    }

    /// RSS and CPU, from `/proc` or else from the metrics.
    pub fn sample(&self, metrics: Option<&str>) -> Option<ProcSample> {
        self.proc().or_else(|| {
            let m = metrics?;
            Some(ProcSample {
                rss: sys::metric(m, "throng_process_resident_memory_bytes")? as u64,
                // Not in the metrics: no private figure for a remote server.
                anon: 0,
                pss: 0,
                cpu_secs: sys::metric(m, "throng_process_cpu_seconds_total")?,
            })
        })
    }
}

/// Open files of these processes.
fn open_fds(pids: &[u32]) -> u64 {
    pids.iter().map(|p| open_fds_of(*p)).sum()
}

/// One process's open files: the size Linux (6.2 and later) reports for
/// its `/proc/PID/fd` directory, else by listing it. Listing is the last
/// resort: it makes the kernel build a `/proc` inode and a dentry for every
/// descriptor it lists (~890 B each, kept until memory runs short), which
/// at two million connections counted once a second was ~1.8 GB of slab
/// and a core's worth of the controller's time.
pub(super) fn open_fds_of(pid: u32) -> u64 {
    let dir = format!("/proc/{pid}/fd");
    match std::fs::metadata(&dir) {
        // Every live process has stdin, stdout and stderr: a size of 0 is
        // an older kernel's directory size, not a count.
        Ok(m) if m.len() > 0 => m.len(),
        Ok(_) => std::fs::read_dir(&dir).map_or(0, |d| d.count() as u64),
        Err(_) => 0,
    }
}

/// The server's open connections less the scrape asking: `throng_connections`
/// counts every TCP connection, our `/metrics` request included.
pub(super) fn server_conns(metrics: &str) -> Option<f64> {
    sys::metric(metrics, "throng_connections").map(|c| (c - 1.0).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_files_are_counted_without_listing_them() {
        let me = std::process::id();
        let before = open_fds_of(me);
        let listed = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        // Listing opens one more descriptor (the directory being listed).
        assert!(
            before + 1 >= listed && before <= listed,
            "{before} vs {listed}"
        );
        let files: Vec<std::fs::File> = (0..50)
            .map(|_| std::fs::File::open("/dev/null").unwrap())
            .collect();
        let with = open_fds_of(me);
        drop(files);
        // Other tests' threads open and close files meanwhile: a margin.
        assert!(
            with >= before + 45,
            "{before} then {with} with 50 more open"
        );
        assert_eq!(open_fds_of(u32::MAX), 0, "no such process");
    }

    #[test]
    fn the_scrape_is_not_a_connection() {
        assert_eq!(server_conns("throng_connections 1\n"), Some(0.0));
        assert_eq!(server_conns("throng_connections 19001\n"), Some(19_000.0));
        assert_eq!(server_conns("nothing 1\n"), None);
    }
}
