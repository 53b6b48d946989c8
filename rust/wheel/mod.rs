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
//!   advancing over long idle stretches costs O(levels), never O(ticks). A `level::Level`
//!   (`level.rs`) owns one level's slots and mask, beside the tick math (`level_for`,
//!   `slot_for`) that files a deadline; this module owns the slab, the due queue and time.
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

mod level;
#[cfg(test)]
mod tests;

pub use level::KEEP_CAPACITY;
use level::{level_for, recycle, slot_for, Level, LEVELS, SLOTS};

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

/// A hierarchical timer wheel: at most one pending deadline per dense `u32` key, amortized O(1)
/// schedule and cancel. See the module docs for the layout.
#[derive(Clone, Debug)]
pub struct Wheel {
    /// Slab of entries, indexed by key.
    entries: Vec<Entry>,
    /// The levels, each with its slots' keys and its occupancy bits (boxed: about 17 KB).
    levels: Box<[Level; LEVELS]>,
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

impl Wheel {
    /// A wheel whose current time ("elapsed") is `now` ticks, with no valid keys yet.
    pub fn new(now: u64) -> Self {
        Self {
            entries: Vec::new(),
            levels: Box::new(std::array::from_fn(Level::new)),
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
            + std::mem::size_of::<[Level; LEVELS]>()
            + self.levels.iter().map(Level::array_bytes).sum::<usize>()
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
    /// The lowest non-empty level holds it (module invariants).
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        self.levels.iter().enumerate().find_map(|(level, l)| {
            l.next_occupied(self.elapsed)
                .map(|(slot, start)| (level, slot, start))
        })
    }

    /// Empty level `level` slot `slot`, re-filing each entry relative to the current `elapsed`.
    fn cascade(&mut self, level: usize, slot: usize) {
        let list = level * SLOTS + slot;
        let mut keys = self.levels[level].take_slot(slot);
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
        self.levels[level].restore_slot(slot, keys);
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
            let list = level * SLOTS + slot;
            debug_assert_ne!(list as u16, self.due_alias, "slot aliased to the due queue");
            let e = &mut self.entries[key as usize];
            e.pos = self.levels[level].push(slot, key);
            e.list = list as u16;
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
                if let Some(moved) = self.levels[list / SLOTS].remove(list % SLOTS, pos, key) {
                    self.entries[moved as usize].pos = pos as u32;
                }
            }
        }
    }
}
