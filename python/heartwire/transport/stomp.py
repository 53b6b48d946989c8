"""The STOMP transport: heartwire over ActiveMQ Classic, RabbitMQ and other STOMP 1.2 brokers.

::

    broker = heartwire.connect("stomp://127.0.0.1:61613")
    broker = heartwire.connect(
        "failover:(stomp://a:61613,stomp://b:61614)?reconnect_interval=1&request_blocking_time=30",
        login="guest", passcode="guest",
    )

URLs and options: :mod:`heartwire.transport.urls`. Behaviour:

- **Topics** are ``/topic/<name>`` destinations; subscription patterns in the API's syntax
  (``svc.*``, ``svc.>``) are translated to the broker's dialect (:mod:`.dialect`), detected from
  the CONNECTED frame's ``server`` header unless ``dialect=`` is given. Handlers receive a
  :class:`~heartwire.transport.Message` whose ``destination`` is the topic in the API's syntax
  and whose ``headers`` are the MESSAGE frame's (read-only).
- **Headers** given to :meth:`StompTransport.publish` go on the SEND frame (``expires``,
  ``persistent`` and any other); each message also gets ``hw-message-id``, the id that
  :meth:`~StompTransport.send` returns and :class:`~heartwire.transport.SendTimeout` names.
- **STOMP heart-beating** runs both ways every ``heartbeat`` seconds; a broker silent for two
  intervals is dropped and reconnected.
- **Keep-alive**: while the transport has subscriptions it pings itself through the broker every
  ``keepalive_interval`` seconds (a private topic, never delivered to your handlers; only the
  current monitor's own ping, back on the connection it watches, counts); after
  ``keepalive_allowed`` pings in a row did not come back, the connection is torn down and
  reconnected even though its socket looks open (:class:`~.keepalive.KeepAliveMonitor`).
- **Failover and reconnection** (:mod:`.failover`): a lost connection is re-established, to the
  same broker or the next of a ``failover:`` list; every subscription is restored before
  publishing resumes. During an outage :meth:`~StompTransport.publish` blocks up to
  ``request_blocking_time`` seconds, then raises :class:`~heartwire.transport.SendTimeout`.
  ``randomize``, ``priority_backup``, exponential back-off with jitter and the attempt limits
  are URL options (:mod:`heartwire.transport.urls`, ``docs/failover.md``).
- **Observers** (:meth:`~StompTransport.add_observer`, or its earlier name
  ``add_connection_listener``; :class:`~heartwire.transport.observers.ConnectionObserver`) are
  told ``on_disconnected(broker, reason)``, ``on_reconnected(broker)``,
  ``on_switched(from_broker, to_broker)`` and ``on_reconnect_failed(reason)``, and the link
  events the reliable layer uses.

- **Reliable delivery** (:mod:`heartwire.reliable`, the layer above) uses the session
  interface of :mod:`.session` (:class:`~heartwire.transport.session.StompSession`):
  :meth:`~StompTransport.subscribe_destination` (a raw STOMP destination with an ack mode and
  extra SUBSCRIBE headers, restored after reconnection like the others), observers' link
  events (``on_attached``/``on_published``: each new connection before it is published and
  again after; ``on_receipt``/``on_error_frame``: every RECEIPT and ERROR frame nobody waited
  for),
  :meth:`~StompTransport.request` (a frame with a receipt, waited for),
  :meth:`~StompTransport.wait_link` and ``client_id=`` (the ``client-id`` CONNECT header that
  ActiveMQ's durable subscriptions need). :meth:`~StompTransport.transaction` opens a STOMP
  transaction (a :class:`heartwire.Transaction`).

Thread safety: every method may be called from any thread. Handlers run on the receiving
thread of the current connection (stomp.py's), one message at a time, in arrival order; a handler
may publish, subscribe and cancel. A handler that raises is logged and counted
(``stats()["handler_errors"]``) and the receiving thread goes on. A slow handler delays the
messages behind it (and the keep-alive pings: keep handlers short, or hand work to a thread).
Connection events run on the failover thread.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from heartwire import _validate
from heartwire._core import Intake, Routes
from heartwire.transport import (
    HandlerSubscription,
    Message,
    MessageHandler,
    TransportClosed,
    log_handler_error,
)
from heartwire.transport.dialect import Dialect
from heartwire.transport.errors import LinkRejected, SendTimeout, names
from heartwire.transport.failover import Connector
from heartwire.transport.headers import MESSAGE_ID_HEADER
from heartwire.transport.keepalive import KeepAliveMonitor
from heartwire.transport.link import StompLink
from heartwire.transport.observers import ConnectionObserver, Observers
from heartwire.transport.patterns import matcher, validate_pattern, validate_topic
from heartwire.transport.session import open_transaction
from heartwire.transport.shards import ShardLayout
from heartwire.transport.urls import BrokerAddress, StompOptions, parse_url

__all__ = ["MESSAGE_ID_HEADER", "StompSubscription", "StompTransport"]


def _never(message: Message) -> None:  # the pattern handler of a raw-destination subscription
    raise AssertionError("raw-destination subscriptions deliver through link_handler")


log = logging.getLogger("heartwire.transport.stomp")

#: The header carrying the id :meth:`StompTransport.publish` gives each message.
# The private topic prefix of keep-alive pings (never delivered to subscribers).
_PING_PREFIX = "_hw.keepalive."
_PING_SUB_ID = "hw-keepalive"


class StompSubscription(HandlerSubscription):
    """One handler subscribed to one pattern on a :class:`StompTransport`.

    It stays subscribed across reconnections until :meth:`cancel` or the transport closes.
    """

    __slots__ = (
        "_transport",
        "ack",
        "confirmed",
        "destination",
        "id",
        "link_handler",
        "refused",
        "sub_headers",
    )

    def __init__(
        self, transport: StompTransport, sub_id: str, pattern: str, handler: MessageHandler
    ) -> None:
        super().__init__(pattern, handler, matcher(pattern))
        self._transport = transport
        self.id = sub_id
        #: For :meth:`StompTransport.subscribe_destination`: the raw STOMP destination, ack
        #: mode, extra SUBSCRIBE headers and ``link_handler(link, message)``; else None/"auto".
        self.destination: str | None = None
        self.ack = "auto"
        self.sub_headers: dict[str, str] | None = None
        self.link_handler: Callable[[StompLink, Message], None] | None = None
        #: Whether the broker confirmed the SUBSCRIBE (``subscribe_destination(confirm=)``), and
        #: the broker's ERROR if it refused it instead.
        self.confirmed = False
        self.refused: str | None = None

    def cancel(self, headers: dict[str, str] | None = None) -> None:
        """Stop deliveries to this handler and unsubscribe at the broker (with extra
        UNSUBSCRIBE ``headers``, if given); idempotent."""
        if self._active:
            self._active = False
            self._transport._remove(self, headers)


class StompTransport:
    """A :class:`~heartwire.transport.Transport` over STOMP (see the module docs).

    Connects in the constructor, to the first broker of the URL that accepts (``randomize``:
    in a shuffled order; ``startup_max_reconnect_attempts``: trying again); raises
    :class:`~heartwire.transport.failover.ConnectFailed` (a :class:`ConnectionError`) naming each
    broker and why if none does, and :class:`ValueError` / :class:`TypeError` naming a bad URL
    or option (passwords are never shown).
    """

    def __init__(self, url: str, *, client_id: str | None = None, **options: Any) -> None:
        if client_id is not None and (not isinstance(client_id, str) or not client_id.strip()):
            raise ValueError(f"client_id must be a non-empty str or None, got {client_id!r}")
        self.client_id = client_id
        # Connection and link events go to these (on the failover and receiving threads).
        self._observers = Observers(log, "connection observer")
        self._receipt_waiters: dict[str, threading.Event] = {}
        # Receipts answered by an ERROR frame instead (receipt id -> the error), and what an
        # ERROR without a receipt-id must quote to answer a waiting request (its transaction,
        # or the queue of a SUBSCRIBE).
        self._receipt_errors: dict[str, str] = {}
        self._receipt_quotes: dict[str, str] = {}
        self._options: StompOptions = parse_url(url, **options)
        self.url = self._options.url
        self._id = uuid.uuid4().hex[:12]
        self._ids = itertools.count(1)
        self._msg_ids = itertools.count(1)
        self._subs: dict[str, StompSubscription] = {}
        self._ping_topic = f"{_PING_PREFIX}{self._id}"
        self._keepalive: KeepAliveMonitor | None = None
        self._keepalive_link: StompLink | None = None
        self._stats_lock = threading.Lock()
        self._published = 0
        self._send_retries = 0
        self._send_timeouts = 0
        self._delivered = 0
        self._unrouted = 0
        self._handler_errors = 0
        self._pings_sent = 0
        self._pings_received = 0
        self._keepalive_expirations = 0
        # Subscriptions whose beats the core records straight off the socket (see
        # subscribe_intake): their routes, shared by every connection's FrameReader, and per
        # subscription id its intake and the callback that reports the intake's refusals.
        self._routes = Routes()
        self._native: dict[str, tuple[Intake, Callable[[], None]]] = {}
        self._native_list: tuple[tuple[Intake, Callable[[], None]], ...] = ()  # (a snapshot)
        # The last links opened (for the count of beats taken natively), and the count of
        # those let go (ended long ago).
        self._native_links: list[StompLink] = []
        self._native_base = 0
        self._closed = False
        self._connector = Connector(
            self._options,
            self._new_link,
            self._attach,
            self._detach,
            self._attached,
            self._observers,
        )
        self._connector.start()

    # -- properties ---------------------------------------------------------------------------

    @property
    def options(self) -> StompOptions:
        """The parsed URL and options."""
        return self._options

    @property
    def connected(self) -> bool:
        """Whether a connection is up right now."""
        link = self._connector.current
        return link is not None and link.open

    @property
    def current_link(self) -> StompLink | None:
        """The connection in use now (None during an outage); for the reliable layer."""
        return self._connector.current

    def wait_link(self, timeout: float) -> StompLink | None:
        """The connection in use, waiting up to ``timeout`` seconds for one during an outage;
        None if none came or the transport closed (for the reliable layer)."""
        return self._connector.wait_link(time.monotonic() + timeout)

    @property
    def broker(self) -> str | None:
        """The broker connected to (``"stomp://host:port"``), None during an outage."""
        link = self._connector.current
        return None if link is None else str(link.broker)

    @property
    def dialect(self) -> str | None:
        """The current broker's dialect (``"activemq"``, ``"rabbitmq"``), None if offline."""
        link = self._connector.current
        return None if link is None else link.dialect.name

    @property
    def server(self) -> str | None:
        """The current broker's ``server`` header (``"ActiveMQ/5.17.2"``), None if offline."""
        link = self._connector.current
        return None if link is None else link.server

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called or reconnection gave up (see :attr:`failure`)."""
        return self._closed or self._connector.closed

    @property
    def failure(self) -> str | None:
        """Why the transport closed itself (``reconnect_period`` or ``max_reconnect_attempts``
        ran out), else None."""
        return self._connector.failure

    @property
    def keepalive(self) -> KeepAliveMonitor | None:
        """The keep-alive monitor of the current connection (None when not pinging)."""
        return self._keepalive

    @property
    def observers(self) -> tuple[Any, ...]:
        """The registered observers, in registration order."""
        return self._observers.items

    def _native_consumed(self) -> int:
        """Beat frames the core took straight off the sockets (never seen by stomp.py)."""
        with self._stats_lock:
            return self._native_base + sum(link.native_consumed for link in self._native_links)

    def add_observer(self, observer: ConnectionObserver | Any) -> StompLink | None:
        """Register ``observer``: a :class:`~heartwire.transport.observers.ConnectionObserver`,
        or any object with some of its methods (:class:`TypeError` if it has none). Connection
        events come on the failover thread, link events as that module's docs say.

        Returns the connection current at registration (None during an outage): registering
        and reading it hold the connector's lock, so every later connection is reported to
        ``on_attached``."""
        with self._connector.cond:
            self._observers.add(observer)
            return self._connector.current

    def remove_observer(self, observer: Any) -> bool:
        """Unregister ``observer``; False if it was not registered."""
        return self._observers.remove(observer)

    def add_connection_listener(self, listener: ConnectionObserver | Any) -> None:
        """:meth:`add_observer` (the earlier name, for ``on_disconnected(broker, reason)``,
        ``on_reconnected(broker)`` and ``on_reconnect_failed(reason)``)."""
        self.add_observer(listener)

    def remove_connection_listener(self, listener: Any) -> bool:
        """:meth:`remove_observer` (the earlier name)."""
        return self.remove_observer(listener)

    def subscriptions(self) -> list[StompSubscription]:
        """The active subscriptions, oldest first."""
        with self._connector.cond:
            return list(self._subs.values())

    def stats(self) -> dict[str, Any]:
        """Counters: ``published``, ``send_retries`` (sends repeated on a new connection),
        ``send_timeouts``, ``delivered``, ``native`` (beats recorded by the core off the
        socket, see :meth:`subscribe_intake`; not in ``delivered``), ``unrouted`` (messages no
        subscription took),
        ``handler_errors``, ``subscriptions``, ``reconnects``, ``connect_attempts``,
        ``switches`` / ``priority_probes`` (``priority_backup``: moves back to the preferred
        broker, tries of it), ``keepalive_pings`` / ``keepalive_returned`` /
        ``keepalive_expirations``,
        ``listener_errors`` (observer calls that raised), and ``outages`` (``(broker,
        seconds)`` of the last ones)."""
        c = self._connector
        native = self._native_consumed()  # (takes the stats lock itself)
        with self._stats_lock:
            return {
                "published": self._published,
                "send_retries": self._send_retries,
                "send_timeouts": self._send_timeouts,
                "delivered": self._delivered,
                "native": native,
                "unrouted": self._unrouted,
                "handler_errors": self._handler_errors,
                "subscriptions": len(self._subs),
                "reconnects": c.reconnects,
                "connect_attempts": c.attempts,
                "switches": c.switches,
                "priority_probes": c.probes,
                "keepalive_pings": self._pings_sent,
                "keepalive_returned": self._pings_received,
                "keepalive_expirations": self._keepalive_expirations,
                "listener_errors": self._observers.errors,
                "outages": list(c.outages),
            }

    def __repr__(self) -> str:
        if self.closed:
            state = "closed"
        else:
            state = f"on {self.broker}" if self.connected else "reconnecting"
        return f"<StompTransport {self.url!r} {state}, {len(self._subs)} subscriptions>"

    # -- publishing ---------------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Send ``body`` to ``topic`` (:meth:`send`, without its return value)."""
        self.send(topic, body, headers, timeout=timeout)

    def publish_sharded(
        self,
        layout: ShardLayout,
        topic: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Send a beat of ``topic`` where its shard of ``layout`` is consumed
        (:meth:`send` with ``layout``, without its return value)."""
        self.send(topic, body, headers, timeout=timeout, layout=layout)

    def send(
        self,
        topic: str,
        body: bytes | bytearray | memoryview,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
        layout: ShardLayout | None = None,
    ) -> str:
        """Send ``body`` to ``topic``; returns the message id (the ``hw-message-id`` header).

        During an outage, waits up to ``timeout`` seconds (default: the ``request_blocking_time``
        option) for a connection (a send that fails on a dying connection is retried on the next
        one, within the same time), then raises :class:`~heartwire.transport.SendTimeout` naming
        the message id. Raises
        :class:`~heartwire.transport.TransportClosed` once closed, :class:`ValueError` for an
        invalid topic and :class:`TypeError` for a body that is not bytes.

        With a ``layout`` (:class:`~heartwire.transport.shards.ShardLayout`), the beat of
        ``topic`` carries its shard's ``heartwire-shard`` header and goes where the group's
        members consume that shard: the shard's queue on ActiveMQ, the topic on RabbitMQ (chosen
        on each connection, as the broker's dialect is known only then).
        """
        if self._closed or self._connector.closed:
            raise TransportClosed(self._closed_message(f"send to {topic!r}"))
        validate_topic(topic)
        if isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        elif not isinstance(body, bytes):
            raise TypeError(f"body must be bytes, got {type(body).__name__}")
        if headers is not None and not isinstance(headers, Mapping):
            raise TypeError(f"headers must be a mapping or None, got {type(headers).__name__}")
        timeout = _validate.seconds(
            timeout, "timeout", allow_none=True, allow_zero=True, allow_inf=True
        )
        if timeout is None:
            timeout = self._options.request_blocking_time
        if layout is not None:
            if not isinstance(layout, ShardLayout):
                raise TypeError(
                    f"layout must be a ShardLayout or None, got {type(layout).__name__}"
                )
            headers = {**(headers or {}), **layout.headers(topic)}
            route: Callable[[Dialect], str] | None = functools.partial(layout.destination, topic)
        else:
            route = None
        message_id = f"{self._id}:{next(self._msg_ids)}"
        return self._send(topic, body, headers, message_id, float(timeout), route)

    def send_to(
        self,
        destination: str | Callable[[Dialect], str],
        body: bytes | bytearray | memoryview,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> str:
        """Send ``body`` to a raw STOMP ``destination`` (``/queue/x``, RabbitMQ's
        ``/amq/queue/x``), or to the one ``destination(dialect)`` names for the broker of the
        connection it goes on (the dialect is known only once connected); returns the message
        id. Waits, retries and raises as :meth:`send` (:class:`ValueError` for a destination
        that does not start with ``/``)."""
        if callable(destination):
            label, route = "a destination chosen per broker", destination
        elif isinstance(destination, str) and destination.startswith("/"):
            label, route = destination, lambda _dialect: destination
        else:
            raise ValueError(
                f"destination must be a STOMP destination ('/queue/x') or a callable of the "
                f"broker's dialect, got {destination!r:.120}"
            )
        if self._closed or self._connector.closed:
            raise TransportClosed(self._closed_message(f"send to {label!r}"))
        if isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        elif not isinstance(body, bytes):
            raise TypeError(f"body must be bytes, got {type(body).__name__}")
        if headers is not None and not isinstance(headers, Mapping):
            raise TypeError(f"headers must be a mapping or None, got {type(headers).__name__}")
        timeout = _validate.seconds(
            timeout, "timeout", allow_none=True, allow_zero=True, allow_inf=True
        )
        if timeout is None:
            timeout = self._options.request_blocking_time
        message_id = f"{self._id}:{next(self._msg_ids)}"
        return self._send(label, body, headers, message_id, float(timeout), route)

    def _send(
        self,
        topic: str,
        body: bytes,
        headers: Mapping[str, str] | None,
        message_id: str,
        blocking: float,
        route: Callable[[Dialect], str] | None = None,
    ) -> str:
        """Send on the current connection (waiting for one up to ``blocking`` seconds, again
        on the next after a failed send): to ``topic``'s destination, or to the one ``route``
        names for the connection's dialect (``topic`` then only names it in errors)."""
        started = time.monotonic()
        deadline = started + blocking
        last_error: BaseException | None = None
        while True:
            link = self._connector.wait_link(deadline)
            if link is None:
                if self._closed or self._connector.closed:
                    raise TransportClosed(self._closed_message(f"publish to {topic!r}"))
                with self._stats_lock:
                    self._send_timeouts += 1
                raise SendTimeout(
                    message_id, topic, time.monotonic() - started, self.url, last_error
                )
            frame_headers = link.dialect.send_headers(headers)
            frame_headers[MESSAGE_ID_HEADER] = message_id
            try:
                destination = (
                    link.dialect.destination(topic) if route is None else route(link.dialect)
                )
                link.send(
                    destination,
                    body,
                    frame_headers,
                    timeout=max(0.0, deadline - time.monotonic()),
                )
            except Exception as exc:
                last_error = exc
                with self._stats_lock:
                    self._send_retries += 1
                log.debug("send of %s on %s failed (%r); retrying", message_id, link.broker, exc)
                self._connector.link_lost(link, f"send failed: {exc!r}")
                continue
            with self._stats_lock:
                self._published += 1
            return message_id

    def _closed_message(self, what: str) -> str:
        failure = self._connector.failure
        why = f": {failure}" if failure else ": the transport is closed"
        return f"{what} on {self.url!r}{why}"

    # -- subscribing --------------------------------------------------------------------------

    def subscribe(self, pattern: str, handler: MessageHandler) -> StompSubscription:
        """Call ``handler(message)`` for every message to a topic matching ``pattern`` (a
        topic name, or ``*`` / a final ``>`` wildcards), on the receiving thread.

        The subscription is sent to the broker at once if connected, else when the connection
        is back; it is restored after every reconnection. Raises :class:`ValueError` naming an
        invalid pattern, :class:`TypeError` for a handler that is not callable and
        :class:`~heartwire.transport.TransportClosed` once closed.
        """
        validate_pattern(pattern)
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {type(handler).__name__}")
        sub = StompSubscription(self, f"hw-{next(self._ids)}", pattern, handler)
        cond = self._connector.cond
        with cond:
            if self._closed or self._connector.closed:
                raise TransportClosed(self._closed_message(f"subscribe to {pattern!r}"))
            self._subs[sub.id] = sub
            link = self._connector.current
            if link is not None:
                try:
                    link.subscribe(link.dialect.subscription(pattern), sub.id)
                except Exception as exc:
                    # Restored on the next connection, like every subscription.
                    self._connector.link_lost(link, f"subscribe failed: {exc!r}")
                else:
                    self._start_keepalive(link)
        return sub

    def subscribe_intake(
        self, pattern: str, intake: Intake, handler: MessageHandler, on_refusals: Callable[[], None]
    ) -> StompSubscription:
        """:meth:`subscribe`, with the beats of the subscription decoded and recorded by the
        core's ``intake`` straight from the bytes read off the socket: only what the native
        path leaves (a body its decoder is not sure of, a destination with header escapes)
        reaches ``handler`` as a :class:`~heartwire.transport.Message`. ``on_refusals()`` is
        called on the receiving thread after a read in which the intake refused beats (to
        report them)."""
        sub = self.subscribe(pattern, handler)
        # Routed once subscribed: frames that came before went the Python way, which records
        # through the same intake.
        with self._connector.cond:
            if sub.id in self._subs:
                self._native[sub.id] = (intake, on_refusals)
                self._native_list = tuple(self._native.values())
                self._routes.add(sub.id, intake)
        return sub

    def subscribe_destination(
        self,
        destination: str,
        handler: Callable[[StompLink, Message], None],
        *,
        sub_id: str | None = None,
        ack: str = "auto",
        headers: Mapping[str, str] | None = None,
        confirm: float = 0.0,
    ) -> StompSubscription:
        """Subscribe to a raw STOMP ``destination`` (``/queue/x``, ``/topic/x``) with ack mode
        ``ack`` and extra SUBSCRIBE ``headers``; ``handler(link, message)`` gets every message
        (``message.destination`` is the raw destination) with the connection it came on, to
        ACK on. Restored after every reconnection; ``sub_id`` fixes the subscription id (a
        RabbitMQ durable subscription is known by it). ``confirm`` > 0: when connected, wait
        up to that many seconds for the broker's receipt of the SUBSCRIBE (so that messages
        sent after this returns reach it); False in ``confirmed`` if it did not come. Raises
        like :meth:`subscribe`."""
        if not isinstance(destination, str) or not destination.startswith("/"):
            raise ValueError(
                f"destination must be a STOMP destination ('/queue/x'), got {destination!r}"
            )
        ack = _validate.choice(ack, "ack", ("auto", "client", "client-individual"))
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {type(handler).__name__}")
        sub = StompSubscription(self, sub_id or f"hw-{next(self._ids)}", ">", _never)
        sub.destination = destination
        sub.ack = ack
        sub.sub_headers = dict(headers) if headers else None
        sub.link_handler = handler
        cond = self._connector.cond
        waiter: threading.Event | None = None
        receipt = f"hw-r-{self._id}-{next(self._ids)}"
        with cond:
            if self._closed or self._connector.closed:
                raise TransportClosed(self._closed_message(f"subscribe to {destination!r}"))
            if sub.id in self._subs:
                raise ValueError(f"subscription id {sub.id!r} is already in use")
            self._subs[sub.id] = sub
            link = self._connector.current
            if link is not None:
                frame_headers = dict(sub.sub_headers or {})
                if confirm > 0:
                    waiter = self._receipt_waiters[receipt] = threading.Event()
                    frame_headers["receipt"] = receipt
                    # What a RabbitMQ ERROR (no receipt-id) about this SUBSCRIBE would quote.
                    quote = frame_headers.get("x-queue-name") or destination.rsplit("/", 1)[-1]
                    self._receipt_quotes[receipt] = quote
                try:
                    link.subscribe(destination, sub.id, ack, frame_headers)
                except Exception as exc:
                    self._connector.link_lost(link, f"subscribe failed: {exc!r}")
                else:
                    self._start_keepalive(link)
        if waiter is not None:
            try:
                came = waiter.wait(confirm)
                sub.refused = self._receipt_errors.get(receipt)
                sub.confirmed = came and sub.refused is None
            finally:
                self._receipt_waiters.pop(receipt, None)
                self._receipt_errors.pop(receipt, None)
                self._receipt_quotes.pop(receipt, None)
        return sub

    def subscribe_destination_intake(
        self,
        destination: str,
        intake: Intake,
        handler: Callable[[StompLink, Message], None],
        on_refusals: Callable[[], None],
        *,
        layout: ShardLayout | None = None,
        shard: int | None = None,
        headers: Mapping[str, str] | None = None,
        confirm: float = 0.0,
    ) -> StompSubscription:
        """:meth:`subscribe_destination` (``ack:auto``) whose beats the core's ``intake`` decodes
        and records straight from the bytes read off the socket, each under the topic its body
        names, whatever the destination: for a queue carrying many topics, a monitor group's
        shard queue (``/queue/heartwire.<group>.<k>`` on ActiveMQ, ``/amq/queue/...`` on
        RabbitMQ). The intake's rules apply as to any beat (its pattern included: a beat of
        another topic is refused and counted).

        ``layout`` and ``shard`` (given together): the queue is shard ``shard`` of the group
        ``layout``, and a beat whose topic is in another shard is refused (``wrong_shard``,
        counted and reported like the other refusals): from a publisher whose layout has
        another shard count, a forged ``heartwire-shard`` header, or a beat sent to another
        shard's queue. Without them any topic is taken.

        Only what the native path leaves (a body its decoder is not sure of) reaches
        ``handler(link, message)``: record it with ``intake.ingest(body, None,
        shard=(layout.shards, shard))`` (or, decoded by ``BeatCodec``, ``intake.record(...,
        shard=...)``) so that the same check applies. ``on_refusals()`` is called on the
        receiving thread after a read in which the intake refused beats. The route is set before
        the SUBSCRIBE goes, so no beat of the subscription takes the Python way."""
        in_shard: tuple[int, int] | None = None
        if layout is not None or shard is not None:
            if layout is None or shard is None:
                raise ValueError(
                    f"layout and shard go together (the queue's group and shard), got "
                    f"layout={layout!r} and shard={shard!r}"
                )
            if not isinstance(layout, ShardLayout):
                raise TypeError(f"layout must be a ShardLayout, got {type(layout).__name__}")
            layout.queue(shard)  # the shard's range and type, checked (naming it)
            in_shard = (layout.shards, shard)
        sub_id = f"hw-{next(self._ids)}"
        with self._connector.cond:
            self._native[sub_id] = (intake, on_refusals)
            self._native_list = tuple(self._native.values())
            self._routes.add(sub_id, intake, from_body=True, shard=in_shard)
        try:
            return self.subscribe_destination(
                destination, handler, sub_id=sub_id, headers=headers, confirm=confirm
            )
        except BaseException:
            with self._connector.cond:
                if self._native.pop(sub_id, None) is not None:
                    self._native_list = tuple(self._native.values())
                    self._routes.remove(sub_id)
            raise

    # -- hooks for the reliable layer -------------------------------------------------------------

    def request(self, command: str, headers: dict[str, str], timeout: float) -> str | None:
        """Send ``command`` (BEGIN/COMMIT/ABORT/ACK/NACK/UNSUBSCRIBE) with ``headers`` and a
        receipt on the current connection and wait up to ``timeout`` seconds for the broker's
        RECEIPT. None once it came; else why not (no connection, the send failed, no receipt
        in time, or the broker's ERROR frame)."""
        return self.request_status(command, headers, timeout)[0]

    def request_status(
        self, command: str, headers: dict[str, str], timeout: float
    ) -> tuple[str | None, bool]:
        """:meth:`request`, and whether the broker may have acted on the frame: True once it
        was sent and neither its RECEIPT nor an ERROR about it came (in doubt)."""
        link = self._connector.current
        if link is None:
            return "no broker connection", False
        receipt = f"hw-r-{self._id}-{next(self._ids)}"
        done = threading.Event()
        self._receipt_waiters[receipt] = done
        quote = headers.get("transaction")
        if quote:
            self._receipt_quotes[receipt] = quote
        try:
            try:
                link.frame(command, {**headers, "receipt": receipt})
            except Exception as exc:
                self._connector.link_lost(link, f"{command} failed: {exc!r}")
                return f"{command} could not be sent: {exc!r}", False
            if not done.wait(timeout):
                return f"no receipt for {command} within {timeout:g} s", True
            error = self._receipt_errors.get(receipt)
            return (None if error is None else f"the broker refused {command}: {error}"), False
        finally:
            self._receipt_waiters.pop(receipt, None)
            self._receipt_errors.pop(receipt, None)
            self._receipt_quotes.pop(receipt, None)

    def transaction(self, timeout: float | None = None) -> Any:
        """A :class:`heartwire.Transaction` on this transport (``with broker.transaction() as
        tx:``; the same as ``heartwire.Transaction(broker)``). ``timeout``: how long COMMIT
        waits for the broker's receipt (default: ``request_blocking_time``)."""
        return open_transaction(self, timeout)

    def _on_receipt(self, link: StompLink, receipt: str) -> None:
        waiter = self._receipt_waiters.get(receipt)
        if waiter is not None:
            waiter.set()
            return
        self._observers.notify("on_receipt", link, receipt)

    def _on_error_frame(self, link: StompLink, headers: dict[str, str], detail: str) -> None:
        rid = headers.get("receipt-id")
        if rid is None:  # RabbitMQ: an error that quotes what a waiting request is about
            quotes = list(self._receipt_quotes.items())
            rid = next((r for r, q in quotes if names(detail, q)), None)
        waiter = self._receipt_waiters.get(rid) if rid is not None else None
        if rid is not None and waiter is not None:
            self._receipt_errors[rid] = detail
            waiter.set()
            return
        self._observers.notify("on_error_frame", link, headers, detail)

    def _remove(self, sub: StompSubscription, headers: dict[str, str] | None = None) -> None:
        with self._connector.cond:
            if self._native.pop(sub.id, None) is not None:
                self._native_list = tuple(self._native.values())
                self._routes.remove(sub.id)
            if self._subs.pop(sub.id, None) is None:
                return
            link = self._connector.current
            if link is not None:
                link.unsubscribe(sub.id, headers)
            if not self._subs:
                self._stop_keepalive()

    # -- connections (called by the connector) ------------------------------------------------

    def _new_link(self, broker: BrokerAddress) -> StompLink:
        link = StompLink(
            broker,
            self._options,
            self._on_frame,
            self._connector_lost,
            client_id=self.client_id,
            on_receipt=self._on_receipt,
            on_error_frame=self._on_error_frame,
            routes=self._routes,
            after_read=self._after_read,
        )
        with self._stats_lock:
            self._native_links.append(link)
            if len(self._native_links) > 8:  # the oldest has ended: its count is final
                self._native_base += self._native_links.pop(0).native_consumed
        return link

    def _after_read(self) -> None:
        """After each read of a link (its receiving thread): report the refusals of the
        intakes fed natively."""
        for intake, report in self._native_list:
            if intake.pending:
                try:
                    report()
                except Exception:
                    log.exception("reporting refused beats failed")

    def _connector_lost(self, link: StompLink, reason: str) -> None:
        self._connector.link_lost(link, reason)

    def _attach(self, link: StompLink) -> None:
        """Restore every subscription on a new link (under the connector's lock)."""
        dialect = link.dialect
        if self._options.keepalive_interval > 0:
            link.subscribe(dialect.subscription(self._ping_topic), _PING_SUB_ID)
        for sub in self._subs.values():
            if sub.destination is not None:
                link.subscribe(sub.destination, sub.id, sub.ack, sub.sub_headers)
            else:
                link.subscribe(dialect.subscription(sub.pattern), sub.id)
        if self._subs:
            self._start_keepalive(link)
        # Each observer's on_attached; if one raises, the others still run, then the errors
        # go to the connector as LinkRejected: it rejects the link (and connects again) and
        # logs it, once (so they are counted here, not logged).
        errors = self._observers.notify("on_attached", link, logged=False)
        if errors:
            raise LinkRejected(errors)

    def _attached(self, link: StompLink) -> None:
        """After :meth:`_attach`, outside the connector's lock, once ``link`` was published (or
        rejected): each observer's ``on_published(link)``. If one raises, the others still
        run, then the errors go to the connector as :class:`LinkRejected`: it ends the link and
        logs them, once."""
        errors = self._observers.notify("on_published", link, logged=False)
        if errors:
            raise LinkRejected(errors, "on_published")

    def _detach(self, link: StompLink, reason: str) -> None:
        with self._connector.cond:
            if self._keepalive is not None and self._keepalive_link is link:
                self._stop_keepalive()

    # -- keep-alive ---------------------------------------------------------------------------

    def _start_keepalive(self, link: StompLink) -> None:
        # Under the connector's lock.
        opts = self._options
        if opts.keepalive_interval <= 0 or self._keepalive_link is link:
            return
        self._stop_keepalive()
        destination = link.dialect.destination(self._ping_topic)

        def ping(monitor: KeepAliveMonitor) -> None:
            if self._keepalive is not monitor or not link.open:
                return
            with self._stats_lock:
                self._pings_sent += 1
            try:
                link.send(destination, monitor.id.encode(), {})  # whose ping it is
            except Exception as exc:
                self._connector.link_lost(link, f"keep-alive ping failed: {exc!r}")

        def expired(monitor: KeepAliveMonitor) -> None:
            if self._keepalive is not monitor:
                return
            with self._stats_lock:
                self._keepalive_expirations += 1
            self._connector.link_lost(
                link,
                f"keep-alive: {monitor.current} self-pings in a row did not come back "
                f"within {monitor.interval:g} s each",
            )

        monitor = KeepAliveMonitor(
            f"{self._id}@{link.broker.host}:{link.broker.port}#{next(self._ids)}",
            opts.keepalive_allowed,
            opts.keepalive_interval,
            on_expired=expired,
            ping=ping,
        )
        self._keepalive = monitor
        self._keepalive_link = link
        monitor.start()

    def _stop_keepalive(self) -> None:
        monitor = self._keepalive
        self._keepalive = None
        self._keepalive_link = None
        if monitor is not None:
            monitor.stop()

    # -- receiving (on the link's receiver thread) -------------------------------------------

    def _on_frame(self, link: StompLink, frame: Any) -> None:
        try:
            headers = frame.headers
            sub_id = headers.get("subscription")
            if sub_id == _PING_SUB_ID:
                with self._stats_lock:
                    self._pings_received += 1
                # Only this monitor's own ping, back on its own link, is a sign of life: a
                # late one from an earlier link or monitor says nothing about this one.
                monitor = self._keepalive
                if (
                    monitor is not None
                    and link is self._keepalive_link
                    and frame.body == monitor.id.encode()
                ):
                    monitor.alive()
                return
            sub = self._subs.get(sub_id) if sub_id is not None else None
            if sub is not None and sub.link_handler is not None:
                self._deliver_raw(link, sub, frame)
                return
            topic = link.dialect.topic(headers.get("destination", ""))
            if (
                sub is None
                or not sub._active
                or not sub._matches(topic)
                or topic.startswith(_PING_PREFIX)  # another transport's ping, under a wildcard
            ):
                # Cancelled meanwhile, or a broker wildcard wider than the API's ('#').
                with self._stats_lock:
                    self._unrouted += 1
                return
            body = frame.body
            if not isinstance(body, bytes):
                body = body.encode("utf-8") if isinstance(body, str) else bytes(body or b"")
            message = Message(topic, body, MappingProxyType(headers))
        except Exception:  # a malformed frame must not end the receiver
            log.exception("dropping a malformed MESSAGE frame from %s", link.broker)
            return
        sub.delivered += 1
        try:
            sub.handler(message)
        except Exception as exc:
            self._handler_failed(sub, message, exc)
        with self._stats_lock:
            self._delivered += 1

    def _deliver_raw(self, link: StompLink, sub: StompSubscription, frame: Any) -> None:
        body = frame.body
        if not isinstance(body, bytes):
            body = body.encode("utf-8") if isinstance(body, str) else bytes(body or b"")
        headers = frame.headers
        message = Message(headers.get("destination", ""), body, MappingProxyType(headers))
        if not sub._active or sub.link_handler is None:
            with self._stats_lock:
                self._unrouted += 1
            return
        sub.delivered += 1
        try:
            sub.link_handler(link, message)
        except Exception as exc:
            self._handler_failed(sub, message, exc)
        with self._stats_lock:
            self._delivered += 1

    def _handler_failed(self, sub: StompSubscription, message: Message, exc: Exception) -> None:
        with self._stats_lock:
            sub.errors += 1
            self._handler_errors += 1
            n = sub.errors
        log_handler_error(log, sub.handler, sub.pattern, message, n, exc)

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel every subscription, stop reconnecting and disconnect; idempotent.

        Blocked publishers wake up and raise :class:`~heartwire.transport.TransportClosed`.
        """
        with self._connector.cond:
            if self._closed:
                return
            self._closed = True
            subs = list(self._subs.values())
            self._subs.clear()
            self._stop_keepalive()
        for sub in subs:
            sub._active = False
        self._connector.close()

    def __enter__(self) -> StompTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
