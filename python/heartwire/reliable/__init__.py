"""Reliable delivery: messages that must not be lost (alerts, and anything routed through it).

- :class:`ReliableSender`: sends with broker receipts, keeps messages until the broker holds
  them, re-sends them with the same ids after a reconnection, and acknowledges flush requests
  (:class:`FlushAck`); refusals come as :class:`DeliveryRefused`.
- :class:`Consumer`: queues and topics, ``auto`` / ``client`` / ``client-individual`` acks,
  durable topic subscriptions (ActiveMQ and RabbitMQ), duplicates dropped within a bounded
  window kept in the Rust core.
- :class:`Transaction` (``with broker.transaction() as tx:``, or ``Transaction(broker)``): sends
  and acks together.

Everything works on STOMP brokers and on the embedded broker (``memory://``); the module docs of
each class say what differs. The classes are written once; what differs lives in a backend
picked once per broker (:func:`heartwire.reliable.backend.backend_for`:
:mod:`.stomp_backend` or :mod:`.memory_backend`, on the contract of :mod:`.base`). A monitor's
alerts go out through a sender with :class:`heartwire.alerts.AlertListener` (a layer above).
"""

from typing import Any

from heartwire.reliable.consumer import Consumer
from heartwire.reliable.events import DeliveryRefused, FlushAck
from heartwire.reliable.message import ReceivedMessage
from heartwire.reliable.sender import ReliableSender, SenderListener
from heartwire.reliable.transaction import Transaction, TransactionFailed

__all__ = [
    "Consumer",
    "DeliveryRefused",
    "FlushAck",
    "ReceivedMessage",
    "ReliableSender",
    "SenderListener",
    "Transaction",
    "TransactionFailed",
]


def __getattr__(name: str) -> Any:
    # Names that left this package, with where they went (the convention of heartwire._MOVED);
    # no aliases.
    if name == "AlertListener":  # a layer above reliable delivery (issue 16)
        raise AttributeError(
            "heartwire.reliable.AlertListener moved: import it from heartwire "
            "(heartwire.AlertListener, defined in heartwire.alerts)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
