//! A deadline queue on the timer wheel: at most one pending deadline per `u32` key, and due keys
//! handed out in deadline order to whoever pops them. It runs nothing itself: the publishers'
//! executor (`heartwire/executor.py`) keeps its tasks' deadlines here and has one thread pop
//! them, so ten thousand publishers need no ten thousand threads.
//!
//! Keys become due when the queue is *driven* past their deadline: by a driver thread on
//! the real clock, or by `ManualClock::advance`. Popping never reads the clock itself, so a
//! manual clock decides exactly what is due. Deadlines go on the wheel rounded *up* to the
//! resolution: a key is never handed out before its deadline, at most one resolution after.
//! The exact deadline given to [`DeadlineQueue::schedule`] is what [`DeadlineQueue::pop`] returns.

use crate::clock::{ClockSource, Driven};
use crate::wheel::Wheel;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Keys are `0..MAX_KEYS`. The slab grows to the largest key used (32 bytes a key), so the
/// bound keeps one stray key from costing gigabytes.
pub const MAX_KEYS: u32 = 1 << 24;

/// Why a deadline queue call was refused; the text names the argument and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadlineQueueError(pub String);

impl std::fmt::Display for DeadlineQueueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeadlineQueueError {}

struct State {
    /// Deadlines in ticks of `resolution_ns`, rounded up.
    wheel: Wheel,
    /// The exact deadline of each key, absolute ns (meaningful while it is on the wheel).
    deadlines: Vec<u64>,
    /// How far the queue has been driven, absolute ns: keys due by then can be popped.
    driven_ns: u64,
    closed: bool,
}

/// Deadlines per key on a timer wheel; share it through `Arc`.
pub struct DeadlineQueue {
    clock: ClockSource,
    resolution_ns: u64,
    state: Mutex<State>,
    /// Signalled when keys may have come due, and on close.
    due: Condvar,
}

impl DeadlineQueue {
    /// A deadline queue on `clock` whose wheel counts in steps of `resolution_ns`. A manual clock
    /// drives it on every advance; on the real clock a `crate::driver::Driver` must.
    pub fn new(clock: ClockSource, resolution_ns: u64) -> Result<Arc<Self>, DeadlineQueueError> {
        if resolution_ns == 0 {
            return Err(DeadlineQueueError(
                "resolution must be > 0, got 0 ns".to_owned(),
            ));
        }
        let now = clock.now_ns();
        let manual = match &clock {
            ClockSource::Manual(c) => Some(c.clone()),
            ClockSource::Monotonic(_) => None,
        };
        let queue = Arc::new(Self {
            clock,
            resolution_ns,
            state: Mutex::new(State {
                wheel: Wheel::new(now / resolution_ns),
                deadlines: Vec::new(),
                driven_ns: now,
                closed: false,
            }),
            due: Condvar::new(),
        });
        if let Some(manual) = manual {
            let driven: Arc<dyn Driven> = queue.clone();
            manual.attach(Arc::downgrade(&driven));
        }
        Ok(queue)
    }

    /// The clock's reading, absolute ns.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// The clock this queue reads.
    pub fn clock(&self) -> &ClockSource {
        &self.clock
    }

    fn check_key(key: u32) -> Result<(), DeadlineQueueError> {
        if key < MAX_KEYS {
            Ok(())
        } else {
            Err(DeadlineQueueError(format!(
                "key must be in [0, {MAX_KEYS}), got {key}"
            )))
        }
    }

    /// Make `key` due at `at_ns` (absolute ns), replacing its pending deadline if it has one.
    /// A deadline already passed is due at once. Allocates only when `key` is the largest seen.
    pub fn schedule(&self, key: u32, at_ns: u64) -> Result<(), DeadlineQueueError> {
        Self::check_key(key)?;
        let tick = at_ns.div_ceil(self.resolution_ns);
        let mut st = self.state.lock();
        let idx = key as usize;
        if idx >= st.deadlines.len() {
            // `resize` grows geometrically, so keys added one by one reallocate O(log n) times.
            st.deadlines.resize(idx + 1, 0);
            st.wheel.reserve_keys(idx + 1);
        }
        st.deadlines[idx] = at_ns;
        st.wheel.schedule(key, tick);
        if tick <= st.driven_ns / self.resolution_ns {
            self.due.notify_all();
        }
        Ok(())
    }

    /// Drop `key`'s pending deadline (also one already due but not popped yet). Returns whether
    /// it had one.
    pub fn cancel(&self, key: u32) -> bool {
        self.state.lock().wheel.cancel(key)
    }

    /// The pending deadline of `key`, absolute ns.
    pub fn deadline(&self, key: u32) -> Option<u64> {
        let st = self.state.lock();
        st.wheel.deadline(key).map(|_| st.deadlines[key as usize])
    }

    /// Keys with a pending deadline (due ones not popped yet included).
    pub fn len(&self) -> usize {
        self.state.lock().wheel.len()
    }

    /// Whether no key has a pending deadline.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Move the due threshold to `now_ns` (never back) and wake poppers if anything is due.
    fn drive(&self, now_ns: u64) {
        let mut st = self.state.lock();
        st.driven_ns = st.driven_ns.max(now_ns);
        let now_tick = st.driven_ns / self.resolution_ns;
        // A lower bound, so a wake-up may find nothing due (a far slot to cascade): harmless.
        if st.wheel.next_expiration().is_some_and(|t| t <= now_tick) {
            self.due.notify_all();
        }
    }

    /// Up to `max` due keys as `(key, deadline ns)`, in deadline order (ties by key).
    ///
    /// The wheel orders by tick only, so the keys of the batch's last tick are all taken out,
    /// sorted with the rest, and those beyond `max` put back: the next batch then starts exactly
    /// where this one ended.
    fn take(&self, st: &mut State, max: usize) -> Vec<(u32, u64)> {
        let now_tick = st.driven_ns / self.resolution_ns;
        let mut out = Vec::new();
        let mut last_tick = None;
        while let Some((key, tick)) = st.wheel.pop_expired(now_tick) {
            if out.len() >= max && last_tick != Some(tick) {
                st.wheel.schedule(key, tick); // due at once: first out next time
                break;
            }
            last_tick = Some(tick);
            out.push((key, st.deadlines[key as usize]));
        }
        out.sort_unstable_by_key(|&(key, at)| (at, key));
        if out.len() > max {
            for &(key, at) in &out[max..] {
                st.wheel.schedule(key, at.div_ceil(self.resolution_ns));
            }
            out.truncate(max);
        }
        out
    }

    /// Up to `max` keys that are due now, without waiting; nothing once closed.
    pub fn try_pop(&self, max: usize) -> Vec<(u32, u64)> {
        let mut st = self.state.lock();
        if st.closed {
            return Vec::new();
        }
        self.take(&mut st, max)
    }

    /// Up to `max` due keys, waiting up to `timeout` (None: until some come due or the
    /// queue is closed) for the first. Empty on timeout and once closed. Plain blocking
    /// Rust: call it with the GIL released.
    pub fn pop(&self, max: usize, timeout: Option<Duration>) -> Vec<(u32, u64)> {
        // A timeout too large to represent is the same as none.
        let until = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut st = self.state.lock();
        loop {
            if st.closed {
                return Vec::new();
            }
            let out = self.take(&mut st, max);
            if !out.is_empty() {
                return out;
            }
            match until {
                None => self.due.wait(&mut st),
                Some(until) => {
                    if self.due.wait_until(&mut st, until).timed_out() {
                        // One last look: keys may have come due just as the wait ran out.
                        return if st.closed {
                            Vec::new()
                        } else {
                            self.take(&mut st, max)
                        };
                    }
                }
            }
        }
    }

    /// Close: waiting and later pops return nothing. Schedules are still kept (and ignored).
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.due.notify_all();
    }

    /// Whether [`close`](DeadlineQueue::close) was called.
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }
}

impl Driven for DeadlineQueue {
    fn run_until(&self, now_ns: u64) {
        self.drive(now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::driver::Driver;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;

    fn manual() -> (Arc<ManualClock>, Arc<DeadlineQueue>) {
        let clock = Arc::new(ManualClock::new(0));
        let s = DeadlineQueue::new(ClockSource::Manual(clock.clone()), MS).unwrap();
        (clock, s)
    }

    #[test]
    fn keys_come_due_in_deadline_order_with_exact_deadlines() {
        let (clock, s) = manual();
        s.schedule(3, 2 * S).unwrap();
        s.schedule(1, S).unwrap();
        s.schedule(2, S).unwrap();
        s.schedule(0, 1_500 * MS + 7).unwrap(); // not on the resolution grid
        assert_eq!(s.len(), 4);
        assert!(s.try_pop(10).is_empty());
        clock.advance(S);
        assert_eq!(s.try_pop(10), vec![(1, S), (2, S)]);
        // Rounded up to the resolution: due only once the clock is past 1.501 s.
        clock.set(1_500 * MS + 7).unwrap();
        assert!(s.try_pop(10).is_empty());
        clock.set(1_501 * MS).unwrap();
        assert_eq!(s.try_pop(10), vec![(0, 1_500 * MS + 7)]);
        clock.advance(10 * S);
        assert_eq!(s.try_pop(10), vec![(3, 2 * S)]);
        assert!(s.is_empty());
    }

    #[test]
    fn reschedule_moves_and_cancel_removes_even_when_due() {
        let (clock, s) = manual();
        s.schedule(5, S).unwrap();
        s.schedule(5, 3 * S).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s.deadline(5), Some(3 * S));
        clock.advance(2 * S);
        assert!(s.try_pop(10).is_empty());
        s.schedule(6, S).unwrap(); // already passed: due at once
        clock.advance(2 * S);
        assert!(s.cancel(6)); // due but not popped
        assert!(!s.cancel(6));
        assert!(!s.cancel(1_000)); // never seen
        assert_eq!(s.try_pop(10), vec![(5, 3 * S)]);
        assert_eq!(s.deadline(5), None);
    }

    /// Everything due now, popped in batches of at most `max` (checked), in order.
    fn pop_all(s: &DeadlineQueue, max: usize) -> Vec<(u32, u64)> {
        let mut got = Vec::new();
        loop {
            let batch = s.try_pop(max);
            if batch.is_empty() {
                return got;
            }
            assert!(
                batch.len() <= max,
                "{} keys in a batch of at most {max}",
                batch.len()
            );
            got.extend(batch);
        }
    }

    #[test]
    fn max_splits_the_due_keys_into_batches() {
        let (clock, s) = manual();
        for k in 0..10_000u32 {
            s.schedule(k, u64::from(10_000 - k) * MS).unwrap();
        }
        clock.advance(20 * S);
        let got = pop_all(&s, 1024);
        assert_eq!(got.len(), 10_000);
        assert!(got.windows(2).all(|p| p[0].1 < p[1].1));
        assert_eq!(got[0], (9_999, MS));
    }

    #[test]
    fn ties_within_a_tick_stay_in_order_across_batches() {
        let (clock, s) = manual();
        for k in (0..100u32).rev() {
            // Ten deadlines inside one 1 ms tick, ten keys each.
            s.schedule(k, S + u64::from(k / 10) * 1_000).unwrap();
        }
        clock.advance(2 * S);
        let got = pop_all(&s, 7);
        let want: Vec<_> = (0..100u32)
            .map(|k| (k, S + u64::from(k / 10) * 1_000))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn out_of_range_keys_are_refused() {
        let (_clock, s) = manual();
        let err = s.schedule(MAX_KEYS, 0).unwrap_err();
        assert!(err.0.contains("key") && err.0.contains(&MAX_KEYS.to_string()));
        assert!(DeadlineQueue::new(ClockSource::default(), 0).is_err());
    }

    #[test]
    fn pop_waits_for_the_clock_and_close_wakes_it() {
        let (clock, s) = manual();
        s.schedule(7, S).unwrap();
        let popper = {
            let s = s.clone();
            std::thread::spawn(move || s.pop(16, Some(Duration::from_secs(10))))
        };
        clock.advance(S);
        assert_eq!(popper.join().unwrap(), vec![(7, S)]);
        let waiter = {
            let s = s.clone();
            std::thread::spawn(move || s.pop(16, None))
        };
        s.close();
        assert!(waiter.join().unwrap().is_empty());
        s.schedule(8, 0).unwrap();
        assert!(s.try_pop(16).is_empty());
        assert!(s.is_closed());
    }

    #[test]
    fn pop_times_out_when_nothing_is_due() {
        let (_clock, s) = manual();
        s.schedule(1, S).unwrap();
        assert!(s.pop(16, Some(Duration::from_millis(1))).is_empty());
    }

    #[test]
    fn a_driver_fires_a_key_on_the_real_clock() {
        let s = DeadlineQueue::new(ClockSource::default(), MS).unwrap();
        let at = s.now_ns() + 20 * MS;
        s.schedule(42, at).unwrap();
        let mut driver = Driver::spawn(&s, s.clock().clone(), Duration::from_millis(2)).unwrap();
        // Bounded wait: due after 20 ms.
        let got = s.pop(16, Some(Duration::from_secs(5)));
        driver.stop();
        assert_eq!(got, vec![(42, at)]);
        assert!(s.now_ns() >= at);
    }
}
