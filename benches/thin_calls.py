"""Single beats and name batches from Python, against the pure-Python monitor (issue 15).

::

    .venv/bin/python benches/thin_calls.py                    # 10k, 100k, 1M topics + RSS
    .venv/bin/python benches/thin_calls.py --sizes 10000 --rounds 3 --no-rss   # a smoke run

Goals (issue 15): ``HeartbeatMonitor.beat(name)`` >= 1.5x and ``beat_many(list of str)`` >= 5x
:class:`baselines.HeapMonitor` at 10k, 100k and 1M topics; a ``HeartbeatMonitor`` holding 1M
topics grows the process RSS by <= 128 MiB.

Each size runs in a child process of its own. Every contender is timed in the same run as the
baseline, interleaved round by round (median of ``--rounds``, after a warm-up round), in the
calling thread's CPU time (the machine is shared: time spent descheduled is not a cost of
either), so read the ratios. Everything runs on the real clock (period 1 h, so nothing
expires), as the baseline reads ``time.monotonic()``.

- single calls: ``--calls`` distinct topics picked at random, one call each, in a plain loop;
- batches: one call with every topic's name (the list the topics were added from, whose ``str``
  objects have their hash cached), repeated up to 1M beats: in the order added, and shuffled;
  and ``fresh``: new ``str`` objects equal to the names, in order (as decoded off a wire: no
  cached hash), made outside the timed call.

RSS: the growth of the process's resident set for 1M topics in a ``HeartbeatMonitor`` added by
``expect``, and learned from ``beat_many`` of names it has not seen, split into the core's own
``Detector.heap_bytes()``, the monitor's per-slot table (``Intake.heap_bytes()``), and the rest
(allocator slack, Python objects).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from baselines import HeapMonitor  # noqa: E402
from suite import median, rss_bytes, topic_name  # noqa: E402

GOAL_SINGLE = 1.5
GOAL_BATCH = 5.0
GOAL_RSS_MIB = 128.0


def interleaved(contenders: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median CPU seconds of the calling thread for each contender, run in turn round after round
    (plus one warm-up round). Thread CPU time, not wall time: on a shared machine the time this
    thread is not scheduled is not the contender's cost (the detector's driver thread, which
    runs beside the heartwire contenders, is not counted either: it ticks every 10 ms)."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds + 1):
        for name, fn in contenders.items():
            gc.collect()
            t = time.thread_time()
            fn()
            dt = time.thread_time() - t
            if r:
                times[name].append(dt)
    return {name: median(ts) for name, ts in times.items()}


def beats(n: int, rounds: int, calls: int) -> dict[str, Any]:
    """Beats/s into ``n`` topics: single calls and batches, heartwire and the baseline."""
    import heartwire as hw

    names = [topic_name(i) for i in range(n)]
    det = hw.core.Detector(period=3600.0)
    handles = det.add_many(names)
    mon = hw.HeartbeatMonitor(None, "svc.>", period=3600.0)
    for x in names:
        mon.expect(x)
    mon.start()
    heap = HeapMonitor(period=3600.0)
    heap.add_many(names)
    picks = random.Random(7).sample(range(n), min(n, calls))
    s_names = [names[i] for i in picks]
    s_handles = [handles[i] for i in picks]

    def loop(beat: Callable[[Any], object], keys: list[Any]) -> Callable[[], None]:
        def run() -> None:
            for x in keys:
                beat(x)

        return run

    single = {
        "HeapMonitor.beat(name)": loop(heap.beat, s_names),
        "Detector.beat(name)": loop(det.beat, s_names),
        "Detector.beat(handle)": loop(det.beat, s_handles),
        "HeartbeatMonitor.beat(name)": loop(mon.beat, s_names),
    }
    reps = max(1, 1_000_000 // n)

    def repeat(fn: Callable[[list[str]], object], keys: list[str]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(reps):
                fn(keys)

        return run

    batch = {
        "HeapMonitor.beat_many(list)": repeat(heap.beat_many, names),
        "Detector.beat_many(list)": repeat(det.beat_many, names),
        "HeartbeatMonitor.beat_many(list)": repeat(mon.beat_many, names),
    }
    # The same names in random order (beats do not arrive in the order topics were added).
    shuffled = names[:]
    random.Random(11).shuffle(shuffled)
    batch_shuffled = {
        "HeapMonitor.beat_many(list)": repeat(heap.beat_many, shuffled),
        "Detector.beat_many(list)": repeat(det.beat_many, shuffled),
        "HeartbeatMonitor.beat_many(list)": repeat(mon.beat_many, shuffled),
    }
    s_times = interleaved(single, rounds)
    b_times = interleaved(batch, rounds)
    bs_times = interleaved(batch_shuffled, rounds)

    # Fresh str objects (no cached hash), as a decoder would make them; made outside the timing.
    fresh: dict[str, Callable[[list[str]], object]] = {
        "HeapMonitor.beat_many(list)": heap.beat_many,
        "Detector.beat_many(list)": det.beat_many,
        "HeartbeatMonitor.beat_many(list)": mon.beat_many,
    }
    f_times: dict[str, list[float]] = {k: [] for k in fresh}
    f_reps = max(1, 200_000 // n)
    for r in range(rounds + 1):
        for key, fn in fresh.items():
            copies = [[x.encode().decode() for x in names] for _ in range(f_reps)]
            gc.collect()
            t = time.thread_time()
            for part in copies:
                fn(part)
            if r:
                f_times[key].append(time.thread_time() - t)
            del copies
    stats = det.stats()
    assert stats["unknown"] == 0 and stats["refused"] == 0, stats
    mon.stop()
    det.stop()
    return {
        "n": n,
        "single_calls": len(s_names),
        "single": {k: len(s_names) / t for k, t in s_times.items()},
        "batch": {k: n * reps / t for k, t in b_times.items()},
        "batch_shuffled": {k: n * reps / t for k, t in bs_times.items()},
        "batch_fresh": {k: n * f_reps / median(t) for k, t in f_times.items()},
    }


def rss(kind: str, n: int) -> dict[str, Any]:
    """RSS growth of a ``HeartbeatMonitor`` with ``n`` topics, split core / Python arrays / rest.

    ``expect``: each topic added by ``expect``; ``learn``: each learned from a ``beat_many`` of
    names the monitor has not seen. Names are handed over in chunks of 10k and dropped.
    """
    import numpy  # noqa: F401  (as in suite.py: imported before the first reading)

    import heartwire as hw

    chunk = 10_000

    def chunks() -> Any:
        for lo in range(0, n, chunk):
            yield [topic_name(i) for i in range(lo, min(n, lo + chunk))]

    gc.collect()
    before = rss_bytes()
    start = 1000.0
    clock = hw.ManualClock(start)
    mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, clock=clock)
    mon.start()
    t = time.perf_counter()
    if kind == "expect":
        for part in chunks():
            mon.beat_handles([mon.expect(x) for x in part])
    elif kind == "learn":
        for part in chunks():
            got = mon.beat_many(part)
            assert got == len(part), (got, len(part))
    else:
        raise ValueError(kind)
    fill_s = time.perf_counter() - t
    clock.advance(1.05)
    assert mon.stats()["failed"] == 0 and len(mon) == n, (mon.stats(), len(mon))
    gc.collect()
    grown = rss_bytes() - before
    core = mon.detector.heap_bytes()
    # The monitor's per-slot table (periods, pinned flags, graces, replay history): in the
    # core's intake since issue 15.
    arrays = mon._intake.heap_bytes()
    out = {
        "kind": kind,
        "n": n,
        "fill_s": fill_s,
        "rss_mib": grown / 2**20,
        "bytes_per_topic": grown / n,
        "core_heap_bytes_per_topic": core / n,
        "python_arrays_bytes_per_topic": arrays / n,
        "rest_bytes_per_topic": (grown - core - arrays) / n,
    }
    mon.stop()
    return out


CHILDREN: dict[str, Callable[..., dict[str, Any]]] = {"beats": beats, "rss": rss}


def child(name: str, **params: Any) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__)), "--child", name, "--params", json.dumps(params)]
    print(f"  - {name} {json.dumps(params)} ...", end="", flush=True)
    t = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    print(f" {time.monotonic() - t:.1f} s", flush=True)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return {"error": done.stderr[-3000:], "params": params}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def mark(ratio: float, goal: float) -> str:
    return f"{ratio:5.2f}x {'met' if ratio >= goal else 'MISSED'} (goal >= {goal}x)"


def report(res: dict[str, Any]) -> None:
    for r in res.get("beats", []):
        if "error" in r:
            print(f"\n{r['params']}: FAILED")
            continue
        print(f"\n{r['n']:,} topics (beats/s; ratio to HeapMonitor in the same run)")
        for part, base, goal_for in (
            ("single", "HeapMonitor.beat(name)", GOAL_SINGLE),
            ("batch", "HeapMonitor.beat_many(list)", GOAL_BATCH),
            ("batch_shuffled", "HeapMonitor.beat_many(list)", GOAL_BATCH),
            ("batch_fresh", "HeapMonitor.beat_many(list)", GOAL_BATCH),
        ):
            label = {
                "batch": "batch, in the order added",
                "batch_shuffled": "batch, shuffled",
                "batch_fresh": "batch, in order, fresh str objects",
            }.get(part, part)
            print(f"  {label}:")
            b = r[part][base]
            for k, v in r[part].items():
                ratio = v / b
                goal = goal_for if k.startswith("HeartbeatMonitor") else None
                tail = mark(ratio, goal) if goal is not None and k != base else f"{ratio:5.2f}x"
                print(f"    {k:36s} {v / 1e6:8.2f} M/s  {1e9 / v:7.1f} ns  {tail}")
    for r in res.get("rss", []):
        if "error" in r:
            print(f"\nrss {r['params']}: FAILED")
            continue
        ok = "met" if r["rss_mib"] <= GOAL_RSS_MIB else "MISSED"
        print(
            f"\nHeartbeatMonitor, {r['n']:,} topics by {r['kind']}: RSS +{r['rss_mib']:.1f} MiB"
            f" ({r['bytes_per_topic']:.0f} B/topic; goal <= {GOAL_RSS_MIB:.0f} MiB: {ok}),"
            f" filled in {r['fill_s']:.1f} s\n  core heap_bytes"
            f" {r['core_heap_bytes_per_topic']:.0f} B/topic, monitor table"
            f" {r['python_arrays_bytes_per_topic']:.0f} B/topic,"
            f" rest {r['rest_bytes_per_topic']:.0f} B/topic"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=100_000, help="single calls per round")
    ap.add_argument("--rss-topics", type=int, default=1_000_000)
    ap.add_argument("--no-rss", action="store_true")
    ap.add_argument("--no-beats", action="store_true")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--params", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](**json.loads(args.params))))
        return 0
    res: dict[str, Any] = {}
    if not args.no_beats:
        sizes = [int(s) for s in args.sizes.split(",")]
        res["beats"] = [
            child("beats", n=n, rounds=args.rounds, calls=min(n, args.calls)) for n in sizes
        ]
    if not args.no_rss:
        res["rss"] = [child("rss", kind=k, n=args.rss_topics) for k in ("expect", "learn")]
    report(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
