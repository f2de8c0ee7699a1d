//! The command line of `throng bench`, `throng agent` and `throng tune`, and
//! what the bench flags mean for the load. The flags that shape the load
//! are one struct, [`LoadArgs`] (flattened into [`BenchArgs`], under their
//! own help heading), and [`LoadArgs::load`] is the one place they shape
//! the scenario (the built-in one, or a `--scenario` or `--tsung` file
//! scaled by them), after checking each flag's bounds.

use std::net::SocketAddr;
use std::path::PathBuf;

use throng_protocol::Vsn;

use crate::error::BenchError;
use crate::scenario::{self, Phase, Scenario};
use crate::tsung::{self, TsungImport};

/// `throng bench`: run a load test (the controller).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "The run (server, agents, output)")]
pub struct BenchArgs {
    /// Measure the machine's floor before the ramp-up: the same fan-out
    /// as a broadcast written by minimal writers with no server logic, so
    /// broadcasts report their time to the last receiver as a ratio to it
    /// (`auto`: when the run broadcasts, with the embedded server and local agents).
    #[arg(long, value_enum, default_value_t = FloorMode::Auto, num_args = 0..=1, default_missing_value = "on")]
    pub floor: FloorMode,
    /// The floor measures on at most this many sockets (0: one per user),
    /// spread over every agent and writer, and scales its times to the
    /// run's users per receiver, its heartbeats a second and its rounds'
    /// overlap kept the run's: a full floor at 1,000,000 took longer than
    /// the run. The report says when it did (`floor.scale`).
    #[arg(long, default_value_t = 200_000, value_name = "SOCKETS")]
    pub floor_sample: u64,
    /// A running server (HOST:PORT) instead of the embedded `throng serve`.
    /// Server-side figures need its /metrics on that port: start it with
    /// `throng serve --public-metrics`.
    #[arg(long, value_name = "HOST:PORT")]
    pub target: Option<String>,
    /// Connect over TLS (wss://). The embedded server (or the storm's)
    /// gets a fresh ECDSA P-256 certificate for 127.0.0.1 that the clients
    /// trust; every user's first connect is a full handshake. A --target
    /// needs --tls-ca (its /metrics is then not read: server figures come
    /// only with the embedded server)
    #[arg(long)]
    pub tls: bool,
    /// With --tls and --target: PEM certificate(s) of the CA to trust for
    /// the server's certificate, checked against the --target host
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub tls_ca: Option<PathBuf>,
    /// With --tls: first run the same load in plaintext (same flags, no
    /// floor), then over TLS, in this one invocation; the report puts the
    /// two side by side: server memory per idle joined socket (PSS), the
    /// broadcasts' last receiver, server CPU per receipt and per join, and
    /// the handshake rounds' CPU per connect (a resumed TLS connect beside
    /// a plaintext one). The run takes twice as long
    #[arg(long, requires = "tls", conflicts_with_all = ["target", "remote_agents"])]
    pub compare_plain: bool,
    /// With --tls (and both runs of --compare-plain): after the run, the
    /// handshake rounds on the embedded server: 3 rounds of this many new
    /// clients connecting and joining (full TLS handshakes), each followed
    /// by the same clients returning with their session tickets (resumed
    /// handshakes), reporting server CPU per connect of each (0: none)
    #[arg(long, default_value_t = 2000, value_name = "SOCKETS")]
    pub handshake_sample: u64,
    /// The embedded server keeps the last SIZE messages of each topic the
    /// scenario broadcasts on (`throng serve --history TOPIC=SIZE`, 1 to
    /// 10000): every broadcast is stored as it goes out, as on a server
    /// whose clients rejoin with `since` [default: no history]
    #[arg(long, value_name = "SIZE", conflicts_with = "target")]
    pub history: Option<u32>,
    /// How the clients authenticate when they connect. `jwt`: each user
    /// connects with its own HS256 token (`token=` in the connect URL,
    /// claims `{"sub":"u<user number>","exp":<now + 1 day>}`), so every
    /// socket is a different user; the embedded server (or the storm's)
    /// runs with `--auth jwt` and the --auth-jwt-secret (default: a fresh
    /// random one)
    #[arg(long, value_enum, default_value_t = AuthMode::None, conflicts_with_all = ["hooks", "soak"])]
    pub auth: AuthMode,
    /// With --auth jwt: the HS256 secret the tokens are signed with. Needed
    /// with --target (the secret that server was given as
    /// --auth-jwt-secret); the embedded server gets it too
    #[arg(
        long,
        value_name = "SECRET",
        env = "THRONG_AUTH_JWT_SECRET",
        hide_env_values = true
    )]
    pub auth_jwt_secret: Option<String>,
    /// Local agent processes [default: as many as the connections need].
    #[arg(long, value_name = "COUNT", allow_negative_numbers = true)]
    pub agents: Option<u32>,
    /// Remote agents to wait for (`throng agent --controller` on --listen).
    #[arg(
        long,
        default_value_t = 0,
        value_name = "COUNT",
        allow_negative_numbers = true
    )]
    pub remote_agents: u32,
    /// Where agents reach the controller (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR:PORT")]
    pub listen: String,
    /// The secret agents must prove they know (and that the controller
    /// proves to them); default: a fresh one, handed to local agents and
    /// printed for remote ones.
    #[arg(long, env = crate::wire::TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// Seconds to keep everyone connected after the ramp-up, before the
    /// disconnect storm. Default: until every session has done its steps
    /// and its broadcasts are delivered, at most 60 s plus what the
    /// sessions wait on purpose (such as --broadcast-after); sessions that
    /// never end their steps (a Tsung config's think loops) are held 10 s
    /// plus their scheduled waits, at most 60 s in all. A countdown shows
    /// while holding, and a hold that ends with broadcasts still out says so.
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub hold: Option<f64>,
    /// Stop the ramp-up when the machine's available memory
    /// (`MemAvailable`) falls under SIZE (bytes, or with KiB, MiB or GiB:
    /// `1.5GiB`): the users connected so far stay, the broadcasts go to
    /// them, and the report says where it stopped. The floor's sockets
    /// are checked too: a floor that would cross it is given up (the run
    /// goes on without it). For stepping up to the machine's limit
    /// without exhausting it [default: off]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub min_available: Option<u64>,
    /// The embedded server's idle timeout (default: the server's, or 0 when
    /// the scenario sends no heartbeats).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub idle_timeout: Option<u64>,
    /// Extra argument for the embedded `throng serve` (repeatable).
    #[arg(long, allow_hyphen_values = true)]
    pub server_arg: Vec<String>,
    /// Write the results as JSON (also when the run is interrupted: what
    /// was measured so far).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML report [default: throng-bench-PID.html
    /// in the temporary directory; its path is printed at the end].
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Seconds between timeline samples (users, connected, rates, CPU, RSS).
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    pub sample_interval: f64,
    /// Run the embedded server and local agents in a private network
    /// namespace whose TCP hash table fits the run (root, Linux 5.19+):
    /// `auto` does so when the connections overfill the host's table.
    #[arg(long, value_enum, default_value_t = NetnsMode::Auto)]
    pub netns: NetnsMode,
    /// The live dashboard's port (0 = off): the run's progress in a
    /// browser while it runs (the HTML report keeps the final figures).
    #[arg(long, default_value_t = 8091, value_name = "PORT")]
    pub dashboard_port: u16,
    /// Run the hooks scenario instead of a load: a built-in app backend and
    /// `throng serve` with a join hook on `hooked:*` and none on `plain:*`
    /// (--server-arg adds flags to it); rounds of --connections sockets
    /// (default 5000) joining each, alternating, reporting joins/s through
    /// the hook as a ratio to joins without, the latency the hook adds, and
    /// server memory per idle joined socket (--json for the figures).
    #[arg(long, help_heading = "Hooks scenario")]
    pub hooks: bool,
    /// Rounds of the hooks scenario (each: one phase without hooks, one
    /// through the join hook); the report gives medians and the spread.
    #[arg(
        long,
        default_value_t = 3,
        value_name = "COUNT",
        help_heading = "Hooks scenario"
    )]
    pub hook_rounds: u32,
    /// Run the reconnect storm instead of a load: --connections clients
    /// (default 100000) on --storm-topics topics that keep history, its own
    /// servers (one per ~19,000 clients, or --storm-redis), numbered
    /// messages published through the server API; every client's socket is
    /// cut at once and rejoins with `since` = the last ref it saw. Reports
    /// the time until all have recovered, replayed messages per second,
    /// broadcast throughput, server bytes per idle joined socket and the
    /// loss each client counted (a gap or a duplicate is an error).
    #[arg(
        long,
        help_heading = "Reconnect storm scenario",
        conflicts_with = "hooks"
    )]
    pub storm: bool,
    /// Topics the storm's clients are spread over (each keeps history).
    #[arg(
        long,
        default_value_t = 10,
        value_name = "COUNT",
        help_heading = "Reconnect storm scenario"
    )]
    pub storm_topics: u32,
    /// Messages per second published through the server API (all topics
    /// together, round robin) from before the cut until after the last
    /// client recovered.
    #[arg(
        long,
        default_value_t = 2.0,
        value_name = "PER_SEC",
        allow_negative_numbers = true,
        help_heading = "Reconnect storm scenario"
    )]
    pub storm_rate: f64,
    /// Messages per topic published as fast as the API takes them once
    /// everyone has joined (the broadcast throughput figure; 0: none).
    #[arg(
        long,
        default_value_t = 10,
        value_name = "COUNT",
        help_heading = "Reconnect storm scenario"
    )]
    pub storm_burst: u32,
    /// `off`: the same topics without history (no cut: the throughput and
    /// memory figures to compare with a run with history).
    #[arg(long, value_enum, default_value_t = StormHistory::On, help_heading = "Reconnect storm scenario")]
    pub storm_history: StormHistory,
    /// Seconds the steady publishing goes on before the cut, and after the
    /// last client recovered.
    #[arg(
        long,
        default_value_t = 5.0,
        value_name = "SECS",
        allow_negative_numbers = true,
        help_heading = "Reconnect storm scenario"
    )]
    pub storm_hold: f64,
    /// Run the storm's server as `throng serve --workers N --redis` on a
    /// redis-server the bench starts (history in Redis, one API for the
    /// cluster), and report Redis commands per rejoin from `INFO
    /// commandstats`.
    #[arg(long, help_heading = "Reconnect storm scenario")]
    pub storm_redis: bool,
    /// The storm as a deploy makes it: instead of the clients cutting their
    /// sockets, the server is stopped with SIGTERM (its drain closes every
    /// socket with 1012 and it exits) and started again on the same port;
    /// every client reconnects as phoenix.js does (with its token under
    /// --auth jwt, resuming TLS where the server still knows its ticket)
    /// and rejoins with `since`. The history is in Redis (as
    /// --storm-redis), which outlives the server. Reports the time from
    /// the first 1012 to the last recovery, reconnects per second, server
    /// CPU per reconnect, and the failed connects by kind (refused while
    /// the server was down, resets, 503s) and the closes by code.
    #[arg(long, requires = "storm", help_heading = "Reconnect storm scenario")]
    pub storm_restart: bool,
    /// Run the soak instead of a load, for DURATION (`180`, `90s`, `3m`,
    /// `1h`): --connections sessions (default 5000) held steady on its own
    /// server while they churn: connects and disconnects (close frames,
    /// resets, dropped sockets), joins and leaves of rooms, presence
    /// topics, topics whose joins and pushes go to a built-in app backend
    /// (connect, join, push hooks and lifecycle events), history topics
    /// rejoined with `since`, long-poll sessions, pushes, heartbeats and
    /// server API calls. The server's RSS, PSS, open files, threads and
    /// every gauge of its /metrics are sampled once a second; the run fails
    /// (exit status 1) when any grew over the second half beyond its noise
    /// (memory: 5% or more), or a count did not come back once the clients
    /// left. The HTML report charts every series.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = crate::soak::parse_duration,
        help_heading = "Soak scenario",
        conflicts_with_all = ["hooks", "storm"]
    )]
    pub soak: Option<f64>,
    /// New sessions a second while the soak holds its population (each
    /// session lives --connections / this many seconds on average)
    /// [default: 1% of --connections, or more in a soak too short for the
    /// population to turn over three times in its first half]
    #[arg(
        long,
        value_name = "PER_SEC",
        allow_negative_numbers = true,
        requires = "soak",
        help_heading = "Soak scenario"
    )]
    pub soak_churn: Option<f64>,
    /// The soak's server as `throng serve --workers N`, joined through a
    /// redis-server the bench starts (each worker holds up to its
    /// open-files limit) [default: as many as --connections need]
    #[arg(
        long,
        value_name = "N",
        requires = "soak",
        help_heading = "Soak scenario"
    )]
    pub workers: Option<u32>,
    /// Run the soak's server with `--redis` on a redis-server the bench
    /// starts (the backplane, history, presence and occupancy in Redis;
    /// always so with 2 or more workers), and sample Redis's memory and
    /// keys too.
    #[arg(long, requires = "soak", help_heading = "Soak scenario")]
    pub redis: bool,
    /// What the users do (last: clap keeps a flattened struct's help
    /// heading for the flags after it): the scenario and its size, schedule and
    /// heartbeats ([`LoadArgs::load`] turns them into the scenario).
    #[command(flatten)]
    pub load: LoadArgs,
}

/// The flags of `throng bench` that shape the load: one struct, parsed by
/// clap, turned into the scenario in one place ([`LoadArgs::load`]).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Load (what the users do)")]
pub struct LoadArgs {
    /// Users (connections) in all: the built-in chat scenario's size, or the
    /// total a --scenario/--tsung run is scaled to [default: 1000 for the
    /// built-in scenario, the file's own total otherwise].
    #[arg(
        long,
        visible_alias = "max-users",
        value_name = "USERS",
        allow_negative_numbers = true
    )]
    pub connections: Option<u64>,
    /// Broadcasts each publisher sends once everyone has joined (built-in scenario).
    #[arg(
        long,
        default_value_t = 0,
        value_name = "COUNT",
        allow_negative_numbers = true
    )]
    pub broadcasts: u32,
    /// Publishers (built-in scenario); everyone else listens.
    #[arg(
        long,
        default_value_t = 1,
        value_name = "USERS",
        allow_negative_numbers = true
    )]
    pub publishers: u64,
    /// Seconds between one publisher's broadcasts.
    #[arg(
        long,
        default_value_t = 0.1,
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    pub broadcast_interval: f64,
    /// Seconds the publishers wait, once everyone has joined, before their
    /// first broadcast (built-in scenario): hold the crowd, then broadcast.
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    pub broadcast_after: f64,
    /// Bytes of text each broadcast carries besides its timestamp (built-in
    /// scenario), as a `"pad"` field of notification-like JSON text: with
    /// --deflate, what compression does to a notification of that size.
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    pub broadcast_pad: usize,
    /// New users per second, on a fixed schedule. Without it (and without
    /// --duration) the built-in scenario's users arrive adaptively: the
    /// controller raises the rate while handshakes stay quick and backs off
    /// when they queue, and reports the rate it found and what set it.
    /// With --scenario/--tsung: every phase's rate [default: the file's].
    #[arg(long, value_name = "USERS_PER_SEC", allow_negative_numbers = true)]
    pub arrival_rate: Option<f64>,
    /// Ramp-up seconds (all arrival phases together) [default: as long as
    /// the users take to arrive at the rate].
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Seconds between each connection's heartbeats, overriding the scenario's
    /// (built-in: 30, as phoenix.js, spread evenly over the interval; Tsung
    /// imports: 0). 0 sends none, as the Tsung run of the Phoenix team's
    /// 2M-connection benchmark did; the embedded server then gets no idle
    /// timeout.
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub heartbeat: Option<f64>,
    /// Seconds between the points of a grid heartbeats fall on, shared by
    /// every agent on the host: each connection keeps its own phase and
    /// interval, and the server's processes read the heartbeats due in one
    /// step together. Default 0: each connection's heartbeat at its own
    /// millisecond, as real phoenix.js clients send them.
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub heartbeat_grid: Option<f64>,
    /// Seconds a TCP connect plus WebSocket upgrade may take before it
    /// counts as a timeout [default: the scenario's, 10].
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub connect_timeout: Option<f64>,
    /// Use the v1 serializer (JSON objects) in the built-in scenario.
    #[arg(long)]
    pub v1: bool,
    /// Every client offers permessage-deflate (WebSocket compression, as
    /// browsers and Node's ws do) and inflates what arrives compressed; the
    /// server compresses messages of 256 bytes or more
    #[arg(long)]
    pub deflate: bool,
    /// A TOML scenario (see scenarios/README.md).
    #[arg(long, conflicts_with = "tsung", value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// A Tsung XML config to run (e.g. scenarios/phoenix.xml).
    #[arg(long, value_name = "FILE")]
    pub tsung: Option<PathBuf>,
    /// Presence on the joined topics, as `throng serve --presence` spells
    /// it (`rooms:lobby=param:user`, `/count` for counts only), overriding
    /// the scenario's (`off`: none): the embedded server keeps it, and the
    /// run reports presence traffic and the time until each join is visible
    /// to every subscriber. Against --target, the rule the server has.
    #[arg(long)]
    pub presence: Option<String>,
}

/// `throng bench --auth`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Anonymous sockets, no token.
    None,
    /// Each user's own HS256 JWT in the connect URL.
    Jwt,
}

/// `throng bench --netns`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsMode {
    /// When the run overfills the host's TCP hash table, it is root, and
    /// no --target or remote agents are involved.
    Auto,
    /// Always (an error when it cannot).
    On,
    /// Never: the host's namespace.
    Off,
}

/// `throng bench --storm-history`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StormHistory {
    /// The topics keep history; the clients are cut and rejoin with `since`.
    On,
    /// No history, no cut: the same joins, publishing and burst.
    Off,
}

/// `throng bench --floor`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorMode {
    /// When the run broadcasts, with the embedded server and local agents.
    Auto,
    /// Always (local agents needed).
    On,
    /// Never.
    Off,
}

/// `throng agent`: hold connections for a controller.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// The controller's address (printed by `throng bench --remote-agents N`).
    #[arg(long, required_unless_present_any = ["storm_client", "soak_client"])]
    pub controller: Option<SocketAddr>,
    /// The controller's token (printed by `throng bench --remote-agents N`);
    /// prefer the environment variable, which `ps` does not show.
    #[arg(long, env = crate::wire::TOKEN_ENV, hide_env_values = true, required_unless_present_any = ["storm_client", "soak_client"])]
    pub token: Option<String>,
    /// Be a floor writer instead (started by `throng bench` itself; see
    /// the floor measurement in crates/throng-bench/src/floor/).
    #[arg(long, hide = true)]
    pub floor_writer: bool,
    /// Be a reconnect storm client process instead, its orders (JSON) here
    /// and its commands on stdin (started by `throng bench --storm` itself;
    /// see crates/throng-bench/src/storm/).
    #[arg(long, hide = true, value_name = "ORDERS")]
    pub storm_client: Option<String>,
    /// Be a soak client process instead, its orders (JSON) here and its
    /// commands on stdin (started by `throng bench --soak` itself; see
    /// crates/throng-bench/src/soak/).
    #[arg(long, hide = true, value_name = "ORDERS")]
    pub soak_client: Option<String>,
}

/// `throng tune`: print (or apply) OS settings and the limits that cap a run.
#[derive(clap::Args, Debug, Clone)]
pub struct TuneArgs {
    /// Raise the settings the planned run lacks (root): nothing is lowered,
    /// and the values replaced are saved for --revert first.
    #[arg(long, conflicts_with = "revert")]
    pub apply: bool,
    /// Restore the values the last --apply replaced.
    #[arg(long)]
    pub revert: bool,
    /// The planned run's connections: what it needs, and the limits that
    /// cap it [default: 1000000].
    #[arg(long, value_name = "CONNECTIONS")]
    pub connections: Option<u64>,
}

/// The load a run's flags describe.
#[derive(Clone, Debug)]
pub struct Load {
    pub scenario: Scenario,
    /// The Tsung config it was imported from (`--tsung`): its clients map
    /// onto agents, and its notes are printed.
    pub tsung: Option<TsungImport>,
    /// The controller sets the arrival rate as the run goes (the built-in
    /// scenario without --arrival-rate or --duration); the scenario's one
    /// phase starts at [`ADAPTIVE_START`] per second.
    pub adaptive: bool,
}

/// Adaptive arrival's first rate, users per second: low, so that even a
/// slow server sees no burst before the controller's first look (slow
/// start reaches 20,000/s within 1.5 s when handshakes stay quick).
pub const ADAPTIVE_START: f64 = 100.0;

impl BenchArgs {
    /// The load ([`LoadArgs::load`]), once the run's own flags are in
    /// bounds: an error names the flag before anything starts.
    pub fn load(&self) -> Result<Load, BenchError> {
        let bad =
            |flag: &str, v: f64, want: &str| Err(BenchError::Usage(format!("{flag} {v}: {want}")));
        let s = self.sample_interval;
        if !(s.is_finite() && s > 0.0) {
            return bad("--sample-interval", s, "seconds must be more than 0");
        }
        if let Some(h) = self.hold.filter(|h| !(h.is_finite() && *h >= 0.0)) {
            return bad("--hold", h, "seconds must be 0 or more");
        }
        if let Some(h) = self.history.filter(|h| !(1..=10_000).contains(h)) {
            return bad(
                "--history",
                f64::from(h),
                "1 to 10000 messages a topic keeps",
            );
        }
        let no_secret = self.auth_jwt_secret.as_deref().is_none_or(str::is_empty);
        if let (AuthMode::Jwt, Some(t), true) = (self.auth, &self.target, no_secret) {
            return Err(BenchError::Usage(format!(
                "--auth jwt with --target {t}: the tokens must be signed with that server's HS256 secret; add --auth-jwt-secret SECRET (what it was started with as --auth-jwt-secret), or leave --target out to run the embedded server with a fresh secret"
            )));
        }
        self.load.load()
    }
}

impl LoadArgs {
    /// The scenario these flags describe, each flag applied once: the
    /// built-in chat scenario built from them, or a `--scenario`/`--tsung`
    /// file scaled by `--arrival-rate` (every phase), `--duration` (the whole
    /// ramp-up, split in proportion) and `--connections` (phases' caps scaled
    /// to add up to it, lengthened if needed); then `--heartbeat` for any.
    pub fn load(&self) -> Result<Load, BenchError> {
        self.check()?;
        let (mut scenario, tsung) = match (&self.tsung, &self.scenario) {
            (Some(path), _) => {
                let import =
                    tsung::import(&read("--tsung", path)?).map_err(|e| in_file(path, e))?;
                (import.scenario.clone(), Some(import))
            }
            (None, Some(path)) => (
                Scenario::from_toml(&read("--scenario", path)?).map_err(|e| in_file(path, e))?,
                None,
            ),
            (None, None) => (self.chat(), None),
        };
        if self.tsung.is_some() || self.scenario.is_some() {
            if let Some(rate) = self.arrival_rate {
                scenario.set_arrival_rate(rate);
            }
            if let Some(secs) = self.duration {
                scenario.set_duration(secs);
            }
            if let Some(n) = self.connections {
                scenario.set_max_users(n);
            }
        }
        if let Some(h) = self.heartbeat {
            if !(h.is_finite() && h >= 0.0) {
                return Err(BenchError::Usage(format!(
                    "--heartbeat {h}: seconds must be 0 (off) or more"
                )));
            }
            scenario.heartbeat = h;
        }
        if self.deflate {
            scenario.deflate = true;
        }
        if let Some(g) = self.heartbeat_grid {
            scenario.heartbeat_grid = g;
            scenario.validate()?;
        }
        if let Some(p) = &self.presence {
            scenario.presence = (p != "off").then(|| p.clone());
            scenario.validate()?;
        }
        if let Some(t) = self.connect_timeout {
            if !(t.is_finite() && t > 0.0) {
                return Err(BenchError::Usage(format!(
                    "--connect-timeout {t}: seconds must be more than 0"
                )));
            }
            scenario.connect_timeout = t;
        }
        let adaptive = self.adaptive();
        Ok(Load {
            scenario,
            tsung,
            adaptive,
        })
    }

    /// The flags' own bounds, checked before anything starts: a run of
    /// nothing, a rate of 0 or a negative time is refused with the flag named.
    fn check(&self) -> Result<(), BenchError> {
        let bad = |flag: &str, v: String, want: &str| {
            Err(BenchError::Usage(format!("{flag} {v}: {want}")))
        };
        if self.connections == Some(0) {
            return bad("--connections", "0".into(), "a run needs at least 1 user");
        }
        let positive = [
            (
                "--arrival-rate",
                self.arrival_rate,
                "users per second must be more than 0 (leave it out for adaptive arrival)",
            ),
            ("--duration", self.duration, "seconds must be more than 0"),
        ];
        for (flag, v, want) in positive {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return bad(flag, v.to_string(), want);
            }
        }
        let at_least_0 = [
            ("--broadcast-interval", Some(self.broadcast_interval)),
            ("--broadcast-after", Some(self.broadcast_after)),
        ];
        for (flag, v) in at_least_0 {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v >= 0.0)) {
                return bad(flag, v.to_string(), "seconds must be 0 or more");
            }
        }
        let builtin = self.scenario.is_none() && self.tsung.is_none();
        let users = self.connections.unwrap_or(1000);
        if builtin && self.broadcasts > 0 && !(1..=users).contains(&self.publishers) {
            return bad(
                "--publishers",
                self.publishers.to_string(),
                &format!("1 to --connections ({users}) users send the --broadcasts"),
            );
        }
        Ok(())
    }

    /// Whether arrivals are adaptive: the built-in scenario with no
    /// schedule given.
    fn adaptive(&self) -> bool {
        self.tsung.is_none()
            && self.scenario.is_none()
            && self.arrival_rate.is_none()
            && self.duration.is_none()
    }

    /// The built-in chat scenario: `--connections` users (1,000) arriving at
    /// `--arrival-rate`, or spread over `--duration`; with both, the rate
    /// for that long (at most `--connections` users); with neither,
    /// adaptively from [`ADAPTIVE_START`] per second.
    fn chat(&self) -> Scenario {
        let users = self.connections.unwrap_or(1000);
        let phase = match (self.arrival_rate, self.duration) {
            (Some(rate), Some(secs)) => Phase {
                duration: secs,
                arrival_rate: rate,
                max_users: Some(users),
            },
            (None, Some(secs)) => Phase {
                duration: secs,
                arrival_rate: users as f64 / secs.max(0.001),
                max_users: Some(users),
            },
            (rate, None) => Phase::at_rate(users, rate.unwrap_or(ADAPTIVE_START)),
        };
        let vsn = if self.v1 { Vsn::V1 } else { Vsn::V2 };
        let mut sc = scenario::chat(
            phase,
            self.publishers,
            self.broadcasts,
            self.broadcast_interval,
            vsn,
        );
        scenario::delay_publish(&mut sc, self.broadcast_after);
        scenario::pad_publish(&mut sc, self.broadcast_pad);
        sc
    }
}

/// A scenario file's text; an error names the flag and the file.
fn read(flag: &str, path: &std::path::Path) -> Result<String, BenchError> {
    std::fs::read_to_string(path).map_err(|e| {
        BenchError::Usage(format!(
            "{flag} {}: cannot read it: {e} (a path relative to {})",
            path.display(),
            std::env::current_dir().map_or_else(|_| "here".into(), |d| d.display().to_string())
        ))
    })
}

/// An error in a scenario file, with the file's name in front.
fn in_file(path: &std::path::Path, e: BenchError) -> BenchError {
    match e {
        BenchError::Scenario(m) => BenchError::Scenario(format!("{}: {m}", path.display())),
        BenchError::Tsung(m) => BenchError::Tsung(format!("{}: {m}", path.display())),
        other => other,
    }
}

/// A size in bytes: a number, optionally fractional, with an optional
/// `B`, `KiB`, `MiB` or `GiB` (`K`, `M`, `G` the same powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "{s:?}: not a size; write bytes or a number with KiB, MiB or GiB, such as 1.5GiB"
            ))
        }
    };
    let n: f64 = num.parse().map_err(|_| {
        format!("{s:?}: not a size; write bytes or a number with KiB, MiB or GiB, such as 1.5GiB")
    })?;
    Ok((n * scale as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn load(args: &[&str]) -> Result<Load, BenchError> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .map_err(|e| BenchError::Scenario(e.to_string()))?;
        cli.bench.load()
    }

    /// No flag's help gives its default twice: clap prints `[default: X]`
    /// for a flag with a default value, so the text must not say it too
    /// (`--broadcast-pad` did: `[default: 0] [default: 0]`).
    #[test]
    fn no_help_gives_a_default_twice() {
        use clap::CommandFactory;
        #[derive(Parser)]
        struct Agent {
            #[command(flatten)]
            agent: AgentArgs,
        }
        #[derive(Parser)]
        struct Tune {
            #[command(flatten)]
            tune: TuneArgs,
        }
        for cmd in [Cli::command(), Agent::command(), Tune::command()] {
            for arg in cmd.get_arguments() {
                let help = [arg.get_help(), arg.get_long_help()]
                    .iter()
                    .flatten()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .join(" ");
                let said = help.matches("[default:").count();
                let by_clap = usize::from(
                    !arg.get_default_values().is_empty() && !arg.is_hide_default_value_set(),
                );
                assert!(
                    said + by_clap <= 1,
                    "--{} gives its default {} times: {help}",
                    arg.get_id(),
                    said + by_clap
                );
            }
        }
    }

    fn phoenix_xml() -> String {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/phoenix.xml").to_string()
    }

    #[test]
    fn built_in_scenario_from_flags() {
        let l = load(&["--connections", "2000", "--arrival-rate", "500"]).unwrap();
        assert!(!l.adaptive, "--arrival-rate keeps a fixed schedule");
        let sc = l.scenario;
        assert_eq!(sc.phases, vec![Phase::at_rate(2000, 500.0)]);
        assert_eq!(sc.serializer, Vsn::V2);
        assert_eq!(sc.heartbeat, 30.0);
        // Spread over --duration: the rate follows.
        let sc = load(&["--connections", "2000", "--duration", "4"])
            .unwrap()
            .scenario;
        assert_eq!(
            (sc.phases[0].duration, sc.phases[0].arrival_rate),
            (4.0, 500.0)
        );
        assert_eq!(sc.total_users(), 2000);
        // Both: that rate for that long, at most --connections users.
        let sc = load(&[
            "--connections",
            "2000",
            "--arrival-rate",
            "100",
            "--duration",
            "3",
        ])
        .unwrap()
        .scenario;
        assert_eq!(sc.total_users(), 300);
        let l = load(&["--v1", "--heartbeat", "0", "--broadcasts", "2"]).unwrap();
        assert!(l.adaptive, "no schedule given: adaptive arrival");
        assert_eq!(l.scenario.phases[0].arrival_rate, ADAPTIVE_START);
        let sc = l.scenario;
        assert_eq!(sc.serializer, Vsn::V1);
        assert_eq!(sc.heartbeat, 0.0);
        assert_eq!(sc.total_users(), 1000);
        assert_eq!(sc.expected_broadcasts(), 2);
        assert!(load(&["--heartbeat", "-1"]).is_err());
        let sc = load(&["--connect-timeout", "2.5"]).unwrap().scenario;
        assert_eq!(sc.connect_timeout, 2.5);
        assert!(load(&["--connect-timeout", "0"]).is_err());
    }

    #[test]
    fn bad_flags_are_refused_up_front_with_the_flag_named() {
        let err = |args: &[&str]| load(args).unwrap_err().to_string();
        assert!(err(&["--connections", "0"]).contains("--connections 0"));
        let e = err(&["--arrival-rate", "0"]);
        assert!(e.contains("--arrival-rate 0: users per second"), "{e}");
        assert!(err(&["--arrival-rate", "-5"]).contains("--arrival-rate -5"));
        assert!(err(&["--duration", "0"]).contains("--duration 0"));
        assert!(err(&["--hold", "-1"]).contains("--hold -1"));
        assert!(err(&["--broadcasts", "1", "--publishers", "0"]).contains("--publishers 0"));
        let e = err(&["--scenario", "nope.toml"]);
        assert!(e.contains("--scenario nope.toml: cannot read it"), "{e}");
        let e = err(&["--tsung", "nope.xml"]);
        assert!(e.contains("--tsung nope.xml: cannot read it"), "{e}");
    }

    #[test]
    fn presence_flag_sets_or_clears_the_rule() {
        let l = load(&["--presence", "rooms:lobby=param:user/count"]).unwrap();
        assert_eq!(
            l.scenario.presence.as_deref(),
            Some("rooms:lobby=param:user/count")
        );
        assert!(l.adaptive, "presence changes nothing else");
        assert!(load(&["--presence", "rooms:lobby"]).is_err());
        let toml = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/presence.toml");
        let on = load(&["--scenario", toml]).unwrap().scenario;
        assert!(on.presence.is_some());
        let off = load(&["--scenario", toml, "--presence", "off"])
            .unwrap()
            .scenario;
        assert_eq!(off.presence, None);
        assert_eq!(off.roles, on.roles, "same load otherwise");
    }

    #[test]
    fn tsung_config_scaled_by_flags() {
        let xml = phoenix_xml();
        let l = load(&["--tsung", &xml]).unwrap();
        assert_eq!(l.scenario.total_users(), 100_000);
        assert_eq!(l.tsung.as_ref().map(|t| t.clients.len()), Some(3));
        assert!(!l.adaptive, "a Tsung config keeps its own schedule");
        let l = load(&[
            "--tsung",
            &xml,
            "--max-users",
            "600",
            "--arrival-rate",
            "1000",
        ])
        .unwrap();
        assert_eq!(l.scenario.total_users(), 600);
        assert_eq!(l.scenario.phases[0].arrival_rate, 1000.0);
        // --connections wins over a --duration too short to start them all.
        let l = load(&[
            "--tsung",
            &xml,
            "--max-users",
            "600",
            "--arrival-rate",
            "100",
            "--duration",
            "1",
        ])
        .unwrap();
        assert_eq!(l.scenario.total_users(), 600);
        assert_eq!(l.scenario.heartbeat, 0.0);
    }

    #[test]
    fn memory_floor_sizes_read_as_bytes() {
        assert_eq!(parse_size("1.5GiB"), Ok(1_610_612_736));
        assert_eq!(parse_size("1536MiB"), Ok(1_610_612_736));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64 KiB"), Ok(65_536));
        assert!(parse_size("lots").unwrap_err().contains("1.5GiB"));
        assert!(parse_size("1.5TB").is_err());
        let cli = Cli::try_parse_from(["bench", "--min-available", "1.5GiB"]).unwrap();
        assert_eq!(cli.bench.min_available, Some(1_610_612_736));
        assert!(Cli::try_parse_from(["bench", "--min-available", "x"]).is_err());
    }
}
