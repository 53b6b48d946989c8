"""Publisher and monitor together on the embedded broker and the real clock, and the CLI.

Real time, so every wait is bounded and fails with what was seen so far.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import heartwire as hw
from heartwire.cli import main

PERIOD = 0.2
WAIT = 10.0


class Timeline(hw.SubscriberListener):
    """Every event for one topic, as (kind, missed) in arrival order."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.events: list[tuple[str, int]] = []
        self.changed = threading.Condition()

    def _add(self, kind: str, topic: str, missed: int = 0) -> None:
        if topic != self.topic:
            return
        with self.changed:
            self.events.append((kind, missed))
            self.changed.notify_all()

    def on_received(self, event: hw.Received) -> None:
        self._add("received", event.topic)

    def on_failed(self, event: hw.Failed) -> None:
        self._add("failed", event.topic, event.missed)

    def on_resumed(self, event: hw.Resumed) -> None:
        self._add("resumed", event.topic, event.missed)

    def wait_for(self, what: str, done: Callable[[list[tuple[str, int]]], bool]) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: done(self.events), WAIT):
                pytest.fail(f"no {what} within {WAIT} s; events so far: {self.events}")


def test_publisher_and_monitor_go_through_failure_and_recovery() -> None:
    broker = hw.connect()
    timeline = Timeline("svc.e2e")
    # Generous grace: this test is about the order of events; a loaded CI machine can delay a
    # beat by more than the default 10 % of a 0.2 s period.
    mon = hw.HeartbeatMonitor(
        broker, "svc.>", period=PERIOD, grace=PERIOD / 2, listeners=[timeline]
    )
    pub = hw.HeartbeatPublisher(broker, "svc.e2e", period=PERIOD)
    with mon, pub:
        timeline.wait_for("3 beats received", lambda ev: len(ev) >= 3)
        pub.pause()
        timeline.wait_for("failed(2)", lambda ev: ("failed", 2) in ev)
        pub.resume()
        timeline.wait_for(
            "resumed then received",
            lambda ev: any(k == "resumed" for k, _ in ev) and ev[-1][0] == "received",
        )
        assert mon.status("svc.e2e").state is hw.State.ALIVE
    events = timeline.events
    first_failed = events.index(("failed", 1))
    resumed_at = next(i for i, (k, _) in enumerate(events) if k == "resumed")
    # Beats until the pause, with no false failure while the publisher was beating on time.
    assert all(k == "received" for k, _ in events[:first_failed]), events
    assert first_failed >= 3
    # Then one failed event per missed period, counting up from 1 ...
    failures = events[first_failed:resumed_at]
    assert failures == [("failed", n) for n in range(1, len(failures) + 1)], events
    assert len(failures) >= 2
    # ... and the first beat back gives resumed with the last count, then received.
    assert events[resumed_at] == ("resumed", len(failures)), events
    assert events[resumed_at + 1][0] == "received", events
    assert mon.status("svc.e2e").state is hw.State.STOPPED


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_cli_publish_sends_the_count_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    assert main(["publish", "svc.cli", "--period", "0.05", "--count", "3", "--duration", "10"]) == 0
    assert time.monotonic() - started < 10, "--count 3 did not end the run"
    sent = _json_lines(capsys.readouterr().out)
    assert [line["seq"] for line in sent][:3] == [1, 2, 3]
    assert {line["event"] for line in sent} == {"sent"}
    assert {line["topic"] for line in sent} == {"svc.cli"}


def test_cli_watch_reports_an_expected_topic_that_never_beats(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["watch", "svc.>", "--expect", "svc.silent", "--period", "0.05", "--duration", "1"]
    assert main(args) == 0
    lines = _json_lines(capsys.readouterr().out)
    kinds = [line["event"] for line in lines]
    assert kinds[0] == "started" and kinds[-1] == "stopped", kinds
    failed = [line for line in lines if line["event"] == "failed"]
    assert failed, kinds
    assert [f["missed"] for f in failed] == list(range(1, len(failed) + 1))
    assert {f["topic"] for f in failed} == {"svc.silent"}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["watch", "svc.>.x"], "svc.>.x"),
        (["publish", "svc.*"], "svc.*"),
        (["publish", "svc.a", "--broker", "bogus://x"], "bogus://x"),
    ],
)
def test_cli_bad_input_exits_2_naming_the_value(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*args, "--duration", "0.1"]) == 2
    assert named in capsys.readouterr().err


def test_cli_rejects_a_non_positive_period(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["publish", "svc.a", "--period", "0"])
    assert exit_info.value.code == 2
    assert "must be a finite number > 0, got 0" in capsys.readouterr().err


def test_demo_detects_every_outage_that_was_due(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--topics", "60", "--period", "0.1", "--duration", "2.5"])
    out = capsys.readouterr().out
    assert "summary:" in out
    assert code == 0, out
