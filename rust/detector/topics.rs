//! Adding, configuring, pausing, resuming, removing topics; stopping and starting.

use super::*;

/// A paused topic's `next_deadline` when it was not FAILED when paused, or was and has not
/// been heard since.
pub(super) const NOT_HEARD: u64 = u64::MAX;

impl Detector {
    /// Expect `name` from `now` on: it must be heard within its first period (plus grace, or
    /// the phi suspicion time). Returns its id; a
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
        let initial = word::new(if inner.running {
            State::Pending
        } else {
            State::Stopped
        });
        let (id, created) = self.registry.intern(name, initial)?;
        if created {
            let config = config.unwrap_or(self.defaults);
            inner.slots.push(Slot {
                period_ns: config.period_ns,
                grace_ns: config.grace_ns,
                next_deadline: 0,
                since: 0,
                missed_at: 0,
                missed: 0,
                allowed: config.allowed_misses,
            });
            let keys = inner.slots.len();
            inner.wheel.reserve_keys(keys);
            self.configure(&mut inner, id, config, now);
        } else if let Some(config) = config.filter(|c| *c != self.config_of(&inner, id)) {
            self.configure(&mut inner, id, config, now);
        }
        Ok(id)
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

    /// Reserve room for `additional` topics with names of about `avg_name_len` bytes.
    pub fn reserve(&self, additional: usize, avg_name_len: usize) {
        self.registry.reserve(additional, avg_name_len);
        let mut inner = self.inner.lock();
        inner.slots.reserve(additional);
        let want = inner.slots.len() + additional;
        inner.wheel.reserve_keys(want);
    }

    /// The id of `name`.
    #[inline]
    pub fn lookup(&self, name: &str) -> Option<TopicId> {
        self.registry.lookup(name)
    }

    /// The name of `id` (also of a removed one); None for an id never handed out.
    pub fn name(&self, id: TopicId) -> Option<String> {
        ((id as usize) < self.registry.len()).then(|| self.registry.name(id))
    }

    /// Run `f` with a name resolver under one lock (for turning many events into names).
    pub fn with_names<R>(&self, f: impl FnOnce(&NameView<'_>) -> R) -> R {
        self.registry.with_names(f)
    }

    /// Ids handed out so far (removed ones included).
    pub fn len(&self) -> usize {
        self.registry.len()
    }

    /// Whether no topic was ever added.
    pub fn is_empty(&self) -> bool {
        self.registry.is_empty()
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
                now.max(slot.missed_at)
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
        id: TopicId,
        period_ns: u64,
        now: Option<u64>,
    ) -> Result<(), DetectorError> {
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        self.check_id(&inner, id)?;
        let config = TopicConfig {
            period_ns,
            ..self.config_of(&inner, id)
        };
        config.validate()?;
        self.configure(&mut inner, id, config, now);
        Ok(())
    }

    /// Change a topic's whole config from `now` on.
    pub fn set_config(
        &self,
        id: TopicId,
        config: TopicConfig,
        now: Option<u64>,
    ) -> Result<(), DetectorError> {
        config.validate()?;
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        self.check_id(&inner, id)?;
        self.configure(&mut inner, id, config, now);
        Ok(())
    }

    /// A topic's config.
    pub fn config(&self, id: TopicId) -> Result<TopicConfig, DetectorError> {
        let inner = self.inner.lock();
        self.check_id(&inner, id)?;
        Ok(self.config_of(&inner, id))
    }

    pub(super) fn check_id(&self, inner: &Inner, id: TopicId) -> Result<(), DetectorError> {
        let known = (id as usize) < inner.slots.len()
            && word::state(self.word(id).load(Ordering::Acquire)) != State::Removed;
        if known {
            Ok(())
        } else {
            Err(DetectorError::Unknown(format!("id {id}")))
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
    pub fn pause(&self, id: TopicId) -> Result<bool, DetectorError> {
        let mut inner = self.inner.lock();
        self.check_id(&inner, id)?;
        let word = self.word(id);
        let mut w = word.load(Ordering::Acquire);
        loop {
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
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        inner.wheel.cancel(id);
        inner.slots[id as usize].next_deadline = NOT_HEARD;
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
    pub fn resume(&self, id: TopicId, now: Option<u64>) -> Result<bool, DetectorError> {
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        self.check_id(&inner, id)?;
        let word = self.word(id);
        let mut w = word.load(Ordering::Acquire);
        let missed_at = inner.slots[id as usize].missed_at;
        let back_at = loop {
            match word::state(w) {
                State::Paused => break inner.slots[id as usize].next_deadline,
                State::PausedFailed if w & FRESH != 0 && word::ts(w) > missed_at => {
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
                    let step = self.step(&inner, id);
                    let base = now.max(missed_at); // never at or before a counted deadline
                    inner.slots[id as usize].next_deadline = base.saturating_add(step);
                    self.arm(&mut inner, id, now);
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
                back_at.saturating_sub(slot.since),
            );
            self.counters.resumed.fetch_add(1, Ordering::Relaxed);
            self.emit(&self.subscribers.read(), ev);
        }
        Ok(self.rearm_from(&mut inner, id, State::is_paused, now))
    }

    /// For a topic paused while FAILED whose first beat since just landed: note the beat's time
    /// for `resume` and make it a plain PAUSED topic (later beats take no lock); a beat older
    /// than the latest missed deadline is only taken in. Returns false if the topic is not in
    /// that case.
    pub(super) fn note_paused_recovery(&self, inner: &mut Inner, id: TopicId) -> bool {
        let word = self.word(id);
        let missed_at = inner.slots[id as usize].missed_at;
        let mut w = word.load(Ordering::Acquire);
        loop {
            if word::state(w) != State::PausedFailed || w & FRESH == 0 {
                return false;
            }
            if word::ts(w) <= missed_at {
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
        let slot = &mut inner.slots[id as usize];
        slot.missed = 0;
        slot.next_deadline = now.saturating_add(first);
        self.arm(inner, id, now);
        true
    }

    /// Forget a topic: no more events, its name is free for a new topic with a new id.
    pub fn remove(&self, id: TopicId) -> Result<(), DetectorError> {
        let mut inner = self.inner.lock();
        self.check_id(&inner, id)?;
        self.transition(id, State::Removed, |s| s != State::Removed);
        inner.wheel.cancel(id);
        inner.held.remove(&id);
        self.phi.lock().remove(&id);
        self.registry.unindex(id);
        Ok(())
    }

    /// Stop watching every topic: all go STOPPED and beats are refused until [`start`]. What
    /// each topic was is kept for `start`: a beat already recorded is taken in first (a FAILED
    /// topic's `resumed` is emitted now), then a FAILED or paused topic's state is remembered.
    ///
    /// [`start`]: Detector::start
    pub fn stop(&self) {
        let mut inner = self.inner.lock();
        inner.running = false;
        let subscribers = self.subscribers.read();
        for id in 0..inner.slots.len() as TopicId {
            let word = self.word(id);
            loop {
                let w = word.load(Ordering::Acquire);
                let st = word::state(w);
                if !(st.is_watched() || st.is_paused()) {
                    break;
                }
                if w & FRESH != 0 && st.is_watched() {
                    self.take_fresh(&mut inner, &subscribers, id);
                    continue;
                }
                if w & FRESH != 0 && st == State::PausedFailed {
                    self.note_paused_recovery(&mut inner, id);
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
    pub fn start(&self, now: Option<u64>) {
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        inner.running = true;
        inner.now = inner.now.max(now);
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
            if self.transition(id, to, |s| s == State::Stopped).is_none() || !to.is_watched() {
                continue;
            }
            let slot = inner.slots[id as usize];
            let (base, offset) = if slot.missed == 0 {
                (now, self.first_offset(&inner, id))
            } else {
                // Never at or before a deadline already counted (an old explicit `now`).
                (now.max(slot.missed_at), self.step(&inner, id))
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
