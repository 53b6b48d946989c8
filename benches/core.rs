//! Throughput of the core at one million topics: beats, expiries, and the timer wheel alone;
//! and the ingest-lag guard's cost per socket read.
//!
//! Run (see benches/README.md):
//!
//! ```text
//! CARGO_TARGET_DIR=/tmp/bench-target cargo bench --bench core -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Every detector runs on a `ManualClock` and every call gets an explicit `now`, so nothing
//! sleeps and no driver thread runs. Throughput is reported per element: beats, expiries, or
//! wheel keys.

use _core::clock::{ClockSource, ManualClock};
use _core::detector::{Detector, TopicConfig};
use _core::event::Event;
use _core::queue::{EventQueue, Overflow};
use _core::registry::TopicId;
use _core::wheel::Wheel;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode, Throughput};
use std::cell::{Cell, OnceCell};
use std::hint::black_box;
use std::sync::Arc;

/// Topics per detector (and keys in the wheel).
const N: usize = 1_000_000;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;
/// The manual clock's reading when a detector is made, i.e. the detector's epoch.
const START: u64 = 1_000 * SEC;
/// Detector resolution (the Python default): 1 ms wheel ticks.
const RESOLUTION: u64 = MS;
/// Every topic's period: 1 s, one miss allowed.
const PERIOD: u64 = SEC;
/// Just past every topic's first deadline (added at START, never beaten): all are due.
const PAST_FIRST_DEADLINE: u64 = START + PERIOD + RESOLUTION;
/// Ring capacity of the subscriber in the expiry benchmarks: room for every event.
const QUEUE_CAPACITY: usize = 1 << 20;

/// `svc.region-NN.host-NNNNNN`: 25 bytes, unique per `i`.
fn topic_name(i: usize) -> String {
    format!("svc.region-{:02}.host-{:06}", i % 64, i)
}

fn topic_names() -> Vec<String> {
    (0..N).map(topic_name).collect()
}

/// Fisher-Yates with splitmix64: a fixed, dependency-free shuffle.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let j = (z % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

/// A detector on a manual clock reading START, with every name added at START (so all are
/// PENDING and due at START + PERIOD), ids `0..N` in `names` order.
fn detector(names: &[String]) -> Arc<Detector> {
    let clock = Arc::new(ManualClock::new(START));
    let det = Detector::new(
        ClockSource::Manual(clock),
        TopicConfig::fixed(PERIOD, 1),
        RESOLUTION,
    )
    .expect("valid detector config");
    det.reserve(names.len(), 25);
    let ids = det
        .add_many(names.iter().map(String::as_str), None, Some(START))
        .expect("names are valid and unique");
    assert_eq!(ids.len(), names.len());
    det
}

/// `det` with a subscriber queue (room for every event, `policy` at capacity) for `failed`.
fn subscribed(det: Arc<Detector>, policy: Overflow) -> (Arc<Detector>, Arc<EventQueue<Event>>) {
    let queue = det
        .subscribe(QUEUE_CAPACITY, policy, false)
        .expect("valid subscription");
    (det, queue)
}

/// The measured step of the `advance/fail_all*` benches: every topic misses its first
/// deadline. Returns what it was given, to be dropped untimed.
fn fail_all(
    (det, queue): (Arc<Detector>, Arc<EventQueue<Event>>),
) -> (Arc<Detector>, Arc<EventQueue<Event>>) {
    assert_eq!(det.advance_to(Some(PAST_FIRST_DEADLINE)), N as u64);
    (det, queue)
}

/// What the beat benchmarks share, built on first use (so a filter that skips them all also
/// skips building 1M topics).
struct BeatFixture {
    det: Arc<Detector>,
    names: Vec<String>,
    shuffled_names: Vec<String>,
    ids: Vec<TopicId>,
    shuffled_ids: Vec<TopicId>,
    /// The `now` of the latest batch; every iteration beats 1 ms later than the last.
    now: Cell<u64>,
}

impl BeatFixture {
    fn new() -> Self {
        let names = topic_names();
        let det = detector(&names);
        let ids: Vec<TopicId> = (0..N as TopicId).collect();
        let mut shuffled_ids = ids.clone();
        shuffle(&mut shuffled_ids, 0x6865_6172_7477_6972);
        let shuffled_names = shuffled_ids
            .iter()
            .map(|&id| names[id as usize].clone())
            .collect();
        Self {
            det,
            names,
            shuffled_names,
            ids,
            shuffled_ids,
            now: Cell::new(START),
        }
    }

    fn next_now(&self) -> u64 {
        let now = self.now.get() + MS;
        self.now.set(now);
        now
    }

    fn record_all(&self, ids: &[TopicId]) {
        let now = self.next_now();
        for &id in ids {
            black_box(self.det.record(id, now));
        }
    }

    /// By handle (what Python's `beat_handles` uses): the generation check on top.
    fn record_handles(&self, ids: &[TopicId]) {
        let batch = self
            .det
            .record_handles(ids.iter().map(|&id| u64::from(id)), Some(self.next_now()));
        assert_eq!(self.det.finish(batch), (N, 0));
    }

    fn record_names(&self, names: &[String]) {
        let batch = self.det.record_names(names.iter(), Some(self.next_now()));
        let (recorded, unknown) = self.det.finish(batch);
        assert_eq!((recorded, unknown), (N, 0));
    }

    fn beat_ids(&self, ids: &[TopicId]) {
        assert_eq!(self.det.beat_ids(ids, Some(self.next_now())), N);
    }
}

/// A named way to beat every topic of the fixture once.
type BeatCase = (&'static str, fn(&BeatFixture));

/// Beats per second into 1M registered topics, by path.
fn beats(c: &mut Criterion) {
    let fixture = OnceCell::new();
    let f = || fixture.get_or_init(BeatFixture::new);
    let mut g = c.benchmark_group("beats_1M");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    // One bench per (name, path, order); each iteration beats all N topics once.
    let cases: [BeatCase; 7] = [
        ("record/sequential", |f| f.record_all(&f.ids)),
        ("record/shuffled", |f| f.record_all(&f.shuffled_ids)),
        ("record_handles/shuffled", |f| {
            f.record_handles(&f.shuffled_ids)
        }),
        ("record_names/in_order", |f| f.record_names(&f.names)),
        ("record_names/shuffled", |f| {
            f.record_names(&f.shuffled_names)
        }),
        ("beat_ids/sequential", |f| f.beat_ids(&f.ids)),
        ("beat_ids/shuffled", |f| f.beat_ids(&f.shuffled_ids)),
    ];
    for (name, run) in cases {
        g.bench_function(name, |b| {
            let f = f();
            b.iter(|| run(f))
        });
    }
    // With a subscriber that wants `received`: every beat takes the detector lock to emit
    // one (into a small drop-oldest queue nobody reads, so the queue never waits).
    g.bench_function("beat_ids_received/sequential", |b| {
        let f = f();
        let queue = f
            .det
            .subscribe(1 << 12, Overflow::DropOldest, true)
            .expect("valid subscription");
        b.iter(|| f.beat_ids(&f.ids));
        assert!(f.det.unsubscribe(&queue));
    });
    g.finish();
    if let Some(f) = fixture.get() {
        // Sanity: every beat above was recorded, none refused or unknown.
        let stats = f.det.stats();
        assert_eq!((stats.unknown, stats.refused), (0, 0));
    }
}

/// Expiries per second: 1M topics due at the same moment, processed by one `advance_to`.
/// The setup (a fresh 1M-topic detector per iteration) is not timed, nor is dropping it.
fn expiries(c: &mut Criterion) {
    let names_cell = OnceCell::new();
    let names = || names_cell.get_or_init(topic_names);
    let mut g = c.benchmark_group("expiries_1M");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    // One iteration per sample: each needs its own freshly built detector.
    g.sampling_mode(SamplingMode::Flat);

    // Never beaten: each topic is popped, counted as missed, goes FAILED and emits `failed`
    // into a subscriber queue with room for all of them; then it is re-armed a period later.
    g.bench_function("advance/fail_all", |b| {
        let names = names();
        b.iter_batched(
            || {
                let det = detector(names);
                subscribed(det, Overflow::DropNewest)
            },
            fail_all,
            BatchSize::PerIteration,
        )
    });

    // The same into a `block` queue with room for every event: the cost of handing events
    // to a queue that may block (they are pushed after the detector lock is released).
    g.bench_function("advance/fail_all_block", |b| {
        let names = names();
        b.iter_batched(
            || {
                let det = detector(names);
                subscribed(det, Overflow::Block)
            },
            |(det, queue)| {
                let (det, queue) = fail_all((det, queue));
                assert_eq!(queue.len(), N);
                (det, queue)
            },
            BatchSize::PerIteration,
        )
    });

    // The same, after every topic was re-armed in a random order (as topics joining, being
    // reconfigured or resuming over a long run leave it): the wheel's per-slot lists, and so
    // the pops, walk the slabs in random order.
    g.bench_function("advance/fail_all_scrambled", |b| {
        let names = names();
        let mut order: Vec<TopicId> = (0..N as TopicId).collect();
        shuffle(&mut order, 0x7363_7261_6d62_6c65);
        b.iter_batched(
            || {
                let det = detector(names);
                for &id in &order {
                    det.set_period(id, PERIOD, Some(START))
                        .expect("known topic, valid period");
                }
                subscribed(det, Overflow::DropNewest)
            },
            fail_all,
            BatchSize::PerIteration,
        )
    });

    // All beaten (half a period in): each topic is popped at its old deadline and lazily
    // re-armed from its beat; nothing is emitted.
    g.bench_function("advance/rearm_all", |b| {
        let names = names();
        b.iter_batched(
            || {
                let det = detector(names);
                let ids: Vec<TopicId> = (0..N as TopicId).collect();
                assert_eq!(det.beat_ids(&ids, Some(START + PERIOD / 2)), N);
                det
            },
            |det| {
                assert_eq!(det.advance_to(Some(PAST_FIRST_DEADLINE)), 0);
                det
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

/// The timer wheel alone: schedule 1M keys at one tick, then pop them all.
fn wheel(c: &mut Criterion) {
    let mut g = c.benchmark_group("wheel_1M");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    let sequential: Vec<u32> = (0..N as u32).collect();
    let mut shuffled = sequential.clone();
    shuffle(&mut shuffled, 0x7768_6565_6c21);
    for (label, keys) in [("sequential", &sequential), ("shuffled", &shuffled)] {
        g.bench_function(format!("schedule_pop_one_tick/{label}"), |b| {
            let mut wheel = Wheel::new(0);
            wheel.reserve_keys(N);
            b.iter(|| {
                // 1001 ticks ahead, like a 1 s period at 1 ms resolution: filed on level 1,
                // cascaded to level 0, then to the due list.
                let when = wheel.elapsed() + 1001;
                for &k in keys {
                    wheel.schedule(k, when);
                }
                let mut popped = 0usize;
                while let Some((k, _)) = wheel.pop_expired(when) {
                    black_box(k);
                    popped += 1;
                }
                assert_eq!(popped, N);
            })
        });
    }
    g.finish();
}

/// A mass failure through one subscriber queue: 1 M events (distinct topics) pushed by one
/// thread into a queue of the monitor's default capacity (65 536), per overflow policy.
/// `burst`: all pushed, then all popped (nobody pops meanwhile: the worst case of `coalesce`,
/// whose side table then holds all but 65 536). `concurrent`: a consumer thread pops batches of
/// 65 536 meanwhile, as a dispatch thread does (`block` waits for it). Per event, push + pop.
fn queue_mass(c: &mut Criterion) {
    const CAPACITY: usize = 65_536;
    let mut g = c.benchmark_group("queue_mass");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Elements(N as u64));
    let events: Vec<Event> = (0..N as TopicId)
        .map(|id| Event::failed(id, 1, START, START))
        .collect();
    for overflow in [
        Overflow::Coalesce,
        Overflow::DropOldest,
        Overflow::DropNewest,
    ] {
        g.bench_function(format!("burst/{}", overflow.as_str()), |b| {
            b.iter(|| {
                let q = EventQueue::new(CAPACITY, overflow);
                for &ev in &events {
                    q.push_deferred(ev);
                }
                let mut out = Vec::with_capacity(CAPACITY);
                let mut popped = 0;
                while q.try_pop_batch(&mut out, CAPACITY) > 0 {
                    popped += out.len();
                    out.clear();
                }
                black_box(popped)
            })
        });
    }
    for overflow in Overflow::ALL {
        g.bench_function(format!("concurrent/{}", overflow.as_str()), |b| {
            b.iter(|| {
                let q = Arc::new(EventQueue::new(CAPACITY, overflow));
                let consumer = {
                    let q = q.clone();
                    std::thread::spawn(move || {
                        let mut out = Vec::with_capacity(CAPACITY);
                        let mut popped = 0;
                        loop {
                            let n = q.pop_batch(&mut out, CAPACITY, None);
                            if n == 0 {
                                return popped;
                            }
                            popped += n;
                            out.clear();
                        }
                    })
                };
                for &ev in &events {
                    q.push_deferred(ev);
                }
                q.flush_wake();
                q.close();
                black_box(consumer.join().unwrap())
            })
        });
    }
    g.finish();
}

/// The ingest-lag guard's cost to the reader, per `note_intake` (one call per socket read):
/// not backlogged (the common case: two atomic loads), and backlogged inside an episode
/// (raising the watermark, no lock).
fn intake(c: &mut Criterion) {
    let mut g = c.benchmark_group("note_intake");
    g.throughput(Throughput::Elements(1));
    let det = detector(&[]);
    let now = Cell::new(START);
    g.bench_function("not_backlogged", |b| {
        b.iter(|| det.note_intake(black_box(false), Some(MS), None))
    });
    det.note_intake(true, Some(SEC), Some(START)); // an episode starts
    g.bench_function("backlogged", |b| {
        b.iter(|| {
            now.set(now.get() + 1);
            det.note_intake(black_box(true), Some(SEC), Some(now.get()))
        })
    });
    g.finish();
}

criterion_group!(benches, beats, expiries, wheel, queue_mass, intake);
criterion_main!(benches);
