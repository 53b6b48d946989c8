"""Review 18 finding 1 (and suspected 8): a shard queue's intake
(``subscribe_destination_intake``, ``Routes.add(..., from_body=True)``) recorded a beat under
whatever topic its body named, even a topic of another shard. The member consuming shard 1 then
watched a topic that shard 2's member owns (two owners, the "exactly one active member" rule
broken), and its snapshots of shard 1 (``snapshot_of`` filters by ``shard_of``) never carried
it, so its state was lost at a takeover. Reached by a publisher whose layout differs from the
members' (another shard count), a forged ``heartwire-shard`` header on RabbitMQ, or a captured
signed beat resent to another shard's queue. Now the route knows its shard
(``layout=``/``shard=``) and the intake refuses such a beat, counted as ``wrong_shard`` and
reported. Failed before the fix (the stray beat was recorded)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import heartwire as hw
from heartwire._core import Detector, Intake
from heartwire.beat import Beat, BeatCodec
from heartwire.groups import SHARD_HEADER, ShardLayout, declare_rabbitmq
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)


def _topic_of_shard(layout: ShardLayout, prefix: str, shard: int) -> str:
    return next(f"{prefix}.{i}" for i in range(10_000) if layout.shard_of(f"{prefix}.{i}") == shard)


@pytest.fixture
def detector() -> Iterator[Detector]:
    det = Detector(period=5.0, allowed_misses=1)
    yield det
    det.stop()


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("broker", ["activemq", "rabbitmq"])
def test_a_beat_of_another_shards_topic_on_a_shard_queue_is_refused(
    broker: str, detector: Detector
) -> None:
    uid = uuid.uuid4().hex[:8]
    prefix = f"hwrev{uid}"
    layout = ShardLayout(prefix, 4)
    shard = 1
    own = _topic_of_shard(layout, f"{prefix}.svc", shard)
    stray = _topic_of_shard(layout, f"{prefix}.svc", 2)  # in the pattern, in shard 2
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
        assert isinstance(member, StompTransport) and isinstance(sender, StompTransport)
        sub = member.subscribe_destination_intake(
            destination,
            intake,
            lambda link, message: fallback.append(message),
            refusals.set,
            layout=layout,
            shard=shard,
            headers=headers,
            confirm=10.0,
        )
        assert sub.confirmed, sub.refused
        codec = BeatCodec()
        stray_body = codec.encode(Beat(stray, seq=0, period=5.0))
        if broker == "rabbitmq":
            # Any client may set the header: the headers exchange routes on it alone.
            sender.publish(stray, stray_body, {SHARD_HEADER: str(shard)})
        else:
            sender.send_to(destination, stray_body)
        # Then a beat of the shard's own topic: once it is in, the stray one was handled.
        sender.publish_sharded(layout, own, codec.encode(Beat(own, seq=0, period=5.0)))
        wait_for(lambda: own in detector, 10, f"{own} recorded")
        names = sorted(detector.name(h) for h in detector.handles())
        assert stray not in names, (
            f"{stray!r} (shard {layout.shard_of(stray)}) was taken in from shard {shard}'s "
            f"queue: watched by a member that does not own it"
        )
        wait_for(refusals.is_set, 10, "the stray beat's refusal reported")
        refused = intake.take_refusals()
        assert [(reason, count) for reason, _, count in refused] == [("wrong_shard", 1)]
        assert f"in shard 2 of 4, not in shard {shard}" in refused[0][1], refused[0][1]
        assert intake.stats()["rejected"] == {"wrong_shard": 1}
        assert fallback == [], "a beat took the Python way"
        sub.cancel()
    finally:
        sender.close()
        member.close()


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("broker", ["activemq", "rabbitmq"])
def test_a_publisher_with_another_shard_count_is_seen_as_wrong_shard_refusals(
    broker: str, detector: Detector
) -> None:
    # Review 18, suspected 8: members of an 8-shard group (grown from 4), a publisher still
    # told 4. Jump hashing moved some of shard 1's topics to shards 4-7, but the publisher
    # sends them to queue 1 still; before, shard 1's member took them in (a second owner),
    # now they are refused and counted, so the mismatch shows in the member's stats and
    # reports. (The other way round, a publisher told more shards than the members, its beats
    # for the extra shards reach no member's queue, and every other beat its right one.)
    uid = uuid.uuid4().hex[:8]
    prefix = f"hwtest{uid}"
    members, publisher = ShardLayout(prefix, 8), ShardLayout(prefix, 4)
    shard = 1
    if broker == "rabbitmq":
        pytest.importorskip("pika")
        declare_rabbitmq(members, f"{prefix}.>", expires=60)
        destination, headers = f"/amq/queue/{members.queue(shard)}", {}
    else:
        destination = f"/queue/{members.queue(shard)}"
        headers = {"activemq.exclusive": "true"}
    # Topics the 4-shard publisher sends to queue 1: in shard 1 of 8, or moved to 4-7.
    sent = [t for t in (f"{prefix}.svc.{i}" for i in range(400)) if publisher.shard_of(t) == 1]
    own = [t for t in sent if members.shard_of(t) == shard]
    stray = [t for t in sent if members.shard_of(t) != shard]
    assert own and stray
    intake = Intake(detector, f"{prefix}.svc.*", 5.0)
    intake.running = True
    member = hw.connect(B.url(broker))
    sender = hw.connect(B.url(broker))
    try:
        assert isinstance(member, StompTransport) and isinstance(sender, StompTransport)
        sub = member.subscribe_destination_intake(
            destination,
            intake,
            lambda link, message: None,
            lambda: None,
            layout=members,
            shard=shard,
            headers=headers,
            confirm=10.0,
        )
        assert sub.confirmed, sub.refused
        codec = BeatCodec()
        for topic in sent:
            sender.publish_sharded(publisher, topic, codec.encode(Beat(topic, seq=0, period=5.0)))
        wait_for(
            lambda: (
                len(detector) == len(own)
                and intake.stats()["rejected"].get("wrong_shard") == len(stray)
            ),
            10,
            f"{len(own)} topics recorded and {len(stray)} refused",
        )
        assert sorted(detector.name(h) for h in detector.handles()) == sorted(own)
        refused = intake.take_refusals()
        assert {reason for reason, _, _ in refused} == {"wrong_shard"}
        sub.cancel()
    finally:
        sender.close()
        member.close()


@pytest.mark.usefixtures("brokers")
def test_layout_and_shard_go_together(detector: Detector) -> None:
    layout = ShardLayout("g", 4)
    intake = Intake(detector, "svc.*", 5.0)
    member = hw.connect(B.url("activemq"))
    try:
        assert isinstance(member, StompTransport)
        cases: list[tuple[dict[str, Any], type, str]] = [
            ({"layout": layout}, ValueError, "layout and shard go together"),
            ({"shard": 1}, ValueError, "layout and shard go together"),
            ({"layout": "g", "shard": 1}, TypeError, "layout must be a ShardLayout, got str"),
            ({"layout": layout, "shard": 4}, ValueError, r"shard must be in \[0, 4\), got 4"),
            ({"layout": layout, "shard": True}, TypeError, "shard must be an int, got bool"),
        ]
        for kwargs, error, text in cases:
            with pytest.raises(error, match=text):
                member.subscribe_destination_intake(
                    "/queue/heartwire.g.1", intake, lambda link, m: None, lambda: None, **kwargs
                )
        assert len(member._routes) == 0, "a refused call left a route"
    finally:
        member.close()
