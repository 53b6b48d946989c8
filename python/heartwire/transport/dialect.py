"""Broker dialects: how API topic names and patterns map to STOMP destinations and back.

The API's syntax (:mod:`heartwire.transport.patterns`): ``.``-separated segments, ``*`` for one
segment, a final ``>`` for one or more. Every topic ``t`` is the STOMP destination ``/topic/t``.

- ActiveMQ Classic uses the API's wildcards as they are (``/topic/svc.>``, ``/topic/svc.*``).
- RabbitMQ routes ``/topic/...`` through the ``amq.topic`` exchange, whose wildcards are ``*``
  (one word) and ``#`` (zero or more words): ``svc.>`` becomes ``/topic/svc.#``.

Durable topic subscriptions (:meth:`Dialect.durable_headers`) differ too: ActiveMQ keys them by
the connection's ``client-id`` and the SUBSCRIBE header ``activemq.subscriptionName`` and deletes
one with a second UNSUBSCRIBE naming it; RabbitMQ makes a durable, non-auto-delete queue
(``durable:true``, ``auto-delete:false``, named by ``x-queue-name``) bound to the topic, deleted by
an UNSUBSCRIBE that says ``durable:true``.

Acknowledgements differ as well (:attr:`Dialect.nack_cumulative`): in ``ack=client`` mode an ACK
acknowledges every earlier message of the subscription on both brokers, but a NACK is cumulative
only on RabbitMQ (a ``basic.nack`` with ``multiple``, requeued); ActiveMQ's NACK settles the named
message alone (it goes to the dead-letter queue), earlier ones stay unacknowledged.

Where a broker's wildcard matches more than the API's (RabbitMQ's ``#`` also matches zero words),
the transport filters the deliveries with the API pattern, so subscribers see the same topics on
every broker.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

__all__ = ["ACTIVEMQ", "RABBITMQ", "Dialect", "detect", "named"]

_TOPIC = "/topic/"
_AMQ_TOPIC_EXCHANGE = "/exchange/amq.topic/"


class Dialect:
    """One broker family's destination syntax (instances are immutable singletons)."""

    __slots__ = ("_wild_many", "name")

    def __init__(self, name: str, wild_many: str) -> None:
        self.name = name
        self._wild_many = wild_many

    def destination(self, topic: str) -> str:
        """The STOMP destination to send ``topic`` to."""
        return _TOPIC + topic

    def subscription(self, pattern: str) -> str:
        """The STOMP destination to subscribe to for the API ``pattern``."""
        if pattern.endswith(">") and (len(pattern) == 1 or pattern[-2] == "."):
            pattern = pattern[:-1] + self._wild_many
        return _TOPIC + pattern

    def topic(self, destination: str) -> str:
        """The API topic of a received message's ``destination`` header (as is if foreign)."""
        if destination.startswith(_TOPIC):
            return destination[len(_TOPIC) :]
        if destination.startswith(_AMQ_TOPIC_EXCHANGE):
            return destination[len(_AMQ_TOPIC_EXCHANGE) :]
        return destination

    def send_headers(self, headers: Mapping[str, str] | None) -> dict[str, str]:
        """The SEND frame's headers for the API ``headers`` (``expires``, ``persistent``, ...).

        ``expires`` (epoch milliseconds) and ``persistent`` pass through on every broker; for
        RabbitMQ an ``expires`` also sets ``expiration`` (the per-message TTL it honours, in
        milliseconds from now).
        """
        out = dict(headers) if headers else {}
        if self is RABBITMQ and "expires" in out and "expiration" not in out:
            try:
                ttl = int(out["expires"]) - int(time.time() * 1000)
            except ValueError:
                pass
            else:
                out["expiration"] = str(max(ttl, 0))
        return out

    @property
    def nack_cumulative(self) -> bool:
        """Whether a NACK in ``ack=client`` mode also rejects every earlier unacknowledged
        message of the subscription (RabbitMQ, which requeues them), rather than only the named
        one (ActiveMQ)."""
        return self is RABBITMQ

    @property
    def unsubscribe_keeps_unacked(self) -> bool:
        """Whether a cancelled client-ack subscription's unacknowledged messages stay with the
        connection until it closes (RabbitMQ: one channel per connection; a NACK naming them
        is refused with "Subscription not found", and a later ``client``-mode ACK of another
        subscription on the connection acknowledges them too). ActiveMQ hands them back on
        UNSUBSCRIBE."""
        return self is RABBITMQ

    @property
    def durable_needs_client_id(self) -> bool:
        """Whether a durable subscription needs the connection's ``client-id`` (ActiveMQ)."""
        return self is ACTIVEMQ

    def durable_headers(self, name: str, client_id: str | None) -> dict[str, str]:
        """The SUBSCRIBE headers of durable subscription ``name`` (of client ``client_id``)."""
        if self is RABBITMQ:
            queue = f"{client_id}.{name}" if client_id else name
            return {"durable": "true", "auto-delete": "false", "x-queue-name": queue}
        return {"activemq.subscriptionName": name}

    def durable_forget(
        self, name: str, client_id: str | None
    ) -> tuple[dict[str, str] | None, dict[str, str] | None]:
        """Deleting durable subscription ``name``: the headers of the UNSUBSCRIBE that ends the
        consumer, and of a second UNSUBSCRIBE that deletes the subscription (None: not needed)."""
        if self is RABBITMQ:
            return {**self.durable_headers(name, client_id), "persistent": "true"}, None
        return None, {"activemq.subscriptionName": name}

    def __repr__(self) -> str:
        return f"<Dialect {self.name}>"


ACTIVEMQ = Dialect("activemq", ">")
RABBITMQ = Dialect("rabbitmq", "#")
_BY_NAME = {d.name: d for d in (ACTIVEMQ, RABBITMQ)}


def named(name: str) -> Dialect:
    """The dialect called ``name`` (``"activemq"`` or ``"rabbitmq"``), else ValueError."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"dialect {name!r} is not one of {', '.join(_BY_NAME)}") from None


def detect(server: str | None) -> Dialect | None:
    """The dialect of a broker from its CONNECTED frame's ``server`` header; None if unknown.

    ``"ActiveMQ/5.17.2"`` is ActiveMQ Classic; ``"RabbitMQ/3.10.8"`` RabbitMQ. Anything else
    (ActiveMQ Artemis included, whose wildcards differ) is unknown.
    """
    if not server:
        return None
    product = server.split("/", 1)[0].strip().lower()
    if product == "activemq":
        return ACTIVEMQ
    if product == "rabbitmq":
        return RABBITMQ
    return None
