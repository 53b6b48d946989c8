"""Scheduled maintenance windows under the manual clock: each occurrence an ordinary core silence
(exact event streams, times shown as local wall times through the monitor's wall_offset),
daily and weekly repetition, the top-up over weeks, DST change days, removal, bad input."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Generator, Iterator
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from heartwire.events import Failed, Resumed
from heartwire.maintenance import HORIZON, MaintenanceWindow
from heartwire.status import status_snapshot
from tests.monitor.test_monitor_semantics import Recorder, Rig, make_rig

PARIS = ZoneInfo("Europe/Paris")
UTC = dt.timezone.utc


class Local(Recorder):
    """Failed/resumed as (kind, topic, missed, local time 'Www HH:MM', silenced)."""

    def __init__(self, tz: ZoneInfo) -> None:
        super().__init__()
        self.tz = tz

    def take(self) -> list[tuple[Any, ...]]:
        out = []
        for e in self.events:
            if isinstance(e, Failed | Resumed):
                kind = "failed" if isinstance(e, Failed) else "resumed"
                when = dt.datetime.fromtimestamp(e.wall_at, self.tz).strftime("%a %H:%M")
                out.append((kind, e.topic, e.missed, when, e.silenced))
        self.events.clear()
        return out


def local_rig(start: dt.datetime, **options: Any) -> Generator[Rig, None, None]:
    """A manual-clock rig whose clock reading 0 is the aware datetime ``start``."""
    tz = start.tzinfo
    assert isinstance(tz, ZoneInfo)
    options.setdefault("period", 3600.0)
    rigs = make_rig(recorder=Local(tz), wall_offset=start.timestamp(), **options)
    r = next(rigs)
    try:
        assert r.clock.now() == 0.0
        yield r
    finally:
        next(rigs, None)  # make_rig's own cleanup: the monitor stopped, the broker closed


@pytest.fixture
def paris() -> Iterator[Rig]:
    """Starts Friday 2026-06-05 00:00 in Paris (CEST all along: no DST change near)."""
    yield from local_rig(dt.datetime(2026, 6, 5, tzinfo=PARIS))


def to(r: Rig, when: dt.datetime) -> list[tuple[Any, ...]]:
    """Move the manual clock to the aware datetime ``when``, a day at most at a time (the
    detector reports at most 64 ``failed`` of a topic per run, then one with the count: see
    advance.rs); what the listener got."""
    target = when.timestamp() - r.mon.wall_offset
    while r.clock.now() < target:
        r.clock.advance(min(86400.0, target - r.clock.now()))
    return r.take()


def at(day: int, hh: int, mm: int = 0, tz: ZoneInfo = PARIS, month: int = 6) -> dt.datetime:
    return dt.datetime(2026, month, day, hh, mm, tzinfo=tz)


def wall(s: Any, tz: ZoneInfo = PARIS) -> tuple[str, str]:
    """A silence's start and end as local 'Www DD HH:MM'."""
    return tuple(  # type: ignore[return-value]
        dt.datetime.fromtimestamp(t, tz).strftime("%a %d %H:%M") for t in (s.wall_start, s.wall_end)
    )


# -- event streams ------------------------------------------------------------------------------


def test_a_failure_inside_the_window_is_silenced_both_ways_other_topics_are_not(paris: Rig) -> None:
    r = paris
    r.mon.start()
    w = r.mon.maintenance(
        "svc.db.>", start="02:00", end="03:30", tz="Europe/Paris", reason="backup"
    )
    assert (w.pattern, w.start, w.end, w.tz, w.days, w.reason) == (
        "svc.db.>",
        dt.time(2),
        dt.time(3, 30),
        "Europe/Paris",
        None,
        "backup",
    )
    to(r, at(5, 1, 50))
    r.mon.beat("svc.db.main")
    r.mon.beat("svc.api")
    assert to(r, at(5, 3, 0)) == [
        ("failed", "svc.db.main", 1, "Fri 02:50", True),
        ("failed", "svc.api", 1, "Fri 02:50", False),
    ]
    r.mon.beat("svc.db.main")
    r.mon.beat("svc.api")
    assert r.take() == [
        ("resumed", "svc.db.main", 1, "Fri 03:00", True),
        ("resumed", "svc.api", 1, "Fri 03:00", False),
    ]
    # After the window, the same outage is not silenced.
    assert to(r, at(5, 4, 5)) == [
        ("failed", "svc.db.main", 1, "Fri 04:00", False),
        ("failed", "svc.api", 1, "Fri 04:00", False),
    ]
    assert r.mon.stats()["silenced"] == 2


def test_still_failed_when_the_window_ends_alerts_then_unless_it_alerted_before(paris: Rig) -> None:
    r = paris
    r.mon.start()
    r.mon.maintenance("svc.>", start="02:00", end="03:30", tz="Europe/Paris")
    to(r, at(5, 0, 30))
    r.mon.beat("svc.early")  # fails at 01:30, before the window: alerted then
    assert to(r, at(5, 1, 40)) == [("failed", "svc.early", 1, "Fri 01:30", False)]
    r.mon.beat("svc.inside")  # fails at 02:40, inside: held back until the window ends
    assert to(r, at(5, 3, 45)) == [
        ("failed", "svc.early", 2, "Fri 02:30", True),
        ("failed", "svc.inside", 1, "Fri 02:40", True),
        ("failed", "svc.inside", 1, "Fri 03:30", False),  # the end: the alert held back
        ("failed", "svc.early", 3, "Fri 03:30", False),  # due at the end: not inside
        ("failed", "svc.inside", 2, "Fri 03:40", False),
    ]
    assert r.mon.stats()["released"] == 1


def test_a_daily_window_repeats_over_three_days(paris: Rig) -> None:
    r = paris
    r.mon.expect("svc.db", period=3600.0)  # never heard: fails every hour on the hour
    r.mon.start()
    r.mon.maintenance("svc.db", start="01:30", end="03:30", tz="Europe/Paris")
    got = to(r, at(8, 0, 30))
    expected: list[tuple[Any, ...]] = []
    for day in (5, 6, 7):
        for hour in range(24):
            if (day, hour) != (5, 0):
                when = at(day, hour).strftime("%a %H:%M")
                expected.append(("failed", "svc.db", len(expected) + 1, when, hour in (2, 3)))
    expected.append(("failed", "svc.db", 72, "Mon 00:00", False))
    assert got == expected
    assert [e for e in got if e[4]] == [
        ("failed", "svc.db", 2, "Fri 02:00", True),
        ("failed", "svc.db", 3, "Fri 03:00", True),
        ("failed", "svc.db", 26, "Sat 02:00", True),
        ("failed", "svc.db", 27, "Sat 03:00", True),
        ("failed", "svc.db", 50, "Sun 02:00", True),
        ("failed", "svc.db", 51, "Sun 03:00", True),
    ]


def test_a_weekly_window_skips_the_other_days_and_may_cross_midnight(paris: Rig) -> None:
    r = paris
    r.mon.expect("svc.db", period=3600.0)
    r.mon.start()
    w = r.mon.maintenance(
        "svc.db", start="22:30", end="01:30", tz="Europe/Paris", days=("Saturday", "sun")
    )
    assert (w.days, w.crosses_midnight) == (("sat", "sun"), True)
    got = to(r, at(12, 12))  # Friday 5 to Friday 12
    assert [e[3] for e in got if e[4]] == [
        "Sat 23:00",
        "Sun 00:00",
        "Sun 01:00",
        "Sun 23:00",
        "Mon 00:00",  # Sunday's occurrence ends on Monday
        "Mon 01:00",
    ]
    assert len(got) == 7 * 24 + 12 - 1


def test_windows_are_topped_up_as_they_pass_and_keep_working_for_weeks(paris: Rig) -> None:
    r = paris
    r.mon.start()
    w = r.mon.maintenance("svc.db", start="01:30", end="02:30", tz="Europe/Paris")
    mine = [s for s in r.mon.silences() if s.window == w.id]
    assert [wall(s) for s in mine] == [
        (f"{d:%a %d} 01:30", f"{d:%a %d} 02:30")
        for d in (at(5 + i, 0) for i in range(int(HORIZON // 86400)))
    ]
    for day in range(6, 22):  # three weeks, a day at a time: past the first 8 days registered
        r.clock.advance(86400.0)
        deadline = time.monotonic() + 5.0
        while True:  # the dispatch thread tops up within ~0.1 s of real time
            ends = [s.wall_end for s in r.mon.silences() if s.window == w.id]
            if max(ends) >= at(day, 0).timestamp() + HORIZON - 86400:
                break
            assert time.monotonic() < deadline, f"not topped up on June {day}: {ends}"
            time.sleep(0.01)
        # Over ones are gone; one a day ahead.
        assert len(ends) == HORIZON // 86400
        assert min(ends) == at(day, 2, 30).timestamp()
    r.mon.expect("svc.db", period=3600.0)  # Sunday 21 00:00: fails at 01:00, 02:00, 03:00
    assert [e[3:] for e in to(r, at(21, 3, 30))] == [
        ("Sun 01:00", False),
        ("Sun 02:00", True),
        ("Sun 03:00", False),
    ]


def test_end_maintenance_ends_the_occurrence_in_progress_and_drops_the_rest(paris: Rig) -> None:
    r = paris
    r.mon.start()
    w = r.mon.maintenance("svc.db", start="02:00", end="04:00", tz="Europe/Paris")
    other = r.mon.silence("svc.api", duration="1d")
    to(r, at(5, 1, 10))
    r.mon.beat("svc.db")
    assert to(r, at(5, 2, 30)) == [("failed", "svc.db", 1, "Fri 02:10", True)]
    assert r.mon.maintenance_windows() == [w]
    assert r.mon.end_maintenance(w) is True
    # The topic, still FAILED and never alerted, gets its alert now (unsilence's rule).
    assert r.take() == [("failed", "svc.db", 1, "Fri 02:30", False)]
    assert r.mon.silences() == [other]
    assert r.mon.maintenance_windows() == []
    assert r.mon.end_maintenance(w.id) is False
    to(r, at(6, 2, 10))
    assert all(not e[4] for e in r.take())  # Saturday's occurrence is gone too
    with pytest.raises(TypeError, match=r"window must be an int id or a MaintenanceWindow"):
        r.mon.end_maintenance("1")  # type: ignore[arg-type]


def test_a_window_made_while_stopped_and_one_in_progress_when_made(paris: Rig) -> None:
    r = paris
    to(r, at(5, 2, 30))
    w = r.mon.maintenance("svc.>", start="02:00", end="03:00", tz="Europe/Paris")
    first = r.mon.silences()[0]
    assert (first.window, first.start, wall(first)) == (
        w.id,
        2.5 * 3600,
        ("Fri 05 02:30", "Fri 05 03:00"),
    )
    r.mon.expect("svc.a", period=600.0)
    r.mon.start()
    assert to(r, at(5, 3, 5)) == [
        ("failed", "svc.a", 1, "Fri 02:40", True),
        ("failed", "svc.a", 2, "Fri 02:50", True),
        ("failed", "svc.a", 3, "Fri 03:00", False),  # due at the end: not inside
    ]


def test_a_monitor_stopped_past_the_horizon_catches_up_at_start(paris: Rig) -> None:
    r = paris
    r.mon.start()
    w = r.mon.maintenance("svc.db", start="01:30", end="02:30", tz="Europe/Paris")
    r.mon.stop()
    r.clock.advance(10 * 86400.0)  # Monday 15 00:00: the 8 days registered are over
    assert r.mon.silences() == []
    r.mon.start()
    assert [wall(s) for s in r.mon.silences()] == [
        (f"{d:%a %d} 01:30", f"{d:%a %d} 02:30") for d in (at(15 + i, 0) for i in range(8))
    ]
    assert {s.window for s in r.mon.silences()} == {w.id}
    r.mon.expect("svc.db", period=3600.0)
    assert [e[3:] for e in to(r, at(15, 3, 30))] == [
        ("Mon 01:00", False),
        ("Mon 02:00", True),
        ("Mon 03:00", False),
    ]


def test_on_the_real_clock_occurrences_are_placed_by_wall_time() -> None:
    from heartwire import HeartbeatMonitor

    mon = HeartbeatMonitor(None, "svc.>")
    soon = dt.datetime.now(UTC).replace(second=0, microsecond=0) + dt.timedelta(minutes=2)
    later = soon + dt.timedelta(minutes=1)
    mon.maintenance("svc.>", start=soon.time(), end=later.time(), tz="UTC")
    first = mon.silences()[0]
    assert first.wall_start == pytest.approx(soon.timestamp(), abs=1e-6)
    assert first.wall_end == pytest.approx(later.timestamp(), abs=1e-6)
    assert first.start - mon.now() == pytest.approx(soon.timestamp() - time.time(), abs=1.0)


def test_heartwire_status_shows_the_occurrence_in_force_not_those_registered_ahead(
    paris: Rig,
) -> None:
    r = paris
    r.mon.start()
    w = r.mon.maintenance("svc.db.>", start="02:00", end="03:00", tz="Europe/Paris", reason="bk")
    assert len(r.mon.silences()) == 8
    assert status_snapshot(r.mon).silences == ()
    to(r, at(5, 2, 30))
    (row,) = status_snapshot(r.mon).silences
    assert (row.pattern, row.until, row.reason) == ("svc.db.>", at(5, 3).timestamp(), "bk")
    assert [s.window for s in r.mon.silences()] == [w.id] * 8


# -- DST ---------------------------------------------------------------------------------------


def occurrence(start: str, end: str, day: dt.datetime, tz: str = "Europe/Paris") -> tuple[str, ...]:
    w = MaintenanceWindow.make(1, "svc.>", start=start, end=end, tz=tz)
    ((s, e),) = w.occurrences(day)
    return s.isoformat(), e.isoformat(), f"{(e.timestamp() - s.timestamp()) / 3600:g}h"


def test_dst_spring_forward_a_skipped_time_is_taken_at_the_change() -> None:
    # Paris, Sunday 2026-03-29: 02:00 CET jumps to 03:00 CEST.
    day = dt.datetime(2026, 3, 29, tzinfo=PARIS)
    assert occurrence("02:00", "03:30", day) == (
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:30:00+02:00",
        "0.5h",
    )
    assert occurrence("01:00", "02:30", day) == (
        "2026-03-29T01:00:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "1h",
    )
    # Wholly inside the skipped hour: from the change, for its usual length.
    assert occurrence("02:15", "02:45", day) == (
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:30:00+02:00",
        "0.5h",
    )
    # The day before and after: as usual.
    assert occurrence("02:00", "03:30", day - dt.timedelta(days=1))[2] == "1.5h"
    assert occurrence("02:00", "03:30", day + dt.timedelta(days=1))[:2] == (
        "2026-03-30T02:00:00+02:00",
        "2026-03-30T03:30:00+02:00",
    )


def test_dst_fall_back_a_repeated_time_starts_at_its_first_pass_and_ends_at_its_last() -> None:
    # Paris, Sunday 2026-10-25: 03:00 CEST falls back to 02:00 CET.
    day = dt.datetime(2026, 10, 25, tzinfo=PARIS)
    assert occurrence("01:00", "02:30", day) == (
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:30:00+01:00",
        "2.5h",
    )
    assert occurrence("02:10", "02:20", day) == (
        "2026-10-25T02:10:00+02:00",
        "2026-10-25T02:20:00+01:00",
        "1.16667h",
    )
    assert occurrence("23:00", "02:00", day - dt.timedelta(hours=12)) == (
        "2026-10-24T23:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "4h",
    )


def test_dst_change_day_under_the_manual_clock() -> None:
    """New York springs forward on Sunday 2026-03-08 (02:00 EST -> 03:00 EDT): a 02:00-03:00
    window has no local moment that day; a 02:30-04:00 one covers 03:00-04:00 EDT."""
    ny = ZoneInfo("America/New_York")
    gen = local_rig(dt.datetime(2026, 3, 7, tzinfo=ny), period=1800.0)
    r = next(gen)
    try:
        r.mon.expect("svc.db")  # never heard: fails every half hour from 00:30 (elapsed time)
        r.mon.start()
        r.mon.maintenance("svc.db", start="02:30", end="04:00", tz="America/New_York")
        got = to(r, at(8, 5, 10, tz=ny, month=3))
        # A deadline at the start is inside, one at the end is not (each occurrence covers
        # [start, end)).
        assert [e[3] for e in got if e[4]] == [
            "Sat 02:30",
            "Sat 03:00",
            "Sat 03:30",
            "Sun 03:00",  # 03:00 EDT is the change: 02:30 does not exist that day
            "Sun 03:30",
        ]
        assert [e[3] for e in got if "Sun 01:00" <= e[3] <= "Sun 04:30"] == [
            "Sun 01:00",
            "Sun 01:30",
            "Sun 03:00",  # the clock skipped 02:00 and 02:30
            "Sun 03:30",
            "Sun 04:00",
            "Sun 04:30",
        ]
    finally:
        gen.close()


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"tz": "Mars/Olympus"}, ValueError, r"tz must be an IANA time zone .* got 'Mars/Olympus'"),
        ({"tz": "../etc/passwd"}, ValueError, r"tz must be an IANA .* got '\.\./etc/passwd'"),
        ({"tz": "Europe"}, ValueError, r"tz must be an IANA .* got 'Europe'"),
        ({"tz": 1}, TypeError, r"tz must be an IANA time zone name .* got int 1"),
        ({"start": "25:00"}, ValueError, r"start must be a local time 'HH:MM' .* got '25:00'"),
        ({"start": "2:60"}, ValueError, r"start must be a local time .* got '2:60'"),
        ({"end": "noon"}, ValueError, r"end must be a local time .* got 'noon'"),
        ({"end": 3.5}, TypeError, r"end must be a local time .* got float 3.5"),
        ({"end": dt.time(3, tzinfo=UTC)}, ValueError, r"end must be a naive local time"),
        ({"end": "02:00"}, ValueError, r"end must differ from start .* start='02:00', end='02:00'"),
        ({"days": ("sat", "funday")}, ValueError, r"days must be weekday names .* got 'funday'"),
        ({"days": ()}, ValueError, r"days must name at least one weekday"),
        ({"days": 6}, TypeError, r"days must be weekday names .* got int 6"),
        ({"reason": 5}, TypeError, r"reason must be a str, got int 5"),
        ({"pattern": "svc..x"}, ValueError, r"pattern"),
    ],
)
def test_bad_input_names_the_field_and_the_value(
    paris: Rig, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    args: dict[str, Any] = {
        "pattern": "svc.>",
        "start": "02:00",
        "end": "03:00",
        "tz": "Europe/Paris",
        **kwargs,
    }
    with pytest.raises(error, match=message):
        paris.mon.maintenance(args.pop("pattern"), **args)
    assert paris.mon.maintenance_windows() == []
    assert paris.mon.silences() == []


def test_times_and_zones_in_other_forms() -> None:
    w = MaintenanceWindow.make(
        3, "svc.>", start=dt.time(2, 0, 30), end=" 3:05:09 ", tz=ZoneInfo("Asia/Tokyo"), days="MON"
    )
    assert (w.start, w.end, w.tz, w.days) == (
        dt.time(2, 0, 30),
        dt.time(3, 5, 9),
        "Asia/Tokyo",
        ("mon",),
    )
    ((s, e),) = w.occurrences(dt.datetime(2026, 6, 5, tzinfo=UTC))  # a Friday
    assert (s.isoformat(), e.isoformat()) == (
        "2026-06-08T02:00:30+09:00",
        "2026-06-08T03:05:09+09:00",
    )
    with pytest.raises(ValueError, match="after must be an aware datetime"):
        w.occurrences(dt.datetime(2026, 6, 5))
