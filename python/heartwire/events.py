"""The events publishers and monitors hand to their listeners, and a topic's status.

Every event is a small frozen dataclass. Times are seconds: ``Sent.at`` is wall time
(:func:`time.time`); the monitor's events (``Received``, ``Failed``, ``Resumed``,
``LocalPause``, ``Lagging``, ``CaughtUp``) and the :class:`TopicStatus` times are on the
monitor's clock (the core's monotonic clock, or a :class:`~heartwire._core.ManualClock`), which
is exact for intervals but means nothing to a person or another program (seconds since boot).

For those, each of these carries ``wall_offset``, the seconds to add to the monitor's clock to
get Unix time (the monitor's :attr:`~heartwire.monitor.HeartbeatMonitor.wall_offset` when the
event was delivered: measured when the monitor was made, and on the real clock replaced when
the wall clock moved by more than a second), and offers the times as Unix seconds
(``wall_at``, ``Failed.wall_since``, ``TopicStatus.wall_last_seen``...). :func:`iso_utc`
writes Unix seconds as ISO 8601 in UTC. An event made without ``wall_offset`` gets the real
clock's (``time.time() - time.monotonic()``).
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from heartwire import _core

__all__ = [
    "EVENT_METHODS",
    "CaughtUp",
    "Disconnected",
    "EventBatch",
    "ExceptionEvent",
    "Failed",
    "Flapping",
    "Lagging",
    "ListenerEvent",
    "LocalPause",
    "MonitorEvent",
    "Received",
    "Reconnected",
    "Resumed",
    "Sent",
    "Started",
    "State",
    "Stopped",
    "TopicStatus",
    "iso_utc",
    "real_clock_offset",
    "wall_fields",
]


def real_clock_offset() -> float:
    """Seconds to add to a reading of the core's real (monotonic) clock to get Unix time, now:
    ``time.time() - time.monotonic()`` (the core's clock reads like :func:`time.monotonic`)."""
    return time.time() - time.monotonic()


def iso_utc(unix: float) -> str:
    """Unix seconds as ISO 8601 in UTC, to the microsecond: ``"2026-11-24T06:43:21.123456Z"``."""
    moment = _dt.datetime.fromtimestamp(unix, tz=_dt.timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def wall_fields(event: object, now: float | None = None) -> dict[str, Any]:
    """An event's fields for a person or another program (JSON lines, alerts), times on the
    wall clock: ``at`` and ``since`` as Unix seconds, each with ``<name>_iso`` (ISO 8601, UTC)
    and, for the monitor's events, ``<name>_monotonic`` (the monitor's clock reading, exact for
    intervals). An event with no time of its own (``Started``, ``ExceptionEvent``...) gets
    ``at``: ``now`` (default :func:`time.time`). ``error`` and ``wall_offset`` are left out,
    and so are fields that say nothing when unset: a :class:`Failed` event's ``reason`` when
    it has none (a failure by missed periods: ``reason`` shows only for an explicit failure)
    and the alerting policy's marks (``silenced`` False, ``suppressed_by`` None): an unmarked
    event's fields are as they were before silences existed; likewise a
    :class:`Reconnected` event's ``switched_from`` when None."""
    fields = {
        k: v
        for k, v in vars(event).items()
        if k not in ("error", "wall_offset") and not (k in _MARKS and v in (False, None))
    }
    if "reason" in fields and fields["reason"] is None:
        del fields["reason"]
    if "switched_from" in fields and fields["switched_from"] is None:  # a Reconnected after
        del fields["switched_from"]  # an outage: as before planned switches existed
    if "at" in fields and fields["at"] is None:  # a publisher's Started/Stopped: no time
        del fields["at"]
    offset = getattr(event, "wall_offset", None)
    if "at" not in fields:
        fields["at"] = time.time() if now is None else now
        offset = None  # already Unix time
    for name in ("at", "since"):
        if name not in fields:
            continue
        reading = fields[name]
        wall = reading if offset is None else reading + offset
        fields[name] = wall
        fields[f"{name}_iso"] = iso_utc(wall)
        if offset is not None:
            fields[f"{name}_monotonic"] = reading
    return fields


#: The alerting policy's marks on failed and resumed events.
_MARKS = ("silenced", "suppressed_by")


def _offset() -> Any:
    """The ``wall_offset`` field of the monitor's events and statuses."""
    return field(default_factory=real_clock_offset, kw_only=True, repr=False, compare=False)


@dataclass(frozen=True)
class Started:
    """A publisher or monitor started; ``source``: its topic (publisher) or pattern (monitor).

    A monitor's carries ``at``, its clock's reading when it started (and ``wall_offset``): the
    event reaches listeners on another thread, later; a publisher's has ``at=None``. Neither
    takes part in ``==``."""

    source: str
    at: float | None = field(default=None, compare=False)
    wall_offset: float | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Stopped:
    """A publisher or monitor stopped (``source``, ``at`` and ``wall_offset`` as for
    :class:`Started`)."""

    source: str
    at: float | None = field(default=None, compare=False)
    wall_offset: float | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Sent:
    """A publisher sent beat number ``seq`` on ``topic`` at wall time ``at``."""

    topic: str
    seq: int
    at: float


@dataclass(frozen=True)
class Received:
    """A beat for ``topic`` was recorded at ``at`` (monitor clock).

    ``seq`` is the publisher's sequence number and ``latency`` the receiver's wall time minus the
    publisher's send time, when the beat carried them (``None`` otherwise).
    """

    topic: str
    seq: int | None
    latency: float | None
    at: float
    wall_offset: float = _offset()

    @property
    def wall_at(self) -> float:
        """``at`` as Unix seconds."""
        return self.at + self.wall_offset


@dataclass(frozen=True)
class Failed:
    """``topic`` has missed ``missed`` periods in a row (at least ``allowed_misses``).

    ``since`` is the deadline at which it was declared failed; ``at`` is the deadline of this
    missed period. Fires again at every further missed period with the growing count; when
    one run of the detector finds more than 64 of a topic's periods gone at once (a long
    ``advance``, a stall with ``max_local_pause=None``), the first 63 fire one by one, then
    one for the latest deadline passed, with the exact count.

    ``reason`` is set for an *explicit* failure: the topic's sender said ``down`` (a dependent
    publisher whose check fails, ``publisher.fail(reason)``, ``heartwire fail``). Then the
    topic failed at once, at ``at`` = ``since`` = the down beat's time, with ``missed`` the
    periods missed so far (often 0), whatever ``allowed_misses``; each later missed period
    of that outage fires again carrying the newest reason, until a good beat resumes it.
    ``None`` for a failure by missed periods. See ``docs/explicit-failure.md``.

    ``silenced``: the topic is silenced (:meth:`~heartwire.monitor.HeartbeatMonitor.silence`);
    ``suppressed_by``: the parent topic, down, that holds it back
    (:meth:`~heartwire.monitor.HeartbeatMonitor.depends`), else None. A topic still FAILED
    when its silence ends or its parent resumes, that never had an unmarked ``Failed`` in this
    outage, gets one then (``at``: that moment), so an alert held back is not lost; it carries
    the outage's ``reason`` like any other ``Failed`` of it.
    """

    topic: str
    missed: int
    since: float
    at: float
    reason: str | None = None
    wall_offset: float = _offset()
    silenced: bool = field(default=False, kw_only=True)
    suppressed_by: str | None = field(default=None, kw_only=True)

    @property
    def wall_at(self) -> float:
        """``at`` as Unix seconds."""
        return self.at + self.wall_offset

    @property
    def wall_since(self) -> float:
        """``since`` as Unix seconds."""
        return self.since + self.wall_offset


@dataclass(frozen=True)
class Resumed:
    """``topic`` was heard again at ``at`` after ``missed`` missed periods and ``downtime`` seconds
    (the beat's time minus the failure's ``since``).

    ``silenced`` and ``suppressed_by`` are as the outage's ``Failed`` events were: marked only
    if none of them went out unmarked, so a listener that leaves marked events out sees every
    alert it got resolved, and no resolution of one it never got.
    """

    topic: str
    missed: int
    downtime: float
    at: float
    wall_offset: float = _offset()
    silenced: bool = field(default=False, kw_only=True)
    suppressed_by: str | None = field(default=None, kw_only=True)

    @property
    def wall_at(self) -> float:
        """``at`` as Unix seconds."""
        return self.at + self.wall_offset


@dataclass(frozen=True)
class Flapping:
    """``topic`` started flapping at ``at`` (``flapping=True``: more than the monitor's
    ``flap_threshold`` outages, ``count``, within ``flap_window``), or settled
    (``flapping=False``: no outage began or ended for ``flap_window``; ``count`` 0).

    While it flaps its ``Failed`` and ``Resumed`` are held back (unless ``flap_hold=False``);
    when it settles while down, a ``Failed`` follows this event.
    """

    topic: str
    flapping: bool
    count: int
    at: float
    wall_offset: float = _offset()

    @property
    def wall_at(self) -> float:
        """``at`` as Unix seconds."""
        return self.at + self.wall_offset


@dataclass(frozen=True)
class LocalPause:
    """The monitor itself was not running for ``duration`` seconds, up to ``at`` (its clock).

    A stopped process, a suspended machine or a starved host: longer than the monitor's
    ``max_local_pause``. Deadlines that fell inside the pause were not counted as missed: each
    topic got a full period (plus grace) from the wake-up, and beats recorded meanwhile with
    their true times counted as heard. So topics that really stopped are reported one period
    (plus grace) after ``at``, and no healthy topic is failed for the monitor's own stall.
    """

    duration: float
    at: float
    wall_offset: float = _offset()

    @property
    def wall_at(self) -> float:
        """``at`` (the wake-up) as Unix seconds."""
        return self.at + self.wall_offset


@dataclass(frozen=True)
class Lagging:
    """The monitor's own intake fell ``lag`` seconds behind its feed, found at ``at`` (its
    clock): more than the monitor's ``lag_threshold``.

    Beats waited unread (in the socket, at the broker) because the monitor reads more slowly
    than they come: its backlog, not the services'. Meanwhile deadlines are judged against
    what has been read instead of the clock (never more than ``max_ingest_lag`` behind it), so
    no live topic is failed for the backlog; a topic that really stopped is reported late, by
    the lag at most. Once per episode; :class:`CaughtUp` ends it.
    """

    lag: float
    at: float
    wall_offset: float = _offset()

    @property
    def wall_at(self) -> float:
        """``at`` as Unix seconds."""
        return self.at + self.wall_offset


@dataclass(frozen=True)
class CaughtUp:
    """The intake that was :class:`Lagging` read its backlog at ``at`` (its clock), after
    ``duration`` seconds behind (from its first read found backlogged); ``max_lag`` is the
    largest lag seen meanwhile. Deadlines are judged at the clock again. Also sent when the
    episode ends because the monitor stops or the guard is turned off.
    """

    duration: float
    max_lag: float
    at: float
    wall_offset: float = _offset()

    @property
    def wall_at(self) -> float:
        """``at`` as Unix seconds."""
        return self.at + self.wall_offset


@dataclass(frozen=True)
class Disconnected:
    """The transport lost its connection to ``broker`` (``reason`` says how); it is reconnecting.

    Only transports with connections (STOMP) send it. A monitor's failed/resumed events keep
    their meaning through the outage: topics not heard meanwhile fail as usual.
    """

    broker: str
    reason: str


@dataclass(frozen=True)
class Reconnected:
    """The transport is connected again, to ``broker``, with every subscription restored.

    ``switched_from``: set when this was a planned move (the failover option
    ``priority_backup`` going back to the preferred broker ``broker``): the broker left, with
    no :class:`Disconnected` before it; None after an outage."""

    broker: str
    switched_from: str | None = None


@dataclass(frozen=True)
class ExceptionEvent:
    """Something went wrong that the publisher or monitor survived.

    ``reason`` is a short stable code (``"bad_json"``, ``"unsigned"``, ``"check_failed"``,
    ``"send_failed"``, ``"listener_error"``, ...); ``error`` the exception, if there was one.
    """

    source: str
    reason: str
    error: BaseException | None
    detail: str = ""


ListenerEvent = (
    Started
    | Stopped
    | Sent
    | Received
    | Failed
    | Resumed
    | Flapping
    | LocalPause
    | Lagging
    | CaughtUp
    | Disconnected
    | Reconnected
    | ExceptionEvent
)

#: A monitor's detector events, the ones an :class:`EventBatch` holds (one per kind of
#: :data:`EVENT_METHODS`).
MonitorEvent = Failed | Resumed | Received | LocalPause | Lagging | CaughtUp | Flapping

#: Per detector event kind (``_core.Event.kind``), the listener method that takes it.
EVENT_METHODS: dict[str, str] = {
    "failed": "on_failed",
    "resumed": "on_resumed",
    "received": "on_received",
    "local_pause": "on_local_pause",
    "lagging": "on_lagging",
    "caught_up": "on_caught_up",
    "flapping": "on_flapping",
}

#: Per detector event kind, how its listener event is made from the core's (and a wall offset).
_BUILDERS: dict[str, Callable[[_core.Event, float], Any]] = {
    "failed": lambda e, off: Failed(
        e.topic,
        e.missed,
        e.at if e.since is None else e.since,
        e.at,
        e.reason,
        wall_offset=off,
        silenced=e.silenced,
        suppressed_by=e.suppressed_by,
    ),
    "resumed": lambda e, off: Resumed(
        e.topic,
        e.missed,
        e.downtime or 0.0,
        e.at,
        wall_offset=off,
        silenced=e.silenced,
        suppressed_by=e.suppressed_by,
    ),
    "received": lambda e, off: Received(e.topic, e.seq, e.latency, e.at, wall_offset=off),
    "local_pause": lambda e, off: LocalPause(e.duration or 0.0, e.at, wall_offset=off),
    "lagging": lambda e, off: Lagging(e.lag or 0.0, e.at, wall_offset=off),
    "caught_up": lambda e, off: CaughtUp(
        e.duration or 0.0, e.max_lag or 0.0, e.at, wall_offset=off
    ),
    "flapping": lambda e, off: Flapping(e.topic, bool(e.flapping), e.missed, e.at, wall_offset=off),
}


class EventBatch:
    """A monitor's detector events handed over together (``on_events``), oldest first.

    ``len(batch)``; iterating (or ``batch[i]``) gives the usual event objects
    (:class:`Failed`, :class:`Resumed`, :class:`Received`, :class:`LocalPause`), each built
    when it is reached, and :meth:`calls` pairs each with the listener method that takes it.

    For bulk use the columns give one field of every event at once, without a Python object
    per event. Numeric columns are read-only ``memoryview`` objects (typecodes below) over a
    copy made at each access, so keep one in a local: ``numpy.asarray(batch.at)`` takes it
    without a further copy, ``batch.at.tolist()`` gives floats. A field an event does not
    have is NaN (floats), :attr:`NO_SEQ` (``seq``) or -1 (``handles``, for a local pause).

    - ``kinds`` (``B``): codes, ``KINDS[code]`` the kind's name; :meth:`count` counts one kind.
    - ``topics``: an Arrow string array (``__arrow_c_array__``, the Arrow PyCapsule interface:
      ``pyarrow.array(batch.topics)`` takes it without a copy; ``""`` for a local pause);
      :meth:`topic_list`: the same as a ``list[str]``.
    - ``handles`` (``q``), ``missed`` (``I``), ``at``, ``since`` (failed), ``downtime``
      (resumed), ``duration`` (local_pause), ``latency`` (received) (``d``, seconds on the
      monitor's clock: add :attr:`wall_offset` for Unix time), ``seq`` (``Q``, received),
      ``silenced`` (``B``, 1 for a failed/resumed of a silenced topic);
      :meth:`reason_list`: each ``failed`` event's reason (explicit failures), else ``None``;
      :meth:`suppressed_by_list`: the parent holding each event back (``""`` for none).

    A batch is built in the core from the events the dispatch thread popped: a listener is
    given only the kinds it takes (see :meth:`~heartwire.listeners.SubscriberListener.on_events`).
    """

    __slots__ = ("core", "wall_offset")

    #: The kinds' names, indexed by the ``kinds`` column's codes.
    KINDS: ClassVar[tuple[str, ...]] = _core.EventBatch.KINDS
    #: The ``seq`` column's value for "none" (2**64 - 1).
    NO_SEQ: ClassVar[int] = _core.EventBatch.NO_SEQ

    def __init__(self, core: _core.EventBatch, wall_offset: float | None = None) -> None:
        #: The core's batch (its events are :class:`heartwire._core.Event` objects).
        self.core = core
        #: Seconds to add to the monitor's clock to get Unix time.
        self.wall_offset = real_clock_offset() if wall_offset is None else wall_offset

    def __len__(self) -> int:
        return len(self.core)

    def __repr__(self) -> str:
        return f"EventBatch(len={len(self.core)})"

    def __iter__(self) -> Iterator[MonitorEvent]:
        off = self.wall_offset
        build = _BUILDERS
        for ev in self.core:
            yield build[ev.kind](ev, off)

    def __getitem__(self, index: int) -> MonitorEvent:
        ev = self.core[index]
        return _BUILDERS[ev.kind](ev, self.wall_offset)  # type: ignore[no-any-return]

    def calls(self) -> Iterator[tuple[str, MonitorEvent]]:
        """``(method name, event)`` for each event, in order: ``("on_failed", Failed(...))``."""
        off = self.wall_offset
        build = _BUILDERS
        methods = EVENT_METHODS
        for ev in self.core:
            kind = ev.kind
            yield methods[kind], build[kind](ev, off)

    def count(self, kind: str) -> int:
        """How many events of ``kind`` (``"failed"``, ...) the batch holds."""
        return self.core.count(kind)

    def of_kinds(self, kinds: Iterable[str]) -> EventBatch:
        """The events of the given kinds, in order (this batch if it holds no other)."""
        core = self.core.of_kinds(list(kinds))
        return self if core is self.core else EventBatch(core, self.wall_offset)

    def slice(self, start: int, stop: int) -> EventBatch:
        """The events ``start`` to ``stop`` (clamped, as a slice is)."""
        core = self.core.slice(start, stop)
        return self if core is self.core else EventBatch(core, self.wall_offset)

    def topic_list(self) -> list[str]:
        """The topics' names (``""`` for a local pause)."""
        return self.core.topic_list()

    def reason_list(self) -> list[str | None]:
        """Each event's reason: the sender's, for a ``failed`` by a ``down`` beat (see
        :attr:`Failed.reason`); ``None`` otherwise."""
        return self.core.reason_list()

    def without_marked(self, *, silenced: bool = True, suppressed: bool = True) -> EventBatch:
        """The events without those marked ``silenced`` (when ``silenced``) or suppressed by a
        parent (when ``suppressed``), in order (this batch if none is left out)."""
        core = self.core.without_marked(silenced=silenced, suppressed=suppressed)
        return self if core is self.core else EventBatch(core, self.wall_offset)

    def suppressed_by_list(self) -> list[str]:
        """The parent each event is suppressed by (``""`` for none)."""
        return self.core.suppressed_by_list()

    @property
    def silenced(self) -> memoryview:
        return self.core.silenced

    @property
    def kinds(self) -> memoryview:
        return self.core.kinds

    @property
    def topics(self) -> Any:
        return self.core.topics

    @property
    def handles(self) -> memoryview:
        return self.core.handles

    @property
    def missed(self) -> memoryview:
        return self.core.missed

    @property
    def at(self) -> memoryview:
        return self.core.at

    @property
    def since(self) -> memoryview:
        return self.core.since

    @property
    def downtime(self) -> memoryview:
        return self.core.downtime

    @property
    def duration(self) -> memoryview:
        return self.core.duration

    @property
    def latency(self) -> memoryview:
        return self.core.latency

    @property
    def seq(self) -> memoryview:
        return self.core.seq


class State(str, Enum):
    """A topic's state on the monitoring side (the values are the core's strings)."""

    PENDING = "PENDING"
    """Expected, nothing heard yet."""
    ALIVE = "ALIVE"
    FAILED = "FAILED"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    REMOVED = "REMOVED"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TopicStatus:
    """A snapshot of one monitored topic; times are on the monitor's clock (``wall_*``: the
    same as Unix seconds).

    ``missed`` counts consecutive missed periods, ``last_seen`` is the last beat's time (``None``
    if never heard), ``failed_since`` the deadline at which the current failure began (``None``
    unless ``FAILED``), ``next_deadline`` when the next missed period would be counted (``None``
    when not armed), ``phi`` the phi-accrual suspicion level for topics in phi mode (``None``
    otherwise), ``grace`` the seconds of slack added to every deadline (the n-th after the last
    beat is ``last_seen + n * period + grace``; not used in phi mode).
    """

    topic: str
    state: State
    missed: int
    last_seen: float | None
    period: float
    allowed_misses: int
    failed_since: float | None
    next_deadline: float | None
    phi: float | None = None
    grace: float = 0.0
    wall_offset: float = _offset()

    @property
    def wall_last_seen(self) -> float | None:
        """``last_seen`` as Unix seconds."""
        return None if self.last_seen is None else self.last_seen + self.wall_offset

    @property
    def wall_failed_since(self) -> float | None:
        """``failed_since`` as Unix seconds."""
        return None if self.failed_since is None else self.failed_since + self.wall_offset

    @property
    def wall_next_deadline(self) -> float | None:
        """``next_deadline`` as Unix seconds."""
        return None if self.next_deadline is None else self.next_deadline + self.wall_offset

    @classmethod
    def from_core(cls, status: _core.TopicStatus, wall_offset: float | None = None) -> TopicStatus:
        """Build from the native core's :class:`~heartwire._core.TopicStatus`; ``wall_offset``
        as the monitor's (default: the real clock's)."""
        return cls(
            topic=status.topic,
            state=State(status.state),
            missed=status.missed,
            last_seen=status.last_seen,
            period=status.period,
            allowed_misses=status.allowed_misses,
            failed_since=status.failed_since,
            next_deadline=status.next_deadline,
            phi=status.phi,
            grace=status.grace,
            wall_offset=real_clock_offset() if wall_offset is None else wall_offset,
        )
