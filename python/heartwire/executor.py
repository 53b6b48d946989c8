"""The publishers' executor: every publisher of a process on one thread per clock.

Publishers do not own threads. Each running publisher is a *task* with an integer key on a
:class:`PublisherExecutor`, which keeps the next deadline of every key in the native core's
deadline queue (:class:`heartwire._core.DeadlineQueue`, on the timer wheel) and has one thread,
the *scheduler thread*, pop due keys (waiting with the GIL released) and run each task. Ten
thousand publishers therefore cost ten thousand wheel entries, not ten thousand threads.

There is one shared executor per clock (:func:`shared_executor`): one for the real clock, one
for each :class:`~heartwire.ManualClock` in use. Its thread starts when the first task is added and
ends soon after the last one is removed. On the real clock the core's driver thread (Rust, never
holding the GIL) moves the wheel every ``tick``; with a manual clock, ``clock.advance()`` does, and
:meth:`PublisherExecutor.drain` waits until every task due by then has run::

    clock.advance(1.0)
    shared_executor(clock).drain()

Slow work (a dependent publisher's check, a payload callable, a network call) never runs on
the scheduler thread: it is :meth:`PublisherExecutor.submit` ted to a pool of check threads, and
the pool cannot be held hostage by work that hangs. It keeps ``check_threads`` threads (started
on demand, ended after 10 s idle). When the oldest queued job has waited ``stall`` seconds (real
time) for a thread while some thread has been running one job for ``stall`` or more (a hung or
slow check, not just a burst of quick ones, which the pool works through), it starts a thread
for every job waiting, up to twice the stalled threads (at least ``check_threads``) at a time,
at most once per ``stall`` and never more than ``max_check_threads`` (64 by default) in all;
the scheduler thread starts one of them, which starts the next, and so on (a thread start can
take milliseconds under load).
A job its owner gives up on (:meth:`PublisherExecutor.abandon`, when a check passes its time
limit) is no longer waited for by :meth:`~PublisherExecutor.drain` and, if it had not started,
leaves the queue at once and never runs (so a publisher whose checks keep waiting for a thread
has one job queued, not one per beat); one that is running keeps its thread until it returns
(Python cannot stop a thread). So a hung check costs one thread, for as long as it hangs, and
other jobs never wait behind it for more than ``stall``. A publisher keeps at most two jobs in
flight: its beat's check (or payload) and the delivery of its events to its listeners, so a
hung check and a hung listener hold at most two threads per publisher.

A thread costs a process id (counted against a container's pids limit or ``ulimit -u``), a stack
(8 MiB of address space by default, ~20 KiB resident for a check hung a few frames deep) and a
start that, under load, takes milliseconds. Past ``max_check_threads`` hung checks, other
dependent publishers' checks wait for a thread and their beats fail ("timed out ... waiting for a
check thread") until one returns: give checks their own timeouts (the stock ones have one). A
thread that cannot start (``can't start new thread``) is logged (throttled) and counted in
``stats()["spawn_failures"]``, and the pool tries again later; the jobs wait meanwhile. Nothing a
round of the scheduler thread raises ends that thread: it is logged and counted.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable

from heartwire import _core, _validate
from heartwire._exit import Running
from heartwire._throttle import Throttle

__all__ = ["Job", "PublisherExecutor", "Task", "shared_executor"]

log = logging.getLogger("heartwire.executor")

#: A task: called with the deadline it was due at (seconds on the executor's clock).
Task = Callable[[float], None]

# Key 0 is never a task: scheduled at time 0 it is due at once, and wakes the thread.
_WAKE = 0
# Popped deadlines come back through the core's nanoseconds: compare with this tolerance.
_SAME_DEADLINE = 1e-6
# How long the scheduler thread waits for due keys before looking whether it should end.
_IDLE_WAIT = 1.0
# Check threads end after this long without work.
_CHECK_IDLE = 10.0
# Seconds the oldest job may wait for a check thread before the pool adds threads.
_STALL = 0.05
# After a check thread failed to start, seconds before the pool tries again.
_SPAWN_RETRY = 0.5


class _CheckPool:
    """Check threads for jobs: ``size`` on demand, more when the queue stalls (module docs)."""

    def __init__(self, size: int, max_threads: int, stall: float, name: str) -> None:
        self._size = size
        self._max = max_threads
        self._stall = stall
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        # Waiting jobs, oldest first: their key -> (queued at, job); discard() drops one.
        self._jobs: OrderedDict[object, tuple[float, Callable[[], None]]] = OrderedDict()
        self._threads = 0
        self._idle = 0  # threads waiting for a job
        self._starting = 0  # threads counted, not yet running (see _spawn): each takes a job
        self._busy: dict[int, float] = {}  # thread ident -> when its running job started
        self._started = 0
        self._grown_at = -math.inf
        self._retry_at = -math.inf  # after a thread failed to start: no new one before this
        self._spawn_failures = 0
        self._log_spawn = Throttle(log, logging.ERROR)
        self._closed = False

    def _spawn(self, n: int) -> None:
        """Start ``n`` threads (already counted in ``_threads``): one here, which starts the
        next before it takes a job, and so on. A thread start takes milliseconds under load
        (the new thread must get the GIL); so the caller, often the scheduler thread every
        publisher shares, pays for one, however many the pool adds.

        A thread that cannot start (``RuntimeError: can't start new thread``: a pids limit,
        memory) is uncounted with the ones it would have started, logged (throttled) and
        counted in ``spawn_failures``; the pool tries again after ``_SPAWN_RETRY`` seconds
        (:meth:`rebalance`). Never raises."""
        if n <= 0:
            return
        try:
            with self._cond:
                self._started += 1
                name = f"{self._name}-check-{self._started}"
            threading.Thread(target=self._work, args=(n - 1,), name=name, daemon=True).start()
        except Exception as exc:
            with self._cond:
                self._threads -= n
                self._starting -= n
                self._spawn_failures += 1
                self._retry_at = time.monotonic() + _SPAWN_RETRY
                threads, waiting = self._threads, len(self._jobs)
            self._log_spawn(
                "%s: could not start a check thread (%r); %d running, %d jobs waiting; "
                "retrying in %g s",
                self._name,
                exc,
                threads,
                waiting,
                _SPAWN_RETRY,
            )

    def submit(self, key: object, job: Callable[[], None]) -> None:
        """Queue ``job`` under ``key`` (unique among waiting jobs; see :meth:`discard`)."""
        with self._cond:
            self._jobs[key] = (time.monotonic(), job)
            spawn = len(self._jobs) > self._idle + self._starting and self._threads < self._size
            if spawn:
                self._threads += 1
                self._starting += 1
            else:
                self._cond.notify()
        if spawn:
            self._spawn(1)

    def discard(self, key: object) -> bool:
        """Drop the waiting job queued under ``key``; False if no job waits under it."""
        with self._cond:
            return self._jobs.pop(key, None) is not None

    def rebalance(self) -> float | None:
        """Add threads if the oldest job has waited ``stall``; seconds until the next look
        (None: nothing waits)."""
        now = time.monotonic()
        with self._cond:
            if not self._jobs:
                return None
            if now < self._retry_at:
                return self._retry_at - now  # a thread failed to start lately
            waiting = len(self._jobs) - self._idle - self._starting  # no thread coming for them
            if waiting > 0 and self._threads < self._size:
                # Below `size` with jobs waiting happens only after a thread failed to start.
                n = min(waiting, self._size - self._threads)
            else:
                waited = now - next(iter(self._jobs.values()))[0]
                if waited < self._stall:
                    return self._stall - waited
                if now - self._grown_at < self._stall:
                    return self._grown_at + self._stall - now
                stalled = sum(now - since >= self._stall for since in self._busy.values())
                if not stalled:
                    return self._stall  # busy with quick jobs: the queue drains at its pace
                # Jobs wait behind hung or slow ones: a thread for each, at most twice as many
                # as there are stalled threads (or `size`) at a time.
                n = min(waiting, max(self._size, 2 * stalled), self._max - self._threads)
                if n <= 0:
                    return self._stall
                self._grown_at = now
            self._threads += n
            self._starting += n
        self._spawn(n)
        return self._stall

    def _work(self, more: int = 0) -> None:
        """A check thread: starts ``more`` more (see :meth:`_spawn`), then runs jobs until it
        has been idle ``_CHECK_IDLE`` seconds or the pool is closed."""
        starting = True
        try:
            self._spawn(more)
            while True:
                with self._cond:
                    if starting:  # idle from now on, in the same step (see rebalance)
                        self._starting -= 1
                        starting = False
                    self._idle += 1
                    until = time.monotonic() + _CHECK_IDLE
                    while not self._jobs and not self._closed:
                        left = until - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    self._idle -= 1
                    if not self._jobs:  # idle too long, or closed
                        return
                    _, (_, job) = self._jobs.popitem(last=False)
                    me = threading.get_ident()
                    self._busy[me] = time.monotonic()
                try:
                    job()  # (PublisherExecutor._run_job: raises nothing)
                finally:
                    with self._cond:
                        del self._busy[me]
        finally:
            # However the thread ends; one that died is replaced by rebalance() if jobs wait.
            with self._cond:
                self._threads -= 1
                if starting:
                    self._starting -= 1

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def spawn_failures(self) -> int:
        return self._spawn_failures

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


_QUEUED, _RUNNING, _ABANDONED, _DONE = "queued", "running", "abandoned", "done"


class Job:
    """A job handed to the check threads by :meth:`PublisherExecutor.submit`."""

    __slots__ = ("fn", "held", "loop", "orphaned", "state")

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        #: ``"queued"``, ``"running"``, ``"abandoned"`` (given up on) or ``"done"``.
        self.state = _QUEUED
        #: Run elsewhere, holding no thread (:meth:`PublisherExecutor.hold`).
        self.held = False
        #: The event loop a held job runs on, if any.
        self.loop: asyncio.AbstractEventLoop | None = None
        #: A held job abandoned while running, not finished yet (``abandoned_held``).
        self.orphaned = False

    def __repr__(self) -> str:
        return f"<Job {self.fn!r} {self.state}>"


class PublisherExecutor:
    """Runs publishers' tasks at their deadlines on one thread, and their slow work on a pool of
    check threads (see the module docs).

    Usually obtained with :func:`shared_executor`; a private one (for isolation) works the same.
    ``check_threads`` threads run slow work (jobs and blocking tasks) as a rule; when the oldest
    job has waited ``stall`` seconds for one, the pool grows, up to ``max_check_threads``.
    """

    def __init__(
        self,
        clock: _core.ManualClock | None = None,
        *,
        resolution: float = 0.001,
        tick: float = 0.01,
        check_threads: int = 4,
        max_check_threads: int = 64,
        stall: float = _STALL,
        name: str = "heartwire-publishers",
    ) -> None:
        if clock is not None and not isinstance(clock, _core.ManualClock):
            raise TypeError(f"clock must be a ManualClock or None, got {type(clock).__name__}")
        check_threads = _validate.count(check_threads, "check_threads", 1)
        max_check_threads = _validate.count(max_check_threads, "max_check_threads", 1)
        if max_check_threads < check_threads:
            raise ValueError(
                f"max_check_threads must be >= check_threads ({check_threads}), "
                f"got {max_check_threads}"
            )
        stall = _validate.seconds(stall, "stall")
        self.clock = clock
        self.name = name
        self._deadlines = _core.DeadlineQueue(clock, resolution, tick)
        self._deadlines.stop()  # the driver runs only while there are tasks
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._tasks: dict[int, tuple[Task, bool]] = {}
        self._armed: dict[int, float] = {}  # key -> the deadline it is scheduled at
        self._free: list[int] = []
        self._next_key = _WAKE + 1
        self._thread: threading.Thread | None = None
        # drain() handshake: requests made, the request seen when the thread popped the wake
        # key, and the one it has since completed (found nothing more due).
        self._requested = 0
        self._wake_seen = 0
        self._completed = 0
        self._pool = _CheckPool(check_threads, max_check_threads, float(stall), name)
        self._pool_inflight = 0  # jobs submitted, not finished and not abandoned
        self._pool_done = 0
        self._abandoned_running = 0  # abandoned jobs still holding a thread
        self._abandoned_held = 0  # abandoned held jobs not finished (a check ignoring cancel)
        # Running held jobs per event loop: drain() on that loop's thread would wait for them
        # while blocking the only thread that can run them.
        self._held_on: dict[asyncio.AbstractEventLoop, int] = {}
        self._closed = False
        self._ran = 0
        self._errors = 0
        self._log_round = Throttle(log, logging.ERROR)

    # -- tasks ------------------------------------------------------------------------------

    def add(self, task: Task, *, blocking: bool = False) -> int:
        """Register ``task`` and return its key (not scheduled yet: see :meth:`schedule`).

        A ``blocking`` task runs on a check thread instead of the scheduler thread (as a
        :meth:`submit` ted job). A key is never run by two threads at once unless the task is
        rescheduled while it runs. Tasks that are not blocking must return quickly: every task
        of the executor waits while one runs. :class:`RuntimeError` if the scheduler thread
        is needed and cannot start (nothing is registered then).
        """
        if not callable(task):
            raise TypeError(f"task must be callable, got {type(task).__name__}")
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name}: the executor is closed")
            key = self._free.pop() if self._free else self._next_key
            if key == self._next_key:
                self._next_key += 1
            self._tasks[key] = (task, bool(blocking))
            if self._thread is None:
                self._deadlines.start()
                thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                try:
                    thread.start()  # (it waits for this lock before it looks at _thread)
                except Exception as exc:
                    # Registered nothing, and the next add() tries again: a thread object
                    # that never started must not pass for the running thread.
                    self._deadlines.stop()
                    del self._tasks[key]
                    self._free.append(key)
                    raise RuntimeError(
                        f"{self.name}: could not start the scheduler thread: {exc}"
                    ) from exc
                self._thread = thread
        return key

    def remove(self, key: int) -> None:
        """Unregister ``key`` (cancelling its deadline); it may be reused. Idempotent."""
        with self._lock:
            if self._tasks.pop(key, None) is None:
                return
            self._armed.pop(key, None)
            self._deadlines.cancel(key)
            self._free.append(key)
            last = not self._tasks
        if last:
            self._wake()  # let the thread see it has nothing left to do

    def schedule(self, key: int, at: float) -> None:
        """Run ``key``'s task once the clock reaches ``at`` (replacing its pending deadline).

        Does nothing once the executor is closed; :class:`KeyError` for a key not registered.
        """
        with self._lock:
            if self._closed:
                return
            if key not in self._tasks:
                raise KeyError(f"key {key} is not a task of this executor")
            self._armed[key] = at
            self._deadlines.schedule(key, max(at, 0.0))

    def cancel(self, key: int) -> bool:
        """Drop ``key``'s pending deadline; False if it had none."""
        with self._lock:
            had = self._armed.pop(key, None) is not None
            self._deadlines.cancel(key)
        return had

    def submit(self, fn: Callable[[], object]) -> Job:
        """Run ``fn()`` on a check thread (see the module docs); returns its :class:`Job`.

        :meth:`drain` waits for it unless it is :meth:`abandon` ed. An exception it raises is
        logged and counted in ``stats()["errors"]``. Once the executor is closed the job is
        abandoned at once and never runs.
        """
        job = Job(fn)
        with self._lock:
            if self._closed:
                job.state = _ABANDONED
                return job
            self._pool_inflight += 1
        self._pool.submit(job, functools.partial(self._run_job, job))
        return job

    def hold(self, what: object = None, loop: asyncio.AbstractEventLoop | None = None) -> Job:
        """A job that runs elsewhere, holding no check thread (a coroutine check awaited on
        ``loop``): counted as running, so :meth:`drain` waits for it, until :meth:`finish`;
        :meth:`abandon` gives up on it as on any running job (one abandoned and not finished
        yet, a check that ignores its cancellation, is counted in ``stats()["abandoned_held"]``).
        :meth:`drain` called on ``loop``'s thread meanwhile raises. Abandoned at once if the
        executor is closed."""
        job = Job(lambda: what)
        job.held = True
        job.loop = loop
        with self._cond:
            if self._closed:
                job.state = _ABANDONED
                return job
            job.state = _RUNNING
            self._pool_inflight += 1
            if loop is not None:
                self._held_on[loop] = self._held_on.get(loop, 0) + 1
                self._cond.notify_all()  # a drain() on that loop's thread must see it
        return job

    def _unhold(self, job: Job) -> None:
        """A running held job stops being waited for (lock held)."""
        loop = job.loop
        if loop is not None:
            left = self._held_on.get(loop, 0) - 1
            if left > 0:
                self._held_on[loop] = left
            else:
                self._held_on.pop(loop, None)

    def finish(self, job: Job) -> None:
        """A :meth:`hold` job ended (idempotent; nothing for another job)."""
        with self._cond:
            if not job.held or job.state == _DONE:
                return
            if job.state == _RUNNING:
                self._pool_inflight -= 1
                self._pool_done += 1
                self._unhold(job)
            elif job.orphaned:
                job.orphaned = False
                self._abandoned_held -= 1
            job.state = _DONE
            self._cond.notify_all()

    def abandon(self, job: Job) -> str:
        """Give up on ``job``: :meth:`drain` stops waiting for it and, if no thread has taken it
        yet, it leaves the queue and never runs; a running one keeps its thread until it
        returns. Returns the state it was found in: ``"queued"`` (it will never run),
        ``"running"``, ``"done"`` or ``"abandoned"`` (nothing changes). Idempotent."""
        with self._cond:
            found = job.state
            if found not in (_QUEUED, _RUNNING):
                return found
            if found == _RUNNING:
                if not job.held:  # (a held job holds no thread)
                    self._abandoned_running += 1
                else:
                    job.orphaned = True
                    self._abandoned_held += 1
                    self._unhold(job)
            else:  # out of the pool's queue at once: each replaced job would pile up there
                self._pool.discard(job)
            job.state = _ABANDONED
            self._pool_inflight -= 1
            self._cond.notify_all()
        return found

    def now(self) -> float:
        """The executor clock's reading, seconds (``time.monotonic()``'s frame, or manual)."""
        return self._deadlines.now()

    def __len__(self) -> int:
        """Registered tasks."""
        return len(self._tasks)

    # -- the thread -------------------------------------------------------------------------

    def _wake(self) -> None:
        self._deadlines.schedule(_WAKE, 0.0)

    def _run(self) -> None:
        # This thread serves every publisher of the process: whatever a round raises, it is
        # logged (throttled), counted in stats()["errors"], and the thread goes on.
        while True:
            try:
                if not self._round():
                    return
            except BaseException as exc:
                with self._lock:
                    self._errors += 1
                self._log_round("%s: a scheduler round raised %r", self.name, exc, exc_info=True)
                time.sleep(_STALL)  # not a busy loop if it keeps raising

    def _round(self) -> bool:
        """Run the tasks due now (or wait a while for some); False once the thread must end."""
        deadlines = self._deadlines
        look = self._pool.rebalance()  # add check threads if jobs wait behind busy ones
        batch = deadlines.try_pop(1024)
        if not batch:
            with self._cond:
                if self._completed != self._wake_seen:
                    self._completed = self._wake_seen
                    self._cond.notify_all()
                if self._closed or not self._tasks:
                    self._deadlines.stop()
                    self._thread = None
                    return False
            wait = _IDLE_WAIT if look is None else min(_IDLE_WAIT, look)
            batch = deadlines.pop(1024, timeout=wait)
            if not batch:
                return True
        self._run_batch(batch)
        return True

    def _run_batch(self, batch: list[tuple[int, float]]) -> None:
        due: list[tuple[Task, bool, float]] = []
        with self._lock:
            for key, deadline in batch:
                if key == _WAKE:
                    self._wake_seen = self._requested
                    continue
                armed = self._armed.get(key)
                # A key popped after it was cancelled or rescheduled is stale: skip it.
                if armed is None or abs(armed - deadline) > _SAME_DEADLINE:
                    continue
                del self._armed[key]
                task, blocking = self._tasks[key]
                due.append((task, blocking, armed))
        ran = errors = 0
        for task, blocking, deadline in due:
            if blocking:
                self.submit(functools.partial(task, deadline))
            else:
                ran += 1
                errors += not self._call(task, deadline)
        if ran:
            with self._lock:
                self._ran += ran
                self._errors += errors

    @staticmethod
    def _call(task: Task, deadline: float) -> bool:
        try:
            task(deadline)
        except BaseException:  # (SystemExit too: it must not end the thread every task shares)
            log.exception("publisher task %r raised", task)
            return False
        return True

    def _run_job(self, job: Job) -> None:
        with self._lock:
            if job.state != _QUEUED:
                return  # abandoned before a thread took it
            job.state = _RUNNING
        ok = False
        try:
            job.fn()
            ok = True
        except BaseException:  # (SystemExit too: the check thread goes on to the next job)
            log.exception("publisher job %r raised", job.fn)
        finally:
            with self._cond:
                self._ran += 1
                self._errors += not ok
                if job.state == _ABANDONED:
                    self._abandoned_running -= 1
                else:
                    self._pool_inflight -= 1
                    self._pool_done += 1
                job.state = _DONE
                self._cond.notify_all()

    # -- waiting and closing ----------------------------------------------------------------

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every task due so far has run (blocking ones and submitted jobs included,
        abandoned jobs not). False on timeout.

        With a manual clock, after ``clock.advance(dt)`` this returns once every beat due by the
        new time has been sent. Calling it from a task (on the scheduler thread) raises
        :class:`RuntimeError`; so does calling it on the thread of an event loop that runs a
        coroutine check it would wait for (the check can only go on once this returns): use
        :meth:`adrain` there.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("drain() called from the scheduler thread would wait for itself")
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None

        def self_wait() -> bool:  # (lock held)
            return here is not None and here in self._held_on

        until = time.monotonic() + timeout
        while True:
            with self._cond:
                if self_wait():
                    raise self._self_wait_error()
                if self._thread is None and self._pool_inflight == 0:
                    return True
                self._requested += 1
                request = self._requested
                done_before = self._pool_done
            self._wake()  # the thread pops it after everything due so far, then reports back

            def settled(request: int = request) -> bool:
                thread_done = self._completed >= request or self._thread is None
                return thread_done and self._pool_inflight == 0

            with self._cond:
                # A check held on this thread's loop while waiting (its beat came due): the
                # wait would last its whole timeout, so it ends at once.
                if not self._cond.wait_for(
                    lambda: settled() or self_wait(), max(0.0, until - time.monotonic())
                ):
                    return False
                if self_wait():
                    raise self._self_wait_error()
                if self._pool_done == done_before:
                    return True
            # Blocking tasks finished meanwhile and may have rescheduled: one more pass.

    def _self_wait_error(self) -> RuntimeError:
        return RuntimeError(
            f"{self.name}: drain() called on the thread of the event loop running a coroutine "
            f"check would wait for that check, which cannot run while this blocks the loop: "
            f"`await executor.adrain()` instead"
        )

    async def adrain(self, timeout: float = 5.0) -> bool:
        """:meth:`drain` on a worker thread, for a coroutine: the loop goes on meanwhile, so
        the coroutine checks it runs can finish."""
        return await asyncio.to_thread(self.drain, timeout)

    def stats(self) -> dict[str, int]:
        """``tasks``, ``scheduled`` (with a pending deadline), ``ran``, ``errors`` (tasks and
        jobs that raised, and scheduler rounds that raised), ``check_threads`` (running now),
        ``jobs`` (submitted, not finished nor abandoned), ``abandoned`` (abandoned jobs still
        holding a thread), ``abandoned_held`` (coroutine checks given up on, cancelled, and
        still running on their loop: they ignore the cancellation), ``spawn_failures`` (check
        threads that could not be started)."""
        return {
            "tasks": len(self._tasks),
            "scheduled": len(self._armed),
            "ran": self._ran,
            "errors": self._errors,
            "check_threads": self._pool.threads,
            "jobs": self._pool_inflight,
            "abandoned": self._abandoned_running,
            "abandoned_held": self._abandoned_held,
            "spawn_failures": self._pool.spawn_failures,
        }

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Stop running tasks and end the threads (without joining them); idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._tasks.clear()
            self._armed.clear()
        self._deadlines.close()
        self._pool.close()

    def __repr__(self) -> str:
        clock = "real clock" if self.clock is None else "manual clock"
        return f"<PublisherExecutor {self.name!r} on the {clock}, {len(self._tasks)} tasks>"


_shared_lock = threading.Lock()
_real: PublisherExecutor | None = None
_manual: weakref.WeakValueDictionary[int, PublisherExecutor] = weakref.WeakValueDictionary()
# The shared executors, closed at interpreter exit after the publishers on them are stopped.
_shared: Running[PublisherExecutor] = Running(lambda sched: sched.close(), rank=1)


def shared_executor(clock: _core.ManualClock | None = None) -> PublisherExecutor:
    """The process's executor for ``clock`` (None: the real clock), created on first use.

    A manual clock's executor lives as long as something (a publisher, the caller) holds it.
    """
    global _real
    with _shared_lock:
        if clock is None:
            if _real is None or _real.closed:
                _real = PublisherExecutor(name="heartwire-publishers")
                _shared.add(_real)
            return _real
        if not isinstance(clock, _core.ManualClock):
            raise TypeError(f"clock must be a ManualClock or None, got {type(clock).__name__}")
        sched = _manual.get(id(clock))
        if sched is None or sched.closed or sched.clock is not clock:
            sched = PublisherExecutor(clock, name="heartwire-publishers-manual")
            _manual[id(clock)] = sched
            _shared.add(sched)
        return sched
