"""Detector events to listeners in batches: ``on_events(batch)``, its columns, and the
per-event methods built on it (issue 15)."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import heartwire as hw
from heartwire._core import EventBatch as CoreBatch
from heartwire.events import EventBatch, Failed, LocalPause, Received, Resumed
from heartwire.listeners import ListenerSet, SubscriberListener

WAIT = 10.0


class PerEvent(SubscriberListener):
    """Every detector event, through the per-event methods."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    def on_failed(self, event: Failed) -> None:
        self.seen.append(event)

    def on_resumed(self, event: Resumed) -> None:
        self.seen.append(event)

    def on_received(self, event: Received) -> None:
        self.seen.append(event)

    def on_local_pause(self, event: LocalPause) -> None:
        self.seen.append(event)


class Batches(SubscriberListener):
    """Every batch, and the events iterated from it."""

    wants_received = True

    def __init__(self) -> None:
        self.batches: list[EventBatch] = []
        self.seen: list[object] = []
        self.thread: str | None = None

    def on_events(self, batch: EventBatch) -> None:
        self.thread = threading.current_thread().name
        self.batches.append(batch)
        self.seen.extend(batch)


class Both(Batches):
    """Overrides on_events and on_failed: only on_events is called for detector events."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_calls = 0

    def on_failed(self, event: Failed) -> None:
        self.failed_calls += 1


class NoReceived(SubscriberListener):
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def on_events(self, batch: EventBatch) -> None:
        self.kinds.extend(EventBatch.KINDS[k] for k in batch.kinds.tolist())


def _scenario(mon: hw.HeartbeatMonitor, clock: hw.ManualClock) -> None:
    """failed, resumed, received and local_pause events for a few topics."""
    for topic in ("svc.a", "svc.b", "svc.c"):
        mon.expect(topic)
    mon.start()
    clock.advance(1.5)  # failed(a, b, c)
    mon.beat("svc.a")  # resumed(a), received(a)
    clock.advance(1.0)  # failed(b, c, 2)
    mon.beat("svc.b")
    mon.detector.beat("svc.c", seq=7, now=clock.now())
    clock.advance(10.0, stalled=True)  # the monitor stalls 10 s (max_local_pause 5 s)
    clock.advance(0.0)  # a local pause
    clock.advance(2.0)
    assert mon.drain(WAIT)


def _fields(event: object) -> tuple[Any, ...]:
    return (type(event).__name__, *(getattr(event, f) for f in vars(event) if f != "wall_offset"))


@pytest.mark.parametrize("listener_queue", [10_000, None])
def test_batch_events_are_the_per_event_path_s_events_in_the_same_order(
    listener_queue: int | None,
) -> None:
    clock = hw.ManualClock()
    per, batched, both = PerEvent(), Batches(), Both()
    mon = hw.HeartbeatMonitor(
        None,
        "svc.>",
        clock=clock,
        listeners=[per, batched, both],
        listener_queue=listener_queue,
        max_local_pause=5.0,
    )
    _scenario(mon, clock)
    mon.stop()
    kinds = {type(e).__name__ for e in per.seen}
    assert kinds == {"Failed", "Resumed", "Received", "LocalPause"}, kinds
    assert [_fields(e) for e in batched.seen] == [_fields(e) for e in per.seen]
    assert [_fields(e) for e in both.seen] == [_fields(e) for e in per.seen]
    assert both.failed_calls == 0, "on_failed called beside on_events"
    if listener_queue is None:
        assert batched.thread is not None and batched.thread.startswith("heartwire-monitor")
    else:
        assert batched.thread is not None and batched.thread.startswith("heartwire-listener")
    # Wall offsets carried through.
    assert all(e.wall_offset == mon.wall_offset for e in batched.seen)  # type: ignore[attr-defined]


def test_columns_match_the_events() -> None:
    clock = hw.ManualClock()
    batched = Batches()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[batched], max_local_pause=5.0)
    _scenario(mon, clock)
    mon.stop()
    assert batched.batches
    for batch in batched.batches:
        events = list(batch)
        n = len(batch)
        assert len(events) == n
        kinds = [EventBatch.KINDS[k] for k in batch.kinds.tolist()]
        names = {
            Failed: "failed",
            Resumed: "resumed",
            Received: "received",
            LocalPause: "local_pause",
        }
        assert kinds == [names[type(e)] for e in events]
        topics = batch.topic_list()
        assert topics == [getattr(e, "topic", "") for e in events]
        assert pa.array(batch.topics).to_pylist() == topics
        at = np.asarray(batch.at)
        assert at.dtype == np.float64 and at.tolist() == [e.at for e in events]
        since, downtime = batch.since.tolist(), batch.downtime.tolist()
        duration, seq = batch.duration.tolist(), batch.seq.tolist()
        missed = batch.missed.tolist()
        handles = batch.handles.tolist()
        for i, e in enumerate(events):
            if isinstance(e, Failed):
                assert (since[i], missed[i]) == (e.since, e.missed)
                assert handles[i] == mon.detector.handle(e.topic)
            else:
                assert math.isnan(since[i])
            if isinstance(e, Resumed):
                assert (downtime[i], missed[i]) == (e.downtime, e.missed)
            else:
                assert math.isnan(downtime[i])
            if isinstance(e, LocalPause):
                assert duration[i] == e.duration and handles[i] == -1
            else:
                assert math.isnan(duration[i])
            if isinstance(e, Received):
                assert seq[i] == (EventBatch.NO_SEQ if e.seq is None else e.seq)
            else:
                assert seq[i] == EventBatch.NO_SEQ
        for kind in EventBatch.KINDS:
            assert batch.count(kind) == kinds.count(kind)
    with pytest.raises(ValueError, match='"lagged"'):
        batched.batches[0].count("lagged")
    with pytest.raises(IndexError, match="out of range"):
        batched.batches[0][len(batched.batches[0])]


def test_received_only_for_listeners_that_ask() -> None:
    clock = hw.ManualClock()
    plain = NoReceived()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[plain])
    mon.expect("svc.a")
    mon.start()
    assert (
        mon._feed.current is not None and not mon._feed.current.received
    )  # nobody asked: not produced
    mon.beat("svc.a")
    asks = Batches()
    mon.add_listener(asks)
    assert mon._feed.current.received
    mon.beat("svc.a")
    clock.advance(1.5)
    assert mon.drain(WAIT)
    mon.stop()
    assert "received" not in plain.kinds and "failed" in plain.kinds
    assert [type(e).__name__ for e in asks.seen] == ["Received", "Failed"]


def test_core_batch_slicing_and_selection() -> None:
    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock, period=1.0, max_local_pause=None)
    det.add_many([f"t{i}" for i in range(5)], now=0.0)
    queue = det.subscribe(capacity=100, overflow="block", received=True)
    clock.advance(1.5)
    det.beat("t3", now=1.6)
    batch = queue.try_pop_batch()
    assert isinstance(batch, CoreBatch)
    assert [e.kind for e in batch] == ["failed"] * 5 + ["resumed", "received"]
    assert batch.of_kinds(["failed", "resumed", "received"]) is batch
    assert [e.topic for e in batch.of_kinds(["resumed"])] == ["t3"]
    part = batch.slice(2, 4)
    assert part.topic_list() == ["t2", "t3"] and pa.array(part.topics).to_pylist() == ["t2", "t3"]
    assert len(batch.slice(6, 100)) == 1 and len(batch.slice(9, 3)) == 0
    with pytest.raises(ValueError, match="kinds must be among"):
        batch.of_kinds(["nope"])


def test_the_received_event_of_a_beat_back_in_time_survives_a_feed_switch() -> None:
    # Review finding: after a feed switch, a `received` whose `at` was below the topic's last
    # one was dropped as a duplicate (the dedupe compared times, as for failed/resumed).
    class Lossless(SubscriberListener):
        lossless = True

    clock = hw.ManualClock()
    per = PerEvent()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[per])
    mon.start()
    listener = Lossless()
    mon.add_listener(listener)
    mon.remove_listener(listener)
    mon.detector.add("svc.a")
    mon.detector.beat("svc.a", now=10.0)
    mon.detector.beat("svc.a", now=5.0)
    mon.detector.beat("svc.a", now=5.0, seq=3)
    assert mon.drain(WAIT)
    mon.stop()
    got = [(e.at, e.seq) for e in per.seen if isinstance(e, Received)]
    assert got == [(10.0, None), (5.0, None), (5.0, 3)]


@pytest.mark.parametrize("batch_listener", [True, False])
def test_a_lossless_listener_loses_nothing_under_a_mass_failure(batch_listener: bool) -> None:
    class Log(SubscriberListener):
        lossless = True

        def __init__(self) -> None:
            self.failed = 0

    class BatchLog(Log):
        def on_events(self, batch: EventBatch) -> None:
            self.failed += batch.count("failed")

    class EventLog(Log):
        def on_failed(self, event: Failed) -> None:
            self.failed += 1

    n = 200_000
    clock = hw.ManualClock()
    log = BatchLog() if batch_listener else EventLog()
    # A small event queue and listener queue: both overflow many times over.
    mon = hw.HeartbeatMonitor(
        None, "svc.>", clock=clock, listeners=[log], capacity=1024, listener_queue=1000
    )
    mon.start()
    mon.detector.add_many([f"svc.t{i}" for i in range(n)], now=0.0)
    clock.advance(1.5)
    assert mon.drain(60.0)
    stats = mon.stats()
    mon.stop()
    assert log.failed == n
    assert stats["dropped"] == 0 and stats["listener_dropped"] == 0


def test_listener_queue_trims_batches_at_event_granularity() -> None:
    gate = threading.Event()

    class Slow(SubscriberListener):
        def __init__(self) -> None:
            self.got: list[str] = []

        def on_events(self, batch: EventBatch) -> None:
            gate.wait(WAIT)
            self.got.extend(batch.topic_list())

    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock, period=1.0, max_local_pause=None)
    det.add_many([f"t{i}" for i in range(10)], now=0.0)
    queue = det.subscribe(capacity=100, overflow="block")
    clock.advance(1.5)
    batch = EventBatch(queue.try_pop_batch())
    slow = Slow()
    for overflow, kept in [
        ("drop-oldest", ["t0", "t1", "t2", "t6", "t7", "t8", "t9"]),
        ("drop-newest", ["t0", "t1", "t2", "t3", "t4", "t5", "t6"]),
    ]:
        gate.clear()
        slow.got.clear()
        ls: ListenerSet[SubscriberListener] = ListenerSet(
            SubscriberListener,
            "test",
            queue_size=4,
            overflow=overflow,  # type: ignore[arg-type]
        )
        ls.add(slow)
        ls.emit_batch(batch.slice(0, 3))  # taken by the thread (waits at the gate)
        deadline = threading.Event()
        for _ in range(100):
            if ls.queue_depth == 0:
                break
            deadline.wait(0.01)
        ls.emit_batch(batch.slice(3, 6))  # 3 queued
        ls.emit_batch(batch.slice(6, 10))  # 4 more: one too many
        assert ls.queue_depth == 4 and ls.dropped == 3, (overflow, ls.queue_depth, ls.dropped)
        gate.set()
        assert ls.drain(WAIT)
        assert ls.close(WAIT)
        assert slow.got == kept, overflow


def test_a_replaced_feed_s_overflow_losses_stay_counted() -> None:
    # Found on the way: once the feed that replaced a coalescing one delivered its first batch,
    # it let go of the old feed, and stats()["dropped"] forgot what the old one had coalesced
    # away: events lost without a count.
    gate = threading.Event()

    class Hold(SubscriberListener):
        def __init__(self) -> None:
            self.failed = 0

        def on_failed(self, event: Failed) -> None:
            gate.wait(WAIT)  # holds the dispatch thread (listener_queue=None)
            self.failed += 1

    class Lossless(SubscriberListener):
        lossless = True

    clock = hw.ManualClock()
    hold = Hold()
    mon = hw.HeartbeatMonitor(
        None, "svc.>", clock=clock, listeners=[hold], capacity=4, listener_queue=None, grace=0.0
    )
    for i in range(20):
        mon.expect(f"svc.t{i}")
    mon.start()
    try:
        clock.advance(1.5)  # failed(1) x 20: the dispatch thread takes some and is held
        clock.advance(1.0)  # failed(2) x 20: 4 in the ring, the rest parked
        clock.advance(1.0)  # failed(3) x 20: parked ones replaced (coalesced)
        coalesced = mon.stats()["dropped"]
        assert coalesced > 0
        mon.add_listener(Lossless())  # a new feed ("block"); the old one is replaced
    finally:
        gate.set()
    clock.advance(1.0)  # failed(4) x 20, to the new feed only: its thread lets go of the old
    assert mon.drain(WAIT)
    stats = mon.stats()
    mon.stop()
    assert stats["failed"] == 80
    assert stats["dropped"] == coalesced
    assert hold.failed + stats["dropped"] == 80


def test_an_on_events_that_raises_is_counted_and_reported_and_delivery_goes_on() -> None:
    from heartwire.events import ExceptionEvent

    class Boom(SubscriberListener):
        def __init__(self) -> None:
            self.calls = 0

        def on_events(self, batch: EventBatch) -> None:
            self.calls += 1
            raise RuntimeError("bulk bug")

    class Watch(PerEvent):
        def __init__(self) -> None:
            super().__init__()
            self.errors: list[ExceptionEvent] = []

        def on_exception(self, event: ExceptionEvent) -> None:
            self.errors.append(event)

    clock = hw.ManualClock()
    boom, watch = Boom(), Watch()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, listeners=[boom, watch])
    mon.expect("svc.a")
    mon.start()
    clock.advance(1.5)
    assert mon.drain(WAIT)
    clock.advance(1.0)
    assert mon.drain(WAIT)
    stats = mon.stats()
    mon.stop()
    assert boom.calls == 2 and stats["listener_errors"] == 2
    assert [e.reason for e in watch.errors] == ["listener_error"] * 2
    assert "Boom.on_events" in watch.errors[0].detail
    assert [e.missed for e in watch.seen if isinstance(e, Failed)] == [1, 2]


def test_topics_column_is_an_arrow_array_of_the_core() -> None:
    """``batch.topics`` is heartwire's own ``ArrowArray`` (the PyCapsule interface, no pyo3-arrow
    class behind it): its length, capsules that pyarrow imports (twice, each import its own), and a
    requested schema taken but not acted on."""
    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock, period=1.0)
    queue = det.subscribe(capacity=64)
    det.add_many(["t1", "t22", "t333"])
    clock.advance(1.5)
    batch = queue.try_pop_batch()
    assert len(batch) == 3, list(batch)
    topics = batch.topics
    assert type(topics).__name__ == "ArrowArray" and type(topics).__module__ == "heartwire._core"
    assert len(topics) == 3 and "len=3" in repr(topics)
    schema, array = topics.__arrow_c_array__()
    assert type(schema).__name__ == "PyCapsule" and type(array).__name__ == "PyCapsule"
    assert pa.array(topics).to_pylist() == ["t1", "t22", "t333"]
    assert pa.array(topics).to_pylist() == pa.array(topics).to_pylist()
    # A requested type is not acted on (the interface allows it), and pyarrow 26's fallback
    # cast for that case is broken (``array.cast`` on its own function): cast after importing.
    assert topics.__arrow_c_array__(pa.large_string().__arrow_c_schema__()) is not None
    assert pa.array(topics).cast(pa.large_string()).to_pylist() == ["t1", "t22", "t333"]
