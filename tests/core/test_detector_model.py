"""Property test: the detector against a plain-Python reference of the semantics."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

import heartwire as hw


@dataclass
class RefTopic:
    """One topic, in the obvious (eager) way, times in ms."""

    name: str
    period: int
    allowed: int
    next: int
    missed: int = 0
    failed: bool = False
    heard: bool = False
    since: int = 0
    last: int = -1
    missed_at: int = -1
    events: list[tuple] = field(default_factory=list)

    def advance(self, now: int) -> None:
        while self.next < now:  # a beat exactly at the deadline is on time
            self.missed += 1
            self.missed_at = self.next
            if self.missed >= self.allowed:
                if not self.failed:
                    self.failed, self.since = True, self.next
                self.events.append(("failed", self.missed, self.next, self.since))
            self.next += self.period

    def beat(self, now: int) -> None:
        """A beat stamped ``now`` (maybe older than the clock: recorded late)."""
        self.heard = True
        if now <= self.last:
            return  # older than the last beat: nothing new
        self.last = now
        if self.failed:
            if now <= self.missed_at:
                return  # older than the last missed deadline: the outage goes on
            self.events.append(("resumed", self.missed, now, now - self.since))
            self.failed = False
        self.missed = 0
        self.next = now + self.period


topics = st.lists(
    st.tuples(st.sampled_from([50, 100, 250, 1000]), st.integers(1, 3)), min_size=1, max_size=4
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.integers(0, 1500)),
        st.tuples(st.just("beat"), st.integers(0, 3)),
        st.tuples(st.just("late"), st.tuples(st.integers(0, 3), st.integers(1, 3000))),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(topics=topics, ops=ops)
def test_detector_matches_the_reference_model(topics, ops) -> None:
    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock)
    queue = det.subscribe(capacity=1 << 20)
    ref = []
    for i, (period, allowed) in enumerate(topics):
        det.add(f"t{i}", period=period / 1000, allowed_misses=allowed)
        ref.append(RefTopic(f"t{i}", period, allowed, next=period))
    now = 0
    for op, arg in ops:
        if op == "advance":
            now += arg
            clock.set(now / 1000)
            for t in ref:
                t.advance(now)
        elif op == "late":
            i, age = arg
            t = max(0, now - age)
            # Late beats of FAILED topics only: a live topic takes a late beat in lazily, at
            # its next deadline, so its status in between is not the eager model's.
            if i < len(ref) and ref[i].failed:
                det.beat(f"t{i}", now=t / 1000)
                ref[i].beat(t)
        elif arg < len(ref):
            det.beat(f"t{arg}")
            ref[arg].beat(now)
    got: dict[str, list[tuple]] = {t.name: [] for t in ref}
    while batch := queue.try_pop(100_000):
        for e in batch:
            detail = round(e.since * 1000) if e.kind == "failed" else round(e.downtime * 1000)
            got[e.topic].append((e.kind, e.missed, round(e.at * 1000), detail))
    for t in ref:
        assert got[t.name] == t.events, t.name
        status = det.status(t.name)
        expected_state = "FAILED" if t.failed else "ALIVE" if t.heard else "PENDING"
        assert (status.state, status.missed) == (expected_state, t.missed), t.name
        assert round(status.next_deadline * 1000) == t.next, t.name
