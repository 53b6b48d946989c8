//! Outages and availability of one topic from its beats: the gap kernel behind
//! `heartwire.spark.outages` and `heartwire.spark.availability`. Times are epoch milliseconds.
//!
//! An outage is a gap between consecutive beats longer than `allowed_misses × period`, counted
//! the way the live monitor counts it (grace 0): the topic is declared failed at
//! `down_from = previous beat + allowed_misses × period` and comes back at `down_to`, the next
//! beat. `missed` is the number of deadlines (`previous + n × period`) strictly before the next
//! beat: `floor(gap / period)`, except that a beat exactly on a deadline is on time, so a gap of
//! exactly `k × period` counts `k - 1` — what the monitor's `resumed` event reports.
//!
//! The window is `[start, end)`; beats at or after `end` are ignored.
//! - `start` given: a topic with no beat before `start` is treated as expected from `start` (as
//!   `HeartbeatMonitor.expect` at `start`): a virtual beat at `start`. A topic with beats before
//!   `start` carries its state in: the last of them decides whether it is already down at
//!   `start`. Outages that end at or before `start` are dropped; one in progress at `start` is
//!   clipped to begin at `start` (its `missed` stays the monitor's count at `down_to`).
//! - `start` given but `expect_from_start` false (an event log that says when the monitor
//!   watched): a topic first heard at or after `start` is judged from its first beat (or the
//!   moment the monitor expected it, which the caller passes as a beat); nothing before it.
//! - `start` absent: each topic's window begins at its first beat.
//! - A topic still down at `end` has an open outage ending at `end`, `missed` counted at `end`.
//!
//! Availability over the window (TimescaleDB `heartbeat_agg` style: clipped dead ranges):
//! `downtime` is the clipped outage time, `uptime_pct = 100 × (window − downtime) / window`,
//! `outages` counts every clipped outage; `mttr` is the mean length of the outages wholly inside
//! the window (not open, not begun before `start`: their length is known), `mtbf` the uptime
//! divided by the failures that began inside the window. Both `None` when nothing qualifies.

/// One beat: its time and the period in force after it (`None` or ≤ 0: the gap after it is not
/// judged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Beat {
    pub ts_ms: i64,
    pub period_ms: Option<i64>,
}

/// The window and the failure rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GapConfig {
    pub allowed_misses: i64,
    pub start_ms: Option<i64>,
    pub end_ms: i64,
    /// A topic with no beat before `start` is expected from `start` (a virtual beat there);
    /// false: its window begins at its first beat.
    pub expect_from_start: bool,
}

/// One outage, clipped to the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    pub down_from_ms: i64,
    pub down_to_ms: i64,
    pub missed: i64,
    /// Still down at the window's end (`down_to_ms` is the end).
    pub open: bool,
    /// The failure was declared inside the window (not clipped at its start).
    pub began_in_window: bool,
    /// The beat before the outage (or the moment the topic was expected) and the period in
    /// force after it: the deadlines are `last_beat_ms + k × period_ms`.
    pub last_beat_ms: i64,
    pub period_ms: i64,
}

impl Outage {
    pub fn duration_ms(&self) -> i64 {
        self.down_to_ms - self.down_from_ms
    }
}

/// One topic's availability over its window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Availability {
    pub window_start_ms: i64,
    pub window_end_ms: i64,
    pub uptime_pct: f64,
    pub outages: i64,
    pub downtime_ms: i64,
    pub mttr_ms: Option<f64>,
    pub mtbf_ms: Option<f64>,
}

/// Outages of one topic. Sorts `beats` (by time, then period) and drops those at or after the
/// end. `None` when no beat is left: the topic has no window.
pub fn outages(beats: &mut Vec<Beat>, cfg: &GapConfig) -> Option<(i64, Vec<Outage>)> {
    beats.retain(|b| b.ts_ms < cfg.end_ms);
    beats.sort_unstable();
    let first = *beats.first()?;
    let window_start = match cfg.start_ms {
        Some(start) if cfg.expect_from_start || first.ts_ms < start => start,
        _ => first.ts_ms,
    };
    let allowed = i128::from(cfg.allowed_misses.max(1));
    let mut out = Vec::new();
    let mut gap = |prev: Beat, next_ms: i64, open: bool| {
        let Some(period) = prev.period_ms.filter(|&p| p > 0) else {
            return;
        };
        let (t0, t1, period) = (
            i128::from(prev.ts_ms),
            i128::from(next_ms),
            i128::from(period),
        );
        let g = t1 - t0;
        let threshold = allowed * period;
        if g <= threshold || t1 <= i128::from(window_start) {
            return;
        }
        // t0 + threshold < t1 and (g - 1) / period < g: both fit in an i64.
        let down_from = (t0 + threshold) as i64;
        out.push(Outage {
            down_from_ms: down_from.max(window_start),
            down_to_ms: next_ms,
            missed: ((g - 1) / period) as i64,
            open,
            began_in_window: down_from >= window_start,
            last_beat_ms: prev.ts_ms,
            period_ms: period as i64,
        });
    };
    let mut prev = match cfg.start_ms {
        Some(start) if cfg.expect_from_start && first.ts_ms >= start => Some(Beat {
            ts_ms: start,
            period_ms: first.period_ms,
        }),
        _ => None,
    };
    for &beat in beats.iter() {
        if let Some(p) = prev {
            gap(p, beat.ts_ms, false);
        }
        prev = Some(beat);
    }
    if let Some(p) = prev {
        gap(p, cfg.end_ms, true);
    }
    Some((window_start, out))
}

/// Availability over `[window_start_ms, end)` from the topic's outages.
pub fn availability(window_start_ms: i64, window_end_ms: i64, outages: &[Outage]) -> Availability {
    let window = window_end_ms - window_start_ms;
    let downtime: i64 = outages.iter().map(Outage::duration_ms).sum();
    let uptime = window - downtime;
    let (mut complete, mut complete_ms, mut failures) = (0i64, 0i64, 0i64);
    for o in outages.iter().filter(|o| o.began_in_window) {
        failures += 1;
        if !o.open {
            complete += 1;
            complete_ms += o.duration_ms();
        }
    }
    Availability {
        window_start_ms,
        window_end_ms,
        uptime_pct: if window > 0 {
            100.0 * uptime as f64 / window as f64
        } else {
            100.0
        },
        outages: outages.len() as i64,
        downtime_ms: downtime,
        mttr_ms: (complete > 0).then(|| complete_ms as f64 / complete as f64),
        mtbf_ms: (failures > 0).then(|| uptime as f64 / failures as f64),
    }
}

/// The beats of many topics, in any order, grouped by topic: what one Spark partition (hash
/// partitioned by topic) hands over. Each topic is then analysed by [`outages`].
pub fn group_by_topic<'a>(
    rows: impl Iterator<Item = (&'a str, Beat)>,
) -> hashbrown::HashMap<&'a str, Vec<Beat>, foldhash::fast::FixedState> {
    let mut groups: hashbrown::HashMap<&str, Vec<Beat>, _> =
        hashbrown::HashMap::with_hasher(foldhash::fast::FixedState::default());
    for (topic, beat) in rows {
        match groups.get_mut(topic) {
            Some(beats) => beats.push(beat),
            None => {
                groups.insert(topic, vec![beat]);
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: i64 = 1000;

    fn beats(ts: &[i64]) -> Vec<Beat> {
        ts.iter()
            .map(|&ts_ms| Beat {
                ts_ms,
                period_ms: Some(P),
            })
            .collect()
    }

    fn cfg(allowed_misses: i64, start_ms: Option<i64>, end_ms: i64) -> GapConfig {
        GapConfig {
            allowed_misses,
            start_ms,
            end_ms,
            expect_from_start: true,
        }
    }

    /// (down_from, down_to, missed, open, began_in_window)
    type Row = (i64, i64, i64, bool, bool);

    fn run(ts: &[i64], cfg: GapConfig) -> (i64, Vec<Row>) {
        let (start, rows) = outages(&mut beats(ts), &cfg).expect("a window");
        let rows = rows
            .iter()
            .map(|o| {
                (
                    o.down_from_ms,
                    o.down_to_ms,
                    o.missed,
                    o.open,
                    o.began_in_window,
                )
            })
            .collect();
        (start, rows)
    }

    #[test]
    fn gap_longer_than_allowed_is_an_outage() {
        // allowed 2: a gap of 2.5 periods fails at prev + 2 s and misses 2 periods
        let (start, rows) = run(&[0, 1000, 3500, 4000], cfg(2, None, 4500));
        assert_eq!(start, 0);
        assert_eq!(rows, vec![(3000, 3500, 2, false, true)]);
    }

    #[test]
    fn beat_on_the_deadline_is_on_time() {
        // exactly allowed × period: no outage; exactly 3 periods with allowed 2: missed 2
        assert_eq!(run(&[0, 2000], cfg(2, None, 2500)).1, vec![]);
        assert_eq!(
            run(&[0, 3000], cfg(2, None, 3500)).1,
            vec![(2000, 3000, 2, false, true)]
        );
        assert_eq!(
            run(&[0, 3001], cfg(2, None, 3500)).1,
            vec![(2000, 3001, 3, false, true)]
        );
    }

    #[test]
    fn unsorted_input_and_duplicates() {
        let (_, rows) = run(&[5000, 0, 0, 1000, 5000], cfg(1, None, 5500));
        assert_eq!(rows, vec![(2000, 5000, 3, false, true)]);
    }

    #[test]
    fn open_outage_at_end() {
        // last beat at 1000; at end 4000 the deadlines 2000, 3000 have passed (4000 not yet)
        let (_, rows) = run(&[0, 1000], cfg(1, None, 4000));
        assert_eq!(rows, vec![(2000, 4000, 2, true, true)]);
        // end exactly on the failure deadline: not down yet
        assert_eq!(run(&[0, 1000], cfg(1, None, 2000)).1, vec![]);
    }

    #[test]
    fn beats_at_or_after_end_are_ignored() {
        let (_, rows) = run(&[0, 4000, 9000], cfg(1, None, 4000));
        assert_eq!(rows, vec![(1000, 4000, 3, true, true)]);
        let mut late = beats(&[5000]);
        assert_eq!(outages(&mut late, &cfg(1, None, 5000)), None);
    }

    #[test]
    fn topic_without_earlier_beats_is_expected_from_start() {
        // first beat 3.5 s after start: failed at start + 1 s, missed 3
        let (start, rows) = run(&[13_500, 14_000], cfg(1, Some(10_000), 15_000));
        assert_eq!(start, 10_000);
        assert_eq!(rows, vec![(11_000, 13_500, 3, false, true)]);
        // first beat within the allowance: nothing
        assert_eq!(run(&[11_000], cfg(1, Some(10_000), 11_500)).1, vec![]);
        // first beat exactly at start
        assert_eq!(run(&[10_000], cfg(1, Some(10_000), 10_500)).1, vec![]);
    }

    #[test]
    fn without_expect_from_start_a_topic_starts_at_its_first_beat() {
        let lazy = GapConfig {
            expect_from_start: false,
            ..cfg(1, Some(10_000), 14_400)
        };
        // first beat 3.5 s after start: nothing before it is judged
        let (start, rows) = run(&[13_500, 14_000], lazy);
        assert_eq!((start, rows), (13_500, vec![]));
        // a topic heard before start carries its state in as before
        let (start, rows) = run(&[5000, 13_500], lazy);
        assert_eq!(start, 10_000);
        assert_eq!(rows, vec![(10_000, 13_500, 8, false, false)]);
    }

    #[test]
    fn topic_down_at_start_is_clipped() {
        // last beat before start at 5000: down from 6000, clipped to 10_000, back at 12_000
        let (_, rows) = run(&[0, 1000, 5000, 12_000], cfg(1, Some(10_000), 13_000));
        assert_eq!(rows, vec![(10_000, 12_000, 6, false, false)]);
        // outage ending exactly at start is outside the window
        assert_eq!(run(&[5000, 10_000], cfg(1, Some(10_000), 10_500)).1, vec![]);
        // still down through the whole window
        assert_eq!(
            run(&[5000], cfg(1, Some(10_000), 20_000)).1,
            vec![(10_000, 20_000, 14, true, false)]
        );
    }

    #[test]
    fn bad_periods_are_not_judged() {
        let mut b = vec![
            Beat {
                ts_ms: 0,
                period_ms: None,
            },
            Beat {
                ts_ms: 5000,
                period_ms: Some(0),
            },
            Beat {
                ts_ms: 9000,
                period_ms: Some(1000),
            },
        ];
        let (_, rows) = outages(&mut b, &cfg(1, None, 12_000)).unwrap();
        assert_eq!(
            rows,
            vec![Outage {
                down_from_ms: 10_000,
                down_to_ms: 12_000,
                missed: 2,
                open: true,
                began_in_window: true,
                last_beat_ms: 9000,
                period_ms: 1000,
            }]
        );
    }

    #[test]
    fn period_per_beat_applies_to_the_gap_after_it() {
        let mut b = vec![
            Beat {
                ts_ms: 0,
                period_ms: Some(10_000),
            },
            Beat {
                ts_ms: 9000,
                period_ms: Some(1000),
            },
            Beat {
                ts_ms: 12_000,
                period_ms: Some(1000),
            },
        ];
        let (_, rows) = outages(&mut b, &cfg(1, None, 12_500)).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].down_from_ms, rows[0].missed), (10_000, 2));
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let mut b = vec![
            Beat {
                ts_ms: i64::MIN,
                period_ms: Some(i64::MAX),
            },
            Beat {
                ts_ms: i64::MAX - 1,
                period_ms: Some(1),
            },
        ];
        let (_, rows) = outages(&mut b, &cfg(i64::MAX, None, i64::MAX)).unwrap();
        assert_eq!(rows, vec![]);
        let (_, rows) = outages(&mut b, &cfg(1, None, i64::MAX)).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].down_from_ms, -1);
        assert_eq!(rows[0].missed, 1);
    }

    #[test]
    fn availability_over_the_window() {
        // window [10 s, 30 s): down at start until 12 s (clipped), a full outage 15..18 s,
        // open from 26 s to the end
        let (start, rows) = outages(
            &mut beats(&[5000, 12_000, 13_000, 14_000, 18_000, 25_000]),
            &cfg(1, Some(10_000), 30_000),
        )
        .unwrap();
        let a = availability(start, 30_000, &rows);
        assert_eq!(a.outages, 4);
        // 2 s + 3 s + (19..25: 6 s) + 4 s
        assert_eq!(a.downtime_ms, 15_000);
        assert!((a.uptime_pct - 25.0).abs() < 1e-12);
        // complete: 15..18 and 19..25
        assert_eq!(a.mttr_ms, Some(4500.0));
        // failures that began in the window: 15, 19, 26 s
        assert_eq!(a.mtbf_ms, Some(5000.0 / 3.0));
    }

    #[test]
    fn grouping_by_topic_keeps_every_beat() {
        let rows = [("a", 3), ("b", 1), ("a", 1), ("c", 7), ("b", 0)].map(|(t, ts_ms)| {
            (
                t,
                Beat {
                    ts_ms,
                    period_ms: Some(P),
                },
            )
        });
        let groups = group_by_topic(rows.into_iter());
        let mut sizes: Vec<(&str, Vec<i64>)> = groups
            .iter()
            .map(|(t, b)| (*t, b.iter().map(|b| b.ts_ms).collect()))
            .collect();
        sizes.sort();
        assert_eq!(
            sizes,
            vec![("a", vec![3, 1]), ("b", vec![1, 0]), ("c", vec![7])]
        );
    }

    #[test]
    fn availability_without_outages() {
        let a = availability(0, 10_000, &[]);
        assert_eq!(a.uptime_pct, 100.0);
        assert_eq!(
            (a.outages, a.downtime_ms, a.mttr_ms, a.mtbf_ms),
            (0, 0, None, None)
        );
    }
}
