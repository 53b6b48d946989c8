//! Batch inputs: names as a list/iterable of str or an Arrow string array; handles as a
//! list/iterable of int, a NumPy integer array or an Arrow integer array.
//!
//! Arrow arrays are taken without a copy through the Arrow PyCapsule interface and processed
//! with the GIL released. The build targets the stable ABI of Python 3.9, which has neither the
//! buffer protocol nor borrowed UTF-8 views of `str`, so NumPy arrays arrive through one
//! `tobytes()` copy (32- and 64-bit integers as they are, others widened first) and Python
//! strings through one UTF-8 copy each.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3_arrow::{PyArray, PyChunkedArray};
use std::borrow::Cow;

/// Names to beat, decoded from Python.
pub enum Names<'py> {
    /// Arrow string arrays (one per chunk); read with the GIL released.
    Arrow(Vec<ArrayRef>),
    /// Python strings, already checked to be `str`.
    Python(Vec<Bound<'py, PyAny>>),
}

/// Arrow chunks of an object exporting `__arrow_c_array__` or `__arrow_c_stream__`, if it does.
fn arrow_chunks(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<ArrayRef>>> {
    if obj.hasattr("__arrow_c_array__")? {
        let (array, _field) = obj.extract::<PyArray>()?.into_inner();
        return Ok(Some(vec![array]));
    }
    if obj.hasattr("__arrow_c_stream__")? {
        let chunked = obj.extract::<PyChunkedArray>()?;
        return Ok(Some(chunked.chunks().to_vec()));
    }
    Ok(None)
}

/// Decode `names` (the argument of `beat_many`).
pub fn names<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Names<'py>> {
    if let Some(chunks) = arrow_chunks(obj)? {
        for chunk in &chunks {
            match chunk.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {}
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "names must be an Arrow string array, got one of type {other}"
                    )))
                }
            }
        }
        return Ok(Names::Arrow(chunks));
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "names must be a sequence of str, got a single str (use beat() for one name)",
        ));
    }
    let items: Vec<Bound<'py, PyAny>> = obj
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "names must be a list, an iterable of str or an Arrow string array, got {}",
                type_name(obj)
            ))
        })?
        .collect::<PyResult<_>>()?;
    for (i, item) in items.iter().enumerate() {
        if !item.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(format!(
                "names[{i}] must be str, got {}",
                type_name(item)
            )));
        }
    }
    Ok(Names::Python(items))
}

/// The Python strings of [`Names::Python`] as Rust strings.
pub fn python_strs<'a>(items: &'a [Bound<'_, PyAny>]) -> PyResult<Vec<Cow<'a, str>>> {
    items
        .iter()
        .map(|item| item.cast::<PyString>().map_err(PyErr::from)?.to_cow())
        .collect()
}

/// Run `f` over the non-null strings of Arrow string chunks; returns the null count too.
pub fn for_arrow_strs<R>(
    chunks: &[ArrayRef],
    f: impl FnOnce(&mut dyn Iterator<Item = &str>) -> R,
) -> (R, usize) {
    let nulls = chunks.iter().map(|c| c.null_count()).sum();
    let mut iter = chunks
        .iter()
        .flat_map(|chunk| -> Box<dyn Iterator<Item = &str>> {
            match chunk.data_type() {
                DataType::Utf8 => Box::new(chunk.as_string::<i32>().iter().flatten()),
                DataType::LargeUtf8 => Box::new(chunk.as_string::<i64>().iter().flatten()),
                _ => Box::new(chunk.as_string_view().iter().flatten()),
            }
        });
    (f(&mut iter), nulls)
}

/// Decode `handles` (the argument of `beat_handles`). Values that cannot be a handle
/// (negative) become `u64::MAX`, which no topic has, so they are counted as unknown.
pub fn handles(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    if let Some(chunks) = arrow_chunks(obj)? {
        let mut out = Vec::with_capacity(chunks.iter().map(|c| c.len()).sum());
        for chunk in &chunks {
            let before = out.len();
            match chunk.data_type() {
                DataType::UInt32 => out.extend(
                    chunk
                        .as_primitive::<UInt32Type>()
                        .iter()
                        .flatten()
                        .map(u64::from),
                ),
                DataType::Int32 => out.extend(
                    chunk
                        .as_primitive::<Int32Type>()
                        .iter()
                        .flatten()
                        .map(id_of),
                ),
                DataType::UInt64 => out.extend(
                    chunk
                        .as_primitive::<UInt64Type>()
                        .iter()
                        .flatten()
                        .map(id_of_u),
                ),
                DataType::Int64 => out.extend(
                    chunk
                        .as_primitive::<Int64Type>()
                        .iter()
                        .flatten()
                        .map(id_of),
                ),
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "handles must be an Arrow integer array, got one of type {other}"
                    )))
                }
            }
            // Nulls name no topic: count them as unknown like any bad handle.
            out.extend(std::iter::repeat_n(
                u64::MAX,
                chunk.len() - (out.len() - before),
            ));
        }
        return Ok(out);
    }
    if obj.hasattr("__array_interface__")? && obj.hasattr("dtype")? {
        let kind: String = obj.getattr("dtype")?.getattr("kind")?.extract()?;
        if kind != "i" && kind != "u" {
            return Err(PyTypeError::new_err(format!(
                "handles must be an integer array, got dtype {}",
                obj.getattr("dtype")?.str()?
            )));
        }
        // An array of 32- or 64-bit little-endian integers is read as it is (one copy, by
        // `tobytes`); any other integer type is widened to 64 bits first.
        let dtype: String = obj.getattr("dtype")?.getattr("str")?.extract()?;
        if matches!(dtype.as_str(), "<u4" | "<i4" | "<u8" | "<i8") {
            let bytes: Vec<u8> = obj.call_method0("tobytes")?.extract()?;
            return Ok(match dtype.as_str() {
                "<u4" => words4(&bytes)
                    .map(u32::from_le_bytes)
                    .map(u64::from)
                    .collect(),
                "<i4" => words4(&bytes).map(i32::from_le_bytes).map(id_of).collect(),
                "<u8" => words8(&bytes)
                    .map(u64::from_le_bytes)
                    .map(id_of_u)
                    .collect(),
                _ => words8(&bytes).map(i64::from_le_bytes).map(id_of).collect(),
            });
        }
        let target = if kind == "u" { "<u8" } else { "<i8" };
        let bytes: Vec<u8> = obj
            .call_method1("astype", (target,))?
            .call_method0("tobytes")?
            .extract()?;
        let words = bytes
            .chunks_exact(8)
            .map(|b| <[u8; 8]>::try_from(b).expect("chunks of 8"));
        return Ok(if kind == "u" {
            words.map(u64::from_le_bytes).map(id_of_u).collect()
        } else {
            words.map(i64::from_le_bytes).map(id_of).collect()
        });
    }
    let iter = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "handles must be a list or iterable of int, a NumPy or an Arrow integer array, got {}",
            type_name(obj)
        ))
    })?;
    iter.enumerate()
        .map(|(i, item)| {
            let item = item?;
            item.extract::<i64>().map(id_of).map_err(|_| {
                PyValueError::new_err(format!(
                    "handles[{i}] must be an int, got {}",
                    type_name(&item)
                ))
            })
        })
        .collect()
}

/// Little-endian 4-byte words of `bytes`.
fn words4(bytes: &[u8]) -> impl Iterator<Item = [u8; 4]> + '_ {
    bytes
        .chunks_exact(4)
        .map(|b| <[u8; 4]>::try_from(b).expect("chunks of 4"))
}

/// Little-endian 8-byte words of `bytes`.
fn words8(bytes: &[u8]) -> impl Iterator<Item = [u8; 8]> + '_ {
    bytes
        .chunks_exact(8)
        .map(|b| <[u8; 8]>::try_from(b).expect("chunks of 8"))
}

#[inline]
fn id_of(v: impl TryInto<u64>) -> u64 {
    v.try_into().unwrap_or(u64::MAX)
}

#[inline]
fn id_of_u(v: u64) -> u64 {
    v
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}
