//! heartwire's native core: a hierarchical timer wheel, a missed-period detector and a publisher
//! scheduler on top of it, and bounded event queues that hand the detector's events to Python.
//!
//! The pure-Rust API ([`detector::Detector`] and friends) builds and tests without Python; the
//! `python` feature adds the `heartwire._core` extension module.
#![deny(unsafe_code)]

pub mod clock;
pub mod dedup;
pub mod detector;
pub mod driver;
pub mod event;
pub mod ingest;
pub mod kernels;
pub mod newest;
pub mod phi;
pub mod queue;
pub mod registry;
pub mod scheduler;
pub mod wheel;
pub mod word;

#[cfg(feature = "python")]
mod python;

pub use clock::{ClockSource, ManualClock, MonotonicClock};
pub use dedup::{DedupStats, DedupWindow};
pub use detector::{Beat, Detector, DetectorError, DetectorStats, TopicConfig, TopicStatus};
pub use event::{Event, EventKind};
pub use queue::{EventQueue, Overflow, QueueStats};
pub use registry::TopicId;
pub use scheduler::Scheduler;
pub use word::State;
