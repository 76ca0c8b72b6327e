//! B1: the cost of "when does this cron expression fire next?", takt against the `cron` 0.17 and
//! `croner` 4 crates.
//!
//! For each expression, from one fixed start instant (2026-03-14T10:17:23Z):
//!
//! * `b1/single/<expr>/<impl>`: one next-fire call;
//! * `b1/chain100/<expr>/<impl>`: 100 successive next-fire calls, each from the previous fire.
//!
//! Implementations: `takt-civil` ([`CronExpr::next_civil`], no zone), `takt-utc` and
//! `takt-berlin` (the full [`Schedule::next_after`] in UTC and in Europe/Berlin), `cron`
//! (`Schedule::after(&t).next()` with `chrono::Utc`; it has no zone database of its own) and
//! `croner` (`Cron::find_next_occurrence(&t, false)` with `DateTime<Utc>`). A peer that lacks a
//! construct (`cron` has no `#` or `L`) is left out of that row.
//!
//! A counting global allocator then measures allocations per call outside criterion, and a
//! table of them is printed last. Run with `cargo bench -p takt-core --bench next_fire`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::str::FromStr as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeZone as _, Utc};
use criterion::Criterion;
use takt_core::Timestamp;
use takt_core::civil::Civil;
use takt_core::schedule::cron::CronExpr;
use takt_core::schedule::{Rule, Schedule, Zone};

/// Counts every allocation (and reallocation) made by the process.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is exactly `System`'s; counting touches only an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged, see above.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged, see above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged, see above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged, see above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One benchmarked expression: a short name for the group, our text, and the peers' texts
/// (`None` where the peer lacks the construct).
struct Case {
    name: &'static str,
    takt: &'static str,
    cron: Option<&'static str>,
    croner: Option<&'static str>,
}

const CASES: &[Case] = &[
    Case {
        name: "every-minute",
        takt: "0 * * * * *",
        cron: Some("0 * * * * *"),
        croner: Some("0 * * * * *"),
    },
    Case {
        name: "every-5-minutes",
        takt: "0 */5 * * * *",
        cron: Some("0 */5 * * * *"),
        croner: Some("0 */5 * * * *"),
    },
    Case {
        name: "daily-0200",
        takt: "0 0 2 * * *",
        cron: Some("0 0 2 * * *"),
        croner: Some("0 0 2 * * *"),
    },
    Case {
        name: "weekdays-0930",
        takt: "0 30 9 * * MON-FRI",
        cron: Some("0 30 9 * * MON-FRI"),
        croner: Some("0 30 9 * * MON-FRI"),
    },
    Case {
        name: "third-friday",
        takt: "0 0 12 ? * FRI#3",
        cron: None,
        croner: Some("0 0 12 ? * FRI#3"),
    },
    Case {
        name: "last-day",
        takt: "0 0 0 L * ?",
        cron: None,
        croner: Some("0 0 0 L * ?"),
    },
    Case {
        name: "leap-day",
        takt: "0 0 0 29 2 *",
        cron: Some("0 0 0 29 2 *"),
        croner: Some("0 0 0 29 2 *"),
    },
    Case {
        name: "years-2030-2040",
        takt: "0 0 6 1 * ? 2030-2040",
        cron: Some("0 0 6 1 * ? 2030-2040"),
        croner: Some("0 0 6 1 * ? 2030-2040"),
    },
];

/// The start instant shared by every implementation: 2026-03-14T10:17:23Z, a Saturday two weeks
/// before Berlin's spring-forward gap, so daily chains cross it.
const START: i64 = 1_773_483_443;

const CHAIN: usize = 100;

/// One expression, ready in every implementation that supports it.
struct Prepared {
    name: &'static str,
    expr: CronExpr,
    utc: Schedule,
    berlin: Schedule,
    cron: Option<cron::Schedule>,
    croner: Option<croner::Cron>,
}

fn prepare() -> Vec<Prepared> {
    let berlin = Zone::get("Europe/Berlin").expect("bundled zone");
    CASES
        .iter()
        .map(|c| {
            let expr = CronExpr::parse(c.takt).expect("takt parses");
            Prepared {
                name: c.name,
                utc: Schedule::new(Rule::Cron(expr.clone()), Zone::utc()),
                berlin: Schedule::new(Rule::Cron(expr.clone()), berlin.clone()),
                expr,
                cron: c
                    .cron
                    .map(|t| cron::Schedule::from_str(t).expect("cron parses")),
                croner: c
                    .croner
                    .map(|t| croner::Cron::from_str(t).expect("croner parses")),
            }
        })
        .collect()
}

fn start_ts() -> Timestamp {
    Timestamp::from_second(START).expect("in range")
}

fn start_chrono() -> DateTime<Utc> {
    Utc.timestamp_opt(START, 0).single().expect("in range")
}

/// The civil time the civil-level search starts from: one second after the start, because
/// `next_civil` is inclusive and every other API is strictly-after.
fn start_civil() -> Civil {
    Civil::from_epoch_seconds(START + 1)
}

fn takt_civil_chain(e: &CronExpr) -> usize {
    let mut from = start_civil();
    for i in 0..CHAIN {
        match e.next_civil(from) {
            Some(c) => from = c.add_seconds(1),
            None => return i,
        }
    }
    CHAIN
}

fn takt_schedule_chain(s: &Schedule) -> usize {
    let mut t = start_ts();
    for i in 0..CHAIN {
        match s.next_after(t) {
            Some(o) => t = o.at,
            None => return i,
        }
    }
    CHAIN
}

fn cron_chain(s: &cron::Schedule) -> usize {
    s.after(&start_chrono()).take(CHAIN).count()
}

fn croner_chain(c: &croner::Cron) -> usize {
    let mut t = start_chrono();
    for i in 0..CHAIN {
        match c.find_next_occurrence(&t, false) {
            Ok(n) => t = n,
            Err(_) => return i,
        }
    }
    CHAIN
}

/// Before timing anything, every implementation must name the same first fire (in UTC).
fn check_agreement(cases: &[Prepared]) {
    for p in cases {
        let civil = p
            .expr
            .next_civil(start_civil())
            .map(|c| c.to_epoch_seconds());
        let utc = p.utc.next_after(start_ts()).map(|o| o.at.as_second());
        assert_eq!(civil, utc, "{}: civil and utc schedule differ", p.name);
        if let Some(s) = &p.cron {
            let t = s.after(&start_chrono()).next().map(|t| t.timestamp());
            assert_eq!(t, utc, "{}: cron differs", p.name);
        }
        if let Some(c) = &p.croner {
            let t = c.find_next_occurrence(&start_chrono(), false).ok();
            assert_eq!(t.map(|t| t.timestamp()), utc, "{}: croner differs", p.name);
        }
    }
}

fn bench_single(c: &mut Criterion, cases: &[Prepared]) {
    let (ts, dt, from) = (start_ts(), start_chrono(), start_civil());
    for p in cases {
        let mut g = c.benchmark_group(format!("b1/single/{}", p.name));
        g.bench_function("takt-civil", |b| {
            b.iter(|| black_box(&p.expr).next_civil(black_box(from)))
        });
        g.bench_function("takt-utc", |b| {
            b.iter(|| black_box(&p.utc).next_after(black_box(ts)))
        });
        g.bench_function("takt-berlin", |b| {
            b.iter(|| black_box(&p.berlin).next_after(black_box(ts)))
        });
        if let Some(s) = &p.cron {
            g.bench_function("cron", |b| {
                b.iter(|| black_box(s).after(black_box(&dt)).next())
            });
        }
        if let Some(cr) = &p.croner {
            g.bench_function("croner", |b| {
                b.iter(|| black_box(cr).find_next_occurrence(black_box(&dt), false))
            });
        }
        g.finish();
    }
}

fn bench_chain(c: &mut Criterion, cases: &[Prepared]) {
    for p in cases {
        let mut g = c.benchmark_group(format!("b1/chain100/{}", p.name));
        g.bench_function("takt-civil", |b| {
            b.iter(|| takt_civil_chain(black_box(&p.expr)))
        });
        g.bench_function("takt-utc", |b| {
            b.iter(|| takt_schedule_chain(black_box(&p.utc)))
        });
        g.bench_function("takt-berlin", |b| {
            b.iter(|| takt_schedule_chain(black_box(&p.berlin)))
        });
        if let Some(s) = &p.cron {
            g.bench_function("cron", |b| b.iter(|| cron_chain(black_box(s))));
        }
        if let Some(cr) = &p.croner {
            g.bench_function("croner", |b| b.iter(|| croner_chain(black_box(cr))));
        }
        g.finish();
    }
}

/// Allocations per call of `f`, averaged over many calls after one warm-up call (which may fill
/// lazily initialised tables).
fn allocations_per_call<T>(mut f: impl FnMut() -> T) -> f64 {
    const CALLS: u64 = 1000;
    black_box(f());
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..CALLS {
        black_box(f());
    }
    (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / CALLS as f64
}

/// Prints allocations per single call and per fire in a chain of 100, and how many fires each
/// chain produced (a peer whose calendar ends early stops short).
fn allocation_table(cases: &[Prepared]) {
    let (ts, dt, from) = (start_ts(), start_chrono(), start_civil());
    // The counter must see an allocation that escapes, or every zero below means nothing.
    let probe = allocations_per_call(|| Vec::<u64>::with_capacity(4));
    assert_eq!(probe, 1.0, "the counting allocator is not in use");
    println!();
    println!(
        "B1 allocations (single call: per call; chain: per fire; fires = length of the chain)"
    );
    println!(
        "{:<18} {:<12} {:>14} {:>14} {:>7}",
        "expr", "impl", "allocs/call", "allocs/fire", "fires"
    );
    for p in cases {
        let row = |imp: &str, single: f64, chain: f64, fires: usize| {
            let per_fire = if fires == 0 {
                0.0
            } else {
                chain / fires as f64
            };
            println!(
                "{:<18} {:<12} {single:>14.2} {per_fire:>14.2} {fires:>7}",
                p.name, imp
            );
        };
        row(
            "takt-civil",
            allocations_per_call(|| p.expr.next_civil(from)),
            allocations_per_call(|| takt_civil_chain(&p.expr)),
            takt_civil_chain(&p.expr),
        );
        row(
            "takt-utc",
            allocations_per_call(|| p.utc.next_after(ts)),
            allocations_per_call(|| takt_schedule_chain(&p.utc)),
            takt_schedule_chain(&p.utc),
        );
        row(
            "takt-berlin",
            allocations_per_call(|| p.berlin.next_after(ts)),
            allocations_per_call(|| takt_schedule_chain(&p.berlin)),
            takt_schedule_chain(&p.berlin),
        );
        if let Some(s) = &p.cron {
            row(
                "cron",
                allocations_per_call(|| s.after(&dt).next()),
                allocations_per_call(|| cron_chain(s)),
                cron_chain(s),
            );
        }
        if let Some(cr) = &p.croner {
            row(
                "croner",
                allocations_per_call(|| cr.find_next_occurrence(&dt, false)),
                allocations_per_call(|| croner_chain(cr)),
                croner_chain(cr),
            );
        }
    }
}

fn main() {
    let cases = prepare();
    check_agreement(&cases);
    let mut c = Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(30)
        .configure_from_args();
    bench_single(&mut c, &cases);
    bench_chain(&mut c, &cases);
    c.final_summary();
    allocation_table(&cases);
}
