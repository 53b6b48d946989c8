"""``status_snapshot`` and ``RecentEvents`` (what ``heartwire status`` draws) on a manual clock:
exact counts, the order of the worst offenders, their wall times, the recent-events ring."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import heartwire as hw
from heartwire.status import (
    Offender,
    RecentEvent,
    RecentEvents,
    SilenceRow,
    SuppressionRow,
    status_snapshot,
)
from heartwire.transport import Message

WALL = 1_800_000_000.0  # the wall time the manual clock's 0 stands for


@pytest.fixture
def clock() -> hw.ManualClock:
    return hw.ManualClock(0.0)


@pytest.fixture
def recent() -> RecentEvents:
    return RecentEvents(capacity=8)


@pytest.fixture
def mon(clock: hw.ManualClock, recent: RecentEvents) -> Iterator[hw.HeartbeatMonitor]:
    m = hw.HeartbeatMonitor(
        None,
        "svc.>",
        period=1.0,
        allowed_misses=2,
        grace=0,
        clock=clock,
        listeners=[recent],
        wall_offset=WALL,
    )
    yield m
    m.stop()


def fleet(mon: hw.HeartbeatMonitor, clock: hw.ManualClock) -> None:
    """a, f healthy; b, c silent from 0 s; d silent from 2 s; e paused; p expected, never heard.
    At 3.5 s: b, c, p FAILED (3 missed, since 2 s), d ALIVE with 1 missed of 2."""
    for topic in ("svc.a", "svc.b", "svc.c", "svc.d", "svc.e", "svc.f"):
        mon.expect(topic)
    mon.start()
    mon.expect("svc.p")
    mon.beat_many(["svc.a", "svc.b", "svc.c", "svc.d", "svc.e", "svc.f"])
    mon.pause("svc.e")
    for t in (1.0, 2.0):
        clock.set(t)
        mon.beat_many(["svc.a", "svc.d", "svc.f"])
    clock.set(3.0)
    mon.beat_many(["svc.a", "svc.f"])
    clock.set(3.5)
    assert mon.drain()


def test_counts_and_offenders_worst_first_with_wall_times(
    mon: hw.HeartbeatMonitor, clock: hw.ManualClock, recent: RecentEvents
) -> None:
    fleet(mon, clock)
    snap = status_snapshot(mon, top=10, recent=recent)
    assert snap.pattern == "svc.>"
    assert snap.at == WALL + 3.5
    assert snap.states == {"FAILED": 3, "PENDING": 0, "ALIVE": 3, "PAUSED": 1, "STOPPED": 0}
    assert snap.topics == 7
    assert [(o.topic, o.state, o.missed) for o in snap.offenders] == [
        ("svc.b", "FAILED", 3),  # 3 missed, down since 2 s, heard at 0 s
        ("svc.c", "FAILED", 3),  # the same: handle order
        ("svc.p", "FAILED", 3),  # expected at 0 s, never heard: the same deadlines
        ("svc.d", "ALIVE", 1),  # late, not failed yet
    ]
    b = snap.offenders[0]
    assert b == Offender(
        topic="svc.b",
        state="FAILED",
        missed=3,
        allowed_misses=2,
        period=1.0,
        last_seen=WALL + 0.0,
        down_since=WALL + 2.0,
        down_for=1.5,
    )
    assert snap.offenders[2].last_seen is None
    assert snap.offenders[3].down_since is None and snap.offenders[3].down_for is None
    # 7 topics <= top: the rest are listed too, by name (healthy and paused ones).
    assert [(o.topic, o.state) for o in snap.others] == [
        ("svc.a", "ALIVE"),
        ("svc.e", "PAUSED"),
        ("svc.f", "ALIVE"),
    ]
    assert snap.silences == () and snap.suppressions == ()
    assert snap.health["running"] is True
    assert snap.health["beats"] == 6 + 3 + 3 + 2
    assert snap.health["rejected"] == 0 and snap.health["dropped"] == 0


def test_top_cuts_the_offenders_and_others_only_when_all_fit(
    mon: hw.HeartbeatMonitor, clock: hw.ManualClock
) -> None:
    fleet(mon, clock)
    snap = status_snapshot(mon, top=2)
    assert [o.topic for o in snap.offenders] == ["svc.b", "svc.c"]
    assert snap.others == ()  # 7 topics do not fit in 2: no full listing
    assert status_snapshot(mon, top=0).offenders == ()
    # One comes back: it leaves the offenders; the one down longer stays first.
    mon.beat("svc.b")
    clock.set(4.5)
    assert [(o.topic, o.missed) for o in status_snapshot(mon, top=3).offenders] == [
        ("svc.c", 4),
        ("svc.p", 4),
        ("svc.d", 2),
    ]


def test_recent_events_keep_the_changes_not_the_repeats(
    mon: hw.HeartbeatMonitor, clock: hw.ManualClock, recent: RecentEvents
) -> None:
    fleet(mon, clock)
    for t in (4.0, 5.0):  # b, c, p: two more failed events each (missed 4, 5): repeats
        clock.set(t)
        mon.beat_many(["svc.a", "svc.f"])
    clock.set(5.5)  # d: failed at 4 s, then missed 3 at 5 s (a repeat)
    mon.beat("svc.b")  # resumed
    assert mon.drain()
    snap = status_snapshot(mon, recent=recent)
    assert [(e.kind, e.topic, e.at - WALL) for e in snap.recent] == [
        ("failed", "svc.b", 2.0),
        ("failed", "svc.c", 2.0),
        ("failed", "svc.p", 2.0),
        ("failed", "svc.d", 4.0),
        ("resumed", "svc.b", 5.5),
    ]
    assert snap.recent[0].detail == "missed 2"
    assert snap.recent[-1] == RecentEvent("resumed", "svc.b", WALL + 5.5, "after 3.5 s, missed 5")


def test_a_burst_costs_the_ring_its_capacity_and_keeps_the_newest(
    clock: hw.ManualClock,
) -> None:
    recent = RecentEvents(capacity=5)
    mon = hw.HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0, clock=clock, listeners=[recent], wall_offset=WALL
    )
    try:
        names = [f"svc.t{i:04d}" for i in range(2000)]
        mon.start()
        mon.beat_many(names)
        clock.set(1.5)  # all 2000 fail at 1 s, in one detector run
        assert mon.drain()
        kept = recent.events()
        assert len(kept) == 5
        assert [e.kind for e in kept] == ["failed"] * 5
        assert [e.topic for e in kept] == names[-5:]
        assert status_snapshot(mon, top=3).states["FAILED"] == 2000
    finally:
        mon.stop()


def test_exceptions_and_connection_events_are_kept(
    mon: hw.HeartbeatMonitor, recent: RecentEvents
) -> None:
    recent.on_disconnected(hw.Disconnected("stomp://127.0.0.1:61613", "connection lost"))
    recent.on_reconnected(hw.Reconnected("stomp://127.0.0.1:61613"))
    # priority_backup's planned move back to the preferred broker says where from.
    recent.on_reconnected(hw.Reconnected("stomp://a:1", switched_from="stomp://b:2"))
    mon.start()
    mon.handle_message(Message(destination="svc.x", body=b"not a beat"))
    assert mon.drain()
    kinds = [(e.kind, e.detail) for e in recent.events()]
    assert kinds[:3] == [
        ("disconnected", "stomp://127.0.0.1:61613: connection lost"),
        ("reconnected", "stomp://127.0.0.1:61613"),
        ("reconnected", "stomp://a:1 (moved back from stomp://b:2)"),
    ]
    assert kinds[3][0] == "exception" and kinds[3][1].startswith("bad_"), kinds


@dataclass
class _Silence:
    id: int
    pattern: str
    end: float  # on the monitor's clock
    reason: str


class _PolicyMonitor(hw.HeartbeatMonitor):
    """A monitor offering silences and dependencies in the shape issue 17's silences and
    dependencies give them (``silences()``: objects with ``id``, ``pattern``, ``end``,
    ``reason``; ``dependencies()``: ``(child_pattern, parent)``): how those sections fill in."""

    def silences(self) -> list[_Silence]:
        return [_Silence(7, "svc.db.>", 30.0, "maintenance")]

    def dependencies(self) -> list[tuple[str, str]]:
        return [("svc.api.>", "svc.db"), ("svc.web.>", "svc.cache"), ("svc.x.>", "svc.unknown")]


def test_silences_and_suppressions_are_read_when_the_monitor_has_them(
    clock: hw.ManualClock,
) -> None:
    mon = _PolicyMonitor(None, "svc.>", period=1.0, grace=0, clock=clock, wall_offset=WALL)
    try:
        mon.start()
        mon.beat_many(["svc.db", "svc.cache"])
        clock.set(1.5)
        mon.beat("svc.cache")
        snap = status_snapshot(mon)
        assert snap.silences == (SilenceRow("svc.db.>", WALL + 30.0, "maintenance", "7"),)
        # Only the dependency whose parent is FAILED now is in force; an unknown parent: none.
        assert snap.suppressions == (SuppressionRow("svc.api.>", "svc.db", WALL + 1.0),)
        mon.beat("svc.db")
        assert status_snapshot(mon).suppressions == ()
    finally:
        mon.stop()


def test_bad_arguments_are_named(mon: hw.HeartbeatMonitor) -> None:
    with pytest.raises(ValueError, match="top"):
        status_snapshot(mon, top=-1)
    with pytest.raises(TypeError, match="recent must be a RecentEvents"):
        status_snapshot(mon, recent=[])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="capacity"):
        RecentEvents(0)
    with pytest.raises(ValueError, match="n must be an int >= 0, got -1"):
        mon.worst(-1)
