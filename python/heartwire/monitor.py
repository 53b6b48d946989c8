"""Monitors: watch topics for missed heartbeats and tell listeners.

A :class:`HeartbeatMonitor` subscribes to a pattern on a broker (``"svc.>"``) and records each
beat in the native :class:`~heartwire._core.Detector`, which counts missed periods on its own
thread. Beats go through the monitor's native :class:`~heartwire._core.Intake` (decoding,
signatures, replays, learning, the topic table; ``rust/ingest/``): over STOMP the core reads them
straight off the socket, and Python sees only what is not a beat (see ``docs/ingest.md``); a
body the native decoder is not sure of is decoded by :class:`~heartwire.beat.BeatCodec`.
The detector's events go through a bounded queue to a :class:`~heartwire.dispatch.Dispatcher`
thread (the event feed, :class:`~heartwire.feed.EventFeed`, which the monitor owns), which
takes them out in
batches (up to 65536 events, each an :class:`~heartwire.events.EventBatch` built in the core)
and hands each batch to the listeners: whole to those that override
:meth:`~heartwire.listeners.SubscriberListener.on_events`, as :class:`~heartwire.events.Failed`,
:class:`~heartwire.events.Resumed`, :class:`~heartwire.events.Received` and
:class:`~heartwire.events.LocalPause` calls to the others. Detection never waits for Python.

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
:meth:`~HeartbeatMonitor.stop`, ``on_exception`` for a refused beat in the thread that read
it (the connection's receiving thread over STOMP, after the read; the publishing thread on the
embedded broker) or, for :meth:`~HeartbeatMonitor.beat` calls, on the dispatch thread within
about 0.1 s (or at :meth:`~HeartbeatMonitor.drain`). ``on_stopped`` is still the last call: it waits
for the calls in progress on other threads, and if :meth:`~HeartbeatMonitor.stop`'s ``timeout``
runs out first, the last of those calls makes it on its thread as it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as _dt
import logging
import math
import threading
import time
from collections.abc import Iterable
from typing import Any, Literal
from zoneinfo import ZoneInfo

from heartwire import _core, _validate
from heartwire._core import Detector, Intake, ManualClock, Phi
from heartwire._exit import Running
from heartwire._throttle import worth_logging
from heartwire.aio import WAITABLE, EventStream, ReceivedTopicWait, TopicWait
from heartwire.beat import DECODE_REASONS, BeatCodec, DecodeError
from heartwire.control import (
    CONTROL_OPS,
    CONTROL_REASONS,
    CONTROL_TOPIC,
    RESERVED_PREFIX,
    ControlError,
    ControlReceiver,
)
from heartwire.events import (
    ExceptionEvent,
    Failed,
    Received,
    Resumed,
    Started,
    State,
    Stopped,
    TopicStatus,
    real_clock_offset,
)
from heartwire.feed import EventFeed, Overflow, _Feed
from heartwire.listeners import (
    ConnectionEvents,
    ListenerOverflow,
    ListenerSet,
    SubscriberListener,
)
from heartwire.maintenance import OFFSET_MOVED, MaintenanceWindow, Windows
from heartwire.policy import Silence, silence_end
from heartwire.tally import EventTally, Groups
from heartwire.transport import Message, Subscription, Transport
from heartwire.transport.patterns import validate_pattern, validate_topic

__all__ = ["HeartbeatMonitor", "HeartbeatSubscriber"]

log = logging.getLogger("heartwire.monitor")

_OVERFLOWS: tuple[Overflow, ...] = ("coalesce", "drop-oldest", "drop-newest", "block")

#: The default ``max_topics``: a sender inventing topic names cannot grow a monitor past this.
DEFAULT_MAX_TOPICS = 1_000_000
#: The default size of each listener's own queue (``listener_queue``).
DEFAULT_LISTENER_QUEUE = 10_000
#: The size of each listener's own queue for detector events (batches, counted in events):
#: one failure of every topic at the default ``max_topics`` fits (batches hold events in the
#: core's compact form, ~70 bytes each with its topic name, not as Python objects).
DEFAULT_LISTENER_BATCH_QUEUE = 1 << 20
#: The periods a beat may carry, seconds; a beat with another is refused (``"bad_period"``):
#: the core cannot time less than a nanosecond or more than ~30 years, and a hostile 1 ns
#: period would fail its topic on every tick.
MIN_BEAT_PERIOD: float = _core.MIN_BEAT_PERIOD
MAX_BEAT_PERIOD: float = _core.MAX_BEAT_PERIOD
#: How many boot ids of a topic a monitor with a key remembers (with each one's last seq).
REPLAY_BOOTS: int = _core.REPLAY_BOOTS
#: The default ``max_beat_age`` (``None``) of a topic with period ``p``: ``BEAT_AGE_PERIODS * p
#: + BEAT_AGE_SKEW`` seconds (3 periods, plus a minute of clock skew between the hosts).
#: These rules are applied by the core's intake; the values are read from it (one copy).
BEAT_AGE_PERIODS: float = _core.BEAT_AGE_PERIODS
BEAT_AGE_SKEW: float = _core.BEAT_AGE_SKEW


def _short(value: object, limit: int = 120) -> str:
    """``repr(value)``, cut to ``limit`` characters: hostile names stay out of logs and events."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _text(value: str | None) -> str | None:
    """``value`` as text the core takes: a lone surrogate (JSON can carry one, UTF-8 cannot)
    written as its escape, e.g. ``"\\udc80"``, instead of failing the message."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


# Running monitors, stopped at interpreter exit.
_running: Running[HeartbeatMonitor] = Running(lambda monitor: monitor.stop(timeout=1.0))


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
      ``"coalesce"`` stays the default because a mass failure (every topic failing at once, far
      more events than ``capacity``) then loses nothing, one event per topic, and costs about
      what the other policies cost per event (its overflow is a table indexed by topic, taken
      straight into the dispatch thread's batches), without ``"block"``'s stalls of detection.
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
      one drops (``"drop-oldest"`` or ``"drop-newest"``; counted), in events. At the default
      (:data:`DEFAULT_LISTENER_QUEUE`, 10 000) the detector's events, which reach a listener
      queue in batches, are bounded at :data:`DEFAULT_LISTENER_BATCH_QUEUE` (2**20) instead,
      so that a failure of every topic at once reaches a listener that keeps up whole; any
      other value bounds every event. ``None``: no queues, listeners
      are called in turn on the producing thread, and a slow one delays the others. Under
      ``"block"`` (a lossless listener) a listener called on the dispatch thread must not make
      the detector emit while the event queue is full: the push waits for room that only its
      own thread would make, and detection stops with it. The calls that may emit: recording a
      beat (``beat``, ``beat_many``, ``beat_handles``, ``handle_message``); :meth:`resume` (a
      topic that recovered while paused); :meth:`silence` (one that started before what the
      driver judged is applied at once), :meth:`unsilence`, :meth:`end_maintenance` and
      :meth:`maintenance` (a silence's end releases the alerts it held back); :meth:`remove`
      and :meth:`pause` (a FAILED parent going releases the children it suppressed).
      (:meth:`stop` is safe there: it closes the queue first.)

    - ``flap_threshold``, ``flap_window``, ``flap_hold``: a topic with more than
      ``flap_threshold`` outages (failed, then resumed) within ``flap_window`` seconds is
      flapping: listeners get ``on_flapping(Flapping(topic, flapping=True, ...))``, and its
      failed and resumed events are held back meanwhile, the resumed that starts it too
      (``flap_hold=False``: delivered as usual); it settles ``flap_window`` after its last
      transition (``Flapping(..., flapping=False)``, then a ``Failed`` if it is down, or a
      ``Resumed`` if it is up and the last ``Failed`` delivered was never resolved).
      ``allowed_misses`` still decides when an outage begins. Default: off. See
      ``docs/flapping.md``.
    - ``wall_offset``: seconds to add to the monitor's clock to get Unix time, for the times
      people and other programs read (each event's and status's ``wall_*`` properties, the
      CLI's output, :class:`~heartwire.alerts.AlertListener`'s alerts). Default: measured
      now (``time.time() - time.monotonic()`` for the real clock; for a ManualClock, its
      current reading stands for the current wall time). On the real clock with none given,
      the monitor follows the wall clock: when the offset read again (wherever a wall time is
      shown or placed) moved by more than a second (a suspend, a step), the new one replaces
      it everywhere: events, statuses, silences, maintenance windows.

    - ``control``: the control topic (default :data:`~heartwire.control.CONTROL_TOPIC`,
      ``"_hw.control"``; ``None``: none). A monitor with a ``key`` subscribes to it and takes
      signed silences sent there (``heartwire silence``, :func:`heartwire.control.send_silence`)
      as :meth:`silence` calls; unsigned, forged, stale, replayed and malformed ones are refused,
      counted in :meth:`stats` (``control_refused``) and reported to ``on_exception``
      (``"control_<reason>"``). A monitor without a key does not subscribe. Topics under
      ``_hw.`` are never taken for beats; another control topic must not match ``pattern``.
      See ``docs/silences.md``.

    - ``group_depth``, ``max_groups``: how :mod:`heartwire.metrics` groups topics in the
      series that are always exported (topics by state, ``failed``/``resumed`` events,
      downtime): by the first ``group_depth`` ``.``-separated segments of the name, the first
      ``max_groups`` such groups seen keeping their own ``group`` label and the rest sharing
      ``"other"`` (see ``docs/prometheus.md``).

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
        group_depth: int = 1,
        max_groups: int = 100,
        flap_threshold: int | None = None,
        flap_window: float | None = None,
        flap_hold: bool = True,
        control: str | None = CONTROL_TOPIC,
    ) -> None:
        if (flap_threshold is None) != (flap_window is None):
            raise ValueError(
                f"give flap_threshold and flap_window together, got flap_threshold="
                f"{flap_threshold!r}, flap_window={flap_window!r}"
            )
        if flap_threshold is not None:
            flap_threshold = _validate.count(flap_threshold, "flap_threshold", 1)
            flap_window = _validate.seconds(flap_window, "flap_window")
        if not isinstance(flap_hold, bool):
            raise TypeError(f"flap_hold must be a bool, got {flap_hold!r}")
        self._pattern = validate_pattern(pattern, "pattern")
        # Metrics by group (heartwire.metrics): bounded labels, counted from the event feed.
        self._groups = Groups(group_depth, max_groups)
        self._tally = EventTally(self._groups)
        self._period = _validate.seconds(period, "period")
        self._allowed_misses = _validate.count(allowed_misses, "allowed_misses", 1)
        self._grace = _validate.seconds(grace, "grace", allow_none=True, allow_zero=True)
        if max_local_pause is not None:
            max_local_pause = _validate.seconds(max_local_pause, "max_local_pause")
        if lag_threshold is not None:
            lag_threshold = _validate.seconds(lag_threshold, "lag_threshold")
        if clock is not None and not isinstance(clock, ManualClock):
            raise TypeError(f"clock must be a ManualClock or None, got {type(clock).__name__}")
        overflow = _validate.choice(overflow, "overflow", _OVERFLOWS)
        self._capacity = _validate.count(capacity, "capacity", 1)
        tick = _validate.seconds(tick, "tick")
        if max_topics is not None:
            max_topics = _validate.count(max_topics, "max_topics", 0)
        if broker is not None and not callable(getattr(broker, "subscribe", None)):
            raise TypeError(f"broker must be a Transport or None, got {type(broker).__name__}")
        self._broker = broker
        self._overflow = overflow
        self._max_topics = max_topics
        self._codec = BeatCodec(key=key)  # checks the key; decodes what the core defers
        max_beat_age = _validate.seconds(
            max_beat_age, "max_beat_age", allow_none=True, allow_inf=True
        )
        self._max_beat_age = max_beat_age
        if listener_queue is not None:
            listener_queue = _validate.count(listener_queue, "listener_queue", 1)
        self._listeners: ListenerSet[SubscriberListener] = ListenerSet(
            SubscriberListener,
            self._pattern,
            queue_size=listener_queue,
            overflow=listener_overflow,
            batch_queue_size=DEFAULT_LISTENER_BATCH_QUEUE
            if listener_queue == DEFAULT_LISTENER_QUEUE
            else listener_queue,
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
        # The beat inter-arrival histogram (metrics): counted in the core on the beat path.
        self._det.count_intervals = True
        if flap_threshold is not None and flap_window is not None:
            self._det.set_flapping(flap_threshold, flap_window, hold=flap_hold)
        # Every rule a beat passes before it is recorded, and the topic table (periods, pins,
        # graces, learning, replays, pauses by name), in the core: see _core.Intake.
        self._intake = Intake(
            self._det,
            self._pattern,
            self._period,
            grace=self._grace,
            key=key.encode("utf-8") if isinstance(key, str) else key,
            max_topics=max_topics,
            max_beat_age=max_beat_age,
            max_size=self._codec.max_size,
        )
        if type(self).beat is HeartbeatMonitor.beat:
            # beat() straight into the core: no Python frame on the single-beat path.
            self.beat = self._intake.beat  # type: ignore[method-assign]
        self._clock = clock
        self._control = self._control_receiver(control)
        self._control_sub: Subscription | None = None
        wall_offset = _validate.seconds(
            wall_offset, "wall_offset", allow_none=True, allow_negative=True
        )
        # On the real clock with no offset given, the offset is read again wherever wall times
        # are shown or turned into the monitor's clock (see _offset_now): the monotonic clock
        # stops while the host is suspended, the wall clock may be stepped.
        self._follow_offset = wall_offset is None and clock is None
        if wall_offset is None:
            wall_offset = real_clock_offset() if clock is None else time.time() - clock.now()
        self._wall_offset = float(wall_offset)

        self._lock = threading.RLock()  # lifecycle, learning, pausing, feed switches
        # stop()s that let go of the lock to stop the detector; start() waits for them.
        self._stopping = 0
        self._stopped = threading.Condition(self._lock)
        # The handles of the topics the detector may hold paused since the last stop(): it
        # keeps them paused across a restart, so start() resumes those resumed meanwhile.
        self._held_paused: set[int] = set()
        # Handles being resumed in the detector by a thread that let go of the lock for it.
        self._resuming: set[int] = set()
        # asyncio: the event streams open (closed by ``async with``'s exit) and the wait_for
        # calls waiting (poked by resume() and remove(), which change states without an
        # event), under a lock of their own: the loop's thread never waits for the monitor's
        # lock, which start() and stop() hold across network calls (see _register).
        self._aio_lock = threading.Lock()
        self._aio_open = False  # asyncio listeners may register: running, stop() not begun
        self._streams: set[EventStream] = set()
        self._waits: set[TopicWait] = set()
        self._subscription: Subscription | None = None
        # The detector's events to the listeners (its switches run under self._lock).
        # Maintenance windows: their occurrences are core silences, registered ahead and topped
        # up from _after_batch (see maintenance.Windows).
        self._windows = Windows(
            self._register_silence,
            self._det.unsilence,
            self._det.now,
            self._wall_offset,
            self._offset_now if self._follow_offset else None,
        )
        self._top_up_errors = 0
        self._feed = EventFeed(
            self._det,
            self._listeners,
            pattern=self._pattern,
            capacity=self._capacity,
            overflow=self._overflow,
            wall_offset=self._offset_now,
            after_batch=self._after_batch,
            tally=self._tally.add,
        )

    # -- properties ------------------------------------------------------------------------

    # Whether the monitor runs, and whether it is paused as a whole: kept in the intake, which
    # learns topics on the reading thread (a topic learned while paused starts paused).
    @property
    def _running(self) -> bool:
        return self._intake.running

    @_running.setter
    def _running(self, on: bool) -> None:
        self._intake.running = on

    @property
    def _paused(self) -> bool:
        return self._intake.paused_all

    @_paused.setter
    def _paused(self, on: bool) -> None:
        self._intake.paused_all = on

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
    def control_topic(self) -> str | None:
        """The control topic this monitor takes signed silences from (``None``: none, as
        without a ``key``)."""
        return None if self._control is None else self._control_topic

    def _control_receiver(self, control: str | None) -> ControlReceiver | None:
        """The receiver of the control topic (constructor), if there is one: only with a key."""
        if control is None:
            return None
        validate_topic(control, "control")
        if not control.startswith(RESERVED_PREFIX) and self._intake.matches(control):
            raise ValueError(
                f"control topic {control!r} matches the monitor's pattern {self._pattern!r}: "
                f"its messages would be taken for beats; pick one outside it (topics under "
                f"{RESERVED_PREFIX!r}, as the default {CONTROL_TOPIC!r}, never are)"
            )
        self._control_topic = control
        if not self._codec.signed:
            return None
        return ControlReceiver(
            self._codec,
            control,
            self._control_silence,
            self.unsilence,
            self._report_control,
            self._control_age,
        )

    def _control_silence(self, pattern: str, until: _dt.datetime, reason: str) -> int:
        """A control message's silence (on the transport's thread: registering one emits no
        event, so never waits); ``expired`` if it ends before now on this monitor's clock."""
        try:
            return self.silence(pattern, until=until, reason=reason).id
        except ValueError as exc:
            now = self._det.now() + self._offset_now()
            if until.timestamp() <= now:  # judged after the fact: no race with the clock
                raise ControlError(
                    "expired", f"until {until.isoformat()} is not after this monitor's now"
                ) from exc
            raise

    def _offset_now(self) -> float:
        """The monitor's one current wall offset, used wherever a wall time is shown (events,
        statuses, silences, :attr:`wall_offset`) or turned into the monitor's clock (silences
        until a time, maintenance windows): ``wall_offset`` as given or measured, replaced by
        the offset read now when the monitor is on the real clock with none given (see
        ``_follow_offset``) and that moved by more than
        :data:`~heartwire.maintenance.OFFSET_MOVED` (a suspend, a step of the wall clock).
        Read from any thread without a lock: one float assigned whole; two threads seeing
        the same move store offsets a few microseconds apart, either as good."""
        if not self._follow_offset:
            return self._wall_offset
        live = real_clock_offset()
        if abs(live - self._wall_offset) > OFFSET_MOVED:
            self._wall_offset = live
        return self._wall_offset

    def _control_age(self) -> float:
        """How far a control message's ``sent`` may be from the wall clock: ``max_beat_age``,
        or the default bound of a beat of a topic not watched yet."""
        if self._max_beat_age is not None:
            return self._max_beat_age
        return BEAT_AGE_PERIODS * self._period + BEAT_AGE_SKEW

    def _report_control(self, error: ControlError) -> None:
        self._listeners.emit(
            "on_exception",
            ExceptionEvent(self._pattern, f"control_{error.reason}", error, error.detail),
        )

    @property
    def max_local_pause(self) -> float | None:
        """Seconds the monitor may go without running before it counts a local pause (``None``:
        never). Can be changed while it runs."""
        return self._det.max_local_pause

    @max_local_pause.setter
    def max_local_pause(self, seconds: float | None) -> None:
        if seconds is not None:
            seconds = _validate.seconds(seconds, "max_local_pause")
        self._det.max_local_pause = seconds

    @property
    def lag_threshold(self) -> float | None:
        """Seconds the intake may lag behind its feed before a ``lagging`` event (``None``: the
        ingest-lag guard is off). Can be changed while it runs."""
        return self._det.lag_threshold

    @lag_threshold.setter
    def lag_threshold(self, seconds: float | None) -> None:
        if seconds is not None:
            seconds = _validate.seconds(seconds, "lag_threshold")
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
        ``wall_offset`` in the class docs; every event and status carries it). On the real
        clock with none given, it follows the wall clock: replaced when it moved by more than
        a second (a suspend, a step), as read now."""
        return self._offset_now()

    def wall_time(self, t: float) -> float:
        """A reading ``t`` of the monitor's clock (an event's ``at``...) as Unix seconds."""
        return t + self._offset_now()

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
        monitor's pattern, and not be one of heartwire's own (under ``"_hw."``).
        """
        validate_topic(topic, "topic")
        if not self._intake.matches(topic):
            raise ValueError(
                f"topic {topic!r} does not match the monitor's pattern {self._pattern!r}"
            )
        if period is not None:
            period = _validate.seconds(period, "period")
        if allowed_misses is not None:
            allowed_misses = _validate.count(allowed_misses, "allowed_misses", 1)
        grace = _validate.seconds(grace, "grace", allow_none=True, allow_zero=True)
        if phi is not None and not isinstance(phi, Phi):
            raise TypeError(f"phi must be a Phi or None, got {type(phi).__name__} {phi!r}")
        with self._lock:
            return self._intake.expect(topic, period, allowed_misses, phi, grace)

    def adopt(self, records: Any) -> list[int]:
        """Take topics over from another monitor of a group (``docs/groups-design.md`` §3):
        ``records`` is a :class:`~heartwire.groups.ShardSnapshot` or an iterable of
        :class:`~heartwire.groups.TopicRecord`. Returns their handles in order.

        Each topic is watched from now on as by :meth:`expect` (a new one with the record's
        ``period``; a known one keeps its settings and deadlines). One not FAILED gets a fresh
        start: a full period (plus grace) from now. A FAILED one (``failed_since`` set, Unix
        seconds) carries its outage over without a new first ``failed``: FAILED at once,
        ``missed`` kept, the next ``failed(missed + 1)`` one period from now with the same
        ``since`` (and the record's ``reason``, an explicit failure's, as after a ``down``
        beat), its next beat a ``resumed`` whose downtime runs from ``failed_since``; a
        known topic heard after ``failed_since`` gets that ``resumed`` now. The record's marks
        (``alerted``, ``silenced``, ``suppressed_by``, ``flapping``, when it has them; else an
        alerted outage) say what the old owner's listeners were told.

        ``failed_since`` is turned into the monitor's clock with :attr:`wall_offset`; a time
        after now (the other host's clock ahead) counts as now, and one before the clock's zero
        (the host's boot, on the real clock) as that zero. Every record is checked first:
        a bad one raises (``TypeError``/``ValueError`` naming it) and changes nothing.
        """
        from heartwire.control import RESERVED_PREFIX

        if not self._det.running:
            raise RuntimeError("adopt needs a started monitor (start it first)")
        topics = getattr(records, "topics", records)
        try:
            rows = list(topics)
        except TypeError:
            raise TypeError(
                "records must be a ShardSnapshot or an iterable of TopicRecord, got "
                f"{type(records).__name__}"
            ) from None
        offset = self._offset_now()
        now = self._det.now()
        names: list[str] = []
        periods: list[float | None] = []
        since: list[float | None] = []
        missed: list[int | None] = []
        reasons: list[str | None] = []
        defaults: dict[str, Any] = {
            "alerted": True,
            "silenced": False,
            "suppressed_by": None,
            "flapping": False,
        }
        marks: dict[str, list[Any]] = {k: [] for k in defaults}
        for i, rec in enumerate(rows):
            where = f"records[{i}]"
            topic = getattr(rec, "topic", None)
            if not isinstance(topic, str):
                raise TypeError(f"{where} must be a TopicRecord, got {type(rec).__name__}")
            validate_topic(topic, f"{where}.topic")
            if topic.startswith(RESERVED_PREFIX):
                raise ValueError(f"{where}.topic {topic!r} is one of heartwire's own")
            if not self._intake.matches(topic):
                raise ValueError(
                    f"{where}.topic {topic!r} does not match the monitor's pattern "
                    f"{self._pattern!r}"
                )
            period = getattr(rec, "period", None)
            names.append(topic)
            periods.append(None if period is None else _validate.seconds(period, f"{where}.period"))
            wall = getattr(rec, "failed_since", None)
            reason = getattr(rec, "reason", None)
            if reason is not None and not isinstance(reason, str):
                raise TypeError(
                    f"{where}.reason must be a str or None, got {type(reason).__name__}"
                )
            if wall is None:
                since.append(None)
                missed.append(None)
                reasons.append(None)
            else:
                wall = _validate.seconds(
                    wall, f"{where}.failed_since", allow_zero=True, allow_negative=True
                )
                if topic in self._det and self._det.status(topic).state == "PAUSED":
                    raise ValueError(f"{where}.topic {topic!r} is paused: resume it first")
                since.append(min(max(wall - offset, 0.0), now))
                missed.append(
                    _validate.count(
                        getattr(rec, "missed", 1), f"{where}.missed", 1, maximum=2**32 - 1
                    )
                )
                if reason is not None and not 1 <= len(reason) <= 256:
                    raise ValueError(f"{where}.reason must be 1 to 256 characters")
                reasons.append(reason)
            for key, default in defaults.items():
                value = getattr(rec, key, default)
                if key == "suppressed_by":
                    if value is not None:
                        validate_topic(value, f"{where}.suppressed_by")
                elif not isinstance(value, bool):
                    raise TypeError(f"{where}.{key} must be a bool, got {type(value).__name__}")
                marks[key].append(value)
        with self._lock:
            for topic, period in zip(names, periods, strict=True):
                known = topic in self._det
                self._intake.expect(topic, None if known else period, None, None, None)
            # Known now: the detector carries the outages over (one hold of its lock); fresh
            # rows (since None) were started by `expect` and are left as they are.
            return self._det.adopt_many(
                names, since=since, missed=missed, reason=reasons, now=now, **marks
            )

    # -- alerting policy: silences and dependencies (in the core: rust/detector/policy.rs) --

    def silence(
        self,
        pattern: str,
        *,
        duration: float | _dt.timedelta | str | None = None,
        until: _dt.datetime | None = None,
        reason: str = "",
    ) -> Silence:
        """Silence the topics matching ``pattern`` (watched now or learned later) from now
        for ``duration`` (seconds, a :class:`~datetime.timedelta`, or ``"30s"``/``"30m"``/
        ``"2h"``) or ``until`` an aware :class:`~datetime.datetime`: exactly one of them.

        Silenced topics are still tracked; their failed and resumed events are delivered with
        ``silenced=True`` (listeners that set ``include_silenced = False`` do not get them). A
        topic still FAILED when the silence ends, that got no unsilenced ``Failed`` in this
        outage, gets one then. Silences follow the monitor's clock (a ``ManualClock`` too).
        """
        validate_pattern(pattern, "pattern")
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, got {type(reason).__name__} {reason!r}")
        now = self._det.now()
        offset = self._offset_now()  # an end time is placed by the wall clock as it reads now
        end = silence_end(duration, until, now + offset) - offset
        sid = self._det.silence(pattern, end, reason=reason)
        made = next((s for s in self._silences(None) if s.id == sid), None)
        # Over already (a tiny duration on the real clock, ended by the driver meanwhile).
        return made or Silence(sid, pattern, now, end, reason, wall_offset=offset)

    def unsilence(self, silence: int | Silence) -> bool:
        """End a silence now (its id, or the :class:`Silence`); False if it is over already.
        Topics it held that are still FAILED, never alerted meanwhile, get their ``Failed``
        (at once under a ``ManualClock``; otherwise at the detector's next tick, in time order
        with the deadlines before it)."""
        sid = silence.id if isinstance(silence, Silence) else silence
        if isinstance(sid, bool) or not isinstance(sid, int):
            raise TypeError(f"silence must be an int id or a Silence, got {silence!r}")
        return self._det.unsilence(sid) if sid >= 0 else False

    def silences(self) -> list[Silence]:
        """The silences not over yet, oldest first: those registered ahead for maintenance
        windows too (``window``: the window's id), started or not (``start``)."""
        # The core drops a silence when its driver applies the end, at its next run: one over
        # by the clock (e.g. while the monitor was stopped) is left out here already.
        return self._silences(self._det.now())

    def _silences(self, now: float | None) -> list[Silence]:
        """The core's silences (those ending after ``now`` if given)."""
        offset = self._offset_now()
        window_of = self._windows.window_of
        return [
            Silence(sid, pattern, start, end, reason, wall_offset=offset, window=window_of(sid))
            for sid, pattern, start, end, reason in self._det.silences()
            if now is None or end > now
        ]

    def maintenance(
        self,
        pattern: str,
        *,
        start: str | _dt.time,
        end: str | _dt.time,
        tz: str | ZoneInfo,
        days: Iterable[str] | str | None = None,
        reason: str = "",
    ) -> MaintenanceWindow:
        """Silence the topics matching ``pattern`` from ``start`` to ``end`` local time
        (``"02:00"``, ``"03:30:00"`` or a :class:`datetime.time`) in the IANA zone ``tz``
        (``"Europe/Paris"``), every day (``days`` None) or on the weekdays named
        (``("sat", "sun")``). An ``end`` before ``start`` crosses midnight (``days`` name the
        day an occurrence starts); ``end == start`` is refused.

        Each occurrence is an ordinary silence (events marked ``silenced=True``, the alert of a
        topic still FAILED at its end owed then), on the monitor's clock through its
        ``wall_offset`` (a ``ManualClock`` drives them): those starting within the next 8 days
        are registered ahead (:meth:`silences` lists them, ``window`` set) and topped up as
        each ends. Local times the clock skips or repeats on a DST change day: see
        ``docs/silences.md``.
        """
        validate_pattern(pattern, "pattern")
        return self._windows.add(pattern, start=start, end=end, tz=tz, days=days, reason=reason)

    def maintenance_windows(self) -> list[MaintenanceWindow]:
        """The maintenance windows, oldest first."""
        return self._windows.windows()

    def end_maintenance(self, window: int | MaintenanceWindow) -> bool:
        """Remove a maintenance window (its id, or the window) and its silences: one in
        progress ends now, as :meth:`unsilence` ends it. False if there is no such window."""
        wid = window.id if isinstance(window, MaintenanceWindow) else window
        if isinstance(wid, bool) or not isinstance(wid, int):
            raise TypeError(f"window must be an int id or a MaintenanceWindow, got {window!r}")
        return self._windows.remove(wid)

    def _register_silence(self, pattern: str, start: float | None, end: float, reason: str) -> int:
        return self._det.silence(pattern, end, start=start, reason=reason)

    def depends(self, child_pattern: str, *, on: str) -> None:
        """Topics matching ``child_pattern`` depend on the topic ``on`` (watched yet or not).

        While ``on`` is FAILED, its children's failed events are delivered with
        ``suppressed_by=on`` and counted apart (``stats()["suppressed"]``): one outage of the
        database is one alert, not forty (listeners that set ``include_suppressed = False``
        do not get them). Once it resumes (or is paused or removed while FAILED), children
        still down that got no unsuppressed ``Failed`` get one then (``stats()["released"]``).
        Cycles are allowed: a topic is never suppressed by a parent whose own mark leads back
        to it, so a cycle failing together alerts once. See ``docs/dependencies.md``.
        """
        validate_pattern(child_pattern, "child_pattern")
        validate_topic(on, "on")
        self._det.depends(child_pattern, on)

    def dependencies(self) -> list[tuple[str, str]]:
        """The dependencies declared: ``(child_pattern, on)``."""
        return self._det.dependencies()

    def remove(self, topic: str) -> bool:
        """Stop watching ``topic`` (a later beat learns it again); False if it was not watched.

        A FAILED topic removed no longer suppresses its dependents (:meth:`depends`): those still
        down and never alerted get their ``Failed`` now. Under ``"block"`` it pushes them once
        its locks are let go, waiting for room in the queue if need be (as :meth:`resume`);
        called by a listener on the dispatch thread (``listener_queue=None``), which empties
        that queue, it leaves them to the detector's next run (or :meth:`stop`)."""
        with self._lock:
            removed = self._intake.remove(topic)
        self._push_put_aside()
        if removed:
            self._poke_waits()  # a wait_for(ALIVE) must now hear of the topic's first beat
        return removed

    def _push_put_aside(self) -> None:
        """Push what the detector's pauses and removals put aside (the ``failed`` a FAILED
        parent's pause or removal released): they never wait for room in a ``"block"`` queue,
        as the intake's lock and ours are held then. Called without the lock. Not on the
        dispatch thread: it empties the feed's queue and would wait for itself."""
        if not self._feed.dispatching:
            self._det.push_unpushed()

    def handle(self, topic: str) -> int | None:
        """The topic's handle for :meth:`beat_handles` (``None`` if not watched)."""
        return self._det.handle(topic)

    # -- beats -----------------------------------------------------------------------------

    def beat(self, topic: str, *, seq: int | None = None, latency: float | None = None) -> bool:
        """Record a beat for ``topic`` from any source; True if recorded.

        An unknown topic matching the pattern is learned with the default period (one that
        does not match, one under ``"_hw."`` (``bad_topic``), or past ``max_topics``, is
        refused and counted, and reported to
        ``on_exception`` from the dispatch thread or at :meth:`drain`). ``ValueError`` for an
        invalid name. Not recorded while the monitor is not running. A direct call into the
        core (the instance's ``beat`` is the native intake's own method).
        """
        return self._intake.beat(topic, seq=seq, latency=latency)

    def beat_many(self, names: Iterable[str] | Any) -> int:
        """Record one beat for each name (a list of str, or an Arrow/NumPy string array);
        unknown names matching the pattern are learned, invalid ones and those under
        ``"_hw."`` refused (``bad_topic``, counted). Returns how many were recorded."""
        batch: Any = names
        if not isinstance(batch, (list, tuple)) and not hasattr(batch, "__arrow_c_array__"):
            batch = _as_list(batch)  # an iterable, or a NumPy array: read it once
        return self._intake.beat_many(batch)

    def beat_handles(self, handles: Iterable[int] | Any) -> int:
        """Record one beat for each handle (list, NumPy or Arrow integers); how many recorded."""
        return self._det.beat_handles(handles)

    def handle_message(self, message: Message) -> None:
        """Decode and record one broker message (the monitor's subscription calls this; over
        STOMP the core reads most beats off the socket itself and only the rest come here)."""
        destination = message.destination
        if isinstance(destination, str) and destination.startswith(RESERVED_PREFIX):
            return  # heartwire's own traffic (a control message under a wide pattern): no beat
        body = message.body
        done = None
        if isinstance(body, (bytes, bytearray, memoryview)):
            try:
                done = self._intake.ingest(body, message.destination)
            except (TypeError, UnicodeEncodeError):  # a destination the core cannot read as
                done = None  # text (not a str, lone surrogates): the Python codec decides
        if done is None:  # the native decoder was not sure: the Python codec decides
            try:
                beat = self._codec.decode(body, message.destination)
            except DecodeError as exc:
                where = _short(message.destination)
                self._intake.refuse(exc.reason, f"message to {where}: {_short(str(exc), 300)}")
            else:
                self._intake.record(
                    beat.topic,
                    beat.seq,
                    _text(beat.boot_id),
                    beat.sent_at,
                    beat.period,
                    beat.state == "down",
                    _text(beat.reason),
                )
        if self._intake.pending:
            self._report_refusals()

    def _report_refusals(self) -> None:
        """Hand the intake's refusals kept since the last call to ``on_exception`` (and log
        stale beats: the first 10, then every 1000th, so a publisher with a wrong clock cannot
        flood the log)."""
        pattern = self._pattern
        emit = self._listeners.emit
        for reason, detail, count in self._intake.take_refusals():
            if reason == "stale" and worth_logging(count):
                log.warning("%s [stale beat %d]", detail, count)
            error = DecodeError(reason, detail) if reason in DECODE_REASONS else None
            emit("on_exception", ExceptionEvent(pattern, reason, error, detail))

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
            self._listeners.emit(
                "on_started",
                Started(self._pattern, self._det.now(), self._offset_now()),
            )
            self._feed.open()
            self._det.start()
            self._running = True
            self._paused = False
            # The monitor owns pauses; the detector (which refuses pause/resume while stopped)
            # restored those it held at stop(): make it match what was paused or resumed since
            # (the resumes below, once the lock is let go).
            for topic in self._intake.paused_names():
                if topic in self._det:
                    self._det.pause(topic)
            keep = self._paused_handles()
            resume = [h for h in self._held_paused if h not in keep]
            self._held_paused = set()
            self._resuming.update(resume)
            error: BaseException | None = None
            if self._control is not None:  # closed by the last stop(): take messages again
                self._control.open()
            try:
                if self._broker is not None:
                    if self._control is not None:
                        # Before the beats: on one connection, a beat heard means the control
                        # subscription is in place too (the broker takes frames in order).
                        self._control_sub = self._broker.subscribe(
                            self._control_topic, self._control.handle
                        )
                    self._subscription = self._subscribe(self._broker)
                    self._connection_events.attach(self._broker)
            except BaseException as exc:
                error = exc
                self._cancel_control()
                self._running = False
                self._held_paused = self._paused_handles() | set(resume)
                self._resuming.difference_update(resume)
                chain = self._feed.detach()
                self._stopping += 1
            else:
                _running.add(self)
                with self._aio_lock:  # (lock order: self._lock, then _aio_lock, never back)
                    self._aio_open = True
        if error is not None:  # undone as stop() does, the detector's stop without the lock
            mark = self._stop_detector(chain)
            self._feed.finish(chain, 1.0, mark, time.monotonic() + 1.0)
            raise error
        self._resume_in_detector(resume)
        if self._windows:  # occurrences that came within reach while stopped
            self._windows.top_up()
        return self

    def _subscribe(self, broker: Transport) -> Subscription:
        """Subscribe to the pattern: over STOMP the core reads the beats off the socket itself
        (``subscribe_intake``); other transports hand each message to :meth:`handle_message`."""
        native = getattr(broker, "subscribe_intake", None)
        if native is not None:
            sub: Subscription = native(
                self._pattern, self._intake, self.handle_message, self._report_refusals
            )
            return sub
        return broker.subscribe(self._pattern, self.handle_message)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching: cancel the broker subscription, stop the detector, deliver the events
        produced so far, end the dispatch thread, then ``on_stopped``. Idempotent.

        What the dispatch thread has not delivered after ``timeout`` seconds is dropped (counted
        in ``stats()["dropped"]``), unless a lossless listener is registered: then stop() waits
        for the dispatch thread to hand over everything (it only fills the listener queues, a
        lossless one never blocks it; with ``listener_queue=None`` it waits for the calls).

        Control unsilences taken in before stop() (applied on the control receiver's worker)
        are applied first, within ``timeout``, the detector still running: the alerts they
        release come before ``on_stopped``. A control message read after the subscription is
        cancelled is dropped.

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
                with self._aio_lock:  # no asyncio listener registers after this: see _register
                    self._aio_open = False
                _running.discard(self)
                subscription, self._subscription = self._subscription, None
                self._cancel_control()
                if self._broker is not None:
                    self._connection_events.detach(self._broker)
                if subscription is not None:
                    try:
                        subscription.cancel()
                    except Exception:
                        log.exception("cancelling the subscription to %r failed", self._pattern)
                chain = self._feed.detach()
                self._stopping += 1
                break
        deadline = time.monotonic() + timeout
        # The control unsilences taken in before the stop (the receiver is closed: none
        # after), applied while the detector runs, so their alerts come before on_stopped.
        # Without the lock: the worker's push may wait for room that the dispatch thread,
        # still running, makes. On the dispatch thread, nothing else makes room: waited for
        # once the detector's stop has closed the queues (what they push is then refused).
        control = self._control
        on_dispatch = self._feed.dispatching
        if control is not None and not on_dispatch and not control.wait(timeout):
            log.warning("stopping %r: control unsilences still being applied", self._pattern)
        mark = self._stop_detector(chain)
        if control is not None and on_dispatch:
            control.wait(max(0.0, deadline - time.monotonic()))
        # Outside the lock: a listener running on the dispatch thread may need it to finish.
        self._feed.finish(chain, None if self._listeners.lossless else timeout, mark, deadline)
        # The last event each listener gets: whatever is emitted later (a dispatch thread that
        # did not finish in time, a late bad beat, a listener's error report) is refused and
        # counted (``listener_late``), and starts no listener thread again. An unqueued
        # listener's call in progress on another thread ends first (or, past the deadline,
        # makes on_stopped itself when it ends).
        if self._intake.pending:  # beats refused before the stop are reported before on_stopped
            self._report_refusals()
        remaining = max(0.0, deadline - time.monotonic())
        self._listeners.emit_last(
            "on_stopped",
            Stopped(self._pattern, self._det.now(), self._offset_now()),
            timeout=remaining,
        )
        # Queued listeners get what was produced, then their threads end (a blocked one ends
        # by itself once it has caught up).
        if not self._listeners.close(max(0.0, deadline - time.monotonic())):
            log.warning("listeners of %r still busy when stop() timed out", self._pattern)

    def _cancel_control(self) -> None:
        """Cancel the control subscription, if any, and close the receiver: a handler that
        runs on after the cancel applies nothing (under the lock)."""
        if self._control is not None:
            self._control.close()
        sub, self._control_sub = self._control_sub, None
        if sub is not None:
            try:
                sub.cancel()
            except Exception:
                log.exception("cancelling the subscription to %r failed", self._control_topic)

    def _stop_detector(self, chain: list[_Feed]) -> int | None:
        """Stop the detector for a stop() that noted itself in ``_stopping`` (under the lock),
        without the lock: the detector's stop takes in the beats in flight (a ``resumed`` may
        wait for room in a ``"block"`` queue) and joins the real-clock driver (which may be
        waiting for room), and the queue's consumer, a listener on the dispatch thread, may
        need the lock to return. Called on that thread, close the queues first: nothing else
        would make room.

        Returns the detector's outbox mark at its stop (for :meth:`EventFeed.finish
        <heartwire.feed.EventFeed.finish>` to wait until every event emitted before it is
        pushed), or None on the dispatch thread."""
        try:
            if self._feed.dispatching:
                EventFeed.close(chain)
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
        paused while the monitor is stopped too: it is paused from :meth:`start` on. A FAILED
        topic paused no longer suppresses its dependents: see :meth:`remove`."""
        paused = self._pause(topic)
        self._push_put_aside()
        return paused

    def _pause(self, topic: str | None) -> bool:
        """:meth:`pause` under the lock (what it puts aside is pushed after, without it)."""
        with self._lock:
            if topic is not None:
                handle = self._handle_or_raise(topic)
                if not self._intake.pause_name(topic):
                    return False
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
                if not self._intake.unpause_name(topic):
                    return False
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
        self._poke_waits()  # a resumed topic may be ALIVE now, with no event to say so
        return True

    def _poke_waits(self) -> None:
        """Wake the wait_for calls waiting: a state changed with no event to say so."""
        with self._aio_lock:
            waits = list(self._waits)
        for wait in waits:
            wait.poke()

    def _resume_in_detector(self, handles: list[int]) -> None:
        """Resume ``handles`` in the detector (noted in ``_resuming`` by the caller, under the
        lock), without the lock: a resume may emit ``resumed`` and, under ``"block"``, wait for
        room in the event queue, whose consumer (a listener on the dispatch thread) may call
        the monitor and need the lock. Then, under the lock, pause again those paused again
        meanwhile (a resume that came after a stop() is redone by the next start()), and push
        what these pauses, or start()'s, put aside (:meth:`_push_put_aside`)."""
        if not handles:
            self._push_put_aside()  # start()'s pauses
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
        self._push_put_aside()

    def _paused_handles(self) -> set[int]:
        """The handles of the topics paused one by one (called with the lock held)."""
        return {
            handle
            for topic in self._intake.paused_names()
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

    # -- asyncio ---------------------------------------------------------------------------

    async def __aenter__(self) -> HeartbeatMonitor:
        """``async with``: :meth:`start` on a worker thread (over STOMP it subscribes over the
        network), so the loop is not blocked. Cancelled meanwhile (a TaskGroup sibling failed,
        an ``asyncio.wait_for`` ran out), it stops what that start() started before the
        ``CancelledError`` goes on (``__aexit__`` never runs then): no monitor is left running
        with no owner."""
        lock = threading.Lock()
        state = {"abandoned": False, "started": False}

        def start() -> None:
            self.start()
            with lock:  # either the entry was abandoned first (stop here) or it was not
                undo = state["abandoned"]
                state["started"] = not undo
            if undo:
                self.stop()

        starting = asyncio.ensure_future(asyncio.to_thread(start))
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:
            with lock:
                state["abandoned"] = True
                started = state["started"]
            # Not started yet: the thread stops it once it has. Started: stop it here.
            undo = asyncio.ensure_future(asyncio.to_thread(self.stop)) if started else starting
            # Waited for under a shield: a second cancel ends the wait, not the undo.
            with contextlib.suppress(BaseException):
                await asyncio.shield(undo)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the event streams still open (a consumer that left its ``async for`` early
        would otherwise hold a ``"block"`` stream's listener thread, and stop() with it), then
        :meth:`astop`. To get every event up to the stop in a stream, ``await mon.astop()``
        inside the block: the streams end after the last one."""
        with self._aio_lock:
            streams = list(self._streams)
        for stream in streams:
            await stream.aclose()
        await self.astop()

    async def astop(self, timeout: float = 5.0) -> None:
        """:meth:`stop` on a worker thread (it waits for the detector, the dispatch thread and
        the listeners), so the loop keeps running meanwhile: event streams read on it get their
        last events, then end."""
        await asyncio.to_thread(self.stop, timeout)

    def events(self, capacity: int = 10_000, overflow: Overflow = "block") -> EventStream:
        """The detector events from now on, for ``async for`` on the running loop: failed,
        resumed, flapping, local pause, lagging and caught up (see
        :class:`~heartwire.aio.EventStream`; ``received`` are not streamed). ``capacity``
        events are held for a consumer that falls behind; then ``overflow``: ``"block"`` (the
        stream's listener thread waits, and its listener queue drops by ``listener_overflow``
        if the wait is long), ``"drop-oldest"`` or ``"drop-newest"`` (counted in
        ``stream.dropped``) or ``"coalesce"`` (each topic's newest event;
        ``stream.coalesced``). The loop is woken at most once per batch. The stream ends when
        the monitor stops or on ``stream.aclose()`` (``async with mon.events() as stream``).
        ``RuntimeError`` if no loop is running or the monitor is not running. With
        ``listener_queue=None`` the stream is called on the dispatch thread: ``"block"`` then
        holds that thread, and the monitor's own queue (``overflow``) takes the back-pressure."""
        loop = asyncio.get_running_loop()
        stream = EventStream(loop, capacity, overflow, on_close=self._stream_closed)
        self._register(stream)
        return stream

    def _register(self, listener: EventStream | TopicWait) -> None:
        """Add an asyncio listener that must get ``on_stopped`` (so its waiter ends), noted
        among the streams or the waits: ``RuntimeError`` if the monitor is not running.

        Under ``_aio_lock`` only, never the monitor's lock: start() and stop() hold that
        across network calls (a subscribe, an unsubscribe waiting for a reconnection), and
        this runs on the loop. Safe: stop() closes ``_aio_open`` under ``_aio_lock`` before
        it emits ``on_stopped``, so the listener is either added in time for that or
        refused; start() opens it once running. Adding calls no listener and takes only the
        listener set's own short lock. The feed switch a ``received`` waiter needs is made
        by the caller off the loop (:meth:`_sync_off_loop`)."""
        with self._aio_lock:
            if not self._aio_open:
                raise RuntimeError(f"monitor of {self._pattern!r} is not running: start it first")
            self._listeners.add(listener)
            if isinstance(listener, EventStream):
                self._streams.add(listener)
            else:
                self._waits.add(listener)

    def _unregister(self, listener: EventStream | TopicWait) -> None:
        """Remove an asyncio listener (from the loop or its own listener thread: no monitor
        lock); a ``received`` waiter's feed switch back is handed to a worker thread."""
        with self._aio_lock:
            if isinstance(listener, EventStream):
                self._streams.discard(listener)
            else:
                self._waits.discard(listener)
        if self._listeners.remove(listener) and listener.wants_received:
            try:
                asyncio.get_running_loop().run_in_executor(None, self._sync_received)
            except RuntimeError:  # no loop running here (a stream closed from its thread)
                threading.Thread(
                    target=self._sync_received, name="heartwire-feed-sync", daemon=True
                ).start()

    async def _sync_off_loop(self) -> None:
        """Switch the feed for the listeners' interest on a worker thread (it takes the
        monitor's lock), the loop running meanwhile."""
        await asyncio.to_thread(self._sync_received)

    def _stream_closed(self, stream: EventStream) -> None:
        self._unregister(stream)

    async def wait_for(
        self,
        topic: str,
        state: Literal[State.ALIVE, State.FAILED],
        timeout: float | None = None,
    ) -> TopicStatus:
        """Wait until ``topic`` is in ``state`` (``State.ALIVE`` or ``State.FAILED``: the
        states events announce) and return its status; at once if it already is. A topic not
        watched yet is waited for (learned from its first beat). ``TimeoutError`` naming the
        topic, the state and the state it has after ``timeout`` seconds (real time, also
        under a ManualClock; ``None``: no limit); ``RuntimeError`` if the monitor is not
        running, or stops before. The state is looked up once per event batch (on a listener
        thread), and the loop woken when it is reached (or at :meth:`resume` and
        :meth:`remove`); waiting for ALIVE a topic not watched yet or never heard (PENDING),
        the monitor asks the core for ``received`` events meanwhile (one batch per dispatch
        round, not a call per beat; switched to when the topic becomes so after a resume or a
        removal). A state announced by an event (a ``Failed`` for FAILED; a ``Resumed`` or a
        ``Received`` for ALIVE) counts even if the topic has left it again by the time it is
        looked up (a failure and a recovery in a row): the status returned then has the state
        and what the event tells (``missed``, ``failed_since``; ``last_seen`` for ALIVE), the
        rest as looked up when the event was seen."""
        topic = validate_topic(topic, "topic")
        if not isinstance(state, State):
            raise TypeError(
                f"state must be a heartwire.State, got {type(state).__name__} {state!r}"
            )
        if state not in WAITABLE:
            raise ValueError(
                f"state must be State.ALIVE or State.FAILED (the states events announce), "
                f"got State.{state.name}"
            )
        timeout = _validate.seconds(timeout, "timeout", allow_none=True, allow_zero=True)
        loop = asyncio.get_running_loop()
        status = self._in_state(topic, state)
        if status is not None:
            return status
        if timeout == 0:
            raise TimeoutError(
                f"topic {topic!r} not {state.name} after 0 s (it is {self._state_of(topic)})"
            )
        # Registered before the next look: a change after it wakes the waiter. A topic not
        # watched or never heard (PENDING) becomes ALIVE by a beat, with no event to say so:
        # only then are received events asked for (a feed switch, off the loop: a new
        # dispatch thread, and another when the wait ends). A FAILED one resumes with an
        # event; a PAUSED one with resume(), which pokes the waiters (the wait loop then
        # switches to received events if the topic is PENDING again).
        box = [self._waiter(loop, topic, state, self._state_or_none(topic))]
        try:
            return await asyncio.wait_for(self._wait_loop(box, topic, state), timeout)
        except asyncio.TimeoutError:  # (TimeoutError itself from Python 3.11 on)
            raise TimeoutError(
                f"topic {topic!r} not {state.name} after {timeout:g} s "
                f"(it is {self._state_of(topic)})"
            ) from None
        finally:
            self._unregister(box[0])

    def _waiter(
        self, loop: asyncio.AbstractEventLoop, topic: str, state: State, now: State | None
    ) -> TopicWait:
        """A registered waiter for ``topic`` to reach ``state`` (``now``: its state)."""
        beats = state is State.ALIVE and now in (None, State.PENDING)
        kind = ReceivedTopicWait if beats else TopicWait
        announce = ("failed",) if state is State.FAILED else ("resumed", "received")
        waiter = kind(
            loop,
            lambda: self._in_state(topic, state) is not None,
            topic,
            announce,
            lambda: self._status_or_none(topic),
        )
        self._register(waiter)
        return waiter

    async def _wait_loop(self, box: list[TopicWait], topic: str, state: State) -> TopicStatus:
        """Look, wait for a wake-up, look again; ``box[0]``: the waiter, replaced by one
        taking ``received`` events when a wait for ALIVE finds the topic PENDING or unknown
        (after a resume or a removal: its first beat announces it only so)."""
        if isinstance(box[0], ReceivedTopicWait):
            await self._sync_off_loop()  # received events asked for: then the look
        while True:
            waiter = box[0]
            waiter.changed.clear()
            status = self._in_state(topic, state)
            if status is not None:
                return status
            if waiter.announced is not None:
                return self._announced_status(topic, state, *waiter.announced)
            if waiter.stopped:
                raise RuntimeError(
                    f"monitor of {self._pattern!r} stopped while waiting for topic {topic!r} "
                    f"to be {state.name} (it is {self._state_of(topic)})"
                )
            now = self._state_or_none(topic)
            if (
                state is State.ALIVE
                and not isinstance(waiter, ReceivedTopicWait)
                and now in (None, State.PENDING)
            ):
                try:
                    box[0] = self._waiter(asyncio.get_running_loop(), topic, state, now)
                except RuntimeError:  # stopped meanwhile: the old waiter says so next round
                    await waiter.changed.wait()
                    continue
                self._unregister(waiter)
                await self._sync_off_loop()
                continue  # looked at again: a beat before the switch made it ALIVE already
            await waiter.changed.wait()

    def _announced_status(
        self,
        topic: str,
        state: State,
        event: Failed | Resumed | Received,
        seen: TopicStatus | None,
    ) -> TopicStatus:
        """The status of ``topic`` as ``event`` announced it reached ``state`` (see
        :meth:`wait_for`): ``seen`` (looked up when the event was seen) with what the event
        tells; for a topic no longer watched then, period NaN and allowed_misses 0."""
        if seen is None:
            seen = TopicStatus(
                topic,
                state,
                0,
                None,
                math.nan,
                0,
                None,
                None,
                wall_offset=self._offset_now(),
            )
        if isinstance(event, Failed):
            return dataclasses.replace(
                seen, state=State.FAILED, missed=event.missed, failed_since=event.since
            )
        return dataclasses.replace(
            seen, state=State.ALIVE, missed=0, failed_since=None, last_seen=event.at
        )

    def _status_or_none(self, topic: str) -> TopicStatus | None:
        try:
            return self.status(topic)
        except KeyError:
            return None

    def _in_state(self, topic: str, state: State) -> TopicStatus | None:
        try:
            status = self.status(topic)
        except KeyError:
            return None
        return status if status.state is state else None

    def _state_or_none(self, topic: str) -> State | None:
        try:
            return self.status(topic).state
        except KeyError:
            return None

    def _state_of(self, topic: str) -> str:
        try:
            return f"State.{self.status(topic).state.name}"
        except KeyError:
            return "not watched"

    # -- status ----------------------------------------------------------------------------

    def status(self, topic: str) -> TopicStatus:
        """A snapshot of one topic (``KeyError`` if it is not watched)."""
        return TopicStatus.from_core(self._det.status(topic), self._offset_now())

    def statuses(self) -> list[TopicStatus]:
        """A snapshot of every topic."""
        offset = self._offset_now()
        return [TopicStatus.from_core(s, offset) for s in self._det.statuses()]

    def worst(self, n: int = 10) -> list[TopicStatus]:
        """The ``n`` worst topics, worst first: FAILED ones, then watched ones that have missed
        periods without failing yet; within each, the most missed periods first, then the
        longest down (earliest ``failed_since``; for those not failed, the oldest
        ``last_seen``), then handle order. Healthy, paused and stopped topics are left out, so
        fewer than ``n`` may come back. One native pass over the topics (about 1.5 ms for
        100 000): only the chosen become objects, unlike :meth:`statuses`."""
        offset = self._offset_now()
        return [TopicStatus.from_core(s, offset) for s in self._det.worst(n)]

    def series_topics(self, n: int) -> tuple[list[TopicStatus], int]:
        """At most ``n`` topics, FAILED ones first, then by name, in that order; and how many
        topics the monitor watches (removed ones left out). One native pass over the topics
        that keeps only the ``n`` best: for a bounded per-topic export (the Prometheus
        ``per_topic`` series) whose cost must follow ``n``, not the number of topics."""
        offset = self._offset_now()
        chosen, total = self._det.series_topics(n)
        return [TopicStatus.from_core(s, offset) for s in chosen], total

    def counts(self) -> dict[str, int]:
        """How many topics are in each state."""
        return self._det.counts()

    def stats(self) -> dict[str, Any]:
        """Counters: the detector's (``beats``, ``unknown``, ``refused``, ``failed``, ``resumed``,
        ``received``, ``topics``, ``local_pauses`` and their total length ``local_pause_ns``,
        ``lagging`` episodes of the intake and its lag now ``ingest_lag_ns``, ``silenced`` and
        ``suppressed`` failed/resumed events so marked, ``released`` failed events sent again
        when a silence ended, a parent resumed or a flapping topic settled, ``held`` failed/
        resumed events held back while their topic flapped),
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
        ``disconnects`` and ``reconnects`` (of the broker connection), ``control`` (control
        messages taken, by op) and ``control_refused`` (refused, by reason)."""
        out: dict[str, Any] = dict(self._det.stats())
        out["local_pause_seconds"] = out["local_pause_ns"] / 1e9
        out["ingest_lag"] = out["ingest_lag_ns"] / 1e9
        intake = self._intake.stats()
        feed = self._feed.stats()
        connection = self._connection_events
        out.update(
            learned=intake["learned"],
            rejected=intake["rejected"],
            native=intake["native"],
            deferred=intake["deferred"],
            dispatched=feed["dispatched"],
            dropped=feed["dropped"],
            listener_errors=self._listeners.errors,
            dispatch_errors=feed["dispatch_errors"],
            listener_dropped=self._listeners.dropped,
            listener_late=self._listeners.late,
            listener_queue_depth=self._listeners.queue_depth,
            listeners=self._listeners.stats(),
            dispatch_queue_depth=feed["dispatch_queue_depth"],
            disconnects=connection.disconnects,
            reconnects=connection.reconnects,
        )
        control = self._control.stats() if self._control is not None else None
        out["control"] = control["accepted"] if control else {}
        out["control_refused"] = control["refused"] if control else {}
        return out

    def metrics(self) -> dict[str, Any]:
        """A snapshot for dashboards (what :mod:`heartwire.metrics` exports to Prometheus):

        - ``topics``: topics watched; ``states``: how many in each state (all six keys);
        - ``beats``: beats recorded; ``learned``: topics learned from beats;
        - ``failed``, ``resumed``, ``local_pauses``, ``lagging``: events produced (``failed``
          and ``resumed``: handed out to listeners, released ones included, those held back
          while flapping not);
        - ``ingest_lag``: how far the intake is behind its feed now, seconds;
        - ``rejected``: refused beats by reason (decode reasons, ``pattern_mismatch``,
          ``too_many_topics``, ``bad_topic``, ``replayed``, ``stale``, ``wrong_shard``: a
          group member's beat of another shard), ``rejected_total`` their sum;
        - ``dropped``: events lost, by where: ``dispatch`` (the detector's queue overflow
          policy) and ``listeners`` (the listener queues');
        - ``listener_late``: events refused because they came after ``on_stopped``;
        - ``listener_errors``, ``dispatch_errors``: calls that raised;
        - ``dispatch_queue_depth``, ``listener_queue_depth``: events waiting now;
        - ``disconnects``, ``reconnects``: of the broker connection;
        - the alerting policy: ``silenced`` and ``suppressed`` (failed/resumed events so
          marked), ``released`` (failed events sent again when a silence ended, a parent
          stopped being FAILED or a flapping topic settled, and resumed events sent when one
          settled up with its alert open), ``held`` (failed/resumed events held back while
          their topic flapped), ``flapping_now`` (topics flapping now);
        - signed control messages (silences sent over the broker): ``control`` (taken, by op:
          ``silence``, ``unsilence``) and ``control_refused`` (refused, by reason: every one of
          :data:`~heartwire.control.CONTROL_REASONS`), every key present (0 without a key);
        - ``max_topics``: the cap on topics (``None``: none);
        - health: ``running``; ``connected`` (the broker connection is up; with no broker or
          one without connections, the same as ``running``); ``lagging_now`` (an ingest-lag
          episode is on); ``local_pause_seconds`` (the pauses' total length).
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
            "silenced": stats["silenced"],
            "suppressed": stats["suppressed"],
            "released": stats["released"],
            "held": stats["held"],
            "flapping_now": self._det.flapping_topics(),
            "control": {op: stats["control"].get(op, 0) for op in CONTROL_OPS},
            "control_refused": {
                reason: stats["control_refused"].get(reason, 0)
                for reason in sorted(CONTROL_REASONS)
            },
            "max_topics": self._max_topics,
            "running": self.running,
            "connected": self._connected(),
            "lagging_now": self._det.lagging,
            "local_pause_seconds": stats["local_pause_seconds"],
        }

    def _connected(self) -> bool:
        """Whether the broker connection is up (no broker, or one without connections such
        as the embedded broker: whether the monitor runs)."""
        up = getattr(self._broker, "connected", None)
        return self.running and (up if isinstance(up, bool) else True)

    @property
    def groups(self) -> Groups:
        """How topics are grouped in the metrics (``group_depth``, ``max_groups``)."""
        return self._groups

    @property
    def tally(self) -> EventTally:
        """``failed``/``resumed`` events and downtimes by group, as delivered (metrics)."""
        return self._tally

    # -- events ----------------------------------------------------------------------------

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until listeners have been handed every event produced so far; False on timeout.

        With listener queues (the default), that means each listener has returned from every
        event produced so far (or its queue dropped it). Returns False at once when called from
        a listener (it cannot wait for itself). Events still waiting to be pushed count: a push
        waiting for room in a full ``"block"`` queue, or the alerts a pause or removal made by a
        listener on the dispatch thread put aside, pushed at the detector's next run (with a
        :class:`~heartwire._core.ManualClock`, its next move).
        """
        if self._feed.dispatching or self._listeners.on_listener_thread():
            return False
        if self._intake.pending:
            self._report_refusals()
        deadline = time.monotonic() + timeout
        # Control unsilences handed to the receiver's worker first: the alerts they release
        # go through the feed.
        if self._control is not None and not self._control.wait(timeout):
            return False
        # Then events emitted so far but not pushed yet (a push waiting for room in a "block"
        # queue, or behind one; what a pause on the dispatch thread put aside, pushed by the
        # detector's next run): the feed counts only what was pushed.
        if not self._det.wait_pushed(
            self._det.outbox_mark(), max(0.0, deadline - time.monotonic())
        ):
            return False
        if not self._feed.drain(deadline):
            return False
        return self._listeners.drain(max(0.0, deadline - time.monotonic()))

    def _sync_received(self) -> None:
        """Switch the event feed if listeners' interest in ``received`` events, or in losing
        none, changed (under the lock, as every feed switch; not while stopped)."""
        with self._lock:
            if self._running:
                self._feed.sync()

    def _after_batch(self) -> None:
        """After each batch the dispatch thread delivered: refusals of beat() calls, reported
        here or at drain()."""
        if self._intake.pending:
            self._report_refusals()
        # Maintenance windows are topped up here, a point the monitor already reaches about
        # every 0.1 s (after each batch, and on the dispatch thread's idle rounds): one float
        # compare until an occurrence ends, no thread of their own, nothing per beat. Safe on
        # this thread: registering a silence emits no event, so never waits for room in a
        # queue this thread empties (maintenance.Windows).
        if self._windows and self._windows.due(self._det.now()):
            try:
                self._windows.top_up()
            except Exception:  # a bug: logged (throttled), tried again next round
                self._top_up_errors += 1
                if worth_logging(self._top_up_errors):
                    log.exception("topping up the maintenance windows failed")


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


def _as_list(names: Any) -> list[Any]:
    if hasattr(names, "to_pylist"):
        return names.to_pylist()  # type: ignore[no-any-return]
    if hasattr(names, "tolist"):
        return names.tolist()  # type: ignore[no-any-return]
    return list(names)
