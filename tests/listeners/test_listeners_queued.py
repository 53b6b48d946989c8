"""Queued listeners: each listener on its own bounded queue and thread, so a blocked or raising
listener never holds up the others; overflow drops are counted per listener."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import heartwire as hw
from heartwire.events import ExceptionEvent, Failed, Received, Resumed, Started, Stopped
from heartwire.listeners import ListenerSet, SubscriberListener
from heartwire.monitor import HeartbeatMonitor

WAIT = 10.0  # bound on every wait for another thread; a healthy run takes milliseconds


def failed(i: int) -> Failed:
    return Failed(f"svc.{i}", 1, float(i), float(i))


def wait_for(predicate: Any, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


class Recorder(SubscriberListener):
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.threads: set[int] = set()
        self.lock = threading.Lock()

    def _add(self, event: Any) -> None:
        with self.lock:
            self.events.append(event)
            self.threads.add(threading.get_ident())

    def on_started(self, event: Started) -> None:
        self._add(event)

    def on_stopped(self, event: Stopped) -> None:
        self._add(event)

    def on_failed(self, event: Failed) -> None:
        self._add(event)

    def on_resumed(self, event: Resumed) -> None:
        self._add(event)

    def on_exception(self, event: ExceptionEvent) -> None:
        self._add(event)


class Blocked(SubscriberListener):
    """Blocks in every on_failed until released; counts the calls it entered."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = 0

    def on_failed(self, event: Failed) -> None:
        self.entered += 1
        if not self.release.wait(WAIT * 3):
            raise AssertionError("Blocked listener was never released")


class Boom(SubscriberListener):
    def on_failed(self, event: Failed) -> None:
        raise RuntimeError(f"boom {event.topic}")


# -- ListenerSet -------------------------------------------------------------------------------


def test_bad_queue_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"queue_size must be >= 1, got 0"):
        ListenerSet(SubscriberListener, "svc.>", queue_size=0)
    with pytest.raises(ValueError, match=r"overflow must be one of .*got 'block'"):
        ListenerSet(SubscriberListener, "svc.>", queue_size=4, overflow="block")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"listener_queue must be >= 1, got 0"):
        HeartbeatMonitor(None, "svc.>", listener_queue=0)


def test_fast_listener_gets_everything_while_the_slow_one_is_blocked() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>", queue_size=8)
    slow, fast = Blocked(), Recorder()
    ls.add(slow)
    ls.add(fast)
    try:
        for i in range(100):
            ls.emit("on_failed", failed(i))  # never waits for `slow`
            wait_for(lambda i=i: len(fast.events) == i + 1, f"event {i} at the fast listener")
        assert fast.events == [failed(i) for i in range(100)]  # in order
        assert fast.threads.isdisjoint({threading.get_ident()})  # on its own thread
        wait_for(lambda: slow.entered == 1, "the slow listener to enter its first call")
        # the slow one holds its first event in hand and 8 queued; the other 91 were dropped
        [s_slow, s_fast] = ls.stats()
        assert s_slow["listener"] == "Blocked"
        assert (s_slow["queued"], s_slow["high_water"], s_slow["dropped"]) == (8, 8, 91)
        assert s_slow["busy_for"] is not None and s_slow["busy_for"] >= 0
        assert (s_fast["queued"], s_fast["dropped"], s_fast["handled"]) == (0, 0, 100)
        assert ls.dropped == 91
        assert ls.queue_depth == 8
        assert not ls.drain(timeout=0.05)  # honest: the slow one has not caught up
    finally:
        slow.release.set()
    assert ls.drain(timeout=WAIT)
    assert slow.entered == 9  # the first, then the newest 8 (drop-oldest)
    assert ls.close(timeout=WAIT)


def test_drop_newest_keeps_the_oldest_events() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(
        SubscriberListener, "svc.>", queue_size=3, overflow="drop-newest"
    )
    got: list[Failed] = []
    gate = threading.Event()

    class Gated(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            gate.wait(WAIT)
            got.append(event)

    ls.add(Gated())
    ls.emit("on_failed", failed(0))
    wait_for(lambda: ls.stats()[0]["busy_for"] is not None, "the first call to start")
    for i in range(1, 10):
        ls.emit("on_failed", failed(i))
    gate.set()
    assert ls.drain(timeout=WAIT)
    assert got == [failed(0), failed(1), failed(2), failed(3)]
    assert ls.dropped == 6
    assert ls.close(timeout=WAIT)


def test_raising_listener_is_counted_and_reported_through_the_others_queue() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>", queue_size=64)
    boom, rec = Boom(), Recorder()
    ls.add(boom)
    ls.add(rec)
    for i in range(5):
        ls.emit("on_failed", failed(i))
    assert ls.drain(timeout=WAIT)  # includes the reports boom's errors queued for `rec`
    assert ls.errors == 5
    assert [s["errors"] for s in ls.stats()] == [5, 0]
    reports = [e for e in rec.events if isinstance(e, ExceptionEvent)]
    assert len(reports) == 5
    assert {r.reason for r in reports} == {"listener_error"}
    assert sorted(str(r.error) for r in reports) == [f"boom svc.{i}" for i in range(5)]
    assert [e for e in rec.events if isinstance(e, Failed)] == [failed(i) for i in range(5)]
    assert ls.close(timeout=WAIT)


def test_close_ends_the_threads_and_a_later_emit_starts_them_again() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>", queue_size=4)
    rec = Recorder()
    ls.add(rec)
    ls.emit("on_failed", failed(1))
    assert ls.drain(timeout=WAIT)
    names = {t.name for t in threading.enumerate()}
    assert "heartwire-listener[Recorder]" in names
    assert ls.close(timeout=WAIT)
    wait_for(
        lambda: not any(t.name == "heartwire-listener[Recorder]" for t in threading.enumerate()),
        "the listener thread to end",
    )
    ls.emit("on_failed", failed(2))
    assert ls.drain(timeout=WAIT)
    assert rec.events == [failed(1), failed(2)]
    assert ls.close(timeout=WAIT)


def test_drain_from_a_listener_thread_returns_false_at_once() -> None:
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>", queue_size=4)
    answers: list[bool] = []

    class Drainer(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            answers.append(ls.drain(timeout=WAIT))

    ls.add(Drainer())
    ls.emit("on_failed", failed(1))
    assert ls.drain(timeout=WAIT)
    assert answers == [False]
    assert ls.close(timeout=WAIT)


# -- through a monitor ----------------------------------------------------------------------


def test_monitor_failure_detection_is_exact_for_the_fast_listener_beside_a_blocked_one() -> None:
    clock = hw.ManualClock()
    slow, fast = Blocked(), Recorder()
    mon = HeartbeatMonitor(
        None, "svc.>", period=1.0, clock=clock, grace=0.0, listeners=[slow, fast], listener_queue=4
    )
    mon.expect("svc.a")
    mon.expect("svc.b")
    mon.start()
    clock.advance(0.25)  # the n-th failure (at n) is produced by the n-th round below
    try:
        for n in range(1, 21):  # svc.b beats every period; svc.a is silent
            clock.advance(0.5)
            mon.beat("svc.b")
            clock.advance(0.5)
            wait_for(
                lambda n=n: sum(isinstance(e, Failed) for e in fast.events) == n,
                f"failed event {n} at the fast listener",
            )
        fails = [e for e in fast.events if isinstance(e, Failed)]
        assert [(e.topic, e.missed, e.at) for e in fails] == [
            ("svc.a", n, float(n)) for n in range(1, 21)
        ]
        assert mon.counts()["FAILED"] == 1 and mon.counts()["ALIVE"] == 1
        wait_for(lambda: slow.entered == 1, "the slow listener's first call")
        stats = mon.stats()
        assert stats["listener_queue_depth"] == 4  # bounded
        assert stats["listener_dropped"] == 15  # 20 - 1 in hand - 4 queued
        assert [s["dropped"] for s in stats["listeners"]] == [15, 0]
        assert mon.metrics()["dropped"]["listeners"] == 15
        assert not mon.drain(timeout=0.05)
    finally:
        slow.release.set()
    assert mon.drain(timeout=WAIT)
    mon.stop(timeout=WAIT)
    assert isinstance(fast.events[0], Started) and isinstance(fast.events[-1], Stopped)


def test_monitor_stop_with_a_stuck_listener_returns_within_its_timeout() -> None:
    clock = hw.ManualClock()
    slow, fast = Blocked(), Recorder()
    mon = HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[slow, fast], listener_queue=16)
    mon.expect("svc.a")
    mon.start()
    clock.advance(1.5)
    wait_for(lambda: slow.entered == 1, "the slow listener's first call")
    t0 = time.monotonic()
    mon.stop(timeout=0.2)
    assert time.monotonic() - t0 < WAIT  # it gave up on the stuck listener instead of hanging
    wait_for(lambda: any(isinstance(e, Stopped) for e in fast.events), "the fast on_stopped")
    slow.release.set()
    wait_for(
        lambda: not any(t.name == "heartwire-listener[Blocked]" for t in threading.enumerate()),
        "the released listener's thread to end",
    )


def test_received_switch_keeps_order_and_loses_nothing_with_queued_listeners() -> None:
    clock = hw.ManualClock()
    rec = Recorder()
    mon = HeartbeatMonitor(None, "svc.>", period=1.0, clock=clock, grace=0.0, listeners=[rec])
    mon.expect("svc.a")
    mon.start()
    clock.advance(1.5)  # failed at 1.0
    assert mon.drain(timeout=WAIT)

    class Beats(Recorder):
        def on_received(self, event: Received) -> None:
            self._add(event)

    beats = Beats()
    mon.add_listener(beats)  # a new feed that carries received events
    mon.beat("svc.a", seq=1)  # resumed, then received
    clock.advance(1.5)  # failed again at 2.5
    assert mon.drain(timeout=WAIT)
    assert [type(e).__name__ for e in rec.events] == ["Started", "Failed", "Resumed", "Failed"]
    assert [type(e).__name__ for e in beats.events] == ["Resumed", "Received", "Failed"]
    mon.stop(timeout=WAIT)


def test_listener_queue_none_calls_listeners_in_the_producing_thread() -> None:
    clock = hw.ManualClock()
    rec = Recorder()
    mon = HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[rec], listener_queue=None)
    mon.start()
    assert rec.threads == {threading.get_ident()}  # on_started, synchronously
    mon.stop()
    assert mon.stats()["listeners"] == [{"listener": "Recorder", "errors": 0, "lossless": False}]


def test_a_listener_raising_on_every_call_is_counted_and_the_fast_one_is_exact() -> None:
    clock = hw.ManualClock()

    class Raising(SubscriberListener):
        def on_received(self, event: Received) -> None:
            raise RuntimeError("always")

        def on_failed(self, event: Failed) -> None:
            raise RuntimeError("always")

    class Fast(Recorder):
        def on_received(self, event: Received) -> None:
            self._add(event)

    fast = Fast()
    mon = HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0.0, clock=clock, listeners=[Raising(), fast]
    )
    mon.expect("svc.a")
    mon.expect("svc.b")
    mon.start()
    for n in range(1, 11):  # svc.b beats twice a period, svc.a is silent
        clock.advance(0.5)
        mon.beat("svc.b", seq=2 * n - 1)
        clock.advance(0.5)
        mon.beat("svc.b", seq=2 * n)
    clock.advance(0.25)
    assert mon.drain(timeout=WAIT)
    fails = [(e.topic, e.missed, e.at) for e in fast.events if isinstance(e, Failed)]
    assert fails == [("svc.a", n, float(n)) for n in range(1, 11)]
    assert [e.seq for e in fast.events if isinstance(e, Received)] == list(range(1, 21))
    reports = [e for e in fast.events if isinstance(e, ExceptionEvent)]
    stats = mon.stats()
    assert stats["listener_errors"] == 30 == len(reports)  # 20 received + 10 failed
    assert [s["errors"] for s in stats["listeners"]] == [30, 0]
    assert mon.metrics()["listener_errors"] == 30
    mon.stop(timeout=WAIT)


def test_a_dropped_event_does_not_keep_a_closed_listener_thread_alive() -> None:
    # A drop-newest put that is refused (queue full) must not undo close(): the thread would
    # then wait forever once its queue is empty.
    gate = threading.Event()

    class Blocked(SubscriberListener):
        def on_failed(self, event: Failed) -> None:
            gate.wait(10.0)

    ls: ListenerSet[SubscriberListener] = ListenerSet(
        SubscriberListener, "svc.>", queue_size=1, overflow="drop-newest"
    )
    ls.add(Blocked())
    ls.emit("on_failed", Failed("svc.a", 1, 0.0, 1.0))  # taken by the thread: it blocks
    deadline = time.monotonic() + 5
    while ls.queue_depth and time.monotonic() < deadline:
        time.sleep(0.005)
    ls.emit("on_failed", Failed("svc.a", 2, 0.0, 2.0))  # queued
    assert not ls.close(timeout=0.0)  # busy: it ends by itself once empty
    ls.emit("on_failed", Failed("svc.a", 3, 0.0, 3.0))  # dropped: the queue is full
    assert ls.dropped == 1
    gate.set()
    threads = [t for t in threading.enumerate() if t.name.endswith(".Blocked]")]
    assert threads
    for t in threads:
        t.join(5.0)
    assert not any(t.is_alive() for t in threads), "the closed listener thread never ended"


def test_a_listener_thread_that_cannot_start_drops_the_event_counted_never_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # emit() "never raises", but Thread.start's RuntimeError (a pids limit) went through it,
    # into the emitter (a monitor's detector, a transport's failover thread).
    real = threading.Thread.start
    failing = [True]

    def start(thread: threading.Thread) -> None:
        if failing[0] and thread.name.startswith("heartwire-listener"):
            raise RuntimeError("can't start new thread")
        real(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    ls: ListenerSet[SubscriberListener] = ListenerSet(SubscriberListener, "svc.>", queue_size=8)
    rec = Recorder()
    ls.add(rec)
    ls.emit("on_failed", failed(1))  # raised RuntimeError before
    assert ls.dropped == 1 and ls.stats()[0]["dropped"] == 1
    assert ls.drain(timeout=WAIT)  # nothing is left waiting for a thread that never came
    failing[0] = False
    ls.emit("on_failed", failed(2))
    assert ls.drain(timeout=WAIT)
    assert rec.events == [failed(2)]
    assert ls.close(timeout=WAIT)


class HoldsFirstCall(SubscriberListener):
    """Notes each call (topic, and whether another call of it was in progress); the first one
    waits until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []
        self.busy = 0
        self.lock = threading.Lock()
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_failed(self, event: Failed) -> None:
        with self.lock:
            self.busy += 1
            self.calls.append((event.topic, self.busy > 1))
        try:
            if not self.entered.is_set():
                self.entered.set()
                assert self.release.wait(WAIT), "never released"
        finally:
            with self.lock:
                self.busy -= 1


@pytest.mark.parametrize("cycles", [1, 2])
def test_a_listener_removed_and_added_again_gets_its_events_in_order_on_one_thread_at_a_time(
    cycles: int,
) -> None:
    # R5 F2's pattern in the listener queues (issue 14, round 4): a removed listener still
    # gets what its queue holds, on its old thread. Added again at once, it got a new queue
    # and thread that called it meanwhile: two calls of one listener at the same time, and
    # its newer events before its older ones. (Two cycles: a worker that never ran must still
    # make its successor wait for the one before it.)
    listeners: ListenerSet[SubscriberListener] = ListenerSet(
        SubscriberListener, "svc.>", queue_size=100
    )
    holder = HoldsFirstCall()
    listeners.add(holder)
    for i in range(3):
        listeners.emit("on_failed", failed(i))
    assert holder.entered.wait(WAIT), "the first call never came"
    for _ in range(cycles):
        listeners.remove(holder)  # svc.1 and svc.2 are still queued for the old thread
        listeners.add(holder)
    listeners.emit("on_failed", failed(3))
    time.sleep(0.05)  # a new thread that does not wait calls the listener meanwhile
    holder.release.set()
    assert listeners.drain(WAIT)
    assert holder.calls == [(f"svc.{i}", False) for i in range(4)], holder.calls
    assert listeners.close(WAIT)
