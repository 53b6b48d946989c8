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
//!   child's event is marked `suppressed_by` the first of its parents that is FAILED now, unless
//!   that parent's own marks lead back to the child (a cycle of dependencies failing together:
//!   see [`Detector::leads_back`]), so a cycle never silences all of its topics. A removed
//!   topic's links go with it (the parent's side at once, the child's side amortized).
//! - **Owed alerts.** Each topic remembers what its listeners were told of its outage: `Alerted`
//!   (some `failed` went out unmarked and no `resumed` since), `Quiet` (only marked ones, and
//!   with which marks), or nothing (`None`: up, or every `failed` of the outage held back while
//!   it flapped). When the policy is first used, topics already down get `Alerted`: their
//!   `failed` went out unmarked. When a silence ends (or is removed) or a parent stops being
//!   FAILED (resumes, is paused or removed), a topic that is still FAILED, `Quiet`, and would
//!   now be unmarked gets one `failed` again, unmarked, at that moment, with its current count
//!   and `since` (counted in `released`): healthchecks and Alertmanager users expect a
//!   still-failed topic to alert once the silence ends. A deadline of the topic due by then
//!   (not judged yet) brings its own `failed`, unmarked now: that one is the alert. A `resumed`
//!   is marked as its outage was (`Quiet`: its marks; else unmarked), so a listener that
//!   ignores marked events sees every alert it got resolved, and no resolution of an alert it
//!   never got.
//!
//! - **Flapping** (`flap.rs`): outages grouped; a flapping topic's events held back.
//!
//! With no silence, dependency or flapping declared (`Policy::active` false) events pass
//! untouched: one branch per `failed`/`resumed`.

use super::flap::{self, FlapConfig, Flaps, Verdict};
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
    /// How many of `topics` were removed since it was last pruned.
    stale: usize,
}

struct Rule {
    pattern: Pattern,
    text: String,
    parent: String,
}

/// What a topic's listeners were told of its current outage: the `failed` events delivered
/// since its latest `resumed` delivered. Events held back (flapping) change nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Outage {
    /// None delivered: up, or every `failed` of the outage held back. (Topics already down
    /// when the policy is first used are set `Alerted`: see [`Detector::activate`].)
    #[default]
    None,
    /// An unmarked `failed` went out.
    Alerted,
    /// Only marked ones, the latest with these marks.
    Quiet { silenced: bool, by: TopicId },
}

/// A parent's children, and how many of them were removed since the list was last pruned.
#[derive(Default)]
struct Kids {
    list: Vec<Handle>,
    stale: usize,
}

/// The longest chain of marks [`Detector::leads_back`] follows (dependency depth).
const MAX_CHAIN: usize = 64;

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
    children: FastMap<TopicId, Kids>,
    /// Flapping detection (`flap.rs`).
    flaps: Flaps,
}

impl Policy {
    fn until(&self, id: TopicId) -> u64 {
        self.per.get(id as usize).map_or(0, |p| p.until)
    }

    pub(super) fn outage(&self, id: TopicId) -> Outage {
        self.per.get(id as usize).map_or(Outage::None, |p| p.outage)
    }

    fn grow(&mut self, id: TopicId) {
        let want = id as usize + 1;
        if self.per.len() < want {
            self.per.resize(want, PerTopic::default());
        }
    }

    pub(super) fn set_outage(&mut self, id: TopicId, o: Outage) {
        self.grow(id);
        self.per[id as usize].outage = o;
    }

    /// The topics flapping now.
    pub(super) fn flapping_ids(&self) -> &[TopicId] {
        self.flaps.flapping_ids()
    }

    /// Whether flapping is detected.
    pub(super) fn flaps_on(&self) -> bool {
        self.flaps.on()
    }

    /// Topic `id` flaps from `at` (relative) on: carried over (`adopt.rs`).
    pub(super) fn carry_flapping(&mut self, id: TopicId, at: u64) {
        self.flaps.carry_flapping(id, at);
    }

    /// Whether a flapping topic's events are held back.
    pub(super) fn holds_flapping(&self) -> bool {
        self.flaps.config.hold
    }

    /// `kid`'s parents (handles; the first, then the others).
    fn parents_of(&self, kid: TopicId) -> impl Iterator<Item = Handle> + '_ {
        let first = self
            .parent
            .get(kid as usize)
            .copied()
            .filter(|&h| h != NO_PARENT);
        let more = self.more_parents.get(&kid).map_or(&[][..], Vec::as_slice);
        first.into_iter().chain(more.iter().copied())
    }

    /// Memory held, bytes (the per-topic arrays, links, silences' topic lists).
    pub(super) fn heap_bytes(&self) -> usize {
        let handles = |n: usize| n * std::mem::size_of::<Handle>();
        self.per.capacity() * std::mem::size_of::<PerTopic>()
            + handles(self.parent.capacity())
            + self
                .more_parents
                .values()
                .map(|v| 48 + handles(v.capacity()))
                .sum::<usize>()
            + self
                .children
                .values()
                .map(|k| 56 + handles(k.list.capacity()))
                .sum::<usize>()
            + self
                .silences
                .iter()
                .map(|s| 160 + handles(s.topics.capacity()))
                .sum::<usize>()
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
            self.activate(inner);
            let p = &mut inner.policy;
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
                stale: 0,
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
        if inner
            .policy
            .rules
            .iter()
            .any(|r| r.text == child_pattern && r.parent == parent)
        {
            return Ok(());
        }
        self.activate(&mut inner);
        let p = &mut inner.policy;
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

    /// Link `kid` to its parent `pid` (once: a kid has few parents, so the check is on its side;
    /// a parent's list of children may be long).
    fn link(&self, inner: &mut Inner, kid: TopicId, pid: TopicId) {
        let (hk, hp) = (self.handle_of(kid), self.handle_of(pid));
        let p = &mut inner.policy;
        if p.parents_of(kid).any(|h| h == hp) {
            return;
        }
        if p.parent.len() <= kid as usize {
            p.parent.resize(kid as usize + 1, NO_PARENT);
        }
        let first = &mut p.parent[kid as usize];
        if *first == NO_PARENT {
            *first = hp;
        } else {
            p.more_parents.entry(kid).or_default().push(hp);
        }
        p.children.entry(pid).or_default().list.push(hk);
    }

    /// The policy is used from now on (a silence, a dependency or flapping declared). Topics
    /// down now had their `failed` handed out unmarked: alerted. One pass over the topics, once.
    pub(super) fn activate(&self, inner: &mut Inner) {
        if inner.policy.active {
            return;
        }
        inner.policy.active = true;
        for id in 0..inner.slots.len() as TopicId {
            let open = match word::state(self.word(id).load(Ordering::Acquire)) {
                State::Failed | State::PausedFailed => true,
                State::Stopped => matches!(
                    inner.held.get(&id),
                    Some(State::Failed | State::PausedFailed)
                ),
                _ => false,
            };
            if open {
                inner.policy.set_outage(id, Outage::Alerted);
            }
        }
    }

    /// Topic `id` (`name`) is removed (`was_failed`: it was FAILED): its links and silence
    /// entries go, and its children still down and never alerted owe their alert now if it
    /// no longer marks them (see [`release`](Detector::release)). Its id's per-topic state is
    /// reset when the id is reused ([`policy_learn`](Detector::policy_learn)).
    pub(super) fn policy_removed(
        &self,
        inner: &mut Inner,
        subs: &[Subscriber],
        id: TopicId,
        name: &str,
        was_failed: bool,
    ) {
        if !inner.policy.active {
            return;
        }
        let hid = self.handle_of(id);
        let p = &mut inner.policy;
        // As a child: its parents' lists hold a stale entry more; pruned once half are.
        let parents: Vec<Handle> = p.parents_of(id).collect();
        for hp in parents {
            let Some(pid) = self.registry.resolve(hp) else {
                continue;
            };
            if let Some(kids) = p.children.get_mut(&pid) {
                kids.stale += 1;
                if kids.stale * 2 >= kids.list.len() {
                    kids.list.retain(|&h| h != hid && self.live(h).is_some());
                    kids.stale = 0;
                }
            }
        }
        if let Some(first) = p.parent.get_mut(id as usize) {
            *first = NO_PARENT;
        }
        p.more_parents.remove(&id);
        // As a parent: its children forget it (at once: a re-added parent links them again).
        if let Some(kids) = p.children.remove(&id) {
            for &hk in &kids.list {
                let Some(kid) = self.registry.resolve(hk) else {
                    continue;
                };
                let p = &mut inner.policy;
                let more = p.more_parents.get_mut(&kid);
                let first = p.parent.get_mut(kid as usize);
                match (first, more) {
                    (Some(first), more) if *first == hid => {
                        *first = match more {
                            Some(m) if !m.is_empty() => m.remove(0),
                            _ => NO_PARENT,
                        };
                    }
                    (_, Some(m)) => m.retain(|&h| h != hid),
                    _ => {}
                }
                if inner
                    .policy
                    .more_parents
                    .get(&kid)
                    .is_some_and(Vec::is_empty)
                {
                    inner.policy.more_parents.remove(&kid);
                }
            }
            if was_failed {
                let at = self.rel_now(None).max(inner.judged);
                for &hk in &kids.list {
                    if let Some(kid) = self.live(hk) {
                        self.release(inner, subs, kid, at);
                    }
                }
            }
        }
        // Its silences: a stale entry more; pruned once half are.
        let p = &mut inner.policy;
        for s in p.silences.iter_mut().filter(|s| s.active) {
            if s.pattern.matches(name) {
                s.stale += 1;
                if s.stale * 2 >= s.topics.len() {
                    s.topics.retain(|&h| h != hid && self.live(h).is_some());
                    s.stale = 0;
                }
            }
        }
        p.flaps.forget(id);
    }

    /// The id of the topic `h` names if it is not removed.
    fn live(&self, h: Handle) -> Option<TopicId> {
        let id = self.registry.resolve(h)?;
        (word::state(self.word(id).load(Ordering::Acquire)) != State::Removed).then_some(id)
    }

    /// Topic `id` was paused while FAILED: its children still down and never alerted owe their
    /// alert now (it marks them no more).
    pub(super) fn policy_paused_failed(&self, inner: &mut Inner, subs: &[Subscriber], id: TopicId) {
        if inner.policy.active {
            let at = self.rel_now(None).max(inner.judged);
            self.release_children_at(inner, subs, id, at);
        }
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
            for settled in inner.policy.flaps.settle(t) {
                self.settled(inner, subs, settled);
            }
        }
    }

    /// A topic stopped flapping: say so, then where it stands. Down: a `failed` (unless a
    /// deadline at the settle time, not judged yet, brings its own next: see `release`). Up,
    /// with the last `failed` its listeners got never resolved (the `resumed` that ended that
    /// outage was held back: the one that started the flapping, or a later one): a `resumed`
    /// at the settle time, marked as that outage was, with the latest outage's count and
    /// length. Both are counted in `released`.
    fn settled(&self, inner: &mut Inner, subs: &[Subscriber], s: flap::Settled) {
        let (id, when) = (s.id, s.when);
        let state = word::state(self.word(id).load(Ordering::Acquire));
        if state == State::Removed {
            return; // its queues must not see it again (see `remove`)
        }
        self.emit(inner, subs, Event::flapping(id, false, 0, self.abs(when)));
        let slot = inner.slots[id as usize];
        match state {
            // A deadline at `when` not judged yet brings its own `failed` next.
            State::Failed if slot.next_deadline > when => {
                let at = when.max(slot.known_until.saturating_add(1));
                let ev = self.failed_again(inner, id, at);
                self.counters.released.fetch_add(1, Ordering::Relaxed);
                self.emit(inner, subs, ev);
            }
            State::Alive | State::Pending | State::Paused => {
                let (silenced, by) = match inner.policy.outage(id) {
                    Outage::None => return,
                    Outage::Alerted => (false, NO_TOPIC),
                    Outage::Quiet { silenced, by } => (silenced, by),
                };
                // Not through `police`: this is no outage's end for the flap count.
                let mut ev = Event::resumed(id, s.ended.0, self.abs(when), s.ended.1);
                ev.silenced = silenced;
                ev.suppressed_by = by;
                inner.policy.set_outage(id, Outage::None);
                self.counters.released.fetch_add(1, Ordering::Relaxed);
                self.deliver_policed(inner, subs, ev);
            }
            _ => {}
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
                self.activate(inner);
            } else {
                let at = inner.judged;
                for s in inner.policy.flaps.settle_all(at) {
                    self.settled(inner, subs, s);
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
            (failed && !self.leads_back(inner, pid, id)).then_some(pid)
        })
    }

    /// Whether the marks of `pid` lead back to `id`: `pid` is FAILED and suppressed by a topic
    /// that is FAILED and suppressed by ... `id`. Then `id` and `pid` depend on each other (a
    /// cycle of dependencies, failing together): `pid` does not mark `id`, so that one topic
    /// of the cycle alerts (which one: the first the detector judged, as for a parent and
    /// its children). No mark ever closes a cycle (each is checked as it is given), so
    /// following the marks ends; [`MAX_CHAIN`] bounds it anyway.
    #[inline]
    fn leads_back(&self, inner: &Inner, pid: TopicId, id: TopicId) -> bool {
        // The common case first: a parent not suppressed itself (a database that is down).
        match inner.policy.outage(pid) {
            Outage::Quiet { by, .. } if by != NO_TOPIC => self.follow_marks(inner, pid, id),
            _ => false,
        }
    }

    #[cold]
    fn follow_marks(&self, inner: &Inner, mut pid: TopicId, id: TopicId) -> bool {
        for _ in 0..MAX_CHAIN {
            if pid == id {
                return true;
            }
            match inner.policy.outage(pid) {
                Outage::Quiet { by, .. }
                    if by != NO_TOPIC
                        && word::state(self.word(pid).load(Ordering::Acquire)) == State::Failed =>
                {
                    pid = by;
                }
                _ => return false,
            }
        }
        false
    }

    /// Mark `ev` (a `failed` or `resumed`) as the policy says, and note what its listeners
    /// were told of the outage; or hold it back (flapping: counted in `held`, nothing noted).
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
            verdict = inner.policy.flaps.judge(id, ev, at, first);
            // Under hold, the `resumed` that starts the flapping is held back too.
            let held = match verdict {
                Verdict::Deliver => false,
                Verdict::Hold => true,
                Verdict::Starts { .. } => inner.policy.holds_flapping(),
            };
            if held {
                self.counters.held.fetch_add(1, Ordering::Relaxed);
                return verdict;
            }
        }
        match ev.kind {
            EventKind::Failed => {
                let at = self.rel(ev.at_ns);
                ev.silenced = at < inner.policy.until(id);
                ev.suppressed_by = self.failed_parent(inner, id, at).unwrap_or(NO_TOPIC);
                let now = if !ev.is_marked() || inner.policy.outage(id) == Outage::Alerted {
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
        self.count_marks(ev);
        verdict
    }

    fn count_marks(&self, ev: &Event) {
        if ev.silenced {
            self.counters.silenced.fetch_add(1, Ordering::Relaxed);
        }
        if ev.suppressed_by != NO_TOPIC {
            self.counters.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hand out `ev`, a `resumed` marked already, past `police` (see `settled`).
    fn deliver_policed(&self, inner: &mut Inner, subs: &[Subscriber], ev: Event) {
        self.count_marks(&ev);
        self.counters.resumed.fetch_add(1, Ordering::Relaxed);
        self.push_or_set_aside(inner, subs, ev, true);
    }

    /// After a parent's `resumed` (handed out or held back): its children still FAILED and
    /// never alerted, and no longer held back, get their `failed` now.
    pub(super) fn release_children(
        &self,
        inner: &mut Inner,
        subs: &[Subscriber],
        parent: TopicId,
        at_abs: u64,
    ) {
        let at = self.rel(at_abs);
        self.release_children_at(inner, subs, parent, at);
    }

    /// [`release_children`](Detector::release_children) at `at` (relative).
    fn release_children_at(
        &self,
        inner: &mut Inner,
        subs: &[Subscriber],
        parent: TopicId,
        at: u64,
    ) {
        // Taken out while they are released (which reads no child list), then put back.
        let Some(kids) = inner.policy.children.remove(&parent) else {
            return;
        };
        for &h in &kids.list {
            if let Some(kid) = self.registry.resolve(h) {
                self.release(inner, subs, kid, at);
            }
        }
        inner.policy.children.insert(parent, kids);
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
        let ev = Event::failed(id, slot.missed, self.abs(at), slot.since);
        match Self::down_serial(inner, id) {
            Some(serial) => ev.with_reason(serial),
            None => ev,
        }
    }
}

#[cfg(test)]
impl Detector {
    /// For tests: (further parents of `kid`, children listed for `parent`, handles of the
    /// first silence).
    pub(super) fn policy_links(&self, kid: TopicId, parent: TopicId) -> (usize, usize, usize) {
        let inner = self.inner.lock();
        let p = &inner.policy;
        (
            p.more_parents.get(&kid).map_or(0, Vec::len),
            p.children.get(&parent).map_or(0, |k| k.list.len()),
            p.silences.first().map_or(0, |s| s.topics.len()),
        )
    }
}
