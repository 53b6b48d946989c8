"""Reliable delivery on the embedded broker (memory://): receipts are immediate, queues and
durable subscriptions are kept in the process, transactions are buffered until commit."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import heartwire as hw
from heartwire.transport import Message
from heartwire.transport.memory import MemoryBroker
from heartwire.transport.memory_store import MemoryStore, store_of


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker()


def collect(
    into: list[hw.ReceivedMessage], ack: bool = True
) -> Callable[[hw.ReceivedMessage], None]:
    def handler(msg: hw.ReceivedMessage) -> None:
        into.append(msg)
        if ack:
            msg.ack()

    return handler


def test_flush_is_acknowledged_at_once_and_counts_messages(broker: MemoryBroker) -> None:
    acks: list[hw.FlushAck] = []
    sender = hw.ReliableSender(broker, "/queue/q", on_flushed=acks.append)
    ids = [sender.send(b"x%d" % i) for i in range(3)]
    assert len(set(ids)) == 3 and sender.outstanding == 0
    first = sender.request_flush()
    sender.send("text body")
    second = sender.request_flush()
    third = sender.request_flush()
    assert acks == [hw.FlushAck(first, 3), hw.FlushAck(second, 1), hw.FlushAck(third, 0)]
    assert sender.wait_flushed(first, 0)
    assert store_of(broker).pending("/queue/q") == 4  # nobody consumed yet


def test_listener_objects_get_flushes_and_errors(broker: MemoryBroker) -> None:
    class Rec(hw.SenderListener):
        def __init__(self) -> None:
            self.flushed: list[hw.FlushAck] = []

        def on_flushed(self, ack: hw.FlushAck) -> None:
            self.flushed.append(ack)

    rec = Rec()
    sender = hw.ReliableSender(broker, "/topic/t", listeners=[rec])
    sender.send(b"a")
    sender.request_flush()
    assert rec.flushed == [hw.FlushAck(1, 1)]
    with pytest.raises(TypeError, match="on_flushed or on_error"):
        sender.add_listener(object())


@pytest.mark.parametrize(
    "destination", ["queue/x", "/queue/", "/exchange/x", "/topic/a b", "/topic/a:b", ""]
)
def test_bad_destinations_are_refused_by_name(broker: MemoryBroker, destination: str) -> None:
    with pytest.raises(ValueError, match="destination"):
        hw.ReliableSender(broker, destination)
    with pytest.raises(ValueError, match="destination"):
        hw.Consumer(broker, destination)


def test_bad_arguments_name_the_argument(broker: MemoryBroker) -> None:
    with pytest.raises(ValueError, match="ack"):
        hw.Consumer(broker, "/queue/q", ack="manual")
    with pytest.raises(ValueError, match="durable_name"):
        hw.Consumer(broker, "/queue/q", durable_name="d")  # durable needs a topic
    with pytest.raises(ValueError, match="dedup_window"):
        hw.Consumer(broker, "/queue/q", dedup_window=0)
    sender = hw.ReliableSender(broker, "/queue/q")
    with pytest.raises(TypeError, match="body"):
        sender.send(123)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="header"):
        sender.send(b"x", {"n": 1})  # type: ignore[dict-item]
    assert sender.stats()["sent"] == 0


def test_queue_round_robin_and_waiting_messages(broker: MemoryBroker) -> None:
    sender = hw.ReliableSender(broker, "/queue/jobs")
    sender.send(b"early")  # no consumer yet: kept
    a: list[hw.ReceivedMessage] = []
    b: list[hw.ReceivedMessage] = []
    ca = hw.Consumer(broker, "/queue/jobs", on_message=collect(a)).start()
    assert [m.body for m in a] == [b"early"]
    hw.Consumer(broker, "/queue/jobs", on_message=collect(b)).start()
    for i in range(4):
        sender.send(b"%d" % i)
    assert len(a) + len(b) == 5 and len(b) == 2
    ca.stop()
    sender.send(b"late")
    assert b[-1].body == b"late"


def test_durable_topic_subscription_keeps_messages_while_stopped(broker: MemoryBroker) -> None:
    got: list[hw.ReceivedMessage] = []
    c = hw.Consumer(broker, "/topic/alerts", durable_name="risk", on_message=collect(got))
    c.start()
    c.stop()
    plain: list[hw.ReceivedMessage] = []
    hw.Consumer(broker, "/topic/alerts", on_message=collect(plain)).start()
    sender = hw.ReliableSender(broker, "/topic/alerts")
    ids = [sender.send(b"a1"), sender.send(b"a2")]
    assert got == [] and [m.id for m in plain] == ids
    assert store_of(broker).pending("/topic/alerts", "risk") == 2
    c.start()
    assert [m.id for m in got] == ids
    c.stop(forget=True)
    sender.send(b"a3")
    c.start()
    assert len(got) == 2, "a forgotten subscription kept nothing"


def test_topic_messages_also_reach_plain_subscribers(broker: MemoryBroker) -> None:
    seen: list[Message] = []
    broker.subscribe("svc.alerts", seen.append)
    hw.ReliableSender(broker, "/topic/svc.alerts").send(b"x")
    assert [m.body for m in seen] == [b"x"] and seen[0].headers["persistent"] == "true"


def test_unacked_messages_are_redelivered_flagged(broker: MemoryBroker) -> None:
    first: list[hw.ReceivedMessage] = []
    c1 = hw.Consumer(broker, "/queue/w", ack="client-individual", on_message=first.append)
    c1.start()
    sender = hw.ReliableSender(broker, "/queue/w")
    ids = [sender.send(b"1"), sender.send(b"2")]
    first[0].ack()
    c1.stop()  # dies with the second unacknowledged
    second: list[hw.ReceivedMessage] = []
    hw.Consumer(broker, "/queue/w", ack="client-individual", on_message=collect(second)).start()
    assert [(m.id, m.redelivered) for m in second] == [(ids[1], True)]


def test_client_ack_is_cumulative_and_nack_dead_letters(broker: MemoryBroker) -> None:
    got: list[hw.ReceivedMessage] = []
    c = hw.Consumer(broker, "/queue/c", ack="client", on_message=got.append)
    c.start()
    sender = hw.ReliableSender(broker, "/queue/c")
    for i in range(4):
        sender.send(b"%d" % i)
    got[2].ack()  # acknowledges 0, 1 and 2
    got[3].nack()
    c.stop()
    store = store_of(broker)
    assert store.pending("/queue/c") == 0
    assert [m.body for m in store.dead_letters] == [b"3"]
    assert c.stats()["acked"] == 1 and c.stats()["nacked"] == 1


def test_duplicates_are_dropped_and_counted(broker: MemoryBroker) -> None:
    got: list[hw.ReceivedMessage] = []
    c = hw.Consumer(broker, "/queue/d", on_message=got.append, dedup_window=2)
    c.start()
    store = store_of(broker)
    for mid in ("a", "b", "a", "c", "a"):  # the last "a" is older than the window of 2
        store.send("/queue/d", mid.encode(), {"hw-message-id": mid})
    assert [m.id for m in got] == ["a", "b", "c", "a"]
    assert c.stats()["duplicates"] == 1 and c.stats()["dedup_evicted"] >= 1


def test_dedup_off_hands_everything_over(broker: MemoryBroker) -> None:
    got: list[hw.ReceivedMessage] = []
    hw.Consumer(broker, "/queue/d", on_message=got.append, dedup=False).start()
    for _ in range(2):
        store_of(broker).send("/queue/d", b"x", {"hw-message-id": "same"})
    assert len(got) == 2


def test_handler_errors_go_to_on_error_and_are_counted(broker: MemoryBroker) -> None:
    errors: list[tuple[Exception, hw.ReceivedMessage]] = []

    def boom(msg: hw.ReceivedMessage) -> None:
        raise RuntimeError("bad")

    c = hw.Consumer(
        broker, "/queue/e", on_message=boom, on_error=lambda e, m: errors.append((e, m))
    )
    c.start()
    mid = hw.ReliableSender(broker, "/queue/e").send(b"x")
    assert [m.id for _, m in errors] == [mid] and c.stats()["handler_errors"] == 1


def test_transaction_commit_delivers_all_abort_nothing(broker: MemoryBroker) -> None:
    got: list[hw.ReceivedMessage] = []
    hw.Consumer(broker, "/queue/t", on_message=got.append).start()
    with pytest.raises(KeyError), broker.transaction() as tx:
        tx.send("/queue/t", b"no 1")
        tx.send("/queue/t", b"no 2")
        raise KeyError("abort")
    assert got == [] and tx.state == "aborted"
    with broker.transaction() as tx:
        tx.send("/queue/t", b"yes 1")
        assert got == [], "nothing is delivered before commit"
        tx.send("/queue/t", b"yes 2")
    assert [m.body for m in got] == [b"yes 1", b"yes 2"] and tx.state == "committed"
    with pytest.raises(hw.TransactionFailed, match="committed"):
        tx.send("/queue/t", b"late")


def test_acks_in_a_transaction_apply_on_commit_only(broker: MemoryBroker) -> None:
    got: list[hw.ReceivedMessage] = []
    c = hw.Consumer(broker, "/queue/a", ack="client-individual", on_message=got.append)
    c.start()
    sender = hw.ReliableSender(broker, "/queue/a")
    sender.send(b"1")
    sender.send(b"2")
    with pytest.raises(RuntimeError), broker.transaction() as tx:
        got[0].ack(tx)
        raise RuntimeError("abort")
    with broker.transaction() as tx:
        got[1].ack(tx)
    c.stop()  # message 1's ack was aborted: it is redelivered; 2 is gone
    again: list[hw.ReceivedMessage] = []
    hw.Consumer(broker, "/queue/a", on_message=again.append, dedup=False).start()
    assert [(m.body, m.redelivered) for m in again] == [(b"1", True)]


def test_alert_publisher_turns_monitor_events_into_json_alerts(broker: MemoryBroker) -> None:
    clock = hw.ManualClock()
    got: list[hw.ReceivedMessage] = []
    risk = hw.Consumer(broker, "/topic/alerts", durable_name="risk", on_message=got.append)
    risk.start()
    risk.stop()  # offline while the failure happens
    sender = hw.ReliableSender(broker, "/topic/alerts")
    alerts = hw.AlertListener(sender, source="mon-1")
    mon = hw.HeartbeatMonitor(broker, "svc.>", clock=clock, listeners=[alerts])
    mon.expect("svc.a")
    mon.start()
    clock.advance(3.0)  # missed periods past any grace
    mon.stop()
    assert alerts.published >= 1
    risk.start()
    first = json.loads(got[0].body)
    assert first["alert"] == "failed" and first["topic"] == "svc.a" and first["source"] == "mon-1"
    assert got[0].headers["hw-alert"] == "failed"
    assert [m.id for m in got] == alerts.message_ids


def test_alert_publisher_needs_a_sender() -> None:
    with pytest.raises(TypeError, match="sender"):
        hw.AlertListener(object())


def test_a_message_the_handler_raised_on_comes_back_after_a_restart(
    broker: MemoryBroker,
) -> None:
    calls: list[tuple[str, bool]] = []

    def fail_first(msg: hw.ReceivedMessage) -> None:
        first = all(mid != msg.id for mid, _ in calls)
        calls.append((msg.id, msg.redelivered))
        if first:
            raise RuntimeError("processing failed")  # not acked
        msg.ack()

    c = hw.Consumer(broker, "/queue/r", ack="client-individual", on_message=fail_first)
    c.start()
    mid = hw.ReliableSender(broker, "/queue/r").send(b"job")
    c.stop()  # the unacked job goes back to the queue
    c.start()  # ... and is delivered again: it was never handled
    assert calls == [(mid, False), (mid, True)]
    assert c.stats()["duplicates"] == 0 and c.stats()["acked"] == 1
    store_of(broker).send("/queue/r", b"job", {"hw-message-id": mid})  # a copy: handled now
    assert len(calls) == 2 and c.stats()["duplicates"] == 1
    c.stop()
    assert store_of(broker).pending("/queue/r") == 0, "the dropped copy was not acknowledged"


def client_consumer_past_a(
    broker: MemoryBroker, queue: str
) -> tuple[hw.Consumer, list[hw.ReceivedMessage], MemoryStore]:
    """A started ``ack="client"`` consumer of ``queue`` that got message "a" and acked it;
    what it got, and the broker's store."""
    got: list[hw.ReceivedMessage] = []
    c = hw.Consumer(broker, queue, ack="client", on_message=got.append)
    c.start()
    store = store_of(broker)
    store.send(queue, b"a", {"hw-message-id": "a"})
    got[0].ack()
    return c, got, store


def test_client_mode_holds_a_duplicate_ack_behind_an_unsettled_message(
    broker: MemoryBroker,
) -> None:
    c, got, store = client_consumer_past_a(broker, "/queue/h")
    store.send("/queue/h", b"b", {"hw-message-id": "b"})  # left unacked for now
    store.send("/queue/h", b"a", {"hw-message-id": "a"})  # a copy of a: dropped
    assert [m.body for m in got] == [b"a", b"b"] and c.stats()["duplicates"] == 1
    c.stop()  # acking the copy would have acked b too: b must come back
    c.start()
    assert [(m.body, m.redelivered) for m in got[2:]] == [(b"b", True)]
    got[2].ack()  # the copy of a (delivered again, dropped again) is acked with b
    c.stop()
    assert store.pending("/queue/h") == 0


def test_a_flush_waits_for_a_send_still_being_stored(broker: MemoryBroker) -> None:
    # Another thread's send took its sequence number but has not stored its message yet: a
    # flush requested now covers it and must not be acknowledged before it is stored.
    got: list[hw.ReceivedMessage] = []
    hw.Consumer(broker, "/queue/f", on_message=got.append).start()
    store = store_of(broker)
    real_send = store.send
    inside, go = threading.Event(), threading.Event()

    def slow_send(
        destination: str, body: bytes, headers: Any, on_stored: Callable[[], None] | None = None
    ) -> None:
        inside.set()
        assert go.wait(10), "the test never released the send"
        real_send(destination, body, headers, on_stored)

    # The broker storing slowly.
    store.send = slow_send  # type: ignore[method-assign]
    acks: list[hw.FlushAck] = []
    sender = hw.ReliableSender(broker, "/queue/f", on_flushed=acks.append)
    worker = threading.Thread(target=sender.send, args=(b"slow",))
    worker.start()
    try:
        assert inside.wait(10), "the send never reached the store"
        rid = sender.request_flush()
        assert acks == [], f"flush {rid} acknowledged before its message was stored"
        assert sender.outstanding == 1
    finally:
        go.set()
        worker.join(10)
    assert [a.request_id for a in acks] == [rid] and [m.body for m in got] == [b"slow"]
    assert sender.outstanding == 0 and sender.wait_flushed(rid, 0)


def test_client_mode_acks_a_duplicate_at_once_when_nothing_before_it_is_open(
    broker: MemoryBroker,
) -> None:
    c, got, store = client_consumer_past_a(broker, "/queue/i")
    store.send("/queue/i", b"a", {"hw-message-id": "a"})  # a copy: dropped and acked now
    assert len(got) == 1 and c.stats()["duplicates"] == 1
    c.stop()  # nothing unacknowledged goes back
    assert store.pending("/queue/i") == 0


def test_a_handler_can_send_and_flush_with_the_same_sender(broker: MemoryBroker) -> None:
    # The store delivers inside send(): a handler that sends a reply with the sender whose
    # send is delivering it, then flushes, must not wait for that outer send to return (it
    # cannot before the handler does). A message counts as held once the store has it.
    sender = hw.ReliableSender(broker, "/topic/chat")
    results: list[tuple[bool, float]] = []

    def handler(msg: hw.ReceivedMessage) -> None:
        if msg.body == b"ping":
            sender.send(b"pong")
            began = time.monotonic()
            ok = sender.flush(2.0)
            results.append((ok, time.monotonic() - began))

    got: list[hw.ReceivedMessage] = []
    hw.Consumer(broker, "/topic/chat", on_message=handler).start()
    hw.Consumer(broker, "/topic/chat", on_message=got.append).start()
    sender.send(b"ping")
    assert len(results) == 1, results
    ok, took = results[0]
    assert ok and took < 1.0, f"a flush inside the handler: ok={ok} after {took:.2f} s"
    assert sorted(m.body for m in got) == [b"ping", b"pong"]
    assert sender.outstanding == 0 and sender.stats()["refused"] == 0


class _Stop(BaseException):
    """A handler's BaseException (SystemExit, KeyboardInterrupt...): not a handler error."""


def test_a_raising_delivery_loses_no_other_message(broker: MemoryBroker) -> None:
    # A durable subscription's buffer was cleared before delivering it: the messages after
    # one whose delivery raised were lost.
    got: list[bytes] = []

    def handler(msg: hw.ReceivedMessage) -> None:
        got.append(msg.body)
        if msg.body == b"a1":
            raise _Stop

    c = hw.Consumer(broker, "/topic/alerts", durable_name="risk", on_message=handler)
    c.start()
    c.stop()
    sender = hw.ReliableSender(broker, "/topic/alerts")
    for body in (b"a1", b"a2", b"a3"):
        sender.send(body)
    with pytest.raises(_Stop):
        c.start()
    assert got == [b"a1", b"a2", b"a3"], "the messages after the raising one were lost"


def test_an_embedded_commit_applies_every_operation_though_one_raises(
    broker: MemoryBroker,
) -> None:
    # commit() set "committed" and emptied its operations before running them: one that
    # raised lost the rest.
    got: list[bytes] = []

    def handler(msg: hw.ReceivedMessage) -> None:
        got.append(msg.body)
        if msg.body == b"j1":
            raise _Stop

    hw.Consumer(broker, "/queue/jobs", on_message=handler).start()
    tx = broker.transaction().begin()
    tx.send("/queue/jobs", b"j1")
    tx.send("/queue/jobs", b"j2")
    with pytest.raises(_Stop):
        tx.commit()
    assert got == [b"j1", b"j2"], "the operations after the raising one were lost"
    assert tx.state == "unknown"


def test_a_commit_on_a_closed_embedded_broker_applies_nothing(broker: MemoryBroker) -> None:
    tx = broker.transaction().begin()
    tx.send("/queue/jobs", b"j1")
    broker.close()
    with pytest.raises(hw.TransactionFailed) as info:
        tx.commit()
    assert info.value.applied is False and tx.state == "aborted"
    assert store_of(broker).pending("/queue/jobs") == 0
