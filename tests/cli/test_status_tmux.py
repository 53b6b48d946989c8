"""``heartwire status`` as a person sees it: in a terminal (tmux, 120x40) against the real
ActiveMQ, with a publisher in this process. The screen is read with ``tmux capture-pane``:
the topic shows ALIVE while it beats, FAILED once it stops.

tmux runs on a server of this test's own (``-L``), so no one else's sessions are touched.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import heartwire as hw
from tests.brokers import brokers, url  # noqa: F401  (brokers: the session fixture)

pytest.importorskip("rich", reason="heartwire[status] (rich) is in the test extras")

TMUX = shutil.which("tmux")
PYTHON_DIR = str(Path(hw.__file__).resolve().parents[1])  # the heartwire under test
PERIOD = 0.5
WAIT = 30.0  # bound on each wait: a first STOMP connect on a loaded machine takes seconds

pytestmark = [
    pytest.mark.skipif(
        TMUX is None, reason="tmux is not installed (scripts/brokers install adds it)"
    ),
    pytest.mark.usefixtures("brokers"),
]


class Screen:
    """A tmux session of its own running one command, read as text."""

    def __init__(self, command: str, width: int = 120, height: int = 40) -> None:
        assert TMUX is not None
        self.socket = f"heartwire-status-{uuid.uuid4().hex[:8]}"
        self.tmux = [TMUX, "-L", self.socket]
        subprocess.run(
            [
                *self.tmux,
                "new-session",
                "-d",
                "-s",
                "status",
                "-x",
                f"{width}",
                "-y",
                f"{height}",
                command,
            ],
            check=True,
            timeout=10,
        )

    def text(self) -> str:
        proc = subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-t", "status"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return proc.stdout if proc.returncode == 0 else f"(capture-pane failed: {proc.stderr})"

    def wait_until(self, seen: Callable[[str], bool], what: str, timeout: float = WAIT) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if seen(text):
                return text
            if time.monotonic() >= deadline:
                pytest.fail(f"no {what} on the screen within {timeout:g} s; it shows:\n{text}")
            time.sleep(0.2)

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "status", *keys], check=True, timeout=10)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True, timeout=10)


def shows(topic: str, state: str) -> Callable[[str], bool]:
    """Whether a row of the screen's table has ``topic`` in the state ``state``."""

    def check(text: str) -> bool:
        return any(
            topic in line and f" {state} " in line.split(topic, 1)[1] for line in text.splitlines()
        )

    return check


@pytest.fixture
def topic() -> str:
    return f"st17.tmux.{uuid.uuid4().hex[:8]}"


@pytest.fixture
def screen(topic: str) -> Iterator[Screen]:
    command = shlex.join(
        [
            "env",
            # The terminal's own size, not one this test process may carry in its environment
            # (the tmux server, started from here, passes it on).
            "-u",
            "COLUMNS",
            "-u",
            "LINES",
            f"PYTHONPATH={PYTHON_DIR}",
            sys.executable,
            "-m",
            "heartwire",
            "status",
            topic,
            "--broker",
            url("activemq"),
            "--period",
            str(PERIOD),
            "--refresh",
            "0.2",
        ]
    )
    # The pane closes when the command exits: keep it to show a crash's traceback.
    s = Screen(f"{command}; echo EXITED $?; sleep 600")
    try:
        yield s
    finally:
        s.close()


def test_the_live_table_shows_a_topic_alive_then_failed(topic: str, screen: Screen) -> None:
    screen.wait_until(lambda t: "heartwire status" in t or "EXITED" in t, "status header")
    assert "EXITED" not in screen.text(), screen.text()
    broker = hw.connect(url("activemq"))
    pub = hw.HeartbeatPublisher(broker, topic, period=PERIOD)
    try:
        pub.start()
        text = screen.wait_until(shows(topic, "ALIVE"), f"{topic} ALIVE")
        assert "1 topic" in text and "Silences: none" in text, text
        pub.stop()
        stopped = time.monotonic()
        text = screen.wait_until(shows(topic, "FAILED"), f"{topic} FAILED")
        # One period and its grace after the last beat, plus a refresh: seconds, not WAIT.
        assert time.monotonic() - stopped < 10.0, text
        assert any("failed" in line and topic in line for line in text.splitlines()), text
        # Ctrl-C: the screen is given back, the last table printed, exit status 0.
        screen.keys("C-c")
        text = screen.wait_until(lambda t: "EXITED" in t, "exit after Ctrl-C")
        assert "EXITED 0" in text and "Traceback" not in text, text
        assert shows(topic, "FAILED")(text), text
    finally:
        pub.stop()
        broker.close()
