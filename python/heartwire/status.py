"""What ``heartwire status`` shows, as data: :func:`status_snapshot` and :class:`RecentEvents`.

A :class:`StatusSnapshot` is one reading of a monitor: topics by state, the worst offenders,
recent events, silences and suppressions, and the monitor's own health, every time as Unix
seconds. The terminal view (:mod:`heartwire.status_view`, needs ``rich``) only draws it; any
other front end (a web page, a chat bot) can read the same snapshot.

The cost does not grow with the topics beyond the core's own passes: the counts and the
offenders are each one native pass over the topics (:meth:`HeartbeatMonitor.counts
<heartwire.monitor.HeartbeatMonitor.counts>`, :meth:`~heartwire.monitor.HeartbeatMonitor.worst`:
about 1.5 ms for 100 000 topics), and only the ``top`` offenders become Python objects. Recent
events come from a :class:`RecentEvents` listener: a bounded ring filled on its own listener
thread, and read (copied) by the snapshot.

Silences and suppressions are read from the monitor when it offers them (``mon.silences()``;
``mon.dependencies()`` whose parent is FAILED now); a monitor without them shows none. Adding a
section is one function here (as :func:`_silences`, :func:`_suppressions`) and a table in the
view.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from heartwire import _validate
from heartwire.events import (
    CaughtUp,
    Disconnected,
    EventBatch,
    ExceptionEvent,
    Failed,
    Flapping,
    Lagging,
    LocalPause,
    Reconnected,
    Resumed,
    State,
    TopicStatus,
)
from heartwire.listeners import SubscriberListener
from heartwire.transport.patterns import matcher

if TYPE_CHECKING:
    from heartwire.monitor import HeartbeatMonitor

__all__ = [
    "DEFAULT_RECENT",
    "DEFAULT_TOP",
    "STATE_ORDER",
    "Offender",
    "RecentEvent",
    "RecentEvents",
    "SilenceRow",
    "StatusSnapshot",
    "SuppressionRow",
    "duration_text",
    "status_snapshot",
]

#: Offenders a snapshot lists by default.
DEFAULT_TOP = 10
#: Events a :class:`RecentEvents` ring keeps by default.
DEFAULT_RECENT = 50

#: The order states are shown in: the ones that need a person first.
STATE_ORDER: tuple[str, ...] = ("FAILED", "PENDING", "ALIVE", "PAUSED", "STOPPED")


@dataclass(frozen=True)
class Offender:
    """One of the worst topics. ``down_for``: seconds since its failure began (``None`` unless
    FAILED); ``last_seen`` and ``down_since`` are Unix seconds (``None``: never heard / not
    failed); ``silenced`` and ``suppressed_by``: whether its alerts are held back now, and
    why."""

    topic: str
    state: str
    missed: int
    allowed_misses: int
    period: float
    last_seen: float | None
    down_since: float | None
    down_for: float | None
    #: Covered by an active silence (one of the snapshot's ``silences``) now.
    silenced: bool = False
    #: The FAILED parent it depends on (one of the snapshot's ``suppressions``), if any.
    suppressed_by: str | None = None


@dataclass(frozen=True)
class RecentEvent:
    """One recent event, ready to show: ``kind`` (``"failed"``, ``"resumed"``,
    ``"local_pause"``, ``"lagging"``, ``"caught_up"``, ``"disconnected"``, ``"reconnected"``,
    ``"exception"``, or the class name of a newer kind), ``topic`` (``""`` for the monitor's
    own), ``at`` (Unix seconds) and ``detail`` (a short text)."""

    kind: str
    topic: str
    at: float
    detail: str


@dataclass(frozen=True)
class SilenceRow:
    """An active silence: what it matches, until when (Unix seconds; ``None``: no end known)
    and why."""

    pattern: str
    until: float | None
    reason: str
    id: str = ""


@dataclass(frozen=True)
class SuppressionRow:
    """A dependency in force: the failures of the topics matching ``children`` are suppressed
    (delivered marked ``suppressed_by=parent``) because ``parent`` is FAILED, since ``since``
    (Unix seconds)."""

    children: str
    parent: str
    since: float | None = None


@dataclass(frozen=True)
class StatusSnapshot:
    """One reading of a monitor (see the module docs). ``at``: when, Unix seconds.

    - ``states``: topics in each state (``STATE_ORDER`` keys, removed ones left out),
      ``topics``: their total;
    - ``offenders``: the worst topics, worst first (:meth:`HeartbeatMonitor.worst
      <heartwire.monitor.HeartbeatMonitor.worst>`);
    - ``others``: when the monitor watches no more than ``top`` topics, the rest of them (the
      healthy, paused and stopped ones, by name), so a small set is shown whole; else empty;
    - ``recent``: the newest events last (empty without a :class:`RecentEvents`);
    - ``silences``: those not over yet; ``suppressions``: the dependencies whose parent is
      FAILED now; both empty when the monitor has none (or no such feature);
    - ``health``: ``running``, ``beats``, ``rejected`` (total), ``dropped`` (events lost to
      overflow policies), ``local_pauses``, ``ingest_lag`` (seconds), ``disconnects``,
      ``reconnects``, and ``suppressed`` (failed events suppressed by a parent) when the
      monitor counts them.
    """

    pattern: str
    at: float
    topics: int
    states: dict[str, int]
    offenders: tuple[Offender, ...]
    others: tuple[Offender, ...]
    recent: tuple[RecentEvent, ...]
    silences: tuple[SilenceRow, ...]
    suppressions: tuple[SuppressionRow, ...]
    health: dict[str, Any]


def status_snapshot(
    mon: HeartbeatMonitor, *, top: int = DEFAULT_TOP, recent: RecentEvents | None = None
) -> StatusSnapshot:
    """A :class:`StatusSnapshot` of ``mon``: its ``top`` worst topics, and the events ``recent``
    has kept (none without it). Safe from any thread; it does not wait on the monitor's
    listeners."""
    top = _validate.count(top, "top", 0)
    if recent is not None and not isinstance(recent, RecentEvents):
        raise TypeError(f"recent must be a RecentEvents or None, got {type(recent).__name__}")
    now = mon.now()
    wall_now = mon.wall_time(now)
    counts = mon.counts()
    states = {name: int(counts.get(name, 0)) for name in STATE_ORDER}

    def offender(s: TopicStatus) -> Offender:
        return Offender(
            topic=s.topic,
            state=str(s.state),
            missed=s.missed,
            allowed_misses=s.allowed_misses,
            period=s.period,
            last_seen=s.wall_last_seen,
            down_since=s.wall_failed_since,
            down_for=None if s.failed_since is None else max(0.0, now - s.failed_since),
        )

    silences = _silences(mon)
    suppressions = _suppressions(mon)
    marks = _Marks(silences, suppressions)
    offenders = tuple(marks.on(offender(s)) for s in mon.worst(top))
    others: tuple[Offender, ...] = ()
    if 0 < len(mon) <= top:  # a few topics: all of them (statuses() is one object a topic)
        listed = {o.topic for o in offenders}
        rest = sorted((s for s in mon.statuses() if s.topic not in listed), key=_by_topic)
        others = tuple(marks.on(offender(s)) for s in rest if s.state != State.REMOVED)
    stats = mon.stats()
    health = {
        "running": mon.running,
        "beats": stats["beats"],
        "rejected": sum(stats["rejected"].values()),
        "dropped": stats["dropped"] + stats["listener_dropped"],
        "local_pauses": stats["local_pauses"],
        "ingest_lag": stats["ingest_lag"],
        "disconnects": stats["disconnects"],
        "reconnects": stats["reconnects"],
    }
    if "suppressed" in stats:
        health["suppressed"] = stats["suppressed"]
    return StatusSnapshot(
        pattern=mon.pattern,
        at=wall_now,
        topics=sum(states.values()),
        states=states,
        offenders=offenders,
        others=others,
        recent=() if recent is None else recent.events(),
        silences=silences,
        suppressions=suppressions,
        health=health,
    )


def _by_topic(status: TopicStatus) -> str:
    return status.topic


class _Marks:
    """Whether a listed topic is silenced or suppressed now, from the snapshot's silences and
    suppressions: a pattern match per listed topic and row (the ``top`` few), none per topic
    watched."""

    def __init__(
        self, silences: tuple[SilenceRow, ...], suppressions: tuple[SuppressionRow, ...]
    ) -> None:
        self._silenced = [_matcher(row.pattern) for row in silences]
        self._suppressed = [(_matcher(row.children), row.parent) for row in suppressions]

    def on(self, o: Offender) -> Offender:
        silenced = any(m(o.topic) for m in self._silenced)
        parent = next((p for m, p in self._suppressed if p != o.topic and m(o.topic)), None)
        if not silenced and parent is None:
            return o
        return dataclasses.replace(o, silenced=silenced, suppressed_by=parent)


def _matcher(pattern: str) -> Callable[[str], bool]:
    """A pattern's matcher; a pattern that is not valid matches nothing (a snapshot never
    fails for it)."""
    try:
        return matcher(pattern)
    except ValueError:
        return lambda _topic: False


def _silences(mon: HeartbeatMonitor) -> tuple[SilenceRow, ...]:
    """The monitor's silences in force, if it has the feature (``mon.silences()``): each
    read by its ``pattern``, ``reason``, ``id`` and end: ``wall_end`` (Unix seconds), else
    ``end`` (seconds on the monitor's clock), else ``until`` (an aware ``datetime``). One
    whose ``start`` (on the monitor's clock) is still to come is left out: a maintenance
    window's later occurrences are registered ahead."""
    listing = getattr(mon, "silences", None)
    if not callable(listing):
        return ()
    now = mon.now()
    rows = []
    for silence in listing():
        start = getattr(silence, "start", None)
        if isinstance(start, (int, float)) and start > now:
            continue
        until = getattr(silence, "wall_end", None)
        if until is None and isinstance(getattr(silence, "end", None), (int, float)):
            until = mon.wall_time(float(silence.end))
        if until is None and isinstance(getattr(silence, "until", None), _dt.datetime):
            until = silence.until.timestamp()
        rows.append(
            SilenceRow(
                pattern=str(getattr(silence, "pattern", "")),
                until=float(until) if until is not None and math.isfinite(until) else None,
                reason=str(getattr(silence, "reason", "") or ""),
                id=str(getattr(silence, "id", "")),
            )
        )
    return tuple(rows)


def _suppressions(mon: HeartbeatMonitor) -> tuple[SuppressionRow, ...]:
    """The dependencies in force now, if the monitor has the feature (``mon.dependencies()``:
    ``(child_pattern, parent)`` pairs): those whose parent is FAILED, so that its children's
    failures are suppressed. One status lookup per dependency, none per topic."""
    listing = getattr(mon, "dependencies", None)
    if not callable(listing):
        return ()
    rows = []
    for children, parent in listing():
        try:
            status = mon.status(parent)
        except KeyError:
            continue  # a parent not watched (yet) suppresses nothing
        if status.state == State.FAILED:
            rows.append(SuppressionRow(str(children), str(parent), status.wall_failed_since))
    return tuple(rows)


class RecentEvents(SubscriberListener):
    """A listener that keeps a monitor's last ``capacity`` events worth showing a person: the
    changes, not the repeats.

    Kept: a failure as it begins (the first ``failed`` of an outage, whose ``at`` is its
    ``since``), an alert released later (the ``failed`` a topic still down gets when its
    silence ends, its parent resumes or it stops flapping: ``at`` after ``since``), ``resumed``,
    ``flapping`` (start and settle), the monitor's own ``local_pause``, ``lagging`` and
    ``caught_up``, ``disconnected``, ``reconnected`` and ``exception``. Marked events are kept
    too, their detail saying ``(silenced)`` or ``(suppressed by <parent>)``. Left out: the
    repeated ``failed`` of each further missed period, and beats.

    It takes the monitor's event batches whole (:meth:`on_events`) and looks at them from the
    newest back, only until it has ``capacity`` events, so a burst (every topic failing at
    once) costs it ``capacity`` event objects, not one per event; repeats are skipped by their
    columns. Telling a released alert from a repeat needs what came before: a batch with marked
    or flapping events, or while some outage is held back, is first read whole (its columns,
    one step per event, no event object) to note the topics whose outage was only marked so far
    (at most ``max_held`` of them, the oldest forgotten first) and those that just stopped
    flapping. It runs on its own listener thread: a snapshot only copies the ring.
    """

    wants_received: ClassVar[bool] = False

    def __init__(self, capacity: int = DEFAULT_RECENT, *, max_held: int = 100_000) -> None:
        self._capacity = _validate.count(capacity, "capacity", 1)
        self._max_held = _validate.count(max_held, "max_held", 1)
        self._ring: deque[RecentEvent] = deque(maxlen=self._capacity)
        # Guards the ring between the listener thread and snapshots: held for a deque
        # operation only, never across a call out.
        self._lock = threading.Lock()
        # Only the listener thread touches these: topic -> since of an outage whose failed
        # events were all marked so far (its alert is owed); topic -> when it stopped
        # flapping (a failed at that moment says where it stands; kept only while no later
        # event was seen, so a topic that settled up, or was removed, is let go).
        self._held: dict[str, float] = {}
        self._settled: dict[str, float] = {}

    @property
    def capacity(self) -> int:
        return self._capacity

    def events(self) -> tuple[RecentEvent, ...]:
        """The events kept, oldest first."""
        with self._lock:
            return tuple(self._ring)

    def _keep(self, events: list[RecentEvent]) -> None:
        with self._lock:
            self._ring.extend(events)

    def on_events(self, batch: EventBatch) -> None:
        kinds = batch.kinds
        names = batch.core.KINDS
        at = batch.at
        since = batch.since
        released = self._released(batch)
        picked: list[int] = []
        for i in range(len(batch) - 1, -1, -1):
            kind = names[kinds[i]]
            if kind == "received" or (kind == "failed" and since[i] != at[i] and i not in released):
                continue  # a beat, or a failure going on: not a change
            picked.append(i)
            if len(picked) == self._capacity:
                break
        self._keep([_recent(batch[i]) for i in reversed(picked)])

    def _released(self, batch: EventBatch) -> set[int]:
        """The indices of the batch's ``failed`` events with ``at`` after ``since`` that are
        changes, not repeats: an alert held back (the outage was only marked so far) and
        released unmarked, or where a topic stands once it stopped flapping. Reads the batch
        whole, oldest first, only when it may hold one (see the class docs)."""
        marked = batch.core.without_marked(silenced=True, suppressed=True) is not batch.core
        if not (marked or self._held or self._settled or batch.count("flapping")):
            return set()
        kinds = batch.kinds
        names = batch.core.KINDS
        at = batch.at
        since = batch.since
        silenced = batch.silenced
        parents = batch.suppressed_by_list() if marked else None
        topics = batch.topic_list()
        held, settled = self._held, self._settled
        out: set[int] = set()
        for i, topic in enumerate(topics):
            kind = names[kinds[i]]
            if kind == "failed":
                is_marked = bool(silenced[i]) or (parents is not None and parents[i] != "")
                if topic in settled:
                    del settled[topic]
                    if since[i] != at[i]:
                        out.add(i)
                if since[i] == at[i]:  # an outage begins
                    held.pop(topic, None)
                    if is_marked:
                        held[topic] = since[i]
                        if len(held) > self._max_held:
                            del held[next(iter(held))]  # the oldest noted
                elif not is_marked and held.get(topic) == since[i]:
                    del held[topic]
                    out.add(i)
            elif kind == "resumed":
                held.pop(topic, None)
                settled.pop(topic, None)
            elif kind == "flapping":
                event = batch[i]
                if isinstance(event, Flapping) and not event.flapping:
                    settled[topic] = at[i]
                else:
                    settled.pop(topic, None)
        if settled and len(batch):
            # The failed a settle owes is emitted at the settle's moment, right after it (the
            # events come in time order): a settle older than the batch's last event owes
            # nothing more (it settled up, or its topic was removed).
            last = at[len(batch) - 1]
            for topic in [t for t, when in settled.items() if when < last]:
                del settled[topic]
        return out

    def on_disconnected(self, event: Disconnected) -> None:
        self._keep(
            [RecentEvent("disconnected", "", time.time(), f"{event.broker}: {event.reason}")]
        )

    def on_reconnected(self, event: Reconnected) -> None:
        moved = event.switched_from
        detail = event.broker if moved is None else f"{event.broker} (moved back from {moved})"
        self._keep([RecentEvent("reconnected", "", time.time(), detail)])

    def on_exception(self, event: ExceptionEvent) -> None:
        detail = event.reason + (f": {event.detail}" if event.detail else "")
        self._keep([RecentEvent("exception", "", time.time(), detail[:200])])


def _recent(event: Any) -> RecentEvent:
    """A detector event as a :class:`RecentEvent`; marks that newer events carry
    (``reason``, ``silenced``, ``suppressed_by``) go into the detail."""
    if isinstance(event, Failed):
        kind, detail = "failed", f"missed {event.missed}"
        if event.at != event.since:  # an alert released later, or a flap settled while down
            detail += f", down for {duration_text(event.at - event.since)}"
    elif isinstance(event, Resumed):
        kind = "resumed"
        detail = f"after {duration_text(event.downtime)}, missed {event.missed}"
    elif isinstance(event, LocalPause):
        kind, detail = "local_pause", f"monitor stalled {duration_text(event.duration)}"
    elif isinstance(event, Lagging):
        kind, detail = "lagging", f"intake {duration_text(event.lag)} behind"
    elif isinstance(event, Flapping):
        kind = "flapping"
        detail = (
            f"started flapping ({event.count} outages): alerts held back"
            if event.flapping
            else "stopped flapping"
        )
    elif isinstance(event, CaughtUp):
        kind = "caught_up"
        detail = f"after {duration_text(event.duration)}, worst {duration_text(event.max_lag)}"
    else:
        kind = type(event).__name__.lower()
        fields = {
            f.name: getattr(event, f.name)
            for f in dataclasses.fields(event)
            if f.name not in ("topic", "at", "wall_offset")
        }
        detail = " ".join(f"{k}={v}" for k, v in fields.items())
    reason = getattr(event, "reason", None)
    if reason and kind == "failed":
        detail += f": {reason}"
    if getattr(event, "silenced", False):
        detail += " (silenced)"
    parent = getattr(event, "suppressed_by", None)
    if parent:
        detail += f" (suppressed by {parent})"
    return RecentEvent(kind, getattr(event, "topic", ""), event.wall_at, detail[:200])


def duration_text(seconds: float) -> str:
    """A duration for a person: ``850 ms``, ``12.5 s``, ``3m05s``, ``2h03m``."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
