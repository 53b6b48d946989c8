//! Phi-accrual failure detector math (Hayashibara et al.), following Akka's
//! `PhiAccrualFailureDetector`: a sliding window of heartbeat inter-arrival intervals gives a mean
//! and standard deviation, and the suspicion level for `elapsed` time since the last beat is
//! `phi = -log10(1 - F(elapsed))`, with `F` Akka's logistic approximation of the normal CDF
//! centred on `mean + acceptable_pause`.
//!
//! The timer wheel never polls phi: [`PhiState::suspicion_after_ns`] inverts the (monotone)
//! formula so the caller can schedule a single check at the moment phi reaches the threshold.
//!
//! All times are `u64` nanoseconds.

use std::f64::consts::LN_10;

/// Coefficients of Akka's logistic approximation `CDF(y) ~= 1 / (1 + exp(-y (B + A y^2)))`
/// ("Error is 0.00014 at +- 3.16").
const A: f64 = 0.070566;
const B: f64 = 1.5976;

/// Upper bound accepted for [`PhiConfig::max_samples`]. It keeps every running sum exact in
/// integer arithmetic (see [`PhiState`]) and still allows a 64 MiB window per topic, far beyond
/// any useful history (Akka's default is 1000).
pub const MAX_SAMPLES_LIMIT: usize = 1 << 24;

/// Parameters of a phi-accrual detector.
///
/// Akka's defaults: threshold 8.0, max_samples 1000, min_std_dev 100 ms, acceptable_pause 3 s
/// (`akka.cluster.failure-detector.acceptable-heartbeat-pause`); the first estimate of the
/// heartbeat period is given per topic to [`PhiState::new`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhiConfig {
    /// Suspect the topic once phi reaches this value (phi >= threshold).
    pub threshold: f64,
    /// Number of most recent inter-arrival intervals kept in the window.
    pub max_samples: usize,
    /// Floor for the standard deviation, so a very regular topic does not become hair-trigger.
    pub min_std_dev_ns: u64,
    /// Added to the mean interval: pauses up to this long are not held against the topic.
    pub acceptable_pause_ns: u64,
}

impl Default for PhiConfig {
    fn default() -> Self {
        Self {
            threshold: 8.0,
            max_samples: 1000,
            min_std_dev_ns: 100_000_000,
            acceptable_pause_ns: 3_000_000_000,
        }
    }
}

impl PhiConfig {
    /// Check the parameters (the same rules as Akka's constructor, plus an upper bound on the
    /// window). The error names the offending field and value, e.g.
    /// `"phi threshold must be a finite number > 0, got NaN"`.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.threshold.is_finite() && self.threshold > 0.0) {
            return Err(format!(
                "phi threshold must be a finite number > 0, got {}",
                self.threshold
            ));
        }
        if self.max_samples == 0 || self.max_samples > MAX_SAMPLES_LIMIT {
            return Err(format!(
                "phi max_samples must be between 1 and {MAX_SAMPLES_LIMIT}, got {}",
                self.max_samples
            ));
        }
        if self.min_std_dev_ns == 0 {
            return Err("phi min_std_dev_ns must be > 0, got 0".to_string());
        }
        Ok(())
    }
}

/// The learned inter-arrival statistics of one topic.
///
/// Storage: a ring of the last `max_samples` intervals as `u32` counts of `unit_ns`, grown on
/// demand (a topic with few beats holds few samples; a full window is `4 * max_samples` heap
/// bytes). `unit_ns` is fixed per state from the first estimate: the smallest power of ten, at
/// least 1 us, for which the `u32` range covers 4096 first estimates (1 us up to a ~1 s period,
/// i.e. a range of ~71 min; 10 us up to ~10 s; ...). Resolution is thus 1 us or ~1e-5 of the
/// period, whichever is coarser: far below any sensible `min_std_dev`, and round periods stay
/// exact. Longer intervals saturate at the top of the range; with a realistic first estimate
/// phi is far past any threshold by then, but a first estimate thousands of times too small
/// (or a period beyond ~71 min with the 1 us unit) would clip every sample and understate the
/// mean.
///
/// Numerics: the running sum and sum of squares are exact integers (`u64` and `u128`, which
/// cannot overflow given `u32` samples and [`MAX_SAMPLES_LIMIT`]), so eviction subtracts exactly
/// what was added and there is no drift however many samples pass through; the variance is
/// formed exactly as `n * sum_sq - sum^2 >= 0` and only then converted to `f64`, so it is never
/// negative and does not suffer the `E[x^2] - E[x]^2` cancellation.
#[derive(Clone, Debug)]
pub struct PhiState {
    cfg: PhiConfig,
    /// Intervals in units of `unit_ns`; once full, `head` is the oldest (next to be replaced).
    ring: Vec<u32>,
    head: u32,
    unit_ns: u64,
    sum: u64,
    sum_sq: u128,
}

impl PhiState {
    /// A state bootstrapped like Akka: with `first_estimate_ns` = e (the expected period) and
    /// std = e/4, it starts from the two samples e - std and e + std, so the mean is e and the
    /// standard deviation e/4 (to the storage unit; exact for whole microseconds below ~1 s).
    /// With `max_samples == 1` only e + std survives, as in Akka.
    ///
    /// `cfg` should have passed [`PhiConfig::validate`]; an out-of-range `max_samples` is clamped
    /// into `1..=MAX_SAMPLES_LIMIT` rather than panicking.
    pub fn new(cfg: PhiConfig, first_estimate_ns: u64) -> Self {
        let unit_ns = unit_for(first_estimate_ns);
        let mut state = Self {
            cfg,
            ring: Vec::with_capacity(2.min(cfg.max_samples.max(1))),
            head: 0,
            unit_ns,
            sum: 0,
            sum_sq: 0,
        };
        // Seeded in storage units so that the bootstrap mean is exactly the quantised estimate.
        let mean = state.to_units(first_estimate_ns);
        let std = mean / 4;
        state.push_units(mean - std);
        state.push_units(mean + std);
        state
    }

    /// The configuration this state was built with.
    pub fn config(&self) -> &PhiConfig {
        &self.cfg
    }

    /// Record one inter-arrival interval, evicting the oldest once the window is full. O(1).
    pub fn record_interval(&mut self, interval_ns: u64) {
        let units = self.to_units(interval_ns);
        self.push_units(units);
    }

    /// Number of intervals in the window (at least 1: the bootstrap seeds it).
    pub fn sample_count(&self) -> usize {
        self.ring.len()
    }

    /// Mean interval over the window, in nanoseconds.
    pub fn mean_ns(&self) -> f64 {
        let n = self.ring.len() as f64;
        // sum * unit is exact in u128; one rounding to f64, one for the division.
        (u128::from(self.sum) * u128::from(self.unit_ns)) as f64 / n
    }

    /// Population standard deviation of the window (as Akka), in nanoseconds, floored at
    /// `min_std_dev_ns` (and at 1 ns, so an unvalidated zero floor cannot divide by zero).
    pub fn std_dev_ns(&self) -> f64 {
        let n = self.ring.len() as u128;
        let sum = u128::from(self.sum);
        // Exact: n*sum_sq < 2^24 * 2^88 and sum^2 < 2^112; Cauchy-Schwarz makes it >= 0.
        let spread = n * self.sum_sq - sum * sum;
        let std = (spread as f64).sqrt() * self.unit_ns as f64 / n as f64;
        std.max(self.cfg.min_std_dev_ns.max(1) as f64)
    }

    /// phi after `elapsed_ns` without a heartbeat: Akka's `-log10(1 - CDF(y))` with
    /// `y = (elapsed - (mean + acceptable_pause)) / std_dev`, so phi = log10(2) ~= 0.301 at
    /// `mean + acceptable_pause` and it grows without bound (about y^3 / 33) after that.
    ///
    /// Akka evaluates `-log10(e / (1 + e))` with `e = exp(-y (B + A y^2))`; that is the same
    /// function as `log10(1 + exp(g))`, `g = y (B + A y^2)`, which we evaluate in a stable
    /// softplus form. The values agree wherever Akka's are accurate, but where Akka's `e`
    /// underflows (phi above ~307 it loses precision, above ~323.6 it returns +inf) ours stays
    /// finite and strictly increasing, so no cap is needed and every finite threshold is
    /// eventually reached at a well-defined time.
    pub fn phi(&self, elapsed_ns: u64) -> f64 {
        phi_at(elapsed_ns, self.centre_ns(), self.std_dev_ns())
    }

    /// The smallest elapsed time (ns) at which `phi(elapsed) >= threshold`; 0 if phi is already
    /// there at 0. The crossing is found in closed form (inverse softplus, then Cardano on the
    /// cubic `A y^3 + B y = g` plus two Newton steps) and then pinned to the exact integer
    /// nanosecond against [`Self::phi`] itself with a handful of galloping/bisection steps, so
    /// `phi(t) >= threshold > phi(t - 1)` holds exactly, not just up to rounding.
    ///
    /// Returns `u64::MAX` ("never") if phi does not reach the threshold within `u64` nanoseconds
    /// (only for absurd thresholds: about 1e31 with the defaults and a 1 s period) or the
    /// threshold is NaN.
    pub fn suspicion_after_ns(&self) -> u64 {
        let threshold = self.cfg.threshold;
        let centre = self.centre_ns();
        let std = self.std_dev_ns();
        let reached = |t: u64| phi_at(t, centre, std) >= threshold;
        if threshold.is_nan() {
            return u64::MAX;
        }
        if reached(0) {
            return 0;
        }
        let guess = self.closed_form_guess(centre, std);

        // Bracket the crossing as `!reached(lo) && reached(hi)`, starting at the guess and
        // doubling the step (the guess is normally off by at most a nanosecond or two).
        let (mut lo, mut hi);
        let mut step = 1u64;
        if reached(guess) {
            hi = guess;
            loop {
                let t = hi.saturating_sub(step);
                if !reached(t) {
                    lo = t;
                    break;
                }
                hi = t; // terminates: !reached(0)
                step = step.saturating_mul(2);
            }
        } else {
            lo = guess;
            loop {
                if lo == u64::MAX {
                    return u64::MAX;
                }
                let t = lo.saturating_add(step);
                if reached(t) {
                    hi = t;
                    break;
                }
                lo = t;
                step = step.saturating_mul(2);
            }
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if reached(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    /// The analytic crossing time `centre + y * std`, rounded up and saturated into `u64`.
    fn closed_form_guess(&self, centre: f64, std: f64) -> u64 {
        let g = inverse_softplus(self.cfg.threshold * LN_10);
        let y = solve_cubic(g);
        // `as` saturates (and sends NaN to 0; refinement then gallops from there).
        (centre + y * std).ceil() as u64
    }

    /// Centre of the distribution: mean interval plus the acceptable pause.
    fn centre_ns(&self) -> f64 {
        self.mean_ns() + self.cfg.acceptable_pause_ns as f64
    }

    fn max_samples(&self) -> usize {
        self.cfg.max_samples.clamp(1, MAX_SAMPLES_LIMIT)
    }

    /// Quantise to storage units, rounding half up and saturating at `u32::MAX`.
    fn to_units(&self, ns: u64) -> u32 {
        let (q, r) = (ns / self.unit_ns, ns % self.unit_ns);
        let q = q + u64::from(2 * r >= self.unit_ns); // unit <= 1e10, no overflow
        u32::try_from(q).unwrap_or(u32::MAX)
    }

    fn push_units(&mut self, x: u32) {
        let max = self.max_samples();
        if self.ring.len() < max {
            if self.ring.len() == self.ring.capacity() {
                // Double, but never past the window: a full ring holds exactly `max` slots.
                let extra = self.ring.len().max(4).min(max - self.ring.len());
                self.ring.reserve_exact(extra);
            }
            self.ring.push(x);
        } else {
            let slot = &mut self.ring[self.head as usize];
            let old = std::mem::replace(slot, x);
            self.sum -= u64::from(old);
            self.sum_sq -= u128::from(u64::from(old) * u64::from(old));
            self.head += 1;
            if self.head as usize == max {
                self.head = 0;
            }
        }
        self.sum += u64::from(x);
        self.sum_sq += u128::from(u64::from(x) * u64::from(x));
    }
}

/// Storage unit for a given first estimate: smallest power of ten >= 1 us such that
/// `u32::MAX` units cover 4096 estimates. At most 1e10 ns (for estimates near `u64::MAX`).
fn unit_for(first_estimate_ns: u64) -> u64 {
    let needed = first_estimate_ns
        .saturating_mul(4096)
        .div_ceil(u64::from(u32::MAX));
    let mut unit = 1_000u64;
    while unit < needed {
        unit *= 10;
    }
    unit
}

fn phi_at(elapsed_ns: u64, centre_ns: f64, std_ns: f64) -> f64 {
    let y = (elapsed_ns as f64 - centre_ns) / std_ns;
    softplus(y * (B + A * y * y)) / LN_10
}

/// `ln(1 + e^g)` without overflow for large `g` or loss of precision for very negative `g`.
fn softplus(g: f64) -> f64 {
    if g > 0.0 {
        g + (-g).exp().ln_1p()
    } else {
        g.exp().ln_1p()
    }
}

/// Inverse of [`softplus`]: `ln(e^x - 1)` for `x > 0`. Never forms `1 - 10^-threshold`, which
/// rounds to 1 for thresholds above ~16; the large-`x` branch is exact to rounding instead.
fn inverse_softplus(x: f64) -> f64 {
    if x > 1.0 {
        x + (-(-x).exp()).ln_1p()
    } else {
        x.exp_m1().ln()
    }
}

/// The unique real root of `A y^3 + B y = g` (strictly increasing and odd in `y`).
fn solve_cubic(g: f64) -> f64 {
    let h = g.abs();
    if !h.is_finite() {
        return g;
    }
    let mut y = if h > 1e30 {
        // The linear term is negligible (relative 1e-20) and Cardano's h + r could overflow.
        h.cbrt() / A.cbrt()
    } else {
        // Cardano for y^3 + p y = h / A with p = B / A > 0, written as
        // y = (h / A) / (u^2 + u v + v^2) with u v = p / 3, which avoids the cancellation
        // of the textbook `u - v` near y = 0.
        let p3 = B / (3.0 * A);
        let half = h / (2.0 * A);
        let u = (half + half.hypot(p3 * p3.sqrt())).cbrt();
        let v = p3 / u;
        (h / A) / (u * u + p3 + v * v)
    };
    for _ in 0..2 {
        y -= (A * y * y * y + B * y - h) / (3.0 * A * y * y + B);
    }
    y.copysign(g)
}

#[cfg(test)]
mod tests {
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
}
