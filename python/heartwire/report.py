"""``heartwire report``: the availability of the topics in an event log over a window.

Reads the Parquet event log written by :class:`heartwire.eventlog.EventLog`, computes
:func:`heartwire.spark.availability` and :func:`heartwire.spark.outages` (engine ``rust``) on
Spark over ``[start, end)``, and writes:

- ``OUT`` (HTML, self-contained: inline CSS, the plot embedded as a ``data:`` URI): the window
  and settings, the availability table per topic (uptime %, outages, downtime, MTTR, MTBF;
  worst uptime first) and the longest outages;
- ``OUT`` with the suffix ``.png`` beside it: a timeline of the outages per topic (at most
  :data:`heartwire.report_html.MAX_PLOTTED_TOPICS` topics, those with the most downtime).

The event log holds beats and state changes but not the topics' periods, so the period (one
for every topic) and ``allowed_misses`` are arguments, as for ``heartwire watch``.

What counts (the rules of :func:`heartwire.spark.availability` for an event log):

- the window is clipped to what the log covers: it ends at ``--end``, now, or the last moment
  the log covers (the monitor's last ``stopped`` row, or after a crash its last row),
  whichever is first; the page says where it was clipped;
- time the monitor was not watching (before it started, between a stop and the next start,
  after a crash until the next start, its local pauses) is *not monitored*: neither up nor
  down. It is listed, drawn grey on the timeline and counted per topic in its own column;
  uptime % is over the monitored time;
- a topic is judged from the moment the monitor first expected it: its first beat, or for a
  topic the monitor was told to expect, the deadline it missed (the ``failed`` rows' ``since``,
  grace included). Before that it is not judged at all; an expected topic that never beat is
  down from that deadline on (0 %);
- an outage of a silenced topic, or of one suppressed by a parent it depends on, is an outage
  all the same (the marks say who was told, not what happened): it counts in the availability,
  and the outages table says ``silenced`` or ``suppressed by <parent>`` beside it.

Spark: a SparkSession already running in the process is used as it is (and left running);
otherwise one is started on ``master`` (``local[*]`` by default) and stopped at the end. The
Rust engine needs :mod:`heartwire` importable in the Python workers: ``PYSPARK_PYTHON``
defaults to this interpreter, which suits ``local`` masters; on a cluster, install heartwire
on the workers. Needs the ``spark`` and ``report`` extras (PySpark, pyarrow, matplotlib).

This module checks the arguments and computes the tables on Spark; :mod:`heartwire.report_html`
renders them (the plot and the page); :func:`heartwire.report_cmd.run_report` runs both (the
command).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Report",
    "parse_time",
]


_UTC = _dt.timezone.utc
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_UTC)
_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?|local-cluster\[.+\]|yarn|(spark|k8s|mesos)://.+"
)


# -- arguments ----------------------------------------------------------------------------------


def parse_time(text: str, name: str) -> _dt.datetime:
    """An ISO 8601 date or date-time (``2026-11-23``, ``2026-11-23T15:00``, ``...Z``,
    ``...+01:00``) as an aware datetime; without an offset it is UTC. ``name`` (e.g.
    ``--start``) heads the error message."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        parsed = _dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{name}: not an ISO date or date-time (e.g. 2026-11-23 or 2026-11-23T15:00Z): {text!r}"
        ) from None
    return parsed.replace(tzinfo=_UTC) if parsed.tzinfo is None else parsed.astimezone(_UTC)


def _epoch_ms(t: _dt.datetime) -> int:
    return (t - _EPOCH) // _dt.timedelta(milliseconds=1)


def _iso(ms: int) -> str:
    t = _EPOCH + _dt.timedelta(milliseconds=ms)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def _parquet_files(root: str) -> int:
    """Data files under ``root`` (Spark skips names starting with ``.`` or ``_``)."""
    count = 0
    for _folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        count += sum(1 for f in files if f.endswith(".parquet") and not f.startswith((".", "_")))
    return count


@dataclass(frozen=True)
class Report:
    """The checked arguments of a report."""

    events: str
    start: _dt.datetime
    end: _dt.datetime
    out: Path
    png: Path
    period_ms: int
    allowed_misses: int
    master: str

    @classmethod
    def check(
        cls,
        events: str,
        start: str,
        end: str,
        out: str,
        period: float,
        allowed_misses: int = 1,
        master: str = "local[*]",
    ) -> Report:
        """Every argument checked before Spark starts; a ``ValueError`` names the bad one."""
        t0 = parse_time(start, "--start")
        t1 = parse_time(end, "--end")
        if t0 >= t1:
            raise ValueError(f"--start must be before --end, got {start!r} >= {end!r}")
        if not os.path.exists(events):
            raise ValueError(f"--events: no such directory: {events!r}")
        if not os.path.isdir(events):
            raise ValueError(f"--events: not a directory: {events!r}")
        if _parquet_files(events) == 0:
            raise ValueError(f"--events: no Parquet files under {events!r} (an empty event log)")
        if isinstance(period, bool) or not isinstance(period, (int, float)) or not period > 0:
            raise ValueError(f"--period must be > 0 seconds, got {period!r}")
        period_ms = round(period * 1000)
        if period_ms < 1:
            raise ValueError(f"--period must be at least 0.001 s, got {period!r}")
        if isinstance(allowed_misses, bool) or not isinstance(allowed_misses, int):
            raise ValueError(f"--allowed-misses must be an int, got {allowed_misses!r}")
        if allowed_misses < 1:
            raise ValueError(f"--allowed-misses must be >= 1, got {allowed_misses!r}")
        if not _MASTER.fullmatch(master):
            raise ValueError(
                f"--master: not a Spark master URL (local[*], local[N], spark://host:port, "
                f"yarn, k8s://...): {master!r}"
            )
        html_path = Path(out)
        png = html_path.with_suffix(".png")
        if png == html_path:
            raise ValueError(f"--out: the HTML file must not end in .png: {out!r}")
        folder = html_path.parent
        if not folder.is_dir():
            raise ValueError(f"--out: no such directory: {str(folder)!r}")
        if html_path.is_dir():
            raise ValueError(f"--out: is a directory: {out!r}")
        return cls(events, t0, t1, html_path, png, period_ms, allowed_misses, master)


# -- running ------------------------------------------------------------------------------------


class _Progress:
    """Progress lines on stderr, with the seconds since the start."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()

    def __call__(self, message: str) -> None:
        print(
            f"heartwire report: [{time.monotonic() - self._t0:6.1f} s] {message}",
            file=sys.stderr,
            flush=True,
        )


def _session(master: str, log: _Progress) -> tuple[Any, bool]:
    """The running SparkSession (not ours to stop), or a new one on ``master``."""
    from pyspark.sql import SparkSession

    from heartwire._spark_session import build_session

    active = SparkSession.getActiveSession()
    if active is not None:
        log(f"using the running SparkSession (master {active.sparkContext.master})")
        return active, False
    log(f"starting Spark (master {master})")
    try:
        # No console progress bar: our own lines say what runs. Log level FATAL: Spark's own
        # ERROR lines carry whole Java stacks; a failure is reported by _cause instead.
        spark = build_session("heartwire-report", master, log_level="FATAL")
    except Exception as exc:  # no Java, an unreachable cluster...: say so, no traceback
        print(
            f"heartwire report: Spark did not start (master {master}): {_cause(exc)}",
            file=sys.stderr,
        )
        return None, False
    return spark, True


def _cause(exc: BaseException) -> str:
    """A Spark error in a few lines: its message without the Java stack, and the innermost
    ``Caused by`` (often the clearest: "... is not a Parquet file")."""
    lines = str(exc).splitlines()
    head = []
    for line in lines:
        if line.startswith("\t"):
            break
        if line.strip() and not line.startswith("An error occurred while calling"):
            head.append(line.lstrip(": ").strip())
    causes = [line.strip() for line in lines if line.startswith("Caused by:")]
    text = " ".join(head) or type(exc).__name__
    return f"{text} ({causes[-1]})" if causes else text


@dataclass
class _Tables:
    """What the report shows, times in epoch ms."""

    availability: list[dict[str, Any]]  # worst uptime first
    outages: list[dict[str, Any]]  # by topic, then time
    unmonitored: list[tuple[int, int]] = field(default_factory=list)  # in [start, covered)
    covered_ms: int | None = None  # the window's end after clipping (None: not clipped)


def _compute(spark: Any, report: Report, log: _Progress) -> _Tables:
    from pyspark.sql import functions as F

    from heartwire import spark as hs

    log(f"reading the event log {report.events}")
    try:
        events = hs.read_events(spark, report.events)
    except Exception as exc:  # AnalysisException, a Py4JJavaError for a file that is no Parquet
        raise ValueError(
            f"--events: cannot read the event log {report.events!r}: {_cause(exc)}"
        ) from None
    missing = {"kind", "topic", "ts"} - set(events.columns)
    if missing:
        raise ValueError(
            f"--events: not an event log (no column {', '.join(sorted(missing))}) under "
            f"{report.events!r}"
        )
    log("finding when the monitor was watching")
    start_ms = _epoch_ms(report.start)
    watched = hs.monitored_spans(events)
    # clipped to what the log covers: no later than now, nor the log's last covered moment
    end_ms = min(_epoch_ms(report.end), int(time.time() * 1000))
    if watched:
        end_ms = min(end_ms, watched[-1][1])
    if not watched or end_ms <= start_ms:
        last = f" (it ends at {_iso(watched[-1][1])})" if watched else ""
        raise ValueError(
            f"--start: the event log {report.events!r} covers nothing after "
            f"{report.start.isoformat()}{last}"
        )
    inside = [(max(a, start_ms), min(b, end_ms)) for a, b in watched if a < end_ms and b > start_ms]
    gaps, at = [], start_ms
    for a, b in inside:
        if a > at:
            gaps.append((at, a))
        at = max(at, b)
    if at < end_ms:
        gaps.append((at, end_ms))
    kw: dict[str, Any] = dict(
        period_ms=report.period_ms,
        allowed_misses=report.allowed_misses,
        start=start_ms,
        end=end_ms,
        monitored=watched,  # found once above: not again inside availability and outages
    )
    log("computing availability per topic")
    avail = (
        hs.availability(events, **kw)
        .select("topic", "uptime_pct", "outages", "downtime", "mttr", "mtbf", "unmonitored")
        .orderBy(F.col("uptime_pct").asc_nulls_last(), "topic")
        .collect()
    )
    if not avail:
        raise ValueError(
            f"--end: the event log {report.events!r} has no topic before {report.end.isoformat()}"
        )
    log(f"{len(avail)} topics; computing outages")
    outs = hs.outages(events, **kw).select(
        "topic",
        F.unix_millis("down_from").alias("down_from"),
        F.unix_millis("down_to").alias("down_to"),
        "missed",
        "open",
    )
    rows = _held_back(events, outs).orderBy("topic", "down_from").collect()
    log(f"{len(rows)} outages")
    covered = end_ms if end_ms < _epoch_ms(report.end) else None
    return _Tables([r.asDict() for r in avail], [r.asDict() for r in rows], gaps, covered)


def _held_back(events: Any, outs: Any) -> Any:
    """The outages with ``held``: why their alerts were held back, from the alerting policy's
    marks on the log's ``failed`` rows inside them (``"silenced"``, ``"suppressed by
    svc.db"``, both, or ``""``). Marked outages are outages all the same (they count in the
    availability); this only tells them apart. A log written before the marks: ``""``."""
    from pyspark.sql import functions as F

    if not {"silenced", "suppressed_by"} <= set(events.columns):
        return outs.withColumn("held", F.lit(""))
    marked = events.where(
        (F.col("kind") == "failed")
        & (F.coalesce(F.col("silenced"), F.lit(False)) | F.col("suppressed_by").isNotNull())
    ).select(
        F.col("topic").alias("m_topic"),
        F.unix_millis("ts").alias("m_ts"),
        F.coalesce(F.col("silenced"), F.lit(False)).alias("m_silenced"),
        F.col("suppressed_by").alias("m_by"),
    )
    inside = (
        (F.col("topic") == F.col("m_topic"))
        & (F.col("m_ts") >= F.col("down_from"))
        & (F.col("m_ts") <= F.col("down_to"))
    )
    keys = ["topic", "down_from", "down_to", "missed", "open"]
    joined = outs.join(marked, inside, "left").groupBy(*keys)
    flags = joined.agg(
        F.max(F.coalesce(F.col("m_silenced"), F.lit(False))).alias("silenced"),
        F.min("m_by").alias("by"),
    )
    return flags.select(
        *keys,
        F.concat_ws(
            ", ",
            F.when(F.col("silenced"), F.lit("silenced")),
            F.when(F.col("by").isNotNull(), F.concat(F.lit("suppressed by "), F.col("by"))),
        ).alias("held"),
    )
