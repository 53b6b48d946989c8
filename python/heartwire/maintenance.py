"""Scheduled maintenance windows: a local time range in an IANA zone, daily or on some weekdays,
whose occurrences become ordinary silences in the core.

A :class:`MaintenanceWindow` only describes the schedule and computes its occurrences with
:mod:`zoneinfo`. :class:`Windows` (one per monitor) turns occurrences into core silences
(``Detector.silence(pattern, end, start=...)``), registered ahead on the monitor's clock, so the
core starts and ends each one on time, marks events ``silenced`` and owes the alerts of a topic
still FAILED when one ends: nothing here runs per beat or per event.

Daylight saving time (each occurrence covers the moments its local clock reads from ``start``
to ``end``):

- a time the clock skips (spring forward; 02:30 on the day Paris goes from 02:00 to 03:00) is
  taken at the change, the moment the clock jumps (03:00 CEST); a window wholly inside the
  skipped hour (02:15-02:45) runs from the change for its usual length (03:00-03:30), as cron
  runs a job of the skipped hour at the jump;
- a time the clock shows twice (fall back) starts a window at its first pass and ends one at
  its last pass: 01:00-02:30 on the day Paris goes from 03:00 back to 02:00 lasts 2.5 hours
  and covers both passes through 02:00-02:30.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["HORIZON", "OFFSET_CHECK", "OFFSET_MOVED", "WEEKDAYS", "MaintenanceWindow", "Windows"]

#: How far ahead a window's occurrences are registered in the core (seconds): every occurrence
#: starting within it. Eight days: a weekly window always has its next one registered, and a
#: ``ManualClock`` may be moved up to a week between two top-ups.
HORIZON = 8 * 86400.0
#: How often (seconds on the monitor's clock) a monitor on the real clock reads the wall clock's
#: offset again: the monotonic clock stops while the host is suspended, and the wall clock may
#: be stepped (an NTP correction, an operator), so the offset taken at construction drifts.
OFFSET_CHECK = 60.0
#: How far (seconds) the offset may move before the occurrences registered ahead are placed
#: again (NTP's slewing moves it by far less than that in a minute).
OFFSET_MOVED = 1.0
#: Occurrences starting within this many seconds (the monitor's clock) are left where they are
#: when the offset moves: the core may start one at any moment, and ending a started silence
#: may emit (never done from a top-up: see :class:`Windows`).
_KEEP_SOON = 60.0
#: The weekday names ``days`` takes (or their full English names), Monday first.
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_UTC = _dt.timezone.utc


def _local_time(value: object, name: str) -> _dt.time:
    """``"HH:MM"``, ``"HH:MM:SS"`` or a naive :class:`datetime.time` (whole seconds)."""
    if isinstance(value, _dt.time):
        if value.tzinfo is not None or value.microsecond:
            raise ValueError(
                f"{name} must be a naive local time in whole seconds (the zone is tz), "
                f"got {value!r}"
            )
        return value.replace(fold=0)
    if not isinstance(value, str):
        raise TypeError(
            f"{name} must be a local time such as '02:00' (str) or a datetime.time, "
            f"got {type(value).__name__} {value!r}"
        )
    m = _TIME.fullmatch(value.strip())
    h, mi, s = (int(g) if g else 0 for g in m.groups()) if m else (99, 0, 0)
    if h > 23 or mi > 59 or s > 59:
        raise ValueError(
            f"{name} must be a local time 'HH:MM' or 'HH:MM:SS' (00:00 to 23:59:59), got {value!r}"
        )
    return _dt.time(h, mi, s)


def _zone(tz: object) -> ZoneInfo:
    if isinstance(tz, ZoneInfo):
        return tz
    if not isinstance(tz, str):
        raise TypeError(
            f"tz must be an IANA time zone name such as 'Europe/Paris', "
            f"got {type(tz).__name__} {tz!r}"
        )
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # ValueError: a key that is not a relative path ('/etc/passwd', '../x'); OSError: a
        # directory name ('Europe').
        raise ValueError(
            f"tz must be an IANA time zone name such as 'Europe/Paris', got {tz!r}"
        ) from None


def _days(days: object) -> tuple[str, ...] | None:
    if days is None:
        return None
    items: list[object] = [days] if isinstance(days, str) else list(_iterable(days))
    found: set[int] = set()
    for day in items:
        key = day.strip().lower() if isinstance(day, str) else None
        if key in WEEKDAYS:
            found.add(WEEKDAYS.index(key))
        elif key in _FULL:
            found.add(_FULL.index(key))
        else:
            raise ValueError(
                f"days must be weekday names such as ('sat', 'sun'), or None for every day, "
                f"got {day!r} in {days!r}"
            )
    if not found:
        raise ValueError(f"days must name at least one weekday (None: every day), got {days!r}")
    return tuple(WEEKDAYS[i] for i in sorted(found))


def _iterable(value: object) -> Iterable[object]:
    if not isinstance(value, Iterable):
        raise TypeError(
            f"days must be weekday names such as ('sat', 'sun') or None, "
            f"got {type(value).__name__} {value!r}"
        )
    return value


@dataclass(frozen=True)
class MaintenanceWindow:
    """A scheduled maintenance window: the topics matching ``pattern`` are silenced from
    ``start`` to ``end`` local time in zone ``tz``, every day (``days`` None) or on the
    weekdays named (``("sat", "sun")``, Monday ``"mon"`` first). An ``end`` before ``start``
    crosses midnight: the occurrence ends the next day (``days`` name the day it starts).
    ``id`` is for :meth:`~heartwire.monitor.HeartbeatMonitor.end_maintenance`; the silences it
    registers carry it (:attr:`heartwire.policy.Silence.window`). Make one with
    :meth:`~heartwire.monitor.HeartbeatMonitor.maintenance`."""

    id: int
    pattern: str
    start: _dt.time
    end: _dt.time
    tz: str
    days: tuple[str, ...] | None = None
    reason: str = ""
    _tzinfo: ZoneInfo = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self._tzinfo is None:
            object.__setattr__(self, "_tzinfo", _zone(self.tz))

    @classmethod
    def make(
        cls,
        id: int,
        pattern: str,
        *,
        start: object,
        end: object,
        tz: object,
        days: object = None,
        reason: object = "",
    ) -> MaintenanceWindow:
        """A window from user input: each bad field refused by name (times ``"HH:MM"``,
        ``"HH:MM:SS"`` or :class:`datetime.time`; ``tz`` an IANA name or a ``ZoneInfo``)."""
        t0, t1 = _local_time(start, "start"), _local_time(end, "end")
        if t0 == t1:
            raise ValueError(
                f"end must differ from start (an end before the start crosses midnight), "
                f"got start={start!r}, end={end!r}"
            )
        zone = _zone(tz)
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, got {type(reason).__name__} {reason!r}")
        return cls(id, pattern, t0, t1, zone.key or str(zone), _days(days), reason, _tzinfo=zone)

    @property
    def crosses_midnight(self) -> bool:
        """Whether each occurrence ends the day after it starts."""
        return self.end < self.start

    def occurrences(
        self, after: _dt.datetime, count: int = 1
    ) -> list[tuple[_dt.datetime, _dt.datetime]]:
        """The next ``count`` occurrences not over at ``after`` (an aware datetime; one in
        progress included), as ``(start, end)`` aware datetimes in the window's zone."""
        if not isinstance(after, _dt.datetime) or after.utcoffset() is None:
            raise ValueError(f"after must be an aware datetime, got {after!r}")
        out = []
        for s, e in self._from(after.timestamp()):
            out.append((s.astimezone(self._tzinfo), e.astimezone(self._tzinfo)))
            if len(out) >= count:
                break
        return out

    def _from(self, after: float) -> Iterator[tuple[_dt.datetime, _dt.datetime]]:
        """The occurrences ending after Unix time ``after``, in order, as UTC datetimes
        (endless: the caller stops)."""
        day = _dt.datetime.fromtimestamp(after, self._tzinfo).date() - _dt.timedelta(days=1)
        while True:
            if self.days is None or WEEKDAYS[day.weekday()] in self.days:
                s, e = self._on(day)
                if e.timestamp() > after:
                    yield s, e
            day += _dt.timedelta(days=1)

    def _on(self, day: _dt.date) -> tuple[_dt.datetime, _dt.datetime]:
        """The occurrence starting on local date ``day`` (UTC datetimes)."""
        start = self._instant(_dt.datetime.combine(day, self.start), first=True)
        end_day = day + _dt.timedelta(days=1) if self.crosses_midnight else day
        end = self._instant(_dt.datetime.combine(end_day, self.end), first=False)
        if end <= start:  # both in a skipped hour, taken at the change: the usual length
            usual = _dt.datetime.combine(end_day, self.end) - _dt.datetime.combine(day, self.start)
            end = start + usual
        return start, end

    def _instant(self, local: _dt.datetime, *, first: bool) -> _dt.datetime:
        """The UTC instant of naive local time ``local``: a skipped time at the change, a
        repeated one at its first (``first``) or last pass."""
        a = local.replace(tzinfo=self._tzinfo, fold=0).astimezone(_UTC)
        b = local.replace(tzinfo=self._tzinfo, fold=1).astimezone(_UTC)
        if a == b:
            return a
        if a.astimezone(self._tzinfo).replace(tzinfo=None) == local:  # shown twice
            return min(a, b) if first else max(a, b)
        # Skipped: the clock jumps over it between the two readings; the change is the first
        # second whose local time is past it (found by halving: about 12 steps for an hour).
        lo, hi = int(min(a, b).timestamp()), int(max(a, b).timestamp())
        while hi - lo > 1:
            mid = (lo + hi) // 2
            shown = _dt.datetime.fromtimestamp(mid, self._tzinfo).replace(tzinfo=None)
            if shown > local:
                hi = mid
            else:
                lo = mid
        return _dt.datetime.fromtimestamp(hi, _UTC)


@dataclass
class _Entry:
    window: MaintenanceWindow
    #: Wall time (Unix s) before which every occurrence starting is registered (or was over).
    horizon: float = float("-inf")
    #: Registered occurrences not known to be over: (silence id, start, end), times on the
    #: monitor's clock, and the start's wall time (the schedule's: what identifies it).
    registered: list[tuple[int, float, float, float]] = field(default_factory=list)


class Windows:
    """A monitor's maintenance windows and the core silences registered for them.

    - ``silence(pattern, start, end, reason) -> id``: registers a core silence (times on the
      monitor's clock; ``start`` None: now); it must not wait on another thread (the core's
      ``Detector.silence`` does not: a silence's start emits no event, so it never pushes into a
      queue, full or not; it takes the detector's lock only).
    - ``unsilence(id)``: ends one (may emit the alerts a still-failed topic owes, so it is
      never called under :attr:`_lock`, nor from :meth:`top_up`, but for a silence not
      started yet, which the core drops emitting nothing: see :meth:`_replace`).
    - ``now()``: the monitor's clock; ``wall_offset`` maps it to Unix time. ``follow`` (the
      real clock: the monotonic clock stops while the host is suspended, the wall clock may
      be stepped) reads the offset as it is now: read again at each top-up and every
      :data:`OFFSET_CHECK` seconds, it replaces ``wall_offset`` when they differ by more than
      :data:`OFFSET_MOVED`. None (a ``ManualClock``, an offset given): never.

    Each window keeps every occurrence starting within :data:`HORIZON` registered; as each
    one ends, :meth:`top_up` (called by the monitor where it already runs periodically: see
    :meth:`due`) registers those that came within reach. No thread per window. When the
    offset moved by more than :data:`OFFSET_MOVED`, the occurrences registered that start
    later than a minute from now are dropped (not started: dropping one emits nothing) and
    registered again where the wall clock now puts them; one in progress, or starting within
    the minute, keeps its times.
    """

    def __init__(
        self,
        silence: Callable[[str, float | None, float, str], int],
        unsilence: Callable[[int], bool],
        now: Callable[[], float],
        wall_offset: float,
        follow: Callable[[], float] | None = None,
    ) -> None:
        self._silence = silence
        self._unsilence = unsilence
        self._now = now
        self._read_offset = follow
        self._offset = float(wall_offset)
        # Guards the entries, ids and the next check; held across `silence` (which does not
        # wait on another thread), never across `unsilence`.
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}
        self._by_silence: dict[int, int] = {}
        self._next_id = 0
        self._check_at = float("inf")  # clock time of the next top-up (read without the lock)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def add(self, pattern: str, **spec: object) -> MaintenanceWindow:
        """A new window (``spec``: :meth:`MaintenanceWindow.make`'s fields), its occurrences
        within the horizon registered before it returns."""
        with self._lock:
            window = MaintenanceWindow.make(self._next_id + 1, pattern, **spec)  # type: ignore[arg-type]
            self._next_id += 1
            self._entries[window.id] = _Entry(window)
            self._top_up_locked(self._now())
        return window

    def remove(self, window_id: int) -> bool:
        """Forget window ``window_id`` and end its silences now (one in progress too); False
        if there is no such window."""
        with self._lock:
            entry = self._entries.pop(window_id, None)
            if entry is None:
                return False
            for sid, *_ in entry.registered:
                self._by_silence.pop(sid, None)
            self._check_at = self._next_check()
        # Outside the lock: ending a silence may emit (and wait for room in a "block" queue).
        # Safe to let go first: a top-up no longer sees the entry, so registers nothing more.
        for sid, *_ in entry.registered:
            self._unsilence(sid)
        return True

    def windows(self) -> list[MaintenanceWindow]:
        with self._lock:
            return [e.window for e in self._entries.values()]

    def window_of(self, silence_id: int) -> int | None:
        """The window a registered silence belongs to, if any."""
        return self._by_silence.get(silence_id)

    def due(self, now: float) -> bool:
        """Whether an occurrence ended since the last top-up (one float compare: the monitor
        asks after each batch of events and on its dispatch thread's idle rounds)."""
        return now >= self._check_at

    def top_up(self) -> None:
        """Drop the occurrences over, register those that came within :data:`HORIZON`."""
        with self._lock:
            self._top_up_locked(self._now())

    def _top_up_locked(self, now: float) -> None:
        if self._read_offset is not None:
            offset = self._read_offset()
            if abs(offset - self._offset) > OFFSET_MOVED:
                self._replace(now, offset)
        reach = now + self._offset + HORIZON
        for entry in self._entries.values():
            for sid, _, end, _ in entry.registered:
                if end <= now:
                    self._by_silence.pop(sid, None)
            entry.registered = [r for r in entry.registered if r[2] > now]
            w = entry.window
            for s, e in w._from(max(entry.horizon, now + self._offset)):
                start_wall, end_wall = s.timestamp(), e.timestamp()
                if start_wall >= reach:
                    break
                if start_wall < entry.horizon:
                    continue  # registered by an earlier top-up
                start, end = start_wall - self._offset, end_wall - self._offset
                try:
                    sid = self._silence(w.pattern, start if start > now else None, end, w.reason)
                except ValueError:
                    continue  # over already: the clock moved on since `now` was read
                entry.registered.append((sid, start, end, start_wall))
                self._by_silence[sid] = w.id
            entry.horizon = max(entry.horizon, reach)
        self._check_at = self._next_check()

    def _replace(self, now: float, offset: float) -> None:
        """The wall clock's offset moved to ``offset`` (under the lock): drop the occurrences
        registered that start later than :data:`_KEEP_SOON` from now, to be registered again
        where ``offset`` puts them. Those are not started, so ending them emits nothing (the
        core removes a silence not started yet): safe on the thread that empties the
        queues."""
        self._offset = offset
        for entry in self._entries.values():
            kept = [r for r in entry.registered if r[1] <= now + _KEEP_SOON]
            dropped = [r for r in entry.registered if r[1] > now + _KEEP_SOON]
            for sid, _, _, _ in dropped:
                self._by_silence.pop(sid, None)
                self._unsilence(sid)
            entry.registered = kept
            # Registered again from the one after the last kept (by the schedule's wall
            # time); with none kept, from the first dropped; with none either, the horizon
            # stays. Never lower: an occurrence over already is not run again when the wall
            # clock is stepped back past it.
            if kept:
                entry.horizon = math.nextafter(max(r[3] for r in kept), math.inf)
            elif dropped:
                entry.horizon = min(r[3] for r in dropped)

    def _next_check(self) -> float:
        if not self._entries:
            return float("inf")
        ends = [end for e in self._entries.values() for _, _, end, _ in e.registered]
        # None registered (none in reach: cannot happen with an 8-day horizon): look again
        # in a day.
        check = min(ends) if ends else self._now() + 86400.0
        if self._read_offset is not None:  # and read the wall clock's offset again
            check = min(check, self._now() + OFFSET_CHECK)
        return check
