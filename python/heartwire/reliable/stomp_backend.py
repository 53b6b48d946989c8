"""Reliable delivery on a STOMP transport (:class:`~heartwire.transport.session.StompSession`).

- :class:`StompOutbox` (a sender's): every SEND asks for a receipt; messages queue in send
  order and one thread at a time writes them; a new connection re-sends everything outstanding
  before anything sent later (see :mod:`heartwire.reliable.sender`).
- :class:`StompSubscriber` (a consumer's): a raw-destination subscription with the ack mode and
  the dialect's durable headers; ACK/NACK frames on the connection a message came on.
- :class:`StompTx` (a transaction's): BEGIN, frames with a ``transaction`` header, COMMIT
  waited for with a receipt, or ABORT, all on one connection.

One :class:`StompBackend` per transport holds its :class:`~.tracker.ReceiptTracker`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from heartwire.reliable.base import Pending, TransactionFailed, run_all
from heartwire.reliable.message import ReceivedMessage
from heartwire.reliable.tracker import ReceiptTracker
from heartwire.transport.headers import MESSAGE_ID_HEADER
from heartwire.transport.session import StompSession

if TYPE_CHECKING:
    from heartwire.reliable.consumer import Consumer
    from heartwire.reliable.sender import ReliableSender
    from heartwire.reliable.transaction import Transaction

__all__ = ["StompBackend"]

log = logging.getLogger("heartwire.reliable")
_forget_ids = itertools.count(1)


class StompBackend:
    """Reliable delivery on one STOMP transport (see the module docs)."""

    def __init__(self, transport: StompSession) -> None:
        self.transport = transport
        self.request_timeout = float(transport.options.request_blocking_time)
        self.tracker = ReceiptTracker()
        # Registered atomically with respect to attaching a connection (the transport holds
        # its connector's lock): the link returned is current, every later one is attached.
        self.tracker.start(transport.add_observer(self.tracker))

    def close(self) -> None:
        self.transport.remove_observer(self.tracker)

    def outbox(self, sender: ReliableSender) -> StompOutbox:
        return StompOutbox(self, sender)

    def subscriber(self, consumer: Consumer) -> StompSubscriber:
        return StompSubscriber(self.transport, consumer)

    def transaction(self, tx: Transaction) -> StompTx:
        return StompTx(self.transport, tx)


class StompOutbox:
    """The STOMP half of one reliable sender: its queue, the connection it sends on, the
    re-send after a reconnection. Every field is guarded by the sender's lock."""

    def __init__(self, backend: StompBackend, sender: ReliableSender) -> None:
        self._sender = sender
        self._lock = sender._lock
        self._tracker = backend.tracker
        # The connection this sender sends on (every outstanding message not in ``_queue``
        # went out on it) and the messages still to send there, in order. One thread at a time
        # (``_draining``) writes them, so nothing overtakes the backlog.
        self._link: Any = None
        self._queue: deque[Pending] = deque()
        self._draining = False
        # A new connection whose re-send this sender still owes (``_resend`` queued it under
        # the connector's lock; ``_resume`` writes it once the link is published).
        self._owed: Any = None
        # A connection being attached right now either re-sends through this outbox (it is
        # registered first) or is the one returned.
        link = self._tracker.add(self)
        with self._lock:
            if self._link is None:  # (not set by a _resend meanwhile)
                self._link = link

    def put(self, pending: Pending) -> bool:
        # Under the sender's lock. Never send while holding it: the receiving thread needs it
        # for receipts, and a broker blocked writing receipts to us stops reading our sends.
        pending.headers["receipt"] = pending.headers[MESSAGE_ID_HEADER]
        self._queue.append(pending)
        if self._draining:  # the thread writing the queue sends this one too, in order
            return False
        self._draining = True
        return True

    def run(self, pending: Pending) -> None:
        self._drain()

    def receipts_read_here(self) -> str | None:
        link = self._link
        if link is not None and link.receiving_here():
            return str(link.broker)
        return None

    def close(self) -> None:
        self._tracker.remove(self)

    # -- the tracker's calls (tracker.Waiter) ---------------------------------------------------

    def _destination_name(self) -> str:
        return self._sender._destination_name()

    def _receipted(self, message_id: str) -> None:
        self._sender._receipted(message_id)

    def _refused(self, message_id: str, reason: str) -> None:
        self._sender._refused(message_id, reason)

    def _resend(self, link: Any) -> None:
        """Queue every outstanding message again, in order, for the new connection ``link``.
        The tracker calls this under the transport's connector lock, before the link is
        published, so nothing is written here (a publish or subscribe waiting for the lock
        would wait for the whole backlog): :meth:`_resume` writes it once the link is
        published. Sends made meanwhile queue behind the backlog."""
        with self._lock:
            self._link = link
            # Receipts of the earlier connection will never come: everything goes again.
            self._queue = deque(self._sender._outstanding.values())
            if self._draining:  # another thread is writing: it moves on to ``link``
                if self._owed is not None:
                    self._owed = link
                return
            self._draining = True  # held for _resume: sends queue behind the backlog
            self._owed = link

    def _resume(self, link: Any) -> None:
        """Write the re-send :meth:`_resend` queued for ``link``; the tracker calls this
        outside the connector's lock once ``link`` was published (or rejected: then nothing
        goes out and the next connection re-sends)."""
        with self._lock:
            if self._owed is not link:
                return
            self._owed = None
        self._drain()

    def _drain(self) -> None:
        # The one writer (``_draining`` is ours): send the queue, in order, on ``self._link``
        # until it is empty or the link is down; what is not receipted stays outstanding and
        # goes again on the next connection (``_resend``).
        sender = self._sender
        outstanding = sender._outstanding
        tracker = self._tracker
        while True:
            batch: list[Pending] = []
            with self._lock:
                link = self._link
                if link is None or not link.open or not self._queue:
                    self._draining = False
                    return
                while self._queue and len(batch) < 512:
                    pending = self._queue.popleft()
                    message_id = pending.headers[MESSAGE_ID_HEADER]
                    if message_id not in outstanding:
                        continue  # refused meanwhile
                    if pending.link is not None and pending.link is not link:
                        sender._resent += 1
                    pending.link = link
                    tracker.expect(link, message_id, self)
                    batch.append(pending)
            done = 0
            try:
                for pending in batch:
                    link.send(sender.destination, pending.body, pending.headers)
                    done += 1
            except Exception as exc:
                with self._lock:
                    if self._link is link:
                        # The queue again holds every outstanding message not sent on
                        # ``self._link`` (the failed one included: it may not have gone out).
                        rest = [
                            p for p in batch[done:] if p.headers[MESSAGE_ID_HEADER] in outstanding
                        ]
                        self._queue.extendleft(reversed(rest))
                    # (else a new connection was attached meanwhile: its queue has them all)
                # End the link whether or not it is published yet: a current one is reported
                # to the connector, which reconnects; one still being attached is no longer
                # open, so the connector rejects it and tries again. The next connection
                # re-sends everything outstanding. The loop then stops, or goes on with the
                # queue of a connection attached meanwhile.
                link.abort(f"send failed: {exc!r}")


class _Channel:
    """The ack bookkeeping identity of one STOMP subscription on one connection."""

    __slots__ = ("__weakref__",)


class StompSubscriber:
    """The STOMP half of one consumer."""

    def __init__(self, transport: StompSession, consumer: Consumer) -> None:
        self._transport = transport
        self._consumer = consumer
        self._dialect: Any = None  # the broker's dialect when it last started

    def _dialect_now(self) -> Any:
        broker = self._transport
        link = broker.wait_link(broker.options.request_blocking_time)
        if link is None:
            raise ConnectionError(
                f"consumer of {self._consumer.destination!r}: no broker connection on {broker.url}"
            )
        return link.dialect

    def start(self, sub_id: str | None = None) -> Any:
        c = self._consumer
        broker = self._transport
        dialect = self._dialect = self._dialect_now()
        headers: dict[str, str] = {}
        if c.durable_name is not None:
            if dialect.durable_needs_client_id and not broker.client_id:
                raise ValueError(
                    f"durable_name={c.durable_name!r} on {dialect.name} needs a client id: "
                    "connect(url, client_id=...)"
                )
            headers = dialect.durable_headers(c.durable_name, broker.client_id)
        timeout = broker.options.request_blocking_time
        # The ack bookkeeping of this subscription, one channel per connection it delivers on:
        # a restart (a new subscription) starts afresh even on the same connection.
        channels: weakref.WeakKeyDictionary[Any, _Channel] = weakref.WeakKeyDictionary()

        def deliver(link: Any, message: Any) -> None:
            with c._lock:
                channel = channels.get(link)
                if channel is None:
                    channel = channels[link] = _Channel()
            self._on_message(channel, link, message)

        sub = broker.subscribe_destination(
            c.destination,
            deliver,
            sub_id=sub_id or c._sub_id(),
            ack=c.ack,
            headers=headers,
            confirm=timeout,
        )
        if sub.refused is not None:
            sub.cancel()
            raise ConnectionError(f"{c!r}: the broker refused the subscription: {sub.refused}")
        if not sub.confirmed:
            log.warning("%r: the broker did not confirm the subscription within %g s", c, timeout)
        return sub

    def stop(self, sub: Any, forget: bool) -> None:
        c = self._consumer
        if not (forget and c.durable_name is not None):
            sub.cancel()
            link = self._transport.current_link
            if c.ack != "auto" and link is not None and link.dialect.unsubscribe_keeps_unacked:
                # The only way to hand back what it left unacknowledged (seen or in flight).
                link.abort(f"{c!r} stopped: returning its unacknowledged messages")
            return
        first, second = self._dialect.durable_forget(c.durable_name, self._transport.client_id)
        sub.cancel(first)
        if second is not None:
            self._request_unsubscribe(second)

    def forget(self) -> None:
        c = self._consumer
        dialect = self._dialect or self._dialect_now()
        first, second = dialect.durable_forget(c.durable_name, self._transport.client_id)
        if dialect.durable_needs_client_id:
            self._request_unsubscribe(second or {})
        else:
            # RabbitMQ deletes the queue on an UNSUBSCRIBE of an active durable subscription.
            # The brief subscription gets an id of its own: a message the broker hands it before
            # the UNSUBSCRIBE lands must not reach a later consumer of this durable name, which
            # would have the same id.
            sub = self.start(sub_id=f"{c._sub_id()}-forget-{next(_forget_ids)}")
            sub.cancel(first)

    def _request_unsubscribe(self, headers: dict[str, str]) -> None:
        c = self._consumer
        sub_id = c._sub_id()
        assert sub_id is not None
        timeout = self._transport.options.request_blocking_time
        error = self._transport.request("UNSUBSCRIBE", {"id": sub_id, **headers}, timeout)
        if error is not None:
            log.warning("deleting durable subscription %r: %s", c.durable_name, error)

    def _on_message(self, channel: _Channel, link: Any, message: Any) -> None:
        c = self._consumer
        headers = message.headers
        message_id = headers.get(MESSAGE_ID_HEADER) or headers.get("message-id", "")
        ack_id = headers.get("ack") or headers.get("message-id", "")
        no = c._delivery(channel)

        # Whether a NACK here also settles every earlier delivery (``client`` mode, RabbitMQ).
        nack_all = link.dialect.nack_cumulative

        def frame(ok: bool) -> bool:
            # Whether the frame went out (else the connection is gone: the broker redelivers).
            try:
                link.frame("ACK" if ok else "NACK", {"id": ack_id})
            except ConnectionError:
                return False
            return True

        settle = None
        if c.ack != "auto":

            def settle(msg: ReceivedMessage, ok: bool, tx: Transaction | None) -> None:
                if tx is not None:
                    tx._settle(
                        link,
                        "ACK" if ok else "NACK",
                        {"id": ack_id},
                        lambda: c._settled(channel, no, msg.id, ok, nack_all),
                    )
                else:  # handled even if the ACK cannot land: the redelivery is a duplicate
                    c._settled(channel, no, msg.id, ok, nack_all, counted=frame(ok))

        msg = ReceivedMessage(
            message_id,
            message.destination,
            message.body,
            headers,
            headers.get("redelivered") == "true",
            settle,
        )
        c._handle(msg, channel, no, lambda: frame(True))


class StompTx:
    """The STOMP half of one transaction: all on the connection BEGIN went out on."""

    def __init__(self, transport: StompSession, tx: Transaction) -> None:
        self._transport = transport
        self._tx = tx
        self._link: Any = None
        # Run once the broker confirmed the COMMIT (a consumer's ack took effect); never if it
        # did not.
        self._committed: list[Callable[[], None]] = []

    def begin(self) -> None:
        tx = self._tx
        link = self._transport.wait_link(tx.timeout)
        if link is None:
            raise TransactionFailed(tx.id, f"no broker connection within {tx.timeout:g} s")
        try:
            link.frame("BEGIN", {"transaction": tx.id})
        except Exception as exc:
            raise TransactionFailed(tx.id, f"BEGIN failed: {exc!r}") from exc
        self._link = link

    def commit(self) -> None:
        tx = self._tx
        if self._transport.current_link is not self._link or not self._link.open:
            tx.state = "aborted"
            raise TransactionFailed(
                tx.id, "the connection was lost before COMMIT; the broker discarded it"
            )
        error, in_doubt = self._transport.request_status(
            "COMMIT", {"transaction": tx.id}, tx.timeout
        )
        if error is not None:
            self._committed.clear()
            if in_doubt:
                tx.state = "unknown"
                raise TransactionFailed(tx.id, error, applied=None)
            tx.state = "aborted"
            raise TransactionFailed(tx.id, error)
        tx.state = "committed"
        hooks, self._committed = self._committed, []
        _, first = run_all(hooks)  # every consumer's ack bookkeeping, whatever raised
        if first is not None:
            raise first

    def abort(self) -> None:
        self._committed.clear()
        link = self._link
        if link is not None and link.open:
            # If this fails the broker drops the unfinished transaction with the link anyway.
            with contextlib.suppress(Exception):
                link.frame("ABORT", {"transaction": self._tx.id})

    def send(self, destination: str, body: bytes, headers: dict[str, str]) -> None:
        tx = self._tx
        headers["transaction"] = tx.id
        try:
            self._link.send(destination, body, headers)
        except Exception as exc:
            tx.abort()
            raise TransactionFailed(tx.id, f"SEND failed: {exc!r}") from exc

    def settle(
        self, link: Any, command: str, headers: dict[str, str], on_commit: Callable[[], None]
    ) -> None:
        if link is not self._link:
            raise TransactionFailed(
                self._tx.id,
                "a message can be acknowledged only in a transaction on its connection",
            )
        link.frame(command, {**headers, "transaction": self._tx.id})
        self.after_commit(on_commit)

    def after_commit(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once the broker confirmed the COMMIT; never if it did not."""
        self._committed.append(hook)
