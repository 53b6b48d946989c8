//! Batch inputs: names as a list/iterable of str or an Arrow string array; handles as a
//! list/iterable of int, a NumPy integer array or an Arrow integer array.
//!
//! Arrow arrays are taken without a copy through the Arrow PyCapsule interface (read by
//! [`arrow_in`], as the Spark kernels read theirs) and processed with the GIL released. Python strings are not copied either: the build targets the stable ABI
//! of Python 3.10, whose `PyUnicode_AsUTF8AndSize` lends a `str`'s UTF-8 (see [`find_names`]
//! and [`PyNames`]). That ABI has no buffer protocol (3.11 has), so NumPy arrays arrive through
//! one `tobytes()` copy (32- and 64-bit integers as they are, others widened first).

use super::{arrow_in, type_name};
use crate::detector::{Batch, Detector};
use crate::registry::{Handle, LOOKUP_CHUNK};
use arrow_array::cast::AsArray;
use arrow_array::types::{ArrowPrimitiveType, Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

/// Names to beat, decoded from Python.
pub enum Names<'py> {
    /// Arrow string arrays (one per chunk); read with the GIL released.
    Arrow(Vec<ArrayRef>),
    /// Python strings: a list, tuple or iterable to read with [`find_names`] or
    /// [`borrow_names`].
    Python(Bound<'py, PyAny>),
}

/// The `str` items of a names argument (a list, tuple or other iterable), checked, each held
/// by one reference so that its UTF-8 can be borrowed, not copied, for as long as this lives.
///
/// For a pyclass that hands names to the detector's Rust API (to beat names, [`find_names`]
/// is faster: one pass over the Python objects):
///
/// ```ignore
/// let names = batch::borrow_names(obj)?;   // TypeError / UnicodeEncodeError: nothing read yet
/// let b = det.record_names(names.iter(), now);            // with the GIL held, or:
/// let strs = names.strs();                                // Vec<&str>: Send, for py.detach
/// py.detach(|| det.add_many_handles(strs.iter().copied(), None, None));
/// ```
///
/// The views stay valid with the GIL released: a `str` is immutable, and its UTF-8 (its own
/// storage when it is ASCII, else a copy the object caches on first use) lives as long as the
/// object, which the references held here keep alive.
pub(crate) struct PyNames<'py>(Vec<Bound<'py, PyString>>);

impl<'py> PyNames<'py> {
    /// How many names.
    #[allow(dead_code)] // for the other pyclasses that take names
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    #[allow(dead_code)] // for the other pyclasses that take names
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each name's UTF-8, borrowed, in order. Every item was converted once by
    /// [`borrow_names`], so this cannot fail (a `str` caches its UTF-8 form; an ASCII one is
    /// its own); were it to, the name would read as `""`, which no topic has (a beat for it
    /// is counted as unknown).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.0.iter().map(|s| s.to_str().unwrap_or_default())
    }

    /// [`iter`](PyNames::iter) collected: a `Vec<&str>` is `Send`, for work done detached.
    pub(crate) fn strs(&self) -> Vec<&str> {
        self.iter().collect()
    }
}

/// Read a names argument that is a list, a tuple or another iterable of `str` (not a single
/// `str`). Raises `TypeError` naming the argument's type or the first item that is not a
/// `str`, and `UnicodeEncodeError` for the first one with no UTF-8 form (a lone surrogate),
/// before anything is recorded. See [`PyNames`].
pub(crate) fn borrow_names<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyNames<'py>> {
    fn checked<'py>(i: usize, item: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
        let s = item.cast_into::<PyString>().map_err(|e| {
            PyTypeError::new_err(format!(
                "names[{i}] must be str, got {}",
                type_name(e.into_inner().as_any())
            ))
        })?;
        s.to_str()?; // its UTF-8 exists (and is cached): `PyNames::iter` cannot fail
        Ok(s)
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "names must be a sequence of str, got a single str (use beat() for one name)",
        ));
    }
    // A list is read by index: no iterator object, and no length read per item (nothing can
    // change the list meanwhile: no Python code runs here and the GIL is held; `get_item`
    // checks the bounds anyway).
    if let Ok(list) = obj.cast::<PyList>() {
        let n = list.len();
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(checked(i, list.get_item(i)?)?);
        }
        return Ok(PyNames(out));
    }
    let iter = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "names must be a list, an iterable of str or an Arrow string array, got {}",
            type_name(obj)
        ))
    })?;
    let mut out = Vec::with_capacity(obj.len().unwrap_or(0));
    for (i, item) in iter.enumerate() {
        out.push(checked(i, item?)?);
    }
    Ok(PyNames(out))
}

/// The names of a names argument looked up: see [`find_names`].
pub(crate) struct Found {
    /// The handles of the names found, in order (as read under the lookup's lock).
    pub handles: Vec<Handle>,
    /// How many names were not found (and not kept in `missing`).
    pub unknown: usize,
    /// The names not found, copied, when asked for (auto-add: `Detector::finish` adds them).
    pub missing: Vec<String>,
}

impl Found {
    /// Record the beats: the lock-free part ([`Detector::record_found`]); what the batch still
    /// owes is done by `Detector::finish`, detached, if `needs_finish()`.
    pub(crate) fn record(self, det: &Detector, now: Option<u64>) -> Batch {
        det.record_found(&self.handles, self.unknown, self.missing, now)
    }
}

/// Look up the names of a list, a tuple or another iterable of `str` in one pass (what
/// `Detector.beat_many` does with them; for another pyclass that beats names):
///
/// ```ignore
/// let b = batch::find_names(&det, obj, det.auto_add())?.record(&det, now);
/// let recorded = if b.needs_finish() { py.detach(|| det.finish(b).0) } else { b.recorded };
/// ```
///
/// Each item is read, checked, its UTF-8 borrowed and hashed, and its handle found, a chunk at
/// a time, so the beats that follow ([`Found::record`]) touch no Python object again, and a
/// name with no topic is copied only if `keep_missing`. Nothing is recorded here: an item that
/// is not a `str` (`TypeError` naming it) or has no UTF-8 form (`UnicodeEncodeError`) raises
/// before any beat.
///
/// The name index's read lock is taken per chunk, around the lookups only: never while a
/// Python object is read, since that can run Python code (making an exception can start the
/// garbage collector, and a finalizer could add a topic, which needs the write lock). A handle
/// carries its topic's generation, so a topic removed and its id reused between a chunk's
/// lookup and the beats is not beaten by mistake (the beat counts as unknown).
pub(crate) fn find_names(
    det: &Detector,
    obj: &Bound<'_, PyAny>,
    keep_missing: bool,
) -> PyResult<Found> {
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "names must be a sequence of str, got a single str (use beat() for one name)",
        ));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        return find_in(det, list.len(), |i| list.get_item(i), keep_missing);
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        return find_in(det, tuple.len(), |i| tuple.get_item(i), keep_missing);
    }
    let items: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "names must be a list, an iterable of str or an Arrow string array, got {}",
                type_name(obj)
            ))
        })?
        .collect::<PyResult<_>>()?;
    find_in(det, items.len(), |i| Ok(items[i].clone()), keep_missing)
}

fn find_in<'py>(
    det: &Detector,
    n: usize,
    item: impl Fn(usize) -> PyResult<Bound<'py, PyAny>>,
    keep_missing: bool,
) -> PyResult<Found> {
    const CHUNK: usize = LOOKUP_CHUNK;
    let mut found = Found {
        handles: Vec::with_capacity(n),
        unknown: 0,
        missing: Vec::new(),
    };
    let mut held: Vec<Bound<'py, PyString>> = Vec::with_capacity(CHUNK);
    let mut handles = [None; CHUNK];
    for lo in (0..n).step_by(CHUNK) {
        held.clear();
        for i in lo..n.min(lo + CHUNK) {
            let item = item(i)?;
            match item.cast_into::<PyString>() {
                Ok(s) => held.push(s),
                Err(e) => {
                    return Err(PyTypeError::new_err(format!(
                        "names[{i}] must be str, got {}",
                        type_name(e.into_inner().as_any())
                    )))
                }
            }
        }
        let mut strs = [""; CHUNK];
        for (s, name) in strs.iter_mut().zip(&held) {
            *s = name.to_str()?;
        }
        let strs = &strs[..held.len()];
        let handles = &mut handles[..strs.len()];
        det.with_lookup(|lookup| lookup.handles_many(strs, handles));
        for (name, handle) in strs.iter().zip(handles.iter()) {
            match handle {
                Some(h) => found.handles.push(*h),
                None if keep_missing => found.missing.push((*name).to_owned()),
                None => found.unknown += 1,
            }
        }
    }
    Ok(found)
}

/// Decode `names` (the argument of `beat_many`).
pub fn names<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Names<'py>> {
    // A plain list or tuple first: the Arrow probes below are two failed attribute lookups,
    // each raising and clearing an AttributeError (a microsecond, a lot for a short batch).
    if obj.is_exact_instance_of::<PyList>() || obj.is_exact_instance_of::<PyTuple>() {
        return Ok(Names::Python(obj.clone()));
    }
    if let Some(chunks) = arrow_in::exported(obj)? {
        arrow_in::check_strings("names", &chunks)?;
        return Ok(Names::Arrow(chunks));
    }
    Ok(Names::Python(obj.clone()))
}

/// Run `f` over the non-null strings of Arrow string chunks; returns the null count too.
pub fn for_arrow_strs<R>(
    chunks: &[ArrayRef],
    f: impl FnOnce(&mut dyn Iterator<Item = &str>) -> R,
) -> (R, usize) {
    let nulls = chunks.iter().map(|c| c.null_count()).sum();
    let mut iter = chunks.iter().flat_map(|c| arrow_in::strs(c).flatten());
    (f(&mut iter), nulls)
}

/// Decode `handles` (the argument of `beat_handles`). Values that cannot be a handle
/// (negative) become `u64::MAX`, which no topic has, so they are counted as unknown.
pub fn handles(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    if let Some(chunks) = arrow_in::exported(obj)? {
        let mut out = Vec::with_capacity(chunks.iter().map(|c| c.len()).sum());
        for chunk in &chunks {
            let before = out.len();
            match chunk.data_type() {
                DataType::UInt32 => out.extend(non_null::<UInt32Type>(chunk, u64::from)),
                DataType::Int32 => out.extend(non_null::<Int32Type>(chunk, id_of)),
                DataType::UInt64 => out.extend(non_null::<UInt64Type>(chunk, id_of_u)),
                DataType::Int64 => out.extend(non_null::<Int64Type>(chunk, id_of)),
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

/// The non-null values of `chunk`, an Arrow array of type `T`, each made a handle by `id`.
fn non_null<'a, T: ArrowPrimitiveType>(
    chunk: &'a ArrayRef,
    id: impl Fn(T::Native) -> u64 + 'a,
) -> impl Iterator<Item = u64> + 'a {
    chunk.as_primitive::<T>().iter().flatten().map(id)
}

#[inline]
fn id_of(v: impl TryInto<u64>) -> u64 {
    v.try_into().unwrap_or(u64::MAX)
}

#[inline]
fn id_of_u(v: u64) -> u64 {
    v
}
