//! What the detector tells its subscribers. Events are small `Copy` values so a queue of them
//! is a flat ring buffer; topic names are resolved only when Python asks for them.

use crate::queue::Keyed;
use crate::registry::TopicId;

/// The kind of an [`Event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A period ended without a beat and `missed >= allowed_misses`.
    Failed,
    /// The first beat after a failure.
    Resumed,
    /// A beat, for subscribers that asked for every beat.
    Received,
    /// The monitor itself was not running for longer than its `max_local_pause`; deadlines
    /// that fell inside were re-based instead of fired. Not about one topic.
    LocalPause,
    /// The monitor's own intake fell behind its feed by more than its `lag_threshold`:
    /// deadlines are judged against what has been read, not the clock (see
    /// `detector/lag.rs`). Not about one topic.
    Lagging,
    /// The intake that was [`Lagging`](EventKind::Lagging) has read its backlog (or the
    /// episode ended: the guard was turned off, the detector stopped). Not about one topic.
    CaughtUp,
    /// A topic started flapping (failed and resumed more than `flap_threshold` times within
    /// `flap_window`), or settled (see `detector/policy.rs`).
    Flapping,
}

impl EventKind {
    /// Every kind, at the index of its [`code`](EventKind::code).
    pub const ALL: [EventKind; 7] = [
        EventKind::Failed,
        EventKind::Resumed,
        EventKind::Received,
        EventKind::LocalPause,
        EventKind::Lagging,
        EventKind::CaughtUp,
        EventKind::Flapping,
    ];

    /// A small number for the kind (its index in [`EventKind::ALL`]): the `kinds` column of
    /// a Python event batch.
    pub fn code(self) -> u8 {
        match self {
            EventKind::Failed => 0,
            EventKind::Resumed => 1,
            EventKind::Received => 2,
            EventKind::LocalPause => 3,
            EventKind::Lagging => 4,
            EventKind::CaughtUp => 5,
            EventKind::Flapping => 6,
        }
    }

    /// The lower-case name used in Python (`"failed"`, `"resumed"`, `"received"`,
    /// `"local_pause"`, `"lagging"`, `"caught_up"`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Failed => "failed",
            EventKind::Resumed => "resumed",
            EventKind::Received => "received",
            EventKind::LocalPause => "local_pause",
            EventKind::Lagging => "lagging",
            EventKind::CaughtUp => "caught_up",
            EventKind::Flapping => "flapping",
        }
    }
}

/// Latency value meaning "the beat carried no send time".
pub const NO_LATENCY: i64 = i64::MIN;

/// Sequence number meaning "the beat carried none".
pub const NO_SEQ: u64 = u64::MAX;

/// The `topic` of an event about no topic ([`EventKind::LocalPause`], [`EventKind::Lagging`],
/// [`EventKind::CaughtUp`]); never a topic id, since
/// ids stay below the registry's `MAX_TOPICS`.
pub const NO_TOPIC: TopicId = TopicId::MAX;

/// One detector event. Times are absolute nanoseconds on the detector's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The topic it happened to ([`NO_TOPIC`] for a local pause, lagging, caught up).
    pub topic: TopicId,
    /// Consecutive missed periods: the count reached (failed) or the count before the beat (resumed).
    pub missed: u32,
    /// When: the deadline that passed (failed), the beat's time (resumed, received), the
    /// wake-up (local pause), or when the lag was found (lagging, caught up).
    pub at_ns: u64,
    /// Failed: when the outage began. Resumed: its length. Received: the beat's sequence number.
    /// Local pause: how long the monitor was not running. Lagging: the lag. Caught up: how long
    /// the episode lasted.
    pub detail: u64,
    /// Received: transit time of the beat in ns, or [`NO_LATENCY`]. Caught up: the largest lag
    /// seen in the episode (ns, saturated at `i64::MAX`). Failed: the reason serial of an
    /// explicit failure (see [`Event::reason_serial`]), or [`NO_LATENCY`].
    pub latency_ns: i64,
    /// Failed, resumed: the topic is silenced (see `detector/policy.rs`). False otherwise.
    pub silenced: bool,
    /// Failed, resumed: the parent topic whose failure holds this one back, or [`NO_TOPIC`]
    /// (see `detector/policy.rs`).
    pub suppressed_by: TopicId,
}

impl Event {
    /// A `failed` event: `missed` periods gone by `at_ns`, failing since `since_ns`.
    pub fn failed(topic: TopicId, missed: u32, at_ns: u64, since_ns: u64) -> Self {
        Self {
            kind: EventKind::Failed,
            topic,
            missed,
            at_ns,
            detail: since_ns,
            latency_ns: NO_LATENCY,
            silenced: false,
            suppressed_by: NO_TOPIC,
        }
    }

    /// This `failed` event with the reason serial `serial` (an explicit failure, see
    /// `detector/down.rs`), kept in `latency_ns` (which `failed` does not use otherwise).
    pub fn with_reason(self, serial: u64) -> Self {
        debug_assert_eq!(self.kind, EventKind::Failed);
        Self {
            latency_ns: i64::try_from(serial).unwrap_or(i64::MAX),
            ..self
        }
    }

    /// Failed: the serial of its reason, for an explicit failure (None: periods missed).
    pub fn reason_serial(&self) -> Option<u64> {
        (self.kind == EventKind::Failed && self.latency_ns >= 0).then_some(self.latency_ns as u64)
    }

    /// A `resumed` event: heard at `at_ns` after `missed` periods and `downtime_ns` of outage.
    pub fn resumed(topic: TopicId, missed: u32, at_ns: u64, downtime_ns: u64) -> Self {
        Self {
            kind: EventKind::Resumed,
            topic,
            missed,
            at_ns,
            detail: downtime_ns,
            latency_ns: NO_LATENCY,
            silenced: false,
            suppressed_by: NO_TOPIC,
        }
    }

    /// A `received` event for one beat (`seq` may be [`NO_SEQ`]).
    pub fn received(topic: TopicId, at_ns: u64, seq: u64, latency_ns: i64) -> Self {
        Self {
            kind: EventKind::Received,
            topic,
            missed: 0,
            at_ns,
            detail: seq,
            latency_ns,
            silenced: false,
            suppressed_by: NO_TOPIC,
        }
    }

    /// A `local_pause` event: the monitor woke at `at_ns` after `duration_ns` of not running.
    pub fn local_pause(at_ns: u64, duration_ns: u64) -> Self {
        Self {
            kind: EventKind::LocalPause,
            topic: NO_TOPIC,
            missed: 0,
            at_ns,
            detail: duration_ns,
            latency_ns: NO_LATENCY,
            silenced: false,
            suppressed_by: NO_TOPIC,
        }
    }

    /// A `lagging` event: at `at_ns` the intake was found `lag_ns` behind the clock.
    pub fn lagging(at_ns: u64, lag_ns: u64) -> Self {
        Self {
            kind: EventKind::Lagging,
            topic: NO_TOPIC,
            missed: 0,
            at_ns,
            detail: lag_ns,
            latency_ns: NO_LATENCY,
            silenced: false,
            suppressed_by: NO_TOPIC,
        }
    }

    /// A `caught_up` event: at `at_ns` a lag episode of `duration_ns` ended, whose largest lag
    /// was `max_lag_ns`.
    pub fn caught_up(at_ns: u64, duration_ns: u64, max_lag_ns: u64) -> Self {
        Self {
            kind: EventKind::CaughtUp,
            topic: NO_TOPIC,
            missed: 0,
            at_ns,
            detail: duration_ns,
            latency_ns: i64::try_from(max_lag_ns).unwrap_or(i64::MAX),
            silenced: false,
            suppressed_by: NO_TOPIC,
        }
    }

    /// A `flapping` event: at `at_ns` the topic started flapping (`on`) after `count` outages
    /// within the window, or settled (`!on`).
    pub fn flapping(topic: TopicId, on: bool, count: u32, at_ns: u64) -> Self {
        Self {
            kind: EventKind::Flapping,
            topic,
            missed: count,
            at_ns,
            detail: u64::from(on),
            latency_ns: NO_LATENCY,
            silenced: false,
            suppressed_by: NO_TOPIC,
        }
    }

    /// Flapping: true when it started, false when it settled.
    pub fn is_flapping(&self) -> Option<bool> {
        (self.kind == EventKind::Flapping).then_some(self.detail != 0)
    }

    /// Lagging: how far behind the clock the intake was.
    pub fn lag_ns(&self) -> Option<u64> {
        (self.kind == EventKind::Lagging).then_some(self.detail)
    }

    /// Caught up: how long the lag episode lasted.
    pub fn lag_duration_ns(&self) -> Option<u64> {
        (self.kind == EventKind::CaughtUp).then_some(self.detail)
    }

    /// Caught up: the largest lag seen in the episode.
    pub fn max_lag_ns(&self) -> Option<u64> {
        (self.kind == EventKind::CaughtUp).then_some(self.latency_ns.max(0) as u64)
    }

    /// Local pause: how long the monitor was not running.
    pub fn pause_ns(&self) -> Option<u64> {
        (self.kind == EventKind::LocalPause).then_some(self.detail)
    }

    /// Failed: when the outage began.
    pub fn since_ns(&self) -> Option<u64> {
        (self.kind == EventKind::Failed).then_some(self.detail)
    }

    /// Resumed: how long the outage lasted.
    pub fn downtime_ns(&self) -> Option<u64> {
        (self.kind == EventKind::Resumed).then_some(self.detail)
    }

    /// Received: the beat's sequence number, when it carried one.
    pub fn seq(&self) -> Option<u64> {
        (self.kind == EventKind::Received && self.detail != NO_SEQ).then_some(self.detail)
    }

    /// Received: the beat's transit time, when known.
    pub fn latency(&self) -> Option<i64> {
        (self.kind == EventKind::Received && self.latency_ns != NO_LATENCY)
            .then_some(self.latency_ns)
    }

    /// Whether the alerting policy marked it (silenced, or suppressed by a failed parent).
    pub fn is_marked(&self) -> bool {
        self.silenced || self.suppressed_by != NO_TOPIC
    }
}

impl Keyed for Event {
    #[inline]
    fn key(&self) -> u32 {
        self.topic
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_codes_index_all() {
        for (i, kind) in EventKind::ALL.iter().enumerate() {
            assert_eq!(kind.code() as usize, i, "{}", kind.as_str());
        }
    }
}
