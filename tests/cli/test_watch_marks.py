"""``heartwire watch`` prints the alerting policy's marks and flapping (issue 17): a silenced or
suppressed failure says so in its JSON line, a flapping topic prints ``flapping`` lines, and
``--flap-threshold``/``--flap-window`` turn flapping on. Manual clock, exact lines."""

from __future__ import annotations

import json
from typing import Any

import pytest

import heartwire as hw
from heartwire.cli import _printer, main


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _brief(line: dict[str, Any]) -> tuple[Any, ...]:
    marks = {k: line[k] for k in ("silenced", "suppressed_by", "flapping") if k in line}
    return (line["event"], line.get("topic"), line.get("at_monotonic"), marks)


def test_watch_lines_carry_marks_and_flapping(capsys: pytest.CaptureFixture[str]) -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(
        None, "svc.>", clock=clock, period=1.0, grace=0.0, listeners=[_printer()],
        flap_threshold=1, flap_window=5.0,
    )  # fmt: skip
    for topic in ("svc.db", "svc.api", "svc.cache"):
        mon.expect(topic)
    mon.depends("svc.api", on="svc.db")
    mon.silence("svc.cache", duration=100.0)
    mon.start()
    clock.set(1.5)  # all fail at 1.0: api suppressed by db, cache silenced
    mon.beat("svc.db")  # db back at 1.5: api is released, unsuppressed
    clock.set(2.7)  # db fails again at 2.5
    mon.beat("svc.db")  # back at 2.7: its second outage in the window, flapping
    assert mon.drain(5.0)
    mon.stop()
    got = [_brief(line) for line in _lines(capsys.readouterr().out)]
    assert got[0][0] == "started" and got[-1][0] == "stopped"
    events = got[1:-1]
    assert sorted(events[:3]) == [
        ("failed", "svc.api", 1.0, {"suppressed_by": "svc.db"}),
        ("failed", "svc.cache", 1.0, {"silenced": True}),
        ("failed", "svc.db", 1.0, {}),
    ]
    assert events[3:5] == [("resumed", "svc.db", 1.5, {}), ("failed", "svc.api", 1.5, {})]
    assert sorted(events[5:7]) == [  # the same deadline: in no particular order
        ("failed", "svc.api", 2.0, {}),
        ("failed", "svc.cache", 2.0, {"silenced": True}),
    ]
    assert events[7:] == [
        ("failed", "svc.db", 2.5, {}),
        ("flapping", "svc.db", 2.7, {"flapping": True}),
    ]


def test_flap_options_go_together(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "svc.>", "--flap-threshold", "2", "--duration", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "give --flap-threshold and --flap-window together" in err
    assert "--flap-window None" in err


def test_watch_runs_with_flapping_on(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["watch", "svc.>", "--flap-threshold", "2", "--flap-window", "5", "--duration", "0.05"]
    assert main(args) == 0
    assert [line["event"] for line in _lines(capsys.readouterr().out)] == ["started", "stopped"]
