"""Reliable delivery picks one backend per broker (issue 16, layering): what that guarantees
without a network (the STOMP backend is exercised by tests/test_reliable_brokers.py)."""

from __future__ import annotations

import pytest

import heartwire as hw
from heartwire.reliable.backend import backend_for
from heartwire.reliable.memory_backend import MemoryBackend


def test_one_backend_per_broker() -> None:
    a, b = hw.connect(), hw.connect()
    assert isinstance(backend_for(a), MemoryBackend)
    assert backend_for(a) is backend_for(a)
    assert backend_for(a) is not backend_for(b)


@pytest.mark.parametrize(
    "make",
    [
        lambda broker: hw.ReliableSender(broker, "/queue/q"),
        lambda broker: hw.Consumer(broker, "/queue/q"),
        lambda broker: hw.Transaction(broker),
    ],
    ids=["sender", "consumer", "transaction"],
)
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
