//! `DeadlineQueue`: the core's deadline queue (the publishers' timers) as a Python object.

use super::clock::{clock_source, spawn_driver, PyManualClock};
use super::time::{to_ns, to_seconds};
use crate::deadline_queue::{DeadlineQueue, MAX_KEYS};
use crate::driver::Driver;
use parking_lot::Mutex;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyInt;
use std::sync::Arc;
use std::time::Duration;

/// A key argument: an int in `[0, MAX_KEYS)`.
fn key(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    if !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "key must be an int, got {}",
            super::type_name(obj)
        )));
    }
    match obj.extract::<i64>() {
        Ok(k) if (0..i64::from(MAX_KEYS)).contains(&k) => Ok(k as u32),
        _ => Err(PyValueError::new_err(format!(
            "key must be in [0, {MAX_KEYS}), got {obj}"
        ))),
    }
}

/// A `max` argument: how many keys one pop may return (>= 1).
fn max_keys(max: i64) -> PyResult<usize> {
    if max < 1 {
        return Err(PyValueError::new_err(format!(
            "max must be >= 1, got {max}"
        )));
    }
    Ok(usize::try_from(max).unwrap_or(usize::MAX))
}

fn in_seconds(keys: Vec<(u32, u64)>) -> Vec<(u32, f64)> {
    keys.into_iter()
        .map(|(key, at)| (key, to_seconds(at)))
        .collect()
}

/// Deadlines per integer key on the core's timer wheel, for publishers (it runs nothing: the
/// publishers' executor pops due keys and runs their tasks).
///
/// With the real clock (the default) a driver thread, started at once, moves it every ``tick``
/// seconds; with a :class:`ManualClock` the clock's ``advance`` does. A key is due once the
/// queue has been moved past its deadline (rounded up to ``resolution``); :meth:`pop`
/// hands due keys out in deadline order, each with the exact deadline it was given.
#[pyclass(name = "DeadlineQueue", module = "heartwire._core", frozen)]
pub struct PyDeadlineQueue {
    queue: Arc<DeadlineQueue>,
    driver: Mutex<Option<Driver>>,
    tick: Duration,
}

#[pymethods]
impl PyDeadlineQueue {
    #[new]
    #[pyo3(signature = (clock = None, resolution = 0.001, tick = 0.01))]
    fn new(
        py: Python<'_>,
        clock: Option<&Bound<'_, PyManualClock>>,
        resolution: f64,
        tick: f64,
    ) -> PyResult<Self> {
        let resolution = to_ns("resolution", resolution, false)?;
        let tick = Duration::from_nanos(to_ns("tick", tick, false)?);
        let queue = DeadlineQueue::new(clock_source(py, clock)?, resolution)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let this = Self {
            queue,
            driver: Mutex::new(None),
            tick,
        };
        this.start()?;
        Ok(this)
    }

    /// Make ``key`` due at ``at`` (seconds on :meth:`now`'s clock), replacing its pending
    /// deadline if it has one. A deadline already passed is due at once.
    fn schedule(&self, key: &Bound<'_, PyAny>, at: f64) -> PyResult<()> {
        let key = self::key(key)?;
        let at = to_ns("at", at, true)?;
        self.queue
            .schedule(key, at)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Drop ``key``'s pending deadline (also one due but not popped yet). False if it had none.
    fn cancel(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.queue.cancel(self::key(key)?))
    }

    /// Up to ``max`` due ``(key, deadline)`` pairs in deadline order, waiting up to ``timeout``
    /// seconds (None: until some come due or the queue is closed) with the GIL released.
    /// Empty on timeout and once closed.
    #[pyo3(signature = (max = 1024, timeout = None))]
    fn pop(&self, py: Python<'_>, max: i64, timeout: Option<f64>) -> PyResult<Vec<(u32, f64)>> {
        let max = max_keys(max)?;
        let timeout = timeout
            .map(|t| to_ns("timeout", t, true).map(Duration::from_nanos))
            .transpose()?;
        let queue = self.queue.clone();
        Ok(in_seconds(py.detach(move || queue.pop(max, timeout))))
    }

    /// Up to ``max`` due ``(key, deadline)`` pairs, without waiting.
    #[pyo3(signature = (max = 1024))]
    fn try_pop(&self, max: i64) -> PyResult<Vec<(u32, f64)>> {
        Ok(in_seconds(self.queue.try_pop(max_keys(max)?)))
    }

    /// The clock's reading, seconds.
    fn now(&self) -> f64 {
        to_seconds(self.queue.now_ns())
    }

    /// Start the driver thread (real clock only; a manual clock is driven by its ``advance``).
    /// Idempotent; does nothing once closed.
    fn start(&self) -> PyResult<()> {
        if self.queue.clock().is_manual() || self.queue.is_closed() {
            return Ok(());
        }
        let mut driver = self.driver.lock();
        if driver.is_none() {
            *driver = Some(spawn_driver(&self.queue, self.queue.clock(), self.tick)?);
        }
        Ok(())
    }

    /// Stop the driver thread: keys stop coming due until :meth:`start`. Idempotent.
    fn stop(&self, py: Python<'_>) {
        let driver = self.driver.lock().take();
        if let Some(mut driver) = driver {
            py.detach(move || driver.stop()); // joins the thread
        }
    }

    /// Stop the driver and wake every :meth:`pop` waiter; pops return ``[]`` from now on.
    fn close(&self, py: Python<'_>) {
        self.queue.close();
        self.stop(py);
    }

    /// Keys with a pending deadline (due ones not popped yet included).
    fn __len__(&self) -> usize {
        self.queue.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "DeadlineQueue(keys={}, clock={})",
            self.queue.len(),
            if self.queue.clock().is_manual() {
                "manual"
            } else {
                "monotonic"
            }
        )
    }
}
