//! Detector semantics under the manual clock: exact times, counts and order. The general cases
//! are here; each area has its own file beside it, sharing this file's `Rig` and units.

mod adopt;
mod down;
mod emit;
mod grace;
mod lag;
mod pause;
mod policy;
mod resume;
mod worst;

use super::*;
use crate::clock::ManualClock;
use crate::event::EventKind::{CaughtUp, Failed, Flapping, Lagging, LocalPause, Received, Resumed};

pub(super) const S: u64 = 1_000_000_000;
pub(super) const MS: u64 = 1_000_000;

/// A detector on a manual clock with one `block` queue (shared with the area files).
pub(super) struct Rig {
    pub(super) clock: Arc<ManualClock>,
    pub(super) det: Arc<Detector>,
    pub(super) events: Arc<EventQueue<Event>>,
}

impl Rig {
    pub(super) fn new(period: u64, allowed: u32) -> Self {
        let clock = Arc::new(ManualClock::new(0));
        let det = Detector::new(
            ClockSource::Manual(clock.clone()),
            TopicConfig::fixed(period, allowed),
            MS,
        )
        .unwrap();
        let events = det.subscribe(1 << 16, Overflow::Block, false).unwrap();
        Self { clock, det, events }
    }

    pub(super) fn at(&self, t: u64) {
        self.clock.set(t).unwrap();
    }

    pub(super) fn take(&self) -> Vec<Event> {
        let mut out = Vec::new();
        self.events.try_pop_batch(&mut out, usize::MAX);
        out
    }

    pub(super) fn add(&self, name: &str) -> TopicId {
        self.det.add(name, None, None).unwrap()
    }

    pub(super) fn beat(&self, id: TopicId) {
        assert!(matches!(self.det.beat(id, None), Beat::Recorded { .. }));
    }
}

#[test]
fn a_topic_never_heard_fails_one_period_after_it_is_expected() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(S); // exactly at the deadline: not missed yet
    assert!(r.take().is_empty());
    assert_eq!(r.det.status(a).unwrap().state, State::Pending);
    r.at(S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, S, S)]);
    let st = r.det.status(a).unwrap();
    assert_eq!(st.state, State::Failed);
    assert_eq!(st.last_seen_ns, None);
    assert_eq!(st.failed_since_ns, Some(S));
}

#[test]
fn failed_fires_again_every_period_with_the_growing_count() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(5 * S + MS);
    let got = r.take();
    let want: Vec<_> = (1..=5)
        .map(|n| Event::failed(a, n, n as u64 * S, S))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn allowed_misses_delays_the_first_failed_to_the_nth_missed_period() {
    let r = Rig::new(S, 3);
    let a = r.add("a");
    r.at(0);
    r.beat(a);
    r.at(2 * S + MS);
    assert!(r.take().is_empty(), "two misses are within the allowance");
    assert_eq!(r.det.status(a).unwrap().missed, 2);
    assert_eq!(r.det.status(a).unwrap().state, State::Alive);
    r.at(4 * S + MS);
    assert_eq!(
        r.take(),
        vec![
            Event::failed(a, 3, 3 * S, 3 * S),
            Event::failed(a, 4, 4 * S, 3 * S)
        ]
    );
}

#[test]
fn a_beat_within_the_allowance_resets_the_count_without_events() {
    let r = Rig::new(S, 3);
    let a = r.add("a");
    r.at(2 * S + MS);
    assert_eq!(r.det.status(a).unwrap().missed, 2);
    r.beat(a);
    r.at(2 * S + 500 * MS);
    assert_eq!(r.det.status(a).unwrap().missed, 0);
    // Three fresh misses are needed again: from 2.001 the third ends at 5.001.
    r.at(5 * S + MS);
    assert!(r.take().is_empty());
    r.at(5 * S + 2 * MS);
    assert_eq!(r.take(), vec![Event::failed(a, 3, 5 * S + MS, 5 * S + MS)]);
}

#[test]
fn beats_exactly_every_period_never_fail() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    for k in 1..=100 {
        r.at(k * S);
        r.beat(a);
    }
    assert!(r.take().is_empty());
    assert_eq!(r.det.status(a).unwrap().last_seen_ns, Some(100 * S));
}

#[test]
fn the_first_beat_after_failure_resumes_at_once_from_the_beat_path() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(2 * S + 300 * MS);
    assert_eq!(r.take().len(), 2);
    r.beat(a); // no advance in between: the beat path itself emits `resumed`
    assert_eq!(
        r.take(),
        vec![Event::resumed(a, 2, 2 * S + 300 * MS, S + 300 * MS)]
    );
    let st = r.det.status(a).unwrap();
    assert_eq!((st.state, st.missed), (State::Alive, 0));
    // Re-armed from the beat: the next miss is the period ending at 3.3.
    r.at(3 * S + 300 * MS);
    assert!(r.take().is_empty());
    r.at(3 * S + 301 * MS);
    assert_eq!(
        r.take(),
        vec![Event::failed(a, 1, 3 * S + 300 * MS, 3 * S + 300 * MS)]
    );
}

#[test]
fn a_beat_stamped_before_the_last_missed_deadline_is_old_news() {
    // Issue 14 item 5 (this test used to expect `resumed` and then `failed(1)` again).
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(3 * S + MS);
    assert_eq!(r.take().len(), 3); // failed 1, 2, 3 at 1.0, 2.0, 3.0
                                   // Stamped 2.5 s (a late-delivered message): the outage was reported past it already.
    assert!(matches!(
        r.det.beat(a, Some(2 * S + 500 * MS)),
        Beat::Recorded { resume: true }
    ));
    assert!(r.take().is_empty());
    let st = r.det.status(a).unwrap();
    assert_eq!(
        (st.state, st.missed, st.failed_since_ns),
        (State::Failed, 3, Some(S))
    );
    assert_eq!(st.last_seen_ns, Some(2 * S + 500 * MS));
    r.at(4 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 4, 4 * S, S)]);
    // Stamped after the last missed deadline (4.0), though before the clock: a recovery.
    r.det.beat(a, Some(4 * S + 500_000));
    assert_eq!(
        r.take(),
        vec![Event::resumed(a, 4, 4 * S + 500_000, 3 * S + 500_000)]
    );
    r.at(5 * S + MS);
    assert_eq!(
        r.take(),
        vec![Event::failed(a, 1, 5 * S + 500_000, 5 * S + 500_000)]
    );
}

#[test]
fn pause_stops_events_and_resume_expects_a_beat_one_period_later() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    assert!(r.det.pause(a).unwrap());
    assert!(!r.det.pause(a).unwrap(), "already paused");
    r.at(10 * S);
    assert!(r.take().is_empty());
    r.beat(a); // recorded while paused
    let st = r.det.status(a).unwrap();
    assert_eq!((st.state, st.last_seen_ns), (State::Paused, Some(10 * S)));
    assert!(r.det.resume(a, None).unwrap());
    assert_eq!(r.det.status(a).unwrap().state, State::Alive);
    r.at(11 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, 11 * S, 11 * S)]);
}

#[test]
fn removed_topics_go_quiet_and_their_name_can_be_reused() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(S + MS);
    assert_eq!(r.take().len(), 1);
    r.det.remove(a).unwrap();
    assert_eq!(r.det.lookup("a"), None);
    assert_eq!(r.det.name(a).as_deref(), Some("a"));
    assert_eq!(r.det.beat(a, None), Beat::Refused);
    r.at(5 * S);
    assert!(r.take().is_empty());
    assert!(matches!(r.det.pause(a), Err(DetectorError::Unknown(_))));
    // The queue was drained: the id is reused, under a new handle (issue 14 item 7).
    let old = r.det.handle_of(a);
    let again = r.det.add_handle("a", None, None).unwrap();
    assert_ne!(again, old);
    assert_eq!(r.det.resolve(again), Some(a));
    assert_eq!(r.det.status(again).unwrap().state, State::Pending);
    assert_eq!(r.det.record_handle(old, 5 * S), Beat::Unknown);
    assert!(r.det.status(old).is_err());
    assert_eq!(r.det.name(old), None);
    assert_eq!(r.det.status(again).unwrap().last_seen_ns, None);
    assert_eq!(r.det.statuses().len(), 1);
    assert_eq!(r.det.len(), 1);
}

#[test]
fn a_period_change_applies_from_now_and_keeps_the_count() {
    let r = Rig::new(10 * S, 1);
    let a = r.add("a");
    r.at(S);
    r.det.set_period(a, S / 2, None).unwrap();
    r.at(S + 500 * MS);
    assert!(r.take().is_empty());
    r.at(S + 501 * MS);
    assert_eq!(
        r.take(),
        vec![Event::failed(a, 1, S + 500 * MS, S + 500 * MS)]
    );
    assert_eq!(r.det.status(a).unwrap().period_ns, S / 2);
    assert!(
        matches!(r.det.set_period(a, 0, None), Err(DetectorError::Invalid(m)) if m.contains("period"))
    );
}

#[test]
fn stop_refuses_beats_and_start_expects_everything_again() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    let b = r.add("b");
    r.beat(a);
    r.det.stop();
    assert_eq!(r.det.beat(a, None), Beat::Refused);
    r.at(10 * S);
    assert!(r.take().is_empty());
    assert_eq!(r.det.status(a).unwrap().state, State::Stopped);
    let c = r.add("c"); // added while stopped: armed at start
    assert_eq!(r.det.status(c).unwrap().state, State::Stopped);
    r.det.start(None);
    assert_eq!(r.det.status(a).unwrap().state, State::Alive);
    assert_eq!(r.det.status(b).unwrap().state, State::Pending);
    r.at(11 * S + MS);
    let mut got: Vec<_> = r
        .take()
        .iter()
        .map(|e| (e.topic, e.missed, e.at_ns))
        .collect();
    got.sort();
    assert_eq!(got, vec![(a, 1, 11 * S), (b, 1, 11 * S), (c, 1, 11 * S)]);
    let stats = r.det.stats();
    assert_eq!((stats.refused, stats.failed), (1, 3));
}

#[test]
fn ten_thousand_topics_a_hundred_silent_exact_counts() {
    let r = Rig::new(S, 2);
    let ids: Vec<TopicId> = (0..10_000).map(|i| r.add(&format!("svc.{i}"))).collect();
    let silent = |id: TopicId| id % 100 == 7;
    // Ten periods: the silent ones stop after t=0.
    r.det.beat_ids(&ids, None);
    for k in 1..=10 {
        r.at(k * S);
        let live: Vec<_> = ids.iter().copied().filter(|&id| !silent(id)).collect();
        assert_eq!(r.det.beat_ids(&live, None), 9_900);
    }
    r.at(10 * S + MS);
    let got = r.take();
    // Each silent topic missed 10 periods; failed from the 2nd: missed = 2..=10.
    assert_eq!(got.len(), 100 * 9);
    for id in ids.iter().copied().filter(|&id| silent(id)) {
        let mine: Vec<u32> = got
            .iter()
            .filter(|e| e.topic == id)
            .map(|e| e.missed)
            .collect();
        assert_eq!(mine, (2..=10).collect::<Vec<_>>(), "topic {id}");
    }
    assert!(got.iter().all(|e| e.kind == Failed && e.detail == 2 * S));
    // They come back: one resumed each, with missed = 10.
    let silent_ids: Vec<_> = ids.iter().copied().filter(|&id| silent(id)).collect();
    r.det.beat_ids(&silent_ids, None);
    let back = r.take();
    assert_eq!(back.len(), 100);
    assert!(back.iter().all(|e| e.kind == Resumed && e.missed == 10));
    assert!(back.iter().all(|e| e.downtime_ns() == Some(8 * S + MS)));
    let counts = r.det.state_counts();
    assert_eq!(counts[State::Alive as usize], 10_000);
}

#[test]
fn received_events_follow_resumed_and_carry_seq_and_latency() {
    let r = Rig::new(S, 1);
    let all = r.det.subscribe(64, Overflow::Block, true).unwrap();
    let a = r.add("a");
    r.at(S + MS);
    assert!(matches!(
        r.det.beat_with(a, None, 42, 3 * MS as i64),
        Beat::Recorded { resume: true }
    ));
    let mut got = Vec::new();
    all.try_pop_batch(&mut got, 16);
    let kinds: Vec<_> = got.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![Failed, Resumed, Received]);
    assert_eq!(got[2].seq(), Some(42));
    assert_eq!(got[2].latency(), Some(3 * MS as i64));
    r.beat(a); // no sequence number, no send time
    got.clear();
    all.try_pop_batch(&mut got, 16);
    assert_eq!(
        (got[0].kind, got[0].seq(), got[0].latency()),
        (Received, None, None)
    );
    // The subscriber that did not ask for `received` gets none.
    assert!(r.take().iter().all(|e| e.kind != Received));
    assert_eq!(r.det.stats().received, 2);
    assert!(r.det.unsubscribe(&all));
    assert!(!r.det.wants_received());
}

#[test]
fn overflow_losses_are_counted_by_policy() {
    let r = Rig::new(S, 1);
    let small = r.det.subscribe(4, Overflow::DropNewest, false).unwrap();
    for i in 0..10 {
        r.add(&format!("t{i}"));
    }
    r.at(S + MS);
    let stats = small.stats();
    assert_eq!((stats.pushed, stats.dropped_newest, stats.len), (4, 6, 4));
    assert_eq!(r.take().len(), 10, "the big queue lost nothing");
}

#[test]
fn batches_by_name_count_unknown_names_or_add_them() {
    let r = Rig::new(S, 1);
    r.add("a");
    r.add("b");
    assert_eq!(r.det.beat_names(["a", "b", "zz"], None), (2, 1));
    assert_eq!(r.det.stats().unknown, 1);
    r.det.set_auto_add(true);
    assert_eq!(r.det.beat_names(["a", "new"], None), (2, 0));
    let id = r.det.lookup("new").unwrap();
    assert_eq!(r.det.status(id).unwrap().state, State::Alive);
    assert_eq!(
        r.det.beat_name("newer", None),
        Beat::Recorded { resume: false }
    );
}

#[test]
fn bad_configs_name_the_field() {
    let r = Rig::new(S, 1);
    let err = r
        .det
        .add("x", Some(TopicConfig::fixed(S, 0)), None)
        .unwrap_err();
    assert!(err.to_string().contains("allowed_misses"), "{err}");
    let err = r.det.add("", None, None).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    assert!(Detector::new(ClockSource::default(), TopicConfig::fixed(0, 1), MS).is_err());
}

#[test]
fn phi_topics_learn_their_rhythm_and_fail_at_the_suspicion_time() {
    let r = Rig::new(S, 1);
    let cfg = PhiConfig {
        acceptable_pause_ns: 0,
        ..PhiConfig::default()
    };
    let a = r
        .det
        .add(
            "jittery",
            Some(TopicConfig {
                phi: Some(cfg),
                ..TopicConfig::fixed(S, 1)
            }),
            None,
        )
        .unwrap();
    // The same history, kept by hand, to know the exact suspicion time.
    let mut model = PhiState::new(cfg, S);
    let mut t = 0;
    r.at(t);
    r.beat(a);
    for k in 0..200u64 {
        let gap = S - 100 * MS + (k % 5) * 50 * MS; // 0.9 .. 1.1 s
        t += gap;
        r.at(t);
        r.beat(a);
        model.record_interval(gap);
    }
    assert!(r.take().is_empty(), "regular beats never fail");
    let st = r.det.status(a).unwrap();
    assert!(
        st.phi.unwrap() < 1.0,
        "phi right after a beat: {:?}",
        st.phi
    );
    let fail_at = t + model.suspicion_after_ns();
    r.at(fail_at);
    assert!(r.take().is_empty());
    r.at(fail_at + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, fail_at, fail_at)]);
    assert!(r.det.status(a).unwrap().phi.unwrap() >= cfg.threshold);
    // The outage is not a sample: the model still expects ~1 s beats after the resume.
    r.beat(a);
    assert_eq!(r.take()[0].kind, Resumed);
}

#[test]
fn concurrent_beats_and_driver_give_well_formed_sequences() {
    let r = Rig::new(10 * MS, 1);
    let ids: Vec<TopicId> = (0..64).map(|i| r.add(&format!("c{i}"))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let beaters: Vec<_> = (0..2)
        .map(|k| {
            let det = r.det.clone();
            let ids = ids.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for &id in ids.iter().skip(k).step_by(2) {
                        if (n + id as u64) % 7 != 0 {
                            det.beat(id, None);
                        }
                    }
                    n += 1;
                }
            })
        })
        .collect();
    for _ in 0..2_000 {
        r.clock.advance(3 * MS);
    }
    stop.store(true, Ordering::Relaxed);
    for b in beaters {
        b.join().unwrap();
    }
    let events = r.take();
    assert!(!events.is_empty());
    for &id in &ids {
        // Per topic: failed(1), failed(2), ... then resumed(n) with n = last failed count.
        let mut expect_next = 1;
        for e in events.iter().filter(|e| e.topic == id) {
            match e.kind {
                Failed => {
                    assert_eq!(e.missed, expect_next, "topic {id}: {events:?}");
                    expect_next += 1;
                }
                Resumed => {
                    assert_eq!(e.missed, expect_next - 1, "topic {id}");
                    assert!(expect_next > 1, "resumed without failed for {id}");
                    expect_next = 1;
                }
                Received | LocalPause | Lagging | CaughtUp | Flapping => unreachable!(),
            }
        }
        let failed_now = r.det.status(id).unwrap().state == State::Failed;
        assert_eq!(failed_now, expect_next > 1, "topic {id} state vs events");
    }
}

#[test]
fn stop_takes_in_a_recorded_beat_before_it_stops_a_failed_topic() {
    // Issue 14 item 6: a beat recorded lock-free but not yet settled when `stop` comes.
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(2 * S + MS);
    assert_eq!(r.take().len(), 2);
    assert_eq!(
        r.det.record(a, 2 * S + 2 * MS),
        Beat::Recorded { resume: true }
    );
    r.det.stop();
    assert_eq!(
        r.take(),
        vec![Event::resumed(a, 2, 2 * S + 2 * MS, S + 2 * MS)]
    );
    r.at(9 * S);
    r.det.start(None);
    let st = r.det.status(a).unwrap();
    assert_eq!((st.state, st.missed), (State::Alive, 0));
    r.at(10 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, 10 * S, 10 * S)]);
}

#[test]
fn a_restart_keeps_failed_topics_failed_and_counts_on() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(2 * S + MS);
    assert_eq!(r.take().len(), 2);
    r.det.stop();
    r.at(7 * S);
    r.det.start(None);
    let st = r.det.status(a).unwrap();
    assert_eq!(
        (st.state, st.missed, st.failed_since_ns),
        (State::Failed, 2, Some(S))
    );
    r.at(8 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 3, 8 * S, S)]);
}

#[test]
fn a_deadline_at_the_end_of_the_range_never_fires_and_never_spins() {
    // Issue 14 item 9: period + grace saturate at u64::MAX ns; at a 1 ns resolution the
    // deadline's tick used to wrap to 0 and be re-armed as due without end (an overflow panic
    // in debug builds).
    let clock = Arc::new(ManualClock::new(0));
    let det = Detector::new(
        ClockSource::Manual(clock.clone()),
        TopicConfig::fixed(u64::MAX / 2 + 1, 1).with_grace(u64::MAX / 2 + 1),
        1,
    )
    .unwrap();
    let events = det.subscribe(16, Overflow::DropNewest, false).unwrap();
    let a = det.add("far", None, None).unwrap();
    det.beat(a, Some(5));
    assert_eq!(det.advance_to(Some(1 << 62)), 0);
    assert_eq!(det.advance_to(Some(u64::MAX)), 0);
    let st = det.status(a).unwrap();
    assert_eq!(
        (st.state, st.next_deadline_ns),
        (State::Alive, Some(u64::MAX))
    );
    let mut out = Vec::new();
    assert_eq!(events.try_pop_batch(&mut out, 16), 0);
}

#[test]
fn a_late_beat_older_than_a_counted_quiet_miss_does_not_reset_the_count() {
    // allowed_misses 3: misses at 1 and 2 are counted quietly; a beat stamped 0.5 recorded
    // after them is old news, as it is for a FAILED topic (issue 14 item 5).
    let r = Rig::new(S, 3);
    let a = r.add("a");
    r.at(2 * S + 500 * MS);
    assert_eq!(r.det.status(a).unwrap().missed, 2);
    r.det.beat(a, Some(500 * MS));
    r.at(3 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 3, 3 * S, 3 * S)]);
}

#[test]
fn a_beat_stamped_before_a_topic_was_added_does_not_pull_its_first_deadline_earlier() {
    let r = Rig::new(S, 1);
    r.at(10 * S);
    let a = r.add("a");
    r.det.beat(a, Some(9 * S + 500 * MS)); // in flight from before the topic was expected
    let st = r.det.status(a).unwrap();
    assert_eq!(st.next_deadline_ns, Some(11 * S));
    r.at(11 * S);
    assert_eq!(r.take(), vec![]);
    r.at(11 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, 11 * S, 11 * S)]);
}

#[test]
fn a_beat_whose_topic_is_removed_and_its_id_reused_before_it_completes_owes_the_new_one_nothing() {
    let r = Rig::new(S, 1);
    let beats = r.det.subscribe(64, Overflow::Block, true).unwrap();
    let a = r.det.add_handle("a", None, None).unwrap();
    // The lock-free half of a beat of `a` (as `beat` by handle does it) ...
    let result = r.det.record_handle(a, 5 * MS);
    assert!(r.det.needs_completion(result));
    // ... then, before its events are emitted, `a` is removed and its id goes to `b`.
    r.det.remove(a).unwrap();
    let b = r.det.add_handle("b", None, None).unwrap();
    assert_eq!(
        b as TopicId, a as TopicId,
        "the id is reused at once: no event waits"
    );
    r.det.complete(a, result, 5 * MS, 7, 0);
    let mut got = Vec::new();
    beats.try_pop_batch(&mut got, 64);
    assert_eq!(got, vec![], "a's beat must not become a `received` of b");
    // b's own beats are emitted as usual.
    r.det.beat_handle(b, Some(6 * MS), 8, 0);
    beats.try_pop_batch(&mut got, 64);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].kind, got[0].at_ns), (Received, 6 * MS));
}

#[test]
fn batches_of_any_length_record_every_beat_once_across_chunk_edges() {
    // 64 is the lookup chunk: lengths around its multiples, with unknown names and handles,
    // duplicates and a shuffled order, must record exactly the known ones.
    let r = Rig::new(10 * S, 1);
    let names: Vec<String> = (0..300).map(|i| format!("topic-{i}")).collect();
    let ids: Vec<TopicId> = names.iter().map(|n| r.add(n)).collect();
    for (round, len) in [0usize, 1, 63, 64, 65, 128, 129, 300]
        .into_iter()
        .enumerate()
    {
        let t = (round as u64 + 1) * MS;
        r.at(t);
        // Every 7th position is unknown; every 5th repeats the one before.
        let pick = |i: usize| (i * 37) % 300;
        let asked: Vec<String> = (0..len)
            .map(|i| match i {
                i if i % 7 == 3 => format!("nobody-{i}"),
                i if i % 5 == 4 => names[pick(i - 1)].clone(),
                i => names[pick(i)].clone(),
            })
            .collect();
        let known = asked.iter().filter(|n| !n.starts_with("nobody")).count();
        let stats = r.det.stats();
        assert_eq!(r.det.beat_names(asked.iter(), None), (known, len - known));
        let by_id: Vec<TopicId> = asked
            .iter()
            .map(|n| r.det.lookup(n).unwrap_or(u32::MAX))
            .collect();
        assert_eq!(r.det.beat_ids(&by_id, None), known);
        let handles: Vec<Handle> = by_id.iter().map(|&id| u64::from(id)).collect();
        let b = r.det.record_handles(handles.iter().copied(), None);
        assert_eq!(r.det.finish(b), (known, len - known));
        let after = r.det.stats();
        assert_eq!(after.beats - stats.beats, 3 * known as u64, "len {len}");
        assert_eq!(after.unknown - stats.unknown, 3 * (len - known) as u64);
        for n in asked.iter().filter(|n| !n.starts_with("nobody")) {
            let id = r.det.lookup(n).unwrap();
            assert_eq!(r.det.status(id).unwrap().last_seen_ns, Some(t), "{n}");
        }
    }
    assert_eq!(ids.len(), 300);
}
