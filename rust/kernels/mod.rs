//! Columnar kernels for batch analysis (Spark): freshness of last-seen times and outages from
//! beat logs. Pure Rust over plain values; the bindings feed them Arrow arrays.

pub mod freshness;
pub mod gaps;
