//! Hierarchical timer wheel over dense `u32` keys.
//!
//! The wheel tracks at most one pending deadline per key, for up to millions of keys (topic ids
//! `0..n`). Time is a plain `u64` tick count; converting nanoseconds to ticks is the caller's job.
//!
//! # Layout
//!
//! * Entries live in a slab (`Vec<Entry>`) indexed by the key itself, so there is no key→slot map
//!   and schedule/cancel/pop never allocate. Only [`Wheel::reserve_keys`] grows memory.
//! * Every list (a wheel slot, or the "due" list) is an intrusive doubly linked list threaded
//!   through the entries with `u32` indices, so unlinking any key is O(1).
//! * There are 11 levels of 64 slots. Level `l` slot `s` holds deadlines whose bits above
//!   `6 * (l + 1)` equal those of the current time (`elapsed`) and whose level-`l` digit is `s`;
//!   the level is picked from the highest bit in which `elapsed` and `when` differ (as in tokio).
//!   Eleven levels cover all 64 bits, so every `u64` deadline (`u64::MAX` included) has an exact
//!   home: a far-future deadline simply sits in a top-level slot and is cascaded down (re-inserted
//!   relative to the then-current time) when that slot comes up. Nothing is ever clamped, so
//!   nothing can fire early.
//! * A `u64` occupancy mask per level finds the next non-empty slot with `trailing_zeros`, so
//!   advancing over long idle stretches costs O(levels), never O(ticks).
//! * Keys whose deadline is at or before `elapsed` sit on the "due" list, from which
//!   [`Wheel::pop_expired`] hands them out before looking at the slots again. The due list is kept
//!   in deadline order so that keys scheduled in the past (outside a drain) still come out in
//!   order: appends and prepends keep it sorted in O(1); any other insertion only marks it
//!   unsorted, and the next pop sorts it in place (linked-list merge sort, no allocation). During
//!   a drain (after `pop_expired` returned `Some`, until it returns `None`) a key scheduled at or
//!   before `elapsed` is simply pushed to the front: it comes out next, as documented.
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
//! * An entry on the due list has `when <= elapsed`; entries get there only by being scheduled at
//!   or before `elapsed` or by a cascade at exactly their deadline, so a popped key is never early.

/// Bits of the tick consumed by one level.
const SLOT_BITS: u32 = 6;
/// Slots per level.
const SLOTS: usize = 1 << SLOT_BITS;
/// Mask of one level's digit.
const SLOT_MASK: u64 = (SLOTS as u64) - 1;
/// Number of levels: `ceil(64 / 6)`, enough for every `u64` tick. The top level only uses its low
/// sixteen slots (bits 60..64).
const LEVELS: usize = 64_usize.div_ceil(SLOT_BITS as usize);
/// Index of the due list in `heads`; lists `0..DUE` are `level * SLOTS + slot`.
const DUE: usize = LEVELS * SLOTS;
/// Total number of list heads.
const LISTS: usize = DUE + 1;
/// "No entry" in a link or list head.
const NIL: u32 = u32::MAX;
/// `Entry::list` of a key with no pending deadline.
const UNSCHEDULED: u16 = u16::MAX;

/// Largest number of keys a wheel can hold: `u32::MAX` itself is the `NIL` link.
const MAX_KEYS: usize = NIL as usize;

/// One key's slab entry (24 bytes: 8 + 4 + 4 + 2, padded to the `u64` alignment).
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The exact deadline given to `schedule` (meaningless while unscheduled).
    when: u64,
    /// Next key in the same list, or `NIL`.
    next: u32,
    /// Previous key in the same list, or `NIL` (then this key is the list head).
    prev: u32,
    /// Which list the key is on (`level * SLOTS + slot`, or `DUE`), or `UNSCHEDULED`.
    list: u16,
}

impl Entry {
    const VACANT: Entry = Entry {
        when: 0,
        next: NIL,
        prev: NIL,
        list: UNSCHEDULED,
    };
}

// The list index must fit `Entry::list` with `UNSCHEDULED` left over.
const _: () = assert!(LISTS < UNSCHEDULED as usize);

/// A hierarchical timer wheel: at most one pending deadline per dense `u32` key, O(1) schedule and
/// cancel, no allocation outside [`Wheel::reserve_keys`]. See the module docs for the layout.
#[derive(Clone, Debug)]
pub struct Wheel {
    /// Slab of entries, indexed by key.
    entries: Vec<Entry>,
    /// Head key of every list (wheel slots, then the due list), or `NIL`.
    heads: [u32; LISTS],
    /// Bit `s` of `occupied[l]` is set iff level `l` slot `s` is non-empty.
    occupied: [u64; LEVELS],
    /// Current time in ticks; never decreases.
    elapsed: u64,
    /// Number of keys with a pending deadline.
    len: usize,
    /// Lower bound of the deadlines on the due list: the minimum `when` pushed since the list was
    /// last empty (removals do not raise it, which keeps it a valid lower bound). `u64::MAX` when
    /// the list is empty.
    due_floor: u64,
    /// Last key of the due list, or `NIL`.
    due_tail: u32,
    /// The due list may be out of deadline order (sorted before the next pop from it).
    due_unsorted: bool,
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
            heads: [NIL; LISTS],
            occupied: [0; LEVELS],
            elapsed: now,
            len: 0,
            due_floor: u64::MAX,
            due_tail: NIL,
            due_unsorted: false,
            draining: false,
        }
    }

    /// Make keys `0..n` valid (grows the slab; existing entries untouched). A smaller `n` than
    /// the current capacity does nothing. Panics if `n > u32::MAX` (index `u32::MAX` is the
    /// `NIL` link).
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

    /// Bytes of heap the wheel holds: its slab, 24 bytes per reserved key. The list heads and
    /// occupancy masks (about 3 KB, independent of the key count) live inline in the `Wheel`.
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    /// Schedule `key` to expire at tick `when`, moving it if already scheduled (wherever it is,
    /// including the due list). A `when` at or before the current elapsed tick means "due now":
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
    ///   put on the due list since that list was last empty; cancels may leave it lower);
    /// * otherwise `> elapsed()` and exact when the earliest deadline is within the current
    ///   64-tick block (level 0); for farther deadlines it is the start of the earliest occupied
    ///   higher-level slot, i.e. the tick at which `pop_expired` would next have work to do.
    ///
    /// Sleeping until the returned tick and calling `pop_expired` never misses a deadline.
    pub fn next_expiration(&self) -> Option<u64> {
        if self.heads[DUE] != NIL {
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
    /// reaches them sorts them in place, O(k log k) for k such keys, without allocating).
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
            if self.heads[DUE] != NIL {
                if self.due_unsorted {
                    self.sort_due();
                }
                let head = self.heads[DUE];
                let when = self.entries[head as usize].when;
                self.unlink(head);
                self.len -= 1;
                self.draining = true;
                return Some((head, when));
            }
            match self.next_slot() {
                Some((level, slot, start)) if start <= now => {
                    // Everything in that slot is at or after `start`, and nothing anywhere is
                    // earlier, so time can move there; the cascade then re-files the slot's
                    // entries relative to the new time (due ones go to the due list).
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

    /// The earliest occupied wheel slot (ignoring the due list) as `(level, slot, start tick)`.
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
        let mut cur = self.heads[list];
        self.heads[list] = NIL;
        self.occupied[level] &= !(1u64 << slot);
        while cur != NIL {
            // `insert` rewrites the links, so read the successor first.
            let next = self.entries[cur as usize].next;
            self.insert(cur);
            cur = next;
        }
    }

    /// File `key` (whose `when` is set and which is on no list) on the due list or its slot.
    #[inline]
    fn insert(&mut self, key: u32) {
        let when = self.entries[key as usize].when;
        if when <= self.elapsed {
            self.insert_due(key, when);
        } else {
            let level = level_for(self.elapsed, when);
            let slot = slot_for(when, level);
            self.occupied[level] |= 1u64 << slot;
            self.push_front(level * SLOTS + slot, key);
        }
    }

    /// Put `key` (deadline `when <= elapsed`) on the due list, keeping it sorted where that is
    /// O(1) and otherwise leaving the sort to the next pop; see the module docs.
    #[inline]
    fn insert_due(&mut self, key: u32, when: u64) {
        self.due_floor = self.due_floor.min(when);
        let head = self.heads[DUE];
        if head == NIL || self.draining || when <= self.entries[head as usize].when {
            // Empty list, "as soon as possible" during a drain, or a new minimum.
            self.push_front(DUE, key);
        } else if when >= self.entries[self.due_tail as usize].when {
            // The usual case outside a drain: a new maximum (e.g. `when == elapsed`).
            let tail = self.due_tail;
            self.entries[tail as usize].next = key;
            let e = &mut self.entries[key as usize];
            e.next = NIL;
            e.prev = tail;
            e.list = DUE as u16;
            self.due_tail = key;
        } else {
            self.push_front(DUE, key);
            self.due_unsorted = true;
        }
    }

    /// Link `key` in at the head of `list` (the caller keeps masks/floors in step).
    #[inline]
    fn push_front(&mut self, list: usize, key: u32) {
        let old_head = self.heads[list];
        if old_head != NIL {
            self.entries[old_head as usize].prev = key;
        } else if list == DUE {
            self.due_tail = key;
        }
        let e = &mut self.entries[key as usize];
        e.next = old_head;
        e.prev = NIL;
        e.list = list as u16;
        self.heads[list] = key;
    }

    /// Sort the due list by deadline in place: bottom-up merge sort on the `next` links (runs of
    /// length 2^i kept in a fixed array, as in a binary counter), then `prev` links and the tail
    /// are rebuilt. O(n log n), stable, no allocation.
    fn sort_due(&mut self) {
        // 2^32 entries at most, so 33 run sizes.
        let mut runs = [NIL; 33];
        let mut cur = self.heads[DUE];
        while cur != NIL {
            let next = self.entries[cur as usize].next;
            self.entries[cur as usize].next = NIL;
            let mut run = cur;
            let mut i = 0;
            while runs[i] != NIL {
                // `runs[i]` holds earlier elements: merging it first keeps the sort stable.
                run = self.merge_due(runs[i], run);
                runs[i] = NIL;
                i += 1;
            }
            runs[i] = run;
            cur = next;
        }
        let mut sorted = NIL;
        for &run in runs.iter().filter(|&&r| r != NIL) {
            // Larger runs hold earlier elements.
            sorted = if sorted == NIL {
                run
            } else {
                self.merge_due(run, sorted)
            };
        }
        self.heads[DUE] = sorted;
        let mut prev = NIL;
        let mut cur = sorted;
        while cur != NIL {
            self.entries[cur as usize].prev = prev;
            prev = cur;
            cur = self.entries[cur as usize].next;
        }
        self.due_tail = prev;
        self.due_unsorted = false;
    }

    /// Merge two non-empty `next`-linked runs sorted by deadline (ties from `a` first).
    fn merge_due(&mut self, mut a: u32, mut b: u32) -> u32 {
        let take_a =
            |s: &Self, a: u32, b: u32| s.entries[a as usize].when <= s.entries[b as usize].when;
        let head = if take_a(self, a, b) { a } else { b };
        let mut tail = head;
        if head == a {
            a = self.entries[a as usize].next;
        } else {
            b = self.entries[b as usize].next;
        }
        while a != NIL && b != NIL {
            let pick = if take_a(self, a, b) { &mut a } else { &mut b };
            let key = *pick;
            *pick = self.entries[key as usize].next;
            self.entries[tail as usize].next = key;
            tail = key;
        }
        self.entries[tail as usize].next = if a != NIL { a } else { b };
        head
    }

    /// Take `key` (which must be on a list) off its list, keeping masks and `due_floor` in step.
    #[inline]
    fn unlink(&mut self, key: u32) {
        let Entry {
            next, prev, list, ..
        } = self.entries[key as usize];
        let list = list as usize;
        debug_assert!(list < LISTS);
        if prev != NIL {
            self.entries[prev as usize].next = next;
        } else {
            self.heads[list] = next;
            if next == NIL {
                // The list just became empty.
                if list == DUE {
                    self.due_floor = u64::MAX;
                } else {
                    self.occupied[list / SLOTS] &= !(1u64 << (list % SLOTS));
                }
            }
        }
        if next != NIL {
            self.entries[next as usize].prev = prev;
        } else if list == DUE {
            self.due_tail = prev;
        }
        let e = &mut self.entries[key as usize];
        e.next = NIL;
        e.prev = NIL;
        e.list = UNSCHEDULED;
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
        assert_eq!(std::mem::size_of::<Entry>(), 24);
        assert_eq!(LEVELS, 11);
        let mut w = Wheel::new(0);
        assert_eq!(w.heap_bytes(), 0);
        w.reserve_keys(1000);
        assert!(w.heap_bytes() >= 1000 * std::mem::size_of::<Entry>());
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
