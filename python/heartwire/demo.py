"""A simulated fleet on the real clock: services beat, some die and come back, and the detector
reports it live. Run it with ``heartwire demo`` (or ``python -m heartwire demo``).

The fleet is simulated in-process by beating the detector directly; publishers over a transport
come with the Python API.
"""

from __future__ import annotations

import collections
import random
import sys
import threading
import time
from dataclasses import dataclass, field

from heartwire._core import Detector, Event
from heartwire.dispatch import Dispatcher


@dataclass
class DemoReport:
    """What a demo run saw."""

    topics: int
    duration: float
    beats: int
    failed_events: int
    resumed_events: int
    outages_caused: int
    outages_detected: int
    lateness_ms: list[float] = field(default_factory=list)

    def lines(self) -> list[str]:
        lateness = sorted(self.lateness_ms)
        p50 = lateness[len(lateness) // 2] if lateness else float("nan")
        p99 = lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))] if lateness else 0.0
        return [
            f"{self.topics} services for {self.duration:.1f} s: {self.beats} beats recorded",
            f"outages caused: {self.outages_caused}, detected: {self.outages_detected}",
            f"events: {self.failed_events} failed, {self.resumed_events} resumed",
            f"detection lateness (seen - deadline): p50 {p50:.1f} ms, p99 {p99:.1f} ms",
        ]


class Fleet:
    """Services that beat every ``period / 2`` until the chaos thread kills them for a while."""

    def __init__(self, det: Detector, topics: int, period: float, seed: int) -> None:
        self.det = det
        self.period = period
        self.rng = random.Random(seed)
        self.names = [f"svc.{i // 50:02d}.{i:04d}" for i in range(topics)]
        self.handles = det.add_many(self.names)
        self.down_until: dict[int, float] = {}
        self.killed = 0
        self.beats = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.period / 2):
            now = time.monotonic()
            for h, until in list(self.down_until.items()):
                if until <= now:
                    del self.down_until[h]
            if self.rng.random() < 0.5:  # kill a service for 3 to 8 periods
                victim = self.rng.choice(self.handles)
                if victim not in self.down_until:
                    self.down_until[victim] = now + self.period * self.rng.uniform(3, 8)
                    self.killed += 1
            live = [h for h in self.handles if h not in self.down_until]
            self.beats += self.det.beat_handles(live)


def run_demo(
    topics: int = 300, period: float = 0.2, duration: float = 10.0, seed: int = 7
) -> DemoReport:
    """Run the demo, printing a live view; returns the report."""
    det = Detector(period=period, allowed_misses=2, tick=0.005)
    recent: collections.deque[str] = collections.deque(maxlen=6)
    tally = collections.Counter()
    lateness: list[float] = []
    failed_topics: set[str] = set()

    def on_events(batch: list[Event]) -> None:
        seen = time.monotonic()
        for ev in batch:
            tally[ev.kind] += 1
            if ev.kind == "failed":
                if ev.missed == 2:  # the first failed event of an outage (allowed_misses=2)
                    tally["outages"] += 1
                    lateness.append((seen - ev.at) * 1000)
                failed_topics.add(ev.topic)
                recent.appendleft(f"FAILED  {ev.topic} missed={ev.missed}")
            elif ev.kind == "resumed":
                failed_topics.discard(ev.topic)
                recent.appendleft(
                    f"resumed {ev.topic} after {ev.downtime:.2f} s, missed={ev.missed}"
                )

    fleet = Fleet(det, topics, period, seed)
    dispatcher = Dispatcher(det.subscribe(), on_events).start()
    chaos = threading.Thread(target=fleet.run, name="demo-fleet", daemon=True)
    chaos.start()
    tty = sys.stdout.isatty()
    started = time.monotonic()
    try:
        while (elapsed := time.monotonic() - started) < duration:
            time.sleep(0.5)
            counts = det.counts()
            view = [
                f"heartwire demo  t={elapsed:5.1f}s  "
                + "  ".join(f"{k}={v}" for k, v in counts.items() if k != "REMOVED"),
                "failed now: " + (", ".join(sorted(failed_topics)[:8]) or "-"),
                *recent,
            ]
            if tty:
                print("\x1b[2J\x1b[H" + "\n".join(view), flush=True)
            else:
                print(view[0], flush=True)
    finally:
        fleet.stop.set()
        chaos.join()
        det.stop()
        dispatcher.drain(timeout=5.0)
        dispatcher.stop()
    return DemoReport(
        topics=topics,
        duration=duration,
        beats=fleet.beats,
        failed_events=tally["failed"],
        resumed_events=tally["resumed"],
        outages_caused=fleet.killed,
        outages_detected=tally["outages"],
        lateness_ms=lateness,
    )
