"""The Parquet event log: rows for received/failed/resumed, date partitions, rolling by time."""

from __future__ import annotations

import datetime as dt
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import heartwire as hw
from heartwire.eventlog import SCHEMA, EventLog

# The Unix time the manual clock's zero stands for: 2024-03-01 23:59:00 UTC, one minute before a
# date boundary.
T0 = int(dt.datetime(2024, 3, 1, 23, 59, tzinfo=dt.timezone.utc).timestamp())


def read(path: Path) -> pa.Table:
    data = ds.dataset(str(path), format="parquet", partitioning="hive")
    return data.to_table().sort_by([("ts", "ascending"), ("kind", "ascending")])


def us(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(T0 + seconds, tz=dt.timezone.utc)


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def monitor(clock: hw.ManualClock, log: EventLog, **kw: object) -> hw.HeartbeatMonitor:
    return hw.HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0, clock=clock, wall_offset=T0, listeners=[log], **kw
    )


def test_records_received_failed_resumed(tmp_path: Path) -> None:
    clock = hw.ManualClock()
    log = EventLog(tmp_path, roll_seconds=3600, wall_offset=T0, clock=clock)
    mon = monitor(clock, log, allowed_misses=2).start()
    mon.beat("svc.a", seq=7)
    clock.advance(3.5)  # deadlines 1, 2 (failed, missed 2), 3 (missed 3)
    mon.beat("svc.a")
    clock.advance(0.25)
    mon.drain()
    mon.stop()  # on_stopped writes the buffer
    assert log.buffered == 0 and log.rows_written == 7  # and the monitor's start and stop
    table = read(tmp_path)
    assert table.schema.names[: len(SCHEMA)] == SCHEMA.names
    rows = [r for r in table.to_pylist() if r["kind"] not in ("started", "stopped")]
    assert [(r["kind"], r["topic"], r["ts"], r["missed"]) for r in rows] == [
        ("received", "svc.a", us(0), None),
        ("failed", "svc.a", us(2), 2),
        ("failed", "svc.a", us(3), 3),
        ("received", "svc.a", us(3.5), None),
        ("resumed", "svc.a", us(3.5), 3),
    ]
    assert rows[0]["seq"] == 7 and rows[3]["seq"] is None
    assert rows[1]["since"] == us(2) and rows[2]["since"] == us(2)
    assert rows[4]["downtime"] == pytest.approx(1.5)
    assert {r["date"] for r in rows} == {"2024-03-01"}
    log.close()


def test_partitioned_by_date_and_rolled_by_window(tmp_path: Path) -> None:
    clock = hw.ManualClock()
    log = EventLog(tmp_path, roll_seconds=20, wall_offset=T0, clock=clock)
    mon = monitor(clock, log).start()
    for _ in range(90):  # 23:59:00 .. 00:00:29, one beat a second
        mon.beat("svc.a")
        clock.advance(1.0)
    mon.drain()
    # windows of 20 s from the epoch: [23:59:00, :20), [:20, :40), [:40, 00:00:00), then the
    # next day's [0, 20) and so on; the window in progress is still buffered
    written = files_under(tmp_path)
    assert len(written) == 4
    assert [f.split("/")[0] for f in written] == ["date=2024-03-01"] * 3 + ["date=2024-03-02"]
    assert log.buffered == 10
    assert log.flush() and log.buffered == 0
    table = read(tmp_path).filter(pc.equal(pc.field("kind"), "received"))
    assert table.num_rows == 90
    dates = table.column("date").to_pylist()
    assert dates.count("2024-03-01") == 60 and dates.count("2024-03-02") == 30
    # no hidden temporary files are left behind
    assert not [p for p in tmp_path.rglob(".*")]
    mon.stop()
    log.close()


def test_window_spanning_midnight_is_split_by_date(tmp_path: Path) -> None:
    log = EventLog(tmp_path, roll_seconds=7 * 60, wall_offset=T0)  # 7 min: not a day divisor
    for i in range(4):
        log.on_received(
            hw.Received("svc.a", i, None, 30.0 * i, wall_offset=T0)
        )  # 23:59:00 .. 00:00:30
    written = log.flush()
    assert [Path(p).parent.name for p in written] == ["date=2024-03-01", "date=2024-03-02"]
    assert read(tmp_path).num_rows == 4


def test_max_rows_and_close(tmp_path: Path) -> None:
    log = EventLog(tmp_path, roll_seconds=3600, wall_offset=T0, max_rows=3)
    for i in range(7):
        log.on_received(hw.Received("svc.a", i, 0.001, 0.1 * i, wall_offset=T0))
    assert len(log.files) == 2 and log.buffered == 1
    with log:
        pass  # __exit__ closes: the last row is written
    assert log.buffered == 0 and len(log.files) == 3
    log.on_received(hw.Received("svc.a", 8, None, 1.0, wall_offset=T0))  # after close: ignored
    log.close()
    assert log.buffered == 0 and log.rows_written == 7
    table = read(tmp_path)
    assert table.column("seq").to_pylist() == list(range(7))
    assert table.column("latency").to_pylist() == [0.001] * 7


def test_default_wall_offset_follows_the_real_clock(tmp_path: Path) -> None:
    import time

    log = EventLog(tmp_path)
    log.on_received(hw.Received("svc.a", None, None, time.monotonic()))
    log.close()
    (row,) = read(tmp_path).to_pylist()
    assert abs(row["ts"].timestamp() - time.time()) < 5


def test_empty_flush_and_bad_arguments(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "nothing")
    assert log.flush() == [] and log.files == []
    assert not os.path.exists(tmp_path / "nothing")
    assert "EventLog(" in repr(log)
    with pytest.raises(ValueError, match="roll_seconds"):
        EventLog(tmp_path, roll_seconds=0)
    with pytest.raises(TypeError, match="roll_seconds"):
        EventLog(tmp_path, roll_seconds="60")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_rows"):
        EventLog(tmp_path, max_rows=0)
    with pytest.raises(ValueError, match=r"wall_offset must be a finite number.*nan"):
        EventLog(tmp_path, wall_offset=float("nan"))


def test_is_a_subscriber_listener(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    assert isinstance(log, hw.SubscriberListener)
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=hw.ManualClock())
    mon.add_listener(log)
    assert log in mon.listeners


# -- failed writes (issue 14, item 20) ----------------------------------------------------------


def _limit_file_size(nbytes: int) -> object:
    """A real I/O error for the writes that follow: files may grow to ``nbytes`` only (EFBIG;
    SIGXFSZ ignored). Returns what :func:`_restore_file_size` needs."""
    import resource
    import signal

    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, old_limit[1]))
    return old_limit, old_handler


def _restore_file_size(saved: object) -> None:
    import resource
    import signal

    (limit, handler) = saved  # type: ignore[misc]
    resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    signal.signal(signal.SIGXFSZ, handler)


def _many_rows(log: EventLog, n: int, at: float = 0.0) -> None:
    for i in range(n):  # distinct topics and seqs: a file too big for the limit below
        log.on_received(
            hw.Received(
                f"svc.{i:06d}.{secrets_hex(i)}", i, 0.001 * i, at + 1e-6 * i, wall_offset=T0
            )
        )


def secrets_hex(i: int) -> str:
    return format(i * 2654435761 % 2**32, "08x")


def test_failed_write_keeps_the_rows_and_leaves_no_tmp(tmp_path: Path) -> None:
    log = EventLog(tmp_path, roll_seconds=3600, wall_offset=T0, compression="none")
    _many_rows(log, 5000)
    saved = _limit_file_size(4096)
    try:
        with pytest.raises(OSError):
            log.flush()
    finally:
        _restore_file_size(saved)
    assert log.buffered == 5000, "a failed write dropped the buffered rows"
    assert log.files == [] and log.rows_written == 0
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [], "a .tmp file was left behind"
    written = log.flush()  # the retry writes them
    assert len(written) == 1 and log.buffered == 0 and log.rows_written == 5000
    assert read(tmp_path).num_rows == 5000
    log.close()


def test_failed_rollover_keeps_the_window_and_the_new_event(tmp_path: Path) -> None:
    # the date folder cannot be made (a file is in its place): every write fails
    log = EventLog(tmp_path, roll_seconds=20, wall_offset=T0)
    (tmp_path / "date=2024-03-01").write_text("in the way")
    for i in range(30):  # 23:59:00 .. :29: the event at :20 rolls the first window over
        log.on_received(hw.Received("svc.a", i, None, float(i), wall_offset=T0))
    assert log.buffered == 30, "the rollover's failed write dropped rows"
    assert log.write_errors >= 1 and isinstance(log.last_error, OSError)
    with pytest.raises(OSError):
        log.flush()  # the caller of flush() hears of the failure
    (tmp_path / "date=2024-03-01").unlink()
    assert log.flush() and log.buffered == 0
    assert read(tmp_path).column("seq").to_pylist() == list(range(30))
    log.close()


def test_failure_after_the_first_date_writes_it_once(tmp_path: Path) -> None:
    # rows over midnight: the first date's file is written, the second date's folder fails
    log = EventLog(tmp_path, roll_seconds=7 * 60, wall_offset=T0)
    for i in range(4):
        log.on_received(
            hw.Received("svc.a", i, None, 30.0 * i, wall_offset=T0)
        )  # 23:59:00 .. 00:00:30
    (tmp_path / "date=2024-03-02").write_text("in the way")
    with pytest.raises(OSError):
        log.flush()
    assert log.buffered == 2 and log.rows_written == 2 and len(log.files) == 1
    (tmp_path / "date=2024-03-02").unlink()
    log.close()
    assert read(tmp_path).column("seq").to_pylist() == [0, 1, 2, 3]  # no row twice


def test_a_started_row_has_the_start_time_however_late_it_is_delivered(tmp_path: Path) -> None:
    # The monitor's events reach the log on another thread: a Started delivered after the clock
    # moved on was logged at its arrival (flaky on a loaded machine); it carries its time now.
    gate = threading.Event()
    waited: list[bool] = []

    class LateLog(EventLog):
        def on_started(self, event: hw.Started) -> None:
            waited.append(gate.wait(10))
            super().on_started(event)

    clock = hw.ManualClock(5.0)
    log = LateLog(tmp_path, roll_seconds=3600, wall_offset=T0, clock=clock)
    mon = monitor(clock, log).start()
    clock.set(6.0)
    gate.set()
    mon.stop()
    log.close()
    assert waited == [True], "on_started was delivered inside start(), not later"
    rows = [r for r in read(tmp_path).to_pylist() if r["kind"] in ("started", "stopped")]
    assert [(r["kind"], r["ts"]) for r in rows] == [("started", us(5)), ("stopped", us(6))]


def test_monitor_start_stop_and_local_pause_are_logged(tmp_path: Path) -> None:
    clock = hw.ManualClock(5.0)
    log = EventLog(tmp_path, roll_seconds=3600, wall_offset=T0, clock=clock)
    mon = monitor(clock, log).start()
    clock.set(6.0)
    mon.beat("svc.a")
    # on_started reaches the log on its listener thread: let it land first, since the pause
    # row takes its pattern from it (under load it came after the direct call below)
    assert mon.drain(5.0), "the monitor's events never reached the log"
    log.on_local_pause(
        hw.LocalPause(7.5, 20.0, wall_offset=T0)
    )  # the monitor stalled from 12.5 to 20 s
    clock.set(30.0)
    mon.drain()
    mon.stop()
    rows = [r for r in read(tmp_path).to_pylist() if r["kind"] in ("started", "stopped", "paused")]
    assert [(r["kind"], r["topic"], r["ts"]) for r in rows] == [
        ("started", "svc.>", us(5)),
        ("paused", "svc.>", us(20)),
        ("stopped", "svc.>", us(30)),
    ]
    assert rows[1]["since"] == us(12.5) and rows[1]["downtime"] == 7.5
    log.close()
    with pytest.raises(TypeError, match="clock"):
        EventLog(tmp_path, clock=3)


# -- a row the table cannot hold (R2 F2) -------------------------------------------------------


def test_a_row_the_schema_cannot_hold_never_blocks_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A beat with ``seq >= 2**63`` is valid on the wire (the codec takes up to 2**64-1) but the
    ``seq`` column is int64: the beat is kept with its seq NULL (counted), and the rows around it
    are written. An event whose time the log cannot hold (year 10000) is refused alone."""
    log = EventLog(tmp_path, roll_seconds=1.0, wall_offset=T0)
    log.on_received(hw.Received("svc.a", 1, 0.001, 0.1, wall_offset=T0))
    log.on_received(hw.Received("svc.a", 2**63, 0.001, 0.2, wall_offset=T0))
    log.on_received(hw.Received("svc.a", 2**64 - 1, 0.001, 0.3, wall_offset=T0))
    log.on_failed(hw.Failed("svc.b", 2**70, 0.1, 0.4, wall_offset=T0))  # missed: not int64
    log.on_received(hw.Received("svc.a", 3, 0.001, 3e11, wall_offset=T0))  # year ~11500
    for i in range(4, 64):  # a minute of windows: every one rolls over and is written
        log.on_received(hw.Received("svc.a", i, 0.001, 0.2 + i, wall_offset=T0))
    assert log.write_errors == 0 and log.last_error is None, log.last_error
    assert len(log.files) >= 59, f"the log stopped writing: {len(log.files)} files"
    log.close()
    assert log.buffered == 0
    assert log.seqs_dropped == 2 and log.refused == 2
    rows = read(tmp_path).to_pylist()
    assert [r["seq"] for r in rows] == [1, None, None, *range(4, 64)]
    assert rows[1]["ts"] == us(0.2) and rows[2]["ts"] == us(0.3)
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused and "missed" in refused[0] and str(2**70) in refused[0], refused


def test_a_buffered_row_that_does_not_convert_is_refused_at_the_write(tmp_path: Path) -> None:
    """The last line of defence: should a row get past the checks (here put in the buffer
    directly), the write refuses it alone (counted) and writes the others, instead of failing
    on it at every later write."""
    log = EventLog(tmp_path, roll_seconds=3600, wall_offset=T0)
    log.on_received(hw.Received("svc.a", 1, None, 1.0, wall_offset=T0))
    with log._lock:  # what no event can do: a value of the wrong type in the buffer
        for name, value in zip(
            SCHEMA.names,
            ["received", "svc.a", 0, "x", None, None, None, None, None, None, None],
            strict=True,
        ):
            log._rows[name].append(value)
    log.on_received(hw.Received("svc.a", 2, None, 2.0, wall_offset=T0))
    assert len(log.flush()) == 1 and log.refused == 1 and log.write_errors == 0
    assert read(tmp_path).column("seq").to_pylist() == [1, 2]
    log.close()


# -- one wall-clock conversion (R1 F6) ---------------------------------------------------------


class _Wall(hw.SubscriberListener):
    """Notes the wall times the monitor's listeners see."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    def on_received(self, event: hw.Received) -> None:
        self.seen.append(("received", event.wall_at))

    def on_failed(self, event: hw.Failed) -> None:
        self.seen.append(("failed", event.wall_at))
        self.since = event.wall_since

    def on_resumed(self, event: hw.Resumed) -> None:
        self.seen.append(("resumed", event.wall_at))


def _event_rows(path: Path) -> list[tuple[str, float]]:
    rows = read(path).to_pylist()
    return [(r["kind"], r["ts"].timestamp()) for r in rows if r["kind"] != "stopped"]


def test_log_and_listeners_agree_on_wall_time_with_a_manual_clock(tmp_path: Path) -> None:
    """Defaults everywhere: the log writes each event at the wall time its listeners see (the
    monitor's ``wall_offset``, carried by the event), not at a conversion of its own."""
    clock = hw.ManualClock()
    clock.advance(3600.0)  # an hour into the simulation before the log is made
    log, wall = EventLog(tmp_path, roll_seconds=60), _Wall()
    mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, clock=clock, listeners=[log, wall])
    mon.expect("svc.a")
    mon.start()
    clock.advance(1.5)
    mon.drain()
    mon.beat("svc.a")
    mon.drain()
    mon.stop()
    log.close()
    rows = sorted(r for r in _event_rows(tmp_path) if r[0] != "started")
    seen = sorted(wall.seen)
    assert [k for k, _ in rows] == [k for k, _ in seen] == ["failed", "received", "resumed"]
    for (kind, ts), (_, wall_at) in zip(rows, seen, strict=False):
        assert abs(ts - wall_at) < 2e-6, f"{kind}: log {ts} vs listeners {wall_at}"
    failed = read(tmp_path).filter(pc.equal(pc.field("kind"), "failed")).to_pylist()[0]
    assert abs(failed["since"].timestamp() - wall.since) < 2e-6


def test_started_and_stopped_take_the_monitors_offset(tmp_path: Path) -> None:
    """``started`` and ``stopped`` carry no time of their own: ``clock`` is read, and the offset
    is the monitor's as its events carry it (no ``wall_offset=`` for the log), so the rows agree
    with the rest of the log; an event that carries ``at``/``wall_offset`` gives its own."""
    clock = hw.ManualClock(5.0)
    log = EventLog(tmp_path, roll_seconds=3600, clock=clock)
    mon = monitor(clock, log).start()  # the monitor's wall_offset is T0
    clock.set(6.0)
    mon.beat("svc.a")
    clock.set(30.0)
    mon.drain()
    mon.stop()
    log.on_started(SimpleNamespace(source="svc.>", at=40.0, wall_offset=T0))  # type: ignore[arg-type]
    log.on_stopped(SimpleNamespace(source="svc.>", at=50.0, wall_offset=T0))  # type: ignore[arg-type]
    rows = [(r["kind"], r["ts"]) for r in read(tmp_path).to_pylist() if r["kind"] != "failed"]
    assert rows == [
        ("started", us(5)),
        ("received", us(6)),
        ("stopped", us(30)),
        ("started", us(40)),
        ("stopped", us(50)),
    ]
    log.close()


def test_a_started_event_handled_late_is_no_later_than_the_runs_first_event(
    tmp_path: Path,
) -> None:
    """``Started`` has no time: ``clock`` is read when the log's thread gets to it, which can be
    after the monitor recorded its first beats (the clock has moved on). The run cannot have
    started after its first event: the row is no later than that."""
    clock = hw.ManualClock(8.0)  # the monitor started at 5; the log sees Started at 8
    log = EventLog(tmp_path, roll_seconds=3600, clock=clock)
    log.on_started(hw.Started("svc.>"))
    log.on_received(hw.Received("svc.a", 1, None, 6.0, wall_offset=T0))
    log.close()
    rows = [(r["kind"], r["ts"]) for r in read(tmp_path).to_pylist()]
    assert rows == [("received", us(6)), ("started", us(6))]


def test_an_explicit_failure_keeps_its_reason_a_missed_period_none(tmp_path: Path) -> None:
    from heartwire.beat import Beat, BeatCodec
    from heartwire.transport import Message

    clock = hw.ManualClock()
    log = EventLog(tmp_path, roll_seconds=3600, wall_offset=T0, clock=clock)
    mon = monitor(clock, log).start()
    body = BeatCodec().encode(Beat("svc.a", state="down", reason="db gone"))
    mon.handle_message(Message("svc.a", body))
    mon.expect("svc.b")
    clock.advance(1.5)
    mon.drain()
    mon.stop()
    rows = [r for r in read(tmp_path).to_pylist() if r["kind"] == "failed"]
    assert [(r["topic"], r["ts"], r["missed"], r["reason"]) for r in rows] == [
        ("svc.a", us(0), 0, "db gone"),
        ("svc.a", us(1), 1, "db gone"),
        ("svc.b", us(1), 1, None),
    ]
    assert read(tmp_path).schema.names[-4:] == ["reason", "silenced", "suppressed_by", "date"]
    log.close()
