//! Groups (issue 15 item 3; seed 004 item 15 `WorkerGroupID`, seed 003 §6): the jobs that
//! name the same `group` are one unit.
//!
//! **The group hold.** A group runs its time points together: if a member's run of an
//! earlier time point did not succeed, no member's later fire runs — each is recorded
//! `skipped` with reason `group`, naming the member, its run and its state. Precisely, a fire
//! of member B at `t` is *held* when some member A (B itself included) has a run with fire
//! time before `t` that ended `failed`, `timed_out` or `cancelled` (any cancel: an operator's,
//! the overlap policy's, a shutdown's — the member's work of that time point did not
//! complete) and
//!
//! * no run of A succeeded with a later fire time (a `takt job trigger A` that succeeds, or a
//!   later scheduled success, ends the hold; a retry re-uses its run, so a retry that
//!   succeeds turns the failed run itself into a success), and
//! * the failed run did not finish at or before the group's last release (`takt group
//!   resume`, which releases a failure hold as well as a pause).
//!
//! A run that is pending (a retry waiting) or running is not final and holds nothing yet.
//! A `skipped` run holds nothing either: its time point never ran, so it says nothing about
//! the member's work — and counting the group's own `group` skips would make a hold that no
//! success could end. Members need not share a schedule: "the group's time point" is the fire
//! time, and a member's fire waits on every member's runs of earlier fire times.
//!
//! The database decides (inside the claim's transaction, so every node sees the same
//! hold); [`hold_of`] is the pure rule over what the engine read per member.
//!
//! **Concurrency.** A group may limit how many of its members' runs are running at once
//! (`max_running`, [`GroupDef`]). The claim counts the group's running runs on every node
//! before it starts one; a fire over the limit is stored as a *queued* pending run (never
//! skipped), which a later claim starts when a slot frees, in claim order (priority, then
//! fire time).

use std::fmt;

use jiff::Timestamp;

use crate::job::JobName;
use crate::pause::Pause;
use crate::run::{Run, RunId, RunState};

/// The run states that hold a group: the member's time point ended without success.
pub const HOLDING_STATES: [RunState; 3] =
    [RunState::Failed, RunState::TimedOut, RunState::Cancelled];

/// Why a group's fires are held: the member whose run did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupHold {
    /// The group.
    pub group: String,
    /// The member whose run did not succeed.
    pub member: JobName,
    /// That run.
    pub run: RunId,
    /// Its fire time (the group's time point that failed).
    pub fire_time: Timestamp,
    /// How it ended (`failed`, `timed_out` or `cancelled`).
    pub state: RunState,
}

impl GroupHold {
    /// How an operator ends the hold.
    pub fn release_hint(&self) -> String {
        format!(
            "it ends when {m} succeeds again (takt job trigger {m}) or with takt group resume {g}",
            m = self.member,
            g = self.group
        )
    }
}

impl fmt::Display for GroupHold {
    /// `group etl is held: member extract's run 42 (fire 2026-06-01T10:00:00Z) failed`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "group {} is held: member {}'s run {} (fire {}) {}",
            self.group, self.member, self.run, self.fire_time, self.state
        )
    }
}

/// What the engine read of one member for [`hold_of`].
#[derive(Clone, Debug)]
pub struct MemberRuns {
    /// The member.
    pub job: JobName,
    /// Its latest run in a [`HOLDING_STATES`] state with a fire time before the fire being
    /// decided.
    pub last_bad: Option<Run>,
    /// The fire time of its latest succeeded run (any fire time).
    pub last_success: Option<Timestamp>,
}

/// The rule of the module docs: the hold on the group's fire, if any. `released` is the
/// group's last release (`takt group resume`): a failure finished at or before it holds
/// nothing. Of several failed members the one whose failure came first (fire time, then
/// name) is named: it began the hold.
pub fn hold_of(
    group: &str,
    members: &[MemberRuns],
    released: Option<Timestamp>,
) -> Option<GroupHold> {
    members
        .iter()
        .filter_map(|m| {
            let bad = m.last_bad.as_ref()?;
            let run = bad.id?;
            if m.last_success.is_some_and(|s| s > bad.fire_time) {
                return None;
            }
            let finished = bad.finished_at.unwrap_or(bad.fire_time);
            if released.is_some_and(|r| finished <= r) {
                return None;
            }
            Some(GroupHold {
                group: group.to_string(),
                member: m.job.clone(),
                run,
                fire_time: bad.fire_time,
                state: bad.state,
            })
        })
        .min_by(|a, b| (a.fire_time, &a.member).cmp(&(b.fire_time, &b.member)))
}

/// A group's stored definition (`[groups.NAME]` in takt.toml, `takt group set`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GroupDef {
    /// The most runs of the group's members running at once, on all nodes together;
    /// `None`: no limit.
    pub max_running: Option<u32>,
    /// The last `takt group resume`: failures that finished at or before it hold nothing.
    pub released_at: Option<Timestamp>,
}

/// Checks a `max_running` given by a user: at least 1 (0 would never run anything).
pub fn check_max_running(group: &str, n: i64) -> Result<u32, String> {
    if n < 1 {
        return Err(format!(
            "group {group}: max_running must be at least 1 (got {n}); leave it out for no limit"
        ));
    }
    u32::try_from(n).map_err(|_| format!("group {group}: max_running {n} is too large"))
}

/// A group as `takt group list` and `takt why` show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStatus {
    /// The group.
    pub name: String,
    /// Its members, by name.
    pub members: Vec<JobName>,
    /// Its definition (defaults when none is stored).
    pub def: GroupDef,
    /// Its members' runs running now, on all nodes.
    pub running: u32,
    /// The operator's pause of the group, if any (`takt group pause`).
    pub pause: Option<Pause>,
    /// The failure hold on its next time point, if any.
    pub hold: Option<GroupHold>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobId;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn bad(id: i64, fire: i64, state: RunState) -> Run {
        let mut r = Run::pending(JobId(1), t(fire), t(fire));
        r.id = Some(RunId(id));
        r.state = state;
        r.finished_at = Some(t(fire + 5));
        r
    }

    fn member(name: &str, last_bad: Option<Run>, last_success: Option<i64>) -> MemberRuns {
        MemberRuns {
            job: JobName::new(name).unwrap(),
            last_bad,
            last_success: last_success.map(t),
        }
    }

    #[test]
    fn no_failure_holds_nothing() {
        assert_eq!(
            hold_of(
                "g",
                &[member("a", None, Some(10)), member("b", None, None)],
                None
            ),
            None
        );
    }

    #[test]
    fn a_failure_holds_until_a_later_success() {
        let m = [
            member("a", Some(bad(7, 10, RunState::Failed)), Some(0)),
            member("b", None, Some(10)),
        ];
        let h = hold_of("g", &m, None).unwrap();
        assert_eq!(
            (h.member.as_str(), h.run, h.state),
            ("a", RunId(7), RunState::Failed)
        );
        assert!(h.to_string().contains("member a's run 7"), "{h}");
        assert!(h.release_hint().contains("takt group resume g"));
        // A success of the same fire time (a retry) or a later one releases.
        let m = [member("a", Some(bad(7, 10, RunState::Failed)), Some(20))];
        assert_eq!(hold_of("g", &m, None), None);
    }

    #[test]
    fn a_release_covers_failures_finished_before_it() {
        let m = [member("a", Some(bad(7, 10, RunState::TimedOut)), None)];
        assert_eq!(hold_of("g", &m, Some(t(15))), None);
        assert!(hold_of("g", &m, Some(t(14))).is_some());
    }

    #[test]
    fn the_first_failure_is_named() {
        let m = [
            member("b", Some(bad(9, 20, RunState::Cancelled)), None),
            member("a", Some(bad(8, 30, RunState::Failed)), None),
        ];
        assert_eq!(hold_of("g", &m, None).unwrap().run, RunId(9));
    }

    #[test]
    fn max_running_must_be_positive() {
        assert_eq!(check_max_running("g", 2), Ok(2));
        let e = check_max_running("g", 0).unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
        assert!(check_max_running("g", -3).is_err());
    }
}
