"""Soak: many topics beating through the embedded broker for minutes; memory, threads, losses.

    .venv/bin/python benches/soak.py [--minutes 10] [--topics 100000] [--period 10] [--sample 10]

A feeder thread publishes one JSON beat per topic per ``period`` through a ``MemoryBroker`` to a
``HeartbeatMonitor`` watching ``soak.>`` (topics are learned from their first beat), spreading
the beats evenly over the period. ``--silent`` more topics are expected but never beat, so they
fail once a period: the check that detection keeps working. Every ``--sample`` seconds it prints
RSS, thread count, beats published and recorded, and the listener counts. At the end:

- lost: beats published minus beats recorded (the monitor's ``stats()["beats"]``) minus beats
  refused (``rejected``): must be 0;
- false failures: ``failed`` events for beating topics (must be 0), ``resumed`` events (0);
- silent topics' failures: each should fail once per period it was silent;
- RSS: first sample after the warm-up (the first period, when topics are learned) to the last,
  and min/max over that span; threads min/max.

Not part of CI (minutes long); results go in benches/results.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

import heartwire as hw
from heartwire.beat import Beat, BeatCodec
from heartwire.transport.memory import MemoryBroker


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def os_threads() -> int:
    """Threads of this process, native ones (the core's driver) included."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return threading.active_count()


class Counts(hw.SubscriberListener):
    def __init__(self) -> None:
        self.failed_beating = 0
        self.failed_silent: dict[str, int] = {}
        self.resumed = 0
        self.exceptions = 0
        self.lock = threading.Lock()

    def on_failed(self, event: hw.Failed) -> None:
        with self.lock:
            if event.topic.startswith("soak.silent."):
                self.failed_silent[event.topic] = self.failed_silent.get(event.topic, 0) + 1
            else:
                self.failed_beating += 1

    def on_resumed(self, event: hw.Resumed) -> None:
        with self.lock:
            self.resumed += 1

    def on_exception(self, event: hw.ExceptionEvent) -> None:
        with self.lock:
            self.exceptions += 1


def run(minutes: float, topics: int, period: float, sample: float, silent: int) -> dict[str, Any]:
    broker = MemoryBroker()
    counts = Counts()
    mon = hw.HeartbeatMonitor(broker, "soak.>", period=period, listeners=[counts])
    for i in range(silent):
        mon.expect(f"soak.silent.{i}")
    codec = BeatCodec()
    names = [f"soak.t.{i:06d}" for i in range(topics)]
    bodies = [codec.encode(Beat(n, period=period)) for n in names]
    published = [0]
    stop = threading.Event()
    mon.start()
    start = time.monotonic()

    def feed() -> None:
        slices = 50  # publish in 50 slices a period
        per_slice = max(1, topics // slices)
        due = time.monotonic()
        i = 0
        while not stop.is_set():
            for _ in range(per_slice):
                broker.publish(names[i], bodies[i])
                published[0] += 1
                i = (i + 1) % topics
            due += period / slices
            delay = due - time.monotonic()
            if delay > 0:
                stop.wait(delay)

    feeder = threading.Thread(target=feed, name="soak-feed", daemon=True)
    feeder.start()
    samples: list[dict[str, Any]] = []
    end = start + minutes * 60
    print(
        f"soak: {topics} topics, period {period} s, {silent} silent, {minutes} min, "
        f"sample every {sample} s",
        flush=True,
    )
    print("   t_s   rss_MB  threads  published   recorded  lst_depth  failed_silent", flush=True)
    next_sample = start
    while True:
        now = time.monotonic()
        if now >= next_sample:
            stats = mon.stats()
            row = {
                "t": round(now - start, 1),
                "rss": rss_bytes(),
                "threads": os_threads(),
                "published": published[0],
                "recorded": stats["beats"],
                "listener_queue_depth": stats["listener_queue_depth"],
                "failed_silent": sum(counts.failed_silent.values()),
            }
            samples.append(row)
            print(
                f"{row['t']:6.0f} {row['rss'] / 2**20:8.1f} {row['threads']:8d} "
                f"{row['published']:10d} {row['recorded']:10d} {row['listener_queue_depth']:10d} "
                f"{row['failed_silent']:14d}",
                flush=True,
            )
            next_sample += sample
        if now >= end:
            break
        time.sleep(min(0.5, max(0.0, min(next_sample, end) - time.monotonic())))
    stop.set()
    feeder.join(10)
    elapsed = time.monotonic() - start
    mon.drain(timeout=30)
    stats = mon.stats()
    metrics = mon.metrics()
    mon.stop()
    broker.close()

    warm = [s for s in samples if s["t"] >= period * 2] or samples
    rss = [s["rss"] for s in warm]
    threads = [s["threads"] for s in warm]
    lost = published[0] - stats["beats"] - sum(stats["rejected"].values())
    periods_silent = int((elapsed - period * 0.1) // period)  # default grace: 10% of a period
    per_topic = sorted(counts.failed_silent.get(f"soak.silent.{i}", 0) for i in range(silent))
    return {
        "minutes": round(elapsed / 60, 2),
        "topics": topics,
        "period": period,
        "published": published[0],
        "recorded": stats["beats"],
        "rejected": stats["rejected"],
        "lost": lost,
        "failed_beating": counts.failed_beating,
        "resumed": counts.resumed,
        "failed_silent_per_topic": [per_topic[0], per_topic[-1]] if per_topic else None,
        "failed_silent_expected": periods_silent,
        "listener_dropped": stats["listener_dropped"],
        "dispatch_dropped": stats["dropped"],
        "topics_watched_at_end": metrics["topics"],
        "rss_mb_first": round(rss[0] / 2**20, 1),
        "rss_mb_last": round(rss[-1] / 2**20, 1),
        "rss_mb_min": round(min(rss) / 2**20, 1),
        "rss_mb_max": round(max(rss) / 2**20, 1),
        "rss_drift_pct": round(100 * (rss[-1] - rss[0]) / rss[0], 2),
        "rss_span_pct": round(100 * (max(rss) - min(rss)) / rss[0], 2),
        "threads_min": min(threads),
        "threads_max": max(threads),
        "samples": len(samples),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--topics", type=int, default=100_000)
    ap.add_argument("--period", type=float, default=10.0, help="beat period, s")
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--silent", type=int, default=100, help="expected topics that never beat")
    ap.add_argument("--json", help="write the summary here too")
    args = ap.parse_args()
    summary = run(args.minutes, args.topics, args.period, args.sample, args.silent)
    print("summary:", json.dumps(summary, indent=1), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    ok = (
        summary["lost"] == 0
        and summary["failed_beating"] == 0
        and summary["resumed"] == 0
        and summary["topics_watched_at_end"] == args.topics + args.silent
    )
    print("soak:", "OK" if ok else "PROBLEM (see summary)", flush=True)


if __name__ == "__main__":
    main()
