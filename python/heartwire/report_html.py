"""The rendering half of ``heartwire report``: the outage timeline (PNG, matplotlib) and the
self-contained HTML page, from the tables :mod:`heartwire.report` computed on Spark.

Pure functions of a checked :class:`heartwire.report.Report` and its tables; matplotlib is
imported only when a plot is drawn.
"""

from __future__ import annotations

import base64
import html
import os
from typing import Any

from heartwire.report import Report, _epoch_ms, _iso, _Tables

__all__ = [
    "MAX_LISTED_OUTAGES",
    "MAX_PLOTTED_TOPICS",
    "format_duration",
    "render_html",
    "render_png",
]

MAX_PLOTTED_TOPICS = 40
"""Topics drawn in the timeline (those with the most downtime; the table lists all)."""


MAX_LISTED_OUTAGES = 50
"""Outages listed in the HTML (the longest)."""


def format_duration(seconds: float | None) -> str:
    """Seconds for a reader: ``12.345 s``, ``3 min 20.000 s``, ``2 h 03 min 20 s``,
    ``1 d 02 h 03 min``; ``—`` for None. Rounded to the last unit shown before it is split
    (3599.9996 s is ``1 h 00 min 00 s``, not ``59 min 60.000 s``)."""
    if seconds is None:
        return "—"
    ms = round(seconds * 1000)
    if ms < 60_000:
        return f"{ms / 1000:.3f} s"
    if ms < 3_600_000:
        return f"{ms // 60_000} min {ms % 60_000 / 1000:06.3f} s"
    whole = round(seconds)
    if whole < 86_400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min {whole % 60:02d} s"
    minutes = round(seconds / 60)
    return f"{minutes // 1440} d {minutes % 1440 // 60:02d} h {minutes % 60:02d} min"


def _plotted(tables: _Tables) -> list[str]:
    """The topics drawn, top to bottom: most downtime first, then by name."""
    ranked = sorted(tables.availability, key=lambda r: (-(r["downtime"] or 0), r["topic"]))
    return [r["topic"] for r in ranked[:MAX_PLOTTED_TOPICS]]


def _axis_unit(span_ms: int) -> tuple[int, str]:
    """The time unit of the timeline's axis for a window of ``span_ms``."""
    for unit_ms, name in ((86_400_000, "days"), (3_600_000, "hours"), (60_000, "minutes")):
        if span_ms >= 2 * unit_ms:
            return unit_ms, name
    return 1000, "seconds"


def render_png(report: Report, tables: _Tables) -> bytes:
    """The outage timeline as PNG bytes (matplotlib's Agg canvas; no pyplot global state)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    topics = _plotted(tables)
    row = {topic: i for i, topic in enumerate(topics)}
    start_ms, end_ms = _epoch_ms(report.start), _epoch_ms(report.end)
    unit_ms, unit = _axis_unit(end_ms - start_ms)
    span = (end_ms - start_ms) / unit_ms
    fig = Figure(figsize=(10, 1.2 + 0.3 * len(topics)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for a, b in tables.unmonitored:  # not monitored: neither up nor down
        ax.axvspan((a - start_ms) / unit_ms, (b - start_ms) / unit_ms, color="#bbbbbb", lw=0)
    if tables.covered_ms is not None:  # after what the log covers
        ax.axvspan(
            (tables.covered_ms - start_ms) / unit_ms,
            span,
            facecolor="none",
            edgecolor="#bbbbbb",
            hatch="//",
            lw=0,
        )
    for o in tables.outages:
        i = row.get(o["topic"])
        if i is None:
            continue
        x0 = (o["down_from"] - start_ms) / unit_ms
        width = max((o["down_to"] - o["down_from"]) / unit_ms, span / 2000)  # 1 px at least
        ax.broken_barh(
            [(x0, width)], (i - 0.35, 0.7), facecolors="#f39c12" if o["open"] else "#c0392b"
        )
    ax.set_xlim(0, span)
    ax.set_ylim(len(topics) - 0.5, -0.5)
    ax.set_yticks(range(len(topics)))
    ax.set_yticklabels(topics, fontsize=8)
    ax.set_xlabel(f"{unit} since {_iso(start_ms)}")
    shown = len(topics)
    total = len(tables.availability)
    title = (
        "Outages per topic (red: over; orange: still down when the window or the watching "
        "ended; grey: not monitored; hatched: after the log)"
    )
    if shown < total:
        title += f" — the {shown} of {total} topics with the most downtime"
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f4f4f4; }
tr.down td { background: #fdecea; }
img { max-width: 100%; }
"""


def _cell(value: Any, text: str) -> str:
    """A numeric cell; ``data-value`` holds the exact figure (empty when there is none)."""
    raw = "" if value is None else repr(value)
    return f'<td class="num" data-value="{raw}">{html.escape(text)}</td>'


def _notes(outage: dict[str, Any], covered_ms: int) -> str:
    """The last column of an outage: :func:`_open_label`, and why its alerts were held back
    (``held``: silenced, suppressed by a parent), if they were."""
    notes = [_open_label(outage, covered_ms), html.escape(outage.get("held") or "")]
    return "; ".join(n for n in notes if n)


def _open_label(outage: dict[str, Any], covered_ms: int) -> str:
    """What the last column says of an outage: over (nothing), still down at the end of the
    window, or still down when the monitor stopped watching (its end is unknown)."""
    if not outage["open"]:
        return ""
    return "still down" if outage["down_to"] >= covered_ms else "still down when watching stopped"


def render_html(report: Report, tables: _Tables, png: bytes) -> str:
    """The self-contained HTML page: settings, the timeline (``png`` inlined), the tables."""
    e = html.escape
    start_ms, end_ms = _epoch_ms(report.start), _epoch_ms(report.end)
    covered_ms = end_ms if tables.covered_ms is None else tables.covered_ms
    rows = []
    for r in tables.availability:
        cls = ' class="down"' if r["outages"] else ""
        pct = "—" if r["uptime_pct"] is None else f"{r['uptime_pct']:.3f}"
        rows.append(
            f'<tr{cls}><td class="topic">{e(r["topic"])}</td>'
            + _cell(r["uptime_pct"], pct)
            + _cell(r["outages"], str(r["outages"]))
            + _cell(r["downtime"], format_duration(r["downtime"]))
            + _cell(r["mttr"], format_duration(r["mttr"]))
            + _cell(r["mtbf"], format_duration(r["mtbf"]))
            + _cell(r["unmonitored"], format_duration(r["unmonitored"]))
            + "</tr>"
        )
    unmonitored_rows = [
        f"<tr><td>{_iso(a)}</td><td>{_iso(b)}</td>"
        + _cell((b - a) / 1000, format_duration((b - a) / 1000))
        + "</tr>"
        for a, b in tables.unmonitored
    ]
    clipped = (
        ""
        if tables.covered_ms is None
        else " (clipped: the log covers nothing later, or it is now)"
    )
    longest = sorted(
        tables.outages, key=lambda o: (o["down_from"] - o["down_to"], o["topic"], o["down_from"])
    )[:MAX_LISTED_OUTAGES]
    outage_rows = [
        f'<tr><td class="topic">{e(o["topic"])}</td><td>{_iso(o["down_from"])}</td>'
        f"<td>{_iso(o['down_to'])}</td>"
        + _cell(
            (o["down_to"] - o["down_from"]) / 1000,
            format_duration((o["down_to"] - o["down_from"]) / 1000),
        )
        + _cell(o["missed"], str(o["missed"]))
        + f"<td>{_notes(o, covered_ms)}</td></tr>"
        for o in longest
    ]
    image = base64.b64encode(png).decode("ascii")
    listed = (
        f"the {len(longest)} longest of {len(tables.outages)}"
        if len(longest) < len(tables.outages)
        else f"all {len(tables.outages)}"
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>heartwire availability {e(_iso(start_ms))} to {e(_iso(end_ms))}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>Availability</h1>
<ul id="settings">
<li>Window: <span id="start">{e(_iso(start_ms))}</span> to <span id="end">{e(_iso(end_ms))}</span>
(end excluded); counted up to <span id="covered">{e(_iso(covered_ms))}</span>{clipped}</li>
<li>Event log: <code>{e(os.path.abspath(report.events))}</code></li>
<li>Period: {report.period_ms / 1000:g} s; allowed misses: {report.allowed_misses}
(a topic is down from its last beat + {report.allowed_misses} &times; period until its next
beat)</li>
<li>Topics: {len(tables.availability)}; outages: {len(tables.outages)}</li>
</ul>
<h2>Timeline</h2>
<p><img alt="outages per topic" src="data:image/png;base64,{image}"></p>
<p>Also in <a href="{e(report.png.name)}">{e(report.png.name)}</a>.</p>
<h2>Per topic</h2>
<p>Worst uptime first. Uptime % is over the time the monitor was watching (a topic is judged
from its first beat, or from the deadline it missed if the monitor was told to expect it).
Outages cut by the window's edges or by the end of the watching count as downtime but not
towards MTTR (their true length is unknown) and, when already down at the start, not as
failures for MTBF (uptime per failure).</p>
<table id="availability">
<thead><tr><th>topic</th><th>uptime %</th><th>outages</th><th>downtime</th><th>MTTR</th>
<th>MTBF</th><th>not monitored</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
</table>
<h2>Not monitored</h2>
<p>Spans of the window when the monitor was not watching (not started, stopped, crashed or
paused): neither up nor down ({len(tables.unmonitored)}).</p>
<table id="unmonitored">
<thead><tr><th>from</th><th>to</th><th>length</th></tr></thead>
<tbody>
{chr(10).join(unmonitored_rows)}
</tbody>
</table>
<h2>Outages</h2>
<p>Longest first ({listed}).</p>
<table id="outages">
<thead><tr><th>topic</th><th>down from</th><th>down to</th><th>length</th><th>missed</th>
<th></th></tr></thead>
<tbody>
{chr(10).join(outage_rows)}
</tbody>
</table>
</body>
</html>
"""
