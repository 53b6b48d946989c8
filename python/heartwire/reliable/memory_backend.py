"""Reliable delivery on the embedded broker (``memory://``), through its store
(:class:`~heartwire.transport.memory_store.MemoryStore`).

The store delivers in the sending thread before ``send`` returns, so receipts are immediate: a
sender's message is outstanding only until the store holds it (before it is delivered).
Transactions hold their sends and acks and apply them, in order, on commit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from heartwire.reliable.base import Pending, TransactionFailed, run_all
from heartwire.reliable.message import ReceivedMessage
from heartwire.transport.headers import MESSAGE_ID_HEADER
from heartwire.transport.memory import MemoryBroker

if TYPE_CHECKING:
    from heartwire.reliable.consumer import Consumer
    from heartwire.reliable.sender import ReliableSender
    from heartwire.reliable.transaction import Transaction

__all__ = ["MemoryBackend"]


class MemoryBackend:
    """Reliable delivery on one embedded broker (see the module docs)."""

    request_timeout = 10.0

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker

    def close(self) -> None:
        pass

    def outbox(self, sender: ReliableSender) -> MemoryOutbox:
        return MemoryOutbox(self.broker, sender)

    def subscriber(self, consumer: Consumer) -> MemorySubscriber:
        return MemorySubscriber(self.broker, consumer)

    def transaction(self, tx: Transaction) -> MemoryTx:
        return MemoryTx(self.broker, tx)


class MemoryOutbox:
    """The embedded half of one reliable sender: each message goes to the store at once."""

    def __init__(self, broker: MemoryBroker, sender: ReliableSender) -> None:
        self._broker = broker
        self._sender = sender

    def put(self, pending: Pending) -> bool:
        return True

    def run(self, pending: Pending) -> None:
        # Outstanding until the store holds it (its receipt, before the store delivers it):
        # a flush requested meanwhile from another thread covers this message and waits for
        # it; one from a handler this send is delivering to does not wait for the delivery.
        sender = self._sender
        message_id = pending.headers[MESSAGE_ID_HEADER]
        stored = False

        def receipt() -> None:
            nonlocal stored
            stored = True
            sender._receipted(message_id)

        try:
            self._broker.store.send(
                sender.destination, pending.body, pending.headers, on_stored=receipt
            )
        except ValueError as exc:
            if not stored:
                sender._refused(message_id, str(exc))
            else:
                raise
        except BaseException as exc:
            # The store failed (it is raised to the caller too): never leave a flush waiting.
            if not stored:
                sender._refused(message_id, f"the embedded broker failed: {exc!r}")
            raise

    def receipts_read_here(self) -> str | None:
        return None  # receipts come inside send: a wait never depends on another thread

    def close(self) -> None:
        pass


class MemorySubscriber:
    """The embedded half of one consumer: a store subscription."""

    def __init__(self, broker: MemoryBroker, consumer: Consumer) -> None:
        self._broker = broker
        self._consumer = consumer

    def start(self) -> Any:
        c = self._consumer
        store = self._broker.store
        holder: list[Any] = []

        def deliver(stored: Any, tag: int | None) -> None:
            channel = holder[0]
            no = c._delivery(channel)
            settle = None
            if tag is not None:

                def settle(msg: ReceivedMessage, ok: bool, tx: Transaction | None) -> None:
                    def apply() -> None:
                        store.settle(channel, tag, ok)
                        c._settled(channel, no, msg.id, ok, False)  # (NACK: its own)

                    if tx is not None:
                        tx._settle(None, "ACK" if ok else "NACK", {}, apply)
                    else:
                        apply()

            headers = stored.headers
            msg = ReceivedMessage(
                headers.get(MESSAGE_ID_HEADER, ""),
                stored.destination,
                stored.body,
                headers,
                stored.redelivered,
                settle,
            )
            c._handle(msg, channel, no, lambda: store.settle(channel, tag, True) if tag else None)

        # The store may deliver buffered messages before subscribe returns: give it the
        # subscription through ``holder`` first.
        deferred = _Deferred(deliver)
        sub = store.subscribe(c.destination, c.ack, c.durable_name, deferred)
        holder.append(sub)
        deferred.release()
        return sub

    def stop(self, sub: Any, forget: bool) -> None:
        self._broker.store.unsubscribe(sub, forget=forget)

    def forget(self) -> None:
        c = self._consumer
        store = self._broker.store
        sub = store.subscribe(c.destination, "auto", c.durable_name, lambda m, t: None)
        store.unsubscribe(sub, forget=True)


class MemoryTx:
    """The embedded half of one transaction: its sends and acks, held until commit."""

    def __init__(self, broker: MemoryBroker, tx: Transaction) -> None:
        self._broker = broker
        self._tx = tx
        self._ops: list[Callable[[], None]] = []

    def begin(self) -> None:
        pass

    def send(self, destination: str, body: bytes, headers: dict[str, str]) -> None:
        store = self._broker.store
        self._ops.append(lambda: store.send(destination, body, headers))

    def settle(
        self, link: Any, command: str, headers: dict[str, str], on_commit: Callable[[], None]
    ) -> None:
        if link is not None:  # a message received on a STOMP connection
            raise TransactionFailed(
                self._tx.id,
                "a message can be acknowledged only in a transaction on its connection",
            )
        self._ops.append(on_commit)

    def commit(self) -> None:
        # Apply the held sends and acks, in order. Each is applied even if an earlier one
        # raised (they are independent: nothing may be lost); then the state is "unknown" and
        # the first error propagates (an Exception as TransactionFailed).
        tx = self._tx
        if self._broker.closed:
            self._ops.clear()
            tx.state = "aborted"
            raise TransactionFailed(tx.id, "the broker is closed; nothing was applied")
        ops, self._ops = self._ops, []
        failed, first = run_all(ops)
        if first is None:
            tx.state = "committed"
            return
        tx.state = "unknown"
        if not isinstance(first, Exception):
            raise first
        raise TransactionFailed(
            tx.id,
            f"{failed} of {len(ops)} operations raised on commit, the others took effect; "
            f"first: {first!r}",
            applied=None,
        ) from first

    def abort(self) -> None:
        self._ops.clear()


class _Deferred:
    """A delivery callback that holds messages until :meth:`release` (the embedded store may
    deliver while ``subscribe`` runs, before the consumer has its subscription object)."""

    def __init__(self, fn: Callable[[Any, int | None], None]) -> None:
        self._fn = fn
        self._held: list[tuple[Any, int | None]] | None = []

    def __call__(self, stored: Any, tag: int | None) -> None:
        if self._held is not None:
            self._held.append((stored, tag))
        else:
            self._fn(stored, tag)

    def release(self) -> None:
        # Every held message is delivered even if an earlier delivery raised (a handler's
        # BaseException); the first one raised propagates once all are done.
        held, self._held = self._held, None
        fn = self._fn
        _, first = run_all([functools.partial(fn, stored, tag) for stored, tag in held or ()])
        if first is not None:
            raise first
