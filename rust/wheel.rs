//! Hierarchical timer wheel over dense `u32` keys.
//!
//! The wheel tracks at most one pending deadline per key, for up to millions of keys (topic ids
//! `0..n`). Time is a plain `u64` tick count; converting nanoseconds to ticks is the caller's job.
//!
//! # Layout
//!
//! * Entries live in a slab (`Vec<Entry>`) indexed by the key itself, so there is no key→slot map.
//!   An entry holds the deadline, which list the key is on and its position in that list.
//! * Every list (a wheel slot, or the "due" queue) is an array of keys, so walking a list reads
//!   keys from consecutive memory and the entries they name can be fetched in parallel (an
//!   intrusive linked list would make each step wait for the previous entry's cache miss, which
//!   dominated a 1M-key tick whose keys had been armed in random order). Removing a key from a
//!   slot swaps the slot's last key into its place (O(1), the moved key's position updated);
//!   removing one from the due queue leaves a tombstone that the next pop skips (O(1), compacted
//!   once tombstones outnumber live keys). A list's array is reused when it empties, or freed if
//!   it grew past [`KEEP_CAPACITY`], so memory follows the keys actually scheduled: schedule and
//!   cancel are amortized O(1) and allocate only to grow a list.
//! * There are 11 levels of 64 slots. Level `l` slot `s` holds deadlines whose bits above
//!   `6 * (l + 1)` equal those of the current time (`elapsed`) and whose level-`l` digit is `s`;
//!   the level is picked from the highest bit in which `elapsed` and `when` differ (as in tokio).
//!   Eleven levels cover all 64 bits, so every `u64` deadline (`u64::MAX` included) has an exact
//!   home: a far-future deadline simply sits in a top-level slot and is cascaded down (re-inserted
//!   relative to the then-current time) when that slot comes up. Nothing is ever clamped, so
//!   nothing can fire early.
//! * A `u64` occupancy mask per level finds the next non-empty slot with `trailing_zeros`, so
//!   advancing over long idle stretches costs O(levels), never O(ticks).
//! * Keys whose deadline is at or before `elapsed` sit on the "due" queue, from which
//!   [`Wheel::pop_expired`] hands them out before looking at the slots again. The queue is a
//!   front stack (popped first, last pushed first) followed by a back array read from a cursor.
//!   It is kept in deadline order so that keys scheduled in the past (outside a drain) still come
//!   out in order: a deadline at or below every queued one goes to the front, one at or above
//!   every queued one to the back, both O(1); any other insertion only marks the queue unsorted,
//!   and the next pop sorts it. During a drain (after `pop_expired` returned `Some`, until it
//!   returns `None`) a key scheduled at or before `elapsed` is simply pushed to the front: it
//!   comes out next, as documented.
//! * A level-0 slot holds one tick, so when time reaches it every key in it is due at exactly
//!   `elapsed`: its array becomes the (then empty) due queue as it is, without re-filing keys.
//!
//! # Invariants
//!
//! * An entry in level `l` slot `s` has `when > elapsed`, `level_for(elapsed, when) == l` and `s`
//!   is strictly after the level-`l` digit of `elapsed`. This holds because `elapsed` only moves
//!   to the start of the earliest occupied slot (whose entries are then cascaded) or to a `now`
//!   that is before every occupied slot's start.
//! * Hence the lowest non-empty level holds the earliest slot: all entries of levels below `l` lie
//!   inside the level-`l` slot that contains `elapsed`, while level-`l` entries lie strictly after
//!   that slot.
//! * An entry on the due queue has `when <= elapsed`; entries get there only by being scheduled at
//!   or before `elapsed` or by a cascade at exactly their deadline, so a popped key is never early.
//! * `list(e.list)[e.pos] == key` for every scheduled key, where a list id equal to `due_alias`
//!   (the level-0 slot whose array became the due queue) names the due queue's back array; the
//!   due queue's arrays are empty whenever it holds no live key.

/// Bits of the tick consumed by one level.
const SLOT_BITS: u32 = 6;
/// Slots per level.
const SLOTS: usize = 1 << SLOT_BITS;
/// Mask of one level's digit.
const SLOT_MASK: u64 = (SLOTS as u64) - 1;
/// Number of levels: `ceil(64 / 6)`, enough for every `u64` tick. The top level only uses its low
/// sixteen slots (bits 60..64).
const LEVELS: usize = 64_usize.div_ceil(SLOT_BITS as usize);
/// Number of wheel slots; slot lists are `level * SLOTS + slot`.
const SLOT_LISTS: usize = LEVELS * SLOTS;
/// `Entry::list` of a key in the due queue's back array.
const DUE_BACK: u16 = SLOT_LISTS as u16;
/// `Entry::list` of a key in the due queue's front stack.
const DUE_FRONT: u16 = DUE_BACK + 1;
/// `Entry::list` of a key with no pending deadline.
const UNSCHEDULED: u16 = u16::MAX;
/// A removed key's place in the due queue.
const TOMB: u32 = u32::MAX;
/// A list array emptied with more room than this many keys is freed rather than kept.
pub const KEEP_CAPACITY: usize = 1024;
/// Keys whose deadlines a cascade reads ahead of filing them.
const CASCADE_CHUNK: usize = 32;
/// Tombstones tolerated in the due queue before compaction (and at least as many as live keys).
const MIN_COMPACT: usize = 64;

/// Largest number of keys a wheel can hold: `u32::MAX` itself marks a tombstone.
const MAX_KEYS: usize = TOMB as usize;

/// One key's slab entry (16 bytes: 8 + 4 + 2, padded to the `u64` alignment).
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The exact deadline given to `schedule` (meaningless while unscheduled).
    when: u64,
    /// Index of the key in its list's array.
    pos: u32,
    /// Which list the key is on (a slot list, `DUE_BACK` or `DUE_FRONT`), or `UNSCHEDULED`.
    list: u16,
}

impl Entry {
    const VACANT: Entry = Entry {
        when: 0,
        pos: 0,
        list: UNSCHEDULED,
    };
}

// The list ids must fit `Entry::list` with `UNSCHEDULED` left over.
const _: () = assert!((DUE_FRONT as usize) < UNSCHEDULED as usize);

/// Empty `list`, keeping its array for reuse unless it grew large.
#[inline]
fn recycle(list: &mut Vec<u32>) {
    if list.capacity() > KEEP_CAPACITY {
        *list = Vec::new();
    } else {
        list.clear();
    }
}

/// A hierarchical timer wheel: at most one pending deadline per dense `u32` key, amortized O(1)
/// schedule and cancel. See the module docs for the layout.
#[derive(Clone, Debug)]
pub struct Wheel {
    /// Slab of entries, indexed by key.
    entries: Vec<Entry>,
    /// Keys of every wheel slot, `level * SLOTS + slot`, in no particular order.
    slots: Box<[Vec<u32>]>,
    /// Bit `s` of `occupied[l]` is set iff level `l` slot `s` is non-empty.
    occupied: [u64; LEVELS],
    /// Current time in ticks; never decreases.
    elapsed: u64,
    /// Number of keys with a pending deadline.
    len: usize,
    /// The due queue's back part: keys from `due_head` on, in order (`TOMB` for removed ones).
    due: Vec<u32>,
    /// First unread index of `due`.
    due_head: usize,
    /// The due queue's front part, a stack: its last key comes out first.
    due_front: Vec<u32>,
    /// Live keys in the due queue.
    due_live: usize,
    /// Tombstones in the due queue's unread part.
    due_dead: usize,
    /// Lower bound of the deadlines in the due queue: the minimum `when` pushed since it was last
    /// empty (removals do not raise it, which keeps it a valid lower bound). `u64::MAX` when
    /// empty.
    due_floor: u64,
    /// Upper bound of the deadlines in the due queue, likewise (0 when empty).
    due_ceil: u64,
    /// The due queue may be out of deadline order (sorted before the next pop from it).
    due_unsorted: bool,
    /// The level-0 slot list whose array became the due queue's back array, or `UNSCHEDULED`:
    /// its keys' `Entry::list` still names that slot and means `DUE_BACK` until the queue
    /// empties. No key can enter that slot meanwhile (its tick is `elapsed`'s, and `elapsed`
    /// does not move while keys are due).
    due_alias: u16,
    /// The last `pop_expired` returned `Some`: a drain loop is in progress.
    draining: bool,
}

/// Level whose slots distinguish `when` from `elapsed` (requires `when > elapsed`).
#[inline]
fn level_for(elapsed: u64, when: u64) -> usize {
    debug_assert!(when > elapsed);
    // OR-ing the low digit in makes anything within the current 64-tick block land on level 0.
    let masked = (elapsed ^ when) | SLOT_MASK;
    let significant = 63 - masked.leading_zeros();
    (significant / SLOT_BITS) as usize
}

/// The level-`level` digit of tick `t`.
#[inline]
fn slot_for(t: u64, level: usize) -> usize {
    ((t >> (level as u32 * SLOT_BITS)) & SLOT_MASK) as usize
}

/// First tick of the block spanned by all of level `level` (64 of its slots) that contains `t`.
#[inline]
fn level_start(t: u64, level: usize) -> u64 {
    let bits = (level as u32 + 1) * SLOT_BITS;
    // The top level spans all of u64 (66 bits > 64), so its block starts at 0.
    t & u64::MAX.checked_shl(bits).unwrap_or(0)
}

impl Wheel {
    /// A wheel whose current time ("elapsed") is `now` ticks, with no valid keys yet.
    pub fn new(now: u64) -> Self {
        Self {
            entries: Vec::new(),
            slots: (0..SLOT_LISTS).map(|_| Vec::new()).collect(),
            occupied: [0; LEVELS],
            elapsed: now,
            len: 0,
            due: Vec::new(),
            due_head: 0,
            due_front: Vec::new(),
            due_live: 0,
            due_dead: 0,
            due_floor: u64::MAX,
            due_ceil: 0,
            due_unsorted: false,
            due_alias: UNSCHEDULED,
            draining: false,
        }
    }

    /// Make keys `0..n` valid (grows the slab; existing entries untouched). A smaller `n` than
    /// the current capacity does nothing. Panics if `n > u32::MAX` (key `u32::MAX` would be the
    /// tombstone).
    pub fn reserve_keys(&mut self, n: usize) {
        assert!(n <= MAX_KEYS, "Wheel supports at most {MAX_KEYS} keys");
        if n > self.entries.len() {
            self.entries.resize(n, Entry::VACANT);
        }
    }

    /// Number of valid keys (slab length).
    pub fn key_capacity(&self) -> usize {
        self.entries.len()
    }

    /// Bytes of heap the wheel holds: its slab (16 bytes per reserved key), the table of slot
    /// lists (about 17 KB) and the lists' arrays (4 bytes per scheduled key, plus room to grow).
    pub fn heap_bytes(&self) -> usize {
        let key = std::mem::size_of::<u32>();
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.slots.len() * std::mem::size_of::<Vec<u32>>()
            + self.slots.iter().map(Vec::capacity).sum::<usize>() * key
            + (self.due.capacity() + self.due_front.capacity()) * key
    }

    /// Schedule `key` to expire at tick `when`, moving it if already scheduled (wherever it is,
    /// including the due queue). A `when` at or before the current elapsed tick means "due now":
    /// it is returned by the next `pop_expired` call (including one already in progress in a
    /// `while let` loop). Panics if `key >= key_capacity()`.
    pub fn schedule(&mut self, key: u32, when: u64) {
        let idx = key as usize;
        assert!(
            idx < self.entries.len(),
            "Wheel::schedule: key {key} out of range (capacity {})",
            self.entries.len()
        );
        if self.entries[idx].list == UNSCHEDULED {
            self.len += 1;
        } else {
            self.unlink(key);
        }
        self.entries[idx].when = when;
        self.insert(key);
    }

    /// Remove a pending deadline; returns whether one was pending. Out-of-range keys have none.
    pub fn cancel(&mut self, key: u32) -> bool {
        match self.entries.get(key as usize) {
            Some(e) if e.list != UNSCHEDULED => {
                self.unlink(key);
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    /// The pending deadline of `key` (the exact `when` given to `schedule`), if any. Out-of-range
    /// keys have none.
    pub fn deadline(&self, key: u32) -> Option<u64> {
        match self.entries.get(key as usize) {
            Some(e) if e.list != UNSCHEDULED => Some(e.when),
            _ => None,
        }
    }

    /// Number of keys with a pending deadline.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key has a pending deadline.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Current time of the wheel in ticks (never decreases).
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// A lower bound on the earliest pending deadline, `None` when empty.
    ///
    /// The bound is never later than the true earliest deadline, and it is:
    /// * `<= elapsed()` exactly when some key is already due (then it is the smallest deadline
    ///   put on the due queue since that queue was last empty; cancels may leave it lower);
    /// * otherwise `> elapsed()` and exact when the earliest deadline is within the current
    ///   64-tick block (level 0); for farther deadlines it is the start of the earliest occupied
    ///   higher-level slot, i.e. the tick at which `pop_expired` would next have work to do.
    ///
    /// Sleeping until the returned tick and calling `pop_expired` never misses a deadline.
    pub fn next_expiration(&self) -> Option<u64> {
        if self.due_live != 0 {
            return Some(self.due_floor);
        }
        self.next_slot().map(|(_, _, start)| start)
    }

    /// Advance toward `now` and return one key whose deadline is `<= now`, with its deadline,
    /// removing it from the wheel; `None` once nothing due remains (then
    /// `elapsed() == max(old elapsed, now)`).
    ///
    /// Keys come out in nondecreasing deadline order, except keys (re)scheduled during the loop
    /// with a deadline already passed, which come out as soon as possible (next call). A key is
    /// never returned before its deadline. "During the loop" means after a call that returned
    /// `Some` and before one that returns `None`; keys scheduled in the past outside a loop are
    /// ordered like any others (if they were scheduled out of deadline order, the first pop that
    /// reaches them sorts them, O(k log k) for the k keys then due).
    ///
    /// A `now` earlier than `elapsed()` is treated as `elapsed()`. Empty stretches are skipped via
    /// the occupancy masks, so a `now` far in the future costs O(levels) per occupied slot
    /// visited, not O(ticks). Intended use:
    ///
    /// ```text
    /// while let Some((key, when)) = wheel.pop_expired(now) { ...; wheel.schedule(key, next) }
    /// ```
    pub fn pop_expired(&mut self, now: u64) -> Option<(u32, u64)> {
        let now = now.max(self.elapsed);
        loop {
            if self.due_live != 0 {
                if self.due_unsorted {
                    self.rebuild_due(true);
                }
                self.draining = true;
                return Some(self.pop_due());
            }
            match self.next_slot() {
                Some((level, slot, start)) if start <= now => {
                    // Everything in that slot is at or after `start`, and nothing anywhere is
                    // earlier, so time can move there; the cascade then re-files the slot's
                    // entries relative to the new time (due ones go to the due queue).
                    self.elapsed = start;
                    self.cascade(level, slot);
                }
                _ => {
                    // Every occupied slot starts after `now`: jump straight to `now`. The
                    // invariant holds because no occupied slot has been passed.
                    self.elapsed = now;
                    self.draining = false;
                    return None;
                }
            }
        }
    }

    /// The keys (with their deadlines) that the next `count` calls of
    /// [`pop_expired`](Wheel::pop_expired) will return first, as far as they are already on the
    /// due queue (fewer when it is shorter, none before a pop has filled it). Reading them is a
    /// prefetch: a caller about to do random-access work per popped key can touch its own data
    /// for these keys in one go, so that the cache misses (the wheel's own included) overlap
    /// instead of coming one after another. Nothing is removed.
    pub fn due_ahead(&self, count: usize) -> impl Iterator<Item = (u32, u64)> + '_ {
        let back = &self.due[self.due_head.min(self.due.len())..];
        let ahead = if self.due_unsorted { 0 } else { count };
        self.due_front
            .iter()
            .rev()
            .chain(back)
            .copied()
            .filter(|&k| k != TOMB)
            .take(ahead)
            .map(|k| (k, self.entries[k as usize].when))
    }

    /// The earliest occupied wheel slot (ignoring the due queue) as `(level, slot, start tick)`.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        for level in 0..LEVELS {
            let occupied = self.occupied[level];
            if occupied == 0 {
                continue;
            }
            let now_slot = slot_for(self.elapsed, level);
            // By the invariant every occupied slot is strictly after `now_slot`.
            let later = occupied & (u64::MAX << now_slot);
            debug_assert!(
                later == occupied && later & (1 << now_slot) == 0,
                "wheel invariant broken at level {level}"
            );
            // Defensive fallback (unreachable while the invariant holds): treat a slot at or
            // before the current one as due now; the cascade re-files by exact deadline, so
            // nothing can fire early even then.
            let slot = if later != 0 { later } else { occupied }.trailing_zeros() as usize;
            let start =
                level_start(self.elapsed, level) + ((slot as u64) << (level as u32 * SLOT_BITS));
            return Some((level, slot, start.max(self.elapsed)));
        }
        None
    }

    /// Empty level `level` slot `slot`, re-filing each entry relative to the current `elapsed`.
    fn cascade(&mut self, level: usize, slot: usize) {
        let list = level * SLOTS + slot;
        let mut keys = std::mem::take(&mut self.slots[list]);
        self.occupied[level] &= !(1u64 << slot);
        if level == 0 && self.due_live == 0 && slot_for(self.elapsed, 0) == slot {
            // A level-0 slot is one tick, now reached: every key in it is due at exactly
            // `elapsed`, so the array becomes the (empty) due queue, positions unchanged, and
            // the slot's list id stands for the due queue's back array (no pass over the keys).
            debug_assert!(self.due.is_empty() && self.due_front.is_empty());
            debug_assert!(keys
                .iter()
                .all(|&k| self.entries[k as usize].when == self.elapsed));
            self.due_alias = list as u16;
            self.due_live = keys.len();
            self.due_floor = self.elapsed;
            self.due_ceil = self.elapsed;
            std::mem::swap(&mut self.due, &mut keys);
            self.due_head = 0;
        } else {
            // Read a chunk's deadlines first, in a loop of independent loads, so that the
            // entries' cache misses overlap; then file the chunk.
            for chunk in keys.chunks(CASCADE_CHUNK) {
                let mut whens = [0u64; CASCADE_CHUNK];
                for (when, &key) in whens.iter_mut().zip(chunk) {
                    *when = self.entries[key as usize].when;
                }
                for (&key, &when) in chunk.iter().zip(&whens) {
                    self.insert_when(key, when);
                }
            }
        }
        recycle(&mut keys);
        self.slots[list] = keys;
    }

    /// File `key` (whose `when` is set and which is on no list) on the due queue or its slot.
    #[inline]
    fn insert(&mut self, key: u32) {
        self.insert_when(key, self.entries[key as usize].when);
    }

    /// [`insert`](Wheel::insert) given the key's `when`.
    #[inline]
    fn insert_when(&mut self, key: u32, when: u64) {
        if when <= self.elapsed {
            self.insert_due(key, when);
        } else {
            let level = level_for(self.elapsed, when);
            let slot = slot_for(when, level);
            self.occupied[level] |= 1u64 << slot;
            let list = level * SLOTS + slot;
            debug_assert_ne!(list as u16, self.due_alias, "slot aliased to the due queue");
            let keys = &mut self.slots[list];
            let e = &mut self.entries[key as usize];
            e.pos = keys.len() as u32;
            e.list = list as u16;
            keys.push(key);
        }
    }

    /// Put `key` (deadline `when <= elapsed`) on the due queue, keeping it sorted where that is
    /// O(1) and otherwise leaving the sort to the next pop; see the module docs.
    #[inline]
    fn insert_due(&mut self, key: u32, when: u64) {
        let e = &mut self.entries[key as usize];
        if self.due_live == 0 || (!self.draining && when >= self.due_ceil) {
            // Empty queue, or a new maximum (the usual case outside a drain: `when == elapsed`).
            e.pos = self.due.len() as u32;
            e.list = DUE_BACK;
            self.due.push(key);
        } else {
            // "As soon as possible" during a drain, or a new minimum; anything else unsorts.
            if !self.draining && when > self.due_floor {
                self.due_unsorted = true;
            }
            e.pos = self.due_front.len() as u32;
            e.list = DUE_FRONT;
            self.due_front.push(key);
        }
        self.due_live += 1;
        self.due_floor = self.due_floor.min(when);
        self.due_ceil = self.due_ceil.max(when);
    }

    /// Take the first live key off the due queue (which must hold one), with its deadline.
    #[inline]
    fn pop_due(&mut self) -> (u32, u64) {
        loop {
            let key = match self.due_front.pop() {
                Some(key) => key,
                None => {
                    let key = self.due[self.due_head];
                    self.due_head += 1;
                    key
                }
            };
            if key == TOMB {
                self.due_dead -= 1;
                continue;
            }
            let e = &mut self.entries[key as usize];
            e.list = UNSCHEDULED;
            let when = e.when;
            self.len -= 1;
            self.due_live -= 1;
            if self.due_live == 0 {
                self.reset_due();
            }
            return (key, when);
        }
    }

    /// Empty the due queue's arrays (it holds no live key).
    fn reset_due(&mut self) {
        recycle(&mut self.due);
        recycle(&mut self.due_front);
        self.due_head = 0;
        self.due_dead = 0;
        self.due_floor = u64::MAX;
        self.due_ceil = 0;
        self.due_unsorted = false;
        self.due_alias = UNSCHEDULED;
    }

    /// Rewrite the due queue's live keys into the back array, front stack first, dropping
    /// tombstones; `sort` also orders them by deadline (then key).
    fn rebuild_due(&mut self, sort: bool) {
        let mut live: Vec<(u64, u32)> = Vec::with_capacity(self.due_live);
        let back = &self.due[self.due_head..];
        for &key in self.due_front.iter().rev().chain(back) {
            if key != TOMB {
                live.push((self.entries[key as usize].when, key));
            }
        }
        debug_assert_eq!(live.len(), self.due_live);
        if sort {
            live.sort_unstable();
            self.due_unsorted = false;
        }
        self.due.clear();
        self.due_front.clear();
        self.due_head = 0;
        self.due_dead = 0;
        for (pos, &(_, key)) in live.iter().enumerate() {
            let e = &mut self.entries[key as usize];
            e.pos = pos as u32;
            e.list = DUE_BACK;
            self.due.push(key);
        }
    }

    /// Take `key` (which must be on a list) off its list, keeping masks and the due queue's
    /// counts in step.
    #[inline]
    fn unlink(&mut self, key: u32) {
        let Entry { pos, list, .. } = self.entries[key as usize];
        self.entries[key as usize].list = UNSCHEDULED;
        let pos = pos as usize;
        let list = if list == self.due_alias {
            DUE_BACK
        } else {
            list
        };
        match list {
            DUE_BACK | DUE_FRONT => {
                let keys = if list == DUE_BACK {
                    &mut self.due
                } else {
                    &mut self.due_front
                };
                debug_assert_eq!(keys[pos], key);
                keys[pos] = TOMB;
                self.due_live -= 1;
                if self.due_live == 0 {
                    self.reset_due();
                } else {
                    self.due_dead += 1;
                    if self.due_dead > MIN_COMPACT && self.due_dead > self.due_live {
                        self.rebuild_due(false);
                    }
                }
            }
            _ => {
                let list = list as usize;
                debug_assert!(list < SLOT_LISTS);
                let keys = &mut self.slots[list];
                debug_assert_eq!(keys[pos], key);
                let last = keys.pop().expect("a scheduled key's list is not empty");
                if last != key {
                    keys[pos] = last;
                    self.entries[last as usize].pos = pos as u32;
                }
                if keys.is_empty() {
                    recycle(keys);
                    self.occupied[list / SLOTS] &= !(1u64 << (list % SLOTS));
                }
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeSet, HashMap};

    /// A wheel at `now` with keys `0..n`.
    fn wheel(now: u64, n: usize) -> Wheel {
        let mut w = Wheel::new(now);
        w.reserve_keys(n);
        w
    }

    /// Pop everything due at `now`, in order.
    fn drain(w: &mut Wheel, now: u64) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        while let Some(x) = w.pop_expired(now) {
            out.push(x);
        }
        out
    }

    #[test]
    fn entry_is_small() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        assert_eq!(LEVELS, 11);
        let mut w = Wheel::new(0);
        let empty = w.heap_bytes();
        assert!(empty < 32 * 1024);
        w.reserve_keys(1000);
        assert!(w.heap_bytes() >= empty + 1000 * std::mem::size_of::<Entry>());
        assert!(std::mem::size_of::<Wheel>() < 4096);
    }

    #[test]
    fn new_wheel_is_empty() {
        let mut w = Wheel::new(42);
        assert!(w.is_empty());
        assert_eq!(w.len(), 0);
        assert_eq!(w.elapsed(), 42);
        assert_eq!(w.key_capacity(), 0);
        assert_eq!(w.next_expiration(), None);
        assert_eq!(w.pop_expired(100), None);
        assert_eq!(w.elapsed(), 100);
    }

    #[test]
    fn reserve_keys_grows_and_keeps_entries() {
        let mut w = wheel(0, 4);
        w.schedule(3, 10);
        w.reserve_keys(2); // shrinking request is a no-op
        assert_eq!(w.key_capacity(), 4);
        w.reserve_keys(1000);
        assert_eq!(w.key_capacity(), 1000);
        assert_eq!(w.deadline(3), Some(10));
        assert_eq!(w.deadline(999), None);
        w.schedule(999, 5);
        assert_eq!(drain(&mut w, 10), vec![(999, 5), (3, 10)]);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn schedule_out_of_range_panics() {
        let mut w = wheel(0, 4);
        w.schedule(4, 1);
    }

    #[test]
    fn out_of_range_cancel_and_deadline_are_benign() {
        let mut w = wheel(0, 4);
        assert!(!w.cancel(4));
        assert!(!w.cancel(u32::MAX));
        assert_eq!(w.deadline(4), None);
    }

    #[test]
    fn schedule_cancel_deadline_len() {
        let mut w = wheel(0, 8);
        w.schedule(1, 100);
        w.schedule(2, 200);
        assert_eq!(w.len(), 2);
        assert_eq!(w.deadline(1), Some(100));
        w.schedule(1, 300); // move
        assert_eq!(w.len(), 2);
        assert_eq!(w.deadline(1), Some(300));
        assert!(w.cancel(2));
        assert!(!w.cancel(2));
        assert_eq!(w.len(), 1);
        assert_eq!(w.deadline(2), None);
        assert_eq!(drain(&mut w, 299), vec![]);
        assert_eq!(drain(&mut w, 300), vec![(1, 300)]);
        assert!(w.is_empty());
    }

    #[test]
    fn due_now_and_past_deadlines_pop_immediately() {
        let mut w = wheel(1000, 4);
        w.schedule(0, 1000); // == elapsed
        w.schedule(1, 3); // long past
        assert_eq!(w.next_expiration(), Some(3));
        // Even a `now` behind elapsed returns them (treated as elapsed).
        let mut got = drain(&mut w, 0);
        got.sort_unstable();
        assert_eq!(got, vec![(0, 1000), (1, 3)]);
        assert_eq!(w.elapsed(), 1000);
    }

    #[test]
    fn now_behind_elapsed_does_not_rewind() {
        let mut w = wheel(500, 2);
        w.schedule(0, 501);
        assert_eq!(w.pop_expired(10), None);
        assert_eq!(w.elapsed(), 500);
        assert_eq!(w.pop_expired(501), Some((0, 501)));
    }

    #[test]
    fn reschedule_in_loop_with_past_deadline_pops_in_same_loop() {
        let mut w = wheel(0, 4);
        w.schedule(0, 10);
        w.schedule(1, 20);
        let mut got = Vec::new();
        let mut rescheduled = false;
        while let Some((k, when)) = w.pop_expired(100) {
            got.push((k, when));
            if k == 1 && !rescheduled {
                rescheduled = true;
                w.schedule(1, 5); // already passed: must come out next
                w.schedule(2, 50); // future but within now: in order
                w.schedule(3, 101); // beyond now: stays
            }
        }
        assert_eq!(got, vec![(0, 10), (1, 20), (1, 5), (2, 50)]);
        assert_eq!(w.deadline(3), Some(101));
        assert_eq!(w.elapsed(), 100);
    }

    #[test]
    fn lazy_rearm_loop() {
        // Re-arm every key one period later, inside the loop, across a long jump.
        let mut w = wheel(0, 3);
        for k in 0..3 {
            w.schedule(k, 7 + u64::from(k));
        }
        let mut got = Vec::new();
        while let Some((k, when)) = w.pop_expired(40) {
            got.push((k, when));
            w.schedule(k, when + 10);
        }
        let whens: Vec<u64> = got.iter().map(|&(_, w)| w).collect();
        assert_eq!(whens, vec![7, 8, 9, 17, 18, 19, 27, 28, 29, 37, 38, 39]);
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn schedule_key_sitting_on_due_list() {
        let mut w = wheel(0, 4);
        w.schedule(0, 64 * 64); // level 2
        w.schedule(1, 64 * 64);
        // Pop one; the cascade has put the other on the due list.
        let (first, _) = w.pop_expired(64 * 64).unwrap();
        let other = 1 - first;
        assert_eq!(w.deadline(other), Some(64 * 64));
        // Move it from the due list into the future.
        w.schedule(other, 64 * 64 + 1);
        assert_eq!(w.pop_expired(64 * 64), None);
        assert_eq!(w.next_expiration(), Some(64 * 64 + 1));
        // And back onto the due list, then off it again.
        w.schedule(other, 2);
        assert_eq!(w.deadline(other), Some(2));
        assert_eq!(w.next_expiration(), Some(2));
        assert!(w.cancel(other));
        assert_eq!(w.next_expiration(), None);
        assert_eq!(w.pop_expired(u64::MAX), None);
        assert!(w.is_empty());
    }

    #[test]
    fn past_deadlines_scheduled_outside_a_loop_come_out_sorted() {
        let mut w = wheel(1_000_000, 3000);
        for k in 0..3000u32 {
            // Scrambled past deadlines (many ties), plus some due exactly now.
            let when = if k % 7 == 0 {
                1_000_000
            } else {
                (u64::from(k) * 7919) % 100_000
            };
            w.schedule(k, when);
        }
        // A few cancels and moves while the list is unsorted.
        assert!(w.cancel(5));
        w.schedule(6, 2_000_000);
        w.schedule(8, 1);
        let got = drain(&mut w, 1_500_000);
        assert_eq!(got.len(), 2998);
        assert!(got.windows(2).all(|p| p[0].1 <= p[1].1));
        assert_eq!(got[0], (8, 1));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn due_queue_tombstones_compact_and_keep_order() {
        // Enough removals from the due queue to compact it several times, with keys moved
        // between the due queue and the slots, checked against a sorted reference.
        const N: u32 = 2000;
        let mut w = wheel(10_000, N as usize);
        let mut live: Vec<(u64, u32)> = Vec::new();
        for k in 0..N {
            w.schedule(k, u64::from(k % 97) * 50); // past, scrambled: the queue is unsorted
        }
        for k in (0..N).filter(|k| k % 3 != 0) {
            assert!(w.cancel(k));
        }
        for k in (0..N).filter(|k| k % 3 == 0) {
            if k % 2 == 0 {
                w.schedule(k, 20_000 + u64::from(k)); // out to a slot
                w.schedule(k, u64::from(k) % 500); // and back onto the due queue
            }
            live.push((w.deadline(k).unwrap(), k));
        }
        assert_eq!(w.len(), live.len());
        live.sort_unstable();
        let got = drain(&mut w, 10_000);
        let whens: Vec<u64> = got.iter().map(|&(_, t)| t).collect();
        let want: Vec<u64> = live.iter().map(|&(t, _)| t).collect();
        assert_eq!(whens, want);
        let mut keys: Vec<u32> = got.iter().map(|&(k, _)| k).collect();
        keys.sort_unstable();
        let mut want_keys: Vec<u32> = live.iter().map(|&(_, k)| k).collect();
        want_keys.sort_unstable();
        assert_eq!(keys, want_keys);
        assert!(w.is_empty());
    }

    #[test]
    fn emptied_large_lists_give_their_memory_back() {
        const N: usize = 100_000;
        let mut w = wheel(0, N);
        let base = w.heap_bytes();
        for k in 0..N as u32 {
            w.schedule(k, 5_000);
        }
        assert!(w.heap_bytes() >= base + N * 4);
        assert_eq!(drain(&mut w, 5_000).len(), N);
        assert!(
            w.heap_bytes() <= base + 64 * 1024,
            "{}",
            w.heap_bytes() - base
        );
        // Removing keys one by one frees a big slot too.
        for k in 0..N as u32 {
            w.schedule(k, 9_000);
        }
        for k in 0..N as u32 {
            assert!(w.cancel(k));
        }
        assert!(w.heap_bytes() <= base + 64 * 1024);
    }

    #[test]
    fn cancel_key_sitting_on_due_list() {
        let mut w = wheel(10, 3);
        w.schedule(0, 5);
        w.schedule(1, 6);
        w.schedule(2, 7);
        assert!(w.cancel(1)); // middle of the due list
        assert_eq!(w.len(), 2);
        let mut got = drain(&mut w, 10);
        got.sort_unstable();
        assert_eq!(got, vec![(0, 5), (2, 7)]);
    }

    #[test]
    fn cascades_at_level_boundaries() {
        // Deadlines at 64^k - 1, 64^k, 64^k + 1 for every level, from several start times.
        for start in [0u64, 1, 63, 64 * 64 - 1, 12_345_678_901] {
            let mut whens = Vec::new();
            for k in 1..=10u32 {
                let b = 1u64 << (6 * k);
                for w in [b - 1, b, b + 1] {
                    whens.push(start.saturating_add(w));
                }
            }
            whens.push(u64::MAX - 1);
            whens.push(u64::MAX);
            let mut w = wheel(start, whens.len());
            for (k, &when) in whens.iter().enumerate() {
                w.schedule(k as u32, when);
            }
            let mut expected: Vec<(u64, u32)> = whens
                .iter()
                .enumerate()
                .map(|(k, &w)| (w, k as u32))
                .collect();
            expected.sort_unstable();
            // Step to each deadline minus one: nothing early; then exactly at it.
            for &(when, key) in &expected {
                if when > w.elapsed() {
                    assert_eq!(w.pop_expired(when - 1), None, "early at {when}");
                    assert!(w.next_expiration().unwrap() <= when);
                }
                assert_eq!(w.pop_expired(when), Some((key, when)));
            }
            assert!(w.is_empty());
        }
    }

    #[test]
    fn far_future_now_jumps_over_empty_ticks() {
        // A per-tick loop would never finish this.
        let mut w = wheel(0, 3);
        w.schedule(0, 1 << 40);
        w.schedule(1, (1 << 62) + 12345);
        w.schedule(2, u64::MAX - 7);
        assert_eq!(
            drain(&mut w, u64::MAX),
            vec![(0, 1 << 40), (1, (1 << 62) + 12345), (2, u64::MAX - 7)]
        );
        assert_eq!(w.elapsed(), u64::MAX);
        assert_eq!(w.pop_expired(u64::MAX), None);
    }

    #[test]
    fn top_level_deadline_never_fires_early() {
        let when = (1u64 << 63) + 5;
        let mut w = wheel(3, 1);
        w.schedule(0, when);
        assert!(w.next_expiration().unwrap() <= when);
        assert_eq!(w.pop_expired(when - 1), None);
        assert_eq!(w.elapsed(), when - 1);
        assert_eq!(w.next_expiration(), Some(when)); // now on level 0: exact
        assert_eq!(w.pop_expired(when), Some((0, when)));
    }

    #[test]
    fn when_u64_max() {
        let mut w = wheel(0, 2);
        w.schedule(0, u64::MAX);
        assert_eq!(w.pop_expired(u64::MAX - 1), None);
        assert_eq!(w.deadline(0), Some(u64::MAX));
        assert_eq!(w.pop_expired(u64::MAX), Some((0, u64::MAX)));
        // At the end of time everything is due now.
        w.schedule(1, u64::MAX);
        w.schedule(0, 17);
        assert_eq!(drain(&mut w, 0).len(), 2);
        assert_eq!(w.elapsed(), u64::MAX);
    }

    #[test]
    fn next_expiration_bounds() {
        let mut w = wheel(100, 3);
        w.schedule(0, 120); // same 64-block? 100 = 64 + 36, 120 = 64 + 56: level 0, exact
        assert_eq!(w.next_expiration(), Some(120));
        w.cancel(0);
        w.schedule(1, 64 * 64 * 3 + 17); // level 1 or 2: lower bound
        let ne = w.next_expiration().unwrap();
        assert!(ne > 100 && ne <= 64 * 64 * 3 + 17);
        w.schedule(2, 50); // due already
        assert_eq!(w.next_expiration(), Some(50));
    }

    #[test]
    fn same_tick_many_keys_and_order() {
        let mut w = wheel(0, 2000);
        for k in 0..2000u32 {
            // Pseudo-random spread, many duplicates.
            let when = (u64::from(k) * 7919) % 5000;
            w.schedule(k, when);
        }
        let got = drain(&mut w, 4999);
        assert_eq!(got.len(), 2000);
        assert!(got.windows(2).all(|p| p[0].1 <= p[1].1));
    }

    #[test]
    fn million_keys_same_tick_pop_exactly_once() {
        const N: usize = 1_000_000;
        let when = 5_000_000_000u64; // several levels up from 0
        let mut w = wheel(0, N);
        for k in 0..N as u32 {
            w.schedule(k, when);
        }
        assert_eq!(w.len(), N);
        assert_eq!(w.pop_expired(when - 1), None);
        let mut seen = vec![false; N];
        let mut count = 0usize;
        while let Some((k, t)) = w.pop_expired(when) {
            assert_eq!(t, when);
            assert!(
                !std::mem::replace(&mut seen[k as usize], true),
                "key {k} twice"
            );
            count += 1;
        }
        assert_eq!(count, N);
        assert!(w.is_empty());
        assert_eq!(w.elapsed(), when);
    }

    // ---- model-based property test ----

    const KEYS: u32 = 40;

    /// Offsets drawn from several magnitudes: 0, small, around 64^k and 2^b, and anything.
    fn offset() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            1..4u64,
            0..200u64,
            (1u32..=10, -1i64..=1).prop_map(|(k, d)| (1u64 << (6 * k)).wrapping_add_signed(d)),
            (0u32..64, -2i64..=2).prop_map(|(b, d)| (1u64 << b).saturating_add_signed(d)),
            any::<u64>(),
        ]
    }

    fn start_time() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            0..1000u64,
            (1u32..=10).prop_map(|k| (1u64 << (6 * k)) - 1),
            (0..300u64).prop_map(|d| u64::MAX - d),
            any::<u64>(),
        ]
    }

    #[derive(Clone, Debug)]
    enum Resched {
        /// New deadline = popped deadline + offset (saturating).
        After(u64),
        /// New deadline = elapsed - back (saturating): already passed.
        Past(u64),
    }

    #[derive(Clone, Debug)]
    enum Op {
        Schedule {
            key: u32,
            offset: u64,
        },
        SchedulePast {
            key: u32,
            back: u64,
        },
        Cancel {
            key: u32,
        },
        /// Pop loop to `elapsed ± amount`; the i-th popped key is rescheduled per `resched[i]`.
        Pop {
            back: bool,
            amount: u64,
            resched: Vec<Option<Resched>>,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let resched = prop_oneof![
            2 => Just(None),
            2 => offset().prop_map(|o| Some(Resched::After(o))),
            1 => (0..100u64).prop_map(|b| Some(Resched::Past(b))),
        ];
        prop_oneof![
            6 => (0..KEYS, offset()).prop_map(|(key, offset)| Op::Schedule { key, offset }),
            1 => (0..KEYS, 0..100u64).prop_map(|(key, back)| Op::SchedulePast { key, back }),
            2 => (0..KEYS).prop_map(|key| Op::Cancel { key }),
            3 => (prop::bool::weighted(0.1), offset(), prop::collection::vec(resched, 0..6))
                .prop_map(|(back, amount, resched)| Op::Pop { back, amount, resched }),
        ]
    }

    /// Trivially correct reference: a map key -> when plus an ordered set of (when, key).
    #[derive(Default)]
    struct Model {
        by_key: HashMap<u32, u64>,
        by_time: BTreeSet<(u64, u32)>,
    }

    impl Model {
        fn schedule(&mut self, key: u32, when: u64) {
            self.cancel(key);
            self.by_key.insert(key, when);
            self.by_time.insert((when, key));
        }
        fn cancel(&mut self, key: u32) -> bool {
            match self.by_key.remove(&key) {
                Some(when) => {
                    self.by_time.remove(&(when, key));
                    true
                }
                None => false,
            }
        }
    }

    fn check(w: &Wheel, m: &Model, elapsed: u64) -> Result<(), TestCaseError> {
        prop_assert_eq!(w.elapsed(), elapsed);
        prop_assert_eq!(w.len(), m.by_key.len());
        prop_assert_eq!(w.is_empty(), m.by_key.is_empty());
        for k in 0..KEYS {
            prop_assert_eq!(w.deadline(k), m.by_key.get(&k).copied(), "key {}", k);
        }
        match m.by_time.first() {
            None => prop_assert_eq!(w.next_expiration(), None),
            Some(&(earliest, _)) => {
                let ne = w
                    .next_expiration()
                    .expect("non-empty wheel has an expiration");
                prop_assert!(
                    ne <= earliest,
                    "next_expiration {} > earliest {}",
                    ne,
                    earliest
                );
                // "Due now" is reported iff something is really due.
                prop_assert_eq!(ne <= elapsed, earliest <= elapsed);
            }
        }
        Ok(())
    }

    fn run(start: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let mut w = wheel(start, KEYS as usize);
        let mut m = Model::default();
        let mut elapsed = start;
        for op in ops {
            match op {
                Op::Schedule { key, offset } => {
                    let when = elapsed.saturating_add(offset);
                    w.schedule(key, when);
                    m.schedule(key, when);
                }
                Op::SchedulePast { key, back } => {
                    let when = elapsed.saturating_sub(back);
                    w.schedule(key, when);
                    m.schedule(key, when);
                }
                Op::Cancel { key } => {
                    prop_assert_eq!(w.cancel(key), m.cancel(key));
                }
                Op::Pop {
                    back,
                    amount,
                    resched,
                } => {
                    let asked = if back {
                        elapsed.saturating_sub(amount)
                    } else {
                        elapsed.saturating_add(amount)
                    };
                    let now = asked.max(elapsed);
                    // Expected output: everything due now, plus rescheduled keys due by `now`.
                    let mut expected: Vec<(u32, u64)> = m
                        .by_time
                        .range(..=(now, u32::MAX))
                        .map(|&(t, k)| (k, t))
                        .collect();
                    let mut popped = Vec::new();
                    let mut last_in_order: Option<u64> = None;
                    // Keys rescheduled during this loop to a deadline already passed: they come
                    // out as soon as possible, outside the deadline order.
                    let mut excused: Vec<u32> = Vec::new();
                    while let Some((k, when)) = w.pop_expired(asked) {
                        prop_assert!(when <= now, "popped {} > now {}", when, now);
                        prop_assert!(when <= w.elapsed() && w.elapsed() <= now);
                        prop_assert_eq!(m.by_key.get(&k).copied(), Some(when), "key {}", k);
                        m.cancel(k);
                        if let Some(i) = excused.iter().position(|&e| e == k) {
                            excused.swap_remove(i);
                        } else {
                            if let Some(last) = last_in_order {
                                prop_assert!(when >= last, "out of order: {} after {}", when, last);
                            }
                            last_in_order = Some(when);
                        }
                        let i = popped.len();
                        popped.push((k, when));
                        let new_when = match resched.get(i) {
                            Some(Some(Resched::After(o))) => when.saturating_add(*o),
                            Some(Some(Resched::Past(b))) => w.elapsed().saturating_sub(*b),
                            _ => continue,
                        };
                        w.schedule(k, new_when);
                        m.schedule(k, new_when);
                        if new_when <= now {
                            expected.push((k, new_when));
                        }
                        if new_when <= w.elapsed() {
                            excused.push(k);
                        }
                    }
                    elapsed = now;
                    // Nothing due left behind, and the same multiset came out.
                    prop_assert!(m.by_time.first().is_none_or(|&(t, _)| t > now));
                    popped.sort_unstable();
                    expected.sort_unstable();
                    prop_assert_eq!(popped, expected);
                }
            }
            check(&w, &m, elapsed)?;
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn matches_reference_model(
            start in start_time(),
            ops in prop::collection::vec(op(), 1..80),
        ) {
            run(start, ops)?;
        }
    }
}
