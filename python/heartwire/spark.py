"""Spark analysis of heartbeats: freshness of last-seen times, outages and availability.

Needs the ``spark`` extra (``pip install heartwire[spark]``: PySpark ≥ 4.1, pyarrow, pandas).
Each function has engines that give the same rows:

- ``engine="rust"`` (default): the core's Rust kernels, fed Arrow arrays through the Arrow
  PyCapsule interface (no copy) and run with the GIL released — an ``arrow_udf`` for
  :func:`freshness`; for :func:`outages` and :func:`availability`, the beats hash-partitioned
  by topic (``repartition(topic)``, no sort) and each partition handed whole to the gap kernel
  (``mapInArrow``), which groups and sorts them itself. A partition is held in memory: with
  more data than that, raise ``spark.sql.shuffle.partitions``.
- ``engine="rust-grouped"`` (outages, availability): the same kernel one topic at a time
  through ``groupBy(topic).applyInArrow``; Spark then sorts the beats by topic first, which
  makes it slower than both others.
- ``engine="native"``: the same logic in Spark expressions (a ``lag()`` window for outages).

The Rust engines need :mod:`heartwire` importable in the Python workers (set
``PYSPARK_PYTHON`` to the interpreter it is installed in).

Speed: for :func:`freshness` the kernel itself is a small part of the Rust engine's time; most
of it is Spark moving the Arrow batches to the Python workers and back, which an ``arrow_udf``
that does nothing already pays (the repository's ``benches/spark_bench.py`` measures both, and
``--compare-batches`` the effect of ``spark.sql.execution.arrow.maxRecordsPerBatch``). Inside a
Spark job, ``engine="native"`` is the faster of the two.

Times (``last_seen``, ``as_of``, ``ts``, ``start``, ``end``) may be Spark timestamps or epoch
milliseconds (integers); Python values may be :class:`datetime.datetime` (naive means UTC) or
epoch milliseconds. Periods are milliseconds. A ``TIMESTAMP_NTZ`` (a time without a zone) means
UTC wall-clock time in every engine, whatever the session's time zone (``spark.sql.session.
timeZone``), as naive Python datetimes do; outage and availability times come back as NTZ
values of the same meaning. (Spark's own ``CAST(ntz AS TIMESTAMP)`` reads it in the session's
zone instead: convert with ``to_utc_timestamp`` first if that is what your NTZ values are.)

Outages follow the live monitor with ``grace=0``: a gap between consecutive beats longer than
``allowed_misses * period`` is an outage from ``previous + allowed_misses * period`` (the
moment the monitor fires ``failed``) to the next beat, with ``missed`` = the periods the
monitor counts (``floor(gap / period)``, a beat exactly on a deadline being on time). See
:func:`outages` for the window ``[start, end)``.

The monitor's Parquet event log (:class:`heartwire.eventlog.EventLog`) reads back with
:func:`read_events`; :func:`outages` and :func:`availability` take it as it is and apply the
event-log rules (see :func:`outages`): a topic is judged from when the monitor expected it
(its first beat, or the deadline it missed: so a topic that never beat is down, not missing),
and only the time the monitor was watching counts (:func:`monitored_spans`: not started,
stopped, crashed or paused is "not monitored", neither up nor down).
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Iterator
from numbers import Integral
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    IntegralType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from heartwire import _core, _validate

__all__ = [
    "FRESHNESS_TYPE",
    "availability",
    "freshness",
    "monitored_spans",
    "outages",
    "read_events",
]

Engine = Literal["rust", "native"]
GapEngine = Literal["rust", "rust-grouped", "native"]
ColumnLike = Column | str
TimeLike = _dt.datetime | int

FRESHNESS_TYPE = StructType(
    [
        StructField("status", StringType(), True),
        StructField("missed", LongType(), True),
        StructField("staleness_ms", LongType(), True),
    ]
)
"""The type of :func:`freshness` columns."""

# -- arguments ---------------------------------------------------------------------------------


def _check_engine(engine: object, choices: tuple[str, ...] = ("rust", "native")) -> Any:
    return _validate.choice(engine, "engine", choices)


def _check_allowed(value: object) -> int:
    return _validate.count(value, "allowed_misses", 1)


def _col(value: ColumnLike, name: str) -> Column:
    if isinstance(value, Column):
        return value
    if isinstance(value, str):
        return F.col(value)
    raise TypeError(f"{name} must be a Column or a column name, got {type(value).__name__}")


def _epoch_ms(value: object, name: str) -> int:
    """A Python time (datetime, naive = UTC; or epoch ms) as epoch milliseconds."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        delta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if isinstance(value, Integral) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{name} must fit in a long (epoch ms), got {value!r}")
        return int(value)
    raise TypeError(
        f"{name} must be a datetime or epoch milliseconds (int), got {type(value).__name__} "
        f"{value!r}"
    )


def _time_col(value: object, name: str) -> Column:
    """A time argument as a Column: a Column or column name, a datetime, or epoch ms."""
    if isinstance(value, (Column, str)):
        return _col(value, name)
    return F.lit(_epoch_ms(value, name)).cast("long")


def _epoch_ntz() -> Column:
    return F.lit("1970-01-01").cast("timestamp_ntz")


def _ntz_ms(c: Column) -> Column:
    """Epoch ms (rounded down) of a TIMESTAMP_NTZ read as UTC wall-clock time: its raw value,
    whatever the session's time zone. (The difference of two NTZ values is zone-free; casts to
    TIMESTAMP, ``unix_millis`` and ``timestampdiff`` go through the session's zone, which moves
    wall times in a daylight-saving gap.)"""
    seconds = (c - _epoch_ntz()).cast("interval second").cast("decimal(38,6)")
    return F.floor(seconds * 1000).cast("long")


def _ms_of_type(c: Column, data_type: DataType) -> Column:
    """Epoch milliseconds of a column of a known type: a timestamp (rounded down), an NTZ
    timestamp (UTC wall-clock time) or an integer (as it is)."""
    if isinstance(data_type, TimestampType):
        return F.unix_millis(c)
    if isinstance(data_type, TimestampNTZType):
        return _ntz_ms(c)
    return c.cast("long")


def _ms(c: Column) -> Column:
    """Epoch milliseconds of a column whose type is not known here (a Column argument): a
    timestamp (rounded down), an NTZ timestamp (UTC wall-clock time) or an integer.

    ``typeof`` is folded when the plan is analysed, so only one branch is ever evaluated; but
    Spark type-checks every branch against the column's type, and no cast leads from
    TIMESTAMP_NTZ to BIGINT, nor from BIGINT to TIMESTAMP_NTZ. So each branch must be valid for
    every type: the NTZ branch goes through the column's text (exact, some 100 ns a row); the
    integer branch reads the integer as seconds of a TIMESTAMP and back (exact and cheap below
    ±9 223 372 036 854, where the cast saturates) and only beyond through its text.
    """
    kind = F.typeof(c)
    seconds = F.unix_seconds(c.try_cast("timestamp"))
    as_integer = F.when(F.abs(seconds) < 9_223_372_036_854, seconds).otherwise(
        c.cast("string").cast("long")
    )
    return (
        F.when(kind == "timestamp", F.unix_millis(c.cast("timestamp")))
        .when(kind == "timestamp_ntz", _ntz_ms(c.cast("string").cast("timestamp_ntz")))
        .otherwise(as_integer)
    )


def _div(a: Column, b: Column) -> Column:
    """Exact integral division (truncating; callers keep ``a >= 0``, ``b > 0``)."""
    return F.call_function("div", a, b)


# -- freshness ---------------------------------------------------------------------------------


def freshness(
    last_seen: ColumnLike,
    period_ms: ColumnLike | int,
    as_of: ColumnLike | TimeLike | None = None,
    allowed_misses: int = 1,
    engine: Engine = "rust",
) -> Column:
    """How fresh each row's last beat is: a Column of ``struct<status, missed, staleness_ms>``.

    - ``staleness_ms = as_of - last_seen`` and ``missed = max(0, floor(staleness_ms /
      period_ms))``;
    - ``status``: ``"alive"`` (missed = 0), ``"late"`` (0 < missed < allowed_misses),
      ``"failed"`` (missed ≥ allowed_misses), ``"pending"`` when ``last_seen`` is null
      (``missed`` and ``staleness_ms`` null then);
    - a null or non-positive period gives every field null, whatever ``last_seen`` is; so do a
      null ``as_of`` and a staleness that does not fit in a long.

    ``last_seen`` and ``as_of`` are timestamp or epoch-ms columns (or names); ``as_of`` may
    also be a Python datetime or epoch ms, and defaults to the query's current timestamp.
    ``period_ms``: a column of integer milliseconds, or an int.
    """
    engine = _check_engine(engine)
    allowed = _check_allowed(allowed_misses)
    last = _col(last_seen, "last_seen")
    period_const: int | None = None
    if isinstance(period_ms, (Column, str)):
        period = _col(period_ms, "period_ms").cast("long")
    elif isinstance(period_ms, Integral) and not isinstance(period_ms, bool):
        period_const = int(period_ms)
        period = F.lit(period_const).cast("long")
    else:
        raise TypeError(
            f"period_ms must be a Column, a column name or an int, got "
            f"{type(period_ms).__name__} {period_ms!r}"
        )
    as_of_const: int | None = None
    if as_of is None:
        now = F.current_timestamp()
    elif isinstance(as_of, (Column, str)):
        now = _col(as_of, "as_of")
    else:
        as_of_const = _epoch_ms(as_of, "as_of")
        now = F.lit(as_of_const).cast("long")
    if engine == "native":
        if as_of is None:
            now_ms = F.unix_millis(now)
        elif as_of_const is not None:
            now_ms = now
        else:
            now_ms = _ms(now)
        return _freshness_native(_ms(last), period, now_ms, allowed)
    # Python values go to the workers inside the UDF, not as Arrow columns of one value
    columns = [last]
    if period_const is None:
        columns.append(period)
    if as_of_const is None:
        columns.append(now)
    return _freshness_udf(allowed, period_const, as_of_const)(*columns).alias("freshness")


def _freshness_native(last_ms: Column, period: Column, as_of_ms: Column, allowed: int) -> Column:
    """The freshness struct from epoch-ms columns."""
    staleness = F.try_subtract(as_of_ms, last_ms)
    bad_period = period.isNull() | (period <= 0)
    missed = F.when(staleness < 0, F.lit(0).cast("long")).otherwise(_div(staleness, period))
    unjudged = bad_period | last_ms.isNull() | staleness.isNull()
    status = (
        F.when(bad_period, F.lit(None).cast("string"))
        .when(last_ms.isNull(), F.lit("pending"))
        .when(staleness.isNull(), F.lit(None).cast("string"))
        .when(missed == 0, F.lit("alive"))
        .when(missed < allowed, F.lit("late"))
        .otherwise(F.lit("failed"))
    )
    return F.struct(
        status.alias("status"),
        F.when(unjudged, F.lit(None).cast("long")).otherwise(missed).alias("missed"),
        F.when(unjudged, F.lit(None).cast("long")).otherwise(staleness).alias("staleness_ms"),
    ).alias("freshness")


def _freshness_udf(allowed: int, period: int | None, as_of: int | None) -> Any:
    """The Rust freshness ``arrow_udf``, over ``last_seen`` and those of ``period`` and
    ``as_of`` that are columns (``None`` here); the others are constants. Built when used:
    building one needs an active SparkSession and PySpark >= 4.1."""
    try:
        from pyspark.sql.functions import arrow_udf
    except ImportError as exc:  # PySpark < 4.1
        raise RuntimeError(
            'engine="rust" needs PySpark >= 4.1 (arrow_udf); use engine="native"'
        ) from exc

    kernel = _core.freshness_kernel
    fresh: Callable[..., pa.Array]
    if period is None and as_of is None:

        def fresh(last: pa.Array, period_ms: pa.Array, as_of_ms: pa.Array) -> pa.Array:
            return kernel(last, period_ms, as_of_ms, allowed)

    elif period is None:

        def fresh(last: pa.Array, period_ms: pa.Array) -> pa.Array:
            return kernel(last, period_ms, as_of, allowed)

    elif as_of is None:

        def fresh(last: pa.Array, as_of_ms: pa.Array) -> pa.Array:
            return kernel(last, period, as_of_ms, allowed)

    else:

        def fresh(last: pa.Array) -> pa.Array:
            return kernel(last, period, as_of, allowed)

    return arrow_udf(fresh, FRESHNESS_TYPE)


# -- outages and availability ----------------------------------------------------------------


def read_events(spark: SparkSession, path: str) -> DataFrame:
    """The Parquet event log written by :class:`heartwire.eventlog.EventLog` under ``path``.

    Columns: ``kind`` (``received``, ``failed``, ``resumed``; ``started``, ``stopped``,
    ``paused`` for the monitor itself), ``topic``, ``ts`` (timestamp), ``seq``, ``missed``,
    ``since``, ``downtime``, ``latency``, ``reason`` (an explicit failure's), ``silenced`` and
    ``suppressed_by`` (the alerting policy's marks on failed/resumed rows; the newer columns
    are null in files written before they existed: the files' schemas are merged) and the
    ``date`` partition; ``flapping`` and ``settled`` rows say when a topic started and stopped
    flapping.
    """
    return spark.read.option("mergeSchema", "true").parquet(path)


_LIFE = ("started", "stopped", "paused")
"""Event-log kinds about the monitor itself."""

Spans = list[tuple[int, int]]


def _merge(spans: Spans) -> Spans:
    out: Spans = []
    for a, b in sorted(s for s in spans if s[0] < s[1]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _subtract(spans: Spans, holes: Spans) -> Spans:
    out: Spans = []
    holes = _merge(holes)
    for a, b in _merge(spans):
        for h0, h1 in holes:
            if h1 <= a or h0 >= b:
                continue
            if h0 > a:
                out.append((a, h0))
            a = max(a, h1)
        if a < b:
            out.append((a, b))
    return out


def monitored_spans(
    events: DataFrame,
    ts: str = "ts",
    *,
    start: TimeLike | None = None,
    end: TimeLike | None = None,
) -> list[tuple[int, int]]:
    """When the monitor that wrote an event log was watching: sorted, disjoint ``[from, to)``
    spans in epoch ms, clipped to ``[start, end)``.

    A run is covered from its ``started`` row to its ``stopped`` row; a run without a
    ``stopped`` row (a crash, or a monitor still running) up to its last row; local pauses
    (``paused`` rows, from ``since`` to ``ts``) are cut out. Rows before the first ``started``
    row (a log written before these rows existed) form a run from their first row to their
    last.
    """
    fields = {f.name: f for f in events.schema.fields}
    for name in ("kind", ts):
        if name not in fields:
            raise ValueError(f"events: no column {name!r}: not an event log")
    ts_type = fields[ts].dataType
    t = _ms_of_type(F.col(ts), ts_type).alias("t")
    since_type = fields["since"].dataType if "since" in fields else ts_type
    since = (_ms_of_type(F.col("since"), since_type) if "since" in fields else F.lit(None)).alias(
        "since"
    )
    life = events.where(F.col("kind").isin(*_LIFE)).select("kind", t, since).collect()
    starts = sorted({r.t for r in life if r.kind == "started" and r.t is not None})
    stops = sorted(r.t for r in life if r.kind == "stopped" and r.t is not None)
    pauses = [(r.since, r.t) for r in life if r.kind == "paused" and None not in (r.since, r.t)]
    run = sum((F.when(F.col("t") >= F.lit(s), 1).otherwise(0) for s in starts), F.lit(0)).alias(
        "run"
    )
    rows = events.select(t).where(F.col("t").isNotNull())
    runs: Spans = []
    for r in rows.groupBy(run).agg(F.min("t").alias("lo"), F.max("t").alias("hi")).collect():
        k = int(r.run)
        begin = starts[k - 1] if k > 0 else r.lo
        limit = starts[k] if k < len(starts) else None
        ended = [x for x in stops if x >= begin and (limit is None or x < limit)]
        runs.append((begin, ended[0] if ended else r.hi))
    spans = _subtract(runs, pauses)
    lo = None if start is None else _epoch_ms(start, "start")
    hi = None if end is None else _epoch_ms(end, "end")
    return _clip(spans, lo, hi)


def _clip(spans: Spans, lo: int | None, hi: int | None) -> Spans:
    clipped = [(a if lo is None else max(a, lo), b if hi is None else min(b, hi)) for a, b in spans]
    return [(a, b) for a, b in clipped if a < b]


def _check_monitored(monitored: object) -> Spans:
    """``monitored=``: the spans :func:`monitored_spans` returned (sorted, disjoint, epoch ms)."""
    if not isinstance(monitored, (list, tuple)):
        raise TypeError(
            f"monitored must be a list of (from, to) epoch-ms pairs from monitored_spans(), got "
            f"{type(monitored).__name__}"
        )
    spans: Spans = []
    for span in monitored:
        ok = isinstance(span, (list, tuple)) and len(span) == 2
        if ok:
            a, b = span
            ok = all(isinstance(x, Integral) and not isinstance(x, bool) for x in (a, b))
        if not ok or not a < b or (spans and a < spans[-1][1]):
            raise ValueError(
                f"monitored must be sorted, disjoint (from, to) epoch-ms pairs with from < to, "
                f"as monitored_spans() returns; got {span!r}"
            )
        spans.append((int(a), int(b)))
    return spans


class _Plan:
    """The checked arguments of :func:`outages` / :func:`availability`, and the beats (``topic``,
    ``ts`` in epoch ms, ``p``) the engines read."""

    def __init__(
        self,
        events: DataFrame,
        topic: str,
        ts: str,
        period_ms: str | int,
        allowed_misses: int,
        start: TimeLike | None,
        end: TimeLike | None,
        engine: object,
        monitored: object = None,
    ) -> None:
        if not isinstance(events, DataFrame):
            raise TypeError(f"events must be a DataFrame, got {type(events).__name__}")
        self.engine: GapEngine = _check_engine(engine, ("rust", "rust-grouped", "native"))
        self.allowed = _check_allowed(allowed_misses)
        for name, value in (("topic", topic), ("ts", ts)):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a column name, got {type(value).__name__}")
        fields = {f.name: f for f in events.schema.fields}
        for name, value in (("topic", topic), ("ts", ts)):
            if value not in fields:
                raise ValueError(f"{name}: no column {value!r} in events ({', '.join(fields)})")
        self.topic_field = StructField("topic", StringType(), True)
        ts_type = fields[ts].dataType
        if not isinstance(ts_type, (TimestampType, TimestampNTZType, IntegralType)):
            raise TypeError(
                f"ts: column {ts!r} must be a timestamp, a timestamp_ntz or an integer (epoch "
                f"ms), got {ts_type.simpleString()}"
            )
        self.ts_type: DataType = (
            ts_type if isinstance(ts_type, (TimestampType, TimestampNTZType)) else LongType()
        )
        if isinstance(period_ms, str):
            if period_ms not in fields:
                raise ValueError(f"period_ms: no column {period_ms!r} in events")
            if not isinstance(fields[period_ms].dataType, IntegralType):
                raise TypeError(
                    f"period_ms: column {period_ms!r} must be an integer (ms), got "
                    f"{fields[period_ms].dataType.simpleString()}"
                )
            self.period_col: str | None = period_ms
            self.period: int | None = None
        elif isinstance(period_ms, Integral) and not isinstance(period_ms, bool):
            if period_ms <= 0:
                raise ValueError(f"period_ms must be > 0, got {period_ms!r}")
            if period_ms >= 2**63:
                raise ValueError(f"period_ms must fit in a long, got {period_ms!r}")
            self.period_col, self.period = None, int(period_ms)
        else:
            raise TypeError(
                f"period_ms must be an int or a column name, got {type(period_ms).__name__} "
                f"{period_ms!r}"
            )
        self.end_ms = int(time.time() * 1000) if end is None else _epoch_ms(end, "end")
        self.start_ms = None if start is None else _epoch_ms(start, "start")
        if self.start_ms is not None and self.start_ms >= self.end_ms:
            raise ValueError(f"start must be before end, got {start!r} >= {end!r}")

        period = (
            F.col(self.period_col).cast("long")
            if self.period_col is not None
            else F.lit(self.period).cast("long")
        )
        ts_ms = _ms_of_type(F.col(ts), ts_type)
        # an event log (a kind column): it says which topics the monitor expected and when it
        # was watching; other DataFrames are beats only, watched all along
        self.logged = "kind" in fields and topic not in ("kind", "missed")
        extra = [F.col("kind")] if self.logged else []
        if self.logged and "missed" in fields:
            extra.append(F.col("missed").cast("long").alias("missed"))
        summaries = self.logged and "since" in fields
        if summaries:
            extra.append(_ms_of_type(F.col("since"), fields["since"].dataType).alias("since"))
        in_window = F.col("ts") < self.end_ms
        if summaries:  # a beats row counts from its first beat
            in_window = in_window | ((F.col("kind") == "beats") & (F.col("since") < self.end_ms))
        rows = events.select(
            F.col(topic).cast("string").alias("topic"), ts_ms.alias("ts"), period.alias("p"), *extra
        ).where(F.col("topic").isNotNull() & F.col("ts").isNotNull() & in_window)
        self.monitored: Spans | None = None
        self.judged: DataFrame | None = None  # (topic, judged, p): judged from a failure
        if monitored is not None and not self.logged:
            raise ValueError(
                f"monitored: only for an event log (no 'kind' column), got {monitored!r}"
            )
        if not self.logged:
            self.beats = rows.select("topic", "ts", "p")
            return
        spans = monitored_spans(events, ts) if monitored is None else _check_monitored(monitored)
        self.monitored = _clip(spans, self.start_ms, self.end_ms)
        kind = F.col("kind")
        beats = rows.where(kind == "received").select("topic", "ts", "p")
        # a failed row: the monitor last heard the topic at about ts - missed * period (its
        # last beat, plus the monitor's grace, which the log does not hold)
        if "missed" in fields:
            failed = rows.where((kind == "failed") & F.col("missed").isNotNull())
            if summaries:
                # only the first failed row of each outage (topic, since): a later one may be
                # an alert released off the deadlines (a silence that ended, a parent that
                # resumed, a flap that settled: ts - missed * period is not the last beat
                # then); the repeats at the deadlines say nothing more
                outage = Window.partitionBy("topic", "since")
                failed = (
                    failed.withColumn("first_ts", F.min("ts").over(outage))
                    .where(F.col("ts") == F.col("first_ts"))
                    .drop("first_ts")
                )
            last = (F.col("ts") - F.col("missed") * F.col("p")).alias("ts")
            if summaries:
                # an expected topic that never beat: its first failure (since, the deadline it
                # missed, grace included) is all the log knows of it. It is judged from that
                # moment and down from it: a virtual beat allowed_misses periods before it
                # (not judged: see judged) makes every engine's outage begin there.
                heard = rows.where(kind == "received").select("topic", "ts")
                heard = heard.unionByName(
                    rows.where(kind == "beats").select("topic", F.col("since").alias("ts"))
                )
                first_heard = heard.groupBy("topic").agg(F.min("ts").alias("heard"))
                failed = failed.join(first_heard, "topic", "left").withColumn(
                    "never",
                    F.col("since").isNotNull()
                    & (F.col("heard").isNull() | (F.col("since") < F.col("heard"))),
                )
                self.judged = (
                    failed.where("never")
                    .groupBy("topic")
                    .agg(F.min("since").alias("judged"), F.min_by("p", "since").alias("p"))
                )
                first_failure = self.judged.select(
                    "topic", (F.col("judged") - F.lit(self.allowed) * F.col("p")).alias("ts"), "p"
                )
                beats = beats.unionByName(first_failure.where(F.col("ts").isNotNull()))
                failed = failed.where(~F.col("never"))
            beats = beats.unionByName(
                failed.select("topic", last, "p").where(F.col("ts").isNotNull())
            )
        if summaries:
            # a summary log (EventLog(beats="summary")): per topic and file window its first
            # and last beat; between them the monitor declared every outage (failed rows: the
            # beat before it, above; resumed rows: the beat after it). So virtual beats with
            # no period (the gap after them is not judged: no outage the monitor did not
            # report) at the first beats and the resumed beats; the last beats keep the period
            # (the gap to the next window's first beat is judged, as between real beats).
            # Exact for allowed_misses >= the monitor's.
            no_period = F.lit(None).cast("long").alias("p")
            summary = rows.where(kind == "beats")
            beats = beats.unionByName(
                summary.select("topic", F.col("since").alias("ts"), no_period)
            )
            beats = beats.unionByName(
                summary.where(F.col("ts") < self.end_ms).select("topic", "ts", "p")
            )
            beats = beats.unionByName(
                rows.where(kind == "resumed").select("topic", "ts", no_period)
            )
        # after a span not watched the monitor gives each topic it knew a fresh allowance: a
        # virtual beat at the start of every later monitored span
        resets = [a for a, _ in self.monitored[1:]]
        if resets:
            latest = F.when(F.col("p").isNotNull(), F.col("ts"))  # the last period given
            known = beats.groupBy("topic").agg(
                F.min("ts").alias("first"), F.max_by("p", latest).alias("p")
            )
            reset = known.select(
                "topic", "p", "first", F.explode(F.array(*[F.lit(a) for a in resets])).alias("ts")
            ).where(F.col("first") < F.col("ts"))
            beats = beats.unionByName(reset.select("topic", "ts", "p"))
        self.beats = beats

    @property
    def expect_from_start(self) -> bool:
        """A topic with no beat before ``start`` is expected from ``start``: not in an event
        log, where the log says when the monitor expected each topic."""
        return not self.logged

    def out_time_col(self, ms: Column) -> Column:
        """Epoch-ms results in the type of the input times (Spark side)."""
        if isinstance(self.ts_type, LongType):
            return ms
        if isinstance(self.ts_type, TimestampNTZType):  # UTC wall-clock time, as in Arrow
            return F.timestamp_add("MILLISECOND", ms, _epoch_ntz())
        return F.timestamp_millis(ms)


_OUTAGE_MS = StructType(
    [
        StructField("topic", StringType(), True),
        StructField("down_from", LongType(), False),
        StructField("down_to", LongType(), False),
        StructField("missed", LongType(), False),
        StructField("open", BooleanType(), False),
        StructField("began", BooleanType(), False),
        StructField("last", LongType(), False),
        StructField("period", LongType(), False),
    ]
)
"""Engine outages in epoch ms; ``last`` (the beat before, or the moment the topic was
expected) and ``period`` give the deadlines ``last + k * period``."""


def outages(
    events: DataFrame,
    topic: str = "topic",
    ts: str = "ts",
    *,
    period_ms: str | int,
    allowed_misses: int = 1,
    start: TimeLike | None = None,
    end: TimeLike | None = None,
    engine: GapEngine = "rust",
    monitored: Spans | None = None,
) -> DataFrame:
    """One row per outage: ``topic`` (as a string), ``down_from, down_to, missed, open``.

    ``events`` has a topic column and a beat-time column ``ts`` (timestamp or epoch ms).
    ``period_ms`` is an int or the name of a column of each beat's period (the period in force
    after that beat). ``down_from``/``down_to`` have the type of ``ts``.

    The window is ``[start, end)`` (Python datetimes or epoch ms; ``end`` defaults to now, and
    beats at or after it are ignored):

    - a topic with no beat before ``start`` is expected from ``start`` (as
      ``HeartbeatMonitor.expect`` at ``start``): it fails ``allowed_misses`` periods after it
      if it has not beaten by then; without ``start`` a topic's window begins at its first beat;
    - a topic already down at ``start`` (its last earlier beat older than the allowance) has an
      outage clipped to begin at ``start``; outages over before ``start`` are left out;
    - a topic still down at ``end`` has an ``open`` outage with ``down_to = end`` and the
      periods missed by then.

    An event log (``events`` with a ``kind`` column, as :func:`read_events` reads it) says
    more, and these rules replace the first one:

    - marked outages count: a topic silenced or suppressed by a parent is down all the same
      (the marks say who was told, not what happened; filter the ``failed`` rows on
      ``silenced``/``suppressed_by`` to tell those outages apart); of each outage's ``failed``
      rows only the first counts (a later one may be an alert released off the deadlines,
      when a silence ended, a parent resumed or a flap settled), and ``flapping``/``settled``
      rows are not beats;
    - its beats are the ``received`` rows (in a summary log, ``EventLog(beats="summary")``,
      the first and last beat of each topic per file and the beats after each outage; its
      outages, the monitor's own, are then exact for ``allowed_misses`` at least the
      monitor's);
    - a topic is judged from its first beat (a topic first heard inside the window is not
      judged before that beat: the monitor did not know it); a topic the monitor was told to
      expect and that failed before it ever beat, from the deadline it missed (its ``failed``
      rows' ``since``, the monitor's grace included, which the log does not hold otherwise),
      and it is down from then on: 0 % until it beats;
    - only the time the monitor was watching counts (:func:`monitored_spans`): outages are cut
      to it, a piece ending where watching stopped being ``open`` (its end is unknown), and
      after a span not watched each known topic gets a fresh allowance, as the monitor gives
      it on a restart or after a local pause. ``monitored``: what :func:`monitored_spans`
      returned for this log (without ``start``/``end``), if you have it already; otherwise
      it is computed (two Spark jobs).
    """
    plan = _Plan(events, topic, ts, period_ms, allowed_misses, start, end, engine, monitored)
    rows = _outage_rows(plan)
    return rows.select(
        "topic",
        plan.out_time_col(F.col("down_from")).alias("down_from"),
        plan.out_time_col(F.col("down_to")).alias("down_to"),
        "missed",
        "open",
    )


def availability(
    events: DataFrame,
    topic: str = "topic",
    ts: str = "ts",
    *,
    period_ms: str | int,
    allowed_misses: int = 1,
    start: TimeLike | None = None,
    end: TimeLike | None = None,
    engine: GapEngine = "rust",
    monitored: Spans | None = None,
) -> DataFrame:
    """Availability per topic over ``[start, end)``, from the outages of :func:`outages`.

    Columns: ``topic``, ``window_start``, ``window_end`` (the type of ``ts``; the window starts
    at the topic's first beat when ``start`` is None), ``uptime_pct``, ``outages`` (count,
    clipped ones included), ``downtime`` (seconds inside the window), ``mttr`` (mean length in
    seconds of the outages wholly inside the window; null if none), ``mtbf`` (uptime seconds
    per failure that began inside the window; null if none), ``unmonitored`` (seconds of the
    topic's window the monitor was not watching; 0 but for an event log). Edges as
    TimescaleDB's ``heartbeat_agg``: only time inside the window counts, and the outages cut by
    its edges (down at ``start``, still down at ``end``) count as downtime but not towards
    MTTR, whose true lengths they do not show, nor (down at ``start``) as failures for MTBF.

    For an event log (see :func:`outages`, and its ``monitored``) a topic's window begins when
    the monitor first expected it, or at ``start``; time not watched is neither up nor down:
    ``uptime_pct`` is the uptime over the watched time (null if none of it was watched), and
    outages cut where watching stopped do not count towards MTTR.
    """
    plan = _Plan(events, topic, ts, period_ms, allowed_misses, start, end, engine, monitored)
    if plan.logged:
        return _availability_logged(plan, _outage_rows(plan))
    schema = StructType(
        [
            plan.topic_field,
            StructField("window_start", LongType(), False),
            StructField("window_end", LongType(), False),
            StructField("uptime_pct", DoubleType(), False),
            StructField("outages", LongType(), False),
            StructField("downtime", DoubleType(), False),
            StructField("mttr", DoubleType(), True),
            StructField("mtbf", DoubleType(), True),
        ]
    )
    if plan.engine == "native":
        rows = _availability_native(plan)
    elif plan.engine == "rust-grouped":
        rows = plan.beats.groupBy("topic").applyInArrow(_availability_rust(plan, schema), schema)
    else:
        rows = _partitioned(plan, schema, availability=True)
    return rows.select(
        "topic",
        plan.out_time_col(F.col("window_start")).alias("window_start"),
        plan.out_time_col(F.col("window_end")).alias("window_end"),
        "uptime_pct",
        "outages",
        "downtime",
        "mttr",
        "mtbf",
        F.lit(0.0).alias("unmonitored"),
    )


def _outage_rows(plan: _Plan) -> DataFrame:
    """The outages of the chosen engine, times in epoch ms, with ``began`` (the failure was
    declared inside the window), cut to the monitored spans of an event log."""
    if plan.engine == "native":
        rows = (
            _outages_native(plan)
            .where(F.col("o").isNotNull())
            .select(
                "topic",
                "o.down_from",
                "o.down_to",
                "o.missed",
                "o.open",
                "o.began",
                "o.last",
                "o.period",
            )
        )
    elif plan.engine == "rust-grouped":
        rows = plan.beats.groupBy("topic").applyInArrow(_outages_rust(plan), _OUTAGE_MS)
    else:
        rows = _partitioned(plan, _OUTAGE_MS, availability=False)
    if plan.monitored is None:
        return rows
    return _cut(rows, plan.monitored)


def _cut(rows: DataFrame, spans: Spans) -> DataFrame:
    """Outages (epoch ms) cut to the monitored ``spans``: one piece per span they overlap; a
    piece that ends where the span ends, before the outage did, is ``open``; one that begins
    where the span begins, after the outage did, did not begin in the window. A piece cut
    at its end has the periods missed by then."""
    if not spans:
        return rows.where(F.lit(False))
    span = F.explode(
        F.array(*[F.struct(F.lit(a).alias("a"), F.lit(b).alias("b")) for a, b in spans])
    ).alias("s")
    pieces = rows.select("*", span).where(
        (F.col("down_from") < F.col("s.b")) & (F.col("down_to") > F.col("s.a"))
    )
    cut = F.col("down_to") > F.col("s.b")
    return pieces.select(
        "topic",
        F.greatest("down_from", "s.a").alias("down_from"),
        F.least("down_to", "s.b").alias("down_to"),
        # deadlines last + k * period strictly before the cut
        F.when(cut, _div(F.col("s.b") - F.col("last") - 1, F.col("period")))
        .otherwise(F.col("missed"))
        .alias("missed"),
        (F.col("open") | cut).alias("open"),
        (F.col("began") & (F.col("down_from") >= F.col("s.a"))).alias("began"),
        "last",
        "period",
    )


def _availability_logged(plan: _Plan, rows: DataFrame) -> DataFrame:
    """Availability of an event log's topics from their cut outages and monitored spans."""
    spans = plan.monitored or []
    end = F.lit(plan.end_ms).cast("long")
    first = plan.beats.groupBy("topic").agg(F.min("ts").alias("first"))
    if plan.judged is not None:  # a topic that never beat: from the deadline it missed
        first = first.join(plan.judged.select("topic", "judged"), "topic", "left").select(
            "topic", F.coalesce("judged", "first").alias("first")
        )
    w0 = (
        F.col("first")
        if plan.start_ms is None
        else F.greatest(F.col("first"), F.lit(plan.start_ms).cast("long"))
    )
    watched = sum(
        (
            F.greatest(F.lit(0).cast("long"), F.least(end, F.lit(b)) - F.greatest(w0, F.lit(a)))
            for a, b in spans
        ),
        F.lit(0).cast("long"),
    )
    topics = first.select("topic", w0.alias("w0"), watched.alias("watched"))
    duration = F.col("down_to") - F.col("down_from")
    complete = F.col("began") & ~F.col("open")
    per_topic = rows.groupBy("topic").agg(
        F.count("*").alias("outages"),
        F.sum(duration).alias("downtime_ms"),
        F.sum(F.when(complete, duration)).alias("complete_ms"),
        F.count(F.when(complete, 1)).alias("complete"),
        F.count(F.when(F.col("began"), 1)).alias("failures"),
    )
    joined = topics.join(per_topic, "topic", "left").na.fill(
        0, ["outages", "downtime_ms", "complete", "failures"]
    )
    uptime = F.col("watched") - F.col("downtime_ms")
    return joined.select(
        "topic",
        plan.out_time_col(F.col("w0")).alias("window_start"),
        plan.out_time_col(end).alias("window_end"),
        F.when(F.col("watched") > 0, F.lit(100.0) * uptime / F.col("watched")).alias("uptime_pct"),
        F.col("outages").cast("long").alias("outages"),
        (F.col("downtime_ms") / 1000.0).alias("downtime"),
        F.when(F.col("complete") > 0, F.col("complete_ms") / F.col("complete") / 1000.0).alias(
            "mttr"
        ),
        F.when(F.col("failures") > 0, uptime / F.col("failures") / 1000.0).alias("mtbf"),
        ((end - F.col("w0") - F.col("watched")) / 1000.0).alias("unmonitored"),
    )


def _partitioned(plan: _Plan, schema: StructType, availability: bool) -> DataFrame:
    """The ``rust`` engine: each hash partition of the beats through the partition kernel;
    times come back as epoch ms."""
    kernel = _core.partition_kernel
    period, allowed, start_ms, end_ms = plan.period, plan.allowed, plan.start_ms, plan.end_ms
    expect = plan.expect_from_start
    names = schema.fieldNames()
    uniform = period is not None and not plan.logged  # virtual beats carry their own period
    beats = plan.beats.select("topic", "ts") if uniform else plan.beats
    # (kernel column, ms -> seconds?) for each output column after the topic
    columns = (
        [
            ("window_start_ms", False),
            ("window_end_ms", False),
            ("uptime_pct", False),
            ("outages", False),
            ("downtime_ms", True),
            ("mttr_ms", True),
            ("mtbf_ms", True),
        ]
        if availability
        else [
            ("down_from_ms", False),
            ("down_to_ms", False),
            ("missed", False),
            ("open", False),
            ("began_in_window", False),
            ("last_beat_ms", False),
            ("period_ms", False),
        ]
    )

    def per_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        topics, ts, periods = [], [], []
        for batch in batches:
            topics.append(batch.column("topic"))
            ts.append(batch.column("ts"))
            if not uniform:
                periods.append(batch.column("p"))
        if not topics:
            return
        out = kernel(
            topics,
            ts,
            period if uniform else periods,
            allowed,
            end_ms,
            start_ms,
            availability,
            expect,
        )
        if out.num_rows == 0:
            return
        arrays = [out.column("topic")]
        for column, seconds in columns:
            values = out.column(column)
            if seconds:
                values = pc.divide(pc.cast(values, pa.float64()), 1000.0)
            arrays.append(values)
        yield pa.RecordBatch.from_arrays(arrays, names=names)

    return beats.repartition("topic").mapInArrow(per_partition, schema)


def _beat_chunks(batches: Iterator[pa.RecordBatch]) -> tuple[list[pa.Array], list[pa.Array]]:
    ts: list[pa.Array] = []
    periods: list[pa.Array] = []
    for batch in batches:
        ts.append(batch.column("ts"))
        periods.append(batch.column("p"))
    return ts, periods


def _outages_rust(plan: _Plan) -> Any:
    kernel = _core.outages_kernel
    allowed, start_ms, end_ms = plan.allowed, plan.start_ms, plan.end_ms
    expect = plan.expect_from_start
    names = _OUTAGE_MS.fieldNames()

    def per_topic(
        key: tuple[pa.Scalar, ...], batches: Iterator[pa.RecordBatch]
    ) -> Iterator[pa.RecordBatch]:
        ts, periods = _beat_chunks(batches)
        result = kernel(ts, periods, allowed, end_ms, start_ms, expect)
        if result is None or result[1].num_rows == 0:
            return
        rows = result[1]
        topic = pa.array([key[0].as_py()] * rows.num_rows, type=key[0].type)
        yield pa.RecordBatch.from_arrays([topic, *rows.columns], names=names)

    return per_topic


def _availability_rust(plan: _Plan, schema: StructType) -> Any:
    kernel = _core.availability_kernel
    allowed, start_ms, end_ms = plan.allowed, plan.start_ms, plan.end_ms
    expect = plan.expect_from_start
    names = schema.fieldNames()

    def per_topic(
        key: tuple[pa.Scalar, ...], batches: Iterator[pa.RecordBatch]
    ) -> Iterator[pa.RecordBatch]:
        ts, periods = _beat_chunks(batches)
        row = kernel(ts, periods, allowed, end_ms, start_ms, expect)
        if row is None:
            return
        w_start, w_end, uptime_pct, count, downtime_ms, mttr_ms, mtbf_ms = row
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([key[0].as_py()], type=key[0].type),
                pa.array([w_start], pa.int64()),
                pa.array([w_end], pa.int64()),
                pa.array([uptime_pct], pa.float64()),
                pa.array([count], pa.int64()),
                pa.array([downtime_ms / 1000.0], pa.float64()),
                pa.array([None if mttr_ms is None else mttr_ms / 1000.0], pa.float64()),
                pa.array([None if mtbf_ms is None else mtbf_ms / 1000.0], pa.float64()),
            ],
            names=names,
        )

    return per_topic


def _outages_native(plan: _Plan) -> DataFrame:
    """Every beat row with its candidate outages (``o``: a struct, null when none), exploded:
    the outage ending at the beat, and for a topic's last beat the one open at ``end``. Rows
    also carry ``first_ms`` (the topic's first beat) so that topics with no outage remain."""
    allowed, start_ms, end_ms = plan.allowed, plan.start_ms, plan.end_ms
    b = plan.beats.select("topic", F.col("ts").alias("t"), "p")
    ordered = Window.partitionBy("topic").orderBy("t", "p")
    first = F.lag("t").over(ordered).isNull()
    prev_t = F.lag("t").over(ordered)
    prev_p = F.lag("p").over(ordered)
    if start_ms is not None and plan.expect_from_start:
        # the first beat of a topic not heard before start follows a virtual beat at start
        virtual = first & (F.col("t") >= start_ms)
        prev_t = F.when(virtual, F.lit(start_ms).cast("long")).otherwise(prev_t)
        prev_p = F.when(virtual, F.col("p")).otherwise(prev_p)
    last = F.lead("t").over(ordered).isNull()

    def gap(pt: Column, pp: Column, nt: Column, is_open: bool) -> Column:
        # try_*: an allowance or deadline beyond the range of a long is null, and no gap
        # exceeds it (the Rust kernel's 128-bit arithmetic gives the same), where a plain
        # product would raise an ANSI overflow error or wrap into invented outages
        g = F.try_subtract(nt, pt)
        threshold = F.try_multiply(pp, F.lit(allowed).cast("long"))
        raw_from = F.try_add(pt, threshold)
        ok = pp.isNotNull() & (pp > 0) & (g > threshold)
        began: Column = F.lit(True)
        down_from = raw_from
        if start_ms is not None:
            ok = ok & (nt > start_ms)
            began = raw_from >= start_ms
            down_from = F.greatest(raw_from, F.lit(start_ms).cast("long"))
        return F.when(
            ok,
            F.struct(
                down_from.alias("down_from"),
                nt.alias("down_to"),
                _div(g - 1, pp).alias("missed"),
                F.lit(is_open).alias("open"),
                began.alias("began"),
                pt.alias("last"),
                pp.alias("period"),
            ),
        )

    before = gap(prev_t, prev_p, F.col("t"), False)
    after = F.when(last, gap(F.col("t"), F.col("p"), F.lit(end_ms).cast("long"), True))
    rows = b.select(
        "topic",
        F.min("t").over(Window.partitionBy("topic")).alias("first_ms"),
        before.alias("before"),
        after.alias("after"),
        last.alias("last"),
    ).where(F.col("before").isNotNull() | F.col("last"))
    return rows.select("topic", "first_ms", F.explode(F.array("before", "after")).alias("o"))


def _availability_native(plan: _Plan) -> DataFrame:
    rows = _outages_native(plan)
    duration = F.col("o.down_to") - F.col("o.down_from")
    complete = F.col("o.began") & ~F.col("o.open")
    per_topic = rows.groupBy("topic").agg(
        F.min("first_ms").alias("first_ms"),
        F.count("o").alias("outages"),
        F.coalesce(F.sum(duration), F.lit(0).cast("long")).alias("downtime_ms"),
        F.sum(F.when(complete, duration)).alias("complete_ms"),
        F.count(F.when(complete, 1)).alias("complete"),
        F.count(F.when(F.col("o.began"), 1)).alias("failures"),
    )
    w_start = F.col("first_ms") if plan.start_ms is None else F.lit(plan.start_ms).cast("long")
    # (an event log's availability is _availability_logged: expect_from_start holds here)
    w_end = F.lit(plan.end_ms).cast("long")
    window = w_end - w_start
    uptime = window - F.col("downtime_ms")
    return per_topic.select(
        "topic",
        w_start.alias("window_start"),
        w_end.alias("window_end"),
        (F.lit(100.0) * uptime / window).alias("uptime_pct"),
        "outages",
        (F.col("downtime_ms") / 1000.0).alias("downtime"),
        F.when(F.col("complete") > 0, F.col("complete_ms") / F.col("complete") / 1000.0).alias(
            "mttr"
        ),
        F.when(F.col("failures") > 0, uptime / F.col("failures") / 1000.0).alias("mtbf"),
    )
