//! One level of the wheel: 64 slots of keys and the occupancy bits that find the next non-empty
//! slot, plus the tick arithmetic that says which level and slot a deadline belongs to.
//!
//! A level knows nothing of the slab: it stores keys and hands back positions, and the wheel keeps
//! each key's entry (`list`, `pos`) in step. Invariant, held by `debug_assert!`s: bit `s` of
//! `occupied` is set iff slot `s` holds at least one key.

/// Bits of the tick consumed by one level.
pub(super) const SLOT_BITS: u32 = 6;
/// Slots per level.
pub(super) const SLOTS: usize = 1 << SLOT_BITS;
/// Mask of one level's digit.
const SLOT_MASK: u64 = (SLOTS as u64) - 1;
/// Number of levels: `ceil(64 / 6)`, enough for every `u64` tick. The top level only uses its low
/// sixteen slots (bits 60..64).
pub(super) const LEVELS: usize = 64_usize.div_ceil(SLOT_BITS as usize);
/// A list array emptied with more room than this many keys is freed rather than kept.
pub const KEEP_CAPACITY: usize = 1024;

/// Level whose slots distinguish `when` from `elapsed` (requires `when > elapsed`): the one
/// holding the highest bit in which they differ (as in tokio).
#[inline]
pub(super) fn level_for(elapsed: u64, when: u64) -> usize {
    debug_assert!(when > elapsed);
    // OR-ing the low digit in makes anything within the current 64-tick block land on level 0.
    let masked = (elapsed ^ when) | SLOT_MASK;
    let significant = 63 - masked.leading_zeros();
    (significant / SLOT_BITS) as usize
}

/// The level-`level` digit of tick `t`.
#[inline]
pub(super) fn slot_for(t: u64, level: usize) -> usize {
    ((t >> (level as u32 * SLOT_BITS)) & SLOT_MASK) as usize
}

/// First tick of the block spanned by all of level `level` (64 of its slots) that contains `t`.
#[inline]
fn level_start(t: u64, level: usize) -> u64 {
    let bits = (level as u32 + 1) * SLOT_BITS;
    // The top level spans all of u64 (66 bits > 64), so its block starts at 0.
    t & u64::MAX.checked_shl(bits).unwrap_or(0)
}

/// First tick of level `level` slot `slot` in the level block that contains `t`.
#[inline]
fn slot_start(t: u64, level: usize, slot: usize) -> u64 {
    level_start(t, level) + ((slot as u64) << (level as u32 * SLOT_BITS))
}

/// Empty `list`, keeping its array for reuse unless it grew large.
#[inline]
pub(super) fn recycle(list: &mut Vec<u32>) {
    if list.capacity() > KEEP_CAPACITY {
        *list = Vec::new();
    } else {
        list.clear();
    }
}

/// One level: the keys of each of its 64 slots, in no particular order, and which slots are
/// non-empty.
#[derive(Clone, Debug)]
pub(super) struct Level {
    /// Which level this is (0 = one tick per slot).
    level: usize,
    /// Bit `s` is set iff `slots[s]` is non-empty.
    occupied: u64,
    /// Keys of each slot.
    slots: [Vec<u32>; SLOTS],
}

impl Level {
    pub(super) fn new(level: usize) -> Self {
        debug_assert!(level < LEVELS);
        Self {
            level,
            occupied: 0,
            slots: std::array::from_fn(|_| Vec::new()),
        }
    }

    /// The earliest occupied slot as `(slot, start tick)`, given the wheel's current time
    /// (`start` is never before `elapsed`); `None` when the level is empty.
    ///
    /// The wheel's invariant puts every occupied slot strictly after `elapsed`'s digit here.
    pub(super) fn next_occupied(&self, elapsed: u64) -> Option<(usize, u64)> {
        if self.occupied == 0 {
            return None;
        }
        let now_slot = slot_for(elapsed, self.level);
        let later = self.occupied & (u64::MAX << now_slot);
        debug_assert!(
            later == self.occupied && later & (1 << now_slot) == 0,
            "wheel invariant broken at level {}",
            self.level
        );
        // Defensive fallback (unreachable while the invariant holds): treat a slot at or before
        // the current one as due now; the cascade re-files by exact deadline, so nothing can
        // fire early even then.
        let slot = if later != 0 { later } else { self.occupied }.trailing_zeros() as usize;
        let start = slot_start(elapsed, self.level, slot);
        Some((slot, start.max(elapsed)))
    }

    /// Append `key` to `slot`; returns its position there.
    #[inline]
    pub(super) fn push(&mut self, slot: usize, key: u32) -> u32 {
        self.occupied |= 1u64 << slot;
        let keys = &mut self.slots[slot];
        keys.push(key);
        (keys.len() - 1) as u32
    }

    /// Take `key` off `slot` at `pos` by moving the slot's last key into its place; returns the
    /// moved key (whose position is now `pos`), if another key moved.
    #[inline]
    pub(super) fn remove(&mut self, slot: usize, pos: usize, key: u32) -> Option<u32> {
        let keys = &mut self.slots[slot];
        debug_assert_eq!(keys[pos], key);
        let last = keys.pop().expect("a scheduled key's slot is not empty");
        let moved = if last != key {
            keys[pos] = last;
            Some(last)
        } else {
            None
        };
        if keys.is_empty() {
            recycle(keys);
            self.occupied &= !(1u64 << slot);
        }
        debug_assert_eq!(
            self.occupied & (1 << slot) != 0,
            !self.slots[slot].is_empty()
        );
        moved
    }

    /// Empty `slot`, handing over its keys (the slot is left with no array).
    #[inline]
    pub(super) fn take_slot(&mut self, slot: usize) -> Vec<u32> {
        self.occupied &= !(1u64 << slot);
        std::mem::take(&mut self.slots[slot])
    }

    /// Give an emptied `slot` back an (empty) array to reuse, recycled like any other.
    #[inline]
    pub(super) fn restore_slot(&mut self, slot: usize, mut keys: Vec<u32>) {
        debug_assert!(self.slots[slot].is_empty() && self.occupied & (1 << slot) == 0);
        recycle(&mut keys);
        self.slots[slot] = keys;
    }

    /// Heap bytes of the slots' arrays (the slot table itself lives in the wheel's allocation).
    pub(super) fn array_bytes(&self) -> usize {
        self.slots.iter().map(Vec::capacity).sum::<usize>() * std::mem::size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_cover_every_bit() {
        assert_eq!(LEVELS, 11);
        assert!(LEVELS as u32 * SLOT_BITS >= 64);
        assert!((LEVELS as u32 - 1) * SLOT_BITS < 64);
    }

    #[test]
    fn level_for_picks_the_highest_differing_digit() {
        // Within the current 64-tick block: level 0, even across nothing else.
        assert_eq!(level_for(0, 1), 0);
        assert_eq!(level_for(0, 63), 0);
        assert_eq!(level_for(64, 127), 0);
        // Crossing a 64-tick boundary needs level 1, a 4096 one level 2.
        assert_eq!(level_for(63, 64), 1);
        assert_eq!(level_for(0, 4095), 1);
        assert_eq!(level_for(4095, 4096), 2);
        // Each level takes six bits; the top one (10) holds bits 60..64.
        for level in 1..LEVELS {
            let bit = level as u32 * SLOT_BITS;
            assert_eq!(level_for(0, 1u64 << bit), level, "bit {bit}");
            assert_eq!(level_for(0, (1u64 << bit) - 1), level - 1, "bit {bit}");
        }
        assert_eq!(level_for(0, u64::MAX), LEVELS - 1);
        assert_eq!(level_for(u64::MAX - 1, u64::MAX), 0);
    }

    #[test]
    fn slot_for_reads_the_level_digit() {
        let t = 0b101_000011_000010_000001u64;
        assert_eq!(slot_for(t, 0), 1);
        assert_eq!(slot_for(t, 1), 2);
        assert_eq!(slot_for(t, 2), 3);
        assert_eq!(slot_for(t, 3), 5);
        assert_eq!(slot_for(u64::MAX, LEVELS - 1), 15);
    }

    #[test]
    fn slot_start_is_the_first_tick_of_the_slot_in_the_current_block() {
        assert_eq!(level_start(130, 0), 128);
        assert_eq!(slot_start(130, 0, 5), 133);
        assert_eq!(level_start(5_000, 1), 4096);
        assert_eq!(slot_start(5_000, 1, 3), 4096 + 3 * 64);
        // The top level's block is all of u64.
        assert_eq!(level_start(u64::MAX, LEVELS - 1), 0);
        assert_eq!(slot_start(u64::MAX, LEVELS - 1, 15), 15 << 60);
        // A deadline's slot (at the level `level_for` picks) starts at or before it and after
        // the current time's slot.
        for (elapsed, when) in [(0u64, 1u64), (63, 64), (100, 5_000), (7, u64::MAX)] {
            let level = level_for(elapsed, when);
            let start = slot_start(elapsed, level, slot_for(when, level));
            assert!(
                elapsed < start || level == 0 && start == when,
                "{elapsed} {when}"
            );
            assert!(start <= when, "{elapsed} {when}");
        }
    }

    #[test]
    fn occupied_bits_follow_the_slots() {
        let mut l = Level::new(1);
        assert_eq!(l.next_occupied(0), None);
        assert_eq!(l.push(3, 10), 0);
        assert_eq!(l.push(3, 11), 1);
        assert_eq!(l.push(9, 12), 0);
        // Earliest occupied slot after elapsed = 0: slot 3, starting at tick 3 * 64.
        assert_eq!(l.next_occupied(0), Some((3, 192)));
        // Removing the first key moves the last one into its place.
        assert_eq!(l.remove(3, 0, 10), Some(11));
        assert_eq!(l.remove(3, 0, 11), None);
        assert_eq!(l.next_occupied(0), Some((9, 9 * 64)));
        let keys = l.take_slot(9);
        assert_eq!(keys, vec![12]);
        assert_eq!(l.next_occupied(0), None);
        l.restore_slot(9, keys);
        assert_eq!(l.next_occupied(0), None);
    }

    #[test]
    fn large_emptied_arrays_are_freed() {
        let mut l = Level::new(0);
        for k in 0..=KEEP_CAPACITY as u32 {
            l.push(1, k);
        }
        assert!(l.array_bytes() > KEEP_CAPACITY * 4);
        let keys = l.take_slot(1);
        l.restore_slot(1, keys);
        assert_eq!(l.array_bytes(), 0);
    }
}
