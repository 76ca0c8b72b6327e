//! Panics never cross `extern "C"`: every exported function runs inside [`guard`].
//!
//! Since Rust 1.81 a panic unwinding out of an `extern "C"` function aborts the process, and
//! the process is the host. A plugin has its own copy of std, hence its own panic hook: we
//! install one (once, from the root-module constructor) that records the message and location
//! of a panic raised during a guarded call instead of printing it, and falls through to the
//! previous hook otherwise.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the capturing panic hook into this plugin's std. Idempotent.
pub(crate) fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            // With panic = "abort" nothing will catch it: never swallow the message then.
            if cfg!(panic = "unwind") && CAPTURING.with(Cell::get) {
                let location = info
                    .location()
                    .map(|l| format!(" (at {}:{}:{})", l.file(), l.line(), l.column()))
                    .unwrap_or_default();
                let message = payload_message(info.payload());
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{message}{location}")));
            } else {
                previous(info);
            }
        }));
    });
}

fn payload_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

/// Runs `f`; a panic becomes `Err(message with location)`.
pub(crate) fn guard<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    let previous = CAPTURING.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CAPTURING.with(|c| c.set(previous));
    result.map_err(|payload| {
        let message = LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| payload_message(&*payload));
        // Dropping a payload can itself panic (a payload with a panicking Drop); forgetting it
        // is the conservative choice at an FFI boundary.
        std::mem::forget(payload);
        message
    })
}
