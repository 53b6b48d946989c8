"""Reliable delivery: messages that must not be lost (alerts, and anything routed through it).

- :class:`ReliableSender`: sends with broker receipts, keeps messages until the broker holds
  them, re-sends them with the same ids after a reconnection, and acknowledges flush requests
  (:class:`FlushAck`); refusals come as :class:`DeliveryRefused`.
- :class:`Consumer`: queues and topics, ``auto`` / ``client`` / ``client-individual`` acks,
  durable topic subscriptions (ActiveMQ and RabbitMQ), duplicates dropped within a bounded
  window kept in the Rust core.
- :class:`Transaction` (``with broker.transaction() as tx:``): sends and acks together.
- :class:`AlertListener`: a monitor's state changes as reliable JSON alerts.

Everything works on STOMP brokers and on the embedded broker (``memory://``); the module docs of
each class say what differs.
"""

from heartwire.reliable.alerts import AlertListener
from heartwire.reliable.consumer import Consumer
from heartwire.reliable.events import DeliveryRefused, FlushAck
from heartwire.reliable.message import ReceivedMessage
from heartwire.reliable.sender import ReliableSender, SenderListener
from heartwire.reliable.transaction import Transaction, TransactionFailed

__all__ = [
    "AlertListener",
    "Consumer",
    "DeliveryRefused",
    "FlushAck",
    "ReceivedMessage",
    "ReliableSender",
    "SenderListener",
    "Transaction",
    "TransactionFailed",
]
