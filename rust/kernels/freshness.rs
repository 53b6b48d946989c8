//! Freshness of a topic at a given moment, from its last beat: the per-row kernel behind
//! `heartwire.spark.freshness`. Times are epoch milliseconds.
//!
//! - `staleness_ms = as_of - last_seen`
//! - `missed = max(0, floor(staleness_ms / period_ms))`
//! - status `alive` (missed = 0), `late` (0 < missed < allowed_misses), `failed`
//!   (missed ≥ allowed_misses), `pending` (no beat yet: `last_seen` null; missed and staleness
//!   null then).
//! - A null or non-positive period, a null `as_of`, or a staleness that does not fit in an `i64`
//!   gives every field null.

/// A topic's status in a freshness row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Alive,
    Late,
    Failed,
    Pending,
}

impl Status {
    /// The name Spark sees (`"alive"`, `"late"`, `"failed"`, `"pending"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Alive => "alive",
            Status::Late => "late",
            Status::Failed => "failed",
            Status::Pending => "pending",
        }
    }
}

/// One freshness row; every field `None` when the row cannot be judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Freshness {
    pub status: Option<Status>,
    pub missed: Option<i64>,
    pub staleness_ms: Option<i64>,
}

impl Freshness {
    const NULL: Freshness = Freshness {
        status: None,
        missed: None,
        staleness_ms: None,
    };
}

/// The freshness of one row. `allowed_misses` is at least 1 (smaller values act as 1).
#[inline]
pub fn freshness(
    last_seen_ms: Option<i64>,
    period_ms: Option<i64>,
    as_of_ms: Option<i64>,
    allowed_misses: i64,
) -> Freshness {
    let period = match period_ms {
        Some(p) if p > 0 => p,
        _ => return Freshness::NULL,
    };
    let Some(last) = last_seen_ms else {
        return Freshness {
            status: Some(Status::Pending),
            missed: None,
            staleness_ms: None,
        };
    };
    let Some(staleness) = as_of_ms.and_then(|as_of| as_of.checked_sub(last)) else {
        return Freshness::NULL;
    };
    // A beat from the future (negative staleness) is on time; for staleness ≥ 0 truncation is
    // the floor.
    let missed = if staleness < 0 { 0 } else { staleness / period };
    let status = if missed == 0 {
        Status::Alive
    } else if missed < allowed_misses.max(1) {
        Status::Late
    } else {
        Status::Failed
    };
    Freshness {
        status: Some(status),
        missed: Some(missed),
        staleness_ms: Some(staleness),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: Status, missed: i64, staleness: i64) -> Freshness {
        Freshness {
            status: Some(status),
            missed: Some(missed),
            staleness_ms: Some(staleness),
        }
    }

    #[test]
    fn statuses_by_missed_periods() {
        // period 1000 ms, allowed_misses 3
        let f = |last, as_of| freshness(Some(last), Some(1000), Some(as_of), 3);
        assert_eq!(f(10_000, 10_000), row(Status::Alive, 0, 0));
        assert_eq!(f(10_000, 10_999), row(Status::Alive, 0, 999));
        assert_eq!(f(10_000, 11_000), row(Status::Late, 1, 1000));
        assert_eq!(f(10_000, 12_999), row(Status::Late, 2, 2999));
        assert_eq!(f(10_000, 13_000), row(Status::Failed, 3, 3000));
        assert_eq!(f(10_000, 99_000), row(Status::Failed, 89, 89_000));
    }

    #[test]
    fn allowed_misses_one_has_no_late() {
        let f = |as_of| freshness(Some(0), Some(500), Some(as_of), 1);
        assert_eq!(f(499), row(Status::Alive, 0, 499));
        assert_eq!(f(500), row(Status::Failed, 1, 500));
        // allowed_misses below 1 acts as 1
        assert_eq!(
            freshness(Some(0), Some(500), Some(500), 0),
            row(Status::Failed, 1, 500)
        );
    }

    #[test]
    fn future_beat_is_alive_with_negative_staleness() {
        assert_eq!(
            freshness(Some(5_000), Some(1000), Some(1_000), 1),
            row(Status::Alive, 0, -4_000)
        );
    }

    #[test]
    fn pending_without_last_seen() {
        let pending = Freshness {
            status: Some(Status::Pending),
            missed: None,
            staleness_ms: None,
        };
        assert_eq!(freshness(None, Some(1000), Some(5), 1), pending);
        // even without as_of
        assert_eq!(freshness(None, Some(1000), None, 1), pending);
    }

    #[test]
    fn bad_period_or_as_of_or_overflow_gives_nulls() {
        for period in [None, Some(0), Some(-1), Some(i64::MIN)] {
            assert_eq!(freshness(Some(0), period, Some(5), 1), Freshness::NULL);
            assert_eq!(freshness(None, period, Some(5), 1), Freshness::NULL);
        }
        assert_eq!(freshness(Some(0), Some(1000), None, 1), Freshness::NULL);
        assert_eq!(
            freshness(Some(i64::MIN), Some(1000), Some(1), 1),
            Freshness::NULL
        );
        assert_eq!(
            freshness(Some(1), Some(1000), Some(i64::MIN), 1),
            Freshness::NULL
        );
    }

    #[test]
    fn extreme_values_in_range() {
        assert_eq!(
            freshness(Some(0), Some(i64::MAX), Some(i64::MAX), 1),
            row(Status::Failed, 1, i64::MAX)
        );
        assert_eq!(
            freshness(Some(i64::MIN), Some(1), Some(-1), 2),
            row(Status::Failed, i64::MAX, i64::MAX)
        );
        assert_eq!(
            freshness(Some(i64::MAX), Some(1), Some(i64::MIN + 1), 2).missed,
            None
        );
    }
}
