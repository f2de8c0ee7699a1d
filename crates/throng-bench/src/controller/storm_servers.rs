//! The reconnect storm's servers (see `storm`): one `throng serve` per
//! ~19,000 clients, each with its own history in memory; or one `throng
//! serve --workers N --redis` on a redis-server the bench starts, history
//! in Redis and one API for the cluster. Their memory and CPU, Redis's
//! calls by command, and the restart (`--storm-restart`): the cluster
//! stopped with SIGTERM, as a deploy stops it, and started again on the
//! same ports with the same settings.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::launch::{Redis, Server};
use crate::error::BenchError;
use crate::sys;

/// How the storm's servers are started (again, for a restart).
pub(super) struct Setup {
    /// The config file (the storm's `[[topics]]` rule).
    pub file: PathBuf,
    /// `--server-arg`s, TLS's and auth's flags.
    pub extra: Vec<String>,
    /// The environment (`--auth jwt`'s secret, off the command line).
    pub env: Vec<(&'static str, String)>,
    /// One `--workers` cluster on Redis, or independent servers.
    pub redis: bool,
}

/// The servers under test.
pub(super) struct Servers {
    /// Declared before `redis`, so they are dropped (killed) first.
    servers: Vec<Server>,
    redis: Option<Redis>,
    /// Where clients connect, and where messages are published.
    pub targets: Vec<SocketAddr>,
    pub apis: Vec<SocketAddr>,
    /// The processes holding sockets (memory), and Redis (CPU).
    pub holders: Vec<u32>,
    /// The cluster's process count and its arguments, for a restart.
    count: u64,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
}

/// What a restart measured.
pub(super) struct Restarted {
    /// From SIGTERM until the old server had exited (its drain).
    pub down_secs: f64,
    /// From starting the new one until it listened.
    pub start_secs: f64,
    /// CPU seconds the old server and its workers spent from `since`
    /// (their CPU then, [`Servers::server_cpu`]) until they exited.
    pub old_cpu_secs: f64,
}

impl Servers {
    /// Starts `count` servers (or a cluster of `count` workers, at least 2).
    pub fn start(count: u64, setup: &Setup) -> Result<Servers, BenchError> {
        let mut args = vec!["--config".to_string(), setup.file.display().to_string()];
        args.extend(setup.extra.iter().cloned());
        let mut s = Servers {
            servers: Vec::new(),
            redis: None,
            targets: Vec::new(),
            apis: Vec::new(),
            holders: Vec::new(),
            count,
            args,
            env: setup.env.clone(),
        };
        if setup.redis {
            // Two nodes at least: a cluster of one shares nothing.
            s.count = count.max(2);
            let r = Redis::spawn()?;
            s.args.extend([
                "--workers".to_string(),
                s.count.to_string(),
                "--redis".to_string(),
                format!("redis://127.0.0.1:{}", r.port),
            ]);
            s.redis = Some(r);
            // Fixed API ports (worker i on base + i), kept over a restart:
            // the publisher goes on publishing to the same address.
            let base = free_ports(s.count as u16)?;
            let server = s.spawn(0, &format!("127.0.0.1:{base}"))?;
            s.adopt(server);
        } else {
            for _ in 0..count {
                let server = s.spawn(0, "127.0.0.1:0")?;
                s.targets.push(server.addr);
                s.apis.extend(server.api);
                s.holders.push(server.pid());
                s.servers.push(server);
            }
        }
        if s.apis.is_empty() {
            return Err(BenchError::Server(
                "the server printed no `api at ADDR`: the storm publishes through the server API"
                    .into(),
            ));
        }
        Ok(s)
    }

    fn spawn(&self, port: u16, api: &str) -> Result<Server, BenchError> {
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Server::spawn_at(port, Some(0), &self.args, api, &env)
    }

    /// The cluster's one supervisor: its address, API and workers.
    fn adopt(&mut self, server: Server) {
        self.targets = vec![server.addr];
        self.apis = server.api.into_iter().collect();
        self.holders = server.holders(self.count as usize);
        self.servers = vec![server];
    }

    /// `--storm-restart`: SIGTERM to the cluster (every socket closed with
    /// 1012 over its drain), wait up to `limit` for it to exit, and start
    /// it again on the same port and API ports. `since`: the servers' CPU
    /// ([`Servers::server_cpu`]) when the storm began.
    pub fn restart(&mut self, limit: Duration, since: f64) -> Result<Restarted, BenchError> {
        let (Some(target), Some(api)) = (self.targets.first().copied(), self.apis.first().copied())
        else {
            return Err(BenchError::Server("no server to restart".into()));
        };
        if self.redis.is_none() || self.servers.len() != 1 {
            return Err(BenchError::Usage(
                "--storm-restart needs the history in Redis (--storm-redis): a server's own history ends with its process".into(),
            ));
        }
        let stopping = Instant::now();
        let old = self.servers[0].stop(limit).ok_or_else(|| {
            BenchError::Failed(format!(
                "the server did not exit within {limit:?} of SIGTERM (its drain): killed"
            ))
        })?;
        let down_secs = stopping.elapsed().as_secs_f64();
        self.servers.clear();
        let starting = Instant::now();
        let server = self.spawn(target.port(), &api.to_string())?;
        let start_secs = starting.elapsed().as_secs_f64();
        self.adopt(server);
        if self.targets.first() != Some(&target) || self.apis.first() != Some(&api) {
            return Err(BenchError::Server(format!(
                "the restarted server listens on {:?} (API {:?}), not {target} (API {api})",
                self.targets.first(),
                self.apis.first()
            )));
        }
        Ok(Restarted {
            down_secs,
            start_secs,
            old_cpu_secs: old - since,
        })
    }

    pub fn rss(&self) -> u64 {
        self.holders
            .iter()
            .filter_map(|p| sys::proc_sample(&p.to_string()))
            .map(|s| s.rss)
            .sum()
    }

    /// CPU seconds of the server processes (a cluster's supervisor and
    /// workers, or each server).
    pub fn server_cpu(&self) -> f64 {
        let supervisors = self.servers.iter().map(Server::pid);
        let mut pids: Vec<u32> = supervisors.chain(self.holders.iter().copied()).collect();
        pids.sort_unstable();
        pids.dedup();
        pids.iter()
            .filter_map(|p| sys::proc_sample(&p.to_string()))
            .map(|s| s.cpu_secs)
            .sum()
    }

    /// CPU seconds of the servers and Redis.
    pub fn cpu(&self) -> f64 {
        self.server_cpu() + self.redis_cpu()
    }

    pub fn redis_cpu(&self) -> f64 {
        self.redis
            .as_ref()
            .and_then(|r| sys::proc_sample(&r.pid().to_string()))
            .map_or(0.0, |s| s.cpu_secs)
    }

    /// `INFO commandstats`: calls by command (none without Redis).
    fn redis_calls(&self) -> Option<BTreeMap<String, u64>> {
        let r = self.redis.as_ref()?;
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", r.port)).ok()?;
        let mut con = client.get_connection().ok()?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut con)
            .ok()?;
        Some(commandstats(&info))
    }

    /// Redis's calls by command now, and when.
    pub fn redis_mark(&self) -> RedisMark {
        let calls = self.redis_calls();
        RedisMark {
            calls,
            at: Instant::now(),
        }
    }
}

/// A loopback port `p` with `p..p + n` all free a moment ago.
fn free_ports(n: u16) -> Result<u16, BenchError> {
    for _ in 0..50 {
        let base = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if base.checked_add(n).is_none() {
            continue;
        }
        let all: Result<Vec<TcpListener>, _> = (base..base + n)
            .map(|p| TcpListener::bind(("127.0.0.1", p)))
            .collect();
        if all.is_ok() {
            return Ok(base);
        }
    }
    Err(BenchError::Server(format!(
        "found no {n} free loopback ports in a row for the server API"
    )))
}

/// Redis's calls by command at a moment (`None` without Redis).
pub(super) struct RedisMark {
    calls: Option<BTreeMap<String, u64>>,
    at: Instant,
}

/// `cmdstat_NAME:calls=N,...` lines as calls by command.
fn commandstats(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// Calls by command from `a` to `b`, and their total.
fn calls_between(
    a: &BTreeMap<String, u64>,
    b: &BTreeMap<String, u64>,
) -> (BTreeMap<String, u64>, u64) {
    let d: BTreeMap<String, u64> = b
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(0))))
        // The bench's own INFO.
        .filter(|(k, v)| *v > 0 && k != "info")
        .collect();
    let total = d.values().sum();
    (d, total)
}

/// Redis commands per rejoin over the storm (from `b` to `c`), less what
/// the publishing alone cost over as long (from `a` to `b`), and the
/// storm's calls by command; `None` without Redis.
pub(super) fn redis_cost(
    a: RedisMark,
    b: RedisMark,
    c: RedisMark,
    n: u64,
) -> Option<(f64, BTreeMap<String, u64>)> {
    let (Some(ca), Some(cb), Some(cc)) = (a.calls, b.calls, c.calls) else {
        return None;
    };
    let (_, background) = calls_between(&ca, &cb);
    let per_sec = background as f64 / b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let (by_command, total) = calls_between(&cb, &cc);
    let storm_only = total as f64 - per_sec * c.at.duration_since(b.at).as_secs_f64();
    Some((storm_only.max(0.0) / n as f64, by_command))
}

/// The storm's config file in a directory of its own, removed with it.
pub(super) struct ConfigDir(pub PathBuf);

impl ConfigDir {
    pub fn write(text: &str) -> Result<(ConfigDir, PathBuf), BenchError> {
        let dir = std::env::temp_dir().join(format!("throng-bench-storm-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("storm.toml");
        std::fs::write(&file, text)?;
        Ok((ConfigDir(dir), file))
    }
}

impl Drop for ConfigDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_deltas() {
        let a = commandstats("# Commandstats\r\ncmdstat_publish:calls=10,usec=5,usec_per_call=0.5\r\ncmdstat_xadd:calls=3,usec=1\r\n");
        let b = commandstats("cmdstat_publish:calls=12,usec=9\r\ncmdstat_xadd:calls=3,usec=1\r\ncmdstat_xrange:calls=7,usec=2\r\n");
        let (d, total) = calls_between(&a, &b);
        assert_eq!(total, 9);
        assert_eq!(d.get("publish"), Some(&2));
        assert_eq!(d.get("xrange"), Some(&7));
        assert!(!d.contains_key("xadd"));
    }

    #[test]
    fn free_ports_are_free() {
        let base = free_ports(3).unwrap();
        for p in base..base + 3 {
            TcpListener::bind(("127.0.0.1", p)).unwrap();
        }
    }
}
