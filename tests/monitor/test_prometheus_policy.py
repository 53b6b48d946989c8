"""Prometheus series of the alerting policy (issue 17): counters of silenced, suppressed,
released and held events and a gauge of the topics flapping now, per monitor (no topic label);
and no two families whose names clash in OpenMetrics (``heartwire_lagging`` the gauge beside
``heartwire_lagging_total`` the counter did): the OpenMetrics exposition parses with
prometheus_client's OpenMetrics parser, and ``promtool check metrics`` passes."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest

import heartwire as hw
from tests.monitor.test_prometheus import get, scrape

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.openmetrics.parser import (  # noqa: E402
    text_string_to_metric_families as openmetrics_families,
)

from heartwire.metrics import PER_TOPIC, SERIES, serve  # noqa: E402


def test_policy_counters_and_flapping_gauge_are_exact() -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(
        None, "svc.>", clock=clock, period=1.0, grace=0.0, flap_threshold=1, flap_window=5.0
    )
    for topic in ("svc.db", "svc.api", "svc.cache"):
        mon.expect(topic)
    mon.depends("svc.api", on="svc.db")
    mon.silence("svc.cache", duration=2.5)
    mon.start()
    try:
        clock.set(1.5)  # failed at 1.0: api suppressed, cache silenced (2 marked events)
        mon.beat("svc.db")  # db resumes: api released
        clock.set(2.2)  # failed at 2.0: cache silenced again (3 marked events)
        mon.beat_many(["svc.db", "svc.api", "svc.cache"])  # (db was not down) cache silenced
        clock.set(3.0)
        mon.beat_many(["svc.api", "svc.cache"])
        clock.set(3.4)  # db fails at 3.2 (its second outage)
        mon.beat("svc.db")  # ... and resumes at 3.4: flapping (this event instead)
        clock.set(4.6)  # db fails at 4.4: held back, it flaps
        assert mon.drain(5.0)
        with serve(mon, 0, "127.0.0.1") as server:
            got, names = scrape(server.port)
        stats = mon.stats()
        assert (stats["silenced"], stats["suppressed"], stats["released"]) == (3, 1, 1)
        assert get(got, "heartwire_silenced_total") == 3
        assert get(got, "heartwire_suppressed_total") == 1
        assert get(got, "heartwire_released_total") == 1
        # held back: db's resumed at 3.4 (it starts the flapping) and its failed at 4.4
        assert get(got, "heartwire_flapping_held_total") == stats["held"] == 2
        assert get(got, "heartwire_flapping_topics") == 1
        # marked events are still failures of their topics, counted like the others: 9
        # delivered (3 at 1.0, api's released at 1.5, 2 at 2.0, db at 3.2, 2 at 4.0) of
        # which 3 marked; db's at 4.4 was held back, not delivered, and not counted: the
        # core's count and the groups' agree
        assert stats["failed"] == 9
        assert get(got, "heartwire_failed_total") == 9
        assert get(got, "heartwire_group_failed_total", group="svc") == 9
        assert {"heartwire_silenced", "heartwire_flapping_topics"} <= names
        clock.set(9.5)  # db settles 5 s after its last transition (4.4): none flapping
        assert mon.drain(5.0)
        with serve(mon, 0, "127.0.0.1") as server:
            got, _ = scrape(server.port)
        assert get(got, "heartwire_flapping_topics") == 0
        # per monitor: none of them carries a topic (or group) label
        for name in ("heartwire_silenced_total", "heartwire_flapping_topics"):
            assert [dict(k[1]) for k in got if k[0] == name] == [{"pattern": "svc.>"}]
    finally:
        mon.stop()


def _exposition(accept: str) -> str:
    mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, clock=hw.ManualClock())
    mon.expect("svc.a")
    mon.start()
    try:
        with serve(mon, 0, "127.0.0.1", per_topic=True) as server:
            request = urllib.request.Request(
                f"http://127.0.0.1:{server.port}/metrics", headers={"Accept": accept}
            )
            with urllib.request.urlopen(request, timeout=5) as r:
                return r.read().decode()
    finally:
        mon.stop()


def test_no_family_names_clash_in_openmetrics() -> None:
    text = _exposition("application/openmetrics-text; version=1.0.0; charset=utf-8")
    families = [f.name for f in openmetrics_families(text)]  # raised "Clashing name" before
    assert len(families) == len(set(families))
    assert "heartwire_lagging" in families and "heartwire_ingest_lagging" in families
    # and in the table itself: a gauge named as a counter's family would clash
    counters = {n.removesuffix("_total") for n, (k, _) in SERIES.items() if k == "counter"}
    others = {n for n, (k, _) in {**SERIES, **PER_TOPIC}.items() if k != "counter"}
    assert not counters & others


def test_promtool_check_metrics_passes() -> None:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip("promtool not installed: run scripts/tools (Debian package prometheus)")
    text = _exposition("text/plain")
    done = subprocess.run(
        [exe, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout + done.stderr == "", done.stdout + done.stderr  # no lint remarks either
