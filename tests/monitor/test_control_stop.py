"""Third review of issue 17: the control receiver and stop(). stop() waits for the unsilences
taken in before it (their alerts come before on_stopped), and a receiver closed by stop()
applies and starts nothing more; a worker that cannot start leaves nothing queued behind."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import pytest

import heartwire as hw
import heartwire.control as control_module
from heartwire.beat import BeatCodec
from heartwire.control import (
    CONTROL_TOPIC,
    ControlError,
    ControlMessage,
    ControlReceiver,
    send_silence,
    send_unsilence,
)
from heartwire.transport import Message

KEY = "control-key"


class Holding(hw.SubscriberListener):
    """Holds the dispatch thread in its first failure until released (the feed full behind)."""

    lossless = True

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_failed(self, event: hw.Failed) -> None:
        self.events.append(("failed", event.topic, event.at, event.silenced))
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(10.0)

    def on_stopped(self, event: hw.Stopped) -> None:
        self.events.append(("stopped",))


def _until(predicate: Any, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_stop_applies_the_unsilences_accepted_before_it_and_delivers_their_alerts(
    closing: list[Any],
) -> None:
    """(Review 17c finding 1.) An unsilence accepted while running but queued behind one
    waiting for room is applied before the detector stops: its alert comes before
    on_stopped."""
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    held = Holding()
    mon = hw.HeartbeatMonitor(
        broker,
        "svc.>",
        clock=clock,
        period=1.0,
        grace=0.0,
        key=KEY,
        listeners=[held],
        listener_queue=None,
        capacity=1,
    )
    closing.append(mon)
    mon.expect("svc.db.main")
    mon.expect("svc.api")
    mon.start()
    s1 = send_silence(broker, "svc.db.>", duration="30m", key=KEY)
    s2 = send_silence(broker, "svc.api", duration="30m", key=KEY)
    clock.advance(1.5)  # both fail silenced: the listener holds one, the feed is full behind
    assert held.entered.wait(5.0), "the listener got no failure"
    send_unsilence(broker, s1.id, key=KEY)  # the worker waits for room to push its alert
    send_unsilence(broker, s2.id, key=KEY)  # queued behind it
    stopper = threading.Thread(target=mon.stop, kwargs={"timeout": 5.0})
    stopper.start()
    # stop() has cancelled the control subscription and waits for the worker (the detector
    # still runs); before the fix it stopped the detector at once.
    _until(lambda: mon._control is not None and mon._control._closed, "stop() to begin")
    time.sleep(0.05)  # (would let a stop() that does not wait stop the detector)
    assert mon._det.running, "stop() stopped the detector with unsilences still queued"
    held.release.set()
    stopper.join(10.0)
    assert not stopper.is_alive(), "stop() did not return"
    assert mon._control is not None and mon._control.wait(0.0)  # nothing left after stop()
    assert mon.stats()["control"] == {"silence": 2, "unsilence": 2}
    stopped = held.events.index(("stopped",))
    released = [e for e in held.events[:stopped] if e[0] == "failed" and not e[3]]
    assert {e[1] for e in released} == {"svc.db.main", "svc.api"}, (
        f"the alert of an unsilence accepted before stop() is missing: {held.events}"
    )


def _receiver(
    silence: Any = None, unsilence: Any = None
) -> tuple[ControlReceiver, list[ControlError]]:
    reports: list[ControlError] = []
    made: list[str] = []

    def make(pattern: str, until: dt.datetime, reason: str) -> int:
        made.append(pattern)
        return len(made)

    receiver = ControlReceiver(
        BeatCodec(KEY),
        CONTROL_TOPIC,
        silence or make,
        unsilence or (lambda sid: True),
        reports.append,
        lambda: 60.0,
    )
    return receiver, reports


def _message(msg: ControlMessage) -> Message:
    return Message(CONTROL_TOPIC, msg.encode(KEY))


def test_a_closed_receiver_applies_nothing_and_a_handler_in_flight_is_waited_for() -> None:
    """(Review 17c, suspected 6.) stop() closes the receiver: a message whose handler runs
    on after the subscription was cancelled is neither applied nor counted; close() then
    wait() waits for a handler already past the check (the silence it applies, the
    unsilence it hands over)."""
    entered, release = threading.Event(), threading.Event()

    def slow(pattern: str, until: dt.datetime, reason: str) -> int:
        entered.set()
        release.wait(10.0)
        return 1

    receiver, reports = _receiver(silence=slow)
    first = ControlMessage.silence("svc.a", duration=60, id="s1")
    handler = threading.Thread(target=receiver.handle, args=(_message(first),))
    handler.start()
    assert entered.wait(5.0)
    receiver.close()
    assert not receiver.wait(0.05), "wait() did not wait for the handler in flight"
    release.set()
    assert receiver.wait(5.0)
    handler.join(5.0)
    assert receiver.stats()["accepted"] == {"silence": 1}
    # Closed: a later message (a handler that ran on after the cancel) does nothing at all.
    receiver.handle(_message(ControlMessage.unsilence("s1")))
    receiver.handle(_message(ControlMessage.silence("svc.b", duration=60, id="s2")))
    assert receiver.stats() == {"accepted": {"silence": 1}, "refused": {}}
    assert receiver._worker is None and reports == []
    # Opened again (a restart), it takes messages as before.
    receiver.open()
    receiver.handle(_message(ControlMessage.unsilence("s1")))
    assert receiver.wait(5.0)
    assert receiver.stats()["accepted"] == {"silence": 1, "unsilence": 1}


def test_a_worker_that_cannot_start_leaves_its_unsilence_unqueued(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(Review 17c, suspected 7.) The unsilence whose worker could not start is counted as
    failed, once: it is not left queued for the next worker to apply and count again."""
    lifted: list[int] = []

    def unsilence(sid: int) -> bool:
        lifted.append(sid)
        return True

    receiver, reports = _receiver(unsilence=unsilence)
    for sid in ("s1", "s2"):
        receiver.handle(_message(ControlMessage.silence("svc.a", duration=60, id=sid)))

    class NoStart(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(control_module.threading, "Thread", NoStart)
    receiver.handle(_message(ControlMessage.unsilence("s1")))
    assert receiver.wait(1.0)
    assert [e.reason for e in reports] == ["failed"]
    monkeypatch.undo()
    receiver.handle(_message(ControlMessage.unsilence("s2")))
    assert receiver.wait(5.0)
    assert lifted == [2], f"the unsilence that failed was applied later too: {lifted}"
    assert receiver.stats() == {
        "accepted": {"silence": 2, "unsilence": 1},
        "refused": {"failed": 1},
    }
    # The silence whose unsilence failed is still known: a new unsilence lifts it.
    receiver.handle(_message(ControlMessage.unsilence("s1")))
    assert receiver.wait(5.0)
    assert lifted == [2, 1]


class StoppingInside(hw.SubscriberListener):
    """On the dispatch thread, its first failure waits for ``go`` then stops the monitor."""

    lossless = True  # a "block" feed: the worker waits for room

    def __init__(self) -> None:
        self.mon: hw.HeartbeatMonitor | None = None
        self.entered = threading.Event()
        self.go = threading.Event()
        self.took: float | None = None

    def on_failed(self, event: hw.Failed) -> None:
        if self.entered.is_set():
            return
        self.entered.set()
        self.go.wait(10.0)
        assert self.mon is not None
        began = time.monotonic()
        self.mon.stop(timeout=5.0)
        self.took = time.monotonic() - began


def test_a_stop_on_the_dispatch_thread_does_not_wait_out_its_timeout_for_the_worker(
    closing: list[Any],
) -> None:
    """The control worker waiting for room in the queue that only the dispatch thread
    empties: a stop() there waits for it only once the detector's stop closed the queues
    (its push refused and counted), not for the whole timeout."""
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    inside = StoppingInside()
    mon = hw.HeartbeatMonitor(
        broker,
        "svc.>",
        clock=clock,
        period=1.0,
        grace=0.0,
        key=KEY,
        listeners=[inside],
        listener_queue=None,
        capacity=1,
    )
    inside.mon = mon
    closing.append(mon)
    mon.expect("svc.db.main")
    mon.expect("svc.api")
    mon.start()
    s1 = send_silence(broker, "svc.db.>", duration="30m", key=KEY)
    send_silence(broker, "svc.api", duration="30m", key=KEY)
    clock.advance(1.5)
    assert inside.entered.wait(5.0), "the listener got no failure"
    send_unsilence(broker, s1.id, key=KEY)  # the worker waits for room in the full feed
    assert mon._control is not None
    assert not mon._control.wait(0.05), "the worker did not wait for room"
    inside.go.set()
    _until(lambda: inside.took is not None, "the stop() on the dispatch thread", 10.0)
    assert inside.took is not None and inside.took < 2.0, f"stop() took {inside.took:.1f} s"
    assert mon._control.wait(0.0) and not mon._det.running
    assert mon.stats()["control"] == {"silence": 2, "unsilence": 1}
