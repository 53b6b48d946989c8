"""The self-pause guard in a real process: a monitor SIGSTOP-ed for 5 s (issue 9).

The monitor runs in a subprocess (``tests/monitor/local_pause_helper.py``) with two publishers
on its embedded broker: ``svc.live`` keeps beating, ``svc.dead`` goes silent from the stop on.
The 5 s stop is the test itself; every other wait is bounded.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGSTOP"), reason="needs POSIX job-control signals"
)

ROOT = Path(__file__).resolve().parents[2]
STOP = 5.0


class Lines:
    """The subprocess's JSON lines, read on a thread of their own."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[dict[str, Any]] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        assert proc.stdout is not None
        self._stdout = proc.stdout
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self._stdout:
            if line.startswith("{"):
                self._queue.put(json.loads(line))
        self._queue.put(None)

    def wait_for(self, what: str, done: Callable[[dict[str, Any]], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                pytest.fail(f"no {what} within {timeout} s; lines so far: {self.seen}")
            self.seen.append(line)
            if done(line):
                return

    def rest(self, timeout: float) -> None:
        """Every line up to the end of the output."""
        deadline = time.monotonic() + timeout
        while (line := self._queue.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            self.seen.append(line)


def test_a_stopped_monitor_fails_no_live_topic_and_reports_the_dead_one_after_waking() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.monitor.local_pause_helper",
            "--max-local-pause",
            "1.0",
            # Slack for a loaded CI machine: a live beat late by less than this is no failure.
            "--grace",
            "0.3",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = Lines(proc)
        lines.wait_for("ready", lambda ln: ln["event"] == "ready", timeout=15.0)
        os.kill(proc.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        time.sleep(STOP)  # the monitor is frozen: this is the stall under test
        os.kill(proc.pid, signal.SIGCONT)
        woke_at = time.monotonic()
        lines.wait_for(
            "failed for svc.dead",
            lambda ln: ln["event"] == "failed" and ln["topic"] == "svc.dead",
            timeout=5.0,
        )
        assert proc.stdin is not None
        proc.stdin.close()  # the helper stops and prints its stats
        lines.rest(timeout=10.0)
        assert proc.wait(timeout=10.0) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=5.0)

    events = lines.seen
    assert not [e for e in events if e.get("topic") == "svc.live"], events
    pauses = [e for e in events if e["event"] == "local_pause"]
    assert len(pauses) == 1, events
    [pause] = pauses
    assert STOP - 0.5 < pause["duration"] < STOP + 1.0, pause
    assert stopped_at < pause["at"] < woke_at + 1.0, (stopped_at, woke_at, pause)
    failed = [e for e in events if e["event"] == "failed"]
    assert failed[0]["topic"] == "svc.dead" and failed[0]["missed"] == 1, events
    # Failed after the wake-up: a full period plus grace (0.2 + 0.3 s) of silence from it.
    assert pause["at"] + 0.5 <= failed[0]["at"] < pause["at"] + 1.7, (pause, failed[0])
    [stats] = [e for e in events if e["event"] == "stats"]
    assert stats["local_pauses"] == 1
    assert stats["local_pause_seconds"] == pytest.approx(pause["duration"])
