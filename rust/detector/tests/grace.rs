//! Grace under the manual clock: the n-th deadline is `last + n * period + grace`.

use super::{Rig, MS, S};
use crate::detector::*;
use crate::event::EventKind::{LocalPause, Resumed};

const G: u64 = 300 * MS;

fn graced(r: &Rig, name: &str, allowed: u32) -> TopicId {
    r.det
        .add(
            name,
            Some(TopicConfig::fixed(S, allowed).with_grace(G)),
            None,
        )
        .unwrap()
}

#[test]
fn a_topic_never_heard_fails_one_period_plus_grace_after_it_is_added() {
    let r = Rig::new(S, 1);
    r.at(2 * S);
    let a = graced(&r, "a", 1);
    let dl = 3 * S + G;
    assert_eq!(r.det.status(a).unwrap().next_deadline_ns, Some(dl));
    r.at(dl); // exactly at the deadline: still on time
    assert!(r.take().is_empty());
    r.at(dl + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, dl, dl)]);
    assert_eq!(r.det.status(a).unwrap().failed_since_ns, Some(dl));
}

#[test]
fn the_nth_deadline_is_last_plus_n_periods_plus_grace() {
    let r = Rig::new(S, 1);
    let a = graced(&r, "a", 1);
    r.at(500 * MS);
    r.beat(a);
    let last = 500 * MS;
    r.at(last + 4 * S + G + MS);
    let want: Vec<_> = (1..=4u64)
        .map(|n| Event::failed(a, n as u32, last + n * S + G, last + S + G))
        .collect();
    assert_eq!(r.take(), want);
    // The first beat after the failure: downtime runs from `since`, the first graced deadline.
    r.beat(a);
    let at = last + 4 * S + G + MS;
    assert_eq!(
        r.take(),
        vec![Event::resumed(a, 4, at, at - (last + S + G))]
    );
}

#[test]
fn a_beat_within_the_grace_is_on_time_and_re_arms_from_itself() {
    let r = Rig::new(S, 1);
    let a = graced(&r, "a", 1);
    for k in 1..=50u64 {
        // Every beat is late by almost the whole grace, against the previous beat's deadline...
        r.at(k * (S + G));
        r.beat(a);
    }
    assert!(
        r.take().is_empty(),
        "late beats within the grace never fail"
    );
    let last = 50 * (S + G);
    assert_eq!(
        r.det.status(a).unwrap().next_deadline_ns,
        Some(last + S + G)
    );
}

#[test]
fn allowed_misses_count_graced_deadlines() {
    let r = Rig::new(S, 1);
    let a = graced(&r, "a", 3);
    r.beat(a); // at 0
    r.at(2 * S + G + MS);
    assert!(r.take().is_empty());
    assert_eq!(r.det.status(a).unwrap().missed, 2);
    r.at(3 * S + G);
    assert!(r.take().is_empty());
    r.at(3 * S + G + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 3, 3 * S + G, 3 * S + G)]);
}

#[test]
fn defaults_carry_grace_and_configure_changes_it_from_now() {
    let clock = Arc::new(crate::clock::ManualClock::new(0));
    let det = Detector::new(
        ClockSource::Manual(clock.clone()),
        TopicConfig::fixed(S, 1).with_grace(G),
        MS,
    )
    .unwrap();
    let events = det.subscribe(64, Overflow::Block, false).unwrap();
    let a = det.add("a", None, None).unwrap();
    let st = det.status(a).unwrap();
    assert_eq!((st.grace_ns, st.next_deadline_ns), (G, Some(S + G)));
    clock.set(500 * MS).unwrap();
    let cfg = det.config(a).unwrap().with_grace(0);
    det.set_config(a, cfg, None).unwrap();
    assert_eq!(det.status(a).unwrap().next_deadline_ns, Some(S + 500 * MS));
    // set_period keeps the grace.
    det.set_config(a, cfg.with_grace(G), None).unwrap();
    det.set_period(a, 2 * S, None).unwrap();
    let st = det.status(a).unwrap();
    assert_eq!((st.grace_ns, st.period_ns), (G, 2 * S));
    assert_eq!(st.next_deadline_ns, Some(2 * S + 500 * MS + G));
    clock.set(2 * S + 500 * MS + G + MS).unwrap();
    let mut got = Vec::new();
    events.try_pop_batch(&mut got, 64);
    let dl = 2 * S + 500 * MS + G;
    assert_eq!(got, vec![Event::failed(a, 1, dl, dl)]);
}

#[test]
fn resume_expects_a_beat_one_period_plus_grace_later() {
    let r = Rig::new(S, 1);
    let a = graced(&r, "a", 1);
    r.det.pause(a).unwrap();
    r.at(10 * S);
    r.det.resume(a, None).unwrap();
    assert_eq!(r.det.status(a).unwrap().next_deadline_ns, Some(11 * S + G));
    r.at(11 * S + G + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, 11 * S + G, 11 * S + G)]);
}

#[test]
fn after_a_local_pause_a_silent_topic_fails_a_period_plus_grace_after_the_wake_up() {
    let r = Rig::new(S, 1);
    let a = graced(&r, "a", 1);
    r.at(500 * MS);
    r.beat(a);
    r.clock.stall(10 * S);
    r.clock.advance(0); // wakes at 10.5
    assert_eq!(r.take()[0].kind, LocalPause);
    let dl = 11 * S + 500 * MS + G;
    assert_eq!(r.det.status(a).unwrap().next_deadline_ns, Some(dl));
    r.at(dl + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, dl, dl)]);
}

#[test]
fn phi_topics_ignore_grace() {
    let r = Rig::new(S, 1);
    let phi = crate::phi::PhiConfig {
        acceptable_pause_ns: 0,
        ..Default::default()
    };
    let with = TopicConfig {
        phi: Some(phi),
        ..TopicConfig::fixed(S, 1).with_grace(10 * S)
    };
    let without = TopicConfig {
        phi: Some(phi),
        ..TopicConfig::fixed(S, 1)
    };
    let a = r.det.add("a", Some(with), None).unwrap();
    let b = r.det.add("b", Some(without), None).unwrap();
    r.beat(a);
    r.beat(b);
    let (sa, sb) = (r.det.status(a).unwrap(), r.det.status(b).unwrap());
    assert_eq!(
        sa.grace_ns,
        10 * S,
        "kept in the config, shown in the status"
    );
    assert_eq!(sa.next_deadline_ns, sb.next_deadline_ns);
    r.at(sa.next_deadline_ns.unwrap() + MS);
    let got = r.take();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got
        .iter()
        .all(|e| e.kind != Resumed && e.at_ns == got[0].at_ns));
}
