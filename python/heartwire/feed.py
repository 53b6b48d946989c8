"""The event feed: a monitor's detector events to its listeners, in batches.

:class:`EventFeed` holds one subscription to the :class:`~heartwire._core.Detector`'s events at
a time (a :class:`_Feed`: its :class:`~heartwire._core.EventQueue` and the
:class:`~heartwire.dispatch.Dispatcher` thread that empties it), switches to a new one when the
listeners' needs change (``received`` events wanted or not; ``"block"`` while a listener is
lossless), and hands each batch the core built to the listeners whole
(:meth:`~heartwire.listeners.ListenerSet.emit_batch`). A switch loses and repeats nothing: see
:class:`_Feed`. :class:`~heartwire.monitor.HeartbeatMonitor` owns one and calls it; the
orderings that keep detection from waiting on Python (and stop() from hanging) are spelled out
where they are kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from heartwire._core import Detector, EventQueue, Newest
from heartwire._core import EventBatch as CoreBatch
from heartwire.dispatch import Dispatcher, discarded_after_push, losses
from heartwire.events import EventBatch
from heartwire.listeners import ListenerSet, SubscriberListener

__all__ = ["EventFeed", "Overflow"]

# The monitor's logger: these are the monitor's messages, moved here with the code.
log = logging.getLogger("heartwire.monitor")

Overflow = Literal["coalesce", "drop-oldest", "drop-newest", "block"]
_JOIN = 3600.0  # how long a new dispatch thread waits for the one it replaces (ordering)


class _Feed:
    """One subscription to the detector's events and the dispatch thread that empties it.

    When listeners start (or stop) wanting ``received`` events, or losing none, the monitor
    opens a new feed, starts its thread, then closes the old one. Both get the events pushed
    meanwhile, and an event put aside while a ``"block"`` queue is subscribed goes to the
    queues subscribed when it is pushed: one that reached the old feed and then waited for room
    in another queue reaches the new feed too, however late (the core's rule, ``emit.rs``).
    So the new feed's thread first waits for the old ones to finish (the whole chain, oldest
    first: one replaced before it delivered anything has not waited for its own), then skips
    what both got or is stale (:meth:`~heartwire._core.EventBatch.fresh` through the feed's
    :class:`~heartwire._core.Newest`, in the core: no Python step per event). Its thread runs
    before the old queue is let go: a producer may be waiting for room in the new queue.
    ``number``: the feed's number from ``Newest.open_feed``, taken before its queue is
    subscribed.
    """

    __slots__ = (
        "counted",
        "dispatcher",
        "finished",
        "number",
        "overflow",
        "popped",
        "prev",
        "queue",
        "received",
    )

    def __init__(
        self,
        queue: EventQueue,
        received: bool,
        overflow: Overflow,
        prev: _Feed | None,
        number: int = 0,
    ) -> None:
        self.queue = queue
        self.number = number
        self.received = received
        self.overflow = overflow
        self.prev = prev
        self.dispatcher: Dispatcher | None = None
        self.finished = False  # stop() is over: what the thread still holds is not delivered
        self.counted = False  # its overflow losses are in the EventFeed's `_losses`
        self.popped = 0


class EventFeed:
    """The detector's events to the listeners: one subscription at a time, switched when
    listeners' needs change, delivered in batches on a dispatch thread.

    - ``detector``, ``listeners``: the monitor's; ``pattern`` names the dispatch threads and
      the log lines.
    - ``capacity``, ``overflow``: each subscription's queue size and policy (``"block"``
      instead while a listener is lossless: nothing may be coalesced or dropped before it).
    - ``wall_offset``: the monitor's current wall offset (a function, read for each batch;
      or a number, fixed), carried by every delivered :class:`~heartwire.events.EventBatch`.
    - ``after_batch``: called on the dispatch thread after each batch handed to the listeners,
      and about every 0.1 s while no events come
      (the monitor reports beats refused meanwhile there).
    - ``tally``: given each batch of fresh core events on the dispatch thread after the
      listeners got it (the monitor's metrics by group, :class:`~heartwire.tally.EventTally`).

    Locking: :meth:`open`, :meth:`sync` and :meth:`detach` change which subscription is
    current and must be called with the monitor's lock held (the monitor's lifecycle and its
    feed switches are serialized by that one lock; the feed takes no lock of its own for
    them). :meth:`finish` must be called without it: a listener on the dispatch thread may
    need the lock to return. No lock of the feed's own (``_losses_lock``, ``_progress``) is
    held across a call that can block on another thread.
    """

    def __init__(
        self,
        detector: Detector,
        listeners: ListenerSet[SubscriberListener],
        *,
        pattern: str,
        capacity: int,
        overflow: Overflow,
        wall_offset: float | Callable[[], float],
        after_batch: Callable[[], None],
        tally: Callable[[CoreBatch], None] | None = None,
    ) -> None:
        self._det = detector
        self._tally = tally
        self._listeners = listeners
        self._pattern = pattern
        self._capacity = capacity
        self._overflow = overflow
        # The monitor's current offset (read for each batch), or a fixed one.
        self._wall_offset = wall_offset if callable(wall_offset) else lambda: wall_offset
        self._after_batch = after_batch
        self._current: _Feed | None = None
        self._local = threading.local()
        self._losses_lock = threading.Lock()
        self._progress = threading.Condition()  # notified as batches are delivered
        self._dispatched = 0
        self._dispatch_errors = 0
        self._losses = 0  # events lost to the overflow policy on feeds already closed
        self._newest = Newest()  # what the dispatch threads delivered (no duplicates)

    @property
    def current(self) -> _Feed | None:
        """The subscription events are delivered from now (``None`` while stopped)."""
        return self._current

    @property
    def dispatching(self) -> bool:
        """Whether the calling thread is a dispatch thread handing over a batch (a listener
        called there cannot wait for the feed: nothing else would make room in its queue)."""
        return getattr(self._local, "dispatching", False)

    def wanted(self) -> tuple[bool, Overflow]:
        """Whether the feed should carry ``received`` events, and its overflow policy: "block"
        while some listener is lossless (nothing may be coalesced or dropped before it)."""
        listeners = self._listeners
        overflow: Overflow = "block" if listeners.lossless else self._overflow
        return listeners.wants_received, overflow

    def open(self) -> None:
        """Subscribe a new feed as the listeners want it (:meth:`wanted`), start its thread,
        then let go of the current one, if any (called with the monitor's lock held)."""
        self._switch(*self.wanted())

    def sync(self) -> None:
        """Open a new feed if listeners' interest in ``received`` events, or in losing none,
        changed; nothing while no feed is open (called with the monitor's lock held)."""
        feed = self._current
        if feed is None:
            return
        received, overflow = self.wanted()
        if (received, overflow) != (feed.received, feed.overflow):
            self._switch(received, overflow)

    def _switch(self, received: bool, overflow: Overflow) -> None:
        # Called with the monitor's lock held.
        old = self._current
        # Numbered before the queue is subscribed: the old feed pops every event the two share
        # after it is replaced, and notes the `received` ones for this feed to skip.
        number = self._newest.open_feed()
        queue = self._det.subscribe(capacity=self._capacity, overflow=overflow, received=received)
        feed = _Feed(queue, received, overflow, old, number)
        feed.dispatcher = Dispatcher(
            queue,
            lambda batch: self._deliver(feed, batch),
            on_error=self._dispatch_failed,
            name=f"heartwire-monitor[{self._pattern}]",
            columnar=True,
            # Also while no events come (beats refused by beat() calls are reported then).
            on_idle=self._after_batch,
        )
        self._current = feed
        # The new queue is fed from now on: its thread must run before anything here waits for
        # the detector. Under "block" the driver may already be waiting for room in it (or in
        # the old one) while holding the detector's locks, which unsubscribe needs.
        feed.dispatcher.start()
        if old is not None:
            # Closing first releases a driver waiting for room in the old queue; what it would
            # have pushed there goes to the new one too. The old thread ends once it is empty.
            old.queue.close()
            self._det.unsubscribe(old.queue)

    def detach(self) -> list[_Feed]:
        """The current feed and those it replaces, oldest first; none is current any more
        (called with the monitor's lock held). Hand them to :meth:`finish`."""
        feed = self._current
        self._current = None
        chain: list[_Feed] = []
        while feed is not None:
            chain.append(feed)
            feed = feed.prev
        chain.reverse()
        return chain

    @staticmethod
    def close(chain: list[_Feed]) -> None:
        """Close the queues of ``chain`` (from :meth:`detach`) without letting go of them: a
        producer waiting for room in one is released, what it pushes later is refused and
        counted. For a stop() on the dispatch thread, where nothing else would make room."""
        for feed in chain:
            feed.queue.close()

    def finish(
        self,
        chain: list[_Feed],
        timeout: float | None,
        mark: int | None = None,
        deadline: float | None = None,
    ) -> None:
        """Deliver what the feeds hold within ``timeout`` (``None``: all of it), end their
        threads, and let go of their queues. A thread still busy then delivers nothing more
        (what it holds is counted in ``dropped``) and ends by itself.

        With ``mark`` (the detector's outbox mark at its stop), the last feed stays open, its
        thread delivering, until every event emitted before the stop is pushed (a beat's
        ``resumed`` waiting for room in this feed or another ``"block"`` queue), at most until
        ``deadline`` (``time.monotonic()``; None: no bound); only then is it closed.

        Each queue is closed first, as in a feed switch: a producer still pushing (a beat
        taken just before the detector stopped) may be waiting for room in a full ``"block"``
        queue while holding the detector's locks, which ``unsubscribe`` needs, and once the
        thread has ended nothing would make room. Closing releases it (what it pushes later is
        refused and counted in ``dropped``); the thread still delivers what is queued.
        Called without the monitor's lock."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for i, feed in enumerate(chain):
            if mark is not None and i == len(chain) - 1:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not self._det.wait_pushed(mark, wait):
                    log.warning(
                        "stopping %r: events emitted before the stop still wait for room in "
                        "a full 'block' queue; what reaches the closed feed is dropped",
                        self._pattern,
                    )
            feed.queue.close()
            dispatcher = feed.dispatcher
            if dispatcher is not None:
                dispatcher.stop(None if deadline is None else max(0.0, deadline - time.monotonic()))
            feed.finished = True
            self._det.unsubscribe(feed.queue)
            stats = feed.queue.stats()
            lost = losses(stats)
            if i == len(chain) - 1:
                # Refused by the closed queue. (A replaced feed's were pushed to its successor.)
                lost += stats["rejected_closed"]
            with self._losses_lock:
                if not feed.counted:  # (a successor's thread may have counted it already)
                    feed.counted = True
                    self._losses += lost
            if dispatcher is not None and dispatcher.alive:
                log.warning(
                    "stopping %r: the dispatch thread did not deliver everything within %s s; "
                    "the rest is dropped (counted in stats()['dropped'])",
                    self._pattern,
                    "-" if timeout is None else f"{timeout:.3g}",
                )

    def drain(self, deadline: float) -> bool:
        """Wait until the dispatch threads have handed every event pushed so far to the
        listeners (or it was lost to the overflow policy); False once ``deadline``
        (``time.monotonic()``) passes first. Do not call it on a dispatch thread
        (:attr:`dispatching`): it would wait for itself."""
        feed = self._current
        chain: list[_Feed] = []
        while feed is not None:
            chain.append(feed)
            feed = feed.prev
        # Every event pushed so far is either handed to the handler or lost to the overflow
        # policy. (Not "popped + len": a pop in progress is in neither for a moment.)
        targets = [(f, f.queue.stats()["pushed"]) for f in reversed(chain)]  # oldest first
        with self._progress:
            for feed, pushed in targets:
                dispatcher = feed.dispatcher
                if dispatcher is None:
                    continue
                while not _delivered(feed, pushed) and dispatcher.alive:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    # Woken by each delivered batch; the slice notices a thread that ended.
                    self._progress.wait(min(remaining, 0.05))
        return True

    def stats(self) -> dict[str, Any]:
        """``dispatched`` (events handed over by the dispatch threads), ``dispatch_errors``
        (batches whose handling raised), ``dropped`` (events lost: to the overflow policy, held
        by a dispatch thread that :meth:`finish` did not wait for, or refused by a closed
        queue) and ``dispatch_queue_depth`` (events not yet taken by a dispatch thread)."""
        depth = 0
        with self._losses_lock:
            # Under the lock: a dispatch thread moves replaced feeds' losses into `_losses` as
            # it takes them out of the chain, under it too (each counted once).
            dropped = self._losses
            feed = self._current
            while feed is not None:
                dropped += losses(feed.queue.stats())
                depth += len(feed.queue)
                feed = feed.prev
        return {
            "dispatched": self._dispatched,
            "dispatch_errors": self._dispatch_errors,
            "dropped": dropped,
            "dispatch_queue_depth": depth,
        }

    def _dispatch_failed(self, exc: BaseException, batch: CoreBatch) -> None:
        self._dispatch_errors += 1
        log.error("dispatching %d events of %r failed", len(batch), self._pattern, exc_info=exc)

    def _deliver(self, feed: _Feed, batch: CoreBatch) -> None:
        """The dispatch thread's handler: a batch of core events to the listeners, in one
        piece (:meth:`~heartwire.listeners.ListenerSet.emit_batch`). No Python step per event
        here: the feed-switch dedupe and each listener's selection run in the core."""
        local = self._local
        local.dispatching = True
        try:
            if feed.prev is not None:
                # Deliver everything of the feeds this one replaces first, oldest first
                # (`fresh` then skips what both got). The whole chain: a feed replaced before
                # it delivered anything never joined its own predecessor, which may still be
                # delivering.
                chain: list[_Feed] = []
                prev: _Feed | None = feed.prev
                while prev is not None:
                    chain.append(prev)
                    prev = prev.prev
                for older in reversed(chain):
                    if older.dispatcher is not None:
                        older.dispatcher.stop(_JOIN)
                # What their overflow policy discarded stays counted once they leave the chain
                # (stats() walks it), as finish() counts the feeds still in it: all of it,
                # though some of it reached this feed too (pushed to both during the switch).
                with self._losses_lock:
                    for older in chain:
                        if not older.counted:
                            older.counted = True
                            self._losses += losses(older.queue.stats())
                    feed.prev = None
            if feed.finished:  # stop() did not wait for this: after on_stopped, never
                with self._losses_lock:
                    self._losses += len(batch)
                return
            fresh = batch.fresh(self._newest, feed.number)
            if len(fresh):
                self._listeners.emit_batch(EventBatch(fresh, self._wall_offset()))
                # After the hand-over: listeners' threads get the batch first. Counted before
                # this batch is marked delivered, so drain() then a scrape see it.
                if self._tally is not None:
                    self._tally(fresh)
            self._after_batch()
        finally:
            local.dispatching = False
            with self._progress:
                self._dispatched += len(batch)
                feed.popped += len(batch)
                self._progress.notify_all()


def _delivered(feed: _Feed, pushed: int) -> bool:
    """Whether ``feed``'s handler has seen every one of its first ``pushed`` events not lost."""
    return feed.popped >= pushed - discarded_after_push(feed.queue.stats())
