"""Picking a broker's reliable-delivery backend, once (:func:`backend_for`)."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from heartwire.reliable.base import Backend
from heartwire.reliable.memory_backend import MemoryBackend
from heartwire.reliable.stomp_backend import StompBackend
from heartwire.transport.memory import MemoryBroker
from heartwire.transport.session import StompSession

__all__ = ["backend_for"]

_lock = threading.Lock()  # guards _backends (held briefly)
_making = threading.Lock()  # one backend made at a time (made once per broker)
_backends: weakref.WeakKeyDictionary[Any, Backend] = weakref.WeakKeyDictionary()


def backend_for(broker: Any) -> Backend:
    """The backend of ``broker`` (a transport from :func:`heartwire.connect`), made on first
    use and the same for every sender, consumer and transaction on it: a STOMP transport's
    holds the one receipt tracker its senders share. Raises :class:`TypeError` naming
    ``broker`` if it is neither an embedded broker nor a STOMP transport."""
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
    with _lock:
        backend = _backends.get(broker)
    if backend is not None:
        return backend
    # Made outside _lock: registering a STOMP backend's tracker waits for the transport's
    # connector lock (held while a connection is attached), which must not hold up the
    # senders and consumers of other transports looking theirs up.
    with _making:
        with _lock:
            backend = _backends.get(broker)
        if backend is None:
            backend = kind(broker)
            with _lock:
                _backends[broker] = backend
        return backend
