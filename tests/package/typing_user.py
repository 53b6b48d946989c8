"""A user's module, as ``mypy --strict`` sees it: listeners, events narrowed by ``match`` and
``isinstance``, statuses, the asyncio API, a coroutine check (``tests/package/test_typing.py``
type-checks it, and runs :func:`main`)."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

import heartwire as hw
from heartwire.events import MonitorEvent

if sys.version_info >= (3, 11):
    from typing import assert_never
else:  # pragma: no cover
    from typing_extensions import assert_never


class Pager(hw.SubscriberListener):
    include_silenced = False

    def __init__(self) -> None:
        self.pages: list[str] = []

    def on_failed(self, event: hw.Failed) -> None:
        why = event.reason if event.reason is not None else f"{event.missed} missed"
        self.pages.append(f"{event.topic} down since {event.wall_since:.0f}: {why}")

    async def on_resumed(self, event: hw.Resumed) -> None:
        self.pages.append(f"{event.topic} back after {event.downtime:.1f} s")


def describe(event: hw.StreamEvent) -> str:
    """Every kind a stream yields, exhaustively (mypy checks that none is left out)."""
    match event:
        case hw.Failed(topic=topic, missed=missed, suppressed_by=parent):
            return f"{topic} failed ({missed} missed{'' if parent is None else ', ' + parent})"
        case hw.Resumed(topic=topic, downtime=downtime):
            return f"{topic} resumed after {downtime:g} s"
        case hw.Flapping(topic=topic, flapping=flapping, count=count):
            return f"{topic} {'flapping' if flapping else 'settled'} ({count})"
        case hw.LocalPause(duration=duration):
            return f"monitor paused {duration:g} s"
        case hw.Lagging(lag=lag):
            return f"intake {lag:g} s behind"
        case hw.CaughtUp(max_lag=max_lag):
            return f"caught up (max {max_lag:g} s)"
        case _:
            assert_never(event)


def beats_in(batch: hw.EventBatch) -> list[int | None]:
    """A batch's ``received`` sequence numbers (``MonitorEvent`` includes Received)."""
    out: list[int | None] = []
    for event in batch:
        ev: MonitorEvent = event
        if isinstance(ev, hw.Received):
            out.append(ev.seq)
    return out


def census(statuses: list[hw.TopicStatus]) -> Counter[hw.State]:
    return Counter(status.state for status in statuses)


async def read(stream: hw.EventStream, n: int) -> list[str]:
    lines: list[str] = []
    async for event in stream:
        lines.append(describe(event))
        if len(lines) == n:
            break
    return lines


async def main() -> list[str]:
    clock = hw.ManualClock()
    pager = Pager()
    monitor = hw.HeartbeatMonitor(
        None, "svc.>", clock=clock, period=1.0, grace=0.0, listeners=[pager]
    )
    async with monitor:
        monitor.expect("svc.db")
        monitor.depends("svc.api", on="svc.db")
        monitor.beat("svc.api")
        async with monitor.events(capacity=100, overflow="drop-oldest") as stream:
            clock.set(1.5)
            lines = await asyncio.wait_for(read(stream, 2), timeout=5.0)
            status: hw.TopicStatus = await monitor.wait_for("svc.db", hw.State.FAILED, timeout=5.0)
            since: float | None = status.failed_since
            lines.append(f"{status.topic}: {status.state} since {since}")
            lines.append(str(sorted(census(monitor.statuses()).items())))
    return lines


async def db_ok() -> bool:
    await asyncio.sleep(0)
    return True


def publisher(broker: hw.Transport) -> hw.HeartbeatPublisher:
    return hw.HeartbeatPublisher(broker, "svc.api", 1.0, dependency=db_ok, timeout=0.5)
