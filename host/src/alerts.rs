//! Alerts: who is told when a job fails, times out, is skipped or runs too long, when a node
//! stops heartbeating, and when it is all right again (`[alerts]` in `takt.toml`).
//!
//! * **Conditions** are derived from what the scheduler publishes and the store records,
//!   never from inside the loop: the end of each attempt on this node
//!   ([`SchedulerEvent::Finished`]: `failed` and `timed_out` after the last retry, a success
//!   that may mean `recovered`), and a watcher that reads the store every `check_interval`
//!   (runs `running` past a rule's `long_running` limit, new `skipped` runs by reason, nodes
//!   whose heartbeat is older than the lease). A database outage longer than a rule's
//!   `outage_after` comes from the scheduler's `StoreUnavailable` / `StoreRecovered`.
//! * **One alert per episode**: the store opens at most one episode per (subject,
//!   condition) ([`Store::alert_open`]) and says which caller opened or closed it, so on any
//!   number of nodes each alert and each "recovered" is sent once. Further failures while
//!   the episode is open are recorded as suppressed duplicates. A long-running alert is per
//!   run (subject `run:<id>`): reported once while that run runs.
//! * **Delivery never slows scheduling**: each channel has its own task behind a bounded
//!   queue (a full queue drops the alert, recorded as suppressed), every send has a timeout,
//!   and a per-channel rate limit holds the excess back for one digest when the window
//!   allows again. Every outcome — sent, failed with the reason, suppressed and why — is a row
//!   of `alert_deliveries` (`takt alerts`).
//! * **Secrets come from the environment**, never the file: `TAKT_ALERT_<CHANNEL>_USER` and
//!   `TAKT_ALERT_<CHANNEL>_PASSWORD` (SMTP login), `TAKT_ALERT_<CHANNEL>_SECRET` (the
//!   webhook's HMAC key), `<CHANNEL>` being the channel's name upper-cased with `-` as `_`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use jiff::Timestamp;
use serde::Deserialize;
use sha2::Sha256;
use takt_core::alert::{AlertDelivery, AlertKey, DeliveryOutcome};
use takt_core::job::JobDef;
use takt_core::run::{Run, RunState};
use takt_core::store::{RunFilter, Store};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use crate::scheduler::SchedulerEvent;

// ---- configuration ---------------------------------------------------------------------------

/// `[alerts]` as the file has it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AlertsFile {
    #[serde(default)]
    channels: Vec<ChannelFile>,
    #[serde(default)]
    rules: Vec<RuleFile>,
    /// Alerts per channel per `rate_window` at most (default 10); the rest wait for a digest.
    rate_limit: Option<u32>,
    /// The rate limit's window (default 10m).
    rate_window: Option<String>,
    /// How often the store is read for long-running and skipped runs and down nodes (5s).
    check_interval: Option<String>,
    /// The most alerts waiting per channel (default 100); more are dropped and recorded.
    queue: Option<usize>,
    /// The longest one delivery may take (default 10s).
    timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelFile {
    name: String,
    smtp: Option<String>,
    from: Option<String>,
    #[serde(default)]
    to: Vec<String>,
    #[serde(default)]
    to_owner: bool,
    webhook: Option<String>,
    template: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    on: Vec<String>,
    #[serde(default)]
    jobs: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    channels: Vec<String>,
    long_running: Option<String>,
    outage_after: Option<String>,
    #[serde(default)]
    skip_reasons: Vec<String>,
}

/// A condition a rule can be `on`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Condition {
    /// A run failed after its last retry.
    Failed,
    /// A run timed out after its last retry.
    TimedOut,
    /// A fire was skipped (misfire, overlap, dependency, group, paused, …).
    Skipped,
    /// A run is running longer than the rule's `long_running` limit.
    LongRunning,
    /// A node's heartbeat is older than the lease (and it did not stop cleanly).
    NodeDown,
    /// This node has not reached the database for longer than the rule's `outage_after`.
    DbOutage,
    /// The first success (or live heartbeat) after an alerted condition.
    Recovered,
}

impl Condition {
    /// The name in `on = [...]`, in deliveries and messages.
    pub fn name(self) -> &'static str {
        match self {
            Condition::Failed => "failed",
            Condition::TimedOut => "timed_out",
            Condition::Skipped => "skipped",
            Condition::LongRunning => "long_running",
            Condition::NodeDown => "node_down",
            Condition::DbOutage => "db_outage",
            Condition::Recovered => "recovered",
        }
    }

    fn parse(s: &str) -> Result<Condition, String> {
        Ok(match s {
            "failed" => Condition::Failed,
            "timed_out" => Condition::TimedOut,
            "skipped" => Condition::Skipped,
            "long_running" => Condition::LongRunning,
            "node_down" => Condition::NodeDown,
            "recovered" => Condition::Recovered,
            "db_outage" => Condition::DbOutage,
            other => {
                return Err(format!(
                    "\"{other}\" is not a condition; use failed, timed_out, skipped, \
                     long_running, node_down, db_outage or recovered"
                ));
            }
        })
    }
}

/// A delivery channel, resolved.
#[derive(Clone)]
pub(crate) struct Channel {
    name: String,
    kind: ChannelKind,
}

#[derive(Clone)]
enum ChannelKind {
    Smtp {
        url: String,
        from: lettre::message::Mailbox,
        to: Vec<lettre::message::Mailbox>,
        to_owner: bool,
        credentials: Option<(String, String)>,
    },
    Webhook {
        url: String,
        secret: Option<String>,
        template: Option<String>,
    },
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credentials or the secret.
        let kind = match &self.kind {
            ChannelKind::Smtp { url, .. } => format!("smtp {url}"),
            ChannelKind::Webhook { url, .. } => format!("webhook {url}"),
        };
        write!(f, "Channel({} {kind})", self.name)
    }
}

/// A routing rule, resolved.
#[derive(Clone, Debug)]
struct Rule {
    on: BTreeSet<Condition>,
    jobs: Vec<glob::Pattern>,
    groups: Vec<glob::Pattern>,
    channels: Vec<usize>,
    long_running: Option<LongRunning>,
    /// How long the database must be unreachable before `db_outage` fires (default 1m).
    outage_after: Duration,
    skip_reasons: Vec<String>,
}

/// A rule's `long_running` limit.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LongRunning {
    /// `"30m"`: a fixed duration.
    Fixed(Duration),
    /// `"3x p95"`: that many times the 95th percentile of the job's recent successful
    /// durations (none until [`P95_MIN_SAMPLES`] successes are recorded).
    P95(f64),
}

/// The successful runs a p95 limit needs before it applies, and the most it reads.
const P95_MIN_SAMPLES: usize = 5;
const P95_SAMPLES: usize = 50;
/// How long a job's p95 is reused before it is read again.
const P95_REFRESH: Duration = Duration::from_secs(60);

/// The 95th percentile (nearest rank) of `durations`; `None` below [`P95_MIN_SAMPLES`].
fn p95(mut durations: Vec<Duration>) -> Option<Duration> {
    if durations.len() < P95_MIN_SAMPLES {
        return None;
    }
    durations.sort();
    let rank = (durations.len() as f64 * 0.95).ceil() as usize;
    durations.get(rank.saturating_sub(1)).copied()
}

/// `[alerts]`, resolved: channels with their secrets, rules with their globs.
#[derive(Clone, Debug)]
pub struct AlertsConfig {
    channels: Vec<Channel>,
    rules: Vec<Rule>,
    rate_limit: u32,
    rate_window: Duration,
    check_every: Duration,
    queue: usize,
    timeout: Duration,
}

impl AlertsConfig {
    /// Whether any rule is declared (without one, no alert task runs).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// How many rules are declared.
    pub fn rules_len(&self) -> usize {
        self.rules.len()
    }

    /// The channel names, for `takt run`'s start lines.
    pub fn channel_names(&self) -> Vec<&str> {
        self.channels.iter().map(|c| c.name.as_str()).collect()
    }

    /// Resolves `raw`: `env` gives the secrets, errors are (key, message).
    pub(crate) fn resolve(
        raw: AlertsFile,
        env: &dyn Fn(&str) -> Option<String>,
        duration: &dyn Fn(&str) -> Result<u64, String>,
    ) -> Result<AlertsConfig, (String, String)> {
        let dur =
            |key: &str, v: &Option<String>, default: u64| -> Result<Duration, (String, String)> {
                match v {
                    None => Ok(Duration::from_secs(default)),
                    Some(t) => match duration(t) {
                        Ok(0) => Err((key.into(), format!("\"{t}\": give at least 1s"))),
                        Ok(s) => Ok(Duration::from_secs(s)),
                        Err(e) => Err((
                            key.into(),
                            format!("\"{t}\": {e}; write a duration such as \"10m\""),
                        )),
                    },
                }
            };
        let mut channels: Vec<Channel> = Vec::new();
        for (i, c) in raw.channels.into_iter().enumerate() {
            let key = format!("alerts.channels[{i}]");
            if c.name.trim().is_empty()
                || !c
                    .name
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
            {
                return Err((
                    format!("{key}.name"),
                    format!(
                        "\"{}\" is not a channel name; use letters, digits, - and _",
                        c.name
                    ),
                ));
            }
            if channels.iter().any(|o| o.name == c.name) {
                return Err((
                    format!("{key}.name"),
                    format!("channel \"{}\" is declared twice", c.name),
                ));
            }
            let var = |what: &str| {
                format!(
                    "TAKT_ALERT_{}_{what}",
                    c.name.to_ascii_uppercase().replace('-', "_")
                )
            };
            let kind = match (&c.smtp, &c.webhook) {
                (Some(url), None) => {
                    let parsed = reqwest::Url::parse(url).map_err(|e| {
                        (
                            format!("{key}.smtp"),
                            format!("\"{url}\" is not a URL ({e})"),
                        )
                    })?;
                    if !matches!(parsed.scheme(), "smtp" | "smtps") || parsed.host_str().is_none() {
                        return Err((
                            format!("{key}.smtp"),
                            format!(
                                "\"{url}\": give smtp://host:port (add ?tls=required for \
                                 STARTTLS) or smtps://host:port (implicit TLS)"
                            ),
                        ));
                    }
                    if parsed.password().is_some() || !parsed.username().is_empty() {
                        return Err((
                            format!("{key}.smtp"),
                            format!(
                                "no user or password in the URL: set {} and {} in the \
                                 environment",
                                var("USER"),
                                var("PASSWORD")
                            ),
                        ));
                    }
                    let from = c.from.as_deref().ok_or_else(|| {
                        (
                            format!("{key}.from"),
                            "an smtp channel needs from = \"takt@…\"".to_string(),
                        )
                    })?;
                    let from = from.parse().map_err(|e| {
                        (
                            format!("{key}.from"),
                            format!("\"{from}\" is not an address ({e})"),
                        )
                    })?;
                    let mut to = Vec::new();
                    for (j, t) in c.to.iter().enumerate() {
                        to.push(t.parse().map_err(|e| {
                            (
                                format!("{key}.to[{j}]"),
                                format!("\"{t}\" is not an address ({e})"),
                            )
                        })?);
                    }
                    if to.is_empty() && !c.to_owner {
                        return Err((
                            format!("{key}.to"),
                            "give at least one recipient, or to_owner = true".into(),
                        ));
                    }
                    let credentials = match (env(&var("USER")), env(&var("PASSWORD"))) {
                        (Some(u), Some(p)) => Some((u, p)),
                        (None, None) => None,
                        _ => {
                            return Err((
                                format!("{key}.smtp"),
                                format!(
                                    "set both {} and {}, or neither",
                                    var("USER"),
                                    var("PASSWORD")
                                ),
                            ));
                        }
                    };
                    ChannelKind::Smtp {
                        url: url.clone(),
                        from,
                        to,
                        to_owner: c.to_owner,
                        credentials,
                    }
                }
                (None, Some(url)) => {
                    let parsed = reqwest::Url::parse(url).map_err(|e| {
                        (
                            format!("{key}.webhook"),
                            format!("\"{url}\" is not a URL ({e})"),
                        )
                    })?;
                    if !matches!(parsed.scheme(), "http" | "https") {
                        return Err((
                            format!("{key}.webhook"),
                            format!("\"{url}\": give an http:// or https:// URL"),
                        ));
                    }
                    if let Some(t) = &c.template {
                        minijinja::Environment::new()
                            .template_from_str(t)
                            .map_err(|e| {
                                (
                                    format!("{key}.template"),
                                    format!("the template does not parse: {e}"),
                                )
                            })?;
                    }
                    ChannelKind::Webhook {
                        url: url.clone(),
                        secret: env(&var("SECRET")),
                        template: c.template.clone(),
                    }
                }
                _ => {
                    return Err((
                        key,
                        "give a channel either smtp = \"smtp://…\" or webhook = \"https://…\""
                            .into(),
                    ));
                }
            };
            if matches!(kind, ChannelKind::Webhook { .. })
                && (c.from.is_some() || !c.to.is_empty() || c.to_owner)
            {
                return Err((key, "from, to and to_owner are for smtp channels".into()));
            }
            if matches!(kind, ChannelKind::Smtp { .. }) && c.template.is_some() {
                return Err((
                    format!("{key}.template"),
                    "template is for webhook channels".into(),
                ));
            }
            channels.push(Channel { name: c.name, kind });
        }
        let mut rules = Vec::new();
        for (i, r) in raw.rules.into_iter().enumerate() {
            let key = format!("alerts.rules[{i}]");
            let mut on = BTreeSet::new();
            for (j, c) in r.on.iter().enumerate() {
                on.insert(Condition::parse(c).map_err(|e| (format!("{key}.on[{j}]"), e))?);
            }
            if on.is_empty() {
                return Err((format!("{key}.on"), "name at least one condition".into()));
            }
            let globs =
                |list: &[String], what: &str| -> Result<Vec<glob::Pattern>, (String, String)> {
                    list.iter()
                        .enumerate()
                        .map(|(j, g)| {
                            glob::Pattern::new(g).map_err(|e| {
                                (
                                    format!("{key}.{what}[{j}]"),
                                    format!("\"{g}\" is not a glob ({e})"),
                                )
                            })
                        })
                        .collect()
                };
            let jobs = globs(&r.jobs, "jobs")?;
            let groups = globs(&r.groups, "groups")?;
            let node_only = on.iter().all(|c| {
                matches!(
                    c,
                    Condition::NodeDown | Condition::DbOutage | Condition::Recovered
                )
            }) && (on.contains(&Condition::NodeDown)
                || on.contains(&Condition::DbOutage));
            if jobs.is_empty() && groups.is_empty() && !node_only {
                return Err((
                    key,
                    "say which jobs: jobs = [\"*\"] (names or globs) or groups = [...]".into(),
                ));
            }
            let mut chans = Vec::new();
            for (j, name) in r.channels.iter().enumerate() {
                let idx = channels
                    .iter()
                    .position(|c| &c.name == name)
                    .ok_or_else(|| {
                        (
                            format!("{key}.channels[{j}]"),
                            format!("no channel \"{name}\" is declared in [[alerts.channels]]"),
                        )
                    })?;
                chans.push(idx);
            }
            if chans.is_empty() {
                return Err((
                    format!("{key}.channels"),
                    "name at least one channel".into(),
                ));
            }
            let long_running = match r.long_running.as_deref().map(str::trim) {
                None => None,
                Some(t) if t.ends_with("p95") => {
                    let k = t
                        .trim_end_matches("p95")
                        .trim()
                        .trim_end_matches(['x', '*'])
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|k| k.is_finite() && *k >= 1.0);
                    match k {
                        Some(k) => Some(LongRunning::P95(k)),
                        None => {
                            return Err((
                                format!("{key}.long_running"),
                                format!(
                                    "\"{t}\": write a factor of at least 1 before p95, such \
                                     as \"3x p95\", or a duration such as \"30m\""
                                ),
                            ));
                        }
                    }
                }
                Some(_) => Some(LongRunning::Fixed(dur(
                    &format!("{key}.long_running"),
                    &r.long_running,
                    0,
                )?)),
            };
            if on.contains(&Condition::LongRunning) != long_running.is_some() {
                return Err((
                    format!("{key}.long_running"),
                    "long_running = \"30m\" and \"long_running\" in on go together".into(),
                ));
            }
            if r.outage_after.is_some() && !on.contains(&Condition::DbOutage) {
                return Err((
                    format!("{key}.outage_after"),
                    "outage_after is for rules on db_outage".into(),
                ));
            }
            let outage_after = dur(&format!("{key}.outage_after"), &r.outage_after, 60)?;
            for (j, reason) in r.skip_reasons.iter().enumerate() {
                if !takt_core::run::SkipReason::ALL
                    .iter()
                    .any(|s| s.name() == reason)
                {
                    return Err((
                        format!("{key}.skip_reasons[{j}]"),
                        format!(
                            "\"{reason}\" is not a skip reason; use {}",
                            takt_core::run::SkipReason::ALL.map(|s| s.name()).join(", ")
                        ),
                    ));
                }
            }
            rules.push(Rule {
                on,
                jobs,
                groups,
                channels: chans,
                long_running,
                outage_after,
                skip_reasons: r.skip_reasons,
            });
        }
        if raw.rate_limit == Some(0) {
            return Err((
                "alerts.rate_limit".into(),
                "give at least 1 (alerts per window)".into(),
            ));
        }
        if raw.queue == Some(0) {
            return Err(("alerts.queue".into(), "give at least 1".into()));
        }
        Ok(AlertsConfig {
            channels,
            rules,
            rate_limit: raw.rate_limit.unwrap_or(10),
            rate_window: dur("alerts.rate_window", &raw.rate_window, 600)?,
            check_every: dur("alerts.check_interval", &raw.check_interval, 5)?,
            queue: raw.queue.unwrap_or(100),
            timeout: dur("alerts.timeout", &raw.timeout, 10)?,
        })
    }

    /// The channels of the rules on `condition` that match `job`, in declaration order, once
    /// each. Node conditions match every rule on them.
    fn route(&self, condition: Condition, job: Option<&JobDef>, skip: Option<&str>) -> Vec<usize> {
        self.route_where(|r| r.on.contains(&condition), job, skip)
    }

    /// The channels of the rules `wanted` picks that match `job` (and `skip`'s reason).
    fn route_where(
        &self,
        wanted: impl Fn(&Rule) -> bool,
        job: Option<&JobDef>,
        skip: Option<&str>,
    ) -> Vec<usize> {
        let mut out = Vec::new();
        for r in &self.rules {
            if !wanted(r) {
                continue;
            }
            if let Some(job) = job {
                let by_name = r.jobs.iter().any(|g| g.matches(job.name.as_str()));
                let by_group = job
                    .group
                    .as_deref()
                    .is_some_and(|grp| r.groups.iter().any(|g| g.matches(grp)));
                if !by_name && !by_group {
                    continue;
                }
            }
            if let Some(reason) = skip
                && !r.skip_reasons.is_empty()
                && !r.skip_reasons.iter().any(|s| s == reason)
            {
                continue;
            }
            for c in &r.channels {
                if !out.contains(c) {
                    out.push(*c);
                }
            }
        }
        out
    }

    /// The channels of the rules on both `recovered` and `of` that match `job`: a
    /// "recovered" notice goes where the alert it ends could go.
    fn route_recovered(&self, of: Condition, job: Option<&JobDef>) -> Vec<usize> {
        self.route_where(
            |r| r.on.contains(&Condition::Recovered) && r.on.contains(&of),
            job,
            None,
        )
    }

    /// The shortest `outage_after` of the rules on `db_outage` (`None`: no such rule).
    fn outage_after(&self) -> Option<Duration> {
        self.rules
            .iter()
            .filter(|r| r.on.contains(&Condition::DbOutage))
            .map(|r| r.outage_after)
            .min()
    }

    /// The `long_running` limits of the rules that match `job`.
    fn long_running_limits(&self, job: &JobDef) -> Vec<LongRunning> {
        self.rules
            .iter()
            .filter(|r| {
                r.jobs.iter().any(|g| g.matches(job.name.as_str()))
                    || job
                        .group
                        .as_deref()
                        .is_some_and(|grp| r.groups.iter().any(|g| g.matches(grp)))
            })
            .filter_map(|r| r.long_running)
            .collect()
    }

    /// The smallest limit of `limits` given the job's p95 (`None`: not known yet).
    fn long_running_limit(limits: &[LongRunning], p95: Option<Duration>) -> Option<Duration> {
        limits
            .iter()
            .filter_map(|l| match l {
                LongRunning::Fixed(d) => Some(*d),
                LongRunning::P95(k) => p95.map(|p| p.mul_f64(*k)),
            })
            .min()
    }
}

// ---- alerts ----------------------------------------------------------------------------------

/// One alert (or "recovered" notice, or digest) on its way to a channel.
#[derive(Clone, Debug)]
struct Alert {
    key: AlertKey,
    /// `firing`, `recovered` or `digest`.
    kind: &'static str,
    condition: &'static str,
    job: Option<String>,
    owner: Option<String>,
    run: Option<i64>,
    /// One line: what happened.
    summary: String,
    /// More lines (the run's error, the node's last heartbeat).
    detail: String,
    at: Timestamp,
}

/// The running alert tasks of one host; dropping it does not stop them, [`stop`](Self::stop)
/// does.
pub struct Alerter {
    tasks: Vec<JoinHandle<()>>,
}

impl Alerter {
    /// Ends the alert tasks (an alert being sent is abandoned; its delivery is not recorded).
    pub fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// Shared by the alert tasks.
struct Ctx<S> {
    store: S,
    config: Arc<AlertsConfig>,
    node: String,
    lease: Duration,
    queues: Vec<mpsc::Sender<Alert>>,
}

/// Starts the alert tasks for `node` on `store`: the events of its scheduler (`events`), the
/// store watcher, and one delivery task per channel. `lease` is the heartbeat age after
/// which a node is down.
pub fn start<S: Store + Clone + 'static>(
    store: S,
    config: Arc<AlertsConfig>,
    node: String,
    lease: Duration,
    events: broadcast::Receiver<SchedulerEvent>,
) -> Alerter {
    let mut tasks = Vec::new();
    let mut queues = Vec::new();
    let http = reqwest_client(config.timeout);
    for channel in config.channels.clone() {
        let (tx, rx) = mpsc::channel(config.queue);
        queues.push(tx);
        tasks.push(tokio::spawn(deliver(
            store.clone(),
            node.clone(),
            channel,
            config.clone(),
            http.clone(),
            rx,
        )));
    }
    let ctx = Arc::new(Ctx {
        store,
        config,
        node,
        lease,
        queues,
    });
    tasks.push(tokio::spawn(on_events(ctx.clone(), events)));
    tasks.push(tokio::spawn(watch(ctx)));
    Alerter { tasks }
}

impl<S: Store> Ctx<S> {
    /// Opens the episode of `alert.key` (keyed `episode`) and, if this call opened it, queues
    /// the alert on `channels`; otherwise records a suppressed duplicate on each.
    async fn fire(&self, alert: Alert, episode: &str, channels: &[usize]) {
        if channels.is_empty() {
            return;
        }
        match self.store.alert_open(&alert.key, episode, alert.at).await {
            Ok(true) => self.enqueue(alert, channels).await,
            Ok(false) => {
                for c in channels {
                    self.record(
                        &self.config.channels[*c].name,
                        &alert,
                        DeliveryOutcome::Suppressed,
                        format!("{}; duplicate: this alert's episode is open", alert.summary),
                    )
                    .await;
                }
            }
            Err(e) => tracing::warn!(
                "cannot open alert episode {}/{}: {e}",
                alert.key.subject,
                alert.key.condition
            ),
        }
    }

    /// Closes the episode of `key` and, if this call closed it, queues `notice` on the
    /// channels of the rules on `recovered`.
    async fn recover(&self, of: Condition, key: AlertKey, notice: Alert, job: Option<&JobDef>) {
        let channels = self.config.route_recovered(of, job);
        match self.store.alert_close(&key, notice.at).await {
            Ok(true) => self.enqueue(notice, &channels).await,
            Ok(false) => {}
            Err(e) => tracing::warn!(
                "cannot close alert episode {}/{}: {e}",
                key.subject,
                key.condition
            ),
        }
    }

    /// Hands `alert` to each channel's queue without waiting: a full queue drops it (and
    /// records why), so a hung channel never holds the caller.
    async fn enqueue(&self, alert: Alert, channels: &[usize]) {
        for c in channels {
            if let Err(e) = self.queues[*c].try_send(alert.clone()) {
                let why = match e {
                    mpsc::error::TrySendError::Full(_) => format!(
                        "queue full ({} alerts wait for this channel): dropped",
                        self.config.queue
                    ),
                    mpsc::error::TrySendError::Closed(_) => "the channel's task has ended".into(),
                };
                self.record(
                    &self.config.channels[*c].name,
                    &alert,
                    DeliveryOutcome::Suppressed,
                    format!("{}; {why}", alert.summary),
                )
                .await;
            }
        }
    }

    /// An alert about this node itself.
    fn node_alert(&self, condition: Condition, kind: &'static str, summary: String) -> Alert {
        Alert {
            key: AlertKey {
                subject: format!("node:{}", self.node),
                condition: condition.name().into(),
            },
            kind,
            condition: condition.name(),
            job: None,
            owner: None,
            run: None,
            summary,
            detail: String::new(),
            at: Timestamp::now(),
        }
    }

    async fn record(&self, channel: &str, alert: &Alert, outcome: DeliveryOutcome, detail: String) {
        record(&self.store, &self.node, channel, alert, outcome, detail).await;
    }
}

async fn record<S: Store>(
    store: &S,
    node: &str,
    channel: &str,
    alert: &Alert,
    outcome: DeliveryOutcome,
    detail: String,
) {
    let d = AlertDelivery {
        id: None,
        at: Timestamp::now(),
        node: node.to_string(),
        channel: channel.to_string(),
        key: alert.key.clone(),
        kind: alert.kind.to_string(),
        run: alert.run,
        outcome,
        detail,
    };
    if let Err(e) = store.alert_delivery_add(&d).await {
        tracing::warn!(
            "cannot record the {} delivery of alert {}/{} on {channel}: {e}",
            outcome.name(),
            alert.key.subject,
            alert.key.condition
        );
    }
}

fn job_alert(
    job: &JobDef,
    condition: Condition,
    kind: &'static str,
    run: Option<i64>,
    summary: String,
    detail: String,
) -> Alert {
    Alert {
        key: AlertKey {
            subject: format!("job:{}", job.name),
            condition: condition.name().into(),
        },
        kind,
        condition: condition.name(),
        job: Some(job.name.to_string()),
        owner: job.owner.clone(),
        run,
        summary,
        detail,
        at: Timestamp::now(),
    }
}

/// The ends of this node's attempts: final failures and timeouts fire, a success closes
/// what was open for the job.
async fn on_events<S: Store>(ctx: Arc<Ctx<S>>, mut events: broadcast::Receiver<SchedulerEvent>) {
    // The database outage this node sees: since when, the first error, whether alerted. The
    // store cannot decide who sends (it is out), so every node alerts its own outage
    // (subject node:<id>), and its deliveries are recorded only if the database is back by
    // the time they are made.
    let mut outage: Option<(tokio::time::Instant, Timestamp, String, bool)> = None;
    let outage_after = ctx.config.outage_after();
    loop {
        let due = match (&outage, outage_after) {
            (Some((since, _, _, false)), Some(after)) => Some(*since + after),
            _ => None,
        };
        let event = tokio::select! {
            ev = events.recv() => ev,
            () = async {
                match due {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some((_, at, error, sent)) = &mut outage {
                    *sent = true;
                    let alert = ctx.node_alert(
                        Condition::DbOutage,
                        "firing",
                        format!(
                            "node {} cannot reach the database since {at} (for more than {}s): {error}",
                            ctx.node,
                            outage_after.unwrap_or_default().as_secs()
                        ),
                    );
                    let channels = ctx.config.route(Condition::DbOutage, None, None);
                    ctx.enqueue(alert, &channels).await;
                }
                continue;
            }
        };
        let (run, job, state) = match event {
            Ok(SchedulerEvent::Finished {
                run, job, state, ..
            }) => (run, job, state),
            Ok(SchedulerEvent::StoreUnavailable { error }) => {
                if outage.is_none() {
                    outage = Some((tokio::time::Instant::now(), Timestamp::now(), error, false));
                }
                continue;
            }
            Ok(SchedulerEvent::StoreRecovered { down_for }) => {
                if let Some((_, _, _, true)) = outage.take() {
                    let notice = ctx.node_alert(
                        Condition::DbOutage,
                        "recovered",
                        format!(
                            "node {} reaches the database again after {}s",
                            ctx.node,
                            down_for.as_secs()
                        ),
                    );
                    let channels = ctx.config.route_recovered(Condition::DbOutage, None);
                    ctx.enqueue(notice, &channels).await;
                }
                continue;
            }
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!("alerts missed {n} run events (the alert task fell behind)");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let condition = match state {
            RunState::Failed => Some(Condition::Failed),
            RunState::TimedOut => Some(Condition::TimedOut),
            RunState::Succeeded => None,
            _ => continue,
        };
        let Ok(Some(def)) = ctx.store.job_get(job).await else {
            continue;
        };
        let stored = ctx.store.run_get(run).await.ok().flatten();
        let error = stored
            .as_ref()
            .and_then(|r| r.error.clone())
            .unwrap_or_default();
        match condition {
            Some(c) => {
                let channels = ctx.config.route(c, Some(&def), None);
                let attempt = stored.as_ref().map_or(0, |r| r.attempt);
                let alert = job_alert(
                    &def,
                    c,
                    "firing",
                    Some(run.0),
                    format!(
                        "job {} {} (run {run}, attempt {attempt})",
                        def.name,
                        verb(c)
                    ),
                    error,
                );
                ctx.fire(alert, &format!("run {run}"), &channels).await;
            }
            None => {
                for c in [Condition::Failed, Condition::TimedOut, Condition::Skipped] {
                    if ctx.config.route(c, Some(&def), None).is_empty() {
                        continue;
                    }
                    let notice = job_alert(
                        &def,
                        c,
                        "recovered",
                        Some(run.0),
                        format!(
                            "job {} recovered: run {run} succeeded after {}",
                            def.name,
                            c.name()
                        ),
                        String::new(),
                    );
                    ctx.recover(c, notice.key.clone(), notice, Some(&def)).await;
                }
            }
        }
    }
}

fn verb(c: Condition) -> &'static str {
    match c {
        Condition::Failed => "failed after its last retry",
        Condition::TimedOut => "timed out after its last retry",
        Condition::Skipped => "was skipped",
        Condition::LongRunning => "is running long",
        Condition::NodeDown => "is down",
        Condition::DbOutage => "cannot reach the database",
        Condition::Recovered => "recovered",
    }
}

/// Every `check_every`: long-running runs, new skipped runs, nodes down and back.
async fn watch<S: Store>(ctx: Arc<Ctx<S>>) {
    // Skipped runs recorded before this start are history, not news.
    let mut seen_skip = latest_skipped(&ctx.store).await.unwrap_or(0);
    let mut jobs: HashMap<takt_core::job::JobId, JobDef> = HashMap::new();
    let mut p95s: HashMap<takt_core::job::JobId, (tokio::time::Instant, Option<Duration>)> =
        HashMap::new();
    let mut tick = tokio::time::interval(ctx.config.check_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Timestamp::now();
        if let Ok(list) = ctx.store.job_list().await {
            jobs = list
                .into_iter()
                .filter_map(|j| j.id.map(|id| (id, j)))
                .collect();
        }
        // Long-running: once per run (subject run:<id>).
        if let Ok(running) = ctx
            .store
            .run_list(&RunFilter {
                job: None,
                state: Some(RunState::Running),
                limit: 10_000,
                ..RunFilter::default()
            })
            .await
        {
            for run in running {
                let (Some(def), Some(id), Some(started)) =
                    (jobs.get(&run.job_id), run.id, run.started_at)
                else {
                    continue;
                };
                let limits = ctx.config.long_running_limits(def);
                if limits.is_empty() {
                    continue;
                }
                let p95 = if limits.iter().any(|l| matches!(l, LongRunning::P95(_))) {
                    job_p95(&ctx.store, &mut p95s, def).await
                } else {
                    None
                };
                let Some(limit) = AlertsConfig::long_running_limit(&limits, p95) else {
                    continue;
                };
                let for_long = now.duration_since(started);
                if for_long.as_secs() < 0
                    || Duration::try_from(for_long).unwrap_or_default() < limit
                {
                    continue;
                }
                let channels = ctx.config.route(Condition::LongRunning, Some(def), None);
                let mut alert = job_alert(
                    def,
                    Condition::LongRunning,
                    "firing",
                    Some(id.0),
                    format!(
                        "job {} run {id} is running for {}s, longer than {}s (started {started})",
                        def.name,
                        for_long.as_secs(),
                        limit.as_secs()
                    ),
                    String::new(),
                );
                alert.key.subject = format!("run:{id}");
                ctx.fire(alert, &format!("run {id}"), &channels).await;
            }
        }
        // Skipped runs newer than the last look.
        if let Ok(skipped) = ctx
            .store
            .run_list(&RunFilter {
                job: None,
                state: Some(RunState::Skipped),
                limit: 1000,
                ..RunFilter::default()
            })
            .await
        {
            let mut fresh: Vec<&Run> = skipped
                .iter()
                .filter(|r| r.id.is_some_and(|id| id.0 > seen_skip))
                .collect();
            fresh.sort_by_key(|r| r.id.map(|i| i.0));
            for run in fresh {
                let id = run.id.map_or(0, |i| i.0);
                seen_skip = seen_skip.max(id);
                let Some(def) = jobs.get(&run.job_id) else {
                    continue;
                };
                let reason = run.skip_reason.map(|r| r.name()).unwrap_or("unknown");
                let channels = ctx
                    .config
                    .route(Condition::Skipped, Some(def), Some(reason));
                let alert = job_alert(
                    def,
                    Condition::Skipped,
                    "firing",
                    Some(id),
                    format!(
                        "job {} fire {} was skipped ({reason})",
                        def.name, run.fire_time
                    ),
                    run.error.clone().unwrap_or_default(),
                );
                ctx.fire(alert, &format!("run {id}"), &channels).await;
            }
        }
        // Nodes: down when the heartbeat is older than the lease and it did not stop cleanly.
        let down_channels = ctx.config.route(Condition::NodeDown, None, None);
        if !down_channels.is_empty()
            && let Ok(nodes) = ctx.store.node_list().await
        {
            for n in nodes {
                if n.info.id.0 == ctx.node {
                    continue;
                }
                let key = AlertKey {
                    subject: format!("node:{}", n.info.id),
                    condition: "node_down".into(),
                };
                let alert = |kind, summary: String| Alert {
                    key: key.clone(),
                    kind,
                    condition: Condition::NodeDown.name(),
                    job: None,
                    owner: None,
                    run: None,
                    summary,
                    detail: format!(
                        "host {}, pid {:?}, last heartbeat {:?}",
                        n.info.host_name, n.info.pid, n.heartbeat_at
                    ),
                    at: now,
                };
                if n.stopped_at.is_none() && !n.is_live(now, ctx.lease) {
                    let age = n.heartbeat_age(now).as_secs();
                    ctx.fire(
                        alert(
                            "firing",
                            format!("node {} is down: no heartbeat for {age}s", n.info.id),
                        ),
                        &format!("heartbeat {:?}", n.heartbeat_at),
                        &down_channels,
                    )
                    .await;
                } else if n.is_live(now, ctx.lease) {
                    ctx.recover(
                        Condition::NodeDown,
                        key.clone(),
                        alert("recovered", format!("node {} is back", n.info.id)),
                        None,
                    )
                    .await;
                }
            }
        }
    }
}

/// The job's p95 of recent successful durations, read at most every [`P95_REFRESH`].
async fn job_p95<S: Store>(
    store: &S,
    cache: &mut HashMap<takt_core::job::JobId, (tokio::time::Instant, Option<Duration>)>,
    job: &JobDef,
) -> Option<Duration> {
    let id = job.id?;
    if let Some((at, p)) = cache.get(&id)
        && at.elapsed() < P95_REFRESH
    {
        return *p;
    }
    let runs = store
        .run_list(&RunFilter {
            job: Some(id),
            state: Some(RunState::Succeeded),
            limit: P95_SAMPLES,
            ..RunFilter::default()
        })
        .await
        .ok()?;
    let p = p95(runs.iter().filter_map(|r| r.elapsed).collect());
    cache.insert(id, (tokio::time::Instant::now(), p));
    p
}

async fn latest_skipped<S: Store>(store: &S) -> Option<i64> {
    let list = store
        .run_list(&RunFilter {
            job: None,
            state: Some(RunState::Skipped),
            limit: 1000,
            ..RunFilter::default()
        })
        .await
        .ok()?;
    list.iter().filter_map(|r| r.id.map(|i| i.0)).max()
}

// ---- delivery --------------------------------------------------------------------------------

fn reqwest_client(timeout: Duration) -> Option<reqwest::Client> {
    let tls = match takt_plugin_http::default_tls() {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("alert webhooks cannot use TLS: {e}");
            return None;
        }
    };
    reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("takt/", env!("CARGO_PKG_VERSION")))
        .tls_backend_preconfigured((*tls).clone())
        .build()
        .map_err(|e| tracing::warn!("cannot set up the alert webhook client: {e}"))
        .ok()
}

/// One channel's task: sends what its queue holds within the rate limit, holds the rest for
/// a digest, records every outcome.
async fn deliver<S: Store>(
    store: S,
    node: String,
    channel: Channel,
    config: Arc<AlertsConfig>,
    http: Option<reqwest::Client>,
    mut rx: mpsc::Receiver<Alert>,
) {
    let mut sent: VecDeque<tokio::time::Instant> = VecDeque::new();
    let mut held: Vec<Alert> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next = tokio::select! {
            a = rx.recv() => match a {
                Some(a) => Some(a),
                None => return,
            },
            _ = tick.tick() => None,
        };
        let now = tokio::time::Instant::now();
        while sent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= config.rate_window)
        {
            sent.pop_front();
        }
        let room = (sent.len() as u32) < config.rate_limit;
        if let Some(alert) = next {
            if room && held.is_empty() {
                sent.push_back(now);
                send_and_record(&store, &node, &channel, &config, http.as_ref(), &alert).await;
            } else {
                record(
                    &store,
                    &node,
                    &channel.name,
                    &alert,
                    DeliveryOutcome::Suppressed,
                    format!(
                        "{}; rate limit ({} per {}s): held for the next digest",
                        alert.summary,
                        config.rate_limit,
                        config.rate_window.as_secs()
                    ),
                )
                .await;
                held.push(alert);
            }
        } else if room && !held.is_empty() {
            sent.push_back(now);
            let digest = digest(std::mem::take(&mut held));
            send_and_record(&store, &node, &channel, &config, http.as_ref(), &digest).await;
        }
    }
}

/// One message for the alerts held back by the rate limit.
fn digest(held: Vec<Alert>) -> Alert {
    let lines: Vec<String> = held
        .iter()
        .map(|a| format!("{}  {}", a.at.strftime("%Y-%m-%d %H:%M:%S UTC"), a.summary))
        .collect();
    Alert {
        key: AlertKey {
            subject: "digest".into(),
            condition: "digest".into(),
        },
        kind: "digest",
        condition: "digest",
        job: None,
        owner: None,
        run: None,
        summary: format!("{} alerts held back by the rate limit", held.len()),
        detail: lines.join("\n"),
        at: Timestamp::now(),
    }
}

async fn send_and_record<S: Store>(
    store: &S,
    node: &str,
    channel: &Channel,
    config: &AlertsConfig,
    http: Option<&reqwest::Client>,
    alert: &Alert,
) {
    let result = tokio::time::timeout(config.timeout, send(channel, node, http, alert))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {}s", config.timeout.as_secs())));
    let (outcome, detail) = match result {
        Ok(()) => (DeliveryOutcome::Sent, alert.summary.clone()),
        Err(e) => {
            tracing::warn!("alert on channel {} not delivered: {e}", channel.name);
            (
                DeliveryOutcome::Failed,
                format!("{}; not delivered: {e}", alert.summary),
            )
        }
    };
    record(store, node, &channel.name, alert, outcome, detail).await;
}

/// The JSON form of an alert (the webhook body, and the template's variables).
fn alert_json(alert: &Alert, node: &str) -> serde_json::Value {
    serde_json::json!({
        "type": "takt.alert",
        "kind": alert.kind,
        "condition": alert.condition,
        "subject": alert.key.subject,
        "job": alert.job,
        "run": alert.run,
        "summary": alert.summary,
        "detail": alert.detail,
        "at": alert.at.to_string(),
        "node": node,
    })
}

/// The webhook's signature header value: `sha256=<hex HMAC-SHA256 of the body>`, GitHub's
/// form, which most receivers know how to check.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("hmac takes any key length");
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// The header that carries [`signature`].
pub const SIGNATURE_HEADER: &str = "X-Takt-Signature-256";

async fn send(
    channel: &Channel,
    node: &str,
    http: Option<&reqwest::Client>,
    alert: &Alert,
) -> Result<(), String> {
    match &channel.kind {
        ChannelKind::Webhook {
            url,
            secret,
            template,
        } => {
            let http = http.ok_or("the webhook client could not be set up (see the log)")?;
            let json = alert_json(alert, node);
            let body = match template {
                None => json.to_string(),
                Some(t) => {
                    let env = minijinja::Environment::new();
                    env.render_str(t, &json)
                        .map_err(|e| format!("the template failed: {e}"))?
                }
            };
            let mut req = http
                .post(url)
                .header("content-type", "application/json")
                .header(
                    "webhook-id",
                    format!(
                        "{}-{}-{}",
                        alert.key.subject,
                        alert.key.condition,
                        alert.at.as_millisecond()
                    ),
                );
            if let Some(s) = secret {
                req = req.header(SIGNATURE_HEADER, signature(s, body.as_bytes()));
            }
            let resp = req.body(body).send().await.map_err(|e| chain(&e))?;
            if resp.status().is_success() {
                Ok(())
            } else {
                Err(format!("the webhook answered {}", resp.status()))
            }
        }
        ChannelKind::Smtp {
            url,
            from,
            to,
            to_owner,
            credentials,
        } => {
            use lettre::AsyncTransport;
            let mut builder = lettre::Message::builder()
                .from(from.clone())
                .subject(format!("[takt] {}", alert.summary));
            let mut any = false;
            for t in to {
                builder = builder.to(t.clone());
                any = true;
            }
            if *to_owner
                && let Some(owner) = alert.owner.as_deref()
                && let Ok(mb) = owner.parse::<lettre::message::Mailbox>()
            {
                builder = builder.to(mb);
                any = true;
            }
            if !any {
                return Err("no recipient (to is empty and the job has no owner address)".into());
            }
            let text = format!(
                "{}\n\ncondition: {}\nkind: {}\nsubject: {}\nrun: {}\nat: {}\nnode: {node}\n\n{}\n",
                alert.summary,
                alert.condition,
                alert.kind,
                alert.key.subject,
                alert.run.map_or("-".to_string(), |r| r.to_string()),
                alert.at,
                alert.detail
            );
            let message = builder
                .header(lettre::message::header::ContentType::TEXT_PLAIN)
                .body(text)
                .map_err(|e| format!("cannot build the mail: {e}"))?;
            let mut transport = lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::from_url(url)
                .map_err(|e| format!("{url}: {e}"))?
                .timeout(Some(Duration::from_secs(10)));
            if let Some((user, password)) = credentials {
                transport = transport.credentials(
                    lettre::transport::smtp::authentication::Credentials::new(
                        user.clone(),
                        password.clone(),
                    ),
                );
            }
            transport
                .build()
                .send(message)
                .await
                .map(|_| ())
                .map_err(|e| chain(&e))
        }
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(toml_text: &str, env: &[(&str, &str)]) -> Result<AlertsConfig, (String, String)> {
        #[derive(Deserialize)]
        struct Wrap {
            alerts: AlertsFile,
        }
        let raw: Wrap = toml::from_str(toml_text).expect("toml");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        AlertsConfig::resolve(
            raw.alerts,
            &|k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            &|t| takt_core::schedule::parse_duration(t).map_err(|e| e.to_string()),
        )
    }

    const ISSUE: &str = r#"
[[alerts.channels]]
name = "ops-mail"
smtp = "smtp://mail.factory.local:25"
from = "takt@factory.local"
to = ["mes-ops@factory.local"]

[[alerts.channels]]
name = "hook"
webhook = "https://chat.factory.local/hooks/takt"

[[alerts.rules]]
on = ["failed", "timed_out", "recovered"]
jobs = ["*"]
channels = ["ops-mail", "hook"]
"#;

    #[test]
    fn the_issues_configuration_reads_and_routes() {
        let c = resolve(ISSUE, &[("TAKT_ALERT_HOOK_SECRET", "s3cret")]).expect("valid");
        assert_eq!(c.channel_names(), ["ops-mail", "hook"]);
        let job = JobDef::new("nightly", "exe::run").unwrap();
        assert_eq!(c.route(Condition::Failed, Some(&job), None), [0, 1]);
        assert!(c.route(Condition::Skipped, Some(&job), None).is_empty());
        match &c.channels[1].kind {
            ChannelKind::Webhook { secret, .. } => assert_eq!(secret.as_deref(), Some("s3cret")),
            _ => panic!("a webhook"),
        }
        assert!(!format!("{:?}", c).contains("s3cret"), "no secret in Debug");
    }

    #[test]
    fn bad_configurations_name_the_key_and_the_fix() {
        let cases = [
            (
                ISSUE.replace("jobs = [\"*\"]", "jobs = [\"*\"]\noutage_after = \"1m\""),
                "alerts.rules[0].outage_after",
                "rules on db_outage",
            ),
            (
                ISSUE.replace("\"failed\", \"timed_out\"", "\"failled\""),
                "alerts.rules[0].on[0]",
                "not a condition",
            ),
            (
                ISSUE.replace(
                    "channels = [\"ops-mail\", \"hook\"]",
                    "channels = [\"pager\"]",
                ),
                "alerts.rules[0].channels[0]",
                "no channel \"pager\"",
            ),
            (
                ISSUE.replace(
                    "smtp://mail.factory.local:25",
                    "smtp://u:p@mail.factory.local:25",
                ),
                "alerts.channels[0].smtp",
                "TAKT_ALERT_OPS_MAIL_PASSWORD",
            ),
            (
                ISSUE.replace("smtp://mail.factory.local:25", "imap://mail.factory.local"),
                "alerts.channels[0].smtp",
                "smtps://",
            ),
            (
                ISSUE.replace("jobs = [\"*\"]", ""),
                "alerts.rules[0]",
                "jobs = [\"*\"]",
            ),
            (
                ISSUE.replace("jobs = [\"*\"]", "jobs = [\"[\"]"),
                "alerts.rules[0].jobs[0]",
                "not a glob",
            ),
            (
                ISSUE.replace(
                    "to = [\"mes-ops@factory.local\"]",
                    "to = [\"not an address\"]",
                ),
                "alerts.channels[0].to[0]",
                "not an address",
            ),
        ];
        for (text, key, says) in cases {
            let (k, m) = resolve(&text, &[]).expect_err(key);
            assert_eq!(k, key, "{m}");
            assert!(m.contains(says), "{k}: {m}");
        }
        let (k, m) =
            resolve(ISSUE, &[("TAKT_ALERT_OPS_MAIL_USER", "u")]).expect_err("half a login");
        assert_eq!(k, "alerts.channels[0].smtp");
        assert!(m.contains("set both"), "{m}");
    }

    #[test]
    fn p95_limits_need_samples_and_take_the_smallest() {
        let secs = |v: &[u64]| {
            v.iter()
                .map(|s| Duration::from_secs(*s))
                .collect::<Vec<_>>()
        };
        assert_eq!(p95(secs(&[1, 2, 3, 4])), None, "too few samples");
        assert_eq!(p95(secs(&[5, 1, 4, 2, 3])), Some(Duration::from_secs(5)));
        let twenty: Vec<u64> = (1..=20).collect();
        assert_eq!(p95(secs(&twenty)), Some(Duration::from_secs(19)));
        let limits = [
            LongRunning::P95(3.0),
            LongRunning::Fixed(Duration::from_secs(3600)),
        ];
        assert_eq!(
            AlertsConfig::long_running_limit(&limits, Some(Duration::from_secs(60))),
            Some(Duration::from_secs(180))
        );
        assert_eq!(
            AlertsConfig::long_running_limit(&limits, None),
            Some(Duration::from_secs(3600)),
            "no p95 yet: the fixed limit"
        );
        assert_eq!(AlertsConfig::long_running_limit(&limits[..1], None), None);
        let text = ISSUE.replace(
            "on = [\"failed\", \"timed_out\", \"recovered\"]",
            "on = [\"long_running\"]\nlong_running = \"2.5x p95\"",
        );
        let c = resolve(&text, &[]).expect("valid");
        assert_eq!(c.rules[0].long_running, Some(LongRunning::P95(2.5)));
        for bad in ["0.5x p95", "p95", "threex p95"] {
            let text = ISSUE.replace(
                "on = [\"failed\", \"timed_out\", \"recovered\"]",
                &format!("on = [\"long_running\"]\nlong_running = \"{bad}\""),
            );
            let (k, m) = resolve(&text, &[]).expect_err(bad);
            assert_eq!(k, "alerts.rules[0].long_running");
            assert!(m.contains("3x p95"), "{m}");
        }
    }

    #[test]
    fn signatures_are_githubs_form() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn long_running_limits_and_skip_reasons_route() {
        let text = format!(
            "{ISSUE}\n[[alerts.rules]]\non = [\"long_running\"]\ngroups = [\"etl*\"]\nlong_running = \"30m\"\nchannels = [\"hook\"]\n\n[[alerts.rules]]\non = [\"skipped\"]\njobs = [\"night*\"]\nskip_reasons = [\"misfire\"]\nchannels = [\"ops-mail\"]\n"
        );
        let c = resolve(&text, &[]).expect("valid");
        let mut job = JobDef::new("nightly", "exe::run").unwrap();
        assert!(c.long_running_limits(&job).is_empty());
        job.group = Some("etl-main".into());
        let limits = c.long_running_limits(&job);
        assert_eq!(
            AlertsConfig::long_running_limit(&limits, None),
            Some(Duration::from_secs(1800))
        );
        assert_eq!(
            c.route(Condition::Skipped, Some(&job), Some("misfire")),
            [0]
        );
        assert!(
            c.route(Condition::Skipped, Some(&job), Some("overlap"))
                .is_empty()
        );
        let bad = text.replace("long_running = \"30m\"\n", "");
        assert_eq!(
            resolve(&bad, &[]).unwrap_err().0,
            "alerts.rules[1].long_running"
        );
        let bad = text.replace("\"misfire\"", "\"mis\"");
        assert_eq!(
            resolve(&bad, &[]).unwrap_err().0,
            "alerts.rules[2].skip_reasons[0]"
        );
    }
}
