//! Pausing a FAILED topic and resuming it: the recovery while paused is reported, or the
//! failure goes on.

use super::{Rig, MS, S};
use crate::detector::*;

/// A topic never heard, FAILED with `missed` = 2 at 2.5 (since 1.0), then paused.
fn failed_then_paused(r: &Rig) -> TopicId {
    let a = r.add("a");
    r.at(2 * S + 500 * MS);
    assert_eq!(r.take().len(), 2);
    assert!(r.det.pause(a).unwrap());
    a
}

#[test]
fn beaten_while_paused_resumes_with_the_first_beat_when_resumed() {
    let r = Rig::new(S, 1);
    let a = failed_then_paused(&r);
    r.at(4 * S);
    r.beat(a); // the first beat after the failure: 4.0
    r.at(6 * S);
    r.beat(a);
    assert!(r.take().is_empty(), "nothing while paused");
    let st = r.det.status(a).unwrap();
    assert_eq!((st.state, st.missed), (State::Paused, 2));
    assert_eq!(r.det.state_counts()[State::Paused as usize], 1);
    r.at(10 * S);
    assert!(r.det.resume(a, None).unwrap());
    assert_eq!(r.take(), vec![Event::resumed(a, 2, 4 * S, 3 * S)]);
    let st = r.det.status(a).unwrap();
    assert_eq!((st.state, st.missed), (State::Alive, 0));
    assert_eq!(st.last_seen_ns, Some(6 * S));
    // Due one period after the resume, like any resumed topic.
    r.at(11 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, 11 * S, 11 * S)]);
    assert_eq!(r.det.stats().resumed, 1);
}

#[test]
fn not_beaten_while_paused_stays_failed_and_counts_on_from_the_resume() {
    let r = Rig::new(S, 1);
    let a = failed_then_paused(&r);
    r.at(10 * S);
    assert!(r.det.resume(a, None).unwrap());
    assert!(r.take().is_empty());
    let st = r.det.status(a).unwrap();
    assert_eq!((st.state, st.missed), (State::Failed, 2));
    assert_eq!(st.failed_since_ns, Some(S));
    assert_eq!(st.next_deadline_ns, Some(11 * S));
    r.at(12 * S + MS);
    assert_eq!(
        r.take(),
        vec![
            Event::failed(a, 3, 11 * S, S),
            Event::failed(a, 4, 12 * S, S)
        ]
    );
    r.beat(a); // the outage, pause included, ends here
    assert_eq!(
        r.take(),
        vec![Event::resumed(a, 4, 12 * S + MS, 11 * S + MS)]
    );
}

#[test]
fn a_failed_topic_beaten_just_before_the_pause_counts_as_heard() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(2 * S + 500 * MS);
    assert_eq!(r.take().len(), 2);
    // The beat's lock-free half, with its `resumed` still owed when the pause comes.
    let beat = r.det.record(a, 2 * S + 600 * MS);
    assert_eq!(beat, Beat::Recorded { resume: true });
    assert!(r.det.pause(a).unwrap());
    r.det
        .complete(a, beat, 2 * S + 600 * MS, NO_SEQ, NO_LATENCY);
    assert!(r.take().is_empty());
    r.at(5 * S);
    r.det.resume(a, None).unwrap();
    assert_eq!(
        r.take(),
        vec![Event::resumed(a, 2, 2 * S + 600 * MS, S + 600 * MS)]
    );
}

#[test]
fn a_resume_that_overtakes_the_beats_settle_reports_it_once() {
    let r = Rig::new(S, 1);
    let a = failed_then_paused(&r);
    let beat = r.det.record(a, 3 * S); // paused: its settle is still owed
    assert_eq!(beat, Beat::Recorded { resume: true });
    r.at(4 * S);
    r.det.resume(a, None).unwrap();
    r.det.complete(a, beat, 3 * S, NO_SEQ, NO_LATENCY);
    assert_eq!(r.take(), vec![Event::resumed(a, 2, 3 * S, 2 * S)]);
    assert_eq!(r.det.status(a).unwrap().next_deadline_ns, Some(5 * S));
    // Later beats while paused again take no lock: the topic is ALIVE when paused.
    r.det.pause(a).unwrap();
    assert_eq!(r.det.record(a, 4 * S), Beat::Recorded { resume: false });
    r.det.resume(a, None).unwrap();
    assert!(r.take().is_empty());
}

#[test]
fn pausing_a_paused_topic_or_stopping_keeps_things_consistent() {
    let r = Rig::new(S, 1);
    let a = failed_then_paused(&r);
    assert!(!r.det.pause(a).unwrap(), "already paused");
    assert!(!r.det.resume(r.add("b"), None).unwrap(), "not paused");
    r.det.stop();
    assert_eq!(r.det.status(a).unwrap().state, State::Stopped);
    r.at(5 * S);
    r.det.start(None);
    // A restart keeps what is known (issue 14 item 6; this used to forget, back to PENDING).
    let st = r.det.status(a).unwrap();
    assert_eq!((st.state, st.missed), (State::Paused, 2));
    assert!(r.det.resume(a, None).unwrap());
    let st = r.det.status(a).unwrap();
    assert_eq!(
        (st.state, st.missed, st.failed_since_ns),
        (State::Failed, 2, Some(S))
    );
    assert!(r.take().is_empty());
}

#[test]
fn a_graced_topic_resumed_after_a_recovery_is_due_a_period_plus_grace_later() {
    let r = Rig::new(S, 1);
    let g = 100 * MS;
    let a = r
        .det
        .add("a", Some(TopicConfig::fixed(S, 1).with_grace(g)), None)
        .unwrap();
    r.at(S + g + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, S + g, S + g)]);
    r.det.pause(a).unwrap();
    r.at(2 * S);
    r.beat(a);
    r.det.resume(a, None).unwrap();
    assert_eq!(r.take(), vec![Event::resumed(a, 1, 2 * S, S - g)]);
    assert_eq!(r.det.status(a).unwrap().next_deadline_ns, Some(3 * S + g));
}

#[test]
fn concurrent_beats_pauses_and_driver_give_well_formed_sequences() {
    use crate::event::EventKind::{CaughtUp, Failed, Lagging, LocalPause, Received, Resumed};
    let r = Rig::new(10 * MS, 1);
    let ids: Vec<TopicId> = (0..64).map(|i| r.add(&format!("c{i}"))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let spawn = |k: usize, pauser: bool| {
        let det = r.det.clone();
        let ids = ids.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Each topic goes silent for 30 ms (three periods) out of every 120, and is
                // paused for 50 ms out of every 250, on phases of its own.
                let now = det.now_ns();
                for &id in ids.iter().skip(k).step_by(2) {
                    let id64 = id as u64;
                    if pauser {
                        if (now / (50 * MS) + id64 * 3) % 5 == 0 {
                            det.pause(id).unwrap();
                        } else {
                            det.resume(id, None).unwrap();
                        }
                    } else if (now / (30 * MS) + id64) % 4 != 0 && (n + id64) % 3 != 0 {
                        det.beat(id, None);
                    }
                }
                n += 1;
                std::thread::yield_now();
            }
        })
    };
    let threads = vec![
        spawn(0, false),
        spawn(1, false),
        spawn(0, true),
        spawn(1, true),
    ];
    for _ in 0..1_000 {
        r.clock.advance(3 * MS);
        std::thread::sleep(std::time::Duration::from_micros(50)); // let the others run
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    for &id in &ids {
        r.det.resume(id, None).unwrap();
    }
    let events = r.take();
    let count = |k| events.iter().filter(|e| e.kind == k).count();
    assert!(count(Failed) > 0 && count(Resumed) > 0, "{events:?}");
    for &id in &ids {
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
                Received | LocalPause | Lagging | CaughtUp | EventKind::Flapping => unreachable!(),
            }
        }
        let st = r.det.status(id).unwrap();
        assert_eq!(
            st.state == State::Failed,
            expect_next > 1,
            "topic {id}: {st:?}"
        );
        if st.state == State::Failed {
            assert_eq!(st.missed, expect_next - 1, "topic {id}");
        }
    }
}

// -- a beat stamped inside the pause, recorded after the resume, is old news -----------------

#[test]
fn a_late_beat_stamped_while_paused_gives_a_live_topic_one_period_from_the_resume() {
    let r = Rig::new(S, 1);
    let a = r.add("a");
    r.at(500 * MS);
    r.beat(a);
    r.at(S);
    assert!(r.det.pause(a).unwrap());
    r.at(100 * S);
    assert!(r.det.resume(a, None).unwrap());
    r.det.beat(a, Some(50 * S));
    r.at(101 * S);
    assert_eq!(r.take(), vec![], "the paused span 1..100 is not counted");
    r.at(101 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 1, 101 * S, 101 * S)]);
}

#[test]
fn a_late_beat_stamped_while_paused_does_not_end_the_outage_of_a_topic_resumed_failed() {
    let r = Rig::new(S, 1);
    let a = failed_then_paused(&r);
    r.at(100 * S);
    assert!(r.det.resume(a, None).unwrap()); // not heard while paused: FAILED, count kept
    r.det.beat(a, Some(50 * S));
    r.at(100 * S + 500 * MS);
    assert_eq!(r.take(), vec![], "no resumed at 50, no failed for 51..100");
    let st = r.det.status(a).unwrap();
    assert_eq!((st.state, st.missed), (State::Failed, 2));
    r.at(101 * S + MS);
    assert_eq!(r.take(), vec![Event::failed(a, 3, 101 * S, S)]);
}
