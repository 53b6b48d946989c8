//! The beat inter-arrival histogram (Prometheus `heartwire_beat_interval_seconds`): the time
//! between a topic's beat and its previous one, in fixed buckets, one histogram per detector.
//!
//! Counted on the beat path only once turned on ([`Detector::count_intervals`]): a single beat
//! adds with two relaxed atomic adds (its bucket, the sum); a batch counts in a local array and
//! adds once at its end, as the batch's other counters do. Fixed buckets keep it bounded
//! whatever the number of topics, and need no lock.

use super::*;

/// Upper bounds of the buckets (inclusive, ns); one more bucket past the last is `+Inf`.
pub const INTERVAL_BOUNDS_NS: [u64; 15] = [
    10_000_000,        // 10 ms
    50_000_000,        // 50 ms
    100_000_000,       // 100 ms
    250_000_000,       // 250 ms
    500_000_000,       // 500 ms
    1_000_000_000,     // 1 s
    2_000_000_000,     // 2 s
    5_000_000_000,     // 5 s
    10_000_000_000,    // 10 s
    30_000_000_000,    // 30 s
    60_000_000_000,    // 1 min
    120_000_000_000,   // 2 min
    300_000_000_000,   // 5 min
    900_000_000_000,   // 15 min
    3_600_000_000_000, // 1 h
];
/// Buckets, `+Inf` included.
pub const INTERVAL_BUCKETS: usize = INTERVAL_BOUNDS_NS.len() + 1;
/// "No interval": the beat is its topic's first (or did not record).
pub const NO_INTERVAL: u64 = u64::MAX;

/// The bucket of an interval of `ns`: the first whose bound is >= `ns`.
#[inline]
pub fn bucket(ns: u64) -> usize {
    INTERVAL_BOUNDS_NS.partition_point(|b| *b < ns)
}

/// The shared histogram.
#[derive(Default)]
pub(super) struct Intervals {
    pub(super) on: AtomicBool,
    buckets: [AtomicU64; INTERVAL_BUCKETS],
    sum_ns: AtomicU64,
}

impl Intervals {
    #[inline]
    pub(super) fn add(&self, ns: u64) {
        self.buckets[bucket(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub(super) fn add_local(&self, local: &LocalIntervals) {
        if local.n == 0 {
            return;
        }
        for (shared, n) in self.buckets.iter().zip(&local.counts) {
            if *n > 0 {
                shared.fetch_add(*n, Ordering::Relaxed);
            }
        }
        self.sum_ns.fetch_add(local.sum_ns, Ordering::Relaxed);
    }
}

/// A batch's own tally, added to the shared one once.
#[derive(Debug, Default)]
pub(super) struct LocalIntervals {
    counts: [u64; INTERVAL_BUCKETS],
    sum_ns: u64,
    n: u64,
}

impl LocalIntervals {
    #[inline]
    pub(super) fn add(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
        self.sum_ns = self.sum_ns.wrapping_add(ns);
        self.n += 1;
    }
}

/// A reading of the histogram: per-bucket counts (not cumulative; the last is `+Inf`) and the
/// sum of the intervals, ns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntervalHistogram {
    pub counts: [u64; INTERVAL_BUCKETS],
    pub sum_ns: u64,
}

impl Detector {
    /// Count (or stop counting) beat inter-arrival times from now on. Off by default: a
    /// detector used without a metrics export pays nothing but one relaxed load a beat.
    pub fn count_intervals(&self, on: bool) {
        self.intervals.on.store(on, Ordering::Relaxed);
    }

    /// Whether inter-arrival times are counted.
    #[inline]
    pub fn counting_intervals(&self) -> bool {
        self.intervals.on.load(Ordering::Relaxed)
    }

    /// The inter-arrival histogram so far.
    pub fn interval_histogram(&self) -> IntervalHistogram {
        let mut counts = [0u64; INTERVAL_BUCKETS];
        for (c, b) in counts.iter_mut().zip(&self.intervals.buckets) {
            *c = b.load(Ordering::Relaxed);
        }
        IntervalHistogram {
            counts,
            sum_ns: self.intervals.sum_ns.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn buckets_are_inclusive_upper_bounds() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(10_000_000), 0);
        assert_eq!(bucket(10_000_001), 1);
        assert_eq!(bucket(1_000_000_000), 5);
        assert_eq!(bucket(3_600_000_000_000), 14);
        assert_eq!(bucket(3_600_000_000_001), 15);
        assert_eq!(bucket(u64::MAX - 1), INTERVAL_BUCKETS - 1);
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    use crate::clock::ManualClock;

    /// The histogram's cost per beat, single beats by handle (the socket reader's path) and a
    /// batch by handle, on against off, rounds alternating: `cargo test --release --lib --
    /// --ignored --nocapture interval_timing`.
    #[test]
    #[ignore = "timing: run by hand with --release"]
    fn interval_timing() {
        let clock = Arc::new(ManualClock::new(0));
        let det = Detector::new(
            ClockSource::Manual(clock.clone()),
            TopicConfig::fixed(3_600_000_000_000, 1),
            1_000_000,
        )
        .unwrap();
        let names: Vec<String> = (0..1000).map(|i| format!("svc.t{i}")).collect();
        let handles = det
            .add_many_handles(names.iter().map(String::as_str), None, None)
            .unwrap();
        let mut now = 1_000_000_000u64;
        for &h in &handles {
            let _ = det.record_handle(h, now); // heard: later beats have an interval
        }
        let rounds = 100u32;
        let (mut single, mut batch) = ([f64::INFINITY; 2], [f64::INFINITY; 2]);
        for round in 0..30 {
            for on in [round % 2 == 0, round % 2 != 0] {
                det.count_intervals(on);
                now += 1_000_000;
                let t = std::time::Instant::now();
                for r in 0..rounds {
                    for &h in &handles {
                        std::hint::black_box(det.record_handle(h, now + u64::from(r)));
                    }
                }
                let ns = t.elapsed().as_nanos() as f64 / f64::from(rounds) / 1000.0;
                single[on as usize] = single[on as usize].min(ns);
                now += 1_000_000;
                let t = std::time::Instant::now();
                for r in 0..rounds {
                    let b = det.record_handles(handles.iter().copied(), Some(now + u64::from(r)));
                    std::hint::black_box(det.finish(b));
                }
                let ns = t.elapsed().as_nanos() as f64 / f64::from(rounds) / 1000.0;
                batch[on as usize] = batch[on as usize].min(ns);
            }
        }
        for (what, [off, on]) in [("single", single), ("batch", batch)] {
            println!(
                "interval histogram, {what:6}: off {off:5.1} ns/beat, on {on:5.1} ns/beat \
                 (+{:.1} ns, {:.3}x)",
                on - off,
                on / off
            );
        }
        assert!(det.interval_histogram().counts.iter().sum::<u64>() > 0);
    }
}
