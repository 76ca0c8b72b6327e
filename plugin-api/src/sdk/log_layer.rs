//! `tracing` inside a plugin reaches the run log.
//!
//! A plugin links its own copy of `tracing-core`, so the host's subscriber never sees its
//! events. The SDK installs, per call and on the calling thread, a subscriber whose one layer
//! formats each event (`span{fields}: message k=v`) and forwards it to the run's context.
//! Current-thread tokio tasks run on that thread and are captured too; threads a handler spawns
//! itself must carry the dispatcher along (`tracing::dispatcher::get_default` +
//! `with_default`).

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber, span};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

use super::JobContext;
use crate::abi::LogLevel;

/// Formats `message k=v k2=v2` from the fields of an event or span.
#[derive(Default)]
struct LineVisitor {
    message: String,
    fields: String,
}

impl Visit for LineVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

/// Span fields, formatted once when the span is created.
struct SpanFields(String);

struct ContextLayer {
    ctx: JobContext,
}

impl<S> Layer<S> for ContextLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut v = LineVisitor::default();
        attrs.record(&mut v);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(v.fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut v = LineVisitor::default();
        event.record(&mut v);
        let mut line = String::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                line.push_str(span.name());
                if let Some(f) = span.extensions().get::<SpanFields>()
                    && !f.0.is_empty()
                {
                    let _ = write!(line, "{{{}}}", f.0.trim_start());
                }
                line.push_str(": ");
            }
        }
        line.push_str(&v.message);
        line.push_str(&v.fields);
        let level = match *event.metadata().level() {
            Level::TRACE => LogLevel::TRACE,
            Level::DEBUG => LogLevel::DEBUG,
            Level::INFO => LogLevel::INFO,
            Level::WARN => LogLevel::WARN,
            Level::ERROR => LogLevel::ERROR,
        };
        self.ctx.log(level, &line);
    }
}

/// Runs `f` with `tracing` events on this thread forwarded to the run log (debug and above).
pub(crate) fn with_run_log<R>(ctx: &JobContext, f: impl FnOnce() -> R) -> R {
    let subscriber = Registry::default()
        .with(tracing_subscriber::filter::LevelFilter::DEBUG)
        .with(ContextLayer { ctx: ctx.clone() });
    tracing::subscriber::with_default(subscriber, f)
}
