//! `tracing` inside a plugin reaches the run log.
//!
//! A plugin links its own copy of `tracing-core`, so the host's subscriber never sees its
//! events. The SDK installs, per call and on the calling thread, a subscriber whose one layer
//! formats each event (`span{fields}: message k=v`) and forwards it to the run's context.
//! Current-thread tokio tasks run on that thread and are captured too; threads a handler spawns
//! itself must carry the dispatcher along (`tracing::dispatcher::get_default` +
//! `with_default`).

use std::fmt::{self, Write as _};
use std::sync::{Arc, RwLock};

use tracing::field::{Field, Visit};
use tracing::{Dispatch, Event, Level, Subscriber, span};
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

/// The run whose log the layer writes to; shared between a thread's dispatcher and every
/// clone of it (threads the handler spawns and hands the dispatcher to).
type Slot = Arc<RwLock<Option<JobContext>>>;

struct ContextLayer {
    slot: Slot,
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
        if let Ok(slot) = self.slot.read()
            && let Some(ctx) = slot.as_ref()
        {
            ctx.log(level, &line);
        }
    }
}

thread_local! {
    /// One dispatcher per host thread, built on first use. Building a dispatcher registers it
    /// with tracing-core's callsite registry (re-evaluating every callsite's interest), which
    /// cost several microseconds per call when it was done per call; switching the run in a
    /// slot costs a lock.
    static DISPATCH: (Dispatch, Slot) = {
        let slot: Slot = Arc::default();
        let subscriber = Registry::default()
            .with(tracing_subscriber::filter::LevelFilter::DEBUG)
            .with(ContextLayer { slot: slot.clone() });
        (Dispatch::new(subscriber), slot)
    };
}

/// Runs `f` with `tracing` events on this thread forwarded to the run log (debug and above).
pub(crate) fn with_run_log<R>(ctx: &JobContext, f: impl FnOnce() -> R) -> R {
    let Ok((dispatch, slot)) = DISPATCH.try_with(|(d, s)| (d.clone(), s.clone())) else {
        // The thread is being torn down: run without forwarding rather than not at all.
        return f();
    };
    set(&slot, Some(ctx.clone()));
    // Cleared on the way out even when `f` panics (the SDK's guard catches it further up).
    let _clear = Clear(slot);
    tracing::dispatcher::with_default(&dispatch, f)
}

struct Clear(Slot);

impl Drop for Clear {
    fn drop(&mut self) {
        set(&self.0, None);
    }
}

fn set(slot: &Slot, value: Option<JobContext>) {
    if let Ok(mut s) = slot.write() {
        *s = value;
    }
}
