"""Times a person or another program reads are on the wall clock (issue 14, item 12).

The monitor's events are timed on its monotonic clock (seconds since boot); the CLI's JSON
lines, AlertListener's alerts, events' ``wall_*`` properties and statuses give Unix time (and
ISO 8601 in UTC), the monotonic reading staying beside it where intervals matter.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import threading
import time
from typing import Any

import pytest

import heartwire as hw
from heartwire.cli import main
from heartwire.events import iso_utc, wall_fields
from heartwire.transport.memory import MemoryBroker

OFFSET = 1_750_000_000.0  # the Unix time a ManualClock's zero stands for in these tests


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _parse_iso(text: str) -> float:
    assert text.endswith("Z"), text
    return dt.datetime.fromisoformat(text[:-1] + "+00:00").timestamp()


def test_cli_watch_prints_wall_clock_times(capsys: pytest.CaptureFixture[str]) -> None:
    before = time.time()
    args = ["watch", "svc.>", "--expect", "svc.silent", "--period", "0.05", "--duration", "0.5"]
    assert main(args) == 0
    after = time.time()
    lines = _json_lines(capsys.readouterr().out)
    failed = [line for line in lines if line["event"] == "failed"]
    assert failed and lines[0]["event"] == "started" and lines[-1]["event"] == "stopped"
    for line in failed:
        for name in ("at", "since"):
            assert before <= line[name] <= after, (name, line, before, after)
            assert _parse_iso(line[f"{name}_iso"]) == pytest.approx(line[name], abs=1e-5)
        # The monotonic reading stays beside it, exact for intervals.
        assert line["at"] - line["since"] == pytest.approx(
            line["at_monotonic"] - line["since_monotonic"], abs=1e-6
        )
    for line in (lines[0], lines[-1]):  # started/stopped: when they happened
        assert before <= line["at"] <= after and "at_iso" in line


def test_cli_publish_prints_unix_time_and_iso(capsys: pytest.CaptureFixture[str]) -> None:
    before = time.time()
    assert main(["publish", "svc.cli", "--period", "0.05", "--count", "2", "--duration", "5"]) == 0
    sent = _json_lines(capsys.readouterr().out)
    assert sent
    for line in sent:
        assert before <= line["at"] <= time.time()
        assert _parse_iso(line["at_iso"]) == pytest.approx(line["at"], abs=1e-5)


class Events(hw.SubscriberListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[Any] = []

    def on_failed(self, event: hw.Failed) -> None:
        with self.lock:
            self.events.append(event)

    def on_resumed(self, event: hw.Resumed) -> None:
        with self.lock:
            self.events.append(event)

    def on_received(self, event: hw.Received) -> None:
        with self.lock:
            self.events.append(event)


def test_events_and_statuses_carry_wall_time() -> None:
    clock = hw.ManualClock()
    events = Events()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, wall_offset=OFFSET, listeners=[events])
    assert mon.wall_offset == OFFSET and mon.wall_time(2.5) == OFFSET + 2.5
    mon.expect("svc.a")
    mon.start()
    clock.advance(1.5)
    mon.beat("svc.a")
    mon.drain()
    failed, resumed, received = events.events
    assert isinstance(failed, hw.Failed) and failed.wall_at == OFFSET + failed.at
    assert failed.wall_since == OFFSET + failed.since
    assert resumed.wall_at == OFFSET + 1.5 and received.wall_at == OFFSET + 1.5
    status = mon.status("svc.a")
    assert status.wall_last_seen == OFFSET + 1.5
    assert status.wall_next_deadline == OFFSET + status.next_deadline  # type: ignore[operator]
    assert status.wall_failed_since is None
    assert [s.wall_offset for s in mon.statuses()] == [OFFSET]
    mon.stop()


def test_a_real_clock_monitor_times_events_in_wall_time() -> None:
    events = Events()
    before = time.time()
    mon = hw.HeartbeatMonitor(None, "svc.>", period=0.05, listeners=[events])
    mon.expect("svc.a")
    mon.start()
    deadline = time.monotonic() + 5
    while not events.events and time.monotonic() < deadline:
        time.sleep(0.01)
    mon.stop()
    assert events.events, "no failure within 5 s"
    failed = events.events[0]
    assert before <= failed.wall_at <= time.time()


def test_a_manual_clock_monitor_defaults_to_its_reading_now() -> None:
    clock = hw.ManualClock(100.0)
    before = time.time()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock)
    assert before <= mon.wall_time(100.0) <= time.time()


@pytest.mark.parametrize(
    ("value", "exc"), [("0", TypeError), (True, TypeError), (math.nan, ValueError)]
)
def test_bad_wall_offset_is_refused_by_name(value: object, exc: type[Exception]) -> None:
    with pytest.raises(exc, match=r"wall_offset .*got"):
        hw.HeartbeatMonitor(None, "svc.>", wall_offset=value)  # type: ignore[arg-type]


def test_alerts_carry_wall_clock_times() -> None:
    broker = MemoryBroker()
    clock = hw.ManualClock()
    got: list[hw.ReceivedMessage] = []
    hw.Consumer(broker, "/topic/alerts", on_message=got.append).start()
    alerts = hw.AlertListener(hw.ReliableSender(broker, "/topic/alerts"))
    mon = hw.HeartbeatMonitor(broker, "svc.>", clock=clock, wall_offset=OFFSET, listeners=[alerts])
    mon.expect("svc.a")
    mon.start()
    clock.advance(1.5)
    mon.beat("svc.a")
    mon.stop()
    bodies = [json.loads(m.body) for m in got]
    assert [b["alert"] for b in bodies] == ["failed", "resumed"]
    failed, resumed = bodies
    assert failed["at"] == OFFSET + failed["at_monotonic"]
    assert failed["since"] == OFFSET + failed["since_monotonic"]
    assert resumed["at"] == OFFSET + 1.5 and resumed["at_monotonic"] == 1.5
    assert failed["at_iso"] == iso_utc(failed["at"]) and failed["at_iso"].startswith("2025-06-15T")


def test_wall_fields_of_each_kind() -> None:
    failed = hw.Failed("svc.a", 2, 10.0, 11.0, wall_offset=OFFSET)
    assert wall_fields(failed) == {
        "topic": "svc.a",
        "missed": 2,
        "since": OFFSET + 10.0,
        "since_iso": "2025-06-15T15:06:50.000000Z",
        "since_monotonic": 10.0,
        "at": OFFSET + 11.0,
        "at_iso": "2025-06-15T15:06:51.000000Z",
        "at_monotonic": 11.0,
    }
    assert wall_fields(hw.Sent("svc.a", 1, OFFSET)) == {
        "topic": "svc.a",
        "seq": 1,
        "at": OFFSET,
        "at_iso": "2025-06-15T15:06:40.000000Z",
    }
    assert wall_fields(hw.Started("svc.>"), now=OFFSET) == {
        "source": "svc.>",
        "at": OFFSET,
        "at_iso": "2025-06-15T15:06:40.000000Z",
    }


def test_cli_watch_takes_max_beat_age() -> None:
    from heartwire.cli import _parser

    assert _parser().parse_args(["watch", "svc.>"]).max_beat_age is None
    assert _parser().parse_args(["watch", "svc.>", "--max-beat-age", "90"]).max_beat_age == 90.0
    with pytest.raises(SystemExit):
        _parser().parse_args(["watch", "svc.>", "--max-beat-age", "0"])


def test_wall_fields_carry_the_policy_marks_only_when_set() -> None:
    marked = hw.Failed("svc.a", 2, 10.0, 11.0, wall_offset=OFFSET, silenced=True)
    assert wall_fields(marked)["silenced"] is True
    assert "suppressed_by" not in wall_fields(marked)
    held = hw.Resumed("svc.a", 2, 1.0, 11.0, wall_offset=OFFSET, suppressed_by="svc.db")
    assert wall_fields(held)["suppressed_by"] == "svc.db"
    assert "silenced" not in wall_fields(held)
