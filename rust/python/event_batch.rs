//! A batch of detector events as one Python object: built once per pop, in Rust, from the
//! popped events and their topic names read from the registry in bulk; per-event objects only
//! when Python iterates, columns as flat arrays for bulk use.

use super::arrow_out::PyArrowArray;
use super::events::PyEvent;
use crate::detector::name_prefix;
use crate::event::{Event, EventKind, NO_LATENCY, NO_SEQ, NO_TOPIC};
use crate::newest::Newest;
use crate::registry::NameView;
use arrow_array::builder::StringBuilder;
use arrow_array::{Array, StringArray};
use foldhash::fast::RandomState;
use hashbrown::HashMap;
use parking_lot::Mutex;
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyMemoryView, PyTuple};
use std::sync::Arc;

/// Names of the kinds, by code (the ``kinds`` column).
fn kind_names() -> [&'static str; EventKind::ALL.len()] {
    EventKind::ALL.map(EventKind::as_str)
}

/// Detector events popped together, oldest first. ``len(batch)``; ``batch[i]`` and iteration
/// give :class:`Event` objects (built on access); the columns give every event's field at once.
///
/// Columns are read-only ``memoryview`` objects over a copy made at each access (keep one in a
/// local rather than reading the attribute in a loop); ``numpy.asarray(col)`` takes one without
/// a further copy, and ``col.tolist()`` gives Python numbers. A field an event does not have is
/// NaN (floats), ``NO_SEQ`` (``seq``) or -1 (``handles`` of a local pause). ``topics`` is an
/// Arrow string array (``__arrow_c_array__``: ``pyarrow.array(batch.topics)`` takes it without a
/// copy); :meth:`topic_list` gives the names as a ``list[str]``.
#[pyclass(name = "EventBatch", module = "heartwire._core", frozen, sequence)]
pub struct PyEventBatch {
    events: Vec<Event>,
    /// The topics' handles (-1: no topic).
    handles: Vec<i64>,
    /// The topics' names ("" for no topic).
    topics: Arc<StringArray>,
    /// The reasons of explicit failures, by event (empty when the batch holds none: the
    /// common case costs nothing).
    reasons: Vec<Option<Arc<str>>>,
    /// The names of the parents events are suppressed by ("" for none); None when no event of
    /// the batch is suppressed (the usual case: nothing built).
    parents: Option<Arc<StringArray>>,
}

impl PyEventBatch {
    /// Resolve `events`' topics with `names` and `handle_of` (call it before the queue is told
    /// the events are handed back: their ids may be reused after that).
    /// `reason_of` gives a `failed` event's reason text (see `Detector::reason_of`).
    pub fn build(
        events: Vec<Event>,
        names: &NameView<'_>,
        handle_of: impl Fn(u32) -> u64,
        reason_of: impl Fn(&Event) -> Option<Arc<str>>,
    ) -> Self {
        let bytes: usize = events
            .iter()
            .filter(|ev| ev.topic != NO_TOPIC)
            .map(|ev| names.get(ev.topic).len())
            .sum();
        let mut topics = StringBuilder::with_capacity(events.len(), bytes);
        let mut handles = Vec::with_capacity(events.len());
        for ev in &events {
            if ev.topic == NO_TOPIC {
                topics.append_value("");
                handles.push(-1);
            } else {
                topics.append_value(names.get(ev.topic));
                // Generations stay below 2^31: a handle fits an i64.
                handles.push(handle_of(ev.topic) as i64);
            }
        }
        let reasons = if events.iter().any(|e| e.reason_serial().is_some()) {
            events.iter().map(reason_of).collect()
        } else {
            Vec::new()
        };
        let parents = events.iter().any(|e| e.suppressed_by != NO_TOPIC).then(|| {
            let mut parents = StringBuilder::with_capacity(events.len(), 0);
            for ev in &events {
                if ev.suppressed_by == NO_TOPIC {
                    parents.append_value("");
                } else {
                    parents.append_value(names.get(ev.suppressed_by));
                }
            }
            Arc::new(parents.finish())
        });
        Self {
            events,
            handles,
            topics: Arc::new(topics.finish()),
            reasons,
            parents,
        }
    }

    fn reason(&self, i: usize) -> Option<&str> {
        self.reasons.get(i).and_then(|r| r.as_deref())
    }

    /// `reasons[range]`, or none when the batch holds none.
    fn reasons_of(&self, range: std::ops::Range<usize>) -> Vec<Option<Arc<str>>> {
        if self.reasons.is_empty() {
            Vec::new()
        } else {
            self.reasons[range].to_vec()
        }
    }

    fn parent(&self, i: usize) -> Option<&str> {
        let parents = self.parents.as_ref()?;
        (self.events[i].suppressed_by != NO_TOPIC).then(|| parents.value(i))
    }

    fn event(&self, i: usize) -> PyEvent {
        PyEvent::new(
            &self.events[i],
            self.topics.value(i),
            self.handles[i],
            self.reason(i),
            self.parent(i),
        )
    }

    fn floats<'py>(
        &self,
        py: Python<'py>,
        f: impl Fn(&Event) -> f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let values: Vec<[u8; 8]> = self.events.iter().map(|e| f(e).to_ne_bytes()).collect();
        view(py, values.as_flattened(), "d")
    }
}

/// A read-only memoryview of `bytes`, cast to the struct format `fmt`.
fn view<'py>(py: Python<'py>, bytes: &[u8], fmt: &str) -> PyResult<Bound<'py, PyAny>> {
    let owner = PyBytes::new(py, bytes);
    PyMemoryView::from(owner.as_any())?.call_method1("cast", (fmt,))
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[pymethods]
impl PyEventBatch {
    /// The ``seq`` column's value for a beat that carried none (2**64 - 1).
    #[classattr]
    const NO_SEQ: u64 = NO_SEQ;

    /// The kinds' names, indexed by the ``kinds`` column's codes:
    /// ``("failed", "resumed", "received", "local_pause")``.
    #[classattr]
    #[pyo3(name = "KINDS")]
    fn kinds_table(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        Ok(PyTuple::new(py, kind_names())?.unbind())
    }

    fn __len__(&self) -> usize {
        self.events.len()
    }

    fn __getitem__(&self, index: isize) -> PyResult<PyEvent> {
        let n = self.events.len() as isize;
        let i = if index < 0 { index + n } else { index };
        if !(0..n).contains(&i) {
            return Err(PyIndexError::new_err(format!(
                "batch index {index} out of range for a batch of {n} events"
            )));
        }
        Ok(self.event(i as usize))
    }

    fn __iter__(slf: Py<Self>) -> PyEventBatchIter {
        PyEventBatchIter {
            batch: slf,
            next: Mutex::new(0),
        }
    }

    fn __repr__(&self) -> String {
        format!("EventBatch(len={})", self.events.len())
    }

    /// How many events of ``kind`` (``"failed"``...) the batch holds.
    fn count(&self, kind: &str) -> PyResult<usize> {
        let Some(kind) = EventKind::ALL.into_iter().find(|k| k.as_str() == kind) else {
            return Err(PyValueError::new_err(format!(
                "kind must be one of {}; got {kind:?}",
                kind_names().join(", ")
            )));
        };
        Ok(self.events.iter().filter(|e| e.kind == kind).count())
    }

    /// Each event's kind as a code (``"B"``: unsigned bytes); ``KINDS[code]`` is its name.
    #[getter]
    fn kinds<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let codes: Vec<u8> = self.events.iter().map(|e| e.kind.code()).collect();
        view(py, &codes, "B")
    }

    /// The topics' handles (``"q"``; -1 for a local pause).
    #[getter]
    fn handles<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let values: Vec<[u8; 8]> = self.handles.iter().map(|h| h.to_ne_bytes()).collect();
        view(py, values.as_flattened(), "q")
    }

    /// Consecutive missed periods (``"I"``; 0 for ``received`` and ``local_pause``).
    #[getter]
    fn missed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let values: Vec<[u8; 4]> = self.events.iter().map(|e| e.missed.to_ne_bytes()).collect();
        view(py, values.as_flattened(), "I")
    }

    /// ``at`` of each event, seconds on the detector's clock (``"d"``).
    #[getter]
    fn at<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.floats(py, |e| secs(e.at_ns))
    }

    /// failed: when the outage began (``"d"``; NaN for other kinds).
    #[getter]
    fn since<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.floats(py, |e| e.since_ns().map_or(f64::NAN, secs))
    }

    /// resumed: how long the outage lasted (``"d"``; NaN for other kinds).
    #[getter]
    fn downtime<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.floats(py, |e| e.downtime_ns().map_or(f64::NAN, secs))
    }

    /// local_pause: how long the monitor was not running (``"d"``; NaN for other kinds).
    #[getter]
    fn duration<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.floats(py, |e| e.pause_ns().map_or(f64::NAN, secs))
    }

    /// received: the beat's transit time, seconds (``"d"``; NaN when unknown or another kind).
    #[getter]
    fn latency<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.floats(py, |e| {
            if e.kind == EventKind::Received && e.latency_ns != NO_LATENCY {
                e.latency_ns as f64 / 1e9
            } else {
                f64::NAN
            }
        })
    }

    /// received: the beat's sequence number (``"Q"``; ``NO_SEQ`` when it carried none or for
    /// another kind).
    #[getter]
    fn seq<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let values: Vec<[u8; 8]> = self
            .events
            .iter()
            .map(|e| e.seq().unwrap_or(NO_SEQ).to_ne_bytes())
            .collect();
        view(py, values.as_flattened(), "Q")
    }

    /// The topics' names as an Arrow string array (``""`` for a local pause), shared, not
    /// copied: ``pyarrow.array(batch.topics)``.
    #[getter]
    fn topics(&self) -> PyArrowArray {
        PyArrowArray::new("topics", self.topics.clone())
    }

    /// Each event's reason (``failed`` by a ``down`` beat: the sender's reason; None
    /// otherwise) as a list.
    fn reason_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, (0..self.events.len()).map(|i| self.reason(i)))
    }

    /// The topics' names as a list (``""`` for a local pause).
    fn topic_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let topics = &*self.topics;
        PyList::new(py, (0..topics.len()).map(|i| topics.value(i)))
    }

    /// ``failed`` and ``resumed`` events by the first ``depth`` ``.``-separated segments of
    /// their topics (as ``Detector.counts_by_prefix``): ``{prefix: (failed, resumed, buckets,
    /// downtime)}``, ``buckets`` the resumed events' downtimes counted by ``bounds`` (seconds,
    /// ascending: bucket ``i`` holds those <= ``bounds[i]`` and above the bound before, the
    /// last one those above every bound), ``downtime`` their sum, seconds. One native pass: a
    /// monitor's metrics by group take no Python step per event.
    fn outages_by_prefix<'py>(
        &self,
        py: Python<'py>,
        depth: usize,
        bounds: Vec<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        if depth == 0 {
            return Err(PyValueError::new_err("depth must be an int >= 1, got 0"));
        }
        if bounds.iter().any(|b| b.is_nan()) || bounds.windows(2).any(|w| w[0] >= w[1]) {
            return Err(PyValueError::new_err(format!(
                "bounds must be ascending numbers, got {bounds:?}"
            )));
        }
        type Tally = (u64, u64, Vec<u64>, f64);
        let mut tallies: Vec<(&str, Tally)> = Vec::new();
        let mut index: HashMap<&str, usize, RandomState> = HashMap::default();
        // Events of one group often come in runs (topics added together expire together):
        // the last prefix's slot is checked before hashing.
        let mut last: Option<(&str, usize)> = None;
        for (i, ev) in self.events.iter().enumerate() {
            let failed = match ev.kind {
                EventKind::Failed => true,
                EventKind::Resumed => false,
                _ => continue,
            };
            let prefix = name_prefix(self.topics.value(i), depth);
            let slot = match last {
                Some((p, slot)) if p == prefix => slot,
                _ => {
                    let slot = *index.entry(prefix).or_insert_with(|| {
                        tallies.push((prefix, (0, 0, vec![0; bounds.len() + 1], 0.0)));
                        tallies.len() - 1
                    });
                    last = Some((prefix, slot));
                    slot
                }
            };
            let entry = &mut tallies[slot].1;
            if failed {
                entry.0 += 1;
            } else {
                entry.1 += 1;
                let d = ev.downtime_ns().map_or(0.0, secs);
                entry.2[bounds.partition_point(|b| *b < d)] += 1;
                entry.3 += d;
            }
        }
        let out = PyDict::new(py);
        for (prefix, t) in tallies {
            out.set_item(prefix, t)?;
        }
        Ok(out)
    }

    /// The events of the given kinds (names, e.g. ``("failed", "resumed")``), in order; the
    /// same batch when it holds no other kind.
    fn of_kinds(slf: &Bound<'_, Self>, kinds: Vec<String>) -> PyResult<Py<Self>> {
        let mut wanted = [false; EventKind::ALL.len()];
        for name in &kinds {
            let Some(kind) = EventKind::ALL.into_iter().find(|k| k.as_str() == name) else {
                return Err(PyValueError::new_err(format!(
                    "kinds must be among {}; got {name:?}",
                    kind_names().join(", ")
                )));
            };
            wanted[kind.code() as usize] = true;
        }
        let keep: Vec<bool> = slf
            .get()
            .events
            .iter()
            .map(|e| wanted[e.kind.code() as usize])
            .collect();
        Self::select(slf, &keep)
    }

    /// failed/resumed: 1 if the topic is silenced, else 0 (``"B"``).
    #[getter]
    fn silenced<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let flags: Vec<u8> = self.events.iter().map(|e| u8::from(e.silenced)).collect();
        view(py, &flags, "B")
    }

    /// The parent each event is suppressed by, ``""`` for none (a list of str).
    fn suppressed_by_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(
            py,
            (0..self.events.len()).map(|i| self.parent(i).unwrap_or("")),
        )
    }

    /// The events without those marked ``silenced`` (when ``silenced``) or suppressed (when
    /// ``suppressed``), in order; the same batch when none is left out.
    #[pyo3(signature = (*, silenced, suppressed))]
    fn without_marked(
        slf: &Bound<'_, Self>,
        silenced: bool,
        suppressed: bool,
    ) -> PyResult<Py<Self>> {
        let keep: Vec<bool> = slf
            .get()
            .events
            .iter()
            .map(|e| !(silenced && e.silenced || suppressed && e.suppressed_by != NO_TOPIC))
            .collect();
        Self::select(slf, &keep)
    }

    /// The events ``start`` to ``stop`` (clamped to the batch, as a slice is).
    fn slice(slf: &Bound<'_, Self>, start: usize, stop: usize) -> PyResult<Py<Self>> {
        let this = slf.get();
        let stop = stop.min(this.events.len());
        let start = start.min(stop);
        if start == 0 && stop == this.events.len() {
            return Ok(slf.clone().unbind());
        }
        Py::new(
            slf.py(),
            Self {
                events: this.events[start..stop].to_vec(),
                handles: this.handles[start..stop].to_vec(),
                topics: Arc::new(this.topics.slice(start, stop - start)),
                reasons: this.reasons_of(start..stop),
                parents: this
                    .parents
                    .as_ref()
                    .map(|p| Arc::new(p.slice(start, stop - start))),
            },
        )
    }

    /// The events feed number ``feed`` should hand over, filtered through ``newest`` (which
    /// notes them): duplicates and stale events of a feed switch left out (see
    /// :class:`Newest`). The same batch when nothing is left out.
    fn fresh(slf: &Bound<'_, Self>, newest: &PyNewest, feed: u64) -> PyResult<Py<Self>> {
        let this = slf.get();
        let keep: Vec<bool> = {
            let mut newest = newest.inner.lock();
            this.events
                .iter()
                .zip(&this.handles)
                .map(|(ev, &h)| newest.fresh(feed, ev, h as u64))
                .collect()
        };
        Self::select(slf, &keep)
    }
}

impl PyEventBatch {
    /// The events whose `keep` is true (the same batch when all are).
    fn select(slf: &Bound<'_, Self>, keep: &[bool]) -> PyResult<Py<Self>> {
        let this = slf.get();
        if keep.iter().all(|&k| k) {
            return Ok(slf.clone().unbind());
        }
        let n = keep.iter().filter(|&&k| k).count();
        let mut events = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        let mut topics = StringBuilder::with_capacity(n, this.topics.value_data().len());
        let mut reasons = Vec::new();
        let mut parents = this
            .parents
            .as_ref()
            .map(|_| StringBuilder::with_capacity(n, 0));
        for (i, _) in keep.iter().enumerate().filter(|(_, &k)| k) {
            events.push(this.events[i]);
            handles.push(this.handles[i]);
            topics.append_value(this.topics.value(i));
            if !this.reasons.is_empty() {
                reasons.push(this.reasons[i].clone());
            }
            if let Some(p) = parents.as_mut() {
                p.append_value(this.parent(i).unwrap_or(""));
            }
        }
        Py::new(
            slf.py(),
            Self {
                events,
                handles,
                topics: Arc::new(topics.finish()),
                reasons,
                parents: parents.map(|mut p| Arc::new(p.finish())),
            },
        )
    }
}

/// Iterates a batch's events as :class:`Event` objects.
#[pyclass(name = "EventBatchIterator", module = "heartwire._core", frozen)]
pub struct PyEventBatchIter {
    batch: Py<PyEventBatch>,
    next: Mutex<usize>,
}

#[pymethods]
impl PyEventBatchIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> Option<PyEvent> {
        let batch = self.batch.bind(py).get();
        let mut next = self.next.lock();
        let i = *next;
        (i < batch.events.len()).then(|| {
            *next += 1;
            batch.event(i)
        })
    }
}

/// What a monitor's dispatch feeds delivered, so that a feed switch hands no event over twice
/// (see :meth:`EventBatch.fresh`): per topic, the newest ``failed``/``resumed`` (a topic's
/// have strictly increasing ``at``), the newest ``local_pause``, and the ``received`` events a
/// replaced feed popped (skipped only as exact repeats: same topic, ``at`` and ``seq``).
#[pyclass(name = "Newest", module = "heartwire._core", frozen)]
pub struct PyNewest {
    inner: Mutex<Newest>,
}

#[pymethods]
impl PyNewest {
    #[new]
    fn new() -> Self {
        Self {
            inner: Mutex::new(Newest::new()),
        }
    }

    /// A new feed is opened: its number. Call it before subscribing the feed's queue; feeds
    /// with lower numbers are replaced from then on.
    fn open_feed(&self) -> u64 {
        self.inner.lock().open_feed()
    }

    /// ``received`` events noted by replaced feeds, not yet forgotten.
    #[getter]
    fn carried(&self) -> usize {
        self.inner.lock().carried()
    }
}
