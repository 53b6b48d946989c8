"""N topics expiring at once, through a HeartbeatMonitor to one listener, against the pure-Python
heap monitor's tick (``baselines.HeapMonitor``, recording each failure in a list), in one run.

    PYTHONPATH=python .venv/bin/python benches/mass_failure.py [N] [--repeat R] [--per-event]

The monitor runs on a ManualClock: N topics added at 0 (``detector.add_many``), the clock
advanced past their deadline, then ``drain()``: the time from the advance until the listener has
counted every failure (core expiry, event queue, batch build, dispatch, listener queue). The
listener counts failures with ``on_events`` (``batch.count("failed")``); ``--per-event`` adds a
row with a listener overriding ``on_failed`` (one call per failure). Goal (issue 15): at 1 M
topics, ``on_events`` >= 20x the heap monitor's tick and <= 150 ms. Best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from baselines import HeapMonitor

import heartwire as hw
from heartwire._core import ManualClock
from heartwire.events import EventBatch, Failed


class CountBatches(hw.SubscriberListener):
    def __init__(self) -> None:
        self.failed = 0

    def on_events(self, batch: EventBatch) -> None:
        self.failed += batch.count("failed")


class CountEach(hw.SubscriberListener):
    def __init__(self) -> None:
        self.failed = 0

    def on_failed(self, event: Failed) -> None:
        self.failed += 1


def heap_tick(names: list[str]) -> float:
    failures: list[object] = []
    heap = HeapMonitor(period=1.0, on_failed=lambda k, n, s, d: failures.append(k))
    heap.add_many(names, now=0.0)
    gc.collect()
    start = time.perf_counter()
    heap.tick(1.5)
    took = time.perf_counter() - start
    assert len(failures) == len(names)
    return took


def monitor(names: list[str], listener: CountBatches | CountEach) -> float:
    clock = ManualClock(0.0)
    mon = hw.HeartbeatMonitor(None, "svc.>", 1.0, clock=clock, listeners=[listener], grace=0.0)
    mon.start()
    try:
        mon.detector.add_many(names, now=0.0)
        gc.collect()
        start = time.perf_counter()
        clock.advance(1.5)
        assert mon.drain(600.0), "not drained"
        took = time.perf_counter() - start
        stats = mon.stats()
    finally:
        mon.stop()
    assert listener.failed == len(names), (listener.failed, stats)
    assert stats["dropped"] == 0 and stats["listener_dropped"] == 0, stats
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--per-event", action="store_true")
    args = parser.parse_args()
    names = [f"svc.region-{i % 64:02}.host-{i:06}" for i in range(args.n)]
    rows = {"heap": heap_tick, "on_events": lambda n: monitor(n, CountBatches())}
    if args.per_event:
        rows["on_failed"] = lambda n: monitor(n, CountEach())
    best = {name: min(run(names) for _ in range(args.repeat)) for name, run in rows.items()}
    base = best["heap"]
    print(f"{args.n} topics expiring at once (best of {args.repeat})")
    for name, took in best.items():
        print(f"  {name:<10} {took * 1e3:8.1f} ms  {base / took:6.1f}x the heap monitor")
    took = best["on_events"]
    met = base / took >= 20 and took <= 0.150
    print(f"goal (>= 20x and <= 150 ms at 1 M): {'met' if met else 'missed'}")


if __name__ == "__main__":
    main()
