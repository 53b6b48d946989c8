"""The event log and the alerting policy (issue 17): failed and resumed rows carry the marks
(``silenced``, ``suppressed_by``), the alert released when a silence ends is a row, a topic
that starts or stops flapping is a ``flapping`` / ``settled`` row, and logs written before
these columns still read (as null) beside new ones. Manual clock, exact rows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import heartwire as hw
from heartwire.eventlog import SCHEMA, EventLog

T0 = int(dt.datetime(2024, 3, 1, 12, tzinfo=dt.timezone.utc).timestamp())


def ts(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(T0 + seconds, tz=dt.timezone.utc)


def rows(path: Path, beats: bool = False) -> list[dict[str, object]]:
    """The rows written, by time then topic: the topics' state changes (and beats)."""
    files = sorted(path.rglob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
    out = table.sort_by([("ts", "ascending"), ("topic", "ascending")]).to_pylist()
    skip = ("started", "stopped") if beats else ("started", "stopped", "received", "beats")
    return [r for r in out if r["kind"] not in skip]


def marks(r: dict[str, object]) -> tuple[object, ...]:
    return (r["kind"], r["topic"], r["ts"], r["missed"], r["silenced"], r["suppressed_by"])


def test_marks_and_released_alerts_are_logged(tmp_path: Path) -> None:
    clock = hw.ManualClock()
    log = EventLog(tmp_path, wall_offset=T0, clock=clock)
    mon = hw.HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0.0, clock=clock, wall_offset=T0, listeners=[log]
    )
    for topic in ("svc.db", "svc.api", "svc.cache"):
        mon.expect(topic)
    mon.depends("svc.api", on="svc.db")
    mon.silence("svc.cache", duration=1.8)
    mon.start()
    clock.set(1.5)  # all fail at 1.0: api suppressed, cache silenced
    mon.beat("svc.db")  # db back: api released at 1.5
    clock.set(1.9)  # the silence ends at 1.8: cache released
    mon.beat_many(["svc.api", "svc.cache"])
    assert mon.drain()
    mon.stop()
    log.close()
    got = [marks(r) for r in rows(tmp_path)]
    assert got == [
        ("failed", "svc.api", ts(1.0), 1, False, "svc.db"),
        ("failed", "svc.cache", ts(1.0), 1, True, None),
        ("failed", "svc.db", ts(1.0), 1, False, None),
        ("failed", "svc.api", ts(1.5), 1, False, None),  # released: since stays 1.0
        ("resumed", "svc.db", ts(1.5), 1, False, None),
        ("failed", "svc.cache", ts(1.8), 1, False, None),  # released at the silence's end
        ("resumed", "svc.api", ts(1.9), 1, False, None),
        ("resumed", "svc.cache", ts(1.9), 1, False, None),
    ]
    released = [r for r in rows(tmp_path) if r["kind"] == "failed" and r["ts"] != r["since"]]
    assert [(r["topic"], r["since"]) for r in released] == [
        ("svc.api", ts(1.0)),
        ("svc.cache", ts(1.0)),
    ]


def test_flapping_start_and_settle_are_rows(tmp_path: Path) -> None:
    clock = hw.ManualClock()
    log = EventLog(tmp_path, wall_offset=T0, clock=clock)
    mon = hw.HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0.0, clock=clock, wall_offset=T0, listeners=[log],
        flap_threshold=2, flap_window=10.0,
    )  # fmt: skip
    mon.expect("svc.worker")
    mon.start()
    for n in range(3):
        clock.set(n * 1.5 + 1.1)
        clock.set(n * 1.5 + 1.5)
        mon.beat("svc.worker")
    clock.set(16.0)  # down since 5.5 (held back), settled at 15.5 with a failed
    assert mon.drain()
    mon.stop()
    log.close()
    got = [(r["kind"], r["ts"], r["missed"]) for r in rows(tmp_path)]
    assert got[-4:-2] == [("failed", ts(4.0), 1), ("flapping", ts(4.5), 3)]  # 3 outages
    # settled, with where it stands: down (the same moment, in either order once sorted)
    assert sorted(got[-2:]) == [("failed", ts(15.5), 11), ("settled", ts(15.5), None)]
    flap = [r for r in rows(tmp_path) if r["kind"] in ("flapping", "settled")]
    assert all(r["silenced"] is None and r["suppressed_by"] is None for r in flap)


def test_old_logs_without_the_columns_read_beside_new_ones(tmp_path: Path) -> None:
    """Files written before ``reason`` and before the marks: read with the new ones (pyarrow's
    schema promotion here, Spark's mergeSchema in ``read_events``), the columns null there."""
    before_reason = pa.schema([f for f in SCHEMA if f.name not in ("reason", "silenced",
                                                                    "suppressed_by")])  # fmt: skip
    before_marks = pa.schema([f for f in SCHEMA if f.name not in ("silenced", "suppressed_by")])
    for name, schema in (("a", before_reason), ("b", before_marks)):
        table = pa.Table.from_pylist(
            [{"kind": "failed", "topic": f"svc.{name}", "ts": ts(1.0), "missed": 1}], schema
        )
        folder = tmp_path / "date=2024-03-01"
        folder.mkdir(exist_ok=True)
        pq.write_table(table, folder / f"{name}.parquet")
    with EventLog(tmp_path, wall_offset=T0) as log:
        log.on_failed(hw.Failed("svc.c", 1, 1.0, 1.0, wall_offset=T0, silenced=True))
    got = {r["topic"]: (r.get("reason"), r["silenced"], r["suppressed_by"]) for r in rows(tmp_path)}
    assert got == {
        "svc.a": (None, None, None),
        "svc.b": (None, None, None),
        "svc.c": (None, True, None),
    }


def test_a_mark_of_the_wrong_type_is_refused_alone(tmp_path: Path) -> None:
    with EventLog(tmp_path, wall_offset=T0) as log:
        log.on_failed(hw.Failed("svc.a", 1, 1.0, 1.0, wall_offset=T0, silenced=1))  # type: ignore[arg-type]
        log.on_failed(hw.Failed("svc.b", 1, 1.0, 1.0, wall_offset=T0, suppressed_by="svc.db"))
        assert log.refused == 1
    assert [(r["topic"], r["suppressed_by"]) for r in rows(tmp_path)] == [("svc.b", "svc.db")]


@pytest.mark.parametrize("beats", ["all", "summary"])
def test_beats_rows_have_no_marks(tmp_path: Path, beats: str) -> None:
    with EventLog(tmp_path, wall_offset=T0, beats=beats) as log:
        log.on_received(hw.Received("svc.a", 1, None, 1.0, wall_offset=T0))
    (row,) = rows(tmp_path, beats=True)
    assert (row["silenced"], row["suppressed_by"]) == (None, None)
