//! `takt init`: a commented `takt.toml`, a database, and the next command.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::config::{Config, DEFAULT_FILE};

/// Options of `takt init`.
#[derive(Debug, Args)]
pub(super) struct InitArgs {
    /// The directory to write takt.toml, takt.db and tokens/ into.
    #[arg(long, default_value = ".", value_name = "DIR")]
    dir: PathBuf,
    /// Overwrite an existing takt.toml.
    #[arg(long)]
    force: bool,
    /// Print one JSON document (the files written, the database and its schema version, the
    /// next command) instead of the lines.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(args: InitArgs) -> Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create the directory {}", args.dir.display()))?;
    let dir = std::path::absolute(&args.dir)
        .with_context(|| format!("cannot resolve the directory {}", args.dir.display()))?;
    let file = dir.join(DEFAULT_FILE);
    if file.exists() && !args.force {
        bail!(
            "{} already exists; keep it, or pass --force to overwrite it",
            file.display()
        );
    }
    let plugin_dir = plugin_dir();
    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens)
        .with_context(|| format!("cannot create the directory {}", tokens.display()))?;
    let text = template(&plugin_dir, &tokens);
    // The template must be a valid config: check before writing.
    let config = Config::parse(&text, &file, |_| None)
        .map_err(|e| anyhow::anyhow!("internal error: the generated config is invalid: {e}"))?;
    std::fs::write(&file, &text).with_context(|| format!("cannot write {}", file.display()))?;
    let version = super::db::block_on(async {
        let store = config
            .database
            .open(Some(super::db::progress_observer()))
            .await?;
        store.schema_version().await
    })??;
    let examples = has_examples(&plugin_dir);
    let here = std::env::current_dir().ok();
    let next = if here.as_deref() == Some(dir.as_path()) {
        "takt run".to_string()
    } else {
        format!("takt run --config {}", file.display())
    };
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "config": file.display().to_string(),
                "tokens_dir": tokens.display().to_string(),
                "database": config.database.to_string(),
                "schema_version": version,
                "plugin_dir": plugin_dir.display().to_string(),
                "examples_plugin_found": examples,
                "next": next,
            }))?
        )?;
        return Ok(());
    }
    outln!("wrote {}", file.display())?;
    outln!(
        "created {} (files the clean-expired-tokens job looks at)",
        tokens.display()
    )?;
    outln!(
        "created the database {} (schema version {version})",
        config.database
    )?;
    if !examples {
        outln!(
            "note: the examples plugin is not in {} yet; build it with `cargo build`",
            plugin_dir.display()
        )?;
    }
    if here.as_deref() == Some(dir.as_path()) {
        outln!(
            "next: takt run        (Ctrl-C or SIGTERM stops; `takt run --for 30s` stops by itself)"
        )?;
    } else {
        outln!("next: {next}        (Ctrl-C or SIGTERM stops)")?;
    }
    Ok(())
}

/// The directory of this `takt` binary (`target/debug` of the checkout when run by `cargo
/// run`), where `cargo build` also puts the example plugins.
fn plugin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("plugins"))
}

fn has_examples(dir: &Path) -> bool {
    dir.join(format!(
        "{}takt_plugin_examples{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
    .is_file()
}

/// A TOML basic string.
fn quoted(p: &Path) -> String {
    toml::Value::String(p.display().to_string()).to_string()
}

fn template(plugin_dir: &Path, tokens: &Path) -> String {
    format!(
        r#"# takt.toml: the configuration of `takt run` (written by `takt init`).
# Relative paths are relative to this file's directory (in variables: to the working directory).
#
# Environment variables win over this file (a service sets them in its unit or environment):
#   TAKT_DB                     database (also the default of --db for the other commands)
#   TAKT_PG_SCHEMA              [postgres] schema
#   TAKT_PLUGIN_DIR             plugin_dir
#   TAKT_NODE_ID                node_id
#   TAKT_NODE_TAGS              tags, comma-separated
#   TAKT_CAPACITY               capacity
#   TAKT_RECURRING_RESERVE      recurring_reserve
#   TAKT_CLAIM_AHEAD            claim_ahead
#   TAKT_LOOKAHEAD_BATCH        lookahead_batch
#   TAKT_TZ                     timezone
#   TAKT_LOG_FORMAT             log_format (text or json)
#   TAKT_EXE_ALLOWLIST          [exe] allowlist, separated like PATH
#   TAKT_HTTP_LISTEN            [http] listen (or off)
#   TAKT_TOKEN                  not a key: the api token `takt plugin reload` sends
#   TAKT_SQL_CONNECTION_<NAME>  [sql.connections] <name> (upper case, - and . as _)
#   TAKT_HTTP_CONNECTION_<NAME> [http_client.connections.<name>]: a URL, or JSON such as
#                               {{"headers": {{"Authorization": "Bearer …"}}}} (added to the file's)
#   TAKT_ALERT_<CHANNEL>_USER   the SMTP login of [[alerts.channels]] <channel> (upper case, - as _)
#   TAKT_ALERT_<CHANNEL>_PASSWORD and its password
#   TAKT_ALERT_<CHANNEL>_SECRET the HMAC key that signs webhook channel <channel>'s bodies
# and, not a key here, the level of the logs on stderr:
#   TAKT_LOG (else RUST_LOG)    e.g. warn, info, debug, or takt_host=debug,warn (default: info
#                               for takt, warn for the libraries it uses)

# The SQLite database: jobs, every run and its log lines. Created (and migrated) at start.
database = "takt.db"

# Where plugin files (.so / .dll / .dylib) are loaded from. `cargo build` puts the example
# plugins next to the takt binary; files that are not valid plugins are listed as refused,
# with the reason and the fix, and never stop the others.
plugin_dir = {plugin_dir}

# Where content-addressed copies of the plugins are loaded from (default: .takt-shadow next to
# the database), so plugin files can be replaced while takt runs.
# shadow_dir = ".takt-shadow"

# This node's id, recorded on its runs (default: the host name).
# node_id = "line-3-pc"

# The most runs at once on this node, and beside them the slots only fires of recurring
# schedules (cron, calendar, every) take: a backlog of one-offs or retries filling the
# capacity never keeps a schedule from starting. 0: the capacity limits every run.
capacity = 8
# recurring_reserve = 1

# While more is due than the capacity, short runs (each shorter than a claim takes) are
# claimed this many beyond the slots and wait here for one, so a backlog is claimed in fewer,
# larger transactions. Long runs are never claimed ahead. 0: never more than the capacity.
# claim_ahead = 64

# When one instant has more fires than the slots (a thousand every-second crons), claim up
# to this many of them ahead of it beyond the slots, so they all start within milliseconds
# of it instead of one claim after another behind it. They wait here for their instant and
# are then queued for a slot: for short runs only. With several nodes, the node that claims
# first may take a whole instant. 0: off (an instant's fires are claimed within the slots).
# lookahead_batch = 0

# The time zone of job schedules that name none (an IANA name such as "Asia/Shanghai").
timezone = "UTC"

# On SIGTERM (systemctl stop, docker stop), Ctrl-C or the end of --for: how long running runs
# may finish before they are cancelled (recorded as cancelled, reason shutdown). A second
# signal cancels them at once.
grace = "10s"

# How logs go to stderr: "text" (one readable line per event) or "json" (one object per line,
# for log collectors). Run lines go to stdout either way.
# log_format = "json"

# Keep this many days of finished runs: declares the job "takt-retention" (handler
# takt::retention, daily at 03:00 in the timezone above, run late once if the host was down
# then), which removes older finished runs and their logs. Its runs show in `takt runs`.
# retention_days = 30

[plugins]
# Refuse a plugin file unless its SHA-256 is this (before it is even loaded):
# pins = {{ "libacme_jobs.so" = "<64 hex digits from sha256sum>" }}
# Refuse every file without a pin:
# require_pins = false
# Map old HandlerType names onto plugin handlers:
# aliases = {{ "Acme.Jobs.CleanJob, Acme.Jobs" = "acme::clean" }}
# Run every call of these plugins in a worker process (a crash fails only that run; a
# timeout kills the worker), never loading them into takt itself; jobs can also ask with
# isolation = "process":
# isolate = ["acme"]
# The most worker processes at once (default: capacity + recurring_reserve), and a memory
# cap for each:
# max_workers = 8
# worker_memory = "512MiB"
# Reload changed plugin files by itself (also: SIGHUP on Linux); new runs use the new
# version, running runs finish on the old one:
# watch = true
# watch_interval = "2s"
# Plugin files and directories that other users may write are refused; accept them anyway:
# check_permissions = false

[exe]
# exe::run, the built-in executor for external programs (seed 000 §5.2): no shell unless
# asked, output streamed into the run log, the whole process tree stopped on timeout. Unset,
# it may start any program; set, only these programs and the programs inside these
# directories (symbolic links resolved; TAKT_EXE_ALLOWLIST overrides it):
# allowlist = ["/usr/bin", "/opt/mes/tools/report.sh"]

[http]
# takt's HTTP API (/api/v1, OpenAPI at /api/v1/openapi.json), /healthz, /readyz and Prometheus
# /metrics, served by `takt run` (`--http-listen` overrides, TAKT_HTTP_LISTEN too; "off"
# disables it). Without api tokens only this machine may call it, as admin; once one exists
# (`takt token create --role viewer|operator|admin`) every call needs one, and only then may
# it listen on another address, e.g. "0.0.0.0:7450" (with tls_cert and tls_key, PEM files).
listen = "127.0.0.1:7450"
# tls_cert = "/etc/takt/api.crt"
# tls_key = "/etc/takt/api.key"
# Let a Prometheus scraper read /metrics without a token:
# metrics_public = false

[sql.connections]
# sql::proc, the built-in stored-procedure executor (seed 000 §5.1), runs procedures of these
# named connections: a job names one ("connection": "mes"), never a connection string. Keep
# passwords out of this file with TAKT_SQL_CONNECTION_<NAME> in the service's environment.
# mes = "Server=db01,1433;Database=MES;User Id=takt_jobs;Password=…;TrustServerCertificate=True"
# reports = "postgres://takt_jobs@db02/reports"
# A job:  handler = "sql::proc"
#         params = {{ connection = "mes", procedure = "dbo.usp_CloseShift",
#                    params = {{ LineId = 3, Day = {{ type = "date", value = "2026-06-01" }} }} }}

[http_client.connections]
# http::request, the built-in WebAPI executor (seed 004), calls these named connections: a job
# names one ("connection": "mes") and a path below its url, never a token. Header values are
# never logged; keep tokens out of this file with TAKT_HTTP_CONNECTION_<NAME>.
# [http_client.connections.mes]
# url = "https://mes.factory.local/api/"
# headers = {{ Accept = "application/json" }}   # Authorization from TAKT_HTTP_CONNECTION_MES
# ca_file = "certs/factory-ca.pem"             # an internal CA, trusted beside the system's
# A job:  handler = "http::request"
#         params = {{ method = "POST", connection = "mes", path = "shifts/close",
#                    json = {{ line = 3, shift = "A" }}, timeoutMs = 30000 }}

# Jobs. Each is synced into the database when `takt run` starts (matched by name; jobs added
# with the command line or the API are left alone). Keys:
#   name, handler ("plugin::handler"), params (an inline table, passed as JSON),
#   a schedule: cron | calendar | every | at (none: run only when triggered),
#   tz, dst_gap (shift|skip), dst_fold (auto|once|both), day_match (or|and; cron only),
#   timeout ("30s"), retries (a count), retry_delays ("10s,30s,60s" or "exp:1s..5m x2"),
#   misfire (skip | fire-once | fire-all:N, optionally "@LATENESS"),
#   overlap (skip | queue-one | allow | cancel-running), priority (0 first … 999),
#   group, enabled (true|false), description.

[[jobs]]
name = "hello"
handler = "examples::hello"
params = {{ name = "takt" }}
every = "10s"              # fires at :00, :10, :20 … of every minute
description = "greets every 10 seconds: the first run comes within 10 s of `takt run`"

[[jobs]]
name = "clean-expired-tokens"
handler = "examples::clean_expired_tokens"
params = {{ dir = {tokens}, keepDays = 30, dryRun = true }}
cron = "0 * * * * *"       # second 0 of every minute (seconds first); seed 003 runs it nightly: "0 0 3 * * *"
timeout = "10m"
retries = 3
retry_delays = "10s,30s,60s"
misfire = "fire-once"
overlap = "skip"
description = "seed 003: reports (dryRun) files older than 30 days in tokens/"

[[jobs]]
name = "weekday-hourly"
handler = "examples::hello"
params = {{ name = "seed 004" }}
calendar = "weekly on mon-fri every 1h between 06:00-22:30"
tz = "Asia/Shanghai"
description = "seed 004: hourly from 06:00 to 22:00 on weekdays, Shanghai time"

# An external program (exe::run; params: program, args, shell, env, envClear, envRemove, cwd,
# stdin, successCodes, outputLimit, logLines, killGraceMs):
# [[jobs]]
# name = "shift-report"
# handler = "exe::run"
# params = {{ program = "/opt/mes/tools/report.sh", args = ["--shift", "A"], successCodes = [0] }}
# cron = "0 6,14,22 * * *"
# timeout = "15m"
# retries = 2
"#,
        plugin_dir = quoted(plugin_dir),
        tokens = quoted(tokens),
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::template;

    /// Every `TAKT_*` variable the config reads, and every one the README's table documents,
    /// is listed in the file `init` writes.
    #[test]
    fn the_template_lists_every_environment_override() {
        let text = template(Path::new("/opt/takt/plugins"), Path::new("/tmp/tokens"));
        let config = include_str!("../config.rs");
        let readme = include_str!("../../../README.md");
        let mut vars: Vec<String> = Vec::new();
        for source in [config, readme] {
            for (i, _) in source.match_indices("TAKT_") {
                let name: String = source[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || *c == '_' || *c == '<' || *c == '>')
                    .collect();
                let mut name = name.trim_end_matches('_').to_string();
                // One variable per named connection: TAKT_SQL_CONNECTION_MES, …
                for family in ["TAKT_SQL_CONNECTION", "TAKT_HTTP_CONNECTION"] {
                    if name.starts_with(family) {
                        name = format!("{family}_<NAME>");
                    }
                }
                // One family per alert channel: TAKT_ALERT_<CHANNEL>_USER, _PASSWORD, _SECRET.
                if let Some(rest) = name.strip_prefix("TAKT_ALERT_") {
                    name = match ["USER", "PASSWORD", "SECRET"]
                        .iter()
                        .find(|k| rest.ends_with(*k))
                    {
                        Some(k) => format!("TAKT_ALERT_<CHANNEL>_{k}"),
                        None => "TAKT_ALERT_<CHANNEL>_USER".into(),
                    };
                }
                // Test-only variables are not configuration.
                // `TAKT_*` (every variable) names no variable.
                if !name.starts_with("TAKT_TEST")
                    && name != "TAKT_"
                    && name != "TAKT"
                    && !vars.contains(&name)
                {
                    vars.push(name);
                }
            }
        }
        for must in [
            "TAKT_DB",
            "TAKT_LOG_FORMAT",
            "TAKT_SQL_CONNECTION_<NAME>",
            "TAKT_HTTP_CONNECTION_<NAME>",
            "TAKT_LOG",
        ] {
            assert!(
                vars.iter().any(|v| v == must),
                "{must} not found in {vars:?}"
            );
        }
        for var in &vars {
            assert!(
                text.contains(&format!("#   {var} ")),
                "{var} is not listed in the template:\n{}",
                &text[..text.find("database =").unwrap_or(text.len())]
            );
        }
        assert!(text.contains("RUST_LOG"));
    }
}
