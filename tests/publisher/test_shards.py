"""Shards on the wire (heartwire.groups / heartwire.transport.shards): the shard function is the
published jump consistent hash over CRC-32, the same in every process; a sharded publisher's
beats go to the shard's queue on ActiveMQ and to the topic with a ``heartwire-shard`` header on
RabbitMQ (routed there by a headers exchange) and on the embedded broker."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import stomp

import heartwire as hw
from heartwire.executor import shared_executor
from heartwire.groups import (
    DEFAULT_SHARDS,
    MAX_SHARDS,
    SHARD_HEADER,
    ShardLayout,
    jump_hash,
    shard_of,
)
from heartwire.publisher import SHARD_TTL_PERIODS
from heartwire.transport.dialect import ACTIVEMQ, RABBITMQ
from heartwire.transport.memory import MemoryBroker
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

# (key, buckets) -> bucket, as published with the jump hash's implementations in C, Go
# (dgryski/go-jump), Python (lithammer/python-jump-consistent-hash) and Elixir (jumper).
JUMP_VECTORS = [
    (1, 1, 0),
    (42, 57, 43),
    (0xDEAD10CC, 1, 0),
    (0xDEAD10CC, 666, 361),
    (256, 1024, 520),
    (0, 1, 0),
    (3, 1, 0),
    (0, 2, 0),
    (4, 2, 1),
    (7, 2, 0),
    (1, 128, 55),
    (129, 128, 120),
    (2**64 - 1, 128, 92),
    (128, 100_000_000, 38_172_097),
    (128, 2_147_483_648, 1_644_467_860),
    (-42, 57, 8),  # a negative key is its 64-bit two's complement
]


@pytest.mark.parametrize(("key", "buckets", "expected"), JUMP_VECTORS)
def test_jump_hash_matches_the_published_vectors(key: int, buckets: int, expected: int) -> None:
    assert jump_hash(key, buckets) == expected


def test_shard_of_is_crc32_then_jump_hash_pinned() -> None:
    assert zlib.crc32(b"svc.db") == 0xF38B5673
    for topic in ("svc.db", "a", "payments.eu-west:1.api", "x" * 200):
        assert shard_of(topic, 16) == jump_hash(zlib.crc32(topic.encode()), 16)
    # Pinned: a change here moves every deployed topic to another shard.
    assert [shard_of(t, 16) for t in ("svc.db", "a", "payments.eu-west:1.api")] == [0, 14, 7]
    assert [shard_of(f"svc.{i}", 1000) for i in range(5)] == [
        shard_of(f"svc.{i}", 1000) for i in range(5)
    ]


def test_shard_of_is_the_same_in_another_process_with_another_hash_seed() -> None:
    topics = [f"svc.node-{i}.api" for i in range(50)]
    here = [shard_of(t, 16) for t in topics]
    code = (
        "import json, sys; from heartwire.groups import shard_of; "
        "print(json.dumps([shard_of(t, 16) for t in json.loads(sys.argv[1])]))"
    )
    # the heartwire this process imported (the source tree with its built core, or CI's
    # installed one: a clean clone's python/ has no compiled core)
    where = os.path.dirname(os.path.dirname(hw.__file__))
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": where}
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(topics)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout) == here


def test_shards_share_topics_evenly() -> None:
    counts = Counter(shard_of(f"svc.{i}", 16) for i in range(10_000))
    assert sorted(counts) == list(range(16))
    assert min(counts.values()) >= 500 and max(counts.values()) <= 750, counts  # 625 expected


def test_one_more_shard_moves_topics_only_to_the_new_shard() -> None:
    """Jump hashing's consistency: from S to S + 1 shards a topic stays, or moves to shard S;
    about 1/(S + 1) of them move."""
    topics = [f"svc.{i}" for i in range(4000)]
    for s in (1, 2, 7, 16):
        before = [shard_of(t, s) for t in topics]
        after = [shard_of(t, s + 1) for t in topics]
        moved = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
        assert all(a == s for _, a in moved), s
        assert abs(len(moved) / len(topics) - 1 / (s + 1)) < 0.05, (s, len(moved))


@pytest.mark.parametrize(
    ("args", "error", "text"),
    [
        (("svc.a", 0), ValueError, "shards must be between 1 and 4096, got 0"),
        (("svc.a", MAX_SHARDS + 1), ValueError, "got 4097"),
        (("svc.a", True), TypeError, "shards must be an int, got bool"),
        (("svc.a", "16"), TypeError, "shards must be an int, got str"),
        (("svc.*", 16), ValueError, "topic 'svc.*'"),
        ((b"svc.a", 16), TypeError, "topic must be a str"),
    ],
)
def test_shard_of_refuses_bad_arguments(args: tuple[Any, ...], error: type, text: str) -> None:
    with pytest.raises(error, match=text.replace("*", r"\*").replace("(", r"\(")):
        shard_of(*args)


def test_jump_hash_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="buckets must be >= 1, got 0"):
        jump_hash(1, 0)
    with pytest.raises(TypeError, match="key must be an int, got float"):
        jump_hash(1.0, 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="buckets must be an int, got bool"):
        jump_hash(1, True)


def test_layout_names_queues_headers_and_destinations() -> None:
    layout = ShardLayout("payments")
    assert layout.shards == DEFAULT_SHARDS == 16
    k = layout.shard_of("svc.db")
    assert k == shard_of("svc.db", 16) == 0
    assert layout.queue(15) == "heartwire.payments.15"
    assert layout.headers("payments.eu-west:1.api") == {SHARD_HEADER: "7"}
    assert layout.destination("svc.db", ACTIVEMQ) == "/queue/heartwire.payments.0"
    assert layout.destination("svc.db", RABBITMQ) == "/topic/svc.db"
    assert layout.destination("svc.db", None) == "/topic/svc.db"
    with pytest.raises(ValueError, match=r"shard must be in \[0, 16\), got 16"):
        layout.queue(16)
    with pytest.raises(ValueError, match="group 'pay ments'"):
        ShardLayout("pay ments")
    with pytest.raises(ValueError, match="got 0"):
        ShardLayout("payments", 0)
    with pytest.raises(ValueError, match=r"topic 'svc\.>'"):
        layout.destination("svc.>", RABBITMQ)


def test_memory_broker_publishes_to_the_topic_with_the_shard_header() -> None:
    broker = MemoryBroker()
    seen: list[hw.Message] = []
    broker.subscribe("svc.>", seen.append)
    layout = ShardLayout("g", 4)
    broker.publish_sharded(layout, "svc.db", b"x", {"persistent": "true"})
    assert [(m.destination, dict(m.headers)) for m in seen] == [
        ("svc.db", {"persistent": "true", SHARD_HEADER: str(shard_of("svc.db", 4))})
    ]
    with pytest.raises(TypeError, match="layout must be a ShardLayout, got str"):
        broker.publish_sharded("g", "svc.db", b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"topic 'svc\.\*'"):
        broker.publish_sharded(layout, "svc.*", b"x")
    broker.close()


def test_publisher_sends_with_the_layout_and_checks_it() -> None:
    broker = MemoryBroker()
    seen: list[hw.Message] = []
    broker.subscribe("svc.>", seen.append)
    clock = hw.ManualClock()
    layout = ShardLayout("g", 8)
    pub = hw.HeartbeatPublisher(broker, "svc.db", clock=clock, shards=layout)
    assert pub.shards is layout
    pub.start()
    assert shared_executor(clock).drain(5.0)
    pub.stop()
    assert [m.headers[SHARD_HEADER] for m in seen] == [str(shard_of("svc.db", 8))]
    # A shard queue keeps unread beats: a sharded beat expires, by default 10 periods on.
    sent = json.loads(seen[0].body)["sent"]
    assert int(seen[0].headers["expires"]) == int((sent + SHARD_TTL_PERIODS * 1.0) * 1000)
    seen.clear()
    own = hw.HeartbeatPublisher(broker, "svc.db", clock=clock, shards=layout, ttl=3.0)
    own.start()
    assert shared_executor(clock).drain(5.0)
    own.stop()
    sent = json.loads(seen[0].body)["sent"]
    assert int(seen[0].headers["expires"]) == int((sent + 3.0) * 1000)  # an explicit ttl wins
    assert hw.HeartbeatPublisher(broker, "svc.db").shards is None
    with pytest.raises(TypeError, match="shards must be a ShardLayout or None, got str 'g'"):
        hw.HeartbeatPublisher(broker, "svc.db", shards="g")  # type: ignore[arg-type]

    class Plain:
        def publish(self, *a: Any, **k: Any) -> None: ...

    with pytest.raises(TypeError, match=r"needs a broker with publish_sharded.*got Plain"):
        hw.HeartbeatPublisher(Plain(), "svc.db", shards=layout)  # type: ignore[arg-type]
    broker.close()


# -- real brokers --------------------------------------------------------------------------------


class _Inbox(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.got: queue.Queue[tuple[dict[str, str], str]] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        body = frame.body if isinstance(frame.body, str) else frame.body.decode()
        self.got.put((dict(frame.headers), body))

    def take(self, timeout: float = 10.0) -> tuple[dict[str, str], str]:
        try:
            return self.got.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no message within {timeout:g} s")

    def quiet(self, within: float = 0.3) -> bool:
        time.sleep(within)
        return self.got.empty()


@pytest.fixture
def stomp_conns() -> Iterator[list[stomp.Connection12]]:
    conns: list[stomp.Connection12] = []
    yield conns
    for c in conns:
        if c.is_connected():
            c.disconnect()


def _listen(conns: list[stomp.Connection12], broker: str, destination: str) -> _Inbox:
    """A stomp.py connection subscribed to ``destination`` (confirmed by a RECEIPT)."""
    conn = stomp.Connection12([(B.HOST, B.PORTS[broker])], heartbeats=(0, 0), vhost="/")
    conn.connect("guest", "guest", wait=True)
    conns.append(conn)
    inbox = _Inbox()
    receipts: queue.Queue[str] = queue.Queue()

    class _Receipt(stomp.ConnectionListener):
        def on_receipt(self, frame: Any) -> None:
            receipts.put(frame.headers["receipt-id"])

    conn.set_listener("inbox", inbox)
    conn.set_listener("receipt", _Receipt())
    conn.subscribe(destination, id=str(len(conns)), ack="auto", headers={"receipt": "sub"})
    assert receipts.get(timeout=10) == "sub"
    return inbox


def _publish_one(url: str, topic: str, layout: ShardLayout) -> None:
    """One beat of ``topic`` from a sharded publisher (manual clock: the first beat only)."""
    transport = hw.connect(url)
    clock = hw.ManualClock()
    try:
        pub = hw.HeartbeatPublisher(transport, topic, clock=clock, shards=layout)
        pub.start()
        assert shared_executor(clock).drain(5.0)
        pub.stop()
        assert pub.sent == 1, pub.stats()
    finally:
        transport.close()


@pytest.mark.usefixtures("brokers")
def test_activemq_sharded_beat_goes_to_the_shard_queue_not_the_topic(
    stomp_conns: list[stomp.Connection12],
) -> None:
    uid = uuid.uuid4().hex[:8]
    layout = ShardLayout(f"hwtest{uid}", 4)
    topic = f"hwtest{uid}.svc.db"
    k = layout.shard_of(topic)
    on_queue = _listen(stomp_conns, "activemq", f"/queue/{layout.queue(k)}")
    on_topic = _listen(stomp_conns, "activemq", f"/topic/{topic}")
    _publish_one(B.url("activemq"), topic, layout)
    headers, body = on_queue.take()
    assert json.loads(body)["topic"] == topic
    assert headers[SHARD_HEADER] == str(k)
    assert on_topic.quiet(), "the sharded beat also went to its topic's destination"


@pytest.mark.usefixtures("brokers")
def test_rabbitmq_sharded_beat_reaches_the_shard_queue_through_a_headers_exchange(
    stomp_conns: list[stomp.Connection12],
) -> None:
    pika = pytest.importorskip("pika")
    uid = uuid.uuid4().hex[:8]
    layout = ShardLayout(f"hwtest{uid}", 4)
    topic = f"hwtest{uid}.svc.db"
    k = layout.shard_of(topic)
    amqp = pika.BlockingConnection(
        pika.ConnectionParameters(
            host=B.HOST, port=5672, credentials=pika.PlainCredentials("guest", "guest")
        )
    )
    try:
        ch = amqp.channel()
        exchange = f"heartwire.{layout.group}"
        ch.exchange_declare(exchange, "headers", auto_delete=True)
        ch.exchange_bind(exchange, "amq.topic", routing_key=f"{layout.group}.#")
        for shard in range(layout.shards):
            ch.queue_declare(
                layout.queue(shard),
                auto_delete=True,
                arguments={"x-single-active-consumer": True, "x-expires": 60_000},
            )
            ch.queue_bind(
                layout.queue(shard),
                exchange,
                arguments={"x-match": "all", SHARD_HEADER: str(shard)},
            )
        inboxes = [
            _listen(stomp_conns, "rabbitmq", f"/amq/queue/{layout.queue(s)}")
            for s in range(layout.shards)
        ]
        plain = _listen(stomp_conns, "rabbitmq", f"/topic/{topic}")
        _publish_one(B.url("rabbitmq"), topic, layout)
        headers, body = inboxes[k].take()
        assert json.loads(body)["topic"] == topic
        assert headers["destination"] == f"/topic/{topic}"
        assert json.loads(plain.take()[1])["topic"] == topic
        assert all(inboxes[s].quiet(0.1) for s in range(layout.shards) if s != k)
    finally:
        amqp.close()


@pytest.mark.usefixtures("brokers")
def test_stomp_send_refuses_a_layout_that_is_not_one() -> None:
    transport = hw.connect(B.url("activemq"))
    try:
        with pytest.raises(TypeError, match="layout must be a ShardLayout or None, got str"):
            transport.send("svc.db", b"x", layout="g")  # type: ignore[attr-defined]
    finally:
        transport.close()
