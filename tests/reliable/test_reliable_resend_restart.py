"""Reliable delivery: follow-ups of the review of issue 14's transport fixes (R2), against real
brokers.

- A. ``ack="client"``: a NACK settles only its own message on ActiveMQ (RabbitMQ's is
  cumulative); a later duplicate's cumulative ACK must not acknowledge an earlier message whose
  handler raised.
- B. A send that fails while the backlog is re-sent on a new connection ends that connection;
  nothing is stranded: the next connection re-sends it all, in order, and the flush completes.
- C. The backlog re-send is written after the new connection is published, outside the
  connector's lock: while it is held up, a plain publisher on that transport and one on another
  broker (the same scheduler thread) keep beating.
- D. ``stop()`` then ``start()`` hands a message whose handler raised over again on both
  brokers (RabbitMQ keeps it unacknowledged on the connection unless it is nacked back), and the
  ack bookkeeping starts afresh with the new subscription.
- F. Meanwhile a handler on the new connection's receiving thread can subscribe and publish.
- E's pattern on STOMP: waiting for a flush on the receiving thread fails fast.

Every wait is bounded and names what it waited for.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import heartwire as hw
from heartwire.transport import Message
from heartwire.transport.link import StompLink
from heartwire.transport.memory import MemoryBroker
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


@pytest.mark.parametrize("name", BOTH)
def test_client_mode_nack_never_lets_a_duplicate_ack_an_unhandled_message(
    name: str, closing: list[Any]
) -> None:
    # m0 acked, m1's handler raises (never acked), m2 nacked once; then a copy of m0 arrives.
    # Its ACK (cumulative in client mode) may only go once nothing before it is unsettled: on
    # ActiveMQ the NACK of m2 does not settle m1, so m1 must come back to a later consumer.
    destination = f"/queue/{uid()}"
    consumer_t = open_broker(name, closing)
    lock = threading.Lock()
    seen: list[tuple[bytes, bool]] = []

    def handler(msg: hw.ReceivedMessage) -> None:
        with lock:
            first = all(body != msg.body for body, _ in seen)
            seen.append((msg.body, msg.redelivered))
        if msg.body == b"m0":
            msg.ack()
        elif msg.body == b"m1":
            raise RuntimeError("processing failed")  # left unacked: must not be lost
        elif msg.body == b"m2" and first:
            msg.nack()  # (later copies of m2 are left unacked)

    consumer = start_consumer(
        closing,
        consumer_t,
        destination,
        ack="client",
        on_message=handler,
        on_error=lambda e, m: None,
    )
    sender = open_sender(closing, open_broker(name, closing), destination)
    m0 = sender.send(b"m0")
    sender.send(b"m1")
    sender.send(b"m2")
    assert sender.flush(10), f"flush: {sender.stats()}"
    wait_for(lambda: len(seen) >= 3, 10, "m0, m1 and m2 at the handler")
    send_copy(consumer_t, consumer, destination, b"m0", m0, dropped=1)  # m0's copy
    consumer.stop()
    consumer_t.close()  # whatever the connection still held unacked goes back to the queue
    rest = consume_again(name, closing, destination)
    wait_for(
        lambda: b"m1" in rest.bodies(),
        10,
        f"m1 (its handler raised, never acked) back at a new consumer; handler saw {seen}, "
        f"the new consumer got {rest.bodies()}",
    )


FAILOVER_THREAD = "heartwire-stomp-failover"


class FaultySend:
    """Patches :meth:`StompLink.send` for the failover thread's sends to ``destination`` (the
    backlog re-send): ``fail`` makes the next one raise once; ``hold`` makes them wait for
    :meth:`release` (bounded), signalling ``entered``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, destination: str) -> None:
        self.destination = destination
        self.fail = False
        self.hold = False
        self.entered = threading.Event()
        self.go = threading.Event()
        self.failed = 0
        original = StompLink.send

        def send(
            link: StompLink,
            dest: str,
            body: bytes,
            headers: dict[str, str],
            timeout: float | None = None,
        ) -> None:
            if dest == self.destination and threading.current_thread().name == FAILOVER_THREAD:
                if self.fail:
                    self.fail = False
                    self.failed += 1
                    raise TimeoutError("test: the send timed out")  # the socket stays up
                if self.hold:
                    self.entered.set()
                    if not self.go.wait(15):
                        raise AssertionError("the test never released the re-send")
            original(link, dest, body, headers, timeout)

        monkeypatch.setattr(StompLink, "send", send)

    def release(self) -> None:
        self.hold = False
        self.go.set()


def reconnect(t: Any) -> Any:
    """Abort ``t``'s link (the failover thread reconnects); the old link."""
    link = t.current_link
    assert link is not None
    link.abort("test: connection lost")
    return link


@pytest.mark.parametrize("name", BOTH)
def test_a_send_failing_in_the_resend_ends_the_link_and_strands_nothing(
    name: str, closing: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = f"/queue/{uid()}"
    t = open_broker(name, closing)
    inbox = Inbox()
    start_consumer(closing, open_broker(name, closing), destination, on_message=inbox)
    sender = open_sender(closing, t, destination)
    ids = [sender.send(b"m0")]
    assert sender.flush(10), f"first flush: {sender.stats()}"
    faulty = FaultySend(monkeypatch, destination)
    old = reconnect(t)
    ids += [sender.send(b"m%d" % i) for i in (1, 2, 3)]  # queued: no connection
    faulty.fail = True  # the first write of the re-send raises, the connection stays up
    wait_for(lambda: t.current_link not in (None, old), 10, "a new connection")
    ids.append(sender.send(b"m4"))
    assert sender.flush(10), f"the flush never completed: {sender.stats()}"
    assert faulty.failed == 1, "the injected failure did not happen"
    wait_for(lambda: len({m.id for m in inbox.messages}) == 5, 10, "m0..m4 at the consumer")
    got = list(dict.fromkeys(m.id for m in inbox.messages))  # duplicates dropped anyway
    assert got == ids, f"lost or out of order: {inbox.bodies()}"


class Beats(hw.PublisherListener):
    def __init__(self) -> None:
        self.count = 0

    def on_sent(self, event: Any) -> None:
        self.count += 1


def test_a_held_up_resend_delays_no_other_publisher(
    closing: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Items 16/17's rule: one slow thing never delays another's beats. The re-send of a
    # reliable backlog is held in its first write; meanwhile a plain publisher on the same
    # transport (publish(timeout=0) on the shared scheduler thread) and one on another broker
    # must keep beating.
    destination = f"/queue/{uid()}"
    t = open_broker("activemq", closing)
    sender = open_sender(closing, t, destination, persistent=False)
    here, elsewhere = Beats(), Beats()
    p_here = hw.HeartbeatPublisher(t, f"svc.{uid()}", 0.05, listeners=[here])
    p_elsewhere = hw.HeartbeatPublisher(
        MemoryBroker(), "svc.elsewhere", 0.02, listeners=[elsewhere]
    )
    closing.extend([p_here, p_elsewhere])
    faulty = FaultySend(monkeypatch, destination)
    faulty.hold = True
    old = reconnect(t)
    for i in range(20):
        sender.send(b"backlog %d" % i)
    p_here.start()
    p_elsewhere.start()
    assert faulty.entered.wait(10), "the re-send never started"
    try:
        here0, elsewhere0 = here.count, elsewhere.count
        time.sleep(1.0)  # the measuring window (the re-send is held all along)
        beats_here, beats_elsewhere = here.count - here0, elsewhere.count - elsewhere0
        published = t.current_link not in (None, old)
    finally:
        faulty.release()
    assert beats_elsewhere >= 25, (
        f"a publisher on another broker sent {beats_elsewhere} beats in 1 s (50 due) while a "
        "re-send was held up"
    )
    assert beats_here >= 10, (
        f"a plain publisher on the reconnected transport sent {beats_here} beats in 1 s "
        "(20 due) while the re-send was held up"
    )
    assert published, "the new link was not published while its re-send was held up"
    assert sender.flush(10), f"the held re-send never completed: {sender.stats()}"


def test_a_handler_on_the_new_link_subscribes_and_publishes_during_the_resend(
    closing: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A handler runs on the new connection's receiving thread while the backlog is being
    # re-sent (held up here): subscribe() and publish() from it must not wait for the re-send.
    destination = f"/queue/{uid()}"
    topic = f"t.{uid()}"
    t = open_broker("activemq", closing)
    other = open_broker("activemq", closing)
    sender = open_sender(closing, t, destination)
    done: list[str] = []
    entered = threading.Event()

    def handler(message: Message) -> None:
        entered.set()
        t.subscribe(f"{topic}.more", lambda m: None)
        done.append("subscribed")
        t.publish(f"{topic}.out", b"from a handler", timeout=5)
        done.append("published")

    t.subscribe(topic, handler)
    faulty = FaultySend(monkeypatch, destination)
    faulty.hold = True
    reconnect(t)
    sender.send(b"backlog")
    try:
        assert faulty.entered.wait(10), "the re-send never started"
        # Delivered on the new link once the broker has its restored subscription (a topic
        # message sent before that reaches no one: send again until one arrives).
        deadline = time.monotonic() + 10
        while not entered.wait(0.1):
            assert time.monotonic() < deadline, "the handler never ran on the new link"
            other.publish(topic, b"go")
        wait_for(
            lambda: len(done) == 2,
            5,
            f"subscribe() and publish() from the handler while the re-send is held (did: {done})",
        )
    finally:
        faulty.release()
    assert sender.flush(10), f"flush: {sender.stats()}"


@pytest.mark.parametrize("ack", ["client-individual", "client"])
@pytest.mark.parametrize("name", BOTH)
def test_stop_then_start_hands_an_unacked_message_over_again(
    name: str, ack: str, closing: list[Any]
) -> None:
    destination = f"/queue/{uid()}"
    t = open_broker(name, closing)
    lock = threading.Lock()
    seen: list[tuple[str, bool]] = []
    processed: list[str] = []

    def handler(msg: hw.ReceivedMessage) -> None:
        with lock:
            first = all(mid != msg.id for mid, _ in seen)
            seen.append((msg.id, msg.redelivered))
        if first:
            raise RuntimeError("processing failed")  # not acked: must come back
        with lock:
            processed.append(msg.id)
        msg.ack()

    consumer = start_consumer(
        closing, t, destination, ack=ack, on_message=handler, on_error=lambda e, m: None
    )
    sender = open_sender(closing, open_broker(name, closing), destination)
    job = sender.send(b"job")
    assert sender.flush(10), f"flush: {sender.stats()}"
    wait_for(lambda: seen, 10, "the first delivery")
    consumer.stop()
    consumer.start()  # the same transport and connection
    wait_for(lambda: processed, 10, f"the job handed over again after stop()+start(); seen {seen}")
    assert processed == [job]
    assert seen[-1] == (job, True)
    # Handled now: a copy is dropped and acknowledged at once, whatever the earlier
    # subscription left in the books.
    send_copy(t, consumer, destination, b"job", job, dropped=1)
    consumer.stop()
    t.close()
    assert_nothing_left(name, closing, destination, sender, "the dropped copy was not acknowledged")


@pytest.mark.parametrize("name", BOTH)
def test_client_mode_restart_never_acks_what_the_old_subscription_left(
    name: str, closing: list[Any]
) -> None:
    # X's handler raised; stop()+start(); Y is handled and acked (cumulative in client mode).
    # On RabbitMQ that ACK covered every unacked delivery of the connection, X included: X was
    # lost. X must be handed over again and processed.
    destination = f"/queue/{uid()}"
    t = open_broker(name, closing)
    lock = threading.Lock()
    seen: list[bytes] = []

    def handler(msg: hw.ReceivedMessage) -> None:
        with lock:
            first = msg.body not in seen
            seen.append(msg.body)
        if msg.body == b"X" and first:
            raise RuntimeError("processing failed")
        msg.ack()

    consumer = start_consumer(
        closing, t, destination, ack="client", on_message=handler, on_error=lambda e, m: None
    )
    sender = open_sender(closing, open_broker(name, closing), destination)
    sender.send(b"X")
    assert sender.flush(10)
    wait_for(lambda: b"X" in seen, 10, "X's first delivery")
    consumer.stop()
    consumer.start()
    sender.send(b"Y")
    assert sender.flush(10)
    wait_for(lambda: seen.count(b"X") >= 2, 10, f"X handed over again (handler saw {seen})")


def test_restart_books_afresh_so_a_duplicate_is_acked_at_once(closing: list[Any]) -> None:
    # ActiveMQ, client mode: W handled; X's handler raised, stop()+start(), X comes back and is
    # nacked (ActiveMQ's NACK settles X alone). The first subscription's record of X must not
    # hold back the ACK of W's copy (dropped as a duplicate) for good.
    destination = f"/queue/{uid()}"
    t = open_broker("activemq", closing)
    seen: list[bytes] = []

    def handler(msg: hw.ReceivedMessage) -> None:
        seen.append(msg.body)
        if msg.body == b"X":
            if seen.count(b"X") == 1:
                raise RuntimeError("processing failed")
            msg.nack()
        else:
            msg.ack()

    consumer = start_consumer(
        closing, t, destination, ack="client", on_message=handler, on_error=lambda e, m: None
    )
    sender = open_sender(closing, open_broker("activemq", closing), destination)
    w = sender.send(b"W")
    sender.send(b"X")
    assert sender.flush(10)
    wait_for(lambda: b"X" in seen, 10, "W and X")
    consumer.stop()
    consumer.start()
    wait_for(lambda: seen.count(b"X") == 2, 10, "X again after the restart")
    send_copy(t, consumer, destination, b"W", w, dropped=1)  # W's copy
    consumer.stop()
    t.close()
    assert_nothing_left(
        "activemq", closing, destination, sender, "W's dropped copy was never acknowledged"
    )


def test_waiting_for_a_flush_on_the_receiving_thread_fails_fast(closing: list[Any]) -> None:
    # The same pattern as the embedded broker's re-entrant flush, on STOMP: the receipts a
    # flush waits for are read by the receiving thread, so a handler waiting there could never
    # see them. It must fail at once, naming why, instead of waiting out its timeout (or hanging).
    t = open_broker("activemq", closing)
    sender = open_sender(closing, t, f"/queue/{uid()}")
    outcome: list[tuple[str, float]] = []

    def handler(message: Message) -> None:
        sender.send(b"reply")
        began = time.monotonic()
        try:
            ok = sender.flush(3.0)
        except RuntimeError as exc:
            outcome.append((f"raised: {exc}", time.monotonic() - began))
        else:
            outcome.append((f"returned {ok}", time.monotonic() - began))

    topic = f"t.{uid()}"
    t.subscribe(topic, handler)
    deadline = time.monotonic() + 10
    while not outcome:  # a topic message sent before the SUBSCRIBE landed reaches no one
        assert time.monotonic() < deadline, "the handler never ran"
        t.publish(topic, b"go")
        time.sleep(0.1)
    what, took = outcome[0]
    assert what.startswith("raised") and "receipts" in what and took < 1.0, (what, took)
    assert sender.flush(10), "the reply was never receipted"
