"""Keep-alive: notice a peer that went quiet even though its connection still looks open.

:class:`KeepAliveMonitor` counts intervals that pass without a sign of life. Something calls
:meth:`~KeepAliveMonitor.alive` whenever the peer shows one (a self-ping came back through the
broker, say); every ``interval`` the monitor checks whether that happened since the last check,
and after ``allowed`` checks in a row without, it calls ``on_expired(monitor)`` once. The next
:meth:`~KeepAliveMonitor.alive` re-arms it.

The STOMP transport uses one per connection that has subscriptions: its ``ping`` callback sends a
message to a private topic the connection itself subscribes to, and the arrival of that message
is the sign of life. A broker that stopped delivering (hung, paused, a half-open socket) is thus
noticed after about ``allowed`` intervals, and the connection is torn down and reconnected.

``ping`` and ``on_expired`` run on the monitor's own thread (one per started monitor); errors in
them are logged and never stop it. :meth:`~KeepAliveMonitor.tick` runs one check by hand, for
tests and for callers that drive the monitor from their own thread instead of :meth:`start`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from heartwire import _validate

__all__ = ["KeepAliveMonitor"]

log = logging.getLogger("heartwire.transport.keepalive")


class KeepAliveMonitor:
    """Expire after ``allowed`` intervals of ``interval`` seconds with no :meth:`alive` call.

    - ``id``: a name for logs and callbacks (the connection it watches, for instance).
    - ``on_expired(monitor)``: called once when :attr:`current` reaches ``allowed``.
    - ``ping(monitor)``: called when the monitor starts and after every check, to provoke the
      next sign of life.

    Thread-safe: :meth:`alive` may be called from any thread at any rate (it takes a lock for
    a few assignments).
    """

    def __init__(
        self,
        id: str,
        allowed: int,
        interval: float,
        *,
        on_expired: Callable[[KeepAliveMonitor], object] | None = None,
        ping: Callable[[KeepAliveMonitor], object] | None = None,
    ) -> None:
        if not isinstance(id, str):
            raise TypeError(f"id must be a str, got {type(id).__name__} {id!r}")
        allowed = _validate.count(allowed, "allowed", 1)
        interval = _validate.seconds(interval, "interval")
        for name, fn in (("on_expired", on_expired), ("ping", ping)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable or None, got {type(fn).__name__}")
        self.id = id
        self.allowed = allowed
        self.interval = interval
        self.on_expired = on_expired
        self.ping = ping
        self._lock = threading.Lock()
        self._seen = False
        self._current = 0
        self._expired = False
        self._expirations = 0
        self._checks = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- state --------------------------------------------------------------------------------

    @property
    def current(self) -> int:
        """Checks in a row that found no sign of life (0 right after one)."""
        return self._current

    @property
    def expired(self) -> bool:
        """Whether :attr:`current` reached ``allowed`` (until the next :meth:`alive`)."""
        return self._expired

    @property
    def expirations(self) -> int:
        """How many times the monitor expired since it was created."""
        return self._expirations

    @property
    def running(self) -> bool:
        """Whether the monitor's thread is checking."""
        return self._thread is not None

    def alive(self) -> None:
        """A sign of life: the count goes back to 0 and an expired monitor re-arms."""
        with self._lock:
            self._seen = True
            self._current = 0
            self._expired = False

    def reset(self) -> None:
        """Forget every miss and sign of life (as if just created)."""
        with self._lock:
            self._seen = False
            self._current = 0
            self._expired = False

    def tick(self) -> int:
        """End one interval: count a miss unless :meth:`alive` was called during it, call
        ``on_expired`` if the misses reached ``allowed``, then ``ping``. Returns :attr:`current`.
        """
        fire = False
        with self._lock:
            self._checks += 1
            if self._seen:
                self._seen = False
            else:
                self._current += 1
                if self._current >= self.allowed and not self._expired:
                    self._expired = True
                    self._expirations += 1
                    fire = True
            current = self._current
        if fire:
            log.info(
                "keep-alive %s expired: %d interval(s) of %g s without a sign of life",
                self.id,
                current,
                self.interval,
            )
            self._call(self.on_expired, "on_expired")
        self._call(self.ping, "ping")
        return current

    def _call(self, fn: Callable[[KeepAliveMonitor], object] | None, name: str) -> None:
        if fn is None:
            return
        try:
            fn(self)
        except Exception:
            log.exception("keep-alive %s: %s callback %r raised", self.id, name, fn)

    # -- thread -------------------------------------------------------------------------------

    def start(self) -> KeepAliveMonitor:
        """Reset, ``ping`` once, then check every ``interval`` on a daemon thread. Idempotent."""
        with self._lock:
            if self._thread is not None:
                return self
            self._seen = False
            self._current = 0
            self._expired = False
            stop = threading.Event()
            self._stop = stop
            thread = threading.Thread(
                target=self._run, args=(stop,), name=f"heartwire-keepalive-{self.id}", daemon=True
            )
            self._thread = thread
        thread.start()
        return self

    def stop(self) -> None:
        """Stop checking (the thread ends within moments; never joined here). Idempotent."""
        with self._lock:
            self._thread = None
            self._stop.set()

    def _run(self, stop: threading.Event) -> None:
        self._call(self.ping, "ping")
        due = time.monotonic() + self.interval
        while not stop.wait(max(0.0, due - time.monotonic())):
            self.tick()
            due += self.interval
            now = time.monotonic()
            if due <= now:  # fell behind (a stalled process): no burst of checks
                due = now + self.interval

    def __repr__(self) -> str:
        state = "expired" if self._expired else f"{self._current}/{self.allowed} missed"
        return f"<KeepAliveMonitor {self.id!r} every {self.interval:g} s, {state}>"
