"""Transactions: sends and acks that take effect together, or not at all.

::

    with broker.transaction() as tx:
        tx.send("/queue/orders", b"...")
        msg.ack(tx)
    # committed here; an exception inside the block aborts instead (and propagates)

On STOMP this is BEGIN, the frames with a ``transaction`` header, then COMMIT (waited for with a
receipt) or ABORT, all on one connection: if that connection is lost before COMMIT, the broker
discards the transaction and :meth:`Transaction.commit` raises :class:`TransactionFailed`. If
COMMIT went out but its receipt did not come back in time, the outcome is unknown:
:class:`TransactionFailed` says so (``applied`` None). Acks
in a transaction must be of messages received on the same transport.

On the embedded broker the sends and acks are held in the transaction and applied, in order, on
commit; abort drops them (the messages acked in it stay unacknowledged). A commit on a closed
broker applies nothing (``applied`` False); an operation that raises on commit (a consumer's
handler raising a BaseException, inside a send) does not stop the others: the state is then
``"unknown"`` and the first error propagates.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from heartwire.reliable.backend import backend_for
from heartwire.reliable.base import TransactionFailed
from heartwire.transport import destinations
from heartwire.transport.headers import MESSAGE_ID_HEADER
from heartwire.transport.session import provide_transactions

__all__ = ["Transaction", "TransactionFailed"]


class Transaction:
    """One transaction on ``broker`` (see the module docs); made by ``broker.transaction()``.

    ``state`` is ``"new"``, ``"open"``, ``"committed"``, ``"aborted"`` or ``"unknown"`` (a
    COMMIT whose outcome did not come back: see :class:`TransactionFailed`).
    """

    def __init__(self, broker: Any, timeout: float | None = None) -> None:
        self.broker = broker
        self.id = f"hw-tx-{uuid.uuid4().hex[:12]}"
        self.state = "new"
        backend = backend_for(broker)
        self.timeout = float(backend.request_timeout if timeout is None else timeout)
        self._seq = itertools.count(1)
        #: Messages sent in the transaction (their ids).
        self.sent: list[str] = []
        # The transport's half (picked once): begins, sends, commits, aborts.
        self._part = backend.transaction(self)

    # -- lifecycle ------------------------------------------------------------------------------

    def begin(self) -> Transaction:
        """Start it (``with`` does); raises :class:`TransactionFailed` if no connection
        comes within ``timeout`` or BEGIN cannot be sent."""
        if self.state != "new":
            raise TransactionFailed(self.id, f"cannot begin: it is {self.state}")
        self._part.begin()
        self.state = "open"
        return self

    def commit(self) -> None:
        """Make every send and ack of the transaction take effect; raises
        :class:`TransactionFailed` if the broker refused it or the connection was lost before
        COMMIT (nothing took effect: ``applied`` False, state ``"aborted"``), or if COMMIT went
        out and its receipt did not come within ``timeout`` (``applied`` None, state
        ``"unknown"``: it may have taken effect)."""
        self._check_open()
        self._part.commit()  # sets the state: committed, aborted or unknown

    def abort(self) -> None:
        """Drop every send and ack of the transaction; idempotent once aborted."""
        if self.state in ("aborted", "new"):
            self.state = "aborted"
            return
        self._check_open()
        self.state = "aborted"
        self._part.abort()

    def __enter__(self) -> Transaction:
        return self.begin()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            if self.state == "open":
                self.abort()
            return
        self.commit()

    def _check_open(self) -> None:
        if self.state != "open":
            raise TransactionFailed(self.id, f"it is {self.state}, not open")

    # -- work -----------------------------------------------------------------------------------

    def send(
        self,
        destination: str,
        body: bytes | str,
        headers: Mapping[str, str] | None = None,
        *,
        persistent: bool = True,
    ) -> str:
        """Send ``body`` to ``destination`` (``/queue/x`` or ``/topic/x``) as part of the
        transaction; returns its message id. Delivered only on commit."""
        self._check_open()
        destinations.validate(destination)
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError(f"body must be bytes or str, got {type(body).__name__}")
        body = bytes(body)
        message_id = f"{self.id}:{next(self._seq)}"
        frame: dict[str, str] = dict(headers) if headers else {}
        if persistent:
            frame["persistent"] = "true"
        frame[MESSAGE_ID_HEADER] = message_id
        self._part.send(destination, body, frame)
        self.sent.append(message_id)
        return message_id

    def _settle(
        self, link: Any, command: str, headers: dict[str, str], on_commit: Callable[[], None]
    ) -> None:
        # A consumer's ACK/NACK of a message received on ``link`` (None: the embedded
        # broker), in this transaction; ``on_commit()`` once it is committed, never if not.
        self._check_open()
        self._part.settle(link, command, headers, on_commit)

    def __repr__(self) -> str:
        return f"<Transaction {self.id} {self.state}, {len(self.sent)} sent>"


# What ``broker.transaction()`` returns (the transport layer does not import this one).
provide_transactions(lambda broker, timeout: Transaction(broker, timeout=timeout))
