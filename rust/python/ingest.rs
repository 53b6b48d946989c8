//! `decode_beat`: the native beat decoder, exposed for parity tests and for the Python codec.

use crate::ingest::beat::{Decoded, Decoder};
use std::borrow::Cow;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

/// Decode one message body natively, as ``BeatCodec(key, max_size).decode(body, destination)``
/// would. Returns ``("beat", topic, seq, boot, sent, period, legacy)``, ``("reject", reason,
/// detail)`` or ``("defer",)`` when only the Python codec can tell.
#[pyfunction]
#[pyo3(signature = (body, key = None, max_size = 65536, destination = None))]
pub fn decode_beat<'py>(
    py: Python<'py>,
    body: &Bound<'py, PyBytes>,
    key: Option<&Bound<'py, PyBytes>>,
    max_size: i64,
    destination: Option<&Bound<'py, PyString>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let key = key.map(|k| k.as_bytes());
    if key.is_some_and(<[u8]>::is_empty) {
        return Err(PyValueError::new_err("key must not be empty, got b''"));
    }
    if max_size < 16 {
        return Err(PyValueError::new_err(format!(
            "max_size must be at least 16 bytes, got {max_size}"
        )));
    }
    let max_size = usize::try_from(max_size).unwrap_or(usize::MAX);
    // A decoder per call: this entry point is for tests and one-off use, not the hot path.
    let decoder = Decoder::new(key, max_size);
    // A str UTF-8 cannot hold (lone surrogates) equals no topic name (those are ASCII), just as
    // U+FFFD does not.
    let destination = destination.map(|d| d.to_cow().unwrap_or(Cow::Borrowed("\u{fffd}")));
    match decoder.decode(body.as_bytes(), destination.as_deref()) {
        Decoded::Beat(b) => (
            "beat",
            b.topic,
            b.seq,
            b.boot.as_deref(),
            b.sent,
            b.period,
            b.legacy,
        )
            .into_pyobject(py),
        Decoded::Reject { reason, detail } => ("reject", reason, detail).into_pyobject(py),
        Decoded::Defer => ("defer",).into_pyobject(py),
    }
}
