//! The `muninn` command line.
//!
//! `main` lives here and only here; every subcommand is a thin layer over the library crates:
//! `replay` and `import` over `muninn-import` + `muninn-core`'s replay engine, `check-cache` over
//! `muninn_core::validate`, `serve` over `muninn-host`, `sim-api` over `muninn-sim`, and the
//! operator commands (`say`, `tail`, `status`, `ledger`, `brake`, `caps`) over `muninn-api`'s
//! client. Results go to stdout; progress and diagnostics go to stderr.

mod check;
mod closed_loop;
mod host_cli;
mod import;
mod matrix;
mod replay;
mod serve;
mod sim_api;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// muninn: persistent, append-only sessions for long-lived Claude agents, and the prompt-cache
/// economics that decide when to append, keep warm, compact or start fresh.
#[derive(Debug, Parser)]
#[command(name = "muninn", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the host: every configured Mind as a persistent session, and the HTTP API.
    Serve(serve::ServeArgs),
    /// Replay real transcripts under every policy and compare each with the hindsight optimum.
    Replay(replay::ReplayArgs),
    /// Import transcripts into muninn's stored trace format, for later replays.
    Import(import::ImportArgs),
    /// Check the prompt-cache model against the cache reads recorded in real transcripts.
    CheckCache(check::CheckArgs),
    /// Serve an Anthropic-compatible Messages API with exact cache accounting, for tests.
    SimApi(sim_api::SimApiArgs),
    /// Post a message to a Mind through the running host's API.
    Say(host_cli::SayArgs),
    /// Print a Mind's transcript and outbox; with --follow, as they come.
    Tail(host_cli::TailArgs),
    /// Show every Mind: lease holder, segments, spend, brake.
    Status(host_cli::StatusArgs),
    /// Print a Mind's ledger as a table or as JSON Lines.
    Ledger(host_cli::LedgerArgs),
    /// Set the operator brake on or off for every Mind.
    Brake(host_cli::BrakeArgs),
    /// Show or change a Mind's spend cap, window and turn limit.
    Caps(host_cli::CapsArgs),
}

/// Options shared by every command that reads transcripts.
#[derive(Debug, clap::Args)]
struct InputArgs {
    /// Transcript files or directories: Claude Code JSONL (a file, a project directory, or
    /// ~/.claude/projects), Codex CLI rollouts, a muninn ledger export, or stored traces.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Leave out Claude Code sub-agent and compaction threads.
    #[arg(long)]
    main_only: bool,
    /// Show no progress bar.
    #[arg(long)]
    quiet: bool,
}

impl InputArgs {
    /// Imports the paths with a progress bar on stderr and prints a summary of the warnings.
    fn import(&self) -> anyhow::Result<muninn_import::Import> {
        let bar = if self.quiet {
            indicatif::ProgressBar::hidden()
        } else {
            let bar = indicatif::ProgressBar::with_draw_target(
                None,
                indicatif::ProgressDrawTarget::stderr(),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "importing {bar:30} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        };
        let options = muninn_import::ImportOptions {
            include_subagents: !self.main_only,
        };
        let import = muninn_import::import_paths(&self.paths, &options, &mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })?;
        bar.finish_and_clear();
        const SHOWN: usize = 10;
        for warning in import.warnings.iter().take(SHOWN) {
            eprintln!("warning: {warning}");
        }
        if import.warnings.len() > SHOWN {
            eprintln!("warning: … and {} more", import.warnings.len() - SHOWN);
        }
        Ok(import)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Import(args) => import::run(args),
        Command::CheckCache(args) => check::run(args),
        Command::SimApi(args) => sim_api::run(args),
        Command::Say(args) => host_cli::say(args),
        Command::Tail(args) => host_cli::tail(args),
        Command::Status(args) => host_cli::status(args),
        Command::Ledger(args) => host_cli::ledger(args),
        Command::Brake(args) => host_cli::brake(args),
        Command::Caps(args) => host_cli::caps(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("muninn: {e:#}");
            ExitCode::FAILURE
        }
    }
}
