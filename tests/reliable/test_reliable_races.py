"""Reliable delivery at the edges of a reconnection, against real brokers (issue 14).

- A send made while a new connection is being attached (the other senders still re-sending)
  goes out on it, in order, and a flush completes (item 2).
- A client-individual message whose handler raised is handed over again when the broker
  redelivers it: only an acknowledged id is a duplicate (item 4).
- A RabbitMQ ERROR about one destination never refuses a message to another whose name it
  merely contains (item 11).

Every wait is bounded and names what it waited for.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import heartwire as hw
from tests import brokers as B
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)
from tests.reliable.conftest import (
    BOTH,
    Inbox,
    assert_nothing_left,
    consume_again,
    open_broker,
    open_sender,
    send_copy,
    start_consumer,
    uid,
)

pytestmark = pytest.mark.usefixtures("brokers")


class HoldAttach:
    """A link observer that holds each new connection in the attach step (after the senders'
    re-sends, before the link is published) until :meth:`release`: the window of item 2."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.go = threading.Event()

    def on_attached(self, link: Any) -> None:
        self.inside.set()
        if not self.go.wait(10):
            raise AssertionError("the test never released the attach step")

    def on_receipt(self, link: Any, receipt: str) -> None:
        pass

    def on_error_frame(self, link: Any, headers: dict[str, str], detail: str) -> None:
        pass

    def release(self) -> None:
        self.go.set()


@pytest.mark.parametrize("name", BOTH)
def test_send_during_reconnect_goes_out_in_order_and_flushes(name: str, closing: list[Any]) -> None:
    destination = f"/queue/{uid()}"
    sender_t = open_broker(name, closing)
    consumer_t = open_broker(name, closing)
    inbox = Inbox()
    start_consumer(closing, consumer_t, destination, on_message=inbox)
    sender = hw.ReliableSender(sender_t, destination)
    other = hw.ReliableSender(sender_t, f"/queue/{uid()}")  # a second sender on the transport
    closing.extend([sender, other])
    sender.send(b"before")
    assert sender.flush(10), f"first flush: {sender.stats()}"
    hold = HoldAttach()
    sender_t.add_observer(hold)  # after the tracker: runs once every sender re-sent
    link = sender_t.current_link
    assert link is not None
    link.abort("test: connection lost")
    assert hold.inside.wait(10), "the transport did not reconnect within 10 s"
    in_window = sender.send(b"in the window")  # another thread, while the link is attached
    hold.release()
    wait_for(lambda: sender_t.current_link is not None, 10, "the new link to be published")
    after = sender.send(b"after")
    assert sender.flush(10), f"flush never completed after the reconnect: {sender.stats()}"
    assert sender.outstanding == 0
    wait_for(lambda: b"after" in inbox.bodies(), 10, "the message sent after the reconnect")
    wait_for(lambda: b"in the window" in inbox.bodies(), 5, "the message sent in the window")
    ids = [m.id for m in inbox.messages if m.body != b"before"]
    assert ids == [in_window, after], f"out of order: {inbox.bodies()}"


class FailFirst:
    """A client-individual handler that raises on the first sight of each id (no ack), then
    acks: the application processes a message only on its second delivery."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, bool]] = []  # (id, redelivered) of every call
        self.processed: list[str] = []

    def __call__(self, msg: hw.ReceivedMessage) -> None:
        with self.lock:
            first = all(mid != msg.id for mid, _ in self.seen)
            self.seen.append((msg.id, msg.redelivered))
        if first:
            raise RuntimeError("processing failed")
        with self.lock:
            self.processed.append(msg.id)
        msg.ack()


@pytest.mark.parametrize("name", BOTH)
def test_a_message_the_handler_raised_on_is_handed_over_again(
    name: str, closing: list[Any]
) -> None:
    destination = f"/queue/{uid()}"
    consumer_t = open_broker(name, closing)
    handler = FailFirst()
    consumer = start_consumer(
        closing, consumer_t, destination, ack="client-individual", on_message=handler
    )
    sender = open_sender(closing, open_broker(name, closing), destination)
    mid = sender.send(b"job")
    assert sender.flush(10)
    wait_for(lambda: handler.seen, 10, "the first delivery")
    link = consumer_t.current_link
    assert link is not None
    link.abort("test: connection lost")  # the broker redelivers the unacked job
    wait_for(lambda: handler.processed, 10, f"the redelivery of {mid} to the handler")
    assert handler.processed == [mid]
    assert handler.seen[-1] == (mid, True)
    assert consumer.stats()["duplicates"] == 0
    # Now it is handled: a re-sent copy (same id) is a duplicate, dropped and acknowledged.
    send_copy(consumer_t, consumer, destination, b"job", mid, dropped=1)
    consumer.stop()
    consumer_t.close()
    assert_nothing_left(
        name, closing, destination, sender, "the dropped duplicate was not acknowledged"
    )


@pytest.mark.parametrize("name", BOTH)
def test_client_mode_acks_a_duplicate_only_past_settled_messages(
    name: str, closing: list[Any]
) -> None:
    destination = f"/queue/{uid()}"
    consumer_t = open_broker(name, closing)
    got: list[hw.ReceivedMessage] = []
    lock = threading.Lock()

    def handler(msg: hw.ReceivedMessage) -> None:
        with lock:
            got.append(msg)
        if msg.body == b"a":
            msg.ack()  # "b" is left unacked (its handler failed): it must come back

    consumer = start_consumer(closing, consumer_t, destination, ack="client", on_message=handler)
    sender = open_sender(closing, open_broker(name, closing), destination)
    a = sender.send(b"a")
    b = sender.send(b"b")
    assert sender.flush(10)
    wait_for(lambda: len(got) == 2, 10, "a and b")
    send_copy(consumer_t, consumer, destination, b"a", a, dropped=1)  # a's copy
    link = consumer_t.current_link
    assert link is not None
    link.abort("test: connection lost")  # b was never acked: the broker delivers it again
    wait_for(lambda: any(m.id == b and m.redelivered for m in got), 10, "b redelivered")
    wait_for(lambda: consumer.stats()["duplicates"] == 2, 10, "a's copy dropped again")
    with lock:
        again_b = got[-1]
    assert again_b.id == b
    again_b.ack()  # b handled at last: a's held copy can be acknowledged now
    consumer.stop()
    consumer_t.close()
    assert_nothing_left(name, closing, destination, sender, "a message was left unacknowledged")


def test_a_rabbitmq_error_about_another_name_refuses_nothing(closing: list[Any]) -> None:
    # RabbitMQ's ERROR frames name no receipt: the tracker matches them to a waiting message
    # by the destination they quote. An error about 'amq.<u>-archive' (a refused SUBSCRIBE)
    # quotes <u>, the name of a healthy queue, as a substring: it must refuse none of its
    # messages (RabbitMQ closes the connection; they go again on the next one).
    u = uid()
    t = open_broker("rabbitmq", closing)
    errors: list[hw.DeliveryRefused] = []
    sender = open_sender(closing, t, f"/queue/{u}", on_error=errors.append)
    inbox = Inbox()
    start_consumer(closing, open_broker("rabbitmq", closing), f"/queue/{u}", on_message=inbox)
    # Hold t's receiving thread in a handler, so that the ERROR is read only after the sends.
    entered, go = threading.Event(), threading.Event()

    def hold(link: Any, message: Any) -> None:
        entered.set()
        go.wait(10)

    gate = f"/queue/{uid()}"
    t.subscribe_destination(gate, hold, confirm=5)
    hw.ReliableSender(open_broker("rabbitmq", closing), gate).send(b"hold")
    assert entered.wait(10), "the gate message never arrived"
    bad = t.subscribe_destination(f"/queue/amq.{u}-archive", lambda link, m: None)
    ids = [sender.send(b"m%d" % i) for i in range(20)]
    bad.cancel()  # not restored after the reconnect the ERROR causes
    go.set()
    assert sender.flush(15), f"flush: {sender.stats()}"
    assert errors == [], f"a healthy message was refused: {errors}"
    wait_for(lambda: len({m.id for m in inbox.messages}) >= 20, 10, "all 20 messages")
    assert {m.id for m in inbox.messages} == set(ids)


@pytest.mark.parametrize("name", BOTH)
def test_a_commit_without_its_receipt_is_in_doubt_not_undone(name: str, closing: list[Any]) -> None:
    # COMMIT went out but its receipt did not come in time (timeout=0): the broker may well
    # have applied it, so commit() must not say that nothing took effect.
    destination = f"/queue/{uid()}"
    broker = open_broker(name, closing)
    inbox = Inbox()
    start_consumer(closing, open_broker(name, closing), destination, on_message=inbox)
    tx = broker.transaction(timeout=0)
    tx.begin()
    tx.send(destination, b"committed?")
    with pytest.raises(hw.TransactionFailed) as info:
        tx.commit()
    assert tx.state == "unknown", f"{tx.state}: {info.value}"
    assert "may have been applied" in str(info.value)
    assert info.value.applied is None
    wait_for(lambda: inbox.bodies(), 10, "the message of the commit that 'failed'")
    assert inbox.bodies() == [b"committed?"]


def _ping_frame(t: Any, body: bytes) -> Any:
    # A keep-alive ping as stomp.py hands it to the transport (the broker's delivery).
    from stomp.utils import Frame  # type: ignore[import-untyped]

    headers = {"subscription": "hw-keepalive", "destination": f"/topic/{t._ping_topic}"}
    return Frame("MESSAGE", dict(headers, **{"message-id": uid()}), body)


def test_a_late_ping_never_counts_for_another_link_or_monitor(closing: list[Any]) -> None:
    B.ensure("activemq")
    t: Any = hw.connect(
        B.url("activemq") + "?heartbeat=1&reconnect_interval=0.2&connect_timeout=2"
        "&keepalive_interval=60&keepalive_allowed=5"
    )
    closing.append(t)
    sub = t.subscribe("late.ping", lambda m: None)
    wait_for(lambda: t.stats()["keepalive_returned"] >= 1, 5, "the first ping back")
    first, old = t.keepalive, t.current_link
    assert first is not None and old is not None
    late = _ping_frame(t, first.id.encode())  # the old monitor's ping, read late
    old.abort("test: connection lost")
    wait_for(lambda: t.keepalive is not None and t.keepalive is not first, 10, "a new monitor")
    wait_for(lambda: t.stats()["keepalive_returned"] >= 2, 5, "the new link's first ping back")
    monitor = t.keepalive
    assert monitor is not None
    monitor.ping = None  # no more pings: only what the test delivers counts
    monitor.tick()  # the sign of life seen so far
    assert monitor.tick() == 1
    t._on_frame(old, late)  # a ping the old link's receiver still held
    assert monitor.tick() == 2, "a ping from the old link reset the new link's monitor"
    # The same link, a later monitor: the earlier monitor's ping does not count either.
    stale = _ping_frame(t, monitor.id.encode())
    sub.cancel()  # no subscription: the monitor stops
    returned = t.stats()["keepalive_returned"]
    t.subscribe("late.ping", lambda m: None)  # ... and a new one starts on the same link
    newer = t.keepalive
    assert newer is not None and newer is not monitor
    wait_for(lambda: t.stats()["keepalive_returned"] > returned, 5, "the newer one's ping back")
    newer.ping = None
    newer.tick()
    assert newer.tick() == 1
    t._on_frame(t.current_link, stale)
    assert newer.tick() == 2, "an earlier monitor's ping reset the newer one"


@pytest.mark.parametrize("name", BOTH)
def test_a_late_delivery_from_the_old_link_keeps_client_acks_safe(
    name: str, closing: list[Any]
) -> None:
    destination = f"/queue/{uid()}"
    t = open_broker(name, closing)
    got: list[hw.ReceivedMessage] = []

    def handler(msg: hw.ReceivedMessage) -> None:
        got.append(msg)
        if msg.body == b"B":
            msg.ack()  # A is left unacked

    consumer = hw.Consumer(t, destination, ack="client", on_message=handler)
    consumer.start()
    sender = open_sender(closing, open_broker(name, closing), destination)
    b = sender.send(b"B")
    sender.send(b"A")
    assert sender.flush(10)
    wait_for(lambda: len(got) == 2, 10, "B and A")
    old = t.current_link
    assert old is not None
    old.abort("test: connection lost")
    wait_for(lambda: any(m.body == b"A" and m.redelivered for m in got), 10, "A redelivered")
    from stomp.utils import Frame  # type: ignore[import-untyped]

    late = {"subscription": consumer._sub.id, "destination": destination, "message-id": "x1"}
    t._on_frame(old, Frame("MESSAGE", dict(late, ack="x1"), b"late"))  # held by the old reader
    send_copy(t, consumer, destination, b"B", b, dropped=1)  # B's copy
    consumer.stop()
    t.close()
    rest = consume_again(name, closing, destination)
    wait_for(lambda: b"A" in rest.bodies(), 10, "A, never acknowledged, delivered again")


def test_a_sender_made_while_a_connection_is_attached_sends_on_it(closing: list[Any]) -> None:
    destination = f"/queue/{uid()}"
    t = open_broker("activemq", closing)
    closing.append(hw.ReliableSender(t, f"/queue/{uid()}"))  # the tracker exists already
    inbox = Inbox()
    start_consumer(closing, open_broker("activemq", closing), destination, on_message=inbox)
    hold = HoldAttach()
    t.add_observer(hold)
    link = t.current_link
    assert link is not None
    link.abort("test: connection lost")
    assert hold.inside.wait(10), "the transport did not reconnect within 10 s"
    made: list[hw.ReliableSender] = []
    maker = threading.Thread(target=lambda: made.append(hw.ReliableSender(t, destination)))
    maker.start()
    maker.join(5)
    assert made, "creating a sender waited for the connection being attached"
    sender = made[0]
    closing.append(sender)
    mid = sender.send(b"new sender")
    hold.release()
    assert sender.flush(10), f"flush never completed: {sender.stats()}"
    wait_for(lambda: inbox.messages, 10, "the new sender's message")
    assert [m.id for m in inbox.messages] == [mid]
