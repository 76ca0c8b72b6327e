//! The machine fed events, its exact steps asserted: no store, no clock, no sleep.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use takt_core::job::{JobDef, JobId};
use takt_core::node::InstanceId;
use takt_core::policy::RetryPolicy;
use takt_core::run::{CancelReason, NodeId, Run, RunEvent, RunId, RunState};
use takt_core::store::{ClaimedRun, DueSet, RunFinish, StoreError};

use super::prepare::Prepared;
use super::{Command, Ended, Event, Machine, Step};
use crate::scheduler::{SchedulerConfig, SchedulerEvent};

fn t0() -> Timestamp {
    "2026-03-01T00:00:00Z".parse().unwrap()
}

fn at(secs: i64) -> Timestamp {
    t0().checked_add(SignedDuration::from_secs(secs)).unwrap()
}

fn ms(t: Timestamp, ms: i64) -> Timestamp {
    t.checked_add(SignedDuration::from_millis(ms)).unwrap()
}

fn config() -> SchedulerConfig {
    SchedulerConfig {
        capacity: 4,
        // The reserve has its own tests (`the_recurring_reserve_*`).
        recurring_reserve: 0,
        lease: Duration::from_secs(60),
        renew_every: Duration::from_secs(27),
        safety_poll: Duration::from_secs(1),
        claim_batch: 32,
        // Claiming ahead has its own tests (`claim_ahead_*`).
        claim_ahead: 0,
        lookahead: Duration::from_millis(25),
        // Claiming a crowded instant ahead has its own tests (`a_crowded_instant_*`).
        lookahead_batch: 0,
        ..SchedulerConfig::new(NodeId("node-a".into()))
    }
}

fn machine() -> Machine {
    Machine::new(config(), t0())
}

fn with_capacity(capacity: usize) -> Machine {
    Machine::new(
        SchedulerConfig {
            capacity,
            ..config()
        },
        t0(),
    )
}

/// Drives a pass at t0 through renew and recover, answering each with nothing to report.
fn renewed_and_recovered(m: &mut Machine) {
    m.handle(Event::Wake, t0());
    m.handle(Event::Renewed(Ok(vec![])), t0());
    m.handle(Event::Recovered(Ok(0)), t0());
}

fn down() -> StoreError {
    StoreError::transient("connection refused")
}

/// A claimed run `id` of job `job` fired at `fire`.
fn claimed(id: i64, job: i64, fire: Timestamp) -> ClaimedRun {
    let mut run = Run::pending(JobId(job), fire, fire);
    run.id = Some(RunId(id));
    run.apply(
        RunEvent::Claimed {
            node: NodeId("node-a".into()),
            instance: InstanceId("life".into()),
            lease_until: at(3600),
        },
        fire,
        &RetryPolicy::default(),
    )
    .unwrap();
    let mut job_def = JobDef::new(&format!("job-{job}"), "testing::echo").unwrap();
    job_def.id = Some(JobId(job));
    ClaimedRun {
        run,
        job: job_def,
        recurring_fire: false,
    }
}

fn started(c: &ClaimedRun) -> Vec<Step> {
    vec![
        Step::Publish(SchedulerEvent::Started {
            run: c.run.id.unwrap(),
            job: c.run.job_id,
            fire_time: c.run.fire_time,
            attempt: 1,
        }),
        Step::Start(Box::new(c.clone())),
    ]
}

fn sleep(until: Timestamp) -> Vec<Step> {
    vec![Step::Sleep {
        until: Some(until),
        at_most: Some(Duration::from_secs(1)),
    }]
}

/// Drives the first pass of a fresh machine to its claim: renew, recover, prepare.
fn to_claim(m: &mut Machine, now: Timestamp) {
    assert_eq!(
        m.handle(Event::Wake, now),
        vec![Step::Renew {
            now,
            until: now.checked_add(SignedDuration::from_secs(60)).unwrap()
        }]
    );
    assert_eq!(
        m.handle(Event::Renewed(Ok(vec![])), now),
        vec![Step::RecoverExpired { now }]
    );
    assert_eq!(
        m.handle(Event::Recovered(Ok(0)), now),
        vec![Step::Prepare { now, horizon: now }]
    );
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![Step::Claim {
            horizon: now,
            limit: 4,
            recurring_only: 0
        }]
    );
}

/// The claim step of a pass at `horizon`.
fn claim(horizon: Timestamp, limit: usize, recurring_only: usize) -> Step {
    Step::Claim {
        horizon,
        limit,
        recurring_only,
    }
}

/// `c` with its job in a group: its end starts no pass before it is recorded.
fn in_group(mut c: ClaimedRun) -> ClaimedRun {
    c.job.group = Some("line-1".to_string());
    c
}

/// The end of run `id` recorded as succeeded.
fn recorded(id: i64) -> Event {
    Event::RunRecorded {
        run: RunId(id),
        state: Some(RunState::Succeeded),
    }
}

fn ended(c: &ClaimedRun, event: RunEvent) -> Event {
    Event::RunEnded(Box::new(Ended {
        id: c.run.id.unwrap(),
        run: c.run.clone(),
        retry: RetryPolicy::default(),
        event,
        elapsed: Some(Duration::from_millis(5)),
        plugin: None,
        drained: None,
    }))
}

#[test]
fn a_pass_renews_recovers_prepares_claims_reads_the_next_due_and_sleeps() {
    let mut m = machine();
    to_claim(&mut m, t0());
    assert_eq!(
        m.handle(Event::Claimed(Ok(vec![])), t0()),
        vec![Step::ReadNextDue { set: DueSet::All }]
    );
    // Sleeps until the lookahead before the next due instant, polled every second.
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(at(10)))), t0()),
        sleep(ms(at(10), -25))
    );
    // Woken 25 ms ahead: no renewal due yet, the claim is made up to the planned instant.
    let now = ms(at(10), -25);
    assert_eq!(
        m.handle(Event::Timer, now),
        vec![Step::Prepare {
            now,
            horizon: at(10)
        }]
    );
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![Step::Claim {
            horizon: at(10),
            limit: 4,
            recurring_only: 0
        }]
    );
    let c = claimed(1, 7, at(10));
    let mut steps = started(&c);
    steps.push(Step::ReadNextDue { set: DueSet::All });
    assert_eq!(m.handle(Event::Claimed(Ok(vec![c])), now), steps);
    assert_eq!(m.running(), 1);
    // Nothing else due: sleep until the next renewal (27 s after the first pass).
    assert_eq!(m.handle(Event::NextDue(Ok(None)), now), sleep(at(27)));
}

#[test]
fn claims_grow_in_chunks_up_to_the_free_capacity() {
    let mut m = with_capacity(30);
    renewed_and_recovered(&mut m);
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), t0()),
        vec![Step::Claim {
            horizon: t0(),
            limit: 8,
            recurring_only: 0
        }]
    );
    let first: Vec<_> = (1..=8).map(|i| claimed(i, i, t0())).collect();
    let steps = m.handle(Event::Claimed(Ok(first)), t0());
    assert_eq!(steps.len(), 17, "8 started, then the next chunk");
    // 22 are left, at most twice the next chunk (16): one claim takes them all rather than
    // 16 and then a tail of 6.
    assert_eq!(
        steps.last(),
        Some(&Step::Claim {
            horizon: t0(),
            limit: 22,
            recurring_only: 0
        })
    );
    // A short chunk ends the claiming.
    let second: Vec<_> = (9..=24).map(|i| claimed(i, i, t0())).collect();
    let steps = m.handle(Event::Claimed(Ok(second)), t0());
    assert_eq!(steps.last(), Some(&Step::ReadNextDue { set: DueSet::All }));
    assert_eq!(m.running(), 24);
    // Progress and more due now: pass again at once instead of sleeping.
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(t0()))), t0()),
        vec![Step::Prepare {
            now: t0(),
            horizon: t0()
        }]
    );
}

#[test]
fn chunks_double_until_the_rest_fits_in_one() {
    let mut m = with_capacity(100);
    renewed_and_recovered(&mut m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    let mut asked = vec![8];
    let mut next = 1;
    loop {
        let n = *asked.last().unwrap();
        let runs: Vec<_> = (next..next + n as i64)
            .map(|i| claimed(i, i, t0()))
            .collect();
        next += n as i64;
        match m.handle(Event::Claimed(Ok(runs)), t0()).last() {
            Some(Step::Claim { limit, .. }) => asked.push(*limit),
            // The room is claimed and the last claim was full: more is due now, so the
            // loop passes again at once (slots are free) without reading the next due time.
            Some(Step::Prepare { .. }) => break,
            other => panic!("unexpected step {other:?}"),
        }
    }
    // claim_batch 32 bounds the pass: 8, then 24 (not 16 and a tail of 8).
    assert_eq!(asked, vec![8, 24]);
    assert_eq!(m.running(), 32);
}

#[test]
fn a_backlog_is_claimed_in_one_claim_after_a_full_one() {
    let mut m = with_capacity(30);
    renewed_and_recovered(&mut m);
    // Idle before: a small first chunk, then the 22 left (at most twice 16) in one.
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    // Jobs in a group: their ends start a pass only once recorded (see
    // `a_backlog_pass_starts_at_the_end_of_a_one_off_run`).
    let runs: Vec<_> = (1..=30).map(|i| in_group(claimed(i, i, t0()))).collect();
    let steps = m.handle(Event::Claimed(Ok(runs[..8].to_vec())), t0());
    assert_eq!(steps.last(), Some(&claim(t0(), 22, 0)));
    // Full: more was due than the room. No slot is free, so the loop waits for an end (or
    // the renewal) without reading the next due time: it is now. The pass took 4 ms.
    let steps = m.handle(Event::Claimed(Ok(runs[8..].to_vec())), ms(t0(), 4));
    assert_eq!(steps.last(), sleep(at(27)).last());
    assert!(!steps.iter().any(|s| matches!(s, Step::ReadNextDue { .. })));
    // Twenty end. The first recorded end finds two thirds of the room free: the pass waits
    // for the rest, at most as long as the last pass took.
    let now = ms(t0(), 5);
    for c in &runs[..20] {
        m.handle(ended(c, RunEvent::Succeeded { result_json: None }), now);
    }
    assert_eq!(
        m.handle(recorded(1), now).last(),
        Some(&Step::Sleep {
            until: Some(ms(now, 4)),
            at_most: Some(Duration::from_millis(4))
        })
    );
    // Another end within the wait does not start it; the wait's end does, and the pass
    // claims the twenty free slots in one claim.
    assert!(
        !m.handle(recorded(2), ms(now, 1))
            .iter()
            .any(|s| matches!(s, Step::Prepare { .. } | Step::Renew { .. }))
    );
    let now = ms(now, 4);
    assert_eq!(
        m.handle(Event::Timer, now),
        vec![Step::Prepare { now, horizon: now }]
    );
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![claim(now, 20, 0)]
    );
    // A short claim ends the backlog: the next pass starts with a small chunk again.
    let late = in_group(claimed(31, 31, now));
    assert_eq!(
        m.handle(Event::Claimed(Ok(vec![late.clone()])), now).last(),
        Some(&Step::ReadNextDue { set: DueSet::All })
    );
    m.handle(Event::NextDue(Ok(None)), now);
    assert_eq!(
        m.handle(recorded(3), now).last(),
        Some(&Step::Prepare { now, horizon: now })
    );
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![claim(now, 8, 0)]
    );
}

#[test]
fn a_backlog_pass_starts_at_once_when_its_room_is_free() {
    let mut m = with_capacity(10);
    renewed_and_recovered(&mut m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    let runs: Vec<_> = (1..=10).map(|i| claimed(i, i, t0())).collect();
    // 10 left, at most twice the first chunk: asked in one claim, and it is full.
    assert_eq!(
        m.handle(Event::Claimed(Ok(runs.clone())), t0()).last(),
        sleep(at(27)).last()
    );
    let now = ms(t0(), 2);
    // One-off runs: each end may start the pass (before its record). The first nine find
    // part of the room free and wait; the tenth frees the whole room: no wait.
    for c in &runs[..9] {
        let steps = m.handle(ended(c, RunEvent::Succeeded { result_json: None }), now);
        assert!(!steps.iter().any(|s| matches!(s, Step::Prepare { .. })));
    }
    let steps = m.handle(
        ended(&runs[9], RunEvent::Succeeded { result_json: None }),
        now,
    );
    assert_eq!(steps.last(), Some(&Step::Prepare { now, horizon: now }));
}

#[test]
fn a_backlog_pass_starts_at_the_end_of_a_one_off_run() {
    let mut m = with_capacity(2);
    renewed_and_recovered(&mut m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    let (a, b) = (claimed(1, 1, t0()), claimed(2, 2, t0()));
    // Full: a backlog.
    m.handle(Event::Claimed(Ok(vec![a.clone(), b.clone()])), t0());
    // Both end: the second frees the whole room, and the pass starts now, before either end
    // is recorded.
    let now = ms(t0(), 1);
    m.handle(ended(&a, RunEvent::Succeeded { result_json: None }), now);
    let steps = m.handle(ended(&b, RunEvent::Succeeded { result_json: None }), now);
    assert!(matches!(
        steps.as_slice(),
        [Step::Record { run: RunId(2), .. }, Step::Prepare { .. }]
    ));
    // The records come during the pass: kept as a wake, no second pass meanwhile.
    assert!(
        !m.handle(recorded(1), now)
            .iter()
            .any(|s| matches!(s, Step::Prepare { .. }))
    );

    // A job that recurs, or one in a group, waits for its record: the store's running count
    // decides its next fire's overlap, and the group's limit counts it.
    let mut m = with_capacity(2);
    renewed_and_recovered(&mut m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    let (a, b) = (in_group(claimed(1, 1, t0())), in_group(claimed(2, 2, t0())));
    m.handle(Event::Claimed(Ok(vec![a.clone(), b.clone()])), t0());
    m.handle(ended(&a, RunEvent::Succeeded { result_json: None }), now);
    let steps = m.handle(ended(&b, RunEvent::Succeeded { result_json: None }), now);
    assert!(matches!(
        steps.as_slice(),
        [Step::Record { run: RunId(2), .. }]
    ));
    assert_eq!(
        m.handle(recorded(1), now).last(),
        Some(&Step::Prepare { now, horizon: now })
    );

    // Outside a backlog (the last claim was short) an end waits for its record as before.
    let mut m = with_capacity(4);
    renewed_and_recovered(&mut m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    let a = claimed(1, 1, t0());
    m.handle(Event::Claimed(Ok(vec![a.clone()])), t0());
    m.handle(Event::NextDue(Ok(None)), t0());
    let steps = m.handle(ended(&a, RunEvent::Succeeded { result_json: None }), now);
    assert!(matches!(
        steps.as_slice(),
        [Step::Record { run: RunId(1), .. }]
    ));
}

#[test]
fn a_failed_later_chunk_keeps_what_was_claimed() {
    let mut m = with_capacity(30);
    renewed_and_recovered(&mut m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    let first: Vec<_> = (1..=8).map(|i| claimed(i, i, t0())).collect();
    m.handle(Event::Claimed(Ok(first)), t0());
    assert_eq!(
        m.handle(Event::Claimed(Err(down())), t0()),
        vec![Step::ReadNextDue { set: DueSet::All }]
    );
    assert_eq!(m.running(), 8);
}

#[test]
fn a_wake_during_a_pass_starts_the_next_pass_instead_of_sleeping() {
    let mut m = machine();
    to_claim(&mut m, t0());
    assert_eq!(m.handle(Event::Wake, t0()), vec![]);
    m.handle(Event::Claimed(Ok(vec![])), t0());
    let now = ms(t0(), 3);
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(at(10)))), now),
        vec![Step::Prepare { now, horizon: now }]
    );
}

#[test]
fn preparing_that_changed_something_prepares_again_before_claiming() {
    let mut m = machine();
    renewed_and_recovered(&mut m);
    let changed = Prepared {
        changed: true,
        ..Prepared::default()
    };
    assert_eq!(
        m.handle(Event::Prepared(Ok(changed)), t0()),
        vec![Step::Prepare {
            now: t0(),
            horizon: t0()
        }]
    );
}

#[test]
fn the_renewal_stops_lost_runs_and_fails_orphans() {
    let mut m = machine();
    to_claim(&mut m, t0());
    let (a, b) = (claimed(1, 1, t0()), claimed(2, 2, t0()));
    m.handle(Event::Claimed(Ok(vec![a.clone(), b])), t0());
    m.handle(Event::NextDue(Ok(None)), t0());
    // Run 1 ends: its end is being recorded (finishing) when the renewal comes.
    let steps = m.handle(ended(&a, RunEvent::Succeeded { result_json: None }), at(1));
    assert!(matches!(
        steps.as_slice(),
        [Step::Record { run: RunId(1), .. }]
    ));
    let now = at(27);
    m.handle(Event::Timer, now);
    // The store renewed 1 (finishing: fine) and 9 (unknown here), not 2 (lost).
    assert_eq!(
        m.handle(Event::Renewed(Ok(vec![RunId(1), RunId(9)])), now),
        vec![
            Step::FailOrphan { run: RunId(9), now },
            Step::Cancel {
                run: RunId(2),
                why: "cancelled: node node-a lost this run's lease (it was recovered after the \
                      lease expired); its outcome is not recorded"
                    .into()
            },
            Step::RecoverExpired { now },
        ]
    );
}

#[test]
fn a_run_end_is_decided_recorded_then_published() {
    let mut m = machine();
    to_claim(&mut m, t0());
    let c = claimed(1, 7, t0());
    m.handle(Event::Claimed(Ok(vec![c.clone()])), t0());
    m.handle(Event::NextDue(Ok(None)), t0());
    let end = at(2);
    let steps = m.handle(
        ended(
            &c,
            RunEvent::Cancelled {
                reason: CancelReason::Requested,
            },
        ),
        end,
    );
    let Step::Record {
        run,
        attempt,
        finish,
    } = &steps[0]
    else {
        panic!("{steps:?}")
    };
    assert_eq!((*run, *attempt), (RunId(1), 1));
    assert_eq!(
        **finish,
        RunFinish {
            state: RunState::Cancelled,
            error: Some("cancelled (requested)".into()),
            result_json: None,
            finished_at: end,
            elapsed: Some(Duration::from_millis(5)),
            retry_at: None,
            plugin: None,
        }
    );
    assert_eq!(steps.len(), 1);
    assert_eq!(m.running(), 0, "capacity is free once the execution ended");
    let mut expected = vec![Step::Publish(SchedulerEvent::Finished {
        run: RunId(1),
        job: JobId(7),
        fire_time: t0(),
        attempt: 1,
        state: RunState::Cancelled,
    })];
    expected.push(Step::Prepare {
        now: end,
        horizon: end,
    });
    assert_eq!(
        m.handle(
            Event::RunRecorded {
                run: RunId(1),
                state: Some(RunState::Cancelled)
            },
            end
        ),
        expected
    );
}

#[test]
fn an_outage_backs_off_reports_once_and_reports_the_return() {
    let mut m = machine();
    m.handle(Event::Wake, t0());
    m.handle(Event::Renewed(Err(down())), t0());
    let steps = m.handle(Event::Recovered(Err(down())), t0());
    assert_eq!(
        steps,
        vec![
            Step::Publish(SchedulerEvent::StoreUnavailable {
                error: "renewing leases: connection refused".into()
            }),
            Step::Sleep {
                until: None,
                at_most: Some(Duration::from_millis(500))
            },
        ]
    );
    // The renewal failed, so it is due again at the next pass; the second failure waits 1 s.
    let now = at(1);
    m.handle(Event::Timer, now);
    m.handle(Event::Renewed(Err(down())), now);
    assert_eq!(
        m.handle(Event::Recovered(Ok(0)), now),
        vec![Step::Sleep {
            until: None,
            at_most: Some(Duration::from_secs(1))
        }]
    );
    let now = at(3);
    m.handle(Event::Timer, now);
    m.handle(Event::Renewed(Ok(vec![])), now);
    m.handle(Event::Recovered(Ok(0)), now);
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![
            Step::Publish(SchedulerEvent::StoreRecovered {
                down_for: Duration::from_secs(3)
            }),
            Step::Claim {
                horizon: now,
                limit: 4,
                recurring_only: 0
            },
        ]
    );
}

#[test]
fn a_paused_node_renews_but_neither_prepares_nor_claims() {
    let mut m = machine();
    assert_eq!(
        m.handle(Event::Command(Command::Pause), t0()),
        vec![Step::Renew {
            now: t0(),
            until: at(60)
        }]
    );
    m.handle(Event::Renewed(Ok(vec![])), t0());
    assert_eq!(
        m.handle(Event::Recovered(Ok(0)), t0()),
        vec![Step::ReadNextDue { set: DueSet::All }]
    );
    // Paused: a due instant does not shorten the sleep.
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(at(5)))), t0()),
        sleep(at(27))
    );
    let now = at(1);
    assert_eq!(
        m.handle(Event::Command(Command::Resume), now),
        vec![Step::Prepare { now, horizon: now }]
    );
}

#[test]
fn at_capacity_nothing_is_claimed() {
    let mut m = with_capacity(1);
    renewed_and_recovered(&mut m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    // A full claim: the loop waits for an end without reading the next due time.
    assert_eq!(
        m.handle(Event::Claimed(Ok(vec![claimed(1, 1, t0())])), t0())
            .last(),
        sleep(at(27)).last()
    );
    let now = at(1);
    m.handle(Event::Timer, now);
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![Step::ReadNextDue { set: DueSet::All }]
    );
    // No free slot: the due instant is waited for by a run's end, not by a timer.
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(at(1)))), now),
        sleep(at(27))
    );
}

/// A machine of capacity 2 with a recurring reserve of `reserve`.
fn with_reserve(reserve: usize) -> Machine {
    Machine::new(
        SchedulerConfig {
            capacity: 2,
            recurring_reserve: reserve,
            ..config()
        },
        t0(),
    )
}

fn recurring(c: ClaimedRun) -> ClaimedRun {
    ClaimedRun {
        recurring_fire: true,
        ..c
    }
}

#[test]
fn the_recurring_reserve_is_claimed_for_recurring_fires_only() {
    let mut m = with_reserve(1);
    renewed_and_recovered(&mut m);
    // Capacity 2 + 1 reserved: the claim may take 3, one of them a recurring fire only.
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), t0()),
        vec![Step::Claim {
            horizon: t0(),
            limit: 3,
            recurring_only: 1
        }]
    );
    // Two one-offs fill the capacity; the claim had room for a third (a short chunk ends
    // the claiming).
    let steps = m.handle(
        Event::Claimed(Ok(vec![claimed(1, 1, t0()), claimed(2, 2, t0())])),
        t0(),
    );
    // Only the reserve is free: the next due instant read is that of recurring fires, so a
    // past one-off does not hide the next schedule.
    assert_eq!(
        steps.last(),
        Some(&Step::ReadNextDue {
            set: DueSet::Recurring
        })
    );
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(at(5)))), t0()),
        sleep(ms(at(5), -25))
    );
    let now = ms(at(5), -25);
    m.handle(Event::Timer, now);
    // The whole claim is for recurring fires.
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![Step::Claim {
            horizon: at(5),
            limit: 1,
            recurring_only: 1
        }]
    );
    let cron = recurring(claimed(3, 3, at(5)));
    let steps = m.handle(Event::Claimed(Ok(vec![cron])), now);
    // Capacity and reserve full: nothing is claimable, the due instant waits for an end (a
    // full claim: more may be due now, so the next due instant is not read).
    assert_eq!(steps.last(), sleep(at(27)).last());
    assert_eq!(m.running(), 3, "capacity 2 + the reserved slot");
}

#[test]
fn a_claim_that_fills_all_but_an_empty_reserve_is_a_backlog() {
    let mut m = Machine::new(
        SchedulerConfig {
            capacity: 30,
            recurring_reserve: 1,
            ..config()
        },
        t0(),
    );
    renewed_and_recovered(&mut m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    let runs: Vec<_> = (1..=30).map(|i| claimed(i, i, t0())).collect();
    let steps = m.handle(Event::Claimed(Ok(runs[..8].to_vec())), t0());
    assert_eq!(steps.last(), Some(&claim(t0(), 23, 1)));
    // 22 one-offs fill the capacity; no recurring fire is due for the reserve. The claim is
    // full all the same, but the next recurring fire is not known: it is read.
    let steps = m.handle(Event::Claimed(Ok(runs[8..].to_vec())), t0());
    assert_eq!(
        steps.last(),
        Some(&Step::ReadNextDue {
            set: DueSet::Recurring
        })
    );
    assert_eq!(m.handle(Event::NextDue(Ok(None)), t0()), sleep(at(27)));
    // Twenty end: the next pass (after its wait for the rest of its room, see
    // `a_backlog_is_claimed_in_one_claim_after_a_full_one`) claims the whole room (20 + the
    // reserve) in one claim, not a first chunk of 8.
    let now = ms(t0(), 5);
    for c in &runs[..20] {
        m.handle(ended(c, RunEvent::Succeeded { result_json: None }), now);
    }
    m.handle(recorded(1), now);
    let now = ms(now, 1);
    m.handle(Event::Timer, now);
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![claim(now, 21, 1)]
    );
}

#[test]
fn recurring_fires_fill_the_reserve_before_the_capacity() {
    let mut m = with_reserve(1);
    renewed_and_recovered(&mut m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    // A cron running holds the reserved slot: both capacity slots stay open to anything.
    let steps = m.handle(
        Event::Claimed(Ok(vec![recurring(claimed(1, 1, t0()))])),
        t0(),
    );
    assert_eq!(steps.last(), Some(&Step::ReadNextDue { set: DueSet::All }));
    m.handle(Event::NextDue(Ok(Some(t0()))), t0());
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), t0()),
        vec![Step::Claim {
            horizon: t0(),
            limit: 2,
            recurring_only: 0
        }]
    );
    // A second cron takes a capacity slot: one left, open to anything.
    m.handle(
        Event::Claimed(Ok(vec![recurring(claimed(2, 2, t0()))])),
        t0(),
    );
    m.handle(Event::NextDue(Ok(Some(t0()))), t0());
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), t0()),
        vec![Step::Claim {
            horizon: t0(),
            limit: 1,
            recurring_only: 0
        }]
    );
}

#[test]
fn without_a_reserve_the_capacity_limits_every_run() {
    let mut m = with_reserve(0);
    renewed_and_recovered(&mut m);
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), t0()),
        vec![Step::Claim {
            horizon: t0(),
            limit: 2,
            recurring_only: 0
        }]
    );
    let steps = m.handle(
        Event::Claimed(Ok(vec![claimed(1, 1, t0()), claimed(2, 2, t0())])),
        t0(),
    );
    // Full, and no slot left for anything: the loop waits for an end.
    assert_eq!(steps.last(), sleep(at(27)).last());
}

#[test]
fn cancel_commands_answer_whether_the_run_is_here() {
    let mut m = machine();
    to_claim(&mut m, t0());
    m.handle(
        Event::Claimed(Ok(vec![claimed(1, 7, t0()), claimed(2, 7, t0())])),
        t0(),
    );
    m.handle(Event::NextDue(Ok(None)), t0());
    assert_eq!(
        m.handle(
            Event::Command(Command::CancelRun {
                run: RunId(1),
                why: "operator".into()
            }),
            t0()
        ),
        vec![
            Step::Cancel {
                run: RunId(1),
                why: "cancelled by request: operator".into()
            },
            Step::Reply(true)
        ]
    );
    assert_eq!(
        m.handle(
            Event::Command(Command::CancelRun {
                run: RunId(5),
                why: "operator".into()
            }),
            t0()
        ),
        vec![Step::Reply(false)]
    );
    assert_eq!(
        m.handle(Event::Command(Command::CancelJob { job: JobId(7) }), t0()),
        vec![
            Step::Cancel {
                run: RunId(1),
                why: "cancelled: job 7 is being removed".into()
            },
            Step::Cancel {
                run: RunId(2),
                why: "cancelled: job 7 is being removed".into()
            },
            Step::Reply(true)
        ]
    );
}

#[test]
fn cancel_running_asks_each_run_once_and_warns_for_other_nodes() {
    let mut m = machine();
    to_claim(&mut m, t0());
    m.handle(Event::Claimed(Ok(vec![claimed(1, 7, t0())])), t0());
    m.handle(Event::NextDue(Ok(None)), t0());
    let now = at(10);
    m.handle(Event::Wake, now);
    let prepared = || Prepared {
        cancel_running: vec![(JobId(7), now), (JobId(8), now)],
        ..Prepared::default()
    };
    // Job 7's run is here: cancelled, and the pass prepares again; job 8's is elsewhere.
    assert_eq!(
        m.handle(Event::Prepared(Ok(prepared())), now),
        vec![
            Step::Cancel {
                run: RunId(1),
                why: format!(
                    "cancelled: overlap policy cancel-running starts the job's fire at {now}"
                )
            },
            Step::Prepare { now, horizon: now },
        ]
    );
    // Asked already: not again, and nothing changed, so the pass claims.
    assert_eq!(
        m.handle(Event::Prepared(Ok(prepared())), now),
        vec![Step::Claim {
            horizon: now,
            limit: 3,
            recurring_only: 0
        }]
    );
}

#[test]
fn a_shutdown_drains_then_stops_the_executor_then_exits() {
    let mut m = machine();
    to_claim(&mut m, t0());
    let c = claimed(1, 7, t0());
    m.handle(Event::Claimed(Ok(vec![c.clone()])), t0());
    m.handle(Event::NextDue(Ok(None)), t0());
    let now = at(1);
    assert_eq!(
        m.handle(
            Event::Command(Command::Shutdown {
                grace: Duration::from_secs(30)
            }),
            now
        ),
        vec![
            Step::DrainFor(Duration::from_secs(30)),
            Step::Sleep {
                until: Some(at(27)),
                at_most: None
            }
        ]
    );
    assert_eq!(m.stop_grace(), Some(Duration::from_secs(30)));
    // A second one shortens the drain, a longer one does not lengthen it.
    assert_eq!(
        m.handle(
            Event::Command(Command::Shutdown {
                grace: Duration::ZERO
            }),
            now
        ),
        vec![Step::DrainFor(Duration::ZERO)]
    );
    assert_eq!(
        m.handle(
            Event::Command(Command::Shutdown {
                grace: Duration::from_secs(60)
            }),
            now
        ),
        vec![Step::DrainFor(Duration::ZERO)]
    );
    // Leases are renewed while draining.
    let renew_at = at(27);
    assert_eq!(
        m.handle(Event::Timer, renew_at),
        vec![Step::Renew {
            now: renew_at,
            until: at(87)
        }]
    );
    assert_eq!(
        m.handle(Event::Renewed(Ok(vec![RunId(1)])), renew_at),
        vec![Step::Sleep {
            until: Some(at(54)),
            at_most: None
        }]
    );
    assert_eq!(
        m.handle(Event::DrainDeadline, at(28)),
        vec![Step::StopExecutor]
    );
    // The cancelled run ends and is recorded; then the loop exits.
    let steps = m.handle(
        ended(
            &c,
            RunEvent::Cancelled {
                reason: CancelReason::Shutdown,
            },
        ),
        at(29),
    );
    assert!(matches!(steps.as_slice(), [Step::Record { .. }]));
    assert_eq!(m.handle(Event::ExecutorStopped, at(29)), vec![]);
    assert_eq!(
        m.handle(
            Event::RunRecorded {
                run: RunId(1),
                state: Some(RunState::Cancelled)
            },
            at(29)
        ),
        vec![
            Step::Publish(SchedulerEvent::Finished {
                run: RunId(1),
                job: JobId(7),
                fire_time: t0(),
                attempt: 1,
                state: RunState::Cancelled,
            }),
            Step::Exit
        ]
    );
    assert_eq!(m.handle(Event::Wake, at(30)), vec![]);
}

#[test]
fn a_shutdown_during_a_pass_ends_it_at_the_next_boundary() {
    let mut m = machine();
    to_claim(&mut m, t0());
    assert_eq!(
        m.handle(
            Event::Command(Command::Shutdown {
                grace: Duration::from_secs(5)
            }),
            t0()
        ),
        vec![]
    );
    // The runs the claim took still start; nothing more is read; nothing runs: stop.
    let c = claimed(1, 7, t0());
    let mut expected = started(&c);
    expected.extend([
        Step::DrainFor(Duration::from_secs(5)),
        Step::Sleep {
            until: Some(at(27)),
            at_most: None,
        },
    ]);
    assert_eq!(m.handle(Event::Claimed(Ok(vec![c])), t0()), expected);
}

#[test]
fn an_idle_shutdown_stops_at_once() {
    let mut m = machine();
    to_claim(&mut m, t0());
    m.handle(Event::Claimed(Ok(vec![])), t0());
    m.handle(Event::NextDue(Ok(None)), t0());
    assert_eq!(
        m.handle(
            Event::Command(Command::Shutdown {
                grace: Duration::from_secs(5)
            }),
            t0()
        ),
        vec![Step::DrainFor(Duration::from_secs(5)), Step::StopExecutor]
    );
    assert_eq!(m.handle(Event::ExecutorStopped, t0()), vec![Step::Exit]);
}

#[test]
fn a_refused_renewal_is_a_takeover_reported_once_and_drained() {
    let mut m = machine();
    let conflict = || StoreError::conflict("node node-a was taken over");
    m.handle(Event::Wake, t0());
    assert_eq!(
        m.handle(Event::Renewed(Err(conflict())), t0()),
        vec![
            Step::Publish(SchedulerEvent::TakenOver {
                message: "node node-a was taken over".into()
            }),
            Step::RecoverExpired { now: t0() },
        ]
    );
    // Claims nothing more: the pass ends in the drain, with half a lease of grace.
    assert_eq!(
        m.handle(Event::Recovered(Ok(0)), t0()),
        vec![Step::DrainFor(Duration::from_secs(30)), Step::StopExecutor]
    );
}

#[test]
fn an_end_the_core_refuses_is_left_for_the_orphan_check() {
    let mut m = machine();
    to_claim(&mut m, t0());
    let c = claimed(1, 7, t0());
    m.handle(Event::Claimed(Ok(vec![c.clone()])), t0());
    m.handle(Event::NextDue(Ok(None)), t0());
    let mut pending = c.clone();
    pending.run.state = RunState::Pending;
    // A success of a run that is not running is illegal: nothing recorded, a pass instead.
    let now = at(1);
    assert_eq!(
        m.handle(
            ended(&pending, RunEvent::Succeeded { result_json: None }),
            now
        ),
        vec![Step::Prepare { now, horizon: now }]
    );
    assert_eq!(m.running(), 0);
}

/// A machine of capacity 4 that may claim up to 8 runs ahead of a slot.
fn with_claim_ahead() -> Machine {
    Machine::new(
        SchedulerConfig {
            claim_ahead: 8,
            ..config()
        },
        t0(),
    )
}

/// `c` ended successfully after its plugin ran for `took`.
fn ended_after(c: &ClaimedRun, took: Duration) -> Event {
    Event::RunEnded(Box::new(Ended {
        elapsed: Some(took),
        ..*ended_box(c)
    }))
}

fn ended_box(c: &ClaimedRun) -> Box<Ended> {
    match ended(c, RunEvent::Succeeded { result_json: None }) {
        Event::RunEnded(e) => e,
        _ => unreachable!(),
    }
}

/// Drives a fresh machine of capacity 4 into a backlog: its first pass claims 4 runs (full)
/// in 4 ms. Returns them.
fn backlog_of_four(m: &mut Machine) -> Vec<ClaimedRun> {
    to_claim(m, t0());
    let runs: Vec<_> = (1..=4).map(|i| claimed(i, i, t0())).collect();
    // Full, no slot free: wait for an end without reading the next due instant.
    assert_eq!(
        m.handle(Event::Claimed(Ok(runs.clone())), ms(t0(), 4))
            .last(),
        sleep(at(27)).last()
    );
    runs
}

#[test]
fn claim_ahead_takes_what_the_slots_finish_during_a_pass() {
    let mut m = with_claim_ahead();
    let runs = backlog_of_four(&mut m);
    // A run of 1 ms: the 4 slots finish 16 runs while a pass of 4 ms takes, so 8 (the bound)
    // may wait for a slot. With 3 in flight, 9 are free: the next pass starts at once (no
    // gathering: the whole capacity is free) and claims them in one claim.
    let now = ms(t0(), 5);
    let steps = m.handle(ended_after(&runs[0], Duration::from_millis(1)), now);
    assert!(matches!(
        steps.as_slice(),
        [Step::Record { run: RunId(1), .. }, Step::Prepare { .. }]
    ));
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![claim(now, 9, 0)]
    );
    let more: Vec<_> = (5..=13).map(|i| claimed(i, i, now)).collect();
    m.handle(Event::Claimed(Ok(more)), ms(now, 4));
    assert_eq!(m.running(), 12, "4 slots and 8 claimed ahead");
}

#[test]
fn claim_ahead_ends_with_the_backlog() {
    let mut m = with_claim_ahead();
    let runs = backlog_of_four(&mut m);
    let now = ms(t0(), 5);
    m.handle(ended_after(&runs[0], Duration::from_millis(1)), now);
    m.handle(Event::Prepared(Ok(Prepared::default())), now);
    // The claim of 9 takes 2: everything due was claimed, the backlog is over, and with it
    // the claiming ahead. 5 runs are in flight for 4 slots: nothing more is claimed until
    // they drain below the capacity.
    let two = vec![claimed(5, 5, now), claimed(6, 6, now)];
    assert_eq!(
        m.handle(Event::Claimed(Ok(two)), now).last(),
        Some(&Step::ReadNextDue { set: DueSet::All })
    );
    assert_eq!(m.ahead(), 0);
    m.handle(Event::NextDue(Ok(Some(ms(now, 1)))), now);
    let now = ms(now, 1);
    assert_eq!(
        m.handle(Event::Timer, now),
        vec![Step::Prepare { now, horizon: now }]
    );
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![Step::ReadNextDue { set: DueSet::All }],
        "5 in flight, capacity 4: no claim"
    );
}

#[test]
fn claim_ahead_never_takes_long_runs() {
    let mut m = with_claim_ahead();
    let runs = backlog_of_four(&mut m);
    // A run of 1 s: the slots finish none while a pass of 4 ms takes, so nothing is claimed
    // ahead. The first end frees a quarter of the room: the pass gathers as before.
    let now = ms(t0(), 1_005);
    let steps = m.handle(ended_after(&runs[0], Duration::from_secs(1)), now);
    assert_eq!(
        steps.last(),
        Some(&Step::Sleep {
            until: Some(ms(now, 4)),
            at_most: Some(Duration::from_millis(4))
        })
    );
    let now = ms(now, 4);
    assert_eq!(
        m.handle(Event::Timer, now),
        vec![Step::Prepare { now, horizon: now }]
    );
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![claim(now, 1, 0)],
        "the free slot only"
    );
}

#[test]
fn claim_ahead_waits_for_a_run_time_and_a_backlog() {
    // Before any run ended, the run time is not known: a backlog's first passes claim the
    // free slots only.
    let mut m = with_claim_ahead();
    let runs = backlog_of_four(&mut m);
    assert_eq!(m.ahead(), 0, "no run ended yet");
    m.handle(ended_after(&runs[0], Duration::ZERO), ms(t0(), 5));
    // A run that took no measurable time: the bound.
    assert_eq!(m.ahead(), 8);
    // Zero: never more than the slots.
    let mut m = machine();
    let runs = backlog_of_four(&mut m);
    m.handle(ended_after(&runs[0], Duration::ZERO), ms(t0(), 5));
    assert_eq!(m.ahead(), 0);
}

// ---------------------------------------------------------------------------------------------
// A crowded instant claimed ahead beyond the slots (`SchedulerConfig::lookahead_batch`)

fn with_lookahead_batch(batch: usize) -> Machine {
    Machine::new(
        SchedulerConfig {
            lookahead_batch: batch,
            ..config()
        },
        t0(),
    )
}

/// `n` recurring fires due at `fire`, run ids from `first`.
fn fires(first: i64, n: i64, fire: Timestamp) -> Vec<ClaimedRun> {
    (first..first + n)
        .map(|i| recurring(claimed(i, i, fire)))
        .collect()
}

/// Drives a fresh machine to its sleep before the instant at(10), then wakes it at the start
/// of the instant's window: the steps of that wake.
fn woken_before_the_instant(m: &mut Machine, wake: Timestamp) -> Vec<Step> {
    renewed_and_recovered(m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    m.handle(Event::Claimed(Ok(vec![])), t0());
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(at(10)))), t0()),
        sleep(wake)
    );
    m.handle(Event::Timer, wake)
}

/// Asserts that `steps` end with the preparation of a pass at `now` that claims ahead of
/// `instant`, answers it with nothing to change and returns what the machine asks next.
fn prepared_ahead(
    m: &mut Machine,
    steps: &[Step],
    now: Timestamp,
    instant: Timestamp,
) -> Vec<Step> {
    assert_eq!(
        steps.last(),
        Some(&Step::Prepare {
            now,
            horizon: instant
        })
    );
    m.handle(Event::Prepared(Ok(Prepared::default())), now)
}

#[test]
fn a_crowded_instant_is_claimed_ahead_beyond_the_slots() {
    let mut m = with_lookahead_batch(100);
    let now = ms(at(10), -25);
    assert_eq!(
        woken_before_the_instant(&mut m, now),
        vec![Step::Prepare {
            now,
            horizon: at(10)
        }]
    );
    // Room: the 4 slots and the 100 fires that may wait beyond them, at most a claim batch
    // (32); beyond the slots only recurring fires may take it.
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![claim(at(10), 8, 4)]
    );
    // The fires claimed wait for their instant holding no slot: the four slots are still
    // free, and the next chunk takes the rest of the batch.
    let steps = m.handle(Event::Claimed(Ok(fires(1, 8, at(10)))), now);
    assert_eq!(steps.last(), Some(&claim(at(10), 24, 20)));
    // The pass's room is claimed: more of the instant may be due, so the next pass claims
    // ahead of it at once, again up to it, in one claim (a backlog).
    let later = ms(at(10), -20);
    let steps = m.handle(Event::Claimed(Ok(fires(9, 24, at(10)))), later);
    assert_eq!(
        prepared_ahead(&mut m, &steps, later, at(10)),
        vec![claim(at(10), 32, 28)]
    );
    // Fewer than asked: every fire due by the instant is claimed; the next due instant is read.
    let end = ms(at(10), -15);
    let steps = m.handle(Event::Claimed(Ok(fires(33, 10, at(10)))), end);
    assert_eq!(steps.last(), Some(&Step::ReadNextDue { set: DueSet::All }));
    assert_eq!(m.running(), 42);
    // The crowd's claims took 10 ms (from -25 to -15 ms): the next instant's window is
    // 25 + 1.5 × 10 ms, so its claims end about 30 ms before it.
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(at(11)))), end),
        sleep(ms(at(11), -40))
    );
}

#[test]
fn the_fires_claimed_ahead_hold_slots_once_their_instant_comes() {
    let mut m = with_lookahead_batch(100);
    let now = ms(at(10), -25);
    woken_before_the_instant(&mut m, now);
    m.handle(Event::Prepared(Ok(Prepared::default())), now);
    m.handle(Event::Claimed(Ok(fires(1, 6, at(10)))), now);
    // At the instant the six fires are due: 6 runs for 4 slots, none free. A wake claims
    // nothing (no room) and reads the next due instant, which waits for an end.
    assert_eq!(m.running(), 6);
    m.handle(Event::NextDue(Ok(Some(at(11)))), now);
    let steps = m.handle(Event::Wake, at(10));
    assert_eq!(
        steps,
        vec![Step::Prepare {
            now: at(10),
            horizon: at(10)
        }]
    );
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), at(10)),
        vec![Step::ReadNextDue { set: DueSet::All }]
    );
}

#[test]
fn the_fires_claimed_ahead_are_bounded_and_beyond_the_bound_hold_slots() {
    let mut m = with_lookahead_batch(10);
    let now = ms(at(10), -25);
    woken_before_the_instant(&mut m, now);
    // Room: 4 slots + 10 ahead, in one chunk (no short tail claim).
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![claim(at(10), 14, 10)]
    );
    // 14 waiting for a bound of 10: 4 hold the slots. Nothing is free: the pass sleeps
    // until an end (or the renewal).
    let steps = m.handle(Event::Claimed(Ok(fires(1, 14, at(10)))), now);
    assert_eq!(steps.last(), sleep(at(27)).last());
    assert_eq!(m.running(), 14);
    // One is cancelled before its instant: one slot frees, none of the bound. The next pass
    // (at once: its job neither recurs nor has a group), still ahead of the instant, may
    // claim one.
    let later = ms(at(10), -20);
    let first = recurring(claimed(1, 1, at(10)));
    let steps = m.handle(
        ended(
            &first,
            RunEvent::Cancelled {
                reason: CancelReason::Requested,
            },
        ),
        later,
    );
    assert_eq!(
        prepared_ahead(&mut m, &steps, later, at(10)),
        vec![claim(at(10), 1, 0)]
    );
}

#[test]
fn a_lone_fire_keeps_the_plain_lookahead() {
    let mut m = with_lookahead_batch(100);
    let now = ms(at(10), -25);
    woken_before_the_instant(&mut m, now);
    m.handle(Event::Prepared(Ok(Prepared::default())), now);
    // Fewer fires than the first chunk: the instant took no more than its first claim.
    let steps = m.handle(Event::Claimed(Ok(fires(1, 2, at(10)))), now);
    assert_eq!(steps.last(), Some(&Step::ReadNextDue { set: DueSet::All }));
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(at(11)))), now),
        sleep(ms(at(11), -25))
    );
}

#[test]
fn long_runs_are_not_claimed_ahead_beyond_the_slots() {
    let mut m = with_lookahead_batch(100);
    // A run of 20 ms ended: the 4 slots finish 5 such runs within the 25 ms window, so at
    // most 5 fires wait beyond them.
    let c = claimed(90, 90, t0());
    m.in_flight.insert(
        RunId(90),
        super::Flight {
            job: JobId(90),
            fire_time: t0(),
            attempt: 1,
            cancel_asked: false,
            recurring: false,
            ends_early: false,
            start: t0(),
        },
    );
    m.handle(ended_after(&c, Duration::from_millis(20)), t0());
    m.handle(recorded(90), t0());
    let now = ms(at(10), -25);
    m.handle(Event::Renewed(Ok(vec![])), t0());
    m.handle(Event::Recovered(Ok(0)), t0());
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    m.handle(Event::Claimed(Ok(vec![])), t0());
    m.handle(Event::NextDue(Ok(Some(at(10)))), t0());
    m.handle(Event::Timer, now);
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![claim(at(10), 9, 5)]
    );
}

#[test]
fn the_window_rises_at_once_falls_by_quarters_and_is_bounded() {
    let mut m = with_lookahead_batch(100);
    assert_eq!(m.window(), Duration::from_millis(25), "no crowd yet");
    let claimed_in = |m: &mut Machine, instant: Timestamp, began: i64, took: i64| {
        m.crowd = Some((instant, ms(instant, began)));
        m.crowd_claimed(ms(instant, began + took));
    };
    // An instant whose claims took 100 ms: the next window is 25 + 1.5 × 100 ms.
    claimed_in(&mut m, at(10), -25, 100);
    assert_eq!(m.window(), Duration::from_millis(175));
    // A quicker one (10 ms) lowers the span by a quarter only: 75 ms.
    claimed_in(&mut m, at(11), -175, 10);
    assert_eq!(m.window(), Duration::from_micros(137_500));
    // A slower one raises it at once; the window never exceeds MAX_LOOKAHEAD.
    claimed_in(&mut m, at(12), -137, 2_000);
    assert_eq!(m.window(), crate::scheduler::MAX_LOOKAHEAD);
    // Off, the window is the plain lookahead whatever the crowds took.
    let mut off = machine();
    claimed_in(&mut off, at(10), -25, 100);
    assert_eq!(off.window(), Duration::from_millis(25));
}

/// `c`, a recurring fire whose job fires next at `next`.
fn recurring_next_at(c: ClaimedRun, next: Timestamp) -> ClaimedRun {
    let mut c = recurring(c);
    c.job.next_fire = Some(next);
    c
}

/// A fresh machine's first pass at t0 claims its whole room (four slots) full: two one-offs
/// and two recurring fires whose jobs fire next at at(1). A backlog: no next due is read.
fn backlog_with_crons_next_at_one(m: &mut Machine) -> Vec<Step> {
    renewed_and_recovered(m);
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), t0()),
        vec![claim(t0(), 4, 0)]
    );
    let runs = vec![
        claimed(1, 1, t0()),
        claimed(2, 2, t0()),
        recurring_next_at(claimed(3, 3, t0()), at(1)),
        recurring_next_at(claimed(4, 4, t0()), at(1)),
    ];
    let steps = m.handle(Event::Claimed(Ok(runs)), t0());
    assert!(!steps.iter().any(|s| matches!(s, Step::ReadNextDue { .. })));
    steps
}

#[test]
fn a_backlog_claims_the_next_recurring_instant_ahead_of_it() {
    let mut m = with_lookahead_batch(100);
    // Every slot taken: the node wakes when the window of the crons' next instant opens
    // (it knows the instant from their claim), not at the renewal.
    let wake = ms(at(1), -25);
    let steps = backlog_with_crons_next_at_one(&mut m);
    assert_eq!(steps.last(), sleep(wake).last());
    // That pass claims up to the instant, beyond the slots, for recurring fires only.
    let steps = m.handle(Event::Timer, wake);
    assert_eq!(
        prepared_ahead(&mut m, &steps, wake, at(1)),
        vec![claim(at(1), 32, 32)]
    );
    // The instant's fires are claimed (their jobs move on to at(2)); the claim came back
    // short, so the next due instant is read as usual.
    let crons: Vec<_> = (5..15)
        .map(|i| recurring_next_at(claimed(i, i, at(1)), at(2)))
        .collect();
    let steps = m.handle(Event::Claimed(Ok(crons)), wake);
    assert_eq!(steps.last(), Some(&Step::ReadNextDue { set: DueSet::All }));
    // The claim reached at(1): what the backlog's passes plan next is at(2), from the
    // fires just claimed.
    assert_eq!(m.recurring_next, Some(at(2)));
}

#[test]
fn without_lookahead_batch_a_backlog_claims_the_next_recurring_instant_in_its_slots() {
    let mut m = machine();
    // No fire may wait beyond the slots: a node at capacity waits for an end as before.
    let steps = backlog_with_crons_next_at_one(&mut m);
    assert_eq!(steps.last(), sleep(at(27)).last());
    // An end within the instant's window: the pass claims up to the instant, in its slots.
    let now = ms(at(1), -20);
    let steps = m.handle(
        ended(
            &claimed(1, 1, t0()),
            RunEvent::Succeeded { result_json: None },
        ),
        now,
    );
    assert_eq!(
        prepared_ahead(&mut m, &steps, now, at(1)),
        vec![claim(at(1), 1, 0)]
    );
    // A one-off fills it: fewer recurring fires than their share, so every one due by the
    // instant is claimed and the passes stop claiming up to it (its fires are all here).
    let steps = m.handle(Event::Claimed(Ok(vec![claimed(9, 9, t0())])), now);
    assert_eq!(steps.last(), sleep(at(27)).last());
    assert_eq!(m.planned, None);
}

#[test]
fn a_crowded_instant_claimed_behind_it_widens_the_next_window() {
    let mut m = with_lookahead_batch(100);
    // Four fires of t0 fill the first claim: more of the instant may be due.
    renewed_and_recovered(&mut m);
    m.handle(Event::Prepared(Ok(Prepared::default())), t0());
    let crons: Vec<_> = (1..=4)
        .map(|i| recurring_next_at(claimed(i, i, t0()), at(1)))
        .collect();
    let steps = m.handle(Event::Claimed(Ok(crons.clone())), t0());
    assert_eq!(steps.last(), sleep(ms(at(1), -25)).last());
    // They end 100 ms later; the pass then takes the instant's last fire and one-offs.
    let now = ms(t0(), 100);
    let mut steps = Vec::new();
    for c in &crons {
        // The last end frees the whole room: no gathering.
        steps = m.handle(ended(c, RunEvent::Succeeded { result_json: None }), now);
    }
    assert_eq!(steps.last(), Some(&Step::Prepare { now, horizon: now }));
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![claim(now, 4, 0)]
    );
    let mut runs = vec![recurring_next_at(claimed(5, 5, t0()), at(1))];
    runs.extend((6..=8).map(|i| claimed(i, i, t0())));
    // The instant's claims took 100 ms: the window before at(1) is 25 + 1.5 × 100 ms.
    let steps = m.handle(Event::Claimed(Ok(runs)), now);
    assert_eq!(steps.last(), sleep(ms(at(1), -175)).last());
}

#[test]
fn a_fire_to_come_of_a_busy_job_is_decided_and_claimed_at_its_time() {
    let mut m = with_lookahead_batch(100);
    let now = ms(at(10), -25);
    woken_before_the_instant(&mut m, now);
    // The preparation up to at(10) finds a job whose run is in flight: its fire is left to
    // its time, so the pass prepares again up to now and claims nothing ahead.
    let held = Prepared {
        held: Some(at(10)),
        ..Prepared::default()
    };
    assert_eq!(
        m.handle(Event::Prepared(Ok(held)), now),
        vec![Step::Prepare { now, horizon: now }]
    );
    assert_eq!(
        m.handle(Event::Prepared(Ok(Prepared::default())), now),
        vec![claim(now, 4, 0)]
    );
    // Nothing due now: the loop sleeps to the instant itself, not to its window.
    m.handle(Event::Claimed(Ok(vec![])), now);
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(at(10)))), now),
        sleep(at(10))
    );
    // At the instant the hold is over: its fires are decided and claimed then.
    assert_eq!(
        m.handle(Event::Timer, at(10)),
        vec![Step::Prepare {
            now: at(10),
            horizon: at(10)
        }]
    );
    // And the next instant is claimed ahead again, at its window (its 25 ms, widened by the
    // 25 ms the held instant's claims took from its first pass).
    m.handle(Event::Prepared(Ok(Prepared::default())), at(10));
    m.handle(Event::Claimed(Ok(fires(1, 2, at(10)))), at(10));
    assert_eq!(m.window(), Duration::from_micros(62_500));
    assert_eq!(
        m.handle(Event::NextDue(Ok(Some(at(11)))), at(10)),
        sleep(
            at(11)
                .checked_sub(SignedDuration::from_micros(62_500))
                .unwrap()
        )
    );
}
