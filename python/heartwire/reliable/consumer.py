"""Consumer: receives from a queue or topic with acks, durable subscriptions and de-duplication.

::

    c = hw.Consumer(broker, "/topic/alerts", ack="client-individual", durable_name="risk",
                    on_message=handle)
    c.start()            # with durable_name: messages sent while stopped arrive now
    ...
    c.stop()             # the durable subscription stays; stop(forget=True) deletes it

- ``ack="auto"``: the broker counts a message consumed once sent. ``"client"`` /
  ``"client-individual"``: call ``msg.ack()`` (``client`` also acknowledges every earlier
  message); a message not acknowledged when the consumer stops or its connection is lost is
  delivered again, with ``msg.redelivered`` True.
- ``durable_name`` (``/topic/...`` only): a durable subscription that keeps messages while the
  consumer is stopped. On ActiveMQ the transport needs a client id
  (``heartwire.connect(url, client_id="risk-system")``); on RabbitMQ it is a durable queue named
  ``<client_id>.<durable_name>`` (or ``<durable_name>``). See :mod:`heartwire.transport.dialect`.
- ``dedup`` (default on): a message whose id (``hw-message-id``, which reliable senders set and
  keep across re-sends; else the broker's ``message-id``) was already handled, within the last
  ``dedup_window`` ids, is dropped and counted (``stats()["duplicates"]``); the window lives in
  the Rust core (:class:`heartwire._core.DedupWindow`). Handled means acknowledged: in ``auto``
  mode on delivery; in the client modes once you acked it (or a later message, in ``client``
  mode; even if the connection then lost the ACK), directly or in a transaction that
  committed. A message you did not ack (the handler
  raised, or nacked it) is not handled: when the broker delivers it again it reaches
  ``on_message`` again. A copy arriving while the first is still unacknowledged is handed over
  too (at least once, never lost). A dropped duplicate is acknowledged for you: at once in
  ``client-individual`` mode; in ``client`` mode (cumulative acks) once every message
  delivered before it is acked or nacked.

``on_message(msg)`` (a :class:`~heartwire.reliable.ReceivedMessage`) runs on the transport's
receiving thread (the sending thread on the embedded broker); an exception it raises goes to
``on_error(exc, msg)`` (else the log) and is counted.
"""

from __future__ import annotations

import itertools
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from heartwire import _validate
from heartwire._core import DedupWindow
from heartwire.reliable.backend import backend_for
from heartwire.reliable.message import ReceivedMessage
from heartwire.transport import destinations

__all__ = ["Consumer"]

log = logging.getLogger("heartwire.reliable")

ACK_MODES = ("auto", "client", "client-individual")


class Consumer:
    """A consumer of one destination (see the module docs)."""

    def __init__(
        self,
        broker: Any,
        destination: str,
        ack: str = "auto",
        durable_name: str | None = None,
        dedup: bool = True,
        *,
        dedup_window: int = 100_000,
        on_message: Callable[[ReceivedMessage], Any] | None = None,
        on_error: Callable[[Exception, ReceivedMessage], Any] | None = None,
    ) -> None:
        kind, _ = destinations.split(destinations.validate(destination))
        ack = _validate.choice(ack, "ack", ACK_MODES)
        if durable_name is not None and (
            not isinstance(durable_name, str) or not durable_name or kind != "topic"
        ):
            raise ValueError(
                f"durable_name={durable_name!r}: a durable subscription needs a non-empty "
                f"name and a '/topic/...' destination (got {destination!r})"
            )
        if on_message is not None and not callable(on_message):
            raise TypeError(f"on_message must be callable, got {type(on_message).__name__}")
        if on_error is not None and not callable(on_error):
            raise TypeError(f"on_error must be callable, got {type(on_error).__name__}")
        dedup_window = _validate.count(dedup_window, "dedup_window", 1)
        self.broker = broker
        self.destination = destination
        self.ack = ack
        self.durable_name = durable_name
        self.on_message = on_message
        self.on_error = on_error
        self._window: DedupWindow | None = DedupWindow(dedup_window) if dedup else None
        self._lock = threading.RLock()  # the embedded broker delivers inside start()
        self._sub: Any = None
        self._delivered = 0
        self._handler_errors = 0
        self._acked = 0
        self._nacked = 0
        # Client-ack bookkeeping of the connection (or embedded subscription) delivering now:
        # its deliveries not yet acked or nacked (delivery number -> message id), and dropped
        # duplicates whose ACK waits (``client`` acks are cumulative: never past an unsettled
        # message).
        self._channel: Any = None
        self._deliveries = itertools.count(1)
        self._unsettled: dict[int, str] = {}
        self._held_dups: list[tuple[int, Callable[[], None]]] = []
        self._retired: weakref.WeakSet[Any] = weakref.WeakSet()
        # The transport's half (picked once): subscribes and hands deliveries to _handle.
        self._subscriber = backend_for(broker).subscriber(self)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._sub is not None

    def start(self) -> Consumer:
        """Subscribe (idempotent). On STOMP waits up to ``request_blocking_time`` for a
        connection and for the broker to confirm the subscription (so that whatever is sent
        after this returns reaches it); raises :class:`ConnectionError` if none comes or the
        broker refuses the subscription,
        :class:`ValueError` if a durable subscription on ActiveMQ lacks the transport's client
        id."""
        with self._lock:
            if self._sub is not None:
                return self
            self._sub = self._subscriber.start()
        return self

    def stop(self, forget: bool = False) -> None:
        """Unsubscribe (idempotent). Unacknowledged messages go back to the broker;
        ``forget=True`` also deletes the durable subscription and what it holds.

        On RabbitMQ a client-ack consumer's ``stop()`` (without ``forget``) also re-opens the
        transport's connection: RabbitMQ keeps a cancelled subscription's unacknowledged
        messages with the connection until it closes (it refuses a NACK for them, and a later
        ``client``-mode ACK on the connection would acknowledge them). The transport
        reconnects at once; its other subscriptions are restored and reliable senders re-send,
        as after any lost connection."""
        with self._lock:
            sub, self._sub = self._sub, None
            if sub is not None and self._channel is not None:
                # The next subscription keeps books of its own: nothing this one left
                # unsettled holds its duplicate ACKs back.
                self._retired.add(self._channel)
                self._channel = None
                self._unsettled = {}
                self._held_dups = []
        if sub is None:
            if forget and self.durable_name is not None:
                self._subscriber.forget()
            return
        self._subscriber.stop(sub, forget)

    def __enter__(self) -> Consumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict[str, int]:
        """Counters: ``delivered`` (handed to on_message), ``duplicates`` (dropped),
        ``handler_errors``, ``acked``, ``nacked``, and the window's ``dedup_size`` /
        ``dedup_evicted``."""
        w = self._window.stats() if self._window is not None else {}
        with self._lock:
            return {
                "delivered": self._delivered,
                "duplicates": w.get("duplicates", 0),
                "handler_errors": self._handler_errors,
                "acked": self._acked,
                "nacked": self._nacked,
                "dedup_size": w.get("size", 0),
                "dedup_evicted": w.get("evicted", 0),
            }

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        durable = f" durable {self.durable_name!r}" if self.durable_name else ""
        return f"<Consumer {self.destination!r}{durable} ack={self.ack} {state}>"

    def _sub_id(self) -> str | None:
        return f"hw-durable-{self.durable_name}" if self.durable_name else None

    # -- deliveries (from the subscriber, on any transport) -----------------------------------

    def _delivery(self, channel: Any) -> int:
        # Number a delivery from ``channel`` (one subscription on one connection, or one
        # embedded subscription); a new channel (a reconnection, a restart) starts afresh: the
        # broker redelivers whatever the old one left unacknowledged. A late delivery from a
        # channel already replaced or stopped changes nothing (its acks cannot count).
        with self._lock:
            if channel is not self._channel and channel not in self._retired:
                if self._channel is not None:
                    self._retired.add(self._channel)
                self._channel = channel
                self._unsettled = {}
                self._held_dups = []
            return next(self._deliveries)

    def _settled(
        self,
        channel: Any,
        no: int,
        message_id: str,
        ok: bool,
        nack_all: bool,
        counted: bool = True,
    ) -> None:
        # The application acked (``ok``) or nacked delivery ``no`` of ``channel`` (``counted``:
        # and the frame went out). An acked id is handled, even if its ACK did not reach the
        # broker: a later copy of it is a duplicate. In ``client`` mode an ACK settles every
        # earlier delivery too, and so does a NACK where the broker's is cumulative
        # (``nack_all``: RabbitMQ; ActiveMQ's and the embedded broker's settle only their own).
        release: Callable[[], None] | None = None
        window = self._window
        with self._lock:
            if counted and ok:
                self._acked += 1
            elif counted:
                self._nacked += 1
            handled = [message_id] if ok else []
            if channel is self._channel:
                done = [no]
                if self.ack == "client" and (ok or nack_all):
                    done += [n for n in self._unsettled if n < no]
                    self._held_dups = [(n, a) for n, a in self._held_dups if n > no]
                for n in done:
                    mid = self._unsettled.pop(n, None)
                    if ok and mid:
                        handled.append(mid)
                release = self._release_dups()
            if window is not None:
                for mid in handled:
                    if mid and mid not in window:
                        window.seen(mid)
        if release is not None:
            release()

    def _release_dups(self) -> Callable[[], None] | None:
        # Under the lock (``client`` mode): the held duplicate ACK that may go now (the newest
        # with no unsettled delivery before it: as a cumulative ACK it covers the older ones).
        first = min(self._unsettled, default=None)
        ready = [(n, ack) for n, ack in self._held_dups if first is None or n < first]
        if not ready:
            return None
        self._held_dups = [(n, a) for n, a in self._held_dups if first is not None and n > first]
        return ready[-1][1]

    def _handle(
        self, msg: ReceivedMessage, channel: Any, no: int, ack_copy: Callable[[], Any]
    ) -> None:
        window = self._window
        if window is not None and msg.id:
            if self.ack == "auto":  # the broker counts it consumed now: it is handled
                if window.seen(msg.id):
                    return
            elif msg.id in window:  # acked before: drop this copy and acknowledge it
                window.seen(msg.id)  # counts the duplicate
                self._ack_duplicate(channel, no, ack_copy)
                return
        with self._lock:
            self._delivered += 1
            if self.ack != "auto" and channel is self._channel:
                self._unsettled[no] = msg.id
        if self.on_message is None:
            return
        try:
            self.on_message(msg)
        except Exception as exc:
            with self._lock:
                self._handler_errors += 1
            if self.on_error is not None:
                try:
                    self.on_error(exc, msg)
                except Exception:
                    log.exception("on_error of %r raised", self)
            else:
                log.exception("on_message of %r raised on %r", self, msg)

    def _ack_duplicate(self, channel: Any, no: int, ack_copy: Callable[[], Any]) -> None:
        # ``client-individual``: at once. ``client`` (cumulative): at once if every earlier
        # delivery is settled, else held until they are (acking now would acknowledge them).
        with self._lock:
            if self.ack == "client" and channel is self._channel and self._unsettled:
                self._held_dups.append((no, ack_copy))
                return
        ack_copy()
