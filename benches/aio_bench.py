"""asyncio: a mass failure read with ``async for ev in mon.events()``, against the ways a user
would otherwise bridge a monitor to a loop, in the same run.

- ``stream``: :meth:`HeartbeatMonitor.events` (one loop wake-up per batch at most, events
  built as they are taken on the loop);
- ``per_event``: a listener whose ``on_failed`` hands each event to the loop with
  ``loop.call_soon_threadsafe(queue.put_nowait, ev)`` (the usual bridge: one loop callback
  per event);
- ``listener``: a plain ``on_events`` listener counting on its own thread (no loop at all: the
  floor).

Each: ``n`` topics expected on a ManualClock, all failing in one ``clock.set``; the time until
the consumer has ``n`` events. Best of ``--repeat`` runs, interleaved::

    .venv/bin/python benches/aio_bench.py --topics 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import heartwire as hw


def _monitor(n: int) -> tuple[hw.ManualClock, hw.HeartbeatMonitor]:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    for i in range(n):
        mon.expect(f"svc.{i}")
    return clock, mon


async def stream(n: int) -> tuple[float, int]:
    clock, mon = _monitor(n)
    async with mon:
        events = mon.events(capacity=n)
        got = 0
        t0 = time.perf_counter()
        clock.set(1.5)
        async for _ev in events:
            got += 1
            if got == n:
                break
        took = time.perf_counter() - t0
        wakeups = events.wakeups
    return took, wakeups


async def per_event(n: int) -> tuple[float, int]:
    clock, mon = _monitor(n)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[hw.Failed] = asyncio.Queue()
    calls = 0

    class Bridge(hw.SubscriberListener):
        def on_failed(self, event: hw.Failed) -> None:
            nonlocal calls
            calls += 1
            loop.call_soon_threadsafe(queue.put_nowait, event)

    async with mon:
        mon.add_listener(Bridge())
        got = 0
        t0 = time.perf_counter()
        clock.set(1.5)
        while got < n:
            await queue.get()
            got += 1
        took = time.perf_counter() - t0
    return took, calls


async def listener(n: int) -> tuple[float, int]:
    clock, mon = _monitor(n)
    done = threading.Event()
    got = 0

    class Count(hw.SubscriberListener):
        def on_events(self, batch: hw.EventBatch) -> None:
            nonlocal got
            got += len(batch)
            if got >= n:
                done.set()

    async with mon:
        mon.add_listener(Count())
        t0 = time.perf_counter()
        clock.set(1.5)
        await asyncio.to_thread(done.wait, 600)
        took = time.perf_counter() - t0
    return took, 0


WAYS: dict[str, Callable[[int], Coroutine[Any, Any, tuple[float, int]]]] = {
    "listener": listener,
    "stream": stream,
    "per_event": per_event,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    best: dict[str, tuple[float, int]] = {}
    for _ in range(args.repeat):
        for name, way in WAYS.items():
            took, calls = asyncio.run(way(args.topics))
            if name not in best or took < best[name][0]:
                best[name] = (took, calls)
    n = args.topics
    base = best["per_event"][0]
    print(f"{n} topics failing at once, best of {args.repeat}:")
    for name, (took, calls) in best.items():
        print(
            f"  {name:10} {took * 1e3:8.1f} ms  {n / took / 1e6:6.2f} M events/s  "
            f"loop calls {calls:>7}  x{base / took:.1f} vs per_event"
        )


if __name__ == "__main__":
    main()
