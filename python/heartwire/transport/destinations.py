"""Queue and topic destinations, STOMP-style: ``/queue/<name>`` and ``/topic/<name>`` (the
embedded broker's queues and reliable delivery name them so on every transport)."""

from __future__ import annotations

__all__ = ["split", "validate"]

_KINDS = ("queue", "topic")
_FORBIDDEN = set("\r\n\0: ")


def validate(destination: object) -> str:
    """``destination`` if it is ``/queue/<name>`` or ``/topic/<name>`` (a name without
    whitespace, ``:`` or NUL); else :class:`ValueError` (TypeError for a non-str) naming it."""
    if not isinstance(destination, str):
        raise TypeError(f"destination must be a str, got {type(destination).__name__}")
    split(destination)
    return destination


def split(destination: str) -> tuple[str, str]:
    """``("queue" | "topic", name)`` of a valid destination; ValueError naming it otherwise."""
    parts = destination.split("/", 2)
    if len(parts) != 3 or parts[0] or parts[1] not in _KINDS or not parts[2]:
        raise ValueError(f"destination {destination!r} must be '/queue/<name>' or '/topic/<name>'")
    name = parts[2]
    if _FORBIDDEN.intersection(name):
        raise ValueError(
            f"destination {destination!r}: the name may not contain whitespace, ':' or NUL"
        )
    kind, name = parts[1], parts[2]
    return kind, name
