//! `Detector`: the core's missed-period detector as a Python object.

use super::batch::{self, Names};
use super::clock::{clock_source, spawn_driver, PyManualClock};
use super::events::{PyEventQueue, PyTopicStatus};
use super::time::{opt_time, to_ns, to_seconds};
use crate::detector::{Adoption, Beat, Carried, Detector, DetectorError, Marks, TopicConfig};
use crate::driver::Driver;
use crate::event::{NO_LATENCY, NO_SEQ};
use crate::phi::PhiConfig;
use crate::queue::Overflow;
use crate::registry::Handle;
use crate::word::State;
use parking_lot::Mutex;
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::sync::Arc;
use std::time::Duration;

/// A `max_local_pause` argument (seconds > 0, or None for off) in ns.
fn max_pause_ns(seconds: Option<f64>) -> PyResult<Option<u64>> {
    seconds
        .map(|s| to_ns("max_local_pause", s, false))
        .transpose()
}

/// An optional seconds argument (> 0, or None) in ns; `what` names it in the error.
fn opt_positive_ns(what: &str, seconds: Option<f64>) -> PyResult<Option<u64>> {
    seconds.map(|s| to_ns(what, s, false)).transpose()
}

fn to_py(e: DetectorError) -> PyErr {
    match e {
        DetectorError::Unknown(what) => PyKeyError::new_err(format!("unknown topic: {what}")),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// One beat for the name `name` (borrowed, e.g. from `PyString::to_str`) at `now` (clock ns),
/// recorded as `Detector.beat(name)` records it, for any pyclass holding the GIL: lock-free for
/// a known name whose beat owes no event; otherwise finished with the GIL released. Returns
/// whether it was recorded (an unknown name is counted, or added first under auto-add).
#[allow(dead_code)] // for the monitor's native intake (issue 15)
pub(crate) fn beat_str(py: Python<'_>, det: &Detector, name: &str, now: u64) -> bool {
    match det.lookup_handle(name) {
        Some(handle) => beat_handle(py, det, handle, now, NO_SEQ, NO_LATENCY),
        None => beat_unknown(py, det, name, now),
    }
}

/// [`beat_str`] by handle, with the sequence number and transit time (ns) a `received` event
/// carries ([`NO_SEQ`], [`NO_LATENCY`] for none).
pub(crate) fn beat_handle(
    py: Python<'_>,
    det: &Detector,
    handle: Handle,
    now: u64,
    seq: u64,
    latency_ns: i64,
) -> bool {
    let result = det.record_handle(handle, now);
    if det.needs_completion(result) {
        // `resumed`/`received` take the detector lock and may wait for room in a full
        // "block" queue, whose consumer may need the GIL: detached (see mod.rs).
        py.detach(|| det.complete(handle, result, now, seq, latency_ns));
    }
    matches!(result, Beat::Recorded { .. })
}

/// A beat for a name not indexed: auto-add may take the detector lock, so detached.
fn beat_unknown(py: Python<'_>, det: &Detector, name: &str, now: u64) -> bool {
    matches!(
        py.detach(|| det.beat_name(name, Some(now))),
        Beat::Recorded { .. }
    )
}

/// One column of `adopt_many` (None: `n` times the default), as Python values: a list or
/// tuple, or anything with `to_pylist` (Arrow) or `tolist` (NumPy). Its length must be `n`.
fn column<'py, T: for<'a> FromPyObject<'a, 'py>>(
    what: &str,
    obj: Option<&Bound<'py, PyAny>>,
    n: usize,
) -> PyResult<Vec<Option<T>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok((0..n).map(|_| None).collect());
    };
    let list = if obj.hasattr("to_pylist")? {
        obj.call_method0("to_pylist")?
    } else if obj.hasattr("tolist")? {
        obj.call_method0("tolist")?
    } else {
        obj.clone()
    };
    let values: Vec<Bound<'py, PyAny>> = list.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a sequence (or an Arrow or NumPy array), got {}",
            super::type_name(obj)
        ))
    })?;
    if values.len() != n {
        return Err(PyValueError::new_err(format!(
            "{what} has {} items, names {n}",
            values.len()
        )));
    }
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            if v.is_none() {
                return Ok(None);
            }
            v.extract::<T>().map(Some).map_err(|_| {
                PyTypeError::new_err(format!(
                    "{what}[{i}] has the wrong type: {}",
                    super::type_name(v)
                ))
            })
        })
        .collect()
}

/// A carried outage's `since` (seconds on the detector's clock) in ns; `what` names it.
fn since_ns(what: &str, since: f64) -> PyResult<u64> {
    to_ns(what, since, true)
}

/// A carried outage's `missed` (>= 1, 32 bits).
fn missed_count(what: &str, missed: i64) -> PyResult<u32> {
    u32::try_from(missed)
        .ok()
        .filter(|&m| m >= 1)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "{what} must be an int in [1, {}], got {missed}",
                u32::MAX
            ))
        })
}

/// Phi-accrual settings for a topic (Akka's defaults). Times in seconds.
#[pyclass(name = "Phi", module = "heartwire._core", frozen, from_py_object)]
#[derive(Clone, Copy)]
pub struct PyPhi {
    pub(crate) config: PhiConfig,
}

#[pymethods]
impl PyPhi {
    #[new]
    #[pyo3(signature = (threshold = 8.0, max_samples = 1000, min_std_dev = 0.1, acceptable_pause = 3.0))]
    fn new(
        threshold: f64,
        max_samples: usize,
        min_std_dev: f64,
        acceptable_pause: f64,
    ) -> PyResult<Self> {
        let config = PhiConfig {
            threshold,
            max_samples,
            min_std_dev_ns: to_ns("min_std_dev", min_std_dev, true)?,
            acceptable_pause_ns: to_ns("acceptable_pause", acceptable_pause, true)?,
        };
        config.validate().map_err(PyValueError::new_err)?;
        Ok(Self { config })
    }

    #[getter]
    fn threshold(&self) -> f64 {
        self.config.threshold
    }
    #[getter]
    fn max_samples(&self) -> usize {
        self.config.max_samples
    }
    #[getter]
    fn min_std_dev(&self) -> f64 {
        to_seconds(self.config.min_std_dev_ns)
    }
    #[getter]
    fn acceptable_pause(&self) -> f64 {
        to_seconds(self.config.acceptable_pause_ns)
    }

    fn __repr__(&self) -> String {
        format!(
            "Phi(threshold={}, max_samples={}, min_std_dev={}, acceptable_pause={})",
            self.config.threshold,
            self.config.max_samples,
            self.min_std_dev(),
            self.acceptable_pause()
        )
    }
}

/// Watches topics for missed periods.
///
/// With the real clock (the default) a driver thread advances it every ``tick`` seconds; with a
/// :class:`ManualClock` the clock's ``advance`` does. Topics are named by ``str`` or by the
/// integer handle :meth:`add` returns.
///
/// ``grace`` (seconds >= 0, per topic; this is the default) is slack added to every deadline:
/// with the last beat at ``last``, the n-th period counts as missed once the clock is past
/// ``last + n * period + grace``. Phi-accrual topics ignore it (``Phi.acceptable_pause`` is
/// theirs).
///
/// A topic gets at most 64 ``failed`` events from one run: after a long gap (a long
/// ``advance``, a stall with ``max_local_pause=None``) the first 63 missed periods fire one by
/// one, then one for the latest deadline passed, with the exact count.
#[pyclass(name = "Detector", module = "heartwire._core", frozen)]
pub struct PyDetector {
    pub(crate) det: Arc<Detector>,
    driver: Mutex<Option<Driver>>,
    tick: Duration,
}

impl PyDetector {
    /// The handle of a topic given by name or handle. A handle is checked by the core call it
    /// is passed to, under the detector lock (a stale one raises ``KeyError`` there).
    fn id(&self, topic: &Bound<'_, PyAny>) -> PyResult<Handle> {
        if let Ok(name) = topic.cast::<PyString>() {
            let name = name.to_str()?; // borrowed: no copy
            return self
                .det
                .lookup_handle(name)
                .ok_or_else(|| PyKeyError::new_err(format!("unknown topic: {name:?}")));
        }
        match topic.extract::<i64>() {
            Ok(h) if h >= 0 => Ok(h as Handle),
            Ok(h) => Err(PyKeyError::new_err(format!("unknown topic handle: {h}"))),
            Err(_) => Err(PyTypeError::new_err(format!(
                "topic must be a str name or an int handle, got {}",
                super::type_name(topic)
            ))),
        }
    }

    fn config(
        &self,
        base: TopicConfig,
        period: Option<f64>,
        allowed_misses: Option<u32>,
        grace: Option<f64>,
        phi: Option<Option<PyPhi>>,
    ) -> PyResult<TopicConfig> {
        let mut config = base;
        if let Some(p) = period {
            config.period_ns = to_ns("period", p, false)?;
        }
        if let Some(g) = grace {
            config.grace_ns = to_ns("grace", g, true)?;
        }
        if let Some(n) = allowed_misses {
            if n == 0 {
                return Err(PyValueError::new_err("allowed_misses must be >= 1, got 0"));
            }
            config.allowed_misses = n;
        }
        if let Some(phi) = phi {
            config.phi = phi.map(|p| p.config);
        }
        Ok(config)
    }

    /// The config for settings given to `add`: None when none were given (a known topic then
    /// keeps its own), else the defaults with the given ones applied.
    fn given_config(
        &self,
        period: Option<f64>,
        allowed_misses: Option<u32>,
        grace: Option<f64>,
        phi: Option<PyPhi>,
    ) -> PyResult<Option<TopicConfig>> {
        if period.is_none() && allowed_misses.is_none() && grace.is_none() && phi.is_none() {
            return Ok(None);
        }
        let phi = phi.map(Some);
        self.config(self.det.defaults(), period, allowed_misses, grace, phi)
            .map(Some)
    }

    /// A `now=` argument in ns, or the clock's reading.
    fn now_or_clock(&self, now: Option<f64>) -> PyResult<u64> {
        Ok(opt_time("now", now)?.unwrap_or_else(|| self.det.now_ns()))
    }

    fn start_driver(&self) -> PyResult<()> {
        if self.det.clock().is_manual() {
            return Ok(());
        }
        let mut driver = self.driver.lock();
        if driver.is_none() {
            *driver = Some(spawn_driver(&self.det, self.det.clock(), self.tick)?);
        }
        Ok(())
    }

    fn status_obj(&self, py: Python<'_>, handle: Handle) -> PyResult<PyTopicStatus> {
        let det = self.det.clone();
        let (status, name) = py
            .detach(move || Ok::<_, DetectorError>((det.status(handle)?, det.name(handle))))
            .map_err(to_py)?;
        Ok(PyTopicStatus::new(
            &status,
            name.unwrap_or_default(),
            handle,
        ))
    }
}

#[pymethods]
impl PyDetector {
    #[new]
    #[pyo3(
        signature = (*, period = 1.0, allowed_misses = 1, grace = 0.0, clock = None, resolution = 0.001, tick = 0.01, auto_add = false, max_local_pause = Some(5.0), lag_threshold = Some(1.0), max_ingest_lag = Some(60.0)),
        text_signature = "(*, period=1.0, allowed_misses=1, grace=0.0, clock=None, resolution=0.001, tick=0.01, auto_add=False, max_local_pause=5.0, lag_threshold=1.0, max_ingest_lag=60.0)"
    )]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn new(
        py: Python<'_>,
        period: f64,
        allowed_misses: u32,
        grace: f64,
        clock: Option<&Bound<'_, PyManualClock>>,
        resolution: f64,
        tick: f64,
        auto_add: bool,
        max_local_pause: Option<f64>,
        lag_threshold: Option<f64>,
        max_ingest_lag: Option<f64>,
    ) -> PyResult<Self> {
        if allowed_misses == 0 {
            return Err(PyValueError::new_err("allowed_misses must be >= 1, got 0"));
        }
        let defaults = TopicConfig::fixed(to_ns("period", period, false)?, allowed_misses)
            .with_grace(to_ns("grace", grace, true)?);
        let resolution = to_ns("resolution", resolution, false)?;
        let tick = Duration::from_nanos(to_ns("tick", tick, false)?);
        let det = Detector::new(clock_source(py, clock)?, defaults, resolution).map_err(to_py)?;
        det.set_auto_add(auto_add);
        det.set_max_local_pause(max_pause_ns(max_local_pause)?)
            .map_err(to_py)?;
        det.set_lag_threshold(opt_positive_ns("lag_threshold", lag_threshold)?)
            .map_err(to_py)?;
        det.set_max_ingest_lag(opt_positive_ns("max_ingest_lag", max_ingest_lag)?)
            .map_err(to_py)?;
        let this = Self {
            det,
            driver: Mutex::new(None),
            tick,
        };
        this.start_driver()?;
        Ok(this)
    }

    /// Expect ``name``: it must be heard within one period (plus grace) from ``now`` (a beat
    /// stamped before ``now`` is old news). Returns its handle. A name already known keeps its handle; given settings are applied to it.
    #[pyo3(signature = (name, period = None, allowed_misses = None, phi = None, *, grace = None, now = None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn add(
        &self,
        py: Python<'_>,
        name: &str,
        period: Option<f64>,
        allowed_misses: Option<u32>,
        phi: Option<PyPhi>,
        grace: Option<f64>,
        now: Option<f64>,
    ) -> PyResult<Handle> {
        let now = opt_time("now", now)?;
        let config = self.given_config(period, allowed_misses, grace, phi)?;
        // `name` borrows the str's UTF-8, which the argument keeps alive while detached.
        py.detach(|| self.det.add_handle(name, config, now))
            .map_err(to_py)
    }

    /// :meth:`add` for many names with the same settings; returns their handles in order.
    #[pyo3(signature = (names, period = None, allowed_misses = None, phi = None, *, grace = None, now = None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn add_many(
        &self,
        py: Python<'_>,
        names: &Bound<'_, PyAny>,
        period: Option<f64>,
        allowed_misses: Option<u32>,
        phi: Option<PyPhi>,
        grace: Option<f64>,
        now: Option<f64>,
    ) -> PyResult<Vec<Handle>> {
        let now = opt_time("now", now)?;
        let config = self.given_config(period, allowed_misses, grace, phi)?;
        let det = self.det.clone();
        match batch::names(names)? {
            Names::Arrow(chunks) => py
                .detach(move || {
                    let (ids, nulls) =
                        batch::for_arrow_strs(&chunks, |it| det.add_many_handles(it, config, now));
                    if nulls > 0 {
                        return Err(DetectorError::Invalid(format!(
                            "names holds {nulls} null(s)"
                        )));
                    }
                    ids
                })
                .map_err(to_py),
            Names::Python(obj) => {
                // Borrowed views, valid while detached: `items` holds each str.
                let items = batch::borrow_names(&obj)?;
                let strs = items.strs();
                det.reserve(strs.len(), strs.first().map_or(16, |s| s.len()));
                py.detach(|| det.add_many_handles(strs.iter().copied(), config, now))
                    .map_err(to_py)
            }
        }
    }

    /// Take ``name`` over from another monitor (a group's takeover) at ``now``. With
    /// ``since=None``, a fresh start as :meth:`add`: a full first period (plus grace) from
    /// ``now``. With ``since`` (seconds on this detector's clock, as events' ``since``; it may
    /// be before this detector started), its outage is carried over: FAILED at once without a
    /// ``failed`` event, ``missed`` periods counted, the next ``failed(missed + 1)`` one
    /// period after ``now`` with the same ``since`` (and ``reason``: an explicit failure's,
    /// then one ``failed`` at every missed period as after a ``down`` beat), and its first beat after ``now`` a
    /// ``resumed`` with the downtime from ``since``. ``alerted``: the old owner's listeners got
    /// an unmarked ``failed`` (False: only ones marked ``silenced`` and/or ``suppressed_by``
    /// that parent, so the alert is owed: it goes out when it would be unmarked here).
    /// ``flapping``: the topic goes on flapping here (settling one flap window after ``now``;
    /// only with flapping detection on). A known topic keeps its handle and deadlines; if it is
    /// FAILED here already it is kept so; if it was heard after ``since``, ``resumed`` is
    /// emitted now at that beat. Returns its handle.
    #[pyo3(signature = (name, *, since = None, missed = 1, reason = None, alerted = true, silenced = false, suppressed_by = None, flapping = false, period = None, now = None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn adopt(
        &self,
        py: Python<'_>,
        name: &str,
        since: Option<f64>,
        missed: i64,
        reason: Option<String>,
        alerted: bool,
        silenced: bool,
        suppressed_by: Option<String>,
        flapping: bool,
        period: Option<f64>,
        now: Option<f64>,
    ) -> PyResult<Handle> {
        let now = opt_time("now", now)?;
        let config = self.given_config(period, None, None, None)?;
        let failed = match since {
            None => None,
            Some(s) => Some(Carried {
                since_ns: since_ns("since", s)?,
                missed: missed_count("missed", missed)?,
                reason,
                marks: Marks {
                    alerted,
                    silenced,
                    suppressed_by,
                    flapping,
                },
            }),
        };
        let row = Adoption {
            name,
            config,
            failed,
            flapping,
        };
        let handles = py
            .detach(|| self.det.adopt(std::slice::from_ref(&row), now))
            .map_err(to_py)?;
        Ok(handles[0])
    }

    /// :meth:`adopt` for many topics in one call (one hold of the detector lock), by columns:
    /// ``names`` (a list of str or an Arrow string array) and, for each other argument, None
    /// (every row gets :meth:`adopt`'s default) or a column as long as ``names`` (a list, an
    /// Arrow or NumPy array; a None item is the default: in ``since``, a fresh start; a NaN
    /// ``since`` too). Every row is checked first: a bad one raises (naming it) and changes
    /// nothing. Returns the handles in order.
    #[pyo3(signature = (names, *, since = None, missed = None, reason = None, alerted = None, silenced = None, suppressed_by = None, flapping = None, period = None, now = None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn adopt_many(
        &self,
        py: Python<'_>,
        names: &Bound<'_, PyAny>,
        since: Option<&Bound<'_, PyAny>>,
        missed: Option<&Bound<'_, PyAny>>,
        reason: Option<&Bound<'_, PyAny>>,
        alerted: Option<&Bound<'_, PyAny>>,
        silenced: Option<&Bound<'_, PyAny>>,
        suppressed_by: Option<&Bound<'_, PyAny>>,
        flapping: Option<&Bound<'_, PyAny>>,
        period: Option<&Bound<'_, PyAny>>,
        now: Option<f64>,
    ) -> PyResult<Vec<Handle>> {
        let now = opt_time("now", now)?;
        let names: Vec<String> = match batch::names(names)? {
            Names::Arrow(chunks) => {
                let (v, nulls) =
                    batch::for_arrow_strs(&chunks, |it| it.map(str::to_owned).collect::<Vec<_>>());
                if nulls > 0 {
                    return Err(PyValueError::new_err(format!(
                        "names holds {nulls} null(s)"
                    )));
                }
                v
            }
            Names::Python(obj) => {
                let items = batch::borrow_names(&obj)?;
                items.iter().map(str::to_owned).collect()
            }
        };
        let n = names.len();
        let since = column::<f64>("since", since, n)?;
        let missed = column::<i64>("missed", missed, n)?;
        let reason = column::<String>("reason", reason, n)?;
        let alerted = column::<bool>("alerted", alerted, n)?;
        let silenced = column::<bool>("silenced", silenced, n)?;
        let suppressed_by = column::<String>("suppressed_by", suppressed_by, n)?;
        let flapping = column::<bool>("flapping", flapping, n)?;
        let period = column::<f64>("period", period, n)?;
        let mut rows = Vec::with_capacity(n);
        for (i, name) in names.iter().enumerate() {
            let flaps = flapping[i].unwrap_or(false);
            let failed = match since[i].filter(|s| !s.is_nan()) {
                None => None,
                Some(s) => Some(Carried {
                    since_ns: since_ns(&format!("since[{i}]"), s)?,
                    missed: missed_count(&format!("missed[{i}]"), missed[i].unwrap_or(1))?,
                    reason: reason[i].clone(),
                    marks: Marks {
                        alerted: alerted[i].unwrap_or(true),
                        silenced: silenced[i].unwrap_or(false),
                        suppressed_by: suppressed_by[i].clone(),
                        flapping: flaps,
                    },
                }),
            };
            let config = match period[i] {
                None => None,
                Some(p) => Some(TopicConfig {
                    period_ns: to_ns(&format!("period[{i}]"), p, false)?,
                    ..self.det.defaults()
                }),
            };
            rows.push(Adoption {
                name,
                config,
                failed,
                flapping: flaps,
            });
        }
        py.detach(|| self.det.adopt(&rows, now)).map_err(to_py)
    }

    /// What this detector's listeners were told, for the topics whose marks are not plain
    /// (what :meth:`adopt` carries to another monitor): ``(name, alerted, silenced,
    /// suppressed_by, flapping)`` for each FAILED topic whose outage's events all went out
    /// marked (or were all held back while it flapped) and each flapping topic. Empty while
    /// no silence, dependency or flapping was declared: every FAILED topic is then alerted.
    #[allow(clippy::type_complexity)]
    fn marks(&self, py: Python<'_>) -> Vec<(String, bool, bool, Option<String>, bool)> {
        let det = self.det.clone();
        py.detach(move || {
            det.marks()
                .into_iter()
                .filter_map(|(h, m)| {
                    let name = det.name(h)?;
                    Some((name, m.alerted, m.silenced, m.suppressed_by, m.flapping))
                })
                .collect()
        })
    }

    /// The handle of ``name``, or None.
    fn handle(&self, name: &str) -> Option<Handle> {
        self.det.lookup_handle(name)
    }

    /// The handles of every topic held (not removed), in slot order.
    fn handles(&self, py: Python<'_>) -> Vec<Handle> {
        let det = self.det.clone();
        py.detach(move || det.handles())
    }

    /// The name of ``handle`` (also of a removed topic, until its slot is reused by another).
    fn name(&self, handle: i64) -> PyResult<String> {
        u64::try_from(handle)
            .ok()
            .and_then(|h| self.det.name(h))
            .ok_or_else(|| PyKeyError::new_err(format!("unknown topic handle: {handle}")))
    }

    /// Topics held: added and not removed.
    fn __len__(&self) -> usize {
        self.det.len()
    }

    fn __contains__(&self, name: &str) -> bool {
        self.det.lookup(name).is_some()
    }

    /// Forget a topic for good. Its slot is reused by a later topic once no queued event can
    /// name it; its handle then raises ``KeyError`` (beats with it count as unknown).
    fn remove(&self, py: Python<'_>, topic: &Bound<'_, PyAny>) -> PyResult<()> {
        let id = self.id(topic)?;
        let det = self.det.clone();
        py.detach(move || det.remove(id)).map_err(to_py)
    }

    /// Stop watching a topic; its beats still update ``last_seen``. False if it was not watched.
    /// A FAILED topic keeps its count and ``since``; :meth:`resume` reports what became of it.
    ///
    /// Pausing (or removing) a FAILED topic alerts the dependents it suppressed; with a
    /// ``"block"`` queue subscribed those ``failed`` events are put aside, never waited for:
    /// :meth:`push_unpushed` pushes them (else the next :meth:`advance` or :meth:`stop`).
    fn pause(&self, py: Python<'_>, topic: &Bound<'_, PyAny>) -> PyResult<bool> {
        let id = self.id(topic)?;
        let det = self.det.clone();
        py.detach(move || det.pause(id)).map_err(to_py)
    }

    /// Watch a paused topic again from ``now``; False if it was not paused.
    ///
    /// It must then be heard within one period (plus grace) from ``now``. A topic that was
    /// FAILED when paused and was heard while paused first gets a ``resumed`` event (``at``:
    /// the first beat after the failure, ``downtime``: that beat's time minus ``since``); one
    /// that was not heard stays FAILED with its count, the next ``failed`` one period after
    /// ``now``. A beat stamped before ``now`` but recorded after the resume is old news.
    #[pyo3(signature = (topic, *, now = None))]
    fn resume(&self, py: Python<'_>, topic: &Bound<'_, PyAny>, now: Option<f64>) -> PyResult<bool> {
        let id = self.id(topic)?;
        let now = opt_time("now", now)?;
        let det = self.det.clone();
        py.detach(move || det.resume(id, now)).map_err(to_py)
    }

    /// Change a topic's period; the next deadline is one new period from ``now``.
    #[pyo3(signature = (topic, period, *, now = None))]
    fn set_period(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        period: f64,
        now: Option<f64>,
    ) -> PyResult<()> {
        let id = self.id(topic)?;
        let period = to_ns("period", period, false)?;
        let now = opt_time("now", now)?;
        let det = self.det.clone();
        py.detach(move || det.set_period(id, period, now))
            .map_err(to_py)
    }

    /// Change any of a topic's settings from ``now`` on; ``phi=None`` leaves the mode alone,
    /// ``phi=False`` switches back to the fixed period.
    #[pyo3(signature = (topic, *, period = None, allowed_misses = None, phi = None, grace = None, now = None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn configure(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        period: Option<f64>,
        allowed_misses: Option<u32>,
        phi: Option<&Bound<'_, PyAny>>,
        grace: Option<f64>,
        now: Option<f64>,
    ) -> PyResult<()> {
        let id = self.id(topic)?;
        let phi = match phi {
            None => None,
            Some(p) if p.is_instance_of::<pyo3::types::PyBool>() && !p.extract::<bool>()? => {
                Some(None)
            }
            Some(p) => Some(Some(
                *p.cast::<PyPhi>()
                    .map_err(|_| {
                        PyTypeError::new_err(format!(
                            "phi must be a Phi or False, got {}",
                            super::type_name(p)
                        ))
                    })?
                    .get(),
            )),
        };
        let now = opt_time("now", now)?;
        let det = self.det.clone();
        let base = py.detach(|| det.config(id)).map_err(to_py)?;
        let config = self.config(base, period, allowed_misses, grace, phi)?;
        py.detach(move || det.set_config(id, config, now))
            .map_err(to_py)
    }

    /// Record a beat. Returns False if the topic is unknown (and auto-add is off), removed, or
    /// the detector is stopped; such beats are counted in :meth:`stats`.
    #[pyo3(signature = (topic, *, now = None, seq = None, latency = None))]
    fn beat(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        now: Option<f64>,
        seq: Option<u64>,
        latency: Option<f64>,
    ) -> PyResult<bool> {
        let now = self.now_or_clock(now)?;
        let handle = if let Ok(name) = topic.cast::<PyString>() {
            let name = name.to_str()?; // borrowed: no copy
            match self.det.lookup_handle(name) {
                Some(handle) => handle,
                None => return Ok(beat_unknown(py, &self.det, name, now)),
            }
        } else {
            match topic.extract::<i64>() {
                Ok(h) => u64::try_from(h).unwrap_or(u64::MAX),
                Err(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "topic must be a str name or an int handle, got {}",
                        super::type_name(topic)
                    )))
                }
            }
        };
        let latency = match latency {
            Some(l) if l.is_finite() => (l * 1e9).round() as i64,
            Some(l) => {
                return Err(PyValueError::new_err(format!(
                    "latency must be a finite number of seconds, got {l}"
                )))
            }
            None => NO_LATENCY,
        };
        Ok(beat_handle(
            py,
            &self.det,
            handle,
            now,
            seq.unwrap_or(NO_SEQ),
            latency,
        ))
    }

    /// Record a beat for each name (a list or iterable of str, or an Arrow string array, which
    /// is read with the GIL released). Returns how many were recorded; unknown names are
    /// counted in :meth:`stats`.
    #[pyo3(signature = (names, *, now = None))]
    fn beat_many(
        &self,
        py: Python<'_>,
        names: &Bound<'_, PyAny>,
        now: Option<f64>,
    ) -> PyResult<usize> {
        let now = Some(self.now_or_clock(now)?);
        let det = self.det.clone();
        match batch::names(names)? {
            Names::Arrow(chunks) => Ok(py.detach(move || {
                let (b, nulls) = batch::for_arrow_strs(&chunks, |it| det.record_names(it, now));
                det.count_unknown(nulls as u64);
                det.finish(b).0
            })),
            Names::Python(obj) => {
                let b = batch::find_names(&det, &obj, det.auto_add())?.record(&det, now);
                Ok(if b.needs_finish() {
                    py.detach(move || det.finish(b).0)
                } else {
                    b.recorded
                })
            }
        }
    }

    /// Record a beat for each handle (a list of int, a NumPy or an Arrow integer array). The
    /// lookup-free hot path. Returns how many were recorded.
    #[pyo3(signature = (handles, *, now = None))]
    fn beat_handles(
        &self,
        py: Python<'_>,
        handles: &Bound<'_, PyAny>,
        now: Option<f64>,
    ) -> PyResult<usize> {
        let now = Some(self.now_or_clock(now)?);
        let ids = batch::handles(handles)?;
        let det = self.det.clone();
        Ok(py.detach(move || {
            let b = det.record_handles(ids.iter().copied(), now);
            det.finish(b).0
        }))
    }

    /// Silence the topics matching ``pattern`` (known now or learned later) from ``start``
    /// (seconds on the detector's clock; None: now) until ``end``: their failed and resumed
    /// events are marked ``silenced``. Returns the silence's id. A topic still FAILED when it
    /// ends, never alerted meanwhile, gets one unmarked ``failed`` then.
    #[pyo3(signature = (pattern, end, *, start = None, reason = ""))]
    fn silence(
        &self,
        py: Python<'_>,
        pattern: &str,
        end: f64,
        start: Option<f64>,
        reason: &str,
    ) -> PyResult<u64> {
        let end = to_ns("end", end, true)?;
        let start = opt_time("start", start)?;
        let det = self.det.clone();
        py.detach(move || det.silence(pattern, start, end, reason))
            .map_err(to_py)
    }

    /// End silence ``id`` now (topics it held that are still FAILED and never alerted get
    /// their ``failed``: at once if deadlines are judged up to now, as under a manual clock,
    /// else at the driver's next run); False if there is no such silence (ended, removed).
    fn unsilence(&self, py: Python<'_>, id: u64) -> bool {
        let det = self.det.clone();
        py.detach(move || det.unsilence(id))
    }

    /// The silences not ended yet: ``(id, pattern, start, end, reason)``, times on the
    /// detector's clock.
    fn silences(&self) -> Vec<(u64, String, f64, f64, String)> {
        self.det
            .silences()
            .into_iter()
            .map(|s| {
                (
                    s.id,
                    s.pattern,
                    to_seconds(s.starts_ns),
                    to_seconds(s.ends_ns),
                    s.reason,
                )
            })
            .collect()
    }

    /// Topics matching ``child_pattern`` depend on the topic ``on`` (known yet or not): while
    /// it is FAILED their failed events are marked ``suppressed_by`` it; once it resumes,
    /// those still FAILED and never alerted get one unmarked ``failed``.
    fn depends(&self, child_pattern: &str, on: &str) -> PyResult<()> {
        self.det.depends(child_pattern, on).map_err(to_py)
    }

    /// Detect flapping: a topic with more than ``threshold`` outages (failed, then resumed)
    /// within ``window`` seconds is flapping: a ``flapping`` event (``flapping=True``), its
    /// failed and resumed held back meanwhile if ``hold``; it settles ``window`` after its
    /// last transition (``flapping=False``, then a ``failed`` if it is down). ``threshold``
    /// 0 turns it off (flapping topics settle now).
    #[pyo3(signature = (threshold, window, *, hold = true))]
    fn set_flapping(
        &self,
        py: Python<'_>,
        threshold: u32,
        window: f64,
        hold: bool,
    ) -> PyResult<()> {
        let window = to_ns("flap_window", window, threshold == 0)?;
        let det = self.det.clone();
        py.detach(move || det.set_flapping(threshold, window, hold))
            .map_err(to_py)
    }

    /// The flapping settings: ``(threshold, window, hold)`` (threshold 0: off).
    fn flapping(&self) -> (u32, f64, bool) {
        let c = self.det.flapping();
        (c.threshold, to_seconds(c.window_ns), c.hold)
    }

    /// How many topics are flapping now (started and not settled yet).
    fn flapping_topics(&self) -> usize {
        self.det.flapping_topics()
    }

    /// The dependencies declared: ``(child_pattern, on)``.
    fn dependencies(&self) -> Vec<(String, String)> {
        self.det.dependencies()
    }

    /// Process every deadline up to ``now`` (default: the clock's now). Returns how many
    /// failed/resumed events that produced. The driver thread or the manual clock normally
    /// does this.
    #[pyo3(signature = (now = None))]
    fn advance(&self, py: Python<'_>, now: Option<f64>) -> PyResult<u64> {
        let now = opt_time("now", now)?;
        let det = self.det.clone();
        Ok(py.detach(move || det.advance_to(now)))
    }

    /// Watch every topic again (after :meth:`stop`) as it was when stopped: a FAILED topic stays
    /// FAILED (count and ``since`` kept, the next ``failed`` one period after ``now``) until a
    /// beat is heard, a paused one stays paused, the others are expected within a period (plus
    /// grace) from ``now``. The time stopped is not counted: a beat stamped before ``now`` but
    /// recorded after the restart is old news (it ends no outage and moves no deadline back).
    #[pyo3(signature = (*, now = None))]
    fn start(&self, py: Python<'_>, now: Option<f64>) -> PyResult<()> {
        let now = opt_time("now", now)?;
        let det = self.det.clone();
        py.detach(move || det.start(now));
        self.start_driver()
    }

    /// Stop watching: every topic goes STOPPED, beats are refused, the driver thread ends.
    /// Beats already recorded are taken in first (a FAILED topic's ``resumed`` is emitted).
    /// It waits for the driver thread: called by the consumer of a full ``"block"`` queue
    /// while the driver waits for room in it, close (or unsubscribe) that queue first.
    fn stop(&self, py: Python<'_>) {
        let det = self.det.clone();
        let driver = self.driver.lock().take();
        py.detach(move || {
            det.stop();
            if let Some(mut driver) = driver {
                driver.stop(); // joins the thread
            }
        });
    }

    /// Push (GIL released) what :meth:`pause` and :meth:`remove` put aside without pushing it
    /// (see :meth:`pause`). It may wait for room in a full ``"block"`` queue: call it holding
    /// no lock that queue's consumer may need, and not from that consumer.
    fn push_unpushed(&self, py: Python<'_>) {
        let det = self.det.clone();
        py.detach(move || det.push_unpushed());
    }

    /// The outbox position reached so far: every event emitted before this call has been
    /// pushed once ``wait_pushed`` of it returns True.
    fn outbox_mark(&self, py: Python<'_>) -> u64 {
        let det = self.det.clone();
        py.detach(move || det.outbox_mark())
    }

    /// Wait (GIL released) until every event emitted before ``outbox_mark()`` returned ``mark``
    /// has been pushed into the queues, at most ``timeout`` seconds (None: no bound). Returns
    /// False on timeout. It pushes nothing itself: the threads that emitted the events do (a
    /// push may wait for room in a full ``"block"`` queue, so its consumer must not wait here).
    #[pyo3(signature = (mark, timeout = None))]
    fn wait_pushed(&self, py: Python<'_>, mark: u64, timeout: Option<f64>) -> PyResult<bool> {
        let timeout = match timeout {
            None => None,
            Some(t) if t.is_finite() && t >= 0.0 => Some(std::time::Duration::from_secs_f64(t)),
            Some(t) => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "timeout must be a finite number >= 0 or None, got {t}"
                )))
            }
        };
        let det = self.det.clone();
        Ok(py.detach(move || det.wait_pushed(mark, timeout)))
    }

    /// Whether the detector is watching.
    #[getter]
    fn running(&self, py: Python<'_>) -> bool {
        let det = self.det.clone();
        py.detach(move || det.is_running())
    }

    /// Whether beats for unknown names add them (with the default settings).
    #[getter]
    fn get_auto_add(&self) -> bool {
        self.det.auto_add()
    }

    #[setter]
    fn set_auto_add(&self, on: bool) {
        self.det.set_auto_add(on);
    }

    /// Seconds the detector may go without running before a wake-up counts as a local pause
    /// (its own stall: deadlines inside are re-based, not fired), or None to never count one.
    #[getter]
    fn get_max_local_pause(&self) -> Option<f64> {
        self.det.max_local_pause().map(to_seconds)
    }

    #[setter]
    fn set_max_local_pause(&self, seconds: Option<f64>) -> PyResult<()> {
        self.det
            .set_max_local_pause(max_pause_ns(seconds)?)
            .map_err(to_py)
    }

    /// One observation of the intake (the reader of the broker connection), made after a read
    /// whose beats were recorded: ``backlogged`` (the read filled its buffer: more is waiting)
    /// and ``transit`` (seconds: wall now minus the send time of the freshest beat in that
    /// read, None if no beat carried one; a negative one, from a publisher clock ahead, counts
    /// as 0), at ``now`` (default: the clock's now).
    ///
    /// While backlogged, deadlines are judged against the watermark of what has been read
    /// (``now - transit``; with no transit, it stays where it was) instead of the clock, but
    /// never more than ``max_ingest_lag`` behind it: beats read meanwhile re-arm their topics,
    /// so live topics do not fail for the monitor's own backlog, and a topic that really died
    /// is reported once the watermark passes its deadline. A read that is not backlogged
    /// releases the watermark. A ``lagging`` event is emitted when the lag first exceeds
    /// ``lag_threshold`` and a ``caught_up`` one when that episode ends. Ignored while the
    /// guard is off (``lag_threshold=None``) or the detector is stopped.
    #[pyo3(signature = (backlogged, transit = None, *, now = None))]
    fn note_intake(
        &self,
        py: Python<'_>,
        backlogged: bool,
        transit: Option<f64>,
        now: Option<f64>,
    ) -> PyResult<()> {
        let transit = match transit {
            Some(t) if t.is_finite() => Some(to_ns("transit", t.max(0.0), true)?),
            Some(t) => {
                return Err(PyValueError::new_err(format!(
                    "transit must be a finite number of seconds or None, got {t}"
                )))
            }
            None => None,
        };
        let now = opt_time("now", now)?;
        let det = self.det.clone();
        py.detach(move || det.note_intake(backlogged, transit, now));
        Ok(())
    }

    /// How far behind the clock the intake's read watermark is now, seconds (0.0 when the
    /// intake is not backlogged). Deadlines are held by this much, up to ``max_ingest_lag``.
    #[getter]
    fn lag(&self) -> f64 {
        to_seconds(self.det.lag_ns())
    }

    /// The lag (seconds > 0) above which a ``lagging`` event is emitted, or None: the
    /// ingest-lag guard is off (:meth:`note_intake` holds nothing; setting None mid-episode
    /// releases the hold and ends the episode).
    #[getter]
    fn get_lag_threshold(&self) -> Option<f64> {
        self.det.lag_threshold().map(to_seconds)
    }

    #[setter]
    fn set_lag_threshold(&self, py: Python<'_>, seconds: Option<f64>) -> PyResult<()> {
        let ns = opt_positive_ns("lag_threshold", seconds)?;
        let det = self.det.clone();
        py.detach(move || det.set_lag_threshold(ns)).map_err(to_py)
    }

    /// How far behind the clock (seconds > 0) deadlines may be held while the intake lags, or
    /// None for no bound. Past it the lag is not believed (a legacy feed with no send times, a
    /// reader that stopped reporting) and deadlines proceed that far behind the clock.
    #[getter]
    fn get_max_ingest_lag(&self) -> Option<f64> {
        self.det.max_ingest_lag().map(to_seconds)
    }

    #[setter]
    fn set_max_ingest_lag(&self, seconds: Option<f64>) -> PyResult<()> {
        self.det
            .set_max_ingest_lag(opt_positive_ns("max_ingest_lag", seconds)?)
            .map_err(to_py)
    }

    /// The clock's reading, seconds.
    fn now(&self) -> f64 {
        to_seconds(self.det.now_ns())
    }

    /// A snapshot of one topic.
    fn status(&self, py: Python<'_>, topic: &Bound<'_, PyAny>) -> PyResult<PyTopicStatus> {
        let id = self.id(topic)?;
        self.status_obj(py, id)
    }

    /// The ``n`` worst topics, worst first (FAILED ones, then those with missed periods not
    /// failed yet; most missed first, then longest down, then handle order): healthy, paused
    /// and stopped topics are left out. One native pass over the topics; only the chosen ones
    /// become objects.
    fn worst(&self, py: Python<'_>, n: i64) -> PyResult<Vec<PyTopicStatus>> {
        let n = usize::try_from(n)
            .map_err(|_| PyValueError::new_err(format!("n must be an int >= 0, got {n}")))?;
        let det = self.det.clone();
        let chosen = py.detach(move || det.worst(n));
        Ok(self.det.with_names(|names| {
            chosen
                .iter()
                .map(|s| {
                    let handle = self.det.handle_of(s.id);
                    PyTopicStatus::new(s, names.get(s.id).to_owned(), handle)
                })
                .collect()
        }))
    }

    /// At most ``n`` topics, FAILED ones first, then by name, in that order; and how many
    /// topics there are (removed ones left out): the per-topic series of a bounded metrics
    /// export. One native pass over the topics; only the chosen become objects.
    fn series_topics(&self, py: Python<'_>, n: i64) -> PyResult<(Vec<PyTopicStatus>, usize)> {
        let n = usize::try_from(n)
            .map_err(|_| PyValueError::new_err(format!("n must be an int >= 0, got {n}")))?;
        let det = self.det.clone();
        let (chosen, live) = py.detach(move || det.series_topics(n));
        let out = chosen
            .into_iter()
            .map(|(s, name)| {
                let handle = self.det.handle_of(s.id);
                PyTopicStatus::new(&s, name, handle)
            })
            .collect();
        Ok((out, live))
    }

    /// Snapshots of every topic not removed, in handle order.
    fn statuses(&self, py: Python<'_>) -> Vec<PyTopicStatus> {
        let det = self.det.clone();
        let all = py.detach(move || det.statuses());
        self.det.with_names(|names| {
            all.iter()
                .map(|s| {
                    let handle = self.det.handle_of(s.id);
                    PyTopicStatus::new(s, names.get(s.id).to_owned(), handle)
                })
                .collect()
        })
    }

    /// Whether an ingest-lag episode has reported ``lagging`` and not yet ``caught_up``.
    #[getter]
    fn lagging(&self) -> bool {
        self.det.is_lagging()
    }

    /// Whether beat inter-arrival times are counted (:meth:`interval_histogram`). Off by
    /// default; a monitor turns it on. Counting costs a beat two relaxed atomic adds (a batch:
    /// one local tally, added once).
    #[getter]
    fn get_count_intervals(&self) -> bool {
        self.det.counting_intervals()
    }

    #[setter]
    fn set_count_intervals(&self, on: bool) {
        self.det.count_intervals(on);
    }

    /// The beat inter-arrival histogram: ``(bounds, counts, sum)``: the buckets' upper bounds
    /// (seconds, inclusive), the count of each bucket (not cumulative; one more than
    /// ``bounds``, the last for ``+Inf``) and the sum of the intervals, seconds. Only a topic's
    /// beats after its first count.
    fn interval_histogram(&self) -> (Vec<f64>, Vec<u64>, f64) {
        let h = self.det.interval_histogram();
        let bounds = crate::detector::INTERVAL_BOUNDS_NS
            .iter()
            .map(|b| to_seconds(*b))
            .collect();
        (bounds, h.counts.to_vec(), h.sum_ns as f64 / 1e9)
    }

    /// How many topics are in each state by the first ``depth`` ``.``-separated segments of
    /// their names (the whole name if shorter): ``{prefix: (PENDING, ALIVE, FAILED, PAUSED,
    /// STOPPED, REMOVED)}``, removed topics left out. One native pass over the topics.
    fn counts_by_prefix<'py>(&self, py: Python<'py>, depth: usize) -> PyResult<Bound<'py, PyDict>> {
        if depth == 0 {
            return Err(PyValueError::new_err("depth must be an int >= 1, got 0"));
        }
        let det = self.det.clone();
        let groups = py.detach(move || det.counts_by_prefix(depth));
        let d = PyDict::new(py);
        for (prefix, c) in groups {
            d.set_item(prefix, (c[0], c[1], c[2], c[3], c[4], c[5]))?;
        }
        Ok(d)
    }

    /// How many topics are in each state: ``{"PENDING": n, "ALIVE": n, ...}``.
    fn counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let counts = self.det.state_counts();
        let d = PyDict::new(py);
        for state in [
            State::Pending,
            State::Alive,
            State::Failed,
            State::Paused,
            State::Stopped,
            State::Removed,
        ] {
            d.set_item(state.as_str(), counts[state as usize])?;
        }
        Ok(d)
    }

    /// Counters: beats, unknown, refused, failed, resumed, received, topics, local_pauses and
    /// local_pause_ns (their total length in nanoseconds), lagging (``lagging`` events),
    /// ingest_lag_ns (the intake's lag now, nanoseconds), silenced and suppressed (failed and
    /// resumed events so marked), released (failed events sent again, unmarked, when a
    /// silence ended, a parent resumed or a flapping topic settled) and held (failed and
    /// resumed held back while their topic flapped).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.det.stats();
        let d = PyDict::new(py);
        d.set_item("beats", s.beats)?;
        d.set_item("unknown", s.unknown)?;
        d.set_item("refused", s.refused)?;
        d.set_item("failed", s.failed)?;
        d.set_item("resumed", s.resumed)?;
        d.set_item("received", s.received)?;
        d.set_item("topics", s.topics)?;
        d.set_item("local_pauses", s.local_pauses)?;
        d.set_item("local_pause_ns", s.local_pause_ns)?;
        d.set_item("lagging", s.lagging)?;
        d.set_item("ingest_lag_ns", s.ingest_lag_ns)?;
        d.set_item("silenced", s.silenced)?;
        d.set_item("suppressed", s.suppressed)?;
        d.set_item("released", s.released)?;
        d.set_item("held", s.held)?;
        Ok(d)
    }

    /// Heap bytes the detector holds for its topics.
    fn heap_bytes(&self, py: Python<'_>) -> usize {
        let det = self.det.clone();
        py.detach(move || det.heap_bytes())
    }

    /// A new event queue receiving every event from now on. ``overflow`` is what happens when
    /// it is full: ``"coalesce"`` (the default: keep the newest event of each topic),
    /// ``"drop-oldest"``, ``"drop-newest"``, or ``"block"`` (the detector waits for the
    /// consumer, so a consumer that stalls stalls detection: use it only with a consumer that
    /// always keeps up). Every loss is counted. ``received=True`` adds one event per beat.
    ///
    /// Under ``"block"`` the detector waits for room with its locks released: the consumer may
    /// call it meanwhile (subscribe, unsubscribe, pause, expect, remove, status...), but not
    /// emit into its own full queue (beat, resume, advance) or it waits for itself.
    #[pyo3(signature = (capacity = 65536, overflow = "coalesce", received = false))]
    fn subscribe(
        &self,
        py: Python<'_>,
        capacity: usize,
        overflow: &str,
        received: bool,
    ) -> PyResult<PyEventQueue> {
        let overflow = Overflow::parse(overflow).map_err(PyValueError::new_err)?;
        let det = self.det.clone();
        let queue = py
            .detach(move || det.subscribe(capacity, overflow, received))
            .map_err(to_py)?;
        Ok(PyEventQueue {
            queue,
            detector: self.det.clone(),
        })
    }

    /// Stop feeding ``queue`` and close it, releasing a producer waiting for room in it. No
    /// push into it is in flight once this returns. False if it was not subscribed.
    fn unsubscribe(&self, py: Python<'_>, queue: &Bound<'_, PyEventQueue>) -> bool {
        let det = self.det.clone();
        let q = queue.get().queue.clone();
        py.detach(move || det.unsubscribe(&q))
    }

    fn __repr__(&self) -> String {
        format!(
            "Detector(topics={}, clock={})",
            self.det.len(),
            if self.det.clock().is_manual() {
                "manual"
            } else {
                "monotonic"
            }
        )
    }
}
