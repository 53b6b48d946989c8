"""mon.metrics(), the Prometheus endpoint (scraped over HTTP), and `heartwire watch
--metrics-port` in a child process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

import pytest

import heartwire as hw
from heartwire.beat import Beat, BeatCodec
from heartwire.listeners import SubscriberListener
from heartwire.monitor import HeartbeatMonitor
from heartwire.transport import Message

WAIT = 20.0


def scrape(port: int) -> dict[str, float]:
    """``{'name{labels}': value}`` from the text exposition at ``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def rig() -> tuple[hw.ManualClock, HeartbeatMonitor]:
    """svc.a beating, svc.b silent (FAILED), svc.c never expected (learned), 3 bad beats."""
    clock = hw.ManualClock()
    mon = HeartbeatMonitor(None, "svc.>", period=1.0, grace=0.0, clock=clock, max_topics=3)
    mon.expect("svc.a")
    mon.expect("svc.b")
    mon.start()
    codec = BeatCodec()
    for topic in ("svc.a", "svc.c"):
        mon.handle_message(Message(topic, codec.encode(Beat(topic))))
    mon.handle_message(Message("svc.a", b"garbage"))
    mon.handle_message(Message("svc.a", b"\xff"))
    mon.handle_message(Message("svc.d", codec.encode(Beat("svc.d"))))  # over max_topics
    clock.advance(0.5)
    mon.beat("svc.a")
    mon.beat("svc.c")
    clock.advance(0.75)  # svc.b failed at 1.0
    assert mon.drain()
    return clock, mon


def test_metrics_snapshot() -> None:
    _, mon = rig()
    try:
        m = mon.metrics()
        assert m["topics"] == 3
        assert m["states"]["ALIVE"] == 2 and m["states"]["FAILED"] == 1
        assert set(m["states"]) == {"PENDING", "ALIVE", "FAILED", "PAUSED", "STOPPED", "REMOVED"}
        assert m["beats"] == 4
        assert m["learned"] == 1
        assert m["failed"] == 1 and m["resumed"] == 0
        assert m["rejected"] == {"bad_json": 1, "not_utf8": 1, "too_many_topics": 1}
        assert m["rejected_total"] == 3
        assert m["dropped"] == {"dispatch": 0, "listeners": 0}
        assert m["listener_late"] == 0
        assert m["dispatch_queue_depth"] == 0 and m["listener_queue_depth"] == 0
        assert (m["disconnects"], m["reconnects"]) == (0, 0)
        assert m["max_topics"] == 3
    finally:
        mon.stop()


def test_metrics_count_listener_drops_and_errors() -> None:
    clock = hw.ManualClock()
    gate = threading.Event()

    class Stuck(SubscriberListener):
        def on_failed(self, event: hw.Failed) -> None:
            gate.wait(WAIT)
            raise RuntimeError("late and wrong")

    mon = HeartbeatMonitor(
        None, "svc.>", clock=clock, grace=0.0, listeners=[Stuck()], listener_queue=2
    )
    mon.expect("svc.a")
    mon.start()
    try:
        clock.advance(1.5)  # failed at 1.0: the listener takes it and gets stuck
        deadline = time.monotonic() + WAIT
        while mon.stats()["listeners"][0]["busy_for"] is None:
            assert time.monotonic() < deadline, "the listener never got its first event"
            time.sleep(0.01)
        for count in range(2, 6):  # failed at 2, 3, 4, 5: two queued, two dropped (drop-oldest)
            clock.advance(1.0)
            # one at a time into the listener's queue: events the dispatch thread reads together
            # come as one batch, and a batch put in an empty queue goes in whole (documented)
            while (w := mon.stats()["listeners"][0])["queued"] + w["dropped"] < count - 1:
                assert time.monotonic() < deadline, w
                time.sleep(0.01)
        while mon.metrics()["failed"] < 5 or mon.metrics()["dropped"]["listeners"] < 2:
            assert time.monotonic() < deadline, mon.metrics()
            time.sleep(0.01)
        m = mon.metrics()
        assert m["listener_queue_depth"] == 2
        gate.set()
        assert mon.drain(timeout=WAIT)
        m = mon.metrics()
        assert m["listener_errors"] + m["dropped"]["listeners"] == m["failed"]
        assert m["listener_errors"] == 3  # one in hand, two queued
    finally:
        gate.set()
        mon.stop()


class Reports(SubscriberListener):
    def on_exception(self, event: hw.ExceptionEvent) -> None:
        pass


@pytest.mark.parametrize("listener_queue", [None, 10])
def test_metrics_count_events_refused_after_on_stopped(listener_queue: int | None) -> None:
    from heartwire.metrics import serve

    clock = hw.ManualClock()
    mon = HeartbeatMonitor(
        None, "svc.>", clock=clock, listeners=[Reports()], listener_queue=listener_queue
    )
    mon.start()
    mon.stop()
    # A bad beat reported after stop: nothing reaches a listener after on_stopped.
    mon.handle_message(Message("svc.a", b"garbage"))
    m = mon.metrics()
    assert m["listener_late"] == mon.stats()["listener_late"] == 1
    with serve(mon, 0, "127.0.0.1") as server:
        got = scrape(server.port)
    assert got['heartwire_listener_late_total{pattern="svc.>"}'] == 1


def test_prometheus_endpoint_serves_the_real_values() -> None:
    from heartwire.metrics import serve

    clock, mon = rig()
    try:
        with serve(mon, 0, "127.0.0.1") as server:
            got = scrape(server.port)
            p = 'pattern="svc.>"'
            assert got[f'heartwire_topics{{{p},state="ALIVE"}}'] == 2
            assert got[f'heartwire_topics{{{p},state="FAILED"}}'] == 1
            assert got[f"heartwire_beats_total{{{p}}}"] == 4
            assert got[f"heartwire_failed_total{{{p}}}"] == 1
            assert got[f'heartwire_rejected_total{{{p},reason="too_many_topics"}}'] == 1
            assert got[f'heartwire_rejected_total{{{p},reason="bad_json"}}'] == 1
            assert got[f'heartwire_dropped_total{{{p},queue="listeners"}}'] == 0
            assert got[f"heartwire_max_topics{{{p}}}"] == 3
            assert got[f"heartwire_listener_queue_depth{{{p}}}"] == 0
            # read at scrape time: a later beat shows in the next scrape
            mon.beat("svc.b")
            clock.advance(0.01)
            assert mon.drain()
            again = scrape(server.port)
            assert again[f"heartwire_beats_total{{{p}}}"] == 5
            assert again[f"heartwire_resumed_total{{{p}}}"] == 1
            assert again[f'heartwire_topics{{{p},state="FAILED"}}'] == 0
    finally:
        mon.stop()


def test_missing_prometheus_client_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from heartwire import metrics

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now fails
    mon = HeartbeatMonitor(None, "svc.>")
    with pytest.raises(metrics.MetricsUnavailable, match=r"pip install 'heartwire\[metrics\]'"):
        metrics.serve(mon, 0)
    from heartwire.cli import main

    assert main(["watch", "svc.>", "--metrics-port", "0", "--duration", "0.1"]) == 2


def test_serve_rejects_a_bad_port() -> None:
    from heartwire.metrics import serve

    with pytest.raises(ValueError, match=r"port must be an int from 0 to 65535, got 70000"):
        serve(HeartbeatMonitor(None, "svc.>"), 70000)


def test_watch_metrics_port_serves_over_http() -> None:
    cmd = [sys.executable, "-m", "heartwire", "watch", "svc.>", "--period", "0.2"]
    cmd += ["--expect", "svc.quiet", "--metrics-port", "0", "--metrics-addr", "127.0.0.1"]
    cmd += ["--duration", "60"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        match = None
        while match is None and len(lines) < 20:  # it says where (port 0: any free port)
            line = proc.stderr.readline()
            assert line, f"watch ended before serving metrics: {lines}"
            lines.append(line)
            match = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, f"no metrics address in {lines}"
        port = int(match.group(1))
        deadline = time.monotonic() + WAIT
        got: dict[str, Any] = {}
        key = 'heartwire_failed_total{pattern="svc.>"}'
        while got.get(key, 0) < 2:  # svc.quiet fails every 0.2 s
            assert time.monotonic() < deadline, f"no failures scraped in {WAIT} s: {got}"
            time.sleep(0.1)
            got = scrape(port)
        assert got['heartwire_topics{pattern="svc.>",state="FAILED"}'] == 1
        assert got['heartwire_beats_total{pattern="svc.>"}'] == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(WAIT)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0
