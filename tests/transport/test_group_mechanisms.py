"""What the brokers here really do with the mechanisms monitor groups build on
(docs/groups-design.md), proved over STOMP with stomp.py (AMQP 0-9-1 declarations with pika
where STOMP cannot declare them):

RabbitMQ 3.10 (its STOMP plugin):
- ``x-single-active-consumer`` and ``x-priority`` given as SUBSCRIBE headers are ignored: the
  queue is declared without single-active-consumer, the consumer gets no priority;
- a queue declared over AMQP with ``x-single-active-consumer`` and consumed over STOMP through
  ``/amq/queue/<name>`` (no declaration) has one active consumer: when its connection dies the
  next consumer gets the rest in order, the unacknowledged messages first; subscribing through
  ``/queue/<name>`` (which declares it again without the argument) is refused;
- the consistent-hash exchange (plugin ``rabbitmq_consistent_hash_exchange``, enabled by
  ``scripts/brokers``) bound to ``amq.topic`` spreads topics over its queues, each topic on
  exactly one queue in order, with the ``destination`` header still naming the topic.
- without a plugin, a headers exchange bound to ``amq.topic`` routes each beat on a
  ``heartwire-shard`` SEND header to its shard's queue (beats without it reach none).

ActiveMQ 5.17 (its STOMP connector):
- ``activemq.exclusive:true``: one consumer gets every message of the queue; when its
  connection dies the next one gets the rest in order, the unacknowledged messages first;
- ``activemq.priority`` on an exclusive subscription: a new consumer of higher priority takes
  the queue over from the exclusive one (what lets members claim shards); without exclusivity
  the higher priority consumer gets everything while it has room;
- virtual topics copy a beat to a queue per consumer group (``Consumer.<g>.VirtualTopic.<t>``),
  shared by the group's members: a queue per topic per group, no hashing; a client-side
  composite destination (``/queue/a,/topic/b``) reaches both in one SEND.

On both, a member that releases a queue (UNSUBSCRIBE, SUBSCRIBE again) hands it to the next
member in line and waits at the back (a -> b -> c -> a). A shard's state queue keeps the newest
snapshot: RabbitMQ with ``x-max-length:1`` given over STOMP, ActiveMQ by per-message
``expires``.

Both brokers drop a consumer that stops (SIGSTOP, a network cut: its socket stays open) about
three STOMP heart-beat intervals after its last frame (RabbitMQ counts whole seconds), and its
unacknowledged messages go to the next consumer.

Few messages each (2 cores shared): a second or so per test, 3 s for RabbitMQ's hung member.
"""

from __future__ import annotations

import queue
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import stomp

from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

pika = pytest.importorskip("pika", reason="pika declares the AMQP 0-9-1 queues these tests use")

pytestmark = pytest.mark.usefixtures("brokers")

WAIT = 10.0  # bound on any one wait for a delivery, seconds


@dataclass
class Got:
    """A message as a consumer received it."""

    body: str
    destination: str
    message_id: str
    ack: str | None
    redelivered: bool


@dataclass
class Consumer:
    """One STOMP connection with one subscription, its deliveries in a queue."""

    name: str
    conn: stomp.Connection12
    got: queue.Queue[Got] = field(default_factory=queue.Queue)
    errors: list[str] = field(default_factory=list)

    def take(self, n: int, timeout: float = WAIT) -> list[Got]:
        """The next ``n`` deliveries (fails naming the consumer if they do not come in time)."""
        out: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            try:
                out.append(self.got.get(timeout=max(left, 0.001)))
            except queue.Empty:
                pytest.fail(
                    f"{self.name}: got {len(out)} of {n} messages in {timeout:g} s "
                    f"({[g.body for g in out]}; errors: {self.errors})"
                )
        return out

    def quiet(self, within: float = 0.3) -> list[Got]:
        """What else arrives within ``within`` seconds (expected: nothing)."""
        time.sleep(within)
        out = []
        while True:
            try:
                out.append(self.got.get_nowait())
            except queue.Empty:
                return out

    def ack(self, got: Got) -> None:
        self.conn.ack(got.ack or got.message_id)

    def die(self) -> None:
        """Cut the connection as a killed process would: no DISCONNECT, the socket shut."""
        transport = self.conn.transport
        sock = transport.socket
        assert sock is not None, f"{self.name} has no socket"
        transport.running = False
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()


class _Collect(stomp.ConnectionListener):
    def __init__(self, consumer: Consumer) -> None:
        self.c = consumer

    def on_message(self, frame: stomp.utils.Frame) -> None:
        h = frame.headers
        self.c.got.put(
            Got(
                body=frame.body if isinstance(frame.body, str) else frame.body.decode(),
                destination=h.get("destination", ""),
                message_id=h.get("message-id", ""),
                ack=h.get("ack"),
                redelivered=h.get("redelivered") == "true"
                or int(h.get("JMSXDeliveryCount", "1") or "1") > 1,
            )
        )

    def on_error(self, frame: stomp.utils.Frame) -> None:
        self.c.errors.append(f"{frame.headers.get('message')}: {frame.body}")


def _connect(broker: str, name: str) -> stomp.Connection12:
    conn = stomp.Connection12([(B.HOST, B.PORTS[broker])], heartbeats=(0, 0), vhost="/")
    conn.connect("guest", "guest", wait=True)
    return conn


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    made: list[Consumer] = []
    yield made
    for c in made:
        try:
            if c.conn.is_connected():
                c.conn.disconnect()
        except Exception:
            pass


def _consumer(
    made: list[Consumer],
    broker: str,
    name: str,
    destination: str,
    ack: str = "auto",
    receipt: bool = True,
    **headers: str,
) -> Consumer:
    """A new connection subscribed to ``destination`` with ``headers``; waits for the broker's
    RECEIPT of the SUBSCRIBE (so the subscription exists before anything is sent)."""
    conn = _connect(broker, name)
    c = Consumer(name, conn)
    made.append(c)
    conn.set_listener("collect", _Collect(c))
    receipts: queue.Queue[str] = queue.Queue()

    class _Receipts(stomp.ConnectionListener):
        def on_receipt(self, frame: stomp.utils.Frame) -> None:
            receipts.put(frame.headers.get("receipt-id", ""))

        def on_error(self, frame: stomp.utils.Frame) -> None:
            receipts.put("ERROR")

    conn.set_listener("receipts", _Receipts())
    rid = f"sub-{name}"
    conn.subscribe(destination, id=name, ack=ack, headers={**headers, "receipt": rid})
    if receipt:
        try:
            got = receipts.get(timeout=WAIT)
        except queue.Empty:
            pytest.fail(f"{name}: no RECEIPT for SUBSCRIBE {destination} in {WAIT:g} s")
        assert got == rid, f"{name}: SUBSCRIBE {destination} refused: {c.errors}"
    return c


def _send(broker: str, destination: str, bodies: list[str], **headers: str) -> None:
    """Send ``bodies`` in order on one connection; the DISCONNECT's receipt means every SEND
    before it was processed by the broker."""
    conn = _connect(broker, "sender")
    try:
        for body in bodies:
            conn.send(destination, body, headers=headers or None)
    finally:
        conn.disconnect(receipt=str(uuid.uuid4()))


def _uid() -> str:
    return uuid.uuid4().hex[:10]


# -- RabbitMQ ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def amqp() -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    """An AMQP 0-9-1 channel to the RabbitMQ broker, with its consistent-hash exchange plugin
    enabled (``scripts/brokers start`` enables it on a running node that lacks it: another
    checkout's script may have restarted the broker without it)."""
    B.run("start", "rabbitmq")
    params = pika.ConnectionParameters(
        host=B.HOST,
        port=5672,
        credentials=pika.PlainCredentials("guest", "guest"),
        blocked_connection_timeout=WAIT,
        socket_timeout=WAIT,
    )
    conn = pika.BlockingConnection(params)
    try:
        yield conn.channel()
    finally:
        conn.close()


def _sac_queue(ch: pika.adapters.blocking_connection.BlockingChannel, name: str) -> None:
    """A single-active-consumer queue, deleted when its last consumer goes (tests leave none)."""
    ch.queue_declare(
        name, auto_delete=True, arguments={"x-single-active-consumer": True, "x-expires": 60_000}
    )


def test_rabbitmq_stomp_ignores_sac_and_priority_subscribe_headers(
    amqp: object, consumers: list[Consumer]
) -> None:
    """SUBSCRIBE headers ``x-single-active-consumer`` and ``x-priority`` change nothing on
    RabbitMQ 3.10's STOMP plugin (neither is among the headers it passes on: see
    rabbit_stomp_headers.hrl's HEADER_ARGUMENTS): both consumers of the queue share its
    messages, round-robin, the one of priority 10 included."""
    q = f"/queue/hw-test.sac-header.{_uid()}"
    gone = {"x-expires": "60000"}  # a queue argument the plugin passes on: cleaned up after 60 s
    sac = {**gone, "x-single-active-consumer": "true"}
    first = _consumer(consumers, "rabbitmq", "first", q, **sac)
    prio10 = _consumer(consumers, "rabbitmq", "prio10", q, **sac, **{"x-priority": "10"})
    _send("rabbitmq", q, [str(i) for i in range(10)], **gone)
    a = first.take(5)
    b = prio10.take(5)
    assert [g.body for g in a] == ["0", "2", "4", "6", "8"]
    assert [g.body for g in b] == ["1", "3", "5", "7", "9"]


def test_rabbitmq_sac_queue_fails_over_in_order(amqp: object, consumers: list[Consumer]) -> None:
    """A queue declared over AMQP with x-single-active-consumer, consumed over STOMP through
    ``/amq/queue/``: the first consumer gets everything; when its connection is cut, the
    second gets its unacknowledged messages first (redelivered), then the rest, in order."""
    name = f"hw-test.sac.{_uid()}"
    ch = amqp
    _sac_queue(ch, name)  # type: ignore[arg-type]
    dest = f"/amq/queue/{name}"
    first = _consumer(consumers, "rabbitmq", "first", dest, ack="client-individual")
    second = _consumer(consumers, "rabbitmq", "second", dest, ack="client-individual")
    _send("rabbitmq", dest, [str(i) for i in range(10)])
    got = first.take(10)
    assert [g.body for g in got] == [str(i) for i in range(10)]
    assert second.quiet() == [], "the standby consumer got messages while the active one lived"
    for g in got[:5]:
        first.ack(g)
    time.sleep(0.2)  # the ACKs travel on the connection about to be cut
    first.die()
    _send("rabbitmq", dest, [str(i) for i in range(10, 15)])
    rest = second.take(10)
    assert [g.body for g in rest] == [str(i) for i in range(5, 15)]
    assert [g.redelivered for g in rest] == [True] * 5 + [False] * 5


def test_rabbitmq_stomp_queue_destination_refuses_a_sac_queue(
    amqp: object, consumers: list[Consumer]
) -> None:
    """``/queue/<name>`` declares the queue again, without the argument: RabbitMQ refuses it
    (inequivalent arg), so members consume single-active-consumer queues through
    ``/amq/queue/<name>``."""
    name = f"hw-test.sac-decl.{_uid()}"
    # Declared as /queue/ would (durable, not auto-delete; x-expires given on both sides), so
    # that x-single-active-consumer is the only difference.
    amqp.queue_declare(  # type: ignore[attr-defined]
        name, durable=True, arguments={"x-single-active-consumer": True, "x-expires": 60_000}
    )
    holder = _consumer(consumers, "rabbitmq", "holder", f"/amq/queue/{name}")
    c = _consumer(
        consumers, "rabbitmq", "declarer", f"/queue/{name}", receipt=False, **{"x-expires": "60000"}
    )
    B.wait_for(lambda: c.errors, WAIT, "an ERROR frame for SUBSCRIBE /queue/<sac queue>")
    assert "inequivalent arg 'x-single-active-consumer'" in " ".join(c.errors), c.errors
    assert holder.conn.is_connected()


def test_rabbitmq_consistent_hash_exchange_shards_topics(
    amqp: object, consumers: list[Consumer]
) -> None:
    """amq.topic -> x-consistent-hash exchange (bound with the group's pattern) -> S queues of
    weight 1: publishers keep sending to ``/topic/<topic>``; each topic lands on exactly one
    queue, its beats in order; the queues get roughly equal shares; the ``destination`` header
    still names the topic."""
    ch = amqp
    uid = _uid()
    prefix = f"hwtest{uid}"
    exchange = f"hw-test.ch.{uid}"
    shards = 4
    ch.exchange_declare(exchange, "x-consistent-hash", auto_delete=True)  # type: ignore[attr-defined]
    ch.exchange_bind(exchange, "amq.topic", routing_key=f"{prefix}.#")  # type: ignore[attr-defined]
    names = [f"{exchange}.{k}" for k in range(shards)]
    for name in names:
        ch.queue_declare(name, auto_delete=True, arguments={"x-expires": 60_000})  # type: ignore[attr-defined]
        ch.queue_bind(name, exchange, routing_key="1")  # type: ignore[attr-defined]
    cs = [
        _consumer(consumers, "rabbitmq", f"shard{k}", f"/amq/queue/{n}")
        for k, n in enumerate(names)
    ]
    topics = [f"{prefix}.svc-{i}" for i in range(200)]
    conn = _connect("rabbitmq", "sender")
    try:
        for seq in range(2):
            for t in topics:
                conn.send(f"/topic/{t}", f"{t} {seq}")
    finally:
        conn.disconnect(receipt="done")
    total = 2 * len(topics)
    seen: dict[int, list[Got]] = {k: [] for k in range(shards)}
    deadline = time.monotonic() + WAIT
    while sum(map(len, seen.values())) < total and time.monotonic() < deadline:
        for k, c in enumerate(cs):
            seen[k].extend(c.quiet(0.05))
    assert sum(map(len, seen.values())) == total, {k: len(v) for k, v in seen.items()}
    where: dict[str, set[int]] = {}
    order: dict[str, list[int]] = {}
    for k, msgs in seen.items():
        for g in msgs:
            topic, seq = g.body.split()
            assert g.destination == f"/topic/{topic}", g
            where.setdefault(topic, set()).add(k)
            order.setdefault(topic, []).append(int(seq))
    assert all(len(ks) == 1 for ks in where.values()), "a topic landed on two queues"
    assert all(seqs == [0, 1] for seqs in order.values()), "a topic's beats out of order"
    per_queue = [len({t for t, ks in where.items() if k in ks}) for k in range(shards)]
    assert min(per_queue) >= 25, per_queue  # 50 each expected (jump hash: sd ~6)


def test_rabbitmq_headers_exchange_routes_on_a_shard_header(
    amqp: object, consumers: list[Consumer]
) -> None:
    """No plugin: amq.topic -> a headers exchange (bound with the group's pattern) -> one queue
    per shard, bound with ``x-match: all`` on the STOMP SEND header ``heartwire-shard``. Each
    beat lands on the queue its header names, in order; a beat without the header reaches no
    shard queue; a plain ``/topic/`` subscriber still gets every beat."""
    ch = amqp
    uid = _uid()
    prefix = f"hwtest{uid}"
    exchange = f"hw-test.hdr.{uid}"
    shards = 3
    ch.exchange_declare(exchange, "headers", auto_delete=True)  # type: ignore[attr-defined]
    ch.exchange_bind(exchange, "amq.topic", routing_key=f"{prefix}.#")  # type: ignore[attr-defined]
    names = [f"{exchange}.{k}" for k in range(shards)]
    for k, name in enumerate(names):
        ch.queue_declare(name, auto_delete=True, arguments={"x-expires": 60_000})  # type: ignore[attr-defined]
        ch.queue_bind(  # type: ignore[attr-defined]
            name, exchange, arguments={"x-match": "all", "heartwire-shard": str(k)}
        )
    cs = [
        _consumer(consumers, "rabbitmq", f"shard{k}", f"/amq/queue/{n}")
        for k, n in enumerate(names)
    ]
    plain = _consumer(consumers, "rabbitmq", "plain", f"/topic/{prefix}.#")
    conn = _connect("rabbitmq", "sender")
    try:
        for seq in range(2):
            for i in range(6):
                conn.send(
                    f"/topic/{prefix}.t{i}", f"t{i} {seq}", headers={"heartwire-shard": str(i % 3)}
                )
        conn.send(f"/topic/{prefix}.legacy", "legacy 0")
    finally:
        conn.disconnect(receipt="done")
    for k, c in enumerate(cs):
        got = [g.body for g in c.take(4)]
        assert got == [f"t{k} 0", f"t{k + 3} 0", f"t{k} 1", f"t{k + 3} 1"], (k, got)
    assert [g.body for g in plain.take(13)][-1] == "legacy 0"
    assert all(c.quiet(0.2) == [] for c in cs), "a shard queue got the beat without a header"


# -- ActiveMQ ------------------------------------------------------------------------------------


def test_activemq_exclusive_consumer_fails_over_in_order(consumers: list[Consumer]) -> None:
    """``activemq.exclusive:true``: the first consumer gets everything; when its connection is
    cut, the second gets its unacknowledged messages first (redelivered), then the rest."""
    dest = f"/queue/hw-test.exclusive.{_uid()}"
    ex = {"activemq.exclusive": "true"}
    first = _consumer(consumers, "activemq", "first", dest, ack="client-individual", **ex)
    second = _consumer(consumers, "activemq", "second", dest, ack="client-individual", **ex)
    _send("activemq", dest, [str(i) for i in range(10)])
    got = first.take(10)
    assert [g.body for g in got] == [str(i) for i in range(10)]
    assert second.quiet() == [], "the standby consumer got messages while the exclusive one lived"
    for g in got[:5]:
        first.ack(g)
    time.sleep(0.2)
    first.die()
    _send("activemq", dest, [str(i) for i in range(10, 15)])
    rest = second.take(10)
    assert [g.body for g in rest] == [str(i) for i in range(5, 15)]
    assert [g.redelivered for g in rest] == [True] * 5 + [False] * 5


def test_activemq_exclusive_higher_priority_takes_over(consumers: list[Consumer]) -> None:
    """An exclusive subscription of higher ``activemq.priority`` arriving later becomes the
    queue's exclusive consumer; the earlier one gets nothing more, and takes over again when
    the higher one leaves."""
    dest = f"/queue/hw-test.exclusive-prio.{_uid()}"
    low = _consumer(consumers, "activemq", "low", dest, **{"activemq.exclusive": "true"})
    _send("activemq", dest, ["a", "b"])
    assert [g.body for g in low.take(2)] == ["a", "b"]
    high = _consumer(
        consumers,
        "activemq",
        "high",
        dest,
        **{"activemq.exclusive": "true", "activemq.priority": "10"},
    )
    _send("activemq", dest, ["c", "d"])
    assert [g.body for g in high.take(2)] == ["c", "d"]
    assert low.quiet() == []
    high.conn.unsubscribe(id="high")
    time.sleep(0.2)
    _send("activemq", dest, ["e"])
    assert [g.body for g in low.take(1)] == ["e"]


def test_activemq_consumer_priority_without_exclusive(consumers: list[Consumer]) -> None:
    """Without exclusivity, ``activemq.priority`` orders the queue's consumers: the higher one
    gets every message while its prefetch has room (here: all ten)."""
    dest = f"/queue/hw-test.prio.{_uid()}"
    low = _consumer(consumers, "activemq", "low", dest, **{"activemq.priority": "1"})
    high = _consumer(consumers, "activemq", "high", dest, **{"activemq.priority": "10"})
    _send("activemq", dest, [str(i) for i in range(10)])
    assert [g.body for g in high.take(10)] == [str(i) for i in range(10)]
    assert low.quiet() == []


# -- A member that hangs (SIGSTOP, a network cut): its socket stays open -----------------------


def _silent_member(
    broker: str, destination: str, heart_beat_ms: int, **headers: str
) -> socket.socket:
    """A consumer that promises a STOMP heart-beat every ``heart_beat_ms`` and then never sends
    or reads anything again, as a stopped process: the broker must drop it on the missing
    heart-beats (its socket stays open). Subscribed with client acks; returns the socket."""
    sock = socket.create_connection((B.HOST, B.PORTS[broker]), timeout=WAIT)
    sock.sendall(
        f"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n"
        f"heart-beat:{heart_beat_ms},0\n\n\0".encode()
    )
    reply = sock.recv(4096)
    assert reply.startswith(b"CONNECTED"), reply
    extra = "".join(f"{k}:{v}\n" for k, v in headers.items())
    sock.sendall(
        f"SUBSCRIBE\nid:silent\ndestination:{destination}\nack:client-individual\n"
        f"receipt:r1\n{extra}\n\0".encode()
    )
    buf = b""
    while b"RECEIPT" not in buf:
        chunk = sock.recv(4096)
        assert chunk, "the broker closed the silent member's connection before its RECEIPT"
        buf += chunk
    return sock


@pytest.mark.parametrize("broker", ["rabbitmq", "activemq"])
def test_a_hung_active_member_is_dropped_on_missed_heart_beats(
    broker: str, amqp: object, consumers: list[Consumer]
) -> None:
    """The active consumer stops (socket open, silent): the broker drops it once its STOMP
    heart-beats are missed, and the standby gets the message it held (redelivered), about
    1-3 heart-beat intervals later (printed; docs/groups-design.md quotes it)."""
    hb_ms = 500
    if broker == "rabbitmq":
        name = f"hw-test.sac-hang.{_uid()}"
        _sac_queue(amqp, name)  # type: ignore[arg-type]
        dest, extra = f"/amq/queue/{name}", {}
    else:
        dest, extra = f"/queue/hw-test.exclusive-hang.{_uid()}", {"activemq.exclusive": "true"}
    sock = _silent_member(broker, dest, hb_ms, **extra)
    try:
        standby = _consumer(consumers, broker, "standby", dest, **extra)
        t0 = time.monotonic()
        _send(broker, dest, ["held"])
        got = standby.take(1, timeout=10 * hb_ms / 1000)
        took = time.monotonic() - t0
    finally:
        sock.close()
    assert got[0].body == "held" and got[0].redelivered
    print(f"{broker}: standby took over {took:.2f} s after the send (heart-beat {hb_ms} ms)")
    assert took >= hb_ms / 1000, f"taken over in {took:.2f} s, before a heart-beat was missed"


# -- Balance: a member releasing a shard, and the per-shard state queue ------------------------


def _resubscribe(c: Consumer, destination: str, round_: int, **headers: str) -> None:
    """UNSUBSCRIBE the consumer's subscription and SUBSCRIBE again on the same connection (a
    member releasing a shard and waiting in line again), confirmed by a RECEIPT."""
    c.conn.unsubscribe(id=c.name if round_ == 1 else f"{c.name}-{round_ - 1}")
    done: queue.Queue[str] = queue.Queue()

    class _R(stomp.ConnectionListener):
        def on_receipt(self, frame: stomp.utils.Frame) -> None:
            done.put(frame.headers.get("receipt-id", ""))

    c.conn.set_listener("resub", _R())
    rid = f"resub-{c.name}-{round_}"
    c.conn.subscribe(
        destination, id=f"{c.name}-{round_}", ack="auto", headers={**headers, "receipt": rid}
    )
    try:
        assert done.get(timeout=WAIT) == rid
    except queue.Empty:
        pytest.fail(f"{c.name}: no RECEIPT for the new SUBSCRIBE in {WAIT:g} s")


@pytest.mark.parametrize("broker", ["rabbitmq", "activemq"])
def test_a_released_shard_goes_to_the_next_member_in_line(
    broker: str, amqp: object, consumers: list[Consumer]
) -> None:
    """Three members subscribed in the order a, b, c; the active one releases the queue
    (UNSUBSCRIBE, SUBSCRIBE again): the next in line gets it, the releaser waits at the back.
    So a release walks a shard along the members: a -> b -> c -> a."""
    if broker == "rabbitmq":
        name = f"hw-test.sac-release.{_uid()}"
        _sac_queue(amqp, name)  # type: ignore[arg-type]
        dest, extra = f"/amq/queue/{name}", {}
    else:
        dest, extra = f"/queue/hw-test.exclusive-release.{_uid()}", {"activemq.exclusive": "true"}
    members = {n: _consumer(consumers, broker, n, dest, **extra) for n in "abc"}
    order = []
    for round_ in range(1, 4):
        _send(broker, dest, [str(round_)])
        time.sleep(0.3)  # the delivery to whichever member is active
        active = [n for n, c in members.items() if c.quiet(0)]
        assert len(active) == 1, f"round {round_}: active {active}"
        order.append(active[0])
        _resubscribe(members[active[0]], dest, order.count(active[0]), **extra)
    _send(broker, dest, ["4"])
    time.sleep(0.3)
    order.append(next(n for n, c in members.items() if c.quiet(0)))
    assert order == ["a", "b", "c", "a"]


def test_rabbitmq_last_value_state_queue_over_stomp(consumers: list[Consumer]) -> None:
    """A shard's state queue on RabbitMQ: ``x-max-length:1`` given on SEND and SUBSCRIBE (a
    queue argument the STOMP plugin passes on; overflow drops the head by default) keeps only
    the newest snapshot for the next owner."""
    dest = f"/queue/hw-test.state.{_uid()}"
    # Durable (the /queue/ default: a queue declared durable:false over STOMP went with the
    # sender's connection), gone a minute after its last use (x-expires).
    args = {"x-max-length": "1", "x-expires": "60000"}
    _send("rabbitmq", dest, [f"snapshot {i}" for i in range(5)], **args)
    reader = _consumer(consumers, "rabbitmq", "reader", dest, **args)
    assert [g.body for g in reader.take(1)] == ["snapshot 4"]
    assert reader.quiet() == []


def test_activemq_state_snapshots_expire(consumers: list[Consumer]) -> None:
    """A shard's state queue on ActiveMQ: snapshots sent with a short ``expires`` are gone when
    the next owner drains the queue; the newest (longer-lived) one is what it reads."""
    dest = f"/queue/hw-test.state.{_uid()}"
    now_ms = int(time.time() * 1000)
    _send("activemq", dest, ["snapshot 0", "snapshot 1"], expires=str(now_ms + 200))
    _send("activemq", dest, ["snapshot 2"], expires=str(now_ms + 60_000))
    time.sleep(0.5)
    reader = _consumer(consumers, "activemq", "reader", dest)
    assert [g.body for g in reader.take(1)] == ["snapshot 2"]
    assert reader.quiet() == []


# -- ActiveMQ virtual topics and composite destinations (considered, not chosen) ----------------


def test_activemq_virtual_topic_copies_a_beat_to_each_consumer_group(
    consumers: list[Consumer],
) -> None:
    """ActiveMQ's default virtual topics: a SEND to ``/topic/VirtualTopic.<name>`` is copied to
    each consumer group's queue ``/queue/Consumer.<group>.VirtualTopic.<name>``; the members of
    one group share it (one gets it), another group gets its own copy. A queue per topic per
    group: more broker destinations per topic, not fewer, and no hashing."""
    name = f"VirtualTopic.hwtest{_uid()}.svc-a"
    g1 = [
        _consumer(consumers, "activemq", f"g1-{i}", f"/queue/Consumer.G1.{name}") for i in range(2)
    ]
    g2 = _consumer(consumers, "activemq", "g2", f"/queue/Consumer.G2.{name}")
    _send("activemq", f"/topic/{name}", ["beat"])
    assert [g.body for g in g2.take(1)] == ["beat"]
    time.sleep(0.3)
    got = [g.body for c in g1 for g in c.quiet(0)]
    assert got == ["beat"], f"group G1 got {got}"


def test_activemq_composite_destination_in_one_send(consumers: list[Consumer]) -> None:
    """A client-side composite destination: one SEND to ``/queue/a,/topic/b`` reaches the
    queue and the topic (what a publisher could use to reach a shard queue and still its topic,
    at the price of the topic's destination)."""
    uid = _uid()
    q = _consumer(consumers, "activemq", "q", f"/queue/hwtest{uid}.shard")
    t = _consumer(consumers, "activemq", "t", f"/topic/hwtest{uid}.svc-a")
    _send("activemq", f"/queue/hwtest{uid}.shard,/topic/hwtest{uid}.svc-a", ["beat"])
    assert [g.body for g in q.take(1)] == ["beat"]
    assert [g.body for g in t.take(1)] == ["beat"]
