//! The missed-period detector: topics, their deadlines on the timer wheel, and the events.
//!
//! Two paths touch a topic:
//! - the **beat path** (any thread, no lock): one CAS on the topic's word ([`crate::word`]).
//!   Only a beat for a FAILED topic goes on to take the detector lock, to emit `resumed` at once;
//! - the **driver** (`advance_to`, under the detector lock): pops due topics off the wheel and,
//!   per topic, either re-arms it from its last beat (lazy re-arm: beats never touch the wheel)
//!   or counts a missed period and emits `failed`.
//!
//! A period is missed once the clock is *past* its deadline with no beat: a beat exactly at
//! `last + period` is on time. A `failed` event's `at` is the deadline itself, whenever the
//! driver got to it.
//!
//! Every event is pushed while the detector lock is held, which is what keeps each topic's events
//! in order across the two paths.

use crate::clock::{ClockSource, Driven};
use crate::event::{Event, EventKind, NO_LATENCY};
use crate::phi::{PhiConfig, PhiState};
use crate::queue::{EventQueue, Overflow, QueueStats};
use crate::registry::{NameView, RegisterError, Registry, TopicId};
use crate::wheel::Wheel;
use crate::word::{self, State, FRESH, HEARD, PHI};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// How a topic is watched.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TopicConfig {
    /// The expected beat period, ns (> 0).
    pub period_ns: u64,
    /// Missed periods before the topic is FAILED (>= 1).
    pub allowed_misses: u32,
    /// Phi-accrual mode instead of the fixed period, when set.
    pub phi: Option<PhiConfig>,
}

impl TopicConfig {
    /// A fixed-period config.
    pub fn fixed(period_ns: u64, allowed_misses: u32) -> Self {
        Self {
            period_ns,
            allowed_misses,
            phi: None,
        }
    }

    /// Check every field; the error names the field and the bad value.
    pub fn validate(&self) -> Result<(), DetectorError> {
        if self.period_ns == 0 {
            return Err(DetectorError::Invalid(
                "period must be > 0, got 0 ns".to_owned(),
            ));
        }
        if self.allowed_misses == 0 {
            return Err(DetectorError::Invalid(
                "allowed_misses must be >= 1, got 0".to_owned(),
            ));
        }
        if let Some(phi) = &self.phi {
            phi.validate().map_err(DetectorError::Invalid)?;
        }
        Ok(())
    }
}

impl Default for TopicConfig {
    fn default() -> Self {
        Self::fixed(1_000_000_000, 1)
    }
}

/// Why a detector call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DetectorError {
    /// A bad argument; the text names it and its value.
    Invalid(String),
    /// The topic name could not be registered.
    Register(RegisterError),
    /// No topic by that name (or handle).
    Unknown(String),
}

impl std::fmt::Display for DetectorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DetectorError::Invalid(msg) => f.write_str(msg),
            DetectorError::Register(e) => e.fmt(f),
            DetectorError::Unknown(what) => write!(f, "unknown topic: {what}"),
        }
    }
}

impl std::error::Error for DetectorError {}

impl From<RegisterError> for DetectorError {
    fn from(e: RegisterError) -> Self {
        DetectorError::Register(e)
    }
}

/// What became of one beat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Beat {
    /// Recorded. `resume` is true when the topic was FAILED: the caller must call
    /// [`Detector::settle`] (the full [`Detector::beat`] does) to emit `resumed`.
    Recorded { resume: bool },
    /// No topic with that name or id.
    Unknown,
    /// The topic was removed, or the detector is stopped.
    Refused,
}

/// The lock-free half of a batch of beats, to be passed to [`Detector::finish`].
#[derive(Debug)]
#[must_use = "a batch owes resumed/received events until it is finished"]
pub struct Batch {
    now: u64,
    /// Beats recorded so far.
    pub recorded: usize,
    /// Names or ids not known (nor added).
    pub unknown: usize,
    /// Topics whose beat still owes an event: (id, ends an outage).
    follow: Vec<(TopicId, bool)>,
    /// Unknown names to add (auto-add on).
    missing: Vec<String>,
}

impl Batch {
    fn new(now: u64) -> Self {
        Self {
            now,
            recorded: 0,
            unknown: 0,
            follow: Vec::new(),
            missing: Vec::new(),
        }
    }

    #[inline]
    fn take(&mut self, id: TopicId, result: Beat, want_received: bool) {
        match result {
            Beat::Recorded { resume } => {
                self.recorded += 1;
                if resume || want_received {
                    self.follow.push((id, resume));
                }
            }
            Beat::Unknown => self.unknown += 1,
            Beat::Refused => {}
        }
    }

    /// Whether finishing it would take the detector lock.
    pub fn needs_finish(&self) -> bool {
        !self.follow.is_empty() || !self.missing.is_empty()
    }
}

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
    /// `failed` events produced.
    pub failed: u64,
    /// `resumed` events produced.
    pub resumed: u64,
    /// `received` events produced.
    pub received: u64,
    /// Topic ids handed out (removed ones included).
    pub topics: u64,
}

/// Driver-owned state of one topic (under the detector lock). 32 bytes.
#[derive(Clone, Copy, Debug)]
struct Slot {
    period_ns: u64,
    /// When the next missed period is counted.
    next_deadline: u64,
    /// When the current outage began.
    since: u64,
    missed: u32,
    allowed: u32,
}

struct Inner {
    wheel: Wheel,
    slots: Vec<Slot>,
    running: bool,
    /// The furthest time advanced to (relative ns).
    now: u64,
}

struct Subscriber {
    queue: Arc<EventQueue<Event>>,
    received: bool,
}

#[derive(Default)]
struct Counters {
    beats: AtomicU64,
    unknown: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    resumed: AtomicU64,
    received: AtomicU64,
}

/// Watches any number of topics for missed periods. Share it through `Arc`.
pub struct Detector {
    clock: ClockSource,
    /// Absolute clock reading that internal time 0 stands for.
    epoch: u64,
    resolution_ns: u64,
    defaults: TopicConfig,
    auto_add: AtomicBool,
    registry: Registry,
    inner: Mutex<Inner>,
    /// Interval histories of phi-accrual topics. Taken by beats of those topics without the
    /// detector lock, and by the driver (inner, then phi: the only lock order).
    phi: Mutex<HashMap<TopicId, PhiState>>,
    subscribers: RwLock<Vec<Subscriber>>,
    /// How many subscribers want `received`; the beat path skips them all when 0.
    received_wanted: AtomicUsize,
    counters: Counters,
}

impl Detector {
    /// A running detector on `clock` whose wheel counts in steps of `resolution_ns`, with
    /// `defaults` for topics added without a config. A manual clock drives it on every advance.
    pub fn new(
        clock: ClockSource,
        defaults: TopicConfig,
        resolution_ns: u64,
    ) -> Result<Arc<Self>, DetectorError> {
        defaults.validate()?;
        if resolution_ns == 0 {
            return Err(DetectorError::Invalid(
                "resolution must be > 0, got 0 ns".to_owned(),
            ));
        }
        let epoch = clock.now_ns();
        let manual = match &clock {
            ClockSource::Manual(c) => Some(c.clone()),
            ClockSource::Monotonic(_) => None,
        };
        let detector = Arc::new(Self {
            clock,
            epoch,
            resolution_ns,
            defaults,
            auto_add: AtomicBool::new(false),
            registry: Registry::new(),
            inner: Mutex::new(Inner {
                wheel: Wheel::new(0),
                slots: Vec::new(),
                running: true,
                now: 0,
            }),
            phi: Mutex::new(HashMap::new()),
            subscribers: RwLock::new(Vec::new()),
            received_wanted: AtomicUsize::new(0),
            counters: Counters::default(),
        });
        if let Some(manual) = manual {
            let driven: Arc<dyn Driven> = detector.clone();
            manual.attach(Arc::downgrade(&driven));
        }
        Ok(detector)
    }

    // ----- time --------------------------------------------------------------------------

    /// The clock's reading, absolute ns.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// The clock this detector reads.
    pub fn clock(&self) -> &ClockSource {
        &self.clock
    }

    #[inline]
    fn rel(&self, abs_ns: u64) -> u64 {
        abs_ns.saturating_sub(self.epoch)
    }

    #[inline]
    fn abs(&self, rel_ns: u64) -> u64 {
        rel_ns.saturating_add(self.epoch)
    }

    #[inline]
    fn rel_now(&self, now: Option<u64>) -> u64 {
        self.rel(now.unwrap_or_else(|| self.clock.now_ns()))
    }

    /// The wheel tick at which a deadline is checked: the first tick strictly after it, since a
    /// beat exactly at the deadline is still on time.
    #[inline]
    fn tick_of(&self, rel_ns: u64) -> u64 {
        rel_ns / self.resolution_ns + 1
    }

    /// The defaults new topics get.
    pub fn defaults(&self) -> TopicConfig {
        self.defaults
    }

    /// Register names a beat mentions that the detector does not know yet (with the defaults)
    /// instead of counting them as unknown.
    pub fn set_auto_add(&self, on: bool) {
        self.auto_add.store(on, Ordering::Relaxed);
    }

    /// Whether unknown names are added on their first beat.
    pub fn auto_add(&self) -> bool {
        self.auto_add.load(Ordering::Relaxed)
    }

    // ----- topics ------------------------------------------------------------------------

    /// Expect `name` from `now` on: it must be heard within its first period. Returns its id; a
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
                next_deadline: 0,
                since: 0,
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

    fn config_of(&self, inner: &Inner, id: TopicId) -> TopicConfig {
        let slot = &inner.slots[id as usize];
        TopicConfig {
            period_ns: slot.period_ns,
            allowed_misses: slot.allowed,
            phi: self.phi.lock().get(&id).map(|p| *p.config()),
        }
    }

    /// Apply `config` to a topic; a watched topic's next deadline becomes one (new) first
    /// offset from `now`, keeping its missed count.
    fn configure(&self, inner: &mut Inner, id: TopicId, config: TopicConfig, now: u64) {
        let slot = &mut inner.slots[id as usize];
        slot.period_ns = config.period_ns;
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
            inner.slots[id as usize].next_deadline = now.saturating_add(first);
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

    fn check_id(&self, inner: &Inner, id: TopicId) -> Result<(), DetectorError> {
        let known = (id as usize) < inner.slots.len()
            && word::state(self.word(id).load(Ordering::Acquire)) != State::Removed;
        if known {
            Ok(())
        } else {
            Err(DetectorError::Unknown(format!("id {id}")))
        }
    }

    #[inline]
    fn word(&self, id: TopicId) -> &AtomicU64 {
        self.registry
            .word(id)
            .expect("slot ids are registry ids, registered first")
    }

    /// Move a topic's word to `to` unless it is in a state `from` rejects; returns the state it
    /// left. FRESH is cleared: whatever comes next starts from a clean slate.
    fn transition(&self, id: TopicId, to: State, from: impl Fn(State) -> bool) -> Option<State> {
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

    /// Stop watching a topic until [`resume`](Detector::resume); beats still update its last_seen.
    pub fn pause(&self, id: TopicId) -> Result<bool, DetectorError> {
        let mut inner = self.inner.lock();
        self.check_id(&inner, id)?;
        let paused = self
            .transition(id, State::Paused, State::is_watched)
            .is_some();
        if paused {
            inner.wheel.cancel(id);
        }
        Ok(paused)
    }

    /// Watch a paused topic again: it must be heard within one period from `now`.
    pub fn resume(&self, id: TopicId, now: Option<u64>) -> Result<bool, DetectorError> {
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        self.check_id(&inner, id)?;
        Ok(self.rearm_from(&mut inner, id, State::Paused, now))
    }

    /// Move a topic out of `from` into ALIVE (heard before) or PENDING and arm it from `now`.
    fn rearm_from(&self, inner: &mut Inner, id: TopicId, from: State, now: u64) -> bool {
        let heard = self.word(id).load(Ordering::Acquire) & HEARD != 0;
        let to = if heard { State::Alive } else { State::Pending };
        if self.transition(id, to, |s| s == from).is_none() {
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
        self.phi.lock().remove(&id);
        self.registry.unindex(id);
        Ok(())
    }

    /// Stop watching every topic: all go STOPPED and beats are refused until [`start`].
    ///
    /// [`start`]: Detector::start
    pub fn stop(&self) {
        let mut inner = self.inner.lock();
        inner.running = false;
        for id in 0..inner.slots.len() as TopicId {
            if self
                .transition(id, State::Stopped, |s| s.is_watched() || s == State::Paused)
                .is_some()
            {
                inner.wheel.cancel(id);
            }
        }
    }

    /// Watch every stopped topic again from `now`, as if just expected (heard ones count as
    /// ALIVE, never-heard ones as PENDING).
    pub fn start(&self, now: Option<u64>) {
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        inner.running = true;
        inner.now = inner.now.max(now);
        for id in 0..inner.slots.len() as TopicId {
            self.rearm_from(&mut inner, id, State::Stopped, now);
        }
    }

    /// Whether the detector is started.
    pub fn is_running(&self) -> bool {
        self.inner.lock().running
    }

    // ----- beats -------------------------------------------------------------------------

    /// Record a beat lock-free: one CAS. Never blocks and never emits; see [`Beat::Recorded`].
    #[inline]
    pub fn record(&self, id: TopicId, now_abs: u64) -> Beat {
        let Some(word) = self.registry.word(id) else {
            self.counters.unknown.fetch_add(1, Ordering::Relaxed);
            return Beat::Unknown;
        };
        let t = self.rel(now_abs);
        let mut w = word.load(Ordering::Acquire);
        loop {
            let st = word::state(w);
            if matches!(st, State::Stopped | State::Removed) {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                return Beat::Refused;
            }
            let new = word::after_beat(w, t);
            match word.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.counters.beats.fetch_add(1, Ordering::Relaxed);
                    if w & PHI != 0 && st == State::Alive && t > word::ts(w) {
                        // Only intervals between beats of a live topic teach the model what
                        // normal looks like (as Akka does): an outage is not a sample.
                        if let Some(p) = self.phi.lock().get_mut(&id) {
                            p.record_interval(t - word::ts(w));
                        }
                    }
                    return Beat::Recorded {
                        resume: st == State::Failed,
                    };
                }
                Err(actual) => w = actual,
            }
        }
    }

    /// Emit `resumed` for a FAILED topic that has been beaten ([`Beat::Recorded`] with
    /// `resume: true`). Takes the detector lock; may block on a full `block`-policy queue.
    pub fn settle(&self, id: TopicId) {
        let mut inner = self.inner.lock();
        let subscribers = self.subscribers.read();
        let now = inner.now;
        if self.take_fresh(&mut inner, &subscribers, id) {
            // Re-arm at the deadline the beat set: a beat stamped with an old explicit time
            // can make it earlier than the entry already on the wheel.
            self.arm(&mut inner, id, now);
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
        let _order = self.inner.lock();
        let subscribers = self.subscribers.read();
        self.emit(&subscribers, Event::received(id, now_abs, seq, latency_ns));
    }

    /// A full beat: record, emit `resumed` if it ends an outage, then `received` if wanted.
    pub fn beat(&self, id: TopicId, now: Option<u64>) -> Beat {
        self.beat_with(id, now, 0, NO_LATENCY)
    }

    /// [`beat`](Detector::beat) with the sequence number and transit time a `received` event
    /// carries.
    pub fn beat_with(&self, id: TopicId, now: Option<u64>, seq: u64, latency_ns: i64) -> Beat {
        let now = now.unwrap_or_else(|| self.clock.now_ns());
        let result = self.record(id, now);
        if self.needs_completion(result) {
            self.complete(id, result, now, seq, latency_ns);
        }
        result
    }

    /// Whether [`complete`](Detector::complete) has work to do after [`record`](Detector::record).
    #[inline]
    pub fn needs_completion(&self, result: Beat) -> bool {
        matches!(result, Beat::Recorded { resume } if resume || self.wants_received())
    }

    /// The part of a beat that may take the detector lock (and block on a full `block` queue):
    /// emit `resumed` if the beat ended an outage, then `received` if wanted.
    pub fn complete(&self, id: TopicId, result: Beat, now_abs: u64, seq: u64, latency_ns: i64) {
        if let Beat::Recorded { resume } = result {
            if resume {
                self.settle(id);
            }
            if self.wants_received() {
                self.emit_received(id, now_abs, seq, latency_ns);
            }
        }
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
        self.beat_with(id, Some(now), 0, NO_LATENCY)
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
        let mut batch = Batch::new(now.unwrap_or_else(|| self.clock.now_ns()));
        let want_received = self.wants_received();
        for id in ids {
            batch.take(id, self.record(id, batch.now), want_received);
        }
        batch
    }

    /// The lock-free part of a batch of beats by name: never blocks, never emits. Unknown names
    /// are counted, or kept for [`finish`](Detector::finish) to add when auto-add is on.
    pub fn record_names<S: AsRef<str>>(
        &self,
        names: impl IntoIterator<Item = S>,
        now: Option<u64>,
    ) -> Batch {
        let mut batch = Batch::new(now.unwrap_or_else(|| self.clock.now_ns()));
        let want_received = self.wants_received();
        let auto_add = self.auto_add();
        self.registry.with_lookup(|find| {
            for name in names {
                let name = name.as_ref();
                match find(name) {
                    Some(id) => batch.take(id, self.record(id, batch.now), want_received),
                    None if auto_add => batch.missing.push(name.to_owned()),
                    None => batch.unknown += 1,
                }
            }
        });
        self.counters
            .unknown
            .fetch_add(batch.unknown as u64, Ordering::Relaxed);
        batch
    }

    /// Finish a batch: emit what its beats owe (`resumed`, `received`) and add and beat its
    /// unknown names when auto-add is on. May take the detector lock. Returns
    /// `(recorded, unknown)`.
    pub fn finish(&self, mut batch: Batch) -> (usize, usize) {
        for &(id, resume) in &batch.follow {
            self.complete(id, Beat::Recorded { resume }, batch.now, 0, NO_LATENCY);
        }
        for name in std::mem::take(&mut batch.missing) {
            match self.add(&name, None, Some(batch.now)) {
                Ok(id) => {
                    let result = self.record(id, batch.now);
                    if let Beat::Recorded { .. } = result {
                        batch.recorded += 1;
                        self.complete(id, result, batch.now, 0, NO_LATENCY);
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

    // ----- the driver --------------------------------------------------------------------

    /// Process every deadline up to `now` (absolute ns; default: the clock's now). Returns the
    /// number of events produced.
    pub fn advance_to(&self, now: Option<u64>) -> u64 {
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        inner.now = inner.now.max(now);
        if !inner.running {
            return 0;
        }
        let subscribers = self.subscribers.read();
        let before = self.counters.failed.load(Ordering::Relaxed)
            + self.counters.resumed.load(Ordering::Relaxed);
        let now_tick = now / self.resolution_ns;
        while let Some((id, _when)) = inner.wheel.pop_expired(now_tick) {
            self.check(&mut inner, &subscribers, id, now);
        }
        self.counters.failed.load(Ordering::Relaxed) + self.counters.resumed.load(Ordering::Relaxed)
            - before
    }

    /// A due topic: take in a fresh beat (re-arm from it, or resume), count missed periods up
    /// to `now`, and put it back on the wheel at its next deadline.
    fn check(&self, inner: &mut Inner, subs: &[Subscriber], id: TopicId, now: u64) {
        let word = self.word(id);
        loop {
            if !self.take_fresh(inner, subs, id) {
                return; // not watched any more
            }
            let w = word.load(Ordering::Acquire);
            if w & FRESH != 0 {
                continue; // a beat landed just now: take it in before judging the deadline
            }
            let st = word::state(w);
            let slot = inner.slots[id as usize];
            let d = slot.next_deadline;
            if d >= now {
                self.arm(inner, id, now);
                return;
            }
            // A period ended at `d` with no beat.
            let missed = slot.missed.saturating_add(1);
            let failing = missed >= slot.allowed;
            if failing {
                // Validate the word is still the one we read (a no-op CAS when already
                // FAILED): a beat that slipped in is taken in first, on the next turn.
                let target = word::with_state(w, State::Failed);
                if word
                    .compare_exchange(w, target, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    continue;
                }
            } else if word.load(Ordering::Acquire) != w {
                continue;
            }
            let step = self.step(inner, id);
            let slot = &mut inner.slots[id as usize];
            slot.missed = missed;
            slot.next_deadline = d.saturating_add(step);
            if failing {
                if st != State::Failed {
                    slot.since = d;
                }
                let since = slot.since;
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                self.emit(
                    subs,
                    Event::failed(id, missed, self.abs(d), self.abs(since)),
                );
            }
        }
    }

    /// Take in a FRESH beat, if any: reset the missed count, set the next deadline one first
    /// offset after the beat, and emit `resumed` if the topic was FAILED. Returns false when
    /// the topic is not watched.
    fn take_fresh(&self, inner: &mut Inner, subs: &[Subscriber], id: TopicId) -> bool {
        let word = self.word(id);
        let mut w = word.load(Ordering::Acquire);
        loop {
            let st = word::state(w);
            if !st.is_watched() {
                return false;
            }
            if w & FRESH == 0 {
                return true;
            }
            let mut new = w & !FRESH;
            if st == State::Failed {
                new = word::with_state(new, State::Alive);
            }
            match word.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        let beat_at = word::ts(w);
        let first = self.first_offset(inner, id);
        let slot = &mut inner.slots[id as usize];
        if word::state(w) == State::Failed {
            let downtime = beat_at.saturating_sub(slot.since);
            let ev = Event::resumed(id, slot.missed, self.abs(beat_at), downtime);
            self.counters.resumed.fetch_add(1, Ordering::Relaxed);
            self.emit(subs, ev);
        }
        slot.missed = 0;
        slot.next_deadline = beat_at.saturating_add(first);
        true
    }

    /// Put a watched topic on the wheel for its next deadline. Phi topics are also looked at
    /// once per mean interval, because a new beat can pull their suspicion time earlier.
    fn arm(&self, inner: &mut Inner, id: TopicId, now: u64) {
        let mut wake = inner.slots[id as usize].next_deadline;
        if self.word(id).load(Ordering::Acquire) & PHI != 0 {
            wake = wake.min(now.saturating_add(self.step(inner, id)));
        }
        let tick = self.tick_of(wake);
        inner.wheel.schedule(id, tick);
    }

    /// Time from a beat to the first missed period: the period, or the phi suspicion time.
    fn first_offset(&self, inner: &Inner, id: TopicId) -> u64 {
        let slot = &inner.slots[id as usize];
        if self.word(id).load(Ordering::Acquire) & PHI != 0 {
            if let Some(p) = self.phi.lock().get(&id) {
                return p.suspicion_after_ns().max(self.resolution_ns);
            }
        }
        slot.period_ns
    }

    /// Time between further missed periods: the period, or the phi mean interval.
    fn step(&self, inner: &Inner, id: TopicId) -> u64 {
        let slot = &inner.slots[id as usize];
        if self.word(id).load(Ordering::Acquire) & PHI != 0 {
            if let Some(p) = self.phi.lock().get(&id) {
                return (p.mean_ns() as u64).max(self.resolution_ns);
            }
        }
        slot.period_ns
    }

    fn emit(&self, subs: &[Subscriber], ev: Event) {
        if ev.kind == EventKind::Received {
            self.counters.received.fetch_add(1, Ordering::Relaxed);
        }
        for sub in subs {
            if ev.kind != EventKind::Received || sub.received {
                sub.queue.push(ev);
            }
        }
    }

    // ----- subscribers -------------------------------------------------------------------

    /// A new event queue fed with every event from now on (`received` only if asked for).
    pub fn subscribe(
        &self,
        capacity: usize,
        overflow: Overflow,
        received: bool,
    ) -> Result<Arc<EventQueue<Event>>, DetectorError> {
        if capacity == 0 {
            return Err(DetectorError::Invalid(
                "capacity must be >= 1, got 0".to_owned(),
            ));
        }
        let queue = Arc::new(EventQueue::new(capacity, overflow));
        // Taking the detector lock orders the subscription with respect to events in flight.
        let _order = self.inner.lock();
        self.subscribers.write().push(Subscriber {
            queue: queue.clone(),
            received,
        });
        if received {
            self.received_wanted.fetch_add(1, Ordering::Relaxed);
        }
        Ok(queue)
    }

    /// Stop feeding `queue` and close it (a consumer waiting on it wakes up).
    pub fn unsubscribe(&self, queue: &Arc<EventQueue<Event>>) -> bool {
        let mut subs = self.subscribers.write();
        let Some(at) = subs.iter().position(|s| Arc::ptr_eq(&s.queue, queue)) else {
            return false;
        };
        let sub = subs.remove(at);
        if sub.received {
            self.received_wanted.fetch_sub(1, Ordering::Relaxed);
        }
        sub.queue.close();
        true
    }

    /// Queue statistics of every subscriber, in subscription order.
    pub fn queue_stats(&self) -> Vec<QueueStats> {
        self.subscribers
            .read()
            .iter()
            .map(|s| s.queue.stats())
            .collect()
    }

    // ----- status ------------------------------------------------------------------------

    /// A snapshot of one topic.
    pub fn status(&self, id: TopicId) -> Result<TopicStatus, DetectorError> {
        let inner = self.inner.lock();
        if (id as usize) >= inner.slots.len() {
            return Err(DetectorError::Unknown(format!("id {id}")));
        }
        Ok(self.status_of(&inner, id))
    }

    /// Snapshots of every topic not removed, in id order.
    pub fn statuses(&self) -> Vec<TopicStatus> {
        let inner = self.inner.lock();
        (0..inner.slots.len() as TopicId)
            .filter(|&id| word::state(self.word(id).load(Ordering::Acquire)) != State::Removed)
            .map(|id| self.status_of(&inner, id))
            .collect()
    }

    /// How many topics are in each state, indexed by `State as usize`.
    pub fn state_counts(&self) -> [u64; 6] {
        let mut counts = [0u64; 6];
        for id in 0..self.registry.len() as TopicId {
            counts[word::state(self.word(id).load(Ordering::Acquire)) as usize] += 1;
        }
        counts
    }

    fn status_of(&self, inner: &Inner, id: TopicId) -> TopicStatus {
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
        let fresh = w & FRESH != 0 && state.is_watched();
        let (missed, next_deadline) = if fresh {
            (0, word::ts(w).saturating_add(self.first_offset(inner, id)))
        } else {
            (slot.missed, slot.next_deadline)
        };
        TopicStatus {
            id,
            state,
            missed,
            last_seen_ns: heard.then(|| self.abs(word::ts(w))),
            period_ns: slot.period_ns,
            allowed_misses: slot.allowed,
            failed_since_ns: (state == State::Failed).then(|| self.abs(slot.since)),
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
            topics: self.registry.len() as u64,
        }
    }

    /// Bytes of heap the detector holds for its topics (names, words, slots, wheel).
    pub fn heap_bytes(&self) -> usize {
        let inner = self.inner.lock();
        self.registry.heap_bytes()
            + inner.slots.capacity() * std::mem::size_of::<Slot>()
            + inner.wheel.heap_bytes()
    }
}

impl Driven for Detector {
    fn run_until(&self, now_ns: u64) {
        self.advance_to(Some(now_ns));
    }
}

/// A weak handle for driver threads, so a dropped detector stops its driver.
pub type WeakDetector = Weak<Detector>;

#[cfg(test)]
#[path = "detector_tests.rs"]
mod tests;
