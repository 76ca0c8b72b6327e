//! The host's Prometheus metrics (`/metrics`, OpenMetrics text, [`prometheus_client`]).
//!
//! Two sources, each where the fact is known: the scheduling loop reports attempt ends,
//! skips, claims and store errors as they happen ([`Metrics`] is its
//! [`Observer`]); what is a *level* rather than an event — runs in flight, capacity, abandoned
//! plugin threads, each node's heartbeat age — is read at scrape time
//! ([`Metrics::refresh`]), so a scrape shows the state of that moment and never a stale copy.
//!
//! Label sets are bounded: per job (the jobs an operator defined), per state and skip reason
//! (closed sets), per node. Histograms have no job label, so a host with thousands of jobs
//! does not export thousands of histograms.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use takt_core::job::JobId;
use takt_core::run::{RunState, SkipReason};

use crate::scheduler::observe::{AttemptEnd, Observer};

/// The labels of a job's counters. Typed rather than a list of pairs: a run's end looks its
/// counter up with one allocation (the job's name) instead of four (B3).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabel {
    job: String,
}

/// [`JobLabel`] and the final state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobStateLabels {
    job: String,
    state: &'static str,
}

/// Why a fire was skipped.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// Seconds buckets from 1 ms to ~2 h: a fire-to-start lateness is milliseconds when all is
/// well and minutes after an outage; a run takes milliseconds to hours.
fn seconds_buckets() -> impl Iterator<Item = f64> {
    [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        300.0, 900.0, 3600.0, 7200.0,
    ]
    .into_iter()
}

/// The metrics of one host; cheap to share (`Arc`). Register with the scheduler
/// ([`crate::scheduler::Scheduler::observer`]) and serve through the HTTP API
/// ([`crate::http`]).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    finished: Family<JobStateLabels, Counter>,
    retries: Family<JobLabel, Counter>,
    skipped: Family<ReasonLabel, Counter>,
    lateness: Histogram,
    duration: Histogram,
    claim: Histogram,
    store_errors: Counter,
    outage: Gauge,
    levels: std::sync::Arc<Levels>,
}

/// What a scrape reads from the host at that moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Runs of this node in flight.
    pub running: usize,
    /// The most runs this node runs at once: its capacity plus its recurring reserve
    /// (`SchedulerConfig::slots`), so that `running` never exceeds it.
    pub capacity: usize,
    /// Plugin calls abandoned since start (threads that ignored a cancel).
    pub abandoned_total: usize,
    /// Abandoned plugin threads still alive.
    pub abandoned_alive: usize,
    /// Worker processes killed after ignoring a cancel.
    pub killed_total: usize,
    /// Per node id: seconds since its last heartbeat (stopped nodes left out).
    pub heartbeat_age: Vec<(String, f64)>,
}

#[derive(Debug, Default)]
struct Levels {
    snapshot: Mutex<Snapshot>,
    /// Unix ms of the scrape the snapshot is from (0: never).
    at: AtomicI64,
}

impl Collector for Levels {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        let gauge = |encoder: &mut DescriptorEncoder<'_>, name, help, v: i64| {
            let g = ConstGauge::new(v);
            let m = encoder.encode_descriptor(name, help, None, g.metric_type())?;
            g.encode(m)
        };
        let to_i64 = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "takt_runs_running",
            "runs of this node in flight (claimed and not ended; during a backlog of short runs up to claim_ahead of them wait for a slot, and up to lookahead_batch fires of an instant to come wait for it)",
            to_i64(s.running),
        )?;
        gauge(
            &mut encoder,
            "takt_capacity",
            "the most runs this node runs at once (capacity plus the slots reserved for recurring fires)",
            to_i64(s.capacity),
        )?;
        gauge(
            &mut encoder,
            "takt_plugin_threads_abandoned",
            "plugin threads that ignored a cancel and still run",
            to_i64(s.abandoned_alive),
        )?;
        let c2 = ConstCounter::new(s.abandoned_total as u64);
        let m = encoder.encode_descriptor(
            "takt_plugin_calls_abandoned",
            "plugin calls abandoned since start (they ignored a cancel past the grace period)",
            None,
            c2.metric_type(),
        )?;
        c2.encode(m)?;
        let k = ConstCounter::new(s.killed_total as u64);
        let m = encoder.encode_descriptor(
            "takt_worker_processes_killed",
            "worker processes killed because their call ignored a cancel",
            None,
            k.metric_type(),
        )?;
        k.encode(m)?;
        let g = ConstGauge::new(0.0f64);
        let mut m = encoder.encode_descriptor(
            "takt_node_heartbeat_age_seconds",
            "seconds since each running node's last heartbeat (lease renewal)",
            None,
            g.metric_type(),
        )?;
        for (node, age) in &s.heartbeat_age {
            let labels = vec![("node", node.as_str())];
            ConstGauge::new(*age).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Empty metrics, registered under `takt_`.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let finished = Family::<JobStateLabels, Counter>::default();
        registry.register(
            "takt_runs_finished",
            "runs that reached a final state, by job and state",
            finished.clone(),
        );
        let retries = Family::<JobLabel, Counter>::default();
        registry.register(
            "takt_run_retries",
            "attempts that ended with a retry scheduled, by job",
            retries.clone(),
        );
        let skipped = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "takt_runs_skipped",
            "fires this node recorded as skipped, by reason",
            skipped.clone(),
        );
        let lateness = Histogram::new(seconds_buckets());
        registry.register(
            "takt_run_lateness_seconds",
            "from a run's fire time to its plugin's start (first attempts)",
            lateness.clone(),
        );
        let duration = Histogram::new(seconds_buckets());
        registry.register(
            "takt_run_duration_seconds",
            "how long each attempt's plugin call ran",
            duration.clone(),
        );
        let claim = Histogram::new(seconds_buckets());
        registry.register(
            "takt_claim_seconds",
            "how long each claim of due runs took in the store",
            claim.clone(),
        );
        let store_errors = Counter::default();
        registry.register(
            "takt_store_errors",
            "store calls of the scheduling loop that failed",
            store_errors.clone(),
        );
        let outage = Gauge::default();
        registry.register(
            "takt_store_outage",
            "1 while the database does not answer the scheduling loop, else 0",
            outage.clone(),
        );
        let levels = std::sync::Arc::new(Levels::default());
        registry.register_collector(Box::new(levels.clone()));
        Metrics {
            registry,
            finished,
            retries,
            skipped,
            lateness,
            duration,
            claim,
            store_errors,
            outage,
            levels,
        }
    }

    /// Replaces what the next scrape reads of the host's levels.
    pub fn refresh(&self, snapshot: Snapshot) {
        *self
            .levels
            .snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = snapshot;
        self.levels
            .at
            .store(jiff::Timestamp::now().as_millisecond(), Ordering::Relaxed);
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Observer for Metrics {
    fn attempt_ended(&self, end: &AttemptEnd<'_>) {
        if end.state == RunState::Pending {
            self.retries
                .get_or_create(&JobLabel {
                    job: end.job_name.to_string(),
                })
                .inc();
        } else {
            self.finished
                .get_or_create(&JobStateLabels {
                    job: end.job_name.to_string(),
                    state: end.state.name(),
                })
                .inc();
        }
        if let Some(e) = end.elapsed {
            self.duration.observe(e.as_secs_f64());
        }
        if let Some(l) = end.lateness {
            self.lateness.observe(l.as_secs_f64());
        }
    }

    fn skipped(&self, _job: JobId, reason: SkipReason) {
        self.skipped
            .get_or_create(&ReasonLabel {
                reason: reason.name(),
            })
            .inc();
    }

    fn claimed(&self, took: std::time::Duration, _claimed: usize) {
        self.claim.observe(took.as_secs_f64());
    }

    fn store_failed(&self) {
        self.store_errors.inc();
    }

    fn outage(&self, down: bool) {
        self.outage.set(i64::from(down));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters' label names and values as a scrape reads them (the typed label sets
    /// must encode like the pairs they replaced).
    #[test]
    fn counters_are_labelled_by_job_state_and_reason() {
        let m = Metrics::new();
        let end = |state| AttemptEnd {
            job: JobId(7),
            job_name: "nightly \"export\"",
            attempt: 1,
            state,
            elapsed: Some(std::time::Duration::from_millis(5)),
            lateness: None,
        };
        m.attempt_ended(&end(RunState::Pending));
        m.attempt_ended(&end(RunState::Failed));
        m.attempt_ended(&end(RunState::Failed));
        m.skipped(JobId(7), SkipReason::Misfire);
        let text = m.encode();
        for line in [
            r#"takt_run_retries_total{job="nightly \"export\""} 1"#,
            r#"takt_runs_finished_total{job="nightly \"export\"",state="failed"} 2"#,
            r#"takt_runs_skipped_total{reason="misfire"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
    }
}
