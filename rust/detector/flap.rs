//! Flapping: a topic that fails and resumes more than `threshold` times within `window` is
//! flapping; part of the alerting policy (`policy.rs`), applied where `failed` and `resumed`
//! are handed out.
//!
//! Each `resumed` (one outage over) is noted per topic with its time; when more than
//! `threshold` fall within the last `window`, a `flapping` event (on) goes out, and while the
//! topic flaps its `failed` and `resumed` are held back (not delivered, counted in `held`) if
//! `hold`, else delivered as usual (the `resumed` that starts it too). It settles once `window`
//! has passed since its last transition (an outage began or ended): a `flapping` event (off)
//! goes out, followed by where the topic stands: a `failed` if it is down then, or, if it is up
//! and the last `failed` its listeners got was never resolved (its `resumed` held back), a
//! `resumed` (see `Detector::settled`). The settle time is a transition the driver applies in
//! time order, as a silence's end (`policy.rs`).
//! `allowed_misses` is untouched: it decides when an outage begins; this only groups outages.

use super::*;
use std::collections::{HashMap, VecDeque};

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Flapping settings (`threshold` 0: off).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FlapConfig {
    /// More outages than this within the window is flapping.
    pub threshold: u32,
    /// ns.
    pub window_ns: u64,
    /// Hold back the topic's `failed` and `resumed` while it flaps.
    pub hold: bool,
}

struct Flap {
    /// When its recent outages ended (relative ns), oldest first, within the window.
    resumes: VecDeque<u64>,
    flapping: bool,
    /// Its latest transition (an outage began or ended), relative ns.
    last: u64,
    /// The latest outage that ended: its missed count and length (ns), for the `resumed` a
    /// settle may owe.
    ended: (u32, u64),
}

/// A topic that settled: when (relative ns) and its latest outage that ended (missed, ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Settled {
    pub(super) id: TopicId,
    pub(super) when: u64,
    pub(super) ended: (u32, u64),
}

/// What to do with a `failed` or `resumed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Deliver,
    /// Held back: the topic flaps.
    Hold,
    /// This `resumed` starts the topic flapping, after `count` outages in the window.
    Starts {
        count: u32,
    },
}

#[derive(Default)]
pub(super) struct Flaps {
    pub(super) config: FlapConfig,
    topics: FastMap<TopicId, Flap>,
    /// The topics flapping now (few).
    flapping: Vec<TopicId>,
    /// Sweep the topics no longer in a window when there are this many.
    sweep_at: usize,
}

impl Flaps {
    pub(super) fn on(&self) -> bool {
        self.config.threshold > 0
    }

    /// Forget a topic (its id is reused).
    pub(super) fn forget(&mut self, id: TopicId) {
        self.topics.remove(&id);
        self.flapping.retain(|&t| t != id);
    }

    /// The verdict on `ev` (a `failed` or `resumed` of topic `id`) at `at` (relative); `first`
    /// for the `failed` that begins an outage.
    pub(super) fn judge(&mut self, id: TopicId, ev: &Event, at: u64, first: bool) -> Verdict {
        let kind = ev.kind;
        let c = self.config;
        let hold = if c.hold {
            Verdict::Hold
        } else {
            Verdict::Deliver
        };
        match kind {
            EventKind::Failed => match self.topics.get_mut(&id) {
                Some(f) if f.flapping => {
                    if first {
                        f.last = f.last.max(at);
                    }
                    hold
                }
                _ => Verdict::Deliver,
            },
            EventKind::Resumed => {
                self.sweep(at);
                let f = self.topics.entry(id).or_insert_with(|| Flap {
                    resumes: VecDeque::new(),
                    flapping: false,
                    last: 0,
                    ended: (0, 0),
                });
                f.last = f.last.max(at);
                f.ended = (ev.missed, ev.detail);
                if f.flapping {
                    return hold;
                }
                f.resumes.push_back(at);
                while f
                    .resumes
                    .front()
                    .is_some_and(|&t| t.saturating_add(c.window_ns) < at)
                {
                    f.resumes.pop_front();
                }
                if f.resumes.len() > c.threshold as usize {
                    f.flapping = true;
                    self.flapping.push(id);
                    Verdict::Starts {
                        count: u32::try_from(f.resumes.len()).unwrap_or(u32::MAX),
                    }
                } else {
                    Verdict::Deliver
                }
            }
            _ => Verdict::Deliver,
        }
    }

    /// Topic `id` flaps from `at` (relative ns) on, carried over from another monitor
    /// (`adopt.rs`): it settles one window later unless another outage begins or ends.
    pub(super) fn carry_flapping(&mut self, id: TopicId, at: u64) {
        let f = self.topics.entry(id).or_insert_with(|| Flap {
            resumes: VecDeque::new(),
            flapping: false,
            last: 0,
            ended: (0, 0),
        });
        f.last = f.last.max(at);
        if !f.flapping {
            f.flapping = true;
            self.flapping.push(id);
        }
    }

    /// Drop the topics with no outage in the window, once they pile up (amortized).
    fn sweep(&mut self, now: u64) {
        if self.topics.len() < self.sweep_at.max(1024) {
            return;
        }
        let window = self.config.window_ns;
        self.topics
            .retain(|_, f| f.flapping || f.last.saturating_add(window) >= now);
        self.sweep_at = self.topics.len() * 2;
    }

    /// The topics flapping now.
    pub(super) fn flapping_ids(&self) -> &[TopicId] {
        &self.flapping
    }

    /// How many topics flap now.
    pub(super) fn count(&self) -> usize {
        self.flapping.len()
    }

    /// When the next flapping topic settles (relative ns).
    pub(super) fn next_settle(&self) -> Option<u64> {
        let window = self.config.window_ns;
        self.flapping
            .iter()
            .filter_map(|id| self.topics.get(id))
            .map(|f| f.last.saturating_add(window))
            .min()
    }

    /// The topics settled by `at`, each with its settle time, taken off the flapping list.
    pub(super) fn settle(&mut self, at: u64) -> Vec<Settled> {
        let window = self.config.window_ns;
        let mut out = Vec::new();
        let topics = &mut self.topics;
        self.flapping.retain(|id| {
            let Some(f) = topics.get_mut(id) else {
                return false;
            };
            let when = f.last.saturating_add(window);
            if when > at {
                return true;
            }
            f.flapping = false;
            f.resumes.clear();
            out.push(Settled {
                id: *id,
                when,
                ended: f.ended,
            });
            false
        });
        out.sort_by_key(|s| (s.when, s.id));
        out
    }

    /// Every topic flapping now, settled at once at `at` (flapping turned off).
    pub(super) fn settle_all(&mut self, at: u64) -> Vec<Settled> {
        let ids = std::mem::take(&mut self.flapping);
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(f) = self.topics.get_mut(&id) {
                f.flapping = false;
                f.resumes.clear();
                out.push(Settled {
                    id,
                    when: at,
                    ended: f.ended,
                });
            }
        }
        out
    }
}
