//! The beat decoder: a message body to a [`Beat`], agreeing with Python's `BeatCodec.decode`.

/// One decoded beat, borrowing from the body.
#[derive(Debug, Clone, PartialEq)]
pub struct Beat<'a> {
    pub topic: &'a str,
    pub seq: Option<u64>,
    pub boot: Option<&'a str>,
    pub sent: Option<f64>,
    pub period: Option<f64>,
    pub legacy: bool,
}

/// What [`Decoder::decode`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded<'a> {
    /// A beat Python would accept with the same fields.
    Beat(Beat<'a>),
    /// A body Python would reject with the same `reason` (`detail` may differ).
    Reject {
        reason: &'static str,
        detail: String,
    },
    /// Not sure: let Python decide.
    Defer,
}

/// A beat decoder for one key and size limit; immutable, cheap to share.
#[derive(Clone)]
pub struct Decoder {
    max_size: usize,
}

impl Decoder {
    /// A decoder; `key`, if given, must be non-empty (an empty key is treated as none).
    pub fn new(key: Option<&[u8]>, max_size: usize) -> Decoder {
        let _ = key;
        Decoder { max_size }
    }

    /// Whether beats must be signed.
    pub fn signed(&self) -> bool {
        todo!()
    }

    /// Decode `body`; `destination`: the topic the message arrived on (None: not checked).
    pub fn decode<'a>(&self, body: &'a [u8], destination: Option<&str>) -> Decoded<'a> {
        let _ = (body, destination, self.max_size);
        todo!()
    }
}
