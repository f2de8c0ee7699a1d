//! The processes a run starts: the embedded server (one `throng serve`, or
//! past one process's open-files limit a supervisor of `--workers` joined
//! through a local `redis-server`) and the local agents (`throng agent`).
//! Each is killed when dropped, so a run that stops early leaves none behind;
//! each is known to [`children`](super::children) too, for a run a signal
//! ends.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::children;
use crate::error::BenchError;
use crate::tune::server_workers;

/// Whether `args` set `flag` (`--flag V` or `--flag=V`).
fn has_flag(args: &[String], flag: &str) -> bool {
    args.iter()
        .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|v| v.starts_with('=')))
}

/// What the embedded server needs for the scenario's presence `rule`
/// (over `users` connections), beyond what `given` (the `--server-arg`s)
/// sets: the rule itself, and in list mode an outbound bound that holds a
/// joiner's whole `presence_state` and a diff of every user (about 55
/// bytes a user each; the server's 256 KiB default would cut joiners past
/// ~4,000 users as slow readers).
pub(crate) fn presence_server_args(
    rule: Option<&crate::presence::Rule>,
    users: u64,
    given: &[String],
) -> Vec<String> {
    let Some(rule) = rule else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if !has_flag(given, "--presence") {
        out.extend(["--presence".to_string(), rule.spec.clone()]);
    }
    if !rule.count && !has_flag(given, "--max-outbound-bytes") {
        let bound = (users.saturating_mul(128) + (1 << 20)).max(256 << 10);
        out.extend(["--max-outbound-bytes".to_string(), bound.to_string()]);
    }
    out
}

/// `current_exe` with `args`, quiet unless `THRONG_LOG` says otherwise.
fn throng(args: &[&str]) -> Result<Command, BenchError> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(args).stdin(Stdio::null());
    if std::env::var_os("THRONG_LOG").is_none() {
        cmd.env("THRONG_LOG", "warn");
    }
    Ok(cmd)
}

/// Spawns `cmd`, known to [`children`] until killed or reaped.
fn spawn(cmd: &mut Command) -> std::io::Result<Child> {
    let child = cmd.spawn()?;
    children::started(child.id());
    Ok(child)
}

/// Kills and reaps a child.
fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
    children::ended(child.id());
}

/// The embedded server, as the run starts it.
pub(super) struct Embedded {
    /// Declared before `redis`, so it is dropped (killed) first.
    pub server: Server,
    /// The Redis between several workers.
    pub redis: Option<Redis>,
    /// Server processes holding connections: 1, or `--workers`.
    pub workers: usize,
}

impl Embedded {
    /// Starts the server for `users` connections: one process when they fit
    /// in `per_process`, else workers sized by [`server_workers`] for the
    /// hard limit `hard`, joined through a Redis started for them; `env`
    /// (such as a secret, kept off the command line) goes to every process.
    pub fn start(
        users: u64,
        per_process: u64,
        hard: u64,
        idle_timeout: Option<u64>,
        extra: &[String],
        env: &[(&str, &str)],
    ) -> Result<Embedded, BenchError> {
        let mut extra = extra.to_vec();
        let mut redis = None;
        let mut workers = 1;
        if users > per_process {
            workers = server_workers(users, hard) as usize;
            let r = Redis::spawn()?;
            eprintln!(
                "note: {users} connections are more than one process's open-files limit ({hard}) allows: starting {workers} server workers (`throng serve --workers {workers}`) joined through redis-server on 127.0.0.1:{}",
                r.port
            );
            extra.extend([
                "--workers".to_string(),
                workers.to_string(),
                "--redis".to_string(),
                format!("redis://127.0.0.1:{}", r.port),
            ]);
            redis = Some(r);
        }
        let server = Server::spawn_with_env(idle_timeout, &extra, "none", env)?;
        Ok(Embedded {
            server,
            redis,
            workers,
        })
    }

    /// The processes that hold connections: the workers, or the server.
    pub fn holders(&self) -> Vec<u32> {
        self.server.holders(self.workers)
    }
}

/// The embedded server, our child: one `throng serve`, or a supervisor of
/// `--workers` (whose worker pids it prints as `worker I pid P`).
pub(super) struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// Its server API (`api at ADDR`, worker 0's under `--workers`), when
    /// started with one ([`Server::spawn_with_api`]).
    pub api: Option<SocketAddr>,
    /// Where its /metrics is read: the public port, or over TLS the
    /// server API (plain HTTP on loopback).
    pub metrics: SocketAddr,
    workers: Arc<Mutex<Vec<u32>>>,
    /// Each worker's server API, as the supervisor prints it
    /// (`worker I pid P api ADDR`), in the order printed.
    worker_apis: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Server {
    /// Starts `throng serve` on a free loopback port and waits for the
    /// address it prints.
    pub(super) fn spawn(idle_timeout: Option<u64>, extra: &[String]) -> Result<Server, BenchError> {
        Server::spawn_with_api(idle_timeout, extra, "none")
    }

    /// [`Server::spawn`] with the server API on `api_bind` (`none`: none).
    pub(super) fn spawn_with_api(
        idle_timeout: Option<u64>,
        extra: &[String],
        api_bind: &str,
    ) -> Result<Server, BenchError> {
        Server::spawn_with_env(idle_timeout, extra, api_bind, &[])
    }

    /// [`Server::spawn_with_api`] with `env` set for the server.
    fn spawn_with_env(
        idle_timeout: Option<u64>,
        extra: &[String],
        api_bind: &str,
        env: &[(&str, &str)],
    ) -> Result<Server, BenchError> {
        Server::spawn_at(0, idle_timeout, extra, api_bind, env)
    }

    /// [`Server::spawn_with_env`] on `port` (0: any free one), as the
    /// storm's restart starts it again on the port it had.
    pub(super) fn spawn_at(
        port: u16,
        idle_timeout: Option<u64>,
        extra: &[String],
        api_bind: &str,
        env: &[(&str, &str)],
    ) -> Result<Server, BenchError> {
        // /metrics lives on the server API listener; the probe reads the
        // public port, so the bench's own server keeps it there (over TLS,
        // the probe reads the plain API listener instead).
        let tls = extra.iter().any(|a| a == "--tls-cert");
        let api_bind = if tls && api_bind == "none" {
            "127.0.0.1:0"
        } else {
            api_bind
        };
        let port = port.to_string();
        let mut cmd = throng(&[
            "serve",
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--public-metrics",
            "--api-bind",
            api_bind,
        ])?;
        if let Some(t) = idle_timeout {
            cmd.args(["--idle-timeout", &t.to_string()]);
        }
        cmd.args(extra).envs(env.iter().copied());
        let mut child = spawn(cmd.stdout(Stdio::piped()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        let workers = Arc::new(Mutex::new(Vec::new()));
        let pids = workers.clone();
        let worker_apis = Arc::new(Mutex::new(Vec::new()));
        let apis = worker_apis.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            let mut api = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(pid) = line
                    .trim()
                    .strip_prefix("worker ")
                    .and_then(|r| r.split_whitespace().nth(2))
                {
                    if let Ok(pid) = pid.parse::<u32>() {
                        // Known to `children` too: a signal that ends the
                        // run kills the workers with their supervisor.
                        children::started(pid);
                        pids.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
                    }
                    if let Some(a) = line.split_whitespace().nth(5).and_then(|a| a.parse().ok()) {
                        apis.lock().unwrap_or_else(|e| e.into_inner()).push(a);
                    }
                }
                if let Some(a) = line.trim().strip_prefix("api at ") {
                    api.get_or_insert(a.trim().to_string());
                }
                if !sent {
                    if let Some(a) = line.trim().strip_prefix("listening on ") {
                        let _ = tx.send((a.trim().to_string(), api.clone()));
                        sent = true;
                    }
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok((a, api)) => {
                let read = |a: &str| {
                    a.parse().map_err(|_| {
                        BenchError::Server(format!("server printed an address I cannot read: {a}"))
                    })
                };
                let addr = read(&a)?;
                let api = api.as_deref().map(read).transpose()?;
                Ok(Server {
                    child,
                    addr,
                    metrics: api.filter(|_| tls).unwrap_or(addr),
                    api,
                    workers,
                    worker_apis,
                })
            }
            Err(_) => {
                kill(&mut child);
                Err(BenchError::Server(
                    "`throng serve` did not print `listening on ADDR` within 20 s".into(),
                ))
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The processes that hold connections: the `expect` workers, or the
    /// server itself.
    pub(super) fn holders(&self, expect: usize) -> Vec<u32> {
        if expect <= 1 {
            return vec![self.pid()];
        }
        // The supervisor prints the worker lines right after `listening on`.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let w = self
                .workers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if w.len() >= expect || Instant::now() > deadline {
                return w;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Server {
    /// Each worker's server API (the `expect` workers'), or the server's
    /// own when it runs alone.
    pub(super) fn worker_apis(&self, expect: usize) -> Vec<SocketAddr> {
        if expect <= 1 {
            return self.api.into_iter().collect();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let a = self
                .worker_apis
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if a.len() >= expect || Instant::now() > deadline {
                return a;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Server {
    /// Stops the server as a deploy does: SIGTERM (its drain closes every
    /// socket with 1012, a supervisor's workers included), then waits up
    /// to `limit` for it to exit. Returns the CPU seconds the process and
    /// its workers used over their lives, read after it exited and before
    /// it is reaped (`None`: it did not exit in time, and was killed).
    pub(super) fn stop(&mut self, limit: Duration) -> Option<f64> {
        let pid = self.pid();
        crate::sys::signal_pid(pid, libc::SIGTERM);
        let deadline = Instant::now() + limit;
        let mut cpu = None;
        loop {
            match crate::sys::proc_state(pid) {
                Some('Z') => {
                    cpu = crate::sys::cpu_with_children(pid);
                    break;
                }
                None => break,
                Some(_) if Instant::now() > deadline => break,
                Some(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        if cpu.is_some() {
            let _ = self.child.wait();
            children::ended(pid);
        } else {
            kill(&mut self.child);
        }
        // The workers went with their supervisor (it waited for them, or
        // the kernel sent them SIGTERM as it died): their pids are not
        // ours to signal any more.
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in workers {
            children::ended(w);
        }
        cpu
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The workers first: killed with their supervisor they would get
        // SIGTERM and drain for seconds while Redis, dropped next, is gone,
        // each logging the lost connection.
        for pid in self
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            crate::sys::kill_pid(*pid);
            children::ended(*pid);
        }
        kill(&mut self.child);
    }
}

/// A `redis-server` we started for a multi-worker embedded server.
pub(super) struct Redis {
    child: Child,
    pub port: u16,
}

impl Redis {
    /// Starts `redis-server` on a free loopback port and waits until it accepts.
    pub(super) fn spawn() -> Result<Redis, BenchError> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = spawn(
            Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .map_err(|e| {
                BenchError::Server(format!(
                    "this run needs several server workers joined through Redis, but `redis-server` could not be started ({e}); install it: apt-get install redis-server"
                ))
            })?;
        let redis = Redis { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(BenchError::Server(format!(
                    "redis-server did not listen on 127.0.0.1:{port} within 10 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(redis)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

/// Local agent processes not yet linked to the controller: killed if the
/// run stops before they are; [`LocalAgents::take`] hands one to its link.
pub(super) struct LocalAgents(Vec<Child>);

impl LocalAgents {
    /// Starts `n` agents (`throng agent --controller ADDR`), or floor
    /// writers (`--floor-writer`), handing them the token in their
    /// environment (not on their command line, which any user of the
    /// machine can read).
    pub fn spawn(
        n: u32,
        controller: SocketAddr,
        token: &str,
        floor_writers: bool,
    ) -> Result<LocalAgents, BenchError> {
        let mut agents = LocalAgents(Vec::new());
        for _ in 0..n {
            let ctl = controller.to_string();
            let mut args = vec!["agent", "--controller", &ctl];
            if floor_writers {
                args.push("--floor-writer");
            }
            let mut cmd = throng(&args)?;
            cmd.env(crate::wire::TOKEN_ENV, token);
            agents.0.push(spawn(cmd.stdout(Stdio::null()))?);
        }
        Ok(agents)
    }

    /// The agent with this pid, if it is one of ours.
    pub fn take(&mut self, pid: u32) -> Option<Child> {
        let i = self.0.iter().position(|c| c.id() == pid)?;
        Some(self.0.swap_remove(i))
    }
}

impl Drop for LocalAgents {
    fn drop(&mut self) {
        for c in &mut self.0 {
            kill(c);
        }
    }
}

/// Waits up to `limit` for a child to exit by itself (an agent after its
/// final report), then kills it.
pub(super) fn reap(mut child: Child, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return children::ended(child.id()),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => return kill(&mut child),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_goes_to_the_embedded_server() {
        let list = crate::presence::Rule::parse("rooms:lobby=param:user").unwrap();
        let count = crate::presence::Rule::parse("rooms:lobby=param:user/count").unwrap();
        assert!(presence_server_args(None, 10, &[]).is_empty());
        assert_eq!(
            presence_server_args(Some(&count), 19_000, &[]),
            ["--presence", "rooms:lobby=param:user/count"]
        );
        assert_eq!(
            presence_server_args(Some(&list), 19_000, &[]),
            [
                "--presence",
                "rooms:lobby=param:user",
                "--max-outbound-bytes",
                "3480576"
            ]
        );
        // What --server-arg says wins (--presence-interval is another flag).
        let given = [
            "--presence=x=user_id".to_string(),
            "--max-outbound-bytes".into(),
            "9".into(),
        ];
        assert!(presence_server_args(Some(&list), 10, &given).is_empty());
        let interval = ["--presence-interval".to_string(), "100".into()];
        assert_eq!(presence_server_args(Some(&count), 10, &interval).len(), 2);
    }

    #[test]
    fn workers_keep_a_margin_each() {
        assert_eq!(server_workers(19_000, 20_000), 1);
        assert_eq!(server_workers(19_401, 20_000), 2);
        assert_eq!(server_workers(1_000_000, 20_000), 52);
    }
}
