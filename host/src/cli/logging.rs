//! The `takt` command's logs: the host's `tracing` events (failed log writes, failed claims,
//! abandoned plugin threads, a database outage …) on stderr, through `tracing-subscriber`.
//! Run lines stay on stdout; they are output, not logs.
//!
//! * **Level**: `TAKT_LOG`, else `RUST_LOG`, in `tracing-subscriber`'s `EnvFilter` syntax
//!   (`debug`, `takt_host=debug,warn`); else [`RUN_FILTER`] for `takt run` and
//!   [`COMMAND_FILTER`] for the other commands. A filter that does not parse is an error that
//!   names the variable, never silently ignored.
//! * **Format**: [`LogFormat::Text`] — `2026-06-01T06:00:00.125Z  WARN message k=v`, coloured
//!   only when stderr is a terminal and `NO_COLOR` is unset — or [`LogFormat::Json`], one
//!   object per line.
//! * **Under journald**: when stderr is the journal's stream (`JOURNAL_STREAM` names stderr's
//!   device and inode, as systemd sets it for `StandardError=journal`), text lines carry no
//!   time stamp and no colour (the journal stamps each line itself) and start with the
//!   sd-daemon priority prefix (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug), so
//!   `journalctl -p warning` filters them and colours warnings. JSON lines are left as they
//!   are: a prefix would break them for a collector that parses them.
//!
//! Plugins' own `tracing` never comes here: a plugin file has its own copy of `tracing`, and
//! the SDK runs every handler call (compiled-in plugins' too) under a per-thread dispatcher of
//! its own that forwards events to the run's log (`plugin-api/src/sdk/log_layer.rs`). A
//! scoped dispatcher takes precedence over the global one installed here, so a plugin's line
//! lands in its run log once and never on stderr.

use std::fmt;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Result, anyhow};
use tracing::{Dispatch, Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt;

pub use crate::config::LogFormat;

/// The default filter of `takt run`: takt's own crates at `info` (a node's start-up, recovery
/// and outage notes are worth having in the service log), every dependency at `warn`.
pub const RUN_FILTER: &str = "takt_host=info,takt_core=info,takt_plugin_api=info,\
                              takt_plugin_exe=info,takt_plugin_sql=info,takt_plugin_http=info,warn";

/// The default filter of the one-shot commands (`job …`, `runs`, …): only what went wrong,
/// so their output stays what scripts read.
pub const COMMAND_FILTER: &str = "warn";

/// The filter from `env` (`TAKT_LOG` wins over `RUST_LOG`; empty counts as unset), else
/// `default`. A bad filter is an error naming the variable and the accepted form.
pub fn filter(env: impl Fn(&str) -> Option<String>, default: &str) -> Result<EnvFilter> {
    let given = ["TAKT_LOG", "RUST_LOG"]
        .into_iter()
        .find_map(|var| env(var).filter(|v| !v.trim().is_empty()).map(|v| (var, v)));
    match given {
        Some((var, text)) => EnvFilter::builder().parse(text.trim()).map_err(|e| {
            anyhow!(
                "{var}=\"{text}\" is not a log filter ({e}); give a level (error, warn, info, \
                 debug, trace) or directives such as takt_host=debug,warn"
            )
        }),
        None => Ok(EnvFilter::builder().parse(default)?),
    }
}

/// Time stamps in UTC to the millisecond, `2026-06-01T06:00:00.125Z`, like the rest of
/// takt's output.
struct UtcMillis;

impl FormatTime for UtcMillis {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write!(
            w,
            "{}",
            jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        )
    }
}

/// The host's log subscriber: `filter`, then `format` (with colours if `ansi`) written to
/// `writer`. Write errors are ignored rather than reported on stderr (a closed stderr must
/// not turn a log line into a panic). Public so that a program embedding the host can log
/// exactly as `takt run` does.
pub fn dispatch<W>(filter: EnvFilter, format: LogFormat, ansi: bool, writer: W) -> Dispatch
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => Dispatch::new(
            registry.with(
                tracing_subscriber::fmt::layer()
                    .compact()
                    .with_target(false)
                    .with_timer(UtcMillis)
                    .with_ansi(ansi)
                    .with_writer(writer)
                    .log_internal_errors(false),
            ),
        ),
        LogFormat::Json => Dispatch::new(
            registry.with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_timer(UtcMillis)
                    .with_writer(writer)
                    .log_internal_errors(false),
            ),
        ),
    }
}

/// One journal line per event: the sd-daemon priority prefix, the message and its fields;
/// no time (the journal records it) and no level word (the priority is the level).
struct JournalLine;

impl<S, N> FormatEvent<S, N> for JournalLine
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(w, "<{}>", journal_priority(*event.metadata().level()))?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// syslog's priority for a level, as sd-daemon(3) prefixes read it.
fn journal_priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// The host's log subscriber for a stderr that is the journal's stream (see the module
/// documentation): `filter`, then one prefixed line per event written to `writer`.
pub fn journal_dispatch<W>(filter: EnvFilter, writer: W) -> Dispatch
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    Dispatch::new(
        tracing_subscriber::registry().with(filter).with(
            tracing_subscriber::fmt::layer()
                .event_format(JournalLine)
                .with_ansi(false)
                .with_writer(writer)
                .log_internal_errors(false),
        ),
    )
}

/// Whether `JOURNAL_STREAM` (`<device>:<inode>`, as systemd sets it) names the stream whose
/// device and inode are `stderr`. A variable inherited by a child whose stderr was redirected
/// elsewhere names another file, so the check is against stderr itself, not the variable's
/// presence.
fn is_journal_stream(journal_stream: Option<&str>, stderr: Option<(u64, u64)>) -> bool {
    let (Some(var), Some((dev, ino))) = (journal_stream, stderr) else {
        return false;
    };
    let Some((d, i)) = var.trim().split_once(':') else {
        return false;
    };
    d.parse::<u64>().ok() == Some(dev) && i.parse::<u64>().ok() == Some(ino)
}

/// Device and inode of the process's stderr (fd 2).
#[cfg(unix)]
fn stderr_identity() -> Option<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `stat` into the buffer it is given and reads nothing else; the
    // buffer is only read after it reported success.
    let st = unsafe {
        if libc::fstat(2, st.as_mut_ptr()) != 0 {
            return None;
        }
        st.assume_init()
    };
    #[allow(clippy::unnecessary_cast)] // the field types differ between unix targets
    Some((st.st_dev as u64, st.st_ino as u64))
}

#[cfg(not(unix))]
fn stderr_identity() -> Option<(u64, u64)> {
    None
}

/// A log writer that keeps what is logged in memory, for tests (an embedding program's too)
/// that check what the host logged: give it to [`dispatch`], read it with
/// [`text`](MemoryLog::text). Clones share the buffer.
#[derive(Clone, Debug, Default)]
pub struct MemoryLog(Arc<Mutex<Vec<u8>>>);

impl MemoryLog {
    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for MemoryLog {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'w> MakeWriter<'w> for MemoryLog {
    type Writer = MemoryLog;

    fn make_writer(&'w self) -> MemoryLog {
        self.clone()
    }
}

/// Installs the process's log subscriber on stderr (see the module documentation), with
/// `default_filter` unless `TAKT_LOG` / `RUST_LOG` say otherwise.
pub(crate) fn install(format: LogFormat, default_filter: &str) -> Result<()> {
    let filter = filter(|var| std::env::var(var).ok(), default_filter)?;
    let journal = format == LogFormat::Text
        && is_journal_stream(
            std::env::var("JOURNAL_STREAM").ok().as_deref(),
            stderr_identity(),
        );
    if journal {
        return tracing::dispatcher::set_global_default(journal_dispatch(filter, std::io::stderr))
            .map_err(|e| anyhow!("cannot install the log subscriber: {e}"));
    }
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing::dispatcher::set_global_default(dispatch(filter, format, ansi, std::io::stderr))
        .map_err(|e| anyhow!("cannot install the log subscriber: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn logged(filter: EnvFilter, format: LogFormat, emit: impl FnOnce()) -> String {
        let log = MemoryLog::default();
        let d = dispatch(filter, format, false, log.clone());
        tracing::dispatcher::with_default(&d, emit);
        log.text()
    }

    #[test]
    fn takt_log_wins_over_rust_log_and_the_default() {
        let only_warn = |f: EnvFilter| {
            logged(f, LogFormat::Text, || {
                tracing::info!(target: "takt_host::x", "an info line");
                tracing::warn!(target: "takt_host::x", "a warning");
            })
        };
        let both = [("TAKT_LOG", "warn"), ("RUST_LOG", "info")];
        let text = only_warn(filter(env(&both), "info").unwrap());
        assert!(
            text.contains("a warning") && !text.contains("an info line"),
            "{text}"
        );
        let rust = [("RUST_LOG", "warn")];
        let text = only_warn(filter(env(&rust), "info").unwrap());
        assert!(!text.contains("an info line"), "{text}");
        let blank = [("TAKT_LOG", " "), ("RUST_LOG", "")];
        let text = only_warn(filter(env(&blank), RUN_FILTER).unwrap());
        assert!(text.contains("an info line"), "the default applies: {text}");
        // The default keeps dependencies at warn.
        let text = logged(
            filter(env(&[]), RUN_FILTER).unwrap(),
            LogFormat::Text,
            || {
                tracing::info!(target: "tokio_postgres::connection", "chatter");
                tracing::warn!(target: "tokio_postgres::connection", "trouble");
            },
        );
        assert!(
            text.contains("trouble") && !text.contains("chatter"),
            "{text}"
        );
    }

    #[test]
    fn a_bad_filter_names_the_variable() {
        let bad = [("TAKT_LOG", "takt_host=loud")];
        let e = filter(env(&bad), "info").unwrap_err().to_string();
        assert!(
            e.starts_with("TAKT_LOG=\"takt_host=loud\" is not a log filter"),
            "{e}"
        );
        assert!(e.contains("takt_host=debug,warn"), "{e}");
        let bad = [("RUST_LOG", "=")];
        let e = filter(env(&bad), "info").unwrap_err().to_string();
        assert!(e.starts_with("RUST_LOG=\"=\""), "{e}");
    }

    #[test]
    fn text_lines_have_time_level_message_and_no_colours() {
        let text = logged(EnvFilter::new("info"), LogFormat::Text, || {
            tracing::warn!(run = 7, "cannot store 3 log lines");
        });
        let line = text.lines().next().expect("one line");
        let (time, rest) = line.split_once(' ').expect("a time first");
        assert!(
            time.len() == 24 && time.ends_with('Z') && time.parse::<jiff::Timestamp>().is_ok(),
            "{line}"
        );
        assert!(rest.trim_start().starts_with("WARN "), "{line}");
        assert!(rest.contains("cannot store 3 log lines run=7"), "{line}");
        assert!(
            !line.contains('\u{1b}'),
            "no ANSI escapes off a terminal: {line:?}"
        );
    }

    #[test]
    fn journal_lines_have_a_priority_prefix_and_no_time_or_colour() {
        let log = MemoryLog::default();
        let d = journal_dispatch(EnvFilter::new("debug"), log.clone());
        tracing::dispatcher::with_default(&d, || {
            tracing::error!("the database is gone");
            tracing::warn!(run = 7, "cannot store 3 log lines");
            tracing::info!("node n1 recovered 2 runs");
            tracing::debug!("a pass");
        });
        let text = log.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "<3>the database is gone",
                "<4>cannot store 3 log lines run=7",
                "<6>node n1 recovered 2 runs",
                "<7>a pass"
            ],
            "{text:?}"
        );
    }

    #[test]
    fn the_journal_is_recognised_by_stderr_itself_not_the_variable() {
        assert!(is_journal_stream(Some("8:12345"), Some((8, 12345))));
        assert!(is_journal_stream(Some("8:12345 "), Some((8, 12345))));
        // Inherited by a child whose stderr is a file: another inode.
        assert!(!is_journal_stream(Some("8:12345"), Some((8, 999))));
        assert!(!is_journal_stream(Some("8:12345"), None));
        assert!(!is_journal_stream(None, Some((8, 12345))));
        assert!(!is_journal_stream(Some("garbage"), Some((8, 12345))));
        assert!(!is_journal_stream(Some("8:"), Some((8, 12345))));
    }

    #[test]
    fn json_lines_are_one_object_each() {
        let text = logged(EnvFilter::new("info"), LogFormat::Json, || {
            tracing::warn!(run = 7, "cannot store 3 log lines");
            tracing::error!("the scheduling loop ended abnormally");
        });
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["level"], "WARN");
        assert_eq!(lines[0]["message"], "cannot store 3 log lines");
        assert_eq!(lines[0]["run"], 7);
        assert!(
            lines[0]["target"]
                .as_str()
                .unwrap()
                .starts_with("takt_host")
        );
        assert!(
            lines[0]["timestamp"]
                .as_str()
                .unwrap()
                .parse::<jiff::Timestamp>()
                .is_ok()
        );
        assert_eq!(lines[1]["level"], "ERROR");
    }
}
