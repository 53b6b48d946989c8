//! The ingest-lag guard: no false failures when the monitor's own intake falls behind its feed.
//!
//! When the intake (the reader of the broker connection) cannot keep up, beats wait unread in
//! the socket and the broker while the clock runs on: judged against the clock, every live
//! topic would miss its deadline. So after each read the intake tells the detector
//! ([`Detector::note_intake`]) whether it is *backlogged* (the read filled its buffer: more is
//! waiting) and the *transit* of the freshest beat in that read (wall now minus its send time).
//! While backlogged, deadlines are judged against a *watermark* of what has been read
//! (`now - transit`) instead of the clock: a later deadline is not counted yet, since the
//! topic's beat may be waiting unread. Beats read meanwhile are recorded at the clock as usual
//! and re-arm their topics, so a live topic never fails; one that really died is reported once
//! the watermark passes its deadline, late by the lag at most. A read that does not fill its
//! buffer releases the watermark: deadlines are judged at the clock again.
//!
//! The watermark never goes back within an episode, and what was judged stays judged
//! (`Inner::judged` never goes back: a hold begins where judging stood). A backlogged read with
//! no transit (legacy beats carry no send time) leaves the watermark where it is. Either way
//! deadlines are held at most `max_ingest_lag` behind the clock: past that the monitor cannot
//! tell what is late (a legacy feed, a reader that stopped reporting, a publisher clock far
//! behind), and deadlines proceed that far behind the clock.
//!
//! Events: `lagging` once per episode, when the lag (clock minus watermark) first exceeds
//! `lag_threshold`; `caught_up` when an episode that reported `lagging` ends, with its length
//! (first backlogged read to release) and its largest lag. An episode below the threshold holds
//! deadlines just the same, silently. With no threshold the guard is off: nothing is held.
//!
//! Concurrency: the reader's notes take the detector lock only to start or end an episode or to
//! report `lagging`; a note inside an episode only raises the atomic watermark. [`RELEASED`] is
//! `u64::MAX`, so a `fetch_max` racing a release (under the lock) leaves it released, and an
//! episode starts only under the lock, where the running state and the threshold are checked.

use super::*;

/// The default `lag_threshold`: 1 s. Below it a lag is ordinary batching (a read of a full
/// buffer is itself a fraction of a second of beats) and is held silently; above it the
/// monitor is visibly behind its feed, which its operators want to know.
pub const DEFAULT_LAG_THRESHOLD_NS: u64 = 1_000_000_000;
/// The default `max_ingest_lag`: 60 s. A topic that died while the intake lagged is reported at
/// most this late; a lag beyond it is not believed (see the module note).
pub const DEFAULT_MAX_INGEST_LAG_NS: u64 = 60_000_000_000;
/// A setting meaning "off" / "no bound".
const OFF: u64 = u64::MAX;
/// The watermark when no episode is on: deadlines at the clock.
const RELEASED: u64 = u64::MAX;

/// The guard's settings and the state its lock-free path touches.
pub(super) struct LagGuard {
    /// Relative ns up to which the intake has read, or [`RELEASED`].
    watermark: AtomicU64,
    /// A lag above this is reported (`lagging`); [`OFF`]: the guard is off.
    threshold_ns: AtomicU64,
    /// Deadlines are never held further behind the clock than this ([`OFF`]: no bound).
    max_ns: AtomicU64,
    /// Whether this episode has reported `lagging` (set and cleared under the detector lock).
    lagging: AtomicBool,
    /// The largest lag seen in this episode.
    max_lag_ns: AtomicU64,
}

impl LagGuard {
    pub(super) fn new() -> Self {
        Self {
            watermark: AtomicU64::new(RELEASED),
            threshold_ns: AtomicU64::new(DEFAULT_LAG_THRESHOLD_NS),
            max_ns: AtomicU64::new(DEFAULT_MAX_INGEST_LAG_NS),
            lagging: AtomicBool::new(false),
            max_lag_ns: AtomicU64::new(0),
        }
    }
}

impl Detector {
    /// One intake observation at `now` (absolute ns; default: the clock's now), made after a
    /// read whose beats were recorded: `backlogged` (the read filled its buffer: more data is
    /// waiting) and `transit_ns` (wall now minus the freshest beat's send time in that read, if
    /// any beat carried one; a negative transit, from a publisher clock ahead, is 0). Ignored
    /// while the guard is off or the detector is stopped.
    pub fn note_intake(&self, backlogged: bool, transit_ns: Option<u64>, now: Option<u64>) {
        let threshold = self.lag.threshold_ns.load(Ordering::Relaxed);
        if threshold == OFF {
            return;
        }
        let held = self.lag.watermark.load(Ordering::Acquire) != RELEASED;
        if !backlogged {
            if held {
                let now = self.rel_now(now);
                self.emitting(|inner, subs| self.end_lag(inner, subs, now));
            }
            return;
        }
        let now = self.rel_now(now);
        let mark = transit_ns.map(|t| now.saturating_sub(t));
        if !held {
            self.emitting(|inner, subs| self.start_lag(inner, subs, mark, now));
            return;
        }
        if let Some(mark) = mark {
            // A release racing this note stays released: RELEASED is the largest value.
            self.lag.watermark.fetch_max(mark, Ordering::AcqRel);
        }
        let w = self.lag.watermark.load(Ordering::Acquire);
        if w == RELEASED {
            return;
        }
        let lag = now.saturating_sub(w);
        self.lag.max_lag_ns.fetch_max(lag, Ordering::Relaxed);
        if lag > threshold && !self.lag.lagging.load(Ordering::Acquire) {
            self.emitting(|inner, subs| self.check_lagging(inner, subs, now));
        }
    }

    /// How far behind the clock the intake's watermark is now (ns; 0 when not backlogged).
    /// Deadlines are held by this much, up to `max_ingest_lag`.
    pub fn lag_ns(&self) -> u64 {
        let w = self.lag.watermark.load(Ordering::Acquire);
        if w == RELEASED {
            return 0;
        }
        self.rel_now(None).saturating_sub(w)
    }

    /// Whether an episode has reported `lagging` and not yet `caught_up`.
    pub fn is_lagging(&self) -> bool {
        self.lag.lagging.load(Ordering::Acquire)
    }

    /// The lag above which `lagging` is reported (ns); None when the guard is off.
    pub fn lag_threshold(&self) -> Option<u64> {
        let ns = self.lag.threshold_ns.load(Ordering::Relaxed);
        (ns != OFF).then_some(ns)
    }

    /// Set `lag_threshold` (ns, > 0), or turn the guard off with None: the hold, if any, is
    /// released at once (an episode that reported `lagging` ends with `caught_up`).
    pub fn set_lag_threshold(&self, ns: Option<u64>) -> Result<(), DetectorError> {
        if ns == Some(0) {
            return Err(DetectorError::Invalid(
                "lag_threshold must be > 0 or None, got 0 ns".to_owned(),
            ));
        }
        let now = self.rel_now(None);
        self.emitting(|inner, subs| {
            // Under the lock: an episode starts only under it, after checking the threshold.
            self.lag
                .threshold_ns
                .store(ns.unwrap_or(OFF), Ordering::Relaxed);
            if ns.is_none() {
                self.end_lag(inner, subs, now);
            } else {
                self.check_lagging(inner, subs, now); // a lower threshold may be passed now
            }
        });
        Ok(())
    }

    /// How far behind the clock deadlines may be held (ns); None: no bound.
    pub fn max_ingest_lag(&self) -> Option<u64> {
        let ns = self.lag.max_ns.load(Ordering::Relaxed);
        (ns != OFF).then_some(ns)
    }

    /// Set `max_ingest_lag` (ns, > 0), or None for no bound.
    pub fn set_max_ingest_lag(&self, ns: Option<u64>) -> Result<(), DetectorError> {
        if ns == Some(0) {
            return Err(DetectorError::Invalid(
                "max_ingest_lag must be > 0 or None, got 0 ns".to_owned(),
            ));
        }
        self.lag.max_ns.store(ns.unwrap_or(OFF), Ordering::Relaxed);
        Ok(())
    }

    /// A first backlogged read (under the lock): the episode starts, the watermark at `mark`
    /// or, with no transit, where judging stands.
    fn start_lag(&self, inner: &mut Inner, subs: &[Subscriber], mark: Option<u64>, now: u64) {
        if !inner.running || self.lag.threshold_ns.load(Ordering::Relaxed) == OFF {
            return;
        }
        if self.lag.watermark.load(Ordering::Acquire) == RELEASED {
            inner.lag_since = now;
            self.lag.lagging.store(false, Ordering::Release);
            self.lag.max_lag_ns.store(0, Ordering::Relaxed);
            let w = mark.unwrap_or(inner.judged.min(now));
            self.lag.watermark.store(w, Ordering::Release);
        } else if let Some(mark) = mark {
            // Another note started it meanwhile.
            self.lag.watermark.fetch_max(mark, Ordering::AcqRel);
        }
        self.check_lagging(inner, subs, now);
    }

    /// Under the lock: note the lag at `now` and report `lagging` if it is the episode's first
    /// time above the threshold.
    fn check_lagging(&self, inner: &mut Inner, subs: &[Subscriber], now: u64) {
        let w = self.lag.watermark.load(Ordering::Acquire);
        if w == RELEASED {
            return;
        }
        let lag = now.saturating_sub(w);
        self.lag.max_lag_ns.fetch_max(lag, Ordering::Relaxed);
        let threshold = self.lag.threshold_ns.load(Ordering::Relaxed);
        if threshold == OFF || lag <= threshold || self.lag.lagging.load(Ordering::Acquire) {
            return;
        }
        self.lag.lagging.store(true, Ordering::Release);
        self.counters.laggings.fetch_add(1, Ordering::Relaxed);
        self.emit(inner, subs, Event::lagging(self.abs(now), lag));
    }

    /// Under the lock: release the watermark (deadlines at the clock again); an episode that
    /// reported `lagging` ends with `caught_up`.
    pub(super) fn end_lag(&self, inner: &mut Inner, subs: &[Subscriber], now: u64) {
        let w = self.lag.watermark.swap(RELEASED, Ordering::AcqRel);
        if w == RELEASED {
            return;
        }
        let max_lag = self
            .lag
            .max_lag_ns
            .fetch_max(now.saturating_sub(w), Ordering::Relaxed)
            .max(now.saturating_sub(w));
        if self.lag.lagging.swap(false, Ordering::AcqRel) {
            let duration = now.saturating_sub(inner.lag_since);
            self.emit(
                inner,
                subs,
                Event::caught_up(self.abs(now), duration, max_lag),
            );
        }
    }

    /// Under the lock, at the start of a run of the driver to `now`: the time up to which
    /// deadlines are judged in this run (the watermark, bounded by `max_ingest_lag`, or the
    /// clock when released; never earlier than the last run's), reporting `lagging` if due.
    pub(super) fn judge_until(&self, inner: &mut Inner, subs: &[Subscriber], now: u64) -> u64 {
        let w = self.lag.watermark.load(Ordering::Acquire);
        let target = if w == RELEASED {
            now
        } else {
            self.check_lagging(inner, subs, now);
            let max = self.lag.max_ns.load(Ordering::Relaxed);
            let floor = if max == OFF {
                0
            } else {
                now.saturating_sub(max)
            };
            w.max(floor).min(now)
        };
        inner.judged = inner.judged.max(target);
        inner.judged
    }
}
