"""heartwire.spark on a local SparkSession: freshness, outages and availability, both engines.

One session for the whole run (local[2]); skipped only when Java is missing
(or on Python < 3.10, where PySpark 4.1+ does not install). Each engine is
checked against the other and against a plain-Python reading of the spec on random data with
nulls and edge values, on hand-made logs with exact rows, and against a live HeartbeatMonitor
(under a ManualClock) through the Parquet event log.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import heartwire as hw
from heartwire import spark as hs
from heartwire.eventlog import EventLog
from tests.spark.conftest import logged_monitor, run_monitor

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
UTC = dt.timezone.utc


def aware(t: dt.datetime) -> dt.datetime:
    """Spark hands timestamps back as naive local times: make them aware (UTC)."""
    return t.astimezone(UTC)


def ms_of(t: dt.datetime) -> int:
    return (aware(t) - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(milliseconds=1)


# -- freshness ----------------------------------------------------------------------------------


def freshness_ref(
    last: int | None, period: int | None, as_of: int | None, allowed: int
) -> tuple[str | None, int | None, int | None]:
    """The spec, read plainly (times in epoch ms)."""
    if period is None or period <= 0:
        return (None, None, None)
    if last is None:
        return ("pending", None, None)
    if as_of is None or not I64_MIN <= as_of - last <= I64_MAX:
        return (None, None, None)
    staleness = as_of - last
    missed = max(0, staleness // period)
    status = "alive" if missed == 0 else "late" if missed < allowed else "failed"
    return (status, missed, staleness)


def freshness_rows(n: int, seed: int) -> pa.Table:
    """Random rows: last-seen times as timestamps (µs, also before 1970) and as epoch ms with
    extremes; periods with nulls, zero, negatives and extremes; as_of with nulls."""
    rng = random.Random(seed)
    base = 1_700_000_000_000_000  # µs
    ids, last_ts, last_ms, periods, as_of = [], [], [], [], []
    edge_ms = [I64_MIN, I64_MIN + 1, -1, 0, 1, I64_MAX - 1, I64_MAX]
    edge_periods = [None, 0, -1, I64_MIN, 1, 999, 1000, 1001, I64_MAX]
    for i in range(n):
        ids.append(i)
        r = rng.random()
        if r < 0.08:
            last_ts.append(None)
        elif r < 0.12:
            last_ts.append(rng.randint(-(10**15), 10**15))  # around 1970, both signs
        else:
            last_ts.append(base + rng.randint(-(10**10), 10**10))
        if rng.random() < 0.05:
            last_ms.append(rng.choice(edge_ms))
        elif rng.random() < 0.08:
            last_ms.append(None)
        else:
            last_ms.append(base // 1000 + rng.randint(-(10**7), 10**7))
        if rng.random() < 0.15:
            periods.append(rng.choice(edge_periods))
        else:
            periods.append(rng.choice([1, 250, 1000, 60_000]) * rng.randint(1, 5))
        if rng.random() < 0.05:
            as_of.append(None)
        elif rng.random() < 0.05:
            as_of.append(rng.choice(edge_ms))
        else:
            as_of.append(base // 1000 + rng.randint(-(10**6), 10**7))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "last_ts": pa.array(last_ts, pa.timestamp("us", tz="UTC")),
            "last_ms": pa.array(last_ms, pa.int64()),
            "period": pa.array(periods, pa.int64()),
            "as_of": pa.array(as_of, pa.int64()),
        }
    )


def test_freshness_engines_agree_with_each_other_and_the_spec(spark: Any) -> None:
    table = freshness_rows(10_000, seed=6)
    df = spark.createDataFrame(table)
    as_of_ts = dt.datetime(2023, 11, 14, 22, 20, 0, 123456, tzinfo=UTC)

    def run(engine: str) -> list[tuple[Any, ...]]:
        out = df.select(
            "id",
            hs.freshness("last_ts", "period", "as_of", 3, engine=engine).alias("a"),
            hs.freshness("last_ms", "period", "as_of", 1, engine=engine).alias("b"),
            hs.freshness("last_ts", 1000, as_of_ts, 2, engine=engine).alias("c"),
        ).toArrow()  # Arrow, not Rows: much faster to collect
        return sorted((r["id"], *(tuple(r[k].values()) for k in "abc")) for r in out.to_pylist())

    rust, native = run("rust"), run("native")
    assert rust == native

    rows = table.to_pylist()
    as_of_ms = ms_of(as_of_ts)
    expected = []
    for row in rows:
        ts = row["last_ts"]
        last = None if ts is None else ms_of(ts)
        expected.append(
            (
                row["id"],
                freshness_ref(last, row["period"], row["as_of"], 3),
                freshness_ref(row["last_ms"], row["period"], row["as_of"], 1),
                freshness_ref(last, 1000, as_of_ms, 2),
            )
        )
    assert rust == sorted(expected)
    # the data reached every branch
    statuses = {r[1][0] for r in rust} | {r[2][0] for r in rust} | {r[3][0] for r in rust}
    assert statuses == {"alive", "late", "failed", "pending", None}
    assert any(r[2][1] is None and r[2][0] is None for r in rust)


def test_freshness_hand_rows(spark: Any) -> None:
    t = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    df = spark.createDataFrame(
        [
            (t, 1000),  # as_of t + 2.5 s: 2 missed
            (t + dt.timedelta(seconds=2), 1000),  # 0.5 s: alive
            (t + dt.timedelta(seconds=1, milliseconds=500), 1000),  # 1 s exactly: late
            (None, 1000),  # pending
            (t, None),  # no period
            (None, 0),  # non-positive period beats pending
            (t + dt.timedelta(seconds=10), 1000),  # from the future: alive, negative
        ],
        "last_seen timestamp, period long",
    )
    as_of = t + dt.timedelta(seconds=2, milliseconds=500)
    expected = [
        ("failed", 2, 2500),
        ("alive", 0, 500),
        ("late", 1, 1000),
        ("pending", None, None),
        (None, None, None),
        (None, None, None),
        ("alive", 0, -7500),
    ]
    for engine in ("rust", "native"):
        col = hs.freshness("last_seen", "period", as_of=as_of, allowed_misses=2, engine=engine)
        got = [tuple(r.f) for r in df.select(col.alias("f")).collect()]
        assert got == expected, engine
        # epoch ms give the same rows as timestamps
        ms = df.select(
            hs.freshness(
                (F.unix_millis("last_seen")), "period", ms_of(as_of), 2, engine=engine
            ).alias("f")
        ).collect()
        assert [tuple(r.f) for r in ms] == expected, engine
    assert df.select(hs.freshness("last_seen", 1).alias("f")).schema[0].dataType == (
        hs.FRESHNESS_TYPE
    )


def test_freshness_as_of_defaults_to_now(spark: Any) -> None:
    now = dt.datetime.now(UTC)
    df = spark.createDataFrame([(now - dt.timedelta(hours=1),)], "last_seen timestamp")
    for engine in ("rust", "native"):
        (row,) = df.select(hs.freshness("last_seen", 60_000, engine=engine).alias("f")).collect()
        assert row.f.status == "failed"
        assert 60 <= row.f.missed <= 62
        assert 3_600_000 <= row.f.staleness_ms < 3_700_000


def test_freshness_bad_arguments() -> None:
    with pytest.raises(ValueError, match="engine"):
        hs.freshness("a", 1, engine="python")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allowed_misses"):
        hs.freshness("a", 1, allowed_misses=0)
    with pytest.raises(TypeError, match="allowed_misses"):
        hs.freshness("a", 1, allowed_misses=True)
    with pytest.raises(TypeError, match="period_ms"):
        hs.freshness("a", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="as_of"):
        hs.freshness("a", 1, as_of=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="last_seen"):
        hs.freshness(3, 1)  # type: ignore[arg-type]


# -- outages and availability: hand-made logs --------------------------------------------------

S = 1_700_000_000_000  # a window start, epoch ms


def outage_rows(df: Any) -> list[tuple[Any, ...]]:
    rows = (tuple(aware(v) if isinstance(v, dt.datetime) else v for v in r) for r in df.collect())
    return sorted(rows)


def both(fn: Any, *args: Any, **kw: Any) -> list[tuple[Any, ...]]:
    """The rows of every engine, checked to be the same."""
    rust = outage_rows(fn(*args, engine="rust", **kw))
    for engine in ("rust-grouped", "native"):
        assert outage_rows(fn(*args, engine=engine, **kw)) == rust, engine
    return rust


def test_outages_hand_made_log_with_window_edges(spark: Any) -> None:
    # period 1 s, allowed 2; window [S + 10 s, S + 40 s)
    beats = {
        # down at start: last beat before it at S+5 (failed S+7), back at S+12;
        # then a gap of exactly 2 periods (on time) and one of exactly 4 (missed 3)
        "a": [0, 3, 5, 12, 14, 18, 19],
        # expected from start: first beat at S+13.5, failed at S+12, missed 3
        "b": [13.5, 14, 15],
        # never heard in the window: down since S+3 + 2 (clipped), open at the end
        "c": [1, 3],
        # fine until S+38.5; end S+40 is before its deadline S+40.5: no outage
        "d": [*range(10, 39), 38.5],
        # beats after the end and an outage ending exactly at start are ignored
        "e": [5, 8, 10, 11, 40, 45],
        # open at the end: last beat S+30, failed at S+32, at S+40 missed 9
        "f": [10, 11, 30],
    }
    rows = [(t, S + round(x * 1000)) for t, xs in beats.items() for x in xs]
    df = spark.createDataFrame(rows, "topic string, ts long")
    got = both(hs.outages, df, period_ms=1000, allowed_misses=2, start=S + 10_000, end=S + 40_000)
    assert got == [
        ("a", S + 10_000, S + 12_000, 6, False),
        ("a", S + 16_000, S + 18_000, 3, False),
        ("a", S + 21_000, S + 40_000, 20, True),
        ("b", S + 12_000, S + 13_500, 3, False),
        ("b", S + 17_000, S + 40_000, 24, True),
        ("c", S + 10_000, S + 40_000, 36, True),
        ("e", S + 13_000, S + 40_000, 28, True),
        ("f", S + 13_000, S + 30_000, 18, False),
        ("f", S + 32_000, S + 40_000, 9, True),
    ]
    # without start each topic's window begins at its first beat
    got = both(hs.outages, df, period_ms=1000, allowed_misses=2, end=S + 40_000)
    assert ("a", S + 7_000, S + 12_000, 6, False) in got
    assert [r for r in got if r[0] == "b"] == [("b", S + 17_000, S + 40_000, 24, True)]
    assert ("c", S + 5_000, S + 40_000, 36, True) in got


def test_availability_hand_made_log(spark: Any) -> None:
    # window [S, S + 100 s), period 1 s, allowed 1
    beats = {
        # down at start (last beat S-10: failed S-9) until S+10; an outage S+21..S+30;
        # open from S+91
        "a": [-10, *range(10, 21), *range(30, 91)],
        "b": list(range(0, 100)),  # always up
    }
    rows = [
        (t, dt.datetime.fromtimestamp((S + x * 1000) / 1000, UTC))
        for t, xs in beats.items()
        for x in xs
    ]
    df = spark.createDataFrame(rows, "topic string, ts timestamp")
    start = dt.datetime.fromtimestamp(S / 1000, UTC)
    end = start + dt.timedelta(seconds=100)
    got = both(hs.availability, df, period_ms=1000, start=start, end=end)
    down = 10 + 9 + 9  # clipped at start, complete, open at end
    assert got == [
        ("a", start, end, 100.0 * (100 - down) / 100, 3, float(down), 9.0, (100 - down) / 2, 0.0),
        ("b", start, end, 100.0, 0, 0.0, None, None, 0.0),
    ]
    out = both(hs.outages, df, period_ms=1000, start=start, end=end)
    assert [r[1:] for r in out] == [
        (start, start + dt.timedelta(seconds=10), 19, False),
        (start + dt.timedelta(seconds=21), start + dt.timedelta(seconds=30), 9, False),
        (start + dt.timedelta(seconds=91), end, 9, True),
    ]


def test_outages_period_column_and_bad_arguments(spark: Any) -> None:
    df = spark.createDataFrame(
        [("a", 0, 10_000), ("a", 9_000, 1000), ("a", 12_000, None), ("a", 30_000, 1000)],
        "topic string, ts long, period long",
    )
    got = both(hs.outages, df, period_ms="period", end=31_000)
    # 0 -> 9 s is within its 10 s period; 9 -> 12 s an outage; after 12 s nothing is judged
    assert got == [("a", 10_000, 12_000, 2, False)]
    with pytest.raises(ValueError, match="start must be before end"):
        hs.outages(df, period_ms=1000, start=5, end=5)
    with pytest.raises(ValueError, match="no column"):
        hs.outages(df, ts="time", period_ms=1000)
    with pytest.raises(ValueError, match="period_ms"):
        hs.outages(df, period_ms=0)
    with pytest.raises(TypeError, match="period_ms"):
        hs.availability(df, period_ms=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="engine"):
        hs.availability(df, period_ms=1, engine="pandas")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="events"):
        hs.outages([], period_ms=1)  # type: ignore[arg-type]


# -- outages and availability: random logs -----------------------------------------------------


def outages_ref(
    beats: list[tuple[int, int | None]], allowed: int, start: int | None, end: int
) -> tuple[int, list[tuple[int, int, int, bool, bool]]] | None:
    """The gap rule read plainly: (window start, [(from, to, missed, open, began)])."""
    # by time, then period (a null period first, as Spark and the kernel order them)
    beats = sorted((b for b in beats if b[0] < end), key=lambda b: (b[0], b[1] is not None, b[1]))
    if not beats:
        return None
    w0 = beats[0][0] if start is None else start
    out = []
    seq: list[tuple[int, int | None]] = []
    if start is not None and beats[0][0] >= start:
        seq.append((start, beats[0][1]))
    seq += beats
    pairs = [(a, b[0], False) for a, b in itertools.pairwise(seq)] + [(seq[-1], end, True)]
    for (t0, p), t1, is_open in pairs:
        if p is None or p <= 0 or t1 - t0 <= allowed * p or t1 <= w0:
            continue
        raw = t0 + allowed * p
        missed = sum(1 for k in range(1, (t1 - t0) // p + 2) if t0 + k * p < t1)
        out.append((max(raw, w0), t1, missed, is_open, raw >= w0))
    return w0, out


def random_log(seed: int, topics: int = 12) -> dict[str, list[tuple[int, int | None]]]:
    rng = random.Random(seed)
    log: dict[str, list[tuple[int, int | None]]] = {}
    for i in range(topics):
        t = S + rng.randint(-20_000, 20_000)
        beats: list[tuple[int, int | None]] = []
        for _ in range(rng.randint(1, 40)):
            p = rng.choice([500, 1000, 1000, 1000, 2000]) if rng.random() > 0.05 else None
            beats.append((t, p))
            r = rng.random()
            base = p or 1000
            if r < 0.6:
                t += rng.randint(1, base)
            elif r < 0.75:
                t += base * rng.randint(1, 5)  # on a deadline exactly
            elif r < 0.8:
                t += 0  # a duplicate
            else:
                t += rng.randint(base, 12 * base)
        log[f"t{i:02d}"] = beats
    return log


def test_outages_and_availability_engines_agree_on_random_logs(spark: Any) -> None:
    log = random_log(seed=61)
    rows = [(topic, ts, p) for topic, beats in log.items() for ts, p in beats]
    df = spark.createDataFrame(rows, "topic string, ts long, period long").cache()
    cases: list[tuple[int, int | None, int]] = [
        (1, S, S + 60_000),
        (2, S + 5_000, S + 30_000),
        (3, None, S + 80_000),
    ]
    for allowed, start, end in cases:
        got = both(hs.outages, df, period_ms="period", allowed_misses=allowed, start=start, end=end)
        expected = []
        for topic, beats in log.items():
            ref = outages_ref(beats, allowed, start, end)
            if ref is not None:
                expected += [(topic, *o[:4]) for o in ref[1]]
        assert got == sorted(expected), (allowed, start, end)
        if start == S:
            first_case = got
        assert any(r[4] for r in got) and any(not r[4] for r in got)

        avail = both(
            hs.availability, df, period_ms="period", allowed_misses=allowed, start=start, end=end
        )
        by_topic = {r[0]: r for r in avail}
        assert set(by_topic) == {t for t, b in log.items() if min(x[0] for x in b) < end}
        for topic, row in by_topic.items():
            ref = outages_ref(log[topic], allowed, start, end)
            assert ref is not None
            w0, outs = ref
            window = end - w0
            down = sum(o[1] - o[0] for o in outs)
            assert row[1:3] == (w0, end)
            assert row[3] == pytest.approx(100.0 * (window - down) / window)
            assert row[4] == len(outs) and row[5] == pytest.approx(down / 1000)
    # timestamps give the same outages as epoch ms (the first case again; the native engine
    # on timestamps is in the hand-made tests)
    as_ts = df.select("topic", F.timestamp_millis("ts").alias("ts"), "period")
    ts_rows = outage_rows(hs.outages(as_ts, period_ms="period", start=S, end=S + 60_000))
    assert [(r[0], ms_of(r[1]), ms_of(r[2]), *r[3:]) for r in ts_rows] == first_case
    df.unpersist()


# -- consistency with the live monitor, through the event log ------------------------------


class Recorder(hw.SubscriberListener):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_failed(self, event: hw.Failed) -> None:
        self.events.append(event)

    def on_resumed(self, event: hw.Resumed) -> None:
        self.events.append(event)


def test_outages_match_the_monitor_through_the_event_log(spark: Any, tmp_path: Path) -> None:
    t0 = 1_720_000_000  # Unix time of the manual clock's zero
    period, allowed, duration = 1.0, 2, 60.0
    rng = random.Random(7)
    schedule: list[tuple[float, str]] = []
    topics = [f"svc.t{i}" for i in range(10)]
    for topic in topics:
        t = rng.choice([0.0, 0.5, 1.99, 2.0, 3.0, 4.2])  # the first beat; later than 2 s fails
        while t < duration:
            schedule.append((t, topic))
            r = rng.random()
            gap = (
                rng.randint(1, 100) / 100  # on time
                if r < 0.7
                else float(rng.randint(1, 6))  # on a deadline exactly
                if r < 0.8
                else rng.randint(201, 1200) / 100  # an outage
            )
            t = round(t + gap, 2)
    schedule.sort()

    clock = hw.ManualClock()
    log = EventLog(tmp_path / "events", roll_seconds=10, clock=clock)
    recorder = Recorder()
    mon = hw.HeartbeatMonitor(
        None,
        "svc.>",
        period=period,
        allowed_misses=allowed,
        grace=0,
        clock=clock,
        wall_offset=t0,
        listeners=[log, recorder],
    )
    for topic in topics:
        mon.expect(topic)
    mon.start()
    for at, topic in schedule:
        clock.set(at)
        assert mon.beat(topic)
    clock.set(duration)
    mon.drain()
    statuses = {s.topic: s for s in mon.statuses()}
    mon.stop()
    log.close()

    # the monitor's outages: failed ... resumed streaks, and those still failed at the end
    expected = []
    since: dict[str, float] = {}
    for ev in recorder.events:
        if isinstance(ev, hw.Failed):
            since.setdefault(ev.topic, ev.since)
        else:
            expected.append((ev.topic, since.pop(ev.topic), ev.at, ev.missed, False))
    for topic, down_from in since.items():
        expected.append((topic, down_from, duration, statuses[topic].missed, True))
    expected_ms = sorted(
        (t, round((t0 + a) * 1000), round((t0 + b) * 1000), m, o) for t, a, b, m, o in expected
    )
    assert len(expected_ms) >= 10 and any(r[4] for r in expected_ms)

    events = hs.read_events(spark, str(tmp_path / "events"))
    start = dt.datetime.fromtimestamp(t0, UTC)
    end = dt.datetime.fromtimestamp(t0 + duration, UTC)
    got = both(hs.outages, events, period_ms=1000, allowed_misses=allowed, start=start, end=end)
    assert [(t, ms_of(a), ms_of(b), m, o) for t, a, b, m, o in got] == expected_ms

    # the log's own failed/resumed rows say the same as the listener's events
    resumed = events.where("kind = 'resumed'").select("topic", "ts", "missed").collect()
    assert sorted((r.topic, ms_of(r.ts), r.missed) for r in resumed) == sorted(
        (t, b, m) for t, _, b, m, o in expected_ms if not o
    )
    avail = both(
        hs.availability, events, period_ms=1000, allowed_misses=allowed, start=start, end=end
    )
    assert {r[0] for r in avail} == set(topics)
    for row in avail:
        down = sum(b - a for t, a, b, _, _ in expected_ms if t == row[0]) / 1000
        assert row[5] == pytest.approx(down)


# -- TIMESTAMP_NTZ (issue 14, item 19) -----------------------------------------------------------

# 2024-03-10 02:00 to 03:00 does not exist in New York (clocks jump 02:00 -> 03:00): as a wall
# time in the session's zone, NTZ values there would shift by an hour.
NTZ_BASE = 1_710_035_990_000  # 2024-03-10T01:59:50Z, epoch ms


def ntz_ms(value: Any) -> Any:
    """An NTZ value (a naive datetime) read as UTC wall-clock time: epoch ms."""
    if isinstance(value, dt.datetime):
        assert value.tzinfo is None, value
        return ms_of(value.replace(tzinfo=UTC))
    return value


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_timestamp_ntz_means_utc_wall_clock_in_every_engine(spark: Any, zone: str) -> None:
    """NTZ times mean UTC wall-clock time whatever the session's time zone: every engine gives
    the rows of the same times as epoch ms, and NTZ results come back as the same wall times."""
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        b = NTZ_BASE
        beats = {"a": [0, 1000, 2000, 9000, 10_000], "b": [0, 5000], "c": [3000]}
        rows = [(t, b + x) for t, xs in beats.items() for x in xs]
        as_ms = spark.createDataFrame(rows, "topic string, ts long")
        as_ntz = as_ms.select(
            "topic",
            F.timestamp_add("MILLISECOND", "ts", F.lit("1970-01-01").cast("timestamp_ntz")).alias(
                "ts"
            ),
        )
        assert as_ntz.schema["ts"].dataType.typeName() == "timestamp_ntz"
        kw: dict[str, Any] = dict(period_ms=1000, start=b, end=b + 12_000)
        for fn in (hs.outages, hs.availability):
            want = sorted(tuple(r) for r in fn(as_ms, engine="rust", **kw).collect())
            assert want, fn.__name__
            for engine in ("rust", "rust-grouped", "native"):
                got = fn(as_ntz, engine=engine, **kw)
                for field in got.schema.fields[1:3]:
                    assert field.dataType.typeName() == "timestamp_ntz", (engine, field)
                got_ms = sorted(tuple(ntz_ms(v) for v in r) for r in got.collect())
                assert got_ms == want, (fn.__name__, engine, zone)
        # freshness: NTZ last_seen against an instant
        as_of = dt.datetime.fromtimestamp((b + 4500) / 1000, UTC)
        for engine in ("rust", "native"):
            f_ntz = as_ntz.select(
                "topic", "ts", hs.freshness("ts", 1000, as_of, engine=engine).alias("f")
            )
            f_ms = as_ms.select(
                "topic", "ts", hs.freshness("ts", 1000, ms_of(as_of), engine=engine).alias("f")
            )
            got_f = sorted((r.topic, ntz_ms(r.ts), tuple(r.f)) for r in f_ntz.collect())
            want_f = sorted((r.topic, r.ts, tuple(r.f)) for r in f_ms.collect())
            assert got_f == want_f, (engine, zone)
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)


def test_time_and_period_columns_of_other_types_are_named_errors(spark: Any) -> None:
    df = spark.createDataFrame([("a", "x", 1.5)], "topic string, ts string, p double")
    with pytest.raises(TypeError, match="ts: column 'ts' must be a timestamp"):
        hs.outages(df, period_ms=1000)
    ok = spark.createDataFrame([("a", 1, 1.5)], "topic string, ts long, p double")
    with pytest.raises(TypeError, match="period_ms: column 'p' must be an integer"):
        hs.availability(ok, period_ms="p")


# -- topics that never beat, unmonitored time (issue 14, items 21, 15, 13) ----------------------

T1 = 1_730_000_000  # Unix time of the manual clock's zero in these logs


def at(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(T1 + seconds, UTC)


def avail_rows(df: Any) -> dict[str, tuple[Any, ...]]:
    return {
        r.topic: (r.uptime_pct, r.outages, r.downtime, r.unmonitored)
        for r in df.select("topic", "uptime_pct", "outages", "downtime", "unmonitored").collect()
    }


def test_expected_topic_that_never_beat_is_down_not_missing(spark: Any, tmp_path: Path) -> None:
    run_monitor(
        tmp_path / "ev",
        {"svc.a": [x / 2 for x in range(120)]},
        until=60,
        expect=("svc.x",),
        wall_offset=T1,
    )
    events = hs.read_events(spark, str(tmp_path / "ev"))
    kw: dict[str, Any] = dict(period_ms=1000, start=at(10), end=at(60))
    for engine in ("rust", "rust-grouped", "native"):
        got = avail_rows(hs.availability(events, engine=engine, **kw))
        assert "svc.x" in got, f"{engine}: the topic that never beat is missing"
        assert got["svc.x"] == (0.0, 1, 50.0, 0.0), engine
        assert got["svc.a"] == (100.0, 0, 0.0, 0.0), engine
        outs = [tuple(r) for r in hs.outages(events, engine=engine, **kw).collect()]
        assert [(r[0], ms_of(r[1]), ms_of(r[2]), r[4]) for r in outs] == [
            ("svc.x", ms_of(at(10)), ms_of(at(60)), True)
        ], engine


def test_a_topic_that_never_beat_is_down_from_the_deadline_it_missed_whatever_the_grace(
    spark: Any, tmp_path: Path
) -> None:
    """With grace the monitor's first deadline for a topic it expects is ``expect + allowed *
    period + grace``: the failed rows' ``since``. The analysis cannot know the grace, so it takes
    that moment as it is: the topic is judged from it and down from it (0 %), in every engine,
    not from ``ts - missed * period`` (which is off by the grace)."""
    path = tmp_path / "ev"
    clock = hw.ManualClock()
    log = EventLog(path, roll_seconds=30, clock=clock)
    mon = hw.HeartbeatMonitor(
        None, "svc.>", period=1.0, allowed_misses=1, grace=0.25, clock=clock, wall_offset=T1
    )
    mon.add_listener(log)
    mon.start()
    for k in range(40):  # svc.a beats every 0.5 s; svc.x is expected at 5.5 s and never beats
        clock.set(k / 2)
        if k == 11:
            mon.expect("svc.x")
        assert mon.beat("svc.a")
    clock.set(20.0)
    assert mon.drain(timeout=5.0)
    mon.stop()
    log.close()
    events = hs.read_events(spark, str(path))
    since = events.where("kind = 'failed' AND topic = 'svc.x'").agg(F.min("since")).first()[0]
    assert aware(since) == at(6.75)  # 5.5 + 1 period + 0.25 grace
    kw: dict[str, Any] = dict(period_ms=1000, start=at(0), end=at(20))
    for engine in ("rust", "rust-grouped", "native"):
        outs = [tuple(r) for r in hs.outages(events, engine=engine, **kw).collect()]
        assert [(r[0], ms_of(r[1]), ms_of(r[2]), r[4]) for r in outs] == [
            ("svc.x", ms_of(at(6.75)), ms_of(at(20)), True)
        ], engine
        rows = {r.topic: r for r in hs.availability(events, engine=engine, **kw).collect()}
        x = rows["svc.x"]
        assert (ms_of(x.window_start), x.uptime_pct, x.downtime) == (
            ms_of(at(6.75)),
            0.0,
            13.25,
        ), engine
        assert rows["svc.a"].uptime_pct == 100.0, engine


def test_time_the_monitor_did_not_run_is_not_downtime(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "ev"
    every = [x / 2 for x in range(400)]
    # first run 20..40 s (stopped), a second 50..70 that crashes (no stopped row; its last row
    # is at 65), a third from 80 to 100
    run_monitor(
        path, {"svc.a": [t for t in every if 20 <= t < 40]}, start_at=20, until=40, wall_offset=T1
    )
    beats_2 = {"svc.a": [t for t in every if 50 <= t <= 65]}
    run_monitor(path, beats_2, start_at=50, until=65, crash=True, wall_offset=T1)
    run_monitor(
        path, {"svc.a": [t for t in every if 80 <= t < 100]}, start_at=80, until=100, wall_offset=T1
    )
    events = hs.read_events(spark, str(path))
    kw: dict[str, Any] = dict(period_ms=1000, start=at(0), end=at(100))
    for engine in ("rust", "rust-grouped", "native"):
        got = avail_rows(hs.availability(events, engine=engine, **kw))
        # watched 20..40, 50..65, 80..100; svc.a, first heard at 20 s (its window's start),
        # beat all along: never down, and 40..50 and 65..80 not watched
        assert got == {"svc.a": (100.0, 0, 0.0, 25.0)}, engine
        (row,) = hs.availability(events, engine=engine, **kw).collect()
        assert (aware(row.window_start), aware(row.window_end)) == (at(20), at(100))
        assert hs.outages(events, engine=engine, **kw).count() == 0, engine


def test_periods_near_the_long_limit_give_the_same_rows_in_every_engine(spark: Any) -> None:
    # allowed 2 x 2^62 overflows a long: no gap exceeds that allowance (both engines)
    huge = 2**62
    rows = [("a", 0, huge), ("a", 5000, huge), ("b", 0, 1000), ("b", 5000, 1000)]
    df = spark.createDataFrame(rows, "topic string, ts long, period long")
    got = both(hs.outages, df, period_ms="period", allowed_misses=2, end=10_000)
    assert got == [("b", 2000, 5000, 4, False), ("b", 7000, 10_000, 4, True)]
    got = both(hs.outages, df, period_ms=huge, allowed_misses=2, end=10_000)
    assert got == []


def test_monitored_spans_from_starts_stops_crashes_and_pauses(spark: Any) -> None:
    rows = [
        ("received", "old", 1000, None),  # a log from before started rows: its own run
        ("received", "old", 4000, None),
        ("started", "svc.>", 10_000, None),
        ("received", "a", 11_000, None),
        ("paused", "svc.>", 15_000, 13_000),  # not watching 13..15 s
        ("stopped", "svc.>", 20_000, None),
        ("started", "svc.>", 30_000, None),
        ("received", "a", 34_000, None),  # a crash: covered up to its last row
        ("started", "svc.>", 40_000, None),
        ("received", "a", 41_000, None),
    ]
    df = spark.createDataFrame(rows, "kind string, topic string, ts long, since long")
    assert hs.monitored_spans(df) == [
        (1000, 4000),
        (10_000, 13_000),
        (15_000, 20_000),
        (30_000, 34_000),
        (40_000, 41_000),
    ]
    assert hs.monitored_spans(df, start=12_000, end=33_000) == [
        (12_000, 13_000),
        (15_000, 20_000),
        (30_000, 33_000),
    ]
    with pytest.raises(ValueError, match="kind"):
        hs.monitored_spans(df.drop("kind"))
    # spans found once can be handed to outages/availability (the report does): same rows
    kw: dict[str, Any] = dict(period_ms=1000, start=5000, end=45_000)
    spans = hs.monitored_spans(df)
    for fn in (hs.outages, hs.availability):
        assert sorted(fn(df, **kw, monitored=spans).collect()) == sorted(fn(df, **kw).collect())
    with pytest.raises(ValueError, match=r"monitored must be sorted.*\(5, 1\)"):
        hs.outages(df, **kw, monitored=[(5, 1)])
    with pytest.raises(TypeError, match=r"monitored must be a list.*str"):
        hs.outages(df, **kw, monitored="all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="monitored: only for an event log"):
        hs.outages(df.drop("kind"), **kw, monitored=spans)


def test_a_summary_log_gives_the_rows_of_a_full_log(spark: Any, tmp_path: Path) -> None:
    """EventLog(beats="summary") keeps a row per topic and file window instead of one per beat:
    outages and availability are the same as from the full log (allowed >= the monitor's)."""
    rng = random.Random(14)
    clock = hw.ManualClock()
    full = EventLog(tmp_path / "full", roll_seconds=10, clock=clock)
    lean = EventLog(tmp_path / "lean", roll_seconds=10, clock=clock, beats="summary")
    mon = logged_monitor(clock, T1, [full, lean])
    mon.expect("svc.never")
    mon.start()
    schedule = []
    for i in range(6):
        t = rng.choice([0.0, 0.4, 3.0])
        while t < 58:
            schedule.append((t, f"svc.t{i}"))
            t = round(
                t + (rng.randint(1, 99) / 100 if rng.random() < 0.85 else rng.randint(2, 9)), 2
            )
    for t, topic in sorted(schedule):
        clock.set(t)
        mon.beat(topic)
    clock.set(60.0)
    mon.drain()
    mon.stop()
    full.close()
    lean.close()
    a = hs.read_events(spark, str(tmp_path / "full"))
    b = hs.read_events(spark, str(tmp_path / "lean"))
    assert b.where("kind = 'received'").count() == 0
    # a row per topic and 10 s window, not per beat
    assert b.where("kind = 'beats'").count() <= 6 * 6 < a.where("kind = 'received'").count() / 5
    for allowed in (1, 2):
        kw: dict[str, Any] = dict(period_ms=1000, allowed_misses=allowed, start=at(5), end=at(60))
        want = both(hs.outages, a, **kw)
        assert any(r[0] == "svc.never" for r in want) and len(want) > 8
        assert both(hs.outages, b, **kw) == want, allowed
        assert both(hs.availability, b, **kw) == both(hs.availability, a, **kw), allowed


# -- the kernels' Arrow input (rust/python/arrow_in.rs) and the session builder -----------------


def test_kernels_read_arrays_chunked_arrays_and_lists_alike() -> None:
    from heartwire import _core

    ts = [0, 1000, 5000, None, 6000]  # a gap from 1 s to 5 s: one outage
    want = _core.availability_kernel(pa.array(ts), 1000, 1, 7000, start_ms=0)
    assert want is not None and want[3] == 1, want
    chunked = pa.chunked_array([ts[:2], ts[2:]], type=pa.int64())
    listed = [pa.array(ts[:2]), pa.array(ts[2:], type=pa.int64())]
    stamps = pa.array([None if t is None else t * 1000 for t in ts], type=pa.timestamp("us"))
    for arg in (chunked, listed, stamps):
        assert _core.availability_kernel(arg, 1000, 1, 7000, start_ms=0) == want, arg
    rows = _core.partition_kernel(
        pa.chunked_array([["a", "a"], ["a", None, "a"]]), chunked, 1000, 1, 7000, start_ms=0
    )
    assert rows.column("topic").to_pylist() == ["a"]
    avail = _core.partition_kernel(pa.array(["a"] * 5), pa.array(ts), 1000, 1, 7000, 0, True)
    assert avail.to_pylist() == [dict(zip(avail.schema.names, ["a", *want], strict=True))]
    assert avail.schema.field("mttr_ms").nullable and not avail.schema.field("uptime_pct").nullable
    out = _core.partition_kernel(pa.array(["a"] * 5), pa.array(ts), 1000, 1, 7000, 0)
    start, one = _core.outages_kernel(
        listed, [pa.array([1000] * 2), pa.array([1000] * 3)], 1, 7000, 0
    )
    assert start == 0 and out.schema.names == ["topic", *one.schema.names]
    assert one.to_pylist() == out.drop_columns(["topic"]).to_pylist()
    assert one.column("down_from_ms").to_pylist() == [2000] and one.num_rows == 1
    last = pa.array([0, None, 4500])
    fresh = _core.freshness_kernel(last, 1000, 5000).to_pylist()
    assert [r["status"] for r in fresh] == ["failed", "pending", "alive"], fresh
    per_row = _core.freshness_kernel(last, pa.array([1000] * 3), pa.chunked_array([[5000] * 3]))
    assert per_row.to_pylist() == fresh


def test_kernels_name_the_argument_of_a_bad_arrow_input() -> None:
    from heartwire import _core

    with pytest.raises(TypeError, match=r"topics must be an Arrow string array, got one of type"):
        _core.partition_kernel(pa.array([1]), pa.array([1]), 1000, 1, 10)
    with pytest.raises(TypeError, match=r"ts must be an Arrow timestamp or integer array"):
        _core.availability_kernel(pa.array(["x"]), 1000, 1, 10)
    with pytest.raises(TypeError, match=r"ts must be an Arrow array.*got list"):
        _core.availability_kernel([pa.array([1]), 2], 1000, 1, 10)
    with pytest.raises(ValueError, match=r"period_ms arrays must have the chunk lengths of topics"):
        _core.partition_kernel(pa.array(["a"]), pa.array([1]), [pa.array([1, 2])], 1, 10)
    with pytest.raises(TypeError, match=r"period_ms must be an int, None or Arrow arrays like ts"):
        _core.outages_kernel(pa.array([1]), 1.5, 1, 10)
    with pytest.raises(ValueError, match=r"as_of arrays must have the chunk lengths of last_seen"):
        _core.freshness_kernel(pa.array([1, 2]), 1000, pa.array([5000]))
    with pytest.raises(ValueError, match=r"last_seen must be one Arrow array, got 2 chunks"):
        _core.freshness_kernel(pa.chunked_array([[1], [2]]), 1000, 5000)


def test_session_builder_checks_its_counts_before_spark_starts() -> None:
    from heartwire._spark_session import build_session

    with pytest.raises(ValueError, match=r"shuffle_partitions must be >= 1, got 0"):
        build_session("x", shuffle_partitions=0)
    with pytest.raises(TypeError, match=r"parallelism must be an int or None, got str '2'"):
        build_session("x", parallelism="2")  # type: ignore[arg-type]


def test_tests_session_has_the_builders_settings(spark: Any) -> None:
    conf = spark.conf
    assert spark.sparkContext.appName == "heartwire-tests"
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.ui.showConsoleProgress") == "false"
    assert conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.sparkContext.defaultParallelism == 2


def test_read_events_merges_logs_written_before_the_reason_column(
    spark: Any, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    from heartwire.eventlog import SCHEMA

    old_schema = pa.schema([f for f in SCHEMA if f.name != "reason"])
    ts = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
    old = {name: [None] for name in old_schema.names} | {
        "kind": ["failed"],
        "topic": ["svc.old"],
        "ts": [ts],
        "missed": [1],
    }
    new = {name: [None] for name in SCHEMA.names} | {
        "kind": ["failed"],
        "topic": ["svc.new"],
        "ts": [ts],
        "missed": [0],
        "reason": ["db"],
    }
    for day, rows, schema in (("2024-03-01", old, old_schema), ("2024-03-02", new, SCHEMA)):
        (tmp_path / f"date={day}").mkdir()
        pq.write_table(
            pa.Table.from_pydict(rows, schema=schema), tmp_path / f"date={day}/a.parquet"
        )
    got = {r.topic: r.reason for r in hs.read_events(spark, str(tmp_path)).collect()}
    assert got == {"svc.old": None, "svc.new": "db"}
