"""A monitor group member's data path: ``StompTransport.subscribe_destination_intake`` routes a
shard queue's beats to the core's intake straight off the socket, each under the topic its body
names (``Routes.add(..., from_body=True)``), on the real brokers: ActiveMQ's shard queue (whose
``destination`` names the queue, not the topic) with ``activemq.exclusive``, and RabbitMQ's
single-active-consumer shard queue fed by a headers exchange. No beat takes the Python way; a
beat of a topic outside the pattern is refused, counted and reported."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import heartwire as hw
from heartwire._core import Detector, Intake
from heartwire.beat import Beat, BeatCodec
from heartwire.groups import ShardLayout, declare_rabbitmq
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)


def _topics_of_shard(layout: ShardLayout, prefix: str, shard: int, n: int) -> list[str]:
    """``n`` topic names under ``prefix`` that fall in ``shard``."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        name = f"{prefix}.{i}"
        if layout.shard_of(name) == shard:
            out.append(name)
        i += 1
    return out


@pytest.fixture
def detector() -> Iterator[Detector]:
    det = Detector(period=5.0, allowed_misses=1)
    yield det
    det.stop()


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("broker", ["activemq", "rabbitmq"])
def test_shard_queue_beats_reach_the_intake_natively_under_their_own_topics(
    broker: str, detector: Detector
) -> None:
    uid = uuid.uuid4().hex[:8]
    prefix = f"hwtest{uid}"
    layout = ShardLayout(prefix, 4)
    shard = 1
    if broker == "rabbitmq":
        pytest.importorskip("pika")
        declare_rabbitmq(layout, f"{prefix}.>", expires=60)
        destination, headers = f"/amq/queue/{layout.queue(shard)}", {}
    else:
        destination = f"/queue/{layout.queue(shard)}"
        headers = {"activemq.exclusive": "true"}
    intake = Intake(detector, f"{prefix}.svc.*", 5.0)
    intake.running = True
    fallback: list[Any] = []
    refusals = threading.Event()
    member = hw.connect(B.url(broker))
    sender = hw.connect(B.url(broker))
    try:
        assert isinstance(member, StompTransport)
        sub = member.subscribe_destination_intake(
            destination,
            intake,
            lambda link, message: fallback.append(message),
            refusals.set,
            headers=headers,
            confirm=10.0,
        )
        assert sub.confirmed, sub.refused
        topics = _topics_of_shard(layout, f"{prefix}.svc", shard, 5)
        # In the shard too, but outside the intake's pattern.
        stray = next(t for t in _topics_of_shard(layout, f"{prefix}.other", shard, 1))
        codec = BeatCodec()
        for seq in range(3):
            for topic in [*topics, stray]:
                body = codec.encode(Beat(topic, seq=seq, period=5.0))
                sender.publish_sharded(layout, topic, body)
        wait_for(lambda: member.stats()["native"] >= 18, 10, "18 beats recorded natively")
        wait_for(refusals.is_set, 10, "the stray beat's refusal reported")
        assert fallback == [], "a beat took the Python way"
        assert sorted(detector.name(h) for h in detector.handles()) == sorted(topics)
        refused = intake.take_refusals()
        assert [(reason, count) for reason, _, count in refused][:1] == [("pattern_mismatch", 1)]
        assert stray in refused[0][1]
        sub.cancel()
    finally:
        sender.close()
        member.close()
