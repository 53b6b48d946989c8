//! Taking topics over (`adopt.rs`): exact event streams under the manual clock.

use super::*;

/// A carried outage with these marks.
fn carried(since_ns: u64, missed: u32, marks: Marks) -> Option<Carried> {
    Some(Carried {
        since_ns,
        missed,
        reason: None,
        marks,
    })
}

/// (kind, topic, missed, at in ms, silenced, suppressed_by).
fn marked(events: Vec<Event>) -> Vec<(EventKind, TopicId, u32, u64, bool, TopicId)> {
    events
        .into_iter()
        .map(|e| {
            let t = (e.kind, e.topic, e.missed, e.at_ns / MS);
            (t.0, t.1, t.2, t.3, e.silenced, e.suppressed_by)
        })
        .collect()
}

const NONE: TopicId = crate::event::NO_TOPIC;

#[test]
fn a_fresh_start_gets_a_full_period_from_the_takeover() {
    let r = Rig::new(S, 1);
    r.at(10 * S);
    let h = r.det.adopt(&[Adoption::fresh("a")], None).unwrap();
    let a = r.det.resolve(h[0]).unwrap();
    r.at(11 * S); // exactly one period after the takeover: on time
    assert!(r.take().is_empty());
    r.at(11 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, 11 * S, 11 * S)]);
}

#[test]
fn a_carried_outage_fails_on_with_its_count_and_since_and_resumes_from_it() {
    let r = Rig::new(S, 1);
    r.at(10 * S);
    let h = r
        .det
        .adopt(&[Adoption::failed("a", 5 * S, 5)], None)
        .unwrap();
    let a = r.det.resolve(h[0]).unwrap();
    assert!(r.take().is_empty(), "no new first failed at the takeover");
    let st = r.det.status(a).unwrap();
    assert_eq!(
        (st.state, st.missed, st.failed_since_ns),
        (State::Failed, 5, Some(5 * S))
    );
    r.at(11 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 6, 11 * S, 5 * S)]);
    r.at(11_500 * MS);
    r.beat(a);
    assert_eq!(
        r.take(),
        vec![Event::resumed(a, 6, 11_500 * MS, 6_500 * MS)]
    );
    assert_eq!(r.det.status(a).unwrap().state, State::Alive);
}

#[test]
fn an_outage_from_before_the_detectors_epoch_keeps_its_true_since() {
    // The detector starts at 100 s; the outage began at 40 s, before it existed.
    let clock = Arc::new(ManualClock::new(100 * S));
    let det = Detector::new(
        ClockSource::Manual(clock.clone()),
        TopicConfig::fixed(S, 1),
        MS,
    )
    .unwrap();
    let q = det.subscribe(1024, Overflow::Block, false).unwrap();
    let take = || {
        let mut out = Vec::new();
        q.try_pop_batch(&mut out, usize::MAX);
        out
    };
    let h = det
        .adopt(&[Adoption::failed("a", 40 * S, 3)], None)
        .unwrap();
    let a = det.resolve(h[0]).unwrap();
    assert_eq!(det.status(a).unwrap().failed_since_ns, Some(40 * S));
    clock.set(101 * S + MS).unwrap();
    assert_eq!(take(), vec![Event::failed(a, 4, 101 * S, 40 * S)]);
    clock.set(101_200 * MS).unwrap();
    assert!(matches!(det.beat(a, None), Beat::Recorded { .. }));
    assert_eq!(
        take(),
        vec![Event::resumed(a, 4, 101_200 * MS, 61_200 * MS)]
    );
}

#[test]
fn a_known_topic_heard_after_the_outage_began_resumes_at_once_and_one_failed_here_stays() {
    let r = Rig::new(S, 1);
    let a = r.add("a"); // heard at 9.5 (a beat the new owner took in before the snapshot)
    let b = r.add("b"); // failed here at 1.0
    r.at(9_500 * MS);
    r.beat(a);
    r.take();
    r.at(10 * S);
    let rows = [
        Adoption::failed("a", 5 * S, 5),
        Adoption::failed("b", 2 * S, 7),
    ];
    r.det.adopt(&rows, None).unwrap();
    assert_eq!(r.take(), vec![Event::resumed(a, 5, 9_500 * MS, 4_500 * MS)]);
    let (sa, sb) = (r.det.status(a).unwrap(), r.det.status(b).unwrap());
    assert_eq!((sa.state, sa.missed), (State::Alive, 0));
    // b: this detector's own outage wins (since 1.0, 10 missed by 10.0).
    assert_eq!(
        (sb.state, sb.missed, sb.failed_since_ns),
        (State::Failed, 9, Some(S))
    );
    r.at(10 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(b, 10, 10 * S, S)]);
}

#[test]
fn an_alerted_outage_silenced_here_is_not_alerted_again_when_the_silence_ends() {
    let r = Rig::new(S, 1);
    r.at(10 * S);
    r.det.silence("a", None, 12_500 * MS, "window").unwrap();
    let h = r
        .det
        .adopt(&[Adoption::failed("a", 5 * S, 5)], None)
        .unwrap();
    let a = r.det.resolve(h[0]).unwrap();
    r.at(13_200 * MS);
    assert_eq!(
        marked(r.take()),
        vec![
            (Failed, a, 6, 11_000, true, NONE),
            (Failed, a, 7, 12_000, true, NONE),
            (Failed, a, 8, 13_000, false, NONE), // its deadline; no extra `failed` at 12.5
        ]
    );
    assert_eq!(r.det.stats().released, 0);
}

#[test]
fn a_silenced_outage_owes_its_alert_once_the_silence_here_ends() {
    let r = Rig::new(S, 1);
    r.at(10 * S);
    r.det.silence("a", None, 11_500 * MS, "window").unwrap();
    let quiet = Marks {
        silenced: true,
        ..Marks::default()
    };
    let mut row = Adoption::fresh("a");
    row.failed = carried(5 * S, 5, quiet);
    let h = r.det.adopt(&[row], None).unwrap();
    let a = r.det.resolve(h[0]).unwrap();
    r.at(11_600 * MS);
    assert_eq!(
        marked(r.take()),
        vec![
            (Failed, a, 6, 11_000, true, NONE),
            (Failed, a, 6, 11_500, false, NONE), // released: the owed alert
        ]
    );
    r.beat(a);
    assert_eq!(marked(r.take()), vec![(Resumed, a, 6, 11_600, false, NONE)]);
}

#[test]
fn a_silenced_outage_not_silenced_here_alerts_at_its_next_missed_period_and_resumes_marked_if_before(
) {
    let r = Rig::new(S, 1);
    r.at(10 * S);
    let quiet = Marks {
        silenced: true,
        ..Marks::default()
    };
    let mut rows = [Adoption::fresh("a"), Adoption::fresh("b")];
    rows[0].failed = carried(5 * S, 5, quiet.clone());
    rows[1].failed = carried(5 * S, 5, quiet);
    let h = r.det.adopt(&rows, None).unwrap();
    let (a, b) = (r.det.resolve(h[0]).unwrap(), r.det.resolve(h[1]).unwrap());
    // b comes back before its next deadline: its listeners only saw silenced events.
    r.at(10_500 * MS);
    r.beat(b);
    assert_eq!(marked(r.take()), vec![(Resumed, b, 5, 10_500, true, NONE)]);
    r.at(11 * S + MS);
    assert_eq!(marked(r.take()), vec![(Failed, a, 6, 11_000, false, NONE)]);
}

#[test]
fn a_child_suppressed_by_its_parent_stays_so_and_is_alerted_when_the_parent_resumes() {
    let r = Rig::new(S, 1);
    r.det.depends("svc.>", "db").unwrap();
    r.at(10 * S);
    let mut kid = Adoption::fresh("svc.api");
    kid.failed = carried(
        6 * S,
        4,
        Marks {
            suppressed_by: Some("db".to_owned()),
            ..Marks::default()
        },
    );
    let rows = [Adoption::failed("db", 5 * S, 5), kid];
    let h = r.det.adopt(&rows, None).unwrap();
    let (db, api) = (r.det.resolve(h[0]).unwrap(), r.det.resolve(h[1]).unwrap());
    assert!(r.take().is_empty());
    r.at(11 * S + MS);
    let mut got = marked(r.take());
    got.sort_by_key(|e| e.1);
    assert_eq!(
        got,
        vec![
            (Failed, db, 6, 11_000, false, NONE),
            (Failed, api, 5, 11_000, false, db),
        ]
    );
    r.at(11_400 * MS);
    r.beat(db);
    assert_eq!(
        marked(r.take()),
        vec![
            (Resumed, db, 6, 11_400, false, NONE),
            (Failed, api, 5, 11_400, false, NONE), // its alert, owed since the takeover
        ]
    );
}

#[test]
fn a_flapping_topic_flaps_on_and_settles_one_window_after_the_takeover() {
    let r = Rig::new(S, 1);
    r.det.set_flapping(2, 5 * S, true).unwrap();
    r.at(10 * S);
    let mut row = Adoption::failed("a", 5 * S, 5);
    if let Some(c) = row.failed.as_mut() {
        c.marks.flapping = true;
    }
    let h = r.det.adopt(&[row], None).unwrap();
    let a = r.det.resolve(h[0]).unwrap();
    assert_eq!(r.det.flapping_topics(), 1);
    r.at(14 * S + MS);
    assert!(
        r.take().is_empty(),
        "a flapping topic's failed are held back"
    );
    r.at(15 * S + MS);
    assert_eq!(
        r.take(),
        vec![
            Event::flapping(a, false, 0, 15 * S),
            Event::failed(a, 10, 15 * S, 5 * S), // the deadline at 15: the alert, unmarked
        ]
    );
}

#[test]
fn flapping_is_ignored_without_flap_detection() {
    let r = Rig::new(S, 1);
    r.at(10 * S);
    let mut row = Adoption::fresh("a");
    row.flapping = true;
    r.det.adopt(&[row], None).unwrap();
    assert_eq!(r.det.flapping_topics(), 0);
}

#[test]
fn bad_rows_are_refused_by_index_and_change_nothing() {
    let r = Rig::new(S, 1);
    r.at(10 * S);
    let bad = |rows: &[Adoption<'_>], want: &str| {
        let err = r.det.adopt(rows, None).unwrap_err().to_string();
        assert!(err.contains(want), "{err:?} lacks {want:?}");
        assert_eq!(r.det.len(), 0, "nothing adopted");
    };
    bad(
        &[Adoption::fresh("ok"), Adoption::failed("a", 5 * S, 0)],
        "topics[1]: \"a\": missed must be >= 1",
    );
    bad(
        &[Adoption::failed("a", 11 * S, 1)],
        "topics[0]: \"a\": since (11000000000 ns) is after the takeover (10000000000 ns)",
    );
    bad(&[Adoption::fresh("")], "topics[0]: the name must be 1 to");
    let mut row = Adoption::failed("a", 5 * S, 1);
    if let Some(c) = row.failed.as_mut() {
        c.marks.suppressed_by = Some("db.>".to_owned());
    }
    bad(&[row], "suppressed_by must be a topic name, got \"db.>\"");
    let mut row = Adoption::fresh("a");
    row.config = Some(TopicConfig::fixed(0, 1));
    bad(&[row], "topics[0] (\"a\"): period must be > 0");
    // A paused topic, then a stopped detector.
    let p = r.add("p");
    r.det.pause(p).unwrap();
    let err = r
        .det
        .adopt(&[Adoption::fresh("x"), Adoption::failed("p", S, 1)], None)
        .unwrap_err();
    assert!(
        err.to_string().contains("topics[1]: \"p\" is paused"),
        "{err}"
    );
    assert_eq!(r.det.len(), 1);
    r.det.adopt(&[Adoption::fresh("p")], None).unwrap(); // a fresh start leaves it paused
    assert_eq!(r.det.status(p).unwrap().state, State::Paused);
    r.det.stop();
    let err = r.det.adopt(&[Adoption::fresh("x")], None).unwrap_err();
    assert!(err.to_string().contains("stopped"), "{err}");
    assert_eq!(r.det.len(), 1);
}

#[test]
fn an_explicit_failure_carries_its_reason_and_fails_at_every_missed_period() {
    let r = Rig::new(S, 3); // three misses to fail by periods; a `down` outage fires at each
    r.at(10 * S);
    let mut row = Adoption::failed("a", 5 * S, 2);
    if let Some(c) = row.failed.as_mut() {
        c.reason = Some("disk full".to_owned());
    }
    let h = r.det.adopt(&[row], None).unwrap();
    let a = r.det.resolve(h[0]).unwrap();
    r.at(12 * S + MS);
    let got = r.take();
    let reasons: Vec<_> = got.iter().map(|e| r.det.reason_of(e).unwrap()).collect();
    assert_eq!(
        got.iter()
            .map(|e| (e.kind, e.topic, e.missed, e.at_ns / MS, e.detail / MS))
            .collect::<Vec<_>>(),
        vec![(Failed, a, 3, 11_000, 5_000), (Failed, a, 4, 12_000, 5_000)]
    );
    assert!(reasons.iter().all(|t| &**t == "disk full"));
    let mut bad = Adoption::failed("b", 5 * S, 2);
    if let Some(c) = bad.failed.as_mut() {
        c.reason = Some(String::new());
    }
    let err = r.det.adopt(&[bad], None).unwrap_err().to_string();
    assert!(
        err.contains("reason must be 1 to 256 characters, got 0"),
        "{err}"
    );
}
