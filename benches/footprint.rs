//! Memory footprint and registration rate at one million topics.
//!
//! ```text
//! CARGO_TARGET_DIR=/tmp/bench-target cargo bench --bench footprint
//! CARGO_TARGET_DIR=/tmp/bench-target cargo bench --bench footprint -- --no-reserve
//! ```
//!
//! Registers 1,000,000 topics named like `svc.region-NN.host-NNNNNN` (25 bytes) on a manual
//! clock, beats them all once, advances one period (every topic is popped and re-armed, so the
//! wheel holds all of them), then prints the process RSS growth and `Detector::heap_bytes()`
//! per topic. By default the detector is sized first with `reserve`, as the Python `add_many`
//! does for a list of names; `--no-reserve` registers with plain `add_many` growth instead.

use _core::clock::{ClockSource, ManualClock};
use _core::detector::{Detector, TopicConfig};
use std::sync::Arc;
use std::time::Instant;

const N: usize = 1_000_000;
const NAME_LEN: usize = 25;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
const START: u64 = 1_000 * SEC;

/// Resident set size of this process, bytes (VmRSS of /proc/self/status).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line in /proc/self/status");
    kb * 1024
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    // `cargo bench` passes `--bench`; anything but `--no-reserve` is ignored.
    let reserve = !std::env::args().any(|a| a == "--no-reserve");
    let names: Vec<String> = (0..N)
        .map(|i| format!("svc.region-{:02}.host-{:06}", i % 64, i))
        .collect();
    assert!(names.iter().all(|n| n.len() == NAME_LEN));

    let rss_before = rss_bytes();
    let clock = Arc::new(ManualClock::new(START));
    let det = Detector::new(
        ClockSource::Manual(clock.clone()),
        TopicConfig::fixed(SEC, 1),
        MS,
    )
    .expect("valid detector config");

    let t = Instant::now();
    if reserve {
        det.reserve(N, NAME_LEN);
    }
    let ids = det
        .add_many(names.iter().map(String::as_str), None, None)
        .expect("names are valid and unique");
    let register = t.elapsed();
    assert_eq!(ids.len(), N);

    let t = Instant::now();
    assert_eq!(det.beat_ids(&ids, Some(START + SEC / 2)), N);
    let beat = t.elapsed();
    drop(ids);

    // Past every first deadline: all 1M are popped and lazily re-armed from their beat.
    let t = Instant::now();
    clock.advance(SEC + MS);
    let advance = t.elapsed();
    let stats = det.stats();
    assert_eq!((stats.failed, stats.resumed), (0, 0));

    let rss_after = rss_bytes();
    let growth = rss_after.saturating_sub(rss_before);
    let heap = det.heap_bytes() as u64;
    let per = |bytes: u64| bytes as f64 / N as f64;

    println!(
        "footprint: {N} topics, {NAME_LEN}-byte names, {}",
        if reserve {
            "reserve(N) then add_many"
        } else {
            "add_many without reserve"
        }
    );
    println!(
        "register:  {:.3} s = {:.2} M topics/s;  beat_ids all once: {:.1} ms;  advance (re-arm all): {:.1} ms",
        register.as_secs_f64(),
        N as f64 / register.as_secs_f64() / 1e6,
        beat.as_secs_f64() * 1e3,
        advance.as_secs_f64() * 1e3,
    );
    println!(
        "RSS:       {:.1} MiB before, {:.1} MiB after: +{:.1} MiB = {:.1} bytes/topic",
        mib(rss_before),
        mib(rss_after),
        mib(growth),
        per(growth),
    );
    println!(
        "heap_bytes(): {:.1} MiB = {:.1} bytes/topic",
        mib(heap),
        per(heap),
    );
    drop(det);
}
