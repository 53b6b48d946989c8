"""Under ``overflow="block"`` the detector waits for room in a full queue without holding its
locks, so the queue's own consumer (a listener on the monitor's dispatch thread,
``listener_queue=None``) may call the monitor meanwhile (issue 14 item 3, review R1 F1/F2).

Manual clock; every wait is bounded and fails with what got stuck."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import heartwire as hw
from heartwire.eventlog import EventLog

BOUND = 15.0  # seconds before a step counts as a deadlock


def bounded(what: str, fn: Callable[[], object]) -> None:
    """Run ``fn`` on a thread; fail if it has not returned within BOUND seconds."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True, name=f"bounded: {what}")
    t.start()
    t.join(BOUND)
    assert not t.is_alive(), f"deadlock: {what} has not returned after {BOUND} s"
    if errors:
        raise errors[0]


class Wants(hw.SubscriberListener):
    def on_received(self, event: hw.Received) -> None:
        pass


class CallsBack(hw.SubscriberListener):
    """Counts ``on_failed`` per topic and calls ``action`` from it, on the dispatch thread."""

    def __init__(self, action: Callable[[hw.Failed], object]) -> None:
        self.action = action
        self.failed: Counter[str] = Counter()

    def on_failed(self, event: hw.Failed) -> None:
        self.failed[event.topic] += 1
        self.action(event)


def block_monitor(
    n: int,
    listener: hw.SubscriberListener,
    overflow: Literal["block", "coalesce"] = "block",
    capacity: int = 4,
) -> tuple[hw.ManualClock, hw.HeartbeatMonitor, list[str]]:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(
        hw.connect(),
        "svc.>",
        period=1.0,
        clock=clock,
        listener_queue=None,
        overflow=overflow,
        capacity=capacity,
    )
    mon.add_listener(listener)
    topics = [f"svc.t{i}" for i in range(n)]
    for t in topics:
        mon.expect(t)
    mon.start()
    return clock, mon, topics


def test_a_listener_on_the_dispatch_thread_adds_a_listener_while_the_driver_waits() -> None:
    """A feed switch made from ``on_failed`` while the driver waits for room in the queue
    that only this thread empties: no deadlock, and every topic's failure is delivered once."""
    switched = threading.Event()
    mon: hw.HeartbeatMonitor | None = None

    def switch(event: hw.Failed) -> None:
        if not switched.is_set():
            switched.set()
            assert mon is not None
            mon.add_listener(Wants())  # opens a new feed: subscribe, close, unsubscribe

    listener = CallsBack(switch)
    clock, mon, topics = block_monitor(200, listener)
    try:
        bounded("ManualClock.advance (the driver)", lambda: clock.advance(1.5))
        bounded("drain", lambda: mon.drain(BOUND))
        assert switched.is_set()
        assert listener.failed == Counter(topics), "each failure delivered exactly once"
    finally:
        bounded("stop", lambda: mon.stop(2.0))


def test_a_listener_on_the_dispatch_thread_pauses_topics_while_the_driver_waits() -> None:
    listener = CallsBack(lambda event: mon.pause(event.topic))
    clock, mon, topics = block_monitor(200, listener)
    try:
        bounded("ManualClock.advance (the driver)", lambda: clock.advance(1.5))
        bounded("drain", lambda: mon.drain(BOUND))
        assert listener.failed == Counter(topics)
        assert all(mon.status(t).state.value == "PAUSED" for t in topics)
    finally:
        bounded("stop", lambda: mon.stop(2.0))


def test_a_lossless_event_log_with_a_listener_calling_back_does_not_deadlock(
    tmp_path: Path,
) -> None:
    """An EventLog turns the feed to "block" by itself: users who never chose it hit this."""
    listener = CallsBack(lambda event: mon.pause(event.topic))
    log = EventLog(tmp_path / "events")
    clock, mon, topics = block_monitor(300, listener, overflow="coalesce", capacity=16)
    mon.add_listener(log)
    try:
        bounded("ManualClock.advance (the driver)", lambda: clock.advance(1.5))
        bounded("drain", lambda: mon.drain(BOUND))
        assert listener.failed == Counter(topics)
    finally:
        bounded("stop", lambda: mon.stop(2.0))


def test_stop_returns_while_a_beat_waits_for_room_in_a_queue_nobody_reads() -> None:
    """R1 F2: beats in flight when stop() comes, their ``received`` events filling the queue."""
    _clock, mon, topics = block_monitor(200, Wants())
    running = threading.Event()
    halt = threading.Event()

    def beater() -> None:
        running.set()
        while not halt.is_set():
            mon.beat_many(topics)

    t = threading.Thread(target=beater, daemon=True)
    t.start()
    assert running.wait(BOUND)
    try:
        bounded("stop with a beater running", lambda: mon.stop(0.5))
    finally:
        halt.set()
    t.join(BOUND)
    assert not t.is_alive(), "deadlock: beat_many did not return after stop()"


def test_stop_from_a_listener_on_the_dispatch_thread_returns() -> None:
    """``mon.stop()`` from ``on_failed`` while the (manual-clock) driver waits for room: the
    detector's stop emits nothing of its own, so it does not wait for the driver's events."""
    stopped = threading.Event()

    def stop(event: hw.Failed) -> None:
        if not stopped.is_set():
            stopped.set()
            mon.stop(0.1)

    clock, mon, _topics = block_monitor(200, CallsBack(stop))
    bounded("ManualClock.advance (the driver)", lambda: clock.advance(1.5))
    assert stopped.is_set() and not mon.running
