//! The ingest-lag guard under the manual clock: an intake that falls behind its feed, read by
//! a simulated reader that records the beats it reads at the clock and notes each read.

use super::{Rig, MS, S};
use crate::detector::*;
use crate::event::EventKind::{CaughtUp, Failed, Lagging, LocalPause};

const STEP: u64 = 100 * MS;

/// A publisher beating topics at whole seconds, read by an intake `lag(t)` behind the clock:
/// at each step the clock moves on (the driver runs), then the intake records the beats sent
/// up to `t - lag(t)` that it had not read yet, and notes the read (backlogged while lagging,
/// with the transit of the freshest beat read when `transit`).
struct Feed<'a> {
    r: &'a Rig,
    /// (topic, its last beat's send time): beats sent every whole second up to it.
    topics: Vec<(TopicId, u64)>,
    /// Up to when the intake has read (send times).
    read: u64,
    transit: bool,
}

impl<'a> Feed<'a> {
    fn new(r: &'a Rig, topics: Vec<(TopicId, u64)>) -> Self {
        Self {
            r,
            topics,
            read: 0,
            transit: true,
        }
    }

    /// Run from the clock's now to `until` in steps, with the intake `lag(t)` behind; returns
    /// the events emitted.
    fn run(&mut self, until: u64, lag: impl Fn(u64) -> u64) -> Vec<Event> {
        let mut got = Vec::new();
        let mut t = self.r.det.now_ns();
        while t < until {
            t += STEP;
            self.r.at(t);
            let upto = t - lag(t);
            assert!(
                upto >= self.read,
                "the simulated intake never reads backwards"
            );
            for &(id, last) in &self.topics {
                // Beats sent at whole seconds in (read, upto], recorded now.
                let first = self.read / S + 1;
                for k in first..=upto / S {
                    if k * S <= last && k * S > self.read {
                        self.r.det.beat(id, Some(t));
                    }
                }
            }
            self.read = upto;
            let behind = t - upto;
            let transit = (self.transit && behind > 0).then_some(behind);
            self.r.det.note_intake(behind > 0, transit, Some(t));
            got.extend(self.r.take());
        }
        got
    }
}

fn kinds(events: &[Event], kind: EventKind) -> Vec<Event> {
    events.iter().filter(|e| e.kind == kind).copied().collect()
}

/// The lag of the main scenario: 0 up to 5 s, growing to 2 s at 7 s, 2 s up to 12 s, then
/// read up by 13 s.
fn ramp(t: u64) -> u64 {
    match t {
        t if t <= 5 * S => 0,
        t if t <= 7 * S => t - 5 * S,
        t if t <= 12 * S => 2 * S,
        t if t <= 13 * S => 2 * (13 * S - t),
        _ => 0,
    }
}

#[test]
fn a_lagging_intake_fails_no_live_topic_and_reports_the_dead_late_by_the_lag() {
    let r = Rig::new(S, 1);
    let live = r.add("live");
    let dead = r.add("dead"); // last beat sent at 5: due at 6
    let late = r.add("late"); // last beat sent at 8 (read at 10): due at 9
    let mut feed = Feed::new(&r, vec![(live, u64::MAX), (dead, 5 * S), (late, 8 * S)]);
    let got = feed.run(20 * S, ramp);
    let failed = kinds(&got, Failed);
    assert!(
        failed.iter().all(|e| e.topic != live),
        "no false failure: {failed:?}"
    );
    // `dead`'s last beat was read at 5 (before the lag): due at 6, judged once the intake had
    // read past 6 (the clock past 8), then once per period as usual, 6..=19 by 20.
    let of = |id| -> Vec<Event> { failed.iter().filter(|e| e.topic == id).copied().collect() };
    let want: Vec<Event> = (6..=19)
        .map(|k| Event::failed(dead, k as u32 - 5, k * S, 6 * S))
        .collect();
    assert_eq!(of(dead), want);
    // `late`'s last beat (sent at 8) was read, and recorded, at 10: due at 11, reported once
    // the watermark passed 11 (at 12.5), late by the lag.
    let want: Vec<Event> = (11..=19)
        .map(|k| Event::failed(late, k as u32 - 10, k * S, 11 * S))
        .collect();
    assert_eq!(of(late), want);
    // One episode: one `lagging` when the lag first passed 1 s (at 6.1: the intake stood at 5),
    // one `caught_up` at the first read not backlogged (13.0). It lasted from the first
    // backlogged read (5.1); its largest lag, 2.1 s, is what the driver held between two reads.
    assert_eq!(
        kinds(&got, Lagging),
        vec![Event::lagging(6 * S + STEP, 11 * STEP)]
    );
    assert_eq!(
        kinds(&got, CaughtUp),
        vec![Event::caught_up(13 * S, 13 * S - (5 * S + STEP), 21 * STEP)]
    );
    let stats = r.det.stats();
    assert_eq!((stats.lagging, stats.ingest_lag_ns), (1, 0));
    assert_eq!(r.det.status(live).unwrap().state, State::Alive);
}

#[test]
fn failures_come_out_when_the_watermark_passes_the_deadline_not_the_clock() {
    let r = Rig::new(S, 1);
    let dead = r.add("dead"); // never heard: due at 1
    r.at(900 * MS);
    r.det.note_intake(true, Some(500 * MS), Some(900 * MS)); // read up to 0.4
    r.at(2 * S);
    let got = r.take();
    assert_eq!(
        got,
        vec![Event::lagging(2 * S, 1600 * MS)],
        "1 is after the watermark (0.4)"
    );
    assert_eq!(r.det.lag_ns(), 2 * S - 400 * MS);
    r.det.note_intake(true, Some(MS), Some(2 * S)); // read up to 1.999
    r.at(2 * S + MS);
    assert_eq!(kinds(&r.take(), Failed), vec![Event::failed(dead, 1, S, S)]);
    // Deadline 2 waits for the watermark too.
    r.at(3 * S);
    assert!(kinds(&r.take(), Failed).is_empty());
    r.det.note_intake(false, None, Some(3 * S)); // read up: at the clock again
    r.at(3 * S + MS);
    assert_eq!(
        kinds(&r.take(), Failed),
        vec![
            Event::failed(dead, 2, 2 * S, S),
            Event::failed(dead, 3, 3 * S, S)
        ]
    );
}

#[test]
fn the_watermark_never_goes_back_within_an_episode() {
    let r = Rig::new(S, 1);
    let a = r.add("a"); // due at 1
    r.at(5 * S);
    r.take();
    let b = r.add("b"); // due at 6
    r.det.note_intake(true, Some(2 * S), Some(5 * S)); // up to 3
    assert_eq!(r.det.lag_ns(), 2 * S);
    r.det.note_intake(true, Some(3 * S), Some(5 * S + 500 * MS)); // 2.5: older, ignored
    r.at(5 * S + 500 * MS);
    assert_eq!(r.det.lag_ns(), 2 * S + 500 * MS);
    r.det.note_intake(true, None, Some(5 * S + 600 * MS)); // no transit: stays at 3
    r.at(5 * S + 600 * MS);
    assert_eq!(r.det.lag_ns(), 2 * S + 600 * MS);
    r.det.note_intake(true, Some(S), Some(7 * S)); // up to 6
    r.at(7 * S);
    assert_eq!(r.det.lag_ns(), S);
    // `b` was due at 6, which is not past the watermark yet.
    assert!(kinds(&r.take(), Failed).iter().all(|e| e.topic == a));
    assert_eq!(r.det.status(b).unwrap().state, State::Pending);
    // What was judged before the episode stays judged: `a` failed at 1..4 before it began
    // (the watermark, 3, did not take that back), and at 5 once the watermark passed 5.
    assert_eq!(r.det.status(a).unwrap().missed, 5);
}

#[test]
fn a_lag_below_the_threshold_is_held_silently() {
    let r = Rig::new(S, 1);
    let live = r.add("live");
    let mut feed = Feed::new(&r, vec![(live, u64::MAX)]);
    // Half a second behind from 2.5 s to 8 s: every beat read after its deadline at the clock.
    let got = feed.run(10 * S, |t| match t {
        t if t <= 2 * S => 0,
        t if t <= 2 * S + 500 * MS => t - 2 * S,
        t if t <= 8 * S => 500 * MS,
        t if t <= 9 * S => (9 * S - t) / 2,
        _ => 0,
    });
    assert_eq!(got, vec![], "no failure, no lagging event");
    assert_eq!(r.det.stats().lagging, 0);
}

#[test]
fn with_the_threshold_off_nothing_is_held() {
    let r = Rig::new(S, 1);
    r.det.set_lag_threshold(None).unwrap();
    assert_eq!(r.det.lag_threshold(), None);
    let live = r.add("live");
    let mut feed = Feed::new(&r, vec![(live, u64::MAX)]);
    let got = feed.run(20 * S, ramp);
    // The guard off: the backlog turns into failures, and no lag is reported.
    assert!(!kinds(&got, Failed).is_empty());
    assert!(kinds(&got, Lagging).is_empty() && kinds(&got, CaughtUp).is_empty());
    assert_eq!(r.det.lag_ns(), 0);
    assert!(r.det.set_lag_threshold(Some(0)).is_err());
    assert!(r.det.set_max_ingest_lag(Some(0)).is_err());
    r.det
        .set_lag_threshold(Some(DEFAULT_LAG_THRESHOLD_NS))
        .unwrap();
    assert_eq!(r.det.lag_threshold(), Some(DEFAULT_LAG_THRESHOLD_NS));
}

#[test]
fn turning_the_guard_off_mid_episode_releases_the_hold_and_ends_the_episode() {
    let r = Rig::new(S, 1);
    let a = r.add("a"); // due at 1
    r.det.note_intake(true, Some(0), Some(0));
    r.at(3 * S);
    assert_eq!(r.take(), vec![Event::lagging(3 * S, 3 * S)]);
    r.det.set_lag_threshold(None).unwrap();
    assert_eq!(r.take(), vec![Event::caught_up(3 * S, 3 * S, 3 * S)]);
    r.at(3 * S + MS);
    assert_eq!(
        kinds(&r.take(), Failed).len(),
        3,
        "judged at the clock again: {a}"
    );
}

#[test]
fn with_no_transit_the_hold_is_bounded_by_max_ingest_lag() {
    let r = Rig::new(S, 1);
    r.det.set_max_ingest_lag(Some(3 * S)).unwrap();
    assert_eq!(r.det.max_ingest_lag(), Some(3 * S));
    r.at(500 * MS);
    let dead = r.add("dead"); // due at 1.5
    r.det.note_intake(true, None, Some(500 * MS)); // legacy beats: held where judged (0.5)
    r.at(4 * S + 500 * MS);
    r.det.note_intake(true, None, Some(4 * S + 500 * MS));
    assert!(
        kinds(&r.take(), Failed).is_empty(),
        "held: 4.5 - 3 = 1.5 is not past 1.5"
    );
    assert_eq!(r.det.lag_ns(), 4 * S);
    r.at(4 * S + 501 * MS);
    // Past max_ingest_lag: deadlines proceed 3 s behind the clock.
    let dl = S + 500 * MS;
    assert_eq!(
        kinds(&r.take(), Failed),
        vec![Event::failed(dead, 1, dl, dl)]
    );
    r.at(5 * S + 501 * MS);
    assert_eq!(
        kinds(&r.take(), Failed),
        vec![Event::failed(dead, 2, dl + S, dl)]
    );
    // Lagging was reported once (when the hold passed 1 s), and not again.
    assert_eq!(r.det.stats().lagging, 1);
}

#[test]
fn a_transit_beyond_max_ingest_lag_is_not_believed_past_it() {
    let r = Rig::new(S, 1);
    r.det.set_max_ingest_lag(Some(2 * S)).unwrap();
    r.at(20 * S);
    let dead = r.add("dead"); // due at 21
    r.det.note_intake(true, Some(10 * S), Some(20 * S)); // up to 10
    r.at(23 * S);
    assert!(
        kinds(&r.take(), Failed).is_empty(),
        "held 2 s: 21 is not past 21"
    );
    r.at(23 * S + MS);
    assert_eq!(
        kinds(&r.take(), Failed),
        vec![Event::failed(dead, 1, 21 * S, 21 * S)]
    );
    assert_eq!(
        r.det.lag_ns(),
        13 * S + MS,
        "the lag reported is the intake's own"
    );
    r.det.set_max_ingest_lag(None).unwrap();
    assert_eq!(r.det.max_ingest_lag(), None);
}

#[test]
fn one_lagging_and_one_caught_up_per_episode() {
    let r = Rig::new(S, 1);
    r.at(10 * S);
    r.add("a");
    r.det.note_intake(true, Some(2 * S), Some(10 * S)); // up to 8
    r.det.note_intake(true, Some(500 * MS), Some(13 * S)); // 12.5: dips below 1 s
    r.det.note_intake(true, Some(3 * S), Some(14 * S)); // 11: ignored, 2.5 s behind
    r.det.note_intake(false, Some(MS), Some(15 * S));
    r.det.note_intake(false, None, Some(15 * S)); // released already: nothing
    r.det.note_intake(true, Some(2 * S), Some(16 * S)); // a second episode
    r.det.note_intake(false, None, Some(17 * S));
    let lag_events: Vec<Event> = r
        .take()
        .into_iter()
        .filter(|e| matches!(e.kind, Lagging | CaughtUp))
        .collect();
    assert_eq!(
        lag_events,
        vec![
            // The first note's lag (2 s) is past the threshold at once; the lag below it at
            // 13 and past it again at 14 is the same episode.
            Event::lagging(10 * S, 2 * S),
            // 10 .. 15; the largest lag: 15 - 12.5 at the release.
            Event::caught_up(15 * S, 5 * S, 2500 * MS),
            Event::lagging(16 * S, 2 * S),
            Event::caught_up(17 * S, S, 3 * S),
        ]
    );
    assert_eq!(r.det.stats().lagging, 2);
}

#[test]
fn stop_ends_the_episode_and_notes_while_stopped_are_ignored() {
    let r = Rig::new(S, 1);
    r.at(5 * S);
    let a = r.add("a"); // due at 6
    r.det.note_intake(true, Some(2 * S), Some(5 * S));
    r.at(6 * S + 500 * MS);
    assert_eq!(
        r.take(),
        vec![Event::lagging(5 * S, 2 * S)],
        "6 is not past the watermark"
    );
    r.det.stop();
    assert_eq!(
        r.take(),
        vec![Event::caught_up(6 * S + 500 * MS, 1500 * MS, 3500 * MS)]
    );
    assert_eq!(r.det.lag_ns(), 0);
    r.det.note_intake(true, Some(5 * S), Some(7 * S));
    assert_eq!(r.det.lag_ns(), 0, "stopped: not held");
    r.at(10 * S);
    r.det.start(None); // `a` due one period after the restart, at the clock
    r.at(11 * S + MS);
    assert_eq!(
        kinds(&r.take(), Failed),
        vec![Event::failed(a, 1, 11 * S, 11 * S)]
    );
    assert!(r.det.stats().lagging == 1);
}

#[test]
fn a_local_pause_during_an_episode_is_reported_and_re_based_as_usual() {
    let r = Rig::new(S, 1);
    let live = r.add("live");
    let dead = r.add("dead");
    r.at(500 * MS);
    r.beat(live);
    r.beat(dead); // due at 1.5
    r.det.note_intake(true, Some(200 * MS), Some(500 * MS)); // up to 0.3
    r.clock.stall(10 * S); // the monitor does not run: 0.5 .. 10.5
    r.clock.advance(0);
    let got = r.take();
    assert_eq!(
        kinds(&got, LocalPause),
        vec![Event::local_pause(10 * S + 500 * MS, 10 * S)]
    );
    assert_eq!(
        kinds(&got, Lagging).len(),
        1,
        "the watermark is 10 s behind: {got:?}"
    );
    // The intake reads its backlog: `live`'s beats, recorded now; then it is read up.
    r.beat(live);
    r.det.note_intake(false, Some(MS), None);
    assert_eq!(kinds(&r.take(), CaughtUp).len(), 1);
    // `dead`'s deadline (1.5) fell in the pause: re-based to a period after the wake-up.
    r.at(11 * S + 500 * MS);
    r.beat(live);
    assert!(kinds(&r.take(), Failed).is_empty());
    r.at(11 * S + 501 * MS);
    let dl = 11 * S + 500 * MS;
    assert_eq!(
        kinds(&r.take(), Failed),
        vec![Event::failed(dead, 1, dl, dl)]
    );
    assert_eq!(r.det.status(live).unwrap().state, State::Alive);
}
