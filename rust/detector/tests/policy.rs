//! Silences and dependencies (`policy.rs`): exact event streams with their marks.

use super::*;

/// (kind, topic, missed, at in ms, silenced, suppressed_by).
fn marks(events: Vec<Event>) -> Vec<(EventKind, TopicId, u32, u64, bool, TopicId)> {
    events
        .into_iter()
        .map(|e| {
            (
                e.kind,
                e.topic,
                e.missed,
                e.at_ns / MS,
                e.silenced,
                e.suppressed_by,
            )
        })
        .collect()
}

const NONE: TopicId = crate::event::NO_TOPIC;

#[test]
fn a_silence_marks_events_and_a_still_failed_topic_alerts_when_it_ends() {
    let r = Rig::new(S, 1);
    let a = r.add("svc.db.main");
    let b = r.add("svc.api");
    let id = r
        .det
        .silence("svc.db.>", None, 2500 * MS, "upgrade")
        .unwrap();
    assert_eq!(id, 1);
    r.at(2200 * MS);
    assert_eq!(
        marks(r.take()),
        vec![
            (Failed, a, 1, 1000, true, NONE),
            (Failed, a, 2, 2000, true, NONE),
            (Failed, b, 1, 1000, false, NONE),
            (Failed, b, 2, 2000, false, NONE),
        ]
    );
    // The silence ends at 2.5 while `a` is still FAILED: it alerts then, in time order with
    // the deadlines after it.
    r.at(3200 * MS);
    assert_eq!(
        marks(r.take()),
        vec![
            (Failed, a, 2, 2500, false, NONE),
            (Failed, a, 3, 3000, false, NONE),
            (Failed, b, 3, 3000, false, NONE),
        ]
    );
    assert!(r.det.silences().is_empty());
    let st = r.det.stats();
    assert_eq!((st.silenced, st.released), (2, 1));
    // Alerted: its resumed goes out unmarked.
    r.beat(a);
    assert_eq!(marks(r.take()), vec![(Resumed, a, 3, 3200, false, NONE)]);
}

#[test]
fn an_outage_inside_a_silence_is_marked_both_ways_and_never_released() {
    let r = Rig::new(S, 1);
    let a = r.add("svc.a");
    r.det.silence("svc.*", None, 10 * S, "").unwrap();
    r.at(1500 * MS);
    r.beat(a);
    assert_eq!(
        marks(r.take()),
        vec![
            (Failed, a, 1, 1000, true, NONE),
            (Resumed, a, 1, 1500, true, NONE),
        ]
    );
    r.at(10 * S + 1);
    // Failed again at 2.5 .. 9.5 (silenced); at the end it is FAILED and was never alerted.
    let ev = marks(r.take());
    assert_eq!(ev.len(), 9);
    assert_eq!(ev.last().unwrap(), &(Failed, a, 8, 10_000, false, NONE));
    assert!(ev[..ev.len() - 1].iter().all(|e| e.4));
}

#[test]
fn unsilence_releases_at_once_and_a_topic_learned_later_is_silenced_too() {
    let r = Rig::new(S, 1);
    let id = r.det.silence("svc.>", None, 100 * S, "").unwrap();
    let a = r.add("svc.late"); // learned after the silence was made
    r.at(1500 * MS);
    assert_eq!(marks(r.take()), vec![(Failed, a, 1, 1000, true, NONE)]);
    r.at(1700 * MS);
    assert!(r.det.unsilence(id));
    assert!(!r.det.unsilence(id));
    assert_eq!(marks(r.take()), vec![(Failed, a, 1, 1700, false, NONE)]);
    r.at(2500 * MS);
    assert_eq!(marks(r.take()), vec![(Failed, a, 2, 2000, false, NONE)]);
}

#[test]
fn a_later_silence_starts_on_time_and_overlapping_silences_hold_until_the_last_ends() {
    let r = Rig::new(S, 1);
    let a = r.add("svc.a");
    r.det
        .silence("svc.a", Some(1500 * MS), 2500 * MS, "")
        .unwrap();
    r.det.silence("svc.*", Some(2 * S), 3500 * MS, "").unwrap();
    r.at(4200 * MS);
    assert_eq!(
        marks(r.take()),
        vec![
            (Failed, a, 1, 1000, false, NONE),
            (Failed, a, 2, 2000, true, NONE),
            (Failed, a, 3, 3000, true, NONE),
            // Alerted at 1.0 already: nothing is released when the silences end.
            (Failed, a, 4, 4000, false, NONE),
        ]
    );
}

#[test]
fn bad_silences_are_refused_with_the_value() {
    let r = Rig::new(S, 1);
    r.at(5 * S);
    let err = r.det.silence("svc.>", None, 5 * S, "").unwrap_err();
    assert!(err.to_string().contains("ends at 5000000000 ns"), "{err}");
    let err = r.det.silence("svc.>.x", None, 6 * S, "").unwrap_err();
    assert!(err.to_string().contains("\"svc.>.x\""), "{err}");
    assert!(r.det.depends("svc.>", "svc.*").is_err());
}

#[test]
fn children_are_suppressed_while_the_parent_is_failed_and_released_when_it_resumes_first() {
    let r = Rig::new(S, 1);
    r.det.depends("svc.api.>", "svc.db").unwrap();
    let db = r.add("svc.db");
    let x = r.add("svc.api.x");
    let y = r.add("svc.api.y");
    r.at(1500 * MS);
    // The wheel's order within a tick is arbitrary: the children are suppressed whether the
    // parent was judged before them or not.
    let mut first = marks(r.take());
    first.sort_by_key(|e| e.1);
    assert_eq!(
        first,
        vec![
            (Failed, db, 1, 1000, false, NONE),
            (Failed, x, 1, 1000, false, db),
            (Failed, y, 1, 1000, false, db),
        ]
    );
    r.beat(y); // y resumes while the parent is still down: suppressed, as its outage was
    assert_eq!(marks(r.take()), vec![(Resumed, y, 1, 1500, false, db)]);
    r.at(2500 * MS);
    let mut second = marks(r.take());
    second.sort_by_key(|e| e.1);
    assert_eq!(
        second,
        vec![
            (Failed, db, 2, 2000, false, NONE),
            (Failed, x, 2, 2000, false, db),
        ]
    );
    // The parent resumes before x: x, still down and never alerted, alerts at once after it.
    r.beat(db);
    assert_eq!(
        marks(r.take()),
        vec![
            (Resumed, db, 2, 2500, false, NONE),
            (Failed, x, 2, 2500, false, NONE),
        ]
    );
    r.beat(x);
    assert_eq!(marks(r.take()), vec![(Resumed, x, 2, 2500, false, NONE)]);
    assert_eq!(r.det.stats().suppressed, 4);
    assert_eq!(r.det.stats().released, 1);
}

#[test]
fn a_child_that_resumes_while_the_parent_is_down_resumes_suppressed() {
    let r = Rig::new(S, 1);
    let db = r.add("svc.db");
    r.at(1500 * MS); // the parent fails first
    r.take();
    r.det.depends("svc.api.>", "svc.db").unwrap(); // declared with the parent known
    let x = r.add("svc.api.x");
    r.at(2600 * MS);
    assert_eq!(
        marks(r.take()),
        vec![
            (Failed, db, 2, 2000, false, NONE),
            (Failed, x, 1, 2500, false, db),
        ]
    );
    r.beat(x);
    r.beat(db);
    assert_eq!(
        marks(r.take()),
        vec![
            (Resumed, x, 1, 2600, false, db),
            (Resumed, db, 2, 2600, false, NONE),
        ]
    );
    assert_eq!(r.det.stats().released, 0);
}

/// (kind, missed or count, at in ms, flapping on) of the events.
fn flaps(events: Vec<Event>) -> Vec<(EventKind, u32, u64, Option<bool>)> {
    events
        .into_iter()
        .map(|e| (e.kind, e.missed, e.at_ns / MS, e.is_flapping()))
        .collect()
}

#[test]
fn flapping_starts_holds_back_and_settles_with_where_the_topic_stands() {
    let r = Rig::new(S, 1);
    r.det.set_flapping(2, 10 * S, true).unwrap();
    let a = r.add("svc.a");
    // Three outages of one period each: fail at n + 1, resume at n + 1.5.
    for n in 0..3u64 {
        r.at(n * 1500 * MS + 1100 * MS);
        r.at(n * 1500 * MS + 1500 * MS);
        r.beat(a);
    }
    assert_eq!(
        flaps(r.take()),
        vec![
            (Failed, 1, 1000, None),
            (Resumed, 1, 1500, None),
            (Failed, 1, 2500, None),
            (Resumed, 1, 3000, None),
            (Failed, 1, 4000, None),
            // The third outage ends: more than 2 within 10 s. Its resumed is held back.
            (Flapping, 3, 4500, Some(true)),
        ]
    );
    assert_eq!(r.det.flapping_topics(), 1);
    // Down again, for good: held back while it flaps; it settles 10 s after its last
    // transition (the outage that began at 5.5), and its failure is delivered then: by the
    // deadline at 15.5 itself, its `failed` coming right after the settle.
    r.at(16 * S);
    assert_eq!(
        flaps(r.take()),
        vec![
            (Flapping, 0, 15_500, Some(false)),
            (Failed, 11, 15_500, None),
        ]
    );
    assert_eq!(r.det.flapping_topics(), 0);
    let st = r.det.stats();
    assert_eq!(st.held, 10); // resumed at 4.5, failed at 5.5 .. 14.5
    assert_eq!(st.released, 0);
    // Settling between deadlines: the failure is released at the settle time.
    r.det.set_flapping(2, 10_250 * MS, true).unwrap();
    r.beat(a); // resumed at 16.0 (delivered: not flapping), then flapping again from below
    for n in 0..3u64 {
        r.at(16 * S + n * 1500 * MS + 1100 * MS);
        r.at(16 * S + n * 1500 * MS + 1500 * MS);
        r.beat(a);
    }
    r.take();
    r.at(40 * S);
    let got = flaps(r.take());
    assert_eq!(got[0], (Flapping, 0, 31_750, Some(false)), "{got:?}");
    assert_eq!(got[1], (Failed, 11, 31_750, None), "{got:?}");
    assert_eq!(got[2], (Failed, 12, 32_500, None), "{got:?}");
    assert_eq!(r.det.stats().released, 1);
}

#[test]
fn flapping_without_hold_delivers_everything_and_can_be_turned_off() {
    let r = Rig::new(S, 1);
    r.det.set_flapping(1, 10 * S, false).unwrap();
    let a = r.add("svc.a");
    for n in 0..2u64 {
        r.at(n * 1500 * MS + 1100 * MS);
        r.at(n * 1500 * MS + 1500 * MS);
        r.beat(a);
    }
    assert_eq!(
        flaps(r.take()),
        vec![
            (Failed, 1, 1000, None),
            (Resumed, 1, 1500, None),
            (Failed, 1, 2500, None),
            (Resumed, 1, 3000, None),
            (Flapping, 2, 3000, Some(true)),
        ]
    );
    r.at(3200 * MS);
    r.det.set_flapping(0, 0, true).unwrap();
    assert_eq!(flaps(r.take()), vec![(Flapping, 0, 3200, Some(false))]);
    assert!(r.det.set_flapping(3, 0, true).is_err());
}

#[test]
fn a_removed_flapping_topic_settles_silently() {
    let r = Rig::new(S, 1);
    r.det.set_flapping(1, 10 * S, true).unwrap();
    let a = r.add("svc.a");
    for n in 0..2u64 {
        r.at(n * 1500 * MS + 1100 * MS);
        r.at(n * 1500 * MS + 1500 * MS);
        r.beat(a);
    }
    assert_eq!(flaps(r.take()).last().unwrap().0, Flapping);
    r.det.remove(a).unwrap();
    r.at(30 * S);
    assert_eq!(flaps(r.take()), vec![]);
}
