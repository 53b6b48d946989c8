"""The embedded in-process broker: topic pub/sub with wildcards, no network, no threads.

:class:`MemoryBroker` delivers each message synchronously, in the publishing thread, to every
subscription whose pattern matches the topic, in subscription order, before ``publish`` returns.
That makes programs on a :class:`~heartwire.ManualClock` deterministic: once a beat is published,
every monitor has seen it.

Thread safety: any thread may publish, subscribe and cancel at any time. The subscription lists
are copy-on-write: ``publish`` reads an immutable snapshot without taking a lock, and a handler may
itself publish, subscribe or cancel. A handler that raises is logged and counted
(``stats()["handler_errors"]``); the error never reaches the publisher, and delivery goes on to
the remaining subscriptions.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from heartwire.transport import (
    HandlerSubscription,
    Message,
    MessageHandler,
    TransportClosed,
    log_handler_error,
)
from heartwire.transport.memory_store import MemoryStore
from heartwire.transport.patterns import is_wildcard, matcher, validate_pattern, validate_topic
from heartwire.transport.session import open_transaction
from heartwire.transport.shards import ShardLayout

__all__ = ["MemoryBroker", "MemorySubscription"]

log = logging.getLogger("heartwire.transport.memory")

_NO_HEADERS: Mapping[str, str] = MappingProxyType({})
# Routes (topic -> matching subscriptions) are cached; the cache is emptied whenever the
# subscriptions change, and when it grows past this many topics.
_ROUTE_CACHE_MAX = 1 << 17


class MemorySubscription(HandlerSubscription):
    """One handler subscribed to one pattern on a :class:`MemoryBroker`."""

    __slots__ = ("_broker", "_order")

    def __init__(
        self,
        broker: MemoryBroker,
        pattern: str,
        handler: MessageHandler,
        matches: Callable[[str], bool],
        order: int,
    ) -> None:
        super().__init__(pattern, handler, matches)
        self._broker = broker
        self._order = order

    def cancel(self) -> None:
        """Stop deliveries to this handler; idempotent.

        No delivery starts after this returns, except one that a publish in another thread had
        already begun.
        """
        if self._active:
            self._active = False
            self._broker._remove(self)


class MemoryBroker:
    """An embedded broker living in this process (see the module docs).

    ``name`` only labels it (``url`` is ``"memory://<name>"``); :func:`heartwire.connect` with a
    ``memory://<name>`` URL returns the one broker of that name.
    """

    def __init__(self, name: str = "", *, client_id: str | None = None) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__} {name!r}")
        self.name = name
        self.url = f"memory://{name}"
        self._lock = threading.Lock()  # guards changes to the subscriptions and the counters
        self._closed = False
        # Copy-on-write snapshots, replaced (never mutated) under the lock.
        self._exact: dict[str, tuple[MemorySubscription, ...]] = {}
        self._wild: tuple[MemorySubscription, ...] = ()
        self._routes: dict[str, tuple[MemorySubscription, ...]] = {}
        self._published = 0
        self._delivered = 0
        self._unrouted = 0
        self._handler_errors = 0
        self._ids = itertools.count(1)
        #: Accepted for parity with STOMP (durable subscriptions need none here).
        self.client_id = client_id
        self._store: MemoryStore | None = None

    @property
    def store(self) -> MemoryStore:
        """The broker's queues and durable subscriptions (:mod:`.memory_store`), made on first
        use: what reliable delivery sends to and consumes from."""
        store = self._store
        if store is None:
            with self._lock:
                store = self._store
                if store is None:
                    store = self._store = MemoryStore(self)
        return store

    def transaction(self, timeout: float | None = None) -> Any:
        """A :class:`heartwire.Transaction` on this broker (the same as
        ``heartwire.Transaction(broker)``): its sends and acks are held and applied on commit,
        dropped on abort (``timeout`` is accepted and unused)."""
        return open_transaction(self, timeout)

    # -- publishing -------------------------------------------------------------------------

    def publish_sharded(
        self,
        layout: ShardLayout,
        topic: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """:meth:`publish` a beat of ``topic`` with its shard's ``heartwire-shard`` header of
        ``layout`` (the embedded broker has no shard queues: the beat goes to its topic, as on
        RabbitMQ)."""
        if not isinstance(layout, ShardLayout):
            raise TypeError(f"layout must be a ShardLayout, got {type(layout).__name__}")
        validate_topic(topic)
        self.publish(topic, body, {**(headers or {}), **layout.headers(topic)}, timeout=timeout)

    def publish(
        self,
        topic: str,
        body: bytes | bytearray | memoryview,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Deliver ``body`` to every subscription matching ``topic``, before returning.

        ``timeout`` is accepted for the :class:`Transport` protocol and ignored: an in-process
        broker never waits for a connection.

        Raises :class:`TransportClosed` after :meth:`close`, :class:`ValueError` (naming the
        argument) for an invalid topic and :class:`TypeError` for a body that is not bytes.
        Handler errors are logged and counted, never raised here.
        """
        if self._closed:
            raise TransportClosed(f"publish to {topic!r} on {self.url!r}: the broker is closed")
        subs = self._routes.get(topic)
        if subs is None:
            subs = self._route(topic)
        if isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        elif not isinstance(body, bytes):
            raise TypeError(f"body must be bytes, got {type(body).__name__}")
        message = Message(topic, body, MappingProxyType(dict(headers)) if headers else _NO_HEADERS)
        delivered: list[MemorySubscription] = []
        errors = 0
        for sub in subs:
            if not sub._active:
                continue
            delivered.append(sub)
            try:
                sub.handler(message)
            except Exception as exc:
                errors += 1
                self._handler_failed(sub, message, exc)
        with self._lock:
            self._published += 1
            self._delivered += len(delivered)
            self._handler_errors += errors
            if not delivered:
                self._unrouted += 1
            for sub in delivered:
                sub.delivered += 1

    def _route(self, topic: str) -> tuple[MemorySubscription, ...]:
        validate_topic(topic)
        exact = self._exact
        wild = self._wild
        routes = self._routes
        found = exact.get(topic, ())
        if wild:
            matched = tuple(s for s in wild if s._matches(topic))
            if matched:
                found = tuple(sorted(found + matched, key=_sub_order))
        with self._lock:
            # Cache only if the subscriptions did not change while we looked.
            if self._routes is routes and self._exact is exact and self._wild is wild:
                if len(routes) >= _ROUTE_CACHE_MAX:
                    routes.clear()
                routes[topic] = found
        return found

    def _handler_failed(self, sub: MemorySubscription, message: Message, exc: Exception) -> None:
        with self._lock:
            sub.errors += 1
            n = sub.errors
        log_handler_error(log, sub.handler, sub.pattern, message, n, exc)

    # -- subscriptions ----------------------------------------------------------------------

    def subscribe(self, pattern: str, handler: MessageHandler) -> MemorySubscription:
        """Call ``handler(message)`` in the publishing thread for every matching message.

        ``pattern`` is a topic name or a wildcard pattern (``*``: one segment; a final ``>``: one
        or more segments). Raises :class:`ValueError` naming an invalid pattern,
        :class:`TypeError` for a handler that is not callable, and :class:`TransportClosed`
        after :meth:`close`.
        """
        validate_pattern(pattern)
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {type(handler).__name__}")
        sub = MemorySubscription(self, pattern, handler, matcher(pattern), next(self._ids))
        with self._lock:
            if self._closed:
                raise TransportClosed(
                    f"subscribe to {pattern!r} on {self.url!r}: the broker is closed"
                )
            if is_wildcard(pattern):
                self._wild = (*self._wild, sub)
            else:
                exact = dict(self._exact)
                exact[pattern] = (*exact.get(pattern, ()), sub)
                self._exact = exact
            self._routes = {}
        return sub

    def _remove(self, sub: MemorySubscription) -> None:
        with self._lock:
            if is_wildcard(sub.pattern):
                self._wild = tuple(s for s in self._wild if s is not sub)
            else:
                exact = dict(self._exact)
                rest = tuple(s for s in exact.get(sub.pattern, ()) if s is not sub)
                if rest:
                    exact[sub.pattern] = rest
                else:
                    exact.pop(sub.pattern, None)
                self._exact = exact
            self._routes = {}

    def subscriptions(self) -> list[MemorySubscription]:
        """The active subscriptions, oldest first."""
        exact, wild = self._exact, self._wild
        subs = [s for group in exact.values() for s in group] + list(wild)
        return sorted(subs, key=_sub_order)

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def close(self) -> None:
        """Cancel every subscription and refuse further use; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            subs = [s for group in self._exact.values() for s in group] + list(self._wild)
            self._exact = {}
            self._wild = ()
            self._routes = {}
        for sub in subs:
            sub._active = False

    def stats(self) -> dict[str, int]:
        """Counters: ``published``, ``delivered`` (handler calls), ``unrouted`` (messages no
        subscription matched), ``handler_errors`` and the current ``subscriptions``."""
        with self._lock:
            return {
                "published": self._published,
                "delivered": self._delivered,
                "unrouted": self._unrouted,
                "handler_errors": self._handler_errors,
                "subscriptions": sum(map(len, self._exact.values())) + len(self._wild),
            }

    def __enter__(self) -> MemoryBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.stats()['subscriptions']} subscriptions"
        return f"<MemoryBroker {self.url!r} {state}>"


def _sub_order(sub: MemorySubscription) -> int:
    return sub._order
