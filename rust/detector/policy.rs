//! The alerting policy: silences and dependencies, applied to the `failed` and `resumed` events
//! where the detector hands them out (`emit.rs`), under the detector lock.
//!
//! # Design
//!
//! The detector decides *whether* a topic failed; this stage decides *how the event is marked*.
//! It never drops, delays or reorders an event: a silenced or suppressed topic is still
//! tracked, and its events are delivered marked (`Event::silenced`, `Event::suppressed_by`),
//! so a listener chooses to ignore them (Python: `include_silenced`, `include_suppressed`).
//! Beats never reach it: only `failed` and `resumed`, which are already emitted under the lock.
//!
//! - **Silences.** A silence is a pattern (`svc.db.>`), a start and an end on the detector's
//!   clock (a manual clock drives them), and a reason. Matching a pattern per event would cost
//!   a match per silence per event: instead each topic holds `until` (the latest end of the
//!   active silences that match it), set when a silence starts (one pass over the topics),
//!   when a topic is learned (one match per silence), and recomputed for the silence's topics
//!   when it ends or is removed. The check per event is one load: `at < until[topic]`.
//!   A silence's start and end are *transitions*: the driver (`advance.rs`) judges deadlines up
//!   to each transition before applying it, so the events of one topic stay in time order.
//!   Silences starting later are kept inactive until their start: the way for scheduled
//!   maintenance windows or control messages to add them.
//! - **Dependencies.** `depends(child_pattern, parent)` links every topic matching the pattern to
//!   the parent topic (handles, so a removed topic's reused id is not mistaken for it). A
//!   child's event is marked `suppressed_by` the first of its parents that is FAILED now.
//! - **Owed alerts.** Each topic remembers how its current outage was delivered: `Alerted` (some
//!   `failed` went out unmarked) or `Quiet` (only marked ones, and with which marks). When a
//!   silence ends (or is removed) or a parent resumes, a topic that is still FAILED, `Quiet`,
//!   and would now be unmarked gets one `failed` again, unmarked, at that moment, with its
//!   current count and `since` (counted in `released`): healthchecks and Alertmanager users
//!   expect a still-failed topic to alert once the silence ends. A deadline of the topic due
//!   by then (not judged yet) brings its own `failed`, unmarked now: that one is the alert. A `resumed` is marked as its
//!   outage was (`Quiet`: its marks; else unmarked), so a listener that ignores marked events
//!   sees every alert it got resolved, and no resolution of an alert it never got.
//!
//! - **Flapping** (`flap.rs`): outages grouped; a flapping topic's events held back.
//!
//! With no silence, dependency or flapping declared (`Policy::active` false) events pass
//! untouched: one branch per `failed`/`resumed`.

use super::flap::{FlapConfig, Flaps, Verdict};
use super::*;
use crate::event::NO_TOPIC;
use crate::ingest::topic::Pattern;
use std::collections::HashMap;

/// Maps looked up per event: a fast hash (ids are not attacker-chosen).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// No parent (a handle no topic has).
const NO_PARENT: Handle = Handle::MAX;

/// A silence's id (from 1).
pub type SilenceId = u64;

/// A silence as declared (times absolute ns on the detector's clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SilenceInfo {
    pub id: SilenceId,
    pub pattern: String,
    pub starts_ns: u64,
    pub ends_ns: u64,
    pub reason: String,
}

struct Silence {
    id: SilenceId,
    text: String,
    pattern: Pattern,
    /// Relative ns; `start < end`.
    start: u64,
    end: u64,
    reason: String,
    /// Started: its topics' `until` count it.
    active: bool,
    /// The topics it matched (handles: a removed topic's id may be reused).
    topics: Vec<Handle>,
}

struct Rule {
    pattern: Pattern,
    text: String,
    parent: String,
}

/// How the current outage of a topic was delivered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Outage {
    /// Not failed (or failed with every `failed` handed out before the policy was active:
    /// unmarked, so alerted).
    #[default]
    None,
    /// An unmarked `failed` went out.
    Alerted,
    /// Only marked ones, the latest with these marks.
    Quiet { silenced: bool, by: TopicId },
}

/// What the policy holds per topic.
#[derive(Clone, Copy, Debug, Default)]
struct PerTopic {
    /// Silenced before this time (relative ns); 0: not silenced.
    until: u64,
    outage: Outage,
}

#[derive(Default)]
pub(super) struct Policy {
    /// Any silence or rule declared: otherwise events pass untouched.
    active: bool,
    silences: Vec<Silence>,
    next_id: SilenceId,
    rules: Vec<Rule>,
    /// Per topic id (shorter than the topics: the missing ones are default): what each
    /// event reads, side by side (one cache line per event at a million topics).
    per: Vec<PerTopic>,
    /// Per topic id: its first parent, or [`NO_PARENT`] (shorter: none). A flat array: it is
    /// read per `failed` event of every topic once any dependency is declared.
    parent: Vec<Handle>,
    /// Child id -> its further parents (a child matching several rules).
    more_parents: FastMap<TopicId, Vec<Handle>>,
    /// Parent id -> its children.
    children: FastMap<TopicId, Vec<Handle>>,
    /// Flapping detection (`flap.rs`).
    flaps: Flaps,
}

impl Policy {
    fn until(&self, id: TopicId) -> u64 {
        self.per.get(id as usize).map_or(0, |p| p.until)
    }

    fn outage(&self, id: TopicId) -> Outage {
        self.per.get(id as usize).map_or(Outage::None, |p| p.outage)
    }

    fn grow(&mut self, id: TopicId) {
        let want = id as usize + 1;
        if self.per.len() < want {
            self.per.resize(want, PerTopic::default());
        }
    }

    fn set_outage(&mut self, id: TopicId, o: Outage) {
        self.grow(id);
        self.per[id as usize].outage = o;
    }

    /// Whether a flapping topic's events are held back.
    pub(super) fn holds_flapping(&self) -> bool {
        self.flaps.config.hold
    }

    /// No silence or rule declared.
    #[inline]
    pub(super) fn is_idle(&self) -> bool {
        !self.active
    }

    /// The earliest start or end not applied yet (relative ns).
    pub(super) fn next_transition(&self) -> Option<u64> {
        let silences = self
            .silences
            .iter()
            .map(|s| if s.active { s.end } else { s.start })
            .min();
        match (silences, self.flaps.next_settle()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

fn link(list: &mut Vec<Handle>, h: Handle) {
    if !list.contains(&h) {
        list.push(h);
    }
}

impl Detector {
    // ----- the API ---------------------------------------------------------------------

    /// Silence the topics matching `pattern` (now and learned later) from `starts_ns` (None:
    /// now) to `ends_ns` (absolute ns on the detector's clock). Returns its id.
    pub fn silence(
        &self,
        pattern: &str,
        starts_ns: Option<u64>,
        ends_ns: u64,
        reason: &str,
    ) -> Result<SilenceId, DetectorError> {
        let compiled = Pattern::new(pattern).ok_or_else(|| {
            DetectorError::Invalid(format!("pattern is not a valid topic pattern: {pattern:?}"))
        })?;
        let now = self.rel_now(None);
        let start = starts_ns.map_or(now, |s| self.rel(s));
        let end = self.rel(ends_ns);
        if end <= start.max(now) {
            return Err(DetectorError::Invalid(format!(
                "a silence must end after it starts and after now: ends at {ends_ns} ns, \
                 starts at {} ns, now {} ns",
                self.abs(start),
                self.abs(now)
            )));
        }
        Ok(self.emitting(|inner, subs| {
            let p = &mut inner.policy;
            p.active = true;
            p.next_id += 1;
            let id = p.next_id;
            p.silences.push(Silence {
                id,
                text: pattern.to_owned(),
                pattern: compiled,
                start,
                end,
                reason: reason.to_owned(),
                active: false,
                topics: Vec::new(),
            });
            // Applied here only if it started before what the driver has judged; otherwise by
            // the driver, in time order with the deadlines (a silence from now: at its next run).
            let judged = inner.judged;
            self.apply_transitions(inner, subs, judged);
            id
        }))
    }

    /// End silence `id` now; false if there is none (ended, removed, never made). Topics it
    /// silenced that are still FAILED and were never alerted get their `failed` then: at once
    /// if the driver has judged up to now (a manual clock), else at the driver's next run, in
    /// time order with the deadlines before now.
    pub fn unsilence(&self, id: SilenceId) -> bool {
        let now = self.rel_now(None);
        self.emitting(|inner, subs| {
            let Some(i) = inner.policy.silences.iter().position(|s| s.id == id) else {
                return false;
            };
            if !inner.policy.silences[i].active {
                inner.policy.silences.remove(i); // never started: nothing to lift
                return true;
            }
            let end = now.max(inner.judged);
            let s = &mut inner.policy.silences[i];
            s.end = s.end.min(end);
            let judged = inner.judged;
            self.apply_transitions(inner, subs, judged);
            true
        })
    }

    /// The silences not ended yet, by id.
    pub fn silences(&self) -> Vec<SilenceInfo> {
        let inner = self.inner.lock();
        inner
            .policy
            .silences
            .iter()
            .map(|s| SilenceInfo {
                id: s.id,
                pattern: s.text.clone(),
                starts_ns: self.abs(s.start),
                ends_ns: self.abs(s.end),
                reason: s.reason.clone(),
            })
            .collect()
    }

    /// Topics matching `child_pattern` depend on `parent` (a topic name, known yet or not):
    /// while it is FAILED, their events are marked `suppressed_by` it.
    pub fn depends(&self, child_pattern: &str, parent: &str) -> Result<(), DetectorError> {
        let pattern = Pattern::new(child_pattern).ok_or_else(|| {
            DetectorError::Invalid(format!(
                "child_pattern is not a valid topic pattern: {child_pattern:?}"
            ))
        })?;
        if !crate::ingest::topic::valid_topic(parent) {
            return Err(DetectorError::Invalid(format!(
                "on must be a topic name (no wildcard), got {parent:?}"
            )));
        }
        let mut inner = self.inner.lock();
        let p = &mut inner.policy;
        if p.rules
            .iter()
            .any(|r| r.text == child_pattern && r.parent == parent)
        {
            return Ok(());
        }
        p.active = true;
        p.rules.push(Rule {
            pattern,
            text: child_pattern.to_owned(),
            parent: parent.to_owned(),
        });
        if let Some(pid) = self.registry.lookup(parent) {
            let rule = inner.policy.rules.len() - 1;
            self.link_rule(&mut inner, rule, pid);
        }
        Ok(())
    }

    /// The dependencies declared: (child pattern, parent).
    pub fn dependencies(&self) -> Vec<(String, String)> {
        let inner = self.inner.lock();
        inner
            .policy
            .rules
            .iter()
            .map(|r| (r.text.clone(), r.parent.clone()))
            .collect()
    }

    // ----- topics ----------------------------------------------------------------------

    /// Ids of the topics not removed, with their names, for a pass over all of them.
    fn live_matching(&self, inner: &Inner, pattern: &Pattern) -> Vec<TopicId> {
        self.registry.with_names(|names| {
            (0..inner.slots.len() as TopicId)
                .filter(|&id| {
                    word::state(self.word(id).load(Ordering::Acquire)) != State::Removed
                        && pattern.matches(names.get(id))
                })
                .collect()
        })
    }

    /// Link every topic matching rule `rule` to its parent `pid`.
    fn link_rule(&self, inner: &mut Inner, rule: usize, pid: TopicId) {
        let kids = self.live_matching(inner, &inner.policy.rules[rule].pattern);
        for kid in kids {
            if kid != pid {
                self.link(inner, kid, pid);
            }
        }
    }

    fn link(&self, inner: &mut Inner, kid: TopicId, pid: TopicId) {
        let (hk, hp) = (self.handle_of(kid), self.handle_of(pid));
        let p = &mut inner.policy;
        if p.parent.len() <= kid as usize {
            p.parent.resize(kid as usize + 1, NO_PARENT);
        }
        let first = &mut p.parent[kid as usize];
        if *first == NO_PARENT {
            *first = hp;
        } else if *first != hp {
            link(p.more_parents.entry(kid).or_default(), hp);
        }
        link(inner.policy.children.entry(pid).or_default(), hk);
    }

    /// A new topic (`id` may be a removed one's): forget what its id carried, then apply the
    /// silences and rules to it.
    pub(super) fn policy_learn(&self, inner: &mut Inner, id: TopicId, name: &str) {
        let p = &mut inner.policy;
        if !p.active {
            return;
        }
        p.grow(id);
        p.per[id as usize] = PerTopic::default();
        if let Some(first) = p.parent.get_mut(id as usize) {
            *first = NO_PARENT;
        }
        p.more_parents.remove(&id);
        p.flaps.forget(id);
        p.children.remove(&id);
        let handle = self.handle_of(id);
        for s in p.silences.iter_mut().filter(|s| s.active) {
            if s.pattern.matches(name) {
                s.topics.push(handle);
                let until = &mut p.per[id as usize].until;
                *until = (*until).max(s.end);
            }
        }
        for rule in 0..inner.policy.rules.len() {
            let r = &inner.policy.rules[rule];
            if r.parent == name {
                self.link_rule(inner, rule, id);
            } else if r.pattern.matches(name) {
                if let Some(pid) = self.registry.lookup(&r.parent) {
                    self.link(inner, id, pid);
                }
            }
        }
    }

    // ----- time ------------------------------------------------------------------------

    /// The earliest silence start or end not applied yet, if at or before `now` (relative).
    pub(super) fn policy_due(&self, inner: &Inner, now: u64) -> Option<u64> {
        inner.policy.next_transition().filter(|&t| t <= now)
    }

    /// Apply the silence starts and ends at or before `at` (relative ns).
    pub(super) fn apply_transitions(&self, inner: &mut Inner, subs: &[Subscriber], at: u64) {
        while let Some(t) = self.policy_due(inner, at) {
            let starting: Vec<usize> = (0..inner.policy.silences.len())
                .filter(|&i| {
                    let s = &inner.policy.silences[i];
                    !s.active && s.start <= t
                })
                .collect();
            for i in starting {
                let ids = self.live_matching(inner, &inner.policy.silences[i].pattern);
                let end = inner.policy.silences[i].end;
                let handles: Vec<Handle> = ids.iter().map(|&id| self.handle_of(id)).collect();
                let p = &mut inner.policy;
                for &id in &ids {
                    p.grow(id);
                    let until = &mut p.per[id as usize].until;
                    *until = (*until).max(end);
                }
                p.silences[i].topics = handles;
                p.silences[i].active = true;
            }
            while let Some(i) = inner
                .policy
                .silences
                .iter()
                .position(|s| s.active && s.end <= t)
            {
                let s = inner.policy.silences.remove(i);
                let end = s.end;
                self.lift(inner, subs, s, end);
            }
            for (id, when) in inner.policy.flaps.settle(t) {
                self.settled(inner, subs, id, when);
            }
        }
    }

    /// `id` stopped flapping at `when` (relative): say so, then where it stands if down.
    fn settled(&self, inner: &mut Inner, subs: &[Subscriber], id: TopicId, when: u64) {
        if word::state(self.word(id).load(Ordering::Acquire)) == State::Removed {
            return; // its queues must not see it again (see `remove`)
        }
        self.emit(inner, subs, Event::flapping(id, false, 0, self.abs(when)));
        let slot = inner.slots[id as usize];
        // A deadline at `when` not judged yet brings its own `failed` next (see `release`).
        let due = slot.next_deadline <= when;
        if !due && word::state(self.word(id).load(Ordering::Acquire)) == State::Failed {
            let at = when.max(slot.known_until.saturating_add(1));
            let ev = self.failed_again(inner, id, at);
            self.counters.released.fetch_add(1, Ordering::Relaxed);
            self.emit(inner, subs, ev);
        }
    }

    /// Detect flapping (see `flap.rs`): more than `threshold` outages within `window_ns`;
    /// `threshold` 0 turns it off (topics flapping then settle now). `hold`: hold back a
    /// flapping topic's `failed` and `resumed`.
    pub fn set_flapping(
        &self,
        threshold: u32,
        window_ns: u64,
        hold: bool,
    ) -> Result<(), DetectorError> {
        if threshold > 0 && window_ns == 0 {
            return Err(DetectorError::Invalid(
                "flap_window must be > 0 with a flap_threshold, got 0".to_owned(),
            ));
        }
        self.emitting(|inner, subs| {
            let flaps = &mut inner.policy.flaps;
            flaps.config = FlapConfig {
                threshold,
                window_ns,
                hold,
            };
            if threshold > 0 {
                inner.policy.active = true;
            } else {
                let at = inner.judged;
                for id in inner.policy.flaps.settle_all() {
                    self.settled(inner, subs, id, at);
                }
            }
        });
        Ok(())
    }

    /// The flapping settings.
    pub fn flapping(&self) -> FlapConfig {
        self.inner.lock().policy.flaps.config
    }

    /// How many topics are flapping now (started, not settled yet): a gauge for dashboards.
    pub fn flapping_topics(&self) -> usize {
        self.inner.lock().policy.flaps.count()
    }

    /// Silence `s` (removed from the list) no longer counts from `at`: recompute its topics'
    /// `until` from the other active silences, and alert those no longer silenced that are
    /// still FAILED and were never alerted.
    fn lift(&self, inner: &mut Inner, subs: &[Subscriber], s: Silence, at: u64) {
        for h in s.topics {
            let Some(id) = self.registry.resolve(h) else {
                continue;
            };
            let until = self.registry.with_names(|names| {
                let name = names.get(id);
                inner
                    .policy
                    .silences
                    .iter()
                    .filter(|o| o.active && o.pattern.matches(name))
                    .map(|o| o.end)
                    .max()
                    .unwrap_or(0)
            });
            inner.policy.grow(id);
            inner.policy.per[id as usize].until = until;
            if until <= at {
                self.release(inner, subs, id, at);
            }
        }
    }

    // ----- events ----------------------------------------------------------------------

    /// The first parent of `id` that is FAILED at `at` (relative): FAILED now, or about to be
    /// at a deadline at or before `at` that the driver has not reached yet in this run (the
    /// wheel's order within a tick is arbitrary, and a parent and its children failing at the
    /// same deadline is the common case: the database went down).
    fn failed_parent(&self, inner: &Inner, id: TopicId, at: u64) -> Option<TopicId> {
        let p = &inner.policy;
        let first = *p.parent.get(id as usize)?;
        if first == NO_PARENT {
            return None;
        }
        let more = p.more_parents.get(&id).map_or(&[][..], Vec::as_slice);
        std::iter::once(&first).chain(more).find_map(|&h| {
            let pid = self.registry.resolve(h)?;
            let w = self.word(pid).load(Ordering::Acquire);
            let failed = match word::state(w) {
                State::Failed => true,
                // Its next deadline (from a beat not taken in yet, if any: as `take_fresh`
                // will) passed by `at`, one miss from failing.
                State::Alive | State::Pending => {
                    let slot = &inner.slots[pid as usize];
                    let (next, missed) = if w & FRESH != 0 && word::ts(w) > slot.known_until {
                        let first = self.first_offset(inner, pid);
                        (word::ts(w).saturating_add(first), 0)
                    } else {
                        (slot.next_deadline, slot.missed)
                    };
                    next <= at && missed.saturating_add(1) >= slot.allowed
                }
                _ => false,
            };
            failed.then_some(pid)
        })
    }

    /// Mark `ev` (a `failed` or `resumed`) as the policy says, and note the outage's delivery.
    #[inline]
    pub(super) fn police(&self, inner: &mut Inner, ev: &mut Event) -> Verdict {
        if !inner.policy.active {
            return Verdict::Deliver;
        }
        let id = ev.topic;
        let mut verdict = Verdict::Deliver;
        if inner.policy.flaps.on() && matches!(ev.kind, EventKind::Failed | EventKind::Resumed) {
            let first = ev.kind == EventKind::Failed && ev.at_ns == ev.detail;
            let at = self.rel(ev.at_ns);
            verdict = inner.policy.flaps.judge(id, ev.kind, at, first);
            if verdict == Verdict::Hold {
                self.counters.held.fetch_add(1, Ordering::Relaxed);
                return verdict;
            }
        }
        match ev.kind {
            EventKind::Failed => {
                let at = self.rel(ev.at_ns);
                ev.silenced = at < inner.policy.until(id);
                ev.suppressed_by = self.failed_parent(inner, id, at).unwrap_or(NO_TOPIC);
                // The first `failed` of an outage is at its own `since`. A later one finding
                // `None` follows ones handed out before the policy was active: unmarked.
                let first = ev.at_ns == ev.detail;
                let before = inner.policy.outage(id);
                let alerted = !first && matches!(before, Outage::Alerted | Outage::None);
                let now = if !ev.is_marked() || alerted {
                    Outage::Alerted
                } else {
                    Outage::Quiet {
                        silenced: ev.silenced,
                        by: ev.suppressed_by,
                    }
                };
                inner.policy.set_outage(id, now);
            }
            EventKind::Resumed => {
                if let Outage::Quiet { silenced, by } = inner.policy.outage(id) {
                    ev.silenced = silenced;
                    ev.suppressed_by = by;
                }
                if inner.policy.outage(id) != Outage::None {
                    inner.policy.set_outage(id, Outage::None);
                }
            }
            _ => return verdict,
        }
        if ev.silenced {
            self.counters.silenced.fetch_add(1, Ordering::Relaxed);
        }
        if ev.suppressed_by != NO_TOPIC {
            self.counters.suppressed.fetch_add(1, Ordering::Relaxed);
        }
        verdict
    }

    /// After a parent's `resumed` (handed out): its children still FAILED and never alerted,
    /// and no longer held back, get their `failed` now.
    pub(super) fn release_children(
        &self,
        inner: &mut Inner,
        subs: &[Subscriber],
        parent: TopicId,
        at_abs: u64,
    ) {
        let Some(kids) = inner.policy.children.get(&parent).cloned() else {
            return;
        };
        let at = self.rel(at_abs);
        for h in kids {
            if let Some(kid) = self.registry.resolve(h) {
                self.release(inner, subs, kid, at);
            }
        }
    }

    /// Emit a `failed` for `id` at `at` (relative) if it is FAILED, its outage was never
    /// alerted, and the event would go out unmarked now.
    fn release(&self, inner: &mut Inner, subs: &[Subscriber], id: TopicId, at: u64) {
        if !matches!(inner.policy.outage(id), Outage::Quiet { .. })
            || word::state(self.word(id).load(Ordering::Acquire)) != State::Failed
            || at < inner.policy.until(id)
            || self.failed_parent(inner, id, at).is_some()
        {
            return;
        }
        let slot = inner.slots[id as usize];
        if slot.next_deadline <= at {
            // A deadline at or before `at` is not judged yet (due in this run, or the next):
            // its `failed` comes next, unmarked, and is the alert.
            return;
        }
        // After the topic's latest `failed` (its `at` is `known_until`): a topic's events
        // have strictly increasing `at` (see `newest.rs`).
        let at = at.max(slot.known_until.saturating_add(1));
        let ev = self.failed_again(inner, id, at);
        self.counters.released.fetch_add(1, Ordering::Relaxed);
        self.emit(inner, subs, ev);
    }

    /// A `failed` for `id`, still FAILED, at `at` (relative) outside its deadlines (an owed
    /// alert released, a settled flap): its current count and `since`, and, if a `down` beat
    /// failed it, its reason serial, as the deadlines' `failed` events of the outage carry.
    fn failed_again(&self, inner: &Inner, id: TopicId, at: u64) -> Event {
        let slot = &inner.slots[id as usize];
        let ev = Event::failed(id, slot.missed, self.abs(at), self.abs(slot.since));
        match Self::down_serial(inner, id) {
            Some(serial) => ev.with_reason(serial),
            None => ev,
        }
    }
}
