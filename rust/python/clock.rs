//! `ManualClock` (deterministic time for tests and simulations), and the real clock with the
//! driver thread that runs detectors and deadline queues on it.

use super::time::{to_ns, to_seconds};
use crate::clock::{ClockSource, Driven, ManualClock, MonotonicClock};
use crate::driver::Driver;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::sync::Arc;
use std::time::Duration;

/// The clock a detector or deadline queue reads: the given manual clock, else the real monotonic
/// clock lined up with `time.monotonic()`, so `now=` arguments and the times the core reports
/// are in the same frame as the caller's own readings.
pub fn clock_source(
    py: Python<'_>,
    clock: Option<&Bound<'_, PyManualClock>>,
) -> PyResult<ClockSource> {
    Ok(match clock {
        Some(c) => ClockSource::Manual(c.get().inner.clone()),
        None => {
            let base: u64 = py.import("time")?.call_method0("monotonic_ns")?.extract()?;
            ClockSource::Monotonic(MonotonicClock::with_base(base))
        }
    })
}

/// Start a driver thread running `target` on `clock` every `tick`.
pub fn spawn_driver<T: Driven + 'static>(
    target: &Arc<T>,
    clock: &ClockSource,
    tick: Duration,
) -> PyResult<Driver> {
    Driver::spawn(target, clock.clone(), tick)
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the driver thread: {e}")))
}

/// A clock that moves only when told to. ``advance(seconds)`` runs the due work of every
/// detector and deadline queue on this clock before it returns, so every event due by then has been
/// produced.
#[pyclass(name = "ManualClock", module = "heartwire._core", frozen)]
pub struct PyManualClock {
    pub(crate) inner: Arc<ManualClock>,
}

#[pymethods]
impl PyManualClock {
    #[new]
    #[pyo3(signature = (start = 0.0))]
    fn new(start: f64) -> PyResult<Self> {
        Ok(Self {
            inner: Arc::new(ManualClock::new(to_ns("start", start, true)?)),
        })
    }

    /// The current reading, seconds.
    fn now(&self) -> f64 {
        to_seconds(self.inner.now_ns())
    }

    /// The current reading, nanoseconds.
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }

    /// Move forward by ``seconds`` and run everything due; returns the new reading. With
    /// ``stalled=True`` nothing runs: the detectors and deadline queues on this clock were not
    /// running meanwhile (the process was frozen). The next ordinary advance wakes them first,
    /// at the reading the stall ended at, and a detector sees the gap as a local pause.
    #[pyo3(signature = (seconds, stalled = false))]
    fn advance(&self, py: Python<'_>, seconds: f64, stalled: bool) -> PyResult<f64> {
        let dt = to_ns("seconds", seconds, true)?;
        let inner = self.inner.clone();
        let now = if stalled {
            inner.stall(dt)
        } else {
            py.detach(move || inner.advance(dt))
        };
        Ok(to_seconds(now))
    }

    /// Move to the absolute reading ``seconds`` (not earlier than now) and run everything due.
    fn set(&self, py: Python<'_>, seconds: f64) -> PyResult<f64> {
        let t = to_ns("seconds", seconds, true)?;
        let inner = self.inner.clone();
        py.detach(move || inner.set(t))
            .map(to_seconds)
            .map_err(PyValueError::new_err)
    }

    fn __repr__(&self) -> String {
        format!("ManualClock(now={})", to_seconds(self.inner.now_ns()))
    }
}
