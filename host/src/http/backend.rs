//! What the API does to a host, as one object-safe trait over any store: the handlers are
//! plain functions of [`Backend`], so the router and its OpenAPI document are built once,
//! whatever store the host embeds. Every method is a call of the same
//! [`SchedulerHandle`] or [`Store`] function the CLI and the loop use, so the API never
//! bypasses a store rule (versions, unique keys, conditional changes).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use jiff::Timestamp;
use takt_core::alert::AlertDelivery;
use takt_core::attempt::Attempt;
use takt_core::group::{GroupDef, GroupStatus};
use takt_core::job::{JobDef, JobId, JobName};
use takt_core::node::NodeStatus;
use takt_core::pause::{Pause, PauseTarget, Resumed};
use takt_core::run::{Run, RunId};
use takt_core::store::access::{ApiToken, NewToken, OperatorAction};
use takt_core::store::{CancelOutcome, JobPage, JobQuery, LogLine, RunFilter, Store, StoreResult};

use crate::inspect::InspectError;
use crate::inspect::audit::{AuditReport, AuditRequest};
use crate::inspect::why::{At, WhyReport};
use crate::metrics::Snapshot;
use crate::plugins::{PluginSet, PluginVersion, ReloadError, ReloadReport};
use crate::scheduler::{SchedulerError, SchedulerHandle};

/// A boxed future of the backend.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The host as the API sees it. Implemented for every [`SchedulerHandle`].
#[allow(missing_docs)]
pub trait Backend: Send + Sync + 'static {
    fn job_list(&self) -> BoxFut<'_, StoreResult<Vec<JobDef>>>;
    fn job_page<'a>(&'a self, query: &'a JobQuery) -> BoxFut<'a, StoreResult<JobPage>>;
    fn job_by_name<'a>(&'a self, name: &'a JobName) -> BoxFut<'a, StoreResult<Option<JobDef>>>;
    fn job_add(&self, job: JobDef) -> BoxFut<'_, Result<JobDef, SchedulerError>>;
    fn job_update(&self, job: JobDef) -> BoxFut<'_, Result<JobDef, SchedulerError>>;
    fn job_enable(&self, id: JobId, enabled: bool) -> BoxFut<'_, Result<JobDef, SchedulerError>>;
    fn job_trigger(&self, id: JobId) -> BoxFut<'_, Result<Timestamp, SchedulerError>>;
    fn job_remove(&self, id: JobId) -> BoxFut<'_, Result<(), SchedulerError>>;
    fn job_get(&self, id: JobId) -> BoxFut<'_, StoreResult<Option<JobDef>>>;
    /// [`Store::jobs_get`]: the jobs of a page's runs, in one read.
    fn jobs_get<'a>(&'a self, ids: &'a [JobId]) -> BoxFut<'a, StoreResult<Vec<JobDef>>>;
    /// [`Store::job_count`].
    fn job_count(&self) -> BoxFut<'_, StoreResult<u64>>;
    /// [`Store::jobs_late`]: the overview's late jobs.
    fn jobs_late(&self, before: Timestamp, limit: usize) -> BoxFut<'_, StoreResult<Vec<JobDef>>>;
    fn run_list<'a>(&'a self, filter: &'a RunFilter) -> BoxFut<'a, StoreResult<Vec<Run>>>;
    fn run_get(&self, id: RunId) -> BoxFut<'_, StoreResult<Option<Run>>>;
    /// The continuations a run's final state created ([`Store::run_children`]).
    fn run_children(&self, parent: RunId) -> BoxFut<'_, StoreResult<Vec<Run>>>;
    /// [`Store::run_attempts`]: every attempt of a run, oldest first.
    fn run_attempts(&self, id: RunId) -> BoxFut<'_, StoreResult<Vec<Attempt>>>;
    fn log_list(
        &self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFut<'_, StoreResult<Vec<(u64, LogLine)>>>;
    fn cancel_run<'a>(&'a self, id: RunId, why: &'a str) -> BoxFut<'a, bool>;
    /// Cancel anywhere through the database ([`Store::run_cancel`]): a pending run at once,
    /// a running one by a request its node obeys.
    fn run_cancel<'a>(
        &'a self,
        id: RunId,
        by: &'a str,
        now: Timestamp,
    ) -> BoxFut<'a, StoreResult<CancelOutcome>>;
    fn job_paused(&self, id: JobId) -> BoxFut<'_, StoreResult<Option<(PauseTarget, Pause)>>>;
    fn pause_list(&self) -> BoxFut<'_, StoreResult<Vec<(PauseTarget, Pause)>>>;
    /// [`Store::group_list`], as `takt group list` calls it.
    fn group_list(&self, now: Timestamp) -> BoxFut<'_, StoreResult<Vec<GroupStatus>>>;
    /// [`Store::group_status`].
    fn group_status<'a>(
        &'a self,
        name: &'a str,
        now: Timestamp,
    ) -> BoxFut<'a, StoreResult<GroupStatus>>;
    /// [`Store::group_set`], as `takt group set` calls it.
    fn group_set<'a>(
        &'a self,
        name: &'a str,
        max_running: Option<u32>,
    ) -> BoxFut<'a, StoreResult<GroupDef>>;
    /// [`Store::pause`], as `takt job|group|node pause` calls it. A node's pause reaches its
    /// loop the way the command's does: the loop reads its pause from the store.
    fn pause<'a>(
        &'a self,
        target: &'a PauseTarget,
        pause: &'a Pause,
    ) -> BoxFut<'a, StoreResult<Vec<JobId>>>;
    /// [`Store::resume`], as `takt job|group|node resume` calls it.
    fn resume<'a>(
        &'a self,
        target: &'a PauseTarget,
        now: Timestamp,
    ) -> BoxFut<'a, StoreResult<Resumed>>;
    /// [`crate::inspect::why::why`], as `takt why` calls it.
    fn why<'a>(
        &'a self,
        name: &'a JobName,
        at: Option<At>,
        now: Timestamp,
    ) -> BoxFut<'a, Result<WhyReport, InspectError>>;
    /// [`crate::inspect::audit::audit`], as `takt audit` calls it.
    fn audit<'a>(&'a self, req: &'a AuditRequest) -> BoxFut<'a, Result<AuditReport, InspectError>>;
    fn node_list(&self) -> BoxFut<'_, StoreResult<Vec<NodeStatus>>>;
    fn token_list(&self) -> BoxFut<'_, StoreResult<Vec<ApiToken>>>;
    fn token_insert<'a>(&'a self, token: &'a NewToken) -> BoxFut<'a, StoreResult<ApiToken>>;
    fn token_revoke<'a>(
        &'a self,
        name: &'a str,
        now: Timestamp,
    ) -> BoxFut<'a, StoreResult<ApiToken>>;
    fn action_insert<'a>(&'a self, action: &'a OperatorAction) -> BoxFut<'a, StoreResult<()>>;
    fn action_list<'a>(
        &'a self,
        job: Option<&'a str>,
        limit: usize,
    ) -> BoxFut<'a, StoreResult<Vec<OperatorAction>>>;
    fn alert_delivery_list(&self, limit: usize) -> BoxFut<'_, StoreResult<Vec<AlertDelivery>>>;
    fn reload_plugins(&self) -> BoxFut<'_, Result<ReloadReport, ReloadError>>;
    fn plugin_versions(&self) -> Vec<PluginVersion>;
    fn plugins(&self) -> Arc<PluginSet>;
    /// The host's levels for a metrics scrape (the node list read from the store).
    fn snapshot(&self) -> BoxFut<'_, Snapshot>;
}

impl<S: Store + Clone + 'static> Backend for SchedulerHandle<S> {
    fn job_list(&self) -> BoxFut<'_, StoreResult<Vec<JobDef>>> {
        Box::pin(self.store().job_list())
    }
    fn job_page<'a>(&'a self, query: &'a JobQuery) -> BoxFut<'a, StoreResult<JobPage>> {
        Box::pin(self.store().job_page(query))
    }
    fn job_by_name<'a>(&'a self, name: &'a JobName) -> BoxFut<'a, StoreResult<Option<JobDef>>> {
        Box::pin(self.store().job_get_by_name(name))
    }
    fn job_add(&self, job: JobDef) -> BoxFut<'_, Result<JobDef, SchedulerError>> {
        Box::pin(self.add_job(job))
    }
    fn job_update(&self, job: JobDef) -> BoxFut<'_, Result<JobDef, SchedulerError>> {
        Box::pin(self.update_job(job))
    }
    fn job_enable(&self, id: JobId, enabled: bool) -> BoxFut<'_, Result<JobDef, SchedulerError>> {
        Box::pin(self.set_enabled(id, enabled))
    }
    fn job_trigger(&self, id: JobId) -> BoxFut<'_, Result<Timestamp, SchedulerError>> {
        Box::pin(self.trigger(id))
    }
    fn job_remove(&self, id: JobId) -> BoxFut<'_, Result<(), SchedulerError>> {
        Box::pin(self.remove_job(id))
    }
    fn job_get(&self, id: JobId) -> BoxFut<'_, StoreResult<Option<JobDef>>> {
        Box::pin(self.store().job_get(id))
    }
    fn jobs_get<'a>(&'a self, ids: &'a [JobId]) -> BoxFut<'a, StoreResult<Vec<JobDef>>> {
        Box::pin(self.store().jobs_get(ids))
    }
    fn job_count(&self) -> BoxFut<'_, StoreResult<u64>> {
        Box::pin(self.store().job_count())
    }
    fn jobs_late(&self, before: Timestamp, limit: usize) -> BoxFut<'_, StoreResult<Vec<JobDef>>> {
        Box::pin(self.store().jobs_late(before, limit))
    }
    fn run_list<'a>(&'a self, filter: &'a RunFilter) -> BoxFut<'a, StoreResult<Vec<Run>>> {
        Box::pin(self.store().run_list(filter))
    }
    fn run_get(&self, id: RunId) -> BoxFut<'_, StoreResult<Option<Run>>> {
        Box::pin(self.store().run_get(id))
    }
    fn run_children(&self, parent: RunId) -> BoxFut<'_, StoreResult<Vec<Run>>> {
        Box::pin(self.store().run_children(parent))
    }
    fn run_attempts(&self, id: RunId) -> BoxFut<'_, StoreResult<Vec<Attempt>>> {
        Box::pin(self.store().run_attempts(id))
    }
    fn log_list(
        &self,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFut<'_, StoreResult<Vec<(u64, LogLine)>>> {
        Box::pin(self.store().log_list(run, after, limit))
    }
    fn cancel_run<'a>(&'a self, id: RunId, why: &'a str) -> BoxFut<'a, bool> {
        Box::pin(SchedulerHandle::cancel_run(self, id, why))
    }
    fn run_cancel<'a>(
        &'a self,
        id: RunId,
        by: &'a str,
        now: Timestamp,
    ) -> BoxFut<'a, StoreResult<CancelOutcome>> {
        Box::pin(self.store().run_cancel(id, by, now))
    }
    fn job_paused(&self, id: JobId) -> BoxFut<'_, StoreResult<Option<(PauseTarget, Pause)>>> {
        Box::pin(self.store().job_paused(id))
    }
    fn pause_list(&self) -> BoxFut<'_, StoreResult<Vec<(PauseTarget, Pause)>>> {
        Box::pin(self.store().pause_list())
    }
    fn group_list(&self, now: Timestamp) -> BoxFut<'_, StoreResult<Vec<GroupStatus>>> {
        Box::pin(self.store().group_list(now))
    }
    fn group_status<'a>(
        &'a self,
        name: &'a str,
        now: Timestamp,
    ) -> BoxFut<'a, StoreResult<GroupStatus>> {
        Box::pin(self.store().group_status(name, now))
    }
    fn group_set<'a>(
        &'a self,
        name: &'a str,
        max_running: Option<u32>,
    ) -> BoxFut<'a, StoreResult<GroupDef>> {
        Box::pin(self.store().group_set(name, max_running))
    }
    fn pause<'a>(
        &'a self,
        target: &'a PauseTarget,
        pause: &'a Pause,
    ) -> BoxFut<'a, StoreResult<Vec<JobId>>> {
        Box::pin(self.store().pause(target, pause))
    }
    fn resume<'a>(
        &'a self,
        target: &'a PauseTarget,
        now: Timestamp,
    ) -> BoxFut<'a, StoreResult<Resumed>> {
        Box::pin(async move {
            let r = self.store().resume(target, now).await;
            // A released job may be due at once (a fire its misfire policy keeps): let this
            // node's loop look now rather than at its next planned pass.
            if r.is_ok() {
                self.wake();
            }
            r
        })
    }
    fn why<'a>(
        &'a self,
        name: &'a JobName,
        at: Option<At>,
        now: Timestamp,
    ) -> BoxFut<'a, Result<WhyReport, InspectError>> {
        Box::pin(crate::inspect::why::why(self.store(), name, at, now))
    }
    fn audit<'a>(&'a self, req: &'a AuditRequest) -> BoxFut<'a, Result<AuditReport, InspectError>> {
        Box::pin(crate::inspect::audit::audit(self.store(), req))
    }
    fn node_list(&self) -> BoxFut<'_, StoreResult<Vec<NodeStatus>>> {
        Box::pin(self.store().node_list())
    }
    fn token_list(&self) -> BoxFut<'_, StoreResult<Vec<ApiToken>>> {
        Box::pin(self.store().token_list())
    }
    fn token_insert<'a>(&'a self, token: &'a NewToken) -> BoxFut<'a, StoreResult<ApiToken>> {
        Box::pin(self.store().token_insert(token))
    }
    fn token_revoke<'a>(
        &'a self,
        name: &'a str,
        now: Timestamp,
    ) -> BoxFut<'a, StoreResult<ApiToken>> {
        Box::pin(self.store().token_revoke(name, now))
    }
    fn action_insert<'a>(&'a self, action: &'a OperatorAction) -> BoxFut<'a, StoreResult<()>> {
        Box::pin(self.store().action_insert(action))
    }
    fn action_list<'a>(
        &'a self,
        job: Option<&'a str>,
        limit: usize,
    ) -> BoxFut<'a, StoreResult<Vec<OperatorAction>>> {
        Box::pin(self.store().action_list(job, limit))
    }
    fn alert_delivery_list(&self, limit: usize) -> BoxFut<'_, StoreResult<Vec<AlertDelivery>>> {
        Box::pin(self.store().alert_delivery_list(limit))
    }
    fn reload_plugins(&self) -> BoxFut<'_, Result<ReloadReport, ReloadError>> {
        Box::pin(SchedulerHandle::reload_plugins(self))
    }
    fn plugin_versions(&self) -> Vec<PluginVersion> {
        SchedulerHandle::plugin_versions(self)
    }
    fn plugins(&self) -> Arc<PluginSet> {
        SchedulerHandle::plugins(self)
    }
    fn snapshot(&self) -> BoxFut<'_, Snapshot> {
        Box::pin(async move {
            let stats = self.executor_stats();
            let now = Timestamp::now();
            let heartbeat_age = match self.store().node_list().await {
                Ok(nodes) => nodes
                    .into_iter()
                    .filter(|n| n.stopped_at.is_none())
                    .filter_map(|n| {
                        let hb = n.heartbeat_at?;
                        let age = now.duration_since(hb).as_secs_f64().max(0.0);
                        Some((n.info.id.0, age))
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!("metrics: cannot read the nodes: {e}");
                    Vec::new()
                }
            };
            Snapshot {
                running: self.running(),
                capacity: self.capacity() + self.recurring_reserve(),
                abandoned_total: stats.abandoned_total,
                abandoned_alive: stats.abandoned_alive,
                killed_total: stats.killed_total,
                heartbeat_age,
            }
        })
    }
}
