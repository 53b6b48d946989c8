//! Replay protection for signed beats: per topic, the last [`REPLAY_BOOTS`] boot ids heard, each
//! with the highest `seq` taken from it and its send time.
//!
//! A beat of a remembered boot is taken only with a higher `seq`. A beat of a new boot is taken
//! (a publisher restart) unless all [`REPLAY_BOOTS`] boots are remembered already and it was sent
//! before the least recently heard one's last beat (a replay from a long-gone boot).
//!
//! Memory: a topic's boots live in its slot (the low 32 bits of its handle); the slot's
//! generation (the high bits) tells a reused slot's new topic from the old one, which starts
//! afresh. Boot ids are kept as keyed 64-bit hashes, not strings: a million signed topics cost
//! ~40 bytes each, not ~100. (A collision needs two boot ids of one topic to hash alike under a
//! per-process random key: not something a sender can aim at, and a replay still needs a beat
//! signed with the shared key.)

use std::hash::BuildHasher;

/// How many boot ids of a topic are remembered.
pub const REPLAY_BOOTS: usize = 4;

#[derive(Clone, Copy, Debug)]
struct Boot {
    id: u64,
    seq: u64,
    /// The send time of the last beat taken from it (NaN: none given).
    sent: f64,
}

/// One topic's boots, least recently heard first. The first lives inline: most topics only
/// ever have one boot at a time.
#[derive(Clone, Debug, Default)]
struct History {
    handle: u64,
    len: u8,
    first: Option<Boot>,
    more: Option<Box<[Boot; REPLAY_BOOTS - 1]>>,
}

impl History {
    fn get(&self, i: usize) -> Boot {
        if i == 0 {
            self.first.expect("len > 0")
        } else {
            self.more.as_ref().expect("len > 1")[i - 1]
        }
    }

    fn to_vec(&self) -> Vec<Boot> {
        (0..self.len as usize).map(|i| self.get(i)).collect()
    }

    fn store(&mut self, boots: &[Boot]) {
        self.len = boots.len() as u8;
        self.first = boots.first().copied();
        if boots.len() > 1 {
            let more = self.more.get_or_insert_with(|| {
                Box::new(
                    [Boot {
                        id: 0,
                        seq: 0,
                        sent: f64::NAN,
                    }; REPLAY_BOOTS - 1],
                )
            });
            more[..boots.len() - 1].copy_from_slice(&boots[1..]);
        } else {
            self.more = None;
        }
    }
}

/// The replay guard of one monitor (not synchronised: its owner locks it).
pub struct ReplayGuard {
    slots: Vec<History>,
    hasher: foldhash::quality::RandomState,
}

impl Default for ReplayGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayGuard {
    pub fn new() -> Self {
        Self {
            slots: Vec::new(),
            hasher: foldhash::quality::RandomState::default(),
        }
    }

    /// Whether a signed beat (`boot`, `seq`, `sent`) of the topic with `handle` is not a replay;
    /// if so it is remembered. `Err` says why it is one.
    pub fn admit(
        &mut self,
        handle: u64,
        boot: &str,
        seq: u64,
        sent: Option<f64>,
    ) -> Result<(), String> {
        let id = self.hasher.hash_one(boot);
        let slot = (handle & 0xFFFF_FFFF) as usize;
        if slot >= self.slots.len() {
            self.slots.resize_with(slot + 1, History::default);
        }
        let entry = &mut self.slots[slot];
        if entry.handle != handle {
            *entry = History {
                handle,
                ..History::default()
            };
        }
        let history = entry.to_vec();
        if let Some(known) = history.iter().find(|b| b.id == id) {
            if seq <= known.seq {
                return Err(format!("seq {seq} <= {} of the same boot", known.seq));
            }
        } else if history.len() >= REPLAY_BOOTS {
            if let Some(sent) = sent {
                let oldest = history[0].sent;
                if !oldest.is_nan() && sent <= oldest {
                    return Err(format!(
                        "an unknown boot id, sent before the last {REPLAY_BOOTS} boots' beats"
                    ));
                }
            }
        }
        let mut kept: Vec<Boot> = history.into_iter().filter(|b| b.id != id).collect();
        kept.push(Boot {
            id,
            seq,
            sent: sent.unwrap_or(f64::NAN),
        });
        let from = kept.len().saturating_sub(REPLAY_BOOTS);
        entry.store(&kept[from..]);
        Ok(())
    }

    /// Forget the topic with `handle` (removed).
    pub fn forget(&mut self, handle: u64) {
        let slot = (handle & 0xFFFF_FFFF) as usize;
        if let Some(entry) = self.slots.get_mut(slot) {
            if entry.handle == handle {
                *entry = History::default();
            }
        }
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<History>()
            + self.slots.iter().filter(|h| h.more.is_some()).count()
                * std::mem::size_of::<[Boot; REPLAY_BOOTS - 1]>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_boot_needs_a_higher_seq() {
        let mut g = ReplayGuard::new();
        assert!(g.admit(7, "a", 5, Some(1.0)).is_ok());
        assert!(g
            .admit(7, "a", 5, Some(2.0))
            .unwrap_err()
            .contains("seq 5 <= 5"));
        assert!(g.admit(7, "a", 4, Some(2.0)).is_err());
        assert!(g.admit(7, "a", 6, Some(2.0)).is_ok());
    }

    #[test]
    fn a_new_boot_is_a_restart_until_four_are_known_then_old_ones_are_replays() {
        let mut g = ReplayGuard::new();
        for (i, boot) in ["a", "b", "c", "d"].iter().enumerate() {
            assert!(g.admit(1, boot, 1, Some(10.0 + i as f64)).is_ok());
        }
        // Sent before the least recently heard boot's ("a", 10.0) last beat: a replay.
        assert!(g
            .admit(1, "e", 1, Some(9.0))
            .unwrap_err()
            .contains("unknown boot"));
        // Sent after it: a restart; "a" is forgotten.
        assert!(g.admit(1, "e", 1, Some(11.5)).is_ok());
        assert!(
            g.admit(1, "a", 1, Some(20.0)).is_ok(),
            "a forgotten boot starts afresh"
        );
        // Without a send time the age rule cannot apply.
        assert!(g.admit(1, "z", 1, None).is_ok());
    }

    #[test]
    fn a_reused_slot_starts_afresh_and_forget_only_forgets_its_own_topic() {
        let mut g = ReplayGuard::new();
        assert!(g.admit(3, "a", 9, None).is_ok());
        let reused = (1u64 << 32) | 3;
        assert!(
            g.admit(reused, "a", 1, None).is_ok(),
            "another topic in the slot"
        );
        g.forget(3); // the old handle: not the slot's topic any more
        assert!(g.admit(reused, "a", 1, None).is_err());
        g.forget(reused);
        assert!(g.admit(reused, "a", 1, None).is_ok());
    }
}
