"""The alerting policy's cost (silences, dependencies: ``rust/detector/policy.rs``) on the
detector's paths, at N topics, against the same detector with no policy, in one run.

    PYTHONPATH=python .venv/bin/python benches/policy.py [N] [--repeat R]

Rows (best of ``--repeat``), each on a fresh core ``Detector`` on a ManualClock with N topics:
- ``expiry``: N topics failing at once: ``advance`` (wheel, judge, mark, push into a queue),
  ns per ``failed`` event, with no policy / a silence covering none of them (the check runs,
  marks nothing) / a silence covering all / every topic a child of one parent (down) /
  flapping detection on;
- ``beats``: ``beat_handles`` of all N (the beat path never reaches the policy), ns per beat;
- ``silence()``: adding a silence that matches every topic (one pass over the names).
"""

from __future__ import annotations

import argparse
import gc
import time

from heartwire._core import Detector, ManualClock


def fresh(n: int, policy: str) -> tuple[Detector, ManualClock, object]:
    clock = ManualClock(0.0)
    det = Detector(clock=clock, period=1.0, max_local_pause=None, lag_threshold=None)
    det.add("parent.db", period=0.5)
    det.add_many([f"svc.t{i}" for i in range(n)])
    queue = det.subscribe(capacity=n + 16, overflow="drop-newest")
    if policy == "silence-none":
        det.silence("other.>", 100.0)
    elif policy == "silence-all":
        det.silence("svc.>", 100.0)
    elif policy == "depends-all":
        det.depends("svc.>", "parent.db")
    elif policy == "flapping":
        det.set_flapping(3, 60.0)
    return det, clock, queue


def expiry(n: int, policy: str) -> float:
    det, clock, queue = fresh(n, policy)
    gc.collect()
    start = time.perf_counter()
    clock.set(1.5)  # drives det.advance: N + 1 failures
    took = time.perf_counter() - start
    assert det.stats()["failed"] >= n, det.stats()
    if policy == "silence-all":
        assert det.stats()["silenced"] == n
    if policy == "depends-all":
        assert det.stats()["suppressed"] == n
    del queue
    return took / n * 1e9


def beats(n: int, policy: str) -> float:
    det, _, queue = fresh(n, policy)
    handles = det.handles()
    gc.collect()
    start = time.perf_counter()
    det.beat_handles(handles)
    took = time.perf_counter() - start
    del queue
    return took / n * 1e9


def add_silence(n: int) -> float:
    det, _, queue = fresh(n, "none")
    gc.collect()
    start = time.perf_counter()
    det.silence("svc.>", 100.0)
    took = time.perf_counter() - start
    del queue
    return took * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n, r = args.n, args.repeat
    print(f"N = {n:,} topics, best of {r}")
    base = None
    for policy in ("none", "silence-none", "silence-all", "depends-all", "flapping"):
        ns = min(expiry(n, policy) for _ in range(r))
        base = base or ns
        print(f"expiry  {policy:13} {ns:7.1f} ns/event  x{ns / base:.2f}")
    base = None
    for policy in ("none", "silence-all"):
        ns = min(beats(n, policy) for _ in range(r))
        base = base or ns
        print(f"beats   {policy:13} {ns:7.1f} ns/beat   x{ns / base:.2f}")
    ms = min(add_silence(n) for _ in range(r))
    print(f"silence() matching all {n:,} topics: {ms:.1f} ms")


if __name__ == "__main__":
    main()
