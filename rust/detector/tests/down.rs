//! Explicit failure (`down` beats, see `down.rs`) under the manual clock: exact event streams.

use super::*;

/// The reason text of a `failed` event (None: periods missed).
fn reason(r: &Rig, ev: &Event) -> Option<String> {
    r.det.reason_of(ev).map(|t| t.to_string())
}

fn failed_down(r: &Rig, id: TopicId, missed: u32, at: u64, since: u64, why: &str) -> Event {
    let ev = r.take_one();
    assert_eq!(ev.kind, Failed, "{ev:?}");
    assert_eq!(
        (ev.topic, ev.missed, ev.at_ns, ev.since_ns()),
        (id, missed, at, Some(since)),
        "{ev:?}"
    );
    assert_eq!(reason(r, &ev).as_deref(), Some(why));
    ev
}

impl Rig {
    fn take_one(&self) -> Event {
        let got = self.take();
        assert_eq!(got.len(), 1, "{got:?}");
        got[0]
    }
}

#[test]
fn a_down_before_any_miss_fails_at_once_with_missed_0() {
    let r = Rig::new(10 * S, 1);
    let a = r.add("a");
    r.at(S);
    r.beat(a);
    r.at(3 * S);
    assert_eq!(r.det.down(a, None, "db unreachable"), Down::Fired);
    failed_down(&r, a, 0, 3 * S, 3 * S, "db unreachable");
    let st = r.det.status(a).unwrap();
    assert_eq!(st.state, State::Failed);
    assert_eq!(st.last_seen_ns, Some(3 * S)); // the sender was heard
    assert_eq!(st.failed_since_ns, Some(3 * S));
}

#[test]
fn a_down_after_two_misses_carries_missed_2() {
    let r = Rig::new(S, 3); // two misses stay quiet below allowed_misses = 3
    let a = r.add("a");
    r.at(2 * S + MS);
    assert!(r.take().is_empty());
    r.at(2 * S + 500 * MS);
    assert_eq!(r.det.down(a, None, "disk full"), Down::Fired);
    failed_down(&r, a, 2, 2 * S + 500 * MS, 2 * S + 500 * MS, "disk full");
}

#[test]
fn allowed_misses_does_not_delay_a_down_and_each_later_period_fires_with_the_reason() {
    let r = Rig::new(S, 3);
    let a = r.add("a");
    r.at(100 * MS);
    r.beat(a); // deadlines at 1.1, 2.1, 3.1 s ...
    r.at(500 * MS);
    assert_eq!(r.det.down(a, None, "check failed"), Down::Fired);
    failed_down(&r, a, 0, 500 * MS, 500 * MS, "check failed");
    // Not a beat for the deadlines: the periods go on counting, each one fires (missed 1, 2
    // are below allowed_misses = 3, yet the topic is FAILED), with the reason and `since`.
    r.at(3 * S + 200 * MS);
    let got = r.take();
    let want: Vec<_> = (1..=3u32)
        .map(|n| {
            let at = 100 * MS + u64::from(n) * S;
            (n, at, Some(500 * MS), Some("check failed".to_owned()))
        })
        .collect();
    let seen: Vec<_> = got
        .iter()
        .map(|e| {
            assert_eq!((e.kind, e.topic), (Failed, a));
            (e.missed, e.at_ns, e.since_ns(), reason(&r, e))
        })
        .collect();
    assert_eq!(seen, want);
}

#[test]
fn repeated_downs_do_not_fire_again_and_a_good_beat_resumes() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(200 * MS);
    r.beat(a); // deadlines at 1.2, 2.2 ...
    r.at(400 * MS);
    assert_eq!(r.det.down(a, None, "first"), Down::Fired);
    failed_down(&r, a, 0, 400 * MS, 400 * MS, "first");
    r.at(600 * MS);
    assert_eq!(r.det.down(a, None, "first"), Down::AlreadyFailed);
    assert!(r.take().is_empty());
    r.at(S + 300 * MS); // a period missed: it fires, with the reason
    let ev = r.take_one();
    assert_eq!((ev.kind, ev.missed, ev.at_ns), (Failed, 1, S + 200 * MS));
    assert_eq!(reason(&r, &ev).as_deref(), Some("first"));
    r.at(S + 350 * MS);
    assert_eq!(r.det.down(a, None, "second"), Down::AlreadyFailed);
    assert!(r.take().is_empty());
    r.at(2 * S + 300 * MS); // the next one carries the newest reason
    let ev = r.take_one();
    assert_eq!(
        (ev.kind, ev.missed, ev.at_ns),
        (Failed, 2, 2 * S + 200 * MS)
    );
    assert_eq!(reason(&r, &ev).as_deref(), Some("second"));
    // The next good beat resumes it, with the count and the downtime since the down.
    r.at(2 * S + 500 * MS);
    r.beat(a);
    assert_eq!(
        r.take(),
        vec![Event::resumed(a, 2, 2 * S + 500 * MS, 2 * S + 100 * MS)]
    );
    assert_eq!(r.det.status(a).unwrap().state, State::Alive);
    // After it, a missed period is a plain failure again: no reason.
    r.at(3 * S + 500 * MS + MS);
    let ev = r.take_one();
    assert_eq!(
        (ev.kind, ev.missed, ev.at_ns),
        (Failed, 1, 3 * S + 500 * MS)
    );
    assert_eq!(reason(&r, &ev), None);
}

#[test]
fn a_down_for_a_topic_failed_by_misses_fires_nothing_and_later_failures_carry_the_reason() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(S + MS);
    let ev = r.take_one();
    assert_eq!((ev.kind, ev.missed), (Failed, 1));
    assert_eq!(reason(&r, &ev), None);
    r.at(S + 500 * MS);
    assert_eq!(r.det.down(a, None, "late news"), Down::AlreadyFailed);
    assert!(r.take().is_empty());
    r.at(2 * S + MS);
    let ev = r.take_one();
    assert_eq!((ev.kind, ev.missed, ev.since_ns()), (Failed, 2, Some(S)));
    assert_eq!(reason(&r, &ev).as_deref(), Some("late news"));
}

#[test]
fn a_good_beat_at_or_before_the_down_does_not_resume_it() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(300 * MS);
    r.det.down(a, None, "x");
    failed_down(&r, a, 0, 300 * MS, 300 * MS, "x");
    // A beat recorded late with an older explicit time is old news.
    r.det.beat(a, Some(200 * MS));
    assert!(r.take().is_empty());
    assert_eq!(r.det.status(a).unwrap().state, State::Failed);
}

#[test]
fn a_down_for_a_paused_or_removed_topic_is_ignored() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    let b = r.add("b");
    r.det.pause(a).unwrap();
    assert_eq!(r.det.down(a, None, "x"), Down::Ignored);
    let hb = r.det.handle_of(b);
    r.det.remove(hb).unwrap();
    assert_eq!(r.det.down(hb, None, "x"), Down::Ignored);
    assert!(r.take().is_empty());
}

#[test]
fn deadlines_passed_but_not_yet_judged_are_counted_by_the_down() {
    let r = Rig::new(S, 5);
    let a = r.add("a");
    // The driver has not run past 0 (an explicit `now` ahead of the manual clock).
    assert_eq!(r.det.down(a, Some(2 * S + 500 * MS), "late"), Down::Fired);
    failed_down(&r, a, 2, 2 * S + 500 * MS, 2 * S + 500 * MS, "late");
    r.at(3 * S + MS);
    let ev = r.take_one();
    assert_eq!((ev.kind, ev.missed, ev.at_ns), (Failed, 3, 3 * S));
}

#[test]
fn reasons_kept_per_topic_are_bounded() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(100 * MS);
    r.det.down(a, None, "r0");
    let first = r.take_one();
    for i in 1..=REASONS_PER_TOPIC {
        r.det.down(a, None, &format!("r{i}"));
    }
    assert_eq!(reason(&r, &first).as_deref(), Some(LOST_REASON));
    r.at(S + 100 * MS + MS);
    let ev = r.take_one();
    assert_eq!(
        reason(&r, &ev),
        Some(format!("r{REASONS_PER_TOPIC}")),
        "the newest reason is kept"
    );
}

// ----- with the alerting policy (`policy.rs`, `flap.rs`) ---------------------------------

/// (kind, missed, at in ms, silenced, suppressed_by, reason) of the events.
#[allow(clippy::type_complexity)]
fn policed(r: &Rig, events: &[Event]) -> Vec<(EventKind, u32, u64, bool, TopicId, Option<String>)> {
    events
        .iter()
        .map(|e| {
            (
                e.kind,
                e.missed,
                e.at_ns / MS,
                e.silenced,
                e.suppressed_by,
                reason(r, e),
            )
        })
        .collect()
}

const NONE: TopicId = crate::event::NO_TOPIC;

#[test]
fn a_down_inside_a_silence_is_marked_and_its_owed_alert_keeps_the_reason() {
    let r = Rig::new(S, 1);
    let a = r.add("svc.db");
    r.det.silence("svc.>", None, 2500 * MS, "upgrade").unwrap();
    r.at(300 * MS);
    assert_eq!(r.det.down(a, None, "disk full"), Down::Fired);
    r.at(2200 * MS);
    let why = || Some("disk full".to_owned());
    assert_eq!(
        policed(&r, &r.take()),
        vec![
            (Failed, 0, 300, true, NONE, why()),
            (Failed, 1, 1000, true, NONE, why()),
            (Failed, 2, 2000, true, NONE, why()),
        ]
    );
    // The silence ends at 2.5 between deadlines while the topic is FAILED by the down: its
    // owed alert goes out then, unmarked, with the reason (the next deadline's too).
    r.at(3200 * MS);
    assert_eq!(
        policed(&r, &r.take()),
        vec![
            (Failed, 2, 2500, false, NONE, why()),
            (Failed, 3, 3000, false, NONE, why()),
        ]
    );
    assert_eq!(r.det.stats().released, 1);
}

#[test]
fn a_down_on_a_child_of_a_failed_parent_is_suppressed_and_released_with_its_reason() {
    let r = Rig::new(S, 1);
    let db = r.add("svc.db");
    let api = r.add("svc.api");
    r.det.depends("svc.api", "svc.db").unwrap();
    r.at(100 * MS);
    r.beat(db);
    r.beat(api);
    r.at(1050 * MS);
    r.beat(api); // api's next deadline: 2.05
    r.at(1200 * MS); // db fails at 1.1
    r.at(1300 * MS);
    assert_eq!(r.det.down(api, None, "db unreachable"), Down::Fired);
    let why = || Some("db unreachable".to_owned());
    assert_eq!(
        policed(&r, &r.take()),
        vec![
            (Failed, 1, 1100, false, NONE, None),
            (Failed, 0, 1300, false, db, why()),
        ]
    );
    // db resumes at 1.6: api, still FAILED by its down and never alerted, is alerted then,
    // unmarked, with its reason.
    r.at(1600 * MS);
    r.beat(db);
    r.at(1700 * MS);
    assert_eq!(
        policed(&r, &r.take()),
        vec![
            (Resumed, 1, 1600, false, NONE, None),
            (Failed, 0, 1600, false, NONE, why()),
        ]
    );
    assert_eq!(r.det.stats().released, 1);
}

#[test]
fn down_beats_flap_and_the_settled_failure_keeps_the_newest_reason() {
    let r = Rig::new(S, 1);
    r.det.set_flapping(2, 10 * S, true).unwrap();
    let a = r.add("svc.a");
    // Three outages by down beats: down at n + 0.2, a good beat at n + 0.3.
    for n in 0..3u64 {
        r.at(n * S + 200 * MS);
        assert_eq!(r.det.down(a, None, &format!("down {n}")), Down::Fired);
        r.at(n * S + 300 * MS);
        r.beat(a);
    }
    r.at(3 * S + 200 * MS); // the third resumed (at 2.3) is taken in: flapping
    assert_eq!(r.det.down(a, None, "for good"), Down::Fired); // held back
    let got = r.take();
    let seen: Vec<_> = got
        .iter()
        .map(|e| {
            (
                e.kind,
                e.missed,
                e.at_ns / MS,
                e.is_flapping(),
                reason(&r, e),
            )
        })
        .collect();
    let down = |n: u64| Some(format!("down {n}"));
    assert_eq!(
        seen,
        vec![
            (Failed, 0, 200, None, down(0)),
            (Resumed, 0, 300, None, None),
            (Failed, 0, 1200, None, down(1)),
            (Resumed, 0, 1300, None, None),
            (Failed, 0, 2200, None, down(2)),
            (Flapping, 3, 2300, Some(true), None),
        ]
    );
    // Down for good from 3.2: its failed events (3.2, then each deadline 3.3 .. 12.3) are
    // held; it settles 10 s after its last transition (3.2), between deadlines: the failure
    // is delivered then with the newest reason, and the deadlines after it carry it too.
    r.at(13_400 * MS);
    let got = r.take();
    let seen: Vec<_> = got
        .iter()
        .map(|e| {
            (
                e.kind,
                e.missed,
                e.at_ns / MS,
                e.is_flapping(),
                reason(&r, e),
            )
        })
        .collect();
    let good = || Some("for good".to_owned());
    assert_eq!(
        seen,
        vec![
            (Flapping, 0, 13_200, Some(false), None),
            (Failed, 10, 13_200, None, good()),
            (Failed, 11, 13_300, None, good()),
        ]
    );
}

#[test]
fn a_down_taken_in_before_the_wake_up_from_a_local_pause_counts_no_deadline_inside_it() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    let b = r.add("b");
    r.at(500 * MS);
    r.beat(a);
    r.beat(b);
    r.clock.stall(10 * S); // 0.5 .. 10.5: the monitor is not running
                           // The intake takes in a down beat before the driver wakes: it is the wake-up. Deadlines
                           // inside the stall (a's at 1.5 .. 9.5) are not missed periods.
    assert_eq!(r.det.down(a, None, "disk full"), Down::Fired);
    let got = r.take();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0], Event::local_pause(10 * S + 500 * MS, 10 * S));
    assert_eq!(
        (got[1].kind, got[1].topic, got[1].missed, got[1].at_ns),
        (Failed, a, 0, 10 * S + 500 * MS)
    );
    // The clock's own wake-up finds no second pause; b gets a full period from it.
    r.clock.advance(0);
    assert!(r.take().is_empty());
    assert_eq!(r.det.stats().local_pauses, 1);
    r.at(11 * S + 400 * MS);
    r.beat(b);
    r.at(11 * S + 600 * MS);
    let got = r.take();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].topic, got[0].missed, got[0].at_ns),
        (a, 1, 11 * S + 500 * MS)
    );
}

#[test]
fn a_down_for_a_stopped_detector_is_no_wake_up() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(500 * MS);
    r.det.stop();
    r.take();
    r.clock.stall(10 * S);
    assert_eq!(r.det.down(a, None, "x"), Down::Ignored);
    assert!(r.take().is_empty());
    assert_eq!(r.det.stats().local_pauses, 0);
}
