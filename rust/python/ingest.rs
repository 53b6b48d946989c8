//! `decode_beat`: the native beat decoder, exposed for parity tests and for the Python codec;
//! `split_frames`: the native STOMP splitter, for framing tests against stomp.py.

use crate::ingest::beat::{Decoded, Decoder};
use crate::ingest::frames::{Splitter, Verdict};
use std::borrow::Cow;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

/// Decode one message body natively, as ``BeatCodec(key, max_size).decode(body, destination)``
/// would. Returns ``("beat", topic, seq, boot, sent, period, legacy, state, reason)``,
/// ``("reject", reason,
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
            if b.down { "down" } else { "up" },
            b.reason.as_deref(),
        )
            .into_pyobject(py),
        Decoded::Reject { reason, detail } => ("reject", reason, detail).into_pyobject(py),
        Decoded::Defer => ("defer",).into_pyobject(py),
    }
}

/// Split a STOMP byte stream read as ``chunks`` with the native splitter, consuming the
/// well-formed MESSAGE frames whose ``subscription`` header is ``subscription``. Returns
/// ``(consumed, out, pending, eols)``: ``consumed`` lists ``(destination, body, escaped)`` per
/// consumed frame, ``out`` is every other frame's bytes as received, ``pending`` the bytes held
/// back (an incomplete frame), ``eols`` the heart-beats dropped. For tests of the framing.
#[pyfunction]
pub fn split_frames<'py>(
    py: Python<'py>,
    chunks: Vec<Bound<'py, PyBytes>>,
    subscription: &[u8],
) -> PyResult<Bound<'py, PyTuple>> {
    let mut splitter = Splitter::new();
    let mut out = Vec::new();
    let mut consumed: Vec<(Option<Vec<u8>>, Vec<u8>, bool)> = Vec::new();
    let mut eols = 0u64;
    for chunk in &chunks {
        let stats = splitter.feed(chunk.as_bytes(), &mut out, |m| {
            if m.subscription == Some(subscription) {
                consumed.push((
                    m.destination.map(<[u8]>::to_vec),
                    m.body.to_vec(),
                    m.escaped,
                ));
                Verdict::Consumed
            } else {
                Verdict::Pass
            }
        });
        eols += stats.eols;
    }
    let consumed: Vec<_> = consumed
        .into_iter()
        .map(|(d, b, e)| (d.map(|d| PyBytes::new(py, &d)), PyBytes::new(py, &b), e))
        .collect();
    (consumed, PyBytes::new(py, &out), splitter.pending(), eols).into_pyobject(py)
}
