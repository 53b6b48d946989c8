//! The phi accrual estimator against Akka's formula and a naive window: bootstrap, monotonicity,
//! finite values where Akka saturates, the suspicion time as phi's exact inverse, ring eviction,
//! no drift over millions of samples, and the memory footprint.

use super::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// Akka's `phi(timeDiff, mean, stdDeviation)`, transcribed literally.
fn akka_phi(time_diff: f64, mean: f64, std: f64) -> f64 {
    let y = (time_diff - mean) / std;
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    if time_diff > mean {
        -(e / (1.0 + e)).log10()
    } else {
        -(1.0 - 1.0 / (1.0 + e)).log10()
    }
}

fn cfg(threshold: f64, max_samples: usize, min_std: u64, pause: u64) -> PhiConfig {
    PhiConfig {
        threshold,
        max_samples,
        min_std_dev_ns: min_std,
        acceptable_pause_ns: pause,
    }
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-300)
}

#[test]
fn defaults_are_akkas() {
    let c = PhiConfig::default();
    assert_eq!(c, cfg(8.0, 1000, 100 * MS, 3 * SEC));
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn validate_rejects_bad_fields() {
    for t in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, -1.0] {
        let err = PhiConfig {
            threshold: t,
            ..PhiConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(err.contains("threshold"), "{err}");
        assert!(err.contains(&format!("{t}")), "{err}");
    }
    assert_eq!(
        PhiConfig {
            threshold: f64::NAN,
            ..PhiConfig::default()
        }
        .validate(),
        Err("phi threshold must be a finite number > 0, got NaN".to_string())
    );
    for m in [0, MAX_SAMPLES_LIMIT + 1] {
        let err = PhiConfig {
            max_samples: m,
            ..PhiConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(
            err.contains("max_samples") && err.contains(&m.to_string()),
            "{err}"
        );
    }
    let err = PhiConfig {
        min_std_dev_ns: 0,
        ..PhiConfig::default()
    }
    .validate()
    .unwrap_err();
    assert!(err.contains("min_std_dev_ns"), "{err}");
    assert!(cfg(1e-300, 1, 1, 0).validate().is_ok());
    assert!(cfg(f64::MAX, MAX_SAMPLES_LIMIT, 1, u64::MAX)
        .validate()
        .is_ok());
}

#[test]
fn bootstrap_gives_first_estimate() {
    let s = PhiState::new(PhiConfig::default(), SEC);
    assert_eq!(s.sample_count(), 2);
    assert_eq!(s.mean_ns(), SEC as f64);
    assert_eq!(s.std_dev_ns(), 0.25 * SEC as f64);
    assert_eq!(s.config(), &PhiConfig::default());

    // Std floored at min_std_dev: e/4 = 25 ms < 100 ms.
    let s = PhiState::new(PhiConfig::default(), 100 * MS);
    assert_eq!(s.mean_ns(), (100 * MS) as f64);
    assert_eq!(s.std_dev_ns(), (100 * MS) as f64);

    // Long periods use a coarser unit but round periods stay exact.
    for e in [
        7 * SEC,
        90 * SEC,
        3600 * SEC,
        86_400 * SEC,
        30 * 86_400 * SEC,
    ] {
        assert_eq!(PhiState::new(PhiConfig::default(), e).mean_ns(), e as f64);
    }
    // Odd estimates: within half a storage unit.
    for e in [1, 999, 1_000_000_007, 12_345_678_901] {
        let s = PhiState::new(PhiConfig::default(), e);
        assert!(
            (s.mean_ns() - e as f64).abs() <= s.unit_ns as f64 / 2.0,
            "{e}"
        );
    }
    // Zero estimate is tolerated: two zero samples, std at the floor.
    let s = PhiState::new(PhiConfig::default(), 0);
    assert_eq!((s.mean_ns(), s.std_dev_ns()), (0.0, (100 * MS) as f64));
    // Window of one: only e + std survives, as in Akka.
    let s = PhiState::new(cfg(8.0, 1, MS, 0), SEC);
    assert_eq!(s.sample_count(), 1);
    assert_eq!(s.mean_ns(), 1.25 * SEC as f64);
    assert_eq!(s.std_dev_ns(), MS as f64);
}

#[test]
fn phi_at_centre_is_log10_2() {
    for pause in [0, 3 * SEC] {
        let s = PhiState::new(cfg(8.0, 1000, 100 * MS, pause), SEC);
        let p = s.phi(SEC + pause);
        assert!((p - 2f64.log10()).abs() < 1e-15, "{p}");
    }
}

#[test]
fn phi_is_monotone_in_elapsed() {
    let mut s = PhiState::new(PhiConfig::default(), SEC);
    for i in 0..50 {
        s.record_interval(SEC + (i % 7) * 37 * MS);
    }
    let mut prev = -1.0;
    for t in (0..40 * SEC).step_by((MS / 4) as usize) {
        let p = s.phi(t);
        assert!(p.is_finite() && p >= prev, "phi({t}) = {p} < {prev}");
        prev = p;
    }
    // Strictly increasing once it is off the flat left tail, even far out.
    let mut prev = s.phi(3 * SEC);
    for t in (1..10_000).map(|k| 3 * SEC + k * 10 * SEC) {
        let p = s.phi(t);
        assert!(p > prev, "phi({t}) = {p} <= {prev}");
        prev = p;
    }
    assert!(s.phi(u64::MAX).is_finite());
}

#[test]
fn phi_matches_akka_direct_formula() {
    // Window of 3 holding 900, 1000, 1100 ms (bootstrap evicted): mean 1000 ms,
    // population std 81.65 ms, floored at 100 ms; pause 3 s. Akka works in ms.
    let mut s = PhiState::new(cfg(8.0, 3, 100 * MS, 3 * SEC), SEC);
    for ms in [900, 1000, 1100] {
        s.record_interval(ms * MS);
    }
    assert_eq!(s.mean_ns(), (1000 * MS) as f64);
    assert_eq!(s.std_dev_ns(), (100 * MS) as f64);
    for ms in [
        0u64, 1000, 3500, 3900, 4000, 4100, 4250, 4500, 5000, 6000, 8000,
    ] {
        let ours = s.phi(ms * MS);
        let akka = akka_phi(ms as f64, 1000.0 + 3000.0, 100.0);
        // Akka's left branch `1 - 1/(1 + e)` cancels, hence the small absolute slack.
        let ok = close(ours, akka, 1e-12) || (ours - akka).abs() < 1e-15;
        assert!(ok, "t={ms}ms ours={ours} akka={akka}");
    }
    // Unfloored std: window 2 of 1000 ms and 2000 ms -> mean 1500, std 500.
    let mut s = PhiState::new(cfg(8.0, 2, MS, 0), SEC);
    s.record_interval(1000 * MS);
    s.record_interval(2000 * MS);
    for ms in [0u64, 700, 1500, 2000, 2500, 3000, 4000, 5000] {
        let ours = s.phi(ms * MS);
        let akka = akka_phi(ms as f64, 1500.0, 500.0);
        // Akka's left branch `1 - 1/(1 + e)` cancels, hence the small absolute slack.
        let ok = close(ours, akka, 1e-12) || (ours - akka).abs() < 1e-15;
        assert!(ok, "t={ms}ms ours={ours} akka={akka}");
    }
    // Hand-evaluated points: y = 1 -> log10(1 + e^1.668166); y = 3 -> log10(1 + e^6.698082).
    assert!(
        (s.phi(2000 * MS) - 0.799_508_320_839_56).abs() < 1e-12,
        "{}",
        s.phi(2000 * MS)
    );
    assert!(
        (s.phi(3000 * MS) - 2.909_475_326_484_95).abs() < 1e-12,
        "{}",
        s.phi(3000 * MS)
    );
}

#[test]
fn phi_stays_finite_where_akka_saturates() {
    let s = PhiState::new(cfg(8.0, 2, MS, 0), SEC);
    // Find a y where Akka's e underflows: y ~ 22 gives g ~ 787.
    let t = (1000 + 22 * 250) * MS;
    assert_eq!(
        akka_phi(t as f64, SEC as f64, 0.25 * SEC as f64),
        f64::INFINITY
    );
    let p = s.phi(t);
    assert!(p.is_finite() && p > 323.0, "{p}");
    // Just below saturation the two still agree.
    let t = (1000 + 20 * 250) * MS;
    let akka = akka_phi(t as f64, SEC as f64, 0.25 * SEC as f64);
    assert!(close(s.phi(t), akka, 1e-12), "{} vs {akka}", s.phi(t));
}

fn check_suspicion(s: &PhiState) -> u64 {
    let thr = s.config().threshold;
    let t = s.suspicion_after_ns();
    assert!(s.phi(t) >= thr, "phi({t}) = {} < {thr}", s.phi(t));
    if t > 0 {
        assert!(
            s.phi(t - 1) < thr,
            "phi({}) = {} >= {thr}",
            t - 1,
            s.phi(t - 1)
        );
        let earlier = t.saturating_sub(MS);
        assert!(s.phi(earlier) < thr, "phi({earlier}) >= {thr}");
    }
    t
}

#[test]
fn suspicion_with_defaults() {
    // 1 s period, std 250 ms, pause 3 s, threshold 8: y ~ 5.226 -> ~5.306 s.
    let s = PhiState::new(PhiConfig::default(), SEC);
    let t = check_suspicion(&s);
    assert!((5300 * MS..5310 * MS).contains(&t), "{t}");
}

#[test]
fn suspicion_for_huge_thresholds_is_finite_and_monotone() {
    let mut prev = 0;
    for thr in [
        0.1, 1.0, 8.0, 15.9, 16.0, 16.5, 30.0, 50.0, 100.0, 300.0, 323.0, 330.0, 1e3, 1e4, 1e6,
        1e9, 1e12,
    ] {
        let s = PhiState::new(cfg(thr, 1000, 100 * MS, 3 * SEC), SEC);
        let t = check_suspicion(&s);
        assert!(t > prev && t < u64::MAX, "thr {thr}: {t} <= {prev}");
        prev = t;
    }
    // Beyond u64 time: "never", and no panic or NaN on the way.
    for thr in [1e32, 1e300, f64::MAX] {
        let s = PhiState::new(cfg(thr, 1000, 100 * MS, 3 * SEC), SEC);
        assert_eq!(s.suspicion_after_ns(), u64::MAX);
    }
}

#[test]
fn suspicion_edge_cases() {
    // Threshold already met at elapsed 0 (wide spread, tiny threshold).
    let s = PhiState::new(cfg(0.01, 10, 10 * SEC, 0), MS);
    assert!(s.phi(0) >= 0.01);
    assert_eq!(s.suspicion_after_ns(), 0);
    // NaN threshold (unvalidated): never.
    let s = PhiState::new(
        PhiConfig {
            threshold: f64::NAN,
            max_samples: 10,
            ..PhiConfig::default()
        },
        0,
    );
    assert_eq!(s.suspicion_after_ns(), u64::MAX);
    // All-zero intervals: mean 0, std at the 1 ms floor.
    let mut s = PhiState::new(cfg(8.0, 4, MS, 0), 0);
    for _ in 0..4 {
        s.record_interval(0);
    }
    assert_eq!((s.mean_ns(), s.std_dev_ns()), (0.0, MS as f64));
    check_suspicion(&s);
    // Tiny scale: 1 ns std floor, every y step is a nanosecond.
    let s = PhiState::new(cfg(3.0, 4, 1, 0), 1000);
    check_suspicion(&s);
}

#[test]
fn closed_form_is_close_before_refinement() {
    for thr in [0.05, 0.3, 0.5, 1.0, 8.0, 16.0, 30.0, 300.0, 1e4] {
        for (e, min_std, pause) in [(SEC, 100 * MS, 3 * SEC), (10 * MS, MS, 0)] {
            let s = PhiState::new(cfg(thr, 100, min_std, pause), e);
            let t = s.suspicion_after_ns();
            if t == 0 {
                continue;
            }
            let guess = s.closed_form_guess(s.centre_ns(), s.std_dev_ns());
            let err = guess.abs_diff(t) as f64;
            assert!(err <= 2.0 + 1e-12 * t as f64, "thr {thr}: {guess} vs {t}");
        }
    }
    // Solver round trip, including tiny and huge g and negative g.
    for g in [-50.0, -1.0, -1e-9, 0.0, 1e-12, 0.5, 3.0, 700.0, 1e10, 1e40] {
        let y: f64 = solve_cubic(g);
        let back = y * (B + A * y * y);
        assert!(
            close(back, g, 1e-14) || (g == 0.0 && y == 0.0),
            "{g} -> {y}"
        );
    }
    for x in [1e-300, 1e-8, 0.5, 1.0, 2.0, 50.0, 1e5] {
        // exp(-690) amplifies argument rounding by ~690 ulps: 1e-12 for the tiny case.
        assert!(close(softplus(inverse_softplus(x)), x, 1e-12), "{x}");
    }
}

/// Naive recomputation over an explicit list of intervals (already on the storage grid).
fn naive(intervals: &[u64], min_std: u64) -> (f64, f64) {
    let n = intervals.len() as f64;
    let mean = intervals.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = intervals
        .iter()
        .map(|&x| (x as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var.sqrt().max(min_std as f64))
}

#[test]
fn ring_eviction_matches_last_window() {
    let max = 7;
    for k in [0usize, 1, 6, 7, 8, 100] {
        let intervals: Vec<u64> = (0..max + k)
            .map(|i| (500 + (i as u64 * 7919) % 1000) * 1000) // whole us
            .collect();
        let mut s = PhiState::new(cfg(8.0, max, 1, 0), SEC);
        for &x in &intervals {
            s.record_interval(x);
        }
        let last = &intervals[k..];
        let mut fresh = PhiState::new(cfg(8.0, max, 1, 0), SEC);
        for &x in last {
            fresh.record_interval(x);
        }
        assert_eq!(s.sample_count(), max);
        assert_eq!(s.mean_ns().to_bits(), fresh.mean_ns().to_bits(), "k={k}");
        assert_eq!(
            s.std_dev_ns().to_bits(),
            fresh.std_dev_ns().to_bits(),
            "k={k}"
        );
        let (mean, std) = naive(last, 1);
        assert!(close(s.mean_ns(), mean, 1e-14) && close(s.std_dev_ns(), std, 1e-12));
        assert_eq!(s.ring.capacity(), max, "ring grows to exactly max_samples");
    }
}

#[test]
fn no_drift_over_millions_of_samples() {
    let max = 1000;
    let mut s = PhiState::new(cfg(8.0, max, 1, 0), SEC);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut all = Vec::with_capacity(3_000_000);
    for _ in 0..3_000_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = (x % 4_000_000) * 1000 + 1000; // 1 us .. 4 s on the 1 us grid
        all.push(v);
        s.record_interval(v);
    }
    let last = &all[all.len() - max..];
    let mut fresh = PhiState::new(cfg(8.0, max, 1, 0), SEC);
    for &v in last {
        fresh.record_interval(v);
    }
    assert_eq!((s.sum, s.sum_sq), (fresh.sum, fresh.sum_sq));
    assert_eq!(s.std_dev_ns().to_bits(), fresh.std_dev_ns().to_bits());
    let (mean, std) = naive(last, 1);
    assert!(close(s.mean_ns(), mean, 1e-13) && close(s.std_dev_ns(), std, 1e-12));
}

#[test]
fn long_intervals_saturate_the_unit_range() {
    let mut s = PhiState::new(cfg(8.0, 2, MS, 0), SEC); // 1 us unit, ~71.6 min range
    s.record_interval(u64::MAX);
    s.record_interval(u64::MAX);
    assert_eq!(s.mean_ns(), u32::MAX as f64 * 1000.0);
    assert_eq!(s.std_dev_ns(), MS as f64);
    check_suspicion(&s);
    // Rounding to the unit is half-up.
    assert_eq!(s.to_units(1499), 1);
    assert_eq!(s.to_units(1500), 2);
    assert_eq!(unit_for(0), 1000);
    assert_eq!(unit_for(SEC), 1000);
    assert_eq!(unit_for(10 * SEC), 10_000);
    assert_eq!(unit_for(u64::MAX), 10_000_000_000);
}

#[test]
fn memory_footprint() {
    assert!(std::mem::size_of::<PhiState>() <= 96);
    let mut s = PhiState::new(PhiConfig::default(), SEC);
    for _ in 0..5000 {
        s.record_interval(SEC);
    }
    assert_eq!(s.ring.capacity() * std::mem::size_of::<u32>(), 4000);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn suspicion_is_the_exact_inverse(
        intervals in prop::collection::vec(0u64..10 * SEC, 0..40),
        max_samples in 1usize..32,
        first in 1u64..10 * SEC,
        min_std in 1u64..500 * MS,
        pause in 0u64..5 * SEC,
        threshold in 0.5f64..=16.0,
    ) {
        let mut s = PhiState::new(cfg(threshold, max_samples, min_std, pause), first);
        for &x in &intervals {
            s.record_interval(x);
        }
        let t = s.suspicion_after_ns();
        prop_assert!(t < u64::MAX);
        prop_assert!(s.phi(t) >= threshold);
        prop_assert!(t == 0 || s.phi(t.saturating_sub(MS)) < threshold);
        prop_assert!(t == 0 || s.phi(t - 1) < threshold);
        // The closed form lands within a couple of ns: refinement is a few probes, no scan.
        let guess = s.closed_form_guess(s.centre_ns(), s.std_dev_ns());
        prop_assert!(t == 0 || guess.abs_diff(t) as f64 <= 2.0 + 1e-12 * t as f64);
        // A higher threshold never fires earlier.
        let mut higher = s.clone();
        higher.cfg.threshold = threshold * 1.01;
        prop_assert!(higher.suspicion_after_ns() >= t);
    }

    #[test]
    fn eviction_equals_naive_window(
        intervals in prop::collection::vec(0u64..5_000_000, 1..200),
        max_samples in 1usize..50,
    ) {
        // Whole microseconds, so the 1 us grid (first estimate 1 s) is exact.
        let intervals: Vec<u64> = intervals.iter().map(|us| us * 1000).collect();
        let mut s = PhiState::new(cfg(8.0, max_samples, 1, 0), SEC);
        for &x in &intervals {
            s.record_interval(x);
        }
        let mut window = vec![750 * MS, 1250 * MS];
        window.extend_from_slice(&intervals);
        let last = &window[window.len().saturating_sub(max_samples)..];
        let mut fresh = PhiState::new(cfg(8.0, max_samples, 1, 0), SEC);
        for &x in last {
            fresh.record_interval(x);
        }
        prop_assert_eq!(s.sample_count(), last.len());
        if last.len() == max_samples {
            prop_assert_eq!(s.mean_ns().to_bits(), fresh.mean_ns().to_bits());
            prop_assert_eq!(s.std_dev_ns().to_bits(), fresh.std_dev_ns().to_bits());
        }
        let (mean, std) = naive(last, 1);
        prop_assert!(close(s.mean_ns(), mean, 1e-13), "{} vs {}", s.mean_ns(), mean);
        prop_assert!(close(s.std_dev_ns(), std, 1e-9) || (s.std_dev_ns() - std).abs() < 1e-3,
            "{} vs {}", s.std_dev_ns(), std);
    }
}
