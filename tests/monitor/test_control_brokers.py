"""Silences as signed control messages over real ActiveMQ: one ``heartwire silence`` (a
subprocess) reaches two monitors, each on its own connection, whose events are then marked
silenced; unsigned, forged and replayed messages are refused and counted in both; ``heartwire
unsilence`` lifts it. Bounded waits throughout (a control topic of the test's own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest

import heartwire as hw
from heartwire import connect
from heartwire.beat import Beat, BeatCodec
from heartwire.control import ControlMessage
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

pytestmark = pytest.mark.usefixtures("brokers")

FAST = "heartbeat=1&reconnect_interval=0.2&connect_timeout=2&keepalive_interval=0"
PERIOD = 30.0
WAIT = 10.0
KEY = "ctl-broker-key"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "heartwire", *args],
            capture_output=True,
            text=True,
            timeout=30.0,
            env=dict(os.environ),
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"heartwire {args[0]} still running after 30 s: {exc}")


class Seen(hw.SubscriberListener):
    def __init__(self) -> None:
        self.failed: list[hw.Failed] = []
        self.errors: list[hw.ExceptionEvent] = []
        self.lock = threading.Lock()

    def on_failed(self, event: hw.Failed) -> None:
        with self.lock:
            self.failed.append(event)

    def on_exception(self, event: hw.ExceptionEvent) -> None:
        with self.lock:
            self.errors.append(event)


def heard(mon: hw.HeartbeatMonitor, transport: Any, root: str) -> None:
    """Wait (bounded) until ``mon`` hears a beat under ``root``: its control subscription,
    made before the beats' on the same connection, is in place too."""
    probe = f"{root}.probe"
    body = BeatCodec(KEY).encode(Beat(probe, period=PERIOD, seq=1, boot_id=uuid.uuid4().hex))
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        transport.publish(probe, body)
        time.sleep(0.05)
        if probe in mon:
            return
    raise AssertionError(f"the monitor heard no probe beat on {probe} within {WAIT} s")


def test_a_signed_silence_over_activemq_reaches_two_monitors_and_fakes_are_refused(
    closing: list[Any],
) -> None:
    B.ensure("activemq")
    url = B.url("activemq") + "?" + FAST
    root = f"x{uuid.uuid4().hex[:10]}"
    control = f"_hw.control.{root}"
    monitors: list[tuple[hw.HeartbeatMonitor, Seen]] = []
    for _ in range(2):
        transport = connect(url)
        closing.append(transport)
        seen = Seen()
        mon = hw.HeartbeatMonitor(
            transport, f"{root}.>", period=PERIOD, key=KEY, control=control, listeners=[seen]
        )
        closing.append(mon)
        mon.start()
        heard(mon, transport, root)
        monitors.append((mon, seen))
    sender = connect(url)
    closing.append(sender)

    def each(what: str, predicate: Any, step: float = 0.02) -> None:
        for i, (mon, seen) in enumerate(monitors):
            B.wait_for(lambda m=mon, s=seen: predicate(m, s), WAIT, f"monitor {i}: {what}", step)

    # Signed, through the CLI in another process.
    proc = cli("silence", f"{root}.db.>", "--for", "30m", "--reason", "upgrade", "--broker", url,
               "--key", KEY, "--destination", control)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-800:]
    sent = json.loads(proc.stdout)
    assert (sent["event"], sent["pattern"], sent["reason"]) == (
        "silence",
        f"{root}.db.>",
        "upgrade",
    )
    each("the silence", lambda m, s: [x.reason for x in m.silences()] == ["upgrade"])
    for mon, _ in monitors:
        assert mon.silences()[0].wall_end == pytest.approx(sent["until"], abs=0.01)

    # Their events are marked: a down beat under the pattern fails silenced, one outside not.
    codec = BeatCodec(KEY)
    for topic in (f"{root}.db.main", f"{root}.api"):
        beat = Beat(topic, seq=1, boot_id=uuid.uuid4().hex, sent_at=time.time(),
                    period=PERIOD, state="down", reason="broken")  # fmt: skip
        sender.publish(topic, codec.encode(beat))
    each("two failed events", lambda m, s: len(s.failed) == 2)
    for _, seen in monitors:
        marks = {e.topic: e.silenced for e in seen.failed}
        assert marks == {f"{root}.db.main": True, f"{root}.api": False}

    # Forged (another key, through the CLI), unsigned, and a replay: refused in both.
    proc = cli("silence", f"{root}.>", "--for", "1h", "--broker", url, "--key", "wrong",
               "--destination", control)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-800:]
    unsigned = BeatCodec(None).seal({"hwctl": 2, "op": "silence", "id": "u", "pattern": f"{root}.>",
                                     "until": time.time() + 60, "sent": time.time(),
                                     "nonce": uuid.uuid4().hex})  # fmt: skip
    sender.publish(control, unsigned)
    once = ControlMessage.silence(
        f"{root}.api", duration="10m", reason="once", destination=control
    ).encode(KEY)
    t0 = time.monotonic()
    sender.publish(control, once)
    each("the library's silence", lambda m, s: len(m.silences()) == 2, 0.001)
    took = time.monotonic() - t0
    print(
        f"\nactivemq: a signed silence reached both monitors in {took * 1000:.0f} ms (1 ms polls)"
    )
    sender.publish(control, once)
    want = {"bad_signature": 1, "unsigned": 1, "replayed": 1}
    each("the refusals", lambda m, s: m.stats()["control_refused"] == want)
    for mon, seen in monitors:
        assert mon.stats()["control"] == {"silence": 2}
        assert sorted(x.reason for x in mon.silences()) == ["once", "upgrade"]
        reasons = sorted(e.reason for e in seen.errors)
        assert reasons == ["control_bad_signature", "control_replayed", "control_unsigned"]
        assert all(KEY not in e.detail and "wrong" not in e.detail for e in seen.errors)
        assert mon.stats()["rejected"] == {}

    # Lifted through the CLI by the id it printed.
    proc = cli("unsilence", sent["id"], "--broker", url, "--key", KEY, "--destination", control)
    assert proc.returncode == 0, proc.stderr[-800:]
    each("the unsilence", lambda m, s: [x.reason for x in m.silences()] == ["once"])
    for mon, _ in monitors:
        assert mon.drain(WAIT)  # the unsilence is counted once its worker applied it
        assert mon.stats()["control"] == {"silence": 2, "unsilence": 1}
