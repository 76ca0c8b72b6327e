//! The [`RunSink`] that carries one run's log lines and progress to the store in batches.
//!
//! The executor calls the sink on the plugin's thread and requires it to be quick, so the sink
//! only pushes onto an unbounded channel; a flusher task on tokio drains it, writes up to
//! [`BATCH`] lines per [`Store::log_append`] and the latest progress with
//! [`Store::run_progress`], and stops at [`LogForwarder::finish`]. Lines a plugin writes after
//! that (an abandoned thread) go nowhere: the run's record is final.

use std::sync::Arc;

use takt_core::run::{Progress, RunId};
use takt_core::store::{LogLevel, LogLine, Store};
use takt_plugin_api::abi::LogLevel as AbiLevel;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::clock::Clock;
use crate::executor::RunSink;

/// Lines written per `log_append` call at most.
pub(crate) const BATCH: usize = 100;

enum Msg {
    Line(LogLine),
    Progress(Progress),
}

/// The sink side, handed to the executor.
struct ChannelSink {
    tx: mpsc::UnboundedSender<Msg>,
    clock: Arc<dyn Clock>,
}

impl RunSink for ChannelSink {
    fn log(&self, level: AbiLevel, message: &str) {
        let level = match level {
            AbiLevel::TRACE => LogLevel::Trace,
            AbiLevel::DEBUG => LogLevel::Debug,
            AbiLevel::INFO => LogLevel::Info,
            AbiLevel::WARN => LogLevel::Warn,
            // ERROR, and levels a newer plugin API may add: keep the line, as an error.
            _ => LogLevel::Error,
        };
        // A send fails only after `finish`: the run is final, so the line is dropped.
        let _ = self.tx.send(Msg::Line(LogLine {
            at: self.clock.now(),
            level,
            message: message.to_string(),
        }));
    }

    fn progress(&self, done: u64, total: u64, note: &str) {
        let _ = self.tx.send(Msg::Progress(Progress {
            done,
            total,
            message: note.to_string(),
        }));
    }
}

/// One run's forwarder: the sink for the executor plus the flusher task.
pub(crate) struct LogForwarder {
    sink: Arc<dyn RunSink>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl LogForwarder {
    /// Starts the flusher for run `run`.
    pub(crate) fn start<S: Store + Clone + 'static>(
        store: S,
        run: RunId,
        clock: Arc<dyn Clock>,
    ) -> LogForwarder {
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(flush_loop(store, run, rx, stop_rx));
        LogForwarder {
            sink: Arc::new(ChannelSink { tx, clock }),
            stop,
            task,
        }
    }

    /// The sink to give the executor.
    pub(crate) fn sink(&self) -> Arc<dyn RunSink> {
        self.sink.clone()
    }

    /// Writes everything received so far and stops the flusher. Call after the executor
    /// returned and before the run's final state is recorded (progress needs a running run).
    pub(crate) async fn finish(self) {
        let _ = self.stop.send(());
        if let Err(e) = self.task.await {
            tracing::warn!("run log flusher ended abnormally: {e}");
        }
    }
}

async fn flush_loop<S: Store>(
    store: S,
    run: RunId,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut msgs = Vec::with_capacity(BATCH);
    loop {
        let stopping = tokio::select! {
            biased;
            n = rx.recv_many(&mut msgs, BATCH) => n == 0,
            _ = &mut stop => true,
        };
        if stopping {
            // Drain what is already queued, then stop (later lines are dropped).
            while let Ok(m) = rx.try_recv() {
                msgs.push(m);
            }
            rx.close();
        }
        write(&store, run, std::mem::take(&mut msgs)).await;
        if stopping {
            return;
        }
    }
}

/// Writes `msgs` in order: lines in batches of at most [`BATCH`], progress between them.
async fn write<S: Store>(store: &S, run: RunId, msgs: Vec<Msg>) {
    let mut lines = Vec::new();
    let mut progress = None;
    for m in msgs {
        match m {
            Msg::Line(l) => {
                lines.push(l);
                if lines.len() == BATCH {
                    append(store, run, &mut lines).await;
                }
            }
            // Only the latest report of a batch matters: the store keeps only the latest.
            Msg::Progress(p) => progress = Some(p),
        }
    }
    append(store, run, &mut lines).await;
    if let Some(p) = progress
        && let Err(e) = store.run_progress(run, &p).await
    {
        tracing::warn!("cannot record progress of run {run}: {e}");
    }
}

async fn append<S: Store>(store: &S, run: RunId, lines: &mut Vec<LogLine>) {
    if lines.is_empty() {
        return;
    }
    if let Err(e) = store.log_append(run, lines).await {
        tracing::warn!("cannot store {} log lines of run {run}: {e}", lines.len());
    }
    lines.clear();
}
