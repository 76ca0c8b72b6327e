//! The `takt` command line.
//!
//! Every subcommand is a thin shell over library calls: parse arguments into the same DTOs the
//! config file and API use ([`crate::spec::ScheduleSpec`]), call the core, print. Human output
//! is an aligned table; `--json` prints one JSON document for scripts.

mod plugin;
mod schedule;
mod table;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// takt: an embeddable job scheduler with a stable plugin ABI.
#[derive(Debug, Parser)]
#[command(name = "takt", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Inspect schedules: when they fire next, and what they mean.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCmd),
    /// Explain a cron expression (shorthand for `takt schedule next --cron EXPR`).
    #[command(subcommand)]
    Cron(schedule::CronCmd),
    /// Inspect plugin files: what loads, what is refused and why.
    #[command(subcommand)]
    Plugin(plugin::PluginCmd),
}

/// Runs the command line and returns the process exit code: 0 on success, 1 when the command
/// failed (the reason is printed to stderr), 2 for usage errors (printed by clap).
pub fn main() -> ExitCode {
    let version: &'static str = Box::leak(
        format!(
            "{} (tzdb {})",
            env!("CARGO_PKG_VERSION"),
            takt_core::schedule::tzdb_version()
        )
        .into_boxed_str(),
    );
    let matches = Cli::command().version(version).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Schedule(cmd) => schedule::run(cmd),
        Command::Cron(cmd) => schedule::run_cron(cmd),
        Command::Plugin(cmd) => plugin::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
