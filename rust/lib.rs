//! heartwire's native core: a hierarchical timer wheel, a missed-period detector and a deadline
//! queue for publishers on top of it, and bounded event queues that hand the detector's events
//! to Python.
//!
//! The pure-Rust API ([`detector::Detector`] and friends) builds and tests without Python; the
//! `python` feature adds the `heartwire._core` extension module.
//!
//! Public modules are the ones used from outside the crate (the benches drive the detector, the
//! wheel and the queues directly); the rest are the crate's own, their types re-exported below
//! where they are part of the API.
#![deny(unsafe_code)]

pub mod clock;
pub mod detector;
pub mod event;
pub mod queue;
pub mod registry;
pub mod wheel;

mod deadline_queue;
mod dedup;
mod phi;
mod word;

// Used only by the Python bindings: without the `python` feature they are dead code that
// `cargo test` still builds and tests.
#[cfg_attr(not(feature = "python"), allow(dead_code))]
mod driver;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
mod ingest;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
mod kernels;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
mod newest;

#[cfg(feature = "python")]
mod python;

pub use clock::{ClockSource, ManualClock, MonotonicClock};
pub use deadline_queue::{DeadlineQueue, DeadlineQueueError};
pub use dedup::{DedupStats, DedupWindow, ZeroCapacity};
pub use detector::{Beat, Detector, DetectorError, DetectorStats, TopicConfig, TopicStatus};
pub use event::{Event, EventKind};
pub use phi::PhiConfig;
pub use queue::{EventQueue, Overflow, QueueStats};
pub use registry::TopicId;
pub use word::State;
