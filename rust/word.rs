//! The per-topic atomic word: the only state the beat path touches.
//!
//! ```text
//!  63 ............................. 6   5     4      3      2..0
//! [ last beat, ns since the epoch    | PHI | FRESH | HEARD | state ]
//! ```
//! A beat is one compare-and-swap that raises the timestamp, sets HEARD and FRESH and moves
//! PENDING to ALIVE. The driver consumes FRESH ("heard since I last looked") under its lock, and
//! moves ALIVE to FAILED with a compare-and-swap, so a beat racing a failure is never lost: one
//! of the two CAS operations sees the other's write and retries.

/// Lifecycle of a topic on the subscribing side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum State {
    /// Expected, never heard yet.
    Pending = 0,
    /// Heard within its allowance.
    Alive = 1,
    /// Missed `allowed_misses` periods or more.
    Failed = 2,
    /// Not watched for now; beats still update `last_seen`.
    Paused = 3,
    /// The detector is stopped; beats are refused.
    Stopped = 4,
    /// Gone for good; its id is retired.
    Removed = 5,
    /// Internal: PAUSED, and FAILED when it was paused, not heard since. Shown as PAUSED
    /// ([`State::public`]); its first beat takes the detector lock to note the recovery, which
    /// `resume` then reports.
    PausedFailed = 6,
}

impl State {
    /// The upper-case name used in Python (`"ALIVE"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "PENDING",
            State::Alive => "ALIVE",
            State::Failed => "FAILED",
            State::Paused | State::PausedFailed => "PAUSED",
            State::Stopped => "STOPPED",
            State::Removed => "REMOVED",
        }
    }

    /// The state as users see it: [`State::PausedFailed`] is [`State::Paused`].
    pub fn public(self) -> State {
        match self {
            State::PausedFailed => State::Paused,
            s => s,
        }
    }

    /// Whether the topic is paused (whatever it was before).
    pub fn is_paused(self) -> bool {
        matches!(self, State::Paused | State::PausedFailed)
    }

    /// Whether the detector is watching the topic (it is on the timer wheel).
    pub fn is_watched(self) -> bool {
        matches!(self, State::Pending | State::Alive | State::Failed)
    }

    fn from_bits(bits: u64) -> State {
        match bits & STATE_MASK {
            0 => State::Pending,
            1 => State::Alive,
            2 => State::Failed,
            3 => State::Paused,
            4 => State::Stopped,
            6 => State::PausedFailed,
            _ => State::Removed,
        }
    }
}

const STATE_MASK: u64 = 0b111;
/// Set once the topic has ever been heard.
pub const HEARD: u64 = 1 << 3;
/// Set by a beat, cleared when the driver has taken it into account.
pub const FRESH: u64 = 1 << 4;
/// The topic uses phi-accrual detection (its beats also feed the interval history).
pub const PHI: u64 = 1 << 5;
/// Where the timestamp starts. A word never heard holds its id's generation there instead.
pub const TS_SHIFT: u32 = 6;
/// The largest storable timestamp: 2^58 ns, about 9.1 years after the detector's epoch.
pub const TS_MAX: u64 = u64::MAX >> TS_SHIFT;

/// A word with this state, no beat and no flags.
#[inline]
pub fn new(state: State) -> u64 {
    state as u64
}

/// The state part.
#[inline]
pub fn state(w: u64) -> State {
    State::from_bits(w)
}

/// The last beat's time (meaningful when HEARD is set).
#[inline]
pub fn ts(w: u64) -> u64 {
    w >> TS_SHIFT
}

/// `w` with another state.
#[inline]
pub fn with_state(w: u64, s: State) -> u64 {
    (w & !STATE_MASK) | s as u64
}

/// `w` after a beat at `t`: the timestamp only moves forward, HEARD and FRESH are set, and a
/// PENDING topic becomes ALIVE. FAILED stays FAILED: leaving it emits `resumed`, which is the
/// driver lock's job. (The timestamp bits of a word never heard are no time: see `TS_SHIFT`.)
#[inline]
pub fn after_beat(w: u64, t: u64) -> u64 {
    let last = if w & HEARD != 0 { ts(w) } else { 0 };
    let t = t.min(TS_MAX).max(last);
    let flags = (w & (STATE_MASK | PHI)) | HEARD | FRESH;
    let w = (t << TS_SHIFT) | flags;
    if state(w) == State::Pending {
        with_state(w, State::Alive)
    } else {
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_round_trips() {
        let w = after_beat(new(State::Pending), 123_456_789);
        assert_eq!(state(w), State::Alive);
        assert_eq!(ts(w), 123_456_789);
        assert_ne!(w & HEARD, 0);
        assert_ne!(w & FRESH, 0);
        let f = with_state(w, State::Failed);
        assert_eq!(state(f), State::Failed);
        assert_eq!(ts(f), 123_456_789);
    }

    #[test]
    fn beats_never_move_time_back_and_keep_failed_and_phi() {
        let w = after_beat(new(State::Alive) | PHI, 500);
        let older = after_beat(w, 100);
        assert_eq!(ts(older), 500);
        let failed = after_beat(with_state(w, State::Failed), 900);
        assert_eq!(state(failed), State::Failed);
        assert_ne!(failed & PHI, 0);
        assert_eq!(ts(after_beat(w, u64::MAX)), TS_MAX);
    }

    #[test]
    fn paused_stays_paused() {
        let w = after_beat(new(State::Paused), 7);
        assert_eq!(state(w), State::Paused);
        assert_eq!(ts(w), 7);
        let w = after_beat(new(State::PausedFailed), 9);
        assert_eq!(state(w), State::PausedFailed);
        assert_eq!(state(w).public(), State::Paused);
        assert_eq!(state(w).as_str(), "PAUSED");
    }
}
