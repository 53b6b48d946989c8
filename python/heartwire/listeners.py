"""Listener base classes and the :class:`ListenerSet` that calls them.

Subclass :class:`SubscriberListener` (monitors) or :class:`PublisherListener` (publishers) and
override the methods you care about; the others are no-ops and cost nothing (a monitor asks the
core for ``received`` events only when some listener overrides ``on_received``). A method may be
a coroutine function (``async def``): it is then scheduled on the event loop that was running
when the listener was added.

A listener that raises never reaches the publisher or monitor, nor stops the other listeners: the
error is logged, counted, and reported to the *other* listeners' ``on_exception`` with reason
``"listener_error"``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
from typing import Any, Generic, TypeVar

from heartwire.events import (
    Disconnected,
    ExceptionEvent,
    Failed,
    LocalPause,
    Received,
    Reconnected,
    Resumed,
    Sent,
    Started,
    Stopped,
)

__all__ = ["ConnectionEvents", "ListenerSet", "PublisherListener", "SubscriberListener"]

log = logging.getLogger("heartwire.listeners")


class SubscriberListener:
    """Receives a monitor's events; override the methods you need (plain or ``async def``).

    ``on_received`` is called once per beat, so override it only if you need it: a monitor of a
    million topics then costs no Python call per beat.
    """

    def on_started(self, event: Started) -> Any:
        """The monitor started."""

    def on_stopped(self, event: Stopped) -> Any:
        """The monitor stopped."""

    def on_received(self, event: Received) -> Any:
        """A beat was recorded (one call per beat)."""

    def on_failed(self, event: Failed) -> Any:
        """A topic missed ``event.missed`` periods in a row; repeats every further period."""

    def on_resumed(self, event: Resumed) -> Any:
        """A failed topic was heard again."""

    def on_local_pause(self, event: LocalPause) -> Any:
        """The monitor itself was not running for ``event.duration`` seconds (its process was
        stopped or starved); no topic was failed for it. Once per pause."""

    def on_disconnected(self, event: Disconnected) -> Any:
        """The transport lost its broker connection and is reconnecting (STOMP only)."""

    def on_reconnected(self, event: Reconnected) -> Any:
        """The transport is connected again, subscriptions restored (STOMP only)."""

    def on_exception(self, event: ExceptionEvent) -> Any:
        """A bad beat, a transport error or another listener's error (``event.reason``)."""


class PublisherListener:
    """Receives a publisher's events; override the methods you need (plain or ``async def``)."""

    def on_started(self, event: Started) -> Any:
        """The publisher started."""

    def on_stopped(self, event: Stopped) -> Any:
        """The publisher stopped."""

    def on_sent(self, event: Sent) -> Any:
        """A beat was sent."""

    def on_disconnected(self, event: Disconnected) -> Any:
        """The transport lost its broker connection and is reconnecting (STOMP only)."""

    def on_reconnected(self, event: Reconnected) -> Any:
        """The transport is connected again, subscriptions restored (STOMP only)."""

    def on_exception(self, event: ExceptionEvent) -> Any:
        """A failed dependency check, a send error or another listener's error."""


L = TypeVar("L")


class _Entry:
    """One registered listener, the loop its coroutines run on, and the methods it overrides."""

    __slots__ = ("listener", "loop", "overrides")

    def __init__(
        self, listener: Any, loop: asyncio.AbstractEventLoop | None, overrides: frozenset[str]
    ) -> None:
        self.listener = listener
        self.loop = loop
        self.overrides = overrides


def _overridden(listener: object, kind: type) -> frozenset[str]:
    """The ``on_*`` methods of ``kind`` that ``listener`` (its class or the instance) replaces."""
    names = set()
    for name in dir(kind):
        if not name.startswith("on_"):
            continue
        base = getattr(kind, name)
        if (
            name in getattr(listener, "__dict__", {})
            or getattr(type(listener), name, base) is not base
        ):
            names.add(name)
    return frozenset(names)


class ListenerSet(Generic[L]):
    """The listeners of one publisher or monitor.

    ``kind`` is the listener base class accepted by :meth:`add`; ``source`` names the owner in the
    :class:`~heartwire.events.ExceptionEvent` reports. Safe to use from several threads; listeners
    may be added or removed while events are being emitted (an emit in progress uses the set as it
    was when it began).
    """

    def __init__(self, kind: type[L], source: str) -> None:
        self.kind = kind
        self.source = source
        self._entries: tuple[_Entry, ...] = ()
        self._lock = threading.Lock()
        self._errors = 0

    def add(self, listener: L, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Register ``listener`` (an instance of ``kind``, else ``TypeError``).

        Its coroutine methods run on ``loop``, by default the loop running in the calling thread
        (if any). Adding a listener already registered does nothing.
        """
        if not isinstance(listener, self.kind):
            raise TypeError(
                f"listener must be a {self.kind.__name__} instance, "
                f"got {type(listener).__module__}.{type(listener).__qualname__}: {listener!r}"
            )
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        entry = _Entry(listener, loop, _overridden(listener, self.kind))
        with self._lock:
            if any(e.listener is listener for e in self._entries):
                return
            self._entries = (*self._entries, entry)

    def remove(self, listener: L) -> bool:
        """Unregister ``listener``; False if it was not registered."""
        with self._lock:
            kept = tuple(e for e in self._entries if e.listener is not listener)
            found = len(kept) != len(self._entries)
            self._entries = kept
        return found

    def wants(self, method_name: str) -> bool:
        """Whether some registered listener overrides ``method_name`` (e.g. ``"on_received"``)."""
        return any(method_name in e.overrides for e in self._entries)

    @property
    def errors(self) -> int:
        """Listener calls that raised (or whose coroutine raised) so far."""
        return self._errors

    @property
    def listeners(self) -> list[L]:
        """The registered listeners, in the order they were added."""
        return [e.listener for e in self._entries]

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, listener: object) -> bool:
        return any(e.listener is listener for e in self._entries)

    def emit(self, method_name: str, event: object) -> None:
        """Call ``method_name(event)`` on every listener that overrides it; never raises."""
        for entry in self._entries:
            if method_name in entry.overrides:
                self._call(entry, method_name, event, report=True)

    def _call(self, entry: _Entry, method_name: str, event: object, *, report: bool) -> None:
        try:
            result = getattr(entry.listener, method_name)(event)
            if inspect.isawaitable(result):
                self._schedule(entry, method_name, result, report=report)
        except Exception as exc:
            self._failed(entry, method_name, exc, report=report)

    def _schedule(self, entry: _Entry, method_name: str, awaitable: Any, *, report: bool) -> None:
        loop = entry.loop
        if loop is None or loop.is_closed():
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never awaited: no "coroutine was never awaited" warning
            where = "no event loop was running" if loop is None else "its event loop is closed"
            raise RuntimeError(
                f"{type(entry.listener).__qualname__}.{method_name} is a coroutine function but "
                f"{where} when the listener was added"
            )

        async def run() -> None:
            await awaitable

        future = asyncio.run_coroutine_threadsafe(run(), loop)

        def done(fut: concurrent.futures.Future[None]) -> None:
            if fut.cancelled():
                return
            exc = fut.exception()
            if isinstance(exc, Exception):
                self._failed(entry, method_name, exc, report=report)

        future.add_done_callback(done)

    def _failed(self, entry: _Entry, method_name: str, exc: Exception, *, report: bool) -> None:
        with self._lock:
            self._errors += 1
        name = f"{type(entry.listener).__qualname__}.{method_name}"
        log.error("listener %s of %s raised", name, self.source, exc_info=exc)
        if not report:
            return  # an on_exception that fails while reporting is only logged: no cascade
        report_event = ExceptionEvent(self.source, "listener_error", exc, detail=f"{name}: {exc!r}")
        for other in self._entries:
            if other is not entry and "on_exception" in other.overrides:
                self._call(other, "on_exception", report_event, report=False)


class ConnectionEvents:
    """Relays a transport's connection callbacks to a :class:`ListenerSet` as events.

    :meth:`attach` registers it with a transport that has connections (one offering
    ``add_connection_listener``, as the STOMP transport does); the embedded broker has none, and
    then nothing happens. ``on_reconnect_failed`` (the transport gave up and closed) becomes
    ``on_exception`` with reason ``"reconnect_failed"``.
    """

    def __init__(self, listeners: ListenerSet[Any]) -> None:
        self._listeners = listeners

    def on_disconnected(self, broker: str, reason: str) -> None:
        self._listeners.emit("on_disconnected", Disconnected(broker, reason))

    def on_reconnected(self, broker: str) -> None:
        self._listeners.emit("on_reconnected", Reconnected(broker))

    def on_reconnect_failed(self, reason: str) -> None:
        event = ExceptionEvent(self._listeners.source, "reconnect_failed", None, reason)
        self._listeners.emit("on_exception", event)

    def attach(self, transport: object) -> None:
        add = getattr(transport, "add_connection_listener", None)
        if add is not None:
            add(self)

    def detach(self, transport: object) -> None:
        remove = getattr(transport, "remove_connection_listener", None)
        if remove is not None:
            remove(self)
