"""The outage analysis of an event log with the alerting policy's rows (issue 17): a silenced
or suppressed outage is an outage of its topic like any other, and the alert released when the
silence ends (a failed row off the deadlines) does not move where the outage began; flapping
rows are not beats. Through a real monitor on a ManualClock and its EventLog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import heartwire as hw
from heartwire import spark as hs
from heartwire.eventlog import EventLog

T0 = 1_720_000_000  # Unix time of the manual clock's zero


def ms(seconds: float) -> int:
    return round((T0 + seconds) * 1000)


def logged_run(path: Path) -> None:
    """svc.db silent from 0 to 3.2 s inside a silence ending at 2.5 s (failed 1.0 and 2.0
    silenced, released at 2.5, 3.0); svc.api depends on svc.db, silent from 0 to 3.4 s
    (suppressed at 1.0, released at 3.2 when svc.db resumes); svc.web beats all along, the
    others too once back."""
    clock = hw.ManualClock()
    log = EventLog(path, roll_seconds=10, clock=clock)
    mon = hw.HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0, clock=clock, wall_offset=T0, listeners=[log]
    )
    mon.depends("svc.api", on="svc.db")
    mon.silence("svc.db", duration=2.5)
    mon.start()
    mon.beat_many(["svc.db", "svc.api", "svc.web"])
    for step in range(1, 13):
        t = step * 0.5
        clock.set(t)
        mon.beat_many(["svc.web", "svc.db", "svc.api"] if t > 3.4 else ["svc.web"])
        if t == 3.0:
            clock.set(3.2)
            mon.beat("svc.db")
            clock.set(3.4)
            mon.beat("svc.api")
    assert mon.drain()
    assert mon.stats()["released"] == 2
    mon.stop()
    log.close()


@pytest.mark.parametrize("engine", ["rust", "native"])
def test_silenced_and_suppressed_outages_count_from_their_start(
    spark: Any, tmp_path: Path, engine: str
) -> None:
    logged_run(tmp_path)
    events = hs.read_events(spark, str(tmp_path))
    marked = {
        (r.topic, r.silenced, r.suppressed_by)
        for r in events.where("kind = 'failed' and (silenced or suppressed_by is not null)")
        .select("topic", "silenced", "suppressed_by")
        .collect()
    }
    assert marked == {("svc.db", True, None), ("svc.api", False, "svc.db")}
    got = sorted(
        (r.topic, r.down_from, r.down_to, r.missed, r.open)
        for r in hs.outages(
            events.withColumn("ts", events.ts.cast("timestamp")),
            period_ms=1000,
            start=ms(0),
            end=ms(6.0),
            engine=engine,  # type: ignore[arg-type]
        )
        .selectExpr(
            "topic",
            "unix_millis(down_from) as down_from",
            "unix_millis(down_to) as down_to",
            "missed",
            "open",
        )
        .collect()
    )
    # the released alerts (svc.db at 2.5, svc.api at 3.2) do not move the outages' start
    assert got == [
        ("svc.api", ms(1.0), ms(3.4), 3, False),
        ("svc.db", ms(1.0), ms(3.2), 3, False),
    ]


def test_the_report_tells_held_back_outages_apart(spark: Any, tmp_path: Path) -> None:
    """``heartwire report``: the silenced and suppressed outages are outages (in the
    availability), and the outages table says why their alerts were held back."""
    import datetime as dt

    from heartwire.cli import main
    from tests.spark.test_report import table

    logged_run(tmp_path / "events")
    iso = dt.datetime.fromtimestamp(T0, tz=dt.timezone.utc).isoformat()
    end = dt.datetime.fromtimestamp(T0 + 6, tz=dt.timezone.utc).isoformat()
    out = tmp_path / "r.html"
    args = ["report", "--events", str(tmp_path / "events"), "--start", iso, "--end", end]
    assert main([*args, "--out", str(out), "--period", "1"]) == 0
    rows = {r[0][0]: r for r in table(out.read_text(), "outages")}
    assert sorted(rows) == ["svc.api", "svc.db"]
    assert rows["svc.db"][-1][0] == "silenced"
    assert rows["svc.api"][-1][0] == "suppressed by svc.db"
    avail = {r[0][0]: r for r in table(out.read_text(), "availability")}
    assert {topic: r[2][0] for topic, r in avail.items()} == {
        "svc.api": "1",
        "svc.db": "1",
        "svc.web": "0",
    }
