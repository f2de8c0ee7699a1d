//! `throng serve --workers N`: this process becomes a supervisor of N worker
//! processes, each a full node (its own shards, open-files limit and Redis
//! backplane connections) listening on the same port with `SO_REUSEPORT`, so
//! the kernel spreads new connections over them.
//!
//! The supervisor:
//! - checks Redis once, so a bad `--redis` fails here with one clear error;
//! - reserves the port (`throng_server::bind::reserve`): it refuses a port
//!   another process holds (unless `--reuse-port`), binds a `SO_REUSEPORT`
//!   socket to it (any free one with `--port 0`) *without listening* and
//!   keeps it open for its whole life, so no one else can take the port (a
//!   socket that does not listen gets no connections), and passes the port
//!   number to the workers; the workers' API ports likewise;
//! - starts each worker as `current_exe() serve <every resolved setting>
//!   --worker-index i`, reads its stdout (`capacity N`, then `listening on
//!   ADDR`), and once all are up logs the total capacity and prints, on its
//!   own stdout, `listening on ADDR`, one `worker I pid P [api ADDR]`
//!   line per worker and the chat page's URL (again for each restarted worker once it listens),
//!   after `api at ADDR` of worker 0; each worker is a node with
//!   its own server API on `--api-bind`'s port + its index (any free port
//!   with port 0), and the cluster-wide API calls go through the backplane,
//!   so any worker's API serves the whole cluster;
//! - restarts a worker that exits (logging its exit status) at once, or, if
//!   it died within a second of starting (a crash loop, e.g. Redis is down so
//!   the new worker cannot connect), after 1 s, 2 s, 4 s, up to 8 s;
//! - on SIGTERM or SIGINT sends the signal on to the workers, which drain
//!   (their sockets closed with 1012 over `--drain-seconds`), waits for them
//!   up to the drain, the close linger and five seconds more (then
//!   SIGKILL), and exits 0;
//! - on SIGHUP restarts the workers one at a time (a rolling restart, see
//!   [`Rolling`]): a worker's replacement starts and listens before the old
//!   one drains, so the port never stops accepting and each old worker's
//!   clients reconnect to the others; prints `rolling restart done` when
//!   the last old worker has exited;
//! - fails (stopping the others) if a worker exits before the group is up
//!   or the group is not up within [`START_TIMEOUT`].
//!
//! Workers get `PR_SET_PDEATHSIG = SIGTERM`, so they end with the supervisor
//! even when it is killed with SIGKILL.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use std::collections::VecDeque;

use crossbeam_channel::{RecvTimeoutError, Sender};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use throng_server::bind::{Purpose, Share};
use throng_server::Config;

/// Why the supervisor could not start or keep its workers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Redis(#[from] throng_pubsub::Error),
    #[error("worker {index} exited ({status}) before it was listening")]
    WorkerStart { index: usize, status: String },
    #[error("the workers were not all listening after {0:?}")]
    StartTimeout(Duration),
    #[error(transparent)]
    Server(#[from] throng_server::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// How long the workers have to be listening at start.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long stopping workers may take beyond their drain before they are killed.
const STOP_MARGIN: Duration = Duration::from_secs(5);
/// How long a draining worker may linger for its clients' FINs (the shards' `CLOSE_LINGER`).
const CLOSE_LINGER: Duration = Duration::from_secs(3);
/// A worker that dies sooner than this after starting is in a crash loop:
/// it is restarted after a delay that starts here and doubles per quick death.
const CRASH_LOOP: Duration = Duration::from_secs(1);
/// The longest delay before restarting a crash-looping worker.
const CRASH_LOOP_MAX: Duration = Duration::from_secs(8);
/// How often the children are checked.
const TICK: Duration = Duration::from_millis(50);

enum Event {
    Signal(i32),
    /// A line a worker printed; `generation` tells restarts apart.
    Line {
        index: usize,
        generation: u64,
        line: String,
    },
}

struct Worker {
    index: usize,
    generation: u64,
    child: Option<Child>,
    pid: u32,
    started: Instant,
    capacity: u64,
    listening: bool,
    /// Its server API address (`api at ADDR`), if it has one.
    api: Option<String>,
    /// When to start it again after it exited.
    restart_at: Option<Instant>,
    /// Deaths in a row within [`CRASH_LOOP`] of starting.
    quick_deaths: u32,
}

/// A rolling restart (SIGHUP) in progress: the workers still to replace,
/// and the old process of the one being replaced. For each worker in turn
/// its replacement is started (same index, new process); once that one
/// listens the old one gets SIGTERM and drains; once it has exited, the
/// next worker. A replacement that crashes is restarted as any worker is,
/// while the old one keeps serving.
struct Rolling {
    pending: VecDeque<usize>,
    retiring: Option<Retiring>,
}

/// An old worker process being replaced.
struct Retiring {
    index: usize,
    child: Child,
    pid: u32,
    /// When it was told to drain.
    signalled: Option<Instant>,
}

/// Runs the supervisor of workers joined through Redis at `redis_url`
/// until SIGTERM/SIGINT; see the module docs.
pub fn run(config: Config, redis_url: &str) -> Result<(), Error> {
    throng_pubsub::backplane::redis::check_with(redis_url, &config.redis_options())?;
    let reservation =
        throng_server::bind::reserve(config.addr, config.public_share(), Purpose::Public)?;
    let port = reservation
        .local_addr()?
        .as_socket()
        .map_or(0, |a| a.port());
    let addr = SocketAddr::new(config.addr.ip(), port);
    // The workers' API ports (PORT+i) are held the same way, so no other
    // process shares them by accident while a worker restarts.
    let _api_reservations = match config.api_bind {
        Some(api) if api.port() != 0 => (0..config.workers)
            .map(|i| {
                let at = SocketAddr::new(api.ip(), api.port().saturating_add(i as u16));
                throng_server::bind::reserve(at, Share::Exclusive, Purpose::Api)
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    let exe = std::env::current_exe()?;

    let (tx, rx) = crossbeam_channel::unbounded();
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    {
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("throng-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if tx.send(Event::Signal(sig)).is_err() {
                        break;
                    }
                }
            })?;
    }

    let spawn = |w: &mut Worker| -> std::io::Result<()> {
        w.generation += 1;
        w.api = None;
        let child = start_worker(&exe, &config, w.index, port, w.generation, &tx)?;
        w.pid = child.id();
        w.child = Some(child);
        w.started = Instant::now();
        w.listening = false;
        w.restart_at = None;
        tracing::info!(
            worker = w.index,
            pid = w.pid,
            "started worker {} (pid {})",
            w.index,
            w.pid
        );
        Ok(())
    };
    let mut workers: Vec<Worker> = (0..config.workers)
        .map(|index| Worker {
            index,
            generation: 0,
            child: None,
            pid: 0,
            started: Instant::now(),
            capacity: 0,
            api: None,
            listening: false,
            restart_at: None,
            quick_deaths: 0,
        })
        .collect();
    let stop_timeout = config.limits.drain + CLOSE_LINGER + STOP_MARGIN;
    for w in &mut workers {
        if let Err(e) = spawn(w) {
            stop_all(&mut workers, None, SIGTERM, stop_timeout);
            return Err(e.into());
        }
    }
    let mut rolling: Option<Rolling> = None;

    let deadline = Instant::now() + START_TIMEOUT;
    let mut up = false;
    loop {
        match rx.recv_timeout(TICK) {
            Ok(Event::Signal(SIGHUP)) => {
                if !up || rolling.is_some() {
                    tracing::warn!("SIGHUP: a start or rolling restart is in progress; ignored");
                } else {
                    tracing::info!(
                        "SIGHUP: rolling restart of {} workers, one at a time",
                        workers.len()
                    );
                    rolling = Some(Rolling {
                        pending: (0..workers.len()).collect(),
                        retiring: None,
                    });
                }
            }
            Ok(Event::Signal(sig)) => {
                tracing::info!(
                    signal = sig,
                    "supervisor: stopping {} workers (they drain for up to {:?})",
                    workers.len(),
                    config.limits.drain
                );
                let retiring = rolling.and_then(|r| r.retiring);
                stop_all(&mut workers, retiring, SIGTERM, stop_timeout);
                drop(reservation);
                return Ok(());
            }
            Ok(Event::Line {
                index,
                generation,
                line,
            }) => {
                let w = &mut workers[index];
                if w.generation != generation {
                    continue;
                }
                if let Some(n) = line.strip_prefix("capacity ") {
                    w.capacity = n.trim().parse().unwrap_or(0);
                } else if let Some(a) = line.strip_prefix("api at ") {
                    w.api = Some(a.trim().to_string());
                } else if line.starts_with("listening on ") {
                    w.listening = true;
                    if up {
                        tracing::info!(
                            worker = index,
                            pid = w.pid,
                            "worker {index} (pid {}) restarted and listening",
                            w.pid
                        );
                        announce(&[worker_line(w)]);
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {}
        }

        let now = Instant::now();
        for i in 0..workers.len() {
            let w = &mut workers[i];
            if let Some(child) = &mut w.child {
                let status = match child.try_wait() {
                    Ok(Some(status)) => status,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::error!(worker = w.index, error = %e, "cannot check worker");
                        continue;
                    }
                };
                w.child = None;
                w.listening = false;
                if !up {
                    let (index, status) = (w.index, describe(status));
                    stop_all(&mut workers, None, SIGTERM, stop_timeout);
                    return Err(Error::WorkerStart { index, status });
                }
                w.quick_deaths = if w.started.elapsed() < CRASH_LOOP {
                    w.quick_deaths + 1
                } else {
                    0
                };
                let delay = match w.quick_deaths {
                    0 => Duration::ZERO,
                    n => (CRASH_LOOP * 2u32.saturating_pow(n - 1)).min(CRASH_LOOP_MAX),
                };
                tracing::error!(
                    worker = w.index,
                    pid = w.pid,
                    status = %describe(status),
                    "worker {} (pid {}) exited ({}); restarting it in {delay:?}",
                    w.index,
                    w.pid,
                    describe(status),
                );
                w.restart_at = Some(now + delay);
            }
            if w.child.is_none() && w.restart_at.is_some_and(|at| at <= now) {
                if let Err(e) = spawn(w) {
                    tracing::error!(worker = w.index, error = %e, "cannot start worker; retrying in 1 s");
                    w.restart_at = Some(now + CRASH_LOOP);
                }
            }
        }

        if !up {
            if workers.iter().all(|w| w.listening) {
                up = true;
                let total: u64 = workers.iter().map(|w| w.capacity).sum();
                tracing::info!(
                    %addr,
                    workers = workers.len(),
                    capacity = total,
                    "{} workers listening on {addr}; together they allow about {total} connections",
                    workers.len()
                );
                // Worker 0's API first, for scripts that want one API.
                let mut lines: Vec<String> = workers[0]
                    .api
                    .iter()
                    .map(|a| format!("api at {a}"))
                    .collect();
                lines.push(format!("listening on {addr}"));
                lines.extend(workers.iter().map(worker_line));
                lines.push(open_line(&config, addr));
                announce(&lines);
            } else if now > deadline {
                stop_all(&mut workers, None, SIGTERM, stop_timeout);
                return Err(Error::StartTimeout(START_TIMEOUT));
            }
        }

        if let Some(r) = &mut rolling {
            if roll(r, &mut workers, &spawn, stop_timeout) {
                rolling = None;
                tracing::info!("rolling restart done: every worker replaced");
                announce(&["rolling restart done".to_string()]);
            }
        }
    }
}

/// One tick of a rolling restart; true once it is done.
fn roll(
    r: &mut Rolling,
    workers: &mut [Worker],
    spawn: &impl Fn(&mut Worker) -> std::io::Result<()>,
    stop_timeout: Duration,
) -> bool {
    let Some(old) = &mut r.retiring else {
        let Some(index) = r.pending.pop_front() else {
            return true;
        };
        let w = &mut workers[index];
        let Some(child) = w.child.take() else {
            // Down already (restarting after a crash): it comes back new anyway.
            return false;
        };
        r.retiring = Some(Retiring {
            index,
            child,
            pid: w.pid,
            signalled: None,
        });
        if let Err(e) = spawn(w) {
            tracing::error!(worker = index, error = %e, "cannot start a replacement; retrying in 1 s");
            w.restart_at = Some(Instant::now() + CRASH_LOOP);
        }
        return false;
    };
    let now = Instant::now();
    match old.signalled {
        None if workers[old.index].listening => {
            tracing::info!(
                worker = old.index,
                pid = old.pid,
                "worker {}'s replacement listens; draining the old process (pid {})",
                old.index,
                old.pid
            );
            send_signal(old.pid, SIGTERM);
            old.signalled = Some(now);
        }
        None => {}
        Some(at) => match old.child.try_wait() {
            Ok(Some(status)) => {
                tracing::info!(
                    worker = old.index,
                    pid = old.pid,
                    "old worker {} (pid {}) drained and exited ({})",
                    old.index,
                    old.pid,
                    describe(status)
                );
                r.retiring = None;
            }
            Ok(None) if now.duration_since(at) > stop_timeout => {
                tracing::warn!(
                    worker = old.index,
                    pid = old.pid,
                    "old worker did not finish its drain; killing it"
                );
                let _ = old.child.kill();
                let _ = old.child.wait();
                r.retiring = None;
            }
            Ok(None) => {}
            Err(_) => r.retiring = None,
        },
    }
    false
}

/// `worker I pid P` and, if it has one, ` api ADDR`.
fn worker_line(w: &Worker) -> String {
    match &w.api {
        Some(api) => format!("worker {} pid {} api {api}", w.index, w.pid),
        None => format!("worker {} pid {}", w.index, w.pid),
    }
}

/// Prints lines on stdout and flushes (a pipe would hold them otherwise).
fn announce(lines: &[String]) {
    let mut out = std::io::stdout().lock();
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
    let _ = out.flush();
}

fn start_worker(
    exe: &std::path::Path,
    config: &Config,
    index: usize,
    port: u16,
    generation: u64,
    events: &Sender<Event>,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(exe);
    cmd.args(config.worker_args(index, port))
        .envs(config.worker_env())
        .env_remove("THRONG_CONFIG")
        .env_remove("THRONG_WORKERS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    die_with_parent(&mut cmd);
    let mut child = cmd.spawn()?;
    if let Some(stdout) = child.stdout.take() {
        let events = events.clone();
        std::thread::Builder::new()
            .name(format!("throng-worker-{index}-out"))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let event = Event::Line {
                        index,
                        generation,
                        line,
                    };
                    if events.send(event).is_err() {
                        break;
                    }
                }
            })?;
    }
    Ok(child)
}

/// The line a person reads at start: where the chat page is (printed by a
/// single node, `serve.rs`, and by the supervisor for its workers).
pub fn open_line(config: &throng_server::Config, addr: std::net::SocketAddr) -> String {
    let tls = config.tls.is_some();
    let url = throng_server::page_url(addr, tls);
    let mut line = format!(
        "open {url} for the chat page, and again in a second tab to chat between them (Ctrl-C stops)"
    );
    if tls {
        let socket = url.replacen("https://", "wss://", 1);
        line.push_str(&format!("; Phoenix clients connect to {socket}socket"));
    }
    let hooks = &config.hooks;
    if hooks.connect {
        // The chat page opens only for sockets the backend accepts: say
        // where people sign in when the configuration names it.
        let backend = hooks.url.as_deref().unwrap_or_default();
        line = match &hooks.page_url {
            Some(page) => format!(
                "open {page} (the app's page) to sign in; the app backend's connect hook \
                 ({backend}/connect) decides who connects to the chat page at {url} (Ctrl-C stops)"
            ),
            None => format!(
                "{line}; the app backend's connect hook ({backend}/connect) decides who \
                 connects (give --hook-page-url its sign-in page to have it named here)"
            ),
        };
    }
    line
}

/// Asks the kernel to SIGTERM the child when the supervisor dies.
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only makes
    // the async-signal-safe prctl system call.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Sends `sig` to a process we started (and have not reaped).
#[allow(unsafe_code)]
fn send_signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) takes plain integers; the pid is our unreaped child,
    // so it cannot have been reused.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Sends `sig` to every running worker (and to an old one being replaced),
/// waits for them up to `timeout`, kills stragglers.
fn stop_all(workers: &mut [Worker], retiring: Option<Retiring>, sig: i32, timeout: Duration) {
    let mut children: Vec<(usize, u32, Child)> = workers
        .iter_mut()
        .filter_map(|w| Some((w.index, w.pid, w.child.take()?)))
        .chain(retiring.map(|old| (old.index, old.pid, old.child)))
        .collect();
    for (_, pid, _) in &children {
        send_signal(*pid, sig);
    }
    let deadline = Instant::now() + timeout;
    for (index, pid, child) in &mut children {
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(TICK),
                Ok(None) => {
                    tracing::warn!(
                        worker = *index,
                        pid = *pid,
                        "worker did not stop; killing it"
                    );
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
            }
        }
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}
