"""Lossless listeners (issue 14, item 13, the delivery half): the event log loses nothing.

``EventLog`` used to be an ordinary listener behind the bounded drop-oldest listener queue: 20
topics beating every 10 s for three simulated hours, driven by a ManualClock as fast as the
machine goes, lost thousands of its ~21 000 events. A listener with ``lossless = True`` is
never dropped from: its queue grows instead (visible in ``stats()``, warned about in the log),
and the monitor's feed back-pressures the driver instead of coalescing or dropping.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import heartwire as hw
from heartwire.eventlog import EventLog

TOPICS = [f"svc.t{i:02d}" for i in range(20)]
PERIOD = 10.0
HOURS = 3


def _simulate(mon: hw.HeartbeatMonitor, clock: hw.ManualClock) -> int:
    """Three hours of 20 topics beating every 10 s, as fast as the machine goes; one topic is
    down for ten minutes in the middle (failures and a resume). Returns the beats recorded."""
    beats = 0
    steps = int(HOURS * 3600 / PERIOD)
    for step in range(steps):
        down = steps // 2 <= step < steps // 2 + 60
        names = TOPICS[1:] if down else TOPICS
        beats += mon.beat_many(names)
        clock.advance(PERIOD)
    return beats


def test_event_log_loses_nothing_over_three_simulated_hours(tmp_path: Path) -> None:
    clock = hw.ManualClock()
    log = EventLog(tmp_path / "events", roll_seconds=3600, wall_offset=1_750_000_000.0, clock=clock)
    mon = hw.HeartbeatMonitor(None, "svc.>", period=PERIOD, clock=clock, listeners=[log])
    for topic in TOPICS:
        mon.expect(topic)
    mon.start()
    started = time.monotonic()
    beats = _simulate(mon, clock)
    mon.stop(timeout=60.0)
    log.close()
    elapsed = time.monotonic() - started
    stats = mon.stats()
    produced = stats["received"] + stats["failed"] + stats["resumed"]
    assert beats == stats["beats"] and stats["failed"] > 0 and stats["resumed"] == 1
    assert stats["dropped"] == 0 and stats["listener_dropped"] == 0, stats
    kinds = pq.read_table(tmp_path / "events").column("kind").to_pylist()
    # The log also has the monitor's run: a started and a stopped row.
    assert (kinds.count("started"), kinds.count("stopped")) == (1, 1)
    rows = sum(kind in ("received", "failed", "resumed") for kind in kinds)
    assert rows == produced, f"{produced - rows} of {produced} events lost in {elapsed:.1f} s"


class Slow(hw.SubscriberListener):
    """A lossless listener that takes its time."""

    lossless = True

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.failed: list[tuple[str, int]] = []

    def on_failed(self, event: hw.Failed) -> None:
        self.gate.wait(10.0)
        self.failed.append((event.topic, event.missed))


def test_a_slow_lossless_listener_delays_only_itself_and_shows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = hw.ManualClock()
    slow = Slow()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listener_queue=8, listeners=[slow])
    names = [f"svc.{i}" for i in range(50)]
    for name in names:
        mon.expect(name)
    mon.start()
    with caplog.at_level(logging.WARNING, logger="heartwire.listeners"):
        for _ in range(4):
            clock.advance(1.0)  # 50 failures a second, far more than its queue (8) holds
        # Detection went on: every topic is FAILED with its full count, without the listener.
        assert {s.missed for s in mon.statuses()} == {3}  # deadlines 1.1, 2.1, 3.1
        deadline = time.monotonic() + 10
        while mon.stats()["listener_queue_depth"] < 149 and time.monotonic() < deadline:
            time.sleep(0.01)
        row = mon.stats()["listeners"][0]
        assert row["lossless"] and row["dropped"] == 0
        assert row["queued"] >= 149, row  # all but the one in progress wait, none dropped
    warnings = [r.getMessage() for r in caplog.records]
    assert any("Slow" in m and "lossless" in m and "behind" in m for m in warnings), warnings
    slow.gate.set()
    assert mon.drain(10.0)
    assert len(slow.failed) == 150 and mon.stats()["listener_dropped"] == 0
    mon.stop()


def test_the_feed_blocks_for_a_lossless_listener_and_not_otherwise() -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, capacity=4)
    mon.start()
    assert mon._feed.current is not None and mon._feed.current.queue.overflow == "coalesce"
    log = Slow()
    mon.add_listener(log)
    assert mon._feed.current.queue.overflow == "block"
    mon.remove_listener(log)
    assert mon._feed.current.queue.overflow == "coalesce"
    mon.stop()


class Audit(hw.SubscriberListener):
    """A lossless listener counting failures, and what came after on_stopped."""

    lossless = True

    def __init__(self) -> None:
        self.failed = 0
        self.after_stop = 0
        self.stopped = False

    def on_failed(self, event: hw.Failed) -> None:
        self.failed += 1
        self.after_stop += self.stopped

    def on_stopped(self, event: hw.Stopped) -> None:
        self.stopped = True


@pytest.mark.parametrize("listener_queue", [10_000, None])
def test_stop_with_a_short_timeout_loses_nothing_for_a_lossless_listener(
    listener_queue: int | None,
) -> None:
    # R1 F9: stop(timeout) dropped what its dispatch thread still held when the time was up,
    # a lossless listener's events included (29 999 of 30 000 with timeout=0).
    clock = hw.ManualClock()
    audit = Audit()
    mon = hw.HeartbeatMonitor(
        None, "svc.>", clock=clock, listeners=[audit], listener_queue=listener_queue
    )
    mon.detector.add_many([f"svc.{i}" for i in range(30_000)])
    mon.start()
    clock.advance(1.5)  # 30 000 failures queued
    mon.stop(timeout=0.0)
    assert mon._listeners.close(20.0), "the listener thread did not catch up in 20 s"
    stats = mon.stats()
    assert (audit.failed, stats["dropped"], stats["listener_late"]) == (30_000, 0, 0), stats
    assert audit.stopped and audit.after_stop == 0
