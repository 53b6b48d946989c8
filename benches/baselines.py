"""The baselines heartwire is measured against: what a user would write instead.

Each is written plainly, the way a competent Python programmer would, and given every advantage
that does not change what it is (one fixed period for all topics, the cheapest state layout,
the same clock as heartwire's real clock: ``time.monotonic``):

1. :class:`HeapMonitor` - a pure-Python monitor on a ``heapq`` of deadlines with lazy re-arm: a
   beat only stores its time; when a topic's deadline comes up, the monitor either re-arms it from
   the last beat or counts a missed period (the same algorithm as heartwire's core).
2. :class:`AsyncioMonitor` - asyncio with one ``loop.call_at`` timer per topic, cancelled and
   re-armed on each beat.
3. :class:`ThreadPerSubscriber` / :class:`ThreadPerPublisher` - the original JMS framework's
   design: one thread per subscriber (or publisher) sleeping for its period.
4. :func:`load_pypi_phi` - the PyPI ``phi-accrual-failure-detector`` package (one detector object
   per topic). PyPI's ``timingwheel`` 0.4 is not installable on Python 3 (its ``__init__`` does a
   Python 2 implicit relative import, so its ``setup.py`` fails), so it is not measured.

Every monitor reports a failure as ``on_failed(key, missed, since, deadline)``, called on the
thread that detected it, with the same meaning as heartwire's ``Failed`` event: ``deadline`` is
the instant the period counted as missed (``last + n * period + grace``).
"""

from __future__ import annotations

import asyncio
import heapq
import importlib
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

FailedHandler = Callable[[Hashable, int, float, float], object]
ResumedHandler = Callable[[Hashable, int, float], object]


def _ignore(*_args: object) -> None:
    return None


class _Outages:
    """The settings and outage bookkeeping the heap and asyncio monitors share: ``missed``
    holds only the topics that missed a period, for now, ``since`` the failed ones' failure
    times; a beat ends an outage (:meth:`_resume`)."""

    def __init__(
        self,
        period: float,
        allowed_misses: int,
        grace: float,
        on_failed: FailedHandler,
        on_resumed: ResumedHandler,
    ) -> None:
        self.period = period
        self.allowed_misses = allowed_misses
        self.grace = grace
        self.on_failed = on_failed
        self.on_resumed = on_resumed
        self.missed: dict[Hashable, int] = {}
        self.since: dict[Hashable, float] = {}

    def _resume(self, key: Hashable, now: float) -> None:
        n = self.missed.pop(key)
        since = self.since.pop(key, None)
        if since is not None:
            self.on_resumed(key, n, now - since)


class HeapMonitor(_Outages):
    """Baseline 1: last-seen times in a dict, deadlines in a heap, re-armed lazily.

    ``beat`` is a clock read, a membership test, a state check (a beat ends an outage) and a dict
    store. ``tick(now)`` pops every deadline that has passed: a topic beaten since its deadline
    was set is re-armed from its last beat; one that was not counts a missed period, fails once
    ``allowed_misses`` are missed in a row, and is re-armed one period later.
    """

    def __init__(
        self,
        period: float = 1.0,
        allowed_misses: int = 1,
        grace: float = 0.0,
        on_failed: FailedHandler = _ignore,
        on_resumed: ResumedHandler = _ignore,
    ) -> None:
        super().__init__(period, allowed_misses, grace, on_failed, on_resumed)
        self.last: dict[Hashable, float] = {}
        self.heap: list[tuple[float, Hashable]] = []

    def __len__(self) -> int:
        return len(self.last)

    def add_many(self, keys: Iterable[Hashable], now: float | None = None) -> None:
        """Expect ``keys`` from ``now`` on (as if each had beaten then)."""
        now = time.monotonic() if now is None else now
        due = now + self.period + self.grace
        for key in keys:
            self.last[key] = now
            self.heap.append((due, key))
        heapq.heapify(self.heap)

    def beat(self, key: Hashable) -> bool:
        now = time.monotonic()
        if key not in self.last:
            return False
        if key in self.missed:  # the state check: a beat ends an outage
            self._resume(key, now)
        self.last[key] = now
        return True

    def beat_many(self, keys: Iterable[Hashable]) -> int:
        """The per-beat loop, inlined: one clock read for the batch."""
        now = time.monotonic()
        last, missed = self.last, self.missed
        recorded = 0
        for key in keys:
            if key in last:
                if key in missed:
                    self._resume(key, now)
                last[key] = now
                recorded += 1
        return recorded

    def tick(self, now: float | None = None) -> int:
        """Process every deadline before ``now``; returns how many periods were missed."""
        now = time.monotonic() if now is None else now
        heap, last, missed, since = self.heap, self.last, self.missed, self.since
        pop, push = heapq.heappop, heapq.heappush
        period, grace, allowed = self.period, self.grace, self.allowed_misses
        on_failed = self.on_failed
        count = 0
        while heap and heap[0][0] < now:
            deadline, key = pop(heap)
            seen = last.get(key)
            if seen is None:
                continue  # removed
            rearm = seen + period + grace
            if rearm > deadline:  # beaten since this deadline was set: lazy re-arm
                push(heap, (rearm, key))
                continue
            n = missed.get(key, 0) + 1
            missed[key] = n
            count += 1
            if n >= allowed:
                on_failed(key, n, since.setdefault(key, deadline), deadline)
            push(heap, (deadline + period, key))
        return count

    def run(self, stop: threading.Event, tick: float = 0.01) -> None:
        """Call :meth:`tick` every ``tick`` seconds until ``stop`` is set (a ticker thread)."""
        next_tick = time.monotonic()
        while not stop.is_set():
            self.tick()
            next_tick += tick
            delay = next_tick - time.monotonic()
            if delay > 0:
                stop.wait(delay)
            else:
                next_tick = time.monotonic()


class AsyncioMonitor(_Outages):
    """Baseline 2: one ``loop.call_at`` timer per topic, cancelled and re-armed on each beat.

    Call every method on the loop's thread (from elsewhere: ``loop.call_soon_threadsafe``).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        period: float = 1.0,
        allowed_misses: int = 1,
        grace: float = 0.0,
        on_failed: FailedHandler = _ignore,
        on_resumed: ResumedHandler = _ignore,
    ) -> None:
        super().__init__(period, allowed_misses, grace, on_failed, on_resumed)
        self.loop = loop
        self.timers: dict[Hashable, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return len(self.timers)

    def add_many(self, keys: Iterable[Hashable]) -> None:
        due = self.loop.time() + self.period + self.grace
        call_at, expire, timers = self.loop.call_at, self._expire, self.timers
        for key in keys:
            timers[key] = call_at(due, expire, key, due)

    def beat(self, key: Hashable) -> bool:
        timer = self.timers.get(key)
        if timer is None:
            return False
        timer.cancel()
        now = self.loop.time()
        if key in self.missed:  # a beat ends an outage
            self._resume(key, now)
        due = now + self.period + self.grace
        self.timers[key] = self.loop.call_at(due, self._expire, key, due)
        return True

    def beat_many(self, keys: Iterable[Hashable]) -> int:
        beat = self.beat
        return sum(beat(key) for key in keys)

    def _expire(self, key: Hashable, deadline: float) -> None:
        n = self.missed.get(key, 0) + 1
        self.missed[key] = n
        if n >= self.allowed_misses:
            self.on_failed(key, n, self.since.setdefault(key, deadline), deadline)
        due = deadline + self.period
        self.timers[key] = self.loop.call_at(due, self._expire, key, due)


class ThreadPerSubscriber:
    """Baseline 3: one thread per topic, sleeping until its deadline, then looking at the beat.

    Beats are stored in a shared dict (``beat``); each thread wakes at ``last + period + grace``
    (or one period after its previous deadline while nothing arrives) and compares.
    """

    def __init__(
        self,
        period: float = 1.0,
        allowed_misses: int = 1,
        grace: float = 0.0,
        on_failed: FailedHandler = _ignore,
        stack_size: int = 256 * 1024,
    ) -> None:
        self.period = period
        self.allowed_misses = allowed_misses
        self.grace = grace
        self.on_failed = on_failed
        self.stack_size = stack_size
        self.last: dict[Hashable, float] = {}
        self.stop_event = threading.Event()
        self.go = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, keys: Iterable[Hashable]) -> int:
        """Start one thread per key, each waiting for :meth:`release`; returns how many started
        (stops at the first failure)."""
        old = threading.stack_size(self.stack_size)
        try:
            now = time.monotonic()
            for key in keys:
                self.last[key] = now
                thread = threading.Thread(target=self._watch, args=(key,), daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # can't start new thread
                    del self.last[key]
                    break
                self.threads.append(thread)
        finally:
            threading.stack_size(old)
        return len(self.threads)

    def release(self) -> None:
        """Let the threads run: each sleeps until one period (plus grace) after its last beat."""
        self.go.set()

    def beat(self, key: Hashable) -> bool:
        if key not in self.last:
            return False
        self.last[key] = time.monotonic()
        return True

    def beat_many(self, keys: Iterable[Hashable]) -> int:
        now = time.monotonic()
        last = self.last
        recorded = 0
        for key in keys:
            if key in last:
                last[key] = now
                recorded += 1
        return recorded

    def _watch(self, key: Hashable) -> None:
        self.go.wait()
        period, grace, last, stop = self.period, self.grace, self.last, self.stop_event
        deadline = last[key] + period + grace
        missed = 0
        since = 0.0
        sleep, monotonic = time.sleep, time.monotonic
        while True:
            delay = deadline - monotonic()
            if delay > 0:
                sleep(delay)
            if stop.is_set():
                return
            rearm = last[key] + period + grace
            if rearm > deadline:
                missed = 0
                deadline = rearm
                continue
            missed += 1
            if missed == 1:
                since = deadline
            if missed >= self.allowed_misses:
                self.on_failed(key, missed, since, deadline)
            deadline += period

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        end = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, end - time.monotonic()))


class ThreadPerPublisher:
    """Baseline 3 for publishers: one thread per publisher, sleeping until its next slot.

    Each thread keeps a fixed rate (slot ``t0 + k * period``) and calls ``send(key, slot)``.
    """

    def __init__(
        self, period: float, send: Callable[[Any, float], object], stack_size: int = 256 * 1024
    ) -> None:
        self.period = period
        self.send = send
        self.stack_size = stack_size
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, keys: Iterable[Any], first_slot: Callable[[int], float]) -> int:
        """Start one thread per key, all waiting; then release them, the i-th thread started
        with its first slot at ``first_slot(i)`` (called once every thread is up)."""
        old = threading.stack_size(self.stack_size)
        go = threading.Event()
        slots: list[float] = []
        try:
            for i, key in enumerate(keys):
                thread = threading.Thread(target=self._run, args=(key, i, go, slots), daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # can't start new thread
                    break
                self.threads.append(thread)
        finally:
            threading.stack_size(old)
        slots.extend(first_slot(i) for i in range(len(self.threads)))
        go.set()
        return len(self.threads)

    def _run(self, key: Any, i: int, go: threading.Event, slots: list[float]) -> None:
        go.wait()
        slot = slots[i]
        period, stop, send = self.period, self.stop_event, self.send
        sleep, monotonic = time.sleep, time.monotonic
        while True:
            delay = slot - monotonic()
            if delay > 0:
                sleep(delay)
            if stop.is_set():
                return
            send(key, slot)
            slot += period
            now = time.monotonic()
            if slot <= now:  # behind by a whole period: skip the missed slots, no burst
                slot += period * (int((now - slot) / period) + 1)

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        end = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, end - time.monotonic()))


def load_pypi_phi() -> type | None:
    """``PhiAccrualFailureDetector`` from PyPI's ``phi-accrual-failure-detector``, or None.

    The distribution installs its modules in a directory named ``phi-accrual-failure-detector``
    (not an importable package) that imports its siblings as top-level modules, so that directory
    goes on ``sys.path``.
    """
    for entry in list(sys.path):
        folder = Path(entry) / "phi-accrual-failure-detector"
        if (folder / "phi_accrual_failure_detector.py").is_file():
            if str(folder) not in sys.path:
                sys.path.append(str(folder))
            try:
                module = importlib.import_module("phi_accrual_failure_detector")
            except ImportError:
                return None
            return module.PhiAccrualFailureDetector  # type: ignore[no-any-return]
    return None
