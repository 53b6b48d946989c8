"""Reliable delivery picks one backend per broker (issue 16, layering): what that guarantees
without a network (the STOMP backend is exercised by tests/test_reliable_brokers.py)."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from typing import Any
from unittest import mock

import pytest

import heartwire as hw
from heartwire.reliable.backend import backend_for
from heartwire.reliable.memory_backend import MemoryBackend
from heartwire.transport import ConnectionObserver
from tests.brokers import brokers  # noqa: F401  (the session fixture)
from tests.reliable.conftest import FAST

# Each thing made on a broker that uses its reliable backend.
EACH_USER = pytest.mark.parametrize(
    "make",
    [
        lambda broker: hw.ReliableSender(broker, "/queue/q"),
        lambda broker: hw.Consumer(broker, "/queue/q"),
        lambda broker: hw.Transaction(broker),
    ],
    ids=["sender", "consumer", "transaction"],
)


def test_one_backend_per_broker() -> None:
    a, b = hw.connect(), hw.connect()
    assert isinstance(backend_for(a), MemoryBackend)
    assert backend_for(a) is backend_for(a)
    assert backend_for(a) is not backend_for(b)


@EACH_USER
def test_something_not_a_transport_is_refused_at_once(make: object) -> None:
    # Before: taken for an embedded broker, failing later with an AttributeError on its store.
    with pytest.raises(TypeError, match=r"broker must be a transport .* got dict"):
        make({})  # type: ignore[operator]


def test_broker_transaction_is_the_reliable_transaction() -> None:
    broker = hw.connect()
    tx = broker.transaction(timeout=3)
    assert type(tx) is hw.Transaction and tx.broker is broker and tx.timeout == 3.0
    with broker.transaction() as tx:
        mid = tx.send("/queue/t", b"x")
    assert tx.state == "committed" and tx.sent == [mid]
    assert broker.store.pending("/queue/t") == 1


# -- review findings (issue 16 layering) ------------------------------------------------------


def _collected(ref: Any, deadline: float = 5.0) -> bool:
    """Whether ``ref``'s object is garbage collected within ``deadline`` seconds (threads of a
    closed transport may hold it briefly while they end)."""
    end = time.monotonic() + deadline
    while True:
        gc.collect()
        if ref() is None:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


@EACH_USER
def test_a_closed_embedded_broker_is_garbage_collected(make: Any) -> None:
    # Before: the weak cache's value (the backend) held its key (the broker) strongly.
    broker = hw.connect()
    obj = make(broker)
    broker.close()
    ref = weakref.ref(broker)
    del obj, broker
    assert _collected(ref), [type(r).__name__ for r in gc.get_referrers(ref())]


@pytest.mark.usefixtures("brokers")
def test_a_closed_stomp_transport_is_garbage_collected() -> None:
    from tests import brokers as B

    B.ensure("activemq")
    t = hw.connect(B.url("activemq") + "?" + FAST)
    s = hw.ReliableSender(t, "/queue/revl-leak")
    s.send(b"x")
    assert s.flush(5)
    s.close()
    t.close()
    ref = weakref.ref(t)
    del s, t
    assert _collected(ref), [type(r).__name__ for r in gc.get_referrers(ref())]


class _HoldAttach(ConnectionObserver):
    """Holds the attach step (the transport's connector lock) until released."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.go = threading.Event()

    def on_attached(self, link: Any) -> None:
        self.inside.set()
        self.go.wait(20)


@pytest.mark.usefixtures("brokers")
def test_an_embedded_broker_need_not_wait_for_a_stomp_transports_attach() -> None:
    # Before: one global lock across making any backend, held while a STOMP backend waited
    # for its transport's connector lock.
    from tests import brokers as B

    B.ensure("activemq")
    t = hw.connect(B.url("activemq") + "?" + FAST)
    hold = _HoldAttach()
    try:
        t.add_observer(hold)
        t.current_link.abort("test: connection lost")
        assert hold.inside.wait(10), "no reconnection"
        # A first sender on the STOMP transport waits for the attach (registering its tracker).
        started = threading.Event()

        def stomp_sender() -> None:
            started.set()
            hw.ReliableSender(t, "/queue/revl-hold")

        threading.Thread(target=stomp_sender, daemon=True).start()
        assert started.wait(5)
        time.sleep(0.3)  # (let it reach the transport's lock; the assertion holds either way)
        done = threading.Event()

        def embedded() -> None:
            b = hw.connect()
            hw.Transaction(b)
            hw.ReliableSender(b, "/queue/revl-mem").send(b"x")
            done.set()

        threading.Thread(target=embedded, daemon=True).start()
        assert done.wait(2), "an embedded broker's sender waited for a STOMP transport's attach"
    finally:
        hold.go.set()
        t.close()


def test_backend_for_looks_up_before_classifying() -> None:
    broker = hw.connect()
    backend = backend_for(broker)
    # A cached backend is found without the (slow) protocol classification.
    with mock.patch(
        "heartwire.reliable.backend.isinstance", side_effect=AssertionError, create=True
    ):
        assert backend_for(broker) is backend


@pytest.mark.usefixtures("brokers")
def test_a_first_sender_made_inside_on_attached_does_not_deadlock() -> None:
    # Before (a lock per broker held across the backend's add_observer): another thread making
    # the transport's first sender held that lock waiting for the connector's, held by the
    # attach whose observer made a sender too: both waited for ever.
    from tests import brokers as B

    B.ensure("activemq")
    t = hw.connect(B.url("activemq") + "?" + FAST)
    made = threading.Event()
    hold = _HoldAttach()

    class MakeSender(ConnectionObserver):
        def on_attached(self, link: Any) -> None:
            hw.ReliableSender(t, "/queue/revl-inside").close()
            made.set()

    try:
        t.add_observer(hold)
        t.add_observer(MakeSender())
        t.current_link.abort("test: connection lost")
        assert hold.inside.wait(10), "no reconnection"
        other = threading.Thread(
            target=lambda: hw.ReliableSender(t, "/queue/revl-other"), daemon=True
        )
        other.start()
        time.sleep(0.3)  # (it waits for the connector's lock now; the assertions hold anyway)
        hold.go.set()
        assert made.wait(5), "a sender made inside on_attached deadlocked"
        other.join(5)
        assert not other.is_alive(), "the other thread's first sender deadlocked"
        assert backend_for(t) is backend_for(t)
    finally:
        hold.go.set()
        t.close()


@pytest.mark.usefixtures("brokers")
def test_two_first_senders_at_once_share_one_backend_and_one_tracker() -> None:
    # Backends are made outside any lock: of two made at once, one is kept and the other's
    # tracker unregistered again.
    from heartwire.reliable.tracker import ReceiptTracker
    from tests import brokers as B

    B.ensure("activemq")
    t = hw.connect(B.url("activemq") + "?" + FAST)
    hold = _HoldAttach()
    senders: list[Any] = []
    try:
        t.add_observer(hold)
        t.current_link.abort("test: connection lost")
        assert hold.inside.wait(10), "no reconnection"
        threads = [
            threading.Thread(
                target=lambda: senders.append(hw.ReliableSender(t, "/queue/revl-two")),
                daemon=True,
            )
            for _ in range(2)
        ]
        for th in threads:
            th.start()
        time.sleep(0.3)  # (both wait for the connector's lock in add_observer now)
        hold.go.set()
        for th in threads:
            th.join(10)
        assert len(senders) == 2
        trackers = [o for o in t._observers if isinstance(o, ReceiptTracker)]
        assert trackers == [backend_for(t).tracker]  # type: ignore[attr-defined]
        for s in senders:
            s.send(b"x")
            assert s.flush(5)
    finally:
        hold.go.set()
        t.close()
