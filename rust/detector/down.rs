//! Explicit failure: a beat that says `down` fails its topic at once, with the sender's reason.
//!
//! A `down` beat is not a beat for the deadlines: the periods go on counting as missed, and
//! while the topic is FAILED by a `down` every missed period fires `failed` again (whatever
//! `allowed_misses`), carrying the reason. Only a later good beat resumes it (`take_fresh`, as
//! after any failure). A `down` for a topic already FAILED fires nothing; it only updates the
//! reason later `failed` events carry.
//!
//! Events are small `Copy` values, so a `failed` event carries no text: it carries a reason
//! serial (in its `latency_ns`, unused by `failed`), and the text lives in [`Reasons`], read
//! when Python builds the event (as topic names are). Up beats never come here: the lock-free
//! beat path is unchanged.

use super::*;

/// Reason texts kept per topic (the newest ones): a `failed` event still queued when more
/// than this many newer reasons came for its topic is delivered with [`LOST_REASON`]. The
/// newest is always kept (later `failed` events of the outage carry it). Memory: at most this
/// many reasons (each up to 256 characters) per topic that ever said `down`.
pub const REASONS_PER_TOPIC: usize = 4;
/// The reason of a `failed` event whose text is no longer kept (see [`REASONS_PER_TOPIC`]).
pub const LOST_REASON: &str = "down (reason no longer held)";

/// Reason texts by serial, at most [`REASONS_PER_TOPIC`] per topic.
#[derive(Default)]
pub(super) struct Reasons {
    next: u64,
    by_serial: HashMap<u64, Arc<str>>,
    by_topic: HashMap<TopicId, VecDeque<u64>>,
}

impl Reasons {
    /// The serial of `text` for topic `id`: the newest one if it has the same text.
    pub(super) fn put(&mut self, id: TopicId, text: &str) -> u64 {
        let kept = self.by_topic.entry(id).or_default();
        if let Some(last) = kept.back() {
            if self.by_serial.get(last).is_some_and(|t| &**t == text) {
                return *last;
            }
        }
        let serial = self.next;
        self.next += 1;
        self.by_serial.insert(serial, Arc::from(text));
        kept.push_back(serial);
        if kept.len() > REASONS_PER_TOPIC {
            if let Some(old) = kept.pop_front() {
                self.by_serial.remove(&old);
            }
        }
        serial
    }

    /// Forget a topic's reasons (its id is reused).
    fn forget(&mut self, id: TopicId) {
        if let Some(kept) = self.by_topic.remove(&id) {
            for serial in kept {
                self.by_serial.remove(&serial);
            }
        }
    }

    fn get(&self, serial: u64) -> Option<Arc<str>> {
        self.by_serial.get(&serial).cloned()
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.by_serial.values().map(|t| t.len() + 48).sum::<usize>() + self.by_topic.len() * 64
    }
}

/// What became of a `down` beat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Down {
    /// The topic was not FAILED: `failed` was emitted now.
    Fired,
    /// The topic was FAILED already: nothing fired (later `failed` events carry this reason).
    AlreadyFailed,
    /// Not watched (paused, stopped, removed) or an unknown handle: nothing changed.
    Ignored,
}

impl Detector {
    /// A `down` beat for `topic` at `now` (absolute ns) saying `reason`: see the module docs.
    /// Takes the detector lock; may wait (with the lock released) for room in a full `block`
    /// queue, like any emitting call.
    pub fn down(&self, topic: impl Into<Handle>, now: Option<u64>, reason: &str) -> Down {
        let topic = topic.into();
        let t = self.rel_now(now);
        self.emitting(|inner, subs| match self.check_id(inner, topic) {
            Ok(id) => self.down_locked(inner, subs, id, t, reason),
            Err(_) => Down::Ignored,
        })
    }

    fn down_locked(
        &self,
        inner: &mut Inner,
        subs: &[Subscriber],
        id: TopicId,
        t: u64,
        reason: &str,
    ) -> Down {
        // A down beat taken in before the driver woke from a local pause (the intake thread
        // won the lock after the stall): this is the wake-up, so the deadlines inside the
        // pause are re-based below, as the driver would, instead of counted as missed.
        // (Only for a detector a driver wakes: one moved by `advance_to` alone has no pauses.)
        let woke = inner.running
            && match &self.clock {
                ClockSource::Monotonic(_) => inner.woken,
                ClockSource::Manual(c) => c.is_stalled(),
            };
        if woke {
            let now = self.rel_now(None);
            let pauses = self.counters.local_pauses.load(Ordering::Relaxed);
            self.guard_pause(inner, subs, now);
            if self.counters.local_pauses.load(Ordering::Relaxed) != pauses {
                inner.now = inner.now.max(now); // the driver's wake-up finds no second one
            }
        }
        let word = self.word(id);
        loop {
            // A good beat recorded before this one is taken in first (it may resume the topic).
            if !self.take_fresh(inner, subs, id) {
                return Down::Ignored; // not watched
            }
            let w = word.load(Ordering::Acquire);
            if w & FRESH != 0 {
                continue;
            }
            if word::state(w) == State::Failed {
                // Heard (raises `last_seen`), not FRESH: still no beat for the deadlines.
                let heard = word::after_beat(w, t) & !FRESH;
                if word
                    .compare_exchange(w, heard, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    continue;
                }
                let serial = self.reasons.lock().put(id, reason);
                inner.down.insert(id, serial);
                return Down::AlreadyFailed;
            }
            // The down beat raises `last_seen` (the sender was heard) but is no beat for the
            // deadlines: FRESH stays clear, so nothing takes it in as one.
            let new = word::with_state(word::after_beat(w, t) & !FRESH, State::Failed);
            if word
                .compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break;
            }
        }
        // Deadlines already passed but not judged yet (the driver runs at its next tick) are
        // counted now, quietly: `missed` is the count so far, and no later `failed` of this
        // outage comes with an earlier `at` than this one.
        if inner
            .pause
            .contains(&inner.slots[id as usize].next_deadline)
        {
            self.rebase(inner, id);
        }
        let step = self.step(inner, id);
        let slot = &mut inner.slots[id as usize];
        let d = slot.next_deadline;
        if d < t {
            let n = (t - 1 - d) / step + 1;
            slot.missed = slot
                .missed
                .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
            slot.known_until = slot
                .known_until
                .max(d.saturating_add((n - 1).saturating_mul(step)));
            slot.next_deadline = d.saturating_add(n.saturating_mul(step));
        }
        // A good beat stamped at or before the down beat is old news: it does not resume.
        slot.known_until = slot.known_until.max(t);
        slot.since = self.abs(t);
        let missed = slot.missed;
        let serial = self.reasons.lock().put(id, reason);
        inner.down.insert(id, serial);
        self.arm(inner, id, inner.now.max(t));
        let ev = Event::failed(id, missed, self.abs(t), self.abs(t)).with_reason(serial);
        self.emit(inner, subs, ev);
        Down::Fired
    }

    /// The reason serial of a topic FAILED by a `down` beat (None: not down).
    #[inline]
    pub(super) fn down_serial(inner: &Inner, id: TopicId) -> Option<u64> {
        if inner.down.is_empty() {
            None
        } else {
            inner.down.get(&id).copied()
        }
    }

    /// The topic is no longer FAILED by a `down` (resumed, re-armed, removed).
    #[inline]
    pub(super) fn clear_down(inner: &mut Inner, id: TopicId) {
        if !inner.down.is_empty() {
            inner.down.remove(&id);
        }
    }

    /// A topic's id is taken by a new topic: its reasons go.
    pub(super) fn forget_reasons(&self, id: TopicId) {
        self.reasons.lock().forget(id);
    }

    /// The text of a `failed` event's reason (None: a missed-period failure); [`LOST_REASON`]
    /// if no longer kept.
    pub fn reason_of(&self, ev: &Event) -> Option<Arc<str>> {
        let serial = ev.reason_serial()?;
        Some(
            self.reasons
                .lock()
                .get(serial)
                .unwrap_or_else(|| Arc::from(LOST_REASON)),
        )
    }
}
