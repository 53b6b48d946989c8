//! What a monitor's dispatch feeds must not hand over twice across a feed switch.
//!
//! A monitor opens a new feed (subscribes a new queue) when its listeners' wants change, then
//! closes the old one: events pushed in between reach both queues. The new feed's thread
//! delivers only after the old ones are done (the monitor sees to that), and each feed filters
//! every batch it pops through one shared [`Newest`]:
//!
//! * `failed`, `resumed`: a topic's events have strictly increasing `at` (each `failed` at its
//!   own deadline, a `resumed` at a beat later than the last deadline counted), and every queue
//!   gets them in that order. So one is a duplicate or stale exactly when its `at` is below the
//!   newest delivered for its topic (same handle), or equal with the same kind and `missed`.
//!   This holds however late an event reaches a feed (a `block` push put aside).
//! * `local_pause`: the same, by `at` alone (it is about no topic).
//! * `received`: a beat's time is whatever the caller recorded (`beat(now=...)` may go back), so
//!   no order rule applies. Only exact repeats carried by both feeds of a switch are skipped:
//!   a replaced feed notes each `received` it pops (handle, `at`, `seq`), and the feed that
//!   replaced it skips those. Only adjacent feeds overlap (the old queue is closed right after
//!   the new one is subscribed, and a closed queue takes nothing), so a feed that starts
//!   filtering forgets what feeds before its predecessor noted. One more event may be shared:
//!   the one being pushed when the switch is made (it reached the old queue, then waited for
//!   room in a `block` queue, and goes to the new one too). It is its topic's newest `received`
//!   delivered, so a feed that follows one that delivered `received` events also skips a repeat
//!   of its topic's newest. Two beats of a topic at the same clock reading with the same `seq`
//!   (a ManualClock not moved between them) then count as one.

use crate::event::{Event, EventKind};
use std::collections::HashMap;

/// Per topic slot, the newest `failed`/`resumed` delivered, and the `received` events carried
/// by replaced feeds (see the module docs). Handles are the core's 64-bit topic handles.
#[derive(Debug, Default)]
pub struct Newest {
    /// Per slot (a handle's low 32 bits): the full handle of the topic the entry is about
    /// (`u64::MAX`: none), its `at_ns` and code (`missed * 2 + 1` for resumed).
    handles: Vec<u64>,
    ats: Vec<u64>,
    codes: Vec<u64>,
    pause_at: Option<u64>,
    /// The newest `lagging`/`caught_up` delivered: its time and kind.
    lag_at: Option<(u64, EventKind)>,
    /// The newest feed opened ([`open_feed`](Newest::open_feed)); feeds below it are replaced.
    latest: u64,
    /// The newest feed that filtered so far (entries of feeds before its predecessor are gone).
    filtering: u64,
    /// `received` (handle, at_ns, seq) popped by a replaced feed -> the newest such feed.
    carried: HashMap<(u64, u64, u64), u64>,
    /// Per slot, the newest `received` delivered (handle, at_ns, seq; handle `u64::MAX`: none).
    last_received: Vec<(u64, u64, u64)>,
    /// The first feed that delivered a `received` event (0: none yet).
    first_received_feed: u64,
}

impl Newest {
    pub fn new() -> Self {
        Self::default()
    }

    /// A new feed is opened: its number (1, 2, ...). Call it before subscribing its queue, so
    /// that every event the old feed shares with it is popped after the old one is replaced.
    pub fn open_feed(&mut self) -> u64 {
        self.latest += 1;
        self.latest
    }

    /// `received` events noted by replaced feeds, waiting to be skipped.
    pub fn carried(&self) -> usize {
        self.carried.len()
    }

    /// Whether feed `feed` should hand over `ev` (about the topic `handle`; ignored for a local
    /// pause); notes it as delivered when so.
    pub fn fresh(&mut self, feed: u64, ev: &Event, handle: u64) -> bool {
        match ev.kind {
            EventKind::Received => self.fresh_received(feed, (handle, ev.at_ns, ev.detail)),
            EventKind::LocalPause => {
                if self.pause_at.is_some_and(|at| ev.at_ns <= at) {
                    return false;
                }
                self.pause_at = Some(ev.at_ns);
                true
            }
            EventKind::Failed | EventKind::Resumed => {
                let code = u64::from(ev.missed) * 2 + u64::from(ev.kind == EventKind::Resumed);
                self.fresh_ordered(handle, ev.at_ns, code)
            }
            // In a topic's order too; codes apart from the others' (it may share their `at`).
            EventKind::Flapping => self.fresh_ordered(handle, ev.at_ns, u64::MAX - ev.detail),
            EventKind::Lagging | EventKind::CaughtUp => {
                // They alternate: one at the same time as the other kind is distinct.
                if self
                    .lag_at
                    .is_some_and(|(at, kind)| ev.at_ns < at || (ev.at_ns == at && ev.kind == kind))
                {
                    return false;
                }
                self.lag_at = Some((ev.at_ns, ev.kind));
                true
            }
        }
    }

    fn fresh_ordered(&mut self, handle: u64, at: u64, code: u64) -> bool {
        let slot = (handle & 0xFFFF_FFFF) as usize;
        if slot >= self.handles.len() {
            let len = (slot + 1).max(self.handles.len() * 3 / 2).max(1024);
            self.handles.resize(len, u64::MAX);
            self.ats.resize(len, 0);
            self.codes.resize(len, 0);
        } else if self.handles[slot] == handle {
            let newest = self.ats[slot];
            if at < newest || (at == newest && self.codes[slot] == code) {
                return false;
            }
        }
        self.handles[slot] = handle;
        self.ats[slot] = at;
        self.codes[slot] = code;
        true
    }

    fn fresh_received(&mut self, feed: u64, key: (u64, u64, u64)) -> bool {
        if feed > self.filtering {
            self.filtering = feed;
            // Only the predecessor's queue overlapped this feed's.
            if !self.carried.is_empty() {
                self.carried.retain(|_, by| by.saturating_add(1) >= feed);
            }
        }
        let slot = (key.0 & 0xFFFF_FFFF) as usize;
        if slot >= self.last_received.len() {
            let len = (slot + 1).max(self.last_received.len() * 3 / 2).max(1024);
            self.last_received.resize(len, (u64::MAX, 0, 0));
        }
        let follows = self.first_received_feed != 0 && self.first_received_feed < feed;
        let repeat = self.carried.get(&key).is_some_and(|&by| by < feed)
            || (follows && self.last_received[slot] == key);
        if feed < self.latest {
            // Replaced: its successor has (or will have) every event it pops from now on.
            self.carried.insert(key, feed);
        }
        if !repeat {
            self.last_received[slot] = key;
            if self.first_received_feed == 0 {
                self.first_received_feed = feed;
            }
        }
        !repeat
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::NO_SEQ;

    fn handle(slot: u32, gen: u32) -> u64 {
        (u64::from(gen) << 32) | u64::from(slot)
    }

    #[test]
    fn failed_and_resumed_are_skipped_when_not_newer() {
        let mut n = Newest::new();
        let h = handle(3, 0);
        let f1 = Event::failed(3, 1, 100, 100);
        let f2 = Event::failed(3, 2, 200, 100);
        assert!(n.fresh(1, &f1, h));
        assert!(n.fresh(1, &f2, h));
        assert!(!n.fresh(2, &f1, h), "older than the newest delivered");
        assert!(!n.fresh(2, &f2, h), "the same event again");
        // Same at, another kind: distinct.
        assert!(n.fresh(2, &Event::resumed(3, 2, 200, 100), h));
        // The slot reused by another topic (new generation): not compared.
        assert!(n.fresh(2, &f1, handle(3, 1)));
    }

    #[test]
    fn local_pause_by_at() {
        let mut n = Newest::new();
        assert!(n.fresh(1, &Event::local_pause(50, 10), 0));
        assert!(!n.fresh(2, &Event::local_pause(50, 10), 0));
        assert!(n.fresh(2, &Event::local_pause(60, 10), 0));
    }

    #[test]
    fn received_going_back_in_time_is_kept() {
        // The review's bug: after a switch, a beat recorded at an earlier time than the last
        // one was dropped as stale.
        let mut n = Newest::new();
        let h = handle(0, 0);
        let a = n.open_feed();
        let b = n.open_feed();
        let c = n.open_feed();
        assert_eq!((a, b, c), (1, 2, 3));
        assert!(n.fresh(c, &Event::received(0, 10_000, 1, 0), h));
        assert!(n.fresh(c, &Event::received(0, 5_000, 2, 0), h));
        assert!(n.fresh(c, &Event::received(0, 5_000, 3, 0), h));
        // Without seq (NO_SEQ), times going back and forth.
        assert!(n.fresh(c, &Event::received(0, 10_000, NO_SEQ, 0), h));
        assert!(n.fresh(c, &Event::received(0, 5_000, NO_SEQ, 0), h));
        assert!(n.fresh(c, &Event::received(0, 10_000, NO_SEQ, 0), h));
    }

    #[test]
    fn received_pushed_across_the_switch_is_delivered_once() {
        // Popped and delivered by the old feed before the switch, then pushed to the new one
        // too (it waited for room in a `block` queue meanwhile).
        let mut n = Newest::new();
        let h = handle(1, 0);
        let old = n.open_feed();
        let e = Event::received(1, 7, NO_SEQ, 0);
        assert!(n.fresh(old, &e, h));
        let new = n.open_feed();
        assert!(!n.fresh(new, &e, h));
        assert!(n.fresh(new, &Event::received(1, 8, NO_SEQ, 0), h));
    }

    #[test]
    fn received_carried_by_both_feeds_is_delivered_once() {
        let mut n = Newest::new();
        let h = handle(0, 0);
        let old = n.open_feed();
        let r = |at: u64, seq: u64| Event::received(0, at, seq, 0);
        assert!(n.fresh(old, &r(1, 1), h)); // before the switch: only the old feed has it
        let new = n.open_feed();
        // The old feed pops what the new one shares, in the same order.
        assert!(n.fresh(old, &r(3, 3), h));
        assert!(n.fresh(old, &r(2, 2), h)); // recorded back in time: still carried exactly
        assert_eq!(n.carried(), 2);
        assert!(!n.fresh(new, &r(3, 3), h));
        assert!(!n.fresh(new, &r(2, 2), h));
        assert!(n.fresh(new, &r(2, 4), h), "another seq: another beat");
        assert!(
            n.fresh(new, &r(1, 1), h),
            "the old feed had it before the switch only"
        );
        // A third feed forgets what the first noted.
        let third = n.open_feed();
        assert!(n.fresh(new, &r(9, 9), h)); // noted by the replaced second feed
        assert!(n.fresh(third, &r(5, 5), h));
        assert_eq!(n.carried(), 1);
        assert!(!n.fresh(third, &r(9, 9), h));
    }
}
