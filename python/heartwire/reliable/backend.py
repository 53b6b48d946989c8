"""Picking a broker's reliable-delivery backend, once (:func:`backend_for`)."""

from __future__ import annotations

import threading
from typing import Any

from heartwire.reliable.base import Backend
from heartwire.reliable.memory_backend import MemoryBackend
from heartwire.reliable.stomp_backend import StompBackend
from heartwire.transport.memory import MemoryBroker
from heartwire.transport.session import StompSession

__all__ = ["backend_for"]

# The backend is kept on the broker itself (this attribute): its lifetime is the broker's.
# A weak cache keyed by the broker would keep every broker alive, each backend holding it.
_ATTR = "_heartwire_reliable_backend"
# Guards setting it (held briefly). Making a backend holds no lock: a STOMP backend's
# add_observer waits for that transport's connector lock (held across a whole attach), and
# neither another broker's first backend nor an on_attached making one may wait behind that.
_lock = threading.Lock()


def _cached(broker: Any) -> Backend | None:
    try:
        return vars(broker).get(_ATTR)  # (not getattr: a proxy's __getattr__ forwards it)
    except TypeError:  # no __dict__: not a transport (backend_for says so)
        return None


def backend_for(broker: Any) -> Backend:
    """The backend of ``broker`` (a transport from :func:`heartwire.connect`), made on first
    use and the same for every sender, consumer and transaction on it: a STOMP transport's
    holds the one receipt tracker its senders share. It is kept on the broker and lives as
    long as it. Raises :class:`TypeError` naming ``broker`` if it is neither an embedded broker
    nor a STOMP transport."""
    backend = _cached(broker)
    if backend is not None:  # (looked up first: the protocol check costs ~25 µs)
        return backend
    kind: type[MemoryBackend] | type[StompBackend]
    if isinstance(broker, MemoryBroker):
        kind = MemoryBackend
    elif isinstance(broker, StompSession):
        kind = StompBackend
    else:
        raise TypeError(
            "broker must be a transport from heartwire.connect() (an embedded broker or a "
            f"STOMP transport), got {type(broker).__name__}"
        )
    if not hasattr(broker, "__dict__"):  # (checked before a backend registers anything)
        raise TypeError(
            "broker must be a transport from heartwire.connect() (one that can hold its "
            f"reliable-delivery backend), got {type(broker).__name__}"
        )
    made = kind(broker)
    with _lock:
        backend = _cached(broker)
        if backend is None:
            setattr(broker, _ATTR, made)
            return made
    made.close()  # another thread's was kept first (a rare race): undo ours, outside the lock
    return backend
