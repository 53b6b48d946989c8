//! Seconds (Python floats) to nanoseconds (the core's unit) and back, with errors that name the
//! argument and its value.

use pyo3::exceptions::PyValueError;
use pyo3::PyResult;

/// The largest number of seconds that fits in u64 nanoseconds with room to spare.
const MAX_SECONDS: f64 = 1.8e10;

/// `seconds` as ns; `what` names the argument in the error. Zero is allowed only for times.
pub fn to_ns(what: &str, seconds: f64, allow_zero: bool) -> PyResult<u64> {
    let ok = seconds.is_finite()
        && seconds <= MAX_SECONDS
        && (seconds > 0.0 || (allow_zero && seconds == 0.0));
    if !ok {
        let bound = if allow_zero { ">= 0" } else { "> 0" };
        return Err(PyValueError::new_err(format!(
            "{what} must be a finite number of seconds {bound}, got {seconds}"
        )));
    }
    Ok((seconds * 1e9).round() as u64)
}

/// A time argument (`now=`), or None.
pub fn opt_time(what: &str, seconds: Option<f64>) -> PyResult<Option<u64>> {
    seconds.map(|s| to_ns(what, s, true)).transpose()
}

/// ns as seconds.
#[inline]
pub fn to_seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}
