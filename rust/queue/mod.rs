//! The bounded event queue between the detector and one subscriber's dispatch thread.
//!
//! One [`EventQueue`] serves one subscriber: any number of producer threads (the detector's
//! driver thread, threads recording beats) push events, and a single consumer (the Python
//! dispatch thread, running with the GIL released) takes them out in batches.
//!
//! # Design
//!
//! * The ring is a [`crossbeam_queue::ArrayQueue`]: lock-free push and pop, fixed capacity.
//! * What happens when the ring is full is an explicit [`Overflow`] policy chosen at
//!   construction, and every event lost to it is counted in [`QueueStats`].
//! * Order: events with the same [`Keyed::key`] come out in the order they were pushed, under
//!   every policy (some may be missing, never reordered). This relies on the caller already
//!   serializing pushes for one key (each push of a key happens-before the next push of it);
//!   pushes for different keys may race freely and their relative order is unspecified.
//! * [`Overflow::Coalesce`] parks overflowing events in a side table holding at most one
//!   (the newest) event per key. While a key has an entry there, its later events also go to the
//!   side table (replacing), so they cannot overtake it through the ring. The consumer moves
//!   side-table entries back to the tail of the ring, oldest key first, whenever a pop has made
//!   room; since every earlier event of that key entered the ring before the entry was parked,
//!   the moved entry lands behind them. The side table is behind a mutex that only the overflow
//!   path touches: with an empty side table a push pays one extra atomic load.
//! * Blocking (a consumer waiting for events, a producer waiting for room under
//!   [`Overflow::Block`]) first spins/yields briefly with a crossbeam [`Backoff`], then parks on a
//!   `parking_lot` condvar. The mutexes behind those condvars are only taken on that slow path
//!   and by a thread that has seen a parked waiter; see `EventQueue::park_consumer` for why no
//!   wake-up can be lost.
//! * Nothing here touches Python: [`EventQueue::pop_batch`] is plain blocking Rust, meant to be
//!   called with the GIL released.

#![forbid(unsafe_code)]

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::{Backoff, CachePadded};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[cfg(test)]
mod tests;

/// An event that belongs to a key (a topic id); per-key order is what the queue preserves.
pub trait Keyed {
    /// The key whose events must stay in push order.
    fn key(&self) -> u32;
}

/// The key of events about no key (the detector's `local_pause`, `lagging`, `caught_up`):
/// never coalesced (each is its own news), and given no per-key entry (a table indexed by it
/// would need 2^32 entries).
pub const UNKEYED: u32 = u32::MAX;

/// What [`EventQueue::push`] does when the ring is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// The producer waits until there is room (or the queue is closed). Nothing is lost.
    Block,
    /// The new event goes in and the oldest event in the ring is discarded (`dropped_oldest`).
    DropOldest,
    /// The new event is discarded (`dropped_newest`) and `push` returns `false`.
    DropNewest,
    /// Only the newest overflowing event per key is kept, in a side table; an event it replaces
    /// is counted in `coalesced`.
    Coalesce,
}

impl Overflow {
    /// Every policy, in the order their names are listed in error messages.
    pub const ALL: [Overflow; 4] = [
        Overflow::Block,
        Overflow::DropOldest,
        Overflow::DropNewest,
        Overflow::Coalesce,
    ];

    /// Parses a policy name: `"block"`, `"drop-oldest"`, `"drop-newest"` or `"coalesce"`
    /// (exact spelling). The error message names the bad value and lists the valid ones.
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = Self::ALL.iter().map(Overflow::as_str).collect();
                format!(
                    "unknown overflow policy {s:?}; expected one of: {}",
                    valid.join(", ")
                )
            })
    }

    /// The policy's name, as accepted by [`Overflow::parse`].
    pub fn as_str(&self) -> &'static str {
        match self {
            Overflow::Block => "block",
            Overflow::DropOldest => "drop-oldest",
            Overflow::DropNewest => "drop-newest",
            Overflow::Coalesce => "coalesce",
        }
    }
}

impl fmt::Display for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Overflow {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Overflow::parse(s)
    }
}

/// A snapshot of a queue's counters.
///
/// Each field is read separately, so a snapshot taken while threads are pushing or popping may
/// be slightly inconsistent. Once the queue is quiescent these hold:
///
/// * `pushed == popped + dropped_oldest + coalesced + len`
/// * push calls `== pushed + dropped_newest + rejected_closed`
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Events accepted into the ring or the side table (`push` returned `true`).
    pub pushed: u64,
    /// Events handed to the consumer.
    pub popped: u64,
    /// Accepted events later displaced from the ring by a newer one ([`Overflow::DropOldest`]).
    pub dropped_oldest: u64,
    /// Events refused because the ring was full ([`Overflow::DropNewest`]).
    pub dropped_newest: u64,
    /// Accepted events replaced in the side table by a newer one for the same key
    /// ([`Overflow::Coalesce`]).
    pub coalesced: u64,
    /// Events refused because the queue was closed.
    pub rejected_closed: u64,
    /// Events waiting: in the ring plus in the side table.
    pub len: usize,
    /// The ring's capacity.
    pub capacity: usize,
}

/// Overflowing events under [`Overflow::Coalesce`]: at most one per key, in the order their keys
/// first overflowed (so the longest-waiting key goes back to the ring first).
///
/// Keys are dense (topic ids), so a key's entry is found through a flat index, not a hash map:
/// a mass failure parks up to one event per topic, and each park and take is a few loads and
/// stores (a `HashMap<u32, T>` plus a key queue cost ~400 ns per event at a million).
struct SideTable<T> {
    /// The parked events, oldest first. The one at `events[i]` has the position `taken + i`.
    events: VecDeque<T>,
    /// Events taken from the front so far (the position of `events[0]`), wrapping.
    taken: u32,
    /// Per key, the position its entry had when parked (wrapping). Stale once the entry is
    /// taken: a position is trusted only if the event there has the key (one entry per key,
    /// so that event is the key's entry).
    position: Vec<u32>,
}

impl<T: Keyed> SideTable<T> {
    fn new() -> Self {
        Self {
            events: VecDeque::new(),
            taken: 0,
            position: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.events.len()
    }

    /// The key's entry, if it has one.
    #[inline]
    fn get_mut(&mut self, key: u32) -> Option<&mut T> {
        let at = *self.position.get(key as usize)?;
        let i = at.wrapping_sub(self.taken) as usize;
        match self.events.get_mut(i) {
            Some(ev) if ev.key() == key => Some(ev),
            _ => None,
        }
    }

    /// Park `ev`, whose key has no entry.
    fn park(&mut self, ev: T) {
        if ev.key() == UNKEYED {
            self.events.push_back(ev); // in order, but never replaced
            return;
        }
        let key = ev.key() as usize;
        if key >= self.position.len() {
            let len = (key + 1).max(self.position.len() * 3 / 2).max(1024);
            self.position.resize(len, 0);
        }
        self.position[key] = self.taken.wrapping_add(self.events.len() as u32);
        self.events.push_back(ev);
    }

    fn front(&self) -> Option<&T> {
        self.events.front()
    }

    fn take_front(&mut self) -> Option<T> {
        let ev = self.events.pop_front()?;
        self.taken = self.taken.wrapping_add(1);
        if self.events.is_empty() && self.events.capacity() > SHRINK_PARKED {
            // A mass overflow is over: give its memory back.
            self.events = VecDeque::new();
        }
        Some(ev)
    }
}

/// A side table emptied with room for more events than this gives its memory back.
const SHRINK_PARKED: usize = 1 << 16;

/// Read on every push or pop, written rarely: one cache line, apart from the busy counters.
struct Flags {
    closed: AtomicBool,
    /// The consumer is acquiring the side-table lock; overflowing producers briefly hold off.
    refill_wanted: AtomicBool,
    /// Entries in the side table; written only under the side-table lock.
    side_len: AtomicUsize,
    /// Consumers parked (or about to park) on `not_empty`.
    consumer_waiters: AtomicUsize,
    /// Producers parked (or about to park) on `not_full`.
    producer_waiters: AtomicUsize,
    /// An event was pushed by [`EventQueue::push_deferred`] without waking the consumer yet.
    wake_pending: AtomicBool,
}

/// What tells a producer that everything it pushed before some moment is out of the queue and
/// done with (see [`EventQueue::mark`]). Written by the consumer.
#[derive(Default)]
struct Drain {
    /// Pops so far (calls of `try_pop_batch`, empty ones included).
    passes: AtomicU64,
    /// 1 + the latest pass that found the queue empty and whose events, if any, the consumer
    /// has handed back; 0 for none yet.
    drained: AtomicU64,
    /// 1 + a pass that found the queue empty after handing out events not handed back yet.
    pending: AtomicU64,
    /// Pops in progress (a consumer inside one may hold events it took out, not counted yet).
    in_pop: AtomicUsize,
}

/// Written by producers.
#[derive(Default)]
struct ProducerCounters {
    pushed: AtomicU64,
    dropped_oldest: AtomicU64,
    dropped_newest: AtomicU64,
    coalesced: AtomicU64,
    rejected_closed: AtomicU64,
}

/// A bounded multi-producer, single-consumer event queue with an explicit overflow policy.
///
/// Share it through an `Arc`; it is `Send + Sync` when `T: Send`. Any thread may push; only one
/// thread at a time should pop (with several, per-key order is no longer guaranteed, though
/// nothing is lost or duplicated).
pub struct EventQueue<T> {
    ring: ArrayQueue<T>,
    overflow: Overflow,
    flags: CachePadded<Flags>,
    producer_counters: CachePadded<ProducerCounters>,
    /// Written by the consumer only; kept off the producers' cache lines.
    popped: CachePadded<AtomicU64>,
    /// The consumer's passes, emptiness and hand-back (see [`EventQueue::mark`]).
    drain: CachePadded<Drain>,
    side: Mutex<SideTable<T>>,
    /// Slow path of a consumer waiting for events.
    consumer_gate: Mutex<()>,
    not_empty: Condvar,
    /// Slow path of a producer waiting for room ([`Overflow::Block`]).
    producer_gate: Mutex<()>,
    not_full: Condvar,
}

impl<T: Copy + Send + Keyed> EventQueue<T> {
    /// Creates an empty queue whose ring holds `capacity` events. A `capacity` of 0 is clamped
    /// to 1 rather than panicking.
    pub fn new(capacity: usize, overflow: Overflow) -> Self {
        EventQueue {
            ring: ArrayQueue::new(capacity.max(1)),
            overflow,
            flags: CachePadded::new(Flags {
                closed: AtomicBool::new(false),
                refill_wanted: AtomicBool::new(false),
                side_len: AtomicUsize::new(0),
                consumer_waiters: AtomicUsize::new(0),
                producer_waiters: AtomicUsize::new(0),
                wake_pending: AtomicBool::new(false),
            }),
            producer_counters: CachePadded::new(ProducerCounters::default()),
            popped: CachePadded::new(AtomicU64::new(0)),
            drain: CachePadded::new(Drain::default()),
            side: Mutex::new(SideTable::new()),
            consumer_gate: Mutex::new(()),
            not_empty: Condvar::new(),
            producer_gate: Mutex::new(()),
            not_full: Condvar::new(),
        }
    }

    /// The overflow policy chosen at construction.
    pub fn overflow(&self) -> Overflow {
        self.overflow
    }

    /// Pushes an event, applying the overflow policy if the ring is full.
    ///
    /// Returns true if the event was accepted (it may still later be displaced under DropOldest,
    /// or replaced under Coalesce). Returns false if it was dropped under
    /// [`Overflow::DropNewest`] or the queue is closed. Under [`Overflow::Block`] this waits for
    /// room, possibly forever if nobody pops and nobody closes the queue; so under `Block`, never
    /// push from the consumer thread itself (e.g. from a callback it runs) into its own queue.
    ///
    /// A push that races with [`close`](Self::close) may still be accepted; its event is then
    /// returned by a later pop.
    pub fn push(&self, ev: T) -> bool {
        let accepted = self.push_quietly(ev);
        if accepted {
            self.wake_consumer();
        }
        accepted
    }

    /// [`push`](Self::push) without waking a parked consumer yet: the producer calls
    /// [`flush_wake`](Self::flush_wake) once after a burst, so that the consumer wakes once for
    /// the whole burst (one batch) instead of once per event. A `block` push that has to wait
    /// for room wakes the consumer first, so a burst larger than the queue cannot deadlock.
    pub fn push_deferred(&self, ev: T) -> bool {
        let accepted = self.push_quietly(ev);
        if accepted {
            self.flags.wake_pending.store(true, Ordering::Release);
        }
        accepted
    }

    /// Wake the consumer if a [`push_deferred`](Self::push_deferred) has not done so yet.
    pub fn flush_wake(&self) {
        if self.flags.wake_pending.load(Ordering::Relaxed)
            && self.flags.wake_pending.swap(false, Ordering::AcqRel)
        {
            self.wake_consumer();
        }
    }

    fn push_quietly(&self, ev: T) -> bool {
        let c = &self.producer_counters;
        if self.flags.closed.load(Ordering::Acquire) {
            c.rejected_closed.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        match self.overflow {
            Overflow::Block => {
                if !self.push_blocking(ev) {
                    c.rejected_closed.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
            }
            Overflow::DropOldest => {
                if self.ring.force_push(ev).is_some() {
                    c.dropped_oldest.fetch_add(1, Ordering::Relaxed);
                }
            }
            Overflow::DropNewest => {
                if self.ring.push(ev).is_err() {
                    // The ring is full, so the consumer has already been woken for it.
                    c.dropped_newest.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
            }
            Overflow::Coalesce => self.push_coalescing(ev),
        }
        c.pushed.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// [`push_deferred`](Self::push_deferred) that never waits: under [`Overflow::Block`] a
    /// full ring hands the event back (`Err`) instead of waiting for room, so that the caller
    /// can let go of its locks first and then [`wait_for_room`](Self::wait_for_room). Under the
    /// other policies it is `push_deferred` (`Ok(accepted)`).
    pub fn try_push_deferred(&self, ev: T) -> Result<bool, T> {
        if self.overflow != Overflow::Block || self.flags.closed.load(Ordering::Acquire) {
            return Ok(self.push_deferred(ev));
        }
        self.ring.push(ev)?;
        self.producer_counters
            .pushed
            .fetch_add(1, Ordering::Relaxed);
        self.flags.wake_pending.store(true, Ordering::Release);
        Ok(true)
    }

    /// Wait until the ring has room or the queue is closed (at once under the policies that
    /// never wait). Wakes the consumer first, for events pushed with a deferred wake-up.
    pub fn wait_for_room(&self) {
        self.flush_wake();
        let backoff = Backoff::new();
        while self.overflow == Overflow::Block
            && self.ring.is_full()
            && !self.flags.closed.load(Ordering::Acquire)
        {
            self.await_room(&backoff);
        }
    }

    /// [`Overflow::Block`]: push, waiting for room. Returns false if the queue was closed first.
    fn push_blocking(&self, mut ev: T) -> bool {
        let backoff = Backoff::new();
        loop {
            match self.ring.push(ev) {
                Ok(()) => return true,
                Err(back) => ev = back,
            }
            if self.flags.closed.load(Ordering::Acquire) {
                return false;
            }
            self.await_room(&backoff);
        }
    }

    /// One step of waiting for a full ring to get room: spin and yield while `backoff`
    /// allows, then park until a pop frees a slot or the queue is closed. Spurious returns are
    /// allowed; the caller re-checks.
    fn await_room(&self, backoff: &Backoff) {
        // The consumer usually frees a slot within microseconds: spin and yield first.
        if !backoff.is_completed() {
            backoff.snooze();
            return;
        }
        // Then park, after waking the consumer: deferred pushes may have left it asleep.
        // The same eventcount handshake as in `park_consumer`, mirrored: our
        // fence pairs with the one in `wake_producers` after the consumer's pop, so either
        // our `is_full` sees the freed slot or the consumer sees us registered and notifies
        // under `producer_gate`, which we hold until `wait` has released it.
        self.flags.wake_pending.store(false, Ordering::Relaxed);
        self.wake_consumer();
        let mut gate = self.producer_gate.lock();
        self.flags.producer_waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.ring.is_full() && !self.flags.closed.load(Ordering::SeqCst) {
            self.not_full.wait(&mut gate);
        }
        self.flags.producer_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// [`Overflow::Coalesce`]: push into the ring, or into the side table if the ring is full or
    /// the key already has a side-table entry. Always accepts.
    fn push_coalescing(&self, mut ev: T) {
        // Common path: nothing parked in the side table, so no key can have an entry there and
        // the ring is the right place. (Pushes of one key are serialized by the caller, so if
        // this key's previous event went to the side table we see `side_len > 0`, or a later 0
        // stored after that entry was moved back into the ring, and then our event lands
        // behind it.)
        if self.flags.side_len.load(Ordering::Acquire) == 0 {
            match self.ring.push(ev) {
                Ok(()) => return,
                Err(back) => ev = back,
            }
        }
        let key = ev.key();
        // Give way to a consumer waiting to move entries back to the ring (see
        // `refill_from_side`), but only briefly: this is a courtesy, not a lock.
        let backoff = Backoff::new();
        while self.flags.refill_wanted.load(Ordering::Relaxed) && !backoff.is_completed() {
            backoff.snooze();
        }
        let mut side = self.side.lock();
        if let Some(slot) = (key != UNKEYED).then(|| side.get_mut(key)).flatten() {
            // The key already waits in the side table: going to the ring would overtake it.
            *slot = ev;
            self.producer_counters
                .coalesced
                .fetch_add(1, Ordering::Relaxed);
        } else if let Err(ev) = self.ring.push(ev) {
            side.park(ev);
            self.flags.side_len.store(side.len(), Ordering::Release);
        }
    }

    /// Appends up to `max` events to `out`; waits up to `timeout` (None = forever) for the
    /// first. Returns how many were appended; 0 on timeout or when closed and empty (and at once
    /// if `max` is 0).
    ///
    /// Plain blocking Rust: call it with the GIL released. It spins and yields briefly before
    /// parking the thread.
    pub fn pop_batch(&self, out: &mut Vec<T>, max: usize, timeout: Option<Duration>) -> usize {
        if max == 0 {
            return 0;
        }
        // A timeout too large to represent is the same as none.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let backoff = Backoff::new();
        loop {
            let n = self.try_pop_batch(out, max);
            if n > 0 {
                return n;
            }
            if self.flags.closed.load(Ordering::Acquire) {
                // Closed: one more look, since events pushed before `close` are visible now.
                return self.try_pop_batch(out, max);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return 0;
            }
            if !backoff.is_completed() {
                backoff.snooze();
                continue;
            }
            self.park_consumer(deadline);
        }
    }

    /// Sleeps until an event may be available, the queue is closed, or `deadline` passes.
    /// Spurious returns are allowed; the caller re-checks.
    ///
    /// No lost wake-up (an "eventcount"): we register in `consumer_waiters`, issue a SeqCst
    /// fence, then re-check the ring, side table and closed flag; a producer publishes its
    /// event, issues a SeqCst fence, then reads `consumer_waiters` (`wake_consumer`). The two
    /// fences are totally ordered, so either our re-check sees the event, or the producer sees
    /// us registered. In the latter case it notifies while holding `consumer_gate`, which we
    /// hold from registering until `wait` atomically releases it, so the notify cannot fall
    /// between our re-check and our sleep. `close` sets the flag before taking the gate, so it
    /// is covered the same way.
    fn park_consumer(&self, deadline: Option<Instant>) {
        let mut gate = self.consumer_gate.lock();
        self.flags.consumer_waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let ready = !self.ring.is_empty()
            || self.flags.side_len.load(Ordering::SeqCst) > 0
            || self.flags.closed.load(Ordering::SeqCst);
        if !ready {
            match deadline {
                None => self.not_empty.wait(&mut gate),
                Some(d) => {
                    self.not_empty.wait_until(&mut gate, d);
                }
            }
        }
        self.flags.consumer_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Producer half of the handshake in `park_consumer`. Costs a fence
    /// and a load when nobody sleeps.
    fn wake_consumer(&self) {
        fence(Ordering::SeqCst);
        if self.flags.consumer_waiters.load(Ordering::SeqCst) > 0 {
            let _gate = self.consumer_gate.lock();
            self.not_empty.notify_all();
        }
    }

    /// Consumer half of the handshake in `push_blocking`, after a pop freed slots.
    fn wake_producers(&self) {
        fence(Ordering::SeqCst);
        if self.flags.producer_waiters.load(Ordering::SeqCst) > 0 {
            let _gate = self.producer_gate.lock();
            // All of them: several slots may have been freed, and a woken producer that finds
            // no room simply parks again.
            self.not_full.notify_all();
        }
    }

    /// Non-blocking variant of [`pop_batch`](Self::pop_batch): appends up to `max` events that
    /// are available now and returns how many.
    ///
    /// Calling it also hands back the events of the previous pop (see
    /// [`release_popped`](Self::release_popped)).
    pub fn try_pop_batch(&self, out: &mut Vec<T>, max: usize) -> usize {
        self.release_popped();
        self.drain.in_pop.fetch_add(1, Ordering::SeqCst);
        let mut n = self.pop_ring(out, max);
        if self.overflow == Overflow::Coalesce && self.flags.side_len.load(Ordering::Acquire) > 0 {
            n += self.refill_from_side(out, max - n);
            n += self.pop_ring(out, max - n);
        }
        if n > 0 {
            self.popped.fetch_add(n as u64, Ordering::Relaxed);
            if self.overflow == Overflow::Block {
                self.wake_producers();
            }
        }
        // A pass numbered after a producer's `mark` that finds the queue empty proves every
        // event pushed before the mark has left it (the SeqCst fence orders the emptiness
        // check after the pass number, which is after the mark, which is after those pushes).
        let d = &self.drain;
        let pass = d.passes.fetch_add(1, Ordering::SeqCst) + 1;
        fence(Ordering::SeqCst);
        if self.ring.is_empty() && self.flags.side_len.load(Ordering::SeqCst) == 0 {
            if n == 0 {
                d.drained.fetch_max(pass, Ordering::AcqRel);
            } else {
                d.pending.store(pass, Ordering::SeqCst);
            }
        }
        d.in_pop.fetch_sub(1, Ordering::SeqCst);
        n
    }

    /// The consumer is done with the events it popped last (e.g. has read what their topic ids
    /// name): they count as gone for [`drained_since`](Self::drained_since). The next pop does
    /// this by itself.
    pub fn release_popped(&self) {
        let d = &self.drain;
        if d.pending.load(Ordering::Relaxed) != 0 {
            let pass = d.pending.swap(0, Ordering::AcqRel);
            d.drained.fetch_max(pass, Ordering::AcqRel);
        }
    }

    /// A mark for [`drained_since`](Self::drained_since), taken by a producer after its pushes;
    /// None when nothing pushed so far can still be in the queue or in the consumer's hands:
    /// the queue is empty and the consumer is not in a pop and has handed back what it popped.
    /// (Read in that order: a consumer that took events out before the emptiness check was
    /// then in a pop, and stays so, or holds them as pending, until it hands them back.)
    pub fn mark(&self) -> Option<u64> {
        fence(Ordering::SeqCst);
        let d = &self.drain;
        let mark = d.passes.load(Ordering::SeqCst);
        let idle = self.ring.is_empty()
            && self.flags.side_len.load(Ordering::SeqCst) == 0
            && d.in_pop.load(Ordering::SeqCst) == 0
            && d.pending.load(Ordering::SeqCst) == 0;
        (!idle).then_some(mark)
    }

    /// Whether every event pushed before `mark` was taken has left the queue (popped and handed
    /// back, dropped or replaced): a later pop found the queue empty. Conservative: a consumer
    /// that never finds its queue empty keeps this false.
    pub fn drained_since(&self, mark: u64) -> bool {
        self.drain.drained.load(Ordering::Acquire) > mark
    }

    fn pop_ring(&self, out: &mut Vec<T>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match self.ring.pop() {
                Some(ev) => out.push(ev),
                None => break,
            }
            n += 1;
        }
        n
    }

    /// Moves side-table entries, longest-waiting key first, to the tail of the ring while there
    /// is room. Every earlier event of such a key was pushed into the ring before the entry was
    /// parked (which happened-before we took the lock), so the entry lands behind them; later
    /// events of the key either replaced it under this lock or, once it is gone, go behind it.
    ///
    /// When the ring is empty (the consumer, the only one popping, has taken out everything
    /// pushed to it before any entry was parked), up to `max` entries go straight to `out`
    /// first, without the round trip through the ring: how many is returned.
    fn refill_from_side(&self, out: &mut Vec<T>, max: usize) -> usize {
        // Under sustained overflow producers take the side-table lock back to back, and the
        // consumer waited milliseconds for it (a tight producer loop on 2 cores: ~3 ms on
        // average, up to 20 ms; microseconds with this flag). Ask them to hold off meanwhile.
        self.flags.refill_wanted.store(true, Ordering::Relaxed);
        let mut side = self.side.lock();
        self.flags.refill_wanted.store(false, Ordering::Relaxed);
        let mut n = 0;
        // Empty under the lock: a ring event of a parked key was pushed before its entry was
        // parked, which happened-before this lock was taken, so it was popped already.
        if max > 0 && self.ring.is_empty() {
            while n < max {
                let Some(ev) = side.take_front() else { break };
                out.push(ev);
                n += 1;
            }
        }
        while let Some(&ev) = side.front() {
            if self.ring.push(ev).is_err() {
                break;
            }
            side.take_front();
        }
        self.flags.side_len.store(side.len(), Ordering::Release);
        n
    }

    /// Closes the queue: wakes every waiting producer and consumer; later pushes return false
    /// (counted in `rejected_closed`); pops still drain what is left. Idempotent.
    pub fn close(&self) {
        self.flags.closed.store(true, Ordering::SeqCst);
        // Take each gate so a waiter between its re-check and its sleep cannot miss this.
        {
            let _gate = self.consumer_gate.lock();
            self.not_empty.notify_all();
        }
        {
            let _gate = self.producer_gate.lock();
            self.not_full.notify_all();
        }
    }

    /// Whether [`close`](Self::close) has been called.
    pub fn is_closed(&self) -> bool {
        self.flags.closed.load(Ordering::Acquire)
    }

    /// A snapshot of the counters (see [`QueueStats`] for the invariants they keep).
    pub fn stats(&self) -> QueueStats {
        let c = &self.producer_counters;
        QueueStats {
            pushed: c.pushed.load(Ordering::Relaxed),
            popped: self.popped.load(Ordering::Relaxed),
            dropped_oldest: c.dropped_oldest.load(Ordering::Relaxed),
            dropped_newest: c.dropped_newest.load(Ordering::Relaxed),
            coalesced: c.coalesced.load(Ordering::Relaxed),
            rejected_closed: c.rejected_closed.load(Ordering::Relaxed),
            len: self.len(),
            capacity: self.ring.capacity(),
        }
    }

    /// Events waiting: in the ring plus in the side table.
    pub fn len(&self) -> usize {
        self.ring.len() + self.flags.side_len.load(Ordering::Acquire)
    }

    /// Whether no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Copy + Send + Keyed> fmt::Debug for EventQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventQueue")
            .field("overflow", &self.overflow)
            .field("closed", &self.is_closed())
            .field("stats", &self.stats())
            .finish()
    }
}
