//! The self-pause guard: no false failures when the monitor itself stalls.
//!
//! A monitor frozen for a while (a process stop, a starved host, a long GIL hold) wakes to find
//! every deadline passed, though the topics were fine: their beats could not be taken in. So
//! when the detector is woken (`wake_at`: the driver's tick, a manual clock after a stall) more
//! than `max_local_pause` after its last run, it records a *local pause* `[last run, wake)`
//! and emits a `local_pause` event. A deadline inside the pause is then not a miss: the topic
//! gets a full period (its first offset; a further step once it has missed some) from the
//! wake-up. Beats recorded meanwhile with their true times are taken in first, as usual, so
//! only topics silent for a full period after the wake-up are counted, and FAILED topics keep
//! their state and count on from the wake-up. The check is lazy, like the rest of the driver:
//! nothing is walked at the wake-up itself, each deadline is looked at when it comes up.

use super::*;

/// The default `max_local_pause`: 5 s, as Cassandra's failure detector.
pub const DEFAULT_MAX_LOCAL_PAUSE_NS: u64 = 5_000_000_000;
/// `max_local_pause_ns` meaning "never a local pause".
const OFF: u64 = u64::MAX;

impl Detector {
    /// How long a wake-up may come after the last run before it is a local pause (ns); None
    /// when the guard is off.
    pub fn max_local_pause(&self) -> Option<u64> {
        let ns = self.max_local_pause_ns.load(Ordering::Relaxed);
        (ns != OFF).then_some(ns)
    }

    /// Set `max_local_pause` (ns, > 0), or turn the guard off with None.
    pub fn set_max_local_pause(&self, ns: Option<u64>) -> Result<(), DetectorError> {
        if ns == Some(0) {
            return Err(DetectorError::Invalid(
                "max_local_pause must be > 0 or None, got 0 ns".to_owned(),
            ));
        }
        self.max_local_pause_ns
            .store(ns.unwrap_or(OFF), Ordering::Relaxed);
        Ok(())
    }

    /// Woken at `now` (relative ns): record a local pause if the last run is too long ago.
    pub(super) fn guard_pause(&self, inner: &mut Inner, subs: &[Subscriber], now: u64) {
        let gap = now.saturating_sub(inner.now);
        let max = self.max_local_pause_ns.load(Ordering::Relaxed);
        if max == OFF || gap <= max {
            return;
        }
        // Deadlines of the last resolution step before the previous pause's end are judged
        // only at the next run: if that run is this wake-up, keep them inside.
        let from = if !inner.pause.is_empty()
            && inner.now < inner.pause.end.saturating_add(self.resolution_ns)
        {
            inner.pause.start
        } else {
            inner.now
        };
        inner.pause = from..now;
        self.counters.local_pauses.fetch_add(1, Ordering::Relaxed);
        self.counters
            .local_pause_ns
            .fetch_add(gap, Ordering::Relaxed);
        self.emit(inner, subs, Event::local_pause(self.abs(now), gap));
    }

    /// A topic whose deadline fell inside the local pause: due again a full period (or, once
    /// it has missed some, a step) after the wake-up, its missed count and state untouched.
    pub(super) fn rebase(&self, inner: &mut Inner, id: TopicId) {
        let offset = if inner.slots[id as usize].missed == 0 {
            self.first_offset(inner, id)
        } else {
            self.step(inner, id)
        };
        let woke = inner.pause.end;
        inner.slots[id as usize].next_deadline = woke.saturating_add(offset);
    }
}
