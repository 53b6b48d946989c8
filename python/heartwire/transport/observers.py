"""One protocol for hearing about a transport's connection, and the one registry that calls it.

:class:`ConnectionObserver` names every event a transport reports about its connection. Subclass
it and override what you need (the others are no-ops), or pass any object with some of these
methods (a method it lacks is skipped). Register it with
:meth:`StompTransport.add_observer <heartwire.transport.stomp.StompTransport.add_observer>`
(``add_connection_listener`` is the same call); the embedded broker has no connection and
reports nothing.

Connection events, on the failover thread (:mod:`.failover`):

- ``on_disconnected(broker, reason)``: the link to ``broker`` (``"stomp://host:port"``) was lost;
- ``on_reconnected(broker)``: connected again (to ``broker``), every subscription restored;
- ``on_switched(from_broker, to_broker)``: ``priority_backup`` moved the connection back to
  the preferred broker ``to_broker`` (every subscription restored there first); the one to
  ``from_broker`` is let go (after a short linger): a planned switch, with no
  ``on_disconnected``;
- ``on_reconnect_failed(reason)``: ``reconnect_period`` or ``max_reconnect_attempts`` ran out;
  the transport is closed.

Link events, for the layer above (reliable delivery re-sends and routes receipts with them):

- ``on_attached(link)``: a new connection, its subscriptions restored, before it is published,
  under the transport's connector lock: no network writes there (they would hold up every
  publish and subscribe). An error rejects the link (the transport connects again);
- ``on_published(link)``: after ``on_attached``, outside the lock, once the link was published
  (or rejected: then it is no longer open). An error ends the link;
- ``on_receipt(link, receipt_id)`` and ``on_error_frame(link, headers, detail)``: a RECEIPT or
  ERROR frame nobody waited for, on the link's receiving thread.

:class:`Observers` keeps a list of observers for whoever reports events (the transport, a
reliable sender for its ``on_flushed``/``on_error`` listeners): :meth:`~Observers.notify` calls
each in registration order; one that raises is counted, logged (its first ten errors, then one
in a thousand) and never stops the others nor reaches the caller, which gets the errors back to
act on them (reject a link, count them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from heartwire._throttle import worth_logging

__all__ = ["OBSERVER_METHODS", "ConnectionObserver", "Observers"]


class ConnectionObserver:
    """Base class for connection observers (every method optional; see the module docs)."""

    def on_disconnected(self, broker: str, reason: str) -> None:
        """The connection to ``broker`` was lost (``reason`` says how)."""

    def on_reconnected(self, broker: str) -> None:
        """Connected again, to ``broker``, with every subscription restored."""

    def on_switched(self, from_broker: str, to_broker: str) -> None:
        """``priority_backup``: moved back to the preferred ``to_broker`` (planned, no loss)."""

    def on_reconnect_failed(self, reason: str) -> None:
        """Reconnection gave up (``reconnect_period`` or ``max_reconnect_attempts``); the
        transport is closed."""

    def on_attached(self, link: Any) -> None:
        """A new connection, before it is published (under the connector's lock)."""

    def on_published(self, link: Any) -> None:
        """The connection of the last ``on_attached`` was published (or rejected)."""

    def on_receipt(self, link: Any, receipt: str) -> None:
        """A RECEIPT frame no request waited for (on the receiving thread)."""

    def on_error_frame(self, link: Any, headers: dict[str, str], detail: str) -> None:
        """An ERROR frame no request waited for (on the receiving thread)."""


#: The methods of :class:`ConnectionObserver`.
OBSERVER_METHODS: tuple[str, ...] = tuple(
    name for name in vars(ConnectionObserver) if name.startswith("on_")
)


def _either(methods: tuple[str, ...]) -> str:
    if len(methods) <= 2:
        return " or ".join(methods)
    return "at least one of " + ", ".join(methods)


class Observers:
    """Registered observers, called by :meth:`notify` (see the module docs).

    ``what`` names them in errors and logs (``"connection observer"``); ``methods``: an
    observer must have at least one of them (:class:`TypeError` otherwise). Thread-safe: the
    list is copy-on-write, so :meth:`notify` reads a snapshot without a lock and an observer
    may add or remove observers while being called; no lock is held while one runs.
    """

    def __init__(
        self, log: logging.Logger, what: str, methods: tuple[str, ...] = OBSERVER_METHODS
    ) -> None:
        self._log = log
        self._what = what
        self._methods = methods
        self._items: tuple[Any, ...] = ()
        self._lock = threading.Lock()  # guards replacing _items and the error counts
        #: Observer calls that raised (all observers).
        self.errors = 0
        # Each observer's own count, for the log throttle: one noisy observer must not use up
        # another's first logged errors. Keyed by id (observers need not be hashable); an
        # entry goes with its observer (:meth:`remove`).
        self._errors_of: dict[int, int] = {}

    def add(self, observer: Any) -> bool:
        """Register ``observer`` (after those registered before); False if it already was."""
        if not any(callable(getattr(observer, m, None)) for m in self._methods):
            raise TypeError(
                f"a {self._what} needs {_either(self._methods)}; got {type(observer).__name__}"
            )
        with self._lock:
            if observer in self._items:
                return False
            self._items = (*self._items, observer)
            return True

    def remove(self, observer: Any) -> bool:
        """Unregister ``observer``; False if it was not registered."""
        with self._lock:
            if observer not in self._items:
                return False
            self._items = tuple(x for x in self._items if x is not observer)
            self._errors_of.pop(id(observer), None)
            return True

    @property
    def items(self) -> tuple[Any, ...]:
        """The observers, in registration order (a snapshot)."""
        return self._items

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def notify(self, method: str, *args: Any, logged: bool = True) -> list[Exception]:
        """Call ``method(*args)`` of every observer that has it, in order; returns the errors
        they raised (each counted and logged; the others are called all the same). With
        ``logged=False`` they are counted, not logged: the caller reports them (once)."""
        errors: list[Exception] = []
        for observer in self._items:
            fn = getattr(observer, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception as exc:
                errors.append(exc)
                with self._lock:
                    self.errors += 1
                    n = self._errors_of.get(id(observer), 0) + 1
                    if any(x is observer for x in self._items):  # (not if removed meanwhile)
                        self._errors_of[id(observer)] = n
                if logged and worth_logging(n):
                    self._log.error(
                        "%s %r.%s raised (error %d of this observer)",
                        self._what,
                        observer,
                        method,
                        n,
                        exc_info=exc,
                    )
        return errors
