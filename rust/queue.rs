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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::thread;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Ev {
        key: u32,
        seq: u64,
    }

    impl Keyed for Ev {
        fn key(&self) -> u32 {
            self.key
        }
    }

    fn ev(key: u32, seq: u64) -> Ev {
        Ev { key, seq }
    }

    /// Everything available now, without blocking.
    fn drain(q: &EventQueue<Ev>) -> Vec<Ev> {
        let mut out = Vec::new();
        while q.try_pop_batch(&mut out, usize::MAX) > 0 {}
        out
    }

    fn seqs(evs: &[Ev]) -> Vec<u64> {
        evs.iter().map(|e| e.seq).collect()
    }

    /// Asserts that each key's events are in strictly increasing `seq` order.
    fn assert_per_key_order(evs: &[Ev]) {
        let mut last: HashMap<u32, u64> = HashMap::new();
        for e in evs {
            if let Some(&prev) = last.get(&e.key) {
                assert!(prev < e.seq, "key {}: {} after {}", e.key, e.seq, prev);
            }
            last.insert(e.key, e.seq);
        }
    }

    /// Polls `cond` for up to 5 s.
    fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if cond() {
                return true;
            }
            thread::sleep(Duration::from_millis(1));
        }
        cond()
    }

    #[test]
    fn queue_is_send_and_sync() {
        fn check<Q: Send + Sync>() {}
        check::<EventQueue<Ev>>();
        check::<Arc<EventQueue<Ev>>>();
    }

    #[test]
    fn overflow_parse_and_names() {
        for o in Overflow::ALL {
            assert_eq!(Overflow::parse(o.as_str()), Ok(o));
            assert_eq!(o.as_str().parse::<Overflow>(), Ok(o));
            assert_eq!(o.to_string(), o.as_str());
        }
        assert_eq!(Overflow::parse("drop-oldest"), Ok(Overflow::DropOldest));
        let err = Overflow::parse("drop_latest").unwrap_err();
        assert!(err.contains("\"drop_latest\""), "{err}");
        for name in ["block", "drop-oldest", "drop-newest", "coalesce"] {
            assert!(err.contains(name), "{err}");
        }
        assert!(Overflow::parse("").is_err());
        assert!(Overflow::parse("Block").is_err());
    }

    #[test]
    fn zero_capacity_is_clamped_to_one() {
        let q = EventQueue::new(0, Overflow::DropNewest);
        assert_eq!(q.stats().capacity, 1);
        assert!(q.push(ev(0, 0)));
        assert!(!q.push(ev(0, 1)));
        assert_eq!(seqs(&drain(&q)), [0]);
    }

    #[test]
    fn max_limits_the_batch() {
        let q = EventQueue::new(8, Overflow::Block);
        for i in 0..5 {
            assert!(q.push(ev(0, i)));
        }
        let mut out = Vec::new();
        assert_eq!(q.try_pop_batch(&mut out, 0), 0);
        assert_eq!(q.pop_batch(&mut out, 0, None), 0);
        assert_eq!(q.pop_batch(&mut out, 2, None), 2);
        assert_eq!(q.try_pop_batch(&mut out, 2), 2);
        assert_eq!(q.pop_batch(&mut out, 100, Some(Duration::ZERO)), 1);
        assert_eq!(seqs(&out), [0, 1, 2, 3, 4]);
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn drop_newest_keeps_the_first_capacity() {
        let q = EventQueue::new(8, Overflow::DropNewest);
        let accepted: Vec<bool> = (0..20).map(|i| q.push(ev(i as u32 % 3, i))).collect();
        assert!(accepted[..8].iter().all(|&a| a));
        assert!(accepted[8..].iter().all(|&a| !a));
        assert_eq!(
            q.stats(),
            QueueStats {
                pushed: 8,
                dropped_newest: 12,
                len: 8,
                capacity: 8,
                ..QueueStats::default()
            }
        );
        let out = drain(&q);
        assert_eq!(seqs(&out), (0..8).collect::<Vec<_>>());
        assert_per_key_order(&out);
        assert_eq!(q.stats().popped, 8);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn drop_oldest_keeps_the_newest_capacity() {
        let q = EventQueue::new(8, Overflow::DropOldest);
        for i in 0..20 {
            assert!(q.push(ev(i as u32 % 3, i)));
        }
        assert_eq!(
            q.stats(),
            QueueStats {
                pushed: 20,
                dropped_oldest: 12,
                len: 8,
                capacity: 8,
                ..QueueStats::default()
            }
        );
        let out = drain(&q);
        assert_eq!(seqs(&out), (12..20).collect::<Vec<_>>());
        assert_per_key_order(&out);
        let s = q.stats();
        assert_eq!(s.pushed, s.popped + s.dropped_oldest);
    }

    #[test]
    fn unkeyed_events_overflowing_a_coalescing_queue_are_each_kept_in_order() {
        // Review 2, finding 1: a no-topic event (local pause, lagging, caught up) parked in the
        // side table sized its per-key table for key u32::MAX (16 GiB: an abort), and one
        // replaced another (a caught_up lost to a later local_pause).
        let q = EventQueue::new(2, Overflow::Coalesce);
        for i in 0..2 {
            assert!(q.push(ev(i, i as u64)));
        }
        for i in 2..6 {
            assert!(q.push(ev(UNKEYED, i)));
        }
        assert!(q.push(ev(0, 6)));
        assert_eq!(q.stats().coalesced, 0);
        let out = drain(&q);
        assert_eq!(seqs(&out), [0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn coalesce_keeps_newest_overflow_per_key_in_order() {
        let q = EventQueue::new(8, Overflow::Coalesce);
        // Keys interleaved 0,1,2,0,1,2,... The ring takes seq 0..8; then 8 (key 2), 9 (key 0)
        // and 10 (key 1) go to the side table, and each later event replaces its key's entry.
        for i in 0..20 {
            assert!(q.push(ev(i as u32 % 3, i)));
        }
        assert_eq!(
            q.stats(),
            QueueStats {
                pushed: 20,
                coalesced: 9,
                len: 11,
                capacity: 8,
                ..QueueStats::default()
            }
        );
        let out = drain(&q);
        // Ring first, then the side table in the order its keys first overflowed (2, 0, 1),
        // each with its newest event.
        assert_eq!(seqs(&out), [0, 1, 2, 3, 4, 5, 6, 7, 17, 18, 19]);
        assert_per_key_order(&out);
        let s = q.stats();
        assert_eq!(s.popped, 11);
        assert_eq!(s.pushed, s.popped + s.coalesced);
        assert_eq!(s.len, 0);
    }

    #[test]
    fn coalesce_mass_overflow_is_taken_straight_from_the_side_table_in_order() {
        // A mass failure: far more distinct keys than the ring holds, then a second event for
        // some of them, parked or in the ring. Popped in batches larger than the ring.
        let q = EventQueue::new(64, Overflow::Coalesce);
        let n = 10_000u32;
        for key in 0..n {
            assert!(q.push(ev(key, u64::from(key))));
        }
        for key in (0..n).step_by(7) {
            assert!(q.push(ev(key, u64::from(n + key)))); // replaces a parked one, or parks
        }
        let parked_again = (0..64).step_by(7).count() as u64; // their first is in the ring
        let replaced = (0..n).step_by(7).count() as u64 - parked_again;
        assert_eq!(q.stats().coalesced, replaced);
        let mut out = Vec::new();
        while q.try_pop_batch(&mut out, 1000) > 0 {}
        assert_eq!(out.len() as u64, u64::from(n) + parked_again);
        assert_per_key_order(&out);
        // Every key's newest event came out, in the order the keys first overflowed.
        let mut newest: HashMap<u32, u64> = HashMap::new();
        for e in &out {
            newest.insert(e.key, e.seq);
        }
        for key in 0..n {
            let want = if key % 7 == 0 { n + key } else { key };
            assert_eq!(newest[&key], u64::from(want), "key {key}");
        }
        let s = q.stats();
        assert_eq!((s.len, s.pushed), (0, s.popped + s.coalesced));
        // Keys parked again after their entries were taken get new ones: their old positions
        // are stale and must not match (key 70 was parked at position 6 of the first round).
        for i in 0..64 {
            assert!(q.push(ev(100_000 + i, 0)));
        }
        assert!(q.push(ev(5, 1)));
        assert!(q.push(ev(70, 1)));
        assert_eq!(q.stats().coalesced, replaced);
        let mut out = Vec::new();
        while q.try_pop_batch(&mut out, 1000) > 0 {}
        assert_eq!(out.len(), 66);
        assert_eq!(&out[64..], &[ev(5, 1), ev(70, 1)]);
    }

    #[test]
    fn coalesce_sends_a_parked_key_to_the_side_table_even_with_room() {
        let q = EventQueue::new(4, Overflow::Coalesce);
        for i in 0..4 {
            assert!(q.push(ev(0, i)));
        }
        assert!(q.push(ev(1, 100))); // ring full: parked
        assert_eq!(q.len(), 5);
        // Make room without letting the consumer refill from the side table.
        assert_eq!(q.ring.pop(), Some(ev(0, 0)));
        assert!(q.push(ev(1, 101))); // key 1 is parked: replaces, must not overtake
        assert!(q.push(ev(0, 4))); // key 0 is not parked: takes the free slot
        assert_eq!(q.stats().coalesced, 1);
        assert!(q.push(ev(2, 200))); // ring full again: parked behind key 1
        let mut out = Vec::new();
        // One pop frees one slot; the longest-parked key (1) moves to the ring's tail.
        assert_eq!(q.try_pop_batch(&mut out, 1), 1);
        assert!(q.push(ev(1, 102))); // key 1 no longer parked, but the ring is full: parked
        assert!(q.push(ev(2, 201))); // key 2 still parked: replaces
        out.extend(drain(&q));
        assert_eq!(seqs(&out), [1, 2, 3, 4, 101, 201, 102]);
        assert_per_key_order(&out);
        let s = q.stats();
        // One event was taken with `ring.pop()` above, bypassing the counters.
        assert_eq!((s.pushed, s.popped, s.coalesced, s.len), (10, 7, 2, 0));
    }

    #[test]
    fn coalesce_side_table_drains_under_sustained_load() {
        // The consumer pops one at a time while the ring is kept full: parked keys must still
        // get through (they go back into the ring ahead of later arrivals of other keys).
        let q = EventQueue::new(4, Overflow::Coalesce);
        let mut next = 0;
        let mut push = |key: u32| {
            assert!(q.push(ev(key, next)));
            next += 1;
        };
        for _ in 0..4 {
            push(0);
        }
        push(7); // parked
        let mut out = Vec::new();
        for _ in 0..8 {
            push(0);
            assert_eq!(q.try_pop_batch(&mut out, 1), 1);
        }
        assert!(out.iter().any(|e| e.key == 7), "{out:?}");
        out.extend(drain(&q));
        assert_per_key_order(&out);
    }

    #[test]
    fn block_waits_for_room_and_loses_nothing() {
        let q = Arc::new(EventQueue::new(8, Overflow::Block));
        let producer = {
            let q = Arc::clone(&q);
            thread::spawn(move || (0..20).all(|i| q.push(ev(i as u32 % 3, i))))
        };
        // The consumer is stalled: the producer fills the ring, then parks (not spins).
        assert!(wait_until(|| q
            .flags
            .producer_waiters
            .load(Ordering::SeqCst)
            == 1));
        assert_eq!(
            q.stats(),
            QueueStats {
                pushed: 8,
                len: 8,
                capacity: 8,
                ..QueueStats::default()
            }
        );
        assert!(!producer.is_finished());
        let mut out = Vec::new();
        while out.len() < 20 {
            q.pop_batch(&mut out, 3, Some(Duration::from_secs(5)));
        }
        assert!(producer.join().unwrap());
        assert_eq!(seqs(&out), (0..20).collect::<Vec<_>>());
        assert_eq!(
            q.stats(),
            QueueStats {
                pushed: 20,
                popped: 20,
                capacity: 8,
                ..QueueStats::default()
            }
        );
    }

    #[test]
    fn block_single_pop_releases_a_blocked_producer() {
        let q = Arc::new(EventQueue::new(2, Overflow::Block));
        assert!(q.push(ev(0, 0)));
        assert!(q.push(ev(0, 1)));
        let producer = {
            let q = Arc::clone(&q);
            thread::spawn(move || q.push(ev(0, 2)))
        };
        assert!(wait_until(|| q
            .flags
            .producer_waiters
            .load(Ordering::SeqCst)
            == 1));
        let mut out = Vec::new();
        assert_eq!(q.try_pop_batch(&mut out, 1), 1);
        assert!(producer.join().unwrap());
        out.extend(drain(&q));
        assert_eq!(seqs(&out), [0, 1, 2]);
    }

    #[test]
    fn try_push_hands_back_on_a_full_block_queue_and_wait_for_room_waits_for_a_pop_or_close() {
        let q = Arc::new(EventQueue::new(2, Overflow::Block));
        assert_eq!(q.try_push_deferred(ev(0, 0)), Ok(true));
        assert_eq!(q.try_push_deferred(ev(0, 1)), Ok(true));
        assert_eq!(
            q.try_push_deferred(ev(0, 2)),
            Err(ev(0, 2)),
            "full: handed back"
        );
        let waiter = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                q.wait_for_room();
                q.try_push_deferred(ev(0, 2))
            })
        };
        // The deferred pushes woke nobody; wait_for_room wakes the consumer before it parks.
        let mut out = Vec::new();
        assert_eq!(q.pop_batch(&mut out, 1, Some(Duration::from_secs(10))), 1);
        assert_eq!(waiter.join().unwrap(), Ok(true));
        assert_eq!(seqs(&drain(&q)), vec![1, 2]);
        // Closed: no waiting, and a push is rejected (counted), not handed back.
        for i in 3..5 {
            assert_eq!(q.try_push_deferred(ev(0, i)), Ok(true));
        }
        let waiter = {
            let q = Arc::clone(&q);
            thread::spawn(move || q.wait_for_room())
        };
        assert!(wait_until(|| q
            .flags
            .producer_waiters
            .load(Ordering::SeqCst)
            == 1));
        q.close();
        waiter.join().unwrap();
        assert_eq!(q.try_push_deferred(ev(0, 5)), Ok(false));
        let s = q.stats();
        assert_eq!((s.pushed, s.rejected_closed), (5, 1));
        // Other policies never hand back.
        let q = EventQueue::new(1, Overflow::DropNewest);
        assert_eq!(q.try_push_deferred(ev(0, 0)), Ok(true));
        assert_eq!(q.try_push_deferred(ev(0, 1)), Ok(false));
        q.wait_for_room(); // never waits
    }

    #[test]
    fn block_close_releases_a_blocked_producer() {
        let q = Arc::new(EventQueue::new(8, Overflow::Block));
        for i in 0..8 {
            assert!(q.push(ev(0, i)));
        }
        let producer = {
            let q = Arc::clone(&q);
            thread::spawn(move || q.push(ev(0, 8)))
        };
        assert!(wait_until(|| q
            .flags
            .producer_waiters
            .load(Ordering::SeqCst)
            == 1));
        q.close();
        assert!(!producer.join().unwrap());
        let s = q.stats();
        assert_eq!((s.pushed, s.rejected_closed, s.len), (8, 1, 8));
        // What was queued before close is still delivered.
        assert_eq!(seqs(&drain(&q)), (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn close_rejects_pushes_and_still_drains() {
        for o in Overflow::ALL {
            let q = EventQueue::new(4, o);
            assert!(q.push(ev(0, 0)));
            assert!(q.push(ev(1, 1)));
            assert!(!q.is_closed());
            q.close();
            q.close();
            assert!(q.is_closed());
            assert!(!q.push(ev(0, 2)));
            assert_eq!(q.stats().rejected_closed, 1);
            let mut out = Vec::new();
            // Closed and non-empty: returns at once with what is left, then 0 without waiting.
            assert_eq!(q.pop_batch(&mut out, 10, None), 2);
            let t = Instant::now();
            assert_eq!(q.pop_batch(&mut out, 10, None), 0);
            assert!(t.elapsed() < Duration::from_secs(2));
            assert_eq!(seqs(&out), [0, 1]);
        }
    }

    #[test]
    fn pop_batch_times_out() {
        let q = EventQueue::<Ev>::new(4, Overflow::Block);
        let mut out = Vec::new();
        let timeout = Duration::from_millis(100);
        let t = Instant::now();
        assert_eq!(q.pop_batch(&mut out, 10, Some(timeout)), 0);
        let took = t.elapsed();
        assert!(took >= timeout, "{took:?}");
        assert!(took < timeout + Duration::from_secs(2), "{took:?}");
        assert!(out.is_empty());
        assert_eq!(q.pop_batch(&mut out, 10, Some(Duration::ZERO)), 0);
        // A timeout too large for `Instant` means "forever", not a panic.
        assert!(q.push(ev(0, 0)));
        assert_eq!(q.pop_batch(&mut out, 10, Some(Duration::MAX)), 1);
    }

    #[test]
    fn close_wakes_a_blocked_pop_batch() {
        let q = Arc::new(EventQueue::<Ev>::new(4, Overflow::Coalesce));
        let consumer = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                let t = Instant::now();
                let n = q.pop_batch(&mut Vec::new(), 10, None);
                (n, t.elapsed())
            })
        };
        assert!(wait_until(|| q
            .flags
            .consumer_waiters
            .load(Ordering::SeqCst)
            == 1));
        q.close();
        let (n, _) = consumer.join().unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn push_wakes_a_parked_pop_batch() {
        let q = Arc::new(EventQueue::new(4, Overflow::DropOldest));
        let consumer = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                let mut out = Vec::new();
                q.pop_batch(&mut out, 10, Some(Duration::from_secs(10)));
                out
            })
        };
        assert!(wait_until(|| q
            .flags
            .consumer_waiters
            .load(Ordering::SeqCst)
            == 1));
        assert!(q.push(ev(3, 42)));
        assert_eq!(consumer.join().unwrap(), [ev(3, 42)]);
    }

    #[test]
    fn deferred_pushes_wake_a_parked_consumer_once_flushed() {
        let q = Arc::new(EventQueue::new(8, Overflow::DropOldest));
        let consumer = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                let mut out = Vec::new();
                // Wait for the whole burst: the wake-up comes only with the flush.
                while out.len() < 3 {
                    if q.pop_batch(&mut out, 10, Some(Duration::from_secs(10))) == 0 {
                        break;
                    }
                }
                out
            })
        };
        assert!(wait_until(|| q
            .flags
            .consumer_waiters
            .load(Ordering::SeqCst)
            == 1));
        for seq in 0..3 {
            assert!(q.push_deferred(ev(1, seq)));
        }
        assert!(q.flags.wake_pending.load(Ordering::SeqCst));
        q.flush_wake();
        assert!(!q.flags.wake_pending.load(Ordering::SeqCst));
        assert_eq!(consumer.join().unwrap(), [ev(1, 0), ev(1, 1), ev(1, 2)]);
        q.flush_wake(); // nothing pending: a no-op
    }

    #[test]
    fn deferred_block_pushes_beyond_capacity_do_not_deadlock() {
        // A burst larger than the ring, flushed only at its end: the blocked producer wakes the
        // consumer meanwhile.
        const N: u64 = 50;
        let q = Arc::new(EventQueue::new(2, Overflow::Block));
        let consumer = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                let mut out = Vec::new();
                while (out.len() as u64) < N {
                    if q.pop_batch(&mut out, 10, Some(Duration::from_secs(10))) == 0 {
                        break; // a lost wake-up: the assertion below names it
                    }
                }
                out
            })
        };
        for seq in 0..N {
            assert!(q.push_deferred(ev(0, seq)));
        }
        q.flush_wake(); // the tail of the burst
        let got = consumer.join().unwrap();
        assert_eq!(got.len() as u64, N, "consumer waited out its timeout");
        assert!(got.iter().map(|e| e.seq).eq(0..N));
    }

    #[test]
    fn no_lost_wakeups_with_a_trickling_producer() {
        // The producer pauses often so the consumer keeps going to sleep; a lost wake-up would
        // show up as a pop_batch that waits out its 5 s timeout.
        let q = Arc::new(EventQueue::new(4, Overflow::Block));
        const N: u64 = 2_000;
        let producer = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                for i in 0..N {
                    assert!(q.push(ev(0, i)));
                    if i % 7 == 0 {
                        thread::sleep(Duration::from_micros(50));
                    }
                }
            })
        };
        let mut out = Vec::new();
        while (out.len() as u64) < N {
            let t = Instant::now();
            let n = q.pop_batch(&mut out, 3, Some(Duration::from_secs(5)));
            assert!(n > 0, "pop_batch timed out after {} events", out.len());
            assert!(t.elapsed() < Duration::from_secs(2));
        }
        producer.join().unwrap();
        assert_eq!(seqs(&out), (0..N).collect::<Vec<_>>());
    }

    /// `producers` threads push `per` events each (key = producer id, seq = 0..per) while one
    /// consumer pops; checks per-key order, exactly-once delivery for `Block`, and the counters.
    fn stress(policy: Overflow, capacity: usize, producers: u32, per: u64) {
        let q = Arc::new(EventQueue::<Ev>::new(capacity, policy));
        let consumer = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                let mut next = vec![0u64; producers as usize];
                let mut received = 0u64;
                let mut out = Vec::with_capacity(64);
                loop {
                    out.clear();
                    let n = q.pop_batch(&mut out, 64, Some(Duration::from_secs(10)));
                    if n == 0 {
                        assert!(q.is_closed(), "{policy:?}: consumer starved");
                        assert!(q.is_empty());
                        break;
                    }
                    for e in &out {
                        let want = &mut next[e.key as usize];
                        if policy == Overflow::Block {
                            assert_eq!(e.seq, *want, "{policy:?}: key {}", e.key);
                        } else {
                            assert!(e.seq >= *want, "{policy:?}: key {} went back", e.key);
                        }
                        *want = e.seq + 1;
                    }
                    received += n as u64;
                }
                received
            })
        };
        let handles: Vec<_> = (0..producers)
            .map(|p| {
                let q = Arc::clone(&q);
                thread::spawn(move || (0..per).filter(|&s| q.push(ev(p, s))).count() as u64)
            })
            .collect();
        let accepted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        q.close();
        let received = consumer.join().unwrap();
        let s = q.stats();
        let attempts = u64::from(producers) * per;
        assert_eq!(s.pushed, accepted, "{policy:?} {s:?}");
        assert_eq!(s.popped, received, "{policy:?} {s:?}");
        assert_eq!(s.len, 0, "{policy:?} {s:?}");
        assert_eq!(s.rejected_closed, 0, "{policy:?} {s:?}");
        assert_eq!(
            s.pushed,
            s.popped + s.dropped_oldest + s.coalesced,
            "{policy:?} {s:?}"
        );
        assert_eq!(s.pushed + s.dropped_newest, attempts, "{policy:?} {s:?}");
        match policy {
            Overflow::Block => assert_eq!(s.popped, attempts),
            Overflow::DropOldest => assert_eq!(s.dropped_newest + s.coalesced, 0),
            Overflow::DropNewest => assert_eq!(s.dropped_oldest + s.coalesced, 0),
            Overflow::Coalesce => assert_eq!(s.dropped_oldest + s.dropped_newest, 0),
        }
    }

    #[test]
    fn stress_block() {
        stress(Overflow::Block, 16, 4, 50_000);
    }

    #[test]
    fn stress_drop_oldest() {
        stress(Overflow::DropOldest, 16, 4, 50_000);
    }

    #[test]
    fn stress_drop_newest() {
        stress(Overflow::DropNewest, 16, 4, 50_000);
    }

    #[test]
    fn stress_coalesce() {
        stress(Overflow::Coalesce, 16, 4, 50_000);
    }

    #[test]
    fn stress_tiny_capacity() {
        for o in Overflow::ALL {
            stress(o, 1, 3, 10_000);
        }
    }

    #[test]
    fn drained_since_waits_for_an_empty_pass_and_the_hand_back() {
        let q = EventQueue::new(4, Overflow::Coalesce);
        assert_eq!(q.mark(), None, "idle and empty: nothing in flight");
        q.push(ev(1, 1));
        let m = q.mark().expect("an event is waiting");
        assert!(!q.drained_since(m));
        let mut out = Vec::new();
        assert_eq!(q.try_pop_batch(&mut out, 8), 1);
        assert!(!q.drained_since(m), "popped, not handed back yet");
        assert!(q.mark().is_some(), "the consumer still holds it");
        q.release_popped();
        assert!(q.drained_since(m));
        assert_eq!(q.mark(), None);
        // A pass that leaves events behind proves nothing; the next empty one does.
        q.push(ev(1, 2));
        q.push(ev(2, 3));
        let m = q.mark().unwrap();
        out.clear();
        assert_eq!(q.try_pop_batch(&mut out, 1), 1);
        assert!(!q.drained_since(m));
        assert_eq!(q.try_pop_batch(&mut out, 1), 1); // hands back the first, pops the last
        assert!(!q.drained_since(m));
        assert_eq!(q.try_pop_batch(&mut out, 1), 0); // hands back, finds it empty
        assert!(q.drained_since(m));
    }
}
