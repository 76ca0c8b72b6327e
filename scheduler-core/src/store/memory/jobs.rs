//! The memory store's job table: compact rows instead of whole [`JobDef`]s.
//!
//! A million job definitions must fit in a couple of hundred megabytes (performance goal: at
//! most 200 heap bytes per job). A `JobDef` is far bigger: a dozen `String`s, `Vec`s and
//! `Option`s, a compiled schedule, the policies. Most of that is the same for many jobs (a
//! fleet of jobs shares its handler, schedule, policies, group, owner), so a row keeps only
//! what is each job's own and points at one shared copy of the rest:
//!
//! * [`Profile`] — every field a job definition is written with except what is typically each
//!   job's own (name, parameters, description, a one-off's instant, the validity window),
//!   interned: the table holds one [`Arc`] per distinct profile, and jobs that share one share
//!   the copy. A profile leaves the table with its last row.
//! * the name, the description, the parameters' JSON text, a one-off's ([`Rule::Once`])
//!   instant and the validity window's ends, in one boxed byte string. One-off jobs (one per
//!   order, each at its own instant), jobs with their own description and jobs each valid for
//!   their own span would otherwise each pay a whole profile (~800 bytes): the profile keeps
//!   "once, in zone Z, with DST policy P" and the row the instant, so one-offs that differ
//!   only in instant and description share it. A description or a window many jobs share is
//!   paid per job, like the parameters: they are mostly per job (what the order is, when it
//!   runs), and a row has no room for a second pointer.
//! * the fields the store itself changes (enabled, next fire, version, update time), inline:
//!   the next fire as seconds + nanoseconds and the update time as nanoseconds (exact from
//!   1677 to 2262, which a time the store sets from its clock does not leave), so that no
//!   `Option` padding is paid, and `enabled` as a bit of the name's length.
//!
//! Rows live in pages of [`PAGE`] slots keyed by id: ids are handed out in order, so pages fill
//! up and cost no per-row tree overhead, and a page whose jobs are all deleted is freed (a
//! store whose jobs come and go keeps no trail of the old ids). The name index is a hash table
//! of ids by the hash of their names, never a second copy of a name; a lookup compares the
//! row's name, so two names with the same hash are still told apart.
//!
//! Every read gives back the exact `JobDef` that was stored: interning compares profiles
//! exactly, not by meaning (`0 0 * * 1-5` and `0 0 * * MON-FRI` are equal cron expressions
//! but two profiles, because the job reads back as it was written), and the timestamps keep
//! their nanoseconds (the update time within 1677–2262).

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashTable;
use jiff::Timestamp;

use crate::job::{Isolation, JobDef, JobId, JobName, Priority};
use crate::policy::{Backoff, MisfirePolicy, OverlapPolicy, RetryPolicy};
use crate::schedule::{Rule, Schedule};

/// Rows per page (one page of [`Row`]s is 4 KiB).
const PAGE: i64 = 64;

/// The seconds of an absent instant; jiff's timestamps never reach it.
const NONE: i64 = i64::MIN;

/// The instant a profile's one-off schedule holds in place of the job's: the row has the job's.
const ONCE_IN_ROW: Timestamp = Timestamp::UNIX_EPOCH;

/// The bytes of a one-off's instant at the end of a row's text: its seconds, followed by its
/// nanoseconds only when it has any ([`SUBSEC`]; one-offs are mostly set to a second).
const SECOND_BYTES: usize = 8;
/// The bytes of an instant's nanoseconds after its seconds.
const NANO_BYTES: usize = 4;

/// The bit of a row's `name_len` that says the job is enabled.
const ENABLED: u16 = 1 << 15;
/// The bit of a row's `name_len` that says `text` ends with an `effective_from`.
const FROM: u16 = 1 << 14;
/// The bit of a row's `name_len` that says `text` ends with an `expires_at`.
const UNTIL: u16 = 1 << 13;
/// The bits of a row's `name_len` that are the name's length (a name is at most 200
/// characters, so at most 800 bytes).
const NAME_LEN: u16 = 0x03ff;
/// The bytes of a validity window's instant in `text`: seconds, nanoseconds.
const WINDOW_BYTES: usize = 12;

/// A row's description length for no description (a description is at most 16,000 bytes).
const NO_DESCRIPTION: u16 = 0x7fff;

/// The bit of a row's `desc_len` that says a one-off's instant in `text` has nanoseconds.
const SUBSEC: u16 = 1 << 15;

/// Everything a job is written with except its name, parameters, description, a one-off's
/// instant and its validity window: what many jobs share.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Profile {
    group: Option<String>,
    handler_type: String,
    schedule: Option<Schedule>,
    timeout: Option<Duration>,
    retry: RetryPolicy,
    misfire: MisfirePolicy,
    overlap: OverlapPolicy,
    priority: Priority,
    dependencies: Vec<JobName>,
    dependency_wait: Option<Duration>,
    node_tag: Option<String>,
    application: Option<String>,
    owner: Option<String>,
    isolation: Isolation,
    on_success: Vec<JobName>,
    on_failure: Vec<JobName>,
}

impl Profile {
    fn of(job: &JobDef) -> Profile {
        Profile {
            group: job.group.clone(),
            handler_type: job.handler_type.clone(),
            // A one-off's instant is the row's: one-offs alike but for it share the profile.
            schedule: job.schedule.as_ref().map(|s| match s.rule() {
                Rule::Once(_) => {
                    Schedule::new(Rule::Once(ONCE_IN_ROW), s.zone().clone()).with_dst(s.dst())
                }
                _ => s.clone(),
            }),
            timeout: job.timeout,
            retry: job.retry.clone(),
            misfire: job.misfire,
            overlap: job.overlap,
            priority: job.priority,
            dependencies: job.dependencies.clone(),
            dependency_wait: job.dependency_wait,
            node_tag: job.node_tag.clone(),
            application: job.application.clone(),
            owner: job.owner.clone(),
            isolation: job.isolation,
            on_success: job.on_success.clone(),
            on_failure: job.on_failure.clone(),
        }
    }

    /// Whether the two read back identically: equal, and also spelled the same where
    /// equality compares meaning (a cron expression's text, the bits of a float: `-0.0`
    /// equals `0.0`).
    fn identical(&self, other: &Profile) -> bool {
        if self != other {
            return false;
        }
        let cron = |p: &Profile| match p.schedule.as_ref().map(Schedule::rule) {
            Some(Rule::Cron(c)) => Some(c.as_str().to_string()),
            _ => None,
        };
        let floats = |p: &Profile| match &p.retry.backoff {
            Backoff::Exponential(e) => Some((e.factor().to_bits(), e.jitter().to_bits())),
            _ => None,
        };
        cron(self) == cron(other) && floats(self) == floats(other)
    }

    /// Whether the jobs' schedule is a one-off (whose instant is in the row).
    fn once(&self) -> bool {
        matches!(
            self.schedule.as_ref().map(Schedule::rule),
            Some(Rule::Once(_))
        )
    }
}

/// A profile in the intern table: hashed and compared as [`Profile::identical`] sees it.
#[derive(Clone, Debug)]
struct Shared(Arc<Profile>);

impl PartialEq for Shared {
    fn eq(&self, other: &Shared) -> bool {
        self.0.identical(&other.0)
    }
}

/// An equivalence: `identical` is `==` plus exact spellings, and no profile holds a NaN
/// (an `Exponential`'s factor and jitter are checked ranges).
impl Eq for Shared {}

impl Hash for Shared {
    /// Hashes a part of what [`Profile::identical`] compares (identical profiles hash alike;
    /// the floats are left out), enough that distinct schedules and labels spread.
    fn hash<H: Hasher>(&self, state: &mut H) {
        let p = &*self.0;
        p.group.hash(state);
        p.handler_type.hash(state);
        if let Some(s) = &p.schedule {
            match s.rule() {
                Rule::Cron(c) => (0u8, c.as_str()).hash(state),
                Rule::Calendar(c) => (1u8, c).hash(state),
                Rule::Interval(i) => (2u8, i).hash(state),
                Rule::Once(t) => (3u8, t).hash(state),
            }
            s.zone().name().hash(state);
            s.dst().hash(state);
        }
        p.timeout.hash(state);
        p.retry.max_retries.hash(state);
        p.retry.retry_timeouts.hash(state);
        p.misfire.hash(state);
        p.overlap.hash(state);
        p.priority.hash(state);
        p.dependencies.hash(state);
        p.dependency_wait.hash(state);
        p.node_tag.hash(state);
        p.application.hash(state);
        p.owner.hash(state);
        p.isolation.hash(state);
        p.on_success.hash(state);
        p.on_failure.hash(state);
    }
}

/// One job: its own fields inline, the rest in its shared [`Profile`] (56 bytes: eight
/// less than a row with `enabled` and the update time's nanoseconds as fields of their own,
/// which the alignment rounds up to 64).
#[derive(Clone, Debug)]
struct Row {
    /// The name, the description, the parameters' JSON text (each UTF-8, so `text` is UTF-8
    /// up to the instant), then a one-off's instant ([`SECOND_BYTES`], then [`NANO_BYTES`]
    /// when [`SUBSEC`]; when the profile's schedule is a one-off), then the validity window's ends the job has
    /// ([`WINDOW_BYTES`] each, [`FROM`] and [`UNTIL`]).
    text: Box<[u8]>,
    profile: Arc<Profile>,
    version: u64,
    next_fire_s: i64,
    /// The update time in nanoseconds since the Unix epoch ([`nanos`]), [`NONE`] for none.
    updated_at: i64,
    next_fire_ns: i32,
    /// Where the name ends in `text` ([`NAME_LEN`]), and the flags [`ENABLED`], [`FROM`],
    /// [`UNTIL`].
    name_len: u16,
    /// The description's length in `text` after the name, [`NO_DESCRIPTION`] for none, and
    /// [`SUBSEC`] when a one-off's instant has nanoseconds.
    desc_len: u16,
}

impl Row {
    /// The UTF-8 text at `range` of `text` (written from `str`s at these bounds).
    fn str_at(&self, range: std::ops::Range<usize>) -> &str {
        std::str::from_utf8(&self.text[range]).expect("text stored from a str")
    }

    fn name_end(&self) -> usize {
        usize::from(self.name_len & NAME_LEN)
    }

    fn enabled(&self) -> bool {
        self.name_len & ENABLED != 0
    }

    fn name(&self) -> &str {
        self.str_at(0..self.name_end())
    }

    /// Where the parameters start in `text`.
    fn params_start(&self) -> usize {
        let desc = match self.desc_len & !SUBSEC {
            NO_DESCRIPTION => 0,
            n => usize::from(n),
        };
        self.name_end() + desc
    }

    /// The bytes of a one-off's instant at the end of `text` (0 for any other job).
    fn instant_bytes(&self) -> usize {
        match (self.profile.once(), self.desc_len & SUBSEC != 0) {
            (false, _) => 0,
            (true, false) => SECOND_BYTES,
            (true, true) => SECOND_BYTES + NANO_BYTES,
        }
    }

    /// The bytes of the validity window's ends at the end of `text`.
    fn window_bytes(&self) -> usize {
        WINDOW_BYTES
            * (usize::from(self.name_len & FROM != 0) + usize::from(self.name_len & UNTIL != 0))
    }

    /// Where the parameters end in `text` (a one-off's instant and the window follow).
    fn params_end(&self) -> usize {
        self.text.len() - self.instant_bytes() - self.window_bytes()
    }

    /// The validity window's ends, from the end of `text`.
    fn window(&self) -> (Option<Timestamp>, Option<Timestamp>) {
        let mut at = self.text.len() - self.window_bytes();
        let mut read = |flag: u16| {
            (self.name_len & flag != 0).then(|| {
                let bytes = &self.text[at..at + WINDOW_BYTES];
                at += WINDOW_BYTES;
                read_instant(bytes)
            })
        };
        let from = read(FROM);
        (from, read(UNTIL))
    }

    fn description(&self) -> Option<&str> {
        (self.desc_len & !SUBSEC != NO_DESCRIPTION)
            .then(|| self.str_at(self.name_end()..self.params_start()))
    }

    fn params(&self) -> &str {
        self.str_at(self.params_start()..self.params_end())
    }

    /// The job's schedule: the profile's, with a one-off's instant from the row.
    fn schedule(&self) -> Option<Schedule> {
        let s = self.profile.schedule.as_ref()?;
        if !self.profile.once() {
            return Some(s.clone());
        }
        let end = self.params_end();
        let at = read_instant(&self.text[end..end + self.instant_bytes()]);
        Some(Schedule::new(Rule::Once(at), s.zone().clone()).with_dst(s.dst()))
    }

    fn next_fire(&self) -> Option<Timestamp> {
        instant(self.next_fire_s, self.next_fire_ns)
    }

    fn set_next_fire(&mut self, at: Option<Timestamp>) {
        (self.next_fire_s, self.next_fire_ns) = parts(at);
    }

    fn job(&self, id: JobId) -> JobDef {
        let p = &*self.profile;
        let (effective_from, expires_at) = self.window();
        JobDef {
            id: Some(id),
            name: JobName::stored(self.name()),
            group: p.group.clone(),
            handler_type: p.handler_type.clone(),
            params_json: self.params().to_string(),
            schedule: self.schedule(),
            enabled: self.enabled(),
            effective_from,
            expires_at,
            timeout: p.timeout,
            retry: p.retry.clone(),
            misfire: p.misfire,
            overlap: p.overlap,
            priority: p.priority,
            dependencies: p.dependencies.clone(),
            dependency_wait: p.dependency_wait,
            node_tag: p.node_tag.clone(),
            application: p.application.clone(),
            owner: p.owner.clone(),
            description: self.description().map(str::to_string),
            isolation: p.isolation,
            on_success: p.on_success.clone(),
            on_failure: p.on_failure.clone(),
            next_fire: self.next_fire(),
            version: self.version,
            updated_at: (self.updated_at != NONE).then(|| {
                Timestamp::from_nanosecond(i128::from(self.updated_at))
                    .expect("an instant that was stored")
            }),
        }
    }
}

/// An instant as (seconds, nanoseconds), [`NONE`] seconds for none.
fn parts(at: Option<Timestamp>) -> (i64, i32) {
    at.map_or((NONE, 0), |t| (t.as_second(), t.subsec_nanosecond()))
}

/// An update time as nanoseconds since the Unix epoch, [`NONE`] for none: exact from
/// 1677-09-21 to 2262-04-11, saturated beyond (the store sets it from the clock, so only a
/// clock set centuries off leaves that range). Eight bytes where seconds and nanoseconds
/// take twelve, which is what brings a row to 56 bytes.
fn nanos(at: Option<Timestamp>) -> i64 {
    at.map_or(NONE, |t| {
        let ns = t.as_nanosecond();
        // `NONE` itself is an instant in range, the first one: stored as the next, so that
        // it never reads back as "none".
        i64::try_from(ns)
            .ok()
            .filter(|&n| n != NONE)
            .unwrap_or(if ns < 0 { NONE + 1 } else { i64::MAX })
    })
}

/// Writes `at` into a row's `text`: its seconds ([`SECOND_BYTES`]), then its nanoseconds
/// ([`NANO_BYTES`]) when `with_nanos` (a one-off's instant leaves them out when they are zero).
fn put_instant(text: &mut Vec<u8>, at: Timestamp, with_nanos: bool) {
    text.extend_from_slice(&at.as_second().to_le_bytes());
    if with_nanos {
        text.extend_from_slice(&at.subsec_nanosecond().to_le_bytes());
    }
}

/// Reads what [`put_instant`] wrote: [`SECOND_BYTES`], or those and [`NANO_BYTES`].
fn read_instant(bytes: &[u8]) -> Timestamp {
    let (second, nanos) = bytes.split_at(SECOND_BYTES);
    let second = i64::from_le_bytes(second.try_into().expect("8 bytes"));
    let nanos = match nanos {
        [] => 0,
        n => i32::from_le_bytes(n.try_into().expect("4 bytes")),
    };
    Timestamp::new(second, nanos).expect("an instant that was stored")
}

/// The instant [`parts`] split.
fn instant(second: i64, nanos: i32) -> Option<Timestamp> {
    (second != NONE).then(|| Timestamp::new(second, nanos).expect("an instant that was stored"))
}

/// A page of [`PAGE`] row slots and how many hold a row.
#[derive(Debug)]
struct Page {
    rows: Box<[Option<Row>]>,
    used: u32,
}

/// A read-only view of one stored job, for the store's indexes and scans (no `JobDef` built).
#[derive(Clone, Copy)]
pub(super) struct JobRef<'a>(&'a Row);

impl<'a> JobRef<'a> {
    pub(super) fn enabled(self) -> bool {
        self.0.enabled()
    }

    pub(super) fn next_fire(self) -> Option<Timestamp> {
        self.0.next_fire()
    }

    pub(super) fn version(self) -> u64 {
        self.0.version
    }

    pub(super) fn priority(self) -> Priority {
        self.0.profile.priority
    }

    /// [`JobDef::is_recurring`] of the stored job.
    pub(super) fn recurring(self) -> bool {
        self.0
            .profile
            .schedule
            .as_ref()
            .is_some_and(Schedule::recurs)
    }

    pub(super) fn node_tag(self) -> Option<&'a str> {
        self.0.profile.node_tag.as_deref()
    }

    pub(super) fn misfire(self) -> MisfirePolicy {
        self.0.profile.misfire
    }

    pub(super) fn overlap(self) -> OverlapPolicy {
        self.0.profile.overlap
    }

    pub(super) fn name(self) -> JobName {
        JobName::stored(self.0.name())
    }

    /// [`JobDef::continuations_for`] of the stored job, from its shared profile.
    pub(super) fn continuations_for(self, state: crate::run::RunState) -> &'a [JobName] {
        let p = &self.0.profile;
        crate::job::continuations_in(state, &p.on_success, &p.on_failure)
    }

    /// The name as the row holds it (no copy), for a scan in name order.
    pub(super) fn name_str(self) -> &'a str {
        self.0.name()
    }
}

/// The job rows with their name index and the intern table of their profiles.
#[derive(Default)]
pub(super) struct Jobs {
    pages: BTreeMap<i64, Page>,
    /// The id of every row, by the hash of its name: the row holds the only copy of the name,
    /// and a lookup compares it (ids whose names share a hash are told apart). A hash table
    /// of ids costs 9–19 bytes a job by its fill; the `(hash, id)` B-tree it replaced cost
    /// ~27 (the scale bench, 1 000 000 jobs).
    names: HashTable<JobId>,
    /// One entry per distinct profile of the rows.
    profiles: HashSet<Shared>,
    hasher: RandomState,
}

/// The page key and slot of `id`.
fn slot(id: JobId) -> (i64, usize) {
    (id.0.div_euclid(PAGE), id.0.rem_euclid(PAGE) as usize)
}

/// Row `id` of `pages` (a free function, so that the name index can rehash while it is
/// borrowed mutably beside them).
fn row_in(pages: &BTreeMap<i64, Page>, id: JobId) -> Option<&Row> {
    let (page, at) = slot(id);
    pages.get(&page)?.rows[at].as_ref()
}

impl Jobs {
    fn row(&self, id: JobId) -> Option<&Row> {
        row_in(&self.pages, id)
    }

    fn hash(&self, name: &str) -> u64 {
        self.hasher.hash_one(name)
    }

    /// Job `id`, as it was stored.
    pub(super) fn get(&self, id: JobId) -> Option<JobDef> {
        self.row(id).map(|r| r.job(id))
    }

    /// A view of job `id`.
    pub(super) fn view(&self, id: JobId) -> Option<JobRef<'_>> {
        self.row(id).map(JobRef)
    }

    pub(super) fn contains(&self, id: JobId) -> bool {
        self.row(id).is_some()
    }

    /// The id of the job named `name`.
    pub(super) fn id_of(&self, name: &str) -> Option<JobId> {
        self.names
            .find(self.hash(name), |&id| {
                self.row(id).is_some_and(|r| r.name() == name)
            })
            .copied()
    }

    /// Every row with its id, in id order, as a view (no `JobDef` built).
    pub(super) fn views(&self) -> impl Iterator<Item = (JobId, JobRef<'_>)> + '_ {
        self.pages.iter().flat_map(|(page, p)| {
            p.rows.iter().enumerate().filter_map(move |(at, r)| {
                r.as_ref()
                    .map(|r| (JobId(page * PAGE + at as i64), JobRef(r)))
            })
        })
    }

    /// Every job in id order.
    pub(super) fn iter(&self) -> impl Iterator<Item = JobDef> + '_ {
        self.pages.iter().flat_map(|(page, p)| {
            p.rows.iter().enumerate().filter_map(move |(at, r)| {
                r.as_ref().map(|r| r.job(JobId(page * PAGE + at as i64)))
            })
        })
    }

    /// Stores `job` under its id (which it must have), in place of the row there.
    pub(super) fn insert(&mut self, job: &JobDef) {
        let Some(id) = job.id else { return };
        self.remove(id);
        let shared = Shared(Arc::new(Profile::of(job)));
        let profile = match self.profiles.get(&shared) {
            Some(s) => s.0.clone(),
            None => {
                self.profiles.insert(shared.clone());
                shared.0
            }
        };
        let name = job.name.as_str();
        let description = job.description.as_deref();
        let once = job.schedule.as_ref().and_then(|s| match s.rule() {
            Rule::Once(at) => Some(*at),
            _ => None,
        });
        let mut text = Vec::with_capacity(
            name.len()
                + description.map_or(0, str::len)
                + job.params_json.len()
                + once.map_or(0, |at| {
                    SECOND_BYTES + usize::from(at.subsec_nanosecond() != 0) * NANO_BYTES
                })
                + WINDOW_BYTES
                    * (usize::from(job.effective_from.is_some())
                        + usize::from(job.expires_at.is_some())),
        );
        text.extend_from_slice(name.as_bytes());
        text.extend_from_slice(description.unwrap_or("").as_bytes());
        text.extend_from_slice(job.params_json.as_bytes());
        let mut subsec = 0;
        if let Some(at) = once {
            let with_nanos = at.subsec_nanosecond() != 0;
            put_instant(&mut text, at, with_nanos);
            if with_nanos {
                subsec = SUBSEC;
            }
        }
        // A window's ends are the row's, not the profile's: jobs each valid for their own
        // span (an order's shift) would otherwise each pay a whole profile (~800 bytes).
        let mut window = 0;
        for (at, flag) in [(job.effective_from, FROM), (job.expires_at, UNTIL)] {
            if let Some(at) = at {
                put_instant(&mut text, at, true);
                window |= flag;
            }
        }
        let desc_len = description.map_or(NO_DESCRIPTION, |d| {
            u16::try_from(d.len())
                .ok()
                .filter(|&n| n < NO_DESCRIPTION)
                .expect("a description of at most 4000 characters")
        }) | subsec;
        let (next_fire_s, next_fire_ns) = parts(job.next_fire);
        let row = Row {
            text: text.into_boxed_slice(),
            profile,
            version: job.version,
            next_fire_s,
            updated_at: nanos(job.updated_at),
            next_fire_ns,
            name_len: u16::try_from(name.len())
                .ok()
                .filter(|&n| n <= NAME_LEN)
                .expect("a name of at most 200 characters")
                | window
                | if job.enabled { ENABLED } else { 0 },
            desc_len,
        };
        let hash = self.hash(name);
        let (page, at) = slot(id);
        let page = self.pages.entry(page).or_insert_with(|| Page {
            rows: (0..PAGE).map(|_| None).collect(),
            used: 0,
        });
        page.rows[at] = Some(row);
        page.used += 1;
        // Indexed once its row is in place: growing the table rehashes every indexed id
        // from its row's name.
        let (pages, hasher) = (&self.pages, &self.hasher);
        self.names.insert_unique(hash, id, |&id| {
            hasher.hash_one(row_in(pages, id).expect("an indexed row").name())
        });
    }

    /// Removes job `id`; whether there was one.
    pub(super) fn remove(&mut self, id: JobId) -> bool {
        let (key, at) = slot(id);
        let Some(page) = self.pages.get_mut(&key) else {
            return false;
        };
        let Some(row) = page.rows[at].take() else {
            return false;
        };
        page.used -= 1;
        if page.used == 0 {
            self.pages.remove(&key);
        }
        if let Ok(entry) = self.names.find_entry(self.hash(row.name()), |&x| x == id) {
            entry.remove();
        }
        // The table's copy and this row's: the last row of the profile is going.
        if Arc::strong_count(&row.profile) == 2 {
            self.profiles.remove(&Shared(row.profile));
        }
        true
    }

    /// Sets job `id`'s next fire (nothing when there is no such job).
    pub(super) fn set_next_fire(&mut self, id: JobId, at: Option<Timestamp>) {
        let (page, slot) = slot(id);
        if let Some(row) = self
            .pages
            .get_mut(&page)
            .and_then(|p| p.rows[slot].as_mut())
        {
            row.set_next_fire(at);
        }
    }

    /// An empty table that hashes names as this one does (for comparing indexes).
    #[cfg(test)]
    pub(super) fn empty_like(&self) -> Jobs {
        Jobs {
            hasher: self.hasher.clone(),
            ..Jobs::default()
        }
    }

    /// Asserts that the name index and the intern table are those `fresh`, built from the
    /// same rows, has.
    #[cfg(test)]
    pub(super) fn assert_same_indexes(&self, fresh: &Jobs) {
        let ids = |jobs: &Jobs| {
            let mut ids: Vec<JobId> = jobs.names.iter().copied().collect();
            ids.sort_unstable();
            ids
        };
        assert_eq!(ids(self), ids(fresh), "names index");
        for (id, job) in self.views() {
            assert_eq!(self.id_of(job.name_str()), Some(id), "names index");
        }
        assert_eq!(self.profiles, fresh.profiles, "profile table");
        let used: Vec<(i64, u32)> = self.pages.iter().map(|(k, p)| (*k, p.used)).collect();
        let counted: Vec<(i64, u32)> = self
            .pages
            .iter()
            .map(|(k, p)| (*k, p.rows.iter().filter(|r| r.is_some()).count() as u32))
            .collect();
        assert_eq!(used, counted, "page counts");
        assert!(used.iter().all(|(_, n)| *n > 0), "no empty page kept");
    }
}

/// The jobs as `JobDef`s by id (what a reader compares; the layout is an implementation
/// detail).
impl fmt::Debug for Jobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|j| (j.id, j)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Exponential;
    use crate::schedule::Zone;

    fn job(id: i64, name: &str) -> JobDef {
        let mut j = JobDef::new(name, "a::b").unwrap();
        j.id = Some(JobId(id));
        j
    }

    #[test]
    fn a_row_is_56_bytes() {
        assert_eq!(size_of::<Row>(), 56);
        assert_eq!(size_of::<Option<Row>>(), 56);
    }

    /// The enabled flag shares its field with the name's length: neither leaks into the other,
    /// for the longest name too.
    #[test]
    fn the_enabled_bit_and_the_longest_name_read_back() {
        let name = "é".repeat(200);
        for enabled in [true, false] {
            let mut j = job(3, &name);
            j.enabled = enabled;
            j.description = Some("d".into());
            let mut jobs = Jobs::default();
            jobs.insert(&j);
            assert_eq!(jobs.get(JobId(3)), Some(j.clone()));
            assert_eq!(jobs.id_of(&name), Some(JobId(3)));
            assert_eq!(jobs.view(JobId(3)).map(JobRef::enabled), Some(enabled));
        }
    }

    /// A one-off's instant reads back exactly whether or not it has nanoseconds, with a
    /// description or without, and costs four bytes less on a whole second.
    #[test]
    fn a_one_offs_instant_reads_back_on_a_second_and_between_seconds() {
        for (nanos, bytes) in [(0, 8), (1, 12), (999_999_999, 12), (-5, 12)] {
            for description in [None, Some("order 7"), Some("")] {
                let mut j = job(9, "once");
                let at = Timestamp::new(1_800_000_000, nanos).unwrap();
                j.schedule = Some(Schedule::new(Rule::Once(at), Zone::utc()));
                j.description = description.map(str::to_string);
                j.params_json = "{}".into();
                let mut jobs = Jobs::default();
                jobs.insert(&j);
                assert_eq!(
                    jobs.get(JobId(9)),
                    Some(j.clone()),
                    "{nanos} {description:?}"
                );
                let row = jobs.row(JobId(9)).unwrap();
                let text = "once".len() + description.map_or(0, str::len) + "{}".len();
                assert_eq!(row.text.len(), text + bytes, "{nanos} {description:?}");
            }
        }
    }

    /// A validity window is the row's: jobs each with their own window share one profile,
    /// and every combination of its ends reads back exactly, beside a one-off's instant.
    #[test]
    fn jobs_with_their_own_windows_share_a_profile() {
        let mut jobs = Jobs::default();
        let mut stored = Vec::new();
        for i in 0..40_i64 {
            let mut j = job(i, &format!("shift-{i}"));
            j.description = (i % 2 == 0).then(|| format!("order {i}"));
            if i % 4 < 2 {
                j.effective_from = Some(Timestamp::new(1_800_000_000 + i, (i * 7) as i32).unwrap());
            }
            if i % 8 < 4 || i % 4 == 1 {
                j.expires_at = Some(Timestamp::new(1_900_000_000 - i, 0).unwrap());
            }
            if i % 3 == 0 {
                let at = Timestamp::new(1_850_000_000 + i, (i % 2) as i32).unwrap();
                j.schedule = Some(Schedule::new(Rule::Once(at), Zone::utc()));
            }
            jobs.insert(&j);
            stored.push(j);
        }
        for j in &stored {
            assert_eq!(jobs.get(j.id.unwrap()).as_ref(), Some(j), "{}", j.name);
        }
        // One profile for the one-offs, one for the jobs without a schedule.
        assert_eq!(jobs.profiles.len(), 2);
    }

    /// An update time is exact from 1677 to 2262 and saturates beyond, never turning into
    /// "none" (the store sets it from its clock).
    #[test]
    fn an_update_time_outside_the_nanosecond_range_saturates() {
        let cases = [
            (Timestamp::new(-10_000_000_000, 1).unwrap(), i64::MIN + 1),
            // The range's first nanosecond is the "none" marker's value: the next one.
            (
                Timestamp::from_nanosecond(i64::MIN.into()).unwrap(),
                i64::MIN + 1,
            ),
            (Timestamp::new(10_000_000_000, 1).unwrap(), i64::MAX),
            (Timestamp::new(-1, 999_999_999).unwrap(), -1),
        ];
        for (at, stored) in cases {
            let mut j = job(5, "late");
            j.updated_at = Some(at);
            let mut jobs = Jobs::default();
            jobs.insert(&j);
            let back = jobs.get(JobId(5)).and_then(|j| j.updated_at);
            assert_eq!(
                back,
                Some(Timestamp::from_nanosecond(stored.into()).unwrap())
            );
        }
    }

    /// Every field reads back exactly, nanoseconds and instants before 1970 included.
    #[test]
    fn a_job_reads_back_as_stored() {
        let mut j = job(7, "every-field");
        j.group = Some("g".into());
        j.params_json = r#"{"line":"L12","batch":417}"#.into();
        j.schedule = Some(Schedule::new(
            Rule::Cron("0 0 * * MON-FRI".parse().unwrap()),
            Zone::get("Europe/Berlin").unwrap(),
        ));
        j.enabled = false;
        j.effective_from = Some(Timestamp::new(-86_401, -5).unwrap());
        j.expires_at = Some(Timestamp::new(4_000_000_000, 999_999_999).unwrap());
        j.timeout = Some(Duration::from_millis(1500));
        j.retry = RetryPolicy::new(
            3,
            Backoff::Exponential(
                Exponential::new(Duration::from_secs(1), 2.0, Duration::from_secs(60), -0.0)
                    .unwrap(),
            ),
        );
        j.priority = Priority::new(3).unwrap();
        j.dependencies = vec![JobName::new("d").unwrap()];
        j.dependency_wait = Some(Duration::from_secs(5));
        j.node_tag = Some("tag".into());
        j.application = Some("app".into());
        j.owner = Some("me".into());
        j.description = Some("text".into());
        j.isolation = Isolation::Process;
        j.on_success = vec![JobName::new("s").unwrap()];
        j.on_failure = vec![JobName::new("f").unwrap()];
        j.next_fire = Some(Timestamp::new(-1, -500_000_000).unwrap());
        j.version = u64::MAX;
        j.updated_at = Some(Timestamp::new(1_700_000_000, 123_456_789).unwrap());
        let mut jobs = Jobs::default();
        jobs.insert(&j);
        assert_eq!(jobs.get(JobId(7)), Some(j.clone()));
        let got = jobs.get(JobId(7)).unwrap();
        let Some(Rule::Cron(c)) = got.schedule.as_ref().map(Schedule::rule) else {
            panic!("a cron schedule")
        };
        assert_eq!(c.as_str(), "0 0 * * MON-FRI");
        let Backoff::Exponential(e) = &got.retry.backoff else {
            panic!("exponential")
        };
        assert!(e.jitter().is_sign_negative());
        assert_eq!(jobs.id_of("every-field"), Some(JobId(7)));
        assert_eq!(jobs.id_of("every-fiel"), None);
    }

    /// Jobs written alike share one profile; one spelled differently (an equal cron
    /// expression, a `-0.0` jitter) gets its own and reads back with its own spelling.
    #[test]
    fn profiles_are_shared_only_when_identical() {
        let cron = |text: &str| {
            Some(Schedule::new(
                Rule::Cron(text.parse().unwrap()),
                Zone::utc(),
            ))
        };
        let mut jobs = Jobs::default();
        for i in 1..=100 {
            let mut j = job(i, &format!("j{i}"));
            j.schedule = cron("0 0 * * 1-5");
            j.params_json = format!("{{\"n\":{i}}}");
            jobs.insert(&j);
        }
        assert_eq!(jobs.profiles.len(), 1);
        let mut other = job(101, "other");
        other.schedule = cron("0 0 * * MON-FRI");
        assert_eq!(other.schedule, cron("0 0 * * 1-5"), "equal in meaning");
        jobs.insert(&other);
        assert_eq!(jobs.profiles.len(), 2);
        assert_eq!(jobs.get(JobId(101)), Some(other));
        assert_eq!(
            jobs.get(JobId(5)).unwrap().schedule.unwrap().rule(),
            &Rule::Cron("0 0 * * 1-5".parse().unwrap())
        );
        let jitter = |j: f64| {
            RetryPolicy::new(
                1,
                Backoff::Exponential(
                    Exponential::new(Duration::from_secs(1), 2.0, Duration::from_secs(9), j)
                        .unwrap(),
                ),
            )
        };
        let mut plus = job(102, "plus");
        plus.retry = jitter(0.0);
        let mut minus = job(103, "minus");
        minus.retry = jitter(-0.0);
        jobs.insert(&plus);
        jobs.insert(&minus);
        assert_eq!(jobs.profiles.len(), 4);
        assert_eq!(jobs.get(JobId(103)), Some(minus.clone()));
        let Backoff::Exponential(e) = jobs.get(JobId(103)).unwrap().retry.backoff else {
            panic!("exponential")
        };
        assert!(e.jitter().is_sign_negative());
        // The last row of a profile takes it out of the table; its page goes with its rows.
        assert!(jobs.remove(JobId(103)));
        assert!(!jobs.remove(JobId(103)));
        assert_eq!(jobs.profiles.len(), 3);
        for i in 1..=100 {
            assert!(jobs.remove(JobId(i)));
        }
        assert_eq!(jobs.profiles.len(), 2);
        assert_eq!(
            jobs.pages.len(),
            1,
            "only page 1 (ids 64..128) still has rows"
        );
        assert_eq!(jobs.id_of("j5"), None);
        assert_eq!(jobs.id_of("other"), Some(JobId(101)));
    }

    /// One-offs alike but for their instants and descriptions share one profile, and each
    /// reads back its own instant (nanoseconds, before 1970) and description (none, empty,
    /// multi-byte); a profile's one-off is told apart by zone and DST policy, not instant.
    #[test]
    fn one_offs_and_descriptions_are_the_rows() {
        let mut jobs = Jobs::default();
        let mut written = Vec::new();
        for i in 1..=50 {
            let mut j = job(i, &format!("order-{i}"));
            let at = Timestamp::new(1_800_000_000 + i * 7 - 3_000_000_000, i as i32 * 11).unwrap();
            j.schedule = Some(Schedule::new(Rule::Once(at), Zone::utc()));
            j.description = match i % 3 {
                0 => None,
                1 => Some(format!("order {i}, größe {i}")),
                _ => Some(String::new()),
            };
            j.params_json = format!("{{\"order\":{i}}}");
            j.next_fire = Some(at);
            jobs.insert(&j);
            written.push(j);
        }
        assert_eq!(jobs.profiles.len(), 1, "one profile for all the one-offs");
        for j in &written {
            assert_eq!(jobs.get(j.id.unwrap()).as_ref(), Some(j));
        }
        // Another zone, another DST policy: other profiles; each still reads back.
        let at = Timestamp::new(2_000_000_000, 0).unwrap();
        let mut berlin = job(51, "berlin");
        berlin.schedule = Some(Schedule::new(
            Rule::Once(at),
            Zone::get("Europe/Berlin").unwrap(),
        ));
        let mut later = job(52, "later");
        later.schedule = Some(Schedule::new(Rule::Once(at), Zone::utc()).with_dst(
            crate::schedule::DstPolicy {
                gap: crate::schedule::GapPolicy::Skip,
                fold: crate::schedule::FoldPolicy::Both,
            },
        ));
        later.description = Some("x".repeat(4000));
        // The placeholder instant itself, as a job's own: still the job's.
        let mut epoch = job(53, "epoch");
        epoch.schedule = Some(Schedule::new(Rule::Once(ONCE_IN_ROW), Zone::utc()));
        for j in [&berlin, &later, &epoch] {
            jobs.insert(j);
            assert_eq!(jobs.get(j.id.unwrap()).as_ref(), Some(j));
        }
        assert_eq!(jobs.profiles.len(), 3);
        // A description alone does not split a recurring fleet's profile either.
        let mut cron = job(54, "cron-a");
        cron.schedule = Some(Schedule::new(
            Rule::Cron("0 3 * * *".parse().unwrap()),
            Zone::utc(),
        ));
        cron.description = Some("a".into());
        let mut cron_b = cron.clone();
        cron_b.id = Some(JobId(55));
        cron_b.name = JobName::new("cron-b").unwrap();
        cron_b.description = Some("b".into());
        jobs.insert(&cron);
        jobs.insert(&cron_b);
        assert_eq!(jobs.profiles.len(), 4);
        assert_eq!(jobs.get(JobId(54)), Some(cron));
        assert_eq!(jobs.get(JobId(55)), Some(cron_b));
        // A view's recurring flag and the name index see the rows as before.
        assert!(!jobs.view(JobId(7)).unwrap().recurring());
        assert!(jobs.view(JobId(55)).unwrap().recurring());
        assert_eq!(jobs.id_of("order-7"), Some(JobId(7)));
    }

    /// Replacing a row moves its name in the index; names that share a hash are told apart by
    /// the row's name.
    #[test]
    fn the_name_index_follows_the_rows() {
        let mut jobs = Jobs::default();
        jobs.insert(&job(1, "a"));
        let mut renamed = job(1, "b");
        renamed.version = 2;
        jobs.insert(&renamed);
        assert_eq!(jobs.id_of("a"), None);
        assert_eq!(jobs.id_of("b"), Some(JobId(1)));
        // A hash shared by two names: both entries under one hash, each found by its name.
        let h = jobs.hash("b");
        jobs.insert(&job(2, "c"));
        jobs.names
            .find_entry(jobs.hash("c"), |&id| id == JobId(2))
            .unwrap()
            .remove();
        jobs.names.insert_unique(h, JobId(2), |_| h);
        assert_eq!(jobs.id_of("b"), Some(JobId(1)));
        assert_eq!(jobs.names.iter_hash(h).count(), 2);
        assert_eq!(
            jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
            [Some(JobId(1)), Some(JobId(2))]
        );
    }
}
