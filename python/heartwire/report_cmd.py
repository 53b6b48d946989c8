"""The ``heartwire report`` command: check the arguments, compute the tables on Spark
(:mod:`heartwire.report`), render the page and the plot (:mod:`heartwire.report_html`), write
them. Computation and rendering import nothing of each other's; this module joins them.
"""

from __future__ import annotations

import sys

from heartwire.report import Report, _cause, _compute, _Progress, _session
from heartwire.report_html import render_html, render_png

__all__ = ["run_report"]


def run_report(
    *,
    events: str,
    start: str,
    end: str,
    out: str,
    period: float,
    allowed_misses: int = 1,
    master: str = "local[*]",
) -> int:
    """``heartwire report``: write the HTML report and its PNG; returns the exit status.

    Bad arguments raise ``ValueError`` naming the argument (the command exits 2 on them); a
    missing extra or a Spark that does not start print a message and return 1.
    """
    report = Report.check(events, start, end, out, period, allowed_misses, master)
    try:
        import matplotlib  # noqa: F401  (checked before Spark starts; used in render_png)
        import pyspark  # noqa: F401
    except ImportError as exc:
        print(
            f"heartwire report: needs the spark and report extras "
            f"(pip install 'heartwire[spark,report]'): {exc}",
            file=sys.stderr,
        )
        return 1
    log = _Progress()
    spark, owned = _session(report.master, log)
    if spark is None:
        return 1
    try:
        tables = _compute(spark, report, log)
    except ValueError:
        raise
    except Exception as exc:  # a Spark job failed: its cause, without the Java stack
        print(f"heartwire report: Spark failed: {_cause(exc)}", file=sys.stderr)
        return 1
    finally:
        if owned:
            spark.stop()
    log("plotting the outage timeline")
    png = render_png(report, tables)
    report.png.write_bytes(png)
    report.out.write_text(render_html(report, tables, png), encoding="utf-8")
    log(f"wrote {report.out} and {report.png}")
    return 0
