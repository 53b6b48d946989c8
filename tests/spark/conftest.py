"""Helpers shared by the Spark and report tests: a monitor that logs to an event log on a
ManualClock, and a whole recorded run of one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import heartwire as hw
from heartwire.eventlog import EventLog


def logged_monitor(
    clock: hw.ManualClock, wall_offset: float, listeners: list[Any]
) -> hw.HeartbeatMonitor:
    """A monitor of ``svc.>`` (period 1 s, allowed 1, grace 0) on ``clock``, not started."""
    return hw.HeartbeatMonitor(
        None,
        "svc.>",
        period=1.0,
        allowed_misses=1,
        grace=0,
        clock=clock,
        wall_offset=wall_offset,
        listeners=listeners,
    )


def run_monitor(
    path: Path,
    beats: dict[str, list[float]],
    *,
    wall_offset: float,
    start_at: float = 0.0,
    until: float,
    expect: tuple[str, ...] = (),
    crash: bool = False,
) -> None:
    """A monitor (see :func:`logged_monitor`) on a ManualClock from ``start_at`` to ``until``,
    logging to ``path`` (a file every 30 s); ``beats``: the times each topic beats at;
    ``expect``: topics expected before the start; ``crash``: its log is closed before it stops
    (no stopped row, as when the process dies)."""
    clock = hw.ManualClock(start_at)
    log = EventLog(path, roll_seconds=30, clock=clock)
    mon = logged_monitor(clock, wall_offset, [log])
    for topic in expect:
        mon.expect(topic)
    mon.start()
    for t, topic in sorted((t, topic) for topic, ts in beats.items() for t in ts):
        clock.set(t)
        assert mon.beat(topic)
    clock.set(until)
    assert mon.drain(timeout=5.0)
    if crash:
        log.close()
    mon.stop()
    log.close()
