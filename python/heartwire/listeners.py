"""Listener base classes and the :class:`ListenerSet` that calls them.

Subclass :class:`SubscriberListener` (monitors) or :class:`PublisherListener` (publishers) and
override the methods you care about; the others are no-ops and cost nothing (a monitor asks the
core for ``received`` events only when some listener overrides ``on_received`` or sets
``wants_received``). A method may be
a coroutine function (``async def``): it is then scheduled on the event loop that was running
when the listener was added.

A monitor hands its detector events (failed, resumed, received, local pause) to listeners in
batches: a listener that overrides :meth:`SubscriberListener.on_events` gets each batch in one
call (an :class:`~heartwire.events.EventBatch`: columns for bulk use, event objects on
iteration); the others get one call per event, of the methods they override, in order.

A listener that raises never reaches the publisher or monitor, nor stops the other listeners: the
error is counted, logged (each of a listener's first ten errors, then one in a thousand), and
reported to the *other* listeners' ``on_exception`` with reason ``"listener_error"``.

A :class:`ListenerSet` made with ``queue_size`` (as every monitor's is) gives each listener a
bounded queue of its own and a thread that empties it in order: a listener that blocks or is slow
delays only itself. When its queue is full, the overflow policy (``"drop-oldest"`` or
``"drop-newest"``) discards an event for that listener alone, and counts it
(:meth:`ListenerSet.stats`).

A listener whose class sets ``lossless = True`` (as :class:`~heartwire.eventlog.EventLog` does) is
never dropped from: past ``queue_size`` its queue keeps growing, so a slow lossless listener
still delays only itself, and costs memory instead of events. That shows: ``stats()`` gives its
``queued`` and ``high_water``, and a warning is logged each time its backlog doubles past
``queue_size``. A monitor with a lossless listener also makes its own event queue block rather
than coalesce or drop (see :class:`~heartwire.monitor.HeartbeatMonitor`).

Queues count events, not calls: a batch (for ``on_events``, or for a listener's per-event
methods, called on its thread) takes as many places as it holds events, and an overflow drops
events from batches (the oldest ones of the oldest batch under ``"drop-oldest"``, the newest
ones of the new batch under ``"drop-newest"``), never more. A batch put in an empty queue goes
in whole, whatever its size (up to 65536 events from a monitor). Batches have a bound of their
own, ``batch_queue_size`` (events, at least ``queue_size``): a failure of every topic at once
comes as a burst of compact batches that should not be cut by the bound that keeps floods of
single events (``on_exception``) in check.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar, Generic, Literal, TypeVar

from heartwire import _validate
from heartwire._throttle import worth_logging
from heartwire.events import (
    EVENT_METHODS,
    CaughtUp,
    Disconnected,
    EventBatch,
    ExceptionEvent,
    Failed,
    Flapping,
    Lagging,
    LocalPause,
    Received,
    Reconnected,
    Resumed,
    Sent,
    Started,
    Stopped,
)
from heartwire.transport.observers import ConnectionObserver

__all__ = [
    "LISTENER_OVERFLOWS",
    "ConnectionEvents",
    "ListenerOverflow",
    "ListenerSet",
    "PublisherListener",
    "SubscriberListener",
]

log = logging.getLogger("heartwire.listeners")

ListenerOverflow = Literal["drop-oldest", "drop-newest"]
#: The overflow policies of a listener's own queue.
LISTENER_OVERFLOWS: tuple[ListenerOverflow, ...] = ("drop-oldest", "drop-newest")

_on_worker = threading.local()  # .worker: the _Worker whose thread this is


class SubscriberListener:
    """Receives a monitor's events; override the methods you need (plain or ``async def``).

    ``on_received`` is called once per beat, so override it only if you need it: a monitor of a
    million topics then costs no Python call per beat.

    ``on_events(batch)``: override it to take a monitor's detector events a batch at a time
    (see :meth:`on_events`); ``wants_received = True`` puts ``received`` events in its batches.

    ``lossless``: set it to True on a subclass that must get every event (an audit log, the
    event log availability figures come from): its queue then grows instead of dropping (see
    the module docs), and the monitor's event queue blocks instead of losing events.
    """

    lossless: ClassVar[bool] = False
    #: Whether this listener's batches (:meth:`on_events`) hold ``received`` events, one per
    #: beat recorded. Off by default: a monitor asks the core for them only when some listener
    #: wants them (sets this, or overrides :meth:`on_received`).
    wants_received: ClassVar[bool] = False
    #: Whether this listener gets failed and resumed events marked ``silenced`` (its topic is
    #: silenced: see :meth:`~heartwire.monitor.HeartbeatMonitor.silence`). Set it to False on
    #: a subclass that pages people: the monitor leaves them out of its calls and batches.
    include_silenced: ClassVar[bool] = True
    #: Whether this listener gets failed and resumed events marked ``suppressed_by`` a parent
    #: that is down (see :meth:`~heartwire.monitor.HeartbeatMonitor.depends`).
    include_suppressed: ClassVar[bool] = True

    def on_events(self, batch: EventBatch) -> Any:
        """The detector events produced since the last call, oldest first (an
        :class:`~heartwire.events.EventBatch`).

        Override it to take them in bulk: the monitor then calls it once per batch (as many
        events as its dispatch thread took out at once, up to 65536), and never calls this
        listener's :meth:`on_failed`, :meth:`on_resumed`, :meth:`on_received` or
        :meth:`on_local_pause`. Its batches hold every kind of detector event, ``received``
        only if :attr:`wants_received` is set or :meth:`on_received` is overridden (the
        ``batch.kinds`` column tells them apart). Not overridden, this is what it does: each
        event goes to its method, in order.
        """
        for method, event in batch.calls():
            getattr(self, method)(event)

    def on_started(self, event: Started) -> Any:
        """The monitor started."""

    def on_stopped(self, event: Stopped) -> Any:
        """The monitor stopped."""

    def on_received(self, event: Received) -> Any:
        """A beat was recorded (one call per beat)."""

    def on_failed(self, event: Failed) -> Any:
        """A topic missed ``event.missed`` periods in a row; repeats every further period (at
        most 64 times per run of the detector: see :class:`~heartwire.events.Failed`). Or its
        sender said ``down``: then ``event.reason`` says why (``None`` otherwise)."""

    def on_resumed(self, event: Resumed) -> Any:
        """A failed topic was heard again."""

    def on_local_pause(self, event: LocalPause) -> Any:
        """The monitor itself was not running for ``event.duration`` seconds (its process was
        stopped or starved); no topic was failed for it. Once per pause."""

    def on_lagging(self, event: Lagging) -> Any:
        """The monitor's own intake fell ``event.lag`` seconds behind its feed (more than its
        ``lag_threshold``); no live topic is failed for it. Once per episode."""

    def on_flapping(self, event: Flapping) -> Any:
        """A topic started flapping, or settled (see the monitor's ``flap_threshold``)."""

    def on_caught_up(self, event: CaughtUp) -> Any:
        """The intake that was lagging read its backlog, after ``event.duration`` seconds
        (largest lag ``event.max_lag``)."""

    def on_disconnected(self, event: Disconnected) -> Any:
        """The transport lost its broker connection and is reconnecting (STOMP only)."""

    def on_reconnected(self, event: Reconnected) -> Any:
        """The transport is connected again, subscriptions restored (STOMP only)."""

    def on_exception(self, event: ExceptionEvent) -> Any:
        """A bad beat, a transport error or another listener's error (``event.reason``)."""


class PublisherListener:
    """Receives a publisher's events; override the methods you need (plain or ``async def``)."""

    def on_started(self, event: Started) -> Any:
        """The publisher started."""

    def on_stopped(self, event: Stopped) -> Any:
        """The publisher stopped."""

    def on_sent(self, event: Sent) -> Any:
        """A beat was sent."""

    def on_disconnected(self, event: Disconnected) -> Any:
        """The transport lost its broker connection and is reconnecting (STOMP only)."""

    def on_reconnected(self, event: Reconnected) -> Any:
        """The transport is connected again, subscriptions restored (STOMP only)."""

    def on_exception(self, event: ExceptionEvent) -> Any:
        """A failed dependency check, a send error or another listener's error."""


L = TypeVar("L")


def _is_lossless(listener: object) -> bool:
    return getattr(listener, "lossless", False) is True


#: What a worker item's method is for a batch handed over event by event (the listener does
#: not override ``on_events``): each event goes to its own method, on the listener's thread.
_EACH = ""


class _Entry:
    """One registered listener, the loop its coroutines run on, the methods it overrides, the
    detector event kinds it takes (``kinds``; ``batched``: as one ``on_events`` call), and (in
    a queued set) its own queue and thread."""

    __slots__ = (
        "batched",
        "errors",
        "kinds",
        "listener",
        "loop",
        "lossless",
        "overrides",
        "skip_silenced",
        "skip_suppressed",
        "wants_received",
        "worker",
    )

    def __init__(
        self, listener: Any, loop: asyncio.AbstractEventLoop | None, overrides: frozenset[str]
    ) -> None:
        self.listener = listener
        self.loop = loop
        self.overrides = overrides
        self.lossless = _is_lossless(listener)
        self.batched = "on_events" in overrides
        self.wants_received = "on_received" in overrides or (
            getattr(listener, "wants_received", False) is True
        )
        if self.batched:
            self.kinds = tuple(
                kind for kind in EVENT_METHODS if kind != "received" or self.wants_received
            )
        else:
            self.kinds = tuple(kind for kind, m in EVENT_METHODS.items() if m in overrides)
        self.skip_silenced = getattr(listener, "include_silenced", True) is False
        self.skip_suppressed = getattr(listener, "include_suppressed", True) is False
        self.errors = 0
        self.worker: _Worker | None = None

    def mine(self, batch: EventBatch) -> EventBatch:
        """The events of ``batch`` this listener takes: its kinds, without the marked events
        it leaves out (``include_silenced``, ``include_suppressed``)."""
        mine = batch.of_kinds(self.kinds)
        if self.skip_silenced or self.skip_suppressed:
            mine = mine.without_marked(silenced=self.skip_silenced, suppressed=self.skip_suppressed)
        return mine


class _Worker:
    """One listener's bounded FIFO of ``(method, event, report, weight)`` and the daemon thread
    that calls them in order. The thread starts with the first event and ends on :meth:`close`
    once the queue is empty (a later event starts a new one). A lossless listener's FIFO has no
    bound: past ``size`` it grows, and each doubling of the backlog is logged.

    Sizes and counters are in events: an item is one event (weight 1) or a batch (weight: its
    length) for ``on_events``, or for ``_EACH`` (one call per event). Overflow trims batches
    at event granularity."""

    def __init__(
        self, owner: ListenerSet[Any], entry: _Entry, size: int, overflow: str, batch_size: int
    ) -> None:
        self._owner = owner
        self._entry = entry
        self._size = size
        self._batch_size = max(size, batch_size)  # the bound when a batch is put
        self._drop_oldest = overflow == "drop-oldest"
        self.lossless = entry.lossless
        self._warn_at = size  # a lossless backlog this deep is logged (then twice as deep)
        self._items: deque[tuple[str, object, bool, int]] = deque()
        self._depth = 0  # events in _items (their weights)
        self._in_hand = 0  # events of the batch being called one by one, not called yet
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._closing = False
        self.sealed = False  # its last event is in: later ones are refused (counted in late)
        self.late = 0
        self._idle = False  # the thread waits for an event (put must wake it)
        self._waiters = 0  # threads in wait() (put must wake nobody else)
        self.accepted = 0  # events put in the queue
        self.finished = 0  # accepted events handed to the listener or dropped (drop-oldest)
        self.handled = 0
        self.dropped = 0
        self.high_water = 0
        self.busy_since: float | None = None  # monotonic start of the call in progress
        self.start_failures = 0  # events dropped because the listener thread would not start
        # The worker this one replaces (the same listener removed and added again), which may
        # still be delivering what it holds: this one's thread waits for it first.
        self.prev: _Worker | None = None

    def put(self, method: str, event: object, report: bool, *, last: bool = False) -> None:
        """Queue ``method(event)``; ``last``: nothing after it until :meth:`unseal`. A batch
        (``method`` ``"on_events"`` or ``_EACH``) counts as its events."""
        behind = 0
        failed: tuple[RuntimeError, int] | None = None
        batch = isinstance(event, EventBatch)
        weight = len(event) if batch else 1  # type: ignore[arg-type]
        with self._cond:
            if self.sealed:
                self.late += weight
                return
            self.sealed = last
            waiting = self._depth + self._in_hand
            excess = waiting + weight - (self._batch_size if batch else self._size)
            # The last event is never dropped, and neither is a batch put in an empty queue
            # (whatever its size: each put makes progress, and the queue holds at most
            # `size` events or one batch).
            if self.lossless:
                if excess > 0 and waiting + weight > self._warn_at:
                    behind = waiting + weight
                    while self._warn_at < behind:
                        self._warn_at *= 2
            elif excess > 0 and not last and waiting:
                if not self._drop_oldest:
                    if excess >= weight:
                        self.dropped += weight
                        return
                    # Keep the batch's first events, as many as there is room for.
                    self.dropped += excess
                    event = event.slice(0, weight - excess)  # type: ignore[attr-defined]
                    weight -= excess
                else:
                    # Or all that is queued (the events in hand stay): then the batch goes in
                    # whole.
                    self._drop_first(excess)
            self._items.append((method, event, report, weight))
            self._depth += weight
            self._closing = False  # only an accepted event keeps (or starts) the thread going
            self.accepted += weight
            if self._depth + self._in_hand > self.high_water:
                self.high_water = self._depth + self._in_hand
            thread = self._thread
            if thread is None or not thread.is_alive():
                name = f"heartwire-listener[{type(self._entry.listener).__qualname__}]"
                self._thread = threading.Thread(target=self._run, name=name, daemon=True)
                try:
                    self._thread.start()
                except RuntimeError as exc:  # can't start new thread (a pids limit): not
                    # raised into the emitter (emit never raises); this event is dropped and
                    # counted (a lossless listener's stays queued); the next event tries again.
                    self._thread = None
                    if not self.lossless:
                        self._items.pop()
                        self._depth -= weight
                        self.accepted -= weight
                        self.dropped += weight
                    self.start_failures += 1
                    failed = (exc, self.start_failures)
            elif self._idle or self._waiters:
                self._cond.notify_all()  # a busy worker needs no wake-up: it looks again
        if failed is not None and worth_logging(failed[1]):
            log.error(
                "listener thread for %s of %s not started (failure %d; %s %s): %s",
                type(self._entry.listener).__qualname__,
                self._owner.source,
                failed[1],
                method,
                "kept queued" if self.lossless else "dropped",
                failed[0],
            )
        if behind:
            busy = self.busy_since
            log.warning(
                "lossless listener %s of %s is %d events behind (queue_size %d; the call in "
                "progress has taken %s): its queue grows instead of dropping",
                type(self._entry.listener).__qualname__,
                self._owner.source,
                behind,
                self._size,
                "-" if busy is None else f"{time.monotonic() - busy:.1f} s",
            )

    def _drop_first(self, count: int) -> None:
        """Drop the ``count`` oldest queued events (fewer if fewer are queued); the lock is
        held. A batch is trimmed when only part of it must go."""
        items = self._items
        while count > 0 and items:
            method, event, report, weight = items[0]
            if weight <= count:
                items.popleft()
                gone = weight
            else:
                items[0] = (method, event.slice(count, weight), report, weight - count)  # type: ignore[attr-defined]
                gone = count
            count -= gone
            self._depth -= gone
            self.dropped += gone
            self.finished += gone

    def _run(self) -> None:
        _on_worker.worker = self
        if self.prev is not None:
            # The whole chain, oldest first: a worker replaced before it ran never waited for
            # the one before it, which may still be calling the listener.
            chain: list[_Worker] = []
            prev: _Worker | None = self.prev
            while prev is not None:
                chain.append(prev)
                prev = prev.prev
            for prev in reversed(chain):
                prev.join()
            self.prev = None
        cond = self._cond
        while True:
            with cond:
                while not self._items:
                    if self._closing:
                        if self._thread is threading.current_thread():
                            self._thread = None
                        return
                    self._idle = True
                    cond.wait()
                    self._idle = False
                method, event, report, weight = self._items.popleft()
                self._depth -= weight
                if self._depth < self._size:
                    self._warn_at = self._size  # caught up: warn again if it falls behind
                if method == _EACH:
                    self._in_hand = weight  # still waiting, though no longer droppable
                else:
                    self.busy_since = time.monotonic()
            if method == _EACH:
                self._run_each(event, report)  # type: ignore[arg-type]
                continue
            try:
                self._owner._call(self._entry, method, event, report=report)
            finally:
                self._done(weight)

    def _run_each(self, batch: EventBatch, report: bool) -> None:
        """Each event of ``batch`` to its method, counted one by one (``queued``, ``handled``
        and :meth:`wait` move per event, as for events queued singly)."""
        cond = self._cond
        for method, event in batch.calls():
            with cond:
                self._in_hand -= 1
                self.busy_since = time.monotonic()
            try:
                self._owner._call(self._entry, method, event, report=report)
            finally:
                self._done(1)

    def _done(self, weight: int) -> None:
        with self._cond:
            self.busy_since = None
            self.handled += weight
            self.finished += weight
            if self._waiters:
                self._cond.notify_all()

    @property
    def depth(self) -> int:
        """Events waiting: queued, and those of a batch being called one by one not reached
        yet."""
        return self._depth + self._in_hand

    def wait(self, accepted: int, deadline: float) -> bool:
        """Wait until the first ``accepted`` events are handled or dropped; False on timeout."""
        with self._cond:
            while self.finished < accepted:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._waiters += 1
                try:
                    self._cond.wait(remaining)
                finally:
                    self._waiters -= 1
            return True

    def seal(self) -> None:
        """Refuse every later event (counted in :attr:`late`) until :meth:`unseal`."""
        with self._cond:
            self.sealed = True

    def unseal(self) -> None:
        with self._cond:
            self.sealed = False

    def close(self) -> threading.Thread | None:
        """Let the thread end once the queue is empty; the thread to join, if any."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            return self._thread

    def join(self) -> None:
        """Wait until the thread (closed and sealed) has delivered its queue and ended."""
        with self._cond:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def done(self) -> bool:
        """Nothing left to deliver and no thread running, here and in the workers it waits
        for."""
        worker: _Worker | None = self
        while worker is not None:
            with worker._cond:
                thread = worker._thread
                if worker._items or (thread is not None and thread.is_alive()):
                    return False
                worker = worker.prev
        return True


def _overridden(listener: object, kind: type) -> frozenset[str]:
    """The ``on_*`` methods of ``kind`` that ``listener`` (its class or the instance) replaces."""
    names = set()
    for name in dir(kind):
        if not name.startswith("on_"):
            continue
        base = getattr(kind, name)
        if (
            name in getattr(listener, "__dict__", {})
            or getattr(type(listener), name, base) is not base
        ):
            names.add(name)
    return frozenset(names)


class ListenerSet(Generic[L]):
    """The listeners of one publisher or monitor.

    ``kind`` is the listener base class accepted by :meth:`add`; ``source`` names the owner in the
    :class:`~heartwire.events.ExceptionEvent` reports. Safe to use from several threads; listeners
    may be added or removed while events are being emitted (an emit in progress uses the set as it
    was when it began).

    ``queue_size`` ``None`` (the default): :meth:`emit` calls the listeners in the calling
    thread, one after the other. An int: each listener gets a queue of that many events and a
    thread of its own; :meth:`emit` only enqueues, each listener sees its events in emit order,
    and a full queue drops by ``overflow`` (counted per listener, :meth:`stats`). :meth:`drain`
    waits for the queues, :meth:`close` ends the threads.
    """

    def __init__(
        self,
        kind: type[L],
        source: str,
        *,
        queue_size: int | None = None,
        overflow: ListenerOverflow = "drop-oldest",
        batch_queue_size: int | None = None,
    ) -> None:
        queue_size = _validate.count(queue_size, "queue_size", 1, allow_none=True)
        overflow = _validate.choice(overflow, "overflow", LISTENER_OVERFLOWS)
        self.kind = kind
        self.source = source
        self.queue_size = queue_size
        batch_queue_size = _validate.count(batch_queue_size, "batch_queue_size", 1, allow_none=True)
        #: The bound of each listener queue when a batch of detector events is put (events).
        self.batch_queue_size = max(queue_size or 1, batch_queue_size or 1)
        self.overflow = overflow
        self._entries: tuple[_Entry, ...] = ()
        self._lock = threading.Lock()
        self._errors = 0
        self._retired_dropped = 0  # drops of listeners since removed
        # Per removed listener (by identity) its worker, while that may still be delivering:
        # the listener added again waits for it (one thread at a time, events in order).
        self._retired: dict[int, _Worker] = {}
        self._sealed = False  # emit_last was called: emits are refused until unseal()
        self._late = 0  # events refused for that (unqueued listeners and removed ones)
        # Unqueued sets: emits calling listeners right now (the last event waits for them), how
        # many of those are the current thread's (a listener's call may emit in turn), and the
        # last event when emit_last could not wait: the last call in flight delivers it.
        self._calls = threading.Condition(self._lock)
        self._in_flight = 0
        self._mine = threading.local()
        self._handed: tuple[str, object] | None = None

    def add(self, listener: L, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Register ``listener`` (an instance of ``kind``, else ``TypeError``).

        Its coroutine methods run on ``loop``, by default the loop running in the calling thread
        (if any). Adding a listener already registered does nothing.
        """
        if not isinstance(listener, self.kind):
            raise TypeError(
                f"listener must be a {self.kind.__name__} instance, "
                f"got {type(listener).__module__}.{type(listener).__qualname__}: {listener!r}"
            )
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        entry = _Entry(listener, loop, _overridden(listener, self.kind))
        if self.queue_size is not None:
            entry.worker = _Worker(
                self, entry, self.queue_size, self.overflow, self.batch_queue_size
            )
        with self._lock:
            if any(e.listener is listener for e in self._entries):
                return
            if entry.worker is not None:
                entry.worker.prev = self._retired.pop(id(listener), None)
            if self._sealed and entry.worker is not None:
                entry.worker.seal()  # added after the last event: nothing until unseal()
            self._entries = (*self._entries, entry)

    def remove(self, listener: L) -> bool:
        """Unregister ``listener``; False if it was not registered. A queued listener still
        gets the events already in its queue, and no later one; added again, it gets its new
        events once those are delivered (on one thread at a time, in order)."""
        with self._lock:
            kept = tuple(e for e in self._entries if e.listener is not listener)
            gone = [e for e in self._entries if e.listener is listener]
            self._entries = kept
            for entry in gone:
                if entry.worker is not None:
                    # An emit that began before the removal must not start its thread again
                    # (nothing would ever close it).
                    entry.worker.seal()
                    self._retired_dropped += entry.worker.dropped
                    self._late += entry.worker.late
                    entry.worker.close()
                    self._retired = {
                        key: worker for key, worker in self._retired.items() if not worker.done
                    }
                    self._retired[id(listener)] = entry.worker
        return bool(gone)

    def wants(self, method_name: str) -> bool:
        """Whether some registered listener overrides ``method_name`` (e.g. ``"on_received"``)."""
        return any(method_name in e.overrides for e in self._entries)

    @property
    def wants_received(self) -> bool:
        """Whether some registered listener takes ``received`` events: overrides
        ``on_received``, or takes batches (``on_events``) with ``wants_received`` set."""
        return any(e.wants_received for e in self._entries)

    @property
    def lossless(self) -> bool:
        """Whether some registered listener is lossless (its class sets ``lossless = True``)."""
        return any(e.lossless for e in self._entries)

    @property
    def errors(self) -> int:
        """Listener calls that raised (or whose coroutine raised) so far."""
        return self._errors

    @property
    def listeners(self) -> list[L]:
        """The registered listeners, in the order they were added."""
        return [e.listener for e in self._entries]

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, listener: object) -> bool:
        return any(e.listener is listener for e in self._entries)

    def emit(self, method_name: str, event: object) -> None:
        """Call (or, in a queued set, enqueue) ``method_name(event)`` for every listener that
        overrides it; never raises, never waits for a queued listener. After
        :meth:`emit_last`, refused (counted in :attr:`late`) until :meth:`unseal`."""
        if self.queue_size is not None:
            for entry in self._entries:
                if method_name in entry.overrides and entry.worker is not None:
                    entry.worker.put(method_name, event, True)
            return
        if not self._enter(method_name):
            return
        try:
            for entry in self._entries:
                if method_name in entry.overrides:
                    if self._sealed:  # a listener called before emitted the last event
                        with self._lock:
                            self._late += 1
                    else:
                        self._call(entry, method_name, event, report=True)
        finally:
            self._leave()

    def emit_batch(self, batch: EventBatch) -> None:
        """Hand ``batch`` (detector events) to every listener that takes some of its kinds:
        one ``on_events`` call, or one call per event of the methods it overrides, in order.
        In a queued set only enqueued (its events count in the queue's size); otherwise called
        in turn on this thread. Never raises, never waits for a queued listener; refused after
        :meth:`emit_last` (counted in :attr:`late`, per event) until :meth:`unseal`."""
        if self.queue_size is not None:
            for entry in self._entries:
                worker = entry.worker
                if worker is not None and entry.kinds:
                    mine = entry.mine(batch)
                    if len(mine):
                        worker.put("on_events" if entry.batched else _EACH, mine, True)
            return
        with self._calls:
            if self._sealed:
                self._late += sum(len(e.mine(batch)) for e in self._entries if e.kinds)
                return
            self._in_flight += 1
        self._mine.depth = getattr(self._mine, "depth", 0) + 1
        try:
            for entry in self._entries:
                if not entry.kinds:
                    continue
                mine = entry.mine(batch)
                if not len(mine):
                    continue
                if self._sealed:  # a listener called before emitted the last event
                    with self._lock:
                        self._late += len(mine)
                elif entry.batched:
                    self._call(entry, "on_events", mine, report=True)
                else:
                    self._call_each(entry, mine, report=True)
        finally:
            self._leave()

    def _call_each(self, entry: _Entry, batch: EventBatch, *, report: bool) -> None:
        """Each event of ``batch`` to its method of ``entry``'s listener, in order."""
        for method, event in batch.calls():
            self._call(entry, method, event, report=report)

    def _enter(self, method_name: str) -> bool:
        """An unqueued emit begins: False (and counted late) after the last event."""
        with self._calls:
            if self._sealed:
                self._late += sum(method_name in e.overrides for e in self._entries)
                return False
            self._in_flight += 1
        self._mine.depth = getattr(self._mine, "depth", 0) + 1
        return True

    def _enter_one(self) -> bool:
        """One unqueued call outside an emit (a coroutine's error report) begins."""
        with self._calls:
            if self._sealed:
                self._late += 1
                return False
            self._in_flight += 1
        self._mine.depth = getattr(self._mine, "depth", 0) + 1
        return True

    def _leave(self) -> None:
        """An unqueued emit ends; the last one out delivers a last event handed to it."""
        self._mine.depth -= 1
        with self._calls:
            self._in_flight -= 1
            handed = None
            if self._in_flight == 0:
                handed, self._handed = self._handed, None
                self._calls.notify_all()
        if handed is not None:
            self._call_last(*handed)

    def emit_last(self, method_name: str, event: object, *, timeout: float | None = None) -> None:
        """Emit ``method_name(event)`` as each listener's last event (``on_stopped``): every
        later emit, from any thread, is refused and counted in :attr:`late` (and starts no
        listener thread) until :meth:`unseal`.

        In a queued set it is put last in each listener's queue. Unqueued listeners are called
        once the calls other threads' emits have in progress end (a listener calling this from
        its own call is not waited for), at most ``timeout`` seconds (``None``: no limit);
        after that the last of those calls to end makes this one, on its thread. Either way a
        listener gets nothing after it."""
        with self._calls:
            self._sealed = True
            if self.queue_size is None:
                deadline = None if timeout is None else time.monotonic() + timeout
                while self._in_flight > getattr(self._mine, "depth", 0):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        self._handed = (method_name, event)  # delivered by the last one out
                        return
                    self._calls.wait(remaining)
        self._call_last(method_name, event)

    def _call_last(self, method_name: str, event: object) -> None:
        for entry in self._entries:
            worker = entry.worker
            if worker is None:
                if method_name in entry.overrides:
                    self._call(entry, method_name, event, report=True)
            elif method_name in entry.overrides:
                worker.put(method_name, event, True, last=True)
            else:
                worker.seal()

    def unseal(self) -> None:
        """Accept events again after :meth:`emit_last` (a monitor starting again). A last
        event still waiting for a call in flight (``timeout``) is delivered first."""
        with self._calls:
            handed, self._handed = self._handed, None
        if handed is not None:
            self._call_last(*handed)
        with self._lock:
            self._sealed = False
            entries = self._entries
        for entry in entries:
            if entry.worker is not None:
                entry.worker.unseal()

    def refuse(self, method_name: str) -> None:
        """Count in :attr:`late` an event its owner refused because it came after the last one
        (a publisher's ``on_sent`` after its ``on_stopped``)."""
        with self._lock:
            self._late += sum(method_name in e.overrides for e in self._entries)

    @property
    def late(self) -> int:
        """Events refused because they came after :meth:`emit_last`."""
        return self._late + sum(e.worker.late for e in self._entries if e.worker is not None)

    @staticmethod
    def on_listener_thread() -> bool:
        """Whether the calling thread is a queued listener's own thread."""
        return getattr(_on_worker, "worker", None) is not None

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every queued listener has been handed (or has dropped) every event
        enqueued so far; False on timeout, and at once on a listener's own thread (it cannot
        wait for itself). True at once for a set without queues."""
        if self.on_listener_thread():
            return False
        deadline = time.monotonic() + timeout
        # Twice: the events drained in the first round may have made listeners raise, and the
        # reports of that went to the other listeners' queues after the first snapshot.
        for _ in range(2):
            targets = [(e.worker, e.worker.accepted) for e in self._entries if e.worker is not None]
            if not all(worker.wait(accepted, deadline) for worker, accepted in targets):
                return False
        return True

    def close(self, timeout: float = 5.0) -> bool:
        """End the queued listeners' threads once their queues are empty (a later emit starts
        them again). False if some thread was still busy after ``timeout`` seconds; it then
        ends by itself once its queue is empty."""
        deadline = time.monotonic() + timeout
        threads = [e.worker.close() for e in self._entries if e.worker is not None]
        me = threading.current_thread()
        for thread in threads:
            if thread is not None and thread is not me:
                thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t is not None and t is not me and t.is_alive() for t in threads)

    @property
    def dropped(self) -> int:
        """Events the listener queues' overflow policy discarded (removed listeners included)."""
        return self._retired_dropped + sum(
            e.worker.dropped for e in self._entries if e.worker is not None
        )

    @property
    def queue_depth(self) -> int:
        """Events waiting in the listener queues now."""
        return sum(e.worker.depth for e in self._entries if e.worker is not None)

    def stats(self) -> list[dict[str, Any]]:
        """Per listener, in order: ``listener`` (its class), ``errors`` (calls that raised),
        ``lossless``, and for a queued set ``queued`` (waiting now), ``high_water`` (most ever
        waiting; past ``queue_size`` only for a lossless one), ``handled``, ``dropped`` (by the
        overflow policy; never for a lossless one) and ``busy_for`` (seconds the call in
        progress has taken so far, ``None`` when idle)."""
        now = time.monotonic()
        out: list[dict[str, Any]] = []
        for e in self._entries:
            row: dict[str, Any] = {
                "listener": type(e.listener).__qualname__,
                "errors": e.errors,
                "lossless": e.lossless,
            }
            w = e.worker
            if w is not None:
                busy = w.busy_since
                row.update(
                    queued=w.depth,
                    high_water=w.high_water,
                    handled=w.handled,
                    dropped=w.dropped,
                    busy_for=None if busy is None else now - busy,
                )
            out.append(row)
        return out

    def _call(self, entry: _Entry, method_name: str, event: object, *, report: bool) -> None:
        try:
            result = getattr(entry.listener, method_name)(event)
            if inspect.isawaitable(result):
                self._schedule(entry, method_name, result, report=report)
        except Exception as exc:
            self._failed(entry, method_name, exc, report=report)

    def _schedule(self, entry: _Entry, method_name: str, awaitable: Any, *, report: bool) -> None:
        loop = entry.loop
        if loop is None or loop.is_closed():
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never awaited: no "coroutine was never awaited" warning
            where = "no event loop was running" if loop is None else "its event loop is closed"
            raise RuntimeError(
                f"{type(entry.listener).__qualname__}.{method_name} is a coroutine function but "
                f"{where} when the listener was added"
            )

        async def run() -> None:
            await awaitable

        future = asyncio.run_coroutine_threadsafe(run(), loop)

        def done(fut: concurrent.futures.Future[None]) -> None:
            if fut.cancelled():
                return
            exc = fut.exception()
            if isinstance(exc, Exception):
                self._failed(entry, method_name, exc, report=report)

        future.add_done_callback(done)

    def _failed(self, entry: _Entry, method_name: str, exc: Exception, *, report: bool) -> None:
        with self._lock:
            self._errors += 1
            entry.errors += 1
            n = entry.errors
        name = f"{type(entry.listener).__qualname__}.{method_name}"
        if worth_logging(n):  # a listener failing on every event cannot flood the log
            log.error(
                "listener %s of %s raised (error %d of this listener)",
                name,
                self.source,
                n,
                exc_info=exc,
            )
        if not report:
            return  # an on_exception that fails while reporting is only logged: no cascade
        report_event = ExceptionEvent(self.source, "listener_error", exc, detail=f"{name}: {exc!r}")
        for other in self._entries:
            if other is not entry and "on_exception" in other.overrides:
                if other.worker is not None:
                    other.worker.put("on_exception", report_event, False)
                elif self._enter_one():
                    try:
                        self._call(other, "on_exception", report_event, report=False)
                    finally:
                        self._leave()


class ConnectionEvents(ConnectionObserver):
    """Relays a transport's connection events to a :class:`ListenerSet` as events.

    A :class:`~heartwire.transport.observers.ConnectionObserver`: :meth:`attach` registers it
    with a transport that has connections (one offering ``add_observer``, as the STOMP
    transport does, or else ``add_connection_listener``, the earlier name); the embedded
    broker has neither, and then nothing happens.
    ``on_reconnect_failed`` (the transport gave up and closed) becomes ``on_exception`` with
    reason ``"reconnect_failed"``; ``on_switched`` (``priority_backup`` moved back to the
    preferred broker) becomes ``on_reconnected`` with ``Reconnected.switched_from`` set.

    The transport calls these on its own thread (STOMP: the failover supervisor, before it
    reconnects), so ``deliver(method, event)`` must hand events off, never call listeners
    there: by default ``listeners.emit``, for a queued set (a monitor's: a thread per
    listener); a publisher passes its own outbox, which keeps them in order with its other
    events and delivers them on a check thread.
    """

    def __init__(
        self,
        listeners: ListenerSet[Any],
        deliver: Callable[[str, object], None] | None = None,
    ) -> None:
        self._listeners = listeners
        self._deliver = listeners.emit if deliver is None else deliver
        #: Connection losses, reconnections, planned switches and give-ups seen so far.
        self.disconnects = 0
        self.reconnects = 0
        self.switches = 0
        self.reconnect_failures = 0

    def on_disconnected(self, broker: str, reason: str) -> None:
        self.disconnects += 1
        self._deliver("on_disconnected", Disconnected(broker, reason))

    def on_reconnected(self, broker: str) -> None:
        self.reconnects += 1
        self._deliver("on_reconnected", Reconnected(broker))

    def on_switched(self, from_broker: str, to_broker: str) -> None:
        self.switches += 1
        self._deliver("on_reconnected", Reconnected(to_broker, switched_from=from_broker))

    def on_reconnect_failed(self, reason: str) -> None:
        self.reconnect_failures += 1
        event = ExceptionEvent(self._listeners.source, "reconnect_failed", None, reason)
        self._deliver("on_exception", event)

    def attach(self, transport: object) -> None:
        # ``add_connection_listener`` was the documented hook before ``add_observer``: a
        # transport (or a wrapper around one) offering only it still gets the events.
        add = getattr(transport, "add_observer", None) or getattr(
            transport, "add_connection_listener", None
        )
        if add is not None:
            add(self)

    def detach(self, transport: object) -> None:
        remove = getattr(transport, "remove_observer", None) or getattr(
            transport, "remove_connection_listener", None
        )
        if remove is not None:
            remove(self)
