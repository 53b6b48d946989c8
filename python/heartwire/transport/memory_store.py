"""The embedded broker's queues, durable subscriptions and client acks (what reliable delivery
uses on ``memory://``).

One :class:`MemoryStore` per :class:`~heartwire.transport.memory.MemoryBroker`, made on first use
(:attr:`MemoryBroker.store <heartwire.transport.memory.MemoryBroker.store>`, or
:func:`store_of`). Like the broker it delivers in the sending thread before ``send`` returns:

- ``/queue/<name>``: each message goes to one consumer (round robin); with none it waits in the
  queue and goes to the next consumer that starts.
- ``/topic/<name>``: each message goes to every consumer of the topic, is also published to the
  broker's plain subscribers of topic ``<name>`` (as a STOMP broker would), and is kept for every
  durable subscription whose consumer is stopped, to be delivered when it starts again.
- ``client`` / ``client-individual`` acks: a message stays unacknowledged until ``ack``; when its
  consumer stops, an unacknowledged queue or durable-subscription message is delivered again
  (``redelivered``) to the next consumer; ``nack`` moves it to :attr:`MemoryStore.dead_letters`.

Nothing survives the process: the store is as durable as the broker object.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from heartwire.transport import destinations
from heartwire.transport.patterns import validate_topic

__all__ = ["MemoryStore", "StoredMessage", "store_of"]


@dataclass
class StoredMessage:
    destination: str
    body: bytes
    headers: dict[str, str]
    redelivered: bool = False


Deliver = Callable[[StoredMessage, "int | None"], None]


@dataclass(eq=False)
class _Sub:
    kind: str  # "queue" | "topic"
    name: str
    ack: str
    deliver: Deliver
    durable: str | None
    unacked: OrderedDict[int, StoredMessage] = field(default_factory=OrderedDict)
    active: bool = True


@dataclass(eq=False)
class _Durable:
    buffer: deque[StoredMessage] = field(default_factory=deque)
    sub: _Sub | None = None


def store_of(broker: Any) -> MemoryStore:
    """The store of an embedded ``broker`` (its ``store``), made on first use."""
    return broker.store  # type: ignore[no-any-return]


class MemoryStore:
    """See the module docs."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._lock = threading.RLock()
        self._tags = itertools.count(1)
        self._queues: dict[str, deque[StoredMessage]] = {}
        self._consumers: dict[str, list[_Sub]] = {}
        self._rr: dict[str, int] = {}
        self._topic_subs: dict[str, list[_Sub]] = {}
        self._durables: dict[tuple[str, str], _Durable] = {}
        #: Messages consumers rejected (``nack``), oldest first.
        self.dead_letters: list[StoredMessage] = []

    # -- sending --------------------------------------------------------------------------------

    def send(
        self,
        destination: str,
        body: bytes,
        headers: Mapping[str, str],
        on_stored: Callable[[], None] | None = None,
    ) -> None:
        """Deliver or keep one message; ValueError (the refusal) for an invalid destination.

        ``on_stored()`` runs once the store holds the message (the receipt), before it is
        delivered to consumers (whose handlers run inside this call)."""
        kind, name = destinations.split(destinations.validate(destination))
        message = StoredMessage(destination, body, dict(headers))
        out: list[tuple[_Sub, StoredMessage]] = []
        with self._lock:
            if kind == "queue":
                self._queues.setdefault(name, deque()).append(message)
                self._dispatch_queue(name, out)
            else:
                for sub in self._topic_subs.get(name, ()):
                    out.append((sub, StoredMessage(destination, body, dict(headers))))
                for (topic, _), durable in self._durables.items():
                    if topic == name and durable.sub is None:
                        durable.buffer.append(StoredMessage(destination, body, dict(headers)))
        if on_stored is not None:
            on_stored()
        self._run(out)
        if kind == "topic":
            try:
                validate_topic(name)
            except ValueError:
                return
            self.broker.publish(name, body, headers)

    def _dispatch_queue(self, name: str, out: list[tuple[_Sub, StoredMessage]]) -> None:
        consumers = self._consumers.get(name)
        queue = self._queues.get(name)
        while consumers and queue:
            i = self._rr.get(name, 0) % len(consumers)
            self._rr[name] = i + 1
            out.append((consumers[i], queue.popleft()))

    def _run(self, out: list[tuple[_Sub, StoredMessage]]) -> None:
        # Outside the lock: handlers may send, ack and stop. The messages in ``out`` have left
        # their queue or buffer, so each is delivered even if an earlier delivery raised (a
        # handler's BaseException: handler errors are the consumer's); the first one raised
        # propagates once all are done.
        first: BaseException | None = None
        for sub, message in out:
            try:
                if not sub.active:
                    self._return(sub, message)
                    continue
                tag = None
                if sub.ack != "auto":
                    with self._lock:
                        tag = next(self._tags)
                        sub.unacked[tag] = message
                sub.deliver(message, tag)
            except BaseException as exc:
                if first is None:
                    first = exc
        if first is not None:
            raise first

    def _return(self, sub: _Sub, message: StoredMessage) -> None:
        # A message for a consumer that stopped meanwhile goes back where it came from.
        out: list[tuple[_Sub, StoredMessage]] = []
        with self._lock:
            if sub.kind == "queue":
                self._queues.setdefault(sub.name, deque()).appendleft(message)
                self._dispatch_queue(sub.name, out)
            elif sub.durable is not None:
                durable = self._durables.get((sub.name, sub.durable))
                if durable is not None:
                    durable.buffer.appendleft(message)
        self._run(out)

    # -- consumers ------------------------------------------------------------------------------

    def subscribe(self, destination: str, ack: str, durable: str | None, deliver: Deliver) -> _Sub:
        """Start a consumer; buffered messages for it are delivered before this returns."""
        kind, name = destinations.split(destination)
        sub = _Sub(kind, name, ack, deliver, durable)
        out: list[tuple[_Sub, StoredMessage]] = []
        with self._lock:
            if kind == "queue":
                self._consumers.setdefault(name, []).append(sub)
                self._dispatch_queue(name, out)
            else:
                if durable is not None:
                    record = self._durables.setdefault((name, durable), _Durable())
                    if record.sub is not None:
                        raise ValueError(
                            f"durable subscription {durable!r} to {destination!r} is in use"
                        )
                    record.sub = sub
                    out.extend((sub, m) for m in record.buffer)
                    record.buffer.clear()
                self._topic_subs.setdefault(name, []).append(sub)
        self._run(out)
        return sub

    def unsubscribe(self, sub: _Sub, forget: bool = False) -> None:
        """Stop a consumer. Its unacknowledged queue or durable messages are redelivered;
        ``forget`` also deletes its durable subscription."""
        out: list[tuple[_Sub, StoredMessage]] = []
        with self._lock:
            if not sub.active:
                return
            sub.active = False
            unacked = list(sub.unacked.values())
            sub.unacked.clear()
            for m in unacked:
                m.redelivered = True
            if sub.kind == "queue":
                consumers = self._consumers.get(sub.name, [])
                if sub in consumers:
                    consumers.remove(sub)
                self._queues.setdefault(sub.name, deque()).extendleft(reversed(unacked))
                self._dispatch_queue(sub.name, out)
            else:
                subs = self._topic_subs.get(sub.name, [])
                if sub in subs:
                    subs.remove(sub)
                if sub.durable is not None:
                    key = (sub.name, sub.durable)
                    record = self._durables.get(key)
                    if record is not None:
                        record.sub = None
                        if forget:
                            del self._durables[key]
                        else:
                            record.buffer.extendleft(reversed(unacked))
        self._run(out)

    def settle(self, sub: _Sub, tag: int, ok: bool) -> None:
        """ACK (``ok``) or NACK delivery ``tag`` of ``sub`` (``client`` mode ACK also settles
        every earlier delivery of the consumer)."""
        with self._lock:
            if tag not in sub.unacked:
                return
            if ok and sub.ack == "client":
                while sub.unacked:
                    first, _ = sub.unacked.popitem(last=False)
                    if first == tag:
                        break
            else:
                message = sub.unacked.pop(tag)
                if not ok:
                    self.dead_letters.append(message)

    def pending(self, destination: str, durable: str | None = None) -> int:
        """Messages waiting in a queue, or for a stopped durable subscription."""
        kind, name = destinations.split(destination)
        with self._lock:
            if kind == "queue":
                return len(self._queues.get(name, ()))
            record = self._durables.get((name, durable or ""))
            return len(record.buffer) if record is not None else 0
