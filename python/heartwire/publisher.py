"""Heartbeat publishers: a beat to a topic every period, on a shared executor.

::

    pub = HeartbeatPublisher(broker, "prices.feed", period=1.0, dependency=checks.tcp("db", 5432))
    pub.start()            # first beat at once, then one every period
    ...
    pub.stop()

A publisher owns no thread: running publishers are tasks of the shared
:class:`~heartwire.executor.PublisherExecutor` of their clock, so ten thousand of them use a
handful of threads. Beats are sent on the executor's scheduler thread (or, for publishers with
slow work, on one of its check threads). Listener methods are never called on the scheduler
thread (nor on a transport's, for ``on_disconnected``, ``on_reconnected`` and
``reconnect_failed``): each
publisher's events go through its own queue (:data:`EVENT_QUEUE` deep; when full, the oldest
``on_sent`` or ``on_exception`` is dropped and counted in ``stats()["events_dropped"]``, never
``on_started`` or ``on_stopped``) and are delivered in order, one at a time,
on a check thread, or by ``start()``/``stop()`` themselves when nothing is queued (so
``on_started`` and ``on_stopped`` are then called before they return). A listener that hangs
holds one check thread and delays only its own publisher's events.

Slow work (the ``dependency`` check and a ``payload`` callable) never runs on the scheduler
thread, which every publisher shares: at each beat it is handed to the executor's check threads,
at most one job in flight per publisher, with a time limit (``timeout``). A job past its limit is
a failed beat (``check_failed``, or ``payload_failed``, detail "... timed out after ... s") and is
abandoned: its result, whenever it comes, is dropped. While it still runs, each beat due is
another such failure and no second job is started, so a hung check holds one thread, never more,
and other publishers' beats do not wait for it.

Each beat is a JSON :class:`~heartwire.beat.Beat` with the topic, a sequence number (1 for the
first beat put on the wire, +1 for each one after, failed sends included, so monitors see lost
beats as gaps), the publisher's boot id (a fresh uuid4 for each publisher object), the wall time
it was sent, the period and the payload.

Beats keep a fixed rate on the executor's clock: the beat due at ``t`` is followed by the one due
at ``t + period``. A publisher that falls behind by a whole period or more (a stalled process, a
manual clock moved several periods at once) sends one beat, late, and then goes on at the first
slot after the present: it skips the beats it missed instead of sending a burst. So on a
:class:`~heartwire.ManualClock`, advance by at most one period at a time to see every beat.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import math
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from heartwire import _core, _validate
from heartwire._exit import Running
from heartwire.aio import LoopCheck
from heartwire.beat import MAX_REASON_LEN, Beat, BeatCodec
from heartwire.checks import CheckFailed, _callable_name
from heartwire.control import RESERVED_PREFIX
from heartwire.events import ExceptionEvent, Sent, Started, Stopped
from heartwire.executor import Job, PublisherExecutor, shared_executor
from heartwire.listeners import ConnectionEvents, ListenerSet, PublisherListener
from heartwire.transport import ShardedPublish, Transport
from heartwire.transport.patterns import validate_topic
from heartwire.transport.shards import ShardLayout

__all__ = ["CHECK_GRACE", "EVENT_QUEUE", "MIN_PERIOD", "SHARD_TTL_PERIODS", "HeartbeatPublisher"]

#: A sharded publisher's default ``ttl``, in periods: a beat older than that is worth nothing
#: to the member that reads the shard queue late (after a takeover, or none running).
SHARD_TTL_PERIODS = 10

#: The shortest period accepted, seconds (the executor's resolution).
MIN_PERIOD = 0.001

_STOPPED, _RUNNING, _PAUSED = "stopped", "running", "paused"

#: Events a publisher keeps for its listeners while one of them is slow.
EVENT_QUEUE = 1000
# The events a full queue drops, oldest first: a beat's outcome, which the next beat supersedes.
_DROPPABLE = frozenset({"on_sent", "on_exception"})
# Dropped from a full queue after beat events, before on_started / on_stopped.
_CONNECTION = frozenset({"on_disconnected", "on_reconnected"})

#: Added to a dependency's own ``timeout`` for the default time limit, so that a stock check
#: reports its own timeout before the publisher gives up on it.
CHECK_GRACE = 0.25

# How _emit delivers: on the calling thread, in a check-thread job, or later by the caller.
_INLINE, _JOB, _LATER = "inline", "job", "later"
# A beat's slow work (_Attempt.state): running; past its limit (given up on); finished.
_WORKING, _TIMED_OUT, _FINISHED = "working", "timed out", "finished"
# Deadlines on the executor's clock come back through nanoseconds.
_EPS = 1e-6


class _Attempt:
    """One beat's slow work (check, payload) on a check thread."""

    __slots__ = ("check", "generation", "job", "reported", "stage", "started", "state")

    def __init__(self, generation: int, started: float) -> None:
        self.generation = generation
        self.started = started  # on the executor's clock
        self.stage = "check"  # then "payload"
        self.state = _WORKING
        self.reported = -math.inf  # when its timeout was last reported (executor clock)
        self.job: Job | None = None
        self.check: LoopCheck | None = None  # a coroutine check awaited on the loop


def _name(obj: object, limit: int = 200) -> str:
    """A user callable's name for failure details, taken once: its qualified name (a stock
    check's repr), never its repr, which may show its state or a partial's arguments (a DSN and
    its password), be slow, raise or be huge."""
    try:
        text = _callable_name(obj)
    except Exception:
        text = f"<{type(obj).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reason(text: str) -> str:
    """``text`` fit for a beat's ``reason``: cut to :data:`~heartwire.beat.MAX_REASON_LEN`
    characters (``"..."`` at the end when cut), ``"down"`` if empty, lone surrogates escaped."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8") or "down"
    return text if len(text) <= MAX_REASON_LEN else text[: MAX_REASON_LEN - 3] + "..."


def _own_timeout(dependency: object) -> float | None:
    """A dependency's own ``timeout`` attribute (the stock checks'), if it is a usable one."""
    own = getattr(dependency, "timeout", None)
    if isinstance(own, bool) or not isinstance(own, (int, float)):
        return None
    return float(own) if own > 0 and math.isfinite(own) else None


def _is_coroutine_function(fn: object) -> bool:
    """Whether calling ``fn`` makes a coroutine (an ``async def``, or an object whose
    ``__call__`` is one)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - the method, not callable()
    )


#: What a beat's check ended with when it was awaited on a loop: (result, error, cancelled).
_Awaited = tuple[object, BaseException | None, bool]


class HeartbeatPublisher:
    """Publishes a heartbeat for ``topic`` to ``broker`` every ``period`` seconds once started.
    ``topic`` may not start with ``"_hw."`` (heartwire's own topics: no monitor takes them for
    beats).

    - ``dependency``: a callable run before each beat. ``False`` or an exception (any, even
      ``SystemExit``) means unhealthy: listeners get ``on_exception`` with reason
      ``"check_failed"``, and instead of the beat a *down* beat goes out
      (``"state":"down"``, see ``docs/explicit-failure.md``), whose ``reason`` is a
      :class:`~heartwire.checks.CheckFailed`'s reason (the stock checks'), ``"<check>
      returned False"``, or ``"<check>: <exception type>"`` for any other exception (its text
      stays local: it may hold a secret), cut to 256 characters. Monitors fail the topic at
      once. A check past its ``timeout`` is reported but sends no beat.
      Any other result (``True``, ``None``, ...) means healthy. See :mod:`heartwire.checks`.
      It may be a coroutine function (``async def``; or return an awaitable): it then runs on
      the event loop that was running when :meth:`start` was called (``async with pub``),
      where the resources it uses live (an aiohttp session, an asyncpg pool are bound to
      their loop), and no thread waits for it meanwhile; past ``timeout`` it is cancelled
      (a failed beat, "timed out"). One that ignores the cancellation is still the beat's
      check until it returns: each beat due meanwhile fails ("timed out, still running") and
      no second one starts (the executor counts it in ``stats()["abandoned_held"]``).
      Starting a publisher with an ``async def`` check with no loop running raises
      :class:`RuntimeError`; a check whose loop is closed fails its beats. See
      ``docs/asyncio.md``.
    - ``payload``: a JSON-able value sent with each beat, or a zero-argument callable evaluated
      for each beat (if it raises, the beat is not sent: reason ``"payload_failed"``).
    - ``timeout``: seconds the dependency check and the payload callable may take for one beat,
      together (see the module docs); past it the beat fails with detail "... timed out".
      Default: the period, or the dependency's own ``timeout`` (the stock checks have one)
      plus :data:`CHECK_GRACE` if that is longer.
    - ``ttl``: seconds the broker may keep an undelivered beat (the ``expires`` header, epoch
      milliseconds); ``persistent``: ask the broker to persist beats (``persistent: true``).
    - ``key``: a shared HMAC key; beats are then signed (see :class:`~heartwire.beat.BeatCodec`).
    - ``shards``: a :class:`~heartwire.groups.ShardLayout`: beats are sent where that monitor
      group consumes the topic's shard (the shard's queue on ActiveMQ; the topic, with a
      ``heartwire-shard`` header, on RabbitMQ and the embedded broker; see ``docs/shards.md``).
      ``ttl`` then defaults to :data:`SHARD_TTL_PERIODS` periods: a queue keeps the beats no
      member reads. The broker must offer ``publish_sharded`` (both transports do);
      :class:`TypeError` otherwise.
    - ``clock``: a :class:`~heartwire.ManualClock` to run on (tests, simulations); default the
      real clock.

    A send that raises is reported as ``on_exception`` with reason ``"send_failed"``; the
    publisher keeps its schedule. Bad arguments raise :class:`ValueError` (or
    :class:`TypeError`) naming the argument and its value.
    """

    def __init__(
        self,
        broker: Transport,
        topic: str,
        period: float = 1.0,
        *,
        dependency: Callable[[], object] | Callable[[], Awaitable[object]] | None = None,
        payload: Any = None,
        timeout: float | None = None,
        ttl: float | None = None,
        persistent: bool = False,
        listeners: Iterable[PublisherListener] = (),
        key: bytes | str | None = None,
        clock: _core.ManualClock | None = None,
        shards: ShardLayout | None = None,
    ) -> None:
        if not callable(getattr(broker, "publish", None)):
            raise TypeError(
                f"broker must be a transport with a publish method (see heartwire.connect), "
                f"got {type(broker).__name__} {broker!r}"
            )
        self._topic = validate_topic(topic, "topic")
        if self._topic.startswith(RESERVED_PREFIX):
            raise ValueError(
                f"topic {topic!r} is under {RESERVED_PREFIX!r}: heartwire's own topics (control "
                "messages, keep-alive pings) are never beats, no monitor would take these"
            )
        sharded: ShardedPublish | None = None  # the same broker, typed for publish_sharded
        if shards is not None:
            if not isinstance(shards, ShardLayout):
                raise TypeError(
                    f"shards must be a ShardLayout or None, got {type(shards).__name__} {shards!r}"
                )
            if not isinstance(broker, ShardedPublish) or not callable(broker.publish_sharded):
                raise TypeError(
                    f"shards={shards!r} needs a broker with publish_sharded (the STOMP and "
                    f"embedded transports), got {type(broker).__name__}"
                )
            sharded = broker
        self._shards = shards
        self._sharded = sharded
        self._period = _validate.seconds(period, "period", minimum=MIN_PERIOD)
        if dependency is not None and not callable(dependency):
            raise TypeError(f"dependency must be callable or None, got {type(dependency).__name__}")
        self._ttl = _validate.seconds(ttl, "ttl", allow_none=True)
        if shards is not None and self._ttl is None:
            # A shard queue keeps beats while no member reads it (a topic drops them): bounded.
            self._ttl = SHARD_TTL_PERIODS * self._period
        if timeout is None:
            own = _own_timeout(dependency)
            timeout = self._period if own is None else max(self._period, own + CHECK_GRACE)
        self._timeout = _validate.seconds(timeout, "timeout")
        if not isinstance(persistent, bool):
            raise TypeError(f"persistent must be a bool, got {type(persistent).__name__}")
        if clock is not None and not isinstance(clock, _core.ManualClock):
            raise TypeError(f"clock must be a ManualClock or None, got {type(clock).__name__}")
        self._codec = BeatCodec(key)
        if payload is not None and not callable(payload):
            try:
                self._codec.encode(Beat(self._topic, payload=payload))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"payload must be JSON-serializable, got {payload!r}") from exc
        self._broker = broker
        self._dependency: Callable[[], object] | None = dependency
        # The loop coroutine checks run on: the one running at start() (see dependency).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._payload = payload
        # Their names in failure details, taken here: never a user's repr on the shared thread.
        self._dependency_name = _name(dependency)
        self._payload_name = _name(payload) if callable(payload) else "payload"
        self._persistent = persistent
        self._listeners: ListenerSet[PublisherListener] = ListenerSet(
            PublisherListener, self._topic
        )
        for listener in listeners:
            self._listeners.add(listener)
        # Connection events come on the transport's thread: through the outbox, like the rest.
        self._connection_events = ConnectionEvents(self._listeners, self._connection_event)
        self._clock = clock
        self._boot_id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._state = _STOPPED
        self._executor: PublisherExecutor | None = None
        self._key: int | None = None
        self._slow = dependency is not None or callable(payload)
        self._watch: int | None = None  # the executor key of the time limit of _inflight
        self._inflight: _Attempt | None = None
        self._firing = False
        self._outbox: collections.deque[tuple[str, object]] = collections.deque()
        self._delivering = False  # a thread is delivering the outbox (or a job will)
        self._events_dropped = 0
        self._generation = 0
        self._next_at: float | None = None
        self._seq = 0
        self._sent = 0
        self._send_failures = 0
        self._check_failures = 0
        self._other_failures = 0
        self._down_sent = 0

    # -- properties -------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        """The topic beats are published to."""
        return self._topic

    @property
    def shards(self) -> ShardLayout | None:
        """The monitor group's shard layout beats are sent to (None: to the topic)."""
        return self._shards

    @property
    def period(self) -> float:
        """Seconds between beats."""
        return self._period

    @property
    def timeout(self) -> float:
        """Seconds the dependency check and payload callable may take for one beat."""
        return self._timeout

    @property
    def broker(self) -> Transport:
        """The transport beats are published through."""
        return self._broker

    @property
    def boot_id(self) -> str:
        """This publisher object's id (uuid4 hex), sent with every beat."""
        return self._boot_id

    @property
    def seq(self) -> int:
        """The sequence number of the last beat put on the wire (0 before the first)."""
        return self._seq

    @property
    def sent(self) -> int:
        """Up beats the broker accepted (down beats: ``stats()["down_sent"]``)."""
        return self._sent

    @property
    def running(self) -> bool:
        """Started and not stopped (also while paused)."""
        return self._state != _STOPPED

    @property
    def paused(self) -> bool:
        """Paused: running, but sending nothing until :meth:`resume`."""
        return self._state == _PAUSED

    @property
    def next_beat(self) -> float | None:
        """When the next beat is due on the executor's clock (None unless running, unpaused)."""
        return self._next_at if self._state == _RUNNING else None

    @property
    def executor(self) -> PublisherExecutor:
        """The executor this publisher runs on (its clock's shared one)."""
        if self._executor is None:
            self._executor = shared_executor(self._clock)
        return self._executor

    def stats(self) -> dict[str, int]:
        """Counters: ``sent`` (up beats on the wire, each with ``on_sent``), ``down_sent``
        (down beats on the wire: failed checks, :meth:`fail`; no ``on_sent``),
        ``send_failures``, ``check_failures``, ``other_failures`` (payload or encoding errors),
        ``listener_errors``, ``events_dropped`` (listener events dropped from a full queue)."""
        return {
            "sent": self._sent,
            "down_sent": self._down_sent,
            "send_failures": self._send_failures,
            "check_failures": self._check_failures,
            "other_failures": self._other_failures,
            "listener_errors": self._listeners.errors,
            "events_dropped": self._events_dropped,
        }

    def fail(self, reason: str) -> bool:
        """Say now that this publisher's service is failing: send one *down* beat with
        ``reason`` (1 to :data:`~heartwire.beat.MAX_REASON_LEN` characters), on this thread.
        Monitors fail the topic at once (``Failed.reason``), whatever their ``allowed_misses``.

        It is one beat, not a mode: the publisher's schedule goes on, and its next regular beat
        (if it is running and healthy) says up again, which resumes the topic. To stay down,
        stop the publisher after ``fail`` (the periods then count as missed, each reported with
        the reason) or call ``fail`` at each beat. Works whether or not the publisher is started.

        True if the beat went on the wire; a send that raises is reported (``on_exception``,
        ``"send_failed"``) and gives False. A bad ``reason`` raises :class:`ValueError` (or
        :class:`TypeError`).
        """
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, got {type(reason).__name__} {reason!r:.100}")
        if not 1 <= len(reason) <= MAX_REASON_LEN:
            raise ValueError(
                f"reason must be 1 to {MAX_REASON_LEN} characters, got {len(reason)}: "
                f"{reason!r:.60}"
            )
        return self._send(None, deliver=_JOB, state="down", reason=_reason(reason))

    # -- listeners --------------------------------------------------------------------------

    def add_listener(self, listener: PublisherListener) -> None:
        """Register a :class:`~heartwire.PublisherListener` (else :class:`TypeError`)."""
        self._listeners.add(listener)

    def remove_listener(self, listener: PublisherListener) -> bool:
        """Unregister ``listener``; False if it was not registered."""
        return self._listeners.remove(listener)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> HeartbeatPublisher:
        """Start beating (the first beat at once); returns self. Idempotent.

        Called on an event loop's thread (in a coroutine), its coroutine checks run on that
        loop; ``RuntimeError`` for an ``async def`` dependency with no loop running."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None and _is_coroutine_function(self._dependency):
            raise RuntimeError(
                f"publisher of {self._topic!r}: its dependency {self._dependency_name} is a "
                f"coroutine function, which runs on the event loop running when start() is "
                f"called: start it from a coroutine (`async with publisher:` or "
                f"`publisher.start()` in an async def)"
            )
        with self._lock:
            if self._state != _STOPPED:
                return self
            self._loop = loop
            sched = shared_executor(self._clock)
            self._key = sched.add(self._fire)
            if self._slow:
                self._watch = sched.add(self._expire)
                attempt = self._inflight
                if attempt is not None and attempt.state == _WORKING:
                    # Work of the last run still going: its time limit still holds.
                    sched.schedule(self._watch, attempt.started + self._timeout)
            self._executor = sched
            self._state = _RUNNING
            self._generation += 1
            if self._listeners.wants("on_started"):  # queued ahead of the first beat's events
                self._outbox.append(("on_started", Started(self._topic)))
            self._next_at = sched.now()
            sched.schedule(self._key, self._next_at)
            _running.add(self)
        self._connection_events.attach(self._broker)
        self._deliver_queued()  # on this thread, unless a delivery is under way
        return self

    def pause(self) -> None:
        """Stop sending beats until :meth:`resume`, staying registered. Idempotent."""
        with self._lock:
            if self._state != _RUNNING:
                return
            self._state = _PAUSED
            assert self._executor is not None and self._key is not None
            self._executor.cancel(self._key)

    def resume(self) -> None:
        """Send a beat at once and then one every period again. Idempotent.

        A beat being made on another thread at that moment (its check still running) counts
        as the beat sent at once."""
        with self._lock:
            if self._state != _PAUSED:
                return
            self._state = _RUNNING
            assert self._executor is not None and self._key is not None
            now = self._executor.now()
            attempt = self._inflight
            busy = self._firing or (attempt is not None and attempt.state == _WORKING)
            if not busy or self._next_at is None:
                self._next_at = now
            self._executor.schedule(self._key, self._next_at)

    def stop(self) -> None:
        """Stop beating and leave the executor. Idempotent; joins no thread.

        A beat already being sent on another thread when this is called may still go out (its
        ``on_sent`` is not reported: ``on_stopped`` is a listener's last event until the next
        start); a check still running is left to finish on its thread, and its result is dropped.
        """
        with self._lock:
            if self._state == _STOPPED:
                return
            self._state = _STOPPED
            sched, key, watch = self._executor, self._key, self._watch
            self._key = self._watch = None
            self._next_at = None
            attempt = self._inflight
            assert sched is not None and key is not None
            # Its result will be dropped: drain() need not wait. Not started yet: it never will.
            job = None if attempt is None else attempt.job
            if job is not None and sched.abandon(job) == "queued":
                self._inflight = None
            _running.discard(self)
        if attempt is not None and attempt.check is not None:
            attempt.check.cancel()  # its result would be dropped: no need to let it run
        sched.remove(key)
        if watch is not None:
            sched.remove(watch)
        self._connection_events.detach(self._broker)
        self._emit("on_stopped", Stopped(self._topic), _INLINE)

    def __enter__(self) -> HeartbeatPublisher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> HeartbeatPublisher:
        """``async with``: :meth:`start` on the loop's thread (it is quick, and the loop
        running there is the one coroutine checks run on)."""
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        """:meth:`stop` on a worker thread (it calls ``on_stopped`` listeners)."""
        await asyncio.to_thread(self.stop)

    def __repr__(self) -> str:
        return (
            f"<HeartbeatPublisher {self._topic!r} every {self._period:g} s, {self._state}, "
            f"seq={self._seq}, sent={self._sent}>"
        )

    # -- beating ------------------------------------------------------------------------------

    def _fire(self, deadline: float) -> None:
        """A beat is due (on the scheduler thread: returns quickly, never runs slow work)."""
        overdue: tuple[str, BaseException, str] | None = None
        late: _Attempt | None = None
        with self._lock:
            if self._state != _RUNNING:
                return
            sched, key = self._executor, self._key
            assert sched is not None and key is not None
            now = sched.now()
            self._next_at = self._next_slot(deadline, now)
            sched.schedule(key, self._next_at)
            if not self._slow:
                self._firing = True
            else:
                attempt = self._inflight
                if attempt is not None:
                    # The last beat's work is still going: start no second job (one thread per
                    # publisher at most). Past its limit, this beat fails too.
                    in_time = (
                        attempt.state == _WORKING and now < attempt.started + self._timeout - _EPS
                    )
                    just_reported = attempt.state == _TIMED_OUT and now <= attempt.reported + _EPS
                    if attempt.state == _FINISHED or in_time or just_reported:
                        return  # within its limit, or sending: this slot is skipped
                    overdue = self._time_out(attempt, now)
                    late = attempt
                if self._inflight is None:  # (a job that never got a thread is gone)
                    # Submitted first: if that raises, no attempt is left "in flight" that
                    # nothing runs (the job cannot start before the lock is released).
                    attempt = _Attempt(self._generation, now)
                    attempt.job = sched.submit(functools.partial(self._work, attempt))
                    self._inflight = attempt
                    assert self._watch is not None
                    sched.schedule(self._watch, now + self._timeout)
        if self._slow:
            if late is not None and late.check is not None:
                late.check.cancel()  # (outside the lock: it may call _check_done at once)
            if overdue is not None:
                self._report(*overdue, deliver=_JOB)
            return
        try:
            self._send(self._payload, deliver=_JOB)
        finally:
            with self._lock:
                self._firing = False

    def _expire(self, at: float) -> None:
        """The time limit of the work in flight has come (on the scheduler thread)."""
        with self._lock:
            attempt = self._inflight
            if attempt is None or attempt.state != _WORKING:
                return
            if at < attempt.started + self._timeout - _EPS:
                return  # the limit of an earlier job, popped with the beat that replaced it
            assert self._executor is not None
            overdue = self._time_out(attempt, self._executor.now())
            report = self._state == _RUNNING
        if attempt.check is not None:
            attempt.check.cancel()  # (outside the lock: it may call _check_done at once)
        if report:
            self._report(*overdue, deliver=_JOB)

    def _time_out(self, attempt: _Attempt, now: float) -> tuple[str, BaseException, str]:
        """Give up on ``attempt`` (under the lock): count the failure, return its report."""
        what = "payload" if attempt.stage == "payload" else "check"
        name = self._payload_name if what == "payload" else self._dependency_name
        if attempt.state == _WORKING:
            attempt.state = _TIMED_OUT
            detail = f"{name}: timed out after {self._timeout:g} s"
            assert self._executor is not None and attempt.job is not None
            if self._executor.abandon(attempt.job) == "queued":
                # No check thread took it in time: it holds none and will never run, so the
                # next beat starts afresh.
                detail += " waiting for a check thread"
                if self._inflight is attempt:
                    self._inflight = None
        else:
            detail = f"{name}: timed out, still running after {now - attempt.started:g} s"
        attempt.reported = now
        if what == "payload":
            self._other_failures += 1
            return "payload_failed", TimeoutError(detail), detail
        self._check_failures += 1
        return "check_failed", CheckFailed(detail), detail

    def _work(self, attempt: _Attempt, awaited: _Awaited | None = None) -> None:
        """One beat's slow work, on a check thread: the check, the payload, then the send.
        A coroutine check is handed to the loop, and this returns at once; when it ends,
        :meth:`_check_done` submits this again with its outcome (``awaited``) for the rest."""
        pending = False
        try:
            pending = self._run_attempt(attempt, awaited)
        finally:
            if not pending:
                # However the work ended (a BaseException out of a transport or a listener
                # too), the publisher learns it is over: the next beat starts afresh, never
                # "still running" for good.
                self._attempt_over(attempt)
        if pending:
            return
        # The beat is done: its events are delivered on this thread, which a listener that
        # hangs then holds (not the publisher, whose next beat takes another thread).
        self._deliver_queued()

    def _attempt_over(self, attempt: _Attempt) -> None:
        with self._lock:
            if attempt.state == _WORKING:
                attempt.state = _FINISHED
            if self._inflight is attempt:
                self._inflight = None
                sched, watch = self._executor, self._watch
                if sched is not None and watch is not None:
                    sched.cancel(watch)  # (the watch is the limit of _inflight)

    def _await_check(self, attempt: _Attempt, awaitable: Awaitable[object]) -> bool:
        """Hand a coroutine check to the publisher's loop (on a check thread, which is let
        go at once); False if there is no loop to run it (the beat fails: the caller reports
        it)."""
        loop = self._loop
        sched = self.executor
        if loop is None or loop.is_closed():
            close = getattr(awaitable, "close", None)
            if callable(close):
                close()  # never awaited: no "coroutine was never awaited" warning
            return False
        # drain() waits for it (and refuses to on this loop's thread); the time limit abandons
        # it. It stays the attempt in flight until it has really ended (LoopCheck): a check
        # ignoring its cancellation is one per publisher, its beats failing meanwhile.
        held = sched.hold(awaitable, loop)
        check = LoopCheck()
        with self._lock:
            attempt.job = held
            attempt.check = check
        try:
            check.start(awaitable, loop, functools.partial(self._check_done, attempt, held))
        except RuntimeError:  # the loop closed meanwhile
            sched.finish(held)
            return False
        return True

    def _check_done(
        self,
        attempt: _Attempt,
        held: Job,
        result: object,
        error: BaseException | None,
        cancelled: bool,
    ) -> None:
        """A coroutine check ended (on the loop's thread, or on the thread that cancelled it
        before it started): the rest of the beat goes back to a check thread, never runs on
        the user's loop."""
        sched = self.executor
        job = sched.submit(functools.partial(self._work, attempt, (result, error, cancelled)))
        with self._lock:
            if attempt.job is held:
                attempt.job = job  # the time limit abandons the rest if it waits for a thread
        sched.finish(held)  # after the submit: drain() never sees the beat's work as done
        if job.state == "abandoned":  # the executor is closed (the process exits)
            self._attempt_over(attempt)

    def _run_attempt(self, attempt: _Attempt, awaited: _Awaited | None = None) -> bool:
        """The beat's check, payload and send; True if the check was handed to the loop (the
        rest comes with its outcome)."""
        failure: tuple[str, BaseException | None, str] | None = None
        payload = self._payload
        dependency = self._dependency
        name = self._dependency_name
        if awaited is not None:
            result, error, cancelled = awaited
            if cancelled:  # (cancelled by its time limit or stop(): then the result is stale)
                failure = ("check_failed", CheckFailed(f"{name}: cancelled"), f"{name}: cancelled")
            elif error is not None:
                detail = error.reason if isinstance(error, CheckFailed) else repr(error)
                failure = ("check_failed", error, detail)
            elif result is False:
                failure = ("check_failed", None, f"{name} returned False")
        elif dependency is not None:
            try:
                healthy = dependency()
            except BaseException as exc:  # SystemExit too: a failed check, not a lost thread
                detail = exc.reason if isinstance(exc, CheckFailed) else repr(exc)
                failure = ("check_failed", exc, detail)
            else:
                if inspect.isawaitable(healthy):
                    if self._await_check(attempt, healthy):
                        return True
                    why = f"{name}: no event loop to run the coroutine check on"
                    failure = ("check_failed", CheckFailed(why), why)
                elif healthy is False:
                    failure = ("check_failed", None, f"{name} returned False")
        if failure is None and callable(payload):
            attempt.stage = "payload"
            try:
                payload = payload()
            except BaseException as exc:
                failure = ("payload_failed", exc, repr(exc))
        with self._lock:
            current = (
                attempt.state == _WORKING
                and attempt.generation == self._generation
                and self._state == _RUNNING
            )
            if attempt.state == _WORKING:
                attempt.state = _FINISHED
            if not current:  # timed out, paused or stopped meanwhile: the result is stale
                return False
            if failure is not None:
                if failure[0] == "check_failed":
                    self._check_failures += 1
                else:
                    self._other_failures += 1
        if failure is None:
            self._send(payload, deliver=_LATER)
        elif failure[0] == "check_failed":
            error = failure[1]
            if isinstance(error, CheckFailed):
                why = error.reason
            elif error is None:
                why = failure[2]  # "<check> returned False"
            else:
                why = f"{self._dependency_name}: {type(error).__name__}"
            # Say so instead of staying silent: a down beat with the check's reason (monitors
            # fail the topic at once, see docs/explicit-failure.md). No payload: it was not
            # made (the check comes first).
            self._report(*failure, deliver=_LATER)
            self._send(None, deliver=_LATER, state="down", reason=_reason(why))
        else:
            self._report(*failure, deliver=_LATER)
        return False

    def _next_slot(self, deadline: float, now: float) -> float:
        """The slot after ``deadline``; if that has passed too, the first slot after ``now``."""
        period = self._period
        nxt = deadline + period
        if nxt <= now:  # behind by a whole period or more: skip the missed slots, no burst
            nxt = deadline + period * (math.floor((now - deadline) / period) + 1)
            while nxt <= now:  # float rounding
                nxt += period
        return nxt

    def _report(
        self, reason: str, error: BaseException | None, detail: str, *, deliver: str
    ) -> None:
        event = ExceptionEvent(self._topic, reason, error, detail)
        self._emit("on_exception", event, deliver)

    # -- listener events ----------------------------------------------------------------------

    def _emit(self, method: str, event: object, deliver: str) -> None:
        """Queue ``event`` for the listeners overriding ``method``, then deliver the queue:
        on this thread (``_INLINE``), in a check-thread job (``_JOB``), or not yet (``_LATER``:
        the caller calls :meth:`_deliver_queued`). Once stopped, nothing but ``on_stopped``:
        an event of a beat still in flight then would reach listeners after it (refused and
        counted in the listener set's ``late``). The state and the queue share the lock, so
        what came before the stop is queued before ``on_stopped``."""
        if not self._listeners.wants(method):
            return
        with self._lock:
            if self._state == _STOPPED and method != "on_stopped":
                self._listeners.refuse(method)
                return
            if len(self._outbox) >= EVENT_QUEUE and not self._make_room(method):
                return  # (dropped: a delivery under way, or the next event's, takes the rest)
            self._outbox.append((method, event))
            if deliver == _LATER or self._delivering:
                return  # whoever delivers now takes this one too
            self._delivering = True
            sched = self._executor
        if deliver == _JOB and sched is not None:
            try:
                job = sched.submit(self._deliver)
            except BaseException:
                with self._lock:  # no delivery under way after all: the next event starts one
                    self._delivering = False
                raise
            if job.state != "abandoned":
                return
            # The executor is closed (the process is exiting): no check thread will run it.
        self._deliver()

    def _connection_event(self, method: str, event: object) -> None:
        """A transport's connection event (on its thread, e.g. STOMP's failover supervisor,
        which must not wait for a listener before reconnecting): queued in order with the
        other events and delivered on a check thread."""
        self._emit(method, event, _JOB)

    def _make_room(self, method: str) -> bool:
        """Drop (and count) one event to make room for a ``method`` event (under the lock);
        False if the new one is the one dropped. Beat events (``on_sent``, ``on_exception``) go
        first, then connection events; ``on_started``/``on_stopped`` only from a queue holding
        nothing else (the bound holds whatever comes). Oldest first within each kind."""
        self._events_dropped += 1
        for kinds in (_DROPPABLE, _CONNECTION):
            for i, (queued, _) in enumerate(self._outbox):
                if queued in kinds:
                    del self._outbox[i]
                    return True
            if method in kinds:
                return False
        self._outbox.popleft()
        return True

    def _deliver_queued(self) -> None:
        with self._lock:
            if self._delivering or not self._outbox:
                return
            self._delivering = True
        self._deliver()

    def _deliver(self) -> None:
        """Call the listeners for every queued event, in order (one deliverer at a time)."""
        try:
            while True:
                with self._lock:
                    if not self._outbox:
                        self._delivering = False
                        return
                    method, event = self._outbox.popleft()
                self._listeners.emit(method, event)
        except BaseException:
            # A listener raised what ListenerSet does not catch (SystemExit, ...): this
            # delivery ends, but the next event starts another instead of waiting for good.
            with self._lock:
                self._delivering = False
            raise

    def _send(
        self, payload: Any, *, deliver: str, state: str = "up", reason: str | None = None
    ) -> bool:
        """Encode and send one beat (``state="down"``: an explicit failure, with ``reason``);
        True if it went on the wire. The scheduled beats of one publisher are never sent two
        at once; :meth:`fail` may send from another thread meanwhile, so a beat's ``seq`` is
        taken under the lock (re-encoded in the rare case another send took it first)."""
        sent_at = time.time()
        while True:
            with self._lock:
                seq = self._seq + 1
            beat = Beat(
                self._topic,
                seq,
                self._boot_id,
                sent_at,
                self._period,
                payload,
                False,
                state,
                reason,
            )
            try:
                body = self._codec.encode(beat)
            except (TypeError, ValueError) as exc:
                with self._lock:
                    self._other_failures += 1
                self._report("encode_failed", exc, str(exc), deliver=deliver)
                return False
            with self._lock:
                if self._seq + 1 == seq:
                    self._seq = seq
                    break
        headers: dict[str, str] = {}
        if self._ttl is not None:
            headers["expires"] = str(int((sent_at + self._ttl) * 1000))
        if self._persistent:
            headers["persistent"] = "true"
        try:
            # A beat that cannot go now is stale by the next one: never wait for a reconnect
            # (that would hold the scheduler thread every publisher in the process shares).
            if self._shards is None or self._sharded is None:
                self._broker.publish(self._topic, body, headers, timeout=0)
            else:
                self._sharded.publish_sharded(self._shards, self._topic, body, headers, timeout=0)
        except Exception as exc:
            with self._lock:
                self._send_failures += 1
            self._report("send_failed", exc, repr(exc), deliver=deliver)
            return False
        with self._lock:
            if state == "down":
                # Counted apart, no on_sent: its cause was reported (on_exception) or asked for.
                self._down_sent += 1
                return True
            self._sent += 1
        self._emit("on_sent", Sent(self._topic, seq, sent_at), deliver)
        return True


# Running publishers, stopped at interpreter exit (the executor holds them while they run).
_running: Running[HeartbeatPublisher] = Running(lambda publisher: publisher.stop())
