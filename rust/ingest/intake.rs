//! A monitor's intake: every rule a beat passes before the detector records it, in one place
//! for every way beats arrive (bytes off a STOMP socket, a message body from the embedded
//! broker, fields decoded by the Python codec, `beat(name)` from Python).
//!
//! Rules, in order (each check comes before any change: a refused beat changes nothing about
//! its topic, so a replayed beat with another period cannot re-tune it):
//! 1. the period a beat carries is within [`MIN_BEAT_PERIOD`]..=[`MAX_BEAT_PERIOD`]
//!    (`bad_period`);
//! 2. nothing is recorded while the monitor is not running;
//!    and a beat taken from a group's shard queue must be of a topic in that shard
//!    (`wrong_shard`; see [`InShard`]);
//! 3. with a key, a signed beat's send time is within the allowed age of the wall clock
//!    (`stale`);
//! 4. an unknown topic is learned: it must not be one of heartwire's own (under
//!    [`RESERVED_PREFIX`]: `bad_topic`), must match the pattern (`pattern_mismatch`) and the
//!    monitor must have room (`too_many_topics`); it is paused at once if the monitor or that
//!    name is paused;
//! 5. with a key, a signed beat with `seq` and `boot` must not be a replay (`replayed`);
//! 6. a period that differs from the topic's re-tunes it, unless it was pinned by `expect`;
//! 7. the detector records it, with its transit time (`latency`) when it carries a send time;
//!    a beat that says `down` fails its topic at once instead (`Detector::down`): with a key,
//!    only a signed beat gets this far, so only signed beats can fail a topic.
//!
//! Refusals are counted by reason, and the first [`PENDING_LIMIT`] not yet taken are kept with
//! their details for the monitor to report (`on_exception`); beyond that only counted.

use super::beat::{Beat, Decoded, Decoder};
use super::replay::ReplayGuard;
use super::shard::shard_of;
use super::topic::{reserved_topic, valid_topic, Pattern, RESERVED_PREFIX};
use crate::detector::{Beat as Recorded, Detector};
use crate::event::{NO_LATENCY, NO_SEQ};
use crate::phi::PhiConfig;
use crate::registry::Handle;
use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The periods a beat may carry, seconds: the core cannot time less than a nanosecond or more
/// than ~30 years, and a hostile 1 ns period would fail its topic on every tick.
pub const MIN_BEAT_PERIOD: f64 = 0.001;
pub const MAX_BEAT_PERIOD: f64 = 1e9;
/// The default allowed age of a signed beat with period `p`: `BEAT_AGE_PERIODS * p +
/// BEAT_AGE_SKEW` seconds.
pub const BEAT_AGE_PERIODS: f64 = 3.0;
pub const BEAT_AGE_SKEW: f64 = 60.0;
/// The reason of a `down` beat that gives none.
pub const DEFAULT_DOWN_REASON: &str = "down";
/// Refusals kept with their details until the monitor takes them.
pub const PENDING_LIMIT: usize = 1024;

/// Every reason a beat is refused, decode reasons first (as `heartwire.beat.DECODE_REASONS`).
pub const REASONS: [&str; 14] = [
    "too_large",
    "not_utf8",
    "bad_json",
    "bad_field",
    "unsigned",
    "bad_signature",
    "topic_mismatch",
    "bad_period",
    "pattern_mismatch",
    "too_many_topics",
    "bad_topic",
    "replayed",
    "stale",
    "wrong_shard",
];

fn reason_index(reason: &str) -> usize {
    REASONS.iter().position(|r| *r == reason).unwrap_or(2)
}

/// How old a signed beat may be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MaxAge {
    /// [`BEAT_AGE_PERIODS`] of the topic's period plus [`BEAT_AGE_SKEW`].
    Default,
    /// At most this many seconds either way.
    Seconds(f64),
    /// No bound.
    Unbounded,
}

/// The shard a beat must be in: one taken from shard `shard` of a group of `shards` shards
/// (its shard queue). A beat of another shard's topic is refused (`wrong_shard`): taken in, it
/// would have two members watch its topic, the wrong one raising a false FAILED when the stray
/// beats stop, and leave it out of every snapshot of its shard. It comes from a publisher whose
/// layout has another shard count, a forged shard header (RabbitMQ routes on it alone), or a
/// captured beat sent to another queue (a signature does not cover the destination).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InShard {
    pub shards: u32,
    pub shard: u32,
}

/// A monitor's settings, as the intake needs them. (No `Debug`: it holds the key.)
#[derive(Clone)]
pub struct IntakeConfig {
    pub pattern: String,
    /// The default period of new topics, seconds.
    pub period: f64,
    /// Slack on every deadline, seconds; None: 10% of each topic's period.
    pub grace: Option<f64>,
    pub max_topics: Option<usize>,
    pub max_age: MaxAge,
    pub key: Option<Vec<u8>>,
    /// The largest body decoded, bytes.
    pub max_size: usize,
}

/// One refusal, for the monitor's `on_exception`.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub reason: &'static str,
    pub detail: String,
    /// How many beats were refused for this reason so far (this one included).
    pub count: u64,
}

/// What became of a message body.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outcome {
    /// Recorded; `sent` is the beat's send time (Unix seconds) if it carried one.
    Recorded { sent: Option<f64> },
    /// Refused (counted) or ignored (the monitor is not running).
    Refused,
    /// The native decoder was not sure: the Python codec decides, then calls
    /// [`Intake::record`].
    Defer,
}

/// Per-slot settings the monitor keeps beside the detector's.
struct Table {
    /// The topic's current period, seconds (NaN: not tracked).
    periods: Vec<f64>,
    /// Given to `expect`: beats do not change it.
    pinned: Vec<bool>,
    /// The grace given to `expect`, seconds (NaN: the monitor's rule, following the period).
    graces: Vec<f64>,
    paused_all: bool,
    paused_names: HashSet<String>,
}

impl Table {
    fn grow(&mut self, slot: usize) {
        if slot >= self.periods.len() {
            let n = (slot + 1)
                .max(self.periods.len() + self.periods.len() / 2)
                .max(1024);
            self.periods.resize(n, f64::NAN);
            self.pinned.resize(n, false);
            self.graces.resize(n, f64::NAN);
        }
    }
}

/// The wall clock, Unix seconds.
pub fn wall_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn slot(handle: Handle) -> usize {
    (handle & 0xFFFF_FFFF) as usize
}

fn ns(seconds: f64) -> u64 {
    (seconds * 1e9).round().max(1.0) as u64
}

/// Python's `repr` of a str: the quote it would pick, backslash escapes for the rest.
pub fn py_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `repr(text)` cut to `limit` characters: hostile names stay out of logs and events.
pub fn short(text: &str, limit: usize) -> String {
    let n = text.chars().count();
    if n <= limit {
        py_repr(text)
    } else {
        let cut: String = text.chars().take(limit).collect();
        format!("{}... ({n} characters)", py_repr(&cut))
    }
}

/// Why a topic under [`RESERVED_PREFIX`] is not watched.
fn reserved_why(name: &str) -> String {
    format!(
        "topic {} is under {}: heartwire's own topics (control messages, keep-alive pings) \
         are never beats",
        short(name, 120),
        py_repr(RESERVED_PREFIX)
    )
}

/// The intake of one monitor (see the module docs). Shared by every thread that feeds it.
pub struct Intake {
    det: Arc<Detector>,
    decoder: Decoder,
    pattern: Pattern,
    pattern_text: String,
    period: f64,
    grace: Option<f64>,
    max_topics: Option<usize>,
    max_age: MaxAge,
    running: AtomicBool,
    table: Mutex<Table>,
    replay: Mutex<ReplayGuard>,
    rejected: [AtomicU64; REASONS.len()],
    learned: AtomicU64,
    native: AtomicU64,
    deferred: AtomicU64,
    pending: Mutex<VecDeque<Refusal>>,
    has_pending: AtomicBool,
    unreported: AtomicU64,
}

impl Intake {
    /// An intake in front of `det`; `Err` names a bad setting.
    pub fn new(det: Arc<Detector>, cfg: IntakeConfig) -> Result<Self, String> {
        let pattern = Pattern::new(&cfg.pattern)
            .ok_or_else(|| format!("pattern {:?} is not a valid pattern", cfg.pattern))?;
        if !(cfg.period > 0.0 && cfg.period.is_finite()) {
            return Err(format!(
                "period must be a finite number of seconds > 0, got {}",
                cfg.period
            ));
        }
        if let Some(g) = cfg.grace {
            if !(g >= 0.0 && g.is_finite()) {
                return Err(format!(
                    "grace must be a finite number of seconds >= 0, got {g}"
                ));
            }
        }
        if let Some(k) = &cfg.key {
            if k.is_empty() {
                return Err("key must not be empty, got b''".to_owned());
            }
        }
        Ok(Self {
            det,
            decoder: Decoder::new(cfg.key.as_deref(), cfg.max_size),
            pattern,
            pattern_text: cfg.pattern,
            period: cfg.period,
            grace: cfg.grace,
            max_topics: cfg.max_topics,
            max_age: cfg.max_age,
            running: AtomicBool::new(false),
            table: Mutex::new(Table {
                periods: Vec::new(),
                pinned: Vec::new(),
                graces: Vec::new(),
                paused_all: false,
                paused_names: HashSet::new(),
            }),
            replay: Mutex::new(ReplayGuard::new()),
            rejected: Default::default(),
            learned: AtomicU64::new(0),
            native: AtomicU64::new(0),
            deferred: AtomicU64::new(0),
            pending: Mutex::new(VecDeque::new()),
            has_pending: AtomicBool::new(false),
            unreported: AtomicU64::new(0),
        })
    }

    pub fn detector(&self) -> &Arc<Detector> {
        &self.det
    }

    pub fn pattern(&self) -> &str {
        &self.pattern_text
    }

    /// Whether `topic` matches the pattern.
    pub fn matches(&self, topic: &str) -> bool {
        self.pattern.matches(topic)
    }

    pub fn set_running(&self, on: bool) {
        // Under the table lock: a learn in progress finishes under the old setting.
        let _table = self.table.lock();
        self.running.store(on, Ordering::SeqCst);
    }

    pub fn running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Pause (or not) every topic learned from now on. The monitor pauses the topics it has
    /// after setting this: a learn either comes before (and is among them) or sees it.
    pub fn set_paused_all(&self, on: bool) {
        self.table.lock().paused_all = on;
    }

    pub fn paused_all(&self) -> bool {
        self.table.lock().paused_all
    }

    /// Note `name` as paused one by one (kept while it is not watched); false if it was.
    pub fn pause_name(&self, name: &str) -> bool {
        self.table.lock().paused_names.insert(name.to_owned())
    }

    /// Forget `name` as paused one by one; false if it was not.
    pub fn unpause_name(&self, name: &str) -> bool {
        self.table.lock().paused_names.remove(name)
    }

    pub fn is_paused_name(&self, name: &str) -> bool {
        self.table.lock().paused_names.contains(name)
    }

    pub fn paused_names(&self) -> Vec<String> {
        self.table.lock().paused_names.iter().cloned().collect()
    }

    /// The grace a topic with `period` gets by the monitor's rule, seconds.
    fn grace_for(&self, period: f64) -> f64 {
        self.grace.unwrap_or(period * 0.1)
    }

    // -- refusals ---------------------------------------------------------------------------

    /// Count a refusal and keep its details for the monitor (the first [`PENDING_LIMIT`]).
    pub fn refuse(&self, reason: &'static str, detail: impl FnOnce() -> String) {
        let count = self.rejected[reason_index(reason)].fetch_add(1, Ordering::Relaxed) + 1;
        let mut pending = self.pending.lock();
        if pending.len() >= PENDING_LIMIT {
            self.unreported.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.push_back(Refusal {
            reason,
            detail: detail(),
            count,
        });
        self.has_pending.store(true, Ordering::Release);
    }

    /// Whether refusals wait to be taken (a cheap check).
    pub fn has_pending(&self) -> bool {
        self.has_pending.load(Ordering::Acquire)
    }

    /// The refusals kept since the last call, oldest first.
    pub fn take_refusals(&self) -> Vec<Refusal> {
        let mut pending = self.pending.lock();
        self.has_pending.store(false, Ordering::Release);
        pending.drain(..).collect()
    }

    /// Refused beats by reason (reasons never seen left out).
    pub fn rejected(&self) -> Vec<(&'static str, u64)> {
        REASONS
            .iter()
            .zip(&self.rejected)
            .map(|(r, n)| (*r, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// (learned topics, beats decoded natively, bodies deferred to Python, refusals not kept).
    pub fn counters(&self) -> (u64, u64, u64, u64) {
        (
            self.learned.load(Ordering::Relaxed),
            self.native.load(Ordering::Relaxed),
            self.deferred.load(Ordering::Relaxed),
            self.unreported.load(Ordering::Relaxed),
        )
    }

    // -- topics -----------------------------------------------------------------------------

    /// Watch `name` (the caller checked it is valid and matches): a new topic gets the given
    /// settings (defaults: the monitor's); a known one changes the given ones. A given period
    /// is pinned (beats do not change it), a given grace kept.
    pub fn expect(
        &self,
        name: &str,
        period: Option<f64>,
        allowed_misses: Option<u32>,
        phi: Option<PhiConfig>,
        grace: Option<f64>,
        now: Option<u64>,
    ) -> Result<Handle, String> {
        if reserved_topic(name) {
            return Err(reserved_why(name));
        }
        let mut table = self.table.lock();
        let handle = match self.det.lookup_handle(name) {
            None => self.add_locked(&mut table, name, period, allowed_misses, phi, grace, now)?,
            Some(handle) => {
                let s = slot(handle);
                table.grow(s);
                let mut given = grace;
                if given.is_none() && period.is_some() && table.graces[s].is_nan() {
                    given = period.map(|p| self.grace_for(p)); // the rule follows the new period
                }
                if period.is_some() || allowed_misses.is_some() || phi.is_some() || given.is_some()
                {
                    let mut config = self.det.config(handle).map_err(|e| e.to_string())?;
                    if let Some(p) = period {
                        config.period_ns = ns(p);
                    }
                    if let Some(n) = allowed_misses {
                        config.allowed_misses = n;
                    }
                    if phi.is_some() {
                        config.phi = phi;
                    }
                    if let Some(g) = given {
                        config.grace_ns = (g * 1e9).round() as u64;
                    }
                    self.det
                        .set_config(handle, config, now)
                        .map_err(|e| e.to_string())?;
                }
                if let Some(p) = period {
                    table.periods[s] = p;
                }
                if let Some(g) = grace {
                    table.graces[s] = g;
                }
                handle
            }
        };
        if period.is_some() {
            table.pinned[slot(handle)] = true;
        }
        Ok(handle)
    }

    #[allow(clippy::too_many_arguments)]
    fn add_locked(
        &self,
        table: &mut Table,
        name: &str,
        period: Option<f64>,
        allowed_misses: Option<u32>,
        phi: Option<PhiConfig>,
        grace: Option<f64>,
        now: Option<u64>,
    ) -> Result<Handle, String> {
        let effective = period.unwrap_or(self.period);
        let mut config = self.det.defaults();
        config.period_ns = ns(effective);
        if let Some(n) = allowed_misses {
            config.allowed_misses = n;
        }
        config.phi = phi;
        config.grace_ns = (grace.unwrap_or_else(|| self.grace_for(effective)) * 1e9).round() as u64;
        let handle = self
            .det
            .add_handle(name, Some(config), now)
            .map_err(|e| e.to_string())?;
        let s = slot(handle);
        table.grow(s);
        table.periods[s] = effective;
        table.pinned[s] = false;
        table.graces[s] = grace.unwrap_or(f64::NAN);
        if self.running() && (table.paused_all || table.paused_names.contains(name)) {
            let _ = self.det.pause(handle);
        }
        Ok(handle)
    }

    /// Stop watching `name`; false if it was not watched. Its boots are forgotten.
    pub fn remove(&self, name: &str) -> bool {
        let mut table = self.table.lock();
        let Some(handle) = self.det.lookup_handle(name) else {
            return false;
        };
        if self.det.remove(handle).is_err() {
            return false;
        }
        table.paused_names.remove(name);
        // Under the replay lock after the removal: a beat admitted for the old handle either
        // came before (forgotten here) or finds the topic gone (see `admit_signed`).
        self.replay.lock().forget(handle);
        true
    }

    /// A new topic first heard now, or None if refused (counted).
    fn learn(&self, name: &str, period: Option<f64>, now: u64) -> Option<Handle> {
        let mut table = self.table.lock();
        if let Some(handle) = self.det.lookup_handle(name) {
            return Some(handle);
        }
        if !self.running() {
            return None;
        }
        if reserved_topic(name) {
            drop(table);
            self.refuse("bad_topic", || reserved_why(name));
            return None;
        }
        if !self.pattern.matches(name) {
            drop(table);
            self.refuse("pattern_mismatch", || {
                format!(
                    "{} is not in {}",
                    short(name, 120),
                    py_repr(&self.pattern_text)
                )
            });
            return None;
        }
        if let Some(max) = self.max_topics {
            let n = self.det.len();
            if n >= max {
                drop(table);
                self.refuse("too_many_topics", || {
                    format!(
                        "beat for {} refused: the monitor already has {n} topics (max_topics={max})",
                        short(name, 120)
                    )
                });
                return None;
            }
        }
        // With the period the beat carries (not pinned: later beats may change it).
        match self.add_locked(&mut table, name, period, None, None, None, Some(now)) {
            Ok(handle) => {
                self.learned.fetch_add(1, Ordering::Relaxed);
                Some(handle)
            }
            Err(why) => {
                drop(table);
                self.refuse("bad_topic", || format!("{}: {why}", short(name, 120)));
                None
            }
        }
    }

    // -- beats ------------------------------------------------------------------------------

    /// Decode and record one message body that arrived on `destination` (a topic). (The
    /// callers use [`ingest_counted`](Intake::ingest_counted), which takes the shard too.)
    #[cfg(test)]
    pub fn ingest(&self, body: &[u8], destination: Option<&str>, now: Option<u64>) -> Outcome {
        self.ingest_counted(body, destination, now, true, None)
    }

    /// [`ingest`](Intake::ingest); `count_defer`: count a deferred body (the socket reader
    /// does not: the body reaches the monitor's Python path, which counts it there);
    /// `in_shard`: the beat came from that shard's queue.
    pub fn ingest_counted(
        &self,
        body: &[u8],
        destination: Option<&str>,
        now: Option<u64>,
        count_defer: bool,
        in_shard: Option<InShard>,
    ) -> Outcome {
        match self.decoder.decode(body, destination) {
            Decoded::Beat(beat) => {
                self.native.fetch_add(1, Ordering::Relaxed);
                self.record_in(&beat, now, in_shard)
            }
            Decoded::Reject { reason, detail } => {
                self.native.fetch_add(1, Ordering::Relaxed);
                let place = destination.map_or_else(|| "?".to_owned(), |d| short(d, 120));
                self.refuse(reason, || format!("message to {place}: {reason}: {detail}"));
                Outcome::Refused
            }
            Decoded::Defer => {
                if count_defer {
                    self.deferred.fetch_add(1, Ordering::Relaxed);
                }
                Outcome::Defer
            }
        }
    }

    /// Record a decoded beat by the rules in the module docs (no shard: [`record_in`]'s).
    ///
    /// [`record_in`]: Intake::record_in
    #[cfg(test)]
    pub fn record(&self, beat: &Beat<'_>, now: Option<u64>) -> Outcome {
        self.record_in(beat, now, None)
    }

    /// [`record`](Intake::record) a beat that came from the shard queue `in_shard` (if any).
    pub fn record_in(
        &self,
        beat: &Beat<'_>,
        now: Option<u64>,
        in_shard: Option<InShard>,
    ) -> Outcome {
        let topic = beat.topic;
        if let Some(p) = beat.period {
            if !(MIN_BEAT_PERIOD..=MAX_BEAT_PERIOD).contains(&p) {
                self.refuse("bad_period", || {
                    format!(
                        "beat for {} carries the period {p:?} s; accepted: {MIN_BEAT_PERIOD} to {MAX_BEAT_PERIOD:e} s",
                        short(topic, 120)
                    )
                });
                return Outcome::Refused;
            }
        }
        if !self.running() {
            return Outcome::Refused; // not recorded while stopped: nor may it re-tune its topic
        }
        if let Some(expected) = in_shard {
            // (heartwire's own topics are in no shard: refused below as ever, `bad_topic`.)
            if !reserved_topic(topic) && !self.in_shard(topic, expected) {
                return Outcome::Refused;
            }
        }
        let now = now.unwrap_or_else(|| self.det.now_ns());
        let mut handle = self.det.lookup_handle(topic);
        let signed = self.decoder.signed();
        if signed {
            if let Some(sent) = beat.sent {
                if !self.fresh(handle, topic, sent) {
                    return Outcome::Refused;
                }
            }
        }
        let handle = match handle.take() {
            Some(h) => h,
            // A topic not watched yet has no remembered boots, so the replay check below
            // cannot refuse this beat: learning it first changes nothing a refusal should undo.
            None => match self.learn(topic, beat.period, now) {
                Some(h) => h,
                None => return Outcome::Refused,
            },
        };
        if signed {
            if let (Some(seq), Some(boot)) = (beat.seq, beat.boot.as_deref()) {
                if let Err(why) = self.admit_signed(handle, topic, boot, seq, beat.sent) {
                    self.refuse("replayed", || {
                        format!("beat for {} replayed: {why}", short(topic, 120))
                    });
                    return Outcome::Refused;
                }
            }
        }
        if let Some(p) = beat.period {
            self.retune(handle, p, now);
        }
        if beat.down {
            // Rare: takes the detector lock (an up beat never comes here).
            let reason = beat.reason.as_deref().unwrap_or(DEFAULT_DOWN_REASON);
            self.det.down(handle, Some(now), reason);
            return Outcome::Recorded { sent: beat.sent };
        }
        let latency = match beat.sent {
            Some(sent) => ((wall_now() - sent) * 1e9).round() as i64,
            None => NO_LATENCY,
        };
        self.record_handle(handle, now, beat.seq.unwrap_or(NO_SEQ), latency);
        Outcome::Recorded { sent: beat.sent }
    }

    /// The detector's record of a beat for `handle`, with its `resumed`/`received` events.
    /// May wait (for room in a full `block` queue) without holding any intake lock.
    fn record_handle(&self, handle: Handle, now: u64, seq: u64, latency: i64) -> bool {
        let result = self.det.record_handle(handle, now);
        if self.det.needs_completion(result) {
            self.det.complete(handle, result, now, seq, latency);
        }
        matches!(result, Recorded::Recorded { .. })
    }

    /// Whether `topic` is in the shard `expected`; refused (`wrong_shard`) if not.
    fn in_shard(&self, topic: &str, expected: InShard) -> bool {
        let InShard { shards, shard } = expected;
        let actual = shard_of(topic, shards);
        if actual == shard {
            return true;
        }
        self.refuse("wrong_shard", || {
            format!(
                "beat for {} refused: its topic is in shard {actual} of {shards}, not in shard \
                 {shard}, whose queue it came on (a publisher with another shard count, a forged \
                 heartwire-shard header, or a beat sent to another shard's queue)",
                short(topic, 120)
            )
        });
        false
    }

    /// Whether a signed beat sent at `sent` is within the allowed age; refused if not.
    fn fresh(&self, handle: Option<Handle>, topic: &str, sent: f64) -> bool {
        let allowance = match self.max_age {
            MaxAge::Unbounded => return true,
            MaxAge::Seconds(s) => s,
            MaxAge::Default => {
                let mut period = self.period;
                if let Some(h) = handle {
                    let table = self.table.lock();
                    if let Some(p) = table.periods.get(slot(h)) {
                        if !p.is_nan() {
                            period = *p;
                        }
                    }
                }
                BEAT_AGE_PERIODS * period + BEAT_AGE_SKEW
            }
        };
        let age = wall_now() - sent;
        if age.abs() <= allowance {
            return true;
        }
        self.refuse("stale", || {
            let when = if age > 0.0 {
                format!("{age:.3} s before")
            } else {
                format!("{:.3} s after", -age)
            };
            format!(
                "beat for {} refused: sent {when} the monitor's wall clock, more than \
                 max_beat_age {allowance} s (a replayed old beat, or the publisher's clock is wrong)",
                short(topic, 120)
            )
        });
        false
    }

    /// The replay check of a signed beat (remembered if taken, while `handle` is still the
    /// topic's: `remove` forgets under the same lock after removing, so a beat racing a
    /// removal leaves nothing behind).
    fn admit_signed(
        &self,
        handle: Handle,
        topic: &str,
        boot: &str,
        seq: u64,
        sent: Option<f64>,
    ) -> Result<(), String> {
        let mut replay = self.replay.lock();
        if self.det.lookup_handle(topic) != Some(handle) {
            return Ok(()); // removed meanwhile: its record is refused by the detector
        }
        replay.admit(handle, boot, seq, sent)
    }

    /// Re-tune a learned topic whose beats carry another period than its own.
    fn retune(&self, handle: Handle, period: f64, now: u64) {
        let s = slot(handle);
        let mut table = self.table.lock();
        if s >= table.periods.len() || table.pinned[s] || table.periods[s] == period {
            return;
        }
        let grace = if table.graces[s].is_nan() {
            self.grace_for(period)
        } else {
            table.graces[s]
        };
        let Ok(mut config) = self.det.config(handle) else {
            return; // removed meanwhile
        };
        config.period_ns = ns(period);
        config.grace_ns = (grace * 1e9).round() as u64;
        if self.det.set_config(handle, config, Some(now)).is_ok() {
            table.periods[s] = period;
        }
    }

    /// A beat for `name` from the application; an unknown valid name matching the pattern is
    /// learned with the default period. `Err` for an invalid name. True if recorded.
    pub fn beat_name(
        &self,
        name: &str,
        seq: u64,
        latency: i64,
        now: Option<u64>,
    ) -> Result<bool, String> {
        let now = now.unwrap_or_else(|| self.det.now_ns());
        let handle = match self.det.lookup_handle(name) {
            Some(h) => h,
            None => {
                if !valid_topic(name) {
                    return Err(format!(
                        "topic {} is not a valid topic name; expected '.'-separated segments \
                         of letters, digits, '_', '-' and ':'",
                        short(name, 120)
                    ));
                }
                match self.learn(name, None, now) {
                    Some(h) => h,
                    None => return Ok(false),
                }
            }
        };
        Ok(self.record_handle(handle, now, seq, latency))
    }

    /// One beat for each name; unknown valid names matching the pattern are learned, invalid
    /// ones refused (`bad_topic`). How many were recorded.
    pub fn beat_names<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        now: Option<u64>,
    ) -> usize {
        if !self.running() {
            return 0; // nothing recorded, learned or refused while stopped
        }
        let now = now.unwrap_or_else(|| self.det.now_ns());
        let mut recorded = 0;
        for name in names {
            let handle = match self.det.lookup_handle(name) {
                Some(h) => h,
                None => {
                    if !valid_topic(name) {
                        self.refuse("bad_topic", || {
                            format!("{} is not a valid topic name", short(name, 120))
                        });
                        continue;
                    }
                    match self.learn(name, None, now) {
                        Some(h) => h,
                        None => continue,
                    }
                }
            };
            recorded += self.record_handle(handle, now, NO_SEQ, NO_LATENCY) as usize;
        }
        recorded
    }

    /// The topic's tracked period, pinned flag and given grace (tests, status).
    pub fn tracked(&self, handle: Handle) -> Option<(f64, bool, f64)> {
        let table = self.table.lock();
        let s = slot(handle);
        (s < table.periods.len()).then(|| (table.periods[s], table.pinned[s], table.graces[s]))
    }

    /// Bytes held by the intake's own tables.
    pub fn heap_bytes(&self) -> usize {
        let table = self.table.lock();
        table.periods.capacity() * 17 + self.replay.lock().heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ClockSource, ManualClock};
    use crate::detector::TopicConfig;

    fn intake(key: Option<&[u8]>) -> (Arc<Detector>, Intake, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(0));
        let det = Detector::new(
            ClockSource::Manual(clock.clone()),
            TopicConfig::fixed(1_000_000_000, 1),
            1_000_000,
        )
        .unwrap();
        let intake = Intake::new(
            det.clone(),
            IntakeConfig {
                pattern: "svc.>".into(),
                period: 1.0,
                grace: None,
                max_topics: Some(3),
                max_age: MaxAge::Unbounded,
                key: key.map(|k| k.to_vec()),
                max_size: 65536,
            },
        )
        .unwrap();
        intake.set_running(true);
        (det, intake, clock)
    }

    fn beat(topic: &str) -> Beat<'_> {
        Beat {
            topic,
            seq: None,
            boot: None,
            sent: None,
            period: None,
            legacy: false,
            down: false,
            reason: None,
        }
    }

    #[test]
    fn learns_matching_topics_with_their_period_up_to_max_topics() {
        let (det, intake, _) = intake(None);
        let b = Beat {
            period: Some(2.0),
            ..beat("svc.a")
        };
        assert!(matches!(intake.record(&b, None), Outcome::Recorded { .. }));
        let h = det.lookup_handle("svc.a").unwrap();
        assert_eq!(det.config(h).unwrap().period_ns, 2_000_000_000);
        assert_eq!(det.config(h).unwrap().grace_ns, 200_000_000);
        assert_eq!(intake.record(&beat("other.a"), None), Outcome::Refused);
        assert!(matches!(
            intake.record(&beat("svc.b"), None),
            Outcome::Recorded { .. }
        ));
        assert!(matches!(
            intake.record(&beat("svc.c"), None),
            Outcome::Recorded { .. }
        ));
        assert_eq!(intake.record(&beat("svc.d"), None), Outcome::Refused);
        let reasons: Vec<_> = intake.take_refusals().iter().map(|r| r.reason).collect();
        assert_eq!(reasons, ["pattern_mismatch", "too_many_topics"]);
        assert_eq!(intake.counters().0, 3);
    }

    #[test]
    fn a_beat_of_another_shard_is_refused_before_anything_changes() {
        let (det, intake, _) = intake(None);
        let of = |k: u32| {
            (0..)
                .map(|i| format!("svc.{i}"))
                .find(|t| shard_of(t, 4) == k)
                .unwrap()
        };
        let (own, stray) = (of(1), of(2));
        let queue = Some(InShard {
            shards: 4,
            shard: 1,
        });
        let b = Beat {
            period: Some(2.0),
            ..beat(&own)
        };
        assert!(matches!(
            intake.record_in(&b, None, queue),
            Outcome::Recorded { .. }
        ));
        // Learned or not, a topic of shard 2 is refused on shard 1's queue, and re-tunes nothing.
        for _ in 0..2 {
            let b = Beat {
                period: Some(5.0),
                ..beat(&stray)
            };
            assert_eq!(intake.record_in(&b, None, queue), Outcome::Refused);
            assert!(det.lookup_handle(&stray).is_none());
        }
        let b = Beat {
            period: Some(5.0),
            ..beat(&own)
        };
        assert!(matches!(
            intake.record(&beat(&stray), None),
            Outcome::Recorded { .. }
        ));
        let h = det.lookup_handle(&stray).unwrap();
        assert_eq!(
            intake.record_in(
                &b,
                None,
                Some(InShard {
                    shards: 4,
                    shard: 3
                })
            ),
            Outcome::Refused
        );
        assert_eq!(
            intake.record_in(
                &Beat {
                    period: Some(5.0),
                    ..beat(&stray)
                },
                None,
                queue
            ),
            Outcome::Refused
        );
        assert_eq!(det.config(h).unwrap().period_ns, 1_000_000_000); // not re-tuned to 5 s
        let refused = intake.take_refusals();
        let reasons: Vec<_> = refused.iter().map(|r| (r.reason, r.count)).collect();
        assert_eq!(
            reasons,
            [
                ("wrong_shard", 1),
                ("wrong_shard", 2),
                ("wrong_shard", 3),
                ("wrong_shard", 4)
            ]
        );
        assert!(
            refused[0]
                .detail
                .contains("in shard 2 of 4, not in shard 1"),
            "{}",
            refused[0].detail
        );
        assert_eq!(intake.rejected(), [("wrong_shard", 4)]);
        // The same body through the decoder: refused on the wrong queue, taken on its own.
        let body = format!("{{\"v\":1,\"topic\":\"{own}\"}}");
        let wrong = Some(InShard {
            shards: 4,
            shard: 0,
        });
        assert_eq!(
            intake.ingest_counted(body.as_bytes(), None, None, true, wrong),
            Outcome::Refused
        );
        assert!(matches!(
            intake.ingest_counted(body.as_bytes(), None, None, true, queue),
            Outcome::Recorded { .. }
        ));
    }

    #[test]
    fn reserved_topics_are_never_learned_or_expected_whatever_the_pattern() {
        let clock = Arc::new(ManualClock::new(0));
        let det = Detector::new(
            ClockSource::Manual(clock),
            TopicConfig::fixed(1_000_000_000, 1),
            1_000_000,
        )
        .unwrap();
        let intake = Intake::new(
            det.clone(),
            IntakeConfig {
                pattern: ">".into(),
                period: 1.0,
                grace: None,
                max_topics: None,
                max_age: MaxAge::Unbounded,
                key: None,
                max_size: 65536,
            },
        )
        .unwrap();
        intake.set_running(true);
        assert_eq!(intake.record(&beat("_hw.control"), None), Outcome::Refused);
        assert_eq!(
            intake.beat_name("_hw.ping", NO_SEQ, NO_LATENCY, None),
            Ok(false)
        );
        assert_eq!(intake.beat_names(["_hw.a", "svc._hw", "_hw.b"], None), 1);
        let why = intake
            .expect("_hw.control", None, None, None, None, None)
            .unwrap_err();
        assert!(why.contains("'_hw.control' is under '_hw.'"), "{why}");
        assert_eq!(det.len(), 1); // svc._hw: only the prefix is reserved
        let refusals = intake.take_refusals();
        let reasons: Vec<_> = refusals.iter().map(|r| r.reason).collect();
        assert_eq!(reasons, ["bad_topic"; 4]);
        assert!(
            refusals[0].detail.contains("'_hw.control'"),
            "{}",
            refusals[0].detail
        );
        assert_eq!(intake.counters().0, 1);
    }

    #[test]
    fn a_pinned_period_is_not_retuned_and_a_learned_one_is() {
        let (det, intake, _) = intake(None);
        let h = intake
            .expect("svc.p", Some(5.0), None, None, None, None)
            .unwrap();
        intake.record(
            &Beat {
                period: Some(1.0),
                ..beat("svc.p")
            },
            None,
        );
        assert_eq!(det.config(h).unwrap().period_ns, 5_000_000_000);
        intake.record(&beat("svc.l"), None);
        let l = det.lookup_handle("svc.l").unwrap();
        intake.record(
            &Beat {
                period: Some(3.0),
                ..beat("svc.l")
            },
            None,
        );
        assert_eq!(det.config(l).unwrap().period_ns, 3_000_000_000);
        assert_eq!(
            det.config(l).unwrap().grace_ns,
            300_000_000,
            "the grace rule follows"
        );
    }

    #[test]
    fn nothing_is_recorded_or_learned_while_stopped() {
        let (det, intake, _) = intake(None);
        intake.set_running(false);
        assert_eq!(intake.record(&beat("svc.a"), None), Outcome::Refused);
        assert_eq!(det.len(), 0);
        assert!(intake.take_refusals().is_empty(), "ignored, not refused");
    }

    #[test]
    fn a_bad_period_is_refused_before_anything_changes() {
        let (det, intake, _) = intake(None);
        assert_eq!(
            intake.record(
                &Beat {
                    period: Some(1e-9),
                    ..beat("svc.a")
                },
                None
            ),
            Outcome::Refused
        );
        assert_eq!(det.len(), 0);
        assert_eq!(intake.rejected(), vec![("bad_period", 1)]);
    }

    #[test]
    fn replays_are_refused_and_forgotten_with_the_topic() {
        let (det, intake, _) = intake(Some(b"k"));
        let b = Beat {
            seq: Some(5),
            boot: Some("x".into()),
            ..beat("svc.a")
        };
        assert!(matches!(intake.record(&b, None), Outcome::Recorded { .. }));
        assert_eq!(intake.record(&b, None), Outcome::Refused);
        assert!(intake.remove("svc.a"));
        assert!(det.lookup_handle("svc.a").is_none());
        assert!(
            matches!(intake.record(&b, None), Outcome::Recorded { .. }),
            "relearned afresh"
        );
    }

    #[test]
    fn pending_refusals_are_bounded_and_the_rest_counted() {
        let (_, intake, _) = intake(None);
        for _ in 0..PENDING_LIMIT + 5 {
            intake.record(&beat("other.x"), None);
        }
        assert_eq!(intake.take_refusals().len(), PENDING_LIMIT);
        assert_eq!(intake.counters().3, 5);
        assert_eq!(
            intake.rejected(),
            vec![("pattern_mismatch", (PENDING_LIMIT + 5) as u64)]
        );
    }

    /// Failed events popped from `q`, with their reasons.
    fn failures(
        det: &Detector,
        q: &crate::queue::EventQueue<crate::event::Event>,
    ) -> Vec<(u32, Option<String>)> {
        let mut out = Vec::new();
        q.try_pop_batch(&mut out, usize::MAX);
        out.iter()
            .filter(|e| e.kind == crate::event::EventKind::Failed)
            .map(|e| (e.missed, det.reason_of(e).map(|r| r.to_string())))
            .collect()
    }

    #[test]
    fn a_down_beat_fails_its_topic_at_once_from_any_beat_without_a_key() {
        let (det, intake, _) = intake(None);
        let q = det
            .subscribe(64, crate::queue::Overflow::DropOldest, false)
            .unwrap();
        let up = br#"{"v":1,"topic":"svc.d"}"#;
        assert!(matches!(
            intake.ingest(up, None, None),
            Outcome::Recorded { .. }
        ));
        let down = br#"{"v":1,"topic":"svc.d","state":"down","reason":"db gone"}"#;
        assert!(matches!(
            intake.ingest(down, None, None),
            Outcome::Recorded { .. }
        ));
        assert_eq!(failures(&det, &q), vec![(0, Some("db gone".into()))]);
        // No reason given: the default one.
        let bare = br#"{"v":1,"topic":"svc.e","state":"down"}"#;
        intake.ingest(bare, None, None);
        assert_eq!(
            failures(&det, &q),
            vec![(0, Some(DEFAULT_DOWN_REASON.into()))]
        );
    }

    #[test]
    fn a_keyed_monitor_honours_down_only_from_signed_beats() {
        use hmac::{Hmac, Mac};
        let (det, intake, _) = intake(Some(b"k"));
        let q = det
            .subscribe(64, crate::queue::Overflow::DropOldest, false)
            .unwrap();
        let unsigned = br#"{"reason":"x","state":"down","topic":"svc.d","v":1}"#;
        assert_eq!(intake.ingest(unsigned, None, None), Outcome::Refused);
        assert_eq!(intake.rejected(), vec![("unsigned", 1)]);
        let forged = br#"{"reason":"x","state":"down","topic":"svc.d","v":1,"sig":"00000000000000000000000000000000000000000000000000000000000000ab"}"#;
        assert_eq!(intake.ingest(forged, None, None), Outcome::Refused);
        assert!(det.lookup_handle("svc.d").is_none(), "nothing learned");
        assert!(failures(&det, &q).is_empty());
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"k").unwrap();
        mac.update(unsigned);
        let sig: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let signed =
            format!(r#"{{"reason":"x","state":"down","topic":"svc.d","v":1,"sig":"{sig}"}}"#);
        assert!(matches!(
            intake.ingest(signed.as_bytes(), None, None),
            Outcome::Recorded { .. }
        ));
        assert_eq!(failures(&det, &q), vec![(0, Some("x".into()))]);
    }

    #[test]
    fn a_topic_learned_while_paused_is_paused() {
        let (det, intake, _) = intake(None);
        intake.pause_name("svc.n");
        intake.record(&beat("svc.n"), None);
        let h = det.lookup_handle("svc.n").unwrap();
        assert_eq!(det.status(h).unwrap().state, crate::word::State::Paused);
        intake.set_paused_all(true);
        intake.record(&beat("svc.m"), None);
        let m = det.lookup_handle("svc.m").unwrap();
        assert_eq!(det.status(m).unwrap().state, crate::word::State::Paused);
    }
}
