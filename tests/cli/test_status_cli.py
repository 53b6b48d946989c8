"""``heartwire status``: the drawn table (``rich`` recording console), the command piped, its
options, and a clear error when ``rich`` is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import heartwire as hw
from heartwire.status import RecentEvents, SilenceRow, SuppressionRow, status_snapshot

pytest.importorskip("rich", reason="heartwire[status] (rich) is in the test extras")

from rich.console import Console

from heartwire.status_view import render

PYTHON_DIR = str(Path(hw.__file__).resolve().parents[1])  # the heartwire under test
WALL = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def run_cli(
    *args: str, code: str | None = None, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "heartwire"]
    try:
        return subprocess.run(
            [*argv, *args], capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"heartwire {' '.join(args)} still running after {timeout} s: {exc}")


@pytest.fixture
def mon() -> Iterator[tuple[hw.HeartbeatMonitor, hw.ManualClock, RecentEvents]]:
    clock = hw.ManualClock(0.0)
    recent = RecentEvents()
    m = hw.HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0, clock=clock, listeners=[recent], wall_offset=WALL
    )
    yield m, clock, recent
    m.stop()


def drawn(renderable: object, width: int = 120) -> str:
    console = Console(record=True, width=width, force_terminal=False, color_system=None)
    console.print(renderable)
    return console.export_text()


def line_of(text: str, *cells: str) -> int:
    """The number of the first line of ``text`` that holds every cell, in order; -1: none."""
    for number, line in enumerate(text.splitlines()):
        at = 0
        for cell in cells:
            at = line.find(cell, at)
            if at < 0:
                break
            at += len(cell)
        else:
            return number
    return -1


def row(text: str, *cells: str) -> bool:
    """Whether some line of ``text`` holds every cell, in order."""
    return line_of(text, *cells) >= 0


def test_the_table_shows_states_offenders_and_recent_events(
    mon: tuple[hw.HeartbeatMonitor, hw.ManualClock, RecentEvents],
) -> None:
    m, clock, recent = mon
    m.expect("svc.db")
    m.start()
    m.beat_many(["svc.db", "svc.api"])
    clock.set(1.0)
    m.beat("svc.api")
    clock.set(2.5)  # db: failed at 1 s, missed 2; api: failed at 2 s
    m.beat("svc.api")  # resumed
    assert m.drain()
    text = drawn(render(status_snapshot(m, recent=recent), source="memory://"))
    assert "heartwire status svc.> on memory://  08:00:02 UTC  2 topics" in text, text
    assert row(text, "FAILED", "PENDING", "ALIVE", "PAUSED", "STOPPED"), text
    assert row(text, "1", "0", "1", "0", "0"), text
    assert "Topics" in text  # 2 topics: all listed
    assert row(text, "svc.db", "FAILED", "2/1", "08:00:01", "1.5 s", "08:00:00"), text
    assert row(text, "svc.api", "ALIVE", "0/1"), text
    # Recent events, newest first.
    assert row(text, "08:00:02", "resumed", "svc.api", "after 500 ms, missed 1"), text
    assert line_of(text, "resumed", "svc.api") < line_of(text, "failed", "svc.api", "missed 1")
    assert line_of(text, "failed", "svc.api") < line_of(text, "failed", "svc.db", "missed 1")
    assert "Silences: none" in text and "Suppressions: none" in text


def test_many_topics_show_only_the_worst(
    mon: tuple[hw.HeartbeatMonitor, hw.ManualClock, RecentEvents],
) -> None:
    m, clock, _ = mon
    m.start()
    m.beat_many([f"svc.t{i:03d}" for i in range(300)])
    clock.set(0.5)
    m.beat_many([f"svc.t{i:03d}" for i in range(0, 300, 3)])  # 100 keep beating
    clock.set(1.2)  # the other 200 failed at 1 s
    text = drawn(render(status_snapshot(m, top=3)))
    assert "Worst offenders" in text and "300 topics" in text
    assert row(text, "200", "0", "100"), text
    assert [t for t in ("svc.t001", "svc.t002", "svc.t004", "svc.t005") if t in text] == [
        "svc.t001",
        "svc.t002",
        "svc.t004",
    ]


def test_silences_and_suppressions_show_when_there_are_some() -> None:
    from dataclasses import replace

    clock = hw.ManualClock(0.0)
    m = hw.HeartbeatMonitor(None, "svc.>", clock=clock, wall_offset=WALL)
    snap = replace(
        status_snapshot(m),
        silences=(SilenceRow("svc.db.>", WALL + 1800, "migration", "1"),),
        suppressions=(SuppressionRow("svc.api.>", "svc.db", WALL - 60),),
        health={**status_snapshot(m).health, "suppressed": 40},
    )
    text = drawn(render(snap))
    assert row(text, "svc.db.>", "08:30:00", "migration", "1"), text
    assert row(text, "svc.api.>", "svc.db", "07:59:00"), text
    assert "suppressed 40" in text
    assert "Silences: none" not in text and "Suppressions: none" not in text


def test_piped_it_prints_a_table_per_refresh() -> None:
    proc = run_cli(
        "status",
        "svc.>",
        "--expect",
        "svc.a",
        "--period",
        "0.2",
        "--refresh",
        "0.3",
        "--duration",
        "1.0",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("heartwire status svc.> on memory://") >= 3, proc.stdout
    last = proc.stdout.rsplit("heartwire status", 1)[1]
    assert row(last, "svc.a", "FAILED"), last
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("option", "value"),
    [("--refresh", "0"), ("--refresh", "inf"), ("--top", "0"), ("--events", "x")],
)
def test_bad_options_are_named(option: str, value: str) -> None:
    proc = run_cli("status", "svc.>", f"{option}={value}")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    assert f"argument {option}:" in proc.stderr, proc.stderr[-500:]
    assert "Traceback" not in proc.stderr


def test_without_rich_it_says_which_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['rich'] = None; from heartwire.cli import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    proc = run_cli("status", "svc.>", "--duration", "0.1", code=code)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-500:])
    assert "heartwire status: heartwire status needs the rich package" in proc.stderr
    assert "pip install 'heartwire[status]'" in proc.stderr
    assert "Traceback" not in proc.stderr
