//! Adding, configuring, pausing, resuming, removing topics; stopping and starting.

use super::*;

/// A paused topic's `next_deadline` when it was not FAILED when paused, or was and has not
/// been heard since.
pub(super) const NOT_HEARD: u64 = u64::MAX;

impl Detector {
    /// Expect `name` from `now` on: it must be heard within its first period (plus grace, or
    /// the phi suspicion time); a beat stamped before `now` is old news. Returns its id; a
    /// name already known keeps its id and gets `config` if one is given.
    pub fn add(
        &self,
        name: &str,
        config: Option<TopicConfig>,
        now: Option<u64>,
    ) -> Result<TopicId, DetectorError> {
        if let Some(c) = &config {
            c.validate()?;
        }
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        self.add_locked(&mut inner, name, config, now)
    }

    pub(super) fn add_locked(
        &self,
        inner: &mut Inner,
        name: &str,
        config: Option<TopicConfig>,
        now: u64,
    ) -> Result<TopicId, DetectorError> {
        let state = if inner.running {
            State::Pending
        } else {
            State::Stopped
        };
        // Names are only registered under the detector lock, so this lookup stays true.
        if let Some(id) = self.registry.lookup(name) {
            if let Some(config) = config.filter(|c| *c != self.config_of(inner, id)) {
                let now = now.max(inner.now); // a known topic: never re-armed in the past
                self.configure(inner, id, config, now);
            }
            return Ok(id);
        }
        let reuse = self.reclaim(inner);
        // A never-heard word's timestamp bits hold the generation, so that a reused id's new
        // word never equals a word its previous topic had (see `record_handle`).
        let initial = |gen: u32| word::new(state) | (u64::from(gen) << word::TS_SHIFT);
        let (id, _) = match self.registry.intern(name, reuse, initial) {
            Ok(done) => done,
            Err(e) => {
                inner.free.extend(reuse);
                return Err(e.into());
            }
        };
        if reuse.is_some() {
            self.forget_reasons(id); // events naming the old topic are all handed back
        }
        let config = config.unwrap_or(self.defaults);
        let slot = Slot {
            period_ns: config.period_ns,
            grace_ns: config.grace_ns,
            next_deadline: 0,
            since: 0,
            known_until: now.saturating_sub(1), // a beat stamped before it was expected: old news
            missed: 0,
            allowed: config.allowed_misses,
        };
        if (id as usize) < inner.slots.len() {
            inner.slots[id as usize] = slot;
        } else {
            inner.slots.push(slot);
            let keys = inner.slots.len();
            inner.wheel.reserve_keys(keys);
        }
        self.configure(inner, id, config, now);
        self.policy_learn(inner, id, name);
        Ok(id)
    }

    /// [`add`](Detector::add), returning the topic's handle (its id with the id's generation).
    pub fn add_handle(
        &self,
        name: &str,
        config: Option<TopicConfig>,
        now: Option<u64>,
    ) -> Result<Handle, DetectorError> {
        if let Some(c) = &config {
            c.validate()?;
        }
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        let id = self.add_locked(&mut inner, name, config, now)?;
        Ok(self.handle_of(id)) // under the lock: no remove and reuse in between
    }

    /// An id for a new topic: a free one, after moving to the free list the removed ids whose
    /// queues have drained; None for a new id.
    fn reclaim(&self, inner: &mut Inner) -> Option<TopicId> {
        if inner.free.is_empty() {
            let delivered = self.delivered.load(Ordering::Acquire);
            while let Some(front) = inner.limbo.front() {
                let (id, after) = (front.id, front.after);
                let marks = match &front.marks {
                    Some(marks) => marks.clone(),
                    None if delivered >= after => {
                        // Its last events are pushed now: mark the queues after them.
                        let marks: Arc<[QueueMark]> = self.queue_marks(inner).into();
                        inner.limbo[0].marks = Some(marks.clone());
                        marks
                    }
                    None => break,
                };
                let drained = marks
                    .iter()
                    .all(|(queue, mark)| queue.upgrade().is_none_or(|q| q.drained_since(*mark)));
                if !drained {
                    break;
                }
                inner.free.push(id);
                inner.limbo.pop_front();
            }
        }
        inner.free.pop()
    }

    /// A mark ([`EventQueue::mark`]) of every queue that may hold an event pushed so far: the
    /// subscribed ones and those unsubscribed but not found empty yet.
    fn queue_marks(&self, inner: &mut Inner) -> Vec<QueueMark> {
        inner
            .retired
            .retain(|q| q.upgrade().is_some_and(|q| q.mark().is_some()));
        let retired = inner.retired.iter().filter_map(Weak::upgrade);
        let subscribers = self.subscribers.read();
        let queues = subscribers.iter().map(|s| s.queue.clone()).chain(retired);
        queues
            .filter_map(|q| Some((Arc::downgrade(&q), q.mark()?)))
            .collect()
    }

    /// The handle of `id` now.
    pub fn handle_of(&self, id: TopicId) -> Handle {
        self.registry
            .handle(id)
            .unwrap_or_else(|| make_handle(id, 0))
    }

    /// The id `handle` names, if it still does (its topic may be removed, not yet reused).
    pub fn resolve(&self, handle: Handle) -> Option<TopicId> {
        self.registry.resolve(handle)
    }

    /// The handles of every topic not removed, in id order.
    pub fn handles(&self) -> Vec<Handle> {
        let inner = self.inner.lock();
        (0..inner.slots.len() as TopicId)
            .filter(|&id| word::state(self.word(id).load(Ordering::Acquire)) != State::Removed)
            .map(|id| self.handle_of(id))
            .collect()
    }

    /// Register many names with the same config at the same time; returns their ids in order.
    pub fn add_many<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        config: Option<TopicConfig>,
        now: Option<u64>,
    ) -> Result<Vec<TopicId>, DetectorError> {
        let now = Some(self.abs(self.rel_now(now)));
        names
            .into_iter()
            .map(|name| self.add(name, config, now))
            .collect()
    }

    /// [`add_many`](Detector::add_many), returning handles.
    pub fn add_many_handles<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        config: Option<TopicConfig>,
        now: Option<u64>,
    ) -> Result<Vec<Handle>, DetectorError> {
        let now = Some(self.abs(self.rel_now(now)));
        names
            .into_iter()
            .map(|name| self.add_handle(name, config, now))
            .collect()
    }

    /// Reserve room for `additional` topics with names of about `avg_name_len` bytes.
    pub fn reserve(&self, additional: usize, avg_name_len: usize) {
        self.registry.reserve(additional, avg_name_len);
        let mut inner = self.inner.lock();
        inner.slots.reserve(additional);
        let want = inner.slots.len() + additional;
        inner.wheel.reserve_keys(want);
    }

    /// Run `f` with lookups under one read lock of the name index (no topic can be added or
    /// removed meanwhile): the batch form of [`lookup_handle`](Detector::lookup_handle). `f`
    /// must not call back into anything that adds or removes topics (it would wait for
    /// itself), nor wait on another thread that might.
    pub fn with_lookup<R>(&self, f: impl FnOnce(&crate::registry::Lookup<'_>) -> R) -> R {
        self.registry.with_lookup(f)
    }

    /// The id of `name`.
    #[inline]
    pub fn lookup(&self, name: &str) -> Option<TopicId> {
        self.registry.lookup(name)
    }

    /// The handle of `name` (its id and the id's generation, read together).
    #[inline]
    pub fn lookup_handle(&self, name: &str) -> Option<Handle> {
        self.registry.lookup_handle(name)
    }

    /// The name of the topic `handle` names (also of a removed one, until its id is reused);
    /// None for a handle that names no topic any more, or never did.
    pub fn name(&self, handle: impl Into<Handle>) -> Option<String> {
        let id = self.registry.resolve(handle.into())?;
        Some(self.registry.name(id))
    }

    /// Run `f` with a name resolver under one lock (for turning many events into names).
    pub fn with_names<R>(&self, f: impl FnOnce(&NameView<'_>) -> R) -> R {
        self.registry.with_names(f)
    }

    /// Topics watched: added and not removed (in any state).
    pub fn len(&self) -> usize {
        self.registry.live()
    }

    /// Whether no topic is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn config_of(&self, inner: &Inner, id: TopicId) -> TopicConfig {
        let slot = &inner.slots[id as usize];
        TopicConfig {
            period_ns: slot.period_ns,
            allowed_misses: slot.allowed,
            grace_ns: slot.grace_ns,
            phi: self.phi.lock().get(&id).map(|p| *p.config()),
        }
    }

    /// Apply `config` to a topic; a watched topic's next deadline becomes one (new) first
    /// offset from `now`, keeping its missed count.
    pub(super) fn configure(&self, inner: &mut Inner, id: TopicId, config: TopicConfig, now: u64) {
        let slot = &mut inner.slots[id as usize];
        slot.period_ns = config.period_ns;
        slot.grace_ns = config.grace_ns;
        slot.allowed = config.allowed_misses;
        let word = self.word(id);
        {
            let mut phi = self.phi.lock();
            match config.phi {
                Some(cfg) => {
                    let keep = phi.get(&id).is_some_and(|p| *p.config() == cfg);
                    if !keep {
                        phi.insert(id, PhiState::new(cfg, config.period_ns));
                    }
                    word.fetch_or(PHI, Ordering::AcqRel);
                }
                None => {
                    phi.remove(&id);
                    word.fetch_and(!PHI, Ordering::AcqRel);
                }
            }
        }
        if word::state(word.load(Ordering::Acquire)).is_watched() {
            let first = self.first_offset(inner, id);
            let slot = &mut inner.slots[id as usize];
            // Never at or before a deadline already counted (an old explicit `now`).
            let base = if slot.missed > 0 {
                now.max(slot.known_until)
            } else {
                now
            };
            slot.next_deadline = base.saturating_add(first);
            self.arm(inner, id, now);
        }
    }

    /// Change a topic's period from `now` on.
    pub fn set_period(
        &self,
        topic: impl Into<Handle>,
        period_ns: u64,
        now: Option<u64>,
    ) -> Result<(), DetectorError> {
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        let id = self.check_id(&inner, topic.into())?;
        let config = TopicConfig {
            period_ns,
            ..self.config_of(&inner, id)
        };
        config.validate()?;
        let now = now.max(inner.now); // never re-armed before the last run
        self.configure(&mut inner, id, config, now);
        Ok(())
    }

    /// Change a topic's whole config from `now` on.
    pub fn set_config(
        &self,
        topic: impl Into<Handle>,
        config: TopicConfig,
        now: Option<u64>,
    ) -> Result<(), DetectorError> {
        config.validate()?;
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        let id = self.check_id(&inner, topic.into())?;
        let now = now.max(inner.now); // never re-armed before the last run
        self.configure(&mut inner, id, config, now);
        Ok(())
    }

    /// A topic's config.
    pub fn config(&self, topic: impl Into<Handle>) -> Result<TopicConfig, DetectorError> {
        let inner = self.inner.lock();
        let id = self.check_id(&inner, topic.into())?;
        Ok(self.config_of(&inner, id))
    }

    /// The id of a topic not removed that `handle` names. Under the detector lock, so the id
    /// cannot be removed and reused before the caller is done with it.
    pub(super) fn check_id(&self, inner: &Inner, handle: Handle) -> Result<TopicId, DetectorError> {
        match self.registry.resolve(handle) {
            Some(id)
                if (id as usize) < inner.slots.len()
                    && word::state(self.word(id).load(Ordering::Acquire)) != State::Removed =>
            {
                Ok(id)
            }
            _ => Err(DetectorError::Unknown(format!("handle {handle}"))),
        }
    }

    #[inline]
    pub(super) fn word(&self, id: TopicId) -> &AtomicU64 {
        self.registry
            .word(id)
            .expect("slot ids are registry ids, registered first")
    }

    /// Move a topic's word to `to` unless it is in a state `from` rejects; returns the state it
    /// left. FRESH is cleared: whatever comes next starts from a clean slate.
    pub(super) fn transition(
        &self,
        id: TopicId,
        to: State,
        from: impl Fn(State) -> bool,
    ) -> Option<State> {
        let word = self.word(id);
        let mut w = word.load(Ordering::Acquire);
        loop {
            let st = word::state(w);
            if !from(st) {
                return None;
            }
            let new = word::with_state(w & !FRESH, to);
            match word.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(st),
                Err(actual) => w = actual,
            }
        }
    }

    /// Stop watching a topic until [`resume`](Detector::resume); beats still update its
    /// last_seen. A FAILED topic keeps its count and `since` for `resume`, and its first beat
    /// while paused is noted (see [`resume`](Detector::resume)).
    ///
    /// A FAILED topic paused no longer marks its dependents: those still down and never
    /// alerted get their `failed` now (`policy.rs`). This never waits for room in a `block`
    /// queue: with one subscribed, they are pushed by the driver's next run (see
    /// [`leave_for_the_driver`](Detector::leave_for_the_driver)).
    pub fn pause(&self, topic: impl Into<Handle>) -> Result<bool, DetectorError> {
        let mut inner = self.inner.lock();
        let result = self.pause_locked(&mut inner, topic.into());
        self.leave_for_the_driver(&mut inner);
        result
    }

    /// Events emitted by a call that must not wait for room in a `block` queue (`pause`,
    /// `remove`: their callers hold locks that a queue's consumer may need, e.g. the intake's
    /// table or a monitor's lock) are put aside, unless pushed at once (no `block` queue
    /// subscribed). The caller pushes them with [`push_unpushed`](Detector::push_unpushed)
    /// once its locks are let go; failing that, the driver's next run, [`stop`] or a later
    /// call's push does (each pushes the outbox in order up to its own events, so past these).
    ///
    /// [`stop`]: Detector::stop
    fn leave_for_the_driver(&self, inner: &mut Inner) {
        let upto = self.commit(inner);
        inner.unpushed = inner.unpushed.max(upto);
    }

    /// Push what [`pause`](Detector::pause) and [`remove`](Detector::remove) put aside (and
    /// what was put aside before it), at once if nothing is left. It may wait for room in a
    /// full `block` queue: call it holding no lock that a queue's consumer may need, and never
    /// from the consumer of such a queue (it would wait for itself).
    pub fn push_unpushed(&self) {
        let upto = self.inner.lock().unpushed;
        self.deliver(upto);
    }

    fn pause_locked(&self, inner: &mut Inner, topic: Handle) -> Result<bool, DetectorError> {
        let id = self.check_id(inner, topic)?;
        let word = self.word(id);
        let mut w = word.load(Ordering::Acquire);
        let was_failed = loop {
            let st = word::state(w);
            if !st.is_watched() {
                return Ok(false);
            }
            // A FAILED topic keeps FRESH: a beat whose `resumed` was not emitted yet is the
            // first one after the failure, and `resume` reports it.
            let new = if st == State::Failed {
                word::with_state(w, State::PausedFailed)
            } else {
                word::with_state(w & !FRESH, State::Paused)
            };
            match word.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break st == State::Failed,
                Err(actual) => w = actual,
            }
        };
        inner.wheel.cancel(id);
        inner.slots[id as usize].next_deadline = NOT_HEARD;
        if was_failed && !inner.policy.is_idle() {
            let subs = self.subscribers.read();
            self.policy_paused_failed(inner, &subs, id);
        }
        Ok(true)
    }

    /// Watch a paused topic again from `now`. Returns false if it was not paused.
    ///
    /// - Not FAILED when paused: ALIVE (or PENDING if never heard), due one period (plus
    ///   grace) after `now`.
    /// - FAILED when paused and heard while paused: `resumed(missed, downtime)` is emitted now,
    ///   with `at` = the first beat the detector took in after the failure and `downtime` = that
    ///   beat's time minus `since`; then as above.
    /// - FAILED when paused and not heard: FAILED again, count and `since` kept; it counts on
    ///   from `now`, the next `failed(missed + 1)` one period after it (as after a local pause).
    ///
    /// A beat stamped before `now` but recorded after the resume is old news: it neither ends
    /// the outage nor moves the next deadline back into the time paused.
    pub fn resume(
        &self,
        topic: impl Into<Handle>,
        now: Option<u64>,
    ) -> Result<bool, DetectorError> {
        let now = self.rel_now(now);
        let topic = topic.into();
        self.emitting(|inner, subs| self.resume_locked(inner, subs, topic, now))
    }

    fn resume_locked(
        &self,
        inner: &mut Inner,
        subs: &[Subscriber],
        topic: Handle,
        now: u64,
    ) -> Result<bool, DetectorError> {
        let id = self.check_id(inner, topic)?;
        let now = now.max(inner.now); // the time paused ends here, not earlier
        let word = self.word(id);
        let mut w = word.load(Ordering::Acquire);
        let known_until = inner.slots[id as usize].known_until;
        let back_at = loop {
            match word::state(w) {
                State::Paused => break inner.slots[id as usize].next_deadline,
                State::PausedFailed if w & FRESH != 0 && word::ts(w) > known_until => {
                    break word::ts(w)
                }
                State::PausedFailed => {
                    // Not heard since the failure, or only a beat older than its latest missed
                    // deadline (old news, as in `take_fresh`).
                    let failed = word::with_state(w & !FRESH, State::Failed);
                    match word.compare_exchange(w, failed, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => {}
                        Err(actual) => {
                            w = actual; // a beat landed: it recovered after all
                            continue;
                        }
                    }
                    let step = self.step(inner, id);
                    let base = now.max(known_until); // never at or before a counted deadline
                    inner.slots[id as usize].next_deadline = base.saturating_add(step);
                    Self::watched_from(inner, id, now);
                    self.arm(inner, id, now);
                    return Ok(true);
                }
                _ => return Ok(false),
            }
        };
        if back_at != NOT_HEARD {
            let slot = inner.slots[id as usize];
            let ev = Event::resumed(
                id,
                slot.missed,
                self.abs(back_at),
                self.abs(back_at).saturating_sub(slot.since),
            );
            self.emit(inner, subs, ev);
            Self::clear_down(inner, id);
        }
        let resumed = self.rearm_from(inner, id, State::is_paused, now);
        if resumed {
            Self::watched_from(inner, id, now);
        }
        Ok(resumed)
    }

    /// A topic is watched again from `now` (added, resumed, restarted): a beat stamped before,
    /// recorded later, is old news (see [`Slot::known_until`]).
    pub(super) fn watched_from(inner: &mut Inner, id: TopicId, now: u64) {
        let slot = &mut inner.slots[id as usize];
        slot.known_until = slot.known_until.max(now.saturating_sub(1));
    }

    /// For a topic paused while FAILED whose first beat since just landed: note the beat's time
    /// for `resume` and make it a plain PAUSED topic (later beats take no lock); a beat older
    /// than the latest missed deadline is only taken in. Returns false if the topic is not in
    /// that case.
    pub(super) fn note_paused_recovery(&self, inner: &mut Inner, id: TopicId) -> bool {
        let word = self.word(id);
        let known_until = inner.slots[id as usize].known_until;
        let mut w = word.load(Ordering::Acquire);
        loop {
            if word::state(w) != State::PausedFailed || w & FRESH == 0 {
                return false;
            }
            if word::ts(w) <= known_until {
                // Old news (see `take_fresh`): still not heard since the failure.
                match word.compare_exchange_weak(w, w & !FRESH, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return true,
                    Err(actual) => {
                        w = actual;
                        continue;
                    }
                }
            }
            let new = word::with_state(w & !FRESH, State::Paused);
            match word.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        inner.slots[id as usize].next_deadline = word::ts(w);
        true
    }

    /// Move a topic out of a state `from` accepts into ALIVE (heard before) or PENDING, with no
    /// missed periods, and arm it from `now`.
    pub(super) fn rearm_from(
        &self,
        inner: &mut Inner,
        id: TopicId,
        from: impl Fn(State) -> bool,
        now: u64,
    ) -> bool {
        let heard = self.word(id).load(Ordering::Acquire) & HEARD != 0;
        let to = if heard { State::Alive } else { State::Pending };
        if self.transition(id, to, from).is_none() {
            return false;
        }
        let first = self.first_offset(inner, id);
        Self::clear_down(inner, id);
        let slot = &mut inner.slots[id as usize];
        slot.missed = 0;
        slot.next_deadline = now.saturating_add(first);
        self.arm(inner, id, now);
        true
    }

    /// Forget a topic: no more events, its name is free for a new topic, and its handle names
    /// no topic any more once its id is reused.
    ///
    /// The id is reused (with a new generation) once no event naming it can be waiting: its
    /// events put aside for pushing (see `emit.rs`) are pushed, and then each queue has been
    /// found empty by a pop started after that, the events of that pop handed back
    /// ([`EventQueue::release_popped`]). Until then the id's name stays readable for those
    /// events. A subscriber that never empties its queue keeps removed ids from being reused.
    ///
    /// A FAILED topic removed no longer marks its dependents: those still down and never
    /// alerted get their `failed` now (`policy.rs`), pushed as by [`pause`](Detector::pause).
    pub fn remove(&self, topic: impl Into<Handle>) -> Result<(), DetectorError> {
        let mut inner = self.inner.lock();
        let result = self.remove_locked(&mut inner, topic.into());
        self.leave_for_the_driver(&mut inner);
        result
    }

    fn remove_locked(&self, inner: &mut Inner, topic: Handle) -> Result<(), DetectorError> {
        let id = self.check_id(inner, topic)?;
        let was = self.transition(id, State::Removed, |s| s != State::Removed);
        if !inner.policy.is_idle() {
            let name = self.registry.name(id);
            let subs = self.subscribers.read(); // released before `queue_marks` reads it again
            self.policy_removed(inner, &subs, id, &name, was == Some(State::Failed));
        }
        inner.wheel.cancel(id);
        inner.held.remove(&id);
        Self::clear_down(inner, id);
        self.phi.lock().remove(&id);
        self.registry.unindex(id);
        // Every event for the topic was emitted under this lock; those put aside (up to
        // `after`) must be pushed before the queues are marked.
        let after = inner.appended;
        if self.delivered.load(Ordering::Acquire) < after {
            inner.limbo.push_back(Limbo {
                id,
                after,
                marks: None,
            });
            return Ok(());
        }
        let marks = self.queue_marks(inner);
        if marks.is_empty() {
            inner.free.push(id); // no event for it can be waiting anywhere
            return Ok(());
        }
        let same = inner
            .limbo
            .back()
            .and_then(|last| last.marks.as_ref())
            .filter(|last| {
                last.len() == marks.len()
                    && last
                        .iter()
                        .zip(&marks)
                        .all(|(a, b)| a.1 == b.1 && Weak::ptr_eq(&a.0, &b.0))
            });
        let marks = match same {
            Some(last) => last.clone(),
            None => marks.into(),
        };
        inner.limbo.push_back(Limbo {
            id,
            after,
            marks: Some(marks),
        });
        Ok(())
    }

    /// Stop watching every topic: all go STOPPED and beats are refused until [`start`]. What
    /// each topic was is kept for `start`: a beat already recorded is taken in first (a FAILED
    /// topic's `resumed` is emitted now), then a FAILED or paused topic's state is remembered.
    ///
    /// Returns once every event emitted before it is pushed, also those a `pause` or `remove`
    /// put aside without pushing them (no driver run would push them while stopped).
    ///
    /// [`start`]: Detector::start
    pub fn stop(&self) {
        let upto = {
            let mut inner = self.inner.lock();
            let subscribers = self.subscribers.read();
            self.stop_locked(&mut inner, &subscribers);
            drop(subscribers);
            self.commit(&mut inner).max(inner.unpushed)
        };
        self.deliver(upto);
    }

    fn stop_locked(&self, inner: &mut Inner, subscribers: &[Subscriber]) {
        // Stopping ends an ingest-lag episode (deadlines are not judged while stopped).
        let now = inner.now.max(self.rel_now(None));
        self.end_lag(inner, subscribers, now);
        inner.running = false;
        for id in 0..inner.slots.len() as TopicId {
            let word = self.word(id);
            loop {
                let w = word.load(Ordering::Acquire);
                let st = word::state(w);
                if !(st.is_watched() || st.is_paused()) {
                    break;
                }
                if w & FRESH != 0 && st.is_watched() {
                    self.take_fresh(inner, subscribers, id);
                    continue;
                }
                if w & FRESH != 0 && st == State::PausedFailed {
                    self.note_paused_recovery(inner, id);
                    continue;
                }
                let stopped = word::with_state(w & !FRESH, State::Stopped);
                if word
                    .compare_exchange(w, stopped, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    inner.wheel.cancel(id);
                    if matches!(st, State::Failed | State::Paused | State::PausedFailed) {
                        inner.held.insert(id, st);
                    }
                    break;
                }
            }
        }
    }

    /// Watch every stopped topic again from `now`, as it was when stopped: a FAILED topic stays
    /// FAILED with its count and `since` until a beat is heard, a paused one stays paused, the
    /// others are ALIVE (heard) or PENDING. The time stopped is not counted: a topic with no
    /// missed period is due one period (plus grace) after `now`, one that has missed some counts
    /// on, its next missed period one period after `now` (as after a local pause).
    ///
    /// A beat stamped before the restart (an explicit old `now`, recorded after it) is old
    /// news: it neither ends a held outage nor moves a deadline back into the time stopped.
    pub fn start(&self, now: Option<u64>) {
        let mut inner = self.inner.lock();
        inner.running = true;
        // The time stopped ends here, not earlier: an old explicit `now` counts as the latest
        // time the detector was moved to.
        let now = inner.now.max(self.rel_now(now));
        inner.now = now;
        let held = std::mem::take(&mut inner.held);
        for id in 0..inner.slots.len() as TopicId {
            let w = self.word(id).load(Ordering::Acquire);
            if word::state(w) != State::Stopped {
                continue;
            }
            let to = match held.get(&id) {
                Some(&st) => st,
                None if w & HEARD != 0 => State::Alive,
                None => State::Pending,
            };
            // A beat stamped before the restart, while it was not watched, is old news.
            Self::watched_from(&mut inner, id, now);
            if self.transition(id, to, |s| s == State::Stopped).is_none() || !to.is_watched() {
                continue;
            }
            let slot = inner.slots[id as usize];
            let (base, offset) = if slot.missed == 0 {
                (now, self.first_offset(&inner, id))
            } else {
                // Never at or before a deadline already counted (an old explicit `now`).
                (now.max(slot.known_until), self.step(&inner, id))
            };
            inner.slots[id as usize].next_deadline = base.saturating_add(offset);
            self.arm(&mut inner, id, now);
        }
    }

    /// Whether the detector is started.
    pub fn is_running(&self) -> bool {
        self.inner.lock().running
    }
}
