//! The `heartwire._core` extension module: thin wrappers that convert seconds to nanoseconds,
//! names to ids, and release the GIL around anything that can wait.
//!
//! Locking rule that keeps this deadlock-free: a thread holding the GIL never waits for the
//! detector lock or for queue space. Everything that can wait runs inside `py.detach`, because
//! the driver may hold the detector lock while it waits for a Python dispatch thread (which needs
//! the GIL) to make room in a `block`-policy queue.

mod arrow_in;
mod arrow_out;
mod batch;
mod clock;
mod deadline_queue;
mod dedup;
mod detector;
mod event_batch;
mod events;
mod ingest;
mod intake;
mod spark;
mod time;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<arrow_out::PyArrowArray>()?;
    m.add_class::<clock::PyManualClock>()?;
    m.add_class::<dedup::PyDedupWindow>()?;
    m.add_class::<detector::PyDetector>()?;
    m.add_class::<detector::PyPhi>()?;
    m.add_class::<events::PyEvent>()?;
    m.add_class::<event_batch::PyEventBatch>()?;
    m.add_class::<event_batch::PyEventBatchIter>()?;
    m.add_class::<event_batch::PyNewest>()?;
    m.add_class::<events::PyEventQueue>()?;
    m.add_class::<events::PyTopicStatus>()?;
    m.add_class::<intake::PyIntake>()?;
    m.add_class::<intake::PyRoutes>()?;
    m.add_class::<intake::PyFrameReader>()?;
    m.add_class::<deadline_queue::PyDeadlineQueue>()?;
    m.add_function(wrap_pyfunction!(spark::freshness_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(spark::outages_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(spark::availability_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(spark::partition_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(ingest::decode_beat, m)?)?;
    m.add_function(wrap_pyfunction!(ingest::split_frames, m)?)?;
    m.add_function(wrap_pyfunction!(intake::shard_of, m)?)?;
    m.add("MAX_SHARDS", crate::ingest::shard::MAX_SHARDS)?;
    m.add("MAX_TOPICS", crate::registry::MAX_TOPICS)?;
    m.add("MAX_NAME_LEN", crate::registry::MAX_NAME_LEN)?;
    // A monitor's beat rules live in the intake; Python reads their bounds from here (one copy).
    m.add("MIN_BEAT_PERIOD", crate::ingest::intake::MIN_BEAT_PERIOD)?;
    m.add("MAX_BEAT_PERIOD", crate::ingest::intake::MAX_BEAT_PERIOD)?;
    m.add("BEAT_AGE_PERIODS", crate::ingest::intake::BEAT_AGE_PERIODS)?;
    m.add("BEAT_AGE_SKEW", crate::ingest::intake::BEAT_AGE_SKEW)?;
    m.add("REPLAY_BOOTS", crate::ingest::replay::REPLAY_BOOTS)?;
    Ok(())
}

/// The name of `obj`'s type, which argument errors quote ("names[3] must be str, got int").
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}
