"""``heartwire report``: HTML + PNG from an event log written by a monitor under a ManualClock.

The command runs in-process through ``cli.main`` and uses the session's SparkSession (the
``spark`` fixture in conftest.py). The figures in the HTML are checked against values worked
out by hand for the log and against :func:`heartwire.spark.availability` itself.
"""

from __future__ import annotations

import datetime as dt
import html
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

import heartwire as hw
from heartwire import report as rp
from heartwire import report_html as rh
from heartwire.cli import main
from heartwire.eventlog import EventLog
from tests.spark.conftest import logged_monitor, run_monitor

UTC = dt.timezone.utc
T0 = 1_767_225_600  # Unix time of the manual clock's zero: 2026-01-01T00:00:00Z
START = "2026-01-01T00:00:10Z"  # window [T0 + 10 s, T0 + 100 s): 90 s
END = "2026-01-01T00:01:40"  # no offset: UTC

# beat times (s on the monitor's clock), period 1 s, allowed misses 1
BEATS = {
    # an outage 21 -> 30 inside the window, down from 91 (last beat 90) to the end
    "svc.a": [*range(0, 21), *range(30, 91)],
    # always up
    "svc.b": list(range(0, 100)),
    # down at the start (last beat 5, failed at 6): clipped to 10 -> 15
    "svc.c": [*range(0, 6), *range(15, 100)],
    # heard only after the end: not in the report
    "svc.d": [100, 101, 102],
}

# (uptime %, outages, downtime s, MTTR s, MTBF s, not monitored s), by hand
EXPECTED = {
    "svc.a": (100 * 72 / 90, 2, 18.0, 9.0, 72 / 2, 0.0),  # MTTR: the complete 9 s outage only
    "svc.b": (100.0, 0, 0.0, None, None, 0.0),
    "svc.c": (100 * 85 / 90, 1, 5.0, None, None, 0.0),  # clipped: no MTTR, no failure began
}


@pytest.fixture(scope="module")
def event_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "events"
    clock = hw.ManualClock()
    log = EventLog(path, roll_seconds=30, clock=clock)
    mon = logged_monitor(clock, T0, [log])
    mon.start()
    for at, topic in sorted((t, topic) for topic, ts in BEATS.items() for t in ts):
        clock.set(float(at))
        assert mon.beat(topic)
    clock.set(103.0)
    assert mon.drain(timeout=5.0)
    assert mon.stats()["dropped"] == 0  # every event reached the log
    mon.stop()
    log.close()
    assert len(log.files) >= 4  # rolled every 30 s
    return path


class _Table(HTMLParser):
    """The rows of ``<table id=...>``: per cell its text and its data-value attribute."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id = table_id
        self.inside = False
        self.rows: list[list[tuple[str, str | None]]] = []
        self.cell: list[str] | None = None
        self.value: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.inside = dict(attrs).get("id") == self.table_id
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag == "td":
            self.cell, self.value = [], dict(attrs).get("data-value")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False
        elif self.inside and tag == "td" and self.cell is not None:
            self.rows[-1].append(("".join(self.cell), self.value))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def table(html_text: str, table_id: str) -> list[list[tuple[str, str | None]]]:
    parser = _Table(table_id)
    parser.feed(html_text)
    return [r for r in parser.rows if r]  # the header row has no td


def figure(value: str | None) -> float | None:
    return None if value in (None, "") else float(value)


def check_png(data: bytes) -> tuple[int, int]:
    """A well-formed PNG (signature, chunk CRCs, IHDR ... IEND): its width and height."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, kinds, size = 8, [], (0, 0)
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        kinds.append(kind)
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    return size


def test_report_writes_html_and_png_with_the_exact_figures(
    spark: Any, event_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    args = ["report", "--events", str(event_log), "--start", START, "--end", END]
    assert main([*args, "--out", str(out), "--period", "1"]) == 0
    assert "heartwire report:" in capsys.readouterr().err  # progress on stderr

    width, height = check_png((tmp_path / "report.png").read_bytes())
    assert width > 0 and height > 0
    text = out.read_text(encoding="utf-8")
    assert "data:image/png;base64," in text and 'href="report.png"' in text
    assert "2026-01-01 00:00:10.000Z" in text and "2026-01-01 00:01:40.000Z" in text

    rows = table(text, "availability")
    got = {
        r[0][0]: tuple(figure(v) for _, v in r[1:]) for r in rows
    }  # topic -> uptime, outages, downtime, mttr, mtbf
    assert list(got) == ["svc.a", "svc.c", "svc.b"]  # worst uptime first
    for topic, expected in EXPECTED.items():
        assert len(got[topic]) == len(expected), topic
        for value, want in zip(got[topic], expected, strict=False):
            assert value == (None if want is None else pytest.approx(want, rel=1e-12)), topic
    # what the page shows is what the library computes, to the last bit
    from heartwire import spark as hs

    lib = hs.availability(
        hs.read_events(spark, str(event_log)),
        period_ms=1000,
        start=rp.parse_time(START, "start"),
        end=rp.parse_time(END, "end"),
    ).collect()
    assert {
        r.topic: (r.uptime_pct, float(r.outages), r.downtime, r.mttr, r.mtbf, r.unmonitored)
        for r in lib
    } == got
    texts = {r[0][0]: [t for t, _ in r[1:]] for r in rows}
    assert texts["svc.a"] == ["80.000", "2", "18.000 s", "9.000 s", "36.000 s", "0.000 s"]
    assert texts["svc.b"] == ["100.000", "0", "0.000 s", "—", "—", "0.000 s"]
    assert texts["svc.c"] == ["94.444", "1", "5.000 s", "—", "—", "0.000 s"]

    outages = [[t for t, _ in r] for r in table(text, "outages")]
    assert outages == [  # longest first
        ["svc.a", "2026-01-01 00:00:21.000Z", "2026-01-01 00:00:30.000Z", "9.000 s", "9", ""],
        [
            "svc.a",
            "2026-01-01 00:01:31.000Z",
            "2026-01-01 00:01:40.000Z",
            "9.000 s",
            "9",
            "still down",
        ],
        ["svc.c", "2026-01-01 00:00:10.000Z", "2026-01-01 00:00:15.000Z", "5.000 s", "9", ""],
    ]


def test_allowed_misses_changes_the_figures(spark: Any, event_log: Path, tmp_path: Path) -> None:
    # allowed 3: svc.a's 9 s gap is down from 23 s; svc.c (last beat 5) fails at 8, clipped
    out = tmp_path / "r.html"
    args = ["report", "--events", str(event_log), "--start", START, "--end", END]
    assert main([*args, "--out", str(out), "--period", "1", "--allowed-misses", "3"]) == 0
    got = {
        r[0][0]: tuple(figure(v) for _, v in r[1:3])
        for r in table(out.read_text(encoding="utf-8"), "availability")
    }
    assert got == {
        "svc.a": (100 * 76 / 90, 2.0),
        "svc.c": (100 * 85 / 90, 1.0),
        "svc.b": (100.0, 0),
    }


def run_bad(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"--start": "yesterday"}, "--start: not an ISO date"),
        ({"--end": "2026-13-01"}, "--end: not an ISO date"),
        ({"--end": "2026-01-01T00:00:10Z"}, "--start must be before --end"),
        ({"--events": "MISSING"}, "--events: no such directory"),
        ({"--events": "EMPTY"}, "--events: no Parquet files"),
        ({"--events": "FILE"}, "--events: not a directory"),
        ({"--out": "NODIR"}, "--out: no such directory"),
        ({"--master": "bogus"}, "--master: not a Spark master URL"),
    ],
)
def test_bad_arguments_exit_2_naming_the_argument(
    change: dict[str, str],
    named: str,
    event_log: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "empty" / "date=2026-01-01").mkdir(parents=True)
    (tmp_path / "empty" / "date=2026-01-01" / ".part.parquet.tmp").write_bytes(b"")
    (tmp_path / "file").write_text("x")
    places = {
        "MISSING": str(tmp_path / "missing"),
        "EMPTY": str(tmp_path / "empty"),
        "FILE": str(tmp_path / "file"),
        "NODIR": str(tmp_path / "nodir" / "r.html"),
    }
    opts = {
        "--events": str(event_log),
        "--start": START,
        "--end": END,
        "--out": str(tmp_path / "r.html"),
        "--period": "1",
    }
    opts.update({k: places.get(v, v) for k, v in change.items()})
    argv = ["report", *(x for kv in opts.items() for x in kv)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert named in err
    assert not (tmp_path / "r.html").exists()


def test_command_line_exit_status_and_message(event_log: Path, tmp_path: Path) -> None:
    """The real entry point (``python -m heartwire``), no Spark: a bad date is exit status 2."""
    argv = ["report", "--events", str(event_log), "--start", "2026-02-30", "--end", END]
    argv += ["--out", str(tmp_path / "r.html"), "--period", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "heartwire", *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "heartwire report: --start: not an ISO date" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--events", "x", "--period", "0"], "--period"),
        (["--events", "x", "--period", "x"], "--period"),
        (["--events", "x", "--period", "1", "--allowed-misses", "0"], "--allowed-misses"),
        (["--period", "1"], "--events"),
    ],
)
def test_argparse_errors_name_the_argument(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = run_bad(["report", "--start", START, "--end", END, "--out", "r.html", *args], capsys)
    assert named in err


def test_no_beats_before_end_is_a_named_error(
    spark: Any, event_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["report", "--events", str(event_log), "--start", "2025-01-01", "--end", "2025-01-02"]
    assert main([*argv, "--out", str(tmp_path / "r.html"), "--period", "1"]) == 2
    assert "--end: the event log" in capsys.readouterr().err


def test_unreadable_event_log_is_a_named_error(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "events" / "date=2026-01-01"
    folder.mkdir(parents=True)
    (folder / "part-0.parquet").write_bytes(b"not parquet")
    argv = ["report", "--events", str(tmp_path / "events"), "--start", START, "--end", END]
    assert main([*argv, "--out", str(tmp_path / "r.html"), "--period", "1"]) == 2
    err = capsys.readouterr().err
    assert "--events: cannot read the event log" in err and "part-0.parquet" in err
    assert "\tat " not in err  # no Java stack


def test_html_escapes_topics_and_formats_times(tmp_path: Path) -> None:
    start = rp.parse_time("2026-01-01T01:00+01:00", "--start")
    assert start == dt.datetime(2026, 1, 1, tzinfo=UTC)
    report = rp.Report(
        events=str(tmp_path),
        start=start,
        end=rp.parse_time("2026-01-01T00:10", "--end"),
        out=tmp_path / "r.html",
        png=tmp_path / "r.png",
        period_ms=1500,
        allowed_misses=2,
        master="local[1]",
    )
    topic = 'svc.<b>&"x"'
    tables = rp._Tables(
        [
            dict(
                topic=topic,
                uptime_pct=50.0,
                outages=1,
                downtime=300.0,
                mttr=None,
                mtbf=None,
                unmonitored=12.5,
            )
        ],
        [
            dict(
                topic=topic,
                down_from=1_767_225_900_000,
                down_to=1_767_226_200_000,
                missed=199,
                open=True,
            )
        ],
    )
    text = rh.render_html(report, tables, b"\x89PNG")
    assert topic not in text and html.escape(topic) in text
    assert "Period: 1.5 s; allowed misses: 2" in text
    rows = table(text, "availability")
    assert rows == [
        [
            (topic, None),
            ("50.000", "50.0"),
            ("1", "1"),
            ("5 min 00.000 s", "300.0"),
            ("—", ""),
            ("—", ""),
            ("12.500 s", "12.5"),
        ]
    ]
    assert [t for t, _ in table(text, "outages")[0]] == [
        topic,
        "2026-01-01 00:05:00.000Z",
        "2026-01-01 00:10:00.000Z",
        "5 min 00.000 s",
        "199",
        "still down",
    ]
    assert rh.format_duration(12.3456) == "12.346 s"
    assert rh.format_duration(7400) == "2 h 03 min 20 s"
    assert rh.format_duration(93_784) == "1 d 02 h 03 min"


# -- window clipping, unmonitored spans, crashes (issue 14, items 14, 15, 13) -------------------


@pytest.fixture(scope="module")
def gappy_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run A from 20 s to 40 s (stopped); run B from 50 s, crashed after its row at 65 s.
    svc.a beats every 0.5 s while watched; svc.b only from 20 to 30 s."""
    path = tmp_path_factory.mktemp("gappy") / "events"
    every = [x / 2 for x in range(200)]
    run_a = {
        "svc.a": [t for t in every if 20 <= t < 40],
        "svc.b": [t for t in every if 20 <= t <= 30],
    }
    run_monitor(path, run_a, start_at=20, until=40, wall_offset=T0)
    run_monitor(
        path,
        {"svc.a": [t for t in every if 50 <= t <= 65]},
        start_at=50,
        until=65,
        crash=True,
        wall_offset=T0,
    )
    return path


def test_window_is_clipped_to_what_the_log_covers(
    spark: Any, event_log: Path, tmp_path: Path
) -> None:
    # the log ends with the monitor's stop at 103 s; --end a day later (the future)
    out = tmp_path / "r.html"
    args = ["report", "--events", str(event_log), "--start", START, "--end", "2026-01-02"]
    assert main([*args, "--out", str(out), "--period", "1"]) == 0
    text = out.read_text(encoding="utf-8")
    outages = [[t for t, _ in r] for r in table(text, "outages")]
    open_a = [o for o in outages if o[0] == "svc.a" and o[5]]
    assert open_a == [
        [
            "svc.a",
            "2026-01-01 00:01:31.000Z",
            "2026-01-01 00:01:43.000Z",
            "12.000 s",
            "12",
            "still down",
        ]
    ], "the report counted time after the log's end as downtime"
    assert 'id="covered">2026-01-01 00:01:43.000Z<' in text
    got = {r[0][0]: figure(r[1][1]) for r in table(text, "availability")}
    assert got["svc.a"] == pytest.approx(100 * (93 - 21) / 93)


def test_time_not_monitored_is_neither_up_nor_down(
    spark: Any, gappy_log: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.html"
    args = ["report", "--events", str(gappy_log), "--start", "2026-01-01", "--end", END]
    assert main([*args, "--out", str(out), "--period", "1"]) == 0
    text = out.read_text(encoding="utf-8")
    rows = {r[0][0]: [figure(v) for _, v in r[1:]] for r in table(text, "availability")}
    # uptime %, outages, downtime, MTTR, MTBF, not monitored (s)
    assert rows["svc.a"] == [100.0, 0.0, 0.0, None, None, 10.0]
    assert rows["svc.b"] == [
        pytest.approx(100 * 12 / 35),
        2.0,
        23.0,
        None,  # both outages end where watching stopped: their lengths are unknown
        6.0,
        10.0,
    ]
    spans = [[t for t, _ in r] for r in table(text, "unmonitored")]
    assert spans == [
        ["2026-01-01 00:00:00.000Z", "2026-01-01 00:00:20.000Z", "20.000 s"],
        ["2026-01-01 00:00:40.000Z", "2026-01-01 00:00:50.000Z", "10.000 s"],
    ]
    assert 'id="covered">2026-01-01 00:01:05.000Z<' in text  # the crash: unknown after 65 s
    outages = sorted([t for t, _ in r] for r in table(text, "outages"))
    assert outages == [
        [
            "svc.b",
            "2026-01-01 00:00:31.000Z",
            "2026-01-01 00:00:40.000Z",
            "9.000 s",
            "9",  # deadlines 31 .. 39 s
            "still down when watching stopped",
        ],
        [
            "svc.b",
            "2026-01-01 00:00:51.000Z",
            "2026-01-01 00:01:05.000Z",
            "14.000 s",
            "14",
            "still down",
        ],
    ]


def test_format_duration_rounds_before_it_splits() -> None:
    assert rh.format_duration(3599.9996) == "1 h 00 min 00 s"
    assert rh.format_duration(59.9996) == "1 min 00.000 s"
    assert rh.format_duration(119.9999) == "2 min 00.000 s"
    assert rh.format_duration(86_399.6) == "1 d 00 h 00 min"
    assert rh.format_duration(7199.4) == "1 h 59 min 59 s"


def test_the_report_finds_the_watched_spans_once(
    spark: Any, event_log: Path, tmp_path: Path
) -> None:
    """The coverage query (:func:`heartwire.spark.monitored_spans`: two Spark jobs over the
    whole log) runs once per report, not once more inside ``availability`` and ``outages``.
    Counted from the Spark jobs' call sites under a job group of this test."""
    import inspect

    from heartwire import spark as hs

    lines, first = inspect.getsourcelines(hs.monitored_spans)
    source = inspect.getsourcefile(hs.monitored_spans)
    inside = {f"{source}:{first + i}" for i, _ in enumerate(lines)}
    sc = spark.sparkContext
    group = f"report-coverage-{id(tmp_path)}"
    sc.setJobGroup(group, "the report's jobs")
    try:
        args = ["report", "--events", str(event_log), "--start", START, "--end", END]
        assert main([*args, "--out", str(tmp_path / "r.html"), "--period", "1"]) == 0
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    tracker = sc.statusTracker()
    lines_run: list[int] = []  # per job of monitored_spans, the line that started it
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        stages = [tracker.getStageInfo(s) for s in (info.stageIds if info else [])]
        names = {s.name.rsplit(" at ", 1)[-1] for s in stages if s is not None}
        lines_run.extend(int(site.rsplit(":", 1)[1]) for site in sorted(names & inside)[:1])
    assert lines_run, "no Spark job of monitored_spans seen: is the job group working?"
    runs = lines_run.count(min(lines_run))  # its first query (the life rows): once per call
    assert runs == 1, f"monitored_spans ran {runs} times in one report: lines {lines_run}"
