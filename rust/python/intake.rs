//! The native intake in Python: `Intake` (a monitor's beat rules, see `crate::ingest::intake`),
//! `Routes` (which STOMP subscription feeds which intake, one per transport) and `FrameReader`
//! (one per connection: the bytes read from the socket go through it, beats are recorded, and
//! only the other frames come back for stomp.py).

use super::batch::{self, Names};
use super::detector::{PyDetector, PyPhi};
use super::time::to_ns;
use crate::event::{NO_LATENCY, NO_SEQ};
use crate::ingest::beat::Beat;
use crate::ingest::frames::{MessageFrame, Splitter, Verdict};
use crate::ingest::intake::{wall_now, InShard, Intake, IntakeConfig, MaxAge, Outcome};
use crate::ingest::shard::MAX_SHARDS;
use crate::ingest::topic::reserved_topic;
use parking_lot::Mutex;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A monitor's intake: every rule a beat passes before the detector records it (period bounds,
/// running, signed-beat age, learning with pattern and ``max_topics``, replays, re-tuning),
/// whichever way the beat arrives. Refusals are counted by reason; the first 1024 not yet
/// taken are kept with details (:meth:`take_refusals`).
#[pyclass(name = "Intake", module = "heartwire._core", frozen)]
pub struct PyIntake {
    pub(crate) intake: Arc<Intake>,
}

/// `shard`, a `(shards, k)` pair: shard `k` of a group of `shards` shards.
fn in_shard(shard: Option<(i64, i64)>) -> PyResult<Option<InShard>> {
    let Some((shards, k)) = shard else {
        return Ok(None);
    };
    if !(1..=i64::from(MAX_SHARDS)).contains(&shards) || !(0..shards).contains(&k) {
        return Err(PyValueError::new_err(format!(
            "shard must be a pair (shards, k) with 1 <= shards <= {MAX_SHARDS} and \
             0 <= k < shards, got ({shards}, {k})"
        )));
    }
    Ok(Some(InShard {
        shards: shards as u32,
        shard: k as u32,
    }))
}

/// The shard in ``[0, shards)`` of ``topic`` in a monitor group, as
/// ``heartwire.transport.shards.shard_of`` computes it (``topic`` is hashed, not validated).
#[pyfunction]
pub fn shard_of(topic: &str, shards: i64) -> PyResult<u32> {
    if !(1..=i64::from(MAX_SHARDS)).contains(&shards) {
        return Err(PyValueError::new_err(format!(
            "shards must be between 1 and {MAX_SHARDS}, got {shards}"
        )));
    }
    Ok(crate::ingest::shard::shard_of(topic, shards as u32))
}

fn refusals_list<'py>(py: Python<'py>, intake: &Intake) -> PyResult<Bound<'py, PyList>> {
    let items: Vec<(&str, String, u64)> = intake
        .take_refusals()
        .into_iter()
        .map(|r| (r.reason, r.detail, r.count))
        .collect();
    PyList::new(py, items)
}

#[pymethods]
impl PyIntake {
    /// ``max_beat_age``: seconds, ``None`` (the default rule), or ``math.inf`` (no bound).
    #[new]
    #[pyo3(signature = (detector, pattern, period, *, grace = None, key = None, max_topics = None, max_beat_age = None, max_size = 65536))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn new(
        detector: &Bound<'_, PyDetector>,
        pattern: &str,
        period: f64,
        grace: Option<f64>,
        key: Option<Vec<u8>>,
        max_topics: Option<usize>,
        max_beat_age: Option<f64>,
        max_size: usize,
    ) -> PyResult<Self> {
        let max_age = match max_beat_age {
            None => MaxAge::Default,
            Some(s) if s == f64::INFINITY => MaxAge::Unbounded,
            Some(s) if s > 0.0 && s.is_finite() => MaxAge::Seconds(s),
            Some(s) => {
                return Err(PyValueError::new_err(format!(
                    "max_beat_age must be a finite number of seconds > 0, inf or None, got {s}"
                )))
            }
        };
        let cfg = IntakeConfig {
            pattern: pattern.to_owned(),
            period,
            grace,
            max_topics,
            max_age,
            key,
            max_size,
        };
        let intake = Intake::new(detector.get().det.clone(), cfg).map_err(PyValueError::new_err)?;
        Ok(Self {
            intake: Arc::new(intake),
        })
    }

    /// Whether beats are recorded (the monitor runs).
    #[getter]
    fn get_running(&self) -> bool {
        self.intake.running()
    }

    #[setter]
    fn set_running(&self, py: Python<'_>, on: bool) {
        py.detach(|| self.intake.set_running(on));
    }

    /// Whether topics learned from now on start paused (the whole monitor is paused).
    #[getter]
    fn get_paused_all(&self, py: Python<'_>) -> bool {
        py.detach(|| self.intake.paused_all())
    }

    #[setter]
    fn set_paused_all(&self, py: Python<'_>, on: bool) {
        py.detach(|| self.intake.set_paused_all(on));
    }

    /// Note ``name`` as paused one by one; False if it was already.
    fn pause_name(&self, py: Python<'_>, name: &str) -> bool {
        py.detach(|| self.intake.pause_name(name))
    }

    /// Forget ``name`` as paused one by one; False if it was not.
    fn unpause_name(&self, py: Python<'_>, name: &str) -> bool {
        py.detach(|| self.intake.unpause_name(name))
    }

    fn is_paused_name(&self, py: Python<'_>, name: &str) -> bool {
        py.detach(|| self.intake.is_paused_name(name))
    }

    fn paused_names(&self, py: Python<'_>) -> Vec<String> {
        py.detach(|| self.intake.paused_names())
    }

    /// Watch ``name`` (checked by the caller); see ``HeartbeatMonitor.expect``. Its handle.
    #[pyo3(signature = (name, period = None, allowed_misses = None, phi = None, grace = None))]
    fn expect(
        &self,
        py: Python<'_>,
        name: &str,
        period: Option<f64>,
        allowed_misses: Option<u32>,
        phi: Option<PyPhi>,
        grace: Option<f64>,
    ) -> PyResult<u64> {
        if let Some(p) = period {
            to_ns("period", p, false)?;
        }
        if let Some(g) = grace {
            to_ns("grace", g, true)?;
        }
        if allowed_misses == Some(0) {
            return Err(PyValueError::new_err("allowed_misses must be >= 1, got 0"));
        }
        let phi = phi.map(|p| p.config);
        py.detach(|| {
            self.intake
                .expect(name, period, allowed_misses, phi, grace, None)
        })
        .map_err(PyValueError::new_err)
    }

    /// Whether ``topic`` matches the monitor's pattern.
    fn matches(&self, topic: &str) -> bool {
        self.intake.matches(topic)
    }

    /// Stop watching ``name``; False if it was not watched.
    fn remove(&self, py: Python<'_>, name: &str) -> bool {
        py.detach(|| self.intake.remove(name))
    }

    /// Record a beat for ``topic`` from the application: an unknown valid name matching the
    /// pattern is learned with the default period. True if recorded; ``ValueError`` for an
    /// invalid name.
    #[pyo3(signature = (topic, *, seq = None, latency = None))]
    fn beat(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyAny>,
        seq: Option<u64>,
        latency: Option<f64>,
    ) -> PyResult<bool> {
        let Ok(name) = topic.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "topic must be a str, got {}",
                super::type_name(topic)
            )));
        };
        let latency = match latency {
            None => NO_LATENCY,
            Some(l) if l.is_finite() => (l * 1e9).round() as i64,
            Some(l) => {
                return Err(PyValueError::new_err(format!(
                    "latency must be a finite number of seconds, got {l}"
                )))
            }
        };
        let name = name.to_str()?; // borrowed: the 3.10 limited API has it
        let intake = &self.intake;
        let det = intake.detector();
        // The common case, a known topic, without releasing the GIL: one lookup and one CAS.
        if let Some(handle) = det.lookup_handle(name) {
            let now = det.now_ns();
            let result = det.record_handle(handle, now);
            if det.needs_completion(result) {
                // May wait for room in a full "block" queue: never with the GIL.
                py.detach(|| det.complete(handle, result, now, seq.unwrap_or(NO_SEQ), latency));
            }
            return Ok(matches!(result, crate::detector::Beat::Recorded { .. }));
        }
        match py.detach(|| intake.beat_name(name, seq.unwrap_or(NO_SEQ), latency, None)) {
            Ok(recorded) => Ok(recorded),
            Err(why) => {
                // An invalid name: Python's own check raises the error users see everywhere
                // (naming the field, the value and what is wrong with it).
                py.import("heartwire.transport.patterns")?
                    .getattr("validate_topic")?
                    .call1((topic, "topic"))?;
                Err(PyValueError::new_err(why))
            }
        }
    }

    /// One beat for each name (a list of str, or an Arrow string array); unknown names are
    /// learned, invalid ones refused (``bad_topic``). How many were recorded.
    fn beat_many(&self, py: Python<'_>, names: &Bound<'_, PyAny>) -> PyResult<usize> {
        let intake = self.intake.clone();
        match batch::names(names)? {
            Names::Arrow(chunks) => Ok(py.detach(move || {
                batch::for_arrow_strs(&chunks, |it| intake.beat_names(it, None)).0
            })),
            Names::Python(obj) => {
                // Known names the detector's batch way (lookups a chunk at a time, one lock-free
                // record each); the others (copied) learned by the intake's rules.
                let det = intake.detector().clone();
                let mut found = batch::find_names(&det, &obj, true)?;
                let missing = std::mem::take(&mut found.missing);
                let b = found.record(&det, None);
                let mut recorded = if b.needs_finish() {
                    py.detach(|| det.finish(b).0)
                } else {
                    b.recorded
                };
                if !missing.is_empty() {
                    recorded +=
                        py.detach(|| intake.beat_names(missing.iter().map(String::as_str), None));
                }
                Ok(recorded)
            }
        }
    }

    /// Decode and record one message body that arrived on topic ``destination``: True if
    /// recorded, False if refused (counted) or ignored (not running), None if the native
    /// decoder is not sure (decode it with ``BeatCodec`` and call :meth:`record`).
    /// ``shard``: ``(shards, k)``, the body came from shard ``k``'s queue of a group of
    /// ``shards``: a beat of another shard's topic is refused (``wrong_shard``).
    #[pyo3(signature = (body, destination = None, *, shard = None))]
    fn ingest(
        &self,
        py: Python<'_>,
        body: &[u8],
        destination: Option<&str>,
        shard: Option<(i64, i64)>,
    ) -> PyResult<Option<bool>> {
        let shard = in_shard(shard)?;
        let outcome = py.detach(|| {
            self.intake
                .ingest_counted(body, destination, None, true, shard)
        });
        Ok(match outcome {
            Outcome::Recorded { .. } => Some(true),
            Outcome::Refused => Some(false),
            Outcome::Defer => None,
        })
    }

    /// Record a beat decoded elsewhere (its fields as :class:`heartwire.beat.Beat`'s);
    /// ``down``: it says ``"state":"down"`` (with ``reason``); ``shard``: as :meth:`ingest`'s.
    #[pyo3(signature = (topic, seq = None, boot = None, sent = None, period = None, down = false, reason = None, *, shard = None))]
    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        py: Python<'_>,
        topic: &str,
        seq: Option<u64>,
        boot: Option<&str>,
        sent: Option<f64>,
        period: Option<f64>,
        down: bool,
        reason: Option<&str>,
        shard: Option<(i64, i64)>,
    ) -> PyResult<bool> {
        let shard = in_shard(shard)?;
        let beat = Beat {
            topic,
            seq,
            boot: boot.map(std::borrow::Cow::Borrowed),
            sent,
            period,
            legacy: false,
            down,
            reason: reason.map(std::borrow::Cow::Borrowed),
        };
        Ok(matches!(
            py.detach(|| self.intake.record_in(&beat, None, shard)),
            Outcome::Recorded { .. }
        ))
    }

    /// Count a refusal found in Python (e.g. a body ``BeatCodec`` rejected), kept like the
    /// native ones.
    fn refuse(&self, reason: &str, detail: String) -> PyResult<()> {
        let Some(reason) = crate::ingest::intake::REASONS
            .iter()
            .find(|r| **r == reason)
        else {
            return Err(PyValueError::new_err(format!(
                "unknown refusal reason {reason:?}"
            )));
        };
        self.intake.refuse(reason, || detail);
        Ok(())
    }

    /// Whether refusals wait to be taken.
    #[getter]
    fn pending(&self) -> bool {
        self.intake.has_pending()
    }

    /// The refusals kept since the last call: ``(reason, detail, count of that reason)``.
    fn take_refusals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        refusals_list(py, &self.intake)
    }

    /// ``rejected`` (by reason), ``learned``, ``native`` (bodies decided by the native
    /// decoder), ``deferred`` (left to Python's), ``unreported`` (refusals counted but not
    /// kept with details).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let rejected = PyDict::new(py);
        for (reason, n) in self.intake.rejected() {
            rejected.set_item(reason, n)?;
        }
        let (learned, native, deferred, unreported) = self.intake.counters();
        d.set_item("rejected", rejected)?;
        d.set_item("learned", learned)?;
        d.set_item("native", native)?;
        d.set_item("deferred", deferred)?;
        d.set_item("unreported", unreported)?;
        Ok(d)
    }

    /// The period tracked for ``handle``, whether it is pinned, and the grace given to
    /// ``expect`` (NaN: the rule); None for a slot never used.
    fn tracked(&self, handle: u64) -> Option<(f64, bool, f64)> {
        self.intake.tracked(handle)
    }

    fn heap_bytes(&self) -> usize {
        self.intake.heap_bytes()
    }

    fn __repr__(&self) -> String {
        format!("<Intake {:?}>", self.intake.pattern())
    }
}

/// Where a routed subscription's beats go, and where their topic is read.
#[derive(Clone)]
struct Route {
    intake: Arc<Intake>,
    /// The topic is the beat's own (its body), not the frame's destination: a subscription to a
    /// monitor group's shard queue (`/queue/heartwire.<group>.<k>` on ActiveMQ), whose messages
    /// carry every topic of the shard.
    from_body: bool,
    /// With `from_body`: the shard of that queue (a beat of another shard's topic is refused).
    shard: Option<InShard>,
}

type RouteMap = HashMap<Vec<u8>, Route>;

/// Which STOMP subscription id feeds which :class:`Intake` (one per transport, shared by its
/// connections' :class:`FrameReader`\ s).
#[pyclass(name = "Routes", module = "heartwire._core", frozen)]
pub struct PyRoutes {
    map: Arc<Mutex<Arc<RouteMap>>>,
}

#[pymethods]
impl PyRoutes {
    #[new]
    fn new() -> Self {
        Self {
            map: Arc::new(Mutex::new(Arc::new(HashMap::new()))),
        }
    }

    /// Route MESSAGE frames of subscription ``sub_id`` to ``intake``. ``from_body``: each beat's
    /// topic is the one its body names (the intake's pattern still applies), whatever the
    /// frame's destination: for a queue carrying many topics (a monitor group's shard queue).
    /// Otherwise the destination must be the beat's topic (``/topic/<topic>``). ``shard``
    /// (with ``from_body``): ``(shards, k)``, the queue is shard ``k``'s of a group of
    /// ``shards``: a beat of another shard's topic is refused (``wrong_shard``, counted).
    #[pyo3(signature = (sub_id, intake, *, from_body = false, shard = None))]
    fn add(
        &self,
        sub_id: &str,
        intake: &Bound<'_, PyIntake>,
        from_body: bool,
        shard: Option<(i64, i64)>,
    ) -> PyResult<()> {
        let shard = in_shard(shard)?;
        if shard.is_some() && !from_body {
            return Err(PyValueError::new_err(
                "shard is for a route with from_body=True (a shard queue), got from_body=False",
            ));
        }
        let mut map = self.map.lock();
        let mut next = (**map).clone();
        let route = Route {
            intake: intake.get().intake.clone(),
            from_body,
            shard,
        };
        next.insert(sub_id.as_bytes().to_vec(), route);
        *map = Arc::new(next);
        Ok(())
    }

    /// Stop routing ``sub_id`` (its frames go to stomp.py again); False if it was not routed.
    fn remove(&self, sub_id: &str) -> bool {
        let mut map = self.map.lock();
        let mut next = (**map).clone();
        let found = next.remove(sub_id.as_bytes()).is_some();
        *map = Arc::new(next);
        found
    }

    fn __len__(&self) -> usize {
        self.map.lock().len()
    }
}

struct ReaderState {
    splitter: Splitter,
    out: Vec<u8>,
}

/// One connection's reader: :meth:`feed` takes the bytes read from the socket and returns
/// the frames that are not beats of a routed subscription, whole and in order, for stomp.py.
#[pyclass(name = "FrameReader", module = "heartwire._core", frozen)]
pub struct PyFrameReader {
    routes: Arc<Mutex<Arc<RouteMap>>>,
    state: Mutex<ReaderState>,
    consumed: AtomicU64,
    passed: AtomicU64,
    reads: AtomicU64,
    /// Transit (wall now minus send time) of the freshest beat of the last read, ns; -1: none.
    last_transit: AtomicU64,
}

/// The API topic of a destination (as `heartwire.transport.dialect`), if it is a topic.
fn topic_of(destination: &[u8]) -> Option<&str> {
    let rest = destination
        .strip_prefix(b"/topic/")
        .or_else(|| destination.strip_prefix(b"/exchange/amq.topic/"))?;
    std::str::from_utf8(rest).ok()
}

/// The largest output buffer a reader keeps between reads.
const OUT_KEEP: usize = 512 * 1024;

#[pymethods]
impl PyFrameReader {
    #[new]
    fn new(routes: &Bound<'_, PyRoutes>) -> Self {
        Self {
            routes: routes.get().map.clone(),
            state: Mutex::new(ReaderState {
                splitter: Splitter::new(),
                out: Vec::new(),
            }),
            consumed: AtomicU64::new(0),
            passed: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            last_transit: AtomicU64::new(u64::MAX),
        }
    }

    /// Take ``data`` read from the socket; return the complete frames stomp.py must see
    /// (b"" if none). ``backlogged``: more was waiting when the read returned (the intake's lag
    /// guard, ``Detector.note_intake``: each routed intake with beats in the read is told, with
    /// the transit of its freshest beat; one without is told only that a backlog ended).
    #[pyo3(signature = (data, backlogged = false))]
    fn feed<'py>(&self, py: Python<'py>, data: &[u8], backlogged: bool) -> Bound<'py, PyBytes> {
        let routes = self.routes.lock().clone();
        let buffer = py.detach(|| {
            let mut state = self.state.lock();
            let ReaderState { splitter, out } = &mut *state;
            out.clear();
            // Per intake fed by this read, the send time of its freshest beat.
            let mut freshest: Vec<(&Arc<Intake>, Option<f64>)> = Vec::new();
            let mut consumed = 0u64;
            let mut passed = 0u64;
            let now = wall_now();
            splitter.feed(data, out, |frame: &MessageFrame<'_>| {
                let verdict = route(&routes, frame, now, &mut freshest);
                match verdict {
                    Verdict::Consumed => consumed += 1,
                    Verdict::Pass => passed += 1,
                }
                verdict
            });
            self.consumed.fetch_add(consumed, Ordering::Relaxed);
            self.passed.fetch_add(passed, Ordering::Relaxed);
            self.reads.fetch_add(1, Ordering::Relaxed);
            // The lag guard's input: every routed intake learns whether this read found a
            // backlog, and how old the freshest beat read for it was (see `note_intake`).
            let mut last = u64::MAX;
            // (Several routes may feed one intake, e.g. a group member's shard queues: each
            // intake is told once.)
            let mut told: Vec<&Arc<Intake>> = Vec::new();
            for intake in routes.values().map(|r| &r.intake) {
                if told.iter().any(|i| Arc::ptr_eq(i, intake)) {
                    continue;
                }
                told.push(intake);
                match freshest.iter().find(|(i, _)| Arc::ptr_eq(i, intake)) {
                    Some((_, sent)) => {
                        let transit = sent.map(|s| ((now - s).max(0.0) * 1e9) as u64);
                        if let Some(t) = transit {
                            last = last.min(t);
                        }
                        intake.detector().note_intake(backlogged, transit, None);
                    }
                    // No beat of its own in this read: a backlog of other traffic says nothing
                    // about it (no hold starts); no backlog ends its hold.
                    None if !backlogged => intake.detector().note_intake(false, None, None),
                    None => {}
                }
            }
            self.last_transit.store(last, Ordering::Relaxed);
            std::mem::take(out)
        });
        let bytes = PyBytes::new(py, &buffer);
        let mut state = self.state.lock();
        if state.out.capacity() < buffer.capacity() && buffer.capacity() <= OUT_KEEP {
            state.out = buffer; // keep the larger buffer for the next read, up to a bound
        }
        bytes
    }

    /// Bytes of a partial frame held for the next read.
    #[getter]
    fn pending(&self) -> usize {
        self.state.lock().splitter.pending()
    }

    /// ``consumed`` (beat frames taken by an intake), ``passed`` (MESSAGE frames left to
    /// stomp.py), ``reads``, ``last_transit`` (seconds, or None).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("consumed", self.consumed.load(Ordering::Relaxed))?;
        d.set_item("passed", self.passed.load(Ordering::Relaxed))?;
        d.set_item("reads", self.reads.load(Ordering::Relaxed))?;
        let t = self.last_transit.load(Ordering::Relaxed);
        d.set_item("last_transit", (t != u64::MAX).then(|| t as f64 / 1e9))?;
        Ok(d)
    }
}

/// What to do with one MESSAGE frame: record it if it is a beat of a routed subscription that
/// the native path can decide; else leave it to stomp.py (and the Python path).
fn route<'r>(
    routes: &'r RouteMap,
    frame: &MessageFrame<'_>,
    now: f64,
    freshest: &mut Vec<(&'r Arc<Intake>, Option<f64>)>,
) -> Verdict {
    let Some(route) = frame.subscription.and_then(|s| routes.get(s)) else {
        return Verdict::Pass;
    };
    let intake = &route.intake;
    if route.from_body {
        // The topic is the beat's: decoded from the body, checked against the pattern and the
        // queue's shard by the intake like any beat's (a refusal is counted and reported).
        if !intake.running() {
            return Verdict::Consumed;
        }
        return recorded(
            intake,
            intake.ingest_counted(frame.body, None, None, false, route.shard),
            now,
            freshest,
        );
    }
    // (Other headers may hold escapes, e.g. ActiveMQ's message-id: only these two matter.)
    let Some(destination) = frame.destination else {
        return Verdict::Pass;
    };
    // A topic with ':' arrives escaped (`\c`) from both brokers: decode it as stomp.py would.
    let mut unescaped = Vec::new();
    let destination = if memchr::memchr(b'\\', destination).is_some() {
        if !Splitter::unescape_header(destination, &mut unescaped) {
            return Verdict::Pass; // a bad escape: stomp.py decides
        }
        &unescaped[..]
    } else {
        destination
    };
    let Some(topic) = topic_of(destination) else {
        return Verdict::Pass;
    };
    if reserved_topic(topic) || !intake.matches(topic) {
        // heartwire's own (another transport's ping, a control message), or a broker
        // wildcard wider than ours: stomp.py decides.
        return Verdict::Pass;
    }
    if !intake.running() {
        // Stopped (its subscription is being cancelled): a beat now would be ignored, and a
        // refusal would be reported to the next run.
        return Verdict::Consumed;
    }
    recorded(
        intake,
        intake.ingest_counted(frame.body, Some(topic), None, false, None),
        now,
        freshest,
    )
}

/// The verdict on a frame the intake took in (`outcome`), noting a recorded beat's send time
/// for the read's freshest transit.
fn recorded<'r>(
    intake: &'r Arc<Intake>,
    outcome: Outcome,
    now: f64,
    freshest: &mut Vec<(&'r Arc<Intake>, Option<f64>)>,
) -> Verdict {
    match outcome {
        Outcome::Recorded { sent } => {
            // A send time in the future (a publisher's clock ahead) says nothing about this
            // reader's lag: left out, so it cannot hide the others' transit.
            let sent = sent.filter(|s| *s <= now);
            match freshest.iter_mut().find(|(i, _)| Arc::ptr_eq(i, intake)) {
                Some((_, f)) => {
                    if let Some(s) = sent {
                        *f = Some(f.map_or(s, |f: f64| f.max(s)));
                    }
                }
                None => freshest.push((intake, sent)),
            }
            Verdict::Consumed
        }
        Outcome::Refused => Verdict::Consumed,
        Outcome::Defer => Verdict::Pass,
    }
}
