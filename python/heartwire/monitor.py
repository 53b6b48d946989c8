"""Monitors: watch topics for missed heartbeats and tell listeners.

A :class:`HeartbeatMonitor` subscribes to a pattern on a broker (``"svc.>"``), decodes each beat
with :class:`~heartwire.message.BeatCodec` and records it in the native
:class:`~heartwire._core.Detector`, which counts missed periods on its own thread. The detector's
events go through a bounded queue to a :class:`~heartwire.dispatch.Dispatcher` thread, which turns
them into :class:`~heartwire.events.Failed`, :class:`~heartwire.events.Resumed` and
:class:`~heartwire.events.Received` and calls the listeners. Detection never waits for Python.

Topics come from two places:

- expected: :meth:`HeartbeatMonitor.expect` (a :class:`HeartbeatSubscriber`'s one topic is
  expected from the start). An expected topic that is never heard fails one period (plus its
  grace) after start.
- learned: the first beat for an unknown topic matching the pattern adds it, with the period the
  beat carries (the publisher's) or the monitor's default period. Once a topic's beats carry a
  period, a change of it updates the topic, unless the period was given to :meth:`expect`.

Threads: by default (``listener_queue``) each listener has a bounded queue and a thread of its
own, and gets every event, ``on_started`` to ``on_stopped``, on that thread in the order the
monitor produced them (``resumed`` before the ``received`` of the same beat): a slow or blocked
listener delays only itself, and what its full queue drops is counted
(``stats()["listener_dropped"]``, :meth:`~HeartbeatMonitor.metrics`). With
``listener_queue=None`` listeners are called one after the other: ``on_failed``,
``on_resumed``, ``on_received`` and ``on_local_pause`` on the monitor's dispatch thread,
``on_started`` and ``on_stopped`` in the thread calling :meth:`~HeartbeatMonitor.start` and
:meth:`~HeartbeatMonitor.stop`, ``on_exception`` for a bad beat in the thread that delivered it
(the publishing thread, on the embedded broker). ``on_stopped`` is still the last call: it waits
for the calls in progress on other threads, and if :meth:`~HeartbeatMonitor.stop`'s ``timeout``
runs out first, the last of those calls makes it on its thread as it ends.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import threading
import time
import weakref
from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from numbers import Real
from typing import Any, Literal

from heartwire._core import Detector, Event, EventQueue, ManualClock, Phi
from heartwire.dispatch import Dispatcher
from heartwire.events import (
    CaughtUp,
    ExceptionEvent,
    Failed,
    Lagging,
    LocalPause,
    Received,
    Resumed,
    Started,
    Stopped,
    TopicStatus,
    real_clock_offset,
)
from heartwire.listeners import (
    ConnectionEvents,
    ListenerOverflow,
    ListenerSet,
    SubscriberListener,
)
from heartwire.message import Beat, BeatCodec, DecodeError
from heartwire.transport import Message, Subscription, Transport
from heartwire.transport.patterns import matcher, validate_pattern, validate_topic

__all__ = ["HeartbeatMonitor", "HeartbeatSubscriber"]

log = logging.getLogger("heartwire.monitor")

Overflow = Literal["coalesce", "drop-oldest", "drop-newest", "block"]
_OVERFLOWS = ("coalesce", "drop-oldest", "drop-newest", "block")
_JOIN = 3600.0  # how long a new dispatch thread waits for the one it replaces (ordering)
#: A handle's slot in the core (its low 32 bits; the bits above are the slot's generation,
#: bumped when a removed topic's slot is reused). Per-topic arrays here are indexed by slot.
_SLOT = 0xFFFF_FFFF

#: The default ``max_topics``: a sender inventing topic names cannot grow a monitor past this.
DEFAULT_MAX_TOPICS = 1_000_000
#: The default size of each listener's own queue (``listener_queue``).
DEFAULT_LISTENER_QUEUE = 10_000
#: The periods a beat may carry, seconds; a beat with another is refused (``"bad_period"``):
#: the core cannot time less than a nanosecond or more than ~30 years, and a hostile 1 ns
#: period would fail its topic on every tick.
MIN_BEAT_PERIOD = 0.001
MAX_BEAT_PERIOD = 1e9


#: How many boot ids of a topic a monitor with a key remembers (with each one's last seq).
REPLAY_BOOTS = 4
#: The default ``max_beat_age`` (``None``) of a topic with period ``p``: ``BEAT_AGE_PERIODS * p
#: + BEAT_AGE_SKEW`` seconds (3 periods, plus a minute of clock skew between the hosts).
BEAT_AGE_PERIODS = 3
BEAT_AGE_SKEW = 60.0

#: The bits of a ``received`` event's ``seq`` that :class:`_Newest` compares.
_SEQ_BITS = (1 << 63) - 1

# One remembered boot of a topic: (boot id, last seq taken, its send time).
_Boot = tuple[str, int, float | None]


def _replay(history: tuple[_Boot, ...], boot: str, seq: int, sent: float | None) -> str:
    """Why a signed beat (``boot``, ``seq``, ``sent``) is a replay given the topic's remembered
    boots (least recently heard first); "" if it is not."""
    for known, last_seq, _ in history:
        if known == boot:
            return f"seq {seq} <= {last_seq} of the same boot" if seq <= last_seq else ""
    if len(history) >= REPLAY_BOOTS and sent is not None:
        oldest = history[0][2]
        if oldest is not None and sent <= oldest:
            return f"an unknown boot id, sent before the last {REPLAY_BOOTS} boots' beats"
    return ""


def _short(value: object, limit: int = 120) -> str:
    """``repr(value)``, cut to ``limit`` characters: hostile names stay out of logs and events."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _check_period(value: object, field: str = "period") -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"{field} must be a number of seconds, got {type(value).__name__} {value!r}"
        )
    period = float(value)
    if not (period > 0 and math.isfinite(period)):
        raise ValueError(f"{field} must be a finite number of seconds > 0, got {value!r}")
    return period


def _check_grace(value: object, field: str = "grace") -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"{field} must be a number of seconds or None, got {type(value).__name__} {value!r}"
        )
    grace = float(value)
    if not (grace >= 0 and math.isfinite(grace)):
        raise ValueError(f"{field} must be a finite number of seconds >= 0, got {value!r}")
    return grace


def _check_int(value: object, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{field} must be >= {minimum}, got {value!r}")
    return value


class _Feed:
    """One subscription to the detector's events and the dispatch thread that empties it.

    When listeners start (or stop) wanting ``received`` events, or losing none, the monitor
    opens a new feed, starts its thread, then closes the old one. Both get the events pushed
    meanwhile, and an event put aside while a ``"block"`` queue is subscribed goes to the
    queues subscribed when it is pushed: one that reached the old feed and then waited for room
    in another queue reaches the new feed too, however late (the core's rule, ``emit.rs``).
    So the new feed's thread first waits for the old ones to finish (the whole chain, oldest
    first: one replaced before it delivered anything has not waited for its own), then skips
    what is not newer than what was delivered for its topic (see :class:`_Newest`). Its thread
    runs before the old queue is let go: a producer may be waiting for room in the new queue.
    """

    __slots__ = ("dispatcher", "finished", "overflow", "popped", "prev", "queue", "received")

    def __init__(
        self, queue: EventQueue, received: bool, overflow: Overflow, prev: _Feed | None
    ) -> None:
        self.queue = queue
        self.received = received
        self.overflow = overflow
        self.prev = prev
        self.dispatcher: Dispatcher | None = None
        self.finished = False  # stop() is over: what the thread still holds is not delivered
        self.popped = 0


class _Newest:
    """Per topic slot, the newest ``failed``/``resumed`` event handed to the listeners (its
    topic's full handle, ``at``, and ``missed`` and kind), and the newest ``local_pause``'s
    ``at``: what a dispatch thread must not hand over again.

    A topic's events have strictly increasing ``at`` (each ``failed`` at its own deadline, a
    ``resumed`` at a beat later than the last deadline counted, the next deadline after it),
    and every queue gets them in that order. So an event is a duplicate (both feeds of a
    switch got it) or stale (older than one delivered: overtaken across a switch) exactly when
    its ``at`` is below the newest one's, or equal with the same kind and ``missed`` (an equal
    ``at`` with another kind or count is a distinct event, nanoseconds apart on a clock read
    far from zero, where a float cannot tell them apart). Unlike a window of events both feeds
    got, this holds however late an event reaches a feed. Only the dispatch threads use it,
    one after the other. 24 bytes per slot.

    ``received`` events are noted the same way (by ``at`` and ``seq``) and skipped once a feed
    that carried them has been replaced (:attr:`overlap`): before that no two feeds got the
    same one. Two beats of a topic at the same clock reading with the same ``seq`` (possible only
    with a :class:`~heartwire._core.ManualClock` not moved between them) then count as one.
    """

    __slots__ = ("ats", "codes", "handles", "lag_at", "overlap", "pause_at", "received")

    def __init__(self) -> None:
        self.handles = array("q")  # -1: no event delivered for the slot's topic
        self.ats = array("d")
        self.codes = array("q")  # missed * 2 + (1 for resumed)
        self.pause_at = -math.inf
        self.lag_at: tuple[float, str] = (-math.inf, "")  # the newest lagging/caught_up
        self.overlap = False  # some replaced feed carried `received` events
        self.received: _Newest | None = None  # the same, for `received` (codes: seq)

    def fresh_lag(self, kind: str, at: float) -> bool:
        """Whether a ``lagging``/``caught_up`` event is newer than the newest one delivered
        (they alternate: one at the same ``at`` of the other kind is distinct)."""
        newest, newest_kind = self.lag_at
        if at < newest or (at == newest and kind == newest_kind):
            return False
        self.lag_at = (at, kind)
        return True

    def fresh(self, handle: int, at: float, code: int) -> bool:
        """Whether the event (``handle``, ``at``, ``code``) is newer than the newest one
        delivered for its topic; then it becomes the newest."""
        slot = handle & _SLOT
        handles = self.handles
        if slot >= len(handles):
            grow = max(slot + 1 - len(handles), len(handles) // 2, 1024)
            handles.extend([-1] * grow)
            self.ats.extend([math.nan] * grow)
            self.codes.extend([0] * grow)
        elif handles[slot] == handle:
            newest = self.ats[slot]
            if at < newest or (at == newest and self.codes[slot] == code):
                return False
        handles[slot] = handle
        self.ats[slot] = at
        self.codes[slot] = code
        return True


_running: weakref.WeakSet[HeartbeatMonitor] = weakref.WeakSet()


@atexit.register
def _stop_running_monitors() -> None:
    for monitor in list(_running):
        try:
            monitor.stop(timeout=1.0)
        except Exception:
            log.exception("stopping %r at exit failed", monitor)


class HeartbeatMonitor:
    """Watch every topic matching ``pattern`` on ``broker`` (see the module docs).

    - ``period``, ``allowed_misses``: defaults for topics (a beat's own period wins for learned
      topics). A topic goes FAILED after ``allowed_misses`` missed periods in a row.
    - ``grace``: seconds of slack added to every deadline. With the last beat at ``last``, the
      n-th period counts as missed only once the clock is past ``last + n * period + grace``
      (a topic never heard: ``start + period + grace``); the ``failed`` event's ``at`` and
      ``since`` are those deadlines. ``None`` (the default) means 10% of each topic's own
      period, following it when the period is learned or changed: a publisher beating at
      exactly the monitor's period (the normal set-up) arrives a little late now and then
      (scheduling jitter, transit), and must not fail for it. ``0`` makes deadlines exact.
      Phi-accrual topics ignore it (``Phi.acceptable_pause`` is theirs).
    - ``max_local_pause``: the self-pause guard, seconds (``None`` turns it off). When the
      monitor itself was not running for longer than this (its process stopped, the machine
      suspended, the host starved), it does not fail every topic on waking: deadlines that fell
      inside the pause are re-based, so a topic is failed only if it stays silent for a full
      period (plus grace) after the wake-up; beats recorded meanwhile count as heard. Listeners
      get one :class:`~heartwire.events.LocalPause` per pause (``on_local_pause``), and
      :meth:`stats` counts them.
    - ``lag_threshold``: the ingest-lag guard, seconds (``None`` turns it off; default 1 s:
      below it a lag is ordinary read batching, held silently). When the monitor's own intake
      falls behind its feed (the native reader finds each read filling its buffer), deadlines
      are judged against what has been read, not the clock, so the backlog fails no live
      topic; a topic that really stopped is reported late, by the lag at most (and at most
      ``detector.max_ingest_lag``, 60 s by default, behind the clock). Listeners get one
      :class:`~heartwire.events.Lagging` when the lag first exceeds this (``on_lagging``) and
      one :class:`~heartwire.events.CaughtUp` when the intake has read its backlog
      (``on_caught_up``); :meth:`stats` has ``lagging`` (episodes) and ``ingest_lag`` (now).
    - ``listeners``: :class:`~heartwire.listeners.SubscriberListener` instances (more can be added
      and removed at run time).
    - ``clock``: a :class:`~heartwire._core.ManualClock` for tests and simulations; events are then
      produced by ``clock.advance`` and delivered to listeners by :meth:`drain`.
    - ``key``: shared HMAC key; beats not signed with it are rejected and counted, never recorded.
      With a key, replayed signed beats are refused too (reason ``"replayed"``), so a captured
      beat sent again cannot revive a dead service: the monitor remembers the last
      :data:`REPLAY_BOOTS` boot ids of each topic with the highest ``seq`` taken from each, and
      takes a beat of a remembered boot only with a higher ``seq``. A beat of a new boot id is
      taken (a restart), unless all those boots are remembered already and it was sent before
      the least recently heard one's last beat (a replay from a long-gone boot). Signed beats
      without ``seq`` and ``boot`` are not checked for replays.
    - ``max_beat_age``: with a key, how far (seconds) a signed beat's send time (``sent``, the
      publisher's wall clock) may be from the monitor's wall clock, either way; a beat outside
      is refused (reason ``"stale"``, counted, logged). This bounds what a beat captured before
      the monitor ever saw its boot (so the replay rule cannot know it) can do: it is refused
      once it is that old. ``None`` (the default): :data:`BEAT_AGE_PERIODS` of the topic's
      period plus :data:`BEAT_AGE_SKEW` seconds (the monitor's period for a topic not watched
      yet); ``math.inf``: no bound. The trade-off: the hosts' wall clocks now matter. A
      publisher whose clock is off by more than the allowance is refused (every beat counted
      and logged, so it shows) rather than taken, and its topic fails. Beats without ``sent``
      and unsigned beats (whose ``sent`` anyone can forge) are not checked.
    - ``overflow``, ``capacity``: the event queue's policy and size (``"coalesce"`` keeps each
      topic's newest event when listeners fall behind; every loss is counted in :meth:`stats`).
      While a lossless listener is registered (its class sets ``lossless = True``, as
      :class:`~heartwire.eventlog.EventLog` does), the queue is ``"block"`` instead: when the
      dispatch thread falls behind, the detector's driver (and a recording thread) waits for
      room rather than losing an event. The dispatch thread only hands events to the listener
      queues, and a lossless listener's queue grows rather than blocking it, so a slow lossless
      listener does not stall detection: it costs memory, shown in :meth:`stats`
      (``listeners``) and logged as its backlog doubles. With ``listener_queue=None`` a lossless
      listener is called on the dispatch thread, and a slow one does stall detection (shown as
      ``dispatch_queue_depth`` at ``capacity``).
    - ``tick``: the detector's driver interval (real clock).
    - ``max_topics``: beats of new topics are rejected (reason ``"too_many_topics"``, counted
      in :meth:`stats`) once the monitor watches this many topics, expected ones included;
      :meth:`expect` always adds. Default :data:`DEFAULT_MAX_TOPICS` (a million); ``None``: no cap.
    - ``listener_queue``, ``listener_overflow``: each listener's own queue size and what a full
      one drops (``"drop-oldest"`` or ``"drop-newest"``; counted). ``None``: no queues, listeners
      are called in turn on the producing thread, and a slow one delays the others. Under
      ``"block"`` (a lossless listener) a listener called on the dispatch thread must not make
      the detector emit (record a beat: ``beat``, ``handle_message``...; resume a topic that
      recovered while paused) while the event queue is full: the push waits for room that only
      its own thread would make, and detection stops with it. (:meth:`stop` is safe there: it
      closes the queue first.)

    - ``wall_offset``: seconds to add to the monitor's clock to get Unix time, for the times
      people and other programs read (each event's and status's ``wall_*`` properties, the
      CLI's output, :class:`~heartwire.reliable.AlertPublisher`'s alerts). Default: measured
      once, now (``time.time() - time.monotonic()`` for the real clock; for a ManualClock, its
      current reading stands for the current wall time).

    ``broker`` may be ``None``: beats then come only from :meth:`beat` and its batch forms.
    """

    def __init__(
        self,
        broker: Transport | None,
        pattern: str,
        period: float = 1.0,
        allowed_misses: int = 1,
        *,
        listeners: Iterable[SubscriberListener] = (),
        clock: ManualClock | None = None,
        key: bytes | str | None = None,
        overflow: Overflow = "coalesce",
        capacity: int = 65536,
        tick: float = 0.01,
        max_topics: int | None = DEFAULT_MAX_TOPICS,
        grace: float | None = None,
        max_local_pause: float | None = 5.0,
        lag_threshold: float | None = 1.0,
        listener_queue: int | None = DEFAULT_LISTENER_QUEUE,
        listener_overflow: ListenerOverflow = "drop-oldest",
        max_beat_age: float | None = None,
        wall_offset: float | None = None,
    ) -> None:
        self._pattern = validate_pattern(pattern, "pattern")
        self._period = _check_period(period)
        self._allowed_misses = _check_int(allowed_misses, "allowed_misses", 1)
        self._grace = _check_grace(grace)
        if max_local_pause is not None:
            max_local_pause = _check_period(max_local_pause, "max_local_pause")
        if lag_threshold is not None:
            lag_threshold = _check_period(lag_threshold, "lag_threshold")
        if clock is not None and not isinstance(clock, ManualClock):
            raise TypeError(f"clock must be a ManualClock or None, got {type(clock).__name__}")
        if overflow not in _OVERFLOWS:
            raise ValueError(f"overflow must be one of {', '.join(_OVERFLOWS)}; got {overflow!r}")
        self._capacity = _check_int(capacity, "capacity", 1)
        tick = _check_period(tick, "tick")
        if max_topics is not None:
            max_topics = _check_int(max_topics, "max_topics", 0)
        if broker is not None and not callable(getattr(broker, "subscribe", None)):
            raise TypeError(f"broker must be a Transport or None, got {type(broker).__name__}")
        self._broker = broker
        self._overflow = overflow
        self._max_topics = max_topics
        self._matches = matcher(self._pattern)
        self._codec = BeatCodec(key=key)
        if max_beat_age is not None and max_beat_age != math.inf:
            max_beat_age = _check_period(max_beat_age, "max_beat_age")
        self._max_beat_age = max_beat_age
        self._stale_logged = 0
        if listener_queue is not None:
            listener_queue = _check_int(listener_queue, "listener_queue", 1)
        self._listeners: ListenerSet[SubscriberListener] = ListenerSet(
            SubscriberListener,
            self._pattern,
            queue_size=listener_queue,
            overflow=listener_overflow,
        )
        for listener in listeners:
            self._listeners.add(listener)
        self._connection_events = ConnectionEvents(self._listeners)

        self._det = Detector(
            period=self._period,
            allowed_misses=self._allowed_misses,
            grace=self._grace_for(self._period),
            clock=clock,
            tick=tick,
            max_local_pause=max_local_pause,
            lag_threshold=lag_threshold,
        )
        self._det.stop()  # nothing is watched (and no driver thread runs) until start()
        self._clock = clock
        if wall_offset is None:
            wall_offset = real_clock_offset() if clock is None else time.time() - clock.now()
        elif isinstance(wall_offset, bool) or not isinstance(wall_offset, Real):
            raise TypeError(
                f"wall_offset must be a number of seconds or None, got "
                f"{type(wall_offset).__name__} {wall_offset!r}"
            )
        elif not math.isfinite(wall_offset):
            raise ValueError(f"wall_offset must be a finite number of seconds, got {wall_offset!r}")
        self._wall_offset = float(wall_offset)

        self._lock = threading.RLock()  # lifecycle, learning, pausing, feed switches
        # stop()s that let go of the lock to stop the detector; start() waits for them.
        self._stopping = 0
        self._stopped = threading.Condition(self._lock)
        self._running = False
        self._paused = False
        self._paused_topics: set[str] = set()  # paused one by one (kept across pause/resume)
        # The handles of the topics the detector may hold paused since the last stop(): it
        # keeps them paused across a restart, so start() resumes those resumed meanwhile.
        self._held_paused: set[int] = set()
        # Handles being resumed in the detector by a thread that let go of the lock for it.
        self._resuming: set[int] = set()
        # Per slot (a handle's low bits, the core's dense ids): the topic's current period (NaN:
        # not tracked yet), whether it was given to expect() (then beats do not change it), and
        # the grace given to expect() (NaN: the monitor's rule, following the period).
        self._periods = array("d")
        self._pinned = bytearray()
        self._graces = array("d")
        self._learned = 0
        self._rejected: Counter[str] = Counter()
        self._rejected_lock = threading.Lock()
        # Signed beats only: per topic (full handle: a slot's next topic starts afresh), its
        # last REPLAY_BOOTS boots (replays).
        self._boots: dict[int, tuple[_Boot, ...]] = {}
        self._replay_lock = threading.Lock()
        self._feed: _Feed | None = None
        self._subscription: Subscription | None = None
        self._local = threading.local()
        self._progress = threading.Condition()  # notified as batches are delivered
        self._dispatched = 0
        self._dispatch_errors = 0
        self._losses = 0  # events lost to the overflow policy on feeds already closed
        self._newest = _Newest()  # what the dispatch threads delivered (no duplicates)

    # -- properties ------------------------------------------------------------------------

    @property
    def pattern(self) -> str:
        """The pattern watched (a topic name for a :class:`HeartbeatSubscriber`)."""
        return self._pattern

    @property
    def period(self) -> float:
        """The default period for new topics, in seconds."""
        return self._period

    @property
    def allowed_misses(self) -> int:
        """The default number of missed periods in a row that fails a topic."""
        return self._allowed_misses

    @property
    def grace(self) -> float | None:
        """Seconds of slack on every deadline, or ``None``: 10% of each topic's period."""
        return self._grace

    @property
    def max_beat_age(self) -> float | None:
        """How far a signed beat's send time may be from the monitor's wall clock, seconds
        (``None``: the default rule, per topic; ``math.inf``: no bound)."""
        return self._max_beat_age

    @property
    def max_local_pause(self) -> float | None:
        """Seconds the monitor may go without running before it counts a local pause (``None``:
        never). Can be changed while it runs."""
        return self._det.max_local_pause

    @max_local_pause.setter
    def max_local_pause(self, seconds: float | None) -> None:
        if seconds is not None:
            seconds = _check_period(seconds, "max_local_pause")
        self._det.max_local_pause = seconds

    @property
    def lag_threshold(self) -> float | None:
        """Seconds the intake may lag behind its feed before a ``lagging`` event (``None``: the
        ingest-lag guard is off). Can be changed while it runs."""
        return self._det.lag_threshold

    @lag_threshold.setter
    def lag_threshold(self, seconds: float | None) -> None:
        if seconds is not None:
            seconds = _check_period(seconds, "lag_threshold")
        self._det.lag_threshold = seconds

    def _grace_for(self, period: float) -> float:
        """The grace a topic with ``period`` gets by the monitor's rule."""
        return period * 0.1 if self._grace is None else self._grace

    @property
    def broker(self) -> Transport | None:
        return self._broker

    @property
    def running(self) -> bool:
        """Started and not stopped (paused or not)."""
        return self._running

    @property
    def paused(self) -> bool:
        """The whole monitor is paused."""
        return self._paused

    @property
    def detector(self) -> Detector:
        """The native detector (for advanced use: do not add, remove or stop topics behind the
        monitor's back)."""
        return self._det

    @property
    def listeners(self) -> list[SubscriberListener]:
        return self._listeners.listeners

    def now(self) -> float:
        """The monitor's clock, in seconds (the frame of every event time)."""
        return self._det.now()

    @property
    def wall_offset(self) -> float:
        """Seconds to add to a reading of the monitor's clock to get Unix time (see
        ``wall_offset`` in the class docs; every event and status carries it)."""
        return self._wall_offset

    def wall_time(self, t: float) -> float:
        """A reading ``t`` of the monitor's clock (an event's ``at``...) as Unix seconds."""
        return t + self._wall_offset

    def __len__(self) -> int:
        return len(self._det)

    def __contains__(self, topic: object) -> bool:
        return isinstance(topic, str) and topic in self._det

    def __repr__(self) -> str:
        state = "paused" if self._paused else "running" if self._running else "stopped"
        return f"<{type(self).__name__} {self._pattern!r} {state}, {len(self._det)} topics>"

    # -- listeners -------------------------------------------------------------------------

    def add_listener(self, listener: SubscriberListener) -> None:
        """Register a listener (``TypeError`` if it is not a SubscriberListener).

        Its coroutine methods run on the event loop running in the calling thread, if any.
        """
        self._listeners.add(listener)
        self._sync_received()

    def remove_listener(self, listener: SubscriberListener) -> bool:
        """Unregister a listener; False if it was not registered."""
        found = self._listeners.remove(listener)
        if found:
            self._sync_received()
        return found

    # -- topics ----------------------------------------------------------------------------

    def expect(
        self,
        topic: str,
        period: float | None = None,
        allowed_misses: int | None = None,
        *,
        phi: Phi | None = None,
        grace: float | None = None,
    ) -> int:
        """Watch ``topic`` from now on (or from :meth:`start`), heard from yet or not; its handle.

        ``period`` (default: the monitor's, or the one learned from beats) is kept: beats with
        another period do not change it. ``grace`` (default: the monitor's rule) is kept too.
        On a topic already watched, changes the given settings. ``topic`` must match the
        monitor's pattern.
        """
        validate_topic(topic, "topic")
        if not self._matches(topic):
            raise ValueError(
                f"topic {topic!r} does not match the monitor's pattern {self._pattern!r}"
            )
        if period is not None:
            period = _check_period(period)
        if allowed_misses is not None:
            allowed_misses = _check_int(allowed_misses, "allowed_misses", 1)
        grace = _check_grace(grace)
        with self._lock:
            handle = self._det.handle(topic)
            if handle is None:
                handle = self._add(topic, period, allowed_misses, phi, grace)
            else:
                given = grace
                if (
                    given is None
                    and period is not None
                    and math.isnan(self._graces[handle & _SLOT])
                ):
                    given = self._grace_for(period)  # the rule follows the new period
                changes = (period, allowed_misses, phi, given)
                if any(c is not None for c in changes):
                    self._det.configure(
                        handle, period=period, allowed_misses=allowed_misses, phi=phi, grace=given
                    )
                if period is not None:
                    self._periods[handle & _SLOT] = period
                if grace is not None:
                    self._graces[handle & _SLOT] = grace
            if period is not None:
                self._pinned[handle & _SLOT] = 1
            return handle

    def remove(self, topic: str) -> bool:
        """Stop watching ``topic`` (a later beat learns it again); False if it was not watched."""
        with self._lock:
            handle = self._det.handle(topic)
            if handle is None:
                return False
            self._det.remove(handle)
            self._paused_topics.discard(topic)
            with self._replay_lock:
                self._boots.pop(handle, None)
            return True

    def handle(self, topic: str) -> int | None:
        """The topic's handle for :meth:`beat_handles` (``None`` if not watched)."""
        return self._det.handle(topic)

    def _add(
        self,
        topic: str,
        period: float | None,
        allowed_misses: int | None,
        phi: Phi | None,
        grace: float | None = None,
    ) -> int:
        # Called with the lock held.
        effective = period if period is not None else self._period
        handle = self._det.add(
            topic,
            period=period,
            allowed_misses=allowed_misses,
            phi=phi,
            grace=self._grace_for(effective) if grace is None else grace,
        )
        self._track(handle, effective)
        if grace is not None:
            self._graces[handle & _SLOT] = grace
        if (self._paused or topic in self._paused_topics) and self._running:
            self._det.pause(handle)
        return handle

    def _track(self, handle: int, period: float) -> None:
        slot = handle & _SLOT
        if slot >= len(self._periods):
            grow = max(slot + 1 - len(self._periods), len(self._periods) // 2, 1024)
            self._periods.extend([math.nan] * grow)
            self._pinned.extend(bytes(grow))
            self._graces.extend([math.nan] * grow)
        self._periods[slot] = period
        self._pinned[slot] = 0
        self._graces[slot] = math.nan

    def _learn(self, topic: str, period: float | None) -> int | None:
        """Add a topic first heard from now; None if refused (counted)."""
        with self._lock:
            handle = self._det.handle(topic)
            if handle is not None:
                return handle
            if not self._running:
                return None
            if not self._matches(topic):
                self._reject(
                    "pattern_mismatch", None, f"{_short(topic)} is not in {self._pattern!r}"
                )
                return None
            if self._max_topics is not None and len(self._det) >= self._max_topics:
                self._reject(
                    "too_many_topics",
                    None,
                    f"beat for {_short(topic)} refused: the monitor already has "
                    f"{len(self._det)} topics (max_topics={self._max_topics})",
                )
                return None
            self._learned += 1
            return self._add(topic, period, None, None)

    # -- beats -----------------------------------------------------------------------------

    def beat(self, topic: str, *, seq: int | None = None, latency: float | None = None) -> bool:
        """Record a beat for ``topic`` from any source; True if recorded.

        An unknown topic matching the pattern is learned with the default period. Not recorded
        while the monitor is not running.
        """
        handle = self._det.handle(topic)
        if handle is None:
            validate_topic(topic, "topic")
            handle = self._learn(topic, None)
            if handle is None:
                return False
        if seq is None and latency is None:
            return self._det.beat(handle)  # no keywords to parse: the common call
        return self._det.beat(handle, seq=seq, latency=latency)

    def beat_many(self, names: Iterable[str] | Any) -> int:
        """Record one beat for each name (a list of str, or an Arrow/NumPy string array);
        unknown names matching the pattern are learned. Returns how many were recorded."""
        batch: Any = names
        if not isinstance(batch, (list, tuple)) and not _is_array(batch):
            batch = list(batch)  # maybe a one-shot iterable: read it once
        recorded = self._det.beat_many(batch)
        if recorded == len(batch) or not self._running:
            return recorded
        for name in _as_list(batch):
            if isinstance(name, str) and name not in self._det:
                try:
                    recorded += self.beat(name)
                except ValueError:
                    self._reject("bad_topic", None, f"{_short(name)} is not a valid topic name")
        return recorded

    def beat_handles(self, handles: Iterable[int] | Any) -> int:
        """Record one beat for each handle (list, NumPy or Arrow integers); how many recorded."""
        return self._det.beat_handles(handles)

    def handle_message(self, message: Message) -> None:
        """Decode and record one broker message (the monitor's subscription calls this)."""
        try:
            beat = self._codec.decode(message.body, message.destination)
        except DecodeError as exc:
            where = _short(message.destination)
            self._reject(exc.reason, exc, f"message to {where}: {_short(str(exc), 300)}")
            return
        self._record(beat)

    def _record(self, beat: Beat) -> None:
        topic = beat.topic
        handle = self._det.handle(topic)
        period = beat.period
        if period is not None and not MIN_BEAT_PERIOD <= period <= MAX_BEAT_PERIOD:
            self._reject(
                "bad_period",
                None,
                f"beat for {_short(topic)} carries the period {period!r} s; "
                f"accepted: {MIN_BEAT_PERIOD} to {MAX_BEAT_PERIOD:.0e} s",
            )
            return
        # Every check comes before any change: a refused beat changes nothing about its topic
        # (a replayed beat with another period must not re-tune it and move its deadline).
        if not self._running:
            return  # not recorded while stopped (as beat()): nor may it re-tune its topic
        if self._codec.signed and beat.sent_at is not None and not self._fresh(handle, beat):
            return
        if handle is None:
            # A topic not watched yet has no remembered boots, so the replay check below cannot
            # refuse this beat: learning it first changes nothing a refusal should undo.
            handle = self._learn(topic, period)
            if handle is None:
                return
        if self._codec.signed and not self._newer(handle, beat):
            return
        if period is not None:
            periods = self._periods
            slot = handle & _SLOT
            if slot < len(periods) and periods[slot] != period and not self._pinned[slot]:
                self._retune(handle, period)
        latency = None if beat.sent_at is None else time.time() - beat.sent_at
        self._det.beat(handle, seq=beat.seq, latency=latency)

    def _fresh(self, handle: int | None, beat: Beat) -> bool:
        """Whether a signed ``beat``'s send time is within ``max_beat_age`` of the monitor's
        wall clock; a stale one is counted and logged (``"stale"``)."""
        assert beat.sent_at is not None
        allowance = self._max_beat_age
        if allowance is None:
            period = self._period
            slot = -1 if handle is None else handle & _SLOT
            if 0 <= slot < len(self._periods):
                tracked = self._periods[slot]
                if not math.isnan(tracked):
                    period = tracked
            allowance = BEAT_AGE_PERIODS * period + BEAT_AGE_SKEW
        age = time.time() - beat.sent_at
        if abs(age) <= allowance:
            return True
        when = f"{age:.3f} s before" if age > 0 else f"{-age:.3f} s after"
        detail = (
            f"beat for {_short(beat.topic)} refused: sent {when} the monitor's wall clock, "
            f"more than max_beat_age {allowance:g} s (a replayed old beat, or the publisher's "
            "clock is wrong)"
        )
        self._stale_logged += 1
        n = self._stale_logged
        if n <= 10 or n % 1000 == 0:  # a publisher with a wrong clock cannot flood the log
            log.warning("%s [stale beat %d]", detail, n)
        self._reject("stale", None, detail)
        return False

    def _newer(self, handle: int, beat: Beat) -> bool:
        """Whether a signed ``beat`` is newer than the last one taken for its topic (then it is
        remembered); a replay is counted (``"replayed"``)."""
        seq, boot, sent = beat.seq, beat.boot_id, beat.sent_at
        if seq is None or boot is None:
            return True
        why = ""
        with self._replay_lock:
            history = self._boots.get(handle, ())
            why = _replay(history, boot, seq, sent)
            # Remembered only while `handle` is still the topic's (remove() forgets it under
            # this lock): a beat racing the removal leaves nothing behind.
            if not why and self._det.handle(beat.topic) == handle:
                kept = tuple(b for b in history if b[0] != boot)
                self._boots[handle] = (*kept, (boot, seq, sent))[-REPLAY_BOOTS:]
        if why:
            self._reject("replayed", None, f"beat for {_short(beat.topic)} replayed: {why}")
            return False
        return True

    def _retune(self, handle: int, period: float) -> None:
        with self._lock:
            if self._pinned[handle & _SLOT] or self._periods[handle & _SLOT] == period:
                return
            grace = self._graces[handle & _SLOT]
            if math.isnan(grace):
                grace = self._grace_for(period)
            try:
                self._det.configure(handle, period=period, grace=grace)
            except KeyError:  # removed meanwhile
                return
            self._periods[handle & _SLOT] = period

    def _reject(self, reason: str, error: BaseException | None, detail: str) -> None:
        with self._rejected_lock:
            self._rejected[reason] += 1
        self._listeners.emit("on_exception", ExceptionEvent(self._pattern, reason, error, detail))

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> HeartbeatMonitor:
        """Start watching (expected topics are due one period from now); returns self.

        Does nothing if already running. A stopped monitor can be started again: each topic is
        as it was at :meth:`stop` (the time stopped is not counted). A FAILED topic stays
        FAILED, with its count and ``since``, until a beat is heard (no new ``failed`` for the
        outage: its next missed period ends one period after the restart); a paused one
        stays paused, and pauses and resumes made while stopped take effect now. Waits for a
        :meth:`stop` in progress on another thread to have stopped the detector.
        """
        with self._lock:
            while self._stopping:  # a stop() is stopping the detector: it must not stop ours
                self._stopped.wait()
            if self._running:
                return self
            self._listeners.unseal()  # closed by the last stop()'s on_stopped
            self._listeners.emit("on_started", Started(self._pattern))
            self._open_feed(*self._feed_wanted())
            self._det.start()
            self._running = True
            self._paused = False
            # The monitor owns pauses; the detector (which refuses pause/resume while stopped)
            # restored those it held at stop(): make it match what was paused or resumed since
            # (the resumes below, once the lock is let go).
            for topic in self._paused_topics:
                if topic in self._det:
                    self._det.pause(topic)
            keep = self._paused_handles()
            resume = [h for h in self._held_paused if h not in keep]
            self._held_paused = set()
            self._resuming.update(resume)
            error: BaseException | None = None
            try:
                if self._broker is not None:
                    self._subscription = self._broker.subscribe(self._pattern, self.handle_message)
                    self._connection_events.attach(self._broker)
            except BaseException as exc:
                error = exc
                self._running = False
                self._held_paused = self._paused_handles() | set(resume)
                self._resuming.difference_update(resume)
                chain = self._detach_feeds()
                self._stopping += 1
            else:
                _running.add(self)
        if error is not None:  # undone as stop() does, the detector's stop without the lock
            mark = self._stop_detector(chain)
            self._finish_feeds(chain, 1.0, mark, time.monotonic() + 1.0)
            raise error
        self._resume_in_detector(resume)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching: cancel the broker subscription, stop the detector, deliver the events
        produced so far, end the dispatch thread, then ``on_stopped``. Idempotent.

        What the dispatch thread has not delivered after ``timeout`` seconds is dropped (counted
        in ``stats()["dropped"]``), unless a lossless listener is registered: then stop() waits
        for the dispatch thread to hand over everything (it only fills the listener queues, a
        lossless one never blocks it; with ``listener_queue=None`` it waits for the calls).

        Called by a listener on the dispatch thread (``listener_queue=None``), it closes the
        event queue first, as nothing else would make room in it: what the detector still
        pushes is dropped (counted), and so is what the queue holds past the call in progress.

        Events emitted before stop() by another thread (a beat's ``resumed`` in flight, a
        :class:`~heartwire._core.ManualClock` advanced elsewhere) that still wait to be pushed,
        for room in a full ``"block"`` queue (the monitor's own, or a detector subscription of
        yours) or behind such a push, are waited for with the event queue open, within
        ``timeout`` (even with a lossless listener: a subscription of yours nobody reads would
        otherwise hang it); what reaches the queue after that is refused and counted in
        ``stats()["dropped"]``. Called from the consumer of such a queue, it waits out
        ``timeout`` for itself: close or unsubscribe that queue first.
        """
        while True:
            if self._paused:  # the detector keeps pauses across a restart; this one ends here
                with contextlib.suppress(RuntimeError):  # (stopped meanwhile)
                    self.resume()  # without the lock: see _resume_in_detector
            with self._lock:
                if not self._running:
                    return
                if self._paused:  # paused again meanwhile
                    continue
                self._held_paused = self._paused_handles() | self._resuming
                self._running = False
                self._paused = False
                _running.discard(self)
                subscription, self._subscription = self._subscription, None
                if self._broker is not None:
                    self._connection_events.detach(self._broker)
                if subscription is not None:
                    try:
                        subscription.cancel()
                    except Exception:
                        log.exception("cancelling the subscription to %r failed", self._pattern)
                chain = self._detach_feeds()
                self._stopping += 1
                break
        deadline = time.monotonic() + timeout
        mark = self._stop_detector(chain)
        # Outside the lock: a listener running on the dispatch thread may need it to finish.
        self._finish_feeds(chain, None if self._listeners.lossless else timeout, mark, deadline)
        # The last event each listener gets: whatever is emitted later (a dispatch thread that
        # did not finish in time, a late bad beat, a listener's error report) is refused and
        # counted (``listener_late``), and starts no listener thread again. An unqueued
        # listener's call in progress on another thread ends first (or, past the deadline,
        # makes on_stopped itself when it ends).
        remaining = max(0.0, deadline - time.monotonic())
        self._listeners.emit_last("on_stopped", Stopped(self._pattern), timeout=remaining)
        # Queued listeners get what was produced, then their threads end (a blocked one ends
        # by itself once it has caught up).
        if not self._listeners.close(max(0.0, deadline - time.monotonic())):
            log.warning("listeners of %r still busy when stop() timed out", self._pattern)

    def _stop_detector(self, chain: list[_Feed]) -> int | None:
        """Stop the detector for a stop() that noted itself in ``_stopping`` (under the lock),
        without the lock: the detector's stop takes in the beats in flight (a ``resumed`` may
        wait for room in a ``"block"`` queue) and joins the real-clock driver (which may be
        waiting for room), and the queue's consumer, a listener on the dispatch thread, may
        need the lock to return. Called on that thread, close the queues first: nothing else
        would make room.

        Returns the detector's outbox mark at its stop (for :meth:`_finish_feeds` to wait
        until every event emitted before it is pushed), or None on the dispatch thread."""
        try:
            if getattr(self._local, "dispatching", False):
                for feed in chain:
                    feed.queue.close()
                self._det.stop()
                return None
            self._det.stop()
            return self._det.outbox_mark()
        finally:
            with self._lock:
                self._stopping -= 1
                self._stopped.notify_all()

    def pause(self, topic: str | None = None) -> bool:
        """Pause the whole monitor, or one topic: no failures while paused (beats are still
        recorded; a FAILED topic's first beat while paused is noted for :meth:`resume`).
        Returns False if already paused; ``KeyError`` for an unknown topic. One topic can be
        paused while the monitor is stopped too: it is paused from :meth:`start` on."""
        with self._lock:
            if topic is not None:
                handle = self._handle_or_raise(topic)
                if topic in self._paused_topics:
                    return False
                self._paused_topics.add(topic)
                if self._running and not self._paused:
                    self._det.pause(handle)
                return True
            if not self._running:
                raise RuntimeError(f"monitor of {self._pattern!r} is not running")
            if self._paused:
                return False
            self._paused = True
            for handle in self._det.handles():
                with contextlib.suppress(KeyError):  # a removed topic
                    self._det.pause(handle)
            return True

    def resume(self, topic: str | None = None) -> bool:
        """Resume the whole monitor (topics paused one by one stay paused), or one topic (which
        stays paused while the whole monitor is). Returns False if it was not paused.

        Each resumed topic is due one period (plus grace) from now. A topic that was FAILED
        when paused and was heard while paused gets ``on_resumed`` now, its ``at`` being the
        first beat after the failure and ``downtime`` that beat's time minus ``since``. One
        that was not heard stays FAILED with its count: the next ``on_failed`` (``missed + 1``,
        same ``since``) comes one period after the resume. A topic resumed while the monitor
        is stopped (pauses are kept across a restart) is watched again from :meth:`start`.
        """
        with self._lock:
            if topic is not None:
                handle = self._handle_or_raise(topic)
                if topic not in self._paused_topics:
                    return False
                self._paused_topics.discard(topic)
                if not (self._running and not self._paused):
                    return True
                resume = [handle]
            else:
                if not self._running:
                    raise RuntimeError(f"monitor of {self._pattern!r} is not running")
                if not self._paused:
                    return False
                self._paused = False
                keep = self._paused_handles()
                resume = [h for h in self._det.handles() if h not in keep]
            self._resuming.update(resume)
        self._resume_in_detector(resume)
        return True

    def _resume_in_detector(self, handles: list[int]) -> None:
        """Resume ``handles`` in the detector (noted in ``_resuming`` by the caller, under the
        lock), without the lock: a resume may emit ``resumed`` and, under ``"block"``, wait for
        room in the event queue, whose consumer (a listener on the dispatch thread) may call
        the monitor and need the lock. Then, under the lock, pause again those paused again
        meanwhile (a resume that came after a stop() is redone by the next start())."""
        if not handles:
            return
        for handle in handles:
            with contextlib.suppress(KeyError):  # removed meanwhile
                self._det.resume(handle)
        with self._lock:
            self._resuming.difference_update(handles)
            if not self._running:
                return
            if self._paused:
                again = handles
            else:
                keep = self._paused_handles()
                again = [h for h in handles if h in keep]
            for handle in again:
                with contextlib.suppress(KeyError):
                    self._det.pause(handle)

    def _paused_handles(self) -> set[int]:
        """The handles of the topics paused one by one (called with the lock held)."""
        return {
            handle
            for topic in self._paused_topics
            if (handle := self._det.handle(topic)) is not None
        }

    def _handle_or_raise(self, topic: str) -> int:
        handle = self._det.handle(topic)
        if handle is None:
            raise KeyError(f"unknown topic: {topic!r}")
        return handle

    def __enter__(self) -> HeartbeatMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- status ----------------------------------------------------------------------------

    def status(self, topic: str) -> TopicStatus:
        """A snapshot of one topic (``KeyError`` if it is not watched)."""
        return TopicStatus.from_core(self._det.status(topic), self._wall_offset)

    def statuses(self) -> list[TopicStatus]:
        """A snapshot of every topic."""
        offset = self._wall_offset
        return [TopicStatus.from_core(s, offset) for s in self._det.statuses()]

    def counts(self) -> dict[str, int]:
        """How many topics are in each state."""
        return self._det.counts()

    def stats(self) -> dict[str, Any]:
        """Counters: the detector's (``beats``, ``unknown``, ``refused``, ``failed``, ``resumed``,
        ``received``, ``topics``, ``local_pauses`` and their total length ``local_pause_ns``,
        ``lagging`` episodes of the intake and its lag now ``ingest_lag_ns``),
        ``local_pause_seconds`` (the same length in seconds), ``ingest_lag`` (the intake's lag
        now, seconds: 0.0 unless it is backlogged), ``learned`` topics, ``rejected``
        beats by reason (a dict), ``dispatched`` events, ``dropped`` events (lost to the overflow
        policy, held by a dispatch thread that :meth:`stop` did not wait for, or pushed by a
        beat that raced :meth:`stop` after its queue was closed),
        ``listener_errors``, ``dispatch_errors``, ``listener_dropped`` (events the
        listener queues' overflow policy discarded), ``listener_late`` (events refused because
        they came after ``on_stopped``: nothing reaches a listener after it),
        ``listener_queue_depth`` (events waiting in them now), ``listeners`` (per listener,
        as :meth:`ListenerSet.stats <heartwire.listeners.ListenerSet.stats>`),
        ``dispatch_queue_depth`` (detector events not yet taken by the dispatch thread),
        ``disconnects`` and ``reconnects`` (of the broker connection)."""
        out: dict[str, Any] = dict(self._det.stats())
        out["local_pause_seconds"] = out["local_pause_ns"] / 1e9
        out["ingest_lag"] = out["ingest_lag_ns"] / 1e9
        with self._rejected_lock:
            rejected = dict(self._rejected)
        dropped = self._losses
        depth = 0
        feed = self._feed
        while feed is not None:
            dropped += _losses(feed.queue)
            depth += len(feed.queue)
            feed = feed.prev
        connection = self._connection_events
        out.update(
            learned=self._learned,
            rejected=rejected,
            dispatched=self._dispatched,
            dropped=dropped,
            listener_errors=self._listeners.errors,
            dispatch_errors=self._dispatch_errors,
            listener_dropped=self._listeners.dropped,
            listener_late=self._listeners.late,
            listener_queue_depth=self._listeners.queue_depth,
            listeners=self._listeners.stats(),
            dispatch_queue_depth=depth,
            disconnects=connection.disconnects,
            reconnects=connection.reconnects,
        )
        return out

    def metrics(self) -> dict[str, Any]:
        """A snapshot for dashboards (what :mod:`heartwire.metrics` exports to Prometheus):

        - ``topics``: topics watched; ``states``: how many in each state (all six keys);
        - ``beats``: beats recorded; ``learned``: topics learned from beats;
        - ``failed``, ``resumed``, ``local_pauses``, ``lagging``: events produced;
        - ``ingest_lag``: how far the intake is behind its feed now, seconds;
        - ``rejected``: refused beats by reason (decode reasons, ``pattern_mismatch``,
          ``too_many_topics``, ``bad_topic``, ``replayed``, ``stale``), ``rejected_total``
          their sum;
        - ``dropped``: events lost, by where: ``dispatch`` (the detector's queue overflow
          policy) and ``listeners`` (the listener queues');
        - ``listener_late``: events refused because they came after ``on_stopped``;
        - ``listener_errors``, ``dispatch_errors``: calls that raised;
        - ``dispatch_queue_depth``, ``listener_queue_depth``: events waiting now;
        - ``disconnects``, ``reconnects``: of the broker connection;
        - ``max_topics``: the cap on topics (``None``: none).
        """
        stats = self.stats()
        rejected: dict[str, int] = stats["rejected"]
        return {
            "topics": len(self._det),
            "states": self.counts(),
            "beats": stats["beats"],
            "learned": stats["learned"],
            "failed": stats["failed"],
            "resumed": stats["resumed"],
            "local_pauses": stats["local_pauses"],
            "lagging": stats["lagging"],
            "ingest_lag": stats["ingest_lag"],
            "rejected": rejected,
            "rejected_total": sum(rejected.values()),
            "dropped": {"dispatch": stats["dropped"], "listeners": stats["listener_dropped"]},
            "listener_late": stats["listener_late"],
            "listener_errors": stats["listener_errors"],
            "dispatch_errors": stats["dispatch_errors"],
            "dispatch_queue_depth": stats["dispatch_queue_depth"],
            "listener_queue_depth": stats["listener_queue_depth"],
            "disconnects": stats["disconnects"],
            "reconnects": stats["reconnects"],
            "max_topics": self._max_topics,
        }

    # -- events ----------------------------------------------------------------------------

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until listeners have been handed every event produced so far; False on timeout.

        With listener queues (the default), that means each listener has returned from every
        event produced so far (or its queue dropped it). Returns False at once when called from
        a listener (it cannot wait for itself).
        """
        if getattr(self._local, "dispatching", False) or self._listeners.on_listener_thread():
            return False
        deadline = time.monotonic() + timeout
        feed = self._feed
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
        return self._listeners.drain(max(0.0, deadline - time.monotonic()))

    def _feed_wanted(self) -> tuple[bool, Overflow]:
        """Whether the feed should carry ``received`` events, and its overflow policy: "block"
        while some listener is lossless (nothing may be coalesced or dropped before it)."""
        listeners = self._listeners
        overflow: Overflow = "block" if listeners.lossless else self._overflow
        return listeners.wants("on_received"), overflow

    def _open_feed(self, received: bool, overflow: Overflow) -> None:
        # Called with the lock held.
        old = self._feed
        if old is not None and old.received:
            # From now on `received` events may come twice: to this feed, or (pushed late) to
            # a later one that wants them again.
            self._newest.overlap = True
        queue = self._det.subscribe(capacity=self._capacity, overflow=overflow, received=received)
        feed = _Feed(queue, received, overflow, old)
        feed.dispatcher = Dispatcher(
            queue,
            lambda batch: self._deliver(feed, batch),
            on_error=self._dispatch_failed,
            name=f"heartwire-monitor[{self._pattern}]",
        )
        self._feed = feed
        # The new queue is fed from now on: its thread must run before anything here waits for
        # the detector. Under "block" the driver may already be waiting for room in it (or in
        # the old one) while holding the detector's locks, which unsubscribe needs.
        feed.dispatcher.start()
        if old is not None:
            # Closing first releases a driver waiting for room in the old queue; what it would
            # have pushed there goes to the new one too. The old thread ends once it is empty.
            old.queue.close()
            self._det.unsubscribe(old.queue)

    def _sync_received(self) -> None:
        """Open a new feed if listeners' interest in ``received`` events, or in losing none,
        changed."""
        with self._lock:
            feed = self._feed
            if not self._running or feed is None:
                return
            received, overflow = self._feed_wanted()
            if (received, overflow) != (feed.received, feed.overflow):
                self._open_feed(received, overflow)

    def _detach_feeds(self) -> list[_Feed]:
        """The current feed and those it replaces, oldest first (called with the lock held)."""
        feed = self._feed
        self._feed = None
        chain: list[_Feed] = []
        while feed is not None:
            chain.append(feed)
            feed = feed.prev
        chain.reverse()
        return chain

    def _finish_feeds(
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

        Each queue is closed first, as in :meth:`_open_feed`: a producer still pushing (a beat
        taken just before the detector stopped) may be waiting for room in a full ``"block"``
        queue while holding the detector's locks, which ``unsubscribe`` needs, and once the
        thread has ended nothing would make room. Closing releases it (what it pushes later is
        refused and counted in ``dropped``); the thread still delivers what is queued."""
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
            losses = stats["dropped_oldest"] + stats["dropped_newest"] + stats["coalesced"]
            if i == len(chain) - 1:
                # Refused by the closed queue. (A replaced feed's were pushed to its successor.)
                losses += stats["rejected_closed"]
            with self._rejected_lock:
                self._losses += losses
            if dispatcher is not None and dispatcher.alive:
                log.warning(
                    "stopping %r: the dispatch thread did not deliver everything within %s s; "
                    "the rest is dropped (counted in stats()['dropped'])",
                    self._pattern,
                    "-" if timeout is None else f"{timeout:.3g}",
                )

    def _dispatch_failed(self, exc: BaseException, batch: list[Event]) -> None:
        self._dispatch_errors += 1
        log.error("dispatching %d events of %r failed", len(batch), self._pattern, exc_info=exc)

    def _deliver_lag(self, ev: Event, emit: Callable[[str, object], None], off: float) -> None:
        """Hand a ``lagging`` or ``caught_up`` event to the listeners; say so in the log, and
        when the lag went past ``max_ingest_lag`` (deadlines were no longer held that far)."""
        if ev.kind == "lagging":
            lag = ev.lag or 0.0
            log.warning("monitor %s: its intake is %.3f s behind its feed", self._pattern, lag)
            emit("on_lagging", Lagging(lag, ev.at, wall_offset=off))
            return
        duration, max_lag = ev.duration or 0.0, ev.max_lag or 0.0
        bound = self._det.max_ingest_lag
        if bound is not None and max_lag > bound:
            log.warning(
                "monitor %s: its intake lagged up to %.3f s, past max_ingest_lag (%.3f s): "
                "deadlines were judged only %.3f s behind the clock, so topics may have been "
                "failed for the monitor's own backlog",
                self._pattern,
                max_lag,
                bound,
                bound,
            )
        else:
            log.info(
                "monitor %s: its intake caught up after %.3f s (largest lag %.3f s)",
                self._pattern,
                duration,
                max_lag,
            )
        emit("on_caught_up", CaughtUp(duration, max_lag, ev.at, wall_offset=off))

    def _deliver(self, feed: _Feed, batch: list[Event]) -> None:
        """The dispatch thread's handler: core events to listener calls."""
        local = self._local
        local.dispatching = True
        try:
            if feed.prev is not None:
                # Deliver everything of the feeds this one replaces first, oldest first
                # (`newest` then skips what both got). The whole chain: a feed replaced before
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
                feed.prev = None
            newest = self._newest
            listeners = self._listeners
            emit = listeners.emit
            wants_received = listeners.wants("on_received")
            off = self._wall_offset
            for i, ev in enumerate(batch):
                if feed.finished:  # stop() did not wait for this: after on_stopped, never
                    with self._rejected_lock:
                        self._losses += len(batch) - i
                    break
                kind = ev.kind
                if kind == "received":
                    if wants_received:
                        seq = ev.seq
                        got = newest.received
                        if got is None:
                            got = newest.received = _Newest()
                        code = -1 if seq is None else seq & _SEQ_BITS
                        if not got.fresh(ev.handle, ev.at, code) and newest.overlap:
                            continue  # both feeds of a switch got it
                        emit(
                            "on_received",
                            Received(ev.topic, seq, ev.latency, ev.at, wall_offset=off),
                        )
                    continue
                at = ev.at
                if kind == "failed":
                    missed = ev.missed
                    if not newest.fresh(ev.handle, at, missed * 2):
                        continue  # delivered already (both feeds of a switch got it)
                    since = ev.since
                    since = at if since is None else since
                    emit("on_failed", Failed(ev.topic, missed, since, at, wall_offset=off))
                elif kind == "resumed":
                    missed = ev.missed
                    if not newest.fresh(ev.handle, at, missed * 2 + 1):
                        continue
                    downtime = ev.downtime
                    resumed = Resumed(ev.topic, missed, downtime or 0.0, at, wall_offset=off)
                    emit("on_resumed", resumed)
                elif kind == "local_pause":
                    if at <= newest.pause_at:
                        continue
                    newest.pause_at = at
                    duration = ev.duration
                    emit("on_local_pause", LocalPause(duration or 0.0, at, wall_offset=off))
                elif kind in ("lagging", "caught_up") and newest.fresh_lag(kind, at):
                    self._deliver_lag(ev, emit, off)
        finally:
            local.dispatching = False
            with self._progress:
                self._dispatched += len(batch)
                feed.popped += len(batch)
                self._progress.notify_all()


class HeartbeatSubscriber(HeartbeatMonitor):
    """The one-topic form of :class:`HeartbeatMonitor`: ``topic`` is expected from the start.

    Its period is ``period`` until the publisher's beats say otherwise; call
    ``expect(topic, period=...)`` to fix it. Other keywords as for :class:`HeartbeatMonitor`.
    """

    def __init__(
        self,
        broker: Transport | None,
        topic: str,
        period: float = 1.0,
        allowed_misses: int = 1,
        **options: Any,
    ) -> None:
        validate_topic(topic, "topic")
        super().__init__(broker, topic, period, allowed_misses, **options)
        self._topic = topic
        self.expect(topic)

    @property
    def topic(self) -> str:
        return self._topic

    def status(self, topic: str | None = None) -> TopicStatus:
        """A snapshot of the topic."""
        return super().status(self._topic if topic is None else topic)


def _delivered(feed: _Feed, pushed: int) -> bool:
    """Whether ``feed``'s handler has seen every one of its first ``pushed`` events not lost."""
    stats = feed.queue.stats()
    return feed.popped >= pushed - stats["dropped_oldest"] - stats["coalesced"]


def _losses(queue: EventQueue) -> int:
    stats = queue.stats()
    return stats["dropped_oldest"] + stats["dropped_newest"] + stats["coalesced"]


def _as_list(names: Any) -> list[Any]:
    if hasattr(names, "to_pylist"):
        return names.to_pylist()  # type: ignore[no-any-return]
    if hasattr(names, "tolist"):
        return names.tolist()  # type: ignore[no-any-return]
    return list(names)


def _is_array(names: object) -> bool:
    return hasattr(names, "__arrow_c_array__") or hasattr(names, "dtype")
