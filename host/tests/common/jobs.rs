//! Running one job to its end inside a real host, for the executor tests.

use std::time::Duration;

use takt_core::job::JobDef;
use takt_core::run::{Run, RunState};
use takt_core::store::Store;
use takt_core::store::memory::MemoryStore;
use takt_host::embed::Host;
use takt_host::scheduler::SchedulerEvent;

/// How long a run may take to reach a final state.
pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// Adds a one-off job of `handler` with `params` (and `timeout`), triggers it, and returns
/// its run once final (retries pass through `pending` on the way), with its log messages.
pub(crate) async fn run_once(
    host: &Host<MemoryStore>,
    store: &MemoryStore,
    handler: &str,
    params: &serde_json::Value,
    timeout: Option<Duration>,
) -> (Run, Vec<String>) {
    let n = store.job_list().await.unwrap().len();
    let mut job = JobDef::new(&format!("job-{n}"), handler).unwrap();
    job.params_json = params.to_string();
    job.timeout = timeout;
    run_job(host, store, job).await
}

/// Adds `job` (as it is: retry policy and all), triggers it, and returns its run once final,
/// with its log messages.
pub(crate) async fn run_job(
    host: &Host<MemoryStore>,
    store: &MemoryStore,
    job: JobDef,
) -> (Run, Vec<String>) {
    let mut events = host.subscribe();
    let id = host.add_job(job).await.unwrap().id.unwrap();
    host.trigger(id).await.unwrap();
    let run = loop {
        let e = tokio::time::timeout(WAIT, events.recv())
            .await
            .expect("the run finishes in time")
            .expect("events open");
        if let SchedulerEvent::Finished { run, state, .. } = e
            && state != RunState::Pending
        {
            break run;
        }
    };
    let run = store.run_get(run).await.unwrap().unwrap();
    let log = store
        .log_list(run.id.unwrap(), None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, l)| l.message)
        .collect();
    (run, log)
}

/// A run's result as JSON.
pub(crate) fn result(run: &Run) -> serde_json::Value {
    serde_json::from_str(run.result_json.as_deref().expect("a result")).expect("result json")
}
