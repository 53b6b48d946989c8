"""What a reliable-delivery backend provides: the contract between the classes written once
(:class:`~heartwire.reliable.ReliableSender`, :class:`~heartwire.reliable.Consumer`,
:class:`~heartwire.reliable.Transaction`) and the two ways of delivering
(:mod:`.stomp_backend`, :mod:`.memory_backend`), picked once per broker by
:func:`heartwire.reliable.backend.backend_for`.

Each class gets one part from its broker's backend and hands it the transport-specific work:

- a sender's :class:`Outbox` writes its messages and reports each one held (receipted) or
  refused;
- a consumer's :class:`Subscriber` subscribes, unsubscribes and deletes durable subscriptions,
  and hands each delivery to the consumer's common bookkeeping;
- a transaction's :class:`TxPart` begins, sends, commits and aborts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from heartwire.reliable.consumer import Consumer
    from heartwire.reliable.sender import ReliableSender
    from heartwire.reliable.transaction import Transaction

__all__ = ["Backend", "Outbox", "Pending", "Subscriber", "TransactionFailed", "TxPart", "run_all"]


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


def run_all(calls: list[Callable[[], None]]) -> tuple[int, BaseException | None]:
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


@dataclass
class Pending:
    """A sender's message, kept until the broker holds it."""

    seq: int
    body: bytes
    headers: dict[str, str]
    link: Any  # STOMP: the connection it was last sent on (None: not sent yet)


class Outbox(Protocol):
    """The transport half of one reliable sender."""

    def put(self, pending: Pending) -> bool:
        """Called under the sender's lock right after ``pending`` became outstanding (so the
        order of puts is the order of sends); whether the caller must then :meth:`run`."""
        ...

    def run(self, pending: Pending) -> None:
        """Outside the sender's lock, after a :meth:`put` that returned True: write."""
        ...

    def receipts_read_here(self) -> str | None:
        """The broker whose receipts the calling thread reads (a wait there could never end),
        else None."""
        ...

    def close(self) -> None:
        """Stop re-sending (the sender closed)."""
        ...


class Subscriber(Protocol):
    """The transport half of one consumer."""

    def start(self) -> Any:
        """Subscribe; returns the subscription (given back to :meth:`stop`)."""
        ...

    def stop(self, sub: Any, forget: bool) -> None:
        """Unsubscribe ``sub``; ``forget``: delete the durable subscription too."""
        ...

    def forget(self) -> None:
        """Delete the durable subscription of a stopped consumer."""
        ...


class TxPart(Protocol):
    """The transport half of one transaction (the state machine is the Transaction's)."""

    def begin(self) -> None:
        """Raises TransactionFailed if the transaction cannot start."""
        ...

    def send(self, destination: str, body: bytes, headers: dict[str, str]) -> None: ...

    def commit(self) -> None:
        """Apply it and set the transaction's state (raises TransactionFailed)."""
        ...

    def abort(self) -> None: ...

    def settle(
        self, link: Any, command: str, headers: dict[str, str], on_commit: Callable[[], None]
    ) -> None:
        """A consumer's ACK/NACK in the transaction, of a message received on ``link`` (None:
        the embedded broker); ``on_commit()`` runs once the transaction is committed."""
        ...


class Backend(Protocol):
    """One broker's way of delivering reliably (see the module docs)."""

    #: How long a transaction waits by default (the transport's ``request_blocking_time``).
    request_timeout: float

    def outbox(self, sender: ReliableSender) -> Outbox: ...

    def subscriber(self, consumer: Consumer) -> Subscriber: ...

    def transaction(self, tx: Transaction) -> TxPart: ...

    def close(self) -> None:
        """Undo what making it did (a backend made in a race and not kept; never one in use)."""
        ...
