"""Prometheus that fits (issue 17): series by group, the inter-arrival and downtime
histograms, the monitor's health, per-topic gauges only on opt-in, and cardinality bounded
with 100 000 topics. Scraped over HTTP, parsed with ``prometheus_client``'s parser; timing on a
ManualClock, so every count is exact."""

from __future__ import annotations

import logging
import math
import urllib.request

import pytest

import heartwire as hw
from heartwire import core
from heartwire.monitor import HeartbeatMonitor

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from heartwire.metrics import serve  # noqa: E402

WALL = 1_700_000_000.0
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> tuple[Samples, set[str]]:
    """Every sample at ``port``'s ``/metrics``: ``{(name, labels): value}``, and the family
    names, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    samples: Samples = {}
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, names


def get(samples: Samples, name: str, **labels: str) -> float:
    labels.setdefault("pattern", "svc.>")
    key = (name, frozenset(labels.items()))
    assert key in samples, (
        f"no sample {name}{labels}; have {sorted(k for k in samples if k[0] == name)}"
    )
    return samples[key]


def of(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def step(clock: hw.ManualClock, mon: HeartbeatMonitor, seconds: float) -> None:
    clock.advance(seconds)
    assert mon.drain(), "events not delivered"


def rig(**kw: object) -> tuple[hw.ManualClock, HeartbeatMonitor]:
    """Three topics in two groups (depth 2): svc.api.a and svc.db.main beat every 0.5 s, svc.api.b
    stops after its first beat, fails at 1.0 (and again at 2.0), and resumes at 2.4."""
    clock = hw.ManualClock()
    mon = HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0.0, clock=clock, wall_offset=WALL, group_depth=2, **kw
    )
    mon.start()
    mon.beat_many(["svc.api.a", "svc.api.b", "svc.db.main"])  # learned: first beats, no interval
    step(clock, mon, 0.5)
    mon.beat_many(["svc.api.a", "svc.db.main"])  # the batch path: 2 x 0.5 s
    step(clock, mon, 0.5)
    mon.beat("svc.api.a")  # the single-beat path: 2 x 0.5 s
    mon.beat("svc.db.main")
    step(clock, mon, 0.25)  # svc.api.b failed at 1.0
    step(clock, mon, 0.25)
    mon.beat("svc.api.a")  # 2 x 0.5 s
    mon.beat("svc.db.main")
    step(clock, mon, 0.75)  # svc.api.b failed again at 2.0 (missed 2)
    step(clock, mon, 0.15)  # t = 2.4
    mon.beat("svc.api.b")  # resumed: downtime 1.4 s; interval 2.4 s
    mon.beat_many(["svc.api.a", "svc.db.main"])  # 2 x 0.9 s
    assert mon.drain()
    return clock, mon


def test_grouped_series_and_histograms_are_exact() -> None:
    _, mon = rig()
    try:
        with serve(mon, 0, "127.0.0.1") as server:
            got, names = scrape(server.port)
        # inter-arrival, counted in the core: 6 x 0.5 s, 2 x 0.9 s, 1 x 2.4 s
        h = "heartwire_beat_interval_seconds"
        assert get(got, f"{h}_bucket", le="0.25") == 0
        assert get(got, f"{h}_bucket", le="0.5") == 6
        assert get(got, f"{h}_bucket", le="1.0") == 8
        assert get(got, f"{h}_bucket", le="2.0") == 8
        assert get(got, f"{h}_bucket", le="5.0") == 9
        assert get(got, f"{h}_bucket", le="+Inf") == 9
        assert get(got, f"{h}_count") == 9
        assert get(got, f"{h}_sum") == pytest.approx(6 * 0.5 + 2 * 0.9 + 2.4)
        # events by group: svc.api.b failed twice, resumed once after 1.4 s
        assert get(got, "heartwire_group_failed_total", group="svc.api") == 2
        assert get(got, "heartwire_group_resumed_total", group="svc.api") == 1
        assert set(of(got, "heartwire_group_failed_total")) == {
            frozenset({("pattern", "svc.>"), ("group", "svc.api")})
        }
        d = "heartwire_downtime_seconds"
        assert get(got, f"{d}_bucket", group="svc.api", le="1.0") == 0
        assert get(got, f"{d}_bucket", group="svc.api", le="5.0") == 1
        assert get(got, f"{d}_count", group="svc.api") == 1
        assert get(got, f"{d}_sum", group="svc.api") == pytest.approx(1.4)
        # topics by group and state, and the ungrouped totals as before
        assert get(got, "heartwire_group_topics", group="svc.api", state="ALIVE") == 2
        assert get(got, "heartwire_group_topics", group="svc.db", state="ALIVE") == 1
        assert get(got, "heartwire_group_topics", group="svc.db", state="FAILED") == 0
        assert get(got, "heartwire_groups_overflowed") == 0
        assert get(got, "heartwire_failed_total") == 2
        assert get(got, "heartwire_resumed_total") == 1
        assert get(got, "heartwire_beats_total") == 12  # 3 + 2 + 2 + 2 + 3
        # health
        assert get(got, "heartwire_running") == 1
        assert get(got, "heartwire_connected") == 1  # no broker: up while running
        assert get(got, "heartwire_ingest_lagging") == 0
        # no per-topic series unless asked
        assert not {n for n in names if n.startswith("heartwire_topic_")}
        assert not any("topic" in dict(labels) for _, labels in got)
    finally:
        mon.stop()


def test_per_topic_series_only_when_opted_in() -> None:
    clock, mon = rig()
    try:
        with serve(mon, 0, "127.0.0.1", per_topic=True) as server:
            got, _ = scrape(server.port)
        for topic in ("svc.api.a", "svc.api.b", "svc.db.main"):
            group = topic.rpartition(".")[0]
            assert get(got, "heartwire_topic_up", group=group, topic=topic) == 1
            assert get(got, "heartwire_topic_missed", group=group, topic=topic) == 0
            # a wall-clock timestamp of the last beat (t = 2.4 on the monitor's clock)
            assert get(
                got, "heartwire_topic_last_beat_timestamp_seconds", group=group, topic=topic
            ) == pytest.approx(WALL + 2.4)
        assert get(got, "heartwire_topic_series_omitted") == 0
        step(clock, mon, 1.5)  # t = 3.9: every topic failed at 3.4
        with serve(mon, 0, "127.0.0.1", per_topic=True) as server:
            got, _ = scrape(server.port)
        a = {"group": "svc.api", "topic": "svc.api.a"}
        assert get(got, "heartwire_topic_up", **a) == 0
        assert get(got, "heartwire_topic_missed", **a) == 1
        # the timestamp stays the last beat's: rules compare it with time()
        assert get(got, "heartwire_topic_last_beat_timestamp_seconds", **a) == pytest.approx(
            WALL + 2.4
        )
    finally:
        mon.stop()


def test_max_topic_series_keeps_failed_topics_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = hw.ManualClock()
    mon = HeartbeatMonitor(None, "svc.>", period=1.0, grace=0.0, clock=clock)
    mon.expect("svc.z")  # never beats: FAILED
    mon.start()
    mon.beat_many([f"svc.t{i}" for i in range(5)])
    clock.advance(0.5)
    mon.beat_many([f"svc.t{i}" for i in range(5)])
    step(clock, mon, 0.75)  # svc.z failed at 1.0
    try:
        with (
            caplog.at_level(logging.WARNING, "heartwire.metrics"),
            serve(mon, 0, "127.0.0.1", per_topic=True, max_topic_series=2) as server,
        ):
            got, _ = scrape(server.port)
        up = of(got, "heartwire_topic_up")
        assert {dict(k)["topic"]: v for k, v in up.items()} == {"svc.z": 0, "svc.t0": 1}
        assert len(of(got, "heartwire_topic_missed")) == 2
        assert get(got, "heartwire_topic_series_omitted") == 4
        assert "max_topic_series=2" in caplog.text and "4 left out" in caplog.text
    finally:
        mon.stop()


def test_cardinality_stays_bounded_with_100_000_topics() -> None:
    clock = hw.ManualClock()
    mon = HeartbeatMonitor(
        None, ">", period=1.0, grace=0.0, clock=clock, group_depth=1, max_groups=20
    )
    mon.start()
    n = 100_000
    names = [f"t{i % 1000}.svc{i}" for i in range(n)]  # 1000 first segments
    assert mon.beat_many(names) == n
    clock.advance(0.5)
    assert mon.beat_many(names[: n // 2]) == n // 2  # half of them beat again
    step(clock, mon, 0.75)  # the other half failed at 1.0
    try:
        with serve(mon, 0, "127.0.0.1", per_topic=True, max_topic_series=50) as server:
            got, _ = scrape(server.port)
        assert len(got) < 600, f"{len(got)} samples for {n} topics"
        groups = {dict(k)["group"] for k in of(got, "heartwire_group_topics")}
        assert len(groups) == 21 and "other" in groups
        p = {"pattern": ">"}
        assert sum(of(got, "heartwire_group_topics").values()) == n
        failed = sum(
            v for k, v in of(got, "heartwire_group_topics").items() if dict(k)["state"] == "FAILED"
        )
        assert failed == n // 2
        assert sum(of(got, "heartwire_group_failed_total").values()) == n // 2
        assert get(got, "heartwire_groups_overflowed", **p) == 1000 - 20
        assert len(of(got, "heartwire_topic_up")) == 50
        assert get(got, "heartwire_topic_series_omitted", **p) == n - 50
        assert get(got, "heartwire_beat_interval_seconds_count", **p) == n // 2
        assert get(got, "heartwire_beat_interval_seconds_bucket", le="0.5", **p) == n // 2
    finally:
        mon.stop()


def test_health_series_follow_local_pauses_and_lag() -> None:
    clock = hw.ManualClock()
    mon = HeartbeatMonitor(None, "svc.>", period=1.0, clock=clock, max_local_pause=5.0)
    mon.start()
    try:
        mon.beat("svc.a")
        step(clock, mon, 0.1)
        clock.advance(12.0, stalled=True)  # the monitor itself stalled for 12 s
        mon.detector.note_intake(True, 3.0)  # its intake is 3 s behind its feed
        step(clock, mon, 0.01)
        with serve(mon, 0, "127.0.0.1") as server:
            got, _ = scrape(server.port)
        assert get(got, "heartwire_local_pauses_total") == 1
        assert get(got, "heartwire_local_pause_seconds_total") == pytest.approx(12.0, abs=0.02)
        assert get(got, "heartwire_ingest_lagging") == 1
        assert get(got, "heartwire_ingest_lag_seconds") == pytest.approx(3.0, abs=0.02)
        mon.detector.note_intake(False, None)  # caught up
        mon.stop()
        with serve(mon, 0, "127.0.0.1") as server:
            got, _ = scrape(server.port)
        assert get(got, "heartwire_ingest_lagging") == 0
        assert get(got, "heartwire_running") == 0
        assert get(got, "heartwire_connected") == 0
    finally:
        mon.stop()


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match=r"group_depth must be >= 1, got 0"):
        HeartbeatMonitor(None, "svc.>", group_depth=0)
    with pytest.raises(TypeError, match=r"max_groups must be an int"):
        HeartbeatMonitor(None, "svc.>", max_groups=2.5)  # type: ignore[arg-type]
    mon = HeartbeatMonitor(None, "svc.>")
    with pytest.raises(ValueError, match=r"max_topic_series must be >= 0, got -1"):
        serve(mon, 0, per_topic=True, max_topic_series=-1)
    with pytest.raises(TypeError, match=r"per_topic must be a bool, got str"):
        serve(mon, 0, per_topic="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"depth must be an int >= 1, got 0"):
        mon.detector.counts_by_prefix(0)


def test_core_interval_histogram_counts_every_beat_path_exactly() -> None:
    clock = core.ManualClock()
    det = core.Detector(clock=clock, period=10.0)
    handles = det.add_many(["a.x", "a.y", "b.z"])
    det.beat_many(["a.x", "a.y", "b.z"])  # first beats: no interval
    assert det.interval_histogram()[1] == [0] * 16  # off: nothing counted
    det.count_intervals = True
    clock.advance(0.01)
    det.beat("a.x")  # by name: 10 ms (bucket le=0.01, inclusive)
    clock.advance(0.04)
    det.beat_handles(handles)  # by handle: 50, 50, 50 ms... a.x 40 ms
    clock.advance(3600.0)
    det.beat_many(["a.y", "b.z"])  # by name, batched: 1 h each
    clock.advance(3600.5)
    det.beat("b.z")  # past the last bound: +Inf
    bounds, counts, total = det.interval_histogram()
    assert len(bounds) == 15 and len(counts) == 16 and bounds[0] == 0.01 and bounds[-1] == 3600.0
    assert counts[0] == 1  # 10 ms
    assert counts[1] == 3  # 40, 50, 50 ms
    assert counts[14] == 2  # 1 h
    assert counts[15] == 1  # 1 h 0.5 s
    assert sum(counts) == 7
    assert total == pytest.approx(0.01 + 0.04 + 0.05 + 0.05 + 2 * 3600.0 + 3600.5)
    det.count_intervals = False
    clock.advance(1.0)
    det.beat("a.x")
    assert sum(det.interval_histogram()[1]) == 7
    # a.y last beat at 3600.05: FAILED by now; a.x and b.z beat since
    assert det.counts_by_prefix(1) == {"a": (0, 1, 1, 0, 0, 0), "b": (0, 1, 0, 0, 0, 0)}
    assert math.isfinite(total)


def test_watch_serves_grouped_and_per_topic_series() -> None:
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "heartwire", "watch", "svc.>", "--period", "0.2"]
    cmd += ["--expect", "svc.quiet.x", "--metrics-port", "0", "--metrics-addr", "127.0.0.1"]
    cmd += ["--group-depth", "2", "--per-topic-metrics", "--max-topic-series", "5"]
    cmd += ["--duration", "60"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        match = None
        while match is None and len(lines) < 20:
            line = proc.stderr.readline()
            assert line, f"watch ended before serving metrics: {lines}"
            lines.append(line)
            match = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, f"no metrics address in {lines}"
        port = int(match.group(1))
        quiet = {"group": "svc.quiet", "topic": "svc.quiet.x"}
        deadline = time.monotonic() + 20.0
        got: Samples = {}
        while (
            got.get(("heartwire_topic_up", frozenset({"pattern": "svc.>", **quiet}.items()))) != 0
        ):
            assert time.monotonic() < deadline, f"svc.quiet.x never down in 20 s: {got}"
            time.sleep(0.1)
            got, _ = scrape(port)
        assert get(got, "heartwire_group_topics", group="svc.quiet", state="FAILED") == 1
        assert get(got, "heartwire_group_failed_total", group="svc.quiet") >= 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20.0)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0


def test_watch_refuses_bad_grouping() -> None:
    from heartwire.cli import main

    assert main(["watch", "svc.>", "--max-groups", "-1", "--duration", "0.1"]) == 2


def test_core_batch_tallies_outages_by_prefix() -> None:
    clock = core.ManualClock()
    det = core.Detector(clock=clock, period=1.0)
    queue = det.subscribe(capacity=1024)
    det.add_many(["a.x", "a.y", "b.z", "c"])
    clock.advance(1.5)  # all four failed at 1.0
    det.beat("a.x")  # resumed after 0.5 s
    clock.advance(2.0)  # a.y, b.z, c failed again at 2.0 and 3.0; a.x again at 2.5
    det.beat("b.z")  # resumed after 2.5 s
    batch = queue.try_pop_batch()
    got = batch.outages_by_prefix(1, (1.0, 2.0))
    assert got == {
        "a": (1 + 3 + 1, 1, [1, 0, 0], pytest.approx(0.5)),
        "b": (3, 1, [0, 0, 1], pytest.approx(2.5)),
        "c": (3, 0, [0, 0, 0], 0.0),
    }
    assert batch.outages_by_prefix(2, ())["a.x"][:2] == (2, 1)  # failed at 1.0 and 2.5
    with pytest.raises(ValueError, match=r"depth must be an int >= 1, got 0"):
        batch.outages_by_prefix(0, ())
    with pytest.raises(ValueError, match=r"bounds must be ascending numbers, got \[2.0, 1.0\]"):
        batch.outages_by_prefix(1, (2.0, 1.0))
