//! Topic names and API patterns, checked and matched exactly as Python's
//! `heartwire.transport.patterns` does.

/// Whether `name` is a valid topic name, exactly as Python's
/// `heartwire.transport.patterns.validate_topic` accepts: 1..=crate::registry::MAX_NAME_LEN bytes,
/// '.'-separated non-empty segments of ASCII letters, digits, '_', '-', ':'.
pub fn valid_topic(name: &str) -> bool {
    let _ = name;
    todo!()
}

/// A compiled API pattern (`svc.*`, `svc.>`, or an exact name), matching exactly as Python's
/// `patterns.matcher` does.
#[derive(Debug, Clone)]
pub struct Pattern {
    text: String,
}

impl Pattern {
    /// The compiled pattern, or None for an invalid one.
    pub fn new(pattern: &str) -> Option<Pattern> {
        let _ = pattern;
        todo!()
    }

    /// Whether `topic` matches.
    pub fn matches(&self, topic: &str) -> bool {
        let _ = (topic, &self.text);
        todo!()
    }
}
