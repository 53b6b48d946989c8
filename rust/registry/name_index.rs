//! The name index: arena offsets by hash, one 8-byte slot each, so a lookup reads one cache
//! line of index and then the name itself (with its id beside it in the arena).
//!
//! Open addressing with linear probing. A slot holds the high 32 bits of the name's hash (its
//! tag) and the name's arena offset + 1; 0 is empty. A tag's home slot is `tag * len >> 32`
//! (its place in `0..len` in proportion: `len` need not be a power of two), so the table grows
//! by half at a time without rehashing any name. Removal shifts the entries after the hole back
//! (no tombstones), so probe lengths stay those of the entries present. The load is kept at most
//! 4/5: about 3 probes for a hit and 13 for a miss, nearly always in one or two cache lines.
//!
//! Compared with a `hashbrown::HashTable<u32>` of ids (control bytes apart from the buckets, and
//! the name found through a span per id), a hit costs two fewer random memory reads; a slot is
//! 8 bytes instead of 5, at a load of 8/15 to 4/5 where hashbrown's power-of-two tables run at
//! 7/16 to 7/8: about 8 to 15 bytes per name against 6 to 11.

/// Entries by tag; see the module doc.
pub(super) struct NameIndex {
    slots: Vec<u64>,
    len: usize,
}

const MIN_SLOTS: usize = 16;

/// Whether `n` entries fit `slots` slots at the load allowed (4/5).
#[inline]
fn fits(n: usize, slots: usize) -> bool {
    n.saturating_mul(5) <= slots.saturating_mul(4)
}

#[inline]
fn slot(tag: u32, offset: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(offset + 1)
}

#[inline]
fn tag_of(s: u64) -> u32 {
    (s >> 32) as u32
}

#[inline]
fn offset_of(s: u64) -> u32 {
    (s as u32) - 1 // only called on a full slot, whose low half is offset + 1 >= 1
}

impl NameIndex {
    pub(super) fn new() -> Self {
        Self {
            slots: Vec::new(),
            len: 0,
        }
    }

    /// Entries held.
    #[allow(dead_code)] // used by the tests
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<u64>()
    }

    #[inline]
    fn home(&self, tag: u32) -> usize {
        ((u64::from(tag) * self.slots.len() as u64) >> 32) as usize
    }

    /// The slot after `i`, wrapping.
    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// How far `j` is past `i`, wrapping.
    #[inline]
    fn dist(&self, i: usize, j: usize) -> usize {
        if j >= i {
            j - i
        } else {
            j + self.slots.len() - i
        }
    }

    /// The offset of the entry with `tag` for which `is(offset)` holds.
    #[inline]
    pub(super) fn find(&self, tag: u32, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mut i = self.home(tag);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if tag_of(s) == tag && is(offset_of(s)) {
                return Some(offset_of(s));
            }
            i = self.next(i);
        }
    }

    /// The content of `tag`'s home slot (0 when empty). Read ahead of [`find`] for a chunk of
    /// names, so that their cache misses overlap.
    ///
    /// [`find`]: NameIndex::find
    #[inline]
    pub(super) fn home_slot(&self, tag: u32) -> u64 {
        if self.len == 0 {
            return 0;
        }
        self.slots[self.home(tag)]
    }

    /// The offset in a full slot whose tag is `tag`, for reading its entry ahead.
    #[inline]
    pub(super) fn offset_if(s: u64, tag: u32) -> Option<u32> {
        (s != 0 && tag_of(s) == tag).then(|| offset_of(s))
    }

    /// Make room for `additional` more entries without growing on the way.
    pub(super) fn reserve(&mut self, additional: usize) {
        let need = self.len.saturating_add(additional);
        if fits(need, self.slots.len()) {
            return;
        }
        // Half as many again (at least), or what `need` takes if that is more.
        let grown = (self.slots.len() + self.slots.len() / 2).max(MIN_SLOTS);
        let len = grown.max(need.saturating_mul(5).div_ceil(4));
        let old = std::mem::replace(&mut self.slots, vec![0; len]);
        for s in old.into_iter().filter(|&s| s != 0) {
            self.place(s);
        }
    }

    /// Add an entry (the caller has checked that no equal name is indexed).
    pub(super) fn insert(&mut self, tag: u32, offset: u32) {
        self.reserve(1);
        self.place(slot(tag, offset));
        self.len += 1;
    }

    fn place(&mut self, s: u64) {
        let mut i = self.home(tag_of(s));
        while self.slots[i] != 0 {
            i = self.next(i);
        }
        self.slots[i] = s;
    }

    /// Remove the entry (`tag`, `offset`); false if there is none.
    pub(super) fn remove(&mut self, tag: u32, offset: u32) -> bool {
        if self.len == 0 {
            return false;
        }
        let want = slot(tag, offset);
        let mut hole = self.home(tag);
        loop {
            match self.slots[hole] {
                0 => return false,
                s if s == want => break,
                _ => hole = self.next(hole),
            }
        }
        // Shift back each later entry of the run whose home is not between the hole and it
        // (cyclically): it was probed past the hole, so it must not end up after a gap.
        let mut j = hole;
        loop {
            j = self.next(j);
            let s = self.slots[j];
            if s == 0 {
                break;
            }
            if self.dist(self.home(tag_of(s)), j) >= self.dist(hole, j) {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = 0;
        self.len -= 1;
        true
    }

    /// Replace every entry's offset by `new(offset)` (after the arena is compacted).
    pub(super) fn remap(&mut self, mut new: impl FnMut(u32) -> u32) {
        for s in self.slots.iter_mut().filter(|s| **s != 0) {
            *s = slot(tag_of(*s), new(offset_of(*s)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A tiny deterministic generator (xorshift), so failures replay.
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn matches_a_map_under_random_inserts_and_removes_with_clashing_tags() {
        let mut next = rng(42);
        let mut index = NameIndex::new();
        let mut model: HashMap<u32, u32> = HashMap::new(); // offset -> tag
        let mut live: Vec<u32> = Vec::new();
        for step in 0..40_000u32 {
            // Few distinct tags, so runs are long, wrap around and share tags.
            let tag = ((next() % 509) as u32).wrapping_mul(0x9E37_79B9) ^ (step % 3);
            if next() % 3 == 0 && !live.is_empty() {
                let off = live.swap_remove((next() as usize) % live.len());
                let t = model.remove(&off).unwrap();
                assert!(index.remove(t, off));
                assert!(!index.remove(t, off), "removed twice");
            } else {
                model.insert(step, tag);
                live.push(step);
                index.insert(tag, step);
            }
            if step % 4_001 == 0 {
                for (&off, &t) in &model {
                    assert_eq!(index.find(t, |o| o == off), Some(off));
                }
            }
        }
        assert_eq!(index.len(), model.len());
        for (&off, &t) in &model {
            assert_eq!(index.find(t, |o| o == off), Some(off));
        }
        assert_eq!(index.find(12345, |_| true), None);
    }

    #[test]
    fn grows_keeps_its_load_and_remaps() {
        let mut index = NameIndex::new();
        assert_eq!(index.find(1, |_| true), None);
        assert!(!index.remove(1, 0));
        index.reserve(1000);
        let cap = index.slots.len();
        assert!(fits(1000, cap) && cap <= 1250, "{cap}");
        for i in 0..1000u32 {
            index.insert(i.wrapping_mul(0x9E37_79B9), i);
        }
        assert_eq!(index.slots.len(), cap, "reserved: no growth on the way");
        index.insert(7, 5000);
        assert!(fits(index.len(), index.slots.len()));
        assert_eq!(index.slots.len(), cap + cap / 2, "grown by half");
        index.remap(|o| o * 2);
        assert_eq!(index.find(7, |o| o == 10_000), Some(10_000));
        for i in 0..1000u32 {
            assert_eq!(
                index.find(i.wrapping_mul(0x9E37_79B9), |o| o == i * 2),
                Some(i * 2)
            );
        }
        assert_eq!(index.heap_bytes(), index.slots.capacity() * 8);
    }
}
