//! `takt plugin list` and `takt plugin verify`.
//!
//! Both check files as `takt run` would: with the `plugin_dir` and `[plugins]` pins,
//! `require_pins` and aliases of the config (`--config`, else `takt.toml` in the working
//! directory when there is one), flags winning over it. The shadow copies go to a temporary
//! directory unless `--shadow-dir` says otherwise: an inspection must not need write access to
//! a running host's shadow directory.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::table::Table;
use crate::config::{Config, DEFAULT_FILE};
use crate::plugins::{LoadOptions, LoadedPlugin, PluginSet, Refusal, load_file};

#[derive(Debug, Subcommand)]
pub(super) enum PluginCmd {
    /// Load every plugin of a directory and list plugins, versions, handlers and refusals.
    List {
        /// The plugin directory [default: plugin_dir of the config, else $TAKT_PLUGIN_DIR,
        /// else plugins].
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        #[command(flatten)]
        opts: LoadArgs,
    },
    /// Run every check on one plugin file; exit 1 with the reason if it would be refused.
    Verify {
        /// The plugin file (.so / .dll / .dylib).
        file: PathBuf,
        #[command(flatten)]
        opts: LoadArgs,
    },
    /// Make a running `takt run` reload its plugin directory, through its HTTP API (operator
    /// role): changed files load beside the old versions, new runs use them, running runs
    /// finish on the old ones (draining, then drained); a refused file keeps its old version.
    /// Exit 1 when a file was refused.
    Reload {
        #[command(flatten)]
        api: super::api::ApiArgs,
        /// Print the API's JSON report.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub(super) struct LoadArgs {
    /// The config whose plugin_dir and [plugins] pins, require_pins, aliases and
    /// check_permissions apply, as in `takt run` [default: takt.toml in the working
    /// directory, if there is one].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Where content-addressed copies are loaded from [default: <temp>/takt-shadow].
    #[arg(long, value_name = "DIR")]
    shadow_dir: Option<PathBuf>,
    /// Expected SHA-256 of a file, as FILE_NAME=HEX; repeatable.
    #[arg(long = "pin", value_name = "FILE=SHA256")]
    pins: Vec<String>,
    /// Refuse files without a pin.
    #[arg(long)]
    require_pins: bool,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
}

impl LoadArgs {
    /// The config named by `--config`, else `takt.toml` here when it exists.
    fn config(&self) -> Result<Option<Config>> {
        match &self.config {
            Some(file) => Ok(Some(Config::load(file)?)),
            None if Path::new(DEFAULT_FILE).is_file() => {
                Ok(Some(Config::load(Path::new(DEFAULT_FILE))?))
            }
            None => Ok(None),
        }
    }

    /// The load options: the config's pins, `require_pins`, aliases and permission check,
    /// then the flags.
    fn options(&self, config: Option<&Config>) -> Result<LoadOptions> {
        let mut o = LoadOptions::with_temp_shadow();
        if let Some(c) = config {
            o.pins.clone_from(&c.pins);
            o.require_pins = c.require_pins;
            o.aliases.clone_from(&c.aliases);
            o.check_permissions = c.check_permissions;
        }
        if let Some(d) = &self.shadow_dir {
            o.shadow_dir.clone_from(d);
        }
        for pin in &self.pins {
            let Some((file, sha)) = pin.split_once('=') else {
                bail!("--pin \"{pin}\" is not FILE_NAME=SHA256");
            };
            let sha = sha.trim().to_ascii_lowercase();
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("--pin \"{pin}\": the SHA-256 must be 64 hexadecimal digits");
            }
            o.pins.insert(file.trim().to_string(), sha);
        }
        o.require_pins |= self.require_pins;
        Ok(o)
    }
}

/// The directory to list and where that choice came from (for the header and errors).
fn plugin_dir(flag: Option<PathBuf>, config: Option<&Config>) -> (PathBuf, String) {
    let env = std::env::var_os("TAKT_PLUGIN_DIR").filter(|v| !v.is_empty());
    match (flag, config, env) {
        (Some(d), _, _) => (d, "--dir".to_string()),
        (None, Some(c), Some(_)) => (c.plugin_dir.clone(), "TAKT_PLUGIN_DIR".to_string()),
        (None, Some(c), None) => (
            c.plugin_dir.clone(),
            format!("plugin_dir of {}", c.file.display()),
        ),
        (None, None, Some(d)) => (PathBuf::from(d), "TAKT_PLUGIN_DIR".to_string()),
        (None, None, None) => (
            PathBuf::from("plugins"),
            format!("the default: there is no {DEFAULT_FILE} here"),
        ),
    }
}

/// `takt plugin reload`: the report of the host's reload, one line per version or file.
fn reload(api: &super::api::ApiArgs, json: bool) -> Result<()> {
    let report = api.post("/api/v1/plugins/reload")?;
    let list = |key: &str| {
        report
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let label = |v: &Value| {
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        match v.get("sha256").and_then(Value::as_str) {
            Some(sha) => format!(
                "{} {} (sha256 {}…)",
                s("name"),
                s("version"),
                &sha[..12.min(sha.len())]
            ),
            None => format!("{} {} (compiled in)", s("name"), s("version")),
        }
    };
    let refused = list("refused");
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        let (loaded, retired) = (list("loaded"), list("retired"));
        if loaded.is_empty() && retired.is_empty() && refused.is_empty() {
            outln!("nothing changed: every plugin file is the version serving")?;
        }
        for v in &loaded {
            outln!("loaded {}", label(v))?;
        }
        for v in &retired {
            let state = v.get("state").and_then(Value::as_str).unwrap_or_default();
            let runs = v.get("runs").and_then(Value::as_u64).unwrap_or(0);
            if state == "draining" {
                outln!("retired {}: draining, {runs} runs finish on it", label(v))?;
            } else {
                outln!("retired {}: {state}", label(v))?;
            }
        }
        for r in &refused {
            let s = |k: &str| {
                r.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let kept = r
                .get("kept")
                .filter(|k| !k.is_null())
                .map(|k| format!("; {} keeps serving", label(k)))
                .unwrap_or_default();
            outln!(
                "refused {}: {}; fix: {}{kept}",
                s("file"),
                s("reason"),
                s("fix")
            )?;
        }
        for w in list("warnings") {
            outln!("warning: {}", w.as_str().unwrap_or_default())?;
        }
    }
    if !refused.is_empty() {
        bail!(
            "{} plugin files were refused (the versions before them keep serving)",
            refused.len()
        );
    }
    Ok(())
}

pub(super) fn run(cmd: PluginCmd) -> Result<()> {
    match cmd {
        PluginCmd::Reload { api, json } => reload(&api, json),
        PluginCmd::List { dir, opts } => {
            let config = opts.config()?;
            let (dir, from) = plugin_dir(dir, config.as_ref());
            // A directory that cannot be read is the answer, not one refusal among others.
            std::fs::read_dir(&dir).with_context(|| {
                format!(
                    "cannot read the plugin directory {} ({from}); give the folder that holds \
                     the plugin files with --dir, or set plugin_dir in {DEFAULT_FILE}",
                    dir.display()
                )
            })?;
            let set = PluginSet::load_dir(&dir, &opts.options(config.as_ref())?);
            if opts.json {
                let doc = json!({
                    "dir": dir.display().to_string(),
                    "dir_from": from,
                    "config": config.as_ref().map(|c| c.file.display().to_string()),
                    "plugins": set.plugins().iter().map(|p| plugin_json(p)).collect::<Vec<_>>(),
                    "refused": set.refusals().iter().map(refusal_json).collect::<Vec<_>>(),
                });
                outln!("{}", serde_json::to_string_pretty(&doc)?)?;
            } else {
                outln!("plugin directory {} ({from})", dir.display())?;
                out!("{}", list_text(&set))?;
            }
            Ok(())
        }
        PluginCmd::Verify { file, opts } => {
            match load_file(&file, &opts.options(opts.config()?.as_ref())?) {
                Ok(p) => {
                    if opts.json {
                        outln!("{}", serde_json::to_string_pretty(&plugin_json(&p))?)?;
                    } else {
                        outln!(
                            "ok: {} is plugin {} {} (takt-plugin-api {}, sha256 {})",
                            file.display(),
                            p.name,
                            p.version,
                            p.api_version,
                            p.sha256
                        )?;
                        out!("{}", handlers_text(&p))?;
                    }
                    Ok(())
                }
                Err(r) => {
                    if opts.json {
                        outln!("{}", serde_json::to_string_pretty(&refusal_json(&r))?)?;
                    }
                    bail!("{r}")
                }
            }
        }
    }
}

fn plugin_json(p: &LoadedPlugin) -> Value {
    json!({
        "name": p.name,
        "version": p.version,
        "api_version": p.api_version,
        "file": p.file.display().to_string(),
        "sha256": p.sha256,
        "handlers": p.handlers.iter().map(|h| json!({
            "handler_type": h.handler_type,
            "description": h.description,
            "default_timeout_ms": h.default_timeout.map(|t| t.as_millis() as u64),
            "params_schema": h.params_schema,
        })).collect::<Vec<_>>(),
    })
}

fn refusal_json(r: &Refusal) -> Value {
    json!({"file": r.file.display().to_string(), "reason": r.reason, "fix": r.fix})
}

fn handlers_text(p: &LoadedPlugin) -> String {
    let mut t = Table::new(["  handler type", "timeout", "description"]);
    for h in &p.handlers {
        t.row([
            format!("  {}", h.handler_type),
            h.default_timeout
                .map(|d| takt_core::schedule::format_duration(d.as_secs().max(1)))
                .unwrap_or_else(|| "-".to_string()),
            h.description.clone(),
        ]);
    }
    t.render()
}

fn list_text(set: &PluginSet) -> String {
    let mut out = String::new();
    if set.plugins().is_empty() {
        out.push_str("no plugins loaded\n");
    }
    for p in set.plugins() {
        out.push_str(&format!(
            "{} {}  (takt-plugin-api {}, {})\n",
            p.name,
            p.version,
            p.api_version,
            p.file.display()
        ));
        out.push_str(&handlers_text(p));
        out.push('\n');
    }
    if !set.refusals().is_empty() {
        out.push_str(&format!("refused {} file(s):\n", set.refusals().len()));
        for r in set.refusals() {
            out.push_str(&format!(
                "  {}\n    reason: {}\n    fix:    {}\n",
                r.file.display(),
                r.reason,
                r.fix
            ));
        }
    }
    out
}

// ---- takt run: the plugin registry, hot swaps and their messages ---------------------------

/// The plugins of `takt run` as `config` sets them up (directory, load options, isolation
/// with `takt` itself as the worker program, the permission check); the caller adds the
/// built-in executors and builds it.
pub(super) fn registry(config: &Config) -> Result<crate::plugins::PluginsBuilder> {
    use crate::worker::{WorkerProgram, WorkerSettings, Workers, bytes_text};
    let options = LoadOptions {
        shadow_dir: config.shadow_dir.clone(),
        pins: config.pins.clone(),
        require_pins: config.require_pins,
        aliases: config.aliases.clone(),
        check_permissions: config.check_permissions,
    };
    let program = WorkerProgram::CurrentExe
        .resolve()
        .map_err(|e| anyhow::anyhow!("cannot find this program's own file for its workers: {e}"))?;
    let settings = WorkerSettings {
        max_workers: config.max_workers,
        memory_limit: config.worker_memory,
        ..WorkerSettings::new(program)
    };
    if !config.isolate.is_empty() {
        outln!(
            "isolated plugins (each call in a worker process, at most {} at once{}): {}",
            settings.max_workers,
            settings
                .memory_limit
                .map(|m| format!(", {} each", bytes_text(m)))
                .unwrap_or_default(),
            config.isolate.join(", ")
        )?;
    }
    if !config.check_permissions {
        outln!(
            "warning: [plugins] check_permissions = false: plugin files others may write are \
             loaded"
        )?;
    }
    match config.plugin_watch {
        Some(every) => outln!(
            "watching {} for changed plugin files every {}",
            config.plugin_dir.display(),
            takt_core::schedule::format_duration(every.as_secs())
        )?,
        None if cfg!(unix) => outln!(
            "plugins reload on SIGHUP (kill -HUP {})",
            std::process::id()
        )?,
        None => {}
    }
    Ok(crate::plugins::Plugins::builder()
        .dir(&config.plugin_dir)
        .options(options)
        .isolate(config.isolate.clone())
        .workers(Workers::new(settings)))
}

/// SIGHUP on Unix (the signal daemons reload on); nothing elsewhere (Windows has no SIGHUP:
/// use `[plugins] watch` or the embedding API there).
pub(super) struct Hangup {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Hangup {
    pub(super) fn new() -> Result<Hangup> {
        #[cfg(unix)]
        {
            let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .map_err(|e| anyhow::anyhow!("cannot listen for SIGHUP: {e}"))?;
            Ok(Hangup { signal })
        }
        #[cfg(not(unix))]
        Ok(Hangup {})
    }

    /// The next SIGHUP (never, where there is none).
    pub(super) async fn recv(&mut self) {
        #[cfg(unix)]
        {
            if self.signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        #[cfg(not(unix))]
        std::future::pending::<()>().await
    }
}

/// A SIGHUP: reload the plugins (the report is printed from its event).
pub(super) async fn reload_on_hangup<S: takt_core::store::Store + Clone + 'static>(
    handle: &crate::scheduler::SchedulerHandle<S>,
) -> Result<()> {
    outln!("SIGHUP: reloading the plugins")?;
    if let Err(e) = handle.reload_plugins().await {
        outln!("cannot reload the plugins: {e}")?;
    }
    Ok(())
}

/// Prints a plugin event of the scheduler (other events print nothing here).
/// [`print_event`] for `takt run --json`: one JSON line per plugin event.
pub(super) fn event_json(ev: &crate::scheduler::SchedulerEvent) -> Result<()> {
    use crate::scheduler::SchedulerEvent;
    let at = jiff::Timestamp::now().to_string();
    let v = match ev {
        SchedulerEvent::PluginsReloaded { report } => serde_json::json!({
            "event": "plugins_reloaded",
            "at": at,
            "loaded": report.loaded.iter().map(|v| v.label()).collect::<Vec<_>>(),
            "retired": report.retired.iter().map(|v| serde_json::json!({
                "plugin": v.label(), "state": v.state.to_string(), "runs": v.runs,
            })).collect::<Vec<_>>(),
            "refused": report.refused.iter().map(|r| serde_json::json!({
                "file": r.refusal.file.display().to_string(),
                "reason": r.refusal.reason.to_string(),
                "fix": r.refusal.fix.to_string(),
                "kept": r.kept.as_ref().map(|k| k.label()),
            })).collect::<Vec<_>>(),
            "warnings": report.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }),
        SchedulerEvent::PluginDrained { version } => serde_json::json!({
            "event": "plugin_drained", "at": at, "plugin": version.label(),
        }),
        _ => return Ok(()),
    };
    super::out::json_line(&v)
}

pub(super) fn print_event(ev: &crate::scheduler::SchedulerEvent, now: &str) -> Result<()> {
    use crate::scheduler::SchedulerEvent;
    match ev {
        SchedulerEvent::PluginsReloaded { report } => {
            if !report.changed() && report.refused.is_empty() {
                outln!("{now}  plugins reloaded: nothing changed")?;
            }
            for v in &report.loaded {
                outln!("{now}  plugin {} loaded", v.label())?;
            }
            for v in &report.retired {
                match v.state {
                    crate::plugins::VersionState::Draining => outln!(
                        "{now}  plugin {} draining: {} runs finish on it",
                        v.label(),
                        v.runs
                    )?,
                    _ => outln!("{now}  plugin {} {}", v.label(), v.state)?,
                }
            }
            for r in &report.refused {
                outln!(
                    "{now}  plugin file {} refused: {}; fix: {}{}",
                    r.refusal.file.display(),
                    r.refusal.reason,
                    r.refusal.fix,
                    r.kept
                        .as_ref()
                        .map(|k| format!("; {} keeps serving", k.label()))
                        .unwrap_or_default()
                )?;
            }
            for w in &report.warnings {
                outln!("{now}  warning: {w}")?;
            }
        }
        SchedulerEvent::PluginDrained { version } => {
            outln!("{now}  plugin {} drained", version.label())?;
        }
        _ => {}
    }
    Ok(())
}
