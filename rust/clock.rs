//! Time sources. Every core operation takes an explicit `now` in nanoseconds; a [`Clock`] only
//! says where "now" comes from when the caller does not give it. The manual clock also drives
//! everything attached to it, so tests advance time and never sleep.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

/// Something whose due work runs when a [`ManualClock`] moves forward, or on a driver thread.
pub trait Driven: Send + Sync {
    /// Process everything due at or before `now_ns`. The time since the previous run counts
    /// as time the caller was running (a manual clock's ordinary advance).
    fn run_until(&self, now_ns: u64);

    /// Like [`run_until`](Driven::run_until), but the caller was *not* running since the
    /// previous run (a driver thread waking for its tick, a manual clock after a stall): a
    /// target that guards against local pauses judges that gap here.
    fn wake(&self, now_ns: u64) {
        self.run_until(now_ns);
    }
}

/// A monotonic clock on the process's `Instant`, offset so that its readings line up with a base
/// the caller chooses (the Python binding passes `time.monotonic_ns()`, so core timestamps and
/// Python's monotonic clock agree).
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
    base_ns: u64,
}

impl MonotonicClock {
    /// A clock that reads `base_ns` now and counts up from there.
    pub fn with_base(base_ns: u64) -> Self {
        Self {
            origin: Instant::now(),
            base_ns,
        }
    }

    /// Nanoseconds since this clock's base.
    pub fn now_ns(&self) -> u64 {
        let elapsed = self.origin.elapsed().as_nanos();
        self.base_ns
            .saturating_add(u64::try_from(elapsed).unwrap_or(u64::MAX))
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::with_base(0)
    }
}

/// A clock that moves only when told to. `advance` runs the due work of every attached
/// [`Driven`] before it returns, so after `advance(1s)` every event due in that second has
/// been produced. [`stall`](ManualClock::stall) moves it without running anything, as if the
/// process were frozen; the next `advance` or `set` first wakes the attached targets at the
/// reading the stall ended at.
#[derive(Default)]
pub struct ManualClock {
    now: AtomicU64,
    /// Moved by `stall` since attached targets last ran.
    stalled: AtomicBool,
    // Weak: a detector that is dropped must not be kept alive by its clock.
    attached: Mutex<Vec<Weak<dyn Driven>>>,
    // Serializes advances so two threads cannot interleave the work of overlapping intervals.
    advancing: Mutex<()>,
}

impl std::fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ns", &self.now_ns())
            .finish()
    }
}

impl ManualClock {
    /// A manual clock reading `start_ns`.
    pub fn new(start_ns: u64) -> Self {
        Self {
            now: AtomicU64::new(start_ns),
            ..Self::default()
        }
    }

    /// The current reading.
    pub fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }

    /// Attach something to drive on every advance.
    pub fn attach(&self, driven: Weak<dyn Driven>) {
        let mut attached = self.attached.lock();
        attached.retain(|w| w.strong_count() > 0);
        attached.push(driven);
    }

    /// Move forward by `dt_ns` and run everything due; returns the new reading.
    pub fn advance(&self, dt_ns: u64) -> u64 {
        let _one_at_a_time = self.advancing.lock();
        self.wake_if_stalled();
        let now = self.now_ns().saturating_add(dt_ns);
        self.now.store(now, Ordering::Release);
        self.each_attached(|d| d.run_until(now));
        now
    }

    /// Move forward by `dt_ns` without running anything: the attached targets were not
    /// running meanwhile. The next `advance` or `set` wakes them first. Returns the new reading.
    pub fn stall(&self, dt_ns: u64) -> u64 {
        let _one_at_a_time = self.advancing.lock();
        let now = self.now_ns().saturating_add(dt_ns);
        self.now.store(now, Ordering::Release);
        self.stalled.store(true, Ordering::Release);
        now
    }

    /// Move to `t_ns` (which must not be earlier than now) and run everything due.
    pub fn set(&self, t_ns: u64) -> Result<u64, String> {
        let _one_at_a_time = self.advancing.lock();
        let now = self.now_ns();
        if t_ns < now {
            return Err(format!(
                "a manual clock only moves forward: it reads {now} ns, asked for {t_ns} ns"
            ));
        }
        self.wake_if_stalled();
        self.now.store(t_ns, Ordering::Release);
        self.each_attached(|d| d.run_until(t_ns));
        Ok(t_ns)
    }

    /// Whether it was moved by [`stall`](ManualClock::stall) and the targets not woken yet.
    pub fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::Acquire)
    }

    /// After a stall, wake every target at the reading the stall ended at.
    fn wake_if_stalled(&self) {
        if self.stalled.swap(false, Ordering::AcqRel) {
            let woke = self.now_ns();
            self.each_attached(|d| d.wake(woke));
        }
    }

    fn each_attached(&self, f: impl Fn(&dyn Driven)) {
        // Collect strong refs first so the list lock is not held while detectors run.
        let live: Vec<Arc<dyn Driven>> = self
            .attached
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for driven in live {
            f(driven.as_ref());
        }
    }
}

/// Where a detector reads "now" from.
#[derive(Clone, Debug)]
pub enum ClockSource {
    /// The real monotonic clock; a driver thread advances the detector.
    Monotonic(MonotonicClock),
    /// A manual clock; its `advance` drives the detector.
    Manual(Arc<ManualClock>),
}

impl ClockSource {
    /// The current reading in nanoseconds.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match self {
            ClockSource::Monotonic(c) => c.now_ns(),
            ClockSource::Manual(c) => c.now_ns(),
        }
    }

    /// Whether this is a manual clock.
    pub fn is_manual(&self) -> bool {
        matches!(self, ClockSource::Manual(_))
    }
}

impl Default for ClockSource {
    fn default() -> Self {
        ClockSource::Monotonic(MonotonicClock::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Counter {
        runs: AtomicUsize,
        last: AtomicU64,
        woke: Mutex<Vec<u64>>,
    }
    impl Driven for Counter {
        fn run_until(&self, now_ns: u64) {
            self.runs.fetch_add(1, Ordering::SeqCst);
            self.last.store(now_ns, Ordering::SeqCst);
        }
        fn wake(&self, now_ns: u64) {
            self.woke.lock().push(now_ns);
        }
    }

    /// A counter attached to `clock`; the clock holds it weakly, so it is driven while the
    /// returned `Arc` (the test's, also given as `dyn Driven`) lives.
    fn attached_counter(clock: &ManualClock) -> (Arc<Counter>, Arc<dyn Driven>) {
        let counter = Arc::new(Counter {
            runs: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            woke: Mutex::new(Vec::new()),
        });
        let as_driven: Arc<dyn Driven> = counter.clone();
        clock.attach(Arc::downgrade(&as_driven));
        (counter, as_driven)
    }

    #[test]
    fn monotonic_starts_at_base_and_never_goes_back() {
        let c = MonotonicClock::with_base(5_000);
        let a = c.now_ns();
        let b = c.now_ns();
        assert!(a >= 5_000);
        assert!(b >= a);
    }

    #[test]
    fn manual_advance_drives_attached_until_dropped() {
        let clock = ManualClock::new(100);
        let (counter, as_driven) = attached_counter(&clock);
        assert_eq!(clock.advance(50), 150);
        assert_eq!(counter.runs.load(Ordering::SeqCst), 1);
        assert_eq!(counter.last.load(Ordering::SeqCst), 150);
        assert_eq!(clock.set(1_000).unwrap(), 1_000);
        assert_eq!(counter.last.load(Ordering::SeqCst), 1_000);
        drop(as_driven);
        drop(counter);
        clock.advance(1);
        assert_eq!(clock.now_ns(), 1_001);
    }

    #[test]
    fn a_stall_runs_nothing_and_the_next_advance_wakes_first() {
        let clock = ManualClock::new(0);
        let (counter, _kept) = attached_counter(&clock);
        assert_eq!(clock.stall(10), 10);
        assert_eq!(clock.stall(5), 15);
        assert_eq!(counter.runs.load(Ordering::SeqCst), 0);
        assert!(counter.woke.lock().is_empty());
        clock.advance(1);
        assert_eq!(*counter.woke.lock(), vec![15]);
        assert_eq!(counter.last.load(Ordering::SeqCst), 16);
        clock.advance(1); // an ordinary advance: no wake
        clock.stall(4);
        clock.set(30).unwrap();
        assert_eq!(*counter.woke.lock(), vec![15, 21]);
        assert_eq!(counter.last.load(Ordering::SeqCst), 30);
    }

    #[test]
    fn manual_set_refuses_to_go_back() {
        let clock = ManualClock::new(10);
        let err = clock.set(9).unwrap_err();
        assert!(err.contains("only moves forward"), "{err}");
        assert_eq!(clock.now_ns(), 10);
    }
}
