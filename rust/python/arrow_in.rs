//! Arrow input from Python, one reader for every binding: an argument's Arrow chunks, taken
//! without a copy through the Arrow PyCapsule interface (`__arrow_c_array__`,
//! `__arrow_c_stream__`, read by pyo3-arrow, no `unsafe` here), the strings of a string chunk,
//! and a time or integer chunk as epoch milliseconds.
//!
//! Used by the detector's batch inputs (`batch.rs`: `beat_many`, `add_many`, `beat_handles`)
//! and the Spark kernels (`spark.rs`). The chunks are `Send`: callers check their types with
//! the GIL held (errors name the argument), then read them with it released.

use arrow_array::cast::AsArray;
use arrow_array::iterator::{ArrayIter, GenericStringIter};
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, Int64Array, StringViewArray};
use arrow_schema::{DataType, TimeUnit};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3_arrow::{PyArray, PyChunkedArray};

/// The Arrow chunks of an object exporting `__arrow_c_array__` (one chunk) or
/// `__arrow_c_stream__` (a chunked array: its chunks); `None` if it exports neither.
pub fn exported(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<ArrayRef>>> {
    if obj.hasattr("__arrow_c_array__")? {
        return Ok(Some(vec![obj.extract::<PyArray>()?.into_inner().0]));
    }
    if obj.hasattr("__arrow_c_stream__")? {
        return Ok(Some(obj.extract::<PyChunkedArray>()?.chunks().to_vec()));
    }
    Ok(None)
}

/// [`exported`], or a list of such objects (or of such lists): their chunks in order; `None`
/// if `obj` is none of these, or a list with an item that is not.
pub fn chunks(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<ArrayRef>>> {
    if let Some(c) = exported(obj)? {
        return Ok(Some(c));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        let mut out = Vec::with_capacity(list.len());
        for item in list.iter() {
            match chunks(&item)? {
                Some(c) => out.extend(c),
                None => return Ok(None),
            }
        }
        return Ok(Some(out));
    }
    Ok(None)
}

/// Check that every chunk holds strings (`utf8`, `large_utf8` or `utf8_view`): else a
/// `TypeError` naming the argument (`name`) and the first other type.
pub fn check_strings(name: &str, chunks: &[ArrayRef]) -> PyResult<()> {
    match chunks
        .iter()
        .map(|c| c.data_type())
        .find(|t| !matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
    {
        Some(other) => Err(PyTypeError::new_err(format!(
            "{name} must be an Arrow string array, got one of type {other}"
        ))),
        None => Ok(()),
    }
}

/// The strings of a chunk that [`check_strings`] accepted, nulls as `None`. Another chunk
/// reads as empty (its check would have raised).
pub fn strs(chunk: &ArrayRef) -> Strs<'_> {
    match chunk.data_type() {
        DataType::Utf8 => Strs::Utf8(chunk.as_string::<i32>().iter()),
        DataType::LargeUtf8 => Strs::Large(chunk.as_string::<i64>().iter()),
        DataType::Utf8View => Strs::View(chunk.as_string_view().iter()),
        _ => Strs::Empty,
    }
}

/// See [`strs`]: an enum, not a boxed iterator, so that the loop over a chunk's names stays
/// inlined (one predictable branch a name, no call through a vtable).
pub enum Strs<'a> {
    Utf8(GenericStringIter<'a, i32>),
    Large(GenericStringIter<'a, i64>),
    View(ArrayIter<&'a StringViewArray>),
    Empty,
}

impl<'a> Iterator for Strs<'a> {
    type Item = Option<&'a str>;

    #[inline]
    fn next(&mut self) -> Option<Option<&'a str>> {
        match self {
            Strs::Utf8(it) => it.next(),
            Strs::Large(it) => it.next(),
            Strs::View(it) => it.next(),
            Strs::Empty => None,
        }
    }
}

/// An Arrow time or integer chunk as epoch milliseconds (nulls kept): timestamps of any unit
/// rounded down (the zone is not applied: Arrow stores UTC instants, and a time without a zone
/// reads as UTC wall-clock time), integers as they are (up to 64-bit signed; `uint64` is
/// refused, as it may not fit). `name` is the argument, for the `TypeError` on another type.
pub fn to_ms(name: &str, array: &dyn Array) -> PyResult<Int64Array> {
    Ok(match array.data_type() {
        DataType::Int64 => array.as_primitive::<Int64Type>().clone(),
        DataType::Int32 => array.as_primitive::<Int32Type>().unary(i64::from),
        DataType::Int16 => array.as_primitive::<Int16Type>().unary(i64::from),
        DataType::Int8 => array.as_primitive::<Int8Type>().unary(i64::from),
        DataType::UInt32 => array.as_primitive::<UInt32Type>().unary(i64::from),
        DataType::UInt16 => array.as_primitive::<UInt16Type>().unary(i64::from),
        DataType::UInt8 => array.as_primitive::<UInt8Type>().unary(i64::from),
        DataType::Timestamp(TimeUnit::Second, _) => array
            .as_primitive::<TimestampSecondType>()
            .unary(|s| s.saturating_mul(1000)),
        DataType::Timestamp(TimeUnit::Millisecond, _) => array
            .as_primitive::<TimestampMillisecondType>()
            .reinterpret_cast::<Int64Type>(),
        DataType::Timestamp(TimeUnit::Microsecond, _) => array
            .as_primitive::<TimestampMicrosecondType>()
            .unary(|us| us.div_euclid(1000)),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => array
            .as_primitive::<TimestampNanosecondType>()
            .unary(|ns| ns.div_euclid(1_000_000)),
        DataType::Null => Int64Array::new_null(array.len()),
        other => {
            return Err(PyTypeError::new_err(format!(
                "{name} must be an Arrow timestamp or integer array (epoch ms), got type {other}"
            )))
        }
    })
}
