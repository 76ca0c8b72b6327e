//! The `takt.toml` configuration file of `takt run`, its environment overrides, and the jobs
//! it declares.
//!
//! Relative paths in the file are read relative to the file's directory; relative paths in
//! environment variables relative to the working directory. Environment variables win over
//! the file:
//!
//! | variable | key |
//! |---|---|
//! | `TAKT_DB` | `database` (a SQLite file, or a `postgres://` URL) |
//! | `TAKT_PG_SCHEMA` | `[postgres] schema` |
//! | `TAKT_PLUGIN_DIR` | `plugin_dir` |
//! | `TAKT_NODE_ID` | `node_id` |
//! | `TAKT_NODE_TAGS` | `tags` (comma-separated) |
//! | `TAKT_CAPACITY` | `capacity` |
//! | `TAKT_RECURRING_RESERVE` | `recurring_reserve` |
//! | `TAKT_CLAIM_AHEAD` | `claim_ahead` |
//! | `TAKT_TZ` | `timezone` |
//! | `TAKT_EXE_ALLOWLIST` | `[exe] allowlist` (entries separated like `PATH`) |
//! | `TAKT_SQL_CONNECTION_<NAME>` | `[sql.connections] <name>` (a password need not be in the file) |
//! | `TAKT_HTTP_CONNECTION_<NAME>` | `[http_client.connections.<name>]`: a URL, or JSON whose keys replace the file's and whose headers are added (a token need not be in the file) |
//! | `TAKT_LOG_FORMAT` | `log_format` (`text` or `json`) |
//! | `TAKT_HTTP_LISTEN` | `[http] listen` (`off` disables the API) |
//!
//! The level of the logs is not a key: `TAKT_LOG` (or `RUST_LOG`) sets it, as for every
//! `takt` command (see [`crate::cli`]'s `logging`).
//!
//! Jobs declared in the file (`[[jobs]]`) are stored with `application =`
//! [`CONFIG_APPLICATION`]; [`crate::cli`]'s `takt run` inserts new ones, updates changed ones
//! (by name) and disables marked ones the file no longer declares. Jobs added by the command
//! line or the API have another (or no) application and are left alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use takt_core::job::{Isolation, JobDef, JobName, Priority};
use takt_core::policy::{Backoff, MisfirePolicy, OverlapPolicy, RetryPolicy};
use takt_core::schedule::{Zone, parse_duration};

use crate::spec::{CalendarSpec, ScheduleSpec, parse_instant};
use crate::store::Database;

/// The `application` recorded on jobs declared in a config file.
pub const CONFIG_APPLICATION: &str = "takt.toml";

/// The config file read when none is named.
pub const DEFAULT_FILE: &str = "takt.toml";

/// How the host writes its logs (to stderr; run lines are stdout's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event: time (UTC), level, message and fields. Coloured on
    /// a terminal, plain otherwise (journald and log files read it as it is).
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `message`, fields), for
    /// log collectors.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!(
                "\"{s}\" is not a log format; use \"text\" (human-readable lines) or \"json\" \
                 (one JSON object per line)"
            )),
        }
    }
}

/// A config file that could not be used: the file, the key path and what is wrong and what to
/// do.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {key}: {message}")]
pub struct ConfigError {
    /// The file (or `environment` for an override).
    pub file: String,
    /// The key path (`jobs[2].cron`), or `(file)` for the file as a whole.
    pub key: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// The configuration of one `takt run`, resolved (defaults applied, overrides read).
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it was read from.
    pub file: PathBuf,
    /// Where jobs, runs and logs live: a SQLite file, or PostgreSQL (`database` holds a
    /// `postgres://` URL; `[postgres]` its schema and pool size).
    pub database: Database,
    /// The plugin directory.
    pub plugin_dir: PathBuf,
    /// Where content-addressed copies of plugins are loaded from.
    pub shadow_dir: PathBuf,
    /// This node's id.
    pub node_id: String,
    /// The node tags this node serves: it runs untagged jobs and jobs with one of these
    /// `node_tag`s (seed 004 DispatcherID).
    pub tags: Vec<String>,
    /// The most runs at once on this node, besides `recurring_reserve`.
    pub capacity: usize,
    /// Slots beyond `capacity` that only fires of recurring schedules take (default 1; 0:
    /// `capacity` limits every run). See
    /// [`crate::scheduler::SchedulerConfig::recurring_reserve`].
    pub recurring_reserve: usize,
    /// The most short runs claimed beyond the slots while a backlog drains (default 64; 0:
    /// never more than the slots). See [`crate::scheduler::SchedulerConfig::claim_ahead`].
    pub claim_ahead: usize,
    /// The most recurring fires of an instant to come claimed beyond the slots (default 0:
    /// off). See [`crate::scheduler::SchedulerConfig::lookahead_batch`].
    pub lookahead_batch: usize,
    /// The zone of job schedules that name none.
    pub timezone: String,
    /// How long a shutdown waits for running runs before cancelling them.
    pub grace: Duration,
    /// How `takt run` writes its logs to stderr (`log_format`, `TAKT_LOG_FORMAT`); `None`
    /// leaves it to `takt run` (`--log-format`, else human-readable text).
    pub log_format: Option<LogFormat>,
    /// How long a claimed run's lease lasts before another node may recover it (default 60 s).
    pub lease: Duration,
    /// How often this node renews its leases and heartbeats (default 30 s; less than half
    /// the lease).
    pub renew_every: Duration,
    /// Keep this many days of finished runs: declares the retention job (see
    /// [`crate::builtin`]) among [`Config::jobs`]; none when unset.
    pub retention_days: Option<u32>,
    /// Expected SHA-256 per plugin file name.
    pub pins: BTreeMap<String, String>,
    /// Refuse plugin files without a pin.
    pub require_pins: bool,
    /// HandlerType aliases.
    pub aliases: BTreeMap<String, String>,
    /// Plugins (by name) whose every call runs in a worker process (`[plugins] isolate`).
    pub isolate: Vec<String>,
    /// Poll the plugin directory this often and reload changed files (`[plugins] watch`,
    /// `watch_interval`); `None`: reload on SIGHUP only.
    pub plugin_watch: Option<Duration>,
    /// The most worker processes alive at once (`[plugins] max_workers`; default: capacity
    /// plus the recurring reserve).
    pub max_workers: usize,
    /// Each worker process's memory cap in bytes (`[plugins] worker_memory`).
    pub worker_memory: Option<u64>,
    /// Refuse plugin files and directories others may write (`[plugins] check_permissions`).
    pub check_permissions: bool,
    /// The programs and directories the built-in `exe::run` may start (`[exe] allowlist`),
    /// absolute; `None` allows every program.
    pub exe_allowlist: Option<Vec<PathBuf>>,
    /// Where [`Config::exe_allowlist`] was set, for the executor's refusal messages.
    pub exe_allowlist_source: String,
    /// The named connections of the built-in `sql::proc` (`[sql.connections]`, each
    /// replaceable by `TAKT_SQL_CONNECTION_<NAME>`); its `Debug` never shows a string.
    pub sql: takt_plugin_sql::SqlOptions,
    /// The named connections of the built-in `http::request` (`[http_client.connections]`,
    /// each overridable by `TAKT_HTTP_CONNECTION_<NAME>`); its `Debug` never shows a header
    /// value.
    pub http: takt_plugin_http::HttpOptions,
    /// The HTTP API (`[http]`): where it listens, TLS, whether `/metrics` is public;
    /// `None` without an `[http]` section (and no `TAKT_HTTP_LISTEN`), or with `listen =
    /// "off"`.
    pub api: Option<crate::http::HttpConfig>,
    /// `[alerts]`: channels (secrets from `TAKT_ALERT_<CHANNEL>_*`) and routing rules.
    pub alerts: std::sync::Arc<crate::alerts::AlertsConfig>,
    /// The jobs the file declares, validated, marked with [`CONFIG_APPLICATION`].
    pub jobs: Vec<JobDef>,
    /// `[groups.NAME]`: each group's `max_running` (`None`: no limit), written to the
    /// store at every start ([`crate::store`]'s `job_groups`), after the jobs.
    pub groups: BTreeMap<String, Option<u32>>,
}

/// `[groups.NAME]`: a group's definition.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupSection {
    /// The most runs of the group's jobs running at once, on all nodes (at least 1).
    max_running: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    database: Option<String>,
    plugin_dir: Option<PathBuf>,
    shadow_dir: Option<PathBuf>,
    node_id: Option<String>,
    tags: Option<Vec<String>>,
    capacity: Option<usize>,
    recurring_reserve: Option<usize>,
    claim_ahead: Option<usize>,
    lookahead_batch: Option<usize>,
    timezone: Option<String>,
    grace: Option<String>,
    log_format: Option<String>,
    lease: Option<String>,
    renew_every: Option<String>,
    retention_days: Option<u32>,
    #[serde(default)]
    plugins: PluginsSection,
    #[serde(default)]
    exe: ExeSection,
    #[serde(default)]
    postgres: PostgresSection,
    #[serde(default)]
    sql: SqlSection,
    #[serde(default)]
    http_client: HttpClientSection,
    http: Option<HttpSection>,
    #[serde(default)]
    alerts: crate::alerts::AlertsFile,
    #[serde(default)]
    jobs: Vec<JobEntry>,
    #[serde(default)]
    groups: BTreeMap<String, GroupSection>,
}

/// `[http]`: takt's own HTTP API (see [`crate::http`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpSection {
    /// `host:port` (default `127.0.0.1:7450`), or `off`.
    listen: Option<String>,
    /// PEM certificate chain for HTTPS (with `tls_key`).
    tls_cert: Option<PathBuf>,
    /// PEM private key for HTTPS (with `tls_cert`).
    tls_key: Option<PathBuf>,
    /// Serve `/metrics` without a token.
    #[serde(default)]
    metrics_public: bool,
}

/// `[http_client]`: the built-in WebAPI executor (`http::request`), a client of other
/// services (not takt's own HTTP server).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpClientSection {
    /// Named connections `http::request` jobs refer to: `url`, `headers`, `ca_file`.
    #[serde(default)]
    connections: BTreeMap<String, takt_plugin_http::ConnectionSpec>,
}

/// `[sql]`: the built-in stored-procedure executor.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlSection {
    /// Named connections `sql::proc` jobs refer to: an ADO.NET string (SQL Server) or a
    /// `postgres://` URL.
    #[serde(default)]
    connections: BTreeMap<String, String>,
}

/// `[postgres]`: settings of a PostgreSQL `database`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PostgresSection {
    /// The schema of takt's tables (created if missing); unset: the login's default.
    schema: Option<String>,
    /// The most connections this node opens (default 8).
    pool_size: Option<usize>,
}

/// `[exe]`: the built-in external-program executor.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExeSection {
    /// Programs or directories `exe::run` may start; unset allows every program.
    allowlist: Option<Vec<PathBuf>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginsSection {
    #[serde(default)]
    pins: BTreeMap<String, String>,
    #[serde(default)]
    require_pins: bool,
    #[serde(default)]
    aliases: BTreeMap<String, String>,
    #[serde(default)]
    isolate: Vec<String>,
    #[serde(default)]
    watch: bool,
    watch_interval: Option<String>,
    max_workers: Option<usize>,
    worker_memory: Option<String>,
    check_permissions: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobEntry {
    name: String,
    handler: String,
    params: Option<toml::Table>,
    cron: Option<String>,
    calendar: Option<CalendarSpec>,
    every: Option<String>,
    anchor: Option<String>,
    at: Option<String>,
    tz: Option<String>,
    day_match: Option<String>,
    dst_gap: Option<String>,
    dst_fold: Option<String>,
    timeout: Option<String>,
    retries: Option<u32>,
    retry_delays: Option<String>,
    misfire: Option<String>,
    overlap: Option<String>,
    priority: Option<u16>,
    group: Option<String>,
    depends_on: Option<Vec<String>>,
    dependency_wait: Option<String>,
    effective_from: Option<InstantValue>,
    expires_at: Option<InstantValue>,
    node_tag: Option<String>,
    enabled: Option<bool>,
    description: Option<String>,
    isolation: Option<String>,
    #[serde(default)]
    on_success: Vec<String>,
    #[serde(default)]
    on_failure: Vec<String>,
}

impl Config {
    /// Reads `file` and applies the overrides of the process environment.
    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        Config::load_with_env(file, |name| std::env::var(name).ok())
    }

    /// Reads `file` and applies the overrides `env` returns (the variables named in the
    /// module documentation).
    pub fn load_with_env(
        file: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let shown = file.display().to_string();
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
            file: shown.clone(),
            key: "(file)".into(),
            message: format!(
                "cannot read it ({e}); run `takt init` to write one, or pass --config PATH"
            ),
        })?;
        Config::parse(&text, file, env)
    }

    /// Parses `text` as the contents of `file` (relative paths resolve against its
    /// directory) with the overrides `env` returns.
    pub fn parse(
        text: &str,
        file: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let shown = file.display().to_string();
        let err = |key: &str, message: String| ConfigError {
            file: shown.clone(),
            key: key.to_string(),
            message,
        };
        let mut raw: FileConfig = toml::from_str(text).map_err(|e| {
            let key = e
                .span()
                .map(|s| {
                    let line = text.as_bytes()[..s.start.min(text.len())]
                        .iter()
                        .filter(|b| **b == b'\n')
                        .count()
                        + 1;
                    match text
                        .lines()
                        .nth(line - 1)
                        .and_then(|l| l.split_once('='))
                        .map(|(k, _)| k.trim())
                        .filter(|k| !k.is_empty() && !k.starts_with('#'))
                    {
                        Some(k) => format!("line {line} ({k})"),
                        None => format!("line {line}"),
                    }
                })
                .unwrap_or_else(|| "(file)".into());
            err(
                &key,
                format!(
                    "{}; see the configuration reference in README.md",
                    e.message().trim_end()
                ),
            )
        })?;
        let base = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let from_file = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let env_err = |var: &str, message: String| ConfigError {
            file: "environment".into(),
            key: var.to_string(),
            message,
        };

        let mut database = match env("TAKT_DB") {
            Some(v) => Database::parse(&v, Path::new("")).map_err(|m| env_err("TAKT_DB", m))?,
            None => Database::parse(raw.database.as_deref().unwrap_or("takt.db"), &base)
                .map_err(|m| err("database", m))?,
        };
        if let Database::Postgres {
            schema, pool_size, ..
        } = &mut database
        {
            *schema = env("TAKT_PG_SCHEMA").or(raw.postgres.schema);
            if let Some(n) = raw.postgres.pool_size {
                if n == 0 {
                    return Err(err(
                        "postgres.pool_size",
                        "must be at least 1; the default is 8".into(),
                    ));
                }
                *pool_size = n;
            }
        } else if raw.postgres.schema.is_some() || raw.postgres.pool_size.is_some() {
            return Err(err(
                "postgres",
                "is set but database is not a postgres:// URL; set database to one, or remove \
                 [postgres]"
                    .into(),
            ));
        }
        let plugin_dir = match env("TAKT_PLUGIN_DIR") {
            Some(v) => PathBuf::from(v),
            None => from_file(raw.plugin_dir.unwrap_or_else(|| "plugins".into())),
        };
        let shadow_dir = match raw.shadow_dir {
            Some(p) => from_file(p),
            None => database
                .sqlite_path()
                .and_then(Path::parent)
                .or(Some(base.as_path()))
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .join(".takt-shadow"),
        };
        let node_id = match env("TAKT_NODE_ID") {
            Some(v) => v,
            None => raw.node_id.unwrap_or_else(host_name),
        };
        if node_id.trim().is_empty() || node_id.trim() != node_id {
            return Err(err(
                "node_id",
                format!("\"{node_id}\" is empty or has surrounding spaces; give a plain name"),
            ));
        }
        let (exe_allowlist, exe_allowlist_source) = match env("TAKT_EXE_ALLOWLIST") {
            Some(v) => (
                Some(
                    std::env::split_paths(&v)
                        .filter(|p| !p.as_os_str().is_empty())
                        .collect::<Vec<_>>(),
                ),
                "TAKT_EXE_ALLOWLIST in the environment".to_string(),
            ),
            None => (
                raw.exe
                    .allowlist
                    .map(|l| l.into_iter().map(from_file).collect()),
                format!("[exe] allowlist in {shown}"),
            ),
        };
        let mut sql = takt_plugin_sql::SqlOptions::default();
        for (name, value) in &raw.sql.connections {
            let var = format!(
                "{}{}",
                takt_plugin_sql::CONNECTION_ENV_PREFIX,
                name.to_ascii_uppercase().replace(['-', '.'], "_")
            );
            let (value, source) = match env(&var) {
                Some(v) => (v, format!("{var} in the environment")),
                None => (value.clone(), format!("[sql.connections] in {shown}")),
            };
            if name.trim().is_empty() || name.contains(['=', ';', ':', '/', '@']) {
                return Err(err(
                    "sql.connections",
                    format!("\"{name}\" is not a connection name; use letters, digits, - and _"),
                ));
            }
            sql.add(name, &value, &source)
                .map_err(|e| err("sql.connections", e))?;
        }
        let mut http = takt_plugin_http::HttpOptions::default();
        for (name, spec) in &raw.http_client.connections {
            let key = format!("http_client.connections.{name}");
            let mut spec = spec.clone();
            spec.ca_file = spec.ca_file.map(from_file);
            let var = takt_plugin_http::ConnectionSpec::env_var(name);
            let source = match env(&var) {
                Some(v) => {
                    spec.merge_env(&v).map_err(|e| env_err(&var, e))?;
                    format!("[http_client.connections] in {shown} and {var} in the environment")
                }
                None => format!("[http_client.connections] in {shown}"),
            };
            http.add(name, &spec, &source).map_err(|e| err(&key, e))?;
        }
        let alerts = crate::alerts::AlertsConfig::resolve(
            std::mem::take(&mut raw.alerts),
            &|name| env(name),
            &|t| parse_duration(t).map_err(|e| e.to_string()),
        )
        .map_err(|(key, message)| err(&key, message))?;
        let tags: Vec<String> = match env("TAKT_NODE_TAGS") {
            Some(v) => v
                .split(',')
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect(),
            None => raw.tags.unwrap_or_default(),
        };
        if let Some(bad) = tags
            .iter()
            .find(|t| t.trim().is_empty() || t.trim() != t.as_str())
        {
            return Err(err(
                "tags",
                format!("\"{bad}\" is empty or has surrounding spaces; give plain tag names"),
            ));
        }
        let capacity = match env("TAKT_CAPACITY") {
            Some(v) => v.trim().parse::<usize>().map_err(|_| {
                env_err(
                    "TAKT_CAPACITY",
                    format!("\"{v}\" is not a whole number; set it to e.g. 8"),
                )
            })?,
            None => raw.capacity.unwrap_or(8),
        };
        if capacity == 0 {
            return Err(err(
                "capacity",
                "must be at least 1 (runs at once on this node)".into(),
            ));
        }
        let (timezone, tz_source) = match env("TAKT_TZ") {
            Some(v) => (v, None),
            None => (
                raw.timezone.unwrap_or_else(|| "UTC".into()),
                Some("timezone"),
            ),
        };
        if let Err(e) = Zone::get(&timezone) {
            let message = format!("{e}");
            return Err(match tz_source {
                Some(key) => err(key, message),
                None => env_err("TAKT_TZ", message),
            });
        }
        let grace = match raw.grace {
            Some(g) => Duration::from_secs(parse_duration(&g).map_err(|e| {
                err(
                    "grace",
                    format!("\"{g}\": {e}; write a duration such as \"10s\""),
                )
            })?),
            None => Duration::from_secs(10),
        };
        let log_format = match env("TAKT_LOG_FORMAT") {
            Some(v) => Some(
                v.parse::<LogFormat>()
                    .map_err(|e| env_err("TAKT_LOG_FORMAT", e))?,
            ),
            None => match &raw.log_format {
                Some(v) => Some(v.parse::<LogFormat>().map_err(|e| err("log_format", e))?),
                None => None,
            },
        };
        let duration = |key: &str, v: &Option<String>, default: u64| match v {
            Some(g) => match parse_duration(g) {
                Ok(0) => Err(err(key, format!("\"{g}\" is zero; give at least 1s"))),
                Ok(secs) => Ok(Duration::from_secs(secs)),
                Err(e) => Err(err(
                    key,
                    format!("\"{g}\": {e}; write a duration such as \"60s\""),
                )),
            },
            None => Ok(Duration::from_secs(default)),
        };
        let lease = duration("lease", &raw.lease, 60)?;
        let renew_every = duration("renew_every", &raw.renew_every, 30)?;
        if renew_every.saturating_mul(2) > lease {
            return Err(err(
                if raw.renew_every.is_some() {
                    "renew_every"
                } else {
                    "lease"
                },
                format!(
                    "renew_every ({}s) must be at most half the lease ({}s), so that one late \
                     renewal does not lose a lease; shorten renew_every or lengthen lease",
                    renew_every.as_secs(),
                    lease.as_secs()
                ),
            ));
        }
        let recurring_reserve = match env("TAKT_RECURRING_RESERVE") {
            Some(v) => v.trim().parse::<usize>().map_err(|_| {
                env_err(
                    "TAKT_RECURRING_RESERVE",
                    format!(
                        "\"{v}\" is not a whole number; set it to the slots kept for recurring \
                         schedules, e.g. 1 (0: none)"
                    ),
                )
            })?,
            None => raw.recurring_reserve.unwrap_or(1),
        };
        if recurring_reserve > MAX_RECURRING_RESERVE {
            return Err(err(
                "recurring_reserve",
                format!(
                    "{recurring_reserve} is more than {MAX_RECURRING_RESERVE} slots; it is added \
                     to the capacity for recurring schedules only: give a few (default 1)"
                ),
            ));
        }
        let claim_ahead = match env("TAKT_CLAIM_AHEAD") {
            Some(v) => v.trim().parse::<usize>().map_err(|_| {
                env_err(
                    "TAKT_CLAIM_AHEAD",
                    format!(
                        "\"{v}\" is not a whole number; set it to the most short runs claimed \
                         ahead of a slot during a backlog, e.g. 64 (0: none)"
                    ),
                )
            })?,
            None => raw
                .claim_ahead
                .unwrap_or(crate::scheduler::DEFAULT_CLAIM_AHEAD),
        };
        if claim_ahead > MAX_CLAIM_AHEAD {
            return Err(err(
                "claim_ahead",
                format!(
                    "{claim_ahead} is more than {MAX_CLAIM_AHEAD} runs; runs claimed ahead wait \
                     for a slot, so a few batches' worth is enough (default 64, 0: none)"
                ),
            ));
        }
        let lookahead_batch = match env("TAKT_LOOKAHEAD_BATCH") {
            Some(v) => v.trim().parse::<usize>().map_err(|_| {
                env_err(
                    "TAKT_LOOKAHEAD_BATCH",
                    format!(
                        "\"{v}\" is not a whole number; set it to the most fires of one instant \
                         claimed ahead beyond the slots, e.g. 1024 (0: off)"
                    ),
                )
            })?,
            None => raw
                .lookahead_batch
                .unwrap_or(crate::scheduler::DEFAULT_LOOKAHEAD_BATCH),
        };
        if lookahead_batch > MAX_LOOKAHEAD_BATCH {
            return Err(err(
                "lookahead_batch",
                format!(
                    "{lookahead_batch} is more than {MAX_LOOKAHEAD_BATCH} fires; fires claimed \
                     ahead wait on this node for their instant, so give about as many as one \
                     instant has (e.g. 1024, 0: off)"
                ),
            ));
        }
        let plugins = raw
            .plugins
            .resolve(capacity + recurring_reserve)
            .map_err(|(key, m)| err(key, m))?;
        let mut jobs: Vec<JobDef> = Vec::with_capacity(raw.jobs.len());
        for (i, entry) in raw.jobs.into_iter().enumerate() {
            let key = format!("jobs[{i}]");
            let job = entry.into_job(&timezone).map_err(|(field, message)| {
                if field.is_empty() {
                    err(&key, message)
                } else {
                    err(&format!("{key}.{field}"), message)
                }
            })?;
            if let Some(j) = jobs.iter().position(|o: &JobDef| o.name == job.name) {
                return Err(err(
                    &format!("{key}.name"),
                    format!(
                        "\"{}\" is already the name of jobs[{j}]; job names are unique",
                        job.name
                    ),
                ));
            }
            if crate::builtin::is_builtin(&job.handler_type)
                && let Err(e) = crate::builtin::validate(&job.handler_type, &job.params_json)
            {
                return Err(err(&format!("{key}.handler"), e));
            }
            if job.name.as_str() == crate::builtin::RETENTION_JOB {
                return Err(err(
                    &format!("{key}.name"),
                    format!(
                        "\"{}\" is reserved for the retention job; set retention_days instead, \
                         or choose another name",
                        job.name
                    ),
                ));
            }
            jobs.push(job);
        }
        if let Some((i, cycle)) = continuation_cycle(&jobs) {
            return Err(err(
                &format!("jobs[{i}].on_success"),
                format!(
                    "the continuations form a cycle ({cycle}); each run would start the next \
                     forever: remove one of these on_success / on_failure entries"
                ),
            ));
        }
        let mut jobs = in_dependency_order(jobs).map_err(|(key, m)| err(&key, m))?;
        if let Some(days) = raw.retention_days {
            jobs.push(retention_job(days, &timezone).map_err(|e| err("retention_days", e))?);
        }
        let mut groups = BTreeMap::new();
        for (name, g) in raw.groups {
            let max = g
                .max_running
                .map(|n| takt_core::group::check_max_running(&name, n))
                .transpose()
                .map_err(|m| err(&format!("groups.{name}.max_running"), m))?;
            groups.insert(name, max);
        }
        // The API is served when the file has an [http] section (`takt init` writes one) or
        // TAKT_HTTP_LISTEN names an address: an older takt.toml opens no port on upgrade.
        let raw_has_http = raw.http.is_some();
        let section = raw.http.unwrap_or_default();
        let listen = match env("TAKT_HTTP_LISTEN") {
            Some(v) => Some(("TAKT_HTTP_LISTEN", v)),
            None => section.listen.clone().map(|v| ("http.listen", v)),
        };
        let wanted = raw_has_http || listen.is_some();
        let api = match listen {
            Some((_, v)) if v == "off" => None,
            _ if !wanted => None,
            listen => {
                let mut config = crate::http::HttpConfig {
                    metrics_public: section.metrics_public,
                    ..crate::http::HttpConfig::default()
                };
                if let Some((key, v)) = listen {
                    config.listen = v.parse().map_err(|_| {
                        let m = format!(
                            "\"{v}\" is not host:port; write e.g. \"127.0.0.1:{}\", \
                             \"0.0.0.0:{}\" (needs api tokens), or \"off\"",
                            crate::http::DEFAULT_PORT,
                            crate::http::DEFAULT_PORT
                        );
                        if key == "TAKT_HTTP_LISTEN" {
                            env_err(key, m)
                        } else {
                            err(key, m)
                        }
                    })?;
                }
                config.tls = match (section.tls_cert.clone(), section.tls_key.clone()) {
                    (Some(cert), Some(key)) => Some(crate::http::TlsFiles {
                        cert: from_file(cert),
                        key: from_file(key),
                    }),
                    (None, None) => None,
                    (Some(_), None) => {
                        return Err(err(
                            "http.tls_key",
                            "tls_cert is set without tls_key; give both PEM files".into(),
                        ));
                    }
                    (None, Some(_)) => {
                        return Err(err(
                            "http.tls_cert",
                            "tls_key is set without tls_cert; give both PEM files".into(),
                        ));
                    }
                };
                Some(config)
            }
        };
        Ok(Config {
            api,
            file: file.to_path_buf(),
            database,
            plugin_dir,
            shadow_dir,
            node_id,
            tags,
            capacity,
            recurring_reserve,
            claim_ahead,
            lookahead_batch,
            timezone,
            grace,
            log_format,
            lease,
            renew_every,
            retention_days: raw.retention_days,
            pins: raw.plugins.pins,
            require_pins: raw.plugins.require_pins,
            aliases: raw.plugins.aliases,
            isolate: plugins.isolate,
            plugin_watch: plugins.watch,
            max_workers: plugins.max_workers,
            worker_memory: plugins.worker_memory,
            check_permissions: plugins.check_permissions,
            exe_allowlist,
            exe_allowlist_source,
            sql,
            http,
            alerts: std::sync::Arc::new(alerts),
            jobs,
            groups,
        })
    }
}

/// `[plugins]`'s isolation, watch and permission settings, checked.
struct PluginSettings {
    isolate: Vec<String>,
    watch: Option<Duration>,
    max_workers: usize,
    worker_memory: Option<u64>,
    check_permissions: bool,
}

/// The largest accepted `recurring_reserve`: the reserve is a few slots beside the capacity,
/// and a larger number is more likely a capacity written under the wrong key.
const MAX_RECURRING_RESERVE: usize = 1024;

/// The largest accepted `claim_ahead`: what is claimed ahead waits in this node's queue while
/// other nodes could run it, so more than a few claims' worth only moves work here early.
const MAX_CLAIM_AHEAD: usize = 4096;

/// The largest accepted `lookahead_batch`: fires claimed ahead wait on this node (a few
/// kilobytes each) and a crash delays them by a lease, so more than an instant's worth only
/// moves work here early.
const MAX_LOOKAHEAD_BATCH: usize = 65_536;

/// The smallest accepted `[plugins] worker_memory`: below it a worker cannot even load.
const MIN_WORKER_MEMORY: u64 = 32 << 20;

impl PluginsSection {
    /// The settings, or the failing key and the message.
    fn resolve(&self, capacity: usize) -> Result<PluginSettings, (&'static str, String)> {
        for name in &self.isolate {
            if !takt_plugin_api::sdk::valid_name(name) {
                return Err((
                    "plugins.isolate",
                    format!(
                        "\"{name}\" is not a plugin name (lowercase letters, digits, '_' and \
                         '-'); list the names plugins report, as in `takt plugin list`"
                    ),
                ));
            }
            if [
                takt_plugin_exe::PLUGIN_NAME,
                takt_plugin_sql::PLUGIN_NAME,
                takt_plugin_http::PLUGIN_NAME,
            ]
            .contains(&name.as_str())
            {
                return Err((
                    "plugins.isolate",
                    format!(
                        "\"{name}\" is built into takt and cannot run in a worker process (each \
                         exe::run program already runs in a process of its own); remove it"
                    ),
                ));
            }
        }
        let watch = match (&self.watch_interval, self.watch) {
            (Some(t), true) => match parse_duration(t) {
                Ok(0) => {
                    return Err((
                        "plugins.watch_interval",
                        format!("\"{t}\" is zero; give at least 1s"),
                    ));
                }
                Ok(secs) => Some(Duration::from_secs(secs)),
                Err(e) => {
                    return Err((
                        "plugins.watch_interval",
                        format!("\"{t}\": {e}; write a duration such as \"2s\""),
                    ));
                }
            },
            (Some(_), false) => {
                return Err((
                    "plugins.watch_interval",
                    "is set but watch is not; add watch = true, or remove watch_interval".into(),
                ));
            }
            (None, true) => Some(Duration::from_secs(2)),
            (None, false) => None,
        };
        let max_workers = self.max_workers.unwrap_or(capacity);
        if max_workers == 0 {
            return Err((
                "plugins.max_workers",
                "must be at least 1 (worker processes alive at once)".into(),
            ));
        }
        let worker_memory = match &self.worker_memory {
            None => None,
            Some(text) => {
                let bytes = parse_bytes(text).map_err(|e| ("plugins.worker_memory", e))?;
                if bytes < MIN_WORKER_MEMORY {
                    return Err((
                        "plugins.worker_memory",
                        format!(
                            "\"{text}\" is less than {}, too little for a worker to load a \
                             plugin; give e.g. \"512MiB\"",
                            crate::worker::bytes_text(MIN_WORKER_MEMORY)
                        ),
                    ));
                }
                Some(bytes)
            }
        };
        Ok(PluginSettings {
            isolate: self.isolate.clone(),
            watch,
            max_workers,
            worker_memory,
            check_permissions: self.check_permissions.unwrap_or(true),
        })
    }
}

/// `512MiB`, `2GiB`, `1.5G`, `900K`, `1048576`: binary units (K, M, G with or without `iB`).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    if number.is_empty() {
        return Err(format!("\"{text}\" is not a size; write e.g. \"512MiB\""));
    }
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "\"{text}\": unknown unit \"{other}\"; use KiB, MiB or GiB, e.g. \"512MiB\""
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("\"{text}\" is not a size; write e.g. \"512MiB\""))?;
    let bytes = value * factor as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("\"{text}\" is out of range; write e.g. \"512MiB\""));
    }
    Ok(bytes as u64)
}

/// An instant in takt.toml: a string (`"2026-01-01T00:00:00Z"`, a local `"2026-01-01"` read
/// in the job's zone) or a TOML date-time (`2026-01-01T00:00:00Z`, `2026-01-01`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum InstantValue {
    Text(String),
    Toml(toml::value::Datetime),
}

impl InstantValue {
    fn text(&self) -> String {
        match self {
            InstantValue::Text(t) => t.clone(),
            InstantValue::Toml(d) => d.to_string(),
        }
    }
}

/// The file's jobs with every job after the file jobs it depends on (otherwise in file
/// order), so that `takt run` adds a dependency before its dependents; a cycle among them is
/// refused here, naming it (`jobs[i].depends_on`). A name the file does not declare is left
/// to the store, which knows the jobs added from the command line or the API.
fn in_dependency_order(jobs: Vec<JobDef>) -> Result<Vec<JobDef>, (String, String)> {
    for (i, job) in jobs.iter().enumerate() {
        let graph = jobs
            .iter()
            .map(|j| (&j.name, j.dependencies.as_slice()))
            .chain(job.dependencies.iter().filter_map(|d| {
                // Names outside the file count as leaves for the cycle check.
                (!jobs.iter().any(|j| j.name == *d)).then_some((d, &[][..]))
            }));
        takt_core::store::dependency::check_graph(graph, &job.name)
            .map_err(|e| (format!("jobs[{i}].depends_on"), e.message().to_string()))?;
    }
    let mut placed: Vec<JobDef> = Vec::with_capacity(jobs.len());
    let mut left = jobs;
    while !left.is_empty() {
        // Acyclic, so some job's file dependencies are all placed.
        let i = left
            .iter()
            .position(|j| {
                j.dependencies.iter().all(|d| {
                    placed.iter().any(|p| p.name == *d) || !left.iter().any(|l| l.name == *d)
                })
            })
            .unwrap_or(0);
        placed.push(left.remove(i));
    }
    Ok(placed)
}

impl JobEntry {
    /// The job, or the failing field (empty for the entry as a whole) and the message.
    fn into_job(self, default_tz: &str) -> Result<JobDef, (&'static str, String)> {
        let mut job =
            JobDef::new(&self.name, &self.handler).map_err(|e| ("name", e.to_string()))?;
        if let Some(params) = &self.params {
            job.params_json =
                serde_json::to_string(params).map_err(|e| ("params", e.to_string()))?;
        }
        let spec = ScheduleSpec {
            cron: self.cron,
            calendar: self.calendar,
            every: self.every,
            anchor: self.anchor,
            at: self.at,
            tz: self.tz,
            day_match: self.day_match,
            dst_gap: self.dst_gap,
            dst_fold: self.dst_fold,
        };
        let has_rule = spec.cron.is_some()
            || spec.calendar.is_some()
            || spec.every.is_some()
            || spec.at.is_some();
        if has_rule {
            let field = if spec.cron.is_some() {
                "cron"
            } else if spec.calendar.is_some() {
                "calendar"
            } else if spec.every.is_some() {
                "every"
            } else {
                "at"
            };
            let mut spec = spec;
            if spec.tz.is_none() {
                spec.tz = Some(default_tz.to_string());
            }
            job.schedule = Some(spec.to_schedule().map_err(|e| (field, e.to_string()))?);
        } else if spec != ScheduleSpec::default() {
            return Err((
                "",
                "has schedule options (tz, dst_gap, …) but no cron, calendar, every or at; \
                 add a rule, or remove the options for a manual job"
                    .into(),
            ));
        }
        if let Some(t) = &self.timeout {
            let secs = parse_duration(t).map_err(|e| ("timeout", format!("\"{t}\": {e}")))?;
            if secs == 0 {
                return Err(("timeout", "must be longer than 0s".into()));
            }
            job.timeout = Some(Duration::from_secs(secs));
        }
        let backoff = match &self.retry_delays {
            Some(text) => text
                .parse::<Backoff>()
                .map_err(|e| ("retry_delays", e.to_string()))?,
            None => Backoff::seed_default(),
        };
        job.retry = RetryPolicy::new(self.retries.unwrap_or(0), backoff);
        if let Some(m) = &self.misfire {
            job.misfire = m
                .parse::<MisfirePolicy>()
                .map_err(|e| ("misfire", e.to_string()))?;
        }
        if let Some(o) = &self.overlap {
            job.overlap = o
                .parse::<OverlapPolicy>()
                .map_err(|e| ("overlap", e.to_string()))?;
        }
        if let Some(p) = self.priority {
            job.priority = Priority::new(p).map_err(|e| ("priority", e.to_string()))?;
        }
        job.group = self.group;
        for (i, name) in self.depends_on.iter().flatten().enumerate() {
            job.dependencies.push(
                JobName::new(name).map_err(|e| ("depends_on", format!("[{i}] \"{name}\": {e}")))?,
            );
        }
        if let Some(w) = &self.dependency_wait {
            let secs =
                parse_duration(w).map_err(|e| ("dependency_wait", format!("\"{w}\": {e}")))?;
            if secs == 0 {
                return Err((
                    "dependency_wait",
                    "must be longer than 0s; leave it out to wait until the job's next fire".into(),
                ));
            }
            job.dependency_wait = Some(Duration::from_secs(secs));
        }
        let zone = match &job.schedule {
            Some(s) => s.zone().clone(),
            None => Zone::get(default_tz).map_err(|e| ("tz", e.to_string()))?,
        };
        for (key, given, slot) in [
            (
                "effective_from",
                &self.effective_from,
                &mut job.effective_from,
            ),
            ("expires_at", &self.expires_at, &mut job.expires_at),
        ] {
            if let Some(v) = given {
                *slot = Some(parse_instant(&v.text(), &zone).map_err(|e| (key, e))?);
            }
        }
        job.node_tag = self.node_tag.filter(|t| !t.is_empty());
        job.enabled = self.enabled.unwrap_or(true);
        job.description = self.description;
        if let Some(i) = &self.isolation {
            job.isolation = i
                .parse::<Isolation>()
                .map_err(|e| ("isolation", e.to_string()))?;
        }
        for (key, given, slot) in [
            ("on_success", &self.on_success, &mut job.on_success),
            ("on_failure", &self.on_failure, &mut job.on_failure),
        ] {
            *slot = given
                .iter()
                .map(|n| JobName::new(n).map_err(|e| (key, format!("\"{n}\": {e}"))))
                .collect::<Result<_, _>>()?;
        }
        job.application = Some(CONFIG_APPLICATION.to_string());
        job.validate().map_err(|e| ("", e.to_string()))?;
        crate::dynparams::check(&job.params_json).map_err(|e| ("params", e))?;
        Ok(job)
    }
}

/// A cycle of `on_success` / `on_failure` among the file's jobs (names outside the file are
/// the store's to judge): the index of a job on it and the cycle as text (`a → b → a`).
fn continuation_cycle(jobs: &[JobDef]) -> Option<(usize, String)> {
    fn walk(
        jobs: &[JobDef],
        start: usize,
        at: usize,
        path: &mut Vec<usize>,
        seen: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        for target in jobs[at].continuation_targets() {
            let Some(next) = jobs.iter().position(|j| j.name == *target) else {
                continue;
            };
            if next == start {
                let mut cycle = path.clone();
                cycle.push(next);
                return Some(cycle);
            }
            if seen.contains(&next) {
                continue;
            }
            seen.push(next);
            path.push(next);
            if let Some(c) = walk(jobs, start, next, path, seen) {
                return Some(c);
            }
            path.pop();
        }
        None
    }
    (0..jobs.len()).find_map(|i| {
        let cycle = walk(jobs, i, i, &mut vec![i], &mut Vec::new())?;
        let names: Vec<&str> = cycle.iter().map(|&j| jobs[j].name.as_str()).collect();
        Some((i, names.join(" → ")))
    })
}

/// The retention job for `retention_days = days`: [`crate::builtin::RETENTION`] daily at
/// 03:00 in the default zone, firing once late when the host was down at 03:00 (misfire
/// `fire-once`), declared like a file job so `takt run` syncs it (and disables it when the
/// setting is removed).
fn retention_job(days: u32, timezone: &str) -> Result<JobDef, String> {
    let mut job = crate::builtin::retention_job(days)?;
    let spec = ScheduleSpec {
        cron: Some(crate::builtin::RETENTION_CRON.to_string()),
        tz: Some(timezone.to_string()),
        ..ScheduleSpec::default()
    };
    job.schedule = Some(spec.to_schedule().map_err(|e| e.to_string())?);
    job.misfire = "fire-once"
        .parse::<MisfirePolicy>()
        .map_err(|e| e.to_string())?;
    job.application = Some(CONFIG_APPLICATION.to_string());
    job.validate().map_err(|e| e.to_string())?;
    Ok(job)
}

/// Whether a stored job already matches a declared one (ignoring the store's bookkeeping:
/// id, version, next fire, update time).
pub fn same_definition(stored: &JobDef, declared: &JobDef) -> bool {
    let mut a = stored.clone();
    a.id = None;
    a.version = 0;
    a.next_fire = None;
    a.updated_at = None;
    let params_equal = match (
        serde_json::from_str::<serde_json::Value>(&stored.params_json),
        serde_json::from_str::<serde_json::Value>(&declared.params_json),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => stored.params_json == declared.params_json,
    };
    a.params_json.clone_from(&declared.params_json);
    params_equal && a == *declared
}

/// This machine's host name (`HOSTNAME`, `COMPUTERNAME`, `/etc/hostname`), or `takt-node`.
pub fn host_name() -> String {
    ["HOSTNAME", "COMPUTERNAME"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .chain(std::fs::read_to_string("/etc/hostname").ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "takt-node".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/takt/takt.toml"), |_| None)
    }

    #[test]
    fn defaults_resolve_against_the_file() {
        let c = parse("").unwrap();
        assert_eq!(
            c.database,
            Database::Sqlite(PathBuf::from("/etc/takt/takt.db"))
        );
        assert_eq!(c.plugin_dir, Path::new("/etc/takt/plugins"));
        assert_eq!(c.shadow_dir, Path::new("/etc/takt/.takt-shadow"));
        assert_eq!(c.capacity, 8);
        assert_eq!(c.recurring_reserve, 1, "one slot kept for recurring fires");
        assert_eq!(c.timezone, "UTC");
        assert_eq!(c.grace, Duration::from_secs(10));
        assert!(c.jobs.is_empty());
    }

    #[test]
    fn postgres_leases_and_tags() {
        let c = parse(
            "database = \"postgres://takt:pw@db:5432/mes\"\nlease = \"90s\"\n\
             renew_every = \"20s\"\ntags = [\"line-1\", \"line-2\"]\n\
             [postgres]\nschema = \"takt\"\npool_size = 4\n\
             [[jobs]]\nname = \"x\"\nhandler = \"a::b\"\nevery = \"1m\"\nnode_tag = \"line-2\"\n",
        )
        .unwrap();
        assert_eq!(
            c.database,
            Database::Postgres {
                url: "postgres://takt:pw@db:5432/mes".into(),
                schema: Some("takt".into()),
                pool_size: 4
            }
        );
        assert_eq!(
            c.database.to_string(),
            "postgres://takt:***@db:5432/mes (schema takt)"
        );
        assert_eq!(
            (c.lease, c.renew_every),
            (Duration::from_secs(90), Duration::from_secs(20))
        );
        assert_eq!(c.tags, ["line-1", "line-2"]);
        assert_eq!(c.jobs[0].node_tag.as_deref(), Some("line-2"));
        assert_eq!(c.shadow_dir, Path::new("/etc/takt/.takt-shadow"));

        let env = |k: &str| (k == "TAKT_NODE_TAGS").then(|| " a, b ,,".to_string());
        let c = Config::parse("", Path::new("/t/takt.toml"), env).unwrap();
        assert_eq!(c.tags, ["a", "b"]);

        let e = parse("renew_every = \"40s\"").unwrap_err();
        assert_eq!(e.key, "renew_every");
        assert!(e.message.contains("at most half the lease"), "{e}");
        let e = parse("lease = \"0s\"").unwrap_err();
        assert_eq!(e.key, "lease");
        let e = parse("[postgres]\nschema = \"x\"").unwrap_err();
        assert!(e.message.contains("not a postgres:// URL"), "{e}");
        let e = parse("tags = [\" x\"]").unwrap_err();
        assert_eq!(e.key, "tags");
    }

    #[test]
    fn the_recurring_reserve_is_read_checked_and_overridden() {
        assert_eq!(parse("recurring_reserve = 0").unwrap().recurring_reserve, 0);
        assert_eq!(parse("recurring_reserve = 3").unwrap().recurring_reserve, 3);
        let e = parse("recurring_reserve = 5000").unwrap_err();
        assert_eq!(e.key, "recurring_reserve");
        assert!(e.message.contains("more than 1024"), "{e}");
        let e = parse("recurring_reserve = -1").unwrap_err();
        assert!(e.to_string().contains("recurring_reserve"), "{e}");
        let env =
            |v: &'static str| move |k: &str| (k == "TAKT_RECURRING_RESERVE").then(|| v.to_string());
        let c =
            Config::parse("recurring_reserve = 3", Path::new("/c/takt.toml"), env("0")).unwrap();
        assert_eq!(c.recurring_reserve, 0, "the environment wins");
        let e = Config::parse("", Path::new("/c/takt.toml"), env("two")).unwrap_err();
        assert_eq!(e.key, "TAKT_RECURRING_RESERVE");
        assert!(e.message.contains("\"two\" is not a whole number"), "{e}");
    }

    #[test]
    fn lookahead_batch_is_read_checked_and_overridden() {
        assert_eq!(parse("").unwrap().lookahead_batch, 0, "the default: off");
        assert_eq!(
            parse("lookahead_batch = 1024").unwrap().lookahead_batch,
            1024
        );
        let e = parse("lookahead_batch = 100000").unwrap_err();
        assert_eq!(e.key, "lookahead_batch");
        assert!(e.to_string().contains("65536"), "{e}");
        let e = parse("lookahead_batch = -1").unwrap_err();
        assert!(e.to_string().contains("lookahead_batch"), "{e}");
    }

    #[test]
    fn claim_ahead_is_read_checked_and_overridden() {
        assert_eq!(parse("").unwrap().claim_ahead, 64, "the default");
        assert_eq!(parse("claim_ahead = 0").unwrap().claim_ahead, 0);
        assert_eq!(parse("claim_ahead = 100").unwrap().claim_ahead, 100);
        let e = parse("claim_ahead = 5000").unwrap_err();
        assert_eq!(e.key, "claim_ahead");
        assert!(e.message.contains("more than 4096"), "{e}");
        let e = parse("claim_ahead = -1").unwrap_err();
        assert!(e.to_string().contains("claim_ahead"), "{e}");
        let env = |v: &'static str| move |k: &str| (k == "TAKT_CLAIM_AHEAD").then(|| v.to_string());
        let c = Config::parse("claim_ahead = 64", Path::new("/c/takt.toml"), env("0")).unwrap();
        assert_eq!(c.claim_ahead, 0, "the environment wins");
        let e = Config::parse("", Path::new("/c/takt.toml"), env("lots")).unwrap_err();
        assert_eq!(e.key, "TAKT_CLAIM_AHEAD");
        assert!(e.message.contains("\"lots\" is not a whole number"), "{e}");
    }

    #[test]
    fn environment_overrides_win() {
        let env = |k: &str| match k {
            "TAKT_DB" => Some("/var/x.db".to_string()),
            "TAKT_PLUGIN_DIR" => Some("/opt/p".to_string()),
            "TAKT_NODE_ID" => Some("n7".to_string()),
            "TAKT_CAPACITY" => Some("3".to_string()),
            "TAKT_TZ" => Some("Asia/Shanghai".to_string()),
            _ => None,
        };
        let c = Config::parse(
            "database = \"a.db\"\ncapacity = 5\nnode_id = \"file\"",
            Path::new("/c/takt.toml"),
            env,
        )
        .unwrap();
        assert_eq!(c.database, Database::Sqlite(PathBuf::from("/var/x.db")));
        assert_eq!(c.shadow_dir, Path::new("/var/.takt-shadow"));
        assert_eq!(c.plugin_dir, Path::new("/opt/p"));
        assert_eq!(c.node_id, "n7");
        assert_eq!(c.capacity, 3);
        assert_eq!(c.timezone, "Asia/Shanghai");
        let bad = Config::parse("", Path::new("/c/takt.toml"), |k| {
            (k == "TAKT_CAPACITY").then(|| "many".to_string())
        })
        .unwrap_err();
        assert_eq!(bad.file, "environment");
        assert_eq!(bad.key, "TAKT_CAPACITY");
    }

    #[test]
    fn groups_are_read_and_their_limits_checked() {
        let c = parse(
            "[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\ngroup = \"press\"\n\
             [groups.press]\nmax_running = 2\n[groups.free]\n",
        )
        .unwrap();
        assert_eq!(c.groups.get("press"), Some(&Some(2)));
        assert_eq!(c.groups.get("free"), Some(&None));
        let e = parse("[groups.press]\nmax_running = 0").unwrap_err();
        assert_eq!(e.key, "groups.press.max_running");
        assert!(e.message.contains("at least 1"), "{}", e.message);
        let e = parse("[groups.press]\nmax_running = -2").unwrap_err();
        assert_eq!(e.key, "groups.press.max_running");
        assert!(
            parse("[groups.press]\nlimit = 2").is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn jobs_become_job_definitions() {
        let c = parse(
            r#"
timezone = "Europe/Berlin"
[[jobs]]
name = "clean"
handler = "examples::clean_expired_tokens"
params = { dir = "/tmp/t", keepDays = 30, dryRun = true }
cron = "0 3 * * *"
timeout = "5m"
retries = 3
retry_delays = "10s,30s"
misfire = "fire-once"
overlap = "allow"
priority = 10
group = "maintenance"
description = "nightly"

[[jobs]]
name = "manual"
handler = "examples::hello"
enabled = false
"#,
        )
        .unwrap();
        let j = &c.jobs[0];
        assert_eq!(j.schedule.as_ref().unwrap().zone().name(), "Europe/Berlin");
        let params: serde_json::Value = serde_json::from_str(&j.params_json).unwrap();
        assert_eq!(params["keepDays"], 30);
        assert_eq!(j.timeout, Some(Duration::from_secs(300)));
        assert_eq!(j.retry.max_retries, 3);
        assert_eq!(j.retry.backoff.to_string(), "10s,30s");
        assert_eq!(j.misfire.to_string(), "fire-once");
        assert_eq!(j.overlap, OverlapPolicy::Allow);
        assert_eq!(j.priority.get(), 10);
        assert_eq!(j.application.as_deref(), Some(CONFIG_APPLICATION));
        assert!(c.jobs[1].schedule.is_none());
        assert!(!c.jobs[1].enabled);
        assert!(same_definition(&c.jobs[0], &c.jobs[0]));
        assert!(!same_definition(&c.jobs[0], &c.jobs[1]));
    }

    #[test]
    fn depends_on_is_read_ordered_and_checked() {
        let c = parse(
            r#"
[[jobs]]
name = "report"
handler = "examples::hello"
every = "10m"
depends_on = ["load"]
dependency_wait = "30m"

[[jobs]]
name = "load"
handler = "examples::hello"
every = "10m"
depends_on = ["extract", "from-the-cli"]

[[jobs]]
name = "extract"
handler = "examples::hello"
every = "10m"
"#,
        )
        .unwrap();
        let names: Vec<&str> = c.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["extract", "load", "report"], "dependencies first");
        assert_eq!(c.jobs[2].dependency_wait, Some(Duration::from_secs(1800)));
        assert_eq!(c.jobs[1].dependencies.len(), 2);

        let job = |name: &str, deps: &str| {
            format!(
                "[[jobs]]\nname = \"{name}\"\nhandler = \"x::y\"\nevery = \"1m\"\n\
                 depends_on = {deps}\n"
            )
        };
        let cycle = format!(
            "{}{}{}",
            job("a", r#"["c"]"#),
            job("b", r#"["a"]"#),
            job("c", r#"["b"]"#)
        );
        let e = parse(&cycle).unwrap_err();
        assert_eq!(e.key, "jobs[0].depends_on");
        assert_eq!(
            e.message,
            "dependency cycle: a -> c -> b -> a; remove one of these dependencies"
        );
        let e = parse(&job("a", r#"["a"]"#)).unwrap_err();
        assert!(e.message.contains("lists itself"), "{e}");
        let e = parse(&job("a", r#"[" bad "]"#)).unwrap_err();
        assert_eq!(e.key, "jobs[0].depends_on", "{e}");
        for (wait, text) in [("0s", "is zero"), ("soon", "\"soon\"")] {
            let e = parse(&format!(
                "{}{}dependency_wait = \"{wait}\"\n",
                job("b", "[]"),
                job("a", r#"["b"]"#)
            ))
            .unwrap_err();
            assert_eq!(e.key, "jobs[1].dependency_wait", "{e}");
            assert!(e.message.contains(text), "{e}");
        }
        let e = parse(&format!("{}dependency_wait = \"5m\"\n", job("a", "[]"))).unwrap_err();
        assert!(
            e.message
                .contains("has a dependency_wait but no dependencies"),
            "{e}"
        );
    }

    #[test]
    fn validity_windows_read_strings_and_toml_dates_in_the_jobs_zone() {
        let c = parse(
            r#"
timezone = "Asia/Shanghai"
[[jobs]]
name = "sync"
handler = "examples::hello"
every = "1h"
effective_from = 2026-01-01
expires_at = "2026-12-31T16:00:00Z"

[[jobs]]
name = "odt"
handler = "examples::hello"
effective_from = 2026-01-01T00:00:00+08:00
"#,
        )
        .unwrap();
        let ts = |s: &str| s.parse::<takt_core::Timestamp>().unwrap();
        assert_eq!(c.jobs[0].effective_from, Some(ts("2025-12-31T16:00:00Z")));
        assert_eq!(c.jobs[0].expires_at, Some(ts("2026-12-31T16:00:00Z")));
        assert_eq!(c.jobs[1].effective_from, Some(ts("2025-12-31T16:00:00Z")));
        let e =
            parse("[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\nexpires_at = \"soon\"").unwrap_err();
        assert_eq!(e.key, "jobs[0].expires_at");
        assert!(e.message.contains("is not an instant"), "{e}");
        let e = parse(
            "[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\neffective_from = 2027-01-01\n\
             expires_at = 2026-01-01",
        )
        .unwrap_err();
        assert!(e.message.contains("is not before expires_at"), "{e}");
    }

    #[test]
    fn errors_name_the_file_and_the_key() {
        let e =
            parse("[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\ncron = \"61 * * * *\"").unwrap_err();
        assert_eq!(e.file, "/etc/takt/takt.toml");
        assert_eq!(e.key, "jobs[0].cron");
        let e =
            parse("[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\nevery = \"1m\"\ntz = \"Mars/Base\"")
                .unwrap_err();
        assert_eq!(e.key, "jobs[0].every");
        assert!(e.to_string().contains("Mars/Base"), "{e}");
        let e = parse("capacity = 2\ncapacityy = 3").unwrap_err();
        assert_eq!(e.key, "line 2 (capacityy)");
        assert!(e.message.contains("capacityy"), "{e}");
        let e = parse("timezone = \"Nowhere/City\"").unwrap_err();
        assert_eq!(e.key, "timezone");
        let e = parse("[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\n[[jobs]]\nname = \"a\"\nhandler = \"x::z\"")
            .unwrap_err();
        assert_eq!(e.key, "jobs[1].name");
        let e = parse("[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\nretry_delays = \"soon\"")
            .unwrap_err();
        assert_eq!(e.key, "jobs[0].retry_delays");
        let e = parse("[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\ntz = \"UTC\"").unwrap_err();
        assert_eq!(e.key, "jobs[0]");
    }

    #[test]
    fn the_http_api_listens_on_loopback_by_default_and_can_be_moved_or_turned_off() {
        assert!(
            parse("").unwrap().api.is_none(),
            "no [http]: no port opened"
        );
        let c = parse("[http]").unwrap();
        let api = c.api.unwrap();
        assert_eq!(
            api.listen.to_string(),
            format!("127.0.0.1:{}", crate::http::DEFAULT_PORT)
        );
        assert_eq!((api.tls, api.metrics_public), (None, false));
        let c = parse(
            "[http]\nlisten = \"0.0.0.0:8080\"\ntls_cert = \"api.crt\"\ntls_key = \"/k/api.key\"\nmetrics_public = true",
        )
        .unwrap();
        let api = c.api.unwrap();
        assert_eq!(api.listen.to_string(), "0.0.0.0:8080");
        let tls = api.tls.unwrap();
        assert_eq!(
            tls.cert,
            Path::new("/etc/takt/api.crt"),
            "relative to the file"
        );
        assert_eq!(tls.key, Path::new("/k/api.key"));
        assert!(api.metrics_public);
        assert!(parse("[http]\nlisten = \"off\"").unwrap().api.is_none());
        let e = parse("[http]\nlisten = \"localhost\"").unwrap_err();
        assert_eq!(e.key, "http.listen");
        assert!(e.message.contains("not host:port"), "{e}");
        let e = parse("[http]\ntls_cert = \"a.crt\"").unwrap_err();
        assert_eq!(e.key, "http.tls_key");
        let e = parse("[http]\nport = 1").unwrap_err();
        assert!(e.message.contains("port"), "{e}");
        let c = Config::parse("", Path::new("/c/takt.toml"), |k| {
            (k == "TAKT_HTTP_LISTEN").then(|| "off".to_string())
        })
        .unwrap();
        assert!(c.api.is_none());
        let e = Config::parse("", Path::new("/c/takt.toml"), |k| {
            (k == "TAKT_HTTP_LISTEN").then(|| "x".to_string())
        })
        .unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.key.as_str()),
            ("environment", "TAKT_HTTP_LISTEN")
        );
    }

    #[test]
    fn log_format_from_the_file_or_the_environment() {
        assert_eq!(parse("").unwrap().log_format, None);
        let c = parse("log_format = \"JSON\"").unwrap();
        assert_eq!(c.log_format, Some(LogFormat::Json));
        let c = Config::parse("log_format = \"json\"", Path::new("/c/takt.toml"), |k| {
            (k == "TAKT_LOG_FORMAT").then(|| "text".to_string())
        })
        .unwrap();
        assert_eq!(c.log_format, Some(LogFormat::Text));
        let e = parse("log_format = \"yaml\"").unwrap_err();
        assert_eq!(e.key, "log_format");
        assert!(e.message.contains("use \"text\""), "{e}");
        let e = Config::parse("", Path::new("/c/takt.toml"), |k| {
            (k == "TAKT_LOG_FORMAT").then(|| "xml".to_string())
        })
        .unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.key.as_str()),
            ("environment", "TAKT_LOG_FORMAT")
        );
    }

    #[test]
    fn sql_connections_are_named_checked_and_never_shown() {
        assert!(parse("").unwrap().sql.names().is_empty());
        let c = parse(
            "[sql.connections]\nmes = \"Server=db01,1433;Database=MES;User Id=takt;Password=pw1\"\n\
             reports = \"postgres://takt:pw2@db02/reports\"",
        )
        .unwrap();
        assert_eq!(c.sql.names(), ["mes", "reports"]);
        let shown = format!("{c:?}");
        assert!(!shown.contains("pw1") && !shown.contains("pw2"), "{shown}");
        let e = parse("[sql.connections]\nmes = \"db01\"").unwrap_err();
        assert_eq!(e.key, "sql.connections");
        assert!(
            e.message.contains("connection mes in [sql.connections]"),
            "{e}"
        );
        assert!(
            e.message
                .contains("neither a postgres:// URL nor an ADO.NET string"),
            "{e}"
        );
        let e = parse("[sql]\nconnection = {}").unwrap_err();
        assert!(e.message.contains("unknown field `connection`"), "{e}");
        // The environment replaces a connection, so the password can stay out of the file.
        let c = Config::parse(
            "[sql.connections]\nline-a = \"Server=placeholder\"",
            Path::new("/c/takt.toml"),
            |k| (k == "TAKT_SQL_CONNECTION_LINE_A").then(|| "postgres://h/db".to_string()),
        )
        .unwrap();
        assert_eq!(c.sql.names(), ["line-a"]);
    }

    #[test]
    fn http_connections_are_checked_merged_with_the_environment_and_never_shown() {
        assert!(parse("").unwrap().http.names().is_empty());
        let text = "[http_client.connections.mes]\nurl = \"https://mes.local/api/\"\n\
                    headers = { Accept = \"application/json\", Authorization = \"Bearer tok-file\" }\n\
                    [http_client.connections.line-a]\nurl = \"http://10.0.0.3:8080\"";
        let c = parse(text).unwrap();
        assert_eq!(c.http.names(), ["line-a", "mes"]);
        assert!(!format!("{c:?}").contains("tok-file"));
        for (text, key, want) in [
            (
                "[http_client.connections.mes]\nheaders = {}",
                "http_client.connections.mes",
                "url is missing",
            ),
            (
                "[http_client.connections.mes]\nurl = \"mes.local\"",
                "http_client.connections.mes",
                "url: \"mes.local\" is not a URL",
            ),
            (
                "[http_client.connections.mes]\nurl = \"https://h/\"\nca_file = \"certs/ca.pem\"",
                "http_client.connections.mes",
                "ca_file: cannot read /etc/takt/certs/ca.pem",
            ),
            (
                "[http_client.connections.\"a b\"]\nurl = \"https://h/\"",
                "http_client.connections.a b",
                "not a connection name",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.key, key, "{e}");
            assert!(e.message.contains(want), "{e}\n  wanted: {want}");
        }
        let e = parse("[http_client.connections.mes]\nurl = \"https://h/\"\ntoken = \"x\"")
            .unwrap_err();
        assert!(e.message.contains("unknown field `token`"), "{e}");
        let e = parse("[http_client]\nconnection = {}").unwrap_err();
        assert!(e.message.contains("unknown field `connection`"), "{e}");
        // The environment adds the token, so it can stay out of the file; a bad value is
        // refused naming the variable, without repeating it.
        let env = |value: &'static str| {
            move |k: &str| (k == "TAKT_HTTP_CONNECTION_LINE_A").then(|| value.to_string())
        };
        let c = Config::parse(
            text,
            Path::new("/c/takt.toml"),
            env(r#"{"headers": {"Authorization": "Bearer tok-env"}}"#),
        )
        .unwrap();
        assert!(!format!("{c:?}").contains("tok-env"));
        let e = Config::parse(
            text,
            Path::new("/c/takt.toml"),
            env(r#"{"headers": {"Authorization": 7}, "x": "tok-env"}"#),
        )
        .unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.key.as_str()),
            ("environment", "TAKT_HTTP_CONNECTION_LINE_A")
        );
        assert!(!e.message.contains("tok-env"), "{e}");
    }

    #[test]
    fn the_exe_allowlist_resolves_against_the_file_and_the_environment_wins() {
        assert_eq!(parse("").unwrap().exe_allowlist, None);
        let c = parse("[exe]\nallowlist = [\"/usr/bin\", \"tools/report.sh\"]").unwrap();
        assert_eq!(
            c.exe_allowlist.unwrap(),
            [
                PathBuf::from("/usr/bin"),
                PathBuf::from("/etc/takt/tools/report.sh")
            ]
        );
        assert!(
            c.exe_allowlist_source
                .contains("[exe] allowlist in /etc/takt/takt.toml")
        );
        let c = parse("[exe]\nallowlist = []").unwrap();
        assert_eq!(
            c.exe_allowlist,
            Some(vec![]),
            "set but empty allows nothing"
        );
        let e = parse("[exe]\nallow = []").unwrap_err();
        assert!(e.message.contains("unknown field `allow`"), "{e}");
        let c = Config::parse("", Path::new("/c/takt.toml"), |k| {
            (k == "TAKT_EXE_ALLOWLIST").then(|| "/opt/a:/opt/b".to_string())
        })
        .unwrap();
        assert_eq!(c.exe_allowlist.unwrap().len(), 2);
        assert!(c.exe_allowlist_source.contains("TAKT_EXE_ALLOWLIST"));
    }

    #[test]
    fn continuations_are_read_and_cycles_in_the_file_refused() {
        let dir = std::env::temp_dir().join(format!("takt-cfg-cont-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("takt.toml");
        std::fs::write(
            &file,
            "[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\non_success = [\"b\"]\n\
             [[jobs]]\nname = \"b\"\nhandler = \"x::y\"\non_failure = [\"a\"]\n",
        )
        .unwrap();
        let e = Config::load_with_env(&file, |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("jobs[0].on_success"), "{e}");
        assert!(e.contains("a → b → a"), "{e}");
        std::fs::write(
            &file,
            "[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\non_success = [\"b\"]\n\
             params = { at = \"{{ fire_time \" }\n",
        )
        .unwrap();
        let e = Config::load_with_env(&file, |_| None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("jobs[0].params: params.at: template syntax error"),
            "{e}"
        );
        std::fs::write(
            &file,
            "[[jobs]]\nname = \"a\"\nhandler = \"x::y\"\non_success = [\"b\"]\n",
        )
        .unwrap();
        let c = Config::load_with_env(&file, |_| None).unwrap();
        assert_eq!(c.jobs[0].on_success, [JobName::new("b").unwrap()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn plugin_isolation_watch_and_permissions() {
        let c = parse("capacity = 3").unwrap();
        assert!(c.isolate.is_empty());
        assert_eq!(c.plugin_watch, None);
        assert_eq!(
            c.max_workers, 4,
            "max_workers defaults to the capacity plus the recurring reserve"
        );
        assert_eq!(c.worker_memory, None);
        assert!(c.check_permissions, "on unless the operator says otherwise");

        let c = parse(
            "[plugins]\nisolate = [\"acme\", \"mes-line\"]\nwatch = true\nmax_workers = 2\n\
             worker_memory = \"1.5GiB\"\ncheck_permissions = false\n\
             [[jobs]]\nname = \"j\"\nhandler = \"acme::run\"\nisolation = \"process\"",
        )
        .unwrap();
        assert_eq!(c.isolate, ["acme", "mes-line"]);
        assert_eq!(
            c.plugin_watch,
            Some(Duration::from_secs(2)),
            "default interval"
        );
        assert_eq!(c.max_workers, 2);
        assert_eq!(c.worker_memory, Some(3 << 29));
        assert!(!c.check_permissions);
        assert_eq!(c.jobs[0].isolation, Isolation::Process);
        let c = parse("[plugins]\nwatch = true\nwatch_interval = \"10s\"").unwrap();
        assert_eq!(c.plugin_watch, Some(Duration::from_secs(10)));
        assert_eq!(
            parse("[plugins]\nworker_memory = \"512M\"")
                .unwrap()
                .worker_memory,
            Some(512 << 20)
        );

        for (text, key, needle) in [
            (
                "[plugins]\nisolate = [\"Acme\"]",
                "plugins.isolate",
                "is not a plugin name",
            ),
            (
                "[plugins]\nisolate = [\"exe\"]",
                "plugins.isolate",
                "built into takt",
            ),
            (
                "[plugins]\nisolate = [\"http\"]",
                "plugins.isolate",
                "built into takt",
            ),
            (
                "[plugins]\nwatch_interval = \"5s\"",
                "plugins.watch_interval",
                "add watch = true",
            ),
            (
                "[plugins]\nwatch = true\nwatch_interval = \"0s\"",
                "plugins.watch_interval",
                "zero",
            ),
            (
                "[plugins]\nmax_workers = 0",
                "plugins.max_workers",
                "at least 1",
            ),
            (
                "[plugins]\nworker_memory = \"lots\"",
                "plugins.worker_memory",
                "not a size",
            ),
            (
                "[plugins]\nworker_memory = \"512 parsecs\"",
                "plugins.worker_memory",
                "unknown unit",
            ),
            (
                "[plugins]\nworker_memory = \"1MiB\"",
                "plugins.worker_memory",
                "too little",
            ),
            (
                "[[jobs]]\nname = \"j\"\nhandler = \"a::b\"\nisolation = \"sandbox\"",
                "jobs[0].isolation",
                "use in-process or process",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
            assert!(e.message.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn retention_days_declares_the_retention_job() {
        let c = parse("timezone = \"Asia/Shanghai\"\nretention_days = 14").unwrap();
        assert_eq!(c.retention_days, Some(14));
        let j = c
            .jobs
            .iter()
            .find(|j| j.name.as_str() == crate::builtin::RETENTION_JOB)
            .expect("the retention job is declared");
        assert_eq!(j.handler_type, crate::builtin::RETENTION);
        assert_eq!(j.params_json, r#"{"days":14}"#);
        let schedule = j.schedule.as_ref().unwrap();
        assert_eq!(schedule.zone().name(), "Asia/Shanghai");
        assert_eq!(j.misfire.to_string(), "fire-once");
        assert_eq!(j.application.as_deref(), Some(CONFIG_APPLICATION));
        assert!(parse("").unwrap().jobs.is_empty(), "no setting, no job");

        let e = parse("retention_days = 0").unwrap_err();
        assert_eq!(e.key, "retention_days");
        assert!(e.message.contains("allowed is 1 to 36500"), "{e}");
        let e = parse("[[jobs]]\nname = \"takt-retention\"\nhandler = \"x::y\"").unwrap_err();
        assert_eq!(e.key, "jobs[0].name");
        assert!(e.message.contains("reserved for the retention job"), "{e}");
        let e = parse(
            "[[jobs]]\nname = \"purge\"\nhandler = \"takt::retention\"\nparams = { keep = 3 }",
        )
        .unwrap_err();
        assert_eq!(e.key, "jobs[0].handler");
        assert!(e.message.contains("unknown field `keep`"), "{e}");
        let e = parse("[[jobs]]\nname = \"v\"\nhandler = \"takt::vacuum\"").unwrap_err();
        assert_eq!(e.key, "jobs[0].handler");
        assert!(e.message.contains("not a built-in handler"), "{e}");
        // A retention job of one's own, with its own schedule, is fine.
        let c = parse(
            "[[jobs]]\nname = \"purge\"\nhandler = \"takt::retention\"\nparams = { days = 90 }\ncron = \"0 4 * * 0\"",
        )
        .unwrap();
        assert_eq!(c.jobs[0].params_json, r#"{"days":90}"#);
    }
}
