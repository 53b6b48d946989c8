"""A flush is complete for whoever waits for it only once its callbacks have run: ``on_error``
of every refused message it covers, then its own ``on_flushed``.

The callbacks run on the thread that completed them (a STOMP connection's receiving thread),
so a flush waited for on another thread must not return between the bookkeeping and the
callbacks. (Under CPU load, the RabbitMQ test of a refused message saw ``flush()`` return True
with ``on_error`` not called yet.) Here the embedded broker's store refuses or stores on a
worker thread whose callback the test holds, so each order is forced, not hoped for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import heartwire as hw
from heartwire.transport.memory import MemoryBroker
from heartwire.transport.memory_store import store_of


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker()


def refusing(broker: MemoryBroker) -> None:
    """Make the store refuse every send, as a broker refuses a destination (ValueError)."""

    def refuse(
        destination: str, body: bytes, headers: Any, on_stored: Callable[[], None] | None = None
    ) -> None:
        raise ValueError(f"destination {destination!r} refused by the test")

    store_of(broker).send = refuse  # type: ignore[method-assign]


class Held:
    """A callback that records its argument and returns only once released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.got: list[Any] = []

    def __call__(self, arg: Any) -> None:
        self.entered.set()
        assert self.release.wait(10), "the test never released the callback"
        self.got.append(arg)


@pytest.fixture
def workers() -> Iterator[list[threading.Thread]]:
    threads: list[threading.Thread] = []
    yield threads
    for t in threads:
        t.join(10)
        assert not t.is_alive(), f"{t.name} did not finish"


def run(workers: list[threading.Thread], fn: Callable[[], Any]) -> None:
    t = threading.Thread(target=fn, name="worker", daemon=True)
    workers.append(t)
    t.start()


def test_a_flush_covering_a_refused_message_waits_for_its_on_error(
    broker: MemoryBroker, workers: list[threading.Thread]
) -> None:
    refusing(broker)
    on_error = Held()
    acks: list[hw.FlushAck] = []
    sender = hw.ReliableSender(broker, "/queue/r", on_error=on_error, on_flushed=acks.append)
    sent: list[str] = []
    run(workers, lambda: sent.append(sender.send(b"x")))
    assert on_error.entered.wait(10), "the refusal never reached on_error"
    # The message is refused (no longer outstanding) but its on_error has not returned.
    assert sender.outstanding == 0 and sender.stats()["refused"] == 1
    rid = sender.request_flush()
    try:
        assert acks == [], f"flush {rid} acknowledged before on_error of the message it covers"
        assert not sender.wait_flushed(rid, 0.1), (
            f"flush {rid} complete while on_error of the message it covers was still running"
        )
    finally:
        on_error.release.set()
    assert sender.wait_flushed(rid, 10), f"flush {rid} never completed: {sender.stats()}"
    assert [e.message_id for e in on_error.got] == sent
    assert acks == [hw.FlushAck(rid, 1)]


def test_wait_flushed_returns_after_on_flushed(
    broker: MemoryBroker, workers: list[threading.Thread]
) -> None:
    on_flushed = Held()
    sender = hw.ReliableSender(broker, "/queue/f", on_flushed=on_flushed)
    sender.send(b"x")  # held at once (the embedded store's receipt is immediate)
    rids: list[int] = []
    run(workers, lambda: rids.append(sender.request_flush()))  # completes on the worker
    assert on_flushed.entered.wait(10), "on_flushed never ran"
    try:
        assert not sender.wait_flushed(1, 0.1), "wait_flushed returned before on_flushed did"
        assert sender.stats()["flushes_acked"] == 0
        assert sender.stats()["flushes_requested"] == 1
    finally:
        on_flushed.release.set()
    assert sender.wait_flushed(1, 10) and rids == [1]
    assert on_flushed.got == [hw.FlushAck(1, 1)]
    assert sender.stats()["flushes_acked"] == 1


def test_a_flush_behind_a_slow_on_error_is_reported_after_it(
    broker: MemoryBroker, workers: list[threading.Thread]
) -> None:
    # The refused message is the first; the second is held. A flush of both completes only
    # once the refusal was reported, and its on_flushed comes after that on_error.
    order: list[str] = []
    held = Held()

    def on_error(error: hw.DeliveryRefused) -> None:
        held(error)
        order.append("error")

    sender = hw.ReliableSender(
        broker,
        "/queue/o",
        on_error=on_error,
        on_flushed=lambda a: order.append(f"flushed {a.request_id}/{a.count}"),
    )
    store = store_of(broker)
    real_send = store.send
    refusing(broker)
    run(workers, lambda: sender.send(b"refused"))
    assert held.entered.wait(10)
    store.send = real_send  # type: ignore[method-assign]
    sender.send(b"held")
    rid = sender.request_flush()
    assert order == [] and not sender.wait_flushed(rid, 0.05)
    held.release.set()
    assert sender.wait_flushed(rid, 10)
    assert order == ["error", "flushed 1/2"]


def test_waiting_inside_on_error_for_a_flush_it_holds_raises_at_once(
    broker: MemoryBroker,
) -> None:
    # On the embedded broker on_error runs on the sending thread: a flush covering the message
    # being reported could only complete after on_error returned, so waiting there would block
    # for the whole timeout.
    refusing(broker)
    seen: list[tuple[type[BaseException] | None, str, float]] = []
    sender: hw.ReliableSender

    def on_error(error: hw.DeliveryRefused) -> None:
        began = time.monotonic()
        try:
            sender.flush(5)
        except RuntimeError as exc:
            seen.append((RuntimeError, str(exc), time.monotonic() - began))
        else:
            seen.append((None, "", time.monotonic() - began))

    sender = hw.ReliableSender(broker, "/queue/w", on_error=on_error)
    sender.send(b"x")
    assert len(seen) == 1 and seen[0][0] is RuntimeError, seen
    assert "on_error" in seen[0][1] and "request_flush" in seen[0][1], seen[0][1]
    assert seen[0][2] < 1.0, f"it waited {seen[0][2]:.2f} s first"
    assert sender.wait_flushed(1, 0), "the flush asked for in on_error completed after it"
    assert sender.stats()["callback_errors"] == 0


def test_on_flushed_may_flush_again_but_not_wait_for_itself(broker: MemoryBroker) -> None:
    results: list[Any] = []
    sender: hw.ReliableSender

    def on_flushed(ack: hw.FlushAck) -> None:
        if ack.request_id != 1:
            return
        results.append(sender.flush(5))  # a new flush: nothing outstanding, done at once
        began = time.monotonic()
        with pytest.raises(RuntimeError, match="on_flushed"):
            sender.wait_flushed(1, 5)  # its own: done only once this returns
        results.append(time.monotonic() - began)

    sender = hw.ReliableSender(broker, "/queue/n", on_flushed=on_flushed)
    sender.send(b"x")
    assert sender.flush(5)
    assert results[0] is True and results[1] < 1.0, results
    assert sender.wait_flushed(2, 0) and sender.stats()["callback_errors"] == 0
