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

import contextlib
import itertools
import uuid
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from heartwire.reliable import destinations
from heartwire.transport import is_stomp
from heartwire.transport.headers import MESSAGE_ID_HEADER

__all__ = ["Transaction", "TransactionFailed"]


def _run_all(calls: list[Callable[[], None]]) -> tuple[int, BaseException | None]:
    """Call each of ``calls`` in order, even after one raised; returns how many raised and
    the first exception (None if none did)."""
    failed, first = 0, None
    for call in calls:
        try:
            call()
        except BaseException as exc:
            failed += 1
            if first is None:
                first = exc
    return failed, first


class TransactionFailed(RuntimeError):
    """A transaction could not begin or commit; ``transaction_id`` names it.

    ``applied`` is False when nothing of it took effect, and None when that is unknown: the
    COMMIT was sent but the broker's confirmation did not come in time (the transaction's
    ``state`` is then ``"unknown"``; the broker may have applied it, so do not simply redo it).
    """

    def __init__(self, transaction_id: str, reason: str, applied: bool | None = False) -> None:
        if applied is None:
            reason += "; the COMMIT was sent and may have been applied"
        super().__init__(f"transaction {transaction_id}: {reason}")
        self.transaction_id = transaction_id
        self.reason = reason
        self.applied = applied


class Transaction:
    """One transaction on ``broker`` (see the module docs); made by ``broker.transaction()``.

    ``state`` is ``"new"``, ``"open"``, ``"committed"``, ``"aborted"`` or ``"unknown"`` (a
    COMMIT whose outcome did not come back: see :class:`TransactionFailed`).
    """

    def __init__(self, broker: Any, timeout: float | None = None) -> None:
        self.broker = broker
        self.id = f"hw-tx-{uuid.uuid4().hex[:12]}"
        self.state = "new"
        self._stomp = is_stomp(broker)
        if timeout is None:
            opts = getattr(broker, "options", None)
            timeout = getattr(opts, "request_blocking_time", 10.0)
        self.timeout = float(timeout)
        self._seq = itertools.count(1)
        self._link: Any = None
        self._ops: list[Callable[[], None]] = []
        self._committed: list[Callable[[], None]] = []
        #: Messages sent in the transaction (their ids).
        self.sent: list[str] = []

    # -- lifecycle ------------------------------------------------------------------------------

    def begin(self) -> Transaction:
        """Start it (``with`` does); raises :class:`TransactionFailed` if no connection
        comes within ``timeout`` or BEGIN cannot be sent."""
        if self.state != "new":
            raise TransactionFailed(self.id, f"cannot begin: it is {self.state}")
        if self._stomp:
            import time

            link = self.broker._connector.wait_link(time.monotonic() + self.timeout)
            if link is None:
                raise TransactionFailed(self.id, f"no broker connection within {self.timeout:g} s")
            try:
                link.frame("BEGIN", {"transaction": self.id})
            except Exception as exc:
                raise TransactionFailed(self.id, f"BEGIN failed: {exc!r}") from exc
            self._link = link
        self.state = "open"
        return self

    def commit(self) -> None:
        """Make every send and ack of the transaction take effect; raises
        :class:`TransactionFailed` if the broker refused it or the connection was lost before
        COMMIT (nothing took effect: ``applied`` False, state ``"aborted"``), or if COMMIT went
        out and its receipt did not come within ``timeout`` (``applied`` None, state
        ``"unknown"``: it may have taken effect)."""
        self._check_open()
        if not self._stomp:
            self._commit_held()
            return
        if self.broker.current_link is not self._link or not self._link.open:
            self.state = "aborted"
            raise TransactionFailed(
                self.id, "the connection was lost before COMMIT; the broker discarded it"
            )
        error, in_doubt = self.broker._request("COMMIT", {"transaction": self.id}, self.timeout)
        if error is not None:
            self._ops.clear()
            self._committed.clear()
            if in_doubt:
                self.state = "unknown"
                raise TransactionFailed(self.id, error, applied=None)
            self.state = "aborted"
            raise TransactionFailed(self.id, error)
        self.state = "committed"
        hooks, self._committed = self._committed, []
        _, first = _run_all(hooks)  # every consumer's ack bookkeeping, whatever raised
        if first is not None:
            raise first

    def _commit_held(self) -> None:
        # The embedded broker: apply the held sends and acks, in order. Each is applied even if
        # an earlier one raised (they are independent: nothing may be lost); then the state is
        # "unknown" and the first error propagates (an Exception as TransactionFailed).
        if getattr(self.broker, "closed", False):
            self._ops.clear()
            self.state = "aborted"
            raise TransactionFailed(self.id, "the broker is closed; nothing was applied")
        ops, self._ops = self._ops, []
        failed, first = _run_all(ops)
        if first is None:
            self.state = "committed"
            return
        self.state = "unknown"
        if not isinstance(first, Exception):
            raise first
        raise TransactionFailed(
            self.id,
            f"{failed} of {len(ops)} operations raised on commit, the others took effect; "
            f"first: {first!r}",
            applied=None,
        ) from first

    def abort(self) -> None:
        """Drop every send and ack of the transaction; idempotent once aborted."""
        if self.state in ("aborted", "new"):
            self.state = "aborted"
            return
        self._check_open()
        self.state = "aborted"
        self._ops.clear()
        self._committed.clear()
        link = self._link
        if link is not None and link.open:
            # If this fails the broker drops the unfinished transaction with the link anyway.
            with contextlib.suppress(Exception):
                link.frame("ABORT", {"transaction": self.id})

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
        if self._stomp:
            frame["transaction"] = self.id
            try:
                self._link.send(destination, body, frame)
            except Exception as exc:
                self.abort()
                raise TransactionFailed(self.id, f"SEND failed: {exc!r}") from exc
        else:
            from heartwire.reliable.memory_store import store_of

            store = store_of(self.broker)
            self._ops.append(lambda: store.send(destination, body, frame))
        self.sent.append(message_id)
        return message_id

    def _settle_stomp(self, link: Any, command: str, headers: dict[str, str]) -> None:
        # A consumer's ACK/NACK in this transaction.
        self._check_open()
        if link is not self._link:
            raise TransactionFailed(
                self.id, "a message can be acknowledged only in a transaction on its connection"
            )
        link.frame(command, {**headers, "transaction": self.id})

    def _after_commit(self, hook: Callable[[], None]) -> None:
        # STOMP: ``hook`` runs once the broker confirmed the COMMIT (a consumer's ack took
        # effect); never if it did not.
        self._committed.append(hook)

    def _defer(self, op: Callable[[], None]) -> None:
        # The embedded broker: an ack applied on commit.
        self._check_open()
        self._ops.append(op)

    def __repr__(self) -> str:
        return f"<Transaction {self.id} {self.state}, {len(self.sent)} sent>"
