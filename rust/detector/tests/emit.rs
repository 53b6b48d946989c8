//! Events pushed outside the detector lock: the consumer of a full `block` queue may call the
//! detector while a producer waits for room in it.

use super::{MS, S};
use crate::clock::ManualClock;
use crate::detector::*;
use crate::event::EventKind::{Failed, Received, Resumed};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// How long a step may take before the test calls it a deadlock.
const BOUND: Duration = Duration::from_secs(10);

fn manual_detector() -> (Arc<ManualClock>, Arc<Detector>) {
    let clock = Arc::new(ManualClock::new(0));
    let det = Detector::new(
        ClockSource::Manual(clock.clone()),
        TopicConfig::fixed(S, 1),
        MS,
    )
    .unwrap();
    (clock, det)
}

/// Pop one event, waiting at most BOUND.
fn pop_one(q: &EventQueue<Event>) -> Event {
    let mut out = Vec::new();
    assert_eq!(
        q.pop_batch(&mut out, 1, Some(BOUND)),
        1,
        "no event within {BOUND:?}"
    );
    out[0]
}

/// Run `f` on a thread and wait at most BOUND for it; on a timeout, close `unstick` (so the
/// stuck threads can end) and fail with `what`.
fn bounded<R: Send + 'static>(
    what: &str,
    unstick: &[Arc<EventQueue<Event>>],
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(BOUND) {
        Ok(r) => r,
        Err(_) => {
            for q in unstick {
                q.close();
            }
            panic!("deadlock: {what} did not finish within {BOUND:?}");
        }
    }
}

#[test]
fn the_consumer_of_a_full_block_queue_can_subscribe_pause_and_add_while_the_driver_waits() {
    let (clock, det) = manual_detector();
    let q = det.subscribe(1, Overflow::Block, false).unwrap();
    let ids: Vec<TopicId> = (0..10)
        .map(|i| det.add(&format!("t{i}"), None, Some(0)).unwrap())
        .collect();
    // The driver: ten topics fail at once into a queue with room for one.
    let driver = {
        let clock = clock.clone();
        thread::spawn(move || clock.set(S + MS).unwrap())
    };
    // The consumer pops one event, then calls the detector before popping more, as a
    // listener on the dispatch thread does.
    let first = pop_one(&q);
    assert_eq!(first.kind, Failed);
    let (det2, q2) = (det.clone(), q.clone());
    let late = bounded(
        "subscribe/pause/add/config from the consumer",
        std::slice::from_ref(&q),
        move || {
            let late = det2.subscribe(64, Overflow::Block, false).unwrap();
            assert!(det2.pause(first.topic).unwrap());
            det2.add("newcomer", None, None).unwrap();
            det2.set_period(ids[1], 2 * S, None).unwrap();
            assert_eq!(det2.queue_stats().len(), 2);
            drop(q2);
            late
        },
    );
    let mut got = vec![first];
    while got.len() < 10 {
        got.push(pop_one(&q));
    }
    bounded("the driver", &[q.clone(), late.clone()], move || {
        driver.join().unwrap()
    });
    // Nothing lost or repeated: one `failed(1)` per topic.
    let mut topics: Vec<TopicId> = got.iter().map(|e| e.topic).collect();
    topics.sort_unstable();
    topics.dedup();
    assert_eq!(topics.len(), 10);
    assert!(got.iter().all(|e| e.kind == Failed && e.missed == 1));
    // The queue subscribed while the driver waited got the events not pushed yet.
    let mut rest = Vec::new();
    late.try_pop_batch(&mut rest, usize::MAX);
    assert!(
        !rest.is_empty() && rest.len() < 10,
        "late queue got {rest:?}"
    );
    assert!(rest.iter().all(|e| got.contains(e)));
}

#[test]
fn unsubscribing_a_full_block_queue_nobody_reads_releases_the_producer_waiting_on_it() {
    let (clock, det) = manual_detector();
    let q = det.subscribe(2, Overflow::Block, true).unwrap();
    let other = det.subscribe(1024, Overflow::Block, true).unwrap();
    let a = det.add("a", None, Some(0)).unwrap();
    // A beater whose `received` events overflow the queue; its consumer is gone.
    let beater = {
        let det = det.clone();
        thread::spawn(move || {
            for k in 1..=10 {
                det.beat(a, Some(k * MS));
            }
        })
    };
    let det2 = det.clone();
    let q2 = q.clone();
    bounded(
        "unsubscribe while a beat waits for room",
        std::slice::from_ref(&q),
        move || {
            // Wait until the beater is stuck on the full queue, then let the queue go.
            while q2.len() < 2 {
                thread::yield_now();
            }
            assert!(det2.unsubscribe(&q2));
        },
    );
    bounded(
        "the beater after unsubscribe",
        std::slice::from_ref(&q),
        move || beater.join().unwrap(),
    );
    // The other subscriber lost nothing, in order.
    let mut out = Vec::new();
    other.try_pop_batch(&mut out, usize::MAX);
    let at: Vec<u64> = out.iter().map(|e| e.at_ns).collect();
    assert_eq!(at, (1..=10).map(|k| k * MS).collect::<Vec<_>>());
    assert!(out.iter().all(|e| e.kind == Received && e.topic == a));
    drop(clock);
}

#[test]
fn a_removed_topics_id_is_not_reused_while_its_event_waits_to_be_pushed() {
    let (_clock, det) = manual_detector();
    let q = det.subscribe(1, Overflow::Block, true).unwrap();
    let a = det.add("a", None, Some(0)).unwrap();
    let b = det.add("b", None, Some(0)).unwrap();
    det.beat(b, Some(MS)); // fills the queue
                           // A beat of `a` waits (outside the lock) to push its `received`.
    let beater = {
        let det = det.clone();
        thread::spawn(move || det.beat(a, Some(2 * MS)))
    };
    while det.delivered.load(Ordering::Acquire) == det.inner.lock().appended {
        thread::yield_now();
    }
    det.remove(a).unwrap();
    let c = det.add("c", None, Some(3 * MS)).unwrap();
    assert_ne!(
        c, a,
        "a's id was reused while its `received` was still waiting"
    );
    // Drain: b's event, then a's, which still names a (not c).
    assert_eq!(pop_one(&q).topic, b);
    let ev = pop_one(&q);
    assert_eq!((ev.kind, ev.topic, ev.at_ns), (Received, a, 2 * MS));
    bounded("the beater", std::slice::from_ref(&q), move || {
        beater.join().unwrap()
    });
    // Once the queue is found empty, the id comes back.
    let mut out = Vec::new();
    q.try_pop_batch(&mut out, usize::MAX);
    let d = det.add("d", None, Some(4 * MS)).unwrap();
    assert_eq!(d, a);
}

#[test]
fn a_beats_resumed_comes_before_its_received_and_after_the_failed_it_ends() {
    // The driver's `failed` and a beat's `resumed` + `received` are put aside under the same
    // lock and pushed in that order, however the threads interleave.
    for _ in 0..20 {
        let (clock, det) = manual_detector();
        let q = det.subscribe(1, Overflow::Block, true).unwrap();
        let a = det.add("a", None, Some(0)).unwrap();
        let driver = {
            let clock = clock.clone();
            thread::spawn(move || {
                for k in 2..=6 {
                    clock.set(k * S + MS).unwrap();
                }
            })
        };
        let beater = {
            let det = det.clone();
            thread::spawn(move || {
                for k in 1..=20 {
                    det.beat(a, Some(k * S / 4 + 7 * MS));
                }
            })
        };
        let mut got = Vec::new();
        let det2 = det.clone();
        let q2 = q.clone();
        let got = bounded("consumer", std::slice::from_ref(&q), move || {
            loop {
                let mut out = Vec::new();
                let received = got.iter().filter(|e: &&Event| e.kind == Received).count();
                let wait = Duration::from_millis(if received < 20 { 1000 } else { 50 });
                if q2.pop_batch(&mut out, 1, Some(wait)) == 0 {
                    break;
                }
                // Call the detector between pops, as a listener may.
                det2.status(a).unwrap();
                got.extend(out);
            }
            got
        });
        driver.join().unwrap();
        beater.join().unwrap();
        for (i, ev) in got.iter().enumerate() {
            if ev.kind == Resumed {
                // The beat's `received` comes after its `resumed`, never before.
                let beat = |e: &&Event| e.kind == Received && e.at_ns == ev.at_ns;
                assert!(got[i + 1..].iter().any(|e| beat(&e)), "{got:?}");
                assert!(!got[..i].iter().any(|e| beat(&e)), "{got:?}");
                let before = got[..i].iter().rev().find(|e| e.kind != Received);
                assert_eq!(before.map(|e| e.kind), Some(Failed), "{got:?}");
            }
        }
        let received = got.iter().filter(|e| e.kind == Received).count();
        assert_eq!(received, 20, "{got:?}");
    }
}

#[test]
fn a_call_that_emits_nothing_does_not_wait_for_others_events() {
    let (clock, det) = manual_detector();
    let q = det.subscribe(1, Overflow::Block, false).unwrap();
    for i in 0..4 {
        det.add(&format!("t{i}"), None, Some(0)).unwrap();
    }
    let driver = {
        let clock = clock.clone();
        thread::spawn(move || clock.set(S + MS).unwrap())
    };
    let first = pop_one(&q); // the driver now waits for room for the others
    let det2 = det.clone();
    bounded(
        "stop and start from the consumer",
        std::slice::from_ref(&q),
        move || {
            det2.stop(); // nothing of its own to push: no waiting for the driver's events
            det2.start(None);
            assert!(det2.resume(first.topic, None).is_ok());
        },
    );
    for _ in 0..3 {
        pop_one(&q);
    }
    bounded("the driver", std::slice::from_ref(&q), move || {
        driver.join().unwrap()
    });
}

#[test]
fn wait_pushed_waits_for_events_emitted_before_the_mark_and_times_out_while_they_wait() {
    let (clock, det) = manual_detector();
    let feed = det.subscribe(100, Overflow::Block, false).unwrap();
    det.add("a", None, Some(0)).unwrap();
    det.add("x", None, Some(0)).unwrap();
    let slow = det.subscribe(1, Overflow::Block, false).unwrap();
    // Two failures into a queue with room for one: the driver waits for room in `slow`.
    let driver = {
        let clock = clock.clone();
        thread::spawn(move || clock.set(S + MS).unwrap())
    };
    let deadline = std::time::Instant::now() + BOUND;
    while slow.is_empty() {
        assert!(std::time::Instant::now() < deadline, "no push into slow");
        thread::sleep(Duration::from_millis(1));
    }
    det.stop();
    let mark = det.outbox_mark();
    assert_eq!(mark, 2, "both failures were put aside before stop");
    // The second failure waits for room: not pushed yet, so the wait times out.
    assert!(!det.wait_pushed(mark, Some(Duration::from_millis(50))));
    assert_eq!(feed.len(), 1);
    let (det2, slow2) = (det.clone(), slow.clone());
    let waiter = thread::spawn(move || {
        let ok = det2.wait_pushed(mark, Some(BOUND));
        drop(slow2);
        ok
    });
    pop_one(&slow);
    assert!(
        bounded("wait_pushed", std::slice::from_ref(&slow), move || waiter
            .join()
            .unwrap()),
        "wait_pushed timed out although the events were pushed"
    );
    assert_eq!(feed.len(), 2);
    assert!(det.wait_pushed(0, Some(Duration::ZERO)));
    driver.join().unwrap();
}
