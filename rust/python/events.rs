//! Events, topic snapshots and the event queue as Python objects.

use super::event_batch::PyEventBatch;
use super::time::{to_ns, to_seconds};
use crate::detector::{Detector, TopicStatus};
use crate::event::{Event, NO_TOPIC};
use crate::queue::{EventQueue, QueueStats};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Arc;
use std::time::Duration;

/// One detector event. ``kind`` is ``"failed"``, ``"resumed"``, ``"received"``,
/// ``"local_pause"``, ``"lagging"`` or ``"caught_up"``; times are seconds on the detector's
/// clock.
#[pyclass(name = "Event", module = "heartwire._core", frozen, eq)]
#[derive(PartialEq)]
pub struct PyEvent {
    /// ``"failed"``, ``"resumed"``, ``"received"``, ``"local_pause"``, ``"lagging"`` or
    /// ``"caught_up"``.
    #[pyo3(get)]
    kind: &'static str,
    /// The topic's name (``""`` for a local pause, lagging or caught up: about no topic).
    #[pyo3(get)]
    topic: String,
    /// The topic's handle (-1 for an event about no topic).
    #[pyo3(get)]
    handle: i64,
    /// Consecutive missed periods (failed: reached; resumed: before the beat).
    #[pyo3(get)]
    missed: u32,
    /// failed: the deadline that passed; resumed/received: the beat's time; local_pause: when
    /// the monitor woke up; lagging/caught_up: when the lag was found or the episode ended.
    #[pyo3(get)]
    at: f64,
    /// failed: when the outage began.
    #[pyo3(get)]
    since: Option<f64>,
    /// resumed: how long the outage lasted.
    #[pyo3(get)]
    downtime: Option<f64>,
    /// received: the beat's sequence number, when it carried one.
    #[pyo3(get)]
    seq: Option<u64>,
    /// received: the beat's transit time, when known.
    #[pyo3(get)]
    latency: Option<f64>,
    /// local_pause: how long the monitor was not running, seconds (it ended at ``at``).
    /// caught_up: how long the lag episode lasted (it ended at ``at``).
    #[pyo3(get)]
    duration: Option<f64>,
    /// lagging: how far behind the clock the intake's watermark was, seconds.
    #[pyo3(get)]
    lag: Option<f64>,
    /// caught_up: the largest lag seen in the episode, seconds.
    #[pyo3(get)]
    max_lag: Option<f64>,
    /// failed: the sender's reason, for an explicit failure (a ``down`` beat); None when
    /// periods were missed.
    #[pyo3(get)]
    reason: Option<String>,
    /// flapping: True when the topic started flapping, False when it settled.
    #[pyo3(get)]
    flapping: Option<bool>,
    /// failed, resumed: the topic is silenced (see the monitor's ``silence``).
    #[pyo3(get)]
    silenced: bool,
    /// failed, resumed: the parent topic whose failure holds this one back (see the monitor's
    /// ``depends``), or None.
    #[pyo3(get)]
    suppressed_by: Option<String>,
}

impl PyEvent {
    /// `reason`: the text of a failed event's reason serial; `parent`: the name of the topic
    /// it is suppressed by. Both are looked up by the caller (names and reasons live in
    /// side tables), read together with the event's own `silenced` mark.
    pub(crate) fn new(
        ev: &Event,
        topic: &str,
        handle: i64,
        reason: Option<&str>,
        parent: Option<&str>,
    ) -> Self {
        Self {
            kind: ev.kind.as_str(),
            topic: topic.to_owned(),
            handle,
            missed: ev.missed,
            at: to_seconds(ev.at_ns),
            since: ev.since_ns().map(to_seconds),
            downtime: ev.downtime_ns().map(to_seconds),
            seq: ev.seq(),
            latency: ev.latency().map(|l| l as f64 / 1e9),
            duration: ev.pause_ns().or(ev.lag_duration_ns()).map(to_seconds),
            lag: ev.lag_ns().map(to_seconds),
            max_lag: ev.max_lag_ns().map(to_seconds),
            reason: reason.map(str::to_owned),
            flapping: ev.is_flapping(),
            silenced: ev.silenced,
            suppressed_by: parent.map(str::to_owned),
        }
    }
}

#[pymethods]
impl PyEvent {
    fn __repr__(&self) -> String {
        let detail = match self.kind {
            "failed" => match &self.reason {
                Some(r) => format!("since={}, reason={r:?}", self.since.unwrap_or(f64::NAN)),
                None => format!("since={}", self.since.unwrap_or(f64::NAN)),
            },
            "resumed" => format!("downtime={}", self.downtime.unwrap_or(f64::NAN)),
            "local_pause" => {
                return format!(
                    "Event(local_pause, at={}, duration={})",
                    self.at,
                    self.duration.unwrap_or(f64::NAN)
                )
            }
            "lagging" => {
                return format!(
                    "Event(lagging, at={}, lag={})",
                    self.at,
                    self.lag.unwrap_or(f64::NAN)
                )
            }
            "flapping" => format!("flapping={}", self.flapping.unwrap_or(false)),
            "caught_up" => {
                return format!(
                    "Event(caught_up, at={}, duration={}, max_lag={})",
                    self.at,
                    self.duration.unwrap_or(f64::NAN),
                    self.max_lag.unwrap_or(f64::NAN)
                )
            }
            _ => format!("seq={}", self.seq.unwrap_or(0)),
        };
        format!(
            "Event({}, topic={:?}, missed={}, at={}, {detail})",
            self.kind, self.topic, self.missed, self.at
        )
    }
}

/// A snapshot of one topic.
#[pyclass(name = "TopicStatus", module = "heartwire._core", frozen)]
pub struct PyTopicStatus {
    /// The topic's name.
    #[pyo3(get)]
    topic: String,
    /// The topic's handle.
    #[pyo3(get)]
    handle: u64,
    /// ``"PENDING"``, ``"ALIVE"``, ``"FAILED"``, ``"PAUSED"``, ``"STOPPED"`` or ``"REMOVED"``.
    #[pyo3(get)]
    state: &'static str,
    /// Consecutive missed periods.
    #[pyo3(get)]
    missed: u32,
    /// The last beat's time, or None if never heard.
    #[pyo3(get)]
    last_seen: Option<f64>,
    /// The expected period, seconds.
    #[pyo3(get)]
    period: f64,
    /// Missed periods allowed before FAILED.
    #[pyo3(get)]
    allowed_misses: u32,
    /// Slack added to every deadline, seconds (not used in phi mode).
    #[pyo3(get)]
    grace: f64,
    /// When the current outage began (FAILED only).
    #[pyo3(get)]
    failed_since: Option<f64>,
    /// When the next missed period would be counted (watched topics only).
    #[pyo3(get)]
    next_deadline: Option<f64>,
    /// The phi value now (phi-accrual topics that were heard).
    #[pyo3(get)]
    phi: Option<f64>,
}

impl PyTopicStatus {
    pub fn new(s: &TopicStatus, topic: String, handle: u64) -> Self {
        Self {
            topic,
            handle,
            state: s.state.as_str(),
            missed: s.missed,
            last_seen: s.last_seen_ns.map(to_seconds),
            period: to_seconds(s.period_ns),
            allowed_misses: s.allowed_misses,
            grace: to_seconds(s.grace_ns),
            failed_since: s.failed_since_ns.map(to_seconds),
            next_deadline: s.next_deadline_ns.map(to_seconds),
            phi: s.phi,
        }
    }
}

#[pymethods]
impl PyTopicStatus {
    fn __repr__(&self) -> String {
        let last_seen = self
            .last_seen
            .map_or_else(|| "None".to_owned(), |t| t.to_string());
        format!(
            "TopicStatus(topic={:?}, state={}, missed={}, last_seen={last_seen}, period={})",
            self.topic, self.state, self.missed, self.period
        )
    }
}

/// A bounded queue of events for one consumer. ``pop`` waits with the GIL released.
#[pyclass(name = "EventQueue", module = "heartwire._core", frozen)]
pub struct PyEventQueue {
    pub(crate) queue: Arc<EventQueue<Event>>,
    pub(crate) detector: Arc<Detector>,
}

impl PyEventQueue {
    /// Events as Python objects, then hand them back to the queue: their topic ids are read
    /// (names, handles), so a removed topic's id may be reused (see `Detector::remove`).
    fn convert(&self, py: Python<'_>, events: &[Event]) -> PyResult<Vec<Py<PyEvent>>> {
        let out = self.detector.with_names(|names| {
            events
                .iter()
                .map(|ev| {
                    let (topic, handle) = if ev.topic == NO_TOPIC {
                        ("", -1)
                    } else {
                        // Generations stay below 2^31: a handle fits an i64.
                        let handle = self.detector.handle_of(ev.topic) as i64;
                        (names.get(ev.topic), handle)
                    };
                    let reason = self.detector.reason_of(ev);
                    let parent =
                        (ev.suppressed_by != NO_TOPIC).then(|| names.get(ev.suppressed_by));
                    Py::new(
                        py,
                        PyEvent::new(ev, topic, handle, reason.as_deref(), parent),
                    )
                })
                .collect()
        });
        self.queue.release_popped();
        out
    }

    /// The same as one [`PyEventBatch`].
    fn convert_batch(&self, events: Vec<Event>) -> PyEventBatch {
        let batch = self.detector.with_names(|names| {
            PyEventBatch::build(
                events,
                names,
                |id| self.detector.handle_of(id),
                |ev| self.detector.reason_of(ev),
            )
        });
        self.queue.release_popped();
        batch
    }
}

/// The most events one batch holds: its topic names' offsets are 32-bit.
const MAX_BATCH: usize = 1 << 22;

#[pymethods]
impl PyEventQueue {
    /// Up to ``max`` events, waiting up to ``timeout`` seconds (None: until one comes or the
    /// queue is closed) for the first. An empty list means the wait timed out or the queue is
    /// closed and empty.
    #[pyo3(signature = (max = 1024, timeout = None))]
    fn pop(&self, py: Python<'_>, max: usize, timeout: Option<f64>) -> PyResult<Vec<Py<PyEvent>>> {
        let timeout = timeout
            .map(|t| to_ns("timeout", t, true).map(Duration::from_nanos))
            .transpose()?;
        let queue = self.queue.clone();
        let events = py.detach(move || {
            let mut out = Vec::with_capacity(max.min(4096));
            queue.pop_batch(&mut out, max.max(1), timeout);
            out
        });
        self.convert(py, &events)
    }

    /// :meth:`pop` as one :class:`EventBatch` (columns, events built on access) of up to
    /// ``max`` events (at most 4194304); empty on timeout or when closed and empty.
    #[pyo3(signature = (max = 65536, timeout = None))]
    fn pop_batch(
        &self,
        py: Python<'_>,
        max: usize,
        timeout: Option<f64>,
    ) -> PyResult<PyEventBatch> {
        let timeout = timeout
            .map(|t| to_ns("timeout", t, true).map(Duration::from_nanos))
            .transpose()?;
        let queue = self.queue.clone();
        let max = max.clamp(1, MAX_BATCH);
        let events = py.detach(move || {
            let mut out = Vec::with_capacity(max.min(4096));
            queue.pop_batch(&mut out, max, timeout);
            out
        });
        Ok(py.detach(|| self.convert_batch(events)))
    }

    /// :meth:`try_pop` as one :class:`EventBatch`.
    #[pyo3(signature = (max = 65536))]
    fn try_pop_batch(&self, py: Python<'_>, max: usize) -> PyEventBatch {
        let queue = self.queue.clone();
        let max = max.clamp(1, MAX_BATCH);
        py.detach(move || {
            let mut out = Vec::new();
            queue.try_pop_batch(&mut out, max);
            self.convert_batch(out)
        })
    }

    /// Up to ``max`` events that are ready now, without waiting.
    #[pyo3(signature = (max = 1024))]
    fn try_pop(&self, py: Python<'_>, max: usize) -> PyResult<Vec<Py<PyEvent>>> {
        let mut out = Vec::new();
        self.queue.try_pop_batch(&mut out, max.max(1));
        self.convert(py, &out)
    }

    /// Stop accepting events and wake a waiting ``pop``; what is queued can still be popped.
    fn close(&self) {
        self.queue.close();
    }

    /// Whether the queue is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.queue.is_closed()
    }

    /// The overflow policy: ``"block"``, ``"drop-oldest"``, ``"drop-newest"`` or ``"coalesce"``.
    #[getter]
    fn overflow(&self) -> &'static str {
        self.queue.overflow().as_str()
    }

    /// Counters: pushed, popped, dropped_oldest, dropped_newest, coalesced, rejected_closed,
    /// len, capacity.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        queue_stats_dict(py, &self.queue.stats())
    }

    fn __len__(&self) -> usize {
        self.queue.len()
    }

    fn __repr__(&self) -> String {
        let s = self.queue.stats();
        format!(
            "EventQueue(overflow={:?}, len={}, capacity={})",
            self.queue.overflow().as_str(),
            s.len,
            s.capacity
        )
    }
}

pub fn queue_stats_dict<'py>(py: Python<'py>, s: &QueueStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("pushed", s.pushed)?;
    d.set_item("popped", s.popped)?;
    d.set_item("dropped_oldest", s.dropped_oldest)?;
    d.set_item("dropped_newest", s.dropped_newest)?;
    d.set_item("coalesced", s.coalesced)?;
    d.set_item("rejected_closed", s.rejected_closed)?;
    d.set_item("len", s.len)?;
    d.set_item("capacity", s.capacity)?;
    Ok(d)
}
