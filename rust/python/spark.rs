//! Arrow entry points of the Spark kernels (`heartwire.spark`): freshness over columns and the
//! per-topic gap kernel. Arrays come in through the Arrow PyCapsule interface without a copy,
//! are computed with the GIL released, and go back as pyarrow objects.
//!
//! Time columns may be Arrow timestamps (any unit; converted to epoch ms, rounding down) or
//! integers (epoch ms): read by `arrow_in`, like the detector's batch inputs. A timestamp without a time zone (Spark's TIMESTAMP_NTZ) is read as UTC
//! wall-clock time, as `heartwire.spark` reads it on the Spark side. Periods are integer
//! milliseconds.

use super::{arrow_in, type_name};
use crate::kernels::freshness::{freshness, Status};
use crate::kernels::gaps::{self, Beat, GapConfig};
use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StructArray};
use arrow_schema::{DataType, Field, Fields, Schema};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3_arrow::{PyArray, PyRecordBatch};
use std::sync::Arc;

/// A column argument: an array of the batch's length, or one value (an int or None) for all
/// rows.
enum Column {
    Array(Int64Array),
    Scalar(Option<i64>),
}

impl Column {
    fn extract(name: &str, obj: &Bound<'_, PyAny>, len: usize) -> PyResult<Self> {
        if obj.is_none() {
            return Ok(Column::Scalar(None));
        }
        if let Ok(v) = obj.extract::<i64>() {
            return Ok(Column::Scalar(Some(v)));
        }
        let Some(parts) = arrow_in::chunks(obj)? else {
            return Err(PyTypeError::new_err(format!(
                "{name} must be an Arrow array, an int or None, got {}",
                type_name(obj)
            )));
        };
        let [array] = parts.as_slice() else {
            return Err(PyValueError::new_err(format!(
                "{name} must be one Arrow array, got {} chunks",
                parts.len()
            )));
        };
        if array.len() != len {
            return Err(PyValueError::new_err(format!(
                "{name} has {} rows, last_seen has {len}",
                array.len()
            )));
        }
        Ok(Column::Array(arrow_in::to_ms(name, array)?))
    }

    #[inline]
    fn get(&self, i: usize) -> Option<i64> {
        match self {
            Column::Array(a) => a.is_valid(i).then(|| a.value(i)),
            Column::Scalar(v) => *v,
        }
    }
}

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
    if allowed_misses < 1 {
        return Err(PyValueError::new_err(format!(
            "allowed_misses must be an int >= 1, got {allowed_misses}"
        )));
    }
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
    let period = Column::extract("period_ms", period_ms, n)?;
    let as_of = Column::extract("as_of", as_of, n)?;
    let out = py.detach(move || -> PyResult<StructArray> {
        let last = arrow_in::to_ms("last_seen", &last)?;
        let mut status = StringBuilder::with_capacity(n, n * 6);
        let mut missed = Int64Builder::with_capacity(n);
        let mut staleness = Int64Builder::with_capacity(n);
        for (i, last) in last.iter().enumerate() {
            let f = freshness(last, period.get(i), as_of.get(i), allowed_misses);
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
    let field = Field::new("freshness", out.data_type().clone(), false);
    let array = PyArray::new(Arc::new(out), Arc::new(field));
    let exported = array.to_pyarrow(py)?.unbind();
    Ok(exported.into_bound(py))
}

/// The beats of one topic from its time chunks and periods (an int, or arrays chunked like
/// the times).
fn read_beats(ts: &Bound<'_, PyAny>, period_ms: &Bound<'_, PyAny>) -> PyResult<Vec<Beat>> {
    let Some(ts_chunks) = arrow_in::chunks(ts)? else {
        return Err(PyTypeError::new_err(format!(
            "ts must be an Arrow array, a chunked array or a list of arrays, got {}",
            type_name(ts)
        )));
    };
    let uniform = if period_ms.is_none() {
        Some(None)
    } else {
        period_ms.extract::<i64>().ok().map(Some)
    };
    let period_chunks = match uniform {
        Some(_) => None,
        None => {
            let Some(p) = arrow_in::chunks(period_ms)? else {
                return Err(PyTypeError::new_err(format!(
                    "period_ms must be an int or Arrow arrays like ts, got {}",
                    type_name(period_ms)
                )));
            };
            let same = p.len() == ts_chunks.len()
                && p.iter().zip(&ts_chunks).all(|(a, b)| a.len() == b.len());
            if !same {
                return Err(PyValueError::new_err(
                    "period_ms arrays must have the chunk lengths of ts",
                ));
            }
            Some(p)
        }
    };
    let mut beats = Vec::with_capacity(ts_chunks.iter().map(|c| c.len()).sum());
    for (k, chunk) in ts_chunks.iter().enumerate() {
        let ms = arrow_in::to_ms("ts", chunk)?;
        match (&period_chunks, uniform) {
            (Some(p), _) => {
                let periods = arrow_in::to_ms("period_ms", &p[k])?;
                beats.extend(ms.iter().zip(periods.iter()).filter_map(|(t, p)| {
                    t.map(|ts_ms| Beat {
                        ts_ms,
                        period_ms: p,
                    })
                }));
            }
            (None, period) => {
                let period = period.flatten();
                beats.extend(ms.iter().flatten().map(|ts_ms| Beat {
                    ts_ms,
                    period_ms: period,
                }));
            }
        }
    }
    Ok(beats)
}

fn gap_config(
    allowed_misses: i64,
    start_ms: Option<i64>,
    end_ms: i64,
    expect_from_start: bool,
) -> PyResult<GapConfig> {
    if allowed_misses < 1 {
        return Err(PyValueError::new_err(format!(
            "allowed_misses must be an int >= 1, got {allowed_misses}"
        )));
    }
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
        let n = rows.len();
        let mut from = Int64Builder::with_capacity(n);
        let mut to = Int64Builder::with_capacity(n);
        let mut missed = Int64Builder::with_capacity(n);
        let mut open = BooleanBuilder::with_capacity(n);
        let mut began = BooleanBuilder::with_capacity(n);
        let mut last = Int64Builder::with_capacity(n);
        let mut period = Int64Builder::with_capacity(n);
        for o in &rows {
            from.append_value(o.down_from_ms);
            to.append_value(o.down_to_ms);
            missed.append_value(o.missed);
            open.append_value(o.open);
            began.append_value(o.began_in_window);
            last.append_value(o.last_beat_ms);
            period.append_value(o.period_ms);
        }
        let schema = Schema::new(vec![
            Field::new("down_from_ms", DataType::Int64, false),
            Field::new("down_to_ms", DataType::Int64, false),
            Field::new("missed", DataType::Int64, false),
            Field::new("open", DataType::Boolean, false),
            Field::new("began_in_window", DataType::Boolean, false),
            Field::new("last_beat_ms", DataType::Int64, false),
            Field::new("period_ms", DataType::Int64, false),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(from.finish()),
            Arc::new(to.finish()),
            Arc::new(missed.finish()),
            Arc::new(open.finish()),
            Arc::new(began.finish()),
            Arc::new(last.finish()),
            Arc::new(period.finish()),
        ];
        let batch = RecordBatch::try_new(Arc::new(schema), columns).expect("matching columns");
        Some((window_start, batch))
    });
    result
        .map(|(start, batch)| Ok((start, PyRecordBatch::new(batch).into_pyarrow(py)?)))
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
    let arrays = |name: &str, obj: &Bound<'py, PyAny>| -> PyResult<Vec<ArrayRef>> {
        arrow_in::chunks(obj)?.ok_or_else(|| {
            PyTypeError::new_err(format!(
                "{name} must be an Arrow array or a list of arrays, got {}",
                type_name(obj)
            ))
        })
    };
    let topic_chunks = arrays("topics", topics)?;
    let ts_chunks = arrays("ts", ts)?;
    let aligned = |other: &[ArrayRef]| {
        other.len() == topic_chunks.len()
            && other
                .iter()
                .zip(&topic_chunks)
                .all(|(a, b)| a.len() == b.len())
    };
    if !aligned(&ts_chunks) {
        return Err(PyValueError::new_err(
            "topics and ts must be arrays of the same lengths",
        ));
    }
    let uniform = if period_ms.is_none() {
        Some(None)
    } else {
        period_ms.extract::<i64>().ok().map(Some)
    };
    let period_chunks = match uniform {
        Some(_) => None,
        None => {
            let p = arrays("period_ms", period_ms)?;
            if !aligned(&p) {
                return Err(PyValueError::new_err(
                    "period_ms arrays must have the lengths of topics",
                ));
            }
            Some(p)
        }
    };
    let batch = py.detach(move || -> PyResult<RecordBatch> {
        let ts_ms = ts_chunks
            .iter()
            .map(|c| arrow_in::to_ms("ts", c))
            .collect::<PyResult<Vec<_>>>()?;
        let periods: Option<Vec<Int64Array>> = period_chunks
            .as_ref()
            .map(|p| p.iter().map(|c| arrow_in::to_ms("period_ms", c)).collect())
            .transpose()?;
        arrow_in::check_strings("topics", &topic_chunks)?;
        let uniform = uniform.flatten();
        let mut rows = Vec::with_capacity(topic_chunks.len());
        for (k, topic_chunk) in topic_chunks.iter().enumerate() {
            let names = arrow_in::strs(topic_chunk);
            let times = ts_ms[k].iter();
            let per: Box<dyn Iterator<Item = Option<i64>> + Send> = match &periods {
                Some(p) => Box::new(p[k].iter()),
                None => Box::new(std::iter::repeat(uniform)),
            };
            rows.push(names.zip(times).zip(per));
        }
        let beats = rows.into_iter().flatten().filter_map(|((topic, ts), p)| {
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
    PyRecordBatch::new(batch).into_pyarrow(py)
}

type Groups<'a> = hashbrown::HashMap<&'a str, Vec<Beat>, foldhash::fast::FixedState>;

fn outages_batch(groups: Groups<'_>, cfg: &GapConfig) -> RecordBatch {
    let mut topic = StringBuilder::new();
    let mut from = Int64Builder::new();
    let mut to = Int64Builder::new();
    let mut missed = Int64Builder::new();
    let mut open = BooleanBuilder::new();
    let mut began = BooleanBuilder::new();
    let mut last = Int64Builder::new();
    let mut period = Int64Builder::new();
    for (name, mut beats) in groups {
        let Some((_, rows)) = gaps::outages(&mut beats, cfg) else {
            continue;
        };
        for o in rows {
            topic.append_value(name);
            from.append_value(o.down_from_ms);
            to.append_value(o.down_to_ms);
            missed.append_value(o.missed);
            open.append_value(o.open);
            began.append_value(o.began_in_window);
            last.append_value(o.last_beat_ms);
            period.append_value(o.period_ms);
        }
    }
    let schema = Schema::new(vec![
        Field::new("topic", DataType::Utf8, false),
        Field::new("down_from_ms", DataType::Int64, false),
        Field::new("down_to_ms", DataType::Int64, false),
        Field::new("missed", DataType::Int64, false),
        Field::new("open", DataType::Boolean, false),
        Field::new("began_in_window", DataType::Boolean, false),
        Field::new("last_beat_ms", DataType::Int64, false),
        Field::new("period_ms", DataType::Int64, false),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(topic.finish()),
        Arc::new(from.finish()),
        Arc::new(to.finish()),
        Arc::new(missed.finish()),
        Arc::new(open.finish()),
        Arc::new(began.finish()),
        Arc::new(last.finish()),
        Arc::new(period.finish()),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).expect("matching columns")
}

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
    let schema = Schema::new(vec![
        Field::new("topic", DataType::Utf8, false),
        Field::new("window_start_ms", DataType::Int64, false),
        Field::new("window_end_ms", DataType::Int64, false),
        Field::new("uptime_pct", DataType::Float64, false),
        Field::new("outages", DataType::Int64, false),
        Field::new("downtime_ms", DataType::Int64, false),
        Field::new("mttr_ms", DataType::Float64, true),
        Field::new("mtbf_ms", DataType::Float64, true),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(topic.finish()),
        Arc::new(w_start.finish()),
        Arc::new(w_end.finish()),
        Arc::new(uptime.finish()),
        Arc::new(outages.finish()),
        Arc::new(downtime.finish()),
        Arc::new(mttr.finish()),
        Arc::new(mtbf.finish()),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).expect("matching columns")
}
