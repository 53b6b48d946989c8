//! The beat inter-arrival histogram (Prometheus `heartwire_beat_interval_seconds`): the time
//! between a topic's beat and its previous one, in fixed buckets, one histogram per detector.
//!
//! Counted on the beat path only once turned on ([`Detector::count_intervals`]): a single beat
//! adds with two relaxed atomic adds (its bucket, the sum); a batch counts in a local array and
//! adds once at its end, as the batch's other counters do. Fixed buckets keep it bounded
//! whatever the number of topics, and need no lock.
//!
//! The sum is 128 bits of ns: a u64 of ns wraps at 1.8e19 ns (about 5 hours of 1 M topics
//! beating every second), and a Prometheus `_sum` must never go back. The low word is added to
//! as before; the add that carries out of it (told by `fetch_add`'s previous value, one compare)
//! adds 1 to the high word.

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
    /// The sum's low 64 bits (wrapping) and its carries out of them.
    sum_lo: AtomicU64,
    sum_hi: AtomicU64,
    /// The last sum read, so that a read never goes back (see [`Intervals::sum_ns`]). Only
    /// readers take it, never the beat path.
    read: Mutex<u128>,
}

impl Intervals {
    #[inline]
    pub(super) fn add(&self, ns: u64) {
        self.buckets[bucket(ns)].fetch_add(1, Ordering::Relaxed);
        self.add_sum(ns, 0);
    }

    /// Adds `hi * 2^64 + lo` ns to the sum.
    #[inline]
    fn add_sum(&self, lo: u64, hi: u64) {
        let before = self.sum_lo.fetch_add(lo, Ordering::Relaxed);
        let carry = u64::from(before.checked_add(lo).is_none());
        if hi + carry > 0 {
            self.sum_hi.fetch_add(hi + carry, Ordering::Relaxed);
        }
    }

    /// The sum, ns. The two words are not read at one instant: a read between an add's carry
    /// out of the low word and its add to the high word is short by exactly 2^64. The true
    /// sum never goes back, so a read below the last one read is that case, and is that read
    /// plus 2^64 (unless 2^64 ns, hours at a million topics, were added between two reads).
    fn sum_ns(&self) -> u128 {
        let mut last = self.read.lock();
        let sum = loop {
            let hi = self.sum_hi.load(Ordering::Acquire);
            let lo = self.sum_lo.load(Ordering::Acquire);
            if self.sum_hi.load(Ordering::Acquire) == hi {
                break (u128::from(hi) << 64) | u128::from(lo);
            }
        };
        let sum = if sum < *last {
            sum + (1u128 << 64)
        } else {
            sum
        };
        *last = sum;
        sum
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
        self.add_sum(local.sum_ns as u64, (local.sum_ns >> 64) as u64);
    }
}

/// A batch's own tally, added to the shared one once.
#[derive(Debug, Default)]
pub(super) struct LocalIntervals {
    counts: [u64; INTERVAL_BUCKETS],
    sum_ns: u128,
    n: u64,
}

impl LocalIntervals {
    #[inline]
    pub(super) fn add(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
        self.sum_ns += u128::from(ns);
        self.n += 1;
    }
}

/// A reading of the histogram: per-bucket counts (not cumulative; the last is `+Inf`) and the
/// sum of the intervals, ns (128 bits: it does not wrap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntervalHistogram {
    pub counts: [u64; INTERVAL_BUCKETS],
    pub sum_ns: u128,
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
            sum_ns: self.intervals.sum_ns(),
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

    #[test]
    fn the_sum_carries_past_64_bits() {
        let h = Intervals::default();
        let big = 10_000_000_000_000_000_000u64; // 1e19 ns: two of them pass 2^64
        h.add(big);
        assert_eq!(h.sum_ns(), u128::from(big));
        h.add(big);
        assert_eq!(h.sum_ns(), 2 * u128::from(big));
        let mut local = LocalIntervals::default();
        for _ in 0..3 {
            local.add(big);
        }
        h.add_local(&local);
        assert_eq!(h.sum_ns(), 5 * u128::from(big));
        assert_eq!(
            h.buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .sum::<u64>(),
            5
        );
    }

    #[test]
    fn a_read_between_a_carry_and_its_high_word_does_not_go_back() {
        let h = Intervals::default();
        h.add(u64::MAX - 1);
        assert_eq!(h.sum_ns(), u128::from(u64::MAX - 1));
        // What a reader sees mid-add: the low word wrapped, the carry not yet in the high word.
        h.sum_lo.fetch_add(5, Ordering::Relaxed);
        assert_eq!(h.sum_ns(), u128::from(u64::MAX - 1) + 5);
        h.sum_hi.fetch_add(1, Ordering::Relaxed); // the carry lands
        assert_eq!(h.sum_ns(), u128::from(u64::MAX - 1) + 5);
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
