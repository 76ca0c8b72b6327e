//! The `takt` command line.
//!
//! Every subcommand is a thin shell over library calls: parse arguments into the same DTOs the
//! config file and API use ([`crate::spec::ScheduleSpec`]), call the core, print. Human output
//! is an aligned table; `--json` prints one JSON document for scripts. Everything printed
//! goes through [`out`] (`outln!`, `errln!`), never `println!`, so a closed stdout ends a
//! command quietly instead of panicking (the lints below hold every module to it).

#![deny(clippy::print_stdout, clippy::print_stderr)]

#[macro_use]
pub(crate) mod out;

mod alerts;
mod api;
mod args;
mod db;
mod init;
mod inspect;
pub(crate) mod job;
pub mod logging;
mod nodes;
mod notify;
pub(crate) mod pause;
mod plugin;
mod run;
mod runs;
pub(crate) mod schedule;
mod service;
mod signals;
mod table;
mod token;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// takt: an embeddable job scheduler with a stable plugin ABI.
#[derive(Debug, Parser)]
#[command(name = "takt", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Manage jobs in the database: add, list, show, update, enable, disable, trigger, pause,
    /// resume, remove.
    #[command(subcommand)]
    Job(job::JobCmd),
    /// List runs, newest first.
    Runs(runs::RunsArgs),
    /// Print a run's log lines (--follow to wait for more until the run ends).
    Logs(runs::LogsArgs),
    /// Cancel a pending or running run, on whichever node runs it.
    Cancel(runs::CancelArgs),
    /// The host nodes on a shared (PostgreSQL) database: heartbeats, capacity, running runs.
    Nodes(nodes::NodesArgs),
    /// Pause or resume a node's claiming.
    #[command(subcommand)]
    Node(pause::NodeCmd),
    /// Job groups: list them, pause or resume all of a group's jobs.
    #[command(subcommand)]
    Group(pause::GroupCmd),
    /// Why a job will or will not fire next, or what became of its fire at --at TIME.
    Why(inspect::WhyArgs),
    /// Expected fires of a range against the runs and attempts: gaps and duplicates (exit 1).
    Audit(inspect::AuditArgs),
    /// The alert deliveries, newest first: sent, failed (and why), suppressed (and why).
    Alerts(alerts::AlertsArgs),
    /// Database maintenance.
    #[command(subcommand)]
    Db(db::DbCmd),
    /// Inspect schedules: when they fire next, and what they mean.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCmd),
    /// Explain a cron expression (shorthand for `takt schedule next --cron EXPR`).
    #[command(subcommand)]
    Cron(schedule::CronCmd),
    /// Inspect plugin files: what loads, what is refused and why.
    #[command(subcommand)]
    Plugin(plugin::PluginCmd),
    /// Write a commented takt.toml with example jobs and create the database.
    Init(init::InitArgs),
    /// Run the scheduler on the jobs of takt.toml and the database, printing every run.
    Run(run::RunArgs),
    /// Tokens for the HTTP API: create (shown once), list, revoke.
    #[command(subcommand)]
    Token(token::TokenCmd),
    /// Install, start, stop or remove takt as a Windows service (Windows only; on Linux see
    /// packaging/systemd/takt.service).
    #[command(subcommand)]
    Service(service::ServiceCmd),
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
    // `takt run` (and the service, which is one) installs its logger once its config (and so
    // `log_format`) is read.
    if !matches!(
        cli.command,
        Command::Run(_) | Command::Service(service::ServiceCmd::Run(_))
    ) && let Err(e) = logging::install(logging::LogFormat::Text, logging::COMMAND_FILTER)
    {
        errln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Job(cmd) => job::run(cmd),
        Command::Runs(args) => runs::runs(args),
        Command::Logs(args) => runs::logs(args),
        Command::Cancel(args) => runs::cancel(args),
        Command::Nodes(args) => nodes::nodes(args),
        Command::Node(cmd) => pause::run_node(cmd),
        Command::Group(cmd) => pause::run_group(cmd),
        Command::Why(args) => inspect::why_cmd(args),
        Command::Audit(args) => inspect::audit_cmd(args),
        Command::Alerts(args) => alerts::alerts(args),
        Command::Db(cmd) => db::run(cmd),
        Command::Schedule(cmd) => schedule::run(cmd),
        Command::Cron(cmd) => schedule::run_cron(cmd),
        Command::Plugin(cmd) => plugin::run(cmd),
        Command::Init(args) => init::run(args),
        Command::Run(args) => run::run(args),
        Command::Token(cmd) => token::run(cmd),
        Command::Service(cmd) => service::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`takt job list | head -1`): done, as `ls` would be.
        Err(e) if out::is_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
