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
