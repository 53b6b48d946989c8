"""Reliable delivery through broker crashes (issue 5): 100 000 messages through a
ReliableSender, a flush every 1 000, the broker kill -9-ed and restarted three times during the
run, on ActiveMQ and on RabbitMQ.

The durable consumer must receive every id at least once (each handed over once: duplicates
from re-sends and redeliveries are dropped and counted), and every flush must be acknowledged.
ActiveMQ keeps persistent messages and durable subscriptions in a KahaDB store, RabbitMQ its
durable queues in its Mnesia directory; scripts/brokers keeps both across kill9 + start.

The run's figures (loss, duplicates, resends, time) are printed (``pytest -s``) for the notes.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import heartwire as hw
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)
from tests.reliable.conftest import FAST

pytestmark = pytest.mark.usefixtures("brokers")

TOTAL = 100_000
FLUSH_EVERY = 1_000
KILLS_AT = (25_000, 50_000, 75_000)
# At most this many flushes unacknowledged before the producer waits (bounded in-flight data).
FLUSH_WINDOW = 5
# Bounds on the waits (generous: the machine is shared; a broker restart takes a few seconds).
FLUSH_WAIT = 90.0
DRAIN_WAIT = 180.0
# ... of which at most this long without a new message.
DRAIN_STALL = 20.0


@pytest.mark.parametrize("name", ["activemq", "rabbitmq"])
def test_100k_messages_through_three_broker_kills(name: str) -> None:
    B.ensure(name)
    tag = uuid.uuid4().hex[:8]
    destination = f"/topic/hw.kill.{tag}"
    url = B.url(name) + "?" + FAST
    lock = threading.Lock()
    received: set[str] = set()
    handed_twice: list[str] = []
    redelivered = 0

    def on_message(msg: hw.ReceivedMessage) -> None:
        nonlocal redelivered
        with lock:
            if msg.id in received:
                handed_twice.append(msg.id)
            received.add(msg.id)
            redelivered += msg.redelivered
        msg.ack()

    consumer_broker = hw.connect(url, client_id=f"hw-kill-{tag}")
    sender_broker = hw.connect(url)
    consumer = hw.Consumer(
        consumer_broker,
        destination,
        ack="client-individual",
        durable_name="kill-test",
        on_message=on_message,
    )
    acks: list[hw.FlushAck] = []
    errors: list[hw.DeliveryRefused] = []
    sender = hw.ReliableSender(
        sender_broker, destination, on_flushed=acks.append, on_error=errors.append
    )
    killer: threading.Thread | None = None
    kill_errors: list[BaseException] = []

    def kill_and_restart() -> None:
        try:
            B.kill9(name)
            B.start(name)
        except BaseException as exc:  # reported by the test thread
            kill_errors.append(exc)

    started = time.monotonic()
    try:
        consumer.start()
        sent: list[str] = []
        requests: list[int] = []
        for i in range(TOTAL):
            sent.append(sender.send(b"m%d" % i))
            if (i + 1) % FLUSH_EVERY == 0:
                requests.append(sender.request_flush())
                if len(requests) > FLUSH_WINDOW:
                    back = requests[-FLUSH_WINDOW - 1]
                    assert sender.wait_flushed(back, FLUSH_WAIT), (
                        f"flush {back} not acknowledged within {FLUSH_WAIT:g} s "
                        f"({sender.stats()}, broker up: {B.stomp_ready(B.PORTS[name])}, "
                        f"restart errors: {kill_errors})"
                    )
            if i + 1 in KILLS_AT:
                if killer is not None:
                    killer.join(60)
                    assert not killer.is_alive(), "the previous broker restart did not finish"
                killer = threading.Thread(target=kill_and_restart, name="kill9")
                killer.start()
        if killer is not None:
            killer.join(120)
            assert not killer.is_alive(), "the last broker restart did not finish in 120 s"
        assert not kill_errors, f"scripts/brokers failed: {kill_errors}"
        for rid in requests:
            assert sender.wait_flushed(rid, FLUSH_WAIT), (
                f"flush {rid} not acknowledged within {FLUSH_WAIT:g} s: {sender.stats()}"
            )
        flushed_at = time.monotonic()
        # Wait while the consumer makes progress: a slow drain on a loaded machine is not a
        # loss; an id still missing once nothing has arrived for DRAIN_STALL is (bounded by
        # DRAIN_WAIT in all).
        deadline = flushed_at + DRAIN_WAIT
        seen, progress_at = -1, flushed_at
        while time.monotonic() < deadline:
            with lock:
                count = len(received)
            if count >= TOTAL:
                break
            now = time.monotonic()
            if count != seen:
                seen, progress_at = count, now
            elif now - progress_at > DRAIN_STALL:
                break
            time.sleep(0.05)
        stalled_for = time.monotonic() - progress_at
        with lock:
            missing = set(sent) - received
        stats = consumer.stats()
        sstats = sender.stats()
        print(
            f"\nkill test on {name}: {TOTAL} sent, {len(received)} distinct received, "
            f"{len(missing)} lost, {stats['duplicates']} duplicates dropped, {redelivered} flagged "
            f"redelivered, {sstats['resent']} re-sent by the sender, {sstats['refused']} refused "
            f"by the broker, flushes "
            f"{sstats['flushes_acked']}/{len(requests)} acked, "
            f"reconnects sender={sender_broker.stats()['reconnects']} "
            f"consumer={consumer_broker.stats()['reconnects']}, "
            f"{flushed_at - started:.1f} s to the last flush ack, "
            f"{time.monotonic() - started:.1f} s in all"
        )
        # (A refused message counts as processed for its flush: say so if the lost ids are those.)
        assert not missing, (
            f"{len(missing)} ids never delivered (nothing new for {stalled_for:.1f} s), "
            f"e.g. {sorted(missing)[:5]}; "
            f"{len(errors)} refused by the broker, e.g. {errors[:2]}"
        )
        assert not handed_twice, f"ids handed over twice: {handed_twice[:5]}"
        assert not errors, f"the broker refused messages: {errors[:3]}"
        assert [a.request_id for a in acks] == requests, "a flush was not acknowledged in order"
        assert sum(a.count for a in acks) == TOTAL
        assert sender.outstanding == 0
        assert sender_broker.stats()["reconnects"] >= len(KILLS_AT)
        assert stats["delivered"] == TOTAL, "every id handed over exactly once"
    finally:
        if killer is not None:
            killer.join(120)
        B.ensure(name)
        sender.close()
        consumer.stop(forget=True)
        sender_broker.close()
        consumer_broker.close()
