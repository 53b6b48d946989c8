"""What reliable senders and consumers report: flush acknowledgements and delivery errors."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeliveryRefused", "FlushAck"]


@dataclass(frozen=True)
class FlushAck:
    """Flush request ``request_id`` is done: the broker acknowledged (or refused, see
    :class:`DeliveryRefused`) every message sent before it. ``count`` is how many messages it
    covered that no earlier flush did."""

    request_id: int
    count: int


@dataclass(frozen=True)
class DeliveryRefused:
    """The broker refused message ``message_id`` (sent to ``destination``) with ``reason``.

    The message counts as processed: it is not re-sent and the flushes after it still complete.
    """

    message_id: str
    destination: str
    reason: str
