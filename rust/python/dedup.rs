//! `DedupWindow`: the bounded window of seen message ids that consumers drop duplicates with.

use crate::dedup::DedupWindow;
use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The last ``capacity`` distinct message ids. ``seen(id)`` is True for an id already in the
/// window (a duplicate) and records a new one, forgetting the oldest beyond ``capacity``.
/// Thread-safe.
#[pyclass(name = "DedupWindow", module = "heartwire._core", frozen)]
pub struct PyDedupWindow {
    inner: Mutex<DedupWindow>,
}

#[pymethods]
impl PyDedupWindow {
    #[new]
    fn new(capacity: i64) -> PyResult<Self> {
        let cap = usize::try_from(capacity)
            .ok()
            .filter(|c| *c >= 1)
            .ok_or_else(|| {
                PyValueError::new_err(format!("capacity must be an int >= 1, got {capacity}"))
            })?;
        Ok(Self {
            inner: Mutex::new(DedupWindow::new(cap).expect("capacity checked")),
        })
    }

    /// How many ids the window keeps.
    #[getter]
    fn capacity(&self) -> usize {
        self.inner.lock().capacity()
    }

    /// True if ``id`` is a duplicate within the window; else records it and returns False.
    fn seen(&self, id: &str) -> bool {
        self.inner.lock().seen(id)
    }

    /// ``seen`` for each id in order; a list of bools.
    fn seen_many(&self, ids: Vec<String>) -> Vec<bool> {
        let mut w = self.inner.lock();
        w.seen_many(ids.iter().map(String::as_str))
    }

    /// Forget every id (the counters stay).
    fn clear(&self) {
        self.inner.lock().clear();
    }

    /// Counters: ``checked``, ``duplicates``, ``evicted``, and the current ``size``.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (s, size) = {
            let w = self.inner.lock();
            (w.stats(), w.len())
        };
        let d = PyDict::new(py);
        d.set_item("checked", s.checked)?;
        d.set_item("duplicates", s.duplicates)?;
        d.set_item("evicted", s.evicted)?;
        d.set_item("size", size)?;
        Ok(d)
    }

    fn __len__(&self) -> usize {
        self.inner.lock().len()
    }

    fn __contains__(&self, id: &str) -> bool {
        self.inner.lock().contains(id)
    }

    fn __repr__(&self) -> String {
        let w = self.inner.lock();
        format!("DedupWindow(capacity={}, size={})", w.capacity(), w.len())
    }
}
