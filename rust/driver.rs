//! The driver thread: runs a detector or deadline queue on the real clock every tick. It never
//! touches Python, so a listener holding the GIL cannot delay detection.

use crate::clock::{ClockSource, Driven};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    ticks: AtomicU64,
}

/// A running driver thread; stopped and joined on [`Driver::stop`] or drop.
pub struct Driver {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Driver {
    /// Start a thread that runs `target` up to `clock`'s reading every `tick` until stopped or
    /// until the target is dropped (the thread holds it weakly). Ticks missed because the
    /// machine was busy are skipped, not replayed: one run catches up on everything due.
    pub fn spawn<T: Driven + 'static>(
        target: &Arc<T>,
        clock: ClockSource,
        tick: Duration,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let weak: Weak<dyn Driven> = Arc::downgrade(target) as Weak<dyn Driven>;
        let thread_shared = shared.clone();
        let handle = std::thread::Builder::new()
            .name("heartwire-driver".to_owned())
            .spawn(move || run(weak, clock, thread_shared, tick))?;
        Ok(Self {
            shared,
            handle: Some(handle),
        })
    }

    /// How many ticks the thread has run.
    #[cfg(test)]
    pub fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }

    fn signal_stop(&self) {
        *self.shared.stop.lock() = true;
        self.shared.wake.notify_all();
    }

    /// Stop the thread and wait for it.
    pub fn stop(&mut self) {
        self.signal_stop();
        if let Some(handle) = self.handle.take() {
            // A panic in the driver was already reported by the panic hook; nothing to add.
            let _ = handle.join();
        }
    }
}

impl Drop for Driver {
    /// Tells the thread to end without waiting for it: a drop can happen where waiting is unsafe
    /// (Python's garbage collector, holding the GIL, while the driver waits on a full `block`
    /// queue whose consumer needs the GIL). The thread ends at its next wake-up.
    fn drop(&mut self) {
        self.signal_stop();
    }
}

fn run(target: Weak<dyn Driven>, clock: ClockSource, shared: Arc<Shared>, tick: Duration) {
    let mut next = Instant::now() + tick;
    loop {
        {
            let mut stop = shared.stop.lock();
            while !*stop {
                if shared.wake.wait_until(&mut stop, next).timed_out() {
                    break;
                }
            }
            if *stop {
                return;
            }
        }
        let Some(target) = target.upgrade() else {
            return;
        };
        // `wake`, not `run_until`: the thread did not run since its last tick, so a gap
        // between ticks (the process stopped or starved) is a local pause for the target to
        // judge, measured on the monotonic clock.
        target.wake(clock.now_ns());
        drop(target);
        shared.ticks.fetch_add(1, Ordering::Relaxed);
        next += tick;
        let now = Instant::now();
        if next < now {
            next = now + tick;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::{Detector, TopicConfig};
    use crate::queue::Overflow;

    #[test]
    fn driver_detects_a_silent_topic_on_the_real_clock() {
        let det = Detector::new(
            ClockSource::default(),
            TopicConfig::fixed(20_000_000, 1),
            1_000_000,
        )
        .unwrap();
        let events = det.subscribe(64, Overflow::Block, false).unwrap();
        det.add("quiet", None, None).unwrap();
        let mut driver =
            Driver::spawn(&det, det.clock().clone(), Duration::from_millis(2)).unwrap();
        let mut got = Vec::new();
        // Bounded wait: the first failure is due after 20 ms.
        events.pop_batch(&mut got, 16, Some(Duration::from_secs(5)));
        driver.stop();
        assert!(!got.is_empty(), "no failed event within 5 s");
        assert_eq!(got[0].kind, crate::event::EventKind::Failed);
        assert_eq!(got[0].missed, 1);
        assert!(driver.ticks() > 0);
    }

    #[test]
    fn the_driver_wakes_its_target_every_tick() {
        struct Wakes(Mutex<std::sync::mpsc::Sender<u64>>);
        impl Driven for Wakes {
            fn run_until(&self, _now_ns: u64) {
                unreachable!("a driver tick is a wake-up");
            }
            fn wake(&self, now_ns: u64) {
                let _ = self.0.lock().send(now_ns);
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let target = Arc::new(Wakes(Mutex::new(tx)));
        let clock = ClockSource::default();
        let mut driver = Driver::spawn(&target, clock.clone(), Duration::from_millis(1)).unwrap();
        let first = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let second = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        driver.stop();
        assert!(first <= second && second <= clock.now_ns());
    }

    #[test]
    fn driver_ends_when_the_detector_is_dropped() {
        let det = Detector::new(ClockSource::default(), TopicConfig::default(), 1_000_000).unwrap();
        let mut driver =
            Driver::spawn(&det, ClockSource::default(), Duration::from_millis(1)).unwrap();
        drop(det);
        let handle = driver.handle.take().unwrap();
        handle.join().unwrap(); // returns because the weak upgrade fails
    }

    #[test]
    fn dropping_the_driver_ends_its_thread_without_waiting() {
        let det = Detector::new(ClockSource::default(), TopicConfig::default(), 1_000_000).unwrap();
        let mut driver =
            Driver::spawn(&det, ClockSource::default(), Duration::from_secs(3600)).unwrap();
        let handle = driver.handle.take().unwrap();
        drop(driver); // signals; the thread wakes from its hour-long wait and ends
        handle.join().unwrap();
    }
}
