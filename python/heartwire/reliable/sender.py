"""ReliableSender: messages kept until the broker holds them, and flush acknowledgements.

::

    sender = hw.ReliableSender(broker, "/queue/alerts", on_flushed=print, on_error=print)
    mid = sender.send(b"...")          # kept as outstanding until the broker's receipt
    rid = sender.request_flush()       # on_flushed(FlushAck(rid, n)) once all before it are held

On STOMP every SEND asks for a receipt (``receipt`` = the message id) and carries
``hw-message-id`` and, with ``persistent=True``, ``persistent:true``. A message stays in
:attr:`~ReliableSender.outstanding` until its receipt comes (or the broker refuses it). When the
connection is lost, the transport reconnects and every outstanding message is sent again on the
new connection, in order, with the same id, before anything the sender sends later (receivers
drop the duplicates this can make, see :class:`~heartwire.reliable.Consumer`). The re-send is
written on the failover thread once the connection is published, outside the transport's lock,
so other publishers of the process never wait for it. A send that fails ends the connection:
the next one re-sends everything outstanding. :meth:`send` never waits for a connection: during
an outage, and while the backlog is being re-sent, messages queue behind it and go out in
order.

A flush request covers every message sent before it and completes once each of them was
receipted or refused; several may be in flight and complete in order. A refused message fires
``on_error(DeliveryRefused(message_id, destination, reason))`` and counts as processed once
``on_error`` has returned: a flush covering it completes after that. A completed flush calls
``on_flushed(FlushAck(request_id, count))``, and :meth:`~ReliableSender.wait_flushed` returns
True once that has returned too, so a waiter sees every effect of the flush's callbacks.

On the embedded broker (``memory://``) a send is delivered before :meth:`send` returns, so
receipts are immediate: a message is outstanding only until the store holds it (before it is
delivered), and a flush is acknowledged as soon as the store holds every message sent before it
(an invalid destination there is refused the same way). A handler may thus send and flush with
the sender whose send is delivering to it.

Callbacks (``on_flushed``, ``on_error``, and listener objects with ``on_flushed(ack)`` /
``on_error(error)``) run on the thread that completed them: the receiving thread on STOMP, the
caller's thread on the embedded broker. Errors they raise are logged and counted. A callback
may :meth:`~ReliableSender.request_flush`, but not wait for a flush that can complete only
after it returns (:class:`RuntimeError` at once, rather than a wait that could never end).
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from heartwire.reliable.backend import backend_for
from heartwire.reliable.base import Pending
from heartwire.reliable.events import DeliveryRefused, FlushAck
from heartwire.transport import TransportClosed, destinations
from heartwire.transport.headers import MESSAGE_ID_HEADER
from heartwire.transport.observers import Observers

__all__ = ["ReliableSender", "SenderListener"]

log = logging.getLogger("heartwire.reliable")


class SenderListener:
    """Base class for reliable-sender listeners (override what you need)."""

    def on_flushed(self, ack: FlushAck) -> None:
        """Flush request ``ack.request_id`` is done."""

    def on_error(self, error: DeliveryRefused) -> None:
        """The broker refused a message."""


class ReliableSender:
    """Sends to one destination with receipts, re-sending across reconnections (module docs).

    ``broker``: a transport from :func:`heartwire.connect` (STOMP or embedded);
    ``destination``: ``/queue/<name>`` or ``/topic/<name>``; ``persistent``: ask the broker to
    store the messages (``persistent:true``).
    """

    def __init__(
        self,
        broker: Any,
        destination: str,
        persistent: bool = True,
        *,
        on_flushed: Callable[[FlushAck], Any] | None = None,
        on_error: Callable[[DeliveryRefused], Any] | None = None,
        listeners: Iterable[Any] = (),
    ) -> None:
        self.destination = destinations.validate(destination)
        self._name = destinations.split(destination)[1]
        if not isinstance(persistent, bool):
            raise TypeError(f"persistent must be a bool, got {persistent!r}")
        for name, fn in (("on_flushed", on_flushed), ("on_error", on_error)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable or None, got {type(fn).__name__}")
        self.broker = broker
        self.persistent = persistent
        self._on_flushed = on_flushed
        self._on_error = on_error
        self._listeners = Observers(log, "sender listener", ("on_flushed", "on_error"))
        for listener in listeners:
            self.add_listener(listener)
        self._id = uuid.uuid4().hex[:12]
        self._seq = itertools.count(1)
        self._flush_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._outstanding: OrderedDict[str, Pending] = OrderedDict()
        # (request id, covers messages with seq <= this, count), oldest first.
        self._flushes: deque[tuple[int, int, int]] = deque()
        self._last_seq = 0
        self._last_flushed_seq = 0
        self._last_flush_id = 0
        # Refused messages whose on_error has not returned yet (seq -> the thread calling it):
        # they hold the flushes covering them, like outstanding messages.
        self._reporting: dict[int, int] = {}
        # Flushes complete but whose on_flushed has not returned yet (id -> the thread calling
        # it), then acked (what wait_flushed waits for).
        self._firing: dict[int, int] = {}
        self._acked_flushes: set[int] = set()
        self._closed = False
        self._sent = 0
        self._resent = 0
        self._receipted_count = 0
        self._refused_count = 0
        self._flushes_acked = 0
        self._callback_errors = 0
        # The transport's half (picked once): writes the messages, reports receipts and
        # refusals, re-sends after a reconnection. Made last: a STOMP outbox registers with
        # the transport's receipt tracker, whose calls need everything above.
        self._outbox = backend_for(broker).outbox(self)

    # -- listeners ------------------------------------------------------------------------------

    def add_listener(self, listener: Any) -> None:
        """Add an object with ``on_flushed(ack)`` and/or ``on_error(error)`` (:class:`TypeError`
        if it has neither)."""
        self._listeners.add(listener)

    def remove_listener(self, listener: Any) -> bool:
        """Remove a listener; False if it was not added."""
        return self._listeners.remove(listener)

    # -- sending --------------------------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        """Messages sent but not yet receipted (nor refused) by the broker."""
        with self._lock:
            return len(self._outstanding)

    def send(
        self, body: bytes | bytearray | memoryview | str, headers: Mapping[str, str] | None = None
    ) -> str:
        """Send ``body`` (str is sent UTF-8 encoded) with extra ``headers``; returns the message
        id (also the ``hw-message-id`` header). Never waits for a connection.

        Raises :class:`TypeError` for a body or headers of the wrong type, :class:`ValueError`
        for a header name or value that is not a str and :class:`~heartwire.transport.
        TransportClosed` once the sender or its broker is closed.
        """
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        elif not isinstance(body, bytes):
            raise TypeError(f"body must be bytes or str, got {type(body).__name__}")
        frame_headers: dict[str, str] = {}
        if headers is not None:
            if not isinstance(headers, Mapping):
                raise TypeError(f"headers must be a mapping or None, got {type(headers).__name__}")
            for k, v in headers.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise ValueError(f"header {k!r}: names and values must be str, got {v!r}")
            frame_headers.update(headers)
        if self.persistent:
            frame_headers["persistent"] = "true"
        if self._closed or getattr(self.broker, "closed", False):
            raise TransportClosed(f"send to {self.destination!r}: the sender or broker is closed")
        return self._send(body, frame_headers)

    def _send(self, body: bytes, headers: dict[str, str]) -> str:
        # Outstanding and put in the outbox in one step under the lock, so messages go out in
        # the order of their ids; written outside it (the outbox never writes under the lock:
        # the receiving thread needs it for receipts, and a broker blocked writing receipts
        # to us stops reading our sends).
        with self._lock:
            seq = next(self._seq)
            self._last_seq = seq
            message_id = f"{self._id}:{seq}"
            headers[MESSAGE_ID_HEADER] = message_id
            pending = Pending(seq, body, headers, None)
            self._outstanding[message_id] = pending
            self._sent += 1
            go = self._outbox.put(pending)
        if go:
            self._outbox.run(pending)
        return message_id

    # -- receipts -------------------------------------------------------------------------------

    def _destination_name(self) -> str:
        return self._name

    def _receipted(self, message_id: str) -> None:
        with self._lock:
            if self._outstanding.pop(message_id, None) is None:
                return
            self._receipted_count += 1
            done = self._completed_flushes()
        self._fire_flushes(done)

    def _refused(self, message_id: str, reason: str) -> None:
        with self._lock:
            pending = self._outstanding.pop(message_id, None)
            if pending is None:  # receipted, or refused already: reported once
                return
            self._refused_count += 1
            # No longer outstanding (never sent again), but processed only once on_error has
            # returned: until then it holds the flushes covering it, so neither their waiters
            # nor their on_flushed can come before the refusal was reported.
            self._reporting[pending.seq] = threading.get_ident()
        try:
            log.warning("message %s to %s refused: %s", message_id, self.destination, reason)
            error = DeliveryRefused(message_id, self.destination, reason)
            self._call("on_error", self._on_error, error)
        finally:
            with self._lock:
                del self._reporting[pending.seq]
                done = self._completed_flushes()
            self._fire_flushes(done)

    def _completed_flushes(self) -> list[FlushAck]:
        # Under the lock: the flushes whose every earlier message is processed (receipted, or
        # refused with its on_error returned), oldest first; the calling thread must then
        # _fire_flushes them.
        first = next(iter(self._outstanding.values())).seq if self._outstanding else None
        if self._reporting:
            low = min(self._reporting)
            first = low if first is None else min(first, low)
        done = []
        while self._flushes and (first is None or first > self._flushes[0][1]):
            rid, _, count = self._flushes.popleft()
            self._firing[rid] = threading.get_ident()
            done.append(FlushAck(rid, count))
        return done

    def _fire_flushes(self, done: list[FlushAck]) -> None:
        # on_flushed, then the flush is acked for wait_flushed: a waiter woken then sees what
        # the callbacks did (waking it first let it run ahead of them on a loaded machine).
        for i, ack in enumerate(done):
            try:
                self._call("on_flushed", self._on_flushed, ack)
            except BaseException:  # (_call logs Exceptions) no waiter is left waiting
                self._acked(done[i:])
                raise
            self._acked([ack])

    def _acked(self, acks: list[FlushAck]) -> None:
        with self._lock:
            for ack in acks:
                self._firing.pop(ack.request_id, None)
                self._acked_flushes.add(ack.request_id)
                self._flushes_acked += 1
            self._done.notify_all()

    def _held_here(self, request_id: int) -> str | None:
        """Under the lock: the callback running on this thread that flush ``request_id``
        waits for (it completes only after that returns), else None."""
        me = threading.get_ident()
        if self._firing.get(request_id) == me:
            return "on_flushed"
        mine = [seq for seq, thread in self._reporting.items() if thread == me]
        if mine and any(rid == request_id and min(mine) <= last for rid, last, _ in self._flushes):
            return "on_error"
        return None

    def _call(self, method: str, fn: Callable[[Any], Any] | None, arg: Any) -> None:
        # The callback given to the constructor, then the listeners (one that raises is
        # logged and counted, the others still called).
        failed = 0
        if fn is not None:
            try:
                fn(arg)
            except Exception:
                failed += 1
                log.exception("%s callback %r raised", method, fn)
        failed += len(self._listeners.notify(method, arg))
        if failed:
            with self._lock:
                self._callback_errors += failed

    # -- flushes --------------------------------------------------------------------------------

    def request_flush(self) -> int:
        """Ask to be told (``on_flushed(FlushAck(id, count))``) once every message sent so far
        is held by the broker; returns the request id (1, 2, ...)."""
        with self._lock:
            rid = self._last_flush_id = next(self._flush_ids)
            count = self._last_seq - self._last_flushed_seq
            self._last_flushed_seq = self._last_seq
            self._flushes.append((rid, self._last_seq, count))
            done = self._completed_flushes()
        self._fire_flushes(done)
        return rid

    def wait_flushed(self, request_id: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for flush ``request_id``; whether it completed (every
        message it covers receipted or refused, the refusals' ``on_error`` and its
        ``on_flushed`` returned).

        Raises :class:`RuntimeError` rather than wait where it could never complete: on STOMP,
        on the thread that reads the receipts it waits for (a message handler of the same
        transport's connection, or this sender's callbacks); on any broker, inside this
        sender's ``on_error`` or ``on_flushed`` that the flush waits for. Use
        :meth:`request_flush` and ``on_flushed`` there."""
        if timeout == 0:
            with self._lock:
                return request_id in self._acked_flushes
        with self._lock:
            if request_id in self._acked_flushes:
                return True
            callback = self._held_here(request_id)
        if callback is not None:
            raise RuntimeError(
                f"wait_flushed({request_id}) to {self.destination!r} inside this sender's "
                f"{callback}, which the flush waits for: it could never complete; use "
                "request_flush() and on_flushed there"
            )
        broker = self._outbox.receipts_read_here()
        if broker is not None:
            raise RuntimeError(
                f"wait_flushed({request_id}) to {self.destination!r} on the thread that reads "
                f"{broker}'s receipts (a message handler): it could never complete; use "
                "request_flush() and on_flushed there"
            )
        with self._done:
            return self._done.wait_for(lambda: request_id in self._acked_flushes, timeout)

    def flush(self, timeout: float) -> bool:
        """:meth:`request_flush` and :meth:`wait_flushed`."""
        return self.wait_flushed(self.request_flush(), timeout)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop sending (outstanding messages are no longer re-sent); idempotent."""
        self._closed = True
        self._outbox.close()

    def __enter__(self) -> ReliableSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """Counters: ``sent``, ``resent`` (sends repeated on a new connection), ``receipted``,
        ``refused``, ``outstanding``, ``flushes_requested``, ``flushes_acked``,
        ``callback_errors``."""
        with self._lock:
            return {
                "sent": self._sent,
                "resent": self._resent,
                "receipted": self._receipted_count,
                "refused": self._refused_count,
                "outstanding": len(self._outstanding),
                "flushes_requested": self._last_flush_id,
                "flushes_acked": self._flushes_acked,
                "callback_errors": self._callback_errors,
            }

    def __repr__(self) -> str:
        return f"<ReliableSender {self.destination!r} {self.outstanding} outstanding>"
