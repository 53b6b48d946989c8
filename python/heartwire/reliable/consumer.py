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
import time
import weakref
from collections.abc import Callable
from typing import Any

from heartwire import _validate
from heartwire._core import DedupWindow
from heartwire.reliable import destinations
from heartwire.reliable.message import ReceivedMessage
from heartwire.reliable.transaction import Transaction
from heartwire.transport import is_stomp
from heartwire.transport.headers import MESSAGE_ID_HEADER

__all__ = ["Consumer"]

log = logging.getLogger("heartwire.reliable")
_forget_ids = itertools.count(1)

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
        self._stomp = is_stomp(broker)
        self._lock = threading.RLock()  # the embedded broker delivers inside start()
        self._sub: Any = None
        self._delivered = 0
        self._handler_errors = 0
        self._acked = 0
        self._nacked = 0
        self._dialect: Any = None
        # Client-ack bookkeeping of the connection (or embedded subscription) delivering now:
        # its deliveries not yet acked or nacked (delivery number -> message id), and dropped
        # duplicates whose ACK waits (``client`` acks are cumulative: never past an unsettled
        # message).
        self._channel: Any = None
        self._deliveries = itertools.count(1)
        self._unsettled: dict[int, str] = {}
        self._held_dups: list[tuple[int, Callable[[], None]]] = []
        self._retired: weakref.WeakSet[Any] = weakref.WeakSet()

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
            self._sub = self._start_stomp() if self._stomp else self._start_embedded()
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
                self._forget_stopped()
            return
        if self._stomp:
            self._stop_stomp(sub, forget)
        else:
            from heartwire.reliable.memory_store import store_of

            store_of(self.broker).unsubscribe(sub, forget=forget)

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

    # -- STOMP ----------------------------------------------------------------------------------

    def _dialect_now(self) -> Any:
        broker = self.broker
        deadline = time.monotonic() + broker.options.request_blocking_time
        link = broker._connector.wait_link(deadline)
        if link is None:
            raise ConnectionError(
                f"consumer of {self.destination!r}: no broker connection on {broker.url}"
            )
        return link.dialect

    def _sub_id(self) -> str | None:
        return f"hw-durable-{self.durable_name}" if self.durable_name else None

    def _start_stomp(self, sub_id: str | None = None) -> Any:
        broker = self.broker
        dialect = self._dialect = self._dialect_now()
        headers: dict[str, str] = {}
        if self.durable_name is not None:
            if dialect.durable_needs_client_id and not broker.client_id:
                raise ValueError(
                    f"durable_name={self.durable_name!r} on {dialect.name} needs a client id: "
                    "connect(url, client_id=...)"
                )
            headers = dialect.durable_headers(self.durable_name, broker.client_id)
        timeout = broker.options.request_blocking_time
        # The ack bookkeeping of this subscription, one channel per connection it delivers on:
        # a restart (a new subscription) starts afresh even on the same connection.
        channels: weakref.WeakKeyDictionary[Any, _Channel] = weakref.WeakKeyDictionary()

        def deliver(link: Any, message: Any) -> None:
            with self._lock:
                channel = channels.get(link)
                if channel is None:
                    channel = channels[link] = _Channel()
            self._on_stomp(channel, link, message)

        sub = broker.subscribe_destination(
            self.destination,
            deliver,
            sub_id=sub_id or self._sub_id(),
            ack=self.ack,
            headers=headers,
            confirm=timeout,
        )
        if sub.refused is not None:
            sub.cancel()
            raise ConnectionError(f"{self!r}: the broker refused the subscription: {sub.refused}")
        if not sub.confirmed:
            log.warning(
                "%r: the broker did not confirm the subscription within %g s", self, timeout
            )
        return sub

    def _stop_stomp(self, sub: Any, forget: bool) -> None:
        if not (forget and self.durable_name is not None):
            sub.cancel()
            link = self.broker.current_link
            if self.ack != "auto" and link is not None and link.dialect.unsubscribe_keeps_unacked:
                # The only way to hand back what it left unacknowledged (seen or in flight).
                link.abort(f"{self!r} stopped: returning its unacknowledged messages")
            return
        first, second = self._dialect.durable_forget(self.durable_name, self.broker.client_id)
        sub.cancel(first)
        if second is not None:
            self._request_unsubscribe(second)

    def _forget_stopped(self) -> None:
        if not self._stomp:
            from heartwire.reliable.memory_store import store_of

            store = store_of(self.broker)
            sub = store.subscribe(self.destination, "auto", self.durable_name, lambda m, t: None)
            store.unsubscribe(sub, forget=True)
            return
        dialect = self._dialect or self._dialect_now()
        first, second = dialect.durable_forget(self.durable_name, self.broker.client_id)
        if dialect.durable_needs_client_id:
            self._request_unsubscribe(second or {})
        else:
            # RabbitMQ deletes the queue on an UNSUBSCRIBE of an active durable subscription.
            # The brief subscription gets an id of its own: a message the broker hands it before
            # the UNSUBSCRIBE lands must not reach a later consumer of this durable name, which
            # would have the same id.
            sub = self._start_stomp(sub_id=f"{self._sub_id()}-forget-{next(_forget_ids)}")
            sub.cancel(first)

    def _request_unsubscribe(self, headers: dict[str, str]) -> None:
        sub_id = self._sub_id()
        assert sub_id is not None
        timeout = self.broker.options.request_blocking_time
        error = self.broker.request("UNSUBSCRIBE", {"id": sub_id, **headers}, timeout)
        if error is not None:
            log.warning("deleting durable subscription %r: %s", self.durable_name, error)

    def _on_stomp(self, channel: _Channel, link: Any, message: Any) -> None:
        headers = message.headers
        message_id = headers.get(MESSAGE_ID_HEADER) or headers.get("message-id", "")
        ack_id = headers.get("ack") or headers.get("message-id", "")
        no = self._delivery(channel)

        # Whether a NACK here also settles every earlier delivery (``client`` mode, RabbitMQ).
        nack_all = link.dialect.nack_cumulative

        def frame(ok: bool) -> bool:
            # Whether the frame went out (else the connection is gone: the broker redelivers).
            try:
                link.frame("ACK" if ok else "NACK", {"id": ack_id})
            except ConnectionError:
                return False
            return True

        settle = None
        if self.ack != "auto":

            def settle(msg: ReceivedMessage, ok: bool, tx: Transaction | None) -> None:
                if tx is not None:
                    tx._settle_stomp(link, "ACK" if ok else "NACK", {"id": ack_id})
                    tx._after_commit(lambda: self._settled(channel, no, msg.id, ok, nack_all))
                else:  # handled even if the ACK cannot land: the redelivery is a duplicate
                    self._settled(channel, no, msg.id, ok, nack_all, counted=frame(ok))

        msg = ReceivedMessage(
            message_id,
            message.destination,
            message.body,
            headers,
            headers.get("redelivered") == "true",
            settle,
        )
        self._handle(msg, channel, no, lambda: frame(True))

    # -- embedded broker ------------------------------------------------------------------------

    def _start_embedded(self) -> Any:
        from heartwire.reliable.memory_store import store_of

        store = store_of(self.broker)
        holder: list[Any] = []

        def deliver(stored: Any, tag: int | None) -> None:
            channel = holder[0]
            no = self._delivery(channel)
            settle = None
            if tag is not None:

                def settle(msg: ReceivedMessage, ok: bool, tx: Transaction | None) -> None:
                    def apply() -> None:
                        store.settle(channel, tag, ok)
                        self._settled(channel, no, msg.id, ok, False)  # (NACK: its own)

                    if tx is not None:
                        tx._defer(apply)
                    else:
                        apply()

            headers = stored.headers
            msg = ReceivedMessage(
                headers.get(MESSAGE_ID_HEADER, ""),
                stored.destination,
                stored.body,
                headers,
                stored.redelivered,
                settle,
            )
            self._handle(
                msg, channel, no, lambda: store.settle(channel, tag, True) if tag else None
            )

        # The store may deliver buffered messages before subscribe returns: give it the
        # subscription through ``holder`` first.
        deferred = _Deferred(deliver)
        sub = store.subscribe(self.destination, self.ack, self.durable_name, deferred)
        holder.append(sub)
        deferred.release()
        return sub

    # -- both -----------------------------------------------------------------------------------

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


class _Channel:
    """The ack bookkeeping identity of one STOMP subscription on one connection."""

    __slots__ = ("__weakref__",)


class _Deferred:
    """A delivery callback that holds messages until :meth:`release` (the embedded store may
    deliver while ``subscribe`` runs, before the consumer has its subscription object)."""

    def __init__(self, fn: Callable[[Any, int | None], None]) -> None:
        self._fn = fn
        self._held: list[tuple[Any, int | None]] | None = []

    def __call__(self, stored: Any, tag: int | None) -> None:
        if self._held is not None:
            self._held.append((stored, tag))
        else:
            self._fn(stored, tag)

    def release(self) -> None:
        # Every held message is delivered even if an earlier delivery raised (a handler's
        # BaseException); the first one raised propagates once all are done.
        held, self._held = self._held, None
        first: BaseException | None = None
        for stored, tag in held or ():
            try:
                self._fn(stored, tag)
            except BaseException as exc:
                if first is None:
                    first = exc
        if first is not None:
            raise first
