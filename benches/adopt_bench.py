"""A takeover's cost: a member taking over ``n`` topics (``failed`` of them FAILED) from a
snapshot, against the ways it could be done, in the same run:

- ``adopt``: :meth:`HeartbeatMonitor.adopt` with the snapshot's records (checked, ``expect`` for
  each, then one core call carrying the outages over);
- ``expect``: a loop of :meth:`HeartbeatMonitor.expect` (the fresh start alone, no outage
  carried: what a member could do without ``adopt``);
- ``core``: ``Detector.adopt_many`` by columns on a bare detector (the floor: no monitor).

Each on a fresh ManualClock monitor (or detector) started at 0, taking over at 10 s. Best of
``--repeat`` runs, interleaved::

    .venv/bin/python benches/adopt_bench.py --topics 20000 --failed 100 --repeat 3
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import heartwire as hw
from heartwire._core import Detector
from heartwire.groups import TopicRecord


def _monitor() -> hw.HeartbeatMonitor:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, grace=0.0)
    mon.start()
    clock.advance(10.0)
    return mon


def _records(mon: hw.HeartbeatMonitor, n: int, failed: int) -> list[TopicRecord]:
    since = mon.wall_time(5.0)
    return [
        TopicRecord(f"svc.{i}", since, 5, None, 1.0)
        if i < failed
        else TopicRecord(f"svc.{i}", period=1.0)
        for i in range(n)
    ]


def adopt(n: int, failed: int) -> float:
    mon = _monitor()
    records = _records(mon, n, failed)
    t0 = time.perf_counter()
    mon.adopt(records)
    dt = time.perf_counter() - t0
    assert len(mon) == n and mon.counts()["FAILED"] == failed
    mon.stop()
    return dt


def expect(n: int, failed: int) -> float:
    mon = _monitor()
    records = _records(mon, n, failed)
    t0 = time.perf_counter()
    for r in records:
        mon.expect(r.topic, r.period)
    dt = time.perf_counter() - t0
    assert len(mon) == n
    mon.stop()
    return dt


def core(n: int, failed: int) -> float:
    clock = hw.ManualClock(10.0)
    det = Detector(clock=clock)
    names = [f"svc.{i}" for i in range(n)]
    since: list[float | None] = [5.0 if i < failed else None for i in range(n)]
    t0 = time.perf_counter()
    det.adopt_many(names, since=since, missed=[5] * n)
    dt = time.perf_counter() - t0
    assert len(det) == n
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=20_000)
    ap.add_argument("--failed", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    ways: dict[str, Callable[[int, int], float]] = {"adopt": adopt, "expect": expect, "core": core}
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(args.repeat):
        for name, way in ways.items():
            best[name] = min(best[name], way(args.topics, args.failed))
    base = best["expect"]
    print(f"takeover of {args.topics} topics, {args.failed} FAILED (best of {args.repeat}):")
    for name, dt in best.items():
        per = dt / args.topics * 1e9
        print(f"  {name:7s} {dt * 1e3:8.1f} ms  {per:7.0f} ns/topic  x{dt / base:.2f} of expect")


if __name__ == "__main__":
    main()
