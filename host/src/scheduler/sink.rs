//! The [`RunSink`] that carries one run's log lines and progress to the store in batches.
//!
//! The executor calls the sink on the plugin's thread and requires it to be quick, so the sink
//! only pushes onto an unbounded channel; a flusher task on tokio drains it, writes up to
//! [`BATCH`] lines per [`Store::log_append`] and the latest progress with
//! [`Store::run_progress`], and stops at [`LogForwarder::finish`]. Lines a plugin writes after
//! that (an abandoned thread) go nowhere: the run's record is final.
//!
//! The flusher task, and the channel to it, are made by the run's first line or progress
//! report, not with the run: most runs of a busy host write nothing, and a task spawned,
//! woken and joined per run was a measurable part of a no-op run's cost (B3), as was the
//! channel's first block (~2 KB allocated and freed per run). A line still reaches the store
//! while the run goes on, as before.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use takt_core::run::{Progress, RunId};
use takt_core::store::{LogLevel, LogLine, Store};
use takt_plugin_api::abi::LogLevel as AbiLevel;
use tokio::runtime::Handle;
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

/// Where the flusher is.
enum Flusher {
    /// Nothing written yet.
    NotStarted,
    /// Started by the first message; `finish` stops it and waits for its last write.
    Running(oneshot::Sender<()>, JoinHandle<()>),
    /// `finish` ran: later messages are dropped.
    Finished,
}

/// The sink side, handed to the executor.
struct ChannelSink<S> {
    /// The flusher's channel, set when it starts, so that every later message is a plain
    /// channel send.
    tx: OnceLock<mpsc::UnboundedSender<Msg>>,
    clock: Arc<dyn Clock>,
    flusher: Mutex<Flusher>,
    store: S,
    run: RunId,
    /// The runtime of the run's task: the sink is called on the plugin's thread.
    runtime: Handle,
}

impl<S: Store + Clone + 'static> ChannelSink<S> {
    fn send(&self, msg: Msg) {
        if let Some(tx) = self.tx.get() {
            // A send fails only after `finish`: the run is final, so the message is dropped.
            let _ = tx.send(msg);
            return;
        }
        let mut flusher = self.flusher.lock().unwrap_or_else(PoisonError::into_inner);
        match &*flusher {
            Flusher::NotStarted => {
                let (tx, rx) = mpsc::unbounded_channel();
                let (stop, stop_rx) = oneshot::channel();
                let task =
                    self.runtime
                        .spawn(flush_loop(self.store.clone(), self.run, rx, stop_rx));
                *flusher = Flusher::Running(stop, task);
                let _ = tx.send(msg);
                // Under the lock: a racing first message waits for it and then sends here.
                let _ = self.tx.set(tx);
            }
            Flusher::Running(..) => {
                if let Some(tx) = self.tx.get() {
                    let _ = tx.send(msg);
                }
            }
            // The run is final: the line is dropped.
            Flusher::Finished => {}
        }
    }
}

impl<S: Store + Clone + 'static> RunSink for ChannelSink<S> {
    fn log(&self, level: AbiLevel, message: &str) {
        let level = match level {
            AbiLevel::TRACE => LogLevel::Trace,
            AbiLevel::DEBUG => LogLevel::Debug,
            AbiLevel::INFO => LogLevel::Info,
            AbiLevel::WARN => LogLevel::Warn,
            // ERROR, and levels a newer plugin API may add: keep the line, as an error.
            _ => LogLevel::Error,
        };
        self.send(Msg::Line(LogLine {
            at: self.clock.now(),
            level,
            message: message.to_string(),
        }));
    }

    fn progress(&self, done: u64, total: u64, note: &str) {
        self.send(Msg::Progress(Progress {
            done,
            total,
            message: note.to_string(),
        }));
    }
}

/// The flusher's half, to stop it when the run ends.
trait Stop: Send + Sync {
    fn take(&self) -> Flusher;
}

impl<S: Store + Clone + 'static> Stop for ChannelSink<S> {
    fn take(&self) -> Flusher {
        let mut flusher = self.flusher.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *flusher, Flusher::Finished)
    }
}

/// One run's forwarder: the sink for the executor, and the flusher once started.
pub(crate) struct LogForwarder {
    sink: Arc<dyn RunSink>,
    stop: Arc<dyn Stop>,
}

impl LogForwarder {
    /// The forwarder of run `run`; call from within the tokio runtime that is to flush.
    pub(crate) fn start<S: Store + Clone + 'static>(
        store: S,
        run: RunId,
        clock: Arc<dyn Clock>,
    ) -> LogForwarder {
        let sink = Arc::new(ChannelSink {
            tx: OnceLock::new(),
            clock,
            flusher: Mutex::new(Flusher::NotStarted),
            store,
            run,
            runtime: Handle::current(),
        });
        LogForwarder {
            sink: sink.clone(),
            stop: sink,
        }
    }

    /// The sink to give the executor.
    pub(crate) fn sink(&self) -> Arc<dyn RunSink> {
        self.sink.clone()
    }

    /// Writes everything received so far and stops the flusher. Call after the executor
    /// returned and before the run's final state is recorded (progress needs a running run).
    pub(crate) async fn finish(self) {
        match self.stop.take() {
            // Nothing was ever written; a message sent from now on is dropped.
            Flusher::NotStarted | Flusher::Finished => {}
            Flusher::Running(stop, task) => {
                let _ = stop.send(());
                if let Err(e) = task.await {
                    tracing::warn!("run log flusher ended abnormally: {e}");
                }
            }
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
