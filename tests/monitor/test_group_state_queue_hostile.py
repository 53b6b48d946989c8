"""Review 18 findings 2 and 3: ``read_snapshot`` on a state queue it cannot read, and a replayed
old snapshot, on the real brokers. Each failed before its fix: a missing RabbitMQ state queue
read as "no snapshot" (``(None, [])``), and a year-old signed snapshot sent again replaced the
owner's newest."""

from __future__ import annotations

import time
import uuid

import pytest

import heartwire as hw
from heartwire.groups import (
    ShardLayout,
    ShardSnapshot,
    TopicRecord,
    declare_rabbitmq,
    publish_snapshot,
    read_snapshot,
)
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

KEY = b"group key"


def _topic_of_shard(layout: ShardLayout, shard: int) -> str:
    prefix = f"{layout.group}.svc"
    return next(f"{prefix}.{i}" for i in range(10_000) if layout.shard_of(f"{prefix}.{i}") == shard)


@pytest.mark.usefixtures("brokers")
def test_a_missing_state_queue_is_an_error_not_no_snapshot() -> None:
    # RabbitMQ answers the SUBSCRIBE to /amq/queue/<missing> with an ERROR (NOT_FOUND) and drops
    # the connection (the member's shard subscriptions with it: its shards move). Before, the
    # refusal was ignored and read_snapshot returned (None, []), the same as "no snapshot": the
    # new owner would then re-report every FAILED topic of the shard as a first failure.
    # Reached with a group never declared, or a state queue gone with its ``expires``.
    layout = ShardLayout(f"hwrev{uuid.uuid4().hex[:8]}", 2)
    transport = hw.connect(B.url("rabbitmq"))
    try:
        assert isinstance(transport, StompTransport)
        with pytest.raises(RuntimeError, match=r"heartwire\.hwrev\w+\.0\.state.*refused") as info:
            read_snapshot(transport, layout, 0, KEY, wait=5.0)
        assert "NOT_FOUND" in str(info.value) or "not_found" in str(info.value).lower()
    finally:
        transport.close()


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("broker", ["activemq", "rabbitmq"])
def test_a_replayed_old_snapshot_does_not_replace_the_newest(broker: str) -> None:
    # RabbitMQ's state queue keeps one snapshot (x-max-length 1, drop-head), so a captured
    # signed snapshot of a year ago, sent again by anyone who may send to the queue, pushes the
    # owner's newest out; before, it was read as the shard's state (no age was checked). Now
    # it is refused as stale: no snapshot (RabbitMQ) or the newest (ActiveMQ keeps both).
    layout = ShardLayout(f"hwrev{uuid.uuid4().hex[:8]}", 2)
    if broker == "rabbitmq":
        pytest.importorskip("pika")
        declare_rabbitmq(layout, f"{layout.group}.>", expires=60)
    topic = _topic_of_shard(layout, 0)
    now = time.time()
    year = 365 * 86400.0
    old = ShardSnapshot(layout, 0, "m1", 1, now - year, (TopicRecord(topic, now - year, 5),))
    new = ShardSnapshot(layout, 0, "m1", 50, now, (TopicRecord(topic),))
    transport = hw.connect(B.url(broker))
    try:
        assert isinstance(transport, StompTransport)
        publish_snapshot(transport, new, KEY, timeout=5)
        publish_snapshot(transport, old, KEY, timeout=5, ttl=None)  # the replay
        best, refused = read_snapshot(transport, layout, 0, KEY, wait=3.0)
        assert best is None or best.sent > now - 3600, (
            f"read_snapshot took a snapshot sent {(now - best.sent) / 86400:.0f} days ago "
            f"(seq {best.seq}, FAILED {[t.topic for t in best.failed]})"
        )
        assert [e.reason for e in refused] == ["stale"]
        assert best == (new if broker == "activemq" else None)
    finally:
        transport.close()
