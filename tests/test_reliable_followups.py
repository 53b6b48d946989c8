"""Reliable delivery: follow-ups of the review of issue 14's transport fixes (R2), against real
brokers.

- A. ``ack="client"``: a NACK settles only its own message on ActiveMQ (RabbitMQ's is
  cumulative); a later duplicate's cumulative ACK must not acknowledge an earlier message whose
  handler raised.

Every wait is bounded and names what it waited for.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import heartwire as hw
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)
from tests.test_reliable_races import BOTH, Inbox, open_broker, uid

pytestmark = pytest.mark.usefixtures("brokers")


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        with contextlib.suppress(Exception):
            if isinstance(thing, hw.Consumer):
                thing.stop(forget=thing.durable_name is not None)
            else:
                thing.close()


@pytest.mark.parametrize("name", BOTH)
def test_client_mode_nack_never_lets_a_duplicate_ack_an_unhandled_message(
    name: str, closing: list[Any]
) -> None:
    # m0 acked, m1's handler raises (never acked), m2 nacked once; then a copy of m0 arrives.
    # Its ACK (cumulative in client mode) may only go once nothing before it is unsettled: on
    # ActiveMQ the NACK of m2 does not settle m1, so m1 must come back to a later consumer.
    destination = f"/queue/{uid()}"
    consumer_t = open_broker(name, closing)
    lock = threading.Lock()
    seen: list[tuple[bytes, bool]] = []

    def handler(msg: hw.ReceivedMessage) -> None:
        with lock:
            first = all(body != msg.body for body, _ in seen)
            seen.append((msg.body, msg.redelivered))
        if msg.body == b"m0":
            msg.ack()
        elif msg.body == b"m1":
            raise RuntimeError("processing failed")  # left unacked: must not be lost
        elif msg.body == b"m2" and first:
            msg.nack()  # (later copies of m2 are left unacked)

    consumer = hw.Consumer(
        consumer_t, destination, ack="client", on_message=handler, on_error=lambda e, m: None
    )
    closing.append(consumer)
    consumer.start()
    sender = hw.ReliableSender(open_broker(name, closing), destination)
    closing.append(sender)
    m0 = sender.send(b"m0")
    sender.send(b"m1")
    sender.send(b"m2")
    assert sender.flush(10), f"flush: {sender.stats()}"
    wait_for(lambda: len(seen) >= 3, 10, "m0, m1 and m2 at the handler")
    link = consumer_t.current_link
    assert link is not None
    link.send(destination, b"m0", {"hw-message-id": m0, "persistent": "true"})  # m0's copy
    wait_for(lambda: consumer.stats()["duplicates"] == 1, 10, "m0's copy to be dropped")
    consumer.stop()
    consumer_t.close()  # whatever the connection still held unacked goes back to the queue
    rest = Inbox()
    again = hw.Consumer(open_broker(name, closing), destination, on_message=rest, dedup=False)
    closing.append(again)
    again.start()
    wait_for(
        lambda: b"m1" in rest.bodies(),
        10,
        f"m1 (its handler raised, never acked) back at a new consumer; handler saw {seen}, "
        f"the new consumer got {rest.bodies()}",
    )
