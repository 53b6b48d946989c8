"""Feed switches (a listener starting or stopping to want ``received``) under every overflow
policy, with the real clock, and the order of the last events at ``stop()``.

Issue 14 item 3: with ``overflow="block"`` the new feed's dispatch thread started only after the
old feed was unsubscribed; a driver that filled the new queue first blocked holding the
detector's locks, the unsubscribe waited for them forever, and ``stop()`` hung too.
"""

from __future__ import annotations

import threading
import time

import pytest

import heartwire as hw
from heartwire.events import Failed, Received, Resumed, Stopped
from heartwire.listeners import ListenerSet
from heartwire.monitor import Overflow

TOPICS = [f"svc.t{i}" for i in range(200)]


class Wants(hw.SubscriberListener):
    def on_received(self, event: Received) -> None:
        pass


class Lossless(hw.SubscriberListener):
    lossless = True  # its feed blocks rather than coalescing or dropping

    def on_failed(self, event: Failed) -> None:
        pass


class Order(hw.SubscriberListener):
    """Every event's kind and topic, in the order the listener got them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, int, float]] = []

    def on_failed(self, event: Failed) -> None:
        with self.lock:
            self.seen.append(("failed", event.topic, event.missed, event.at))

    def on_resumed(self, event: Resumed) -> None:
        with self.lock:
            self.seen.append(("resumed", event.topic, event.missed, event.at))

    def on_stopped(self, event: Stopped) -> None:
        with self.lock:
            self.seen.append(("stopped", "", 0, 0.0))


def _unstick(mon: hw.HeartbeatMonitor) -> None:
    """Close every feed queue (releases a driver blocked on one), so a failed test can end."""
    feed = mon._feed.current
    while feed is not None:
        feed.queue.close()
        feed = feed.prev


def _in_thread(target: object, seconds: float, what: str, mon: hw.HeartbeatMonitor) -> None:
    thread = threading.Thread(target=target, daemon=True)  # type: ignore[arg-type]
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        _unstick(mon)
        thread.join(5.0)
        pytest.fail(f"{what} still running after {seconds} s: deadlocked")


@pytest.mark.parametrize(
    ("overflow", "switcher"),
    [("block", Wants), ("coalesce", Wants), ("drop-oldest", Wants), ("coalesce", Lossless)],
)
def test_feed_switches_under_load_do_not_deadlock(
    overflow: Overflow, switcher: type[hw.SubscriberListener]
) -> None:
    # Tiny queues, 200 topics failing every 5 ms and beats from another thread: the driver
    # fills a new queue at once.
    mon = hw.HeartbeatMonitor(
        None, "svc.>", period=0.005, grace=0, overflow=overflow, capacity=4, tick=0.001
    )
    order = Order()
    mon.add_listener(order)
    for topic in TOPICS:
        mon.expect(topic)
    mon.start()
    done = threading.Event()

    def beats() -> None:
        while not done.is_set():
            mon.beat_many(TOPICS[::2])
            time.sleep(0.0005)

    beater = threading.Thread(target=beats, daemon=True)
    beater.start()

    def switches() -> None:
        for _ in range(60):
            listener = switcher()
            mon.add_listener(listener)  # a new feed: with received events, or blocking
            time.sleep(0.002)
            mon.remove_listener(listener)  # and back
            time.sleep(0.002)

    try:
        _in_thread(switches, 15.0, "60 feed switches", mon)
    finally:
        done.set()
        beater.join(5.0)
    _in_thread(lambda: mon.stop(timeout=5.0), 10.0, "stop()", mon)
    assert not mon.running
    assert order.seen[-1] == ("stopped", "", 0, 0.0)
    # No event delivered twice across the switches (the skip of what both feeds got).
    delivered = order.seen[:-1]
    assert len(delivered) == len(set(delivered))


# -- stop() whose dispatch does not finish in time --------------------------------------------


def _join_threads(prefix: str, seconds: float) -> list[threading.Thread]:
    """Wait for the threads whose name starts with ``prefix``; those still alive after."""
    deadline = time.monotonic() + seconds
    for thread in threading.enumerate():
        if thread.name.startswith(prefix):
            thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


class StopOrder(Order):
    pass


@pytest.mark.parametrize("listener_queue", [10_000, None])
def test_nothing_reaches_a_listener_after_on_stopped(listener_queue: int | None) -> None:
    clock = hw.ManualClock()
    order = StopOrder()
    mon = hw.HeartbeatMonitor(
        None, "svc.>", clock=clock, listeners=[order], listener_queue=listener_queue
    )
    mon.detector.add_many([f"svc.{i}" for i in range(30_000)])
    mon.start()
    clock.advance(1.5)  # 30 000 failures in the dispatch queue
    mon.stop(timeout=0.0)  # the dispatch thread cannot finish in time
    assert _join_threads("heartwire-monitor", 20.0) == [], "dispatch thread still running"
    # Events the dispatch thread still held are not delivered after on_stopped (they are
    # counted), and no listener thread is started again for them.
    assert _join_threads("heartwire-listener[StopOrder]", 20.0) == [], (
        "a listener thread never ended"
    )
    with order.lock:
        seen = list(order.seen)
    assert seen[-1] == ("stopped", "", 0, 0.0), seen[-3:]
    stats = mon.stats()
    assert len(seen) - 1 + stats["dropped"] + stats["listener_late"] == 30_000, stats
    # Events emitted after stop (a late bad beat) reach nobody and start no thread.
    mon.handle_message(hw.transport.Message("svc.1", b"not a beat"))
    assert _join_threads("heartwire-listener[StopOrder]", 1.0) == []
    assert order.seen[-1] == ("stopped", "", 0, 0.0)
    # A restart delivers again.
    mon.start()
    clock.advance(1.5)
    assert mon.drain(10.0)
    mon.stop()
    assert order.seen[-1] == ("stopped", "", 0, 0.0)
    assert any(e[0] == "failed" for e in order.seen[len(seen) :])


def test_a_removed_listener_thread_is_not_started_again() -> None:
    ls: ListenerSet[hw.SubscriberListener] = ListenerSet(
        hw.SubscriberListener, "svc.>", queue_size=10
    )
    order = StopOrder()
    ls.add(order)
    ls.emit("on_failed", Failed("svc.a", 1, 0.0, 1.0))
    entry = ls._entries[0]
    assert ls.remove(order)
    # An emit that took the entries before the removal puts into the removed queue.
    assert entry.worker is not None
    entry.worker.put("on_failed", Failed("svc.a", 2, 0.0, 2.0), True)
    assert _join_threads("heartwire-listener[StopOrder]", 5.0) == []
    assert order.seen == [("failed", "svc.a", 1, 1.0)]


class StopsDuringCall(Order):
    """Listener called on the dispatch thread (``listener_queue=None``) whose first
    ``on_failed`` has ``mon.stop(timeout=0)`` run on another thread while it is still inside
    the call: the call in flight when ``on_stopped`` is emitted."""

    def __init__(self) -> None:
        super().__init__()
        self.mon: hw.HeartbeatMonitor | None = None
        self.stopper: threading.Thread | None = None
        self.stopping = threading.Event()

    def on_failed(self, event: Failed) -> None:
        if self.stopper is None and self.mon is not None:
            self.stopper = threading.Thread(
                target=self.mon.stop, kwargs={"timeout": 0.0}, daemon=True
            )
            self.stopper.start()
            self.stopping.set()
            self.stopper.join(0.5)  # stop() must not emit on_stopped while this call is on
        super().on_failed(event)


def test_on_stopped_comes_after_an_unqueued_call_in_flight() -> None:
    # Issue 14 follow-up: with listeners called on the dispatch thread, stop() emitted
    # on_stopped on its own thread while an on_failed call was still running, so on_failed
    # reached the listener after on_stopped (seen on the merged main under load).
    clock = hw.ManualClock()
    order = StopsDuringCall()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[order], listener_queue=None)
    order.mon = mon
    mon.detector.add_many([f"svc.{i}" for i in range(100)])
    mon.start()
    clock.advance(1.5)
    assert order.stopping.wait(5.0), "no on_failed delivered"
    assert order.stopper is not None
    order.stopper.join(5.0)
    assert not order.stopper.is_alive(), "stop() never returned"
    assert _join_threads("heartwire-monitor", 5.0) == [], "dispatch thread still running"
    with order.lock:
        seen = list(order.seen)
    assert seen[-1] == ("stopped", "", 0, 0.0), seen[-3:]
    assert seen.count(("stopped", "", 0, 0.0)) == 1
    stats = mon.stats()
    assert len(seen) - 1 + stats["dropped"] + stats["listener_late"] == 100, stats


def test_stop_returns_while_another_thread_is_beating_under_block() -> None:
    # Issue 14 follow-up (R1 F2): stop() ended the dispatch thread, then unsubscribed. A
    # beat_many racing stop() pushed its received events into the full "block" queue after the
    # thread had ended, holding the detector's locks, and unsubscribe waited for it forever.
    for attempt in range(8):
        mon = hw.HeartbeatMonitor(
            None, "svc.>", period=0.005, grace=0, overflow="block", capacity=4, tick=0.001
        )
        mon.add_listener(Wants())
        for topic in TOPICS:
            mon.expect(topic)
        mon.start()
        done = threading.Event()
        beating = threading.Event()

        def beats(
            mon: hw.HeartbeatMonitor = mon,
            done: threading.Event = done,
            beating: threading.Event = beating,
        ) -> None:
            while not done.is_set():
                mon.beat_many(TOPICS)
                beating.set()

        beater = threading.Thread(target=beats, daemon=True)
        beater.start()
        try:
            # 200 received events through a queue of 4 take hundreds of hand-offs: on a loaded
            # machine the first batch took over 5 s
            assert beating.wait(30.0), "the beater never recorded a batch"
            _in_thread(lambda m=mon: m.stop(timeout=2.0), 10.0, f"stop() (attempt {attempt})", mon)
        finally:
            done.set()
            if mon.running:  # a failed attempt: leave no dispatch thread to the next tests
                _unstick(mon)
                mon.stop(timeout=5.0)
            beater.join(5.0)
        assert not mon.running
        assert not beater.is_alive(), "beat_many still blocked after stop()"


# -- listeners called on the dispatch thread that call the monitor, under "block" -------------


class CallsTheMonitor(hw.SubscriberListener):
    """Called on the dispatch thread (``listener_queue=None``); each ``on_failed`` calls
    ``action(mon, event)``."""

    def __init__(self, action: str) -> None:
        self.action = action
        self.mon: hw.HeartbeatMonitor | None = None
        self.calls = 0

    def on_failed(self, event: Failed) -> None:
        assert self.mon is not None
        self.calls += 1
        if self.action == "add_listener" and self.calls == 1:
            self.mon.add_listener(Wants())  # a feed switch, on the dispatch thread
        elif self.action == "pause":
            self.mon.pause(event.topic)
        elif self.action == "expect" and self.calls == 1:
            self.mon.expect("svc.new", period=2.0)


@pytest.mark.parametrize("action", ["add_listener", "pause", "expect"])
def test_a_listener_on_the_dispatch_thread_may_call_the_monitor_under_block(action: str) -> None:
    # R1 F1: 200 topics fail together into a "block" queue of 4; the listener, on the queue's
    # only consumer thread, calls the monitor, which needs the detector's locks. (Fixed in the
    # core, a40b48a: the driver waits for room in a block queue holding none of them.)
    clock = hw.ManualClock()
    listener = CallsTheMonitor(action)
    mon = hw.HeartbeatMonitor(
        None,
        "svc.>",
        clock=clock,
        overflow="block",
        capacity=4,
        listener_queue=None,
        listeners=[listener],
    )
    listener.mon = mon
    for topic in TOPICS:
        mon.expect(topic)
    mon.start()
    try:
        _in_thread(lambda: clock.advance(1.5), 5.0, f"clock.advance with {action}", mon)
        assert mon.drain(10.0)
        assert listener.calls == len(TOPICS)
        if action == "pause":
            assert mon.counts()["PAUSED"] == len(TOPICS)
    finally:
        _in_thread(lambda: mon.stop(timeout=2.0), 10.0, "stop()", mon)


class ExpectsOnResumed(hw.SubscriberListener):
    """Called on the dispatch thread; each ``on_resumed`` calls ``mon.expect(topic)`` (which
    takes the monitor's lock but needs none of the detector's)."""

    def __init__(self) -> None:
        self.mon: hw.HeartbeatMonitor | None = None
        self.resumed = 0

    def on_resumed(self, event: Resumed) -> None:
        assert self.mon is not None
        self.mon.expect(event.topic)
        self.resumed += 1


@pytest.mark.parametrize("how", ["whole", "each", "restart"])
def test_resume_does_not_hold_the_monitor_lock_while_its_events_wait_for_room(how: str) -> None:
    # Issue 14 item 3 pattern, monitor side: resume() held the monitor's lock while the
    # detector pushed its `resumed` events into a full "block" queue; the queue's only
    # consumer (a listener on the dispatch thread) needed that lock: neither could go on. (The
    # core's fix does not help: the push waits for room whatever locks the core lets go of.)
    clock = hw.ManualClock()
    listener = ExpectsOnResumed()
    mon = hw.HeartbeatMonitor(
        None,
        "svc.>",
        clock=clock,
        overflow="block",
        capacity=4,
        listener_queue=None,
        listeners=[listener],
    )
    listener.mon = mon
    topics = TOPICS[:50]
    for topic in topics:
        mon.expect(topic)
    mon.start()
    clock.advance(1.5)  # every topic FAILED
    assert mon.drain(5.0)
    if how == "whole":
        mon.pause()
    else:
        for topic in topics:
            mon.pause(topic)
    mon.beat_many(topics)  # heard while paused: each resume emits `resumed`
    if how == "restart":  # resumed while stopped: start() resumes them
        mon.stop()
        for topic in topics:
            mon.resume(topic)

    def action() -> None:
        if how == "whole":
            mon.resume()
        elif how == "each":
            for topic in topics:
                mon.resume(topic)
        else:
            mon.start()

    try:
        _in_thread(action, 5.0, f"resume ({how})", mon)
        assert mon.drain(5.0)
        assert listener.resumed == len(topics)
        assert mon.counts()["ALIVE"] == len(topics)
    finally:
        _in_thread(lambda: mon.stop(timeout=2.0), 10.0, "stop()", mon)


# -- an event pushed late, after the feed switch that should have covered it ------------------


@pytest.mark.parametrize("switches", [1, 2])
def test_a_switch_while_an_event_waits_for_room_elsewhere_delivers_it_once(switches: int) -> None:
    # Issue 14 follow-up (item 2 of round 3): since a40b48a the core pushes each event to the
    # queues subscribed when it is pushed, newest first, and a push that finds a "block" queue
    # full lets go of the subscriber list while it waits. An event that reached the old feed
    # and then waited for room in another queue went, once woken, to the new feed too, after
    # the switch had closed the window of events both feeds got: delivered twice. R5 F1
    # (round 4, /tmp/review-R5/core_dup.py): with two switches during the wait it reaches only
    # a feed subscribed after the one it was delivered by was unsubscribed.
    clock = hw.ManualClock()
    order = Order()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[order])
    topics = TOPICS[:20]
    for topic in topics:
        mon.expect(topic)
    # Another consumer's "block" queue, oldest subscriber: each event reaches the monitor's
    # feed first, then waits here for room.
    other = mon.detector.subscribe(capacity=1, overflow="block")
    mon.start()
    advancing = threading.Thread(target=clock.advance, args=(1.5,), daemon=True)
    advancing.start()
    try:
        # The first event fills `other`; the second reached the feed and waits for room.
        deadline = time.monotonic() + 5.0
        while len(order.seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(order.seen) == 2, f"expected 2 events delivered, got {order.seen}"
        assert advancing.is_alive(), "the driver did not wait for room in the other queue"
        wants = Wants()
        mon.add_listener(wants)  # a feed switch while the second event waits
        if switches == 2:
            mon.remove_listener(wants)  # and another: the first new feed gets nothing
    finally:
        mon.detector.unsubscribe(other)  # releases the waiting push
        advancing.join(5.0)
    assert not advancing.is_alive(), "clock.advance still blocked"
    assert mon.drain(5.0)
    mon.stop()
    delivered = order.seen[:-1]
    assert len(delivered) == len(set(delivered)), [e for e in delivered if delivered.count(e) > 1]
    assert sorted(e[1] for e in delivered) == sorted(topics)


class CallsWhileStopping(hw.SubscriberListener):
    """Called on the dispatch thread; the first ``on_failed`` waits until ``stop()`` (on
    another thread) has begun, then calls ``mon.expect`` (which takes the monitor's lock), or,
    with ``action="stop"``, calls ``mon.stop()`` itself at once."""

    def __init__(self, action: str) -> None:
        self.action = action
        self.mon: hw.HeartbeatMonitor | None = None
        self.entered = threading.Event()
        self.done = threading.Event()

    def on_failed(self, event: Failed) -> None:
        mon = self.mon
        assert mon is not None
        if self.entered.is_set():
            return
        self.entered.set()
        if self.action == "stop":
            mon.stop(timeout=0.5)
        else:
            deadline = time.monotonic() + 5.0
            while mon.running and time.monotonic() < deadline:
                time.sleep(0.001)
            mon.expect("svc.new")
        self.done.set()


@pytest.mark.parametrize("action", ["expect", "stop"])
def test_stop_does_not_hold_the_monitor_lock_while_the_driver_waits_for_room(action: str) -> None:
    # Issue 14 item 3 pattern (round 3): stop() called the detector's stop() under the
    # monitor's lock. That stop takes in the beats in flight (a `resumed` may be pushed) and
    # joins the real-clock driver, which may be waiting for room in a full "block" queue whose
    # only consumer is a listener on the dispatch thread: one that needs the monitor's lock
    # ("expect"), or that is the caller itself ("stop": the queue must be closed first).
    listener = CallsWhileStopping(action)
    mon = hw.HeartbeatMonitor(
        None,
        "svc.>",
        period=0.005,
        grace=0,
        overflow="block",
        capacity=4,
        tick=0.001,
        listener_queue=None,
        listeners=[listener],
    )
    listener.mon = mon
    for topic in TOPICS:
        mon.expect(topic)
    mon.start()
    try:
        assert listener.entered.wait(5.0), "no on_failed delivered"
        if action == "expect":
            _in_thread(lambda: mon.stop(timeout=2.0), 5.0, "stop()", mon)
        assert listener.done.wait(5.0), "the listener's call never returned: deadlocked"
    finally:
        _in_thread(lambda: mon.stop(timeout=2.0), 10.0, "stop() (cleanup)", mon)
    assert not mon.running
    assert not mon.detector.running
    assert _join_threads("heartwire-monitor", 5.0) == [], "dispatch thread still running"


class Beats(hw.SubscriberListener):
    """Every ``received`` event's topic, time and seq, in the order the listener got them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, float, int | None]] = []

    def on_received(self, event: Received) -> None:
        with self.lock:
            self.seen.append((event.topic, event.at, event.seq))


def test_received_events_are_delivered_once_across_a_switch() -> None:
    # Issue 14 follow-up (round 3): a switch between two feeds that both carry `received`
    # (a lossless listener added while another listener wants beats) delivered the beats both
    # feeds got twice (1 702 of 45 102 in 50 switches under load). Played in order here: the
    # second beat reached the old feed, then waits for room in another consumer's queue while
    # the switch is made.
    clock = hw.ManualClock()
    beats = Beats()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[beats])
    topics = TOPICS[:20]
    for topic in topics:
        mon.expect(topic)
    other = mon.detector.subscribe(capacity=1, overflow="block", received=True)
    mon.start()
    beating = threading.Thread(target=mon.beat_many, args=(topics,), daemon=True)
    beating.start()
    try:
        deadline = time.monotonic() + 5.0
        while len(beats.seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(beats.seen) == 2, f"expected 2 beats delivered, got {beats.seen}"
        assert beating.is_alive(), "the beat did not wait for room in the other queue"
        mon.add_listener(Lossless())  # a new feed, with `received` too, while it waits
    finally:
        mon.detector.unsubscribe(other)
        beating.join(5.0)
    assert not beating.is_alive(), "beat_many still blocked"
    assert mon.drain(5.0)
    mon.stop()
    assert sorted(t for t, _, _ in beats.seen) == sorted(topics), beats.seen


class HoldsFirst(Order):
    """Order, whose first ``on_failed`` waits (on the dispatch thread) until released."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_failed(self, event: Failed) -> None:
        super().on_failed(event)
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(5.0), "never released"


def test_a_chain_of_switches_keeps_a_topics_events_in_order() -> None:
    # R5 F2 (issue 14, round 4): a new feed joined only the dispatch thread of the feed it
    # replaced, and that one joined its own predecessor only from its first delivery. After
    # A -> B -> C with B given no event, C joined B (over at once) and delivered while A's
    # thread was still delivering: a topic's newer events came before (or, dropped as stale,
    # instead of) its older ones.
    clock = hw.ManualClock()
    order = HoldsFirst()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[order], listener_queue=None)
    topics = TOPICS[:10]
    for topic in topics:
        mon.expect(topic)
    mon.start()
    try:
        clock.advance(1.5)  # failed(t, 1) for every topic, all into feed A
        assert order.entered.wait(5.0), "feed A delivered nothing"
        wants = Wants()
        mon.add_listener(wants)  # A -> B
        mon.remove_listener(wants)  # B -> C: B got no event
        clock.advance(1.0)  # failed(t, 2) for every topic, into feed C only
        deadline = time.monotonic() + 1.0
        while len(order.seen) < 11 and time.monotonic() < deadline:
            time.sleep(0.005)  # a feed C that does not wait for A delivers meanwhile
    finally:
        order.release.set()
    assert mon.drain(5.0)
    mon.stop()
    got = [(topic, missed) for kind, topic, missed, _ in order.seen if kind == "failed"]
    assert sorted(got) == sorted((t, m) for t in topics for m in (1, 2)), got
    for topic in topics:
        mine = [m for t, m in got if t == topic]
        assert mine == [1, 2], f"{topic}: failed events in the order {mine}"
    assert mon.stats()["dropped"] == 0


def test_an_event_the_old_feed_coalesced_away_is_not_delivered_late_by_the_new_one() -> None:
    # R5 F3 (issue 14, round 4): a coalesce feed replaced by a lossless one. Both got a topic's
    # failed(2) and failed(3) while the switch was under way; the old feed, full, kept only the
    # newer (coalesced, counted) and delivered it; the new one holds both. Its thread must not
    # then deliver failed(2) after failed(3). Real core events, through the monitor's handler
    # in the order the two dispatch threads run it (the new one waits for the old one).
    from heartwire.feed import _Feed

    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock, period=1.0, max_local_pause=None)
    det.add("svc.a")
    old = det.subscribe(capacity=1, overflow="coalesce")
    new = det.subscribe(capacity=100, overflow="block")
    for now in (1.5, 2.5, 3.5):
        clock.set(now)  # failed(svc.a, 1), (2), (3)
    old_batch = old.try_pop_batch()
    assert old_batch.missed.tolist() == [1, 3] and old.stats()["coalesced"] == 1
    new_batch = new.try_pop_batch().slice(1, 3)  # subscribed after failed(1) was pushed
    assert new_batch.missed.tolist() == [2, 3]
    order = Order()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[order], listener_queue=None)
    old_feed = _Feed(old, False, "coalesce", None, mon._feed._newest.open_feed())
    new_feed = _Feed(new, False, "block", old_feed, mon._feed._newest.open_feed())
    mon._feed._deliver(old_feed, old_batch)
    mon._feed._deliver(new_feed, new_batch)
    assert [(t, m) for _, t, m, _ in order.seen] == [("svc.a", 1), ("svc.a", 3)]
