//! The `muninn` command line.
//!
//! `main` lives here and only here; every subcommand is a thin layer over the library crates:
//! `replay` and `import` over `muninn-import` + `muninn-core`'s replay engine, `check-cache` over
//! `muninn_core::validate`, `serve` over `muninn-host`, `sim-api` over `muninn-sim`, `doctor`
//! over the host's configuration, and the operator commands (`say`, `tail`, `status`,
//! `ledger`, `brake`, `caps`) over `muninn-api`'s client.
//!
//! Results go to stdout, only through `output` (a closed pipe ends the command quietly, never a
//! panic: `clippy::print_stdout` is denied); progress, diagnostics and logs (`logs`: `RUST_LOG`,
//! `--log-format text|json`) go to stderr. Every
//! command that prints data takes `--format json`.

#![deny(clippy::print_stdout)]

mod output;
mod private;

mod breakdown;
mod ccusage;
mod check;
mod closed_loop;
mod connect;
mod doctor;
mod file_limit;
mod import;
mod ledger;
mod logs;
mod matrix;
mod replay;
mod say;
mod sensitivity;
mod serve;
mod sim_api;
mod status;
mod terminal;
mod time;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// muninn: persistent, append-only sessions for long-lived Claude agents, and the prompt-cache
/// economics that decide when to append, keep warm, compact or start fresh.
#[derive(Debug, Parser)]
#[command(name = "muninn", version, about, long_about = None)]
struct Cli {
    /// How log lines on stderr are written (`RUST_LOG` filters them; default `info`).
    #[arg(long, global = true, value_enum, default_value_t = logs::LogFormat::Text, env = "MUNINN_LOG_FORMAT")]
    log_format: logs::LogFormat,
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
    /// Post a message to a Mind through the running host's API; --wait prints the reply.
    Say(say::SayArgs),
    /// Print a Mind's transcript and outbox; with --follow, as they come.
    Tail(say::TailArgs),
    /// Show every Mind: state (BRAKED, CAPPED, RETRYING…), lease, pending deliveries, spend.
    Status(status::StatusArgs),
    /// Print a Mind's ledger as a table, JSON, JSON Lines or CSV.
    Ledger(ledger::LedgerArgs),
    /// Set the operator brake on or off for every Mind.
    Brake(status::BrakeArgs),
    /// Show or change a Mind's spend cap, window and turn limit.
    Caps(status::CapsArgs),
    /// Check the configuration, data directory, store and backend, and say what to fix.
    Doctor(doctor::DoctorArgs),
}

/// Options shared by every command that reads transcripts.
#[derive(Debug, clap::Args)]
struct InputArgs {
    /// Transcript files or directories: Claude Code JSONL (a file, a project directory, or
    /// ~/.claude/projects), Codex CLI rollouts, a muninn ledger export, stored traces,
    /// `claude -p --output-format stream-json` logs, Messages API request/response logs, or
    /// TraceLab per-round CSV. Directories are searched for *.jsonl and *.csv.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Read every file as this format instead of detecting each one's: claude-code, codex,
    /// ledger, stored, stream-json, api-log or tracelab-csv. A file that looks like another
    /// format is still read as this one, with a warning.
    #[arg(long)]
    input_format: Option<muninn_import::InputFormat>,
    /// The model of requests whose format records none (TraceLab CSV) [default: unknown, which
    /// a replay reports as unpriced].
    #[arg(long)]
    model: Option<String>,
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
            format: self.input_format,
            model: self.model.clone(),
        };
        let import = muninn_import::import_paths(&self.paths, &options, &mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })?;
        bar.finish_and_clear();
        const SHOWN: usize = 10;
        for warning in import.warnings.iter().take(SHOWN) {
            eprintln!("warning: {}", terminal::sanitize(&warning.to_string()));
        }
        if import.warnings.len() > SHOWN {
            eprintln!("warning: … and {} more", import.warnings.len() - SHOWN);
        }
        let unreadable = import.stats.files_unreadable;
        if unreadable > 0 {
            eprintln!("warning: {unreadable} unreadable files skipped; the rest imported");
        }
        Ok(import)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logs::init(cli.log_format);
    if matches!(cli.command, Command::Serve(_) | Command::Import(_)) {
        // Before anything is created: these commands write conversations to disk.
        private::set_private_umask();
    }
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Import(args) => import::run(args),
        Command::CheckCache(args) => check::run(args),
        Command::SimApi(args) => sim_api::run(args),
        Command::Say(args) => say::say(args),
        Command::Tail(args) => say::tail(args),
        Command::Status(args) => status::status(args),
        Command::Ledger(args) => ledger::ledger(args),
        Command::Brake(args) => status::brake(args),
        Command::Caps(args) => status::caps(args),
        Command::Doctor(args) => doctor::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`muninn ledger | head -1`): nothing more to say.
        Err(e) if output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // An error may carry a server's message or a file's text: escaped like stdout.
            eprintln!("muninn: {}", terminal::sanitize(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}
