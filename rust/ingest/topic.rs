//! Topic names and API patterns, checked and matched exactly as Python's
//! `heartwire.transport.patterns` does (`validate_topic`, `validate_pattern`, `matcher`).

use crate::registry::MAX_NAME_LEN;

/// The prefix of heartwire's own topics (the control topic, the STOMP keep-alive pings): never
/// taken for beats, whatever the pattern (Python's `heartwire.control.RESERVED_PREFIX`).
pub const RESERVED_PREFIX: &str = "_hw.";

/// Whether `name` is one of heartwire's own topics ([`RESERVED_PREFIX`]).
#[inline]
pub fn reserved_topic(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

/// A byte allowed in a topic segment: ASCII letters, digits, '_', '-', ':'.
#[inline]
fn segment_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':')
}

/// Whether `name` is a valid topic name, exactly as Python's
/// `heartwire.transport.patterns.validate_topic` accepts: 1..=crate::registry::MAX_NAME_LEN bytes,
/// '.'-separated non-empty segments of ASCII letters, digits, '_', '-', ':'.
///
/// Python counts characters, this counts bytes: the same for every name that can be valid
/// (ASCII only), and a longer non-ASCII name is invalid either way.
pub fn valid_topic(name: &str) -> bool {
    let b = name.as_bytes();
    if b.is_empty() || b.len() > MAX_NAME_LEN {
        return false;
    }
    // No empty segment: no leading or trailing '.', no "..".
    let mut prev_dot = true;
    for &c in b {
        if c == b'.' {
            if prev_dot {
                return false;
            }
            prev_dot = true;
        } else if segment_byte(c) {
            prev_dot = false;
        } else {
            return false;
        }
    }
    !prev_dot
}

/// One segment of a compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Exact(String),
    /// `*`: exactly one segment.
    One,
    /// `>` (last only): one or more trailing segments.
    Rest,
}

/// A compiled API pattern (`svc.*`, `svc.>`, or an exact name), matching exactly as Python's
/// `patterns.matcher` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// The whole pattern, compared by equality when it has no wildcard.
    text: String,
    /// The segments when it has a wildcard, else empty.
    segs: Vec<Seg>,
}

impl Pattern {
    /// The compiled pattern, or None for an invalid one (as `validate_pattern` would refuse).
    pub fn new(pattern: &str) -> Option<Pattern> {
        if pattern.is_empty() || pattern.len() > MAX_NAME_LEN {
            return None;
        }
        if valid_topic(pattern) {
            return Some(Pattern {
                text: pattern.to_owned(),
                segs: Vec::new(),
            });
        }
        let parts: Vec<&str> = pattern.split('.').collect();
        let last = parts.len() - 1;
        let mut segs = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let seg = match *part {
                "*" => Seg::One,
                ">" if i == last => Seg::Rest,
                p if !p.is_empty() && p.bytes().all(segment_byte) => Seg::Exact(p.to_owned()),
                _ => return None,
            };
            segs.push(seg);
        }
        Some(Pattern {
            text: pattern.to_owned(),
            segs,
        })
    }

    /// Whether the pattern has a `*` or `>` segment.
    #[cfg(test)]
    pub fn is_wildcard(&self) -> bool {
        !self.segs.is_empty()
    }

    /// Whether `topic` matches. Like Python's regex, a wildcard segment matches any non-empty run
    /// of characters other than '.', valid topic characters or not.
    pub fn matches(&self, topic: &str) -> bool {
        if self.segs.is_empty() {
            return topic == self.text;
        }
        let mut parts = topic.split('.');
        for seg in &self.segs {
            match seg {
                Seg::Exact(s) => {
                    if parts.next() != Some(s.as_str()) {
                        return false;
                    }
                }
                Seg::One => match parts.next() {
                    Some(p) if !p.is_empty() => {}
                    _ => return false,
                },
                Seg::Rest => {
                    // One or more segments, all non-empty.
                    let mut n = 0;
                    for p in parts.by_ref() {
                        if p.is_empty() {
                            return false;
                        }
                        n += 1;
                    }
                    return n > 0;
                }
            }
        }
        parts.next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics() {
        for ok in ["a", "svc.a", "svc.eu-west:1", "A_b.C-d:e", "0"] {
            assert!(valid_topic(ok), "{ok}");
        }
        for bad in [
            "", ".", "a.", ".a", "a..b", "a b", "a*", "é", "a/b", "svc.*", "a\n",
        ] {
            assert!(!valid_topic(bad), "{bad:?}");
        }
        assert!(valid_topic(&"x".repeat(MAX_NAME_LEN)));
        assert!(!valid_topic(&"x".repeat(MAX_NAME_LEN + 1)));
    }

    #[test]
    fn patterns() {
        let p = Pattern::new("svc.*").unwrap();
        assert!(p.matches("svc.a") && p.matches("svc.a b") && !p.matches("svc.a.b"));
        assert!(!p.matches("svc.") && !p.matches("svc") && !p.matches("svcx.a"));
        let p = Pattern::new("svc.>").unwrap();
        assert!(p.matches("svc.a") && p.matches("svc.a.b") && !p.matches("svc"));
        assert!(!p.matches("svc.") && !p.matches("svc.a..b") && !p.matches("svc.a."));
        let p = Pattern::new(">").unwrap();
        assert!(p.matches("a") && p.matches("a.b") && !p.matches("") && !p.matches(".a"));
        let p = Pattern::new("*.x.*").unwrap();
        assert!(p.matches("a.x.b") && !p.matches("a.y.b") && !p.matches("a.x"));
        let p = Pattern::new("svc.a").unwrap();
        assert!(!p.is_wildcard() && p.matches("svc.a") && !p.matches("svc.b"));
        for bad in ["", "svc.>.a", "svc.a*", "svc..a", "#", "svc.#", "a b", ">>"] {
            assert!(Pattern::new(bad).is_none(), "{bad:?}");
        }
    }
}
