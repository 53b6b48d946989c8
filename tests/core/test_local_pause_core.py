"""The core's self-pause guard: a stalled monitor re-bases deadlines instead of firing them."""

from __future__ import annotations

import math
import time

import pytest

from heartwire import _core

ManualClock = _core.ManualClock
Detector = _core.Detector


def take(events: _core.EventQueue) -> list[_core.Event]:
    out: list[_core.Event] = []
    while batch := events.try_pop(100_000):
        out.extend(batch)
    return out


def test_ten_thousand_topics_survive_a_ten_second_stall() -> None:
    clock = ManualClock()
    det = Detector(clock=clock, period=1.0)
    events = det.subscribe(capacity=1 << 16, overflow="block")
    names = [f"svc.{i}" for i in range(10_000)]
    dead = set(names[::100])  # 100 topics that stop before the stall
    live = [n for n in names if n not in dead]
    det.add_many(names)
    clock.advance(0.25)
    assert det.beat_many(names) == 10_000  # the dead ones' last beat, at 0.25
    clock.advance(0.25)
    assert det.beat_many(live) == 9_900
    clock.advance(10.0, stalled=True)  # 0.5 .. 10.5: the monitor is not running
    assert clock.now() == 10.5
    for t in range(1, 11):
        # Beats taken in meanwhile, with their true times (ahead of the detector's last run).
        assert all(det.beat(n, now=float(t)) for n in live)
    assert take(events) == []
    clock.advance(0.5)  # wakes at 10.5, runs to 11.0
    got = take(events)
    assert [(e.kind, e.topic, e.handle, e.at, e.duration) for e in got] == [
        ("local_pause", "", -1, 10.5, 10.0)
    ]
    det.beat_many(live)  # at 11.0
    clock.advance(0.5)  # 11.5: a full period after the wake-up, not yet past it
    assert take(events) == []
    clock.advance(0.001)
    failed = take(events)
    assert sorted(e.topic for e in failed) == sorted(dead)
    assert {(e.kind, e.missed, e.at, e.since) for e in failed} == {("failed", 1, 11.5, 11.5)}
    stats = det.stats()
    assert (stats["local_pauses"], stats["local_pause_ns"]) == (1, 10_000_000_000)
    assert det.counts()["FAILED"] == 100


def test_an_ordinary_advance_is_never_a_pause_however_long() -> None:
    clock = ManualClock()
    det = Detector(clock=clock, period=1.0)
    events = det.subscribe()
    det.add("quiet")
    clock.advance(100.0)
    got = take(events)
    # Every missed period is counted, none re-based; one run reports the first 63 one by one,
    # then the latest with the exact count (issue 14: bounded events per topic per run).
    assert [(e.kind, e.missed, e.at) for e in got] == [
        *(("failed", n, float(n)) for n in range(1, 64)),
        ("failed", 99, 99.0),
    ]
    assert det.stats()["local_pauses"] == 0


def test_max_local_pause_none_disables_the_guard() -> None:
    clock = ManualClock()
    det = Detector(clock=clock, period=1.0, max_local_pause=None)
    assert det.max_local_pause is None
    events = det.subscribe()
    det.add("quiet")
    clock.advance(10.0, stalled=True)
    clock.advance(0.001)
    got = take(events)
    assert [(e.kind, e.missed) for e in got] == [("failed", n) for n in range(1, 11)]
    assert det.stats()["local_pauses"] == 0


def test_max_local_pause_can_be_changed_later() -> None:
    clock = ManualClock()
    det = Detector(clock=clock, period=1.0)
    assert det.max_local_pause == 5.0
    events = det.subscribe()
    det.max_local_pause = 2.0
    clock.advance(3.0, stalled=True)  # longer than 2 s: a pause
    clock.advance(0.0)
    assert [(e.kind, e.at, e.duration) for e in take(events)] == [("local_pause", 3.0, 3.0)]
    det.max_local_pause = None
    clock.advance(3.0, stalled=True)
    clock.advance(0.0)
    assert take(events) == []


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_bad_max_local_pause_is_refused_naming_it(bad: float) -> None:
    with pytest.raises(ValueError, match="max_local_pause"):
        Detector(clock=ManualClock(), max_local_pause=bad)
    det = Detector(clock=ManualClock())
    with pytest.raises(ValueError, match="max_local_pause"):
        det.max_local_pause = bad
    assert det.max_local_pause == 5.0


def test_failed_topics_keep_their_state_and_count_on_from_the_wake_up() -> None:
    clock = ManualClock()
    det = Detector(clock=clock, period=1.0)
    events = det.subscribe(received=True)  # the pause reaches every queue
    det.add("gone")
    clock.advance(2.5)
    assert [e.missed for e in take(events)] == [1, 2]
    clock.advance(10.0, stalled=True)
    clock.advance(0.0)
    assert [e.kind for e in take(events)] == ["local_pause"]
    st = det.status("gone")
    assert (st.state, st.missed, st.failed_since, st.next_deadline) == ("FAILED", 2, 1.0, 13.5)
    clock.advance(1.001)
    assert [(e.kind, e.missed, e.at, e.since) for e in take(events)] == [("failed", 3, 13.5, 1.0)]


def test_phi_topics_are_not_convicted_by_the_pause() -> None:
    clock = ManualClock()
    det = Detector(clock=clock, period=0.1)
    events = det.subscribe()
    det.add("phi", phi=_core.Phi())
    for _ in range(100):
        clock.advance(0.1)
        det.beat("phi")
    clock.advance(10.0, stalled=True)
    clock.advance(0.05)
    for _ in range(10):
        det.beat("phi")
        clock.advance(0.1)
    assert [e.kind for e in take(events)] == ["local_pause"]
    assert det.status("phi").state == "ALIVE"


def test_a_stalled_clock_does_not_run_deadline_queues_either() -> None:
    clock = ManualClock()
    queue = _core.DeadlineQueue(clock)
    queue.schedule(1, 1.0)
    clock.advance(5.0, stalled=True)
    assert queue.try_pop() == []
    clock.advance(0.0)
    assert queue.try_pop() == [(1, 1.0)]


def test_the_driver_measures_its_own_stall_on_the_real_clock() -> None:
    # The driver is made to stall for real: it blocks on a full `block` queue until we pop.
    det = Detector(period=0.02, tick=0.002, max_local_pause=0.2)
    events = det.subscribe(capacity=1, overflow="block")
    try:
        det.add("quiet")
        deadline = time.monotonic() + 5.0
        while det.stats()["failed"] < 2 and time.monotonic() < deadline:
            time.sleep(0.001)  # bounded poll: the second failure blocks the driver
        assert det.stats()["failed"] >= 2
        time.sleep(0.3)  # the stall itself, longer than max_local_pause
        kinds: list[str] = []
        durations: list[float] = []
        deadline = time.monotonic() + 5.0
        while "local_pause" not in kinds and time.monotonic() < deadline:
            for e in events.pop(timeout=0.5):
                kinds.append(e.kind)
                if e.kind == "local_pause":
                    durations.append(e.duration or 0.0)
        assert "local_pause" in kinds
        assert durations[0] > 0.2  # longer than max_local_pause, by definition
        assert det.stats()["local_pauses"] >= 1
    finally:
        events.close()
        det.stop()
