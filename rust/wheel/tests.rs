//! The wheel's behaviour through its public API: scheduling, cancelling, draining, cascades at
//! level boundaries, memory given back, and a model-based property test against a trivially
//! correct reference. The level math is tested beside it in `level.rs`.

use super::*;
use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap};

/// A wheel at `now` with keys `0..n`.
fn wheel(now: u64, n: usize) -> Wheel {
    let mut w = Wheel::new(now);
    w.reserve_keys(n);
    w
}

/// Pop everything due at `now`, in order.
fn drain(w: &mut Wheel, now: u64) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    while let Some(x) = w.pop_expired(now) {
        out.push(x);
    }
    out
}

#[test]
fn entry_is_small() {
    assert_eq!(std::mem::size_of::<Entry>(), 16);
    assert_eq!(LEVELS, 11);
    let mut w = Wheel::new(0);
    let empty = w.heap_bytes();
    assert!(empty < 32 * 1024);
    w.reserve_keys(1000);
    assert!(w.heap_bytes() >= empty + 1000 * std::mem::size_of::<Entry>());
    assert!(std::mem::size_of::<Wheel>() < 4096);
}

#[test]
fn new_wheel_is_empty() {
    let mut w = Wheel::new(42);
    assert!(w.is_empty());
    assert_eq!(w.len(), 0);
    assert_eq!(w.elapsed(), 42);
    assert_eq!(w.key_capacity(), 0);
    assert_eq!(w.next_expiration(), None);
    assert_eq!(w.pop_expired(100), None);
    assert_eq!(w.elapsed(), 100);
}

#[test]
fn reserve_keys_grows_and_keeps_entries() {
    let mut w = wheel(0, 4);
    w.schedule(3, 10);
    w.reserve_keys(2); // shrinking request is a no-op
    assert_eq!(w.key_capacity(), 4);
    w.reserve_keys(1000);
    assert_eq!(w.key_capacity(), 1000);
    assert_eq!(w.deadline(3), Some(10));
    assert_eq!(w.deadline(999), None);
    w.schedule(999, 5);
    assert_eq!(drain(&mut w, 10), vec![(999, 5), (3, 10)]);
}

#[test]
#[should_panic(expected = "out of range")]
fn schedule_out_of_range_panics() {
    let mut w = wheel(0, 4);
    w.schedule(4, 1);
}

#[test]
fn out_of_range_cancel_and_deadline_are_benign() {
    let mut w = wheel(0, 4);
    assert!(!w.cancel(4));
    assert!(!w.cancel(u32::MAX));
    assert_eq!(w.deadline(4), None);
}

#[test]
fn schedule_cancel_deadline_len() {
    let mut w = wheel(0, 8);
    w.schedule(1, 100);
    w.schedule(2, 200);
    assert_eq!(w.len(), 2);
    assert_eq!(w.deadline(1), Some(100));
    w.schedule(1, 300); // move
    assert_eq!(w.len(), 2);
    assert_eq!(w.deadline(1), Some(300));
    assert!(w.cancel(2));
    assert!(!w.cancel(2));
    assert_eq!(w.len(), 1);
    assert_eq!(w.deadline(2), None);
    assert_eq!(drain(&mut w, 299), vec![]);
    assert_eq!(drain(&mut w, 300), vec![(1, 300)]);
    assert!(w.is_empty());
}

#[test]
fn due_now_and_past_deadlines_pop_immediately() {
    let mut w = wheel(1000, 4);
    w.schedule(0, 1000); // == elapsed
    w.schedule(1, 3); // long past
    assert_eq!(w.next_expiration(), Some(3));
    // Even a `now` behind elapsed returns them (treated as elapsed).
    let mut got = drain(&mut w, 0);
    got.sort_unstable();
    assert_eq!(got, vec![(0, 1000), (1, 3)]);
    assert_eq!(w.elapsed(), 1000);
}

#[test]
fn now_behind_elapsed_does_not_rewind() {
    let mut w = wheel(500, 2);
    w.schedule(0, 501);
    assert_eq!(w.pop_expired(10), None);
    assert_eq!(w.elapsed(), 500);
    assert_eq!(w.pop_expired(501), Some((0, 501)));
}

#[test]
fn reschedule_in_loop_with_past_deadline_pops_in_same_loop() {
    let mut w = wheel(0, 4);
    w.schedule(0, 10);
    w.schedule(1, 20);
    let mut got = Vec::new();
    let mut rescheduled = false;
    while let Some((k, when)) = w.pop_expired(100) {
        got.push((k, when));
        if k == 1 && !rescheduled {
            rescheduled = true;
            w.schedule(1, 5); // already passed: must come out next
            w.schedule(2, 50); // future but within now: in order
            w.schedule(3, 101); // beyond now: stays
        }
    }
    assert_eq!(got, vec![(0, 10), (1, 20), (1, 5), (2, 50)]);
    assert_eq!(w.deadline(3), Some(101));
    assert_eq!(w.elapsed(), 100);
}

#[test]
fn lazy_rearm_loop() {
    // Re-arm every key one period later, inside the loop, across a long jump.
    let mut w = wheel(0, 3);
    for k in 0..3 {
        w.schedule(k, 7 + u64::from(k));
    }
    let mut got = Vec::new();
    while let Some((k, when)) = w.pop_expired(40) {
        got.push((k, when));
        w.schedule(k, when + 10);
    }
    let whens: Vec<u64> = got.iter().map(|&(_, w)| w).collect();
    assert_eq!(whens, vec![7, 8, 9, 17, 18, 19, 27, 28, 29, 37, 38, 39]);
    assert_eq!(w.len(), 3);
}

#[test]
fn schedule_key_sitting_on_due_list() {
    let mut w = wheel(0, 4);
    w.schedule(0, 64 * 64); // level 2
    w.schedule(1, 64 * 64);
    // Pop one; the cascade has put the other on the due list.
    let (first, _) = w.pop_expired(64 * 64).unwrap();
    let other = 1 - first;
    assert_eq!(w.deadline(other), Some(64 * 64));
    // Move it from the due list into the future.
    w.schedule(other, 64 * 64 + 1);
    assert_eq!(w.pop_expired(64 * 64), None);
    assert_eq!(w.next_expiration(), Some(64 * 64 + 1));
    // And back onto the due list, then off it again.
    w.schedule(other, 2);
    assert_eq!(w.deadline(other), Some(2));
    assert_eq!(w.next_expiration(), Some(2));
    assert!(w.cancel(other));
    assert_eq!(w.next_expiration(), None);
    assert_eq!(w.pop_expired(u64::MAX), None);
    assert!(w.is_empty());
}

#[test]
fn past_deadlines_scheduled_outside_a_loop_come_out_sorted() {
    let mut w = wheel(1_000_000, 3000);
    for k in 0..3000u32 {
        // Scrambled past deadlines (many ties), plus some due exactly now.
        let when = if k % 7 == 0 {
            1_000_000
        } else {
            (u64::from(k) * 7919) % 100_000
        };
        w.schedule(k, when);
    }
    // A few cancels and moves while the list is unsorted.
    assert!(w.cancel(5));
    w.schedule(6, 2_000_000);
    w.schedule(8, 1);
    let got = drain(&mut w, 1_500_000);
    assert_eq!(got.len(), 2998);
    assert!(got.windows(2).all(|p| p[0].1 <= p[1].1));
    assert_eq!(got[0], (8, 1));
    assert_eq!(w.len(), 1);
}

#[test]
fn due_queue_tombstones_compact_and_keep_order() {
    // Enough removals from the due queue to compact it several times, with keys moved
    // between the due queue and the slots, checked against a sorted reference.
    const N: u32 = 2000;
    let mut w = wheel(10_000, N as usize);
    let mut live: Vec<(u64, u32)> = Vec::new();
    for k in 0..N {
        w.schedule(k, u64::from(k % 97) * 50); // past, scrambled: the queue is unsorted
    }
    for k in (0..N).filter(|k| k % 3 != 0) {
        assert!(w.cancel(k));
    }
    for k in (0..N).filter(|k| k % 3 == 0) {
        if k % 2 == 0 {
            w.schedule(k, 20_000 + u64::from(k)); // out to a slot
            w.schedule(k, u64::from(k) % 500); // and back onto the due queue
        }
        live.push((w.deadline(k).unwrap(), k));
    }
    assert_eq!(w.len(), live.len());
    live.sort_unstable();
    let got = drain(&mut w, 10_000);
    let whens: Vec<u64> = got.iter().map(|&(_, t)| t).collect();
    let want: Vec<u64> = live.iter().map(|&(t, _)| t).collect();
    assert_eq!(whens, want);
    let mut keys: Vec<u32> = got.iter().map(|&(k, _)| k).collect();
    keys.sort_unstable();
    let mut want_keys: Vec<u32> = live.iter().map(|&(_, k)| k).collect();
    want_keys.sort_unstable();
    assert_eq!(keys, want_keys);
    assert!(w.is_empty());
}

#[test]
fn emptied_large_lists_give_their_memory_back() {
    const N: usize = 100_000;
    let mut w = wheel(0, N);
    let base = w.heap_bytes();
    for k in 0..N as u32 {
        w.schedule(k, 5_000);
    }
    assert!(w.heap_bytes() >= base + N * 4);
    assert_eq!(drain(&mut w, 5_000).len(), N);
    assert!(
        w.heap_bytes() <= base + 64 * 1024,
        "{}",
        w.heap_bytes() - base
    );
    // Removing keys one by one frees a big slot too.
    for k in 0..N as u32 {
        w.schedule(k, 9_000);
    }
    for k in 0..N as u32 {
        assert!(w.cancel(k));
    }
    assert!(w.heap_bytes() <= base + 64 * 1024);
}

#[test]
fn cancel_key_sitting_on_due_list() {
    let mut w = wheel(10, 3);
    w.schedule(0, 5);
    w.schedule(1, 6);
    w.schedule(2, 7);
    assert!(w.cancel(1)); // middle of the due list
    assert_eq!(w.len(), 2);
    let mut got = drain(&mut w, 10);
    got.sort_unstable();
    assert_eq!(got, vec![(0, 5), (2, 7)]);
}

#[test]
fn cascades_at_level_boundaries() {
    // Deadlines at 64^k - 1, 64^k, 64^k + 1 for every level, from several start times.
    for start in [0u64, 1, 63, 64 * 64 - 1, 12_345_678_901] {
        let mut whens = Vec::new();
        for k in 1..=10u32 {
            let b = 1u64 << (6 * k);
            for w in [b - 1, b, b + 1] {
                whens.push(start.saturating_add(w));
            }
        }
        whens.push(u64::MAX - 1);
        whens.push(u64::MAX);
        let mut w = wheel(start, whens.len());
        for (k, &when) in whens.iter().enumerate() {
            w.schedule(k as u32, when);
        }
        let mut expected: Vec<(u64, u32)> = whens
            .iter()
            .enumerate()
            .map(|(k, &w)| (w, k as u32))
            .collect();
        expected.sort_unstable();
        // Step to each deadline minus one: nothing early; then exactly at it.
        for &(when, key) in &expected {
            if when > w.elapsed() {
                assert_eq!(w.pop_expired(when - 1), None, "early at {when}");
                assert!(w.next_expiration().unwrap() <= when);
            }
            assert_eq!(w.pop_expired(when), Some((key, when)));
        }
        assert!(w.is_empty());
    }
}

#[test]
fn far_future_now_jumps_over_empty_ticks() {
    // A per-tick loop would never finish this.
    let mut w = wheel(0, 3);
    w.schedule(0, 1 << 40);
    w.schedule(1, (1 << 62) + 12345);
    w.schedule(2, u64::MAX - 7);
    assert_eq!(
        drain(&mut w, u64::MAX),
        vec![(0, 1 << 40), (1, (1 << 62) + 12345), (2, u64::MAX - 7)]
    );
    assert_eq!(w.elapsed(), u64::MAX);
    assert_eq!(w.pop_expired(u64::MAX), None);
}

#[test]
fn top_level_deadline_never_fires_early() {
    let when = (1u64 << 63) + 5;
    let mut w = wheel(3, 1);
    w.schedule(0, when);
    assert!(w.next_expiration().unwrap() <= when);
    assert_eq!(w.pop_expired(when - 1), None);
    assert_eq!(w.elapsed(), when - 1);
    assert_eq!(w.next_expiration(), Some(when)); // now on level 0: exact
    assert_eq!(w.pop_expired(when), Some((0, when)));
}

#[test]
fn when_u64_max() {
    let mut w = wheel(0, 2);
    w.schedule(0, u64::MAX);
    assert_eq!(w.pop_expired(u64::MAX - 1), None);
    assert_eq!(w.deadline(0), Some(u64::MAX));
    assert_eq!(w.pop_expired(u64::MAX), Some((0, u64::MAX)));
    // At the end of time everything is due now.
    w.schedule(1, u64::MAX);
    w.schedule(0, 17);
    assert_eq!(drain(&mut w, 0).len(), 2);
    assert_eq!(w.elapsed(), u64::MAX);
}

#[test]
fn next_expiration_bounds() {
    let mut w = wheel(100, 3);
    w.schedule(0, 120); // same 64-block? 100 = 64 + 36, 120 = 64 + 56: level 0, exact
    assert_eq!(w.next_expiration(), Some(120));
    w.cancel(0);
    w.schedule(1, 64 * 64 * 3 + 17); // level 1 or 2: lower bound
    let ne = w.next_expiration().unwrap();
    assert!(ne > 100 && ne <= 64 * 64 * 3 + 17);
    w.schedule(2, 50); // due already
    assert_eq!(w.next_expiration(), Some(50));
}

#[test]
fn same_tick_many_keys_and_order() {
    let mut w = wheel(0, 2000);
    for k in 0..2000u32 {
        // Pseudo-random spread, many duplicates.
        let when = (u64::from(k) * 7919) % 5000;
        w.schedule(k, when);
    }
    let got = drain(&mut w, 4999);
    assert_eq!(got.len(), 2000);
    assert!(got.windows(2).all(|p| p[0].1 <= p[1].1));
}

#[test]
fn million_keys_same_tick_pop_exactly_once() {
    const N: usize = 1_000_000;
    let when = 5_000_000_000u64; // several levels up from 0
    let mut w = wheel(0, N);
    for k in 0..N as u32 {
        w.schedule(k, when);
    }
    assert_eq!(w.len(), N);
    assert_eq!(w.pop_expired(when - 1), None);
    let mut seen = vec![false; N];
    let mut count = 0usize;
    while let Some((k, t)) = w.pop_expired(when) {
        assert_eq!(t, when);
        assert!(
            !std::mem::replace(&mut seen[k as usize], true),
            "key {k} twice"
        );
        count += 1;
    }
    assert_eq!(count, N);
    assert!(w.is_empty());
    assert_eq!(w.elapsed(), when);
}

// ---- model-based property test ----

const KEYS: u32 = 40;

/// Offsets drawn from several magnitudes: 0, small, around 64^k and 2^b, and anything.
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        1..4u64,
        0..200u64,
        (1u32..=10, -1i64..=1).prop_map(|(k, d)| (1u64 << (6 * k)).wrapping_add_signed(d)),
        (0u32..64, -2i64..=2).prop_map(|(b, d)| (1u64 << b).saturating_add_signed(d)),
        any::<u64>(),
    ]
}

fn start_time() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        0..1000u64,
        (1u32..=10).prop_map(|k| (1u64 << (6 * k)) - 1),
        (0..300u64).prop_map(|d| u64::MAX - d),
        any::<u64>(),
    ]
}

#[derive(Clone, Debug)]
enum Resched {
    /// New deadline = popped deadline + offset (saturating).
    After(u64),
    /// New deadline = elapsed - back (saturating): already passed.
    Past(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Schedule {
        key: u32,
        offset: u64,
    },
    SchedulePast {
        key: u32,
        back: u64,
    },
    Cancel {
        key: u32,
    },
    /// Pop loop to `elapsed ± amount`; the i-th popped key is rescheduled per `resched[i]`.
    Pop {
        back: bool,
        amount: u64,
        resched: Vec<Option<Resched>>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let resched = prop_oneof![
        2 => Just(None),
        2 => offset().prop_map(|o| Some(Resched::After(o))),
        1 => (0..100u64).prop_map(|b| Some(Resched::Past(b))),
    ];
    prop_oneof![
        6 => (0..KEYS, offset()).prop_map(|(key, offset)| Op::Schedule { key, offset }),
        1 => (0..KEYS, 0..100u64).prop_map(|(key, back)| Op::SchedulePast { key, back }),
        2 => (0..KEYS).prop_map(|key| Op::Cancel { key }),
        3 => (prop::bool::weighted(0.1), offset(), prop::collection::vec(resched, 0..6))
            .prop_map(|(back, amount, resched)| Op::Pop { back, amount, resched }),
    ]
}

/// Trivially correct reference: a map key -> when plus an ordered set of (when, key).
#[derive(Default)]
struct Model {
    by_key: HashMap<u32, u64>,
    by_time: BTreeSet<(u64, u32)>,
}

impl Model {
    fn schedule(&mut self, key: u32, when: u64) {
        self.cancel(key);
        self.by_key.insert(key, when);
        self.by_time.insert((when, key));
    }
    fn cancel(&mut self, key: u32) -> bool {
        match self.by_key.remove(&key) {
            Some(when) => {
                self.by_time.remove(&(when, key));
                true
            }
            None => false,
        }
    }
}

fn check(w: &Wheel, m: &Model, elapsed: u64) -> Result<(), TestCaseError> {
    prop_assert_eq!(w.elapsed(), elapsed);
    prop_assert_eq!(w.len(), m.by_key.len());
    prop_assert_eq!(w.is_empty(), m.by_key.is_empty());
    for k in 0..KEYS {
        prop_assert_eq!(w.deadline(k), m.by_key.get(&k).copied(), "key {}", k);
    }
    match m.by_time.first() {
        None => prop_assert_eq!(w.next_expiration(), None),
        Some(&(earliest, _)) => {
            let ne = w
                .next_expiration()
                .expect("non-empty wheel has an expiration");
            prop_assert!(
                ne <= earliest,
                "next_expiration {} > earliest {}",
                ne,
                earliest
            );
            // "Due now" is reported iff something is really due.
            prop_assert_eq!(ne <= elapsed, earliest <= elapsed);
        }
    }
    Ok(())
}

fn run(start: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut w = wheel(start, KEYS as usize);
    let mut m = Model::default();
    let mut elapsed = start;
    for op in ops {
        match op {
            Op::Schedule { key, offset } => {
                let when = elapsed.saturating_add(offset);
                w.schedule(key, when);
                m.schedule(key, when);
            }
            Op::SchedulePast { key, back } => {
                let when = elapsed.saturating_sub(back);
                w.schedule(key, when);
                m.schedule(key, when);
            }
            Op::Cancel { key } => {
                prop_assert_eq!(w.cancel(key), m.cancel(key));
            }
            Op::Pop {
                back,
                amount,
                resched,
            } => {
                let asked = if back {
                    elapsed.saturating_sub(amount)
                } else {
                    elapsed.saturating_add(amount)
                };
                let now = asked.max(elapsed);
                // Expected output: everything due now, plus rescheduled keys due by `now`.
                let mut expected: Vec<(u32, u64)> = m
                    .by_time
                    .range(..=(now, u32::MAX))
                    .map(|&(t, k)| (k, t))
                    .collect();
                let mut popped = Vec::new();
                let mut last_in_order: Option<u64> = None;
                // Keys rescheduled during this loop to a deadline already passed: they come
                // out as soon as possible, outside the deadline order.
                let mut excused: Vec<u32> = Vec::new();
                while let Some((k, when)) = w.pop_expired(asked) {
                    prop_assert!(when <= now, "popped {} > now {}", when, now);
                    prop_assert!(when <= w.elapsed() && w.elapsed() <= now);
                    prop_assert_eq!(m.by_key.get(&k).copied(), Some(when), "key {}", k);
                    m.cancel(k);
                    if let Some(i) = excused.iter().position(|&e| e == k) {
                        excused.swap_remove(i);
                    } else {
                        if let Some(last) = last_in_order {
                            prop_assert!(when >= last, "out of order: {} after {}", when, last);
                        }
                        last_in_order = Some(when);
                    }
                    let i = popped.len();
                    popped.push((k, when));
                    let new_when = match resched.get(i) {
                        Some(Some(Resched::After(o))) => when.saturating_add(*o),
                        Some(Some(Resched::Past(b))) => w.elapsed().saturating_sub(*b),
                        _ => continue,
                    };
                    w.schedule(k, new_when);
                    m.schedule(k, new_when);
                    if new_when <= now {
                        expected.push((k, new_when));
                    }
                    if new_when <= w.elapsed() {
                        excused.push(k);
                    }
                }
                elapsed = now;
                // Nothing due left behind, and the same multiset came out.
                prop_assert!(m.by_time.first().is_none_or(|&(t, _)| t > now));
                popped.sort_unstable();
                expected.sort_unstable();
                prop_assert_eq!(popped, expected);
            }
        }
        check(&w, &m, elapsed)?;
    }
    Ok(())
}

proptest! {
    #[test]
    fn matches_reference_model(
        start in start_time(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        run(start, ops)?;
    }
}
