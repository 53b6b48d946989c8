"""Transports: how beats travel between publishers and monitors.

Every transport offers the same small interface (:class:`Transport`): ``publish`` bytes to a topic,
``subscribe`` a handler to a pattern (topic names and wildcards as in
:mod:`heartwire.transport.patterns`), ``close``. :func:`connect` picks one from a URL:

- ``None`` or ``"memory://"``: a new embedded in-process broker (:class:`MemoryBroker`);
- ``"memory://<name>"``: the embedded broker of that name in this process, created on first use
  (as ActiveMQ's ``vm://`` URLs), so separate parts of one program can meet on it;
- ``"stomp://host:port"``, ``"stomp+ssl://host:port"`` (TLS) and
  ``"failover:(stomp://a:61613,stomp+ssl://b:61612)?..."``: STOMP brokers
  (:class:`~heartwire.transport.stomp.StompTransport`; URL and options in
  :mod:`heartwire.transport.urls`, TLS in :mod:`heartwire.transport.tls`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

__all__ = [
    "ConnectFailed",
    "ConnectionListener",
    "ConnectionObserver",
    "KeepAliveMonitor",
    "Message",
    "MessageHandler",
    "SendTimeout",
    "ShardedPublish",
    "StompTransport",
    "Subscription",
    "Transport",
    "TransportClosed",
    "connect",
]

from heartwire._throttle import worth_logging
from heartwire.transport.errors import ConnectFailed, SendTimeout
from heartwire.transport.keepalive import KeepAliveMonitor

if TYPE_CHECKING:
    from heartwire.transport.shards import ShardLayout

_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class Message:
    """One message as a subscriber receives it.

    ``destination`` is the topic it was published to, in the API's syntax (``"svc.a"``), whatever
    the broker calls it; ``headers`` is read-only.
    """

    destination: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS, hash=False)


MessageHandler = Callable[[Message], None]


class TransportClosed(RuntimeError):
    """Raised when a closed transport is asked to publish or subscribe."""


@runtime_checkable
class Subscription(Protocol):
    """A handler subscribed to a pattern; ``cancel()`` (idempotent) stops deliveries to it."""

    def cancel(self) -> None: ...


_Sub = TypeVar("_Sub", bound="HandlerSubscription")


class HandlerSubscription:
    """What the memory and STOMP subscriptions share: the pattern, its handler and matcher,
    whether it is active, its counters, ``with`` (cancels on exit) and the repr. A subclass
    gives ``cancel()``, which clears ``_active`` and removes it from its transport."""

    __slots__ = ("_active", "_matches", "delivered", "errors", "handler", "pattern")

    def __init__(
        self, pattern: str, handler: MessageHandler, matches: Callable[[str], bool]
    ) -> None:
        self.pattern = pattern
        self.handler = handler
        self._matches = matches
        self._active = True
        #: Messages handed to the handler (those it raised on included).
        self.delivered = 0
        #: Messages the handler raised on.
        self.errors = 0

    @property
    def active(self) -> bool:
        """False once cancelled or once its broker or transport is closed."""
        return self._active

    def cancel(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Sub) -> _Sub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def __repr__(self) -> str:
        state = "active" if self._active else "cancelled"
        return f"<{type(self).__name__} {self.pattern!r} {state}, {self.delivered} delivered>"


@runtime_checkable
class Transport(Protocol):
    """What publishers and monitors need from a broker connection."""

    url: str

    def publish(
        self,
        topic: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Send ``body`` to ``topic`` (a topic name, no wildcards).

        ``timeout``: how long to wait for a broker connection during an outage (None: the
        transport's default); transports that never wait ignore it.
        """
        ...

    def subscribe(self, pattern: str, handler: MessageHandler) -> Subscription:
        """Call ``handler(message)`` for every message published to a topic matching ``pattern``."""
        ...

    def close(self) -> None:
        """Release the connection; idempotent. Publishing afterwards raises TransportClosed."""
        ...


@runtime_checkable
class ShardedPublish(Protocol):
    """A transport that can send a beat where a monitor group consumes the topic's shard (the
    STOMP and embedded transports): what ``HeartbeatPublisher(..., shards=layout)`` needs."""

    def publish_sharded(
        self,
        layout: ShardLayout,
        topic: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Send a beat of ``topic`` where its shard of ``layout`` is consumed."""
        ...


_named_lock = threading.Lock()
_named: dict[str, Any] = {}


def log_handler_error(
    log: logging.Logger, handler: object, pattern: str, message: Message, n: int, exc: Exception
) -> None:
    """Log a subscriber handler's ``n``-th error: each of the first ten, then one in a thousand,
    so a handler failing on every message cannot flood the log."""
    if worth_logging(n):
        log.error(
            "handler %r for %r raised on a message to %r (error %d of this subscription)",
            handler,
            pattern,
            message.destination,
            n,
            exc_info=exc,
        )


def _named_broker(name: str, options: dict[str, Any]) -> Transport:
    from heartwire.transport.memory import MemoryBroker

    with _named_lock:
        broker = _named.get(name)
        if broker is None or broker.closed:
            broker = MemoryBroker(name=name, **options)
            _named[name] = broker
        elif options:
            raise ValueError(
                f"url 'memory://{name}' names a broker that already exists; "
                f"options {sorted(options)} apply only when it is created"
            )
        return broker


def __getattr__(name: str) -> Any:
    # The STOMP classes import stomp.py: only when asked for.
    if name == "StompTransport":
        from heartwire.transport.stomp import StompTransport

        return StompTransport
    if name in ("ConnectionListener", "ConnectionObserver"):
        from heartwire.transport.observers import ConnectionObserver

        return ConnectionObserver
    if name == "is_stomp":  # removed by issue 16's layering; no alias
        raise AttributeError(
            "heartwire.transport.is_stomp was removed: a STOMP transport is an instance of "
            "heartwire.transport.StompTransport, and reliable delivery picks its backend with "
            "heartwire.reliable.backend.backend_for"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def connect(url: str | None = None, **options: Any) -> Transport:
    """Open a transport for ``url`` (see the module docs for the URL forms).

    STOMP URLs connect before this returns (``options``: :data:`~heartwire.transport.urls.
    OPTIONS`, e.g. ``login=``, ``passcode=``, ``vhost=``, ``dialect=``) and raise
    :class:`ConnectFailed` if no broker of the URL accepts. Raises :class:`ValueError` naming
    the url (never its password) when its scheme is unknown or it or an option is malformed.
    """
    if url is None or url == "memory://":
        from heartwire.transport.memory import MemoryBroker

        return MemoryBroker(**options)
    if not isinstance(url, str):
        # Not echoed: it may hold a password.
        raise TypeError(f"url must be a str or None, got {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if sep and scheme == "memory":
        from heartwire.transport.urls import redact

        if "/" in rest or "?" in rest or "@" in rest:
            raise ValueError(
                f"url {redact(url)!r}: an embedded broker URL is 'memory://' or "
                "'memory://<name>' (no credentials, path or options)"
            )
        return _named_broker(rest, options)
    if (sep and scheme.lower() in ("stomp", "stomp+ssl")) or url.lower().startswith("failover:"):
        from heartwire.transport.stomp import StompTransport

        return StompTransport(url, **options)
    from heartwire.transport.urls import redact

    raise ValueError(
        f"url {redact(url)!r} has an unknown scheme; expected 'memory://', 'memory://<name>', "
        "'stomp://host:port', 'stomp+ssl://host:port' or 'failover:(stomp://host:port,...)'"
    )
