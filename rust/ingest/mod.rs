//! Ingest: the bytes read from the broker turned into beats without Python. [`frames`] splits a
//! STOMP byte stream into frames, [`beat`] decodes a message body exactly as Python's
//! `BeatCodec.decode` does (or defers to it), [`topic`] checks names and matches patterns.

pub mod beat;
pub mod frames;
pub mod topic;
