"""R5 F4: stop() waits, with the feed open and its dispatcher running, until the events emitted
before the detector stopped are pushed; they are not refused by a feed closed too early."""

from __future__ import annotations

import threading
import time

import heartwire as hw
from heartwire.events import Failed, Resumed

BOUND = 5.0


def _until(cond: object, what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


class _Holding(hw.SubscriberListener):
    lossless = True

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_failed(self, event: Failed) -> None:
        self.seen.append(("failed", event.topic, event.missed))
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(BOUND)

    def on_resumed(self, event: Resumed) -> None:
        self.seen.append(("resumed", event.topic, event.missed))


def test_a_resumed_waiting_for_room_in_the_monitors_own_feed_is_delivered_at_stop() -> None:
    clock = hw.ManualClock()
    listener = _Holding()
    mon = hw.HeartbeatMonitor(
        None, "svc.>", clock=clock, listeners=[listener], listener_queue=None, capacity=1
    )
    mon.expect("svc.a")
    mon.expect("svc.x")
    mon.start()
    feed = mon._feed.current
    assert feed is not None
    clock.advance(1.5)  # failed(a,1) held by the listener, failed(x,1) fills the feed
    assert listener.entered.wait(BOUND), "the listener got no failure"
    beater = threading.Thread(target=mon.beat, args=("svc.x",))
    beater.start()  # resumed(x) waits for room in the feed
    _until(lambda: mon.detector.stats()["resumed"] >= 1, "the resumed to be emitted")
    stopper = threading.Thread(target=mon.stop)
    stopper.start()
    # stop() must not close the feed while the resumed, emitted before it, is not pushed.
    assert not feed.queue.closed
    _until(lambda: not mon.detector.running, "the detector to stop")
    time.sleep(0.05)  # give a wrong stop() the chance to close the feed early
    closed_early = feed.queue.closed
    listener.release.set()
    stopper.join(BOUND)
    beater.join(BOUND)
    assert not stopper.is_alive() and not beater.is_alive(), "stop() or the beat hung"
    assert not closed_early, "stop() closed the feed before the resumed was pushed"
    assert listener.seen == [
        ("failed", "svc.a", 1),
        ("failed", "svc.x", 1),
        ("resumed", "svc.x", 1),
    ]
    assert mon.stats()["dropped"] == 0
    assert feed.queue.stats()["rejected_closed"] == 0


def test_an_event_waiting_behind_another_block_queue_is_delivered_at_stop() -> None:
    clock = hw.ManualClock()
    listener = _Holding()
    listener.entered.set()  # never holds
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[listener], capacity=100)
    mon.expect("svc.a")
    mon.expect("svc.x")
    mon.start()
    clock.advance(1.5)  # failed(a,1), failed(x,1)
    other = mon.detector.subscribe(capacity=1, overflow="block")  # a slow EventLog's queue
    driver = threading.Thread(target=clock.advance, args=(1.1,))
    driver.start()  # failed(a,2) fits `other`, failed(x,2) waits for room in it
    _until(lambda: other.stats()["pushed"] >= 1, "the first push into the other queue")
    mark = mon.detector.outbox_mark()
    assert not mon.detector.wait_pushed(mark, 0.05), "failed(x,2) should wait for room"
    stopper = threading.Thread(target=mon.stop)
    stopper.start()
    _until(lambda: not mon.detector.running, "the detector to stop")
    time.sleep(0.05)  # give a wrong stop() the chance to close the feed early
    while driver.is_alive():
        other.try_pop()
        driver.join(0.01)
    stopper.join(BOUND)
    assert not stopper.is_alive(), "stop() hung"
    assert ("failed", "svc.x", 2) in listener.seen, listener.seen
    assert mon.stats()["dropped"] == 0
    mon.detector.unsubscribe(other)
