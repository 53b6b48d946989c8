//! Ingest: the bytes read from the broker turned into recorded beats without Python.
//! [`frames`] splits a STOMP byte stream into frames, [`beat`] decodes a message body exactly as
//! Python's `BeatCodec.decode` does (or defers to it), [`topic`] checks names and matches
//! patterns, [`replay`] refuses replayed signed beats, [`shard`] computes a monitor group's shard
//! of a topic, and [`intake`] applies a monitor's rules (learning, re-tuning, ages, a shard
//! queue's shard, refusals) and records each beat in the detector.

pub mod beat;
pub mod frames;
pub mod intake;
pub mod replay;
pub mod shard;
pub mod topic;
