//! The event queue's behaviour: each overflow policy at capacity, coalescing and its side table,
//! blocking producers and consumers, close, wake-ups, and multi-producer stress runs that check
//! per-key order and that nothing is lost.

use super::*;
use std::collections::HashMap;
use std::sync::Arc;
use std::thread;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ev {
    key: u32,
    seq: u64,
}

impl Keyed for Ev {
    fn key(&self) -> u32 {
        self.key
    }
}

fn ev(key: u32, seq: u64) -> Ev {
    Ev { key, seq }
}

/// Everything available now, without blocking.
fn drain(q: &EventQueue<Ev>) -> Vec<Ev> {
    let mut out = Vec::new();
    while q.try_pop_batch(&mut out, usize::MAX) > 0 {}
    out
}

fn seqs(evs: &[Ev]) -> Vec<u64> {
    evs.iter().map(|e| e.seq).collect()
}

/// Asserts that each key's events are in strictly increasing `seq` order.
fn assert_per_key_order(evs: &[Ev]) {
    let mut last: HashMap<u32, u64> = HashMap::new();
    for e in evs {
        if let Some(&prev) = last.get(&e.key) {
            assert!(prev < e.seq, "key {}: {} after {}", e.key, e.seq, prev);
        }
        last.insert(e.key, e.seq);
    }
}

/// A queue of capacity 8 under `policy` after 20 pushes, keys 0, 1, 2 in turn (seq 0..20), and
/// what each push returned: the overflow tests' common start.
fn push_20_into_8(policy: Overflow) -> (EventQueue<Ev>, Vec<bool>) {
    let q = EventQueue::new(8, policy);
    let accepted = (0..20).map(|i| q.push(ev(i as u32 % 3, i))).collect();
    (q, accepted)
}

/// Drains `q` and checks each key's order: the seqs, in the order popped.
fn drain_seqs_in_key_order(q: &EventQueue<Ev>) -> Vec<u64> {
    let out = drain(q);
    assert_per_key_order(&out);
    seqs(&out)
}

/// Whether one producer is parked on `q` (waiting for room) within 5 s.
fn a_producer_parks(q: &EventQueue<Ev>) -> bool {
    wait_until(|| q.flags.producer_waiters.load(Ordering::SeqCst) == 1)
}

/// Whether one consumer is parked on `q` (waiting for events) within 5 s.
fn a_consumer_parks(q: &EventQueue<Ev>) -> bool {
    wait_until(|| q.flags.consumer_waiters.load(Ordering::SeqCst) == 1)
}

/// Polls `cond` for up to 5 s.
fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(1));
    }
    cond()
}

#[test]
fn queue_is_send_and_sync() {
    fn check<Q: Send + Sync>() {}
    check::<EventQueue<Ev>>();
    check::<Arc<EventQueue<Ev>>>();
}

#[test]
fn overflow_parse_and_names() {
    for o in Overflow::ALL {
        assert_eq!(Overflow::parse(o.as_str()), Ok(o));
        assert_eq!(o.as_str().parse::<Overflow>(), Ok(o));
        assert_eq!(o.to_string(), o.as_str());
    }
    assert_eq!(Overflow::parse("drop-oldest"), Ok(Overflow::DropOldest));
    let err = Overflow::parse("drop_latest").unwrap_err();
    assert!(err.contains("\"drop_latest\""), "{err}");
    for name in ["block", "drop-oldest", "drop-newest", "coalesce"] {
        assert!(err.contains(name), "{err}");
    }
    assert!(Overflow::parse("").is_err());
    assert!(Overflow::parse("Block").is_err());
}

#[test]
fn zero_capacity_is_clamped_to_one() {
    let q = EventQueue::new(0, Overflow::DropNewest);
    assert_eq!(q.stats().capacity, 1);
    assert!(q.push(ev(0, 0)));
    assert!(!q.push(ev(0, 1)));
    assert_eq!(seqs(&drain(&q)), [0]);
}

#[test]
fn max_limits_the_batch() {
    let q = EventQueue::new(8, Overflow::Block);
    for i in 0..5 {
        assert!(q.push(ev(0, i)));
    }
    let mut out = Vec::new();
    assert_eq!(q.try_pop_batch(&mut out, 0), 0);
    assert_eq!(q.pop_batch(&mut out, 0, None), 0);
    assert_eq!(q.pop_batch(&mut out, 2, None), 2);
    assert_eq!(q.try_pop_batch(&mut out, 2), 2);
    assert_eq!(q.pop_batch(&mut out, 100, Some(Duration::ZERO)), 1);
    assert_eq!(seqs(&out), [0, 1, 2, 3, 4]);
    assert!(q.is_empty());
    assert_eq!(q.len(), 0);
}

#[test]
fn drop_newest_keeps_the_first_capacity() {
    let (q, accepted) = push_20_into_8(Overflow::DropNewest);
    assert!(accepted[..8].iter().all(|&a| a));
    assert!(accepted[8..].iter().all(|&a| !a));
    assert_eq!(
        q.stats(),
        QueueStats {
            pushed: 8,
            dropped_newest: 12,
            len: 8,
            capacity: 8,
            ..QueueStats::default()
        }
    );
    assert_eq!(drain_seqs_in_key_order(&q), (0..8).collect::<Vec<_>>());
    assert_eq!(q.stats().popped, 8);
    assert_eq!(q.len(), 0);
}

#[test]
fn drop_oldest_keeps_the_newest_capacity() {
    let (q, accepted) = push_20_into_8(Overflow::DropOldest);
    assert!(accepted.iter().all(|&a| a));
    assert_eq!(
        q.stats(),
        QueueStats {
            pushed: 20,
            dropped_oldest: 12,
            len: 8,
            capacity: 8,
            ..QueueStats::default()
        }
    );
    assert_eq!(drain_seqs_in_key_order(&q), (12..20).collect::<Vec<_>>());
    let s = q.stats();
    assert_eq!(s.pushed, s.popped + s.dropped_oldest);
}

#[test]
fn unkeyed_events_overflowing_a_coalescing_queue_are_each_kept_in_order() {
    // Review 2, finding 1: a no-topic event (local pause, lagging, caught up) parked in the
    // side table sized its per-key table for key u32::MAX (16 GiB: an abort), and one
    // replaced another (a caught_up lost to a later local_pause).
    let q = EventQueue::new(2, Overflow::Coalesce);
    for i in 0..2 {
        assert!(q.push(ev(i, i as u64)));
    }
    for i in 2..6 {
        assert!(q.push(ev(UNKEYED, i)));
    }
    assert!(q.push(ev(0, 6)));
    assert_eq!(q.stats().coalesced, 0);
    let out = drain(&q);
    assert_eq!(seqs(&out), [0, 1, 2, 3, 4, 5, 6]);
}

#[test]
fn coalesce_keeps_newest_overflow_per_key_in_order() {
    // Keys interleaved 0,1,2,0,1,2,... The ring takes seq 0..8; then 8 (key 2), 9 (key 0)
    // and 10 (key 1) go to the side table, and each later event replaces its key's entry.
    let (q, accepted) = push_20_into_8(Overflow::Coalesce);
    assert!(accepted.iter().all(|&a| a));
    assert_eq!(
        q.stats(),
        QueueStats {
            pushed: 20,
            coalesced: 9,
            len: 11,
            capacity: 8,
            ..QueueStats::default()
        }
    );
    // Ring first, then the side table in the order its keys first overflowed (2, 0, 1),
    // each with its newest event.
    assert_eq!(
        drain_seqs_in_key_order(&q),
        [0, 1, 2, 3, 4, 5, 6, 7, 17, 18, 19]
    );
    let s = q.stats();
    assert_eq!(s.popped, 11);
    assert_eq!(s.pushed, s.popped + s.coalesced);
    assert_eq!(s.len, 0);
}

#[test]
fn coalesce_mass_overflow_is_taken_straight_from_the_side_table_in_order() {
    // A mass failure: far more distinct keys than the ring holds, then a second event for
    // some of them, parked or in the ring. Popped in batches larger than the ring.
    let q = EventQueue::new(64, Overflow::Coalesce);
    let n = 10_000u32;
    for key in 0..n {
        assert!(q.push(ev(key, u64::from(key))));
    }
    for key in (0..n).step_by(7) {
        assert!(q.push(ev(key, u64::from(n + key)))); // replaces a parked one, or parks
    }
    let parked_again = (0..64).step_by(7).count() as u64; // their first is in the ring
    let replaced = (0..n).step_by(7).count() as u64 - parked_again;
    assert_eq!(q.stats().coalesced, replaced);
    let mut out = Vec::new();
    while q.try_pop_batch(&mut out, 1000) > 0 {}
    assert_eq!(out.len() as u64, u64::from(n) + parked_again);
    assert_per_key_order(&out);
    // Every key's newest event came out, in the order the keys first overflowed.
    let mut newest: HashMap<u32, u64> = HashMap::new();
    for e in &out {
        newest.insert(e.key, e.seq);
    }
    for key in 0..n {
        let want = if key % 7 == 0 { n + key } else { key };
        assert_eq!(newest[&key], u64::from(want), "key {key}");
    }
    let s = q.stats();
    assert_eq!((s.len, s.pushed), (0, s.popped + s.coalesced));
    // Keys parked again after their entries were taken get new ones: their old positions
    // are stale and must not match (key 70 was parked at position 6 of the first round).
    for i in 0..64 {
        assert!(q.push(ev(100_000 + i, 0)));
    }
    assert!(q.push(ev(5, 1)));
    assert!(q.push(ev(70, 1)));
    assert_eq!(q.stats().coalesced, replaced);
    let mut out = Vec::new();
    while q.try_pop_batch(&mut out, 1000) > 0 {}
    assert_eq!(out.len(), 66);
    assert_eq!(&out[64..], &[ev(5, 1), ev(70, 1)]);
}

#[test]
fn coalesce_sends_a_parked_key_to_the_side_table_even_with_room() {
    let q = EventQueue::new(4, Overflow::Coalesce);
    for i in 0..4 {
        assert!(q.push(ev(0, i)));
    }
    assert!(q.push(ev(1, 100))); // ring full: parked
    assert_eq!(q.len(), 5);
    // Make room without letting the consumer refill from the side table.
    assert_eq!(q.ring.pop(), Some(ev(0, 0)));
    assert!(q.push(ev(1, 101))); // key 1 is parked: replaces, must not overtake
    assert!(q.push(ev(0, 4))); // key 0 is not parked: takes the free slot
    assert_eq!(q.stats().coalesced, 1);
    assert!(q.push(ev(2, 200))); // ring full again: parked behind key 1
    let mut out = Vec::new();
    // One pop frees one slot; the longest-parked key (1) moves to the ring's tail.
    assert_eq!(q.try_pop_batch(&mut out, 1), 1);
    assert!(q.push(ev(1, 102))); // key 1 no longer parked, but the ring is full: parked
    assert!(q.push(ev(2, 201))); // key 2 still parked: replaces
    out.extend(drain(&q));
    assert_eq!(seqs(&out), [1, 2, 3, 4, 101, 201, 102]);
    assert_per_key_order(&out);
    let s = q.stats();
    // One event was taken with `ring.pop()` above, bypassing the counters.
    assert_eq!((s.pushed, s.popped, s.coalesced, s.len), (10, 7, 2, 0));
}

#[test]
fn coalesce_side_table_drains_under_sustained_load() {
    // The consumer pops one at a time while the ring is kept full: parked keys must still
    // get through (they go back into the ring ahead of later arrivals of other keys).
    let q = EventQueue::new(4, Overflow::Coalesce);
    let mut next = 0;
    let mut push = |key: u32| {
        assert!(q.push(ev(key, next)));
        next += 1;
    };
    for _ in 0..4 {
        push(0);
    }
    push(7); // parked
    let mut out = Vec::new();
    for _ in 0..8 {
        push(0);
        assert_eq!(q.try_pop_batch(&mut out, 1), 1);
    }
    assert!(out.iter().any(|e| e.key == 7), "{out:?}");
    out.extend(drain(&q));
    assert_per_key_order(&out);
}

#[test]
fn block_waits_for_room_and_loses_nothing() {
    let q = Arc::new(EventQueue::new(8, Overflow::Block));
    let producer = {
        let q = Arc::clone(&q);
        thread::spawn(move || (0..20).all(|i| q.push(ev(i as u32 % 3, i))))
    };
    // The consumer is stalled: the producer fills the ring, then parks (not spins).
    assert!(a_producer_parks(&q), "no producer parked");
    assert_eq!(
        q.stats(),
        QueueStats {
            pushed: 8,
            len: 8,
            capacity: 8,
            ..QueueStats::default()
        }
    );
    assert!(!producer.is_finished());
    let mut out = Vec::new();
    while out.len() < 20 {
        q.pop_batch(&mut out, 3, Some(Duration::from_secs(5)));
    }
    assert!(producer.join().unwrap());
    assert_eq!(seqs(&out), (0..20).collect::<Vec<_>>());
    assert_eq!(
        q.stats(),
        QueueStats {
            pushed: 20,
            popped: 20,
            capacity: 8,
            ..QueueStats::default()
        }
    );
}

#[test]
fn block_single_pop_releases_a_blocked_producer() {
    let q = Arc::new(EventQueue::new(2, Overflow::Block));
    assert!(q.push(ev(0, 0)));
    assert!(q.push(ev(0, 1)));
    let producer = {
        let q = Arc::clone(&q);
        thread::spawn(move || q.push(ev(0, 2)))
    };
    assert!(a_producer_parks(&q), "no producer parked");
    let mut out = Vec::new();
    assert_eq!(q.try_pop_batch(&mut out, 1), 1);
    assert!(producer.join().unwrap());
    out.extend(drain(&q));
    assert_eq!(seqs(&out), [0, 1, 2]);
}

#[test]
fn try_push_hands_back_on_a_full_block_queue_and_wait_for_room_waits_for_a_pop_or_close() {
    let q = Arc::new(EventQueue::new(2, Overflow::Block));
    assert_eq!(q.try_push_deferred(ev(0, 0)), Ok(true));
    assert_eq!(q.try_push_deferred(ev(0, 1)), Ok(true));
    assert_eq!(
        q.try_push_deferred(ev(0, 2)),
        Err(ev(0, 2)),
        "full: handed back"
    );
    let waiter = {
        let q = Arc::clone(&q);
        thread::spawn(move || {
            q.wait_for_room();
            q.try_push_deferred(ev(0, 2))
        })
    };
    // The deferred pushes woke nobody; wait_for_room wakes the consumer before it parks.
    let mut out = Vec::new();
    assert_eq!(q.pop_batch(&mut out, 1, Some(Duration::from_secs(10))), 1);
    assert_eq!(waiter.join().unwrap(), Ok(true));
    assert_eq!(seqs(&drain(&q)), vec![1, 2]);
    // Closed: no waiting, and a push is rejected (counted), not handed back.
    for i in 3..5 {
        assert_eq!(q.try_push_deferred(ev(0, i)), Ok(true));
    }
    let waiter = {
        let q = Arc::clone(&q);
        thread::spawn(move || q.wait_for_room())
    };
    assert!(a_producer_parks(&q), "no producer parked");
    q.close();
    waiter.join().unwrap();
    assert_eq!(q.try_push_deferred(ev(0, 5)), Ok(false));
    let s = q.stats();
    assert_eq!((s.pushed, s.rejected_closed), (5, 1));
    // Other policies never hand back.
    let q = EventQueue::new(1, Overflow::DropNewest);
    assert_eq!(q.try_push_deferred(ev(0, 0)), Ok(true));
    assert_eq!(q.try_push_deferred(ev(0, 1)), Ok(false));
    q.wait_for_room(); // never waits
}

#[test]
fn block_close_releases_a_blocked_producer() {
    let q = Arc::new(EventQueue::new(8, Overflow::Block));
    for i in 0..8 {
        assert!(q.push(ev(0, i)));
    }
    let producer = {
        let q = Arc::clone(&q);
        thread::spawn(move || q.push(ev(0, 8)))
    };
    assert!(a_producer_parks(&q), "no producer parked");
    q.close();
    assert!(!producer.join().unwrap());
    let s = q.stats();
    assert_eq!((s.pushed, s.rejected_closed, s.len), (8, 1, 8));
    // What was queued before close is still delivered.
    assert_eq!(seqs(&drain(&q)), (0..8).collect::<Vec<_>>());
}

#[test]
fn close_rejects_pushes_and_still_drains() {
    for o in Overflow::ALL {
        let q = EventQueue::new(4, o);
        assert!(q.push(ev(0, 0)));
        assert!(q.push(ev(1, 1)));
        assert!(!q.is_closed());
        q.close();
        q.close();
        assert!(q.is_closed());
        assert!(!q.push(ev(0, 2)));
        assert_eq!(q.stats().rejected_closed, 1);
        let mut out = Vec::new();
        // Closed and non-empty: returns at once with what is left, then 0 without waiting.
        assert_eq!(q.pop_batch(&mut out, 10, None), 2);
        let t = Instant::now();
        assert_eq!(q.pop_batch(&mut out, 10, None), 0);
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(seqs(&out), [0, 1]);
    }
}

#[test]
fn pop_batch_times_out() {
    let q = EventQueue::<Ev>::new(4, Overflow::Block);
    let mut out = Vec::new();
    let timeout = Duration::from_millis(100);
    let t = Instant::now();
    assert_eq!(q.pop_batch(&mut out, 10, Some(timeout)), 0);
    let took = t.elapsed();
    assert!(took >= timeout, "{took:?}");
    assert!(took < timeout + Duration::from_secs(2), "{took:?}");
    assert!(out.is_empty());
    assert_eq!(q.pop_batch(&mut out, 10, Some(Duration::ZERO)), 0);
    // A timeout too large for `Instant` means "forever", not a panic.
    assert!(q.push(ev(0, 0)));
    assert_eq!(q.pop_batch(&mut out, 10, Some(Duration::MAX)), 1);
}

#[test]
fn close_wakes_a_blocked_pop_batch() {
    let q = Arc::new(EventQueue::<Ev>::new(4, Overflow::Coalesce));
    let consumer = {
        let q = Arc::clone(&q);
        thread::spawn(move || {
            let t = Instant::now();
            let n = q.pop_batch(&mut Vec::new(), 10, None);
            (n, t.elapsed())
        })
    };
    assert!(a_consumer_parks(&q), "no consumer parked");
    q.close();
    let (n, _) = consumer.join().unwrap();
    assert_eq!(n, 0);
}

#[test]
fn push_wakes_a_parked_pop_batch() {
    let q = Arc::new(EventQueue::new(4, Overflow::DropOldest));
    let consumer = {
        let q = Arc::clone(&q);
        thread::spawn(move || {
            let mut out = Vec::new();
            q.pop_batch(&mut out, 10, Some(Duration::from_secs(10)));
            out
        })
    };
    assert!(a_consumer_parks(&q), "no consumer parked");
    assert!(q.push(ev(3, 42)));
    assert_eq!(consumer.join().unwrap(), [ev(3, 42)]);
}

#[test]
fn deferred_pushes_wake_a_parked_consumer_once_flushed() {
    let q = Arc::new(EventQueue::new(8, Overflow::DropOldest));
    let consumer = {
        let q = Arc::clone(&q);
        thread::spawn(move || {
            let mut out = Vec::new();
            // Wait for the whole burst: the wake-up comes only with the flush.
            while out.len() < 3 {
                if q.pop_batch(&mut out, 10, Some(Duration::from_secs(10))) == 0 {
                    break;
                }
            }
            out
        })
    };
    assert!(a_consumer_parks(&q), "no consumer parked");
    for seq in 0..3 {
        assert!(q.push_deferred(ev(1, seq)));
    }
    assert!(q.flags.wake_pending.load(Ordering::SeqCst));
    q.flush_wake();
    assert!(!q.flags.wake_pending.load(Ordering::SeqCst));
    assert_eq!(consumer.join().unwrap(), [ev(1, 0), ev(1, 1), ev(1, 2)]);
    q.flush_wake(); // nothing pending: a no-op
}

#[test]
fn deferred_block_pushes_beyond_capacity_do_not_deadlock() {
    // A burst larger than the ring, flushed only at its end: the blocked producer wakes the
    // consumer meanwhile.
    const N: u64 = 50;
    let q = Arc::new(EventQueue::new(2, Overflow::Block));
    let consumer = {
        let q = Arc::clone(&q);
        thread::spawn(move || {
            let mut out = Vec::new();
            while (out.len() as u64) < N {
                if q.pop_batch(&mut out, 10, Some(Duration::from_secs(10))) == 0 {
                    break; // a lost wake-up: the assertion below names it
                }
            }
            out
        })
    };
    for seq in 0..N {
        assert!(q.push_deferred(ev(0, seq)));
    }
    q.flush_wake(); // the tail of the burst
    let got = consumer.join().unwrap();
    assert_eq!(got.len() as u64, N, "consumer waited out its timeout");
    assert!(got.iter().map(|e| e.seq).eq(0..N));
}

#[test]
fn no_lost_wakeups_with_a_trickling_producer() {
    // The producer pauses often so the consumer keeps going to sleep; a lost wake-up would
    // show up as a pop_batch that waits out its 5 s timeout.
    let q = Arc::new(EventQueue::new(4, Overflow::Block));
    const N: u64 = 2_000;
    let producer = {
        let q = Arc::clone(&q);
        thread::spawn(move || {
            for i in 0..N {
                assert!(q.push(ev(0, i)));
                if i % 7 == 0 {
                    thread::sleep(Duration::from_micros(50));
                }
            }
        })
    };
    let mut out = Vec::new();
    while (out.len() as u64) < N {
        let t = Instant::now();
        let n = q.pop_batch(&mut out, 3, Some(Duration::from_secs(5)));
        assert!(n > 0, "pop_batch timed out after {} events", out.len());
        assert!(t.elapsed() < Duration::from_secs(2));
    }
    producer.join().unwrap();
    assert_eq!(seqs(&out), (0..N).collect::<Vec<_>>());
}

/// `producers` threads push `per` events each (key = producer id, seq = 0..per) while one
/// consumer pops; checks per-key order, exactly-once delivery for `Block`, and the counters.
fn stress(policy: Overflow, capacity: usize, producers: u32, per: u64) {
    let q = Arc::new(EventQueue::<Ev>::new(capacity, policy));
    let consumer = {
        let q = Arc::clone(&q);
        thread::spawn(move || {
            let mut next = vec![0u64; producers as usize];
            let mut received = 0u64;
            let mut out = Vec::with_capacity(64);
            loop {
                out.clear();
                let n = q.pop_batch(&mut out, 64, Some(Duration::from_secs(10)));
                if n == 0 {
                    assert!(q.is_closed(), "{policy:?}: consumer starved");
                    assert!(q.is_empty());
                    break;
                }
                for e in &out {
                    let want = &mut next[e.key as usize];
                    if policy == Overflow::Block {
                        assert_eq!(e.seq, *want, "{policy:?}: key {}", e.key);
                    } else {
                        assert!(e.seq >= *want, "{policy:?}: key {} went back", e.key);
                    }
                    *want = e.seq + 1;
                }
                received += n as u64;
            }
            received
        })
    };
    let handles: Vec<_> = (0..producers)
        .map(|p| {
            let q = Arc::clone(&q);
            thread::spawn(move || (0..per).filter(|&s| q.push(ev(p, s))).count() as u64)
        })
        .collect();
    let accepted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    q.close();
    let received = consumer.join().unwrap();
    let s = q.stats();
    let attempts = u64::from(producers) * per;
    assert_eq!(s.pushed, accepted, "{policy:?} {s:?}");
    assert_eq!(s.popped, received, "{policy:?} {s:?}");
    assert_eq!(s.len, 0, "{policy:?} {s:?}");
    assert_eq!(s.rejected_closed, 0, "{policy:?} {s:?}");
    assert_eq!(
        s.pushed,
        s.popped + s.dropped_oldest + s.coalesced,
        "{policy:?} {s:?}"
    );
    assert_eq!(s.pushed + s.dropped_newest, attempts, "{policy:?} {s:?}");
    match policy {
        Overflow::Block => assert_eq!(s.popped, attempts),
        Overflow::DropOldest => assert_eq!(s.dropped_newest + s.coalesced, 0),
        Overflow::DropNewest => assert_eq!(s.dropped_oldest + s.coalesced, 0),
        Overflow::Coalesce => assert_eq!(s.dropped_oldest + s.dropped_newest, 0),
    }
}

#[test]
fn stress_each_policy() {
    for o in Overflow::ALL {
        stress(o, 16, 4, 50_000);
    }
}

#[test]
fn stress_tiny_capacity() {
    for o in Overflow::ALL {
        stress(o, 1, 3, 10_000);
    }
}

#[test]
fn drained_since_waits_for_an_empty_pass_and_the_hand_back() {
    let q = EventQueue::new(4, Overflow::Coalesce);
    assert_eq!(q.mark(), None, "idle and empty: nothing in flight");
    q.push(ev(1, 1));
    let m = q.mark().expect("an event is waiting");
    assert!(!q.drained_since(m));
    let mut out = Vec::new();
    assert_eq!(q.try_pop_batch(&mut out, 8), 1);
    assert!(!q.drained_since(m), "popped, not handed back yet");
    assert!(q.mark().is_some(), "the consumer still holds it");
    q.release_popped();
    assert!(q.drained_since(m));
    assert_eq!(q.mark(), None);
    // A pass that leaves events behind proves nothing; the next empty one does.
    q.push(ev(1, 2));
    q.push(ev(2, 3));
    let m = q.mark().unwrap();
    out.clear();
    assert_eq!(q.try_pop_batch(&mut out, 1), 1);
    assert!(!q.drained_since(m));
    assert_eq!(q.try_pop_batch(&mut out, 1), 1); // hands back the first, pops the last
    assert!(!q.drained_since(m));
    assert_eq!(q.try_pop_batch(&mut out, 1), 0); // hands back, finds it empty
    assert!(q.drained_since(m));
}
