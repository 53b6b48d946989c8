"""asyncio bridges: a monitor's events as an async iterator, topic waits, coroutine checks.

:class:`EventStream` is a :class:`~heartwire.listeners.SubscriberListener` that takes the
monitor's batches (``on_events``, on its own listener thread, as any listener) into a bounded
queue that an ``async for`` empties on the event loop. The loop is woken at most once per batch
(one ``loop.call_soon_threadsafe``, and none while a wake-up is already pending): no thread and
no loop callback per event. :class:`TopicWait` wakes the loop once per batch naming its topic.
:func:`run_on_loop` lets a publisher's dependency check be a coroutine function.

:meth:`HeartbeatMonitor.events <heartwire.monitor.HeartbeatMonitor.events>`,
:meth:`~heartwire.monitor.HeartbeatMonitor.wait_for` and ``async with`` build on these.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Literal

from heartwire import _validate
from heartwire.checks import CheckFailed
from heartwire.events import EventBatch, MonitorEvent, State, Stopped
from heartwire.listeners import SubscriberListener

__all__ = ["STREAM_OVERFLOWS", "EventStream", "StreamOverflow", "TopicWait", "run_on_loop"]

#: What a full :class:`EventStream` does with a new batch: ``"block"`` makes the stream's
#: listener thread wait for room (then that listener's own queue takes the back-pressure, with
#: the monitor's ``listener_overflow``); ``"drop-oldest"`` drops the oldest queued events;
#: ``"coalesce"`` keeps each topic's newest event (topicless events: the newest of each kind).
StreamOverflow = Literal["block", "drop-oldest", "coalesce"]
STREAM_OVERFLOWS: tuple[StreamOverflow, ...] = ("block", "drop-oldest", "coalesce")

# Events of a batch taken out of the queue: their iterator and how many are left in it.
_Hand = tuple[Iterator[MonitorEvent], int]


def _key(event: MonitorEvent) -> tuple[int, str]:
    topic = getattr(event, "topic", None)
    return (0, topic) if isinstance(topic, str) else (1, type(event).__name__)


class EventStream(SubscriberListener):
    """A monitor's detector events (failed, resumed, flapping, local pause, lagging, caught
    up) for ``async for``, through a queue of ``capacity`` events with ``overflow``
    (:data:`STREAM_OVERFLOWS`). It ends when the monitor stops (after the events produced
    before the stop) or when :meth:`aclose` is called (``async with`` does).

    Made by :meth:`HeartbeatMonitor.events <heartwire.monitor.HeartbeatMonitor.events>`; its
    counters: ``dropped`` (``"drop-oldest"``), ``coalesced`` (``"coalesce"``: events replaced by
    a newer one of their topic), ``wakeups`` (loop callbacks made).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        capacity: int = 10_000,
        overflow: StreamOverflow = "block",
        on_close: Callable[[EventStream], object] | None = None,
    ) -> None:
        self._capacity = _validate.count(capacity, "capacity", 1)
        self._overflow: StreamOverflow = _validate.choice(overflow, "overflow", STREAM_OVERFLOWS)
        self._loop = loop
        self._on_close = on_close
        # _cond guards everything below; never held across a call into the loop or a listener
        # (call_soon_threadsafe only appends to the loop's queue and writes its self-pipe).
        self._cond = threading.Condition(threading.Lock())
        self._items: deque[EventBatch | list[MonitorEvent]] = deque()
        self._depth = 0  # events in _items and in hand
        self._table: dict[tuple[int, str], MonitorEvent] = {}  # coalesced, newer than _items
        self._hand: _Hand | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._wake_pending = False
        self._ended = False  # the monitor stopped: end after what is queued
        self._closed = False  # aclose(): end now, refuse what comes
        self.dropped = 0
        self.coalesced = 0
        self.wakeups = 0

    # -- the listener side (the monitor's listener thread for this stream) -----------------

    def on_events(self, batch: EventBatch) -> None:
        n = len(batch)
        if not n:
            return
        with self._cond:
            if self._closed:
                return
            if self._overflow == "block":
                # Waits release the lock; aclose() and the consumer notify. A batch put in an
                # empty queue goes in whole, whatever its size (each put makes progress).
                while self._depth and self._depth + n > self._capacity and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                self._push(batch, n)
            elif self._overflow == "drop-oldest":
                excess = self._depth + n - self._capacity
                if excess > 0:
                    self._drop_first(excess)
                self._push(batch, n)
            elif self._table or self._depth + n > self._capacity:
                # coalesce: past capacity (and from then on, until the table is taken, so
                # order holds) events go to a table of each topic's newest.
                room = max(0, self._capacity - self._depth) if not self._table else 0
                if room:
                    self._push(batch.slice(0, room), room)
                table = self._table
                for event in batch.slice(room, n):
                    key = _key(event)
                    if table.pop(key, None) is not None:
                        self.coalesced += 1
                    table[key] = event
            else:
                self._push(batch, n)
            self._wake()

    def on_stopped(self, event: Stopped) -> None:
        with self._cond:
            self._ended = True
            self._wake()

    def _push(self, item: EventBatch | list[MonitorEvent], n: int) -> None:
        self._items.append(item)
        self._depth += n

    def _drop_first(self, count: int) -> None:
        """Drop up to ``count`` of the oldest queued events (not those in hand); lock held."""
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

    def _wake(self) -> None:
        """Wake the consumer once (lock held): one loop callback until it has run."""
        if self._waiter is not None and not self._wake_pending:
            self._wake_pending = True
            self.wakeups += 1
            try:
                self._loop.call_soon_threadsafe(self._woken)
            except RuntimeError:  # the loop is closed: nobody is left to wake
                self._closed = True

    # -- the loop side ---------------------------------------------------------------------

    def _woken(self) -> None:
        with self._cond:
            self._wake_pending = False
            waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> MonitorEvent:
        while True:
            with self._cond:
                hand = self._hand
                if hand is not None:
                    it, left = hand
                    event = next(it)
                    self._hand = (it, left - 1) if left > 1 else None
                    self._depth -= 1
                    if self._overflow == "block":
                        self._cond.notify_all()
                    return event
                if self._closed:
                    break
                if self._items:
                    item = self._items.popleft()
                    self._hand = (iter(item), len(item))
                    continue
                if self._table:
                    events = list(self._table.values())
                    self._table = {}
                    self._items.append(events)
                    self._depth += len(events)
                    continue
                if self._ended:
                    break
                waiter = self._loop.create_future()
                self._waiter = waiter
            await waiter
        self._finish()
        raise StopAsyncIteration

    def _finish(self) -> None:
        with self._cond:
            self._closed = True
            self._items.clear()
            self._table = {}
            self._hand = None
            self._depth = 0
            self._cond.notify_all()  # a "block" put waiting for room gives up
            on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close(self)

    async def aclose(self) -> None:
        """Stop the stream: what is queued is discarded, later batches refused, and the
        stream leaves the monitor's listeners."""
        self._finish()
        with self._cond:
            waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def queued(self) -> int:
        """Events waiting to be taken (queue and coalescing table)."""
        with self._cond:
            return self._depth + len(self._table)


class TopicWait(SubscriberListener):
    """Wakes a loop once per batch that names ``topic`` (for ``wait_for``: the caller then
    reads the topic's status). ``ReceivedTopicWait`` takes ``received`` events too (a topic
    going ALIVE from PENDING announces itself only by its first beat)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, topic: str) -> None:
        self._loop = loop
        self._topic = topic
        self._lock = threading.Lock()
        self._pending = False
        self.changed = asyncio.Event()  # set on the loop; cleared by the waiter

    def on_events(self, batch: EventBatch) -> None:
        if self._topic not in batch.topic_list():
            return
        with self._lock:
            if self._pending:
                return
            self._pending = True
        try:
            self._loop.call_soon_threadsafe(self._set)
        except RuntimeError:  # loop closed: the waiter is gone
            pass

    def _set(self) -> None:
        with self._lock:
            self._pending = False
        self.changed.set()


class ReceivedTopicWait(TopicWait):
    wants_received: ClassVar[bool] = True


WAITABLE: tuple[State, ...] = (State.ALIVE, State.FAILED)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def run_on_loop(
    check: Callable[[], object],
    loop: Callable[[], asyncio.AbstractEventLoop | None],
    timeout: Callable[[], float],
    name: str,
) -> Callable[[], object]:
    """``check`` as a plain callable for a publisher's check thread: when it returns an
    awaitable (a coroutine function's call), the awaitable runs on ``loop()`` (the user's
    loop) and the thread waits for it at most ``timeout()`` seconds, then cancels it and
    raises :class:`~heartwire.checks.CheckFailed` (so a slow coroutine holds a check thread no
    longer than the beat's time limit)."""

    def call() -> object:
        result = check()
        if not inspect.isawaitable(result):
            return result
        target = loop()
        if target is None or target.is_closed():
            if inspect.iscoroutine(result):
                result.close()
            raise CheckFailed(f"{name}: no running event loop for the coroutine check")
        future = asyncio.run_coroutine_threadsafe(_await(result), target)
        limit = timeout()
        try:
            return future.result(limit)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise CheckFailed(f"{name} timed out after {limit:g} s") from None

    return call
