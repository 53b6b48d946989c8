"""Alerts a FAILED parent's pause or removal releases (its suppressed children's ``failed``)
under a ``"block"`` event queue, on a manual clock (second review of issue 17, finding 1).

The detector puts them aside (pause/remove never wait for room in a queue: their callers hold
locks); the monitor pushes them once its locks are let go, so that drain() and stop() deliver
them, and a restart never hands out a stale one after ``on_started``. Each failed before its
fix: drain() returned at once without the alert, stop() waited its whole timeout and lost it,
and the next start() + advance delivered it after ``on_started``."""

from __future__ import annotations

import time
from typing import Any

import pytest

import heartwire as hw
from heartwire.core import Detector, ManualClock
from heartwire.events import Failed
from tests.monitor.test_monitor_semantics import Recorder, make_rig, ms


class Order(Recorder):
    """What the listener got, in order: failures (with their mark) and the lifecycle."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[tuple[Any, ...]] = []

    def on_failed(self, event: Failed) -> None:
        super().on_failed(event)
        self.order.append(("failed", event.topic, ms(event.at), event.suppressed_by))

    def on_started(self, event: Any) -> None:
        self.order.append(("started",))

    def on_stopped(self, event: Any) -> None:
        self.order.append(("stopped",))


RELEASED = ("failed", "svc.api", 10500, None)


def _parent_down_child_suppressed(r: Any, rec: Order) -> None:
    r.mon.depends("svc.api", on="svc.db")
    r.mon.expect("svc.db")
    r.mon.expect("svc.api")
    r.mon.start()
    r.advance(10.5)
    assert ("failed", "svc.api", 10000, "svc.db") in rec.order, rec.order
    rec.order.clear()


def _release(r: Any, how: str) -> None:
    if how == "pause":
        assert r.mon.pause("svc.db") is True
    else:
        assert r.mon.remove("svc.db") is True


@pytest.mark.parametrize("how", ["pause", "remove"])
def test_drain_delivers_the_alert_a_pause_or_removal_released(how: str) -> None:
    rec = Order()
    for r in make_rig(recorder=rec, period=10.0, overflow="block"):
        _parent_down_child_suppressed(r, rec)
        _release(r, how)
        # No clock move: nothing else would push it.
        t0 = time.monotonic()
        assert r.mon.drain(2.0)
        took = time.monotonic() - t0
        assert rec.order == [RELEASED], rec.order
        assert took < 1.0, took
        assert r.mon.stats()["released"] == 1


@pytest.mark.parametrize("how", ["pause", "remove"])
def test_stop_delivers_it_before_on_stopped_at_once_and_a_restart_hands_out_nothing_stale(
    how: str,
) -> None:
    rec = Order()
    for r in make_rig(recorder=rec, period=10.0, overflow="block"):
        _parent_down_child_suppressed(r, rec)
        _release(r, how)
        t0 = time.monotonic()
        r.mon.stop(timeout=2.0)
        took = time.monotonic() - t0
        assert rec.order == [RELEASED, ("stopped",)], rec.order
        assert took < 1.0, took
        assert r.mon.stats()["dropped"] == 0
        rec.order.clear()
        r.mon.start()
        r.clock.advance(0.1)
        assert r.mon.drain(2.0)
        assert rec.order == [("started",)], rec.order


def test_a_listener_on_the_dispatch_thread_pausing_the_parent_does_not_wait_for_itself() -> None:
    """The dispatch thread consumes the ``block`` queue: it must not wait for room in it. The
    released alert goes out at the driver's next run (here the next clock move)."""

    class Pauser(Order):
        mon: Any = None

        def on_failed(self, event: Failed) -> None:
            super().on_failed(event)
            if event.topic == "svc.db" and event.missed == 1:
                self.mon.pause("svc.db")

    rec = Pauser()
    for r in make_rig(recorder=rec, period=10.0, overflow="block", listener_queue=None):
        rec.mon = r.mon
        r.mon.depends("svc.api", on="svc.db")
        r.mon.expect("svc.db")
        r.mon.expect("svc.api")
        r.mon.start()
        r.clock.advance(10.5)
        deadline = time.monotonic() + 5.0
        while r.mon.status("svc.db").state is not hw.State.PAUSED:
            assert time.monotonic() < deadline, "the listener never paused svc.db"
            time.sleep(0.01)
        # Put aside for the detector's next run, not waited for on the dispatch thread.
        r.clock.advance(0.1)
        assert r.mon.drain(2.0)
        failed = [e for e in rec.order if e[0] == "failed"]
        assert sorted(failed, key=str) == sorted(
            [("failed", "svc.db", 10000, None), ("failed", "svc.api", 10000, "svc.db"), RELEASED],
            key=str,
        ), rec.order


def test_a_pause_with_no_block_queue_still_delivers_at_once() -> None:
    rec = Order()
    for r in make_rig(recorder=rec, period=10.0):
        _parent_down_child_suppressed(r, rec)
        assert r.mon.pause("svc.db") is True
        assert r.mon.drain(2.0)
        assert rec.order == [RELEASED], rec.order


def test_the_detectors_push_unpushed_pushes_what_pause_put_aside() -> None:
    clock = ManualClock()
    det = Detector(clock=clock, period=10.0, resolution=0.001)
    q = det.subscribe(capacity=16, overflow="block")
    det.depends("svc.api", on="svc.db")
    det.add("svc.db")
    det.add("svc.api")
    clock.set(10.5)
    assert len(q.try_pop(16)) == 2
    assert det.pause("svc.db") is True
    assert q.try_pop(16) == []  # put aside: pause never waits for room
    det.push_unpushed()
    got = q.try_pop(16)
    assert [(e.kind, e.at) for e in got] == [("failed", 10.5)], got


def test_a_parent_paused_while_stopped_releases_its_child_at_start_and_drain_gets_it() -> None:
    """start() pauses (under the monitor's lock) what was paused while stopped: a parent held
    FAILED then releases its child, pushed once start() lets go of the lock."""
    rec = Order()
    for r in make_rig(recorder=rec, period=10.0, overflow="block"):
        _parent_down_child_suppressed(r, rec)
        r.mon.stop(timeout=2.0)
        assert r.mon.pause("svc.db") is True  # stopped: taken at start()
        r.clock.set(12.0)
        rec.order.clear()
        r.mon.start()
        assert r.mon.drain(2.0)
        assert rec.order == [("started",), ("failed", "svc.api", 12000, None)], rec.order
