"""RSS per watched topic at 1M topics."""

from __future__ import annotations

import gc
from typing import Any

from baselines import AsyncioMonitor, HeapMonitor
from measure import rss_bytes, topic_name

from scenarios import scenario


@scenario
def rss(kind: str, n: int) -> dict[str, Any]:
    """Process RSS growth for ``n`` watched topics (the caller's own name list dropped)."""
    import asyncio

    import numpy  # noqa: F401  (imported before the first reading, as everywhere)

    import heartwire as hw

    gc.collect()
    before = rss_bytes()
    # heartwire copies the names into its own arena, so they are handed over in chunks (the
    # caller never holds a million str objects); the baselines keep theirs as dict keys.
    chunk = 10_000

    def chunks() -> Any:
        for lo in range(0, n, chunk):
            yield [topic_name(i) for i in range(lo, min(n, lo + chunk))]

    names: list[str] = [] if kind.startswith("hw_") else [topic_name(i) for i in range(n)]
    keep: Any = None
    extra: dict[str, Any] = {}
    start = 1000.0
    if kind == "hw_detector":
        clock = hw.ManualClock(start)
        det = hw.core.Detector(clock=clock, period=1.0)
        for part in chunks():
            det.beat_handles(det.add_many(part), now=start + 0.5)
        clock.advance(1.2)  # all popped and re-armed: the wheel holds every topic
        assert det.stats()["failed"] == 0 and len(det) == n
        keep = (clock, det)
        extra["heap_bytes_per_topic"] = det.heap_bytes() / n
    elif kind == "hw_monitor":
        clock = hw.ManualClock(start)
        mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, clock=clock)
        mon.start()
        for part in chunks():
            mon.beat_handles([mon.expect(x) for x in part])
        clock.advance(1.05)
        assert mon.stats()["failed"] == 0 and len(mon) == n
        keep = (clock, mon)
        extra["heap_bytes_per_topic"] = mon.detector.heap_bytes() / n
    elif kind == "heap":
        mon = HeapMonitor(period=1.0, grace=0.1)
        mon.add_many(names)
        mon.beat_many(names)
        keep = mon
    elif kind == "asyncio":
        loop = asyncio.new_event_loop()
        amon = AsyncioMonitor(loop, period=1.0, grace=0.1)
        amon.add_many(names)
        keep = (loop, amon)
    else:
        raise ValueError(kind)
    del names
    gc.collect()
    after = rss_bytes()
    assert keep is not None
    return {
        "kind": kind,
        "n": n,
        "rss_mb": (after - before) / 2**20,
        "bytes_per_topic": (after - before) / n,
        **extra,
    }
