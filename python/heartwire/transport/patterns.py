"""Topic names and subscription patterns, in the API's own syntax.

A topic name is one or more ``.``-separated segments, each made of ASCII letters, digits, ``_``,
``-`` and ``:`` (``"prices.feed"``, ``"svc.eu-west:1"``). A pattern is a topic name in which a
segment may also be ``*`` (exactly one segment) or, in the last position only, ``>`` (one or more
trailing segments), as in ActiveMQ: ``"svc.*"`` matches ``"svc.a"`` but not ``"svc.a.b"``;
``"svc.>"`` matches both, but not ``"svc"``. Transports translate this syntax to their broker's
dialect (RabbitMQ's ``#``, ``/topic/`` prefixes) so callers never see it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from heartwire._core import MAX_NAME_LEN

__all__ = [
    "MAX_TOPIC_LEN",
    "is_wildcard",
    "matcher",
    "validate_pattern",
    "validate_topic",
]

#: The longest topic name or pattern accepted, in characters (the core's limit).
MAX_TOPIC_LEN = MAX_NAME_LEN

_SEGMENT = re.compile(r"[A-Za-z0-9_:\-]+")
_TOPIC = re.compile(r"[A-Za-z0-9_:\-]+(?:\.[A-Za-z0-9_:\-]+)*")
_TOPIC_SYNTAX = "'.'-separated segments of letters, digits, '_', '-' and ':'"
_PATTERN_SYNTAX = (
    f"{_TOPIC_SYNTAX}, or '*' for one segment, or a final '>' for one or more segments"
)


def _check_str(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str, got {type(value).__name__} {value!r}")
    if not value:
        raise ValueError(f"{field} must not be empty, got {value!r}")
    if len(value) > MAX_TOPIC_LEN:
        raise ValueError(
            f"{field} is {len(value)} characters long, more than the {MAX_TOPIC_LEN} allowed"
        )
    return value


def _bad_segment(value: str, field: str, segment: str, *, pattern: bool) -> ValueError:
    if not segment:
        why = "has an empty segment"
    elif pattern and segment == ">":
        why = "uses '>' before the last segment"
    elif pattern and segment == "#":
        why = "uses '#', which is not a wildcard here (use '>' for trailing segments)"
    elif not pattern and segment in ("*", ">"):
        why = f"contains the wildcard {segment!r} (a topic name must be exact)"
    elif pattern and ("*" in segment or ">" in segment):
        why = f"has the segment {segment!r} (a wildcard must be a whole segment)"
    else:
        bad = sorted({c for c in segment if not _SEGMENT.fullmatch(c)})
        why = f"has the segment {segment!r} with characters not allowed: {''.join(bad)!r}"
    syntax = _PATTERN_SYNTAX if pattern else _TOPIC_SYNTAX
    return ValueError(f"{field} {value!r} {why}; expected {syntax}")


def validate_topic(name: object, field: str = "topic") -> str:
    """Return ``name`` if it is a valid topic name (no wildcards).

    Raises :class:`TypeError` if it is not a ``str`` and :class:`ValueError` otherwise; both
    messages name ``field`` and the value.
    """
    value = _check_str(name, field)
    if _TOPIC.fullmatch(value):
        return value
    for segment in value.split("."):
        if not _SEGMENT.fullmatch(segment):
            raise _bad_segment(value, field, segment, pattern=False)
    raise ValueError(f"{field} {value!r} is not a valid topic name; expected {_TOPIC_SYNTAX}")


def validate_pattern(pattern: object, field: str = "pattern") -> str:
    """Return ``pattern`` if it is a valid subscription pattern (a topic name is one too).

    Raises :class:`TypeError` if it is not a ``str`` and :class:`ValueError` otherwise; both
    messages name ``field`` and the value.
    """
    value = _check_str(pattern, field)
    if _TOPIC.fullmatch(value):
        return value
    segments = value.split(".")
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        if segment == "*" or (segment == ">" and i == last):
            continue
        if not _SEGMENT.fullmatch(segment):
            raise _bad_segment(value, field, segment, pattern=True)
    return value


def is_wildcard(pattern: str) -> bool:
    """Whether ``pattern`` (already valid) has a ``*`` or ``>`` segment."""
    return "*" in pattern or ">" in pattern


def matcher(pattern: str) -> Callable[[str], bool]:
    """Return a predicate telling whether a topic name matches ``pattern``.

    ``pattern`` is validated first (:class:`ValueError` naming it if invalid). Exact patterns
    compare by equality; wildcard patterns compile to one regular expression.
    """
    validate_pattern(pattern)
    if not is_wildcard(pattern):
        return pattern.__eq__
    parts = []
    for segment in pattern.split("."):
        if segment == "*":
            parts.append(r"[^.]+")
        elif segment == ">":
            parts.append(r"[^.]+(?:\.[^.]+)*")
        else:
            parts.append(re.escape(segment))
    regex = re.compile(r"\.".join(parts))

    def matches(topic: str) -> bool:
        return regex.fullmatch(topic) is not None

    matches.__qualname__ = f"matcher({pattern!r})"
    return matches
