//! Benchmark B9: what starting a program through `exe::run` costs over a raw
//! `std::process::Command` loop.
//!
//! * `true/raw` — `Command::new("/bin/true").status()`;
//! * `true/exe` — `exe::run` with `{"program": "/bin/true"}` on the SDK's `TestHost`: params
//!   check, PATH-free resolution and metadata check, process group, three pipes, a waiter and
//!   two reader threads, the group check after exit, the result JSON;
//! * `64k/raw` — `Command::new("head").args(["-c", "65536", "/dev/zero"]).output()` (std reads
//!   both pipes);
//! * `64k/exe` — the same program through `exe::run` (64 KiB into the tail ring, one cut
//!   log line).
//!
//! After criterion's figures, a *paired* run prints the median ratio exe / raw over rounds that
//! alternate the two (25 spawns each, order flipped every round): on a shared machine whose
//! load drifts during the minutes criterion takes, the ratio of neighbouring rounds is the
//! steadier figure.
//!
//! A third paired line compares with a raw loop that also captures output (own process
//! group, /dev/null stdin, `output()`), separating the price of capturing from the handler's.
//!
//! Run: `cargo bench -p takt-plugin-exe --bench spawn`. Goal: exe within 10 % of raw.

use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use takt_plugin_api::sdk::TestHost;
use takt_plugin_exe::{ExeOptions, ExeParams};

fn b9(c: &mut Criterion) {
    let options = ExeOptions::default();
    let mut g = c.benchmark_group("b9");
    g.sample_size(60)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    g.bench_function("true/raw", |b| {
        b.iter(|| {
            let s = Command::new("/bin/true").status().unwrap();
            black_box(s.success())
        })
    });
    g.bench_function("true/exe", |b| {
        b.iter(|| {
            let host = TestHost::new();
            let r = host.run(|ctx| {
                takt_plugin_exe::run(ctx, ExeParams::new("/bin/true"), &options).unwrap()
            });
            black_box(r.exit_code)
        })
    });
    g.bench_function("64k/raw", |b| {
        b.iter(|| {
            let o = Command::new("/usr/bin/head")
                .args(["-c", "65536", "/dev/zero"])
                .output()
                .unwrap();
            assert_eq!(o.stdout.len(), 65536);
            black_box(o.status.success())
        })
    });
    g.bench_function("64k/exe", |b| {
        b.iter(|| {
            let host = TestHost::new();
            let mut p = ExeParams::new("/usr/bin/head");
            p.args = vec!["-c".into(), "65536".into(), "/dev/zero".into()];
            let r = host.run(|ctx| takt_plugin_exe::run(ctx, p, &options).unwrap());
            assert_eq!(r.stdout.bytes, 65536);
            black_box(r.exit_code)
        })
    });
    g.finish();
}

fn raw_true() {
    black_box(Command::new("/bin/true").status().unwrap());
}

/// The raw loop with what `exe::run` needs to capture output: its own process group, stdin
/// from /dev/null, both output pipes read to the end.
fn raw_true_piped() {
    use std::os::unix::process::CommandExt;
    let o = Command::new("/bin/true")
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    black_box(o.status.success());
}

fn exe_true(options: &ExeOptions) {
    let host = TestHost::new();
    black_box(
        host.run(|ctx| takt_plugin_exe::run(ctx, ExeParams::new("/bin/true"), options).unwrap()),
    );
}

fn raw_64k() {
    let o = Command::new("/usr/bin/head")
        .args(["-c", "65536", "/dev/zero"])
        .output()
        .unwrap();
    black_box(o.stdout.len());
}

fn exe_64k(options: &ExeOptions) {
    let host = TestHost::new();
    let mut p = ExeParams::new("/usr/bin/head");
    p.args = vec!["-c".into(), "65536".into(), "/dev/zero".into()];
    black_box(host.run(|ctx| takt_plugin_exe::run(ctx, p, options).unwrap()));
}

/// Median exe/raw ratio and median per-spawn times over alternating rounds.
fn paired(name: &str, raw: &dyn Fn(), exe: &dyn Fn()) {
    const ROUNDS: usize = 40;
    const PER_ROUND: u32 = 25;
    let time = |f: &dyn Fn()| {
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            f();
        }
        t.elapsed() / PER_ROUND
    };
    let (mut raws, mut exes, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (r, e) = if round % 2 == 0 {
            let r = time(raw);
            (r, time(exe))
        } else {
            let e = time(exe);
            (time(raw), e)
        };
        ratios.push(e.as_secs_f64() / r.as_secs_f64());
        raws.push(r);
        exes.push(e);
    }
    raws.sort();
    exes.sort();
    ratios.sort_by(f64::total_cmp);
    println!(
        "paired {name}: raw {:?}, exe {:?} per spawn (medians of {ROUNDS} rounds); \
         exe/raw median {:.3} (quartiles {:.3}..{:.3})",
        raws[ROUNDS / 2],
        exes[ROUNDS / 2],
        ratios[ROUNDS / 2],
        ratios[ROUNDS / 4],
        ratios[3 * ROUNDS / 4]
    );
}

criterion_group!(benches, b9);

fn main() {
    benches();
    let options = ExeOptions::default();
    paired("true", &raw_true, &|| exe_true(&options));
    paired("64k", &raw_64k, &|| exe_64k(&options));
    paired("true, raw with pipes + group", &raw_true_piped, &|| {
        exe_true(&options)
    });
    Criterion::default().configure_from_args().final_summary();
}
