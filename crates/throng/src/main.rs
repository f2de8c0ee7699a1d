//! The `throng` binary: the command line, and the wiring of a serving
//! process (`serve.rs`: which backplane, single node or cluster node;
//! `supervisor.rs`: `serve --workers N`, N node processes on one port;
//! `token.rs`: `throng token`, test tokens).
//!
//! Layers (a module uses only those below it; `scripts/check-import-cycles.py`):
//! 1. `supervisor`, `token`: the workers of `serve --workers N`; test tokens.
//! 2. `serve`: one serving process, or the supervisor when `--workers` asks for it.
//! 3. `main`: the command line.

mod serve;
mod supervisor;
mod token;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "throng",
    version,
    about = "A Phoenix Channels compatible realtime server, and the kit that benchmarks it"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (the chat app on /, channels on /socket/websocket); --redis joins a cluster, --workers N runs N nodes on one port.
    #[command(allow_negative_numbers = true)]
    Serve(Box<throng_server::config::ServeArgs>),
    /// Run a load test: the controller, with local agents (and a local server unless --target).
    Bench(Box<throng_bench::BenchArgs>),
    /// Run a load agent that takes orders from a controller.
    Agent(throng_bench::AgentArgs),
    /// Print the OS settings a planned run needs and the limits that cap it; --apply raises what it lacks (saving the old values), --revert restores them.
    Tune(throng_bench::TuneArgs),
    /// Check a config file as `serve` would read it (with any serve flags and THRONG_* variables): unknown keys with the nearest known one, the effective settings and where each came from, the warnings a start would log; exits 1 when serve would refuse it (for CI).
    #[command(name = "check-config", allow_negative_numbers = true)]
    CheckConfig(Box<CheckArgs>),
    /// Print a complete commented config file: every key of `serve --config`, its help and its default (generated from serve's flags, so it matches `serve --help`).
    #[command(name = "gen-config")]
    GenConfig,
    /// Mint a connect token for testing (Phoenix.Token or JWT) with the server's [auth] settings.
    Token(token::TokenArgs),
}

/// `throng check-config FILE [serve flags]`.
#[derive(clap::Args)]
struct CheckArgs {
    /// The TOML file to check (what `serve --config FILE` would read)
    file: std::path::PathBuf,
    #[command(flatten)]
    serve: throng_server::config::ServeArgs,
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", describe(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each cause once: a cause whose
/// text the message already shows (`cannot listen on ADDR: Address already
/// in use`) is not repeated.
fn describe(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("THRONG_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::CheckConfig(args) => {
            let sub = matches
                .subcommand_matches("check-config")
                .expect("the check-config subcommand's matches");
            let checked = throng_server::config::check_config(&args.file, args.serve, sub);
            print!("{}", checked.report);
            if !checked.ok {
                std::process::exit(1);
            }
        }
        Command::GenConfig => print!("{}", throng_server::config::gen_config()),
        Command::Serve(args) => serve::serve((*args).resolve()?)?,
        Command::Bench(args) => throng_bench::run_bench(*args).map_err(|e| anyhow::anyhow!(e))?,
        Command::Agent(args) => throng_bench::run_agent(args).map_err(|e| anyhow::anyhow!(e))?,
        Command::Tune(args) => throng_bench::run_tune(args).map_err(|e| anyhow::anyhow!(e))?,
        Command::Token(args) => token::run(args)?,
    }
    Ok(())
}
