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
//! Run: `cargo bench -p takt-plugin-exe --bench spawn`. Goal: exe within 10 % of raw.

use std::hint::black_box;
use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
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

criterion_group!(benches, b9);
criterion_main!(benches);
