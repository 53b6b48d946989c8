"""The self-pause guard through the monitor's API, under the manual clock (issue 9)."""

from __future__ import annotations

from typing import Any

import pytest

import heartwire as hw
from heartwire.events import LocalPause, State
from heartwire.monitor import HeartbeatMonitor
from tests.monitor.test_monitor_semantics import Recorder, ms


class PauseRecorder(Recorder):
    def on_local_pause(self, event: LocalPause) -> None:
        self.events.append(event)


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_ten_thousand_topics_and_a_ten_second_stall() -> None:
    clock = hw.ManualClock()
    rec = PauseRecorder()
    mon = HeartbeatMonitor(None, "svc.>", period=1.0, clock=clock, listeners=[rec])
    assert (mon.max_local_pause, mon.grace) == (5.0, None)  # grace: 10% of the period
    names = [f"svc.{i:05d}" for i in range(10_000)]
    stopped = set(names[::100])
    with mon:
        assert mon.beat_many(names) == 10_000  # learned at 0.0
        handles = [mon.handle(n) for n in names]
        live = [h for n, h in zip(names, handles, strict=True) if n not in stopped]
        for _ in range(3):
            clock.advance(1.0)
            assert mon.beat_handles(handles) == 10_000
        # At 3.0 the monitor stalls for 10 s. The live topics' beats keep arriving meanwhile
        # and are recorded with their true times; the stopped ones' last beat was at 3.0.
        for _ in range(10):
            clock.advance(1.0, stalled=True)
            assert mon.beat_handles(live) == 9_900
        assert mon.drain()
        assert kinds(rec.events) == ["Started"]
        rec.events.clear()
        clock.advance(0.0)  # the monitor runs again at 13.0
        assert mon.drain()
        assert rec.events == [LocalPause(duration=10.0, at=13.0)]
        rec.events.clear()
        assert mon.counts()["FAILED"] == 0
        # The stopped topics fail exactly one period plus grace after the wake-up, not before.
        clock.advance(1.0)
        mon.beat_handles(live)
        clock.advance(0.1)
        assert mon.drain()
        assert rec.events == []
        clock.advance(0.001)
        assert mon.drain()
        failed = rec.take()
        assert len(failed) == 100
        assert {(kind, missed, at, since) for kind, _, missed, at, since in failed} == {
            ("failed", 1, 14_100, 14_100)
        }
        assert {topic for _, topic, *_ in failed} == stopped
        assert mon.counts()["FAILED"] == 100
        stats = mon.stats()
        assert (stats["local_pauses"], stats["local_pause_seconds"]) == (1, 10.0)
        assert stats["failed"] == 100


def test_without_the_guard_a_stall_fails_everything() -> None:
    clock = hw.ManualClock()
    rec = PauseRecorder()
    mon = HeartbeatMonitor(
        None, "svc.>", clock=clock, listeners=[rec], max_local_pause=None, grace=0.0
    )
    assert mon.max_local_pause is None
    with mon:
        mon.beat("svc.a")
        clock.advance(10.0, stalled=True)
        clock.advance(0.0)
        mon.beat("svc.a")  # a beat that waited in the broker during the stall, taken in now
        assert mon.drain()
        got = rec.take()[1:]
        want = [("failed", "svc.a", n, n * 1000, 1000) for n in range(1, 10)]
        assert got == [*want, ("resumed", "svc.a", 9, 10_000, 9000)]
        assert mon.stats()["local_pauses"] == 0
    # The same with the guard: no failure at all.
    rec = PauseRecorder()
    mon = HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[rec], grace=0.0)
    with mon:
        mon.beat("svc.a")
        clock.advance(10.0, stalled=True)
        clock.advance(0.0)
        mon.beat("svc.a")
        assert mon.drain()
        assert kinds(rec.events) == ["Started", "LocalPause"]


def test_max_local_pause_is_checked_and_can_change_while_running() -> None:
    with pytest.raises(ValueError, match=r"max_local_pause .*got 0"):
        HeartbeatMonitor(None, "svc.>", max_local_pause=0)
    with pytest.raises(TypeError, match=r"max_local_pause .*str"):
        HeartbeatMonitor(None, "svc.>", max_local_pause="5")  # type: ignore[arg-type]
    clock = hw.ManualClock()
    rec = PauseRecorder()
    mon = HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[rec], max_local_pause=30.0)
    with mon:
        mon.expect("svc.a")
        clock.advance(10.0, stalled=True)
        clock.advance(0.0)
        assert mon.drain()
        assert "LocalPause" not in kinds(rec.events)  # 10 s is within 30
        mon.max_local_pause = 2.0
        assert mon.detector.max_local_pause == 2.0
        with pytest.raises(ValueError, match=r"max_local_pause"):
            mon.max_local_pause = -1.0
        rec.events.clear()
        clock.advance(3.0, stalled=True)
        clock.advance(0.0)
        assert mon.drain()
        assert rec.events == [LocalPause(duration=3.0, at=13.0)]
        # svc.a (failing since 1.1) keeps its state and counts on from the wake-up.
        st = mon.status("svc.a")
        assert (st.state, st.missed, ms(st.failed_since)) == (State.FAILED, 9, 1100)
