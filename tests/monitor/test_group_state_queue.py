"""A shard's state snapshots through its state queue on the real brokers (heartwire.groups
publish_snapshot, read_snapshot; StompTransport.send_to): the reader gets the newest valid
snapshot and the refusals, reading drains the queue, an expired snapshot is gone."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

import heartwire as hw
from heartwire.groups import (
    DEFAULT_SNAPSHOT_TTL,
    ShardLayout,
    ShardSnapshot,
    TopicRecord,
    declare_rabbitmq,
    publish_snapshot,
    read_snapshot,
    state_destination,
)
from heartwire.transport import Message
from heartwire.transport.dialect import ACTIVEMQ, RABBITMQ
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

KEY = b"group-key"
SHARD = 1


@pytest.fixture
def transport(request: pytest.FixtureRequest) -> Iterator[StompTransport]:
    t = hw.connect(B.url(request.param))
    assert isinstance(t, StompTransport)
    yield t
    t.close()


def _layout() -> ShardLayout:
    return ShardLayout(f"hwtest{uuid.uuid4().hex[:8]}", 2)


def _topic(layout: ShardLayout) -> str:
    return next(f"svc.{i}" for i in range(100) if layout.shard_of(f"svc.{i}") == SHARD)


def _snap(layout: ShardLayout, seq: int, sent: float, member: str = "m1") -> ShardSnapshot:
    record = TopicRecord(_topic(layout), failed_since=sent - 60, missed=seq)
    return ShardSnapshot(layout, SHARD, member, seq, sent, (record,))


def test_state_destination_per_broker() -> None:
    layout = ShardLayout("payments", 4)
    assert state_destination(layout, 3, RABBITMQ) == "/amq/queue/heartwire.payments.3.state"
    assert state_destination(layout, 3, "rabbitmq") == "/amq/queue/heartwire.payments.3.state"
    assert state_destination(layout, 3, ACTIVEMQ) == "/queue/heartwire.payments.3.state"
    assert state_destination(layout, 3, None) == "/queue/heartwire.payments.3.state"


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("transport", ["activemq", "rabbitmq"], indirect=True)
def test_the_reader_gets_the_newest_valid_snapshot_and_drains_the_queue(
    transport: StompTransport,
) -> None:
    layout = _layout()
    if transport.dialect == "rabbitmq":
        pytest.importorskip("pika")
        declare_rabbitmq(layout, "svc.>", expires=60)
    now = time.time()
    publish_snapshot(transport, _snap(layout, 9, now - 5, member="forger"), b"wrong key")
    publish_snapshot(transport, _snap(layout, 1, now - 2), KEY)
    publish_snapshot(transport, _snap(layout, 2, now - 1), KEY)
    best, refused = read_snapshot(transport, layout, SHARD, KEY)
    assert best == _snap(layout, 2, now - 1)
    if transport.dialect == "activemq":  # every snapshot was kept, the forged one refused
        assert [e.reason for e in refused] == ["bad_signature"]
    else:  # a last-value queue: only the newest was there
        assert refused == []
    assert read_snapshot(transport, layout, SHARD, KEY) == (None, [])


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("transport", ["activemq", "rabbitmq"], indirect=True)
def test_an_expired_snapshot_is_gone(transport: StompTransport) -> None:
    # ActiveMQ drops it by its ``expires`` header, RabbitMQ by its ``expiration`` (the message's
    # TTL, which the transport adds to an ``expires``).
    layout = _layout()
    if transport.dialect == "rabbitmq":
        pytest.importorskip("pika")
        declare_rabbitmq(layout, "svc.>", expires=60)
    publish_snapshot(transport, _snap(layout, 1, time.time()), KEY, ttl=0.2)
    time.sleep(0.5)
    assert read_snapshot(transport, layout, SHARD, KEY) == (None, [])


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("transport", ["activemq", "rabbitmq"], indirect=True)
def test_a_snapshot_expires_by_default(transport: StompTransport) -> None:
    # Review 18, suspected 7: with no ttl a snapshot never expired, and ActiveMQ's state queue
    # keeps every one until a takeover drains it (published every period: without bound).
    # Failed before: no expiry header.
    layout = _layout()
    if transport.dialect == "rabbitmq":
        pytest.importorskip("pika")
        declare_rabbitmq(layout, "svc.>", expires=60)
    got: list[Message] = []
    came = threading.Event()

    def take(_link: object, message: Message) -> None:
        got.append(message)
        came.set()

    sub = transport.subscribe_destination(
        state_destination(layout, SHARD, transport.dialect), take, confirm=10.0
    )
    try:
        assert sub.confirmed, sub.refused
        before = time.time()
        publish_snapshot(transport, _snap(layout, 1, before), KEY, timeout=5)
        assert came.wait(10), "the snapshot did not come back"
    finally:
        sub.cancel()
    headers = got[0].headers
    ttl_ms = DEFAULT_SNAPSHOT_TTL * 1000
    if transport.dialect == "activemq":
        expires = int(headers["expires"])
        assert before * 1000 + ttl_ms - 5000 <= expires <= time.time() * 1000 + ttl_ms, headers
    else:  # the TTL from the SEND (expires minus the wall clock then)
        assert ttl_ms - 5000 <= int(headers["expiration"]) <= ttl_ms, headers


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("transport", ["activemq"], indirect=True)
def test_send_to_refuses_what_is_no_destination(transport: StompTransport) -> None:
    with pytest.raises(ValueError, match="destination must be a STOMP destination"):
        transport.send_to("queue/x", b"x")
    with pytest.raises(TypeError, match="body must be bytes, got str"):
        transport.send_to("/queue/x", "x")  # type: ignore[arg-type]
