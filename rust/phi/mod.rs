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

#[cfg(test)]
mod tests;

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
/// heartbeat period is given per topic to `PhiState::new`.
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
    #[cfg(test)]
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
