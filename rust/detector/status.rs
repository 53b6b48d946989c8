//! Snapshots and counters.

use super::*;

/// A snapshot of one topic.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicStatus {
    /// Its id.
    pub id: TopicId,
    /// Its state.
    pub state: State,
    /// Consecutive missed periods so far.
    pub missed: u32,
    /// The last beat, absolute ns; None if never heard.
    pub last_seen_ns: Option<u64>,
    /// The configured period, ns.
    pub period_ns: u64,
    /// Missed periods allowed before FAILED.
    pub allowed_misses: u32,
    /// Slack added to every deadline, ns (not used in phi mode).
    pub grace_ns: u64,
    /// When the current outage began (FAILED only).
    pub failed_since_ns: Option<u64>,
    /// When the next missed period would be counted (watched topics only).
    pub next_deadline_ns: Option<u64>,
    /// The phi value now (phi-accrual topics only).
    pub phi: Option<f64>,
}

/// Counters since the detector was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DetectorStats {
    /// Beats recorded.
    pub beats: u64,
    /// Beats for names or ids the detector does not know.
    pub unknown: u64,
    /// Beats for removed topics or while stopped.
    pub refused: u64,
    /// `failed` events handed out (released ones included; those held back while their topic
    /// flapped not: see `held`).
    pub failed: u64,
    /// `resumed` events handed out (those held back not).
    pub resumed: u64,
    /// `received` events produced.
    pub received: u64,
    /// Topics held (added and not removed).
    pub topics: u64,
    /// Local pauses: wake-ups more than `max_local_pause` after the detector's last run.
    pub local_pauses: u64,
    /// Their total length, ns.
    pub local_pause_ns: u64,
    /// `lagging` events: ingest-lag episodes whose lag passed `lag_threshold`.
    pub lagging: u64,
    /// How far the intake's watermark is behind the clock now, ns (0 when not backlogged).
    pub ingest_lag_ns: u64,
    /// `failed`/`resumed` events marked silenced (see `policy.rs`).
    pub silenced: u64,
    /// `failed`/`resumed` events marked suppressed by a failed parent.
    pub suppressed: u64,
    /// `failed` events sent again, unmarked, when a silence ended, a parent stopped being
    /// FAILED or a flap settled; and the `resumed` sent when a flap settles up with its
    /// alert open.
    pub released: u64,
    /// `failed`/`resumed` events held back while their topic flapped.
    pub held: u64,
}

impl Detector {
    /// A snapshot of one topic (also of a removed one, until its id is reused).
    pub fn status(&self, topic: impl Into<Handle>) -> Result<TopicStatus, DetectorError> {
        let handle = topic.into();
        let inner = self.inner.lock();
        match self.registry.resolve(handle) {
            Some(id) if (id as usize) < inner.slots.len() => Ok(self.status_of(&inner, id)),
            _ => Err(DetectorError::Unknown(format!("handle {handle}"))),
        }
    }

    /// Snapshots of every topic not removed, in id order.
    pub fn statuses(&self) -> Vec<TopicStatus> {
        let inner = self.inner.lock();
        (0..inner.slots.len() as TopicId)
            .filter(|&id| word::state(self.word(id).load(Ordering::Acquire)) != State::Removed)
            .map(|id| self.status_of(&inner, id))
            .collect()
    }

    /// The `n` worst topics, worst first: FAILED ones, then watched ones that have missed
    /// periods without failing yet (`missed > 0`, below `allowed_misses`); within each, the
    /// most missed periods first, then the longest down (earliest `failed_since`; for those
    /// not failed, the oldest last beat), then id order. Healthy, paused and stopped topics are
    /// left out, so fewer than `n` may come back.
    ///
    /// One pass over the topics under the detector lock (as [`Detector::statuses`]), keeping
    /// a small key per candidate; only the `n` chosen become [`TopicStatus`] values. For a
    /// live view of 100 000 topics that must not build a snapshot of each per refresh.
    pub fn worst(&self, n: usize) -> Vec<TopicStatus> {
        if n == 0 {
            return Vec::new();
        }
        let inner = self.inner.lock();
        // (not failed, fewer missed, later since, id): ascending order is worst first.
        let mut keys: Vec<(bool, std::cmp::Reverse<u32>, u64, TopicId)> = Vec::new();
        for id in 0..inner.slots.len() as TopicId {
            let state = word::state(self.word(id).load(Ordering::Acquire));
            let failed = state == State::Failed;
            if !failed && (!state.is_watched() || inner.slots[id as usize].missed == 0) {
                continue; // the common healthy case costs one load and a compare
            }
            let s = self.status_of(&inner, id);
            if !failed && s.missed == 0 {
                continue; // a beat not taken in yet already cleared its misses
            }
            let since = s.failed_since_ns.or(s.last_seen_ns).unwrap_or(0);
            keys.push((!failed, std::cmp::Reverse(s.missed), since, id));
        }
        if keys.len() > n {
            keys.select_nth_unstable(n - 1);
            keys.truncate(n);
        }
        keys.sort_unstable();
        keys.iter()
            .map(|&(_, _, _, id)| self.status_of(&inner, id))
            .collect()
    }

    /// At most `n` topics not removed, FAILED ones first, then by name (the per-topic series
    /// of a bounded metrics export: an alert must not lose its series to the bound), in that
    /// order, each with its name; and how many topics are not removed.
    ///
    /// One pass over the topics under the detector lock and the names' read lock (in that
    /// order, as `policy.rs` takes them), keeping the best `n` in a max-heap of borrowed names:
    /// once it is full, a topic that does not make it costs one compare with its top. Memory
    /// and objects are O(n), not O(topics); the name and the status are read under the same
    /// locks, so a removed and reused id cannot pair one topic's name with another's status.
    pub fn series_topics(&self, n: usize) -> (Vec<(TopicStatus, String)>, usize) {
        let inner = self.inner.lock();
        self.registry.with_names(|names| {
            // (not failed, name, id): ascending order is the export's order.
            let mut best: std::collections::BinaryHeap<(bool, &str, TopicId)> =
                std::collections::BinaryHeap::with_capacity(n.min(1 << 16) + 1);
            let mut live = 0usize;
            for id in 0..inner.slots.len() as TopicId {
                let state = word::state(self.word(id).load(Ordering::Acquire));
                if state == State::Removed {
                    continue;
                }
                live += 1;
                if n == 0 {
                    continue;
                }
                let key = (state != State::Failed, names.get(id), id);
                if best.len() < n {
                    best.push(key);
                } else if best.peek().is_some_and(|top| key < *top) {
                    best.pop();
                    best.push(key);
                }
            }
            let chosen = best.into_sorted_vec();
            let out = chosen
                .into_iter()
                .map(|(_, name, id)| (self.status_of(&inner, id), name.to_owned()))
                .collect();
            (out, live)
        })
    }

    /// How many topics are in each state, indexed by `State as usize`.
    pub fn state_counts(&self) -> [u64; 6] {
        let mut counts = [0u64; 6];
        for id in 0..self.registry.len() as TopicId {
            counts[word::state(self.word(id).load(Ordering::Acquire)).public() as usize] += 1;
        }
        counts
    }

    /// How many topics are in each state (indexed by `State as usize`), by the first `depth`
    /// '.'-separated segments of their names (the whole name if it has fewer), removed topics
    /// left out, sorted by prefix. One pass over the words under the name index's read lock:
    /// for metrics grouped by prefix without a Python object per topic.
    pub fn counts_by_prefix(&self, depth: usize) -> Vec<(String, [u64; 6])> {
        self.with_names(|names| {
            let mut groups: hashbrown::HashMap<&str, [u64; 6], foldhash::fast::RandomState> =
                hashbrown::HashMap::default();
            for id in 0..self.registry.len() as TopicId {
                let st = word::state(self.word(id).load(Ordering::Acquire)).public();
                if st == State::Removed {
                    continue;
                }
                let prefix = name_prefix(names.get(id), depth);
                groups.entry(prefix).or_default()[st as usize] += 1;
            }
            let mut out: Vec<(String, [u64; 6])> =
                groups.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            out
        })
    }

    pub(super) fn status_of(&self, inner: &Inner, id: TopicId) -> TopicStatus {
        let w = self.word(id).load(Ordering::Acquire);
        let slot = &inner.slots[id as usize];
        let state = word::state(w);
        let heard = w & HEARD != 0;
        let phi = if w & PHI != 0 && heard {
            self.phi
                .lock()
                .get(&id)
                .map(|p| p.phi(inner.now.saturating_sub(word::ts(w))))
        } else {
            None
        };
        // A beat the driver has not taken in yet (lazy re-arm) already counts: no missed
        // periods, and the next deadline runs from that beat.
        let stale = word::ts(w) <= slot.known_until; // old news (see `take_fresh`)
        let fresh = w & FRESH != 0 && state.is_watched() && !stale;
        let (missed, next_deadline) = if fresh {
            (0, word::ts(w).saturating_add(self.first_offset(inner, id)))
        } else {
            (slot.missed, slot.next_deadline)
        };
        TopicStatus {
            id,
            state: state.public(),
            missed,
            last_seen_ns: heard.then(|| self.abs(word::ts(w))),
            period_ns: slot.period_ns,
            allowed_misses: slot.allowed,
            grace_ns: slot.grace_ns,
            failed_since_ns: (state == State::Failed).then_some(slot.since),
            next_deadline_ns: state.is_watched().then(|| self.abs(next_deadline)),
            phi,
        }
    }

    /// Counters since the detector was made.
    pub fn stats(&self) -> DetectorStats {
        let c = &self.counters;
        DetectorStats {
            beats: c.beats.load(Ordering::Relaxed),
            unknown: c.unknown.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            resumed: c.resumed.load(Ordering::Relaxed),
            received: c.received.load(Ordering::Relaxed),
            topics: self.registry.live() as u64,
            local_pauses: c.local_pauses.load(Ordering::Relaxed),
            local_pause_ns: c.local_pause_ns.load(Ordering::Relaxed),
            lagging: c.laggings.load(Ordering::Relaxed),
            ingest_lag_ns: self.lag_ns(),
            silenced: c.silenced.load(Ordering::Relaxed),
            suppressed: c.suppressed.load(Ordering::Relaxed),
            released: c.released.load(Ordering::Relaxed),
            held: c.held.load(Ordering::Relaxed),
        }
    }

    /// Bytes of heap the detector holds for its topics (names, words, slots, wheel).
    pub fn heap_bytes(&self) -> usize {
        let inner = self.inner.lock();
        self.registry.heap_bytes()
            + inner.slots.capacity() * std::mem::size_of::<Slot>()
            + inner.wheel.heap_bytes()
            + inner.free.capacity() * std::mem::size_of::<TopicId>()
            + inner.limbo.capacity() * std::mem::size_of::<Limbo>()
            + inner.down.capacity() * 16
            + inner.policy.heap_bytes()
            + self.reasons.lock().heap_bytes()
    }
}

/// The first `depth` '.'-separated segments of `name` (all of it if it has fewer).
pub fn name_prefix(name: &str, depth: usize) -> &str {
    match name.match_indices('.').nth(depth.saturating_sub(1)) {
        Some((i, _)) if depth > 0 => &name[..i],
        _ if depth == 0 => "",
        _ => name,
    }
}

#[cfg(test)]
mod prefix {
    use super::name_prefix;

    #[test]
    fn prefixes_by_depth() {
        assert_eq!(name_prefix("svc.db.main", 1), "svc");
        assert_eq!(name_prefix("svc.db.main", 2), "svc.db");
        assert_eq!(name_prefix("svc.db.main", 3), "svc.db.main");
        assert_eq!(name_prefix("svc.db.main", 9), "svc.db.main");
        assert_eq!(name_prefix("svc", 1), "svc");
        assert_eq!(name_prefix("svc.db", 0), "");
    }
}
