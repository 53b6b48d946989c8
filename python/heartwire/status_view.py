"""``heartwire status``: a live table of a monitor in the terminal, drawn with ``rich``.

Optional: needs ``rich`` (``pip install 'heartwire[status]'``), imported only here, when the
command runs (:func:`require` says what to install when it is missing). What is drawn is a
:class:`~heartwire.status.StatusSnapshot` (see :mod:`heartwire.status`): topics by state, the
worst offenders, recent events, silences, suppressions and the monitor's health. Times are
shown in UTC, with the date when it is not today's.

Every cell is a ``rich.text.Text``, never a string rich would read as markup (a reason
``"disk full [/]"`` is drawn as it is), and every text that came from elsewhere (topic names,
reasons, silences, a broker's disconnect text) is drawn through
:func:`~heartwire._text.terminal_safe`, so no sender writes escape sequences to the terminal.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from typing import Any

from heartwire._text import terminal_safe
from heartwire.status import (
    STATE_ORDER,
    Offender,
    RecentEvent,
    StatusSnapshot,
    duration_text,
)

__all__ = ["StatusUnavailable", "render", "require", "run"]

#: How each state is shown.
STATE_STYLES: dict[str, str] = {
    "FAILED": "bold red",
    "PENDING": "yellow",
    "ALIVE": "green",
    "PAUSED": "cyan",
    "STOPPED": "dim",
}

#: How each recent event kind is shown (others: plain).
EVENT_STYLES: dict[str, str] = {
    "failed": "red",
    "resumed": "green",
    "local_pause": "magenta",
    "lagging": "magenta",
    "caught_up": "magenta",
    "disconnected": "yellow",
    "reconnected": "green",
    "exception": "yellow",
    "flapping": "yellow",
}


class StatusUnavailable(ImportError):
    """``rich`` is not installed."""


def require() -> Any:
    """The ``rich`` module; :class:`StatusUnavailable` (saying what to install) if missing."""
    try:
        import rich
        import rich.live  # the parts the view uses, checked up front
        import rich.table
    except ImportError as exc:
        raise StatusUnavailable(
            "heartwire status needs the rich package: pip install 'heartwire[status]' "
            "(or pip install rich)"
        ) from exc
    return rich


def _clock(unix: float | None, today: _dt.date) -> str:
    """Unix seconds as ``HH:MM:SS`` UTC, with the date in front when it is not ``today``."""
    if unix is None:
        return "never"
    moment = _dt.datetime.fromtimestamp(unix, tz=_dt.timezone.utc)
    if moment.date() == today:
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _cell(text: str, style: str = "") -> Any:
    """One table cell: ``text`` made terminal-safe, as a ``Text`` (no markup is parsed)."""
    from rich.text import Text

    return Text(terminal_safe(text), style=style)


def _held_back(o: Offender) -> str:
    """Why a listed topic's alerts are held back now ("" if they are not)."""
    why = ["silenced"] if o.silenced else []
    if o.suppressed_by:
        why.append(f"suppressed by {o.suppressed_by}")
    return ", ".join(why)


def render(snap: StatusSnapshot, *, events: int = 10, source: str = "") -> Any:
    """The snapshot as one ``rich`` renderable (a group of tables): the title and the
    monitor's counters, topics by state, the worst offenders, silences, suppressions, then the
    newest ``events`` recent events, newest first (last: on a short terminal, what is cut).
    ``source`` (e.g. the broker URL) goes in the title."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    today = _dt.datetime.fromtimestamp(snap.at, tz=_dt.timezone.utc).date()
    where = f" on {source}" if source else ""
    health = snap.health
    title = Text.assemble(
        ("heartwire status ", "bold"),
        (terminal_safe(snap.pattern), "bold cyan"),
        f"{terminal_safe(where)}  {_clock(snap.at, today)} UTC  ",
        (f"{snap.topics} topic{'' if snap.topics == 1 else 's'}", "bold"),
        ("" if health.get("running", True) else "  (monitor stopped)", "red"),
    )
    parts: list[Any] = [title]
    parts.append(
        Text(
            f"beats {health['beats']}  rejected {health['rejected']}  "
            f"dropped {health['dropped']}  local pauses {health['local_pauses']}  "
            f"ingest lag {duration_text(health['ingest_lag']) if health['ingest_lag'] else '0'}  "
            f"disconnects {health['disconnects']}  reconnects {health['reconnects']}"
            + (f"  suppressed {health['suppressed']}" if "suppressed" in health else ""),
            style="dim",
        )
    )

    states = Table(title="Topics by state", title_justify="left", expand=False)
    for name in STATE_ORDER:
        states.add_column(name, justify="right", style=STATE_STYLES[name])
    states.add_row(*(_cell(str(snap.states.get(name, 0))) for name in STATE_ORDER))
    parts.append(states)

    listed = snap.offenders + snap.others
    worst = Table(
        title="Topics" if snap.others or len(listed) == snap.topics else "Worst offenders",
        title_justify="left",
        expand=False,
    )
    for column, justify in (
        ("topic", "left"),
        ("state", "left"),
        ("missed", "right"),
        ("down since", "right"),
        ("down for", "right"),
        ("last beat", "right"),
    ):
        worst.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    marked = any(o.silenced or o.suppressed_by for o in listed)
    if marked:  # only when some listed topic is silenced or suppressed now
        worst.add_column("alerts", overflow="fold")
    for o in listed:
        cells: list[Any] = [
            _cell(o.topic),
            _cell(o.state, STATE_STYLES.get(o.state, "")),
            _cell(f"{o.missed}/{o.allowed_misses}"),
            _cell(_clock(o.down_since, today) if o.down_since is not None else ""),
            _cell(duration_text(o.down_for) if o.down_for is not None else ""),
            _cell(_clock(o.last_seen, today)),
        ]
        if marked:
            cells.append(_cell(_held_back(o)))
        worst.add_row(*cells)
    parts.append(worst if listed else Text("Worst offenders: none", style="green"))

    if snap.silences:
        silences = Table(title="Silences", title_justify="left", expand=False)
        for column in ("pattern", "until", "reason", "id"):
            silences.add_column(column, overflow="fold")
        for s in snap.silences:
            silences.add_row(
                _cell(s.pattern),
                _cell(_clock(s.until, today) if s.until else ""),
                _cell(s.reason),
                _cell(s.id),
            )
        parts.append(silences)
    else:
        parts.append(Text("Silences: none"))

    if snap.suppressions:
        suppressed = Table(title="Suppressions", title_justify="left", expand=False)
        for column in ("topics", "suppressed by", "down since"):
            suppressed.add_column(column, overflow="fold")
        for row in snap.suppressions:
            since = _clock(row.since, today) if row.since is not None else ""
            suppressed.add_row(_cell(row.children), _cell(row.parent), _cell(since))
        parts.append(suppressed)
    else:
        parts.append(Text("Suppressions: none"))

    shown: list[RecentEvent] = list(snap.recent[-events:])[::-1] if events > 0 else []
    if shown:
        recent = Table(title="Recent events", title_justify="left", expand=False)
        recent.add_column("at", justify="right")
        recent.add_column("event")
        recent.add_column("topic", overflow="fold")
        recent.add_column("detail", overflow="fold")
        for ev in shown:
            recent.add_row(
                _cell(_clock(ev.at, today)),
                _cell(ev.kind, EVENT_STYLES.get(ev.kind, "")),
                _cell(ev.topic),
                _cell(ev.detail),
            )
        parts.append(recent)
    else:
        parts.append(Text("Recent events: none"))

    return Group(*parts)


def run(
    mon: Any,
    recent: Any,
    *,
    refresh: float,
    duration: float | None,
    done: threading.Event,
    top: int = 10,
    events: int = 10,
    source: str = "",
    console: Any = None,
) -> None:
    """Draw ``mon`` every ``refresh`` seconds until ``done`` is set or ``duration`` passes.

    On a terminal the table is redrawn in place on the alternate screen (as ``top`` does; the
    screen is given back on exit) and the last one is printed after; otherwise (output piped)
    one table is printed per refresh.
    """
    from rich.console import Console
    from rich.live import Live

    from heartwire.status import status_snapshot

    console = console or Console()
    stop_at = None if duration is None else time.monotonic() + duration

    def frame() -> Any:
        return render(status_snapshot(mon, top=top, recent=recent), events=events, source=source)

    def wait() -> bool:
        """Wait one refresh; False once it is time to stop."""
        timeout = refresh
        if stop_at is not None:
            timeout = min(timeout, max(0.0, stop_at - time.monotonic()))
        done.wait(timeout)
        return not done.is_set() and (stop_at is None or time.monotonic() < stop_at)

    if not console.is_terminal:
        while True:
            console.print(frame())
            console.rule()
            if not wait():
                return
    # The snapshot is taken on this thread, never on a listener's: drawing a slow terminal
    # delays only the next refresh.
    with Live(frame(), console=console, screen=True, auto_refresh=False) as live:
        while wait():
            live.update(frame(), refresh=True)
    console.print(frame())
