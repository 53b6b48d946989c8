//! Arrow entry points of the Spark kernels (`heartwire.spark`): freshness over columns and the
//! per-topic gap kernel. Arrays come in through the Arrow PyCapsule interface without a copy,
//! are computed with the GIL released, and go back as pyarrow objects.
//!
//! Time columns may be Arrow timestamps (any unit; converted to epoch ms, rounding down) or
//! integers (epoch ms): read by `arrow_in`, like the detector's batch inputs. A timestamp without a time zone (Spark's TIMESTAMP_NTZ) is read as UTC
//! wall-clock time, as `heartwire.spark` reads it on the Spark side. Periods are integer
//! milliseconds.

use super::arrow_out::PyArrowArray;
use super::{arrow_in, type_name};
use crate::kernels::freshness::{freshness, Status};
use crate::kernels::gaps::{self, Beat, GapConfig, Outage};
use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StructArray};
use arrow_schema::{DataType, Field, Fields, Schema};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::sync::Arc;

fn freshness_fields() -> Fields {
    Fields::from(vec![
        Field::new("status", DataType::Utf8, true),
        Field::new("missed", DataType::Int64, true),
        Field::new("staleness_ms", DataType::Int64, true),
    ])
}

/// Freshness of every row (see `kernels::freshness`): a struct array
/// `struct<status: string, missed: int64, staleness_ms: int64>`.
#[pyfunction]
#[pyo3(signature = (last_seen, period_ms, as_of, allowed_misses = 1))]
pub fn freshness_kernel<'py>(
    py: Python<'py>,
    last_seen: &Bound<'py, PyAny>,
    period_ms: &Bound<'py, PyAny>,
    as_of: &Bound<'py, PyAny>,
    allowed_misses: i64,
) -> PyResult<Bound<'py, PyAny>> {
    check_allowed_misses(allowed_misses)?;
    let last = match arrow_in::chunks(last_seen)?.as_deref() {
        Some([array]) => array.clone(),
        Some(parts) => {
            return Err(PyValueError::new_err(format!(
                "last_seen must be one Arrow array, got {} chunks",
                parts.len()
            )))
        }
        None => {
            return Err(PyTypeError::new_err(format!(
                "last_seen must be an Arrow array, got {}",
                type_name(last_seen)
            )))
        }
    };
    let n = last.len();
    let like = [last];
    let period = PerRow::extract("period_ms", period_ms, "last_seen", &like)?;
    let as_of = PerRow::extract("as_of", as_of, "last_seen", &like)?;
    let out = py.detach(move || -> PyResult<StructArray> {
        let period = period.to_ms("period_ms")?;
        let as_of = as_of.to_ms("as_of")?;
        let last = arrow_in::to_ms("last_seen", &like[0])?;
        let mut status = StringBuilder::with_capacity(n, n * 6);
        let mut missed = Int64Builder::with_capacity(n);
        let mut staleness = Int64Builder::with_capacity(n);
        let rows = last.iter().zip(period.chunk(0)).zip(as_of.chunk(0));
        for ((last, period), as_of) in rows {
            let f = freshness(last, period, as_of, allowed_misses);
            status.append_option(f.status.map(Status::as_str));
            missed.append_option(f.missed);
            staleness.append_option(f.staleness_ms);
        }
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(status.finish()),
            Arc::new(missed.finish()),
            Arc::new(staleness.finish()),
        ];
        Ok(StructArray::new(freshness_fields(), arrays, None))
    })?;
    PyArrowArray::to_pyarrow(py, "freshness", Arc::new(out))
}

/// The chunks of an array argument (see [`arrow_in::chunks`]), or a `TypeError` naming it.
fn arrays(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<ArrayRef>> {
    arrow_in::chunks(obj)?.ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{name} must be an Arrow array, a chunked array or a list of arrays, got {}",
            type_name(obj)
        ))
    })
}

/// Whether two arguments are chunked alike: as many chunks, of the same lengths.
fn aligned(a: &[ArrayRef], b: &[ArrayRef]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.len() == y.len())
}

/// An argument with a value per row (a period, a time): one value for all rows (an int, or
/// None), or arrays chunked like the rows (`A`: `ArrayRef` as passed, `Int64Array` once read
/// as ms).
enum PerRow<A> {
    Uniform(Option<i64>),
    Arrays(Vec<A>),
}

impl PerRow<ArrayRef> {
    /// Argument `name` (`obj`) checked against the chunks it must match (`like`, the argument
    /// `like_name`).
    fn extract(
        name: &str,
        obj: &Bound<'_, PyAny>,
        like_name: &str,
        like: &[ArrayRef],
    ) -> PyResult<Self> {
        if obj.is_none() {
            return Ok(PerRow::Uniform(None));
        }
        if let Ok(v) = obj.extract::<i64>() {
            return Ok(PerRow::Uniform(Some(v)));
        }
        let Some(p) = arrow_in::chunks(obj)? else {
            return Err(PyTypeError::new_err(format!(
                "{name} must be an int, None or Arrow arrays like {like_name}, got {}",
                type_name(obj)
            )));
        };
        if !aligned(&p, like) {
            return Err(PyValueError::new_err(format!(
                "{name} arrays must have the chunk lengths of {like_name}"
            )));
        }
        Ok(PerRow::Arrays(p))
    }

    /// The arrays read as ms (a `TypeError` naming `name` for another type).
    fn to_ms(&self, name: &str) -> PyResult<PerRow<Int64Array>> {
        Ok(match self {
            PerRow::Uniform(v) => PerRow::Uniform(*v),
            PerRow::Arrays(p) => PerRow::Arrays(
                p.iter()
                    .map(|c| arrow_in::to_ms(name, c))
                    .collect::<PyResult<_>>()?,
            ),
        })
    }
}

impl PerRow<Int64Array> {
    /// The value of each row of chunk `k`, in order.
    fn chunk(&self, k: usize) -> PerRowIter<'_> {
        match self {
            PerRow::Uniform(v) => PerRowIter::Uniform(*v),
            PerRow::Arrays(p) => PerRowIter::Array(p[k].iter()),
        }
    }
}

/// See [`PerRow::chunk`]: an enum, not a boxed iterator, to stay inlined per row.
enum PerRowIter<'a> {
    Uniform(Option<i64>),
    Array(arrow_array::iterator::PrimitiveIter<'a, Int64Type>),
}

impl Iterator for PerRowIter<'_> {
    type Item = Option<i64>;

    #[inline]
    fn next(&mut self) -> Option<Option<i64>> {
        match self {
            PerRowIter::Uniform(v) => Some(*v),
            PerRowIter::Array(it) => it.next(),
        }
    }
}

fn check_allowed_misses(allowed_misses: i64) -> PyResult<()> {
    if allowed_misses < 1 {
        return Err(PyValueError::new_err(format!(
            "allowed_misses must be an int >= 1, got {allowed_misses}"
        )));
    }
    Ok(())
}

/// The `ts` chunks as epoch ms (the error names `ts`).
fn times_ms(ts_chunks: &[ArrayRef]) -> PyResult<Vec<Int64Array>> {
    ts_chunks.iter().map(|c| arrow_in::to_ms("ts", c)).collect()
}

/// The beats of one topic from its time chunks and periods; rows with a null time skipped.
fn read_beats(ts: &Bound<'_, PyAny>, period_ms: &Bound<'_, PyAny>) -> PyResult<Vec<Beat>> {
    let ts_chunks = arrays("ts", ts)?;
    let periods = PerRow::extract("period_ms", period_ms, "ts", &ts_chunks)?;
    let ts_ms = times_ms(&ts_chunks)?;
    let periods = periods.to_ms("period_ms")?;
    let mut beats = Vec::with_capacity(ts_chunks.iter().map(|c| c.len()).sum());
    for (k, ms) in ts_ms.iter().enumerate() {
        beats.extend(ms.iter().zip(periods.chunk(k)).filter_map(|(t, p)| {
            t.map(|ts_ms| Beat {
                ts_ms,
                period_ms: p,
            })
        }));
    }
    Ok(beats)
}

fn gap_config(
    allowed_misses: i64,
    start_ms: Option<i64>,
    end_ms: i64,
    expect_from_start: bool,
) -> PyResult<GapConfig> {
    check_allowed_misses(allowed_misses)?;
    if let Some(start) = start_ms.filter(|&s| s >= end_ms) {
        return Err(PyValueError::new_err(format!(
            "start_ms must be before end_ms, got {start} >= {end_ms}"
        )));
    }
    Ok(GapConfig {
        allowed_misses,
        start_ms,
        end_ms,
        expect_from_start,
    })
}

/// Outages of one topic (see `kernels::gaps`): `(window_start_ms, batch)` with the batch's
/// columns `down_from_ms`, `down_to_ms`, `missed` (int64), `open`, `began_in_window` (bool),
/// `last_beat_ms`, `period_ms` (int64: the deadlines are `last_beat_ms + k × period_ms`),
/// or None when the topic has no beat before `end_ms`. `expect_from_start`: a topic with no
/// beat before `start_ms` is expected from it (false: judged from its first beat).
#[pyfunction]
#[pyo3(signature = (ts, period_ms, allowed_misses, end_ms, start_ms = None, expect_from_start = true))]
pub fn outages_kernel<'py>(
    py: Python<'py>,
    ts: &Bound<'py, PyAny>,
    period_ms: &Bound<'py, PyAny>,
    allowed_misses: i64,
    end_ms: i64,
    start_ms: Option<i64>,
    expect_from_start: bool,
) -> PyResult<Option<(i64, Bound<'py, PyAny>)>> {
    let cfg = gap_config(allowed_misses, start_ms, end_ms, expect_from_start)?;
    let mut beats = read_beats(ts, period_ms)?;
    let result = py.detach(move || {
        let (window_start, rows) = gaps::outages(&mut beats, &cfg)?;
        let mut columns = OutageColumns::with_capacity(rows.len());
        rows.iter().for_each(|o| columns.push(o));
        let batch = record_batch(columns.finish());
        Some((window_start, batch))
    });
    result
        .map(|(start, batch)| Ok((start, PyArrowArray::record_batch_to_pyarrow(py, batch)?)))
        .transpose()
}

/// One topic's availability row (see `kernels::gaps`): `(window_start_ms, window_end_ms,
/// uptime_pct, outages, downtime_ms, mttr_ms, mtbf_ms)`, or None when the topic has no beat
/// before `end_ms` (`expect_from_start` as for `outages_kernel`).
#[allow(clippy::type_complexity)]
#[pyfunction]
#[pyo3(signature = (ts, period_ms, allowed_misses, end_ms, start_ms = None, expect_from_start = true))]
pub fn availability_kernel(
    py: Python<'_>,
    ts: &Bound<'_, PyAny>,
    period_ms: &Bound<'_, PyAny>,
    allowed_misses: i64,
    end_ms: i64,
    start_ms: Option<i64>,
    expect_from_start: bool,
) -> PyResult<Option<(i64, i64, f64, i64, i64, Option<f64>, Option<f64>)>> {
    let cfg = gap_config(allowed_misses, start_ms, end_ms, expect_from_start)?;
    let mut beats = read_beats(ts, period_ms)?;
    Ok(py.detach(move || {
        let (window_start, rows) = gaps::outages(&mut beats, &cfg)?;
        let a = gaps::availability(window_start, cfg.end_ms, &rows);
        Some((
            a.window_start_ms,
            a.window_end_ms,
            a.uptime_pct,
            a.outages,
            a.downtime_ms,
            a.mttr_ms,
            a.mtbf_ms,
        ))
    }))
}

/// Outages or availability of every topic in a batch of beats of many topics, in any order
/// (one Spark partition, hash partitioned by topic): a `pyarrow.RecordBatch` with columns
/// `topic, down_from_ms, down_to_ms, missed, open, began_in_window, last_beat_ms, period_ms`
/// (outages) or `topic,
/// window_start_ms, window_end_ms, uptime_pct, outages, downtime_ms, mttr_ms, mtbf_ms`
/// (`availability=True`). `topics` and `ts` are Arrow arrays or lists of them chunked alike;
/// `period_ms` an int or arrays chunked like them. Rows with a null topic or time are skipped.
/// `expect_from_start` as for `outages_kernel`.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (topics, ts, period_ms, allowed_misses, end_ms, start_ms = None, availability = false, expect_from_start = true))]
pub fn partition_kernel<'py>(
    py: Python<'py>,
    topics: &Bound<'py, PyAny>,
    ts: &Bound<'py, PyAny>,
    period_ms: &Bound<'py, PyAny>,
    allowed_misses: i64,
    end_ms: i64,
    start_ms: Option<i64>,
    availability: bool,
    expect_from_start: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let cfg = gap_config(allowed_misses, start_ms, end_ms, expect_from_start)?;
    let topic_chunks = arrays("topics", topics)?;
    let ts_chunks = arrays("ts", ts)?;
    if !aligned(&ts_chunks, &topic_chunks) {
        return Err(PyValueError::new_err(
            "topics and ts must be arrays of the same lengths",
        ));
    }
    let periods = PerRow::extract("period_ms", period_ms, "topics", &topic_chunks)?;
    let batch = py.detach(move || -> PyResult<RecordBatch> {
        let ts_ms = times_ms(&ts_chunks)?;
        let periods = periods.to_ms("period_ms")?;
        arrow_in::check_strings("topics", &topic_chunks)?;
        let beats = topic_chunks
            .iter()
            .enumerate()
            .flat_map(|(k, topics)| {
                arrow_in::strs(topics)
                    .zip(ts_ms[k].iter())
                    .zip(periods.chunk(k))
            })
            .filter_map(|((topic, ts), p)| {
                Some((
                    topic?,
                    Beat {
                        ts_ms: ts?,
                        period_ms: p,
                    },
                ))
            });
        let groups = gaps::group_by_topic(beats);
        if availability {
            Ok(availability_batch(groups, &cfg))
        } else {
            Ok(outages_batch(groups, &cfg))
        }
    })?;
    PyArrowArray::record_batch_to_pyarrow(py, batch)
}

type Groups<'a> = hashbrown::HashMap<&'a str, Vec<Beat>, foldhash::fast::FixedState>;

/// A column of a result batch: its name, values and whether it may hold nulls.
type OutColumn = (&'static str, ArrayRef, bool);

/// A batch of `columns`, in order.
fn record_batch(columns: Vec<OutColumn>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array, nullable)| Field::new(*name, array.data_type().clone(), *nullable))
        .collect();
    let arrays = columns.into_iter().map(|(_, array, _)| array).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("matching columns")
}

/// The columns of outage rows (`kernels::gaps::Outage`), built a row at a time.
struct OutageColumns {
    from: Int64Builder,
    to: Int64Builder,
    missed: Int64Builder,
    open: BooleanBuilder,
    began: BooleanBuilder,
    last: Int64Builder,
    period: Int64Builder,
}

impl OutageColumns {
    fn with_capacity(n: usize) -> Self {
        Self {
            from: Int64Builder::with_capacity(n),
            to: Int64Builder::with_capacity(n),
            missed: Int64Builder::with_capacity(n),
            open: BooleanBuilder::with_capacity(n),
            began: BooleanBuilder::with_capacity(n),
            last: Int64Builder::with_capacity(n),
            period: Int64Builder::with_capacity(n),
        }
    }

    fn push(&mut self, o: &Outage) {
        self.from.append_value(o.down_from_ms);
        self.to.append_value(o.down_to_ms);
        self.missed.append_value(o.missed);
        self.open.append_value(o.open);
        self.began.append_value(o.began_in_window);
        self.last.append_value(o.last_beat_ms);
        self.period.append_value(o.period_ms);
    }

    fn finish(mut self) -> Vec<OutColumn> {
        vec![
            ("down_from_ms", Arc::new(self.from.finish()), false),
            ("down_to_ms", Arc::new(self.to.finish()), false),
            ("missed", Arc::new(self.missed.finish()), false),
            ("open", Arc::new(self.open.finish()), false),
            ("began_in_window", Arc::new(self.began.finish()), false),
            ("last_beat_ms", Arc::new(self.last.finish()), false),
            ("period_ms", Arc::new(self.period.finish()), false),
        ]
    }
}

/// The outages of every topic of a partition, each row led by its topic.
fn outages_batch(groups: Groups<'_>, cfg: &GapConfig) -> RecordBatch {
    let mut topic = StringBuilder::new();
    let mut columns = OutageColumns::with_capacity(0);
    for (name, mut beats) in groups {
        let Some((_, rows)) = gaps::outages(&mut beats, cfg) else {
            continue;
        };
        for o in &rows {
            topic.append_value(name);
            columns.push(o);
        }
    }
    let mut all: Vec<OutColumn> = vec![("topic", Arc::new(topic.finish()), false)];
    all.extend(columns.finish());
    record_batch(all)
}

/// The availability of every topic of a partition: a row a topic.
fn availability_batch(groups: Groups<'_>, cfg: &GapConfig) -> RecordBatch {
    let mut topic = StringBuilder::new();
    let mut w_start = Int64Builder::new();
    let mut w_end = Int64Builder::new();
    let mut uptime = Float64Builder::new();
    let mut outages = Int64Builder::new();
    let mut downtime = Int64Builder::new();
    let mut mttr = Float64Builder::new();
    let mut mtbf = Float64Builder::new();
    for (name, mut beats) in groups {
        let Some((window_start, rows)) = gaps::outages(&mut beats, cfg) else {
            continue;
        };
        let a = gaps::availability(window_start, cfg.end_ms, &rows);
        topic.append_value(name);
        w_start.append_value(a.window_start_ms);
        w_end.append_value(a.window_end_ms);
        uptime.append_value(a.uptime_pct);
        outages.append_value(a.outages);
        downtime.append_value(a.downtime_ms);
        mttr.append_option(a.mttr_ms);
        mtbf.append_option(a.mtbf_ms);
    }
    record_batch(vec![
        ("topic", Arc::new(topic.finish()), false),
        ("window_start_ms", Arc::new(w_start.finish()), false),
        ("window_end_ms", Arc::new(w_end.finish()), false),
        ("uptime_pct", Arc::new(uptime.finish()), false),
        ("outages", Arc::new(outages.finish()), false),
        ("downtime_ms", Arc::new(downtime.finish()), false),
        ("mttr_ms", Arc::new(mttr.finish()), true),
        ("mtbf_ms", Arc::new(mtbf.finish()), true),
    ])
}
