//! A program that prints 50 MB: the run ends, the tail is kept, memory stays bounded.
//!
//! A test binary of its own, so that the peak RSS measured is this test's alone.

#![cfg(target_os = "linux")]

use takt_plugin_api::sdk::TestHost;
use takt_plugin_exe::{DEFAULT_OUTPUT_LIMIT, ExeOptions, ExeParams};

/// `VmHWM` (peak resident set) of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

const MB50: u64 = 50 << 20;

#[test]
fn fifty_megabytes_of_output_finish_with_bounded_memory_and_the_tail_kept() {
    let before = peak_rss_kib();
    let host = TestHost::new();
    // 100-byte lines, then a last line to recognise the end by.
    let line = "0123456789".repeat(10);
    let mut p = ExeParams::new("/bin/sh");
    p.args = vec![
        "-c".into(),
        format!("yes {} | head -c {MB50}; echo END", &line[..99]),
    ];
    let r = host
        .run(|ctx| takt_plugin_exe::run(ctx, p, &ExeOptions::default()))
        .unwrap();
    assert_eq!(r.stdout.bytes, MB50 + 4);
    assert_eq!(r.stdout.lines, MB50 / 100 + 1);
    assert!(r.stdout.tail.ends_with(&format!("{}\nEND\n", &line[..99])));
    assert_eq!(r.stdout.tail.len(), DEFAULT_OUTPUT_LIMIT);
    assert!(r.stdout.tail_truncated);
    assert_eq!(r.stdout.lines_not_logged, r.stdout.lines - 10_000);
    let logs = host.logs();
    assert_eq!(logs.len(), 10_001, "10 000 lines and the closing count");
    assert!(
        logs[10_000].1.contains("more lines not logged"),
        "{:?}",
        logs[10_000]
    );

    // One 50 MB line without a newline: cut in the log, never buffered whole.
    let mut p = ExeParams::new("/bin/sh");
    p.args = vec![
        "-c".into(),
        format!("head -c {MB50} /dev/zero | tr '\\0' x"),
    ];
    p.output_limit = 1000;
    let host = TestHost::new();
    let r = host
        .run(|ctx| takt_plugin_exe::run(ctx, p, &ExeOptions::default()))
        .unwrap();
    assert_eq!(r.stdout.bytes, MB50);
    assert_eq!(r.stdout.tail, "x".repeat(1000));
    assert_eq!(r.stdout.long_lines_cut, 1);
    let logs = host.logs();
    assert_eq!(logs.len(), 1);
    assert!(
        logs[0].1.ends_with("more bytes of this line cut)"),
        "{}",
        &logs[0].1[logs[0].1.len() - 60..]
    );

    // The whole output held anywhere would be 100 MB; the peak grew by far less. (The log
    // lines the TestHost keeps — 10 000 × 100 bytes plus one 16 KiB line — are a few MB.)
    let grown_mib = (peak_rss_kib() - before) / 1024;
    assert!(grown_mib < 32, "peak RSS grew by {grown_mib} MiB");
}
