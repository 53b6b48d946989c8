"""Deliver a detector's events to Python code on a thread of their own.

The detector never calls Python: its driver thread pushes events into a bounded
:class:`~heartwire._core.EventQueue`, and a :class:`Dispatcher` thread pops them in batches (waiting
with the GIL released) and hands each batch to a handler. A slow handler therefore delays only its
own queue, never detection; a handler that raises is reported and counted, and the thread goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from heartwire import _validate
from heartwire._core import Event, EventBatch, EventQueue


def discarded_after_push(stats: dict[str, int]) -> int:
    """Events an :class:`EventQueue` counted in ``pushed`` and then let go undelivered (by its
    ``stats()``): the oldest dropped for newer ones, and those coalesced into a newer one."""
    return stats["dropped_oldest"] + stats["coalesced"]


def losses(stats: dict[str, int]) -> int:
    """Every event an :class:`EventQueue` lost to its overflow policy (by its ``stats()``): the
    ones :func:`discarded_after_push` counts, and the newest refused on a full queue."""
    return discarded_after_push(stats) + stats["dropped_newest"]


log = logging.getLogger("heartwire.dispatch")

#: What a handler gets: a list of events, or with ``columnar`` one :class:`EventBatch`.
Batch = list[Event] | EventBatch
Handler = Callable[[Any], object]
ErrorHandler = Callable[[BaseException, Any], object]


class Dispatcher:
    """Pop batches from ``queue`` and call ``handler(batch)`` on a daemon thread.

    ``on_idle()``, if given, is called on the thread whenever a wait for events ends empty (about
    every 0.1 s while nothing comes). ``on_error(exc, batch)`` is called when the handler
    raises (default: log it); the failing
    batch is counted in :attr:`errors` and delivery goes on with the next batch.

    ``columnar``: each batch is one :class:`~heartwire._core.EventBatch` (built in the core:
    columns, events made on access; :meth:`~heartwire._core.EventQueue.pop_batch`) instead of a
    list of :class:`~heartwire._core.Event` objects. ``batch_size`` is the most events per
    batch (default 1024, or 65536 with ``columnar``).
    """

    def __init__(
        self,
        queue: EventQueue,
        handler: Handler,
        *,
        on_error: ErrorHandler | None = None,
        batch_size: int | None = None,
        name: str = "heartwire-dispatch",
        columnar: bool = False,
        on_idle: Callable[[], object] | None = None,
    ) -> None:
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {type(handler).__name__}")
        if batch_size is None:
            batch_size = 65536 if columnar else 1024
        batch_size = _validate.count(batch_size, "batch_size", 1)
        self._queue = queue
        self._on_idle = on_idle
        self._handler = handler
        self._on_error = on_error
        self._batch_size = batch_size
        self._pop = queue.pop_batch if columnar else queue.pop
        self._try_pop = queue.try_pop_batch if columnar else queue.try_pop
        self._handled = 0
        self._popped_before = 0  # events others took from the queue before start()
        self._errors = 0
        self._progress = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Dispatcher:
        """Start the delivery thread; returns self."""
        self._popped_before = self._queue.stats()["popped"]
        self._thread.start()
        return self

    @property
    def handled(self) -> int:
        """Events handed to the handler so far (those of failing batches included)."""
        return self._handled

    @property
    def alive(self) -> bool:
        """Whether the delivery thread is running."""
        return self._thread.is_alive()

    @property
    def errors(self) -> int:
        """Batches whose handler raised."""
        return self._errors

    def _run(self) -> None:
        while not self._stopping.is_set():
            batch = self._pop(self._batch_size, timeout=0.1)
            if batch:
                self._deliver(batch)
            elif self._queue.closed:
                return
            elif self._on_idle is not None:
                try:
                    self._on_idle()
                except Exception:
                    log.exception("the idle handler of %s failed", self._thread.name)
        # Stopping: deliver what was queued when stop() was called, then end, even if the
        # producers keep going.
        pushed = self._queue.stats()["pushed"]
        while not self._delivered(pushed):
            batch = self._try_pop(self._batch_size)
            if not batch:
                return
            self._deliver(batch)

    def _deliver(self, batch: Batch) -> None:
        try:
            self._handler(batch)
        except Exception as exc:
            self._errors += 1
            self._report(exc, batch)
        with self._progress:
            self._handled += len(batch)
            self._progress.notify_all()

    def _report(self, exc: Exception, batch: Batch) -> None:
        if self._on_error is None:
            log.error("event handler raised on a batch of %d events", len(batch), exc_info=exc)
            return
        try:
            self._on_error(exc, batch)
        except Exception:
            log.exception("on_error raised while reporting a handler error")

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until the handler has seen every event queued so far (or the overflow policy
        discarded it). False on timeout, or if the thread ended first.

        Exact as long as the queue does not overflow. Under overflow the events a policy
        discarded count as done, and under ``coalesce`` an event parked beyond the full ring
        may still be on its way when this returns.
        """
        # Counted from `pushed`, never from `popped + len`: an event the thread is taking out
        # right now is in neither for a moment, and would be missed.
        pushed = self._queue.stats()["pushed"]
        deadline = time.monotonic() + timeout
        with self._progress:
            while not self._delivered(pushed):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return self._delivered(pushed)
                # Woken by every delivered batch; the slice notices a thread that ended.
                self._progress.wait(min(remaining, 0.05))
            return True

    def _delivered(self, pushed: int) -> bool:
        """Whether the handler has seen each of the queue's first ``pushed`` events that the
        overflow policy did not discard (events are taken out in order)."""
        lost = discarded_after_push(self._queue.stats())
        return self._popped_before + self._handled >= pushed - lost

    def stop(self, timeout: float | None = 5.0) -> None:
        """Deliver what is queued, then end the thread (waiting at most ``timeout`` seconds for
        it, ``None``: until it ends). Idempotent."""
        self._stopping.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> Dispatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
