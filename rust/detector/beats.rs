//! The beat path: one CAS per beat, lock-free; batches by id or name.

use super::intervals::{LocalIntervals, NO_INTERVAL};
use super::*;

/// The lock-free half of a batch of beats, to be passed to [`Detector::finish`].
#[derive(Debug)]
#[must_use = "a batch owes resumed/received events until it is finished"]
pub struct Batch {
    now: u64,
    /// Beats recorded so far.
    pub recorded: usize,
    /// Names or ids not known (nor added).
    pub unknown: usize,
    /// Beats refused (stopped or removed topics).
    refused: usize,
    /// Topics whose beat still owes an event: (handle when recorded, ends an outage).
    follow: Vec<(Handle, bool)>,
    /// Unknown names to add (auto-add on).
    missing: Vec<String>,
    /// The batch's inter-arrival tally, when the detector counts them.
    intervals: Option<Box<LocalIntervals>>,
}

impl Batch {
    fn new(now: u64, intervals: bool) -> Self {
        Self {
            now,
            recorded: 0,
            unknown: 0,
            refused: 0,
            follow: Vec::new(),
            missing: Vec::new(),
            intervals: intervals.then(Default::default),
        }
    }

    /// Count a beat's outcome; `handle` (read only if the beat owes an event) is the topic's
    /// handle when it was recorded.
    #[inline]
    fn take(
        &mut self,
        handle: impl FnOnce() -> Handle,
        (result, interval): (Beat, u64),
        want_received: bool,
    ) {
        match result {
            Beat::Recorded { resume } => {
                self.recorded += 1;
                if interval != NO_INTERVAL {
                    if let Some(tally) = &mut self.intervals {
                        tally.add(interval);
                    }
                }
                if resume || want_received {
                    self.follow.push((handle(), resume));
                }
            }
            Beat::Unknown => self.unknown += 1,
            Beat::Refused => self.refused += 1,
        }
    }

    /// Whether finishing it would take the detector lock.
    pub fn needs_finish(&self) -> bool {
        !self.follow.is_empty() || !self.missing.is_empty()
    }
}

impl Detector {
    /// Record a beat lock-free: one CAS. Never blocks and never emits; see [`Beat::Recorded`].
    #[inline]
    pub fn record(&self, id: TopicId, now_abs: u64) -> Beat {
        let (result, interval) = self.record_uncounted(id, now_abs);
        self.count_interval(interval);
        let counter = match result {
            Beat::Recorded { .. } => &self.counters.beats,
            Beat::Unknown => &self.counters.unknown,
            Beat::Refused => &self.counters.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    /// Add a single beat's inter-arrival time to the histogram, if it is counted.
    #[inline]
    fn count_interval(&self, interval: u64) {
        if interval != NO_INTERVAL && self.counting_intervals() {
            self.intervals.add(interval);
        }
    }

    /// [`record`](Detector::record) without touching the shared counters: batches count locally
    /// and add once, so a beat costs one locked instruction (the CAS), not two. With the beat's
    /// inter-arrival time, ns ([`NO_INTERVAL`] for a topic's first beat or one not recorded).
    #[inline]
    fn record_uncounted(&self, id: TopicId, now_abs: u64) -> (Beat, u64) {
        let Some(word) = self.registry.word(id) else {
            return (Beat::Unknown, NO_INTERVAL);
        };
        self.record_word(id, word, None, now_abs)
    }

    /// [`record`](Detector::record) by handle: [`Beat::Unknown`] for a handle whose id was
    /// reused by another topic since.
    #[inline]
    pub fn record_handle(&self, handle: Handle, now_abs: u64) -> Beat {
        let (result, interval) = self.record_handle_uncounted(handle, now_abs);
        self.count_interval(interval);
        let counter = match result {
            Beat::Recorded { .. } => &self.counters.beats,
            Beat::Unknown => &self.counters.unknown,
            Beat::Refused => &self.counters.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    #[inline]
    fn record_handle_uncounted(&self, handle: Handle, now_abs: u64) -> (Beat, u64) {
        let (id, want) = crate::registry::split_handle(handle);
        let Some(word) = self.registry.word(id) else {
            return (Beat::Unknown, NO_INTERVAL);
        };
        self.record_word(id, word, Some(want), now_abs)
    }

    /// The CAS of a beat. With `gen`, the id's generation is checked after each load of the
    /// word and before the CAS: a word read after the id was reused comes with the new
    /// generation (it is stored before the new word), and a word read before can no longer be
    /// there to be swapped, since a reused id's first word holds its new generation in place of
    /// a time, unlike any word of the previous topic (only a word heard at the very same
    /// nanosecond, with the same flags, could match).
    ///
    /// Also returns the beat's inter-arrival time (ns since the topic's previous beat, 0 for
    /// one stamped no later), [`NO_INTERVAL`] for its first beat or one not recorded.
    #[inline(always)]
    fn record_word(
        &self,
        id: TopicId,
        word: &AtomicU64,
        gen: Option<u32>,
        now_abs: u64,
    ) -> (Beat, u64) {
        let t = self.rel(now_abs);
        let mut w = word.load(Ordering::Acquire);
        loop {
            if gen.is_some_and(|want| self.registry.gen(id) != want) {
                return (Beat::Unknown, NO_INTERVAL);
            }
            let st = word::state(w);
            if matches!(st, State::Stopped | State::Removed) {
                return (Beat::Refused, NO_INTERVAL);
            }
            let new = word::after_beat(w, t);
            match word.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    if w & PHI != 0 && st == State::Alive && t > word::ts(w) {
                        // Only intervals between beats of a live topic teach the model what
                        // normal looks like (as Akka does): an outage is not a sample.
                        if let Some(p) = self.phi.lock().get_mut(&id) {
                            p.record_interval(t - word::ts(w));
                        }
                    }
                    let interval = if w & HEARD != 0 {
                        t.saturating_sub(word::ts(w))
                    } else {
                        NO_INTERVAL
                    };
                    let resume = matches!(st, State::Failed | State::PausedFailed);
                    return (Beat::Recorded { resume }, interval);
                }
                Err(actual) => w = actual,
            }
        }
    }

    /// Emit `resumed` for a FAILED topic that has been beaten ([`Beat::Recorded`] with
    /// `resume: true`); for one paused while FAILED, note the beat for `resume` to report.
    /// Takes the detector lock; may wait (with the lock released) for room in a full
    /// `block`-policy queue.
    pub fn settle(&self, id: TopicId) {
        self.emitting(|inner, subs| self.settle_locked(inner, subs, id));
    }

    fn settle_locked(&self, inner: &mut Inner, subscribers: &[Subscriber], id: TopicId) {
        if self.note_paused_recovery(inner, id) {
            return;
        }
        let now = inner.now;
        if self.take_fresh(inner, subscribers, id) {
            // Re-arm at the deadline the beat set: a beat stamped with an old explicit time
            // can make it earlier than the entry already on the wheel.
            self.arm(inner, id, now);
        }
    }

    /// Count `n` beats that named no topic (e.g. null names in an Arrow batch).
    pub fn count_unknown(&self, n: u64) {
        self.counters.unknown.fetch_add(n, Ordering::Relaxed);
    }

    /// Whether `received` events are wanted by any subscriber.
    #[inline]
    pub fn wants_received(&self) -> bool {
        self.received_wanted.load(Ordering::Relaxed) > 0
    }

    /// Emit a `received` event for a beat (to the subscribers that asked for them).
    pub fn emit_received(&self, id: TopicId, now_abs: u64, seq: u64, latency_ns: i64) {
        self.emitting(|inner, subs| {
            self.emit_received_locked(inner, subs, id, now_abs, seq, latency_ns)
        });
    }

    fn emit_received_locked(
        &self,
        inner: &mut Inner,
        subscribers: &[Subscriber],
        id: TopicId,
        now_abs: u64,
        seq: u64,
        latency_ns: i64,
    ) {
        if word::state(self.word(id).load(Ordering::Acquire)) == State::Removed {
            return; // removed since the beat: its queues must not see it again (see `remove`)
        }
        self.emit(
            inner,
            subscribers,
            Event::received(id, now_abs, seq, latency_ns),
        );
    }

    /// A full beat: record, emit `resumed` if it ends an outage, then `received` if wanted.
    pub fn beat(&self, id: TopicId, now: Option<u64>) -> Beat {
        self.beat_with(id, now, NO_SEQ, NO_LATENCY)
    }

    /// [`beat`](Detector::beat) with the sequence number and transit time a `received` event
    /// carries.
    pub fn beat_with(&self, id: TopicId, now: Option<u64>, seq: u64, latency_ns: i64) -> Beat {
        let now = now.unwrap_or_else(|| self.clock.now_ns());
        let handle = self.handle_of(id); // the topic the id names now, for `complete`
        let result = self.record(id, now);
        if self.needs_completion(result) {
            self.complete(handle, result, now, seq, latency_ns);
        }
        result
    }

    /// Whether [`complete`](Detector::complete) has work to do after [`record`](Detector::record).
    #[inline]
    pub fn needs_completion(&self, result: Beat) -> bool {
        matches!(result, Beat::Recorded { resume } if resume || self.wants_received())
    }

    /// The part of a beat that may take the detector lock (and wait, with the lock released,
    /// for room in a full `block` queue): emit `resumed` if the beat ended an outage, then
    /// `received` if wanted.
    ///
    /// Both under one hold of the detector lock, so nothing (a `failed` the driver counts
    /// from an old beat) can come between a beat's `resumed` and its `received`.
    ///
    /// `topic` is the handle of the beat's topic when the beat was recorded: if its id was
    /// removed and reused since, the beat owes the new topic nothing and nothing is emitted.
    pub fn complete(
        &self,
        topic: impl Into<Handle>,
        result: Beat,
        now_abs: u64,
        seq: u64,
        latency_ns: i64,
    ) {
        let Beat::Recorded { resume } = result else {
            return;
        };
        let received = self.wants_received();
        if !resume && !received {
            return;
        }
        let (id, gen) = crate::registry::split_handle(topic.into());
        self.emitting(|inner, subs| {
            if self.registry.gen(id) != gen {
                return; // reused (under this lock) since the beat: not this beat's topic
            }
            if resume {
                self.settle_locked(inner, subs, id);
            }
            if received {
                self.emit_received_locked(inner, subs, id, now_abs, seq, latency_ns);
            }
        });
    }

    /// A beat by name; an unknown name is added first when auto-add is on.
    pub fn beat_name(&self, name: &str, now: Option<u64>) -> Beat {
        let now = now.unwrap_or_else(|| self.clock.now_ns());
        let id = match self.lookup(name) {
            Some(id) => Some(id),
            None if self.auto_add() => self.add(name, None, Some(now)).ok(),
            None => None,
        };
        let Some(id) = id else {
            self.counters.unknown.fetch_add(1, Ordering::Relaxed);
            return Beat::Unknown;
        };
        self.beat_with(id, Some(now), NO_SEQ, NO_LATENCY)
    }

    /// Beats for many ids at one time; returns how many were recorded.
    pub fn beat_ids(&self, ids: &[TopicId], now: Option<u64>) -> usize {
        let batch = self.record_ids(ids.iter().copied(), now);
        self.finish(batch).0
    }

    /// Beats for many names at one time (one read lock for all lookups); returns
    /// `(recorded, unknown)`. Unknown names are added first when auto-add is on.
    pub fn beat_names<S: AsRef<str>>(
        &self,
        names: impl IntoIterator<Item = S>,
        now: Option<u64>,
    ) -> (usize, usize) {
        let batch = self.record_names(names, now);
        self.finish(batch)
    }

    /// The lock-free part of a batch of beats by id: never blocks, never emits.
    pub fn record_ids(&self, ids: impl IntoIterator<Item = TopicId>, now: Option<u64>) -> Batch {
        const CHUNK: usize = crate::registry::LOOKUP_CHUNK;
        let mut batch = Batch::new(
            now.unwrap_or_else(|| self.clock.now_ns()),
            self.counting_intervals(),
        );
        let want_received = self.wants_received();
        let mut ids = ids.into_iter();
        let mut chunk = [None; CHUNK];
        loop {
            let mut n = 0;
            for (slot, id) in chunk.iter_mut().zip(ids.by_ref()) {
                *slot = Some(id);
                n += 1;
            }
            self.read_ahead(&chunk[..n]); // see `record_names`
            for &id in chunk[..n].iter().flatten() {
                // An id names whatever topic holds it now.
                let handle = || make_handle(id, self.registry.gen(id));
                batch.take(handle, self.record_uncounted(id, batch.now), want_received);
            }
            if n < CHUNK {
                break;
            }
        }
        self.count_batch(&batch);
        batch
    }

    /// [`record_ids`](Detector::record_ids) by handle: a handle whose id was reused since
    /// counts as unknown.
    pub fn record_handles(
        &self,
        handles: impl IntoIterator<Item = Handle>,
        now: Option<u64>,
    ) -> Batch {
        const CHUNK: usize = crate::registry::LOOKUP_CHUNK;
        let mut batch = Batch::new(
            now.unwrap_or_else(|| self.clock.now_ns()),
            self.counting_intervals(),
        );
        let want_received = self.wants_received();
        let mut handles = handles.into_iter();
        let mut chunk = [0; CHUNK];
        let mut ids = [None; CHUNK];
        loop {
            let mut n = 0;
            for ((slot, id), handle) in chunk.iter_mut().zip(&mut ids).zip(handles.by_ref()) {
                *slot = handle;
                *id = Some(crate::registry::split_handle(handle).0);
                n += 1;
            }
            self.read_ahead(&ids[..n]); // see `record_names`
            for &handle in &chunk[..n] {
                let recorded = self.record_handle_uncounted(handle, batch.now);
                batch.take(|| handle, recorded, want_received);
            }
            if n < CHUNK {
                break;
            }
        }
        self.count_batch(&batch);
        batch
    }

    /// The lock-free part of a batch of beats by name looked up beforehand (with
    /// [`with_lookup`](Detector::with_lookup)): `handles` of the names found (one whose id was
    /// reused since counts as unknown, one removed since as refused), `unknown` names not
    /// found, counted, and `missing` ones kept for [`finish`](Detector::finish) to add (pass
    /// them only when auto-add is on).
    pub fn record_found(
        &self,
        handles: &[Handle],
        unknown: usize,
        missing: Vec<String>,
        now: Option<u64>,
    ) -> Batch {
        let mut batch = self.record_handles(handles.iter().copied(), now);
        if unknown > 0 {
            batch.unknown += unknown;
            self.counters
                .unknown
                .fetch_add(unknown as u64, Ordering::Relaxed);
        }
        batch.missing = missing;
        batch
    }

    /// [`beat_with`](Detector::beat_with) by handle.
    pub fn beat_handle(&self, handle: Handle, now: Option<u64>, seq: u64, latency_ns: i64) -> Beat {
        let now = now.unwrap_or_else(|| self.clock.now_ns());
        let result = self.record_handle(handle, now);
        if self.needs_completion(result) {
            self.complete(handle, result, now, seq, latency_ns);
        }
        result
    }

    /// The lock-free part of a batch of beats by name: never blocks, never emits. Unknown names
    /// are counted, or kept for [`finish`](Detector::finish) to add when auto-add is on.
    ///
    /// Names are taken a chunk at a time: all of a chunk's lookups first
    /// ([`Lookup::find_many`](crate::registry::Lookup::find_many), which overlaps their cache
    /// misses), then a plain read of each found topic's word, then the CASes. A CAS (a locked
    /// instruction, a full barrier on x86) waits for every load before it, so interleaving each
    /// lookup or word miss with a CAS would make each wait for the one before.
    pub fn record_names<S: AsRef<str>>(
        &self,
        names: impl IntoIterator<Item = S>,
        now: Option<u64>,
    ) -> Batch {
        const CHUNK: usize = crate::registry::LOOKUP_CHUNK;
        let mut batch = Batch::new(
            now.unwrap_or_else(|| self.clock.now_ns()),
            self.counting_intervals(),
        );
        let want_received = self.wants_received();
        let auto_add = self.auto_add();
        let mut names = names.into_iter();
        let mut held: Vec<S> = Vec::with_capacity(CHUNK);
        let mut ids = [None; CHUNK];
        self.registry.with_lookup(|lookup| loop {
            held.clear();
            held.extend(names.by_ref().take(CHUNK));
            let n = held.len();
            let mut strs = [""; CHUNK];
            for (s, name) in strs.iter_mut().zip(&held) {
                *s = name.as_ref();
            }
            lookup.find_many(&strs[..n], &mut ids[..n]);
            for (name, id) in strs[..n].iter().zip(&ids[..n]) {
                if id.is_none() {
                    if auto_add {
                        batch.missing.push((*name).to_owned());
                    } else {
                        batch.unknown += 1;
                    }
                }
            }
            self.read_ahead(&ids[..n]);
            for &id in ids[..n].iter().flatten() {
                // Under the name index's read lock, which an id's reuse needs: the id's
                // generation read here is the one the name had.
                let handle = || make_handle(id, self.registry.gen(id));
                batch.take(handle, self.record_uncounted(id, batch.now), want_received);
            }
            if n < CHUNK {
                break;
            }
        });
        self.count_batch(&batch);
        batch
    }

    /// Read the words of `ids` (a chunk) before any of them is CASed, so that their cache
    /// misses overlap (see [`record_names`](Detector::record_names)).
    #[inline]
    fn read_ahead(&self, ids: &[Option<TopicId>]) {
        let mut ahead = [0u64; crate::registry::LOOKUP_CHUNK];
        for (a, id) in ahead.iter_mut().zip(ids) {
            if let Some(word) = id.and_then(|id| self.registry.word(id)) {
                *a = word.load(Ordering::Relaxed);
            }
        }
        // Keep the reads: their values feed nothing else.
        std::hint::black_box(&ahead);
    }

    /// Add a batch's lock-free outcome to the shared counters, once. Unknown names kept for
    /// auto-add are counted by [`finish`](Detector::finish) if adding them fails.
    fn count_batch(&self, batch: &Batch) {
        if let Some(tally) = &batch.intervals {
            self.intervals.add_local(tally);
        }
        let c = &self.counters;
        for (counter, n) in [
            (&c.beats, batch.recorded),
            (&c.unknown, batch.unknown),
            (&c.refused, batch.refused),
        ] {
            if n > 0 {
                counter.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }

    /// Finish a batch: emit what its beats owe (`resumed`, `received`) and add and beat its
    /// unknown names when auto-add is on. May take the detector lock. Returns
    /// `(recorded, unknown)`.
    pub fn finish(&self, mut batch: Batch) -> (usize, usize) {
        for &(handle, resume) in &batch.follow {
            self.complete(
                handle,
                Beat::Recorded { resume },
                batch.now,
                NO_SEQ,
                NO_LATENCY,
            );
        }
        for name in std::mem::take(&mut batch.missing) {
            match self.add_handle(&name, None, Some(batch.now)) {
                Ok(handle) => {
                    let id = crate::registry::split_handle(handle).0;
                    let result = self.record(id, batch.now);
                    if let Beat::Recorded { .. } = result {
                        batch.recorded += 1;
                        self.complete(handle, result, batch.now, NO_SEQ, NO_LATENCY);
                    }
                }
                Err(_) => {
                    batch.unknown += 1;
                    self.counters.unknown.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        (batch.recorded, batch.unknown)
    }
}
