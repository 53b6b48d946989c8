"""A Parquet event log of a monitor's beats and state changes, for batch analysis.

Attach an :class:`EventLog` to a monitor like any listener; it records every ``received``,
``failed``, ``resumed`` and ``flapping`` event as a row and writes them as Parquet files
(pyarrow) under ``path``, partitioned by date (``date=YYYY-MM-DD/``, UTC) and rolled every
``roll_seconds``::

    log = EventLog(path, roll_seconds=300)    # a directory (made if missing): "/data/heartbeats"
    mon = hw.HeartbeatMonitor(broker, "svc.>", listeners=[log]).start()
    ...
    mon.stop()        # the monitor's on_stopped writes what is buffered
    log.close()

    # later, on Spark (heartwire.spark):
    events = read_events(spark, path)
    outages(events, period_ms=1000).show()       # start=, end=: the window (datetimes, epoch ms)

Rows: ``kind`` (``"received"``, ``"failed"``, ``"resumed"``, ``"flapping"``, ``"settled"``),
``topic``, ``ts`` (the event's time, timestamp µs UTC), ``seq`` and ``latency`` (received),
``missed`` (failed, resumed; flapping: the outages counted), ``since`` (failed: the deadline
at which the topic was declared failed), ``downtime`` (resumed, seconds), ``reason`` (failed:
the sender's reason for an explicit failure, see ``docs/explicit-failure.md``; null
otherwise), ``silenced`` and ``suppressed_by`` (failed, resumed: the alerting policy's marks,
``silenced`` true or false and the parent that suppressed it or null; null on other rows).
``reason``, then ``silenced`` and ``suppressed_by``, are the last columns and newer than the
others: files written before them lack them, and readers merging files read them as null there
(:func:`heartwire.spark.read_events` merges the schemas).

A marked event is still a state change of its topic: a silenced outage is logged, and counted by
the analysis, as any other (the marks say who was told, not what happened); the marks let a
report tell such outages apart. The alert released when a silence ends or a parent resumes is a
``failed`` row at that moment (``since`` the outage's start). A topic that starts flapping gets a
``"flapping"`` row (``missed``: the outages counted in the window) and one that settles a
``"settled"`` row; while it flaps its ``failed`` and ``resumed`` are held back by the monitor
(unless ``flap_hold=False``) and so are not in the log: its ``received`` rows still show every
gap, but a summary log (below) does not know the outages in between.

The monitor's own life is logged too, so that analysis can tell "down" from "not watched":
``"started"`` and ``"stopped"`` rows (``topic`` the monitor's pattern, ``ts`` the event's
``at``, or read from ``clock`` when the event arrives, a ``started`` row being no later than
the run's first event) and ``"paused"`` rows for a local pause of the monitor (``ts`` its end,
``since`` its start, ``downtime`` its length in seconds). A run of the monitor is covered from
its ``started`` row to its ``stopped`` row; a run that ends without one (a crash) is covered up
to its last row, and what follows is unknown. Older files have none of these rows (nothing else
changed in the schema): their whole log is one run, from its first row to its last.

``beats="summary"`` records less at scale (every beat of 100 000 topics at 1 Hz is 8.6 billion
rows a day): instead of a ``received`` row per beat, one ``"beats"`` row per topic and file
window (``ts`` its last beat, ``since`` its first, ``seq`` how many), written with the window's
other rows; ``failed`` and ``resumed`` rows and the monitor's own rows are kept. That is what
availability needs: the outages are then the monitor's own (``failed`` ... ``resumed``), exact
for the monitor's ``allowed_misses`` (which the analysis cannot change afterwards), and the
first beats say from when each topic was known. The schema is unchanged; readers that only
know ``received`` rows see no beats in such a log.

Event times are on the monitor's clock; each of the monitor's events carries the monitor's
``wall_offset`` (seconds to add for Unix time), and the log uses it, so a row shows the same
time as the event's ``wall_at`` does to listeners and alerts, with the real clock or a
:class:`~heartwire._core.ManualClock`. ``started`` and ``stopped`` events carry no time of their
own (unless they have ``at``, then it is used): ``clock`` is read when they arrive, and the
offset is the log's ``wall_offset`` if given, else the monitor's as its events carry it (a
``started`` row waits for the monitor's first event to learn it), else the monitor's default
rule (the clock's reading when the log was made is "now"). So with a ManualClock give the log
the monitor's ``clock``, and nothing else.

Files are cut by event time: rows go to the window ``[k * roll_seconds, (k+1) * roll_seconds)``
of Unix time that the newest event falls in; when an event of a later window arrives, the rows
buffered so far are written (one file per date they cover). So are they by :meth:`flush`, by
:meth:`close`, when the monitor stops, and once ``max_rows`` are buffered. Each file is written
under a hidden name and renamed into place: readers never see part of one.

A failed write (a full disk, an I/O error) loses nothing: the rows stay buffered until a later
write succeeds (the next window's rollover, ``max_rows`` more rows, :meth:`flush` or
:meth:`close`), the hidden file is removed, and the dates already written are not written
again. :meth:`flush` and :meth:`close` raise the error; a write triggered by an event counts it
(:attr:`EventLog.write_errors`, :attr:`EventLog.last_error`) and keeps the event. While writes
keep failing the buffer keeps growing.

Each row is checked against the schema when its event arrives, so that one bad row cannot fail
every later write: an event with a value no row can hold (a time outside the years 1900..9999, a
count beyond int64, a topic that is not valid Unicode) is refused alone, counted
(:attr:`EventLog.refused`) and logged (at most a line a minute). A beat whose ``seq`` is above
2**63-1 (valid on the wire, up to 2**64-1) is kept with ``seq`` NULL and counted
(:attr:`EventLog.seqs_dropped`): the beat is what availability needs, and a wrapped negative
number would mislead whoever reads the column.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from heartwire import _validate
from heartwire._throttle import Throttle
from heartwire.events import Failed, Flapping, LocalPause, Received, Resumed, Started, Stopped
from heartwire.listeners import SubscriberListener

__all__ = ["SCHEMA", "EventLog"]

log = logging.getLogger(__name__)

_TS = pa.timestamp("us", tz="UTC")

SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("ts", _TS, nullable=False),
        pa.field("seq", pa.int64()),
        pa.field("missed", pa.int64()),
        pa.field("since", _TS),
        pa.field("downtime", pa.float64()),
        pa.field("latency", pa.float64()),
        # Added with explicit failures: files written before lack it (read as null).
        pa.field("reason", pa.string()),
        # Added with the alerting policy, last: files written before lack them (read as null).
        pa.field("silenced", pa.bool_()),
        pa.field("suppressed_by", pa.string()),
    ]
)
"""The columns of every event-log file (the ``date`` partition comes from the directory)."""

_US_PER_DAY = 86_400_000_000
_EPOCH = _dt.date(1970, 1, 1)
_EPOCH_DT = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
# the times a row may hold: the years 1900 to 9999 (dates Spark and the partition folders take)
_TS_MIN = (_dt.datetime(1900, 1, 1, tzinfo=_dt.timezone.utc) - _EPOCH_DT) // _dt.timedelta(
    microseconds=1
)
_TS_MAX = (
    _dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=_dt.timezone.utc) - _EPOCH_DT
) // _dt.timedelta(microseconds=1)
_INT64 = range(-(2**63), 2**63)


class _Refused(ValueError):
    """A value the event log's schema cannot hold; the message names it."""


def _micros(name: str, seconds: object, offset_us: int) -> int:
    """A time (seconds on the monitor's clock) as µs of Unix time, if a row can hold it."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise _Refused(f"{name} must be a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds):
        raise _Refused(f"{name} must be finite, got {seconds!r}")
    us = round(seconds * 1_000_000) + offset_us
    if not _TS_MIN <= us <= _TS_MAX:
        raise _Refused(f"{name} {seconds!r} is outside the years 1900..9999 as Unix time")
    return us


def _int64(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in _INT64:
        raise _Refused(f"{name} must be a 64-bit signed integer or None, got {value!r}")
    return value


def _float(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Refused(f"{name} must be a number or None, got {value!r}")
    return float(value)


def _flag(name: str, value: object) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise _Refused(f"{name} must be a bool or None, got {value!r}")


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise _Refused(f"{name} must be a string, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Refused(f"{name} is not valid Unicode text: {value!r}") from None
    return value


class EventLog(SubscriberListener):
    """Records a monitor's events as Parquet files under ``path`` (see the module docs).

    - ``roll_seconds``: length of the time window a file covers (> 0).
    - ``wall_offset``: seconds added to ``clock``'s readings to get Unix time, for the events
      that carry no ``wall_offset`` of their own (``started``, ``stopped``); the monitor's
      events carry the monitor's and that is used. Default: the monitor's, as its events
      carry it (see the module docs).
    - ``max_rows``: rows buffered before they are written even within a window.
    - ``compression``: Parquet codec.
    - ``beats``: ``"all"`` (a row per beat) or ``"summary"`` (one row per topic and window;
      see the module docs).
    - ``clock``: the monitor's clock (a :class:`~heartwire._core.ManualClock`, or a function
      returning seconds), read for the times of ``started`` and ``stopped`` rows when their
      events carry no ``at``; default :func:`time.monotonic`, the monitor's real clock.

    Thread-safe: events may arrive on the monitor's dispatch thread while another thread calls
    :meth:`flush` or :meth:`close`.
    """

    lossless = True  # every availability figure comes from this log: never drop its events

    def __init__(
        self,
        path: str | os.PathLike[str],
        roll_seconds: float = 3600.0,
        *,
        wall_offset: float | None = None,
        max_rows: int = 1_000_000,
        compression: str = "zstd",
        clock: Any = None,
        beats: str = "all",
    ) -> None:
        roll_seconds = _validate.seconds(roll_seconds, "roll_seconds", minimum=0.001)
        max_rows = _validate.count(max_rows, "max_rows", 1)
        wall_offset = _validate.seconds(
            wall_offset, "wall_offset", allow_none=True, allow_negative=True
        )
        now: Callable[[], float]
        if clock is None:
            now = time.monotonic
        elif callable(getattr(clock, "now", None)):
            now = clock.now
        elif callable(clock):
            now = clock
        else:
            raise TypeError(
                f"clock must be a ManualClock or a function returning seconds, got "
                f"{type(clock).__name__}"
            )
        # for the times that come with no offset of their own (``started``, ``stopped``): the
        # explicit one, else the monitor's as its events carry it, else the monitor's default
        # rule ("the clock reads now now")
        self._own_offset_us = None if wall_offset is None else round(wall_offset * 1_000_000)
        self._seen_offset_us: int | None = None
        self._default_offset_us = round((time.time() - now()) * 1_000_000)
        self._pending_start: tuple[str, float] | None = None  # a started row awaiting its offset
        beats = _validate.choice(beats, "beats", ("all", "summary"))
        self._now = now
        self._pattern = ""
        self._summary = beats == "summary"
        self._beats: dict[str, list[int]] = {}  # summary: topic -> [first, last, count] (µs)
        self._path = os.fspath(path)
        self._roll_us = round(roll_seconds * 1_000_000)
        self._max_rows = max_rows
        self._compression = compression
        self._token = secrets.token_hex(4)  # names of files from this writer
        self._lock = threading.Lock()
        self._rows: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
        self._window: int | None = None  # the window of the buffered rows
        self._closed = False
        self._files: list[str] = []
        self._rows_written = 0
        self._write_errors = 0
        self._last_error: BaseException | None = None
        self._size_trigger = max_rows  # buffered rows that trigger a write (moves up on failure)
        self._refused = 0
        self._seqs_dropped = 0
        self._refusals = Throttle(log)
        self._seq_warnings = Throttle(log)

    # -- properties ------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._path

    @property
    def files(self) -> list[str]:
        """The files written so far, in order."""
        with self._lock:
            return list(self._files)

    @property
    def rows_written(self) -> int:
        with self._lock:
            return self._rows_written

    @property
    def write_errors(self) -> int:
        """Writes that failed (their rows stayed buffered)."""
        with self._lock:
            return self._write_errors

    @property
    def last_error(self) -> BaseException | None:
        """The error of the latest failed write, or None."""
        with self._lock:
            return self._last_error

    @property
    def refused(self) -> int:
        """Events not recorded because a row cannot hold one of their values (a time outside
        the years 1900..9999, a count beyond 64 bits, a topic that is not valid Unicode...);
        each is logged (at most one line a minute)."""
        with self._lock:
            return self._refused

    @property
    def seqs_dropped(self) -> int:
        """Beats recorded with ``seq`` NULL because theirs (valid up to 2**64-1 on the wire)
        does not fit the int64 ``seq`` column."""
        with self._lock:
            return self._seqs_dropped

    @property
    def buffered(self) -> int:
        """Rows recorded but not written yet (in summary mode, with a row per topic heard)."""
        with self._lock:
            pending = self._pending_start is not None
            return len(self._rows["kind"]) + len(self._beats) + pending

    def __repr__(self) -> str:
        return (
            f"EventLog({self._path!r}, roll_seconds={self._roll_us / 1e6}, "
            f"files={len(self._files)}, buffered={self.buffered})"
        )

    # -- listener --------------------------------------------------------------------------

    def on_received(self, event: Received) -> None:
        if not self._summary:
            self._add(
                "received", event, event.topic, event.at, seq=event.seq, latency=event.latency
            )
            return
        try:
            topic = _text("topic", event.topic)
            ts = _micros("at", event.at, self._offset_of(event))
        except _Refused as exc:
            with self._lock:
                self._refuse_locked("received", event.topic, exc)
            return
        with self._lock:
            if self._closed:
                return
            self._start_locked(event.at)
            self._roll_locked(ts // self._roll_us)
            seen = self._beats.get(topic)
            if seen is None:
                self._beats[topic] = [ts, ts, 1]
            else:
                seen[0] = min(seen[0], ts)
                seen[1] = max(seen[1], ts)
                seen[2] += 1

    def on_failed(self, event: Failed) -> None:
        self._add(
            "failed",
            event,
            event.topic,
            event.at,
            missed=event.missed,
            since=event.since,
            reason=event.reason,
            silenced=event.silenced,
            suppressed_by=event.suppressed_by,
        )

    def on_resumed(self, event: Resumed) -> None:
        self._add(
            "resumed",
            event,
            event.topic,
            event.at,
            missed=event.missed,
            downtime=event.downtime,
            silenced=event.silenced,
            suppressed_by=event.suppressed_by,
        )

    def on_flapping(self, event: Flapping) -> None:
        if event.flapping:
            self._add("flapping", event, event.topic, event.at, missed=event.count)
        else:
            self._add("settled", event, event.topic, event.at)

    def on_started(self, event: Started) -> None:
        self._pattern = event.source
        own = getattr(event, "at", None)
        if own is not None:  # a time of its own: exact
            self._add("started", event, event.source, own)
            return
        # (A monitor's carries its start time; this is for events without one.)
        # Read from clock on arrival, which may be after the monitor's first events (they are
        # delivered on another thread), and without the monitor's offset: the row waits for the
        # first event, which brings both (a run starts no later than its first event).
        at = self._now()
        with self._lock:
            if not self._closed:
                self._start_locked()
                self._pending_start = (event.source, at)

    def on_stopped(self, event: Stopped) -> None:
        self._add("stopped", event, event.source, self._at(event))
        self.flush()

    def on_local_pause(self, event: LocalPause) -> None:
        self._add(
            "paused",
            event,
            self._pattern,
            event.at,
            since=event.at - event.duration,
            downtime=event.duration,
        )

    def _at(self, event: object) -> float:
        """The event's own time on the monitor's clock, or (a publisher's ``Started`` or
        ``Stopped``, which carry none) ``clock``'s reading now."""
        at = getattr(event, "at", None)
        return self._now() if at is None else at

    def _known_offset(self, event: object) -> int | None:
        """µs to add to the event's times for Unix time: the event's ``wall_offset`` (the
        monitor's, the one its listeners and alerts use), else the log's ``wall_offset``, else
        the one the monitor's events carried so far; None if none is known yet."""
        offset = getattr(event, "wall_offset", None)
        if (
            isinstance(offset, (int, float))
            and not isinstance(offset, bool)
            and math.isfinite(offset)
        ):
            us = round(offset * 1_000_000)
            self._seen_offset_us = us
            return us
        if self._own_offset_us is not None:
            return self._own_offset_us
        return self._seen_offset_us

    def _offset_of(self, event: object) -> int:
        """:meth:`_known_offset`, else the default (the monitor's rule for its default)."""
        known = self._known_offset(event)
        return self._default_offset_us if known is None else known

    # -- writing ---------------------------------------------------------------------------

    def _add(
        self,
        kind: str,
        event: object,
        topic: str,
        at: float,
        *,
        seq: int | None = None,
        missed: int | None = None,
        since: float | None = None,
        downtime: float | None = None,
        latency: float | None = None,
        reason: str | None = None,
        silenced: bool | None = None,
        suppressed_by: str | None = None,
    ) -> None:
        """Buffers one row, its values checked against the schema first: a row the table could
        not hold is refused alone (counted, logged) and never enters the buffer, where it would
        fail every later write."""
        offset = self._offset_of(event)
        dropped_seq = None
        if isinstance(seq, int) and not isinstance(seq, bool) and seq not in _INT64:
            dropped_seq, seq = seq, None  # valid on the wire (up to 2**64-1): keep the beat
        try:
            values = self._values(
                kind,
                topic,
                at,
                offset,
                seq,
                missed,
                since,
                downtime,
                latency,
                reason,
                silenced,
                suppressed_by,
            )
        except _Refused as exc:
            with self._lock:
                self._refuse_locked(kind, topic, exc)
            return
        with self._lock:
            if self._closed:
                return
            self._start_locked(at)
            if dropped_seq is not None:
                self._seqs_dropped += 1
                self._seq_warnings(
                    "event log %r: seq %d of a beat of %r does not fit the int64 seq column; "
                    "the beat is recorded with seq NULL",
                    self._path,
                    dropped_seq,
                    topic,
                )
            self._append_locked(values)

    @staticmethod
    def _values(
        kind: object,
        topic: object,
        at: object,
        offset: int,
        seq: object = None,
        missed: object = None,
        since: object = None,
        downtime: object = None,
        latency: object = None,
        reason: object = None,
        silenced: object = None,
        suppressed_by: object = None,
    ) -> tuple[Any, ...]:
        """A row's values in the schema's order, or :class:`_Refused` naming the one no row can
        hold."""
        return (
            _text("kind", kind),
            _text("topic", topic),
            _micros("at", at, offset),
            _int64("seq", seq),
            _int64("missed", missed),
            None if since is None else _micros("since", since, offset),
            _float("downtime", downtime),
            _float("latency", latency),
            None if reason is None else _text("reason", reason),
            _flag("silenced", silenced),
            None if suppressed_by is None else _text("suppressed_by", suppressed_by),
        )

    def _append_locked(self, values: tuple[Any, ...]) -> None:
        self._roll_locked(values[2] // self._roll_us)
        for column, value in zip(self._rows.values(), values, strict=False):
            column.append(value)
        if len(self._rows["kind"]) >= self._size_trigger:
            self._try_write_locked()

    def _start_locked(self, first: float | None = None) -> None:
        """The ``started`` row that waited (see :meth:`on_started`) joins the buffer, no later
        than ``first`` (the time of the run's first event, on the same clock), with the offset
        for events without one of their own (see :meth:`_known_offset`)."""
        if self._pending_start is None:
            return
        topic, at = self._pending_start
        self._pending_start = None
        if isinstance(first, (int, float)) and not isinstance(first, bool) and first < at:
            at = first
        offset = self._own_offset_us
        if offset is None:
            offset = self._seen_offset_us
        if offset is None:
            offset = self._default_offset_us
        try:
            values = self._values("started", topic, at, offset)
        except _Refused as exc:
            self._refuse_locked("started", topic, exc)
            return
        self._append_locked(values)

    def _refuse_locked(self, kind: object, topic: object, exc: Exception) -> None:
        self._refused += 1
        self._refusals("event log %r: refused a %r event of %r: %s", self._path, kind, topic, exc)

    def _roll_locked(self, window: int) -> None:
        """An event of ``window``: a later window than the buffered rows' writes them."""
        if self._window is None:
            self._window = window
        elif window > self._window:
            self._window = window
            self._try_write_locked()

    def _summarise_locked(self) -> None:
        """Summary mode: the beats noted so far become ``beats`` rows in the buffer."""
        rows = self._rows
        for topic, (first, last, count) in self._beats.items():
            row = {"kind": "beats", "topic": topic, "ts": last, "seq": count, "since": first}
            for name, column in rows.items():
                column.append(row.get(name))
        self._beats = {}

    def _try_write_locked(self) -> None:
        """A write on an event's behalf: a failure is counted, not raised (the rows stay)."""
        try:
            self._write_locked()
        except Exception as exc:
            log.warning(
                "event log %r: write failed, %d rows kept: %r",
                self._path,
                len(self._rows["kind"]),
                exc,
            )
        # retry by size only after max_rows more rows (not at every event while failing)
        self._size_trigger = len(self._rows["kind"]) + self._max_rows

    def flush(self) -> list[str]:
        """Write the buffered rows now; returns the files written. Raises the error of a failed
        write (``OSError``...), the rows then staying buffered for the next try."""
        with self._lock:
            return self._write_locked()

    def close(self) -> None:
        """Write what is buffered; later events are ignored. Idempotent. If the write fails the
        error is raised and the log stays open (call it again to retry)."""
        with self._lock:
            if not self._closed:
                self._write_locked()
                self._closed = True

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_locked(self) -> list[str]:
        """Write the buffer, one file per date; rows leave the buffer only once their file is in
        place. On failure the unwritten dates' rows stay, the error is recorded and raised."""
        self._start_locked()
        self._summarise_locked()
        if not self._rows["kind"]:
            return []
        written: list[str] = []
        done: set[int] = set()
        day_of: list[int] = []
        try:
            table = self._table_locked()
            rows = self._rows
            if not rows["kind"]:
                return []
            day_of = [ts // _US_PER_DAY for ts in rows["ts"]]
            days = pa.array(day_of, pa.int64())
            start = max(min(rows["ts"]) // self._roll_us * self._roll_us, _TS_MIN)
            window_start = _EPOCH_DT + _dt.timedelta(microseconds=start)
            stamp = window_start.strftime("%Y%m%dT%H%M%S")
            for day in sorted(set(day_of)):
                part = table.filter(pc.equal(days, day))
                final = self._write_file(part, day, stamp)
                done.add(day)
                self._files.append(final)
                self._rows_written += part.num_rows
                written.append(final)
        except BaseException as exc:
            self._write_errors += 1
            self._last_error = exc
            if done:
                keep = [i for i, day in enumerate(day_of) if day not in done]
                self._rows = {name: [col[i] for i in keep] for name, col in self._rows.items()}
            raise
        self._rows = {name: [] for name in SCHEMA.names}
        self._size_trigger = self._max_rows
        return written

    def _table_locked(self) -> pa.Table:
        """The buffer as a table. Rows are checked when they are added, so this does not fail;
        if it still does, the rows that do not convert are refused one by one (counted) rather
        than left to fail every later write."""
        try:
            return pa.Table.from_pydict(self._rows, schema=SCHEMA)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            pass
        names = SCHEMA.names
        keep = []
        for i, row in enumerate(zip(*self._rows.values(), strict=False)):
            try:
                pa.Table.from_pylist([dict(zip(names, row, strict=False))], schema=SCHEMA)
            except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
                self._refuse_locked(row[0], row[1], exc)
            else:
                keep.append(i)
        self._rows = {name: [col[i] for i in keep] for name, col in self._rows.items()}
        return pa.Table.from_pydict(self._rows, schema=SCHEMA)

    def _write_file(self, part: pa.Table, day: int, stamp: str) -> str:
        """One date's rows as a file, written under a hidden name and renamed into place; the
        hidden file is removed if that fails."""
        folder = os.path.join(self._path, f"date={_EPOCH + _dt.timedelta(days=day)}")
        os.makedirs(folder, exist_ok=True)
        name = f"part-{stamp}-{self._token}-{len(self._files):05d}.parquet"
        tmp = os.path.join(folder, f".{name}.tmp")
        final = os.path.join(folder, name)
        try:
            pq.write_table(part, tmp, compression=self._compression)
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        return final
