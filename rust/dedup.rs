//! A bounded window of recently seen message ids, for consumers that drop duplicates.
//!
//! [`DedupWindow::seen`] answers "was this id already seen within the window?" and records it.
//! The window keeps the last `capacity` distinct ids: when a new id would exceed it, the oldest
//! is forgotten (a duplicate arriving after that many newer ids is not recognised; that is the
//! bound). Ids are kept as strings, so two different ids are never taken for one another.

use foldhash::fast::RandomState;
use hashbrown::HashSet;
use std::collections::VecDeque;
use std::sync::Arc;

/// Counters of a [`DedupWindow`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DedupStats {
    /// Ids checked.
    pub checked: u64,
    /// Ids found in the window (duplicates).
    pub duplicates: u64,
    /// Ids forgotten to keep the window within its capacity.
    pub evicted: u64,
}

/// The last `capacity` distinct ids, oldest first out (see the module docs).
#[derive(Debug)]
pub struct DedupWindow {
    capacity: usize,
    set: HashSet<Arc<str>, RandomState>,
    order: VecDeque<Arc<str>>,
    stats: DedupStats,
}

/// Why a window cannot be made.
#[derive(Debug, PartialEq, Eq)]
pub struct ZeroCapacity;

impl std::fmt::Display for ZeroCapacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("capacity must be at least 1")
    }
}

impl std::error::Error for ZeroCapacity {}

impl DedupWindow {
    /// A window of `capacity` ids (>= 1).
    pub fn new(capacity: usize) -> Result<Self, ZeroCapacity> {
        if capacity == 0 {
            return Err(ZeroCapacity);
        }
        let initial = capacity.min(1 << 16);
        Ok(Self {
            capacity,
            set: HashSet::with_capacity_and_hasher(initial, RandomState::default()),
            order: VecDeque::with_capacity(initial),
            stats: DedupStats::default(),
        })
    }

    /// How many ids the window keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many ids it holds now.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Whether `id` is in the window (without recording it or counting).
    pub fn contains(&self, id: &str) -> bool {
        self.set.contains(id)
    }

    /// True if `id` was seen within the window (a duplicate); otherwise records it and returns
    /// false. Counted either way.
    pub fn seen(&mut self, id: &str) -> bool {
        self.stats.checked += 1;
        if self.set.contains(id) {
            self.stats.duplicates += 1;
            return true;
        }
        if self.order.len() == self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
                self.stats.evicted += 1;
            }
        }
        let id: Arc<str> = Arc::from(id);
        self.set.insert(id.clone());
        self.order.push_back(id);
        false
    }

    /// [`seen`](Self::seen) for each id in order (an id repeated within the batch is a
    /// duplicate the second time).
    pub fn seen_many<'a, I: IntoIterator<Item = &'a str>>(&mut self, ids: I) -> Vec<bool> {
        ids.into_iter().map(|id| self.seen(id)).collect()
    }

    /// Forget every id (the counters stay).
    pub fn clear(&mut self) {
        self.set.clear();
        self.order.clear();
    }

    /// The counters.
    pub fn stats(&self) -> DedupStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_capacity_is_refused() {
        assert_eq!(DedupWindow::new(0).unwrap_err(), ZeroCapacity);
    }

    #[test]
    fn second_sight_is_a_duplicate() {
        let mut w = DedupWindow::new(4).unwrap();
        assert!(!w.seen("a"));
        assert!(w.seen("a"));
        assert!(!w.seen("b"));
        assert_eq!(
            w.stats(),
            DedupStats {
                checked: 3,
                duplicates: 1,
                evicted: 0
            }
        );
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn oldest_id_is_forgotten_beyond_capacity() {
        let mut w = DedupWindow::new(2).unwrap();
        assert_eq!(w.seen_many(["a", "b", "c"]), vec![false, false, false]);
        assert!(!w.contains("a"), "a was evicted by c");
        assert!(w.contains("b") && w.contains("c"));
        assert!(!w.seen("a"), "an evicted id counts as new");
        assert_eq!(w.stats().evicted, 2);
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn duplicates_do_not_refresh_or_evict() {
        let mut w = DedupWindow::new(2).unwrap();
        w.seen_many(["a", "b"]);
        assert!(w.seen("a"));
        assert_eq!(w.stats().evicted, 0);
        w.seen("c"); // evicts a (the oldest insertion), not b
        assert!(!w.contains("a"));
        assert!(w.contains("b"));
    }

    #[test]
    fn batch_repeats_are_duplicates() {
        let mut w = DedupWindow::new(8).unwrap();
        assert_eq!(
            w.seen_many(["x", "x", "y", "x"]),
            vec![false, true, false, true]
        );
        assert_eq!(w.stats().duplicates, 2);
    }

    #[test]
    fn clear_forgets_ids_keeps_counters() {
        let mut w = DedupWindow::new(8).unwrap();
        w.seen_many(["x", "x"]);
        w.clear();
        assert!(w.is_empty());
        assert!(!w.seen("x"));
        assert_eq!(w.stats().checked, 3);
    }

    #[test]
    fn matches_a_reference_model() {
        // A simple model: a Vec of the last `cap` distinct ids.
        let cap = 5;
        let mut w = DedupWindow::new(cap).unwrap();
        let mut model: Vec<String> = Vec::new();
        let mut x: u64 = 12345;
        for _ in 0..5000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = format!("m{}", (x >> 33) % 12);
            let expected = model.contains(&id);
            if !expected {
                if model.len() == cap {
                    model.remove(0);
                }
                model.push(id.clone());
            }
            assert_eq!(w.seen(&id), expected, "id {id}");
        }
        assert_eq!(w.len(), model.len());
    }
}
