//! The self-pause guard under the manual clock: stalls, wake-ups, exact re-based deadlines.

use super::{Rig, MS, S};
use crate::detector::*;
use crate::event::EventKind::{Failed, LocalPause};

fn failed(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .filter(|e| e.kind == Failed)
        .copied()
        .collect()
}

#[test]
fn a_stall_is_a_local_pause_and_only_topics_silent_after_the_wake_up_fail() {
    let r = Rig::new(S, 1);
    let live = r.add("live");
    let dead = r.add("dead");
    r.at(500 * MS);
    r.beat(live);
    r.beat(dead); // dead's last beat: due again at 1.5, inside the stall
    r.clock.stall(10 * S); // 0.5 .. 10.5: the monitor is not running
    for k in 1..=10 {
        // Beats that arrived meanwhile, with their true times.
        r.det.beat(live, Some(k * S + 500 * MS));
    }
    assert!(r.take().is_empty(), "nothing runs during a stall");
    r.clock.advance(0); // wakes at 10.5
    assert_eq!(
        r.take(),
        vec![Event::local_pause(10 * S + 500 * MS, 10 * S)]
    );
    let st = r.det.status(dead).unwrap();
    assert_eq!((st.state, st.missed), (State::Alive, 0));
    assert_eq!(st.next_deadline_ns, Some(11 * S + 500 * MS));
    // A full period from the wake-up, exactly.
    r.at(11 * S + 500 * MS);
    r.beat(live);
    assert!(r.take().is_empty());
    r.at(11 * S + 501 * MS);
    let dl = 11 * S + 500 * MS;
    assert_eq!(r.take(), vec![Event::failed(dead, 1, dl, dl)]);
    let stats = r.det.stats();
    assert_eq!((stats.local_pauses, stats.local_pause_ns), (1, 10 * S));
}

#[test]
fn failed_topics_keep_their_count_and_count_on_from_the_wake_up() {
    let r = Rig::new(S, 1);
    let f = r.add("f"); // never heard: fails at 1, 2, ...
    r.at(2 * S + 500 * MS);
    assert_eq!(failed(&r.take()).len(), 2);
    r.clock.stall(10 * S); // to 12.5
    r.clock.advance(MS);
    let got = r.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].kind, LocalPause);
    let st = r.det.status(f).unwrap();
    assert_eq!((st.state, st.missed), (State::Failed, 2));
    r.at(13 * S + 501 * MS);
    assert_eq!(r.take(), vec![Event::failed(f, 3, 13 * S + 500 * MS, S)]);
}

#[test]
fn ordinary_advances_are_never_pauses_however_long() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(0);
    r.clock.advance(100 * S + MS);
    let got = r.take();
    // Every missed period counted, none re-based; one run reports at most
    // MAX_FAILED_PER_RUN of them one by one, then the latest with the exact count.
    assert_eq!(got.len(), 64);
    assert!(got.iter().all(|e| e.kind == Failed && e.topic == a));
    assert_eq!(got[62], Event::failed(a, 63, 63 * S, S));
    assert_eq!(got[63], Event::failed(a, 100, 100 * S, S));
    assert_eq!(r.det.stats().local_pauses, 0);
}

#[test]
fn a_short_stall_or_a_disabled_guard_fires_as_usual() {
    for (stall, guard) in [(4 * S, Some(5 * S)), (10 * S, None)] {
        let r = Rig::new(S, 1);
        r.det.set_max_local_pause(guard).unwrap();
        let a = r.add("a");
        r.clock.stall(stall);
        r.clock.advance(MS);
        let got = r.take();
        assert_eq!(got.len() as u64, stall / S, "stall {stall} guard {guard:?}");
        assert!(got.iter().all(|e| e.kind == Failed && e.topic == a));
        assert_eq!(r.det.stats().local_pauses, 0);
    }
    let r = Rig::new(S, 1);
    assert_eq!(r.det.max_local_pause(), Some(DEFAULT_MAX_LOCAL_PAUSE_NS));
    assert!(r.det.set_max_local_pause(Some(0)).is_err());
}

#[test]
fn a_stall_of_a_stopped_detector_is_not_a_pause() {
    let r = Rig::new(S, 1);
    r.add("a");
    r.det.stop();
    r.clock.stall(10 * S);
    r.clock.advance(0);
    r.det.start(None);
    r.at(10 * S + 500 * MS);
    assert!(r.take().is_empty());
    assert_eq!(r.det.stats().local_pauses, 0);
}

#[test]
fn the_driver_wake_judges_the_gap_since_the_last_run() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.det.advance_to(Some(500 * MS));
    r.det.wake_at(Some(S)); // a normal tick
    assert!(r.take().is_empty());
    r.det.wake_at(Some(7 * S)); // 6 s since the last run
    assert_eq!(r.take(), vec![Event::local_pause(7 * S, 6 * S)]);
    assert_eq!(r.det.status(a).unwrap().next_deadline_ns, Some(8 * S));
}

#[test]
fn a_deadline_left_for_the_next_run_survives_a_second_pause() {
    // The first wake-up is off the 1 ms grid, so a deadline in its last partial tick is judged
    // only at the next run, which is the second wake-up.
    let r = Rig::new(10 * S, 1);
    r.at(500 * MS + 200_000);
    let a = r.add("a"); // due at 10.5002
    r.at(600 * MS);
    r.clock.stall(9 * S + 900 * MS + 500_000); // wakes at 10.5005
    r.clock.advance(0);
    r.clock.stall(10 * S);
    r.clock.advance(0);
    let got = r.take();
    assert_eq!(got.iter().filter(|e| e.kind == LocalPause).count(), 2);
    assert!(failed(&got).is_empty(), "{got:?}");
    let woke = 20 * S + 500 * MS + 500_000;
    assert_eq!(
        r.det.status(a).unwrap().next_deadline_ns,
        Some(woke + 10 * S)
    );
}

#[test]
fn phi_topics_are_not_convicted_by_a_pause() {
    let r = Rig::new(S, 1);
    let cfg = TopicConfig {
        phi: Some(crate::phi::PhiConfig::default()),
        ..TopicConfig::fixed(100 * MS, 1)
    };
    let a = r.det.add("phi", Some(cfg), None).unwrap();
    for _ in 0..100 {
        r.clock.advance(100 * MS);
        r.beat(a);
    }
    assert!(r.take().is_empty());
    r.clock.stall(10 * S);
    r.clock.advance(0);
    assert_eq!(r.take().len(), 1); // the pause itself
    r.clock.advance(50 * MS);
    r.beat(a); // the first beat after the wake-up
    for _ in 0..10 {
        r.clock.advance(100 * MS);
        r.beat(a);
    }
    assert!(r.take().is_empty());
    assert_eq!(r.det.status(a).unwrap().state, State::Alive);
}

#[test]
fn every_subscriber_gets_the_pause_received_or_not() {
    let r = Rig::new(S, 1);
    let beats = r.det.subscribe(16, Overflow::DropNewest, true).unwrap();
    r.clock.stall(6 * S);
    r.clock.advance(0);
    assert_eq!(r.take(), vec![Event::local_pause(6 * S, 6 * S)]);
    let mut got = Vec::new();
    beats.try_pop_batch(&mut got, 16);
    assert_eq!(got, vec![Event::local_pause(6 * S, 6 * S)]);
}

// -- the time stopped (stop .. start) is not watched, like a local pause ---------------------

#[test]
fn a_late_beat_stamped_while_stopped_does_not_end_a_held_outage_nor_count_the_stopped_span() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(5 * S);
    assert_eq!(r.take().len(), 4, "failed(1..4) at 1..4");
    r.det.stop();
    r.at(100 * S);
    r.det.start(None);
    // A beat stamped inside the stopped span, recorded after the restart: old news.
    assert!(matches!(r.det.beat(a, Some(50 * S)), Beat::Recorded { .. }));
    r.at(100 * S + 500 * MS);
    assert_eq!(r.take(), vec![], "no resumed at 50, no failed for 51..100");
    let st = r.det.status(a).unwrap();
    assert_eq!((st.state, st.missed), (State::Failed, 4));
    assert_eq!(st.last_seen_ns, Some(50 * S));
    // The count goes on one period after the restart.
    r.at(101 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 5, 101 * S, S)]);
    // A beat after the restart ends the outage.
    r.at(101 * S + 500 * MS);
    r.beat(a);
    assert_eq!(
        r.take(),
        vec![Event::resumed(a, 5, 101 * S + 500 * MS, 100 * S + 500 * MS)]
    );
}

#[test]
fn a_late_beat_stamped_while_stopped_gives_a_live_topic_one_period_from_the_restart() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(4 * S + 500 * MS);
    r.beat(a);
    r.take(); // failed(1..4), resumed at 4.5: ALIVE, due at 5.5
    r.at(5 * S);
    r.det.stop();
    r.at(100 * S);
    r.det.start(None);
    assert!(matches!(r.det.beat(a, Some(50 * S)), Beat::Recorded { .. }));
    r.at(101 * S);
    assert_eq!(r.take(), vec![], "the stopped span 5..100 is not counted");
    r.at(101 * S + MS);
    assert_eq!(
        failed(&r.take()),
        vec![Event::failed(a, 1, 101 * S, 101 * S)]
    );
}

#[test]
fn a_beat_stamped_at_the_restart_ends_a_held_outage() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(2 * S + MS);
    assert_eq!(r.take().len(), 2);
    r.det.stop();
    r.at(10 * S);
    r.det.start(None);
    r.beat(a); // at 10: not before the restart
    assert_eq!(r.take(), vec![Event::resumed(a, 2, 10 * S, 9 * S)]);
}
