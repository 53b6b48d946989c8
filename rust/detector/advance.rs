//! The detector's advance (what happens when time moves): pop due topics off the wheel, take
//! in their beats, count missed periods.

use super::emit::DELIVER_EVERY;
use super::*;
use parking_lot::MutexGuard;

/// Due topics whose state [`Detector::prefetch_due`] touches in one go.
const PREFETCH: usize = 64;
/// Events a run pushes before it wakes the consumers anyway (see [`Detector::advance`]).
const FLUSH_EVERY: u64 = 256;
/// The most `failed` events one topic gets from one run of the driver (see
/// [`Detector::judge_due`]).
pub(crate) const MAX_FAILED_PER_RUN: u32 = 64;

impl Detector {
    /// Process every deadline up to `now` (absolute ns; default: the clock's now). Returns the
    /// number of `failed` and `resumed` events produced. The time since the last run counts as
    /// time the detector was running, however long: never a local pause.
    pub fn advance_to(&self, now: Option<u64>) -> u64 {
        self.advance(now, false)
    }

    /// [`advance_to`](Detector::advance_to) for a caller that was not running since the last
    /// run: a gap longer than `max_local_pause` is a local pause (see `pause.rs`).
    pub fn wake_at(&self, now: Option<u64>) -> u64 {
        self.advance(now, true)
    }

    fn advance(&self, now: Option<u64>, woke: bool) -> u64 {
        let now = self.rel_now(now);
        let mut inner = self.inner.lock();
        if !inner.running {
            inner.now = inner.now.max(now);
            return 0;
        }
        let mut subscribers = self.subscribers.read();
        if woke {
            inner.woken = true;
            self.guard_pause(&mut inner, &subscribers, now);
        }
        inner.now = inner.now.max(now);
        // Deadlines are judged up to the intake's watermark while it lags (see `lag.rs`).
        let now = self.judge_until(&mut inner, &subscribers, now);
        let before = self.counters.failed.load(Ordering::Relaxed)
            + self.counters.resumed.load(Ordering::Relaxed);
        // Silence starts and ends are applied in time order with the deadlines (`policy.rs`):
        // deadlines up to each are judged first, with the clock at it.
        let mut limit = self.policy_due(&inner, now).unwrap_or(now);
        let mut limit_tick = limit / self.resolution_ns;
        let emitted = || {
            self.counters.failed.load(Ordering::Relaxed)
                + self.counters.resumed.load(Ordering::Relaxed)
        };
        let mut until_prefetch = 0;
        let mut flushed = before;
        loop {
            if until_prefetch == 0 {
                until_prefetch = PREFETCH;
                self.prefetch_due(&inner);
                // `failed` events are pushed without waking the consumers (one wake-up per
                // run, one batch for them); a long run wakes them every FLUSH_EVERY events.
                let now_emitted = emitted();
                if now_emitted - flushed >= FLUSH_EVERY {
                    flushed = now_emitted;
                    Self::flush(&subscribers);
                }
                if inner.pending.len() >= DELIVER_EVERY {
                    // Events put aside (a `block` queue is subscribed): push them with the
                    // locks released, as a wait for room requires (see `emit.rs`).
                    drop(subscribers);
                    let upto = self.commit(&mut inner);
                    MutexGuard::unlocked(&mut inner, || self.deliver(upto));
                    subscribers = self.subscribers.read();
                    if !inner.running {
                        break; // stopped meanwhile: nothing is due any more
                    }
                }
            }
            let Some((id, _when)) = inner.wheel.pop_expired(limit_tick) else {
                if limit < now || self.policy_due(&inner, limit).is_some() {
                    self.apply_transitions(&mut inner, &subscribers, limit);
                    limit = self.policy_due(&inner, now).unwrap_or(now);
                    limit_tick = limit / self.resolution_ns;
                    continue;
                }
                break;
            };
            until_prefetch -= 1;
            self.judge_due(&mut inner, &subscribers, id, limit);
        }
        Self::flush(&subscribers);
        drop(subscribers);
        // Also what `pause` and `remove` put aside without pushing it.
        let upto = self.commit(&mut inner).max(inner.unpushed);
        drop(inner);
        self.deliver(upto);
        emitted() - before
    }

    /// Touch the state of the next [`PREFETCH`] due topics (wheel entry, word, slot) with plain
    /// loads that do not depend on each other, so that their cache misses overlap: a 1M-topic
    /// tick whose topics were armed in random order would otherwise take each miss in turn.
    fn prefetch_due(&self, inner: &Inner) {
        let mut acc = 0u64;
        for (id, when) in inner.wheel.due_ahead(PREFETCH) {
            acc ^= when ^ self.word(id).load(Ordering::Relaxed);
            // A 48-byte slot can straddle two cache lines: touch its first and last fields.
            let slot = &inner.slots[id as usize];
            acc ^= slot.period_ns ^ u64::from(slot.allowed);
        }
        std::hint::black_box(acc);
    }

    /// A due topic: take in a fresh beat (re-arm from it, or resume), count missed periods up
    /// to `now`, and put it back on the wheel at its next deadline.
    ///
    /// Bounded work, whatever the gap since the last run (an ordinary `advance` of hours, or
    /// no local-pause guard): missed periods below `allowed_misses` are counted in one step,
    /// and a topic gets at most [`MAX_FAILED_PER_RUN`] `failed` events per run, the first
    /// ones period by period and then one for the latest deadline passed, carrying the exact
    /// count (the periods between are counted, not reported one by one).
    pub(super) fn judge_due(&self, inner: &mut Inner, subs: &[Subscriber], id: TopicId, now: u64) {
        let word = self.word(id);
        let mut emitted = 0u32;
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
            if inner.pause.contains(&d) {
                self.rebase(inner, id);
                continue;
            }
            if self.skip_misses(inner, id, now, emitted) {
                continue;
            }
            // A period ended at `d` with no beat. A topic FAILED by a `down` beat fires at every
            // missed period, whatever `allowed_misses` (see `down.rs`).
            let missed = slot.missed.saturating_add(1);
            let down = Self::down_serial(inner, id);
            let failing = missed >= slot.allowed || down.is_some();
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
            slot.known_until = d;
            slot.next_deadline = d.saturating_add(step);
            if failing {
                if st != State::Failed {
                    slot.since = self.abs(d);
                }
                let since = slot.since;
                emitted += 1;
                // Only `advance` runs `judge_due`, and it wakes the consumers when done.
                let mut ev = Event::failed(id, missed, self.abs(d), since);
                if let Some(serial) = down {
                    ev = ev.with_reason(serial);
                }
                self.emit_deferred(inner, subs, ev);
            }
        }
    }

    /// Count at once the missed periods of a due topic (its next deadline `d` is before `now`)
    /// that need no event of their own: the quiet ones below `allowed_misses`, and, once the
    /// topic has had `MAX_FAILED_PER_RUN - 1` events in this run, all but the latest one
    /// due. Never across a local pause (its deadlines are re-based, not counted). Returns
    /// whether any were counted; the caller then goes on from the next deadline as usual.
    fn skip_misses(&self, inner: &mut Inner, id: TopicId, now: u64, emitted: u32) -> bool {
        let step = self.step(inner, id);
        let slot = inner.slots[id as usize];
        let d = slot.next_deadline;
        // Deadlines after `d` that are due too (`d < now`).
        let more = (now - 1 - d) / step;
        let quiet = if Self::down_serial(inner, id).is_some() {
            0 // each missed period of a topic that said `down` fires
        } else {
            slot.allowed.saturating_sub(slot.missed).saturating_sub(1)
        };
        let mut skip = if quiet > 0 {
            more.min(u64::from(quiet))
        } else if emitted + 1 >= MAX_FAILED_PER_RUN {
            more
        } else {
            0
        };
        let pause = &inner.pause;
        if !pause.is_empty() && d < pause.start {
            skip = skip.min((pause.start - 1 - d) / step + 1);
        }
        if skip == 0 {
            return false;
        }
        let slot = &mut inner.slots[id as usize];
        slot.missed = slot
            .missed
            .saturating_add(u32::try_from(skip).unwrap_or(u32::MAX));
        slot.known_until = d.saturating_add((skip - 1).saturating_mul(step));
        slot.next_deadline = d.saturating_add(skip.saturating_mul(step));
        true
    }

    /// Take in a FRESH beat, if any: reset the missed count, set the next deadline one first
    /// offset after the beat, and emit `resumed` if the topic was FAILED. Returns false when
    /// the topic is not watched.
    ///
    /// A latest beat at or before [`Slot::known_until`] (e.g. a beat recorded late with an old
    /// explicit time) is old news: the topic is known past it (missed periods counted, an
    /// outage reported, or watched again only since then), so it keeps its state, count,
    /// `since` and next deadline (the beat still raised `last_seen`). Only a later beat ends an
    /// outage, resets the count, or moves the next deadline.
    pub(super) fn take_fresh(&self, inner: &mut Inner, subs: &[Subscriber], id: TopicId) -> bool {
        let word = self.word(id);
        let known_until = inner.slots[id as usize].known_until;
        let mut w = word.load(Ordering::Acquire);
        let mut stale;
        loop {
            let st = word::state(w);
            if !st.is_watched() {
                return false;
            }
            if w & FRESH == 0 {
                return true;
            }
            stale = word::ts(w) <= known_until;
            let mut new = w & !FRESH;
            if st == State::Failed && !stale {
                new = word::with_state(new, State::Alive);
            }
            match word.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        if stale {
            return true;
        }
        let beat_at = word::ts(w);
        let first = self.first_offset(inner, id);
        let resumed = (word::state(w) == State::Failed).then(|| {
            let slot = &inner.slots[id as usize];
            let downtime = self.abs(beat_at).saturating_sub(slot.since);
            Event::resumed(id, slot.missed, self.abs(beat_at), downtime)
        });
        let slot = &mut inner.slots[id as usize];
        slot.missed = 0;
        slot.next_deadline = beat_at.saturating_add(first);
        if let Some(ev) = resumed {
            // Emitted with the slot up to date: the policy, releasing its dependents, judges
            // whether it is about to fail again from its new deadline, not the old one.
            Self::clear_down(inner, id);
            self.emit(inner, subs, ev);
        }
        true
    }

    /// Put a watched topic on the wheel for its next deadline. Phi topics are also looked at
    /// once per mean interval, because a new beat can pull their suspicion time earlier.
    pub(super) fn arm(&self, inner: &mut Inner, id: TopicId, now: u64) {
        let mut wake = inner.slots[id as usize].next_deadline;
        if self.word(id).load(Ordering::Acquire) & PHI != 0 {
            wake = wake.min(now.saturating_add(self.step(inner, id)));
        }
        let tick = self.tick_of(wake);
        if tick == NEVER {
            // Past the end of the range: it never fires (scheduled, it would be due at once
            // once the wheel reached the end of time, and re-armed there without end).
            inner.wheel.cancel(id);
        } else {
            inner.wheel.schedule(id, tick);
        }
    }

    /// Time from a beat to the first missed period: the period plus grace, or the phi
    /// suspicion time (phi topics have no grace: `acceptable_pause` is theirs).
    pub(super) fn first_offset(&self, inner: &Inner, id: TopicId) -> u64 {
        let slot = &inner.slots[id as usize];
        if self.word(id).load(Ordering::Acquire) & PHI != 0 {
            if let Some(p) = self.phi.lock().get(&id) {
                return p.suspicion_after_ns().max(self.resolution_ns);
            }
        }
        slot.period_ns.saturating_add(slot.grace_ns)
    }

    /// Time between further missed periods: the period (grace is paid once, in the first
    /// offset, so the n-th deadline is `last + n * period + grace`), or the phi mean interval.
    pub(super) fn step(&self, inner: &Inner, id: TopicId) -> u64 {
        let slot = &inner.slots[id as usize];
        if self.word(id).load(Ordering::Acquire) & PHI != 0 {
            if let Some(p) = self.phi.lock().get(&id) {
                return (p.mean_ns() as u64).max(self.resolution_ns);
            }
        }
        slot.period_ns
    }
}
