//! Taking topics over from another monitor (a group's takeover, `docs/groups-design.md` §3).
//!
//! A topic taken over gets either a **fresh start** (as [`Detector::add`]: a full first
//! period from the takeover, the local-pause guard's rule) or its **outage carried over**:
//! FAILED at once *without* a `failed` event (the old owner handed that one out), its count and
//! `since` kept, the next missed period one step after the takeover (`failed(missed + 1)`, same
//! `since`), and the first beat after the takeover a `resumed` whose downtime runs from the
//! original `since`: what a FAILED topic paused and resumed does (`topics.rs::resume_locked`).
//!
//! `since` is absolute clock ns (as in events; the slot keeps it so too, see [`Slot::since`]),
//! so an outage that began before this detector's epoch is held exactly. The alerting marks
//! say what the old owner's listeners were told (`policy.rs`'s `Outage`): alerted, or only
//! marked events (silenced, suppressed by a parent); a flapping topic goes on flapping here,
//! settling one window after the takeover.

use super::policy::Outage;
use super::*;
use crate::event::NO_TOPIC;
use crate::ingest::beat::MAX_REASON_LEN;
use crate::registry::MAX_NAME_LEN;

/// What the old owner's listeners were told of a topic (see `policy.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    /// A `failed` of the outage went out unmarked: no alert is owed. Otherwise only marked
    /// ones did (`silenced`, `suppressed_by`), and the outage alerts here once it would be
    /// unmarked (a silence ends, the parent comes back), or at its next missed period if this
    /// detector marks it no more.
    pub alerted: bool,
    /// The outage's events went out marked silenced.
    pub silenced: bool,
    /// The outage's events went out suppressed by this parent topic (None: not suppressed).
    pub suppressed_by: Option<String>,
    /// The topic flaps: it goes on flapping here (events held back under `hold`) and settles
    /// one flap window after the takeover. Only with flapping detection on
    /// ([`Detector::set_flapping`]); ignored otherwise.
    pub flapping: bool,
}

impl Marks {
    /// Alerted, no other mark: the common case (the old owner's `failed` went out as is).
    pub fn alerted() -> Self {
        Self {
            alerted: true,
            ..Self::default()
        }
    }
}

/// An outage carried over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Carried {
    /// When the outage began, absolute clock ns (may be before this detector's epoch; not
    /// after the takeover).
    pub since_ns: u64,
    /// Periods missed so far (>= 1).
    pub missed: u32,
    /// An explicit failure's reason (the sender said `down`): the outage's `failed` events go
    /// on carrying it, one at every missed period as after a `down` beat (1 to
    /// [`MAX_REASON_LEN`] characters). None: a failure by missed periods.
    pub reason: Option<String>,
    pub marks: Marks,
}

/// One topic taken over.
#[derive(Clone, Debug, PartialEq)]
pub struct Adoption<'a> {
    pub name: &'a str,
    /// Its config (None: a known topic keeps its own, a new one gets the defaults).
    pub config: Option<TopicConfig>,
    /// None: a fresh start. Some: FAILED, carried over.
    pub failed: Option<Carried>,
    /// Flapping carried over for a topic that is up (a FAILED one's is in its marks).
    pub flapping: bool,
}

impl<'a> Adoption<'a> {
    /// A fresh start for `name`.
    pub fn fresh(name: &'a str) -> Self {
        Self {
            name,
            config: None,
            failed: None,
            flapping: false,
        }
    }

    /// `name` FAILED since `since_ns` (absolute), `missed` periods, alerted.
    pub fn failed(name: &'a str, since_ns: u64, missed: u32) -> Self {
        Self {
            failed: Some(Carried {
                since_ns,
                missed,
                reason: None,
                marks: Marks::alerted(),
            }),
            ..Self::fresh(name)
        }
    }

    fn flaps(&self) -> bool {
        self.failed
            .as_ref()
            .map_or(self.flapping, |c| c.marks.flapping)
    }
}

impl Detector {
    /// Take `topics` over at `now` (absolute ns; None: the clock), all under one hold of the
    /// detector lock; returns their handles in order. Every row is checked first: a bad one
    /// (named by its index) changes nothing. A name already known keeps its id and is not
    /// re-armed (its beats are being heard here already); with an outage carried, it:
    /// - is FAILED here already: kept as it is (this detector's outage wins);
    /// - was heard here after `since` (a beat taken over before the snapshot was read): the
    ///   outage is over, `resumed(missed)` is emitted at that beat with the downtime from
    ///   `since`, marked as the carried outage was;
    /// - else: FAILED as a new one would be.
    ///
    /// A fresh start for a known topic paused leaves it paused.
    ///
    /// Refused (`Invalid`): an empty or too long name, `missed` 0, `since` after `now`, a
    /// `suppressed_by` that is no topic name, an outage carried to a known topic paused, a
    /// stopped detector.
    pub fn adopt(
        &self,
        topics: &[Adoption<'_>],
        now: Option<u64>,
    ) -> Result<Vec<Handle>, DetectorError> {
        let now_abs = now.unwrap_or_else(|| self.clock.now_ns());
        for (i, t) in topics.iter().enumerate() {
            Self::check_adoption(i, t, now_abs)?;
        }
        let now = self.rel(now_abs);
        self.emitting(|inner, subs| {
            if !inner.running {
                return Err(DetectorError::Invalid(
                    "cannot adopt topics while the detector is stopped".to_owned(),
                ));
            }
            for (i, t) in topics
                .iter()
                .enumerate()
                .filter(|(_, t)| t.failed.is_some())
            {
                let Some(id) = self.registry.lookup(t.name) else {
                    continue;
                };
                if word::state(self.word(id).load(Ordering::Acquire)).is_paused() {
                    return Err(DetectorError::Invalid(format!(
                        "topics[{i}]: {:?} is paused: resume it before adopting it",
                        t.name
                    )));
                }
            }
            let now = now.max(inner.now); // never armed before the last run
            let flaps = inner.policy.flaps_on();
            if flaps && topics.iter().any(Adoption::flaps)
                || topics
                    .iter()
                    .any(|t| t.failed.as_ref().is_some_and(|c| !c.marks.alerted))
            {
                self.activate(inner);
            }
            let mut handles = Vec::with_capacity(topics.len());
            for t in topics {
                let id = self.add_locked(inner, t.name, t.config, now)?;
                if let Some(carried) = &t.failed {
                    self.carry(inner, subs, id, carried, now);
                }
                if flaps && t.flaps() {
                    inner.policy.carry_flapping(id, now);
                }
                handles.push(self.handle_of(id));
            }
            Ok(handles)
        })
    }

    /// The marks of every topic whose marks are not an alerted outage's or nothing (what a
    /// snapshot carries for [`adopt`](Detector::adopt) on another monitor), in id order:
    /// FAILED topics whose listeners were told only marked events (or none, all held back
    /// while flapping), and flapping topics. Empty while no silence, dependency or flapping
    /// was ever declared (then every FAILED topic was alerted). The parent is a name.
    pub fn marks(&self) -> Vec<(Handle, Marks)> {
        let inner = self.inner.lock();
        if inner.policy.is_idle() {
            return Vec::new();
        }
        let flapping = inner.policy.flapping_ids();
        let mut out = Vec::new();
        for id in 0..inner.slots.len() as TopicId {
            let state = word::state(self.word(id).load(Ordering::Acquire));
            let failed = matches!(state, State::Failed | State::PausedFailed);
            let flaps = flapping.contains(&id);
            let outage = inner.policy.outage(id);
            if state == State::Removed || !(flaps || failed && outage != Outage::Alerted) {
                continue;
            }
            let mut marks = Marks {
                flapping: flaps,
                alerted: !failed || outage == Outage::Alerted,
                ..Marks::default()
            };
            if let (true, Outage::Quiet { silenced, by }) = (failed, outage) {
                marks.silenced = silenced;
                marks.suppressed_by = (by != NO_TOPIC).then(|| self.registry.name(by));
            }
            out.push((self.handle_of(id), marks));
        }
        out
    }

    fn check_adoption(i: usize, t: &Adoption<'_>, now_abs: u64) -> Result<(), DetectorError> {
        let bad = |what: String| Err(DetectorError::Invalid(format!("topics[{i}]: {what}")));
        if t.name.is_empty() || t.name.len() > MAX_NAME_LEN {
            return bad(format!(
                "the name must be 1 to {MAX_NAME_LEN} bytes long, got {}",
                t.name.len()
            ));
        }
        if let Some(c) = &t.config {
            c.validate()
                .map_err(|e| DetectorError::Invalid(format!("topics[{i}] ({:?}): {e}", t.name)))?;
        }
        let Some(c) = &t.failed else {
            return Ok(());
        };
        if c.missed == 0 {
            return bad(format!(
                "{:?}: missed must be >= 1 for a FAILED topic, got 0",
                t.name
            ));
        }
        if c.since_ns > now_abs {
            return bad(format!(
                "{:?}: since ({} ns) is after the takeover ({now_abs} ns)",
                t.name, c.since_ns
            ));
        }
        if let Some(r) = &c.reason {
            let n = r.chars().count();
            if n == 0 || n > MAX_REASON_LEN {
                return bad(format!(
                    "{:?}: reason must be 1 to {MAX_REASON_LEN} characters, got {n}",
                    t.name
                ));
            }
        }
        if let Some(p) = &c.marks.suppressed_by {
            if !crate::ingest::topic::valid_topic(p) {
                return bad(format!(
                    "{:?}: suppressed_by must be a topic name, got {p:?}",
                    t.name
                ));
            }
        }
        Ok(())
    }

    /// Carry `c` over to topic `id` (known, watched) at `now` (relative).
    fn carry(&self, inner: &mut Inner, subs: &[Subscriber], id: TopicId, c: &Carried, now: u64) {
        let word = self.word(id);
        let mut w = word.load(Ordering::Acquire);
        if word::state(w) == State::Failed {
            return; // failed here already: this detector's own outage wins
        }
        let outage = if c.marks.alerted {
            Outage::Alerted
        } else {
            let by = c
                .marks
                .suppressed_by
                .as_deref()
                .and_then(|p| self.registry.lookup(p))
                .unwrap_or(NO_TOPIC);
            Outage::Quiet {
                silenced: c.marks.silenced,
                by,
            }
        };
        // Heard after the outage began (a beat taken in since the takeover, or not yet): the
        // outage is over. Else FAILED, quietly; a beat racing in meanwhile fails the CAS, and
        // the word is judged again.
        loop {
            let heard_at = (w & HEARD != 0)
                .then(|| word::ts(w))
                .filter(|&ts| self.abs(ts) > c.since_ns);
            if let Some(ts) = heard_at {
                if !inner.policy.is_idle() {
                    inner.policy.set_outage(id, outage);
                }
                let downtime = self.abs(ts).saturating_sub(c.since_ns);
                let ev = Event::resumed(id, c.missed, self.abs(ts), downtime);
                self.emit(inner, subs, ev);
                return;
            }
            let failed = word::with_state(w & !FRESH, State::Failed);
            match word.compare_exchange_weak(w, failed, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        if !inner.policy.is_idle() {
            inner.policy.set_outage(id, outage);
        }
        Self::clear_down(inner, id);
        if let Some(reason) = &c.reason {
            let serial = self.reasons.lock().put(id, reason);
            inner.down.insert(id, serial);
        }
        let step = self.step(inner, id);
        let slot = &mut inner.slots[id as usize];
        slot.missed = c.missed;
        slot.since = c.since_ns;
        // A beat stamped at or before the takeover is old news (as after `add`).
        slot.known_until = slot.known_until.max(now.saturating_sub(1));
        slot.next_deadline = now.saturating_add(step);
        self.arm(inner, id, now);
    }
}
