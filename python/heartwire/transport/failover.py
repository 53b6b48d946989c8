"""Keeping a STOMP transport connected: failover between brokers and reconnection.

A :class:`Connector` holds at most one open :class:`~heartwire.transport.link.StompLink` at a
time (``current``) and, once started, a supervisor thread that replaces it when it is lost:

1. The lost broker is checked again ``failover_check_count`` times, ``failover_check_timeout``
   seconds apart (the first check at once): a broker that merely dropped a connection is not
   abandoned. The first check that connects ends the outage.
2. Then the brokers of the list are tried in turn, starting with the one after the lost broker
   and coming back round to it, ``reconnect_interval`` seconds apart.
3. With ``reconnect_period`` > 0 the supervisor gives up that many seconds after the loss; the
   transport is then closed. With 0 it never gives up.

Before a new link becomes ``current`` the connector's ``attach`` callback runs under the lock
(the transport restores its subscriptions there), so nothing sees a half-restored link. Long work
(the reliable senders' backlog re-send) belongs in ``attached``, which runs after the link was
published (or rejected), outside the lock: nothing that needs the lock (a publish, a subscribe,
a handler on the new link's receiving thread) waits for it. A send never waits for the lock while
a link is current (:meth:`Connector.wait_link`).

The connection events (``on_disconnected(broker, reason)``, ``on_reconnected(broker)``,
``on_reconnect_failed(reason)``) go to the transport's observers
(:class:`~heartwire.transport.observers.ConnectionObserver`, :class:`.observers.Observers`),
called on the supervisor thread (errors are logged and counted, never raised).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from heartwire.transport.errors import ConnectFailed, LinkRejected
from heartwire.transport.link import LinkError, StompLink
from heartwire.transport.observers import ConnectionObserver, Observers
from heartwire.transport.urls import BrokerAddress, StompOptions

__all__ = ["ConnectFailed", "ConnectionListener", "Connector"]

log = logging.getLogger("heartwire.transport.failover")

#: The connection-listener base class of earlier versions: the one observer protocol.
ConnectionListener = ConnectionObserver

MakeLink = Callable[[BrokerAddress], StompLink]


class Connector:
    """Keeps one link open across broker failures (see the module docs).

    ``make_link(broker)`` returns an unopened link; ``attach(link)`` runs (under
    :attr:`cond`) before a link becomes current and may raise to reject it; ``attached(link)``
    (if given) runs after every ``attach`` call, outside the lock, once the link was published
    or rejected (then it is no longer open), and may raise to end it. Either raises
    :class:`~.errors.LinkRejected` for the layer above's refusal (logged here once, as such);
    anything else is logged as their own failure. ``detach(link, reason)`` runs (on the supervisor
    thread, outside the lock) after a current link was lost. ``observers`` get the connection
    events (on the supervisor thread).
    """

    def __init__(
        self,
        options: StompOptions,
        make_link: MakeLink,
        attach: Callable[[StompLink], None],
        detach: Callable[[StompLink, str], None],
        attached: Callable[[StompLink], None] | None = None,
        observers: Observers | None = None,
    ) -> None:
        self.options = options
        self._make_link = make_link
        self._attach = attach
        self._attached = attached
        self._detach = detach
        #: Guards ``current`` and the transport's subscriptions; notified on every change.
        self.cond = threading.Condition(threading.RLock())
        self.current: StompLink | None = None
        self.closed = False
        #: Why the connector closed itself (reconnect_period ran out), else None.
        self.failure: str | None = None
        self._lost: list[tuple[StompLink, str]] = []
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.observers = observers if observers is not None else Observers(log, "observer")
        self.reconnects = 0
        self.attempts = 0
        #: (broker, seconds without a link) of each outage that ended, newest last (20 kept).
        self.outages: list[tuple[str, float]] = []

    def _emit(self, method: str, *args: object) -> None:
        self.observers.notify(method, *args)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Connect to the first broker of the list that accepts (each tried once), then start
        the supervisor. Raises :class:`ConnectFailed` if none does."""
        reasons: dict[str, str] = {}
        for broker in self.options.brokers:
            link = self._try(broker, reasons)
            if link is not None and self._install(link):
                break
        else:
            raise ConnectFailed(self.options.url, reasons)
        self._thread = threading.Thread(
            target=self._supervise, name="heartwire-stomp-failover", daemon=True
        )
        self._thread.start()

    def close(self, reason: str | None = None) -> None:
        """Close the current link and stop reconnecting; idempotent."""
        with self.cond:
            if self.closed:
                return
            self.closed = True
            if reason is not None:
                self.failure = reason
            link, self.current = self.current, None
            self.cond.notify_all()
        self._wake.set()
        if link is not None:
            link.close()

    # -- links --------------------------------------------------------------------------------

    def _try(
        self, broker: BrokerAddress, reasons: dict[str, str] | None = None
    ) -> StompLink | None:
        self.attempts += 1
        link = self._make_link(broker)
        try:
            link.connect()
        except LinkError as exc:
            reason = exc.reason
        except Exception as exc:  # never let one attempt end the supervisor
            log.exception("connecting to %s failed unexpectedly", broker)
            reason = f"connection failed: {exc!r}"
        else:
            return link
        log.info("connecting to %s failed: %s", broker, reason)
        if reasons is not None:
            reasons[str(broker)] = reason
        return None

    def _install(self, link: StompLink) -> bool:
        with self.cond:
            if self.closed:
                link.close()
                return False
            try:
                self._attach(link)
            except LinkRejected as exc:  # the layer above's doing, not the subscriptions'
                log.warning("%s: connection rejected: %s", link.broker, exc, exc_info=exc.errors[0])
                link.abort(f"connection rejected: {exc}")
                published = False
            except Exception as exc:
                log.warning("%s: restoring the subscriptions failed: %r", link.broker, exc)
                link.abort(f"restoring the subscriptions failed: {exc!r}")
                published = False
            else:
                published = link.open
            if published:
                self.current = link
                self.cond.notify_all()
        # Outside the lock, published or not (a rejected link is no longer open): the attach
        # step's long work, e.g. the reliable senders' re-send (a failure there ends the link).
        if self._attached is not None:
            try:
                self._attached(link)
            except LinkRejected as exc:  # (logged once, here)
                log.warning("%s: connection ended: %s", link.broker, exc, exc_info=exc.errors[0])
                link.abort(f"connection ended: {exc}")
            except Exception as exc:
                log.exception("%s: after attaching the connection", link.broker)
                link.abort(f"after attaching the connection: {exc!r}")
        if not published:
            return False
        log.info("connected to %s (%s, %s)", link.broker, link.server, link.dialect.name)
        return True

    def link_lost(self, link: StompLink, reason: str) -> None:
        """Report that ``link`` failed (from any thread). A link that is not current is ignored
        (it was already replaced). The link is aborted; the supervisor reconnects."""
        with self.cond:
            if self.current is not link:
                return
            self.current = None
            self._lost.append((link, reason))
            self.cond.notify_all()
        link.abort(reason)  # idempotent: reports back here, ignored as no longer current
        self._wake.set()

    def wait_link(self, deadline: float) -> StompLink | None:
        """The current link, waiting for one until ``deadline`` (time.monotonic()); None on
        timeout or once closed. With a link current, or a deadline already past, it returns
        without waiting for :attr:`cond` (which a link being attached holds)."""
        link = self.current  # a plain read: a link just lost fails its send, which is retried
        if link is not None or self.closed:
            return link
        if deadline <= time.monotonic():
            return None
        with self.cond:
            while True:
                link = self.current
                if link is not None or self.closed:
                    return link
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.cond.wait(remaining)

    # -- supervisor ---------------------------------------------------------------------------

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless closed first; False if closed."""
        if seconds > 0:
            self._wake.clear()
            deadline = time.monotonic() + seconds
            while not self.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wake.wait(remaining)
                self._wake.clear()
        return not self.closed

    def _supervise(self) -> None:
        try:
            while not self.closed:
                self._wake.wait()
                self._wake.clear()
                while True:
                    with self.cond:
                        if self.closed or not self._lost:
                            break
                        link, reason = self._lost.pop(0)
                    self._outage(link, reason)
        except Exception:  # pragma: no cover - a bug; never leave the transport without notice
            log.exception("the failover supervisor failed; closing the transport")
            self.close("the failover supervisor failed")

    def _outage(self, lost: StompLink, reason: str) -> None:
        broker = str(lost.broker)
        log.warning("lost the connection to %s: %s", broker, reason)
        self._emit("on_disconnected", broker, reason)
        try:
            self._detach(lost, reason)
        except Exception:
            log.exception("detaching %s failed", broker)
        began = time.monotonic()
        link = self._reconnect(lost.broker, began)
        if link is None:
            if not self.closed:
                why = (
                    f"no broker of {self.options.url} accepted a connection within "
                    f"reconnect_period={self.options.reconnect_period:g} s (lost {broker}: "
                    f"{reason})"
                )
                log.error("%s; closing the transport", why)
                self.close(why)
                self._emit("on_reconnect_failed", why)
            return
        self.reconnects += 1
        took = time.monotonic() - began
        self.outages = [*self.outages[-19:], (str(link.broker), took)]
        log.warning("reconnected to %s after %.3f s", link.broker, took)
        self._emit("on_reconnected", str(link.broker))

    def _order(self, lost: BrokerAddress) -> Sequence[BrokerAddress]:
        brokers = self.options.brokers
        i = brokers.index(lost) if lost in brokers else -1
        return [brokers[(i + 1 + k) % len(brokers)] for k in range(len(brokers))]

    def _reconnect(self, lost: BrokerAddress, began: float) -> StompLink | None:
        opts = self.options
        period = opts.reconnect_period

        def out_of_time() -> bool:
            return period > 0 and time.monotonic() - began >= period

        # 1. Is the lost broker really gone?
        for check in range(opts.failover_check_count):
            if check and not self._sleep(opts.failover_check_timeout):
                return None
            if self.closed or out_of_time():
                return None
            link = self._try(lost)
            if link is not None and self._install(link):
                return link
        # 2. Go round the list, starting after the lost broker.
        order = self._order(lost)
        first = len(order) > 1  # a lone broker was just checked: wait before the next try
        while not self.closed:
            for broker in order:
                if not first and not self._sleep(opts.reconnect_interval):
                    return None
                first = False
                if self.closed or out_of_time():
                    return None
                link = self._try(broker)
                if link is not None and self._install(link):
                    return link
        return None
