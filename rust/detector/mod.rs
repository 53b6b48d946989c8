//! The missed-period detector: topics, their deadlines on the timer wheel, and the events.
//!
//! Two paths touch a topic:
//! - the **beat path** (any thread, no lock): one CAS on the topic's word (`crate::word`).
//!   Only a beat for a FAILED topic goes on to take the detector lock, to emit `resumed` at once
//!   (or, for a topic paused while FAILED, to note when it came back);
//! - the **driver** (`advance_to` in `advance.rs`, under the detector lock): pops due topics off
//!   the wheel and, per topic, either re-arms it from its last beat (lazy re-arm: beats never
//!   touch the wheel) or counts a missed period and emits `failed`.
//!
//! A period is missed once the clock is *past* its deadline with no beat. The n-th deadline
//! after the last beat (or after the topic was added) is `last + n * period + grace`, so a beat
//! exactly at `last + period + grace` is on time. A `failed` event's `at` is the deadline
//! itself, whenever the driver got to it. Deadlines that passed while the monitor itself was not
//! running (a local pause, see `pause.rs`) are re-based instead of counted, and while the
//! monitor's intake lags behind its feed, deadlines after what it has read wait (`lag.rs`).
//!
//! Every event is emitted while the detector lock is held, which is what keeps each topic's
//! events in order across the two paths. It is pushed into the subscriber queues at once when
//! no queue can block; otherwise it is put aside under the lock and pushed once the lock is
//! released (`emit.rs`): a thread never waits for room in a `block` queue while it holds the
//! detector lock, so a queue's consumer may call the detector (subscribe, pause, ...) while
//! the driver waits for it.

use crate::clock::{ClockSource, Driven};
use crate::event::{Event, EventKind, NO_LATENCY, NO_SEQ};
use crate::phi::{PhiConfig, PhiState};
use crate::queue::{EventQueue, Overflow, QueueStats};
use crate::registry::{make_handle, Handle, NameView, RegisterError, Registry, TopicId};
use crate::wheel::Wheel;
use crate::word::{self, State, FRESH, HEARD, PHI};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

mod adopt;
mod advance;
mod beats;
mod down;
mod emit;
mod flap;
mod intervals;
mod lag;
mod pause;
mod policy;
mod status;
#[cfg(test)]
mod tests;
mod topics;

pub use adopt::{Adoption, Carried, Marks};
pub use beats::Batch;
pub use down::{Down, LOST_REASON, REASONS_PER_TOPIC};
pub use flap::FlapConfig;
pub use intervals::{
    bucket as interval_bucket, IntervalHistogram, INTERVAL_BOUNDS_NS, INTERVAL_BUCKETS,
};
pub use lag::{DEFAULT_LAG_THRESHOLD_NS, DEFAULT_MAX_INGEST_LAG_NS};
pub use pause::DEFAULT_MAX_LOCAL_PAUSE_NS;
pub use policy::{SilenceId, SilenceInfo};
pub use status::{name_prefix, DetectorStats, TopicStatus};

/// How a topic is watched.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TopicConfig {
    /// The expected beat period, ns (> 0).
    pub period_ns: u64,
    /// Missed periods before the topic is FAILED (>= 1).
    pub allowed_misses: u32,
    /// Slack added to every deadline, ns: with the last beat at `last`, the n-th period counts
    /// as missed once the clock is past `last + n * period + grace`. Absorbs a publisher's
    /// jitter and transit time. Ignored in phi-accrual mode (its `acceptable_pause` plays the
    /// part).
    pub grace_ns: u64,
    /// Phi-accrual mode instead of the fixed period, when set.
    pub phi: Option<PhiConfig>,
}

impl TopicConfig {
    /// A fixed-period config without grace.
    pub fn fixed(period_ns: u64, allowed_misses: u32) -> Self {
        Self {
            period_ns,
            allowed_misses,
            grace_ns: 0,
            phi: None,
        }
    }

    /// This config with `grace_ns` of grace.
    pub fn with_grace(self, grace_ns: u64) -> Self {
        Self { grace_ns, ..self }
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

/// A tick no clock reading reaches after: a topic due then is not put on the wheel at all
/// (saturated deadlines, e.g. a period and grace near `u64::MAX` ns at a 1 ns resolution).
const NEVER: u64 = u64::MAX;

/// Driver-owned state of one topic (under the detector lock). 48 bytes.
#[derive(Clone, Copy, Debug)]
struct Slot {
    period_ns: u64,
    grace_ns: u64,
    /// Watched: when the next missed period is counted. PAUSED: when the topic was first heard
    /// after a failure the pause interrupted, or `NOT_HEARD` (see `topics.rs`).
    next_deadline: u64,
    /// When the current outage began: absolute clock ns (what events carry), not relative
    /// like the other times here, so that an outage carried over from another monitor
    /// ([`Detector::adopt`]) may have begun before this detector's epoch.
    since: u64,
    /// Up to when the topic's state is known: the deadline of the latest period counted as
    /// missed (the `at` of the latest `failed` while FAILED), or just before the moment it was
    /// last put under watch (added, resumed, restarted), whichever is later. A beat at or
    /// before it is old news: it cannot end an outage already reported up to there, reset a
    /// count already made, or count the time the topic was not watched (see
    /// [`Detector::take_fresh`]).
    known_until: u64,
    missed: u32,
    allowed: u32,
}

struct Inner {
    wheel: Wheel,
    slots: Vec<Slot>,
    running: bool,
    /// The furthest time advanced to (relative ns): when the detector last ran.
    now: u64,
    /// Up to when deadlines have been judged (relative ns): `now`, unless the intake lagged
    /// (the ingest-lag guard holds deadlines at its watermark, see `lag.rs`). Never goes back.
    judged: u64,
    /// When the current ingest-lag episode began (relative ns; meaningful while one is on).
    lag_since: u64,
    /// Woken by a driver ([`Detector::wake_at`]) at least once: a long gap since the last run
    /// is a local pause (see `pause.rs`), also when a `down` beat finds it first (`down.rs`).
    woken: bool,
    /// The latest local pause (relative ns, empty if none): a deadline inside it is re-based
    /// to a full period after its end instead of counted as missed (see `pause.rs`).
    pause: Range<u64>,
    /// While stopped: the topics that were FAILED or paused when stopped, and which (the
    /// others were ALIVE or PENDING, as their HEARD bit tells). See [`Detector::start`].
    held: HashMap<TopicId, State>,
    /// Ids of removed topics that a new topic may take (see `topics.rs`).
    free: Vec<TopicId>,
    /// Ids of removed topics that events still queued may name, oldest first (see
    /// [`Limbo`]).
    limbo: VecDeque<Limbo>,
    /// Queues unsubscribed that may still hold events to be popped: a removal waits for them
    /// too. Dropped from here once found idle and empty, or gone.
    retired: Vec<Weak<EventQueue<Event>>>,
    /// Events emitted under this hold of the lock that are to be pushed once it is released
    /// (see `emit.rs`); empty whenever the lock is free.
    pending: Vec<Event>,
    /// Events put aside for pushing so far (see [`Detector::delivered`]).
    appended: u64,
    /// The outbox position up to which events were put aside by calls that must not wait
    /// to push them (`pause`, `remove`): the driver's next run pushes them (see `emit.rs`).
    unpushed: u64,
    /// Topics FAILED by a `down` beat: the serial of their newest reason (see `down.rs`).
    down: HashMap<TopicId, u64>,
    /// Silences, dependencies and flapping (see `policy.rs`).
    policy: policy::Policy,
}

/// A removed topic's id on its way to reuse: once the events put aside before the removal are
/// pushed (`after`), the subscriber queues are marked, and once each has drained past its
/// mark, the id is free.
struct Limbo {
    id: TopicId,
    after: u64,
    /// None until `after` is reached.
    marks: Option<Arc<[QueueMark]>>,
}

/// A subscriber queue and its [`EventQueue::mark`] when a topic was removed.
type QueueMark = (Weak<EventQueue<Event>>, u64);

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
    local_pauses: AtomicU64,
    local_pause_ns: AtomicU64,
    laggings: AtomicU64,
    /// Events the policy marked silenced, marked suppressed, and `failed` it released.
    silenced: AtomicU64,
    suppressed: AtomicU64,
    released: AtomicU64,
    /// `failed`/`resumed` held back while their topic flapped.
    held: AtomicU64,
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
    /// How many subscriber queues are `block`: while any is, events are pushed outside the
    /// detector lock (see `emit.rs`).
    blocking: AtomicUsize,
    /// Events put aside under the detector lock, in the order emitted, to be pushed outside it.
    outbox: Mutex<VecDeque<Vec<Event>>>,
    /// Events of the outbox pushed so far (to every queue subscribed when pushed).
    delivered: AtomicU64,
    /// Held while pushing from the outbox: one pusher at a time keeps the order emitted.
    turn: Mutex<()>,
    /// Notified (under `pushed_lock`) each time `delivered` rises, for [`Detector::wait_pushed`].
    pushed: Condvar,
    pushed_lock: Mutex<()>,
    /// Emptied outbox buffers, for `commit` to reuse.
    spare: Mutex<Vec<Vec<Event>>>,
    /// A wake-up later than this after the last run is a local pause (ns; `u64::MAX`: never).
    max_local_pause_ns: AtomicU64,
    /// The ingest-lag guard (see `lag.rs`).
    lag: lag::LagGuard,
    counters: Counters,
    /// The beat inter-arrival histogram (see `intervals.rs`).
    intervals: intervals::Intervals,
    /// Reason texts of explicit failures (see `down.rs`); taken under the detector lock or
    /// alone (when Python builds events), never the other way round.
    reasons: Mutex<down::Reasons>,
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
                judged: 0,
                lag_since: 0,
                woken: false,
                pause: 0..0,
                held: HashMap::new(),
                free: Vec::new(),
                limbo: VecDeque::new(),
                retired: Vec::new(),
                pending: Vec::new(),
                appended: 0,
                unpushed: 0,
                down: HashMap::new(),
                policy: policy::Policy::default(),
            }),
            reasons: Mutex::new(down::Reasons::default()),
            phi: Mutex::new(HashMap::new()),
            subscribers: RwLock::new(Vec::new()),
            received_wanted: AtomicUsize::new(0),
            blocking: AtomicUsize::new(0),
            outbox: Mutex::new(VecDeque::new()),
            delivered: AtomicU64::new(0),
            turn: Mutex::new(()),
            pushed: Condvar::new(),
            pushed_lock: Mutex::new(()),
            spare: Mutex::new(Vec::new()),
            max_local_pause_ns: AtomicU64::new(DEFAULT_MAX_LOCAL_PAUSE_NS),
            lag: lag::LagGuard::new(),
            counters: Counters::default(),
            intervals: Default::default(),
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
    /// beat exactly at the deadline is still on time. Saturates: [`NEVER`] for a deadline in
    /// the last tick of the range (`u64::MAX` ns at a 1 ns resolution), which no tick is after.
    #[inline]
    fn tick_of(&self, rel_ns: u64) -> u64 {
        (rel_ns / self.resolution_ns).saturating_add(1)
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

    /// A new event queue fed with every event from now on (`received` only if asked for), and
    /// with those emitted before but not pushed yet (put aside while a `block` queue is
    /// subscribed, see `emit.rs`).
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
        if overflow == Overflow::Block {
            self.blocking.fetch_add(1, Ordering::Relaxed);
        }
        Ok(queue)
    }

    /// Stop feeding `queue` and close it (a consumer waiting on it wakes up, and so does a
    /// thread waiting for room in it). No push into it is in flight once this returns.
    ///
    /// Never waits for room in a queue: the consumer of a full `block` queue may call it.
    pub fn unsubscribe(&self, queue: &Arc<EventQueue<Event>>) -> bool {
        let mut inner = self.inner.lock();
        // Pushes hold the list's read lock only while they cannot wait (see `emit.rs`).
        let mut subs = self.subscribers.write();
        let Some(at) = subs.iter().position(|s| Arc::ptr_eq(&s.queue, queue)) else {
            return false;
        };
        let sub = subs.remove(at);
        inner.retired.push(Arc::downgrade(&sub.queue));
        if sub.received {
            self.received_wanted.fetch_sub(1, Ordering::Relaxed);
        }
        if sub.queue.overflow() == Overflow::Block {
            self.blocking.fetch_sub(1, Ordering::Relaxed);
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
}

impl Driven for Detector {
    fn run_until(&self, now_ns: u64) {
        self.advance_to(Some(now_ns));
    }

    fn wake(&self, now_ns: u64) {
        self.wake_at(Some(now_ns));
    }
}
