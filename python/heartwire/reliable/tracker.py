"""Routing a STOMP transport's RECEIPT and ERROR frames to the reliable senders that wait.

One :class:`ReceiptTracker` per :class:`~heartwire.transport.stomp.StompTransport` (its
:class:`~heartwire.reliable.stomp_backend.StompBackend`'s) observes its link events: it
remembers, per connection and in send order, which sender is waiting for which receipt; routes
each RECEIPT to it; and on a new connection asks every sender to queue again what it still holds
(before the link is published, so the backlog goes before anything sent later) and writes those
re-sends once it is published, outside the connector's lock.

An ERROR frame that names a ``receipt-id`` (ActiveMQ does) refuses that message. One that does
not (RabbitMQ) is taken as the refusal of the oldest message still waiting on that connection
whose destination name the error quotes, whole (``'name'``: an error about ``alerts-archive``
is not about ``alert``; brokers answer a connection's frames in order); an error that quotes
none (e.g. about a subscription) refuses nothing, so it can never drop a message.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

from heartwire.transport.errors import names
from heartwire.transport.observers import ConnectionObserver

if TYPE_CHECKING:
    from heartwire.transport.link import StompLink

__all__ = ["ReceiptTracker", "Waiter"]


class Waiter(Protocol):
    """What the tracker calls back (a reliable sender's outbox)."""

    def _receipted(self, message_id: str) -> None: ...
    def _refused(self, message_id: str, reason: str) -> None: ...
    def _resend(self, link: StompLink) -> None: ...
    def _resume(self, link: StompLink) -> None: ...
    def _destination_name(self) -> str: ...


class ReceiptTracker(ConnectionObserver):
    """See the module docs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._senders: tuple[Waiter, ...] = ()
        self._pending: dict[StompLink, OrderedDict[str, Waiter]] = {}
        # The connection receipts are awaited on (None: not known yet, the first one used).
        self._link: StompLink | None = None

    def start(self, link: StompLink | None) -> None:
        """The connection that was current when the tracker was registered as an observer
        (unless one attached since, which ``on_attached`` recorded)."""
        with self._lock:
            if self._link is None:
                self._link = link

    def add(self, sender: Waiter) -> StompLink | None:
        """Register ``sender``; returns the connection to send on (None: none yet). A
        connection attached later calls ``sender._resend`` with it; one being attached right
        now either did (``sender`` was added before) or is the one returned."""
        with self._lock:
            self._senders = (*self._senders, sender)
            return self._link

    def remove(self, sender: Waiter) -> None:
        with self._lock:
            self._senders = tuple(s for s in self._senders if s is not sender)
            for queue in self._pending.values():
                for rid in [r for r, s in queue.items() if s is sender]:
                    del queue[rid]

    def expect(self, link: StompLink, receipt: str, sender: Waiter) -> None:
        """``sender`` waits for ``receipt`` on ``link`` (call before sending)."""
        with self._lock:
            if self._link is None:
                self._link = link
            elif link is not self._link:
                return  # an earlier connection: its receipts never come, the sender re-sends
            queue = self._pending.get(link)
            if queue is None:
                queue = self._pending[link] = OrderedDict()
            queue[receipt] = sender

    def waiting(self) -> int:
        """Receipts waited for on every connection."""
        with self._lock:
            return sum(len(q) for q in self._pending.values())

    # -- link events (StompTransport.add_observer) ----------------------------------------------

    def on_attached(self, link: StompLink) -> None:
        # Under the connector's lock, before ``link`` is published: queue the re-sends only.
        with self._lock:
            # Receipts of earlier connections will never come: their senders re-send.
            self._pending = {link: OrderedDict()}
            self._link = link
            senders = self._senders
        for sender in senders:
            sender._resend(link)

    def on_published(self, link: StompLink) -> None:
        # Outside the connector's lock, once ``link`` was published (or rejected): write the
        # re-sends ``attached`` queued, one sender after the other.
        with self._lock:
            senders = self._senders
        for sender in senders:
            sender._resume(link)

    def on_receipt(self, link: StompLink, receipt: str) -> None:
        with self._lock:
            queue = self._pending.get(link)
            sender = queue.pop(receipt, None) if queue is not None else None
        if sender is not None:
            sender._receipted(receipt)

    def on_error_frame(self, link: StompLink, headers: dict[str, str], detail: str) -> None:
        rid = headers.get("receipt-id")
        with self._lock:
            queue = self._pending.get(link)
            if not queue:
                return
            sender: Waiter | None = None
            if rid is not None:
                sender = queue.pop(rid, None)
            else:
                for candidate, waiter in queue.items():
                    if names(detail, waiter._destination_name()):
                        rid, sender = candidate, waiter
                        break
                if sender is not None and rid is not None:
                    del queue[rid]
        if sender is not None and rid is not None:
            sender._refused(rid, detail)
