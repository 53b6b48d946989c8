"""Keeping a STOMP transport connected: failover between brokers and reconnection.

A :class:`Connector` holds at most one open :class:`~heartwire.transport.link.StompLink` at a
time (``current``) and, once started, a supervisor thread that replaces it when it is lost. The
tries follow a plan (:mod:`.backoff`, pure and tested without a clock):

0. At start, each broker once (``randomize``: in a shuffled order), then up to
   ``startup_max_reconnect_attempts`` more tries (-1: until one connects), else
   :class:`ConnectFailed`.
1. After a loss, the lost broker is checked again ``failover_check_count`` times,
   ``failover_check_timeout`` seconds apart (the first check at once): a broker that merely
   dropped a connection is not abandoned. The first check that connects ends the outage.
2. Then the brokers of the list are tried pass after pass (starting after the lost one and
   coming back round to it, or shuffled anew each pass with ``randomize``), waiting
   ``reconnect_interval`` before each try, or a growing wait with
   ``use_exponential_back_off`` (``back_off_multiplier``, ``max_reconnect_delay``,
   ``reconnect_jitter``: :class:`~.backoff.Backoff`).
3. The supervisor gives up after ``max_reconnect_attempts`` tries (-1: never) or
   ``reconnect_period`` seconds (0: never), whichever comes first; the transport is then
   closed (:attr:`Connector.failure` says why) and observers get ``on_reconnect_failed``.

With ``priority_backup`` the first broker of the list is the preferred one: while connected to
another, the supervisor tries the preferred one after each back-off wait, and when it accepts,
the new link is attached (subscriptions restored, reliable senders re-send what is not
receipted yet) and published *before* the old link is let go: a planned switch, reported to
observers as ``on_switched(from_broker, to_broker)``, with no ``on_disconnected``. The old link
keeps receiving for the wait that preceded the move plus ``connect_timeout`` (other clients of
the list move back up to about one wait later and publish to the backup until then), then gets
its DISCONNECT, which is not reported as a loss either (earlier if a reconnection lands on
that broker: two subscriptions there would deliver each message twice). The tries of a
preferred broker that stays down are quiet (the first failed one of each stay on a backup is
logged at INFO, the rest and stomp.py's own warnings about them at DEBUG).
A try of the preferred broker holds the supervisor up to ``connect_timeout``: a loss in that
time is handled right after it.

Before a new link becomes ``current`` the connector's ``attach`` callback runs under the lock
(the transport restores its subscriptions there), so nothing sees a half-restored link. Long work
(the reliable senders' backlog re-send) belongs in ``attached``, which runs after the link was
published (or rejected), outside the lock: nothing that needs the lock (a publish, a subscribe,
a handler on the new link's receiving thread) waits for it. A send never waits for the lock while
a link is current (:meth:`Connector.wait_link`).

The connection events (``on_disconnected(broker, reason)``, ``on_reconnected(broker)``,
``on_switched(from_broker, to_broker)``, ``on_reconnect_failed(reason)``) go to the
transport's observers (:class:`~heartwire.transport.observers.ConnectionObserver`,
:class:`.observers.Observers`), called on the supervisor thread (errors are logged and counted,
never raised).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

from heartwire.transport.backoff import (
    Random,
    new_random,
    preferred,
    probe_waits,
    reconnect_plan,
    startup_plan,
)
from heartwire.transport.errors import ConnectFailed, LinkRejected
from heartwire.transport.link import LinkError, StompLink
from heartwire.transport.observers import ConnectionObserver, Observers
from heartwire.transport.urls import BrokerAddress, StompOptions

__all__ = ["ConnectFailed", "ConnectionListener", "Connector"]

log = logging.getLogger("heartwire.transport.failover")

# Whether this thread is trying the preferred broker (priority_backup's probes): stomp.py's own
# records are then lowered to DEBUG (it warns "could not connect to host ..." for every refused
# try, and the probes of a broker that stays down would log one per wait).
_probing = threading.local()


class _ProbeQuiet(logging.Filter):
    """On stomp.py's logger: a record made while this thread probes becomes a DEBUG one, kept
    only if the logger lets DEBUG through (as if it had been logged at DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(_probing, "on", False) or record.levelno <= logging.DEBUG:
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return _STOMP_LOG.isEnabledFor(logging.DEBUG)


_STOMP_LOG = logging.getLogger("stomp.py")
_STOMP_LOG.addFilter(_ProbeQuiet())

# The longest single wait on an Event: longer ones are made of several (threading.TIMEOUT_MAX
# bounds a wait; the options are bounded at a day, but StompOptions can be built directly).
_MAX_WAIT = 3600.0

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
    thread, outside the lock) after a current link was lost or switched away from.
    ``observers`` get the connection events (on the supervisor thread). ``rng``: the random
    source of ``randomize`` and ``reconnect_jitter`` (default: a private ``random.Random``).
    """

    def __init__(
        self,
        options: StompOptions,
        make_link: MakeLink,
        attach: Callable[[StompLink], None],
        detach: Callable[[StompLink, str], None],
        attached: Callable[[StompLink], None] | None = None,
        observers: Observers | None = None,
        rng: Random | None = None,
    ) -> None:
        self.options = options
        self._rng = rng if rng is not None else new_random()
        self._make_link = make_link
        self._attach = attach
        self._attached = attached
        self._detach = detach
        #: Guards ``current`` and the transport's subscriptions; notified on every change.
        self.cond = threading.Condition(threading.RLock())
        self.current: StompLink | None = None
        self.closed = False
        #: Why the connector closed itself (reconnect_period or max_reconnect_attempts ran
        #: out), else None.
        self.failure: str | None = None
        self._lost: list[tuple[StompLink, str]] = []
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.observers = observers if observers is not None else Observers(log, "observer")
        self.reconnects = 0
        self.attempts = 0
        #: (broker, seconds without a link) of each outage that ended, newest last (20 kept).
        self.outages: list[tuple[str, float]] = []
        #: priority_backup: planned moves back to the preferred broker, and tries of it.
        self.switches = 0
        self.probes = 0
        # The waits between tries of the preferred broker, and when the next one is due
        # (time.monotonic()); None: not connected to a backup. Only the supervisor thread (and
        # start(), before it runs) touches these.
        self._probe_waits: Iterator[float] | None = None
        self._probe_at: float | None = None
        self._probe_wait = 0.0  # the wait before the next try (the linger after a switch)
        self._probe_failed_logged = False  # a failed try was logged since the last arm
        # Links switched away from, still receiving until their deadline (time.monotonic()),
        # soonest first; guarded by ``cond`` (close() takes them from any thread).
        self._lingering: list[tuple[float, StompLink]] = []

    def _emit(self, method: str, *args: object) -> None:
        self.observers.notify(method, *args)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Connect (see the module docs, step 0), then start the supervisor. Raises
        :class:`ConnectFailed` if no try connects."""
        opts = self.options
        reasons: dict[str, str] = {}
        began = time.monotonic()
        tries = 0
        connected = False
        period = opts.reconnect_period
        for wait, broker in startup_plan(opts, self._rng):
            if period > 0:  # as after a loss: a wait never runs past the period
                wait = min(wait, max(0.0, began + period - time.monotonic()))
            if wait and not self._sleep(wait):
                break
            if tries and period > 0 and time.monotonic() - began >= period:
                break
            tries += 1
            link = self._try(broker, reasons)
            if link is not None and self._install(link):
                connected = True
                break
        if not connected:
            raise ConnectFailed(
                opts.url, reasons, tries if opts.startup_max_reconnect_attempts else 0
            )
        self._arm_probe(self.current)
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
            lingering, self._lingering = self._lingering, []
            self.cond.notify_all()
        self._wake.set()
        for _, old in lingering:
            old.close()
        if link is not None:
            link.close()

    # -- links --------------------------------------------------------------------------------

    def _try(
        self,
        broker: BrokerAddress,
        reasons: dict[str, str] | None = None,
        level: int = logging.INFO,
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
        log.log(level, "connecting to %s failed: %s", broker, reason)
        if reasons is not None:
            reasons[str(broker)] = reason
        return None

    def _install(self, link: StompLink, replacing: StompLink | None = None) -> bool | None:
        """Attach and publish ``link``: True once published; False if it was rejected after
        the attach step ran; None if it was closed unattached: the connector is closed, or
        ``replacing`` (the current link a planned switch replaces) is no longer current (lost
        meanwhile: its outage comes next).

        A link to the same broker still lingering after a switch away from it (an outage right
        after the switch came back to it) is closed first: two subscriptions there would
        deliver each message twice. (Closed before the new one subscribes, outside the lock:
        the DISCONNECT waits briefly for its receipt. A linger on another broker goes on, as it
        does after the switch.)"""
        self._end_lingering(broker=link.broker)
        with self.cond:
            if self.closed:
                link.close()
                return None
            if replacing is not None and self.current is not replacing:
                link.close()
                return None
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
        """Sleep unless closed first; False if closed. Links whose linger ends meanwhile are
        closed on time (a long outage wait must not keep one open past its deadline)."""
        if seconds > 0:
            self._wake.clear()
            deadline = time.monotonic() + seconds
            while not self.closed:
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0:
                    break
                with self.cond:
                    if self._lingering:
                        remaining = min(remaining, max(0.0, self._lingering[0][0] - now))
                self._wake.wait(min(remaining, _MAX_WAIT))
                self._wake.clear()
                self._end_lingering()
        return not self.closed

    def _supervise(self) -> None:
        try:
            while not self.closed:
                due = self._probe_at
                with self.cond:
                    if self._lingering:
                        first = self._lingering[0][0]
                        due = first if due is None else min(due, first)
                # (at most _MAX_WAIT at a time: the loop comes back here when it is not due)
                self._wake.wait(
                    _MAX_WAIT if due is None else min(_MAX_WAIT, max(0.0, due - time.monotonic()))
                )
                self._wake.clear()
                self._end_lingering()
                while True:
                    with self.cond:
                        if self.closed or not self._lost:
                            break
                        link, reason = self._lost.pop(0)
                    self._outage(link, reason)
                due = self._probe_at
                if not self.closed and due is not None and time.monotonic() >= due:
                    self._probe()
        except Exception:  # pragma: no cover - a bug; never leave the transport without notice
            log.exception("the failover supervisor failed; closing the transport")
            self.close("the failover supervisor failed")

    def _outage(self, lost: StompLink, reason: str) -> None:
        broker = str(lost.broker)
        self._probe_at = None  # (re-armed by the link that ends the outage)
        log.warning("lost the connection to %s: %s", broker, reason)
        self._emit("on_disconnected", broker, reason)
        try:
            self._detach(lost, reason)
        except Exception:
            log.exception("detaching %s failed", broker)
        began = time.monotonic()
        link, why = self._reconnect(lost.broker, began)
        if link is None:
            if not self.closed:
                why = f"{why} (lost {broker}: {reason})"
                log.error("%s; closing the transport", why)
                self.close(why)
                self._emit("on_reconnect_failed", why)
            return
        self.reconnects += 1
        took = time.monotonic() - began
        self.outages = [*self.outages[-19:], (str(link.broker), took)]
        log.warning("reconnected to %s after %.3f s", link.broker, took)
        self._arm_probe(link)
        self._emit("on_reconnected", str(link.broker))

    def _reconnect(self, lost: BrokerAddress, began: float) -> tuple[StompLink | None, str]:
        """Walk the reconnection plan (:func:`~.backoff.reconnect_plan`) on the real clock:
        the new link, or None and why it gave up."""
        opts = self.options
        period = opts.reconnect_period
        tries = 0
        for wait, broker in reconnect_plan(opts, lost, self._rng):
            if period > 0:  # a long backed-off wait must not carry the outage past the period
                wait = min(wait, max(0.0, began + period - time.monotonic()))
            if wait and not self._sleep(wait):
                return None, "closed"
            if self.closed:
                return None, "closed"
            if period > 0 and time.monotonic() - began >= period:
                return None, (
                    f"no broker of {opts.url} accepted a connection within "
                    f"reconnect_period={period:g} s"
                )
            tries += 1
            link = self._try(broker)
            if link is not None and self._install(link):
                return link, ""
        return None, (
            f"no broker of {opts.url} accepted a connection in {tries} tries "
            f"(max_reconnect_attempts={opts.max_reconnect_attempts})"
        )

    # -- priority_backup ----------------------------------------------------------------------

    def _arm_probe(self, link: StompLink | None) -> None:
        """After ``link`` became current: with ``priority_backup`` and ``link`` on a backup,
        schedule the first try of the preferred broker (a fresh back-off); else none."""
        opts = self.options
        if not opts.priority_backup or link is None or link.broker == preferred(opts):
            self._probe_waits = None
            self._probe_at = None
            return
        self._probe_waits = probe_waits(opts, self._rng)
        self._probe_failed_logged = False
        self._next_probe(self._probe_waits)

    def _next_probe(self, waits: Iterator[float]) -> None:
        self._probe_wait = next(waits)
        self._probe_at = time.monotonic() + self._probe_wait

    def _probe(self) -> None:
        """Try the preferred broker; if it accepts, switch to it (module docs)."""
        target = preferred(self.options)
        old = self.current
        waits = self._probe_waits
        if old is None or waits is None or old.broker == target:
            self._arm_probe(old)  # an outage re-arms when it ends
            return
        self.probes += 1
        # The first failed try of a stay on the backup is logged (INFO), the rest at DEBUG, and
        # stomp.py's own warnings about them at DEBUG too (_ProbeQuiet).
        reasons: dict[str, str] = {}
        _probing.on = True
        try:
            link = self._try(target, reasons, level=logging.DEBUG)
        finally:
            _probing.on = False
        if link is None and not self._probe_failed_logged:
            self._probe_failed_logged = True
            log.info(
                "the preferred broker %s is not back yet (%s); trying it again after each wait",
                target,
                reasons.get(str(target), "?"),
            )
        # The old link stays current (and in use) until the new one is published: a planned
        # switch has no outage. If the old one was lost meanwhile, the new link is closed
        # unattached and the loss is handled as any other, right after this.
        if link is None:
            self._next_probe(waits)
            return
        installed = self._install(link, replacing=old)
        if installed is None:  # the old link was lost meanwhile: its outage is next
            self._next_probe(waits)  # (the outage re-arms anyway)
            return
        if not installed:
            # The attach step ran (the reliable senders moved their re-send to the new link)
            # and the new link was then rejected: the old one cannot simply go on, so it is
            # dropped and reconnected as after a loss, which attaches everything again.
            self.link_lost(old, "the move to the preferred broker failed after attaching")
            return
        self.switches += 1
        # The old link keeps receiving a while before its DISCONNECT (not reported as a
        # loss): clients of the same list move back up to about one wait later, and until
        # then publish to the backup. (Beats they send to the preferred broker before this
        # client moves are lost all the same: the move of each client is its own.)
        linger = self._probe_wait + self.options.connect_timeout
        with self.cond:
            self._lingering.append((time.monotonic() + linger, old))
            self._lingering.sort(key=lambda item: item[0])
        self._arm_probe(link)
        log.warning("moved back to the preferred broker %s from %s", link.broker, old.broker)
        try:
            self._detach(old, "switched to the preferred broker")
        except Exception:
            log.exception("detaching %s failed", old.broker)
        self._emit("on_switched", str(old.broker), str(link.broker))

    def _end_lingering(self, broker: BrokerAddress | None = None) -> None:
        """DISCONNECT the links switched away from whose linger is over, or (``broker``) every
        one to that broker."""
        now = time.monotonic()
        with self.cond:
            if not self._lingering:
                return
            done = [
                link
                for at, link in self._lingering
                if (at <= now if broker is None else link.broker == broker)
            ]
            self._lingering = [(at, link) for at, link in self._lingering if link not in done]
        for link in done:  # (outside the lock: each waits briefly for its receipt)
            link.close()
