"""The dispatcher thread and the queue overflow policies, through Python."""

from __future__ import annotations

import threading

import pytest

import heartwire as hw
from tests.conftest import Rig


def test_dispatcher_delivers_batches_and_survives_a_raising_handler(rig: Rig) -> None:
    seen: list[str] = []
    errors: list[BaseException] = []

    def handler(batch: list[hw.core.Event]) -> None:
        seen.extend(e.topic for e in batch)
        if any(e.topic == "boom" for e in batch):
            raise RuntimeError("listener bug")

    disp = hw.core.Dispatcher(rig.events, handler, on_error=lambda exc, batch: errors.append(exc))
    with disp:
        rig.det.add("boom")
        rig.clock.advance(1.001)
        assert disp.drain(timeout=5.0), "dispatcher did not deliver within 5 s"
        rig.det.add("after")
        rig.clock.advance(1.001)
        assert disp.drain(timeout=5.0)
    assert "after" in seen
    assert disp.errors >= 1
    assert [str(e) for e in errors][:1] == ["listener bug"]
    assert disp.handled == len(seen)
    disp.stop()  # idempotent


def test_dispatcher_rejects_bad_arguments(rig: Rig) -> None:
    with pytest.raises(TypeError, match="callable"):
        hw.core.Dispatcher(rig.events, "not a function")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_size"):
        hw.core.Dispatcher(rig.events, print, batch_size=0)


@pytest.mark.parametrize(
    ("overflow", "kept", "counter"),
    [
        ("drop-newest", 4, "dropped_newest"),
        ("drop-oldest", 4, "dropped_oldest"),
        ("coalesce", 4, "coalesced"),
    ],
)
def test_overflow_policies_count_every_loss(
    rig: Rig, overflow: str, kept: int, counter: str
) -> None:
    small = rig.det.subscribe(capacity=4, overflow=overflow)
    rig.det.add_many([f"t{i}" for i in range(4)])
    rig.clock.advance(3.001)  # 4 topics x 3 failed events = 12
    stats = small.stats()
    popped = []
    while batch := small.try_pop():
        popped.extend(batch)
    if overflow == "coalesce":
        assert stats[counter] > 0
        # One event per topic survives beyond the ring, each topic's newest, in order per topic.
        for topic in {e.topic for e in popped}:
            counts = [e.missed for e in popped if e.topic == topic]
            assert counts == sorted(counts) and counts[-1] == 3
        assert stats["pushed"] == len(popped) + stats["coalesced"]
    else:
        assert stats[counter] == 12 - kept
        assert len(popped) == kept
    assert len(rig.take()) == 12, "the roomy queue lost nothing"


def test_pop_waits_with_the_gil_released(rig: Rig) -> None:
    got: list[hw.core.Event] = []
    waiter = threading.Thread(target=lambda: got.extend(rig.events.pop(timeout=10.0)))
    waiter.start()
    # While the waiter blocks in Rust, this thread keeps running Python and produces the event.
    rig.det.add("svc.a")
    rig.clock.advance(1.001)
    waiter.join(timeout=10.0)
    assert not waiter.is_alive()
    assert [e.kind for e in got] == ["failed"]


def test_pop_times_out_empty(rig: Rig) -> None:
    assert rig.events.pop(timeout=0.05) == []
    rig.events.close()
    assert rig.events.pop() == []


def test_stop_ends_the_thread_even_while_events_keep_coming() -> None:
    det = hw.core.Detector(period=0.005, tick=0.001)
    queue = det.subscribe()
    det.add_many([f"t{i}" for i in range(50)])  # ~10k failed events a second
    got: list[int] = []
    dispatcher = hw.core.Dispatcher(queue, lambda batch: got.append(len(batch))).start()
    try:
        assert queue.pop(timeout=5.0) or got, "no events within 5 s"
        dispatcher.stop(timeout=5.0)
        assert not dispatcher.alive, "stop() did not end the thread within 5 s"
    finally:
        det.stop()


class WindowQueue:
    """A stand-in for the core's queue that holds open the moment the core has: a pop takes
    its events out of ``len`` first and counts them in ``popped`` only after."""

    def __init__(self, events: list[str]) -> None:
        self.events = list(events)
        self.pushed = len(events)
        self.popped = 0
        self.closed = False
        self.taking = threading.Event()  # set while a pop holds events in neither count
        self.finish = threading.Event()  # lets that pop finish

    def pop(self, max: int = 1024, timeout: float | None = None) -> list[str]:
        batch, self.events = self.events[:max], self.events[max:]
        if not batch:
            self.finish.wait(timeout)
            return []
        self.taking.set()
        self.finish.wait(10.0)
        self.popped += len(batch)
        return batch

    def try_pop(self, max: int = 1024) -> list[str]:
        return self.pop(max, 0)

    def stats(self) -> dict[str, int]:
        return {
            "pushed": self.pushed,
            "popped": self.popped,
            "len": len(self.events),
            "dropped_oldest": 0,
            "coalesced": 0,
        }


def test_drain_waits_for_events_being_taken_out() -> None:
    queue = WindowQueue([f"e{i}" for i in range(10)])
    seen: list[str] = []
    disp = hw.core.Dispatcher(queue, seen.extend, batch_size=16)  # type: ignore[arg-type]
    with disp:
        assert queue.taking.wait(10.0)
        # All ten are in neither `len` nor `popped`: not drained.
        assert queue.stats()["len"] + queue.stats()["popped"] == 0
        assert not disp.drain(timeout=0.2)
        queue.finish.set()
        assert disp.drain(timeout=10.0)
        assert seen == [f"e{i}" for i in range(10)]


def test_drain_never_returns_before_the_handler_saw_every_event() -> None:
    # The same window on the real queue: many rounds of produce-then-drain while the dispatch
    # thread is taking batches out.
    n_topics, rounds = 3000, 300
    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock, period=1.0)
    queue = det.subscribe(capacity=1 << 20)
    det.add_many([f"t{i}" for i in range(n_topics)])  # never heard: a failed event each period
    clock.advance(0.001)  # deadlines at whole seconds are due just after them
    seen = [0]

    def count(batch: list[hw.core.Event]) -> None:
        seen[0] += len(batch)

    early: list[tuple[int, int]] = []
    with hw.core.Dispatcher(queue, count, batch_size=300) as disp:
        for n in range(1, rounds + 1):
            clock.advance(1.0)  # n_topics events, the dispatch thread taking them meanwhile
            assert disp.drain(timeout=10.0)
            if seen[0] != n * n_topics:
                early.append((n, seen[0]))
    assert early == [], f"drain returned before the handler saw everything: {early[:5]}"
    assert queue.stats()["pushed"] == seen[0] == n_topics * rounds


def test_columnar_dispatcher_hands_core_batches(rig: Rig) -> None:
    batches: list[hw._core.EventBatch] = []
    disp = hw.core.Dispatcher(rig.events, batches.append, columnar=True)
    with disp:
        rig.det.add_many([f"t{i}" for i in range(3000)])
        rig.clock.advance(1.001)
        assert disp.drain(timeout=5.0), "dispatcher did not deliver within 5 s"
    assert all(isinstance(b, hw._core.EventBatch) for b in batches)
    topics = [t for b in batches for t in b.topic_list()]
    assert sorted(topics) == sorted(f"t{i}" for i in range(3000))
    assert disp.handled == 3000
    with pytest.raises(TypeError, match="batch_size must be an int"):
        hw.core.Dispatcher(rig.events, print, batch_size=1.5)  # type: ignore[arg-type]
