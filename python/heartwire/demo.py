"""A simulated fleet on the embedded broker: ``heartwire demo``.

A few hundred :class:`~heartwire.HeartbeatPublisher` s beat on the in-process broker; a chaos
thread silences some of them for a few periods (a paused publisher, or a dependent publisher whose
health check starts failing) and brings them back. One :class:`~heartwire.HeartbeatMonitor` on
``svc.>`` learns every topic from its beats and reports failures and recoveries to a listener,
which feeds a live status view. At the end a summary compares the outages caused with those the
monitor detected.
"""

from __future__ import annotations

import collections
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from heartwire import _validate
from heartwire._text import terminal_safe
from heartwire.events import Failed, Resumed
from heartwire.listeners import SubscriberListener
from heartwire.monitor import HeartbeatMonitor
from heartwire.publisher import HeartbeatPublisher
from heartwire.transport import Transport, connect

#: Every this many services one is a dependent publisher (beats only while its check passes).
DEPENDENT_EVERY = 10


@dataclass
class DemoReport:
    """What a demo run saw."""

    topics: int
    duration: float
    beats_sent: int
    failed_events: int
    resumed_events: int
    outages_caused: int
    #: Outages caused early enough that the monitor must have declared them before the end.
    outages_due: int
    outages_detected: int
    lateness_ms: list[float] = field(default_factory=list)

    def lines(self) -> list[str]:
        lateness = sorted(self.lateness_ms)
        p50 = lateness[len(lateness) // 2] if lateness else 0.0
        p99 = lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))] if lateness else 0.0
        return [
            f"{self.topics} services for {self.duration:.1f} s: {self.beats_sent} beats sent",
            f"outages caused: {self.outages_caused} ({self.outages_due} long enough before the"
            f" end to be due), detected: {self.outages_detected}",
            f"events: {self.failed_events} failed, {self.resumed_events} resumed",
            f"detection lateness (seen - deadline): p50 {p50:.1f} ms, p99 {p99:.1f} ms",
        ]


class Tally(SubscriberListener):
    """Counts events and keeps what the live view shows."""

    def __init__(self, allowed_misses: int) -> None:
        self.allowed_misses = allowed_misses
        self.lock = threading.Lock()
        self.failed = 0
        self.resumed = 0
        self.outages = 0
        self.lateness_ms: list[float] = []
        self.failed_now: set[str] = set()
        self.recent: collections.deque[str] = collections.deque(maxlen=6)
        self.clock: Callable[[], float] = time.monotonic

    def on_failed(self, event: Failed) -> None:
        seen = self.clock()
        with self.lock:
            self.failed += 1
            # The first failed event of an outage: after allowed_misses periods, or at once
            # when a dependent publisher's check failed (a down beat, with its reason).
            if event.topic not in self.failed_now:
                self.outages += 1
                self.lateness_ms.append((seen - event.at) * 1000)
            self.failed_now.add(event.topic)
            why = f" ({terminal_safe(event.reason)})" if event.reason is not None else ""
            self.recent.appendleft(f"FAILED  {event.topic} missed={event.missed}{why}")

    def on_resumed(self, event: Resumed) -> None:
        with self.lock:
            self.resumed += 1
            self.failed_now.discard(event.topic)
            self.recent.appendleft(
                f"resumed {event.topic} after {event.downtime:.2f} s, missed={event.missed}"
            )


class Chaos:
    """Silences a random service for 3 to 8 periods every half period, then brings it back."""

    def __init__(self, size: int, period: float, seed: int) -> None:
        # Filled by the caller once the publishers exist (dependent ones need `check` first).
        self.publishers: list[HeartbeatPublisher] = []
        self.period = period
        self.rng = random.Random(seed)
        self.healthy = [True] * size
        self.down_until: dict[int, float] = {}
        self.caused_at: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="heartwire-demo-chaos", daemon=True)

    def check(self, index: int) -> Callable[[], bool]:
        """The health check of dependent publisher ``index``: fails while chaos says so."""
        return lambda: self.healthy[index]

    def _run(self) -> None:
        while not self.stop.wait(self.period / 2):
            now = time.monotonic()
            for i, until in list(self.down_until.items()):
                if until <= now:
                    del self.down_until[i]
                    self._revive(i)
            if self.rng.random() < 0.5:
                victim = self.rng.randrange(len(self.publishers))
                if victim not in self.down_until:
                    self.down_until[victim] = now + self.period * self.rng.uniform(3, 8)
                    self.caused_at.append(now)
                    self._silence(victim)
        for i in list(self.down_until):
            self._revive(i)

    def _silence(self, i: int) -> None:
        if i % DEPENDENT_EVERY == 0:
            self.healthy[i] = False  # its check fails: it sends down beats (failed at once)
        else:
            self.publishers[i].pause()

    def _revive(self, i: int) -> None:
        self.healthy[i] = True
        self.publishers[i].resume()


def run_demo(
    topics: int = 300,
    period: float = 0.2,
    duration: float = 10.0,
    seed: int = 7,
    broker: Transport | None = None,
) -> DemoReport:
    """Run the demo, printing a live view; returns the report.

    Bad arguments raise :class:`ValueError` (or :class:`TypeError`) naming the argument."""
    topics = _validate.count(topics, "topics", 1)
    period = _validate.seconds(period, "period")
    duration = _validate.seconds(duration, "duration")
    allowed_misses = 2
    broker = broker if broker is not None else connect()
    tally = Tally(allowed_misses)
    monitor = HeartbeatMonitor(
        broker, "svc.>", period=period, allowed_misses=allowed_misses, listeners=[tally]
    )
    tally.clock = monitor.now
    names = [f"svc.{i // 50:02d}.{i:04d}" for i in range(topics)]
    chaos = Chaos(topics, period, seed)
    publishers = chaos.publishers
    for i, name in enumerate(names):
        dependency = chaos.check(i) if i % DEPENDENT_EVERY == 0 else None
        publishers.append(HeartbeatPublisher(broker, name, period=period, dependency=dependency))

    monitor.start()
    for pub in publishers:
        pub.start()
    chaos.thread.start()
    tty = sys.stdout.isatty()
    started = time.monotonic()
    try:
        while (elapsed := time.monotonic() - started) < duration:
            time.sleep(min(0.5, duration - elapsed))
            _show(monitor, tally, time.monotonic() - started, tty)
    finally:
        ended = time.monotonic()
        chaos.stop.set()
        chaos.thread.join()
        for pub in publishers:
            pub.stop()
        monitor.drain(timeout=5.0)
        monitor.stop()
    return DemoReport(
        topics=topics,
        duration=duration,
        beats_sent=sum(p.sent for p in publishers),
        failed_events=tally.failed,
        resumed_events=tally.resumed,
        outages_caused=len(chaos.caused_at),
        # Silence starts at the last beat (up to a period before the pause); the failure is
        # declared allowed_misses periods later plus grace and a tick: 1.5 periods of margin.
        outages_due=sum(t + (allowed_misses + 1.5) * period <= ended for t in chaos.caused_at),
        outages_detected=tally.outages,
        lateness_ms=tally.lateness_ms,
    )


def _show(monitor: HeartbeatMonitor, tally: Tally, elapsed: float, tty: bool) -> None:
    counts = monitor.counts()
    with tally.lock:
        failed_now = sorted(tally.failed_now)
        recent = list(tally.recent)
    head = f"heartwire demo  t={elapsed:5.1f}s  " + "  ".join(
        f"{k}={v}" for k, v in counts.items() if k != "REMOVED"
    )
    if not tty:
        print(head, flush=True)
        return
    shown = ", ".join(failed_now[:8]) + (
        f" (+{len(failed_now) - 8})" if len(failed_now) > 8 else ""
    )
    view = [head, f"failed now: {shown or '-'}", "recent:", *("  " + line for line in recent)]
    print("\x1b[2J\x1b[H" + "\n".join(view), flush=True)
