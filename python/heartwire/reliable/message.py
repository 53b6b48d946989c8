"""A message as a reliable :class:`~heartwire.reliable.Consumer` hands it over."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from heartwire.reliable.transaction import Transaction

__all__ = ["ReceivedMessage"]

Settle = Callable[["ReceivedMessage", bool, "Transaction | None"], None]


class ReceivedMessage:
    """One message: ``id`` (the sender's ``hw-message-id``, else the broker's
    ``message-id``), ``redelivered`` (the broker delivered it before), ``destination``,
    ``body``, ``headers`` (read-only).

    In the ``client`` and ``client-individual`` ack modes call :meth:`ack` once processed
    (``client``: also acknowledges every earlier message of the subscription) or :meth:`nack`;
    either may be part of a transaction (``msg.ack(tx)``). In ``auto`` mode both are no-ops.
    """

    __slots__ = ("_settle", "_settled", "body", "destination", "headers", "id", "redelivered")

    def __init__(
        self,
        message_id: str,
        destination: str,
        body: bytes,
        headers: Mapping[str, str],
        redelivered: bool,
        settle: Settle | None,
    ) -> None:
        self.id = message_id
        self.destination = destination
        self.body = body
        self.headers = headers
        self.redelivered = redelivered
        self._settle = settle
        self._settled = False

    @property
    def settled(self) -> bool:
        """Whether :meth:`ack` or :meth:`nack` was called (always True in ``auto`` mode)."""
        return self._settled or self._settle is None

    def ack(self, tx: Transaction | None = None) -> None:
        """Acknowledge the message (in transaction ``tx`` if given); idempotent."""
        if self._settle is not None and not self._settled:
            self._settled = True
            self._settle(self, True, tx)

    def nack(self, tx: Transaction | None = None) -> None:
        """Reject the message: the broker redelivers or dead-letters it by its own policy
        (the embedded broker keeps it in ``dead_letters``); idempotent. In ``client`` mode a
        NACK also rejects (requeues) every earlier unacknowledged message on RabbitMQ only;
        on ActiveMQ and the embedded broker it rejects this message alone."""
        if self._settle is not None and not self._settled:
            self._settled = True
            self._settle(self, False, tx)

    def __repr__(self) -> str:
        again = ", redelivered" if self.redelivered else ""
        return f"<ReceivedMessage {self.id} on {self.destination!r}{again}, {len(self.body)} bytes>"
