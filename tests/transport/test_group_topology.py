"""A monitor group's RabbitMQ objects (heartwire.groups.rabbitmq_definitions, declare_rabbitmq):
their shape, declared over AMQP (twice: idempotent) and imported as a definitions file into the
real broker, then used: sharded beats reach their single-active-consumer shard queue over STOMP,
the state queue takes STOMP SENDs with the same arguments and keeps the newest snapshot."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp

import heartwire as hw
from heartwire.groups import (
    SHARD_HEADER,
    ShardLayout,
    declare_rabbitmq,
    rabbitmq_definitions,
)
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

WAIT = 10.0


def test_definitions_shape() -> None:
    layout = ShardLayout("payments", 3)
    defs = rabbitmq_definitions(layout, "svc.>", beat_ttl=30, max_beats=1000)
    assert [x["name"] for x in defs["exchanges"]] == ["heartwire.payments"]
    assert defs["exchanges"][0]["type"] == "headers"
    names = [q["name"] for q in defs["queues"]]
    assert names == [
        "heartwire.payments.0",
        "heartwire.payments.0.state",
        "heartwire.payments.1",
        "heartwire.payments.1.state",
        "heartwire.payments.2",
        "heartwire.payments.2.state",
    ]
    assert defs["queues"][0]["arguments"] == {
        "x-single-active-consumer": True,
        "x-message-ttl": 30_000,
        "x-max-length": 1000,
        "x-overflow": "drop-head",
    }
    assert defs["queues"][1]["arguments"] == {"x-max-length": 1}
    e2e, *shards = defs["bindings"]
    assert (e2e["source"], e2e["destination"], e2e["routing_key"]) == (
        "amq.topic",
        "heartwire.payments",
        "svc.#",
    )
    assert [b["arguments"] for b in shards] == [
        {"x-match": "all", SHARD_HEADER: str(k)} for k in range(3)
    ]
    assert rabbitmq_definitions(layout, "svc.*.api")["bindings"][0]["routing_key"] == "svc.*.api"
    assert all(
        q["arguments"]["x-expires"] == 5000
        for q in rabbitmq_definitions(layout, "svc.>", expires=5)["queues"]
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"layout": "payments"}, TypeError, "layout must be a ShardLayout, got str"),
        ({"pattern": "svc.#"}, ValueError, "pattern 'svc.#'"),
        ({"beat_ttl": 0}, ValueError, "beat_ttl"),
        ({"max_beats": 0}, ValueError, "max_beats must be an int in "),
        ({"expires": -1}, ValueError, "expires"),
        ({"vhost": ""}, ValueError, "vhost must be a non-empty str"),
    ],
)
def test_definitions_refuse_bad_arguments(kwargs: dict[str, Any], error: type, text: str) -> None:
    args: dict[str, Any] = {"layout": ShardLayout("g", 2), "pattern": "svc.>", **kwargs}
    with pytest.raises(error, match=text.replace(".", r"\.")):
        rabbitmq_definitions(args.pop("layout"), args.pop("pattern"), **args)


# -- the real broker -----------------------------------------------------------------------------


class _Inbox(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.got: queue.Queue[tuple[dict[str, str], str]] = queue.Queue()
        self.errors: list[str] = []
        self.receipts: queue.Queue[str] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        body = frame.body if isinstance(frame.body, str) else frame.body.decode()
        self.got.put((dict(frame.headers), body))

    def on_receipt(self, frame: Any) -> None:
        self.receipts.put(frame.headers["receipt-id"])

    def on_error(self, frame: Any) -> None:
        self.errors.append(f"{frame.headers.get('message')}: {frame.body}")
        self.receipts.put("ERROR")

    def take(self) -> tuple[dict[str, str], str]:
        try:
            return self.got.get(timeout=WAIT)
        except queue.Empty:
            pytest.fail(f"no message within {WAIT:g} s (errors: {self.errors})")


@pytest.fixture
def rabbit() -> Iterator[Any]:
    """New stomp.py connections to RabbitMQ (closed at the end) with their inboxes."""
    made: list[stomp.Connection12] = []

    def connect() -> tuple[stomp.Connection12, _Inbox]:
        conn = stomp.Connection12([(B.HOST, B.PORTS["rabbitmq"])], heartbeats=(0, 0), vhost="/")
        inbox = _Inbox()
        conn.set_listener("inbox", inbox)
        conn.connect("guest", "guest", wait=True)
        made.append(conn)
        return conn, inbox

    yield connect
    for conn in made:
        if conn.is_connected():
            conn.disconnect()


def _subscribe(conn: stomp.Connection12, inbox: _Inbox, dest: str, **headers: str) -> None:
    conn.subscribe(dest, id=dest, ack="auto", headers={**headers, "receipt": dest})
    assert inbox.receipts.get(timeout=WAIT) == dest, inbox.errors


def _use_group(rabbit: Any, layout: ShardLayout, prefix: str) -> None:
    """Sharded beats reach their shard queue; the state queue keeps the newest snapshot."""
    topic = f"{prefix}.svc.db"
    k = layout.shard_of(topic)
    conn, inbox = rabbit()
    _subscribe(conn, inbox, f"/amq/queue/{layout.queue(k)}")
    transport = hw.connect(B.url("rabbitmq"))
    try:
        transport.publish_sharded(layout, topic, b'{"v":1,"topic":"' + topic.encode() + b'"}')
    finally:
        transport.close()
    headers, body = inbox.take()
    assert json.loads(body)["topic"] == topic and headers[SHARD_HEADER] == str(k)
    # The members' STOMP frames on the state queue: the same arguments, so no inequivalence.
    state = f"/queue/{layout.queue(k)}.state"
    args = {"x-max-length": "1", "x-expires": "60000"}
    sender, sent = rabbit()
    for i in range(3):
        sender.send(state, f"snapshot {i}", headers={**args, "receipt": f"s{i}"})
        assert sent.receipts.get(timeout=WAIT) == f"s{i}", sent.errors
    reader, got = rabbit()
    _subscribe(reader, got, state, **args)
    assert got.take()[1] == "snapshot 2"


@pytest.mark.usefixtures("brokers")
def test_declare_rabbitmq_twice_then_use_the_group(rabbit: Any) -> None:
    pytest.importorskip("pika")
    uid = uuid.uuid4().hex[:8]
    layout = ShardLayout(f"hwtest{uid}", 3)
    for _ in range(2):
        declare_rabbitmq(layout, f"hwtest{uid}.>", expires=60)
    _use_group(rabbit, layout, f"hwtest{uid}")


@pytest.mark.usefixtures("brokers")
def test_definitions_import_into_rabbitmq_then_use_the_group(rabbit: Any, tmp_path: Path) -> None:
    """The definitions as a file, imported by ``rabbitmqctl import_definitions`` (what
    ``load_definitions`` reads at start): RabbitMQ accepts the format."""
    uid = uuid.uuid4().hex[:8]
    layout = ShardLayout(f"hwtest{uid}", 2)
    path = tmp_path / "defs.json"
    path.write_text(json.dumps(rabbitmq_definitions(layout, f"hwtest{uid}.>", expires=60)))
    base = Path(os.environ.get("HEARTWIRE_BROKERS_DIR", "/tmp/heartwire-brokers")) / "rabbitmq"
    env = {
        **os.environ,
        "HOME": str(base / "home"),
        "ERL_EPMD_PORT": "4371",
        "RABBITMQ_CONF_ENV_FILE": "/dev/null",
    }
    done = subprocess.run(
        [
            "/usr/lib/rabbitmq/bin/rabbitmqctl",
            *("-n", "heartwire@localhost", "import_definitions", str(path)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _use_group(rabbit, layout, f"hwtest{uid}")
