"""What the transports offer the layer above them (reliable delivery), as typed interfaces.

The transport layer imports nothing above it. What reliable delivery needs of a broker
connection is named here, and the reliable layer is written against it:

- :class:`StompSession` (:class:`~heartwire.transport.stomp.StompTransport` provides it): the
  connection in use (:class:`Link`: send, frames with a receipt, abort), waiting for one, raw
  destinations subscribed with an ack mode, requests answered by a RECEIPT, and events for
  observers (:mod:`heartwire.transport.observers`: attached, published, receipt, error frame,
  and the connection's losses and reconnections).
- The embedded broker (:class:`~heartwire.transport.memory.MemoryBroker`) offers its queues,
  durable subscriptions and client acks as its ``store``
  (:class:`~heartwire.transport.memory_store.MemoryStore`): a send is receipted once the store
  holds it.

``broker.transaction()`` returns a reliable :class:`heartwire.Transaction`, a class of the layer
above: that layer registers how to make one (:func:`provide_transactions`, on import of
:mod:`heartwire.reliable`, which ``import heartwire`` does), so that no transport module imports
it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from heartwire.transport import Message
from heartwire.transport.dialect import Dialect
from heartwire.transport.urls import BrokerAddress, StompOptions

__all__ = ["Link", "StompSession", "open_transaction", "provide_transactions"]


@runtime_checkable
class Link(Protocol):
    """One STOMP connection (:class:`~heartwire.transport.link.StompLink`)."""

    broker: BrokerAddress
    dialect: Dialect

    @property
    def open(self) -> bool: ...

    def send(
        self,
        destination: str,
        body: bytes,
        headers: dict[str, str],
        timeout: float | None = None,
    ) -> None:
        """Write a SEND frame (raises if the connection is failing)."""
        ...

    def frame(self, command: str, headers: dict[str, str]) -> None:
        """Write a frame (ACK, NACK, BEGIN, COMMIT, ABORT, ...)."""
        ...

    def abort(self, reason: str) -> None:
        """End the connection (the transport reconnects); idempotent."""
        ...

    def receiving_here(self) -> bool:
        """Whether the calling thread is this connection's receiving thread."""
        ...


@runtime_checkable
class StompSession(Protocol):
    """What reliable delivery uses of a STOMP transport (see the module docs)."""

    url: str
    client_id: str | None

    @property
    def options(self) -> StompOptions: ...

    @property
    def closed(self) -> bool: ...

    @property
    def current_link(self) -> Any:
        """The connection in use now (a :class:`Link`), None during an outage."""
        ...

    def wait_link(self, timeout: float) -> Any:
        """The current connection, waiting up to ``timeout`` seconds for one; None if none
        came (or the transport closed)."""
        ...

    def subscribe_destination(
        self,
        destination: str,
        handler: Callable[[Any, Message], None],
        *,
        sub_id: str | None = None,
        ack: str = "auto",
        headers: Mapping[str, str] | None = None,
        confirm: float = 0.0,
    ) -> Any:
        """Subscribe ``handler(link, message)`` to a raw destination with an ack mode."""
        ...

    def request(self, command: str, headers: dict[str, str], timeout: float) -> str | None:
        """A frame with a receipt, waited for: None once it came, else why not."""
        ...

    def request_status(
        self, command: str, headers: dict[str, str], timeout: float
    ) -> tuple[str | None, bool]:
        """:meth:`request`, and whether the broker may have acted on it (in doubt)."""
        ...

    def add_observer(self, observer: Any) -> Any:
        """Register a :class:`~heartwire.transport.observers.ConnectionObserver`; returns the
        connection current at that moment (every later one goes to its ``on_attached``)."""
        ...

    def remove_observer(self, observer: Any) -> bool: ...


_transactions: Callable[[Any, float | None], Any] | None = None


def provide_transactions(factory: Callable[[Any, float | None], Any]) -> None:
    """Set what ``broker.transaction(timeout)`` returns: ``factory(broker, timeout)`` (the
    reliable layer's :class:`~heartwire.reliable.Transaction`, registered on its import)."""
    global _transactions
    _transactions = factory


def open_transaction(broker: Any, timeout: float | None) -> Any:
    """``broker.transaction(timeout)``: a transaction of the reliable layer on ``broker``."""
    factory = _transactions
    if factory is None:  # never after ``import heartwire``, which imports heartwire.reliable
        raise RuntimeError(
            "broker.transaction() needs heartwire.reliable: import heartwire (or "
            "heartwire.reliable) first, or use heartwire.Transaction(broker)"
        )
    return factory(broker, timeout)
