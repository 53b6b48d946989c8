//! `ManualClock`: deterministic time for tests and simulations.

use super::time::{to_ns, to_seconds};
use crate::clock::ManualClock;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Arc;

/// A clock that moves only when told to. ``advance(seconds)`` runs the due work of every
/// detector on this clock before it returns, so every event due by then has been produced.
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

    /// Move forward by ``seconds`` and run everything due; returns the new reading.
    fn advance(&self, py: Python<'_>, seconds: f64) -> PyResult<f64> {
        let dt = to_ns("seconds", seconds, true)?;
        let inner = self.inner.clone();
        Ok(to_seconds(py.detach(move || inner.advance(dt))))
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
