//! Handing events to the subscriber queues, never waiting for room while holding the detector
//! lock.
//!
//! Events are emitted under the detector lock (that is what orders a topic's events across the
//! driver and the beat path). When no subscriber queue is `block`, pushing cannot wait, so an
//! event is pushed at once, under the lock. Otherwise it is put aside (`Inner::pending`), and
//! when the lock is released the thread appends what it put aside to the outbox and pushes the
//! outbox, in order, up to its own events ([`Detector::deliver`]), holding only the `turn`
//! mutex. A push that finds a `block` queue full lets go of the subscriber list and waits for
//! room holding nothing but `turn`, which nothing that a queue's consumer may call needs
//! except another event's delivery: subscribe, unsubscribe, pause, add, remove, status and the
//! lock-free beat path do not. (A consumer that itself emits into its own full `block` queue
//! — a beat, a `resume`, `advance` on its own thread — still waits for itself.)
//!
//! The caller returns once its events are pushed, so a `block` queue still holds producers
//! back. Each event goes to the queues subscribed when it is pushed, newest first: a queue
//! subscribed while events wait gets them too, and one unsubscribed meanwhile does not. While
//! events wait in the outbox, new ones join them even if no `block` queue is left, so that
//! no queue sees a topic's events out of order.

use super::flap::Verdict;
use super::*;

/// Events a run of the driver puts aside before it lets go of the lock to push them.
pub(super) const DELIVER_EVERY: usize = 4096;
/// Emptied outbox buffers kept for reuse.
const SPARE_BUFFERS: usize = 4;

impl Detector {
    /// Emit `ev` (under the detector lock): push it into the queues of `subs` that want it now,
    /// or put it aside for [`deliver`](Detector::deliver).
    pub(super) fn emit(&self, inner: &mut Inner, subs: &[Subscriber], ev: Event) {
        self.hand_out(inner, subs, ev, true);
    }

    /// [`emit`](Detector::emit) without waking the consumers of a push made now: the caller
    /// wakes them once, with [`flush`](Detector::flush), after a burst.
    pub(super) fn emit_deferred(&self, inner: &mut Inner, subs: &[Subscriber], ev: Event) {
        self.hand_out(inner, subs, ev, false);
    }

    #[inline]
    fn hand_out(&self, inner: &mut Inner, subs: &[Subscriber], mut ev: Event, wake: bool) {
        let verdict = if ev.kind == EventKind::Received {
            self.counters.received.fetch_add(1, Ordering::Relaxed);
            Verdict::Deliver
        } else {
            // Failed and resumed are marked, or held back, by the alerting policy (`policy.rs`).
            self.police(inner, &mut ev)
        };
        // `failed` and `resumed` are counted as handed out: not those held back (`held`).
        match verdict {
            Verdict::Deliver => {
                self.count_handed_out(&ev);
                self.push_or_set_aside(inner, subs, ev, wake);
            }
            Verdict::Hold => {}
            Verdict::Starts { count } => {
                if !inner.policy.holds_flapping() {
                    self.count_handed_out(&ev);
                    self.push_or_set_aside(inner, subs, ev, wake);
                }
                let flapping = Event::flapping(ev.topic, true, count, ev.at_ns);
                self.push_or_set_aside(inner, subs, flapping, wake);
            }
        }
        if ev.kind == EventKind::Resumed && !inner.policy.is_idle() {
            // Its children held back meanwhile are alerted after it.
            self.release_children(inner, subs, ev.topic, ev.at_ns);
        }
    }

    #[inline]
    fn count_handed_out(&self, ev: &Event) {
        match ev.kind {
            EventKind::Failed => self.counters.failed.fetch_add(1, Ordering::Relaxed),
            EventKind::Resumed => self.counters.resumed.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    #[inline]
    pub(super) fn push_or_set_aside(
        &self,
        inner: &mut Inner,
        subs: &[Subscriber],
        ev: Event,
        wake: bool,
    ) {
        if !self.pushes_now(inner) {
            inner.pending.push(ev);
            return;
        }
        for sub in subs {
            if ev.kind != EventKind::Received || sub.received {
                if wake {
                    sub.queue.push(ev);
                } else {
                    sub.queue.push_deferred(ev);
                }
            }
        }
    }

    /// Whether an event emitted now is pushed at once: no queue can make the push wait, and
    /// nothing emitted before waits to be pushed (it would be overtaken).
    #[inline]
    fn pushes_now(&self, inner: &Inner) -> bool {
        self.blocking.load(Ordering::Relaxed) == 0
            && inner.pending.is_empty()
            && self.delivered.load(Ordering::Acquire) == inner.appended
    }

    /// Append the events put aside under this hold of the lock to the outbox (still under the
    /// lock, so the outbox is in the order emitted). Returns the outbox position that
    /// [`deliver`](Detector::deliver) must reach for them to be pushed: 0 if there were none,
    /// so that a caller that emitted nothing never waits for others' events.
    pub(super) fn commit(&self, inner: &mut Inner) -> u64 {
        if inner.pending.is_empty() {
            return 0;
        }
        // A recycled buffer takes its place: a run of the driver fills one of DELIVER_EVERY
        // events per chunk, and growing a fresh one each time costs more than the pushes.
        let spare = self.spare.lock().pop().unwrap_or_default();
        let events = std::mem::replace(&mut inner.pending, spare);
        inner.appended += events.len() as u64;
        self.outbox.lock().push_back(events);
        inner.appended
    }

    /// Push the outbox in order until `upto` events of it are pushed (at once if they are).
    /// Call it holding neither the detector lock nor the subscriber list: it may wait for room
    /// in a `block` queue.
    pub(super) fn deliver(&self, upto: u64) {
        if self.delivered.load(Ordering::Acquire) >= upto {
            return;
        }
        let _turn = self.turn.lock();
        while self.delivered.load(Ordering::Acquire) < upto {
            let Some(mut events) = self.outbox.lock().pop_front() else {
                break; // cannot happen: `upto` counts only what was appended
            };
            self.push_all(&events);
            self.delivered
                .fetch_add(events.len() as u64, Ordering::Release);
            {
                let _pushed = self.pushed_lock.lock();
                self.pushed.notify_all();
            }
            events.clear();
            let mut spare = self.spare.lock();
            if spare.len() < SPARE_BUFFERS && events.capacity() <= 2 * DELIVER_EVERY {
                spare.push(events);
            }
        }
    }

    /// The outbox position reached so far: every event emitted before this call is pushed
    /// once [`wait_pushed`](Detector::wait_pushed) of it returns true (events pushed at once,
    /// under the lock, are pushed before it is read).
    pub fn outbox_mark(&self) -> u64 {
        self.inner.lock().appended
    }

    /// Wait until the outbox is pushed up to `mark` (from [`outbox_mark`](Detector::outbox_mark)),
    /// at most `timeout` (`None`: no bound). False on timeout. It pushes nothing itself and holds
    /// no lock while it waits: the threads that emitted the events push them; a consumer of a
    /// full `block` queue that waits here for its own queue times out.
    pub fn wait_pushed(&self, mark: u64, timeout: Option<std::time::Duration>) -> bool {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let mut guard = self.pushed_lock.lock();
        while self.delivered.load(Ordering::Acquire) < mark {
            match deadline {
                None => self.pushed.wait(&mut guard),
                Some(d) => {
                    if self.pushed.wait_until(&mut guard, d).timed_out() {
                        return self.delivered.load(Ordering::Acquire) >= mark;
                    }
                }
            }
        }
        true
    }

    /// Push `events`, in order, into every queue subscribed (that wants them), newest first.
    ///
    /// Newest first: a feed that replaces another (subscribe the new queue, then close and
    /// unsubscribe the old one) has every event the old queue took already: the consumer of
    /// the new one can tell the events both got from the new queue's `pushed` count.
    fn push_all(&self, events: &[Event]) {
        let mut subs = self.subscribers.read();
        // Queues the current event was pushed into before a wait for room let go of the list.
        let mut reached: Vec<Arc<EventQueue<Event>>> = Vec::new();
        for &ev in events {
            reached.clear();
            'event: loop {
                for sub in subs.iter().rev() {
                    if ev.kind == EventKind::Received && !sub.received {
                        continue;
                    }
                    if reached.iter().any(|q| Arc::ptr_eq(q, &sub.queue)) {
                        continue;
                    }
                    if sub.queue.try_push_deferred(ev).is_ok() {
                        continue;
                    }
                    // Full `block` queue: let go of the list (subscribe and unsubscribe need
                    // it) and wait for room; then push where the event is still owed.
                    reached.extend(
                        subs.iter()
                            .rev()
                            .take_while(|s| !Arc::ptr_eq(&s.queue, &sub.queue))
                            .map(|s| s.queue.clone()),
                    );
                    let full = sub.queue.clone();
                    Self::flush(&subs);
                    drop(subs);
                    full.wait_for_room();
                    subs = self.subscribers.read();
                    continue 'event;
                }
                break;
            }
        }
        Self::flush(&subs);
    }

    /// Run `f` under the detector lock with the subscriber list, then push what it emitted.
    pub(super) fn emitting<R>(&self, f: impl FnOnce(&mut Inner, &[Subscriber]) -> R) -> R {
        let (result, upto) = {
            let mut inner = self.inner.lock();
            let subscribers = self.subscribers.read();
            let result = f(&mut inner, &subscribers);
            (result, self.commit(&mut inner))
        };
        self.deliver(upto);
        result
    }

    /// Wake the consumers of events pushed with a deferred wake-up.
    pub(super) fn flush(subs: &[Subscriber]) {
        for sub in subs {
            sub.queue.flush_wake();
        }
    }
}
