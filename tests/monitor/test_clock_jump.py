"""Wall-clock jumps: detection runs on the monotonic clock, so stepping the wall clock by an hour
either way (NTP, an operator, a VM restore) fails nothing and resumes nothing.

Simulated in-process (ManualClock for the monotonic clock, ``time.time`` stepped by +-1 h), and
for real under libfaketime (Debian's ``faketime``): a child process whose wall clock is moved
+1 h then -1 h while a publisher beats to a monitor on the real clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import heartwire as hw
from heartwire.events import Failed, Received, Resumed
from heartwire.executor import shared_executor
from heartwire.listeners import SubscriberListener
from heartwire.monitor import HeartbeatMonitor
from heartwire.publisher import HeartbeatPublisher
from heartwire.transport.memory import MemoryBroker

HOUR = 3600.0
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")


class Rec(SubscriberListener):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_failed(self, event: Failed) -> None:
        self.events.append(event)

    def on_resumed(self, event: Resumed) -> None:
        self.events.append(event)

    def on_received(self, event: Received) -> None:
        self.events.append(event)


@pytest.mark.parametrize("jump", [HOUR, -HOUR])
def test_a_wall_clock_step_fails_and_resumes_nothing(
    monkeypatch: pytest.MonkeyPatch, jump: float
) -> None:
    clock = hw.ManualClock()
    broker = MemoryBroker()
    rec = Rec()
    mon = HeartbeatMonitor(broker, "svc.>", period=1.0, grace=0.0, clock=clock, listeners=[rec])
    mon.expect("svc.silent")
    pub = HeartbeatPublisher(broker, "svc.a", period=1.0, clock=clock)
    mon.start()
    pub.start()
    assert shared_executor(clock).drain()  # the first beat, due at start, goes out at 0.0
    assert mon.drain()
    wall = [time.time()]
    monkeypatch.setattr(time, "time", lambda: wall[0])  # the wall clock both sides read
    try:
        for step in range(1, 21):
            clock.advance(0.5)
            wall[0] += 0.5
            if step == 10:
                wall[0] += jump  # the wall clock is stepped; the monotonic clock is not
            assert shared_executor(clock).drain()  # the publisher's beats due by now are sent
            assert mon.drain()
        silent = [e for e in rec.events if isinstance(e, Failed)]
        assert all(e.topic == "svc.silent" for e in silent), silent
        # the silent topic fails exactly once a period, before and after the step
        assert [(e.missed, e.at) for e in silent] == [(n, float(n)) for n in range(1, 10)]
        assert not [e for e in rec.events if isinstance(e, Resumed)]
        assert mon.status("svc.a").state is hw.State.ALIVE
        beats = [e for e in rec.events if isinstance(e, Received) and e.topic == "svc.a"]
        # one at start and one a period, none lost or doubled by the step
        assert [e.seq for e in beats] == list(range(1, 12))
        assert [e.at for e in beats] == [float(n) for n in range(11)]
    finally:
        pub.stop()
        mon.stop()
        broker.close()


CHILD = textwrap.dedent(
    """
    import json, sys, threading, time
    from pathlib import Path
    import heartwire as hw

    stamp = Path(sys.argv[1])
    events = {"failed": 0, "resumed": 0, "received": 0}

    class Count(hw.SubscriberListener):
        def on_failed(self, e): events["failed"] += 1
        def on_resumed(self, e): events["resumed"] += 1
        def on_received(self, e): events["received"] += 1

    broker = hw.connect()  # the embedded broker
    mon = hw.HeartbeatMonitor(broker, "svc.>", period=0.2, grace=0.3, listeners=[Count()])
    mon.expect("svc.a")
    pub = hw.HeartbeatPublisher(broker, "svc.a", period=0.2)
    mon.start(); pub.start()
    walls = []
    pause = threading.Event()  # not time.sleep: libfaketime 0.9.10 breaks CPython's (EINVAL)
    for offset in ("+0", "+3600", "-3600"):
        stamp.write_text(offset + "\\n")
        t = time.monotonic()
        while time.monotonic() - t < 1.5:
            pause.wait(0.05)
        walls.append(time.time() - time.monotonic())
    state = mon.status("svc.a").state.value
    pub.stop(); mon.drain(); mon.stop()
    print(json.dumps({"events": events, "walls": walls, "state": state}))
    """
)


@pytest.mark.skipif(not LIBFAKETIME.exists(), reason="libfaketime not installed (apt faketime)")
def test_a_wall_clock_step_under_libfaketime_fails_nothing(tmp_path: Path) -> None:
    stamp = tmp_path / "faketime"
    stamp.write_text("+0\n")
    env = dict(
        os.environ,
        LD_PRELOAD=str(LIBFAKETIME),
        FAKETIME_TIMESTAMP_FILE=str(stamp),
        FAKETIME_NO_CACHE="1",
        DONT_FAKE_MONOTONIC="1",  # a wall-clock step leaves CLOCK_MONOTONIC alone
    )
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(stamp)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    before, ahead, behind = result["walls"]
    # libfaketime really moved the wall clock of the child, an hour each way
    assert ahead - before == pytest.approx(HOUR, abs=5)
    assert behind - before == pytest.approx(-HOUR, abs=5)
    assert result["events"]["failed"] == 0, result
    assert result["events"]["resumed"] == 0, result
    assert result["events"]["received"] >= 10, result  # beats kept flowing throughout
    assert result["state"] == "ALIVE"
