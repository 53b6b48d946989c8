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
    assert_eq!(st.held, 11); // resumed at 4.5 (the one that started it), failed at 5.5 .. 14.5
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

// ----- review of issue 17 ---------------------------------------------------------------------

/// Three outages of one period each (fail at n*1.5 + 1, resume at n*1.5 + 1.5): flapping from
/// the third resume (4.5) with a threshold of 2.
fn flap3(r: &Rig, a: TopicId) {
    for n in 0..3u64 {
        r.at(n * 1500 * MS + 1100 * MS);
        r.at(n * 1500 * MS + 1500 * MS);
        r.beat(a);
    }
}

#[test]
fn a_flap_that_settles_up_resolves_the_alert_it_left_open() {
    let r = Rig::new(S, 1);
    r.det.set_flapping(2, 10 * S, true).unwrap();
    let a = r.add("svc.a");
    flap3(&r, a);
    // The failed at 4.0 went out; the resumed at 4.5 that starts the flapping is held back.
    let got = marks(r.take());
    assert_eq!(
        &got[got.len() - 2..],
        &[
            (Failed, a, 1, 4000, false, NONE),
            (Flapping, a, 3, 4500, false, NONE)
        ]
    );
    for k in 10..=40u64 {
        r.at(k * 500 * MS); // healthy from 4.5 on
        r.beat(a);
    }
    // Settled 10 s after the last transition (4.5), up: the open alert is resolved then,
    // with the count and length of the outage that ended last.
    let got = r.take();
    assert_eq!(
        flaps(got.clone()),
        vec![
            (Flapping, 0, 14_500, Some(false)),
            (Resumed, 1, 14_500, None)
        ]
    );
    assert_eq!(got[1].detail, 500 * MS); // downtime of the outage 4.0 .. 4.5
    let st = r.det.stats();
    assert_eq!((st.held, st.released, st.resumed, st.failed), (1, 1, 3, 3));
    // Nothing more is owed.
    r.at(20_900 * MS);
    assert!(r.take().is_empty());
}

#[test]
fn a_flap_settling_up_with_every_failure_held_owes_nothing() {
    let r = Rig::new(S, 1);
    r.det.set_flapping(2, 10 * S, true).unwrap();
    let a = r.add("svc.a");
    flap3(&r, a);
    r.take();
    // One more outage while flapping (failed 5.5, resumed 6.0): both held back.
    r.at(5600 * MS);
    r.at(6000 * MS);
    r.beat(a);
    // ... but the failed at 4.0 is still open: resolved at the settle (16.0), with the latest
    // outage's count and length.
    for k in 13..=34u64 {
        r.at(k * 500 * MS);
        r.beat(a);
    }
    let got = r.take();
    assert_eq!(
        flaps(got.clone()),
        vec![
            (Flapping, 0, 16_000, Some(false)),
            (Resumed, 1, 16_000, None)
        ]
    );
    assert_eq!(r.det.stats().held, 3);
}

#[test]
fn a_flap_that_settles_during_a_silence_keeps_the_silence_promises() {
    let r = Rig::new(S, 1);
    r.det.set_flapping(2, 10 * S, true).unwrap();
    let a = r.add("svc.a");
    let s = r.det.silence("svc.a", None, 100 * S, "maint").unwrap();
    flap3(&r, a);
    r.at(16 * S); // down since 5.5, held back; settles at 15.5
    let got = marks(r.take());
    assert_eq!(
        &got[got.len() - 2..],
        &[
            (Flapping, a, 0, 15_500, false, NONE),
            (Failed, a, 11, 15_500, true, NONE),
        ]
    );
    // (a) every failed of the outage was silenced: its resumed is too.
    r.at(20_200 * MS);
    r.beat(a);
    let got = marks(r.take());
    assert!(got[..got.len() - 1].iter().all(|e| e.0 == Failed && e.4));
    assert_eq!(got.last().unwrap(), &(Resumed, a, 15, 20_200, true, NONE));
    // (b) down again, settled under the silence, then unsilenced while FAILED: the alert it
    // never got goes out then, counted in released.
    let r = Rig::new(S, 1);
    r.det.set_flapping(2, 10 * S, true).unwrap();
    let a = r.add("svc.a");
    let s2 = r.det.silence("svc.a", None, 100 * S, "maint").unwrap();
    flap3(&r, a);
    r.at(20_200 * MS);
    r.take();
    assert!(r.det.unsilence(s2));
    assert_eq!(marks(r.take()), vec![(Failed, a, 15, 20_200, false, NONE)]);
    assert_eq!(r.det.stats().released, 1);
    let _ = s;
}

#[test]
fn a_flapping_child_settling_while_its_parent_is_down_is_released_when_the_parent_resumes() {
    let r = Rig::new(S, 1);
    r.det.set_flapping(2, 10 * S, true).unwrap();
    r.det.depends("svc.api", "svc.db").unwrap();
    let db = r.add("svc.db");
    let api = r.add("svc.api");
    r.det.pause(db).unwrap(); // not watched during api's first two outages
    for n in 0..3u64 {
        if n == 2 {
            r.det.resume(db, None).unwrap(); // at 3.0: FAILED from 4.0 on
        }
        r.at(n * 1500 * MS + 1100 * MS);
        r.at(n * 1500 * MS + 1500 * MS);
        r.beat(api);
    }
    // api's failed at 4.0 went out suppressed (quiet), its resumed at 4.5 held back.
    let got = marks(r.take());
    assert!(got.contains(&(Failed, api, 1, 4000, false, db)), "{got:?}");
    r.at(16 * S); // api down from 5.5, settles at 15.5 while db is still down
    let got = marks(r.take());
    assert!(
        got.contains(&(Failed, api, 11, 15_500, false, db)),
        "{got:?}"
    );
    r.beat(db);
    assert_eq!(
        marks(r.take()),
        vec![
            (Resumed, db, 12, 16_000, false, NONE),
            (Failed, api, 11, 16_000, false, NONE),
        ]
    );
}

#[test]
fn a_dependency_cycle_failing_together_alerts_once_per_deadline() {
    for cycle in [&["svc.a", "svc.b"][..], &["svc.a", "svc.b", "svc.c"][..]] {
        let r = Rig::new(S, 1);
        for (i, name) in cycle.iter().enumerate() {
            r.det.depends(name, cycle[(i + 1) % cycle.len()]).unwrap();
        }
        let ids: Vec<TopicId> = cycle.iter().map(|n| r.add(n)).collect();
        r.at(5500 * MS);
        let got = marks(r.take());
        for k in 1..=5u64 {
            let at_k: Vec<_> = got.iter().filter(|e| e.3 == k * 1000).collect();
            assert_eq!(at_k.len(), cycle.len(), "{got:?}");
            let unmarked = at_k.iter().filter(|e| e.5 == NONE).count();
            assert_eq!(unmarked, 1, "{cycle:?} at {k} s: {got:?}");
        }
        // Whoever alerted resumes first: the others, still down and never alerted, are
        // released in turn (each by the parent it was suppressed by).
        let alerted = got.iter().find(|e| e.5 == NONE).unwrap().1;
        r.beat(alerted);
        let after = marks(r.take());
        assert_eq!(after[0], (Resumed, alerted, 5, 5500, false, NONE));
        assert!(ids.contains(&alerted));
    }
}

#[test]
fn a_child_suppressed_by_a_parent_removed_or_paused_while_failed_is_alerted_then() {
    for remove in [true, false] {
        let r = Rig::new(10 * S, 1);
        r.det.depends("svc.api", "svc.db").unwrap();
        let db = r.add("svc.db");
        let api = r.add("svc.api");
        r.at(10_500 * MS);
        let mut got = marks(r.take());
        got.sort_by_key(|e| e.1);
        assert_eq!(
            got,
            vec![
                (Failed, db, 1, 10_000, false, NONE),
                (Failed, api, 1, 10_000, false, db)
            ]
        );
        r.at(10_600 * MS);
        if remove {
            r.det.remove(db).unwrap();
        } else {
            assert!(r.det.pause(db).unwrap());
        }
        // Put aside, not pushed: a `block` queue is subscribed, and pause/remove never wait
        // for room in one. The driver's next run pushes them.
        assert!(r.take().is_empty());
        r.at(10_600 * MS);
        assert_eq!(
            marks(r.take()),
            vec![(Failed, api, 1, 10_600, false, NONE)],
            "remove: {remove}"
        );
        assert_eq!(r.det.stats().released, 1);
        // Its next deadline: unmarked, nothing more released.
        r.at(20_500 * MS);
        assert_eq!(marks(r.take()), vec![(Failed, api, 2, 20_000, false, NONE)]);
    }
}

/// A parent FAILED, its child suppressed: the rig at 10.6 s with both alerts taken.
fn parent_down_child_suppressed() -> (Rig, TopicId, TopicId) {
    let r = Rig::new(10 * S, 1);
    r.det.depends("svc.api", "svc.db").unwrap();
    let db = r.add("svc.db");
    let api = r.add("svc.api");
    r.at(10_500 * MS);
    assert_eq!(r.take().len(), 2);
    r.at(10_600 * MS);
    (r, db, api)
}

#[test]
fn what_a_pause_or_removal_put_aside_is_pushed_by_push_unpushed_at_once() {
    for remove in [true, false] {
        let (r, db, api) = parent_down_child_suppressed();
        if remove {
            r.det.remove(db).unwrap();
        } else {
            assert!(r.det.pause(db).unwrap());
        }
        assert!(r.take().is_empty());
        r.det.push_unpushed();
        assert_eq!(
            marks(r.take()),
            vec![(Failed, api, 1, 10_600, false, NONE)],
            "remove: {remove}"
        );
        // Pushed once: nothing left for the driver's next run.
        r.det.push_unpushed();
        r.at(10_700 * MS);
        assert!(r.take().is_empty());
    }
}

#[test]
fn stop_pushes_what_a_pause_put_aside_and_a_restart_hands_out_nothing_stale() {
    let (r, db, api) = parent_down_child_suppressed();
    assert!(r.det.pause(db).unwrap());
    // Stop emits nothing of its own here: it must still push what the pause put aside.
    r.det.stop();
    assert_eq!(marks(r.take()), vec![(Failed, api, 1, 10_600, false, NONE)]);
    assert!(r
        .det
        .wait_pushed(r.det.outbox_mark(), Some(std::time::Duration::ZERO)));
    r.det.start(None);
    r.at(10_700 * MS);
    assert!(r.take().is_empty());
}

#[test]
fn released_failures_count_as_failed_and_held_ones_do_not() {
    let r = Rig::new(S, 1);
    let a = r.add("svc.a");
    let s = r.det.silence("svc.a", None, 100 * S, "").unwrap();
    r.at(1500 * MS);
    assert!(r.det.unsilence(s));
    let got = marks(r.take());
    assert_eq!(
        got,
        vec![
            (Failed, a, 1, 1000, true, NONE),
            (Failed, a, 1, 1500, false, NONE)
        ]
    );
    let st = r.det.stats();
    assert_eq!((st.failed, st.released), (2, 1));
}

#[test]
fn a_topic_down_before_the_policy_is_used_counts_as_alerted() {
    let r = Rig::new(S, 1);
    let a = r.add("svc.a");
    r.at(1500 * MS); // failed at 1.0, unmarked: no policy yet
    r.take();
    let s = r.det.silence("svc.a", None, 100 * S, "").unwrap();
    r.at(2500 * MS);
    assert_eq!(marks(r.take()), vec![(Failed, a, 2, 2000, true, NONE)]);
    assert!(r.det.unsilence(s));
    assert!(
        r.take().is_empty(),
        "alerted before the silence: nothing owed"
    );
    r.beat(a);
    assert_eq!(marks(r.take()), vec![(Resumed, a, 2, 2500, false, NONE)]);
}

fn churn(r: &Rig, name: &str, n: usize) {
    for _ in 0..n {
        let h = r.det.add_handle(name, None, None).unwrap();
        r.det.remove(h).unwrap();
        r.take(); // drained: the id may be reused
    }
}

#[test]
fn a_parent_removed_and_added_again_does_not_pile_up_links() {
    let r = Rig::new(S, 1);
    r.det.depends("svc.c", "svc.p").unwrap();
    r.det.depends("svc.c", "svc.q").unwrap();
    let kid = r.add("svc.c");
    let q = r.add("svc.q");
    churn(&r, "svc.p", 1000);
    let p = r.add("svc.p");
    assert_eq!(
        r.det.policy_links(kid, p).0,
        1,
        "svc.c: svc.p and svc.q, no stale handle"
    );
    assert_eq!(r.det.policy_links(kid, p).1, 1);
    assert_eq!(r.det.policy_links(kid, q).1, 1);
    // Still linked: svc.p down marks svc.c.
    r.at(900 * MS);
    r.beat(q);
    r.at(1500 * MS);
    let mut got = marks(r.take());
    got.sort_by_key(|e| e.1);
    assert!(got.contains(&(Failed, kid, 1, 1000, false, p)), "{got:?}");
}

#[test]
fn a_child_removed_and_added_again_does_not_pile_up_in_its_parent() {
    let r = Rig::new(S, 1);
    r.det.depends("svc.c.>", "svc.p").unwrap();
    let pid = r.add("svc.p");
    r.add("svc.c.keep");
    churn(&r, "svc.c.x", 1000);
    assert!(
        r.det.policy_links(0, pid).1 <= 2,
        "{:?}",
        r.det.policy_links(0, pid)
    );
}

#[test]
fn a_long_silence_does_not_pile_up_handles_of_churned_topics() {
    let r = Rig::new(S, 1);
    r.add("svc.keep");
    r.det.silence("svc.>", None, 3600 * S, "maint").unwrap();
    r.at(MS); // the silence starts
    churn(&r, "svc.x", 1000);
    assert!(
        r.det.policy_links(0, 0).2 <= 2,
        "{:?}",
        r.det.policy_links(0, 0)
    );
}

#[test]
fn with_no_block_queue_a_removed_parent_releases_its_children_at_once() {
    let clock = Arc::new(ManualClock::new(0));
    let det = Detector::new(
        ClockSource::Manual(clock.clone()),
        TopicConfig::fixed(S, 1),
        MS,
    )
    .unwrap();
    let q = det.subscribe(1024, Overflow::DropOldest, false).unwrap();
    det.depends("svc.api", "svc.db").unwrap();
    let db = det.add("svc.db", None, None).unwrap();
    let api = det.add("svc.api", None, None).unwrap();
    clock.set(1500 * MS).unwrap();
    let mut out = Vec::new();
    q.try_pop_batch(&mut out, usize::MAX);
    assert_eq!(out.len(), 2);
    out.clear();
    det.remove(det.handle_of(db)).unwrap();
    q.try_pop_batch(&mut out, usize::MAX);
    assert_eq!(marks(out), vec![(Failed, api, 1, 1500, false, NONE)]);
}
