"""asyncio bridges: a monitor's events as an async iterator, topic waits, coroutine checks.

:class:`EventStream` is a :class:`~heartwire.listeners.SubscriberListener` that takes the
monitor's batches (``on_events``, on its own listener thread, as any listener) into a bounded
queue that an ``async for`` empties on the event loop. The loop is woken at most once per batch
(one ``loop.call_soon_threadsafe``, and none while a wake-up is pending or the consumer is busy):
no thread and no loop callback per event. :class:`TopicWait` wakes the loop once per batch
naming its topic. :class:`LoopCheck` runs a publisher's coroutine check on the user's loop
without holding a thread while it runs.

:meth:`HeartbeatMonitor.events <heartwire.monitor.HeartbeatMonitor.events>`,
:meth:`~heartwire.monitor.HeartbeatMonitor.wait_for`, ``async with`` on monitors and
publishers and coroutine ``dependency`` checks build on these (see ``docs/asyncio.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import ClassVar

from heartwire import _validate
from heartwire.events import (
    CaughtUp,
    EventBatch,
    Failed,
    Flapping,
    Lagging,
    LocalPause,
    Received,
    Resumed,
    State,
    Stopped,
    TopicStatus,
)
from heartwire.feed import Overflow
from heartwire.listeners import SubscriberListener

__all__ = [
    "STREAM_OVERFLOWS",
    "WAITABLE",
    "EventStream",
    "LoopCheck",
    "StreamEvent",
    "TopicWait",
]

#: What an :class:`EventStream` yields: a monitor's detector events but ``received``.
StreamEvent = Failed | Resumed | Flapping | LocalPause | Lagging | CaughtUp

#: What a full :class:`EventStream` does with a new batch, as the monitor's own event queue
#: (``overflow``): ``"block"`` makes the stream's listener thread wait for room (then that
#: listener's own queue takes the back-pressure, by the monitor's ``listener_overflow``; a
#: batch put in an empty stream goes in whole, whatever its size); ``"drop-oldest"`` keeps the
#: newest ``capacity`` events, ``"drop-newest"`` the oldest (the new batch's events that do not
#: fit are dropped); ``"coalesce"`` keeps each topic's newest event past ``capacity``
#: (topicless events: the newest of each kind), in the order of their latest update. Every
#: loss is counted (``dropped``, ``coalesced``).
STREAM_OVERFLOWS: tuple[Overflow, ...] = ("block", "drop-oldest", "drop-newest", "coalesce")

#: The states :meth:`~heartwire.monitor.HeartbeatMonitor.wait_for` waits for: those events
#: announce (PAUSED, STOPPED and REMOVED follow the caller's own calls).
WAITABLE: tuple[State, ...] = (State.ALIVE, State.FAILED)

# A queue item: a batch from the monitor or the events taken from the coalescing table.
_Item = EventBatch | list[StreamEvent]

# Seconds a "block" put waits for room before it looks again whether its loop has closed (a
# closed loop calls nothing back: its stream is closed from this side).
_LOOP_LOOK = 0.25


def _key(event: StreamEvent) -> tuple[int, str]:
    """The coalescing key: the topic, or the kind for topicless events."""
    if isinstance(event, (LocalPause, Lagging, CaughtUp)):
        return (1, type(event).__name__)
    return (0, event.topic)


class EventStream(SubscriberListener):
    """A monitor's detector events (failed, resumed, flapping, local pause, lagging, caught
    up) for ``async for``, through a queue of ``capacity`` events with ``overflow``
    (:data:`STREAM_OVERFLOWS`); the batch being handed out (taken from the queue whole, its
    events built on the loop in one pass) no longer counts in it. It ends when the monitor
    stops (after the events produced before the stop) or when :meth:`aclose` is called
    (``async with`` does).

    A stream whose event loop has closed (made in a task that returned unread, after
    ``asyncio.run`` returned) has no reader left: it closes itself at its next batch or at the
    monitor's stop, and a ``"block"`` put waiting for room gives up within a quarter second,
    so it never holds its listener thread or :meth:`~heartwire.monitor.HeartbeatMonitor.stop`;
    what it held then is counted in ``dropped``.

    Made by :meth:`HeartbeatMonitor.events <heartwire.monitor.HeartbeatMonitor.events>`; its
    counters: ``dropped`` (``"drop-oldest"``, ``"drop-newest"``, a closed loop), ``coalesced``
    (``"coalesce"``: events replaced by a newer one of their topic), ``wakeups`` (loop
    callbacks made: at most one per batch), ``batches`` (batches taken in).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        capacity: int = 10_000,
        overflow: Overflow = "block",
        on_close: Callable[[EventStream], object] | None = None,
    ) -> None:
        self._capacity = _validate.count(capacity, "capacity", 1)
        self._overflow: Overflow = _validate.choice(overflow, "overflow", STREAM_OVERFLOWS)
        self._loop = loop
        self._on_close = on_close
        # _cond guards everything below; never held across a call into the loop, a listener
        # or the monitor (the wake-up is decided under it and made after it is let go).
        self._cond = threading.Condition(threading.Lock())
        self._items: deque[_Item] = deque()
        self._depth = 0  # events in _items (those in hand are taken: not counted)
        # The loop's side only (no lock): the events of the item taken last, built on the
        # loop, handed out from _pos on.
        self._hand: list[StreamEvent] = []
        self._pos = 0
        self._table: dict[tuple[int, str], StreamEvent] = {}  # coalesced, newer than _items
        self._waiter: asyncio.Future[None] | None = None
        self._wake_pending = False
        self._putters = 0  # "block" puts waiting for room
        self._ended = False  # the monitor stopped: end after what is queued
        self._closed = False  # aclose() or the end: refuse what comes
        self.dropped = 0
        self.coalesced = 0
        self.wakeups = 0
        self.batches = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def overflow(self) -> Overflow:
        return self._overflow

    # -- the listener side (the monitor's listener thread for this stream) -----------------

    def on_events(self, batch: EventBatch) -> None:
        n = len(batch)
        if not n:
            return
        if self._loop.is_closed():  # nobody is left to read (see the class docs)
            self._finish(lost=n)
            return
        with self._cond:
            if self._closed:
                return
            self.batches += 1
            overflow = self._overflow
            if overflow == "block":
                # The wait lets go of the lock; the consumer and aclose() notify. A batch put
                # in an empty queue goes in whole, whatever its size (each put makes progress).
                # Timed: a loop that closes notifies nobody, so the put looks for that itself.
                while self._depth and self._depth + n > self._capacity and not self._closed:
                    if self._loop.is_closed():
                        break
                    self._putters += 1
                    try:
                        self._cond.wait(_LOOP_LOOK)
                    finally:
                        self._putters -= 1
                if self._closed:
                    return
                if self._depth and self._depth + n > self._capacity:  # the loop closed
                    gone = True
                else:
                    gone = False
                    self._push(batch, n)
            elif overflow == "drop-oldest":
                gone = False
                # The newest `capacity` events stay: the queued ones go first, then the new
                # batch's oldest.
                excess = self._depth + n - self._capacity
                if excess > 0:
                    self._drop_first(min(excess, self._depth))
                    cut = n - self._capacity
                    if cut > 0:
                        self.dropped += cut
                        batch, n = batch.slice(cut, n), self._capacity
                self._push(batch, n)
            elif overflow == "drop-newest":
                gone = False
                room = min(max(self._capacity - self._depth, 0), n)
                if room < n:
                    self.dropped += n - room
                if room:
                    self._push(batch.slice(0, room) if room < n else batch, room)
            elif self._table or self._depth + n > self._capacity:
                gone = False
                # coalesce: past capacity (and from then on, until the consumer takes the
                # table, so the order holds) events go to a table of each topic's newest.
                room = max(0, self._capacity - self._depth) if not self._table else 0
                if room:
                    self._push(batch.slice(0, room), room)
                table = self._table
                for event in batch.slice(room, n):
                    key = _key(event)  # type: ignore[arg-type]  # no received in a stream
                    if table.pop(key, None) is not None:
                        self.coalesced += 1
                    table[key] = event  # type: ignore[assignment]
            else:
                gone = False
                self._push(batch, n)
            wake = not gone and self._wake_needed()
        if gone:
            self._finish(lost=n)
        elif wake:
            self._wake()

    def on_stopped(self, event: Stopped) -> None:
        if self._loop.is_closed():  # no reader to end for: close now (see the class docs)
            self._finish(lost=0)
            return
        with self._cond:
            self._ended = True
            wake = self._wake_needed()
        if wake:
            self._wake()

    def _push(self, item: _Item, n: int) -> None:
        self._items.append(item)
        self._depth += n

    def _drop_first(self, count: int) -> None:
        """Drop up to ``count`` of the oldest queued events (lock held)."""
        items = self._items
        while count > 0 and items:
            head = items[0]
            size = len(head)
            if size <= count:
                items.popleft()
                gone = size
            else:
                items[0] = head[count:] if isinstance(head, list) else head.slice(count, size)
                gone = count
            count -= gone
            self._depth -= gone
            self.dropped += gone

    def _wake_needed(self) -> bool:
        """Whether the consumer must be woken (lock held): it waits, and no wake-up is on its
        way. Marks one as on its way."""
        if self._waiter is None or self._wake_pending:
            return False
        self._wake_pending = True
        self.wakeups += 1
        return True

    def _wake(self) -> None:
        """One loop callback to wake the consumer (lock not held)."""
        try:
            self._loop.call_soon_threadsafe(self._woken)
        except RuntimeError:  # the loop is closed: nobody is left to read, leave the monitor
            self._finish(lost=0)

    # -- the loop side ---------------------------------------------------------------------

    def _woken(self) -> None:
        with self._cond:
            self._wake_pending = False
            waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> StreamEvent:
        pos = self._pos
        if pos < len(self._hand) and not self._closed:  # the common case: no lock
            self._pos = pos + 1
            return self._hand[pos]
        while True:
            with self._cond:
                if self._closed:
                    break
                if self._items:
                    item = self._items.popleft()
                    self._depth -= len(item)
                    if self._putters:
                        self._cond.notify_all()  # room for a "block" put
                elif self._table:
                    item = list(self._table.values())
                    self._table = {}
                elif self._ended:
                    break
                else:
                    item = None
                    if self._waiter is not None and not self._waiter.done():
                        raise RuntimeError(
                            "another task is already waiting on this event stream: one "
                            "consumer per stream (call mon.events() again for another)"
                        )
                    waiter = self._loop.create_future()
                    self._waiter = waiter
            if item is not None:
                # Built here, on the loop, out of the lock: the core's compact batch becomes
                # event objects in one pass.
                # (an EventBatch of a stream holds no received event)
                hand: list[StreamEvent] = item if isinstance(item, list) else list(item)  # type: ignore[arg-type]
                self._hand = hand
                self._pos = 1
                return hand[0]
            await waiter
        self._finish()
        raise StopAsyncIteration

    def _finish(self, lost: int | None = None) -> None:
        """Close the stream and leave the monitor. ``lost``: closed because the loop did
        (from the listener's side): what is queued and ``lost`` more events are counted in
        ``dropped``; None: the reader's own end or close, nothing counted."""
        with self._cond:
            if lost is not None and not self._closed:
                self.dropped += self._depth + len(self._table) + lost
            self._closed = True
            self._items.clear()
            self._table = {}
            self._depth = 0
            self._cond.notify_all()  # a "block" put waiting for room gives up
            on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close(self)

    async def aclose(self) -> None:
        """Stop the stream: what is queued is discarded, later batches refused, and the
        stream leaves the monitor's listeners. Idempotent."""
        self._finish()
        self._hand = []
        with self._cond:
            waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def closed(self) -> bool:
        """Ended (the monitor stopped and everything was taken) or :meth:`aclose` d."""
        return self._closed

    @property
    def waiting(self) -> bool:
        """A consumer waits for the next event (the next batch wakes the loop)."""
        with self._cond:
            return self._waiter is not None and not self._waiter.done()

    @property
    def queued(self) -> int:
        """Events waiting to be taken (queue and coalescing table)."""
        with self._cond:
            return self._depth + len(self._table) + max(0, len(self._hand) - self._pos)


class TopicWait(SubscriberListener):
    """Wakes a loop (for ``wait_for``) when ``ready()`` says so after a batch: one call per
    batch on this listener's thread (a status lookup), no loop callback until it is true.
    Also when the batch announces the state for ``topic`` though the topic has left it again
    by the time of the lookup (a ``Failed`` then a ``Resumed`` in a row): the events of the
    ``announce`` kinds in the batch (``failed`` for FAILED; ``resumed``, ``received`` for
    ALIVE) are looked through for the topic (natively filtered: nothing per event of other
    kinds), and the last one kept in :attr:`announced`. Also on :meth:`poke` (a call that may
    change a state without an event, as ``resume`` or ``remove``) and when the monitor stops
    (:attr:`stopped`). :class:`ReceivedTopicWait` takes ``received`` events too: a topic going
    ALIVE from PENDING or from unknown announces itself only by its first beat."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ready: Callable[[], bool],
        topic: str = "",
        announce: tuple[str, ...] = (),
        status: Callable[[], TopicStatus | None] | None = None,
    ) -> None:
        self._loop = loop
        self._ready = ready
        self._topic = topic
        self._announce = announce
        self._status = status
        self._lock = threading.Lock()
        self._pending = False
        self.changed = asyncio.Event()  # set on the loop; cleared by the waiter
        self.stopped = False
        self.wakeups = 0
        #: The last event that announced the state for the topic, with the topic's status
        #: looked up when it was seen (None if it was not watched any more); None until then.
        self.announced: tuple[Failed | Resumed | Received, TopicStatus | None] | None = None

    def on_events(self, batch: EventBatch) -> None:
        if self._ready():
            self.poke()
            return
        if not self._announce:
            return
        mine = batch.of_kinds(self._announce)
        if not len(mine):
            return
        topics = mine.topic_list()
        topic = self._topic
        for i in range(len(topics) - 1, -1, -1):
            if topics[i] == topic:
                event = mine[i]
                status = self._status() if self._status is not None else None
                self.announced = (event, status)  # type: ignore[assignment]
                self.poke()
                return

    def on_stopped(self, event: Stopped) -> None:
        self.stopped = True
        self.poke()

    def poke(self) -> None:
        """Wake the waiter (from any thread): one loop callback until it has run."""
        with self._lock:
            if self._pending:
                return
            self._pending = True
            self.wakeups += 1
        with contextlib.suppress(RuntimeError):  # loop closed: the waiter is gone
            self._loop.call_soon_threadsafe(self._set)

    def _set(self) -> None:
        with self._lock:
            self._pending = False
        self.changed.set()


class ReceivedTopicWait(TopicWait):
    wants_received: ClassVar[bool] = True


class LoopCheck:
    """A publisher's coroutine check on ``loop``: :meth:`start` hands the awaitable to the
    loop and returns at once (no thread waits for it); ``done(result, error, cancelled)`` is
    called once, when it has really ended: on the loop's thread (as the task finishes), or,
    if the loop closed with it unfinished, on the thread of the next :meth:`cancel`.
    :meth:`cancel` (from any thread) cancels it: a check past its time limit is cancelled, not
    left to run. One that ignores the cancellation (catches ``CancelledError`` and goes on)
    is still :attr:`running` until it returns, and ``done`` waits for that: its publisher
    then keeps it as the beat's work in flight, so at most one runs per publisher (each beat
    due meanwhile fails, counted), instead of starting another each period."""

    __slots__ = (
        "_awaitable",
        "_cancelled",
        "_done",
        "_ended",
        "_lock",
        "_loop",
        "_runner",
        "_task",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: Coroutine[object, None, object] | None = None
        self._awaitable: Awaitable[object] | None = None  # until the task has it
        self._task: asyncio.Task[object] | None = None
        self._done: Callable[[object, BaseException | None, bool], None] | None = None
        self._cancelled = False  # cancel() was called
        self._ended = False  # done was called

    def start(
        self,
        awaitable: Awaitable[object],
        loop: asyncio.AbstractEventLoop,
        done: Callable[[object, BaseException | None, bool], None],
    ) -> None:
        """Schedule ``awaitable`` on ``loop``; ``RuntimeError`` if the loop is closed."""

        async def run() -> object:
            return await awaitable

        runner = run()
        self._loop, self._runner, self._awaitable, self._done = loop, runner, awaitable, done
        try:
            loop.call_soon_threadsafe(self._begin)
        except RuntimeError:  # the loop is closed: never awaited, and no warning for it
            self._close_unstarted()
            raise

    def _close_unstarted(self) -> None:
        """Close a check that never ran: no "coroutine was never awaited" warning."""
        with self._lock:
            runner, self._runner = self._runner, None
            awaitable, self._awaitable = self._awaitable, None
        if runner is None:
            return
        runner.close()
        close = getattr(awaitable, "close", None)
        if callable(close):
            close()

    def _begin(self) -> None:
        """On the loop: the task, unless a cancel came first."""
        with self._lock:
            if self._ended:
                return
            if not self._cancelled:
                runner, self._runner = self._runner, None
                self._awaitable = None
                assert runner is not None and self._loop is not None
                self._task = self._loop.create_task(runner)
                self._task.add_done_callback(self._task_done)
                return
        self._close_unstarted()
        self._end(None, None, True)

    def _task_done(self, task: asyncio.Task[object]) -> None:
        if task.cancelled():
            self._end(None, None, True)
            return
        error = task.exception()
        self._end(None if error is not None else task.result(), error, False)

    def _end(self, result: object, error: BaseException | None, cancelled: bool) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
            done, self._done = self._done, None
        if done is not None:
            done(result, error, cancelled)

    @property
    def running(self) -> bool:
        """Started and not ended (cancelled or not)."""
        return self._loop is not None and not self._ended

    def cancel(self) -> None:
        """Cancel the coroutine (its ``done`` then reports it cancelled, once it has ended).
        Called again, only looks whether the loop has closed with the check unfinished:
        nothing will run it any more, and ``done`` is called here. Call it without holding a
        lock ``done`` takes: it may call ``done`` at once, on the calling thread."""
        with self._lock:
            if self._ended or self._loop is None:
                return
            first = not self._cancelled
            self._cancelled = True
            loop = self._loop
        if loop.is_closed():  # (a task left pending by a loop closed without running it)
            self._close_unstarted()
            self._end(None, None, True)
            return
        if first:
            try:
                loop.call_soon_threadsafe(self._cancel_task)
            except RuntimeError:  # closed meanwhile
                self._close_unstarted()
                self._end(None, None, True)

    def _cancel_task(self) -> None:
        """On the loop, after :meth:`_begin` (callbacks run in order): cancel the task."""
        task = self._task
        if task is not None:
            task.cancel()
