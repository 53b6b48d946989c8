"""Helpers shared by the reliable-delivery tests against real brokers: fast connection options,
a ``closing`` fixture that ends what a test opened, an :class:`Inbox` consumer callback, and the
steps several tests repeat (send a copy of a handled message, then check what the broker still
holds). Every wait is bounded and names what it waited for."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest

import heartwire as hw
from tests import brokers as B
from tests.brokers import wait_for

FAST = "heartbeat=1&reconnect_interval=0.2&connect_timeout=2&keepalive_interval=0"
BOTH = ["activemq", "rabbitmq"]


def uid() -> str:
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    """A list the test appends what it opened to; ended in reverse order afterwards."""
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        with contextlib.suppress(Exception):
            if isinstance(thing, hw.Consumer):
                thing.stop(forget=thing.durable_name is not None)
            elif isinstance(thing, (hw.HeartbeatMonitor, hw.HeartbeatPublisher)):
                thing.stop()
            else:
                thing.close()


_T = TypeVar("_T")


def _kept(closing: list[Any], thing: _T) -> _T:
    """``thing``, added to ``closing`` (ended after the test)."""
    closing.append(thing)
    return thing


def open_broker(name: str, closing: list[Any], **options: Any) -> Any:
    B.ensure(name)
    return _kept(closing, hw.connect(B.url(name) + "?" + FAST, **options))


def open_sender(
    closing: list[Any], transport: Any, destination: str, **options: Any
) -> hw.ReliableSender:
    """A reliable sender to ``destination`` on ``transport``; closed after the test."""
    return _kept(closing, hw.ReliableSender(transport, destination, **options))


def start_consumer(
    closing: list[Any], transport: Any, destination: str, **options: Any
) -> hw.Consumer:
    """A consumer of ``destination`` on ``transport``, started; stopped after the test."""
    consumer = _kept(closing, hw.Consumer(transport, destination, **options))
    consumer.start()
    return consumer


class Inbox:
    """Messages a consumer got, thread-safe."""

    def __init__(self, ack: bool = True) -> None:
        self.lock = threading.Lock()
        self.messages: list[hw.ReceivedMessage] = []
        self.ack = ack

    def __call__(self, msg: hw.ReceivedMessage) -> None:
        with self.lock:
            self.messages.append(msg)
        if self.ack:
            msg.ack()

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [m.body for m in self.messages]


def send_copy(
    transport: Any, consumer: hw.Consumer, destination: str, body: bytes, mid: str, dropped: int
) -> None:
    """Send a copy of message ``mid`` straight on the transport's link and wait until the
    consumer has counted ``dropped`` duplicates."""
    link = transport.current_link
    assert link is not None
    link.send(destination, body, {"hw-message-id": mid, "persistent": "true"})
    wait_for(
        lambda: consumer.stats()["duplicates"] == dropped,
        10,
        f"the copy of {body!r} to be dropped ({dropped} duplicates)",
    )


def consume_again(name: str, closing: list[Any], destination: str) -> Inbox:
    """A new consumer without deduplication on a new connection: what the broker still holds
    for ``destination`` (and what comes later) lands in the returned inbox."""
    rest = Inbox()
    start_consumer(closing, open_broker(name, closing), destination, on_message=rest, dedup=False)
    return rest


def assert_nothing_left(
    name: str, closing: list[Any], destination: str, sender: hw.ReliableSender, why: str
) -> None:
    """A new consumer gets only a marker sent now: nothing was left unacknowledged."""
    rest = consume_again(name, closing, destination)
    sender.send(b"marker")
    wait_for(lambda: b"marker" in rest.bodies(), 10, "the marker")
    assert rest.bodies() == [b"marker"], why
